"""Writing into a created store: a block's predictions (the engine's tasks, chunk-aligned),
the status variables (the run's client), root attributes.
"""
from __future__ import annotations

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


def write_pred(store: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions (the task side). Idempotent; chunk-aligned or ValueError."""
    # COST: a lasso block (100 params x 2000 samples, 1.6 MB, one chunk since blocks up to
    # 4 MiB are not sharded: creation.SHARD_INNER_BYTES) takes 4.5-5.9 ms alone here, as a
    # shard of two inner chunks 6.2-7.9 ms; with crc32c and no zstd 2.7-2.8 ms (random values,
    # medians of 40, one thread; zstd halves a lasso block's bytes). Opening the array ~0.8 ms.
    location = resolve(store)
    # written even when every value is NaN (every fit failed): a done block has its chunk
    pred = zarr.open_array(location, path="pred", mode="r+",
                           storage_options=storage_options(location)).with_config(WHOLE)
    region = (result.params, result.splits)
    _check_aligned(pred.shape[:2], (pred.shards or pred.chunks)[:2], *region)   # one writer a shard
    pred[region] = result.pred.astype(pred.dtype, copy=False)


STATUS_VARIABLES = ("failed", "error", "fit_seconds", "done")     # the order they are written
SCORE_VARIABLES = integrity.SCORE_VARIABLES     # written with the status, before done
_FILLS = {"failed": False, "error": "", "fit_seconds": np.nan, "done": False, "score": np.nan,
          "train_score": np.nan, "score_time": np.nan}


class StatusWriter:
    """The client's copy of a store's status variables (failed, error, fit_seconds, done) and
    fit-time scores (score, train_score, score_time: when the store has them), each written
    whole at a :meth:`write` that changed it: ``done`` last, the others concurrently.

    The copy is read from the store at the first write, or starts at the fill values for a
    store created by this run (``fresh``), so a run reads the status at most once. Only one
    process (the run's client) may write a store's status at a time.
    """

    def __init__(self, store: str | os.PathLike, *, fresh: bool = False):
        self.location = resolve(store)
        self.fresh = fresh
        self.arrays: dict | None = None
        self.values: dict[str, np.ndarray] = {}
        self.unwritten: set[str] = set()      # variables whose copy differs from the store's
        self.written: set[str] = set()        # variables written by this writer

    def write(self, results) -> None:
        """Record finished blocks: :class:`cvflow.fitting.block.BlockResult` (``pred`` may be None)
        whose predictions are already written."""
        results = list(results)
        if not results:
            return
        if self.arrays is None:
            group = open_group(self.location, "r+")
            names = STATUS_VARIABLES[:-1] + tuple(n for n in SCORE_VARIABLES if n in group)
            # the scores are written whole, fill values included, so a done fit's chunk exists
            self.arrays = {name: group[name] if name in STATUS_VARIABLES
                           else group[name].with_config(WHOLE) for name in names + ("done",)}
            self.values = {name: (np.full(array.shape, _FILLS[name],
                                          dtype=object if name == "error" else type(_FILLS[name]))
                                  if self.fresh else self._read(name, array))
                           for name, array in self.arrays.items()}
        for name, values in self.values.items():
            for r in results:
                if name in SCORE_VARIABLES and getattr(r, name, None) is None:
                    continue                    # a block fitted without scorers: none to write
                new = (getattr(r, name) if name != "done" else True if r.fitted is None
                       else values[r.params, r.splits] | r.fitted)
                if not np.array_equal(values[r.params, r.splits], new,
                                      equal_nan=values.dtype.kind == "f"):
                    values[r.params, r.splits] = new
                    self.unwritten.add(name)
        arrays = self.arrays
        if "done" in self.unwritten:     # done vouches for the scores' chunks (all NaN or not)
            self.unwritten |= {n for n in SCORE_VARIABLES if n in arrays} - self.written

        def put(name: str) -> None:
            arrays[name][...] = self.values[name]
            self.unwritten.discard(name)
            self.written.add(name)

        # DESIGN CHOICE: one zarr round trip per variable that changed (failed and error
        # rarely do: a batch of good fits writes two arrays, not four); the ones `done`
        # vouches for go together, before it
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(put, [n for n in arrays if n != "done" and n in self.unwritten]))
        if "done" in self.unwritten:
            put("done")

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
