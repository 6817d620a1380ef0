"""What is damaged in a store (:mod:`cvflow.store.integrity` names each damaged chunk): what one
listing shows, what ``cvflow status`` and ``cvflow verify`` report, and what ``cvflow run``
refits.
"""
from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr

from . import attributes, integrity
from ..errors import StoreError
from .group import LAZY_VARIABLES, is_store, not_a_store, open_group, read_mask, stable
from .integrity import Damage
from .location import exists, get, get_all, is_url, listing, resolve

log = logging.getLogger(__name__)


def _objects(location: str, names) -> dict[str, dict[str, int]]:
    """One listing of the store, by array: ``name -> {key within the array: size}``."""
    objects: dict[str, dict[str, int]] = {name: {} for name in names}
    for key, size in listing(location).items():
        name, _, rest = key.partition("/")
        if name in objects and rest:
            objects[name][rest] = size
    return objects


# what decides how an array's chunks are read and decoded; attributes are xarray's, and
# storage transformers are absent from cvflow's arrays
_READ_KEYS = ("node_type", "zarr_format", "shape", "data_type", "chunk_grid",
              "chunk_key_encoding", "codecs", "fill_value", "dimension_names")


def _consolidated(location: str) -> dict | None:
    """The arrays' metadata in the root zarr.json (the consolidated copy), by name; None when
    the store has none (written before cvflow consolidated it) or it does not decode."""
    raw = get(location.rstrip("/") + "/zarr.json")
    try:
        nodes = json.loads(raw or b"{}")["consolidated_metadata"]["metadata"]
        return {name: node for name, node in nodes.items()
                if isinstance(node, dict) and node.get("node_type") == "array" and "/" not in name}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _shown(key: str, value) -> str:
    if key == "codecs":                 # by name, a sharded array's inner codecs in brackets
        def names(codecs) -> str:
            out = []
            for codec in codecs or ():
                inner = ((codec.get("configuration") or {}).get("codecs")
                         if isinstance(codec, dict) else None)
                name = codec.get("name") if isinstance(codec, dict) else codec
                out.append(f"{name}[{names(inner)}]" if inner else str(name))
            return ", ".join(out)
        return f"[{names(value)}]" if isinstance(value, list) else repr(value)
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def metadata_damage(store: str | os.PathLike, nodes: dict | None = None) -> list[Damage]:
    """The arrays whose own ``zarr.json`` disagrees with their entry in the root's consolidated
    metadata (``nodes``, read if None) on how their chunks are read (shape, data type, chunk
    grid and keys, codecs, fill value, dimensions), or is missing; sorted by variable.

    DESIGN CHOICE: xarray reads a store through the consolidated copy, zarr's array API (the
    run's writes, the status reads, cvflow's checks of chunks) through each array's own: two
    copies of one truth, neither checksummed. A crc32c codec removed from ``pred/zarr.json``
    only made ``verify`` say 0 damaged while ``run`` refitted everything and wrote chunks
    without checksums; a doubled shape there crashed ``run`` with a raw ValueError. Every open
    compares them (one more read per array, concurrent on an object store) and names the
    first difference; which copy is right cannot be known, so nothing is refitted. An array
    whose own ``zarr.json`` does not decode is left to its readers
    (:class:`cvflow.store.integrity.DamagedMetadata`)."""
    location = resolve(store)
    nodes = _consolidated(location) if nodes is None else nodes
    if not nodes:
        return []
    names = sorted(nodes)
    own = get_all(location, [f"{name}/zarr.json" for name in names])
    out = []
    for name in names:
        raw = own[f"{name}/zarr.json"]
        if raw is None:
            out.append(Damage(name, (), "missing"))
            continue
        try:
            meta = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(meta, dict):
            continue
        for key in _READ_KEYS:
            if meta.get(key) != nodes[name].get(key):
                out.append(Damage(name, (), "inconsistent with the consolidated metadata in the "
                                  f"root zarr.json ({key}: {_shown(key, nodes[name].get(key))} "
                                  f"there, {_shown(key, meta.get(key))} here)"))
                break
    return out


