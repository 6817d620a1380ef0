"""The floor of a K-fold report: the least a reader of the cube does, with zarr and numpy alone.

Open the store's ``pred`` (param, split, sample) with zarr, read each shard (or chunk, for a
store without shards) once, in one thread, and add up each param's squared errors on the test
rows of its fold splits: split ``fold_split[r, j]`` trained on D minus fold j of repeat r, so
its test rows are the samples with ``fold[r] == j`` (held-out test samples have fold -1 and are
never summed). The K-fold estimate of a param is that sum over every repeat's analysis samples,
divided by R x n; the selected param is the first minimum (docs/guide/estimators.md, DESIGN 6.1).

As a whole process (imports included), as ``reduce_floor.py`` times it::

    python benchmarks/floor_kfold.py STORE.zarr

prints one JSON line: the selected param index, its estimate and the estimates' sum (a checksum
of every param's estimate, to compare with the report's).
"""
from __future__ import annotations

import json
import sys

import numpy as np
import zarr


def kfold_floor(store: str) -> dict:
    """The squared-loss K-fold estimate of every param, each shard of ``pred`` read once."""
    # one thread: zarr decodes a shard's inner chunks on its own thread pool unless told not to
    zarr.config.set({"threading.max_workers": 1, "async.concurrency": 1})
    group = zarr.open_group(store, mode="r")
    pred, y = group["pred"], np.asarray(group["y"][:], dtype=np.float64)
    fold, fold_split = np.asarray(group["fold"][:]), np.asarray(group["fold_split"][:])
    n_params, n_splits, _ = pred.shape
    # test[s]: the rows fold split s is scored on (a split can be the fold split of one repeat's
    # fold only: splits are deduplicated by training set, and two folds never share one)
    test = np.zeros((n_splits, pred.shape[2]), dtype=np.float64)
    for r, j in np.ndindex(fold_split.shape):
        test[fold_split[r, j]] += fold[r] == j
    per_shard = pred.shards or pred.chunks
    sums = np.zeros(n_params)
    for s0 in range(0, n_splits, per_shard[1]):
        s1 = min(s0 + per_shard[1], n_splits)
        rows = test[s0:s1]
        if not rows.any():
            continue                                  # no fold split here (e.g. the full fit)
        for p0 in range(0, n_params, per_shard[0]):
            p1 = min(p0 + per_shard[0], n_params)
            block = pred[p0:p1, s0:s1, :]             # one shard: read and decoded once
            errors = np.square(block - y, dtype=np.float64)
            sums[p0:p1] += np.einsum("psn,sn->p", errors, rows)
    n_analysis = int((fold[0] >= 0).sum())
    estimate = sums / (fold_split.shape[0] * n_analysis)
    selected = int(np.argmin(estimate))
    return {"selected": selected, "estimate": float(estimate[selected]),
            "estimate_sum": float(estimate.sum())}


if __name__ == "__main__":
    print(json.dumps(kfold_floor(sys.argv[1])))
