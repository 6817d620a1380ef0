"""Writing into a created store: a block's predictions (the engine's tasks, chunk-aligned),
the status variables (the run's client), root attributes.
"""
from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np
import zarr

from . import integrity
from .group import open_group, quiet_consolidation
from .integrity import WHOLE
from .location import resolve, storage_options


class BlockResult(Protocol):
    """What the store writes of a fitted block (:class:`cvflow.fitting.block.BlockResult`)."""

    params: slice
    splits: slice
    pred: np.ndarray | None      # (params, splits, sample[, class]); None once written
    failed: np.ndarray           # (params, splits) bool
    error: np.ndarray            # (params, splits) str
    fit_seconds: np.ndarray      # (params, splits)
    fitted: np.ndarray | None    # (params, splits) bool, or None: every cell


def _check_aligned(shape, chunks, params: slice, splits: slice) -> None:
    for sl, size, chunk, dim in ((params, shape[0], chunks[0], "param"),
                                 (splits, shape[1], chunks[1], "split")):
        if sl.start % chunk or (sl.stop != size and sl.stop % chunk):
            raise ValueError(
                f"block {dim} region {sl.start}:{sl.stop} is not aligned with chunks of {chunk}; "
                "two writers could share a chunk"
            )


def open_pred(store: str | os.PathLike):
    """The store's ``pred`` as :func:`write_pred` writes it (every chunk written, fill values
    included)."""
    location = resolve(store)
    return zarr.open_array(location, path="pred", mode="r+",
                           storage_options=storage_options(location)).with_config(WHOLE)


def write_pred(store: str | os.PathLike, result: BlockResult, *, pred=None) -> None:
    """Write one block's predictions (the task side). Idempotent; chunk-aligned or ValueError.
    ``pred``: the store's array from :func:`open_pred`, opened by this run (else opened here)."""
    # COST: a lasso block (100 params x 2000 samples, 1.6 MB, one chunk since blocks up to
    # 4 MiB are not sharded: creation.SHARD_INNER_BYTES) takes 4.5-5.9 ms alone here, as a
    # shard of two inner chunks 6.2-7.9 ms; with crc32c and no zstd 2.7-2.8 ms (random values,
    # medians of 40, one thread; zstd halves a lasso block's bytes). Opening the array ~0.8 ms.
    # written even when every value is NaN (every fit failed): a done block has its chunk
    if pred is None:
        pred = open_pred(store)
    region = (result.params, result.splits)
    _check_aligned(pred.shape[:2], (pred.shards or pred.chunks)[:2], *region)   # one writer a shard
    pred[region] = result.pred.astype(pred.dtype, copy=False)


STATUS_VARIABLES = ("failed", "error", "fit_seconds", "done")     # the order they are written
SCORE_VARIABLES = integrity.SCORE_VARIABLES     # written with the status, before done
_FILLS = {"failed": False, "error": "", "fit_seconds": np.nan, "done": False, "score": np.nan,
          "train_score": np.nan, "score_time": np.nan}


def _messages(error, p0: int, s0: int) -> dict[tuple[int, int], str]:
    """The cells of an ``error`` region (its corner at param ``p0``, split ``s0``) that hold a
    message: {(param, split): message}."""
    error = np.asarray(error, dtype=object)
    has = (error != "") & (error != None)  # noqa: E711 - elementwise, on an object array
    return {(p0 + int(i), s0 + int(j)): str(error[i, j]) for i, j in zip(*np.nonzero(has))}