def listed_damage(store: str | os.PathLike, *, done: np.ndarray | None = None,
                  failed: np.ndarray | None = None) -> list[Damage]:
    """The damage one listing of the store shows, without reading a chunk: every missing
    chunk of the variables written when the store was created or grown (all but ``pred`` and
    the status variables, :func:`cvflow.store.integrity.required`), every empty object but
    ``pred``'s, and with ``done`` and ``failed`` the missing or empty ``pred`` chunks of done
    fits (without them ``pred`` is left to the readers: ``cvflow run`` refits its damage).
    Sorted by variable and chunk; a variable whose metadata zarr cannot read is skipped
    (its readers name it)."""
    # DESIGN CHOICE: the layouts come from the root zarr.json's consolidated metadata (one
    # read, no array opened: opening the ~25 arrays through zarr cost ~6 ms of the ~9 a
    # listing check took on the lasso store); a store without it opens its arrays
    location = resolve(store)
    arrays: dict = {}
    nodes = _consolidated(location)
    try:
        if nodes is None:
            raise ValueError
        arrays = {name: integrity.ArrayLayout.from_json(node) for name, node in sorted(nodes.items())}
    except (ValueError, KeyError, TypeError, AttributeError):
        _, arrays, _ = _listed(location, listing=False)
        nodes = None
    return (metadata_damage(location, nodes or {})
            + _listed_damage(arrays, _objects(location, arrays), done, failed))


def _listed(location: str, *, listing: bool = True
            ) -> tuple[zarr.Group, dict, dict[str, dict[str, int]]]:
    """The store's group, its arrays (those zarr can open; the readers name the others) and
    one listing of their objects (:func:`_objects`; empty without ``listing``)."""
    group = open_group(location)
    arrays = {}
    for name in sorted(group.array_keys()):
        try:
            arrays[name] = group[name]
        except Exception:  # noqa: BLE001 - metadata zarr cannot read: no chunk to blame
            continue
    return group, arrays, _objects(location, arrays) if listing else {}


def _listed_damage(arrays: dict, objects: dict, done, failed) -> list[Damage]:
    damage: list[Damage] = []
    for name, array in arrays.items():
        if name == integrity.REFITTED and (done is None or failed is None):
            continue
        damage += integrity.missing_or_empty(name, array, objects[name],
                                          integrity.required(name, array, done, failed))
    return damage


def status_damage(store: str | os.PathLike, done: np.ndarray, failed: np.ndarray,
                  *, read: tuple[str, ...] = ()) -> list[str]:
    """What ``cvflow status`` sees damaged, cheaply: what one listing shows
    (:func:`listed_damage`, ``pred``'s chunks of done fits included), the corrupt chunks of
    the small variables (all but ``pred``, ``X`` and the status variables, each read whole:
    a run never writes them) but those in ``read`` (already read by the caller), and the root
    attributes that are not as cvflow wrote them (:func:`cvflow.store.attributes.problems`).
    The two copies of the arrays' metadata are compared by the caller first
    (:func:`metadata_damage`: with them inconsistent, which chunks exist is not known)."""
    location = resolve(store)
    group, arrays, objects = _listed(location)
    # pred opened from its own zarr.json, as its readers open it: metadata that does not
    # decode raises DamagedMetadata (the other variables' are read by report and verify)
    arrays[integrity.REFITTED] = integrity.open_array(location, integrity.REFITTED)
    damage = _listed_damage(arrays, objects, done, failed)
    seen = {(d.variable, d.chunk) for d in damage}
    skip = set(LAZY_VARIABLES) | set(integrity.STATUS_VARIABLES) | set(read)
    reads = [(name, chunk) for name in arrays if name not in skip
             for chunk, size in sorted(integrity.stored(arrays[name], objects[name]).items())
             if size and (name, chunk) not in seen]
    with ThreadPoolExecutor(4 if is_url(location) else 1) as pool:
        damage += [d for d in pool.map(lambda r: integrity.read_damage(r[0], arrays[r[0]], r[1]),
                                       reads) if d is not None]
    out = [str(d) for d in sorted(damage, key=lambda d: (d.variable, d.chunk))]
    if not out and "pred" in arrays:        # attributes are checked against intact variables
        sizes = {"param": int(done.shape[0]), "split": int(done.shape[1])}
        out += attributes.problems(group.attrs.asdict(), sizes,
                                   lambda name: arrays[name][...],
                                   integrity.object_shape(arrays["pred"])[:2])
    return out


