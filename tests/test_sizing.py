"""Block sizing: chunk shapes from timings, the manual override, and the timing itself."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.tree import DecisionTreeClassifier

from cvflow.execution import sizing as blocks
from cvflow.execution.sizing import choose_chunks, estimate_seconds_per_fit
from cvflow.workflow.params import Param
from cvflow.store.cube import block_slices


def n_tasks(n_params, n_splits, chunks):
    return math.ceil(n_params / chunks[0]) * math.ceil(n_splits / chunks[1])


@settings(max_examples=200, deadline=None)
@given(n_params=st.integers(1, 3000), n_splits=st.integers(1, 300),
       seconds=st.floats(1e-5, 30.0), workers=st.integers(1, 64),
       n_samples=st.one_of(st.none(), st.integers(1, 100_000)))
def test_chunks_fit_the_cube_and_the_limits(n_params, n_splits, seconds, workers, n_samples):
    bp, bs = choose_chunks(n_params, n_splits, seconds_per_fit=seconds, n_workers=workers,
                           n_samples=n_samples)
    assert 1 <= bp <= n_params and 1 <= bs <= n_splits
    fits = bp * bs
    # never much more work than the target per task (one fit may exceed it on its own)
    assert fits == 1 or fits * seconds <= 1.01 * blocks.TARGET_TASK_SECONDS * 2
    if n_samples:
        assert fits == 1 or fits * n_samples * 8 <= blocks.MAX_BLOCK_BYTES
    # the blocks tile the cube exactly, with no block smaller than needed (balanced)
    # balanced: a smaller chunk would need more blocks (no sliver at the end)
    assert bp == 1 or math.ceil(n_params / (bp - 1)) > math.ceil(n_params / bp)
    assert bs == 1 or math.ceil(n_splits / (bs - 1)) > math.ceil(n_splits / bs)
    if n_tasks(n_params, n_splits, (bp, bs)) <= 2000:
        sl = list(block_slices(n_params, n_splits, (bp, bs)))
        assert sum((p.stop - p.start) * (s.stop - s.start) for p, s in sl) == n_params * n_splits
        assert len(sl) == n_tasks(n_params, n_splits, (bp, bs))


def test_cheap_fits_are_batched_to_the_target():
    # 10^4 fits of 0.5 ms: ~0.25 s of work per task, not one fit per task
    bp, bs = choose_chunks(100, 100, seconds_per_fit=5e-4, n_workers=2)
    assert 0.15 <= bp * bs * 5e-4 <= blocks.TARGET_TASK_SECONDS
    assert bp == 100                      # whole param rows first (path-aware learners)
    assert n_tasks(100, 100, (bp, bs)) >= 2 * blocks.MIN_TASKS_PER_WORKER


def test_many_workers_get_tasks_the_scheduler_keeps_up_with():
    """10^8 fits of 1 ms: on 2 workers tasks of ~0.3 s; on 1,000 workers 0.3 s tasks would ask
    the scheduler for ~3,300 tasks/s at ~1 ms of its CPU each (benchmarks/bench_scale.py), so
    tasks grow until it is at most about half busy."""
    for workers, task_seconds in ((2, blocks.TARGET_TASK_SECONDS), (1000, 2.0)):
        bp, bs = choose_chunks(10_000, 10_000, seconds_per_fit=1e-3, n_workers=workers)
        task = bp * bs * 1e-3
        assert 0.9 * task_seconds <= task <= task_seconds + 1e-9
        assert workers / task * blocks.SCHEDULER_SECONDS_PER_TASK <= 0.56


def test_small_studies_still_give_each_worker_several_tasks():
    bp, bs = choose_chunks(10, 40, seconds_per_fit=0.01, n_workers=2)
    assert n_tasks(10, 40, (bp, bs)) >= 2 * blocks.MIN_TASKS_PER_WORKER
    assert bp * bs * 0.01 >= blocks.MIN_TASK_SECONDS


def test_a_tiny_study_still_gives_every_worker_a_task():
    """15 fits of 4 ms (a 3-param tree search): tasks of MIN_TASK_SECONDS would be one task,
    one worker busy and the other idle; every worker gets one."""
    for workers in (2, 3, 4):
        chunks = choose_chunks(3, 5, seconds_per_fit=0.004, n_workers=workers)
        assert n_tasks(3, 5, chunks) >= workers, (workers, chunks)


def test_slow_fits_get_one_fit_per_task():
    assert choose_chunks(50, 10, seconds_per_fit=5.0) == (1, 1)


def test_blocks_are_balanced():
    # 100 params at most 60 per block -> two blocks of 50, not 60 + 40
    bp, _ = choose_chunks(100, 5, seconds_per_fit=1.0, fits_per_task=60)
    assert bp == 50


@pytest.mark.parametrize("fpt,expected", [(1, (1, 1)), (7, (7, 1)), (40, (20, 2)), (10**6, (20, 16))])
def test_manual_fits_per_task_overrides_timing(fpt, expected):
    assert choose_chunks(20, 16, seconds_per_fit=123.0, fits_per_task=fpt) == expected


def test_block_bytes_are_capped():
    bp, bs = choose_chunks(1000, 16, seconds_per_fit=1e-5, n_samples=20_000)
    assert bp * bs * 20_000 * 8 <= blocks.MAX_BLOCK_BYTES


@pytest.fixture
def clock(monkeypatch):
    """Timings in counted work: the estimate reads a clock that only fits advance."""
    from counting_learner import Clock

    monkeypatch.setattr(blocks.time, "perf_counter", Clock.read)
    return Clock


def test_estimate_charges_path_aware_ridge_per_alpha(clock, monkeypatch):
    """One unit of work per path fit (one SVD, every alpha) or per single fit."""
    from cvflow.fitting import block as fit
    from cvflow.fitting import paths

    real_path, real_one = paths.fit_path, fit.fit_and_score

    def path(*args, **kwargs):
        clock.tick(1.0)
        return real_path(*args, **kwargs)

    def one(*args, **kwargs):
        clock.tick(1.0)
        return real_one(*args, **kwargs)

    monkeypatch.setattr(fit.paths, "fit_path", path)
    monkeypatch.setattr(fit, "fit_and_score", one)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 10)), rng.normal(size=300)
    train = np.arange(300) < 240
    ridge = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
             for a in np.logspace(-3, 3, 64)]
    assert estimate_seconds_per_fit(ridge, X, y, train, path_aware=False, budget=1e9) == 1.0
    # path-aware: one path fit (one unit) for the whole grid, or charged by size unprobed
    assert estimate_seconds_per_fit(ridge, X, y, train, budget=1e9) <= 1 / 64


def test_estimate_weights_learners_by_their_param_count(clock):
    """9 params of a 0.5 ms learner and 1 of a 30 ms one: (9 * 0.5 + 30) / 10 ms."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 5)), rng.normal(size=200)
    train = np.ones(200, bool)
    cheap = [Param("cheap", "counting_learner.TickingRidge",
                   hyper={"alpha": float(c), "delay": 0.0005}) for c in range(9)]
    costly = [Param("costly", "counting_learner.TickingRidge", hyper={"alpha": 1.0, "delay": 0.03})]
    est = estimate_seconds_per_fit(cheap + costly, X, y, train, budget=0.1)
    assert est == pytest.approx((9 * 0.0005 + 0.03) / 10)


