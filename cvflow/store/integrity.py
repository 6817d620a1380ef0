"""A store's chunks: which are damaged (missing or corrupt), and reads that name them.

Every array cvflow creates carries zarr's ``crc32c`` codec (:data:`COMPRESSORS`): a flipped
bit, a cut or an emptied chunk fails zarr's checksum when it is read, and the readers here turn
that failure into :class:`DamagedStore`, one line naming the variable and the chunk (its
position in the array's grid of stored objects: shards when the array is sharded, as ``pred``
is, else chunks). Stores written before checksums open and read as before; in them only what
zarr cannot decode at all is caught.

A chunk that does not exist reads as the fill value, which is a valid state for most of the
store: so a missing chunk is damage only where one must exist (:func:`required`):

- ``pred``: the chunk of every block holding a fit that is done and did not fail (its
  predictions were written before ``done`` was);
- the status variables (``done``, ``failed``, ``error``, ``fit_seconds``): never (their fill
  values are "not done", "did not fail", "no message", "no time"; a lost ``done`` chunk makes
  the next run refit its fits);
- the fit-time scores (``score``, ``train_score``, ``score_time``): the chunk of every region
  holding a done fit (the client writes them whole, with the status, before ``done``); a
  damaged one is refitted, as a damaged ``pred`` chunk;
- everything else (``fold``, ``train``, ``y``, ``X``, the role tables, the coordinates): every
  chunk, in a checksummed store (cvflow writes them whole, fill values included, when it
  creates or grows a store).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from .. import terminal
from ..errors import OVERWRITE, RESTORE, StoreError
from .location import listing, storage_options
from .schema import (CLIENT_VARIABLES, FITTED, REFITTED, SCORE_VARIABLES,  # noqa: F401
                     STATUS_VARIABLES)

# DESIGN CHOICE: zarr's default compressor (zstd, level 0) followed by crc32c over the
# compressed bytes: a chunk is checked before it is decompressed, so any change to its object
# (a flipped bit, a truncation) is a checksum mismatch, never a zstd error or a wrong number.
# A sharded array (pred) checks each inner chunk, and zarr checksums the shard index itself.
COMPRESSORS = (ZstdCodec(level=0, checksum=False), Crc32cCodec())
# Written whole, fill values included, so that every chunk exists (see `required`).
WHOLE = {"write_empty_chunks": True}


@dataclass(frozen=True)
class Damage:
    """A damaged chunk: ``variable``, ``chunk`` (its index in the grid of stored objects) and
    ``problem``: "missing", "corrupt (checksum mismatch)", "corrupt (an empty object)" or
    "corrupt (cannot be decoded: ...)"."""

    variable: str
    chunk: tuple[int, ...]
    problem: str

    def __str__(self) -> str:
        if self.chunk == ():                 # the variable's own metadata object
            return f"{self.variable}/zarr.json is {self.problem}"
        return f"{self.variable} chunk {self.chunk} is {self.problem}"


def damage_message(location: str, damage: Damage) -> str:
    """The one-line error for a damaged chunk, with what to do about it."""
    if damage.variable in FITTED and damage.chunk != ():
        return (f"store: {location}: {damage}; run `cvflow run` to refit it, or "
                f"`cvflow verify {location}` to list every damaged chunk")
    return (f"store: {location}: {damage}; the store is damaged ({damage.variable} cannot be "
            f"refitted): {RESTORE} (`cvflow verify {location}` lists every damaged chunk)")


class DamagedStore(StoreError):
    """A chunk the reader needed is missing or corrupt (:attr:`damage` says which)."""

    def __init__(self, location: str, damage: Damage):
        super().__init__(damage_message(location, damage))
        self.location, self.damage = location, damage

    def __reduce__(self):
        return type(self), (self.location, self.damage)


def problem(exc: BaseException) -> str | None:
    """What a failed read says about the chunk read; None when the failure is not the chunk's
    (the disk or the network, permissions, memory, an interrupt): that one is raised as is."""
    if not isinstance(exc, Exception) or isinstance(exc, (OSError, MemoryError, StoreError)):
        return None
    text = str(exc)
    if "checksum" in text.lower():                # zarr's Crc32cCodec: "...checksum do not match"
        return "corrupt (checksum mismatch)"
    first = (text.splitlines() or [""])[0][:160]
    return f"corrupt (cannot be decoded: {type(exc).__name__}: {first})"


def open_array(location: str, name: str, mode: str = "r"):
    """Variable ``name`` of the store as a zarr array, from its own ``zarr.json``; metadata that
    does not decode (it carries no checksum) raises StoreError naming that object."""
    try:
        return zarr.open_array(location, path=name, mode=mode,
                               storage_options=storage_options(location))
    except Exception as exc:
        what = problem(exc)
        if what is None:
            raise
        raise DamagedMetadata(location, Damage(name, (), what)) from None


class DamagedMetadata(StoreError):
    """A variable's ``zarr.json`` does not decode (:attr:`damage`, its ``chunk`` is ``()``);
    never refitted."""

    def __init__(self, location: str, damage: Damage):
        super().__init__(f"store: {location}: {damage}; the store is damaged: {RESTORE}")
        self.location, self.damage = location, damage

    def __reduce__(self):
        return type(self), (self.location, self.damage)


def checksummed(array) -> bool:
    """The array's chunks carry a crc32c checksum (a store written since cvflow had them)."""
    if isinstance(array, ArrayLayout):
        return array.checksummed
    return any(isinstance(codec, Crc32cCodec) for codec in array.compressors)