def pred_damage(store: str | os.PathLike, done: np.ndarray | None = None,
                failed: np.ndarray | None = None, *, read: bool = True) -> list[Damage]:
    """The damaged chunks of ``pred`` that hold fits: missing or empty (one listing), and with
    ``read`` those of every block with a done fit that fail to decode (each read whole).

    ``done`` and ``failed`` are the store's masks (read if None). Sorted by chunk.
    """
    location = resolve(store)
    done = read_mask(location, "done") if done is None else done
    failed = read_mask(location, "failed") if failed is None else failed
    array = integrity.open_array(location, "pred")
    objects = integrity.array_objects(location, "pred")
    damage = integrity.missing_or_empty("pred", array, objects,
                                     integrity.required("pred", array, done, failed))
    if read:
        seen = {d.chunk for d in damage}
        any_done = integrity.required("pred", array, done, np.zeros_like(done, dtype=bool))
        chunks = [c for c, size in integrity.stored(array, objects).items()
                  if size and any_done[c] and c not in seen]
        with ThreadPoolExecutor(4) as pool:
            damage += [d for d in pool.map(lambda c: integrity.read_damage("pred", array, c),
                                           chunks) if d is not None]
    return sorted(damage, key=lambda d: d.chunk)


def score_damage(store: str | os.PathLike, done: np.ndarray | None = None) -> list[Damage]:
    """The damaged chunks of the fit-time scores (``score``, ``train_score``, ``score_time``;
    absent before store format 3) that hold done fits: missing or empty (one listing of each),
    or failing to decode (each read whole: they are small). Sorted by variable and chunk."""
    location = resolve(store)
    group = open_group(location)
    names = [n for n in integrity.SCORE_VARIABLES if n in group]
    if not names:
        return []
    done = read_mask(location, "done") if done is None else done
    damage: list[Damage] = []
    for name in names:
        array = integrity.open_array(location, name)
        objects = integrity.array_objects(location, name)
        found = integrity.missing_or_empty(name, array, objects, integrity.required(name, array, done))
        seen = {d.chunk for d in found}
        found += [d for d in (integrity.read_damage(name, array, c)
                              for c, size in sorted(integrity.stored(array, objects).items())
                              if size and c not in seen) if d is not None]
        damage += sorted(found, key=lambda d: d.chunk)
    return damage


def _block(chunk: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, int]
           ) -> tuple[slice, slice]:
    """The block (param slice, split slice) a pred chunk holds."""
    (i, j), (bp, bs) = chunk[:2], chunks
    return slice(i * bp, min((i + 1) * bp, shape[0])), slice(j * bs, min((j + 1) * bs, shape[1]))


def damaged_blocks(store: str | os.PathLike, chunks: tuple[int, int], *,
                   done: np.ndarray | None = None, failed: np.ndarray | None = None
                   ) -> list[tuple[slice, slice]]:
    """The blocks (param slice, split slice) holding a done fit whose ``pred`` chunk is missing
    or corrupt: their fits must be refitted (``chunks``: the store's block shape; ``done``,
    ``failed``: the store's masks, read if None)."""
    location = resolve(store)
    done = read_mask(location, "done") if done is None else done
    return [_block(d.chunk, chunks, done.shape) for d in pred_damage(location, done, failed)]


