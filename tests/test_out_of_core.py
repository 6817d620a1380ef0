"""Reducers on a lazy cube too big for memory: chunk by chunk, only the chunks they need.

The cube's ``pred`` is generated lazily chunk by chunk (``y`` plus noise whose scale grows with
the param), so the expected K-fold risk of param h is known: sigma_h^2 = (1 + h / P)^2. A chunk
generator that raises for any split a reducer has no business reading is the flox-style
"raise if dask computes it" check; tracemalloc bounds the peak memory.
"""
from __future__ import annotations

import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest

from cvflow.workflow.data import Data
from cvflow.estimators import corrected_kfold, kfold
from cvflow.workflow.params import Param
from cvflow.store.creation import cube_template
from cvflow.testing import simple_design


def lazy_cube(n_params: int, n: int, *, bp: int, allowed: set[int] | None = None):
    """A (n_params, 16 splits, n) cube, 5 folds + pairs + full, with lazily generated pred.

    Chunks are (bp, 1, n). Generating a chunk of a split outside ``allowed`` raises.
    Returns the cube and a list that records the generated chunks' split indices.
    """
    design = simple_design(n, 5, pairs=True, seed=0)
    assert design.n_splits == 16
    rng = np.random.default_rng(1)
    y = rng.normal(size=n)
    data = Data(X=np.zeros((n, 1)), y=y, feature_names=["x0"], is_test=np.zeros(n, bool))
    params = [Param("hand", "sklearn.dummy.DummyRegressor", hyper={"h": h}) for h in range(n_params)]
    cube = cube_template(data, design, params, chunks=(bp, 1),
                         attrs={"task": "regression", "loss": "squared", "classes": "null",
                                "workflow": "{}", "workflow_hash": "", "data_hash": ""})
    generated: list[int] = []    # list.append is atomic: no lock, so the graph pickles

    def make(block_info=None):
        (p0, p1), (s0, _), _ = block_info[None]["array-location"]
        if allowed is not None and s0 not in allowed:
            raise AssertionError(f"reducer computed pred of split {s0}, which it does not need")
        generated.append(s0)
        pred = np.random.default_rng(1000 * s0 + p0).standard_normal((p1 - p0, 1, n))
        pred *= 1.0 + np.arange(p0, p1)[:, None, None] / n_params      # in place: one chunk
        pred += y[None, None, :]
        return pred

    pred = da.map_blocks(make, dtype=np.float64, chunks=((bp,) * (n_params // bp), (1,) * 16, (n,)))
    cube["pred"] = (("param", "split", "sample"), pred)
    return cube, design, generated


def traced_peak(reduce, *, threads: int, budget: int | None = None):
    """``reduce()`` on a threads scheduler (and the in-memory budget, if given) with the peak
    of memory traced meanwhile: (its results, peak bytes)."""
    config = {"scheduler": "threads", "num_workers": threads}
    if budget is not None:
        config["cvflow.reduce.in-memory-bytes"] = budget
    with dask.config.set(config):
        tracemalloc.start()
        try:
            out = reduce()
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


def check_kfold(res, n_params, n):
    expected = (1.0 + np.arange(n_params) / n_params) ** 2
    # each estimate averages n squared standard normals (times the scale): rel. sd sqrt(2/n)
    assert np.allclose(res["estimate"].values, expected, rtol=8 * np.sqrt(2 / n))
    assert int(res["selected"]) == 0


def test_kfold_reads_only_fold_chunks_with_bounded_memory():
    n_params, n, bp = 200, 20_000, 25          # pred 512 MB, fold splits 160 MB
    fold_splits = set(simple_design(n, 5, pairs=True, seed=0).fold_split.ravel().tolist())
    cube, design, generated = lazy_cube(n_params, n, bp=bp, allowed=fold_splits)
    chunk_bytes = bp * n * 8
    (res,), peak = traced_peak(lambda: (kfold(cube),), budget=16 * 2**20, threads=2)
    check_kfold(res, n_params, n)
    assert sorted(set(generated)) == sorted(fold_splits)
    assert len(generated) == len(fold_splits) * n_params // bp     # each needed chunk once
    # a handful of chunks per thread: well under the 160 MB the reducer reads, let alone pred
    assert peak < 20 * chunk_bytes, f"peak {peak / 2**20:.0f} MiB"
    assert 20 * chunk_bytes <= cube["pred"].nbytes / 6


def test_store_of_path_tasks_is_reduced_in_param_groups_with_bounded_memory():
    """Path tasks write every param of a few splits: chunks (P, 1 split). A param block then
    needs every chunk, so the reducer goes through the params in groups of its in-memory
    budget (each group reading the chunks again) instead of holding the whole selection."""
    n_params, n = 200, 10_000                  # pred 256 MB, 5 fold splits 80 MB, a chunk 16 MB
    fold_splits = set(simple_design(n, 5, pairs=True, seed=0).fold_split.ravel().tolist())
    cube, design, generated = lazy_cube(n_params, n, bp=n_params, allowed=fold_splits)
    (res,), peak = traced_peak(lambda: (kfold(cube),), budget=8 * 2**20, threads=1)
    assert sorted(set(generated)) == sorted(fold_splits)
    # 8 MB, one thread: groups of at most half the budget (4 MB, 52 params of 80 kB a split),
    # each reading every chunk again (a dask chunk is read whole): at most 10 reads a chunk
    assert len(generated) <= len(fold_splits) * 10
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB of an 80 MiB selection (164 before)"
    # by hand: the held-out squared errors of each fold's model, pooled over the folds
    splits = [int(s) for s in design.fold_split[0]]
    loss = (cube["pred"].isel(split=splits).values - cube["y"].values) ** 2
    fold = cube["fold"].values[0]
    hand = sum(loss[:, j, fold == j].sum(axis=1) for j in range(len(splits))) / n
    np.testing.assert_allclose(res["estimate"].values, hand, rtol=1e-12)


def test_small_selection_is_read_once_in_process():
    """Within the in-memory budget a role's splits are read into numpy (fast path), still
    without touching the splits the reducer does not need."""
    fold_splits = set(simple_design(2_000, 5, pairs=True, seed=0).fold_split.ravel().tolist())
    cube, design, generated = lazy_cube(20, 2_000, bp=10, allowed=fold_splits)
    res = kfold(cube)
    check_kfold(res, 20, 2_000)
    assert sorted(generated) == sorted(sorted(fold_splits) * 2)   # each chunk read once


@pytest.mark.slow
def test_thousand_params_sixteen_splits_twenty_thousand_samples():
    """The issue's example: 1000 x 16 x 20 000 float64 (2.6 GB); kfold and corrected_kfold."""
    n_params, n, bp = 1000, 20_000, 50
    design = simple_design(n, 5, pairs=True, seed=0)
    allowed = set(design.fold_split.ravel().tolist()) | {int(design.full_split)}
    cube, design, generated = lazy_cube(n_params, n, bp=bp, allowed=allowed)
    (res, corr), peak = traced_peak(lambda: (kfold(cube), corrected_kfold(cube)), threads=2)
    check_kfold(res, n_params, n)
    assert np.isfinite(corr[list(corr.data_vars)[0]].values).all()
    assert peak < 600 * 2**20, f"peak {peak / 2**20:.0f} MiB of a {cube['pred'].nbytes / 2**30:.1f} GiB cube"


@pytest.mark.parametrize("scheduler", ["threads", "sync", "processes", None])
def test_lazy_reduction_under_a_default_client(scheduler, monkeypatch):
    """With a distributed Client as the default (an open cluster, a notebook's Client()), the
    reducers' groups of params are read into this process's memory (a numpy target its workers
    could not write) on threads, synchronously, with processes configured (their writes would be
    lost: read on threads) and with no scheduler configured (None) alike."""
    import cvflow.estimators.pass_kernel as pass_kernel
    from cvflow.execution.schedulers import connect

    # kernel blocks of one param, in groups of one param (a zero budget) from chunks of 50
    monkeypatch.setattr(pass_kernel, "KERNEL_BYTES", 1)
    cube, design, generated = lazy_cube(100, 2_000, bp=50)
    # a dashboard asked for: distributed's in-process scheduler (without one, the threads
    # route runs Dask's threaded scheduler and no Client exists)
    with connect("threads", workers=1, dashboard_port=0) as client, dask.config.set(
            {"cvflow.reduce.in-memory-bytes": 0, "scheduler": scheduler}):
        from distributed import default_client

        assert default_client() is client
        corr = corrected_kfold(cube)
    # by hand (Burman): K-fold + full fit's risk - sum_j p_j * fold j model's risk on all of D
    loss = (cube["pred"].values - cube["y"].values) ** 2               # (param, split, sample)
    fold = cube["fold"].values[0]
    splits = design.fold_split[0]
    kfold_hand = sum(loss[:, s, fold == j].sum(axis=1) for j, s in enumerate(splits)) / len(fold)
    fold_models = sum(np.mean(fold == j) * loss[:, s].mean(axis=1) for j, s in enumerate(splits))
    expected = kfold_hand + loss[:, int(design.full_split)].mean(axis=1) - fold_models
    assert np.allclose(corr["estimate"].values, expected)