@dataclass(frozen=True)
class ArrayLayout:
    """What a listing of an array is checked against: its ``shape``, the shape of one stored
    object (``objects``: a shard when sharded, else a chunk), its ``chunk_key_encoding`` and
    whether its chunks carry a checksum. Every function here taking an ``array`` for its
    layout (:func:`grid`, :func:`stored`, :func:`required`, :func:`missing_or_empty`) takes a
    zarr array or a ArrayLayout."""

    shape: tuple[int, ...]
    objects: tuple[int, ...]
    key_encoding: dict
    checksummed: bool

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @classmethod
    def from_json(cls, metadata: dict) -> ArrayLayout:
        """From an array's Zarr v3 metadata as JSON (its ``zarr.json``, or its entry in the
        consolidated metadata): no array is opened.

        The chunk grid's shape is the stored object's (a shard when sharded); the checksum is
        a ``crc32c`` among the codecs of the chunks (a shard's index is checksummed apart)."""
        def names(codecs) -> list[str]:
            out = []
            for codec in codecs or ():
                out.append(codec.get("name"))
                out += names((codec.get("configuration") or {}).get("codecs"))
            return out

        return cls(tuple(metadata["shape"]),
                   tuple(metadata["chunk_grid"]["configuration"]["chunk_shape"]),
                   metadata["chunk_key_encoding"], "crc32c" in names(metadata.get("codecs")))


def layout(array) -> ArrayLayout:
    """The :class:`ArrayLayout` of a zarr array (or the ArrayLayout given)."""
    if isinstance(array, ArrayLayout):
        return array
    return ArrayLayout(tuple(array.shape), tuple(array.shards or array.chunks),
                  array.metadata.to_dict()["chunk_key_encoding"], checksummed(array))


def object_shape(array) -> tuple[int, ...]:
    """The shape of one stored object: a shard when the array is sharded, else a chunk."""
    if isinstance(array, ArrayLayout):
        return array.objects
    return tuple(array.shards or array.chunks)


def grid(array) -> tuple[int, ...]:
    """The number of stored objects along each dimension."""
    return tuple(math.ceil(n / c) for n, c in zip(array.shape, object_shape(array)))


def region(array, chunk: tuple[int, ...]) -> tuple[slice, ...]:
    """The part of the array one stored object holds."""
    return tuple(slice(i * c, min((i + 1) * c, n))
                 for i, c, n in zip(chunk, object_shape(array), array.shape))