def intact_done(store: str | os.PathLike, chunks: tuple[int, int]) -> np.ndarray:
    """The ``done`` mask less the blocks whose ``pred`` chunk is missing or corrupt (logged,
    one line each): what a run may skip. DamagedStore if ``done`` or ``failed`` is damaged."""
    # DESIGN CHOICE: a run reads every done block's chunk (checking its checksum) before it
    # plans, so a damaged block is refitted rather than called complete; it costs one read of
    # the stored predictions (README, "Integrity").
    location = resolve(store)
    done = read_mask(location, "done")
    found: list[tuple[Damage, tuple[int, ...]]] = [
        (d, chunks) for d in pred_damage(location, done, read_mask(location, "failed"))]
    # a damaged chunk of the scores: the fits it holds are refitted (and scored) again
    found += [(d, integrity.object_shape(integrity.open_array(location, d.variable))[:2])
              for d in score_damage(location, done)]
    for damage, shape in found:
        ps, ss = _block(damage.chunk, shape, done.shape)
        log.warning("store %s: %s; refitting its fits (params %d-%d x splits %d-%d)", location,
                    damage, ps.start, ps.stop - 1, ss.start, ss.stop - 1)
        done[ps, ss] = False
    return done


def verify(store: str | os.PathLike) -> integrity.Report:
    """Read every chunk of every variable of a store; what is damaged (missing or corrupt).

    Returns a :class:`cvflow.store.integrity.Report` (``report.ok``, ``report.damaged``: a list of
    :class:`cvflow.store.integrity.Damage`, each ``variable``, ``chunk``, ``problem``). Raises
    StoreError if ``store`` is not a cvflow store. ``cvflow verify STORE`` prints it.
    """
    location = resolve(store)
    if not exists(location):
        raise StoreError(f"store: {location} does not exist")
    # one state of the store, before or after a grow by another run (group.stable)
    return stable(location, lambda: _verify(location))


def _verify(location: str) -> integrity.Report:
    if not is_store(location):
        raise not_a_store(location)
    group = open_group(location)
    attributes.check_newer(location, group.attrs)
    arrays = {name: group[name] for name in sorted(group.array_keys())}
    objects = _objects(location, arrays)
    damage: list[Damage] = []

    def mask(name: str) -> np.ndarray | None:
        found = [d for d in damage if d.variable == name]
        return None if found else integrity.read(location, name, array=arrays[name])

    # DESIGN CHOICE: `arrays` come from the consolidated metadata, but readers open each
    # variable from its own zarr.json (no checksum): a damaged one is listed, not skipped
    # (test_integrity.py::test_verify_lists_a_corrupt_variable_metadata_object).
    damage += metadata_damage(location)
    for name in arrays:
        if any(d.variable == name for d in damage):
            continue
        try:
            integrity.open_array(location, name)
        except integrity.DamagedMetadata as exc:
            damage.append(exc.damage)
    reads = []
    for name, array in arrays.items():
        present = integrity.stored(array, objects[name])
        reads += [(name, chunk) for chunk, size in sorted(present.items()) if size]
        damage += [d for d in integrity.missing_or_empty(name, array, objects[name],
                                                      integrity.required(name, array))]
    with ThreadPoolExecutor(4) as pool:
        damage += [d for d in pool.map(lambda r: integrity.read_damage(r[0], arrays[r[0]], r[1]),
                                       reads) if d is not None]
    done, failed = mask("done"), mask("failed")
    if done is not None and failed is not None:       # pred's missing chunks need both
        # listed again after the masks: a block a run wrote while the chunks were read (its
        # pred chunk, then done) is done now but was not listed then; it is not missing
        objects.update(_objects(location, [n for n in integrity.FITTED if n in arrays]))
        for name in (n for n in integrity.FITTED if n in arrays):     # the scores' need done
            must = integrity.required(name, arrays[name], done, failed)
            damage += [d for d in integrity.missing_or_empty(name, arrays[name], objects[name], must)
                       if d.problem == "missing"]
    problems: list[str] = []
    if done is not None and not damage:        # attributes are checked against intact data
        problems = attributes.problems(
            group.attrs.asdict(), {"param": int(done.shape[0]), "split": int(done.shape[1])},
            lambda name: arrays[name][...], integrity.object_shape(arrays["pred"])[:2])
    return integrity.Report(location, sorted(damage, key=lambda d: (d.variable, d.chunk)),
                            variables=len(arrays), chunks=len(reads),
                            checksums=all(integrity.checksummed(a) for a in arrays.values()),
                            attributes=problems)