def test_estimate_samples_the_whole_grid_not_its_first_params(clock):
    """Grid of 64: the first half costs nothing, the second half 10 ms per fit.

    The timed params are spread over the grid, so the estimate is near the grid's mean
    (5 ms), not the 0 ms of its first params (timing the first 32 would fit the budget).
    """
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 3)), rng.normal(size=100)
    train = np.ones(100, bool)
    grid = [Param("ticking", "counting_learner.TickingRidge",
                  hyper={"delay": 0.0 if i < 32 else 0.01, "alpha": float(i)}) for i in range(64)]
    est = estimate_seconds_per_fit(grid, X, y, train, budget=0.02)
    assert 0.0035 <= est <= 0.0065


def test_estimate_default_budget_is_small(tmp_path, clock):
    """The client times fits while the workers wait: with fits of >= 5 ms the default budget
    (20 ms) allows a warm-up and two timed rounds (1 + 2 params) at most, of 50."""
    from counting_learner import Clock

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 5)), rng.normal(size=200)
    train = np.arange(200) < 160
    grid = [Param("ticking", "counting_learner.TickingRidge",
                  hyper={"alpha": float(a), "delay": 0.005}) for a in range(50)]
    start = Clock.now
    est = estimate_seconds_per_fit(grid, X, y, train)
    assert est == pytest.approx(0.005)
    assert 2 <= round((Clock.now - start) / 0.005) <= 4          # fits done


def test_paths_are_not_cut_when_they_fit_in_memory():
    # 100-alpha lasso path, 6 splits, ~0.6 ms per alpha: one whole path per task, 6 tasks
    assert choose_chunks(100, 6, seconds_per_fit=6e-4, n_workers=2, path_length=100) == (100, 1)
    # cheap 20-alpha paths of 3 learners: whole multiples of the path
    bp, bs = choose_chunks(60, 6, seconds_per_fit=1e-5, n_workers=2, path_length=20)
    assert bp % 20 == 0
    # a path too big for one block is cut as any grid
    bp, _ = choose_chunks(100, 6, seconds_per_fit=6e-4, n_samples=100_000, path_length=100)
    assert bp * 100_000 * 8 <= blocks.MAX_BLOCK_BYTES and bp < 100


