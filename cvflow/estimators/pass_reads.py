"""The one pass's reads of a store's ``pred`` (:mod:`cvflow.estimators.one_pass`): a block of
params x splits by the store's location, on whichever process runs the task."""
from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=8)
def _pred_array(location: str, opened: str):
    """The store's ``pred`` opened once per process and per opening of the cube (``opened``:
    the cube's own name for it, new at each ``cvflow.open``, so a store grown since is
    reopened)."""
    from ..store.integrity import open_array

    return open_array(location, "pred")


def read_store_block(location: str, params: slice, splits, opened: str = "") -> np.ndarray:
    """``pred[params, splits]`` read from the store at ``location`` (a damaged chunk is named);
    ``splits`` a slice or a list, read as one slice per run of consecutive splits (zarr's
    integer-array selection took 7x a slice's CPU a byte: 352 MB in 6.3 s, 1.75 GB in 4.4 s)."""
    if isinstance(splits, slice):
        return _read(location, params, splits, opened)
    runs = np.split(np.asarray(splits), np.flatnonzero(np.diff(splits) != 1) + 1)
    return np.concatenate([_read(location, params, slice(r[0], r[-1] + 1), opened)
                           for r in runs], axis=1)


def _read(location: str, params: slice, splits: slice, opened: str) -> np.ndarray:
    """``pred[params, splits]``, one stored chunk of params at a time into the block: zarr's
    buffers for one read are about 3x its bytes (a whole block's at once: 0.08 GiB more at
    the peak of the 10^6-fit report with pairs)."""
    from ..store.integrity import read

    array = _pred_array(location, opened)
    step, p0, p1 = array.chunks[0], params.start, params.stop
    if p1 - p0 <= step and p0 // step == (p1 - 1) // step:
        # within one stored chunk of params: zarr's own array is the block (no copy of it)
        return read(location, "pred", (params, splits), array=array)
    out = np.empty((p1 - p0, len(range(*splits.indices(array.shape[1])))) + array.shape[2:],
                   dtype=array.dtype)
    for q in range(p0, p1, step):
        out[q - p0:q - p0 + step] = read(location, "pred", (slice(q, min(q + step, p1)), splits),
                                         array=array)
    return out