def stored(array, objects: dict[str, int]) -> dict[tuple[int, ...], int]:
    """The array's stored objects (chunk -> size in bytes), from ``objects``, the listing of the
    array's directory (:func:`cvflow.store.location.listing`). The chunk keys are decoded as the
    array's ``chunk_key_encoding`` (Zarr v3 spec: "default", "c/0/1", or "v2", "0.1") says."""
    encoding = layout(array).key_encoding
    default = encoding["name"] == "default"
    sep = (encoding.get("configuration") or {}).get("separator", "/" if default else ".")
    out = {}
    for key, size in objects.items():
        if default:
            if key != "c" and not key.startswith("c" + sep):
                continue
            parts = key.split(sep)[1:]
        else:
            parts = [] if key == "0" and array.ndim == 0 else key.split(sep)
        if len(parts) == array.ndim and all(p.isdigit() for p in parts):
            out[tuple(int(p) for p in parts)] = size
    return out


def required(name: str, array, done: np.ndarray | None = None,
             failed: np.ndarray | None = None) -> np.ndarray:
    """Which stored objects of variable ``name`` must exist (bool, the shape of its grid).

    ``pred``'s need ``done`` and ``failed`` (param, split), the scores' ``done``: without
    them none is required.
    """
    shape = grid(array)
    if name in FITTED:
        if done is None or (failed is None and name == REFITTED):
            return np.zeros(shape, bool)
        fitted = np.asarray(done, bool)
        if name == REFITTED:
            fitted = fitted & ~np.asarray(failed, bool)
        bp, bs = object_shape(array)[:2]
        padded = np.zeros((shape[0] * bp, shape[1] * bs), bool)
        padded[:fitted.shape[0], :fitted.shape[1]] = fitted
        blocks = padded.reshape(shape[0], bp, shape[1], bs).any(axis=(1, 3))
        return np.broadcast_to(blocks.reshape(blocks.shape + (1,) * (len(shape) - 2)),
                               shape).copy()
    if name in STATUS_VARIABLES:
        return np.zeros(shape, bool)
    return np.full(shape, checksummed(array))


def missing_or_empty(name: str, array, objects: dict[str, int], must: np.ndarray) -> list[Damage]:
    """Damage a listing shows: required objects that do not exist, and empty ones (zarr never
    writes an empty object; a sharded array's empty shard would read as fill values)."""
    present = stored(array, objects)
    out = [Damage(name, tuple(int(i) for i in chunk), "missing")
           for chunk in zip(*np.nonzero(must)) if tuple(int(i) for i in chunk) not in present]
    out += [Damage(name, chunk, "corrupt (an empty object)")
            for chunk, size in sorted(present.items()) if size == 0]
    return sorted(out, key=lambda d: d.chunk)


def read_damage(name: str, array, chunk: tuple[int, ...]) -> Damage | None:
    """Read one stored object whole; the damage it shows, or None."""
    try:
        array[region(array, chunk)]
    except Exception as exc:  # noqa: BLE001 - classified by `problem`; not ours raises again
        what = problem(exc)
        if what is None:
            raise
        return Damage(name, chunk, what)
    return None


def array_objects(location: str, name: str) -> dict[str, int]:
    """The listing of one array's directory."""
    return listing(location.rstrip("/") + "/" + name)


def first_damage(location: str, name: str, array, chunks: Iterable[tuple[int, ...]] | None = None
                 ) -> Damage | None:
    """The first damaged object of ``chunks`` (default: every stored one) of an array."""
    objects = array_objects(location, name)
    present = stored(array, objects)
    for chunk in sorted(present) if chunks is None else chunks:
        if chunk in present:
            damage = (Damage(name, chunk, "corrupt (an empty object)") if present[chunk] == 0
                      else read_damage(name, array, chunk))
            if damage is not None:
                return damage
    return None


def read(location: str, name: str, selection=Ellipsis, *, array=None, done=None, failed=None):
    """``array[selection]`` of variable ``name``; a damaged chunk raises DamagedStore.

    A required object that is missing or empty (:func:`required`, with ``done`` and ``failed``
    for ``pred``) is found from a listing of the array first when ``done`` is given; a read
    that fails to decode is then narrowed to the first damaged object it covers.
    """
    array = open_array(location, name) if array is None else array
    if done is not None:
        damage = missing_or_empty(name, array, array_objects(location, name),
                                  required(name, array, done, failed))
        if damage:
            raise DamagedStore(location, damage[0])
    try:
        return array[selection]
    except Exception as exc:
        if problem(exc) is None:
            raise
        damage = first_damage(location, name, array)
        if damage is None:
            raise
        raise DamagedStore(location, damage) from None