class StatusWriter:
    """The client's copy of a store's status variables (failed, error, fit_seconds, done) and
    fit-time scores (score, train_score, score_time: when the store has them); a :meth:`write`
    rewrites the chunks whose cells it changed, and only those: ``done`` last, the others
    concurrently.

    The copy is read from the store at the first write, or starts at the fill values for a
    store created by this run (``fresh``), so a run reads the status at most once. ``error``
    is kept sparse (the messages of the cells that have one, by chunk): a (param, split) array
    of strings is what would grow with the study. Only one process (the run's client) may
    write a store's status at a time.
    """

    def __init__(self, store: str | os.PathLike, *, fresh: bool = False):
        self.location = resolve(store)
        self.fresh = fresh
        self.arrays: dict | None = None
        self.values: dict[str, np.ndarray] = {}      # every variable but error, dense
        # error's messages: its chunk -> {(param, split): message}, the cells without one left out
        self.errors: dict[tuple[int, ...], dict[tuple[int, int], str]] = {}
        # the chunks of each variable whose copy differs from the store's
        self.unwritten: dict[str, set[tuple[int, ...]]] = {}

    def write(self, results) -> None:
        """Record finished blocks: :class:`cvflow.fitting.block.BlockResult` (``pred`` may be None)
        whose predictions are already written."""
        results = list(results)
        if not results:
            return
        if self.arrays is None:
            self._open()
        arrays = self.arrays
        assert arrays is not None
        for r in results:
            region = (r.params, r.splits)
            for name, values in self.values.items():
                if name in SCORE_VARIABLES and getattr(r, name, None) is None:
                    continue                    # a block fitted without scorers: none to write
                new = (getattr(r, name) if name != "done"
                       else np.broadcast_to(True, values[region].shape) if r.fitted is None
                       else values[region] | r.fitted)
                if not np.array_equal(values[region], new, equal_nan=values.dtype.kind == "f"):
                    values[region] = new
                    self._touch(name, region)
                    if name == "done":          # done vouches for the scores' chunks (all NaN or not)
                        for score in SCORE_VARIABLES:
                            if score in arrays:
                                self._touch(score, region)
            if self._record_errors(r):
                self._touch("error", region)

        def put(item: tuple[str, tuple[int, ...]]) -> None:
            name, chunk = item
            array = arrays[name]
            where = integrity.region(array, chunk)
            array[where] = (self._error_chunk(chunk, where) if name == "error"
                            else self.values[name][where])

        def put_all(names) -> None:
            items = [(name, chunk) for name in names for chunk in sorted(self.unwritten.get(name, ()))]
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(put, items))
            for name in names:
                self.unwritten.pop(name, None)

        # DESIGN CHOICE: one zarr write per chunk that changed (failed and error rarely do: a
        # batch of good fits writes the chunks of its blocks in two arrays, not four); the ones
        # `done` vouches for go together, before it
        put_all([n for n in arrays if n != "done" and self.unwritten.get(n)])
        if self.unwritten.get("done"):
            put_all(["done"])

    def _open(self) -> None:
        group = open_group(self.location, "r+")
        names = STATUS_VARIABLES[:-1] + tuple(n for n in SCORE_VARIABLES if n in group)
        # the scores are written whole chunks, fill values included, so a done fit's chunk exists
        self.arrays = {name: group[name] if name in STATUS_VARIABLES
                       else group[name].with_config(WHOLE) for name in names + ("done",)}
        self.values = {name: (np.full(array.shape, _FILLS[name], dtype=type(_FILLS[name]))
                              if self.fresh else self._read(name, array))
                       for name, array in self.arrays.items() if name != "error"}
        if not self.fresh:
            self.errors = self._read_errors(self.arrays["error"])

    def _touch(self, name: str, region: tuple[slice, slice]) -> None:
        """Mark the chunks of variable ``name`` that hold cells of ``region`` unwritten."""
        array = self.arrays[name]           # type: ignore[index]
        shape = integrity.object_shape(array)
        spans = [range(sl.start // c, -(-sl.stop // c)) for sl, c in zip(region, shape)]
        spans += [range(g) for g in integrity.grid(array)[2:]]       # the scores' scorer axis
        self.unwritten.setdefault(name, set()).update(itertools.product(*spans))

    def _record_errors(self, r) -> bool:
        """Put block ``r``'s messages in the sparse copy; whether any cell's message changed."""
        new = _messages(r.error, r.params.start, r.splits.start)
        shape = integrity.object_shape(self.arrays["error"])       # type: ignore[index]
        chunks = [(ci, cj) for ci in range(r.params.start // shape[0], -(-r.params.stop // shape[0]))
                  for cj in range(r.splits.start // shape[1], -(-r.splits.stop // shape[1]))]
        old = {key: message for chunk in chunks for key, message in self.errors.get(chunk, {}).items()
               if r.params.start <= key[0] < r.params.stop and r.splits.start <= key[1] < r.splits.stop}
        if new == old:
            return False
        for key in old:
            self.errors[(key[0] // shape[0], key[1] // shape[1])].pop(key)
        for key, message in new.items():
            self.errors.setdefault((key[0] // shape[0], key[1] // shape[1]), {})[key] = message
        return True

    def _error_chunk(self, chunk: tuple[int, ...], where: tuple[slice, ...]) -> np.ndarray:
        """One chunk of ``error`` from the sparse copy."""
        out = np.full(tuple(sl.stop - sl.start for sl in where), "", dtype=object)
        for (h, s), message in self.errors.get(chunk, {}).items():
            out[h - where[0].start, s - where[1].start] = message
        return out

    def _read_errors(self, array) -> dict:
        """The stored messages, chunk by chunk (the chunks that exist)."""
        out: dict = {}
        present = integrity.stored(array, integrity.array_objects(self.location, "error"))
        for chunk in sorted(present):
            where = integrity.region(array, chunk)
            messages = _messages(integrity.read(self.location, "error", where, array=array),
                                 where[0].start, where[1].start)
            if messages:
                out[chunk] = messages
        return out

    def _read(self, name: str, array) -> np.ndarray:
        """The stored values; a score chunk that is damaged reads as fill values (the run
        refits its fits: cvflow.store.damage.intact_done)."""
        try:
            return integrity.read(self.location, name, array=array)
        except integrity.DamagedStore:
            if name not in SCORE_VARIABLES:
                raise
        values = np.full(array.shape, _FILLS[name])
        for chunk in np.ndindex(*integrity.grid(array)):
            region = integrity.region(array, chunk)
            try:
                values[region] = array[region]
            except Exception as exc:  # noqa: BLE001 - the damage is the chunk's (problem())
                if integrity.problem(exc) is None:
                    raise
        return values


def write_status(store: str | os.PathLike, results) -> None:
    """Record finished blocks (the client side): failed, error, fit_seconds, then ``done``.

    ``results`` are :class:`cvflow.fitting.block.BlockResult` (``pred`` may be None) whose
    predictions are already written; one read and one write per variable for the batch
    (:class:`StatusWriter` keeps the values between batches of a run).
    """
    StatusWriter(store).write(results)


def write_block(store: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions and status; ``done`` last, so done implies written.

    Idempotent: rewriting a block writes the same bytes. For a single writer (in-process use);
    the engine's tasks call :func:`write_pred` and the client :func:`write_status`.
    """
    write_pred(store, result)
    write_status(store, [result])


def write_attrs(store: str | os.PathLike, attrs: dict) -> None:
    """Set root attributes of a store (JSON values) and rewrite its consolidated metadata."""
    location = resolve(store)
    group = open_group(location, "r+")
    group.attrs.update(attrs)
    with quiet_consolidation():
        zarr.consolidate_metadata(group.store)