def test_path_learners_are_charged_by_size_without_a_probe(monkeypatch):
    import cvflow.fitting.block

    def no_fit(*args, **kwargs):
        raise AssertionError("a path learner was fitted to time it")

    monkeypatch.setattr(cvflow.fitting.block, "fit_block", no_fit)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 10)), rng.normal(size=300)
    train = np.arange(300) < 240
    for path, key, kernel, yy in (("Ridge", "alpha", "ridge", y), ("Lasso", "alpha", "lasso", y),
                                  ("LogisticRegression", "C", "logistic", (y > 0).astype(int))):
        grid = [Param("p", f"sklearn.linear_model.{path}", hyper={key: float(a)})
                for a in np.logspace(-3, 1, 20)]
        per_fit, per_value = blocks.PATH_COST[kernel]
        assert estimate_seconds_per_fit(grid, X, yy, train) == pytest.approx(
            per_fit + per_value * 240 * 10)
    # a learner fitted one param at a time is timed (here: refused by the stub)
    trees = [Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": d})
             for d in (1, 2)]
    with pytest.raises(AssertionError, match="was fitted"):
        estimate_seconds_per_fit(trees, X, y, train)
    # a path learner on large data is charged by size too: not fitted on the client
    big_X, big_y = np.zeros((2500, 1000)), np.zeros(2500)
    lasso = [Param("p", "sklearn.linear_model.Lasso", hyper={"alpha": float(a)})
             for a in np.logspace(-3, 1, 20)]
    per_fit, per_value = blocks.PATH_COST["lasso"]
    assert estimate_seconds_per_fit(lasso, big_X, big_y, np.arange(2500) < 2000) == \
        pytest.approx(per_fit + per_value * 2000 * 1000)


# --- threads: OpenMP per thread, and whether the GIL is held ------------------------------------

class SleepingRegressor(BaseEstimator, RegressorMixin):
    """A fit that waits without the GIL (time.sleep releases it, as libsvm's fit does)."""

    def __init__(self, alpha=1.0, seconds=0.05):
        self.alpha, self.seconds = alpha, seconds

    def fit(self, X, y):
        time.sleep(self.seconds)
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_)


class SpinningRegressor(SleepingRegressor):
    """A fit that computes in Python for its whole time, holding the GIL."""

    def fit(self, X, y):
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        self.mean_ = float(np.mean(y))
        return self


def _params(cls):
    return [Param("m", f"{__name__}.{cls.__name__}", hyper={"alpha": a},
                  source=(cls(), {"alpha": a})) for a in (0.1, 1.0, 10.0)]


def test_thread_bound_share_tells_a_fit_that_holds_the_gil_from_one_that_does_not():
    """Two sleeping fits side by side take one's time (share ~0); two spinning fits, which
    hold the GIL, take two (share ~1). The margins are wide: CPU time, not wall time, bounds
    the spinning fit, so a busy machine slows both of a pair alike."""
    X, y = np.zeros((40, 2)), np.arange(40.0)
    train = np.ones(40, bool)
    free = blocks.thread_bound_share(_params(SleepingRegressor), X, y, train)
    held = blocks.thread_bound_share(_params(SpinningRegressor), X, y, train)
    assert free < 0.5 < held, (free, held)


def test_blocks_on_scheduler_threads_get_one_openmp_thread():
    """OpenMP's thread count is set per thread: the limit must be set in the thread that fits,
    not only in the client's (threadpoolctl reports the calling thread's OpenMP setting)."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info

    import sklearn.ensemble  # noqa: F401 - loads scikit-learn's OpenMP runtime

    def openmp_threads():
        with blocks.one_openmp_thread_here():
            return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp"]

    with ThreadPoolExecutor(1) as pool:
        inside = pool.submit(openmp_threads).result()
    assert inside and set(inside) == {1}


class TimedTree(DecisionTreeClassifier):
    """A tree that counts the fits cvflow makes to time a study (in_trial: not the study's)."""

    timing_fits: list = []

    def fit(self, X, y, sample_weight=None, check_input=True):
        from cvflow.fitting.trial import in_trial

        if in_trial():
            TimedTree.timing_fits.append(len(y))
        return super().fit(X, y, sample_weight=sample_weight, check_input=check_input)


def test_a_small_search_is_timed_by_one_fit_and_its_second_call_by_none():
    """Issue 41: under auto, a study far below where worker processes pay is timed by its
    warm-up fit alone (sizing.ESTIMATE_ERROR), and a process that timed a study reuses the
    estimate for the same params on data of the same shape; the answers are GridSearchCV's."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import GridSearchCV, cross_validate

    import cvflow

    X, y = load_breast_cancer(return_X_y=True)
    grid = {"max_depth": [2, 4, 8]}
    search = cvflow.SearchCV(TimedTree(random_state=0), grid, cv=5)
    TimedTree.timing_fits.clear()
    search.fit(X, y)
    first = len(TimedTree.timing_fits)
    search.fit(X, y)
    second = len(TimedTree.timing_fits) - first
    # one warm-up fit where no process cluster of this session is up (a warm one pays sooner)
    assert first >= 1 and second == 0
    # nested: the inner searches train on 303-304 samples (within run_plan.SAME_SIZE): timed once
    before = len(TimedTree.timing_fits)
    nested = cross_validate(search, X, y, cv=3)
    assert len(TimedTree.timing_fits) - before <= first
    assert np.array_equal(nested["test_score"], cross_validate(
        GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5), X, y, cv=3)["test_score"])
    reference = GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
    assert search.best_index_ == reference.best_index_