class Checked:
    """An array-like over one variable for ``dask.array.from_array``, chunked as the store's
    objects or finer: each chunk is read through xarray's lazy ``variable`` (its decoding
    applies), and one that must exist but does not (:func:`required`; the array is listed
    once, at the first read), is empty, or fails to decode raises :class:`DamagedStore`.

    ``objects``: the shape of one stored object; ``done``, ``failed``: pred's fits (else None).
    """

    def __init__(self, variable, name: str, location: str, objects: tuple[int, ...],
                 done: np.ndarray | None = None, failed: np.ndarray | None = None):
        self.variable, self.name, self.location = variable, name, location
        self.objects, self.done, self.failed = objects, done, failed
        self.shape, self.dtype, self.ndim = variable.shape, variable.dtype, variable.ndim
        self.listed: tuple[dict, np.ndarray] | None = None

    def _listing(self) -> tuple[dict, np.ndarray]:
        if self.listed is None:          # two threads may both list: the same answer
            array = open_array(self.location, self.name)
            self.listed = (stored(array, array_objects(self.location, self.name)),
                           required(self.name, array, self.done, self.failed))
        return self.listed

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        chunk = tuple(((k.start or 0) if isinstance(k, slice) else int(k)) // c
                      for k, c in zip(key, self.objects))
        present, must = self._listing()
        size = present.get(chunk)
        if size == 0 or (size is None and must[chunk]):
            raise DamagedStore(self.location, Damage(
                self.name, chunk, "missing" if size is None else "corrupt (an empty object)"))
        try:
            return np.asarray(self.variable[key].values)
        except Exception as exc:
            what = problem(exc)
            if what is None:
                raise
            raise DamagedStore(self.location, Damage(self.name, chunk, what)) from None


@dataclass
class Report:
    """What :func:`cvflow.store.damage.verify` found: ``damaged`` (every damaged chunk), the counts
    of ``variables`` and ``chunks`` read, and ``checksums`` (whether the store's arrays carry
    them; without, a flipped bit that still decodes goes unseen) and ``attributes``: the
    root attributes not as cvflow writes them (:func:`cvflow.store.attributes.problems`)."""

    store: str
    damaged: list[Damage]
    variables: int
    chunks: int
    checksums: bool
    attributes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.attributes

    def to_json(self) -> dict:
        return {"store": self.store, "ok": self.ok, "variables": self.variables,
                "chunks": self.chunks, "checksums": self.checksums,
                "damaged": [{"variable": d.variable, "chunk": list(d.chunk), "problem": d.problem}
                            for d in self.damaged],
                "attributes": list(self.attributes)}

    def text(self) -> str:
        """The report for a terminal (:func:`cvflow.terminal.lines`: a variable name the store
        holds cannot control the terminal)."""
        lines = [f"{self.store}: {d}" for d in self.damaged]
        lines += [f"{self.store}: {problem}" for problem in self.attributes]
        refit = [d for d in self.damaged if d.variable in FITTED and d.chunk != ()]
        lines.append(f"{self.store}: {self.chunks} chunks of {self.variables} variables read, "
                     f"{len(self.damaged)} damaged"
                     + (f", {len(self.attributes)} attribute(s) damaged" if self.attributes else "")
                     + ("" if self.checksums else
                        " (this store has no checksums: a changed chunk that still decodes "
                        "is not seen)"))
        if refit:
            lines.append(f"  `cvflow run` refits the {len(refit)} damaged pred or score chunk(s)")
        if len(refit) < len(self.damaged) or self.attributes:
            lines.append("  the other damage cannot be refitted: restore the store from a copy, "
                         f"or rerun with {OVERWRITE}")
        return terminal.lines(lines)
