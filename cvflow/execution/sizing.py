"""Block sizing: how many (param x split) fits one Dask task does.

A Dask task costs ~1.5-2 ms on a small machine and a block also pays one store write, while a
small linear fit takes well under a millisecond: one fit per task wastes most of the machine.
:func:`estimate_seconds_per_fit` times a few real blocks on the client (path-aware learners
included, so a ridge path is charged what it costs per alpha, not per SVD) and
:func:`choose_chunks` turns that into the chunk shape of ``pred`` (one chunk = one task).
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

import numpy as np

log = logging.getLogger(__name__)

# DESIGN CHOICE: aim for tasks of ~0.3 s: the ~2 ms task cost and the ~5-10 ms store write are
# then a few percent, while a study still splits into enough tasks to keep every worker busy.
TARGET_TASK_SECONDS = 0.3
# COST: CPU seconds of Dask's scheduler per task (measured by benchmarks/bench_scale.py: ~1 ms
# here). With many workers the tasks grow so that the scheduler stays at most half busy:
# n_workers / task seconds * this <= 0.5. At 1,000 workers tasks of 0.3 s would ask it for 3.3
# CPU seconds each second (the first bottleneck of the scaling model in README); they become 2 s.
SCHEDULER_SECONDS_PER_TASK = 1e-3
# DESIGN CHOICE: at least this many tasks per worker when the study is small, so that the last
# task to finish (the tail) is a small part of the wall time; but never tasks under
# MIN_TASK_SECONDS, where the per-task costs would dominate again.
MIN_TASKS_PER_WORKER = 8
MIN_TASK_SECONDS = 0.05
# DESIGN CHOICE: a block's predictions travel once from the fit to the store inside the task;
# cap them so a worker never holds more than this for one block.
MAX_BLOCK_BYTES = 64 * 2**20


def _even(total: int, at_most: int) -> int:
    """The smallest chunk <= ``at_most`` giving the same number of chunks (balanced blocks)."""
    at_most = max(1, min(total, at_most))
    n_chunks = math.ceil(total / at_most)
    return math.ceil(total / n_chunks)


def choose_chunks(n_params: int, n_splits: int, *, seconds_per_fit: float, n_workers: int = 2,
                  fits_per_task: int | None = None, n_samples: int | None = None,
                  itemsize: int = 8, target_seconds: float | None = None,
                  path_length: int = 1) -> tuple[int, int]:
    """Chunk shape (params, splits) of a block.

    Parameters
    ----------
    n_params, n_splits : int
        The cube's sizes.
    seconds_per_fit : float
        Measured seconds per fit (see :func:`estimate_seconds_per_fit`).
    n_workers : int
        Worker threads of the cluster; small studies get at least ``MIN_TASKS_PER_WORKER``
        tasks per worker.
    fits_per_task : int, optional
        Manual override of the timing-based size (``execution.fits_per_task``).
    n_samples, itemsize : int, optional
        Samples per prediction and bytes per value; cap a block at ``MAX_BLOCK_BYTES``.
    target_seconds : float, optional
        Work per task; default ``TARGET_TASK_SECONDS``.
    path_length : int
        Params fitted as one path per training set (:func:`cvflow.fitting.paths.plan`): blocks hold
        whole multiples of it whenever that fits ``MAX_BLOCK_BYTES``, so no path is cut.

    Blocks span whole param rows first (path-aware learners fit a grid per training set in
    one go), then several splits; both sides are balanced so the last block is not a sliver.

    >>> choose_chunks(20, 16, seconds_per_fit=0.0005, n_workers=2)
    (20, 4)
    >>> choose_chunks(100, 16, seconds_per_fit=1.0, fits_per_task=10)
    (10, 1)
    >>> choose_chunks(100, 6, seconds_per_fit=0.0006, n_workers=2, path_length=100)
    (100, 1)
    """
    total = n_params * n_splits
    target = TARGET_TASK_SECONDS if target_seconds is None else target_seconds
    target = max(target, 2 * max(n_workers, 1) * SCHEDULER_SECONDS_PER_TASK)
    if fits_per_task is None:
        per_fit = max(seconds_per_fit, 1e-6)
        fits_target = max(1, int(target / per_fit))
        fits_balance = math.ceil(total / (MIN_TASKS_PER_WORKER * max(n_workers, 1)))
        # never fewer tasks than workers: below MIN_TASK_SECONDS a task's cost (~2-10 ms) is
        # a large share of it, but a study of one task leaves every other worker idle (a
        # 15-fit tree search: 60 ms of fitting on one thread of two)
        fits_floor = min(max(1, int(MIN_TASK_SECONDS / per_fit)),
                         math.ceil(total / max(n_workers, 1)))
        fits = min(fits_target, max(fits_balance, fits_floor))
    else:
        fits = max(1, int(fits_per_task))
    cap = MAX_BLOCK_BYTES // (n_samples * itemsize) if n_samples else total
    fits = max(1, min(fits, cap))
    path_length = min(path_length, n_params)
    if 1 < path_length <= cap:
        # DESIGN CHOICE: a path costs little more than its first fit (one SVD, warm starts):
        # cutting it would pay that first fit once per piece.
        bp = path_length * max(1, min(fits, n_params) // path_length)
        bs = _even(n_splits, max(1, fits // bp))
        return bp, bs
    bp = _even(n_params, fits)
    bs = _even(n_splits, max(1, fits // bp))
    return bp, bs


def estimate_seconds_per_fit(params: list, X, y, train: np.ndarray, *, positive=None,
                             path_aware: bool = True, budget: float = 0.02,
                             total_fits: int | None = None,
                             quick: float | None = None, test_only: bool = False) -> float:
    """Seconds per fit as a block fits them, timed on the client with one BLAS thread.

    For each learner, fits growing samples of its params (1, 2, 4, ... params spread evenly
    over its grid) on one training set until the learner's share of ``budget`` is spent; the
    per-fit time of the largest sample is that learner's estimate. A path-aware learner
    (:mod:`cvflow.fitting.paths`) whose kernel has a ``PATH_COST`` is not timed at all: it is charged
    that cost for the training set's size; another path-aware learner is timed on one whole
    path group, fitted as blocks fit it, so each param is charged its share of one path.
    Returns the param-count weighted mean over learners. With ``total_fits`` (the study's
    fits), a study whose every fit at its learner's warm-up fit's time (an overestimate: the
    first fit pays imports and caches) totals less than ``quick`` seconds (default
    :data:`QUICK_STUDY`) is charged that time, with no further fits. ``test_only``: the fits
    predict their test rows alone, as a study's whose cube holds only those
    (:func:`cvflow.fitting.block.fit_block`'s).
    """
    from ..fitting.trial import trial_running
    from ..fitting.block import fit_block

    # DESIGN CHOICE: the estimate only sizes blocks (a factor of ~2 changes little, see
    # choose_chunks) while the workers wait for it: a small budget (20 ms), and samples spread
    # over the grid, not its first params (often the cheapest: depth 1, the largest penalty).
    def sample(group: list, k: int) -> list:
        picks = np.unique(np.linspace(0, len(group) - 1, k).round().astype(int))
        return [group[i] for i in picks]

    by_learner: dict[str, list] = {}
    for p in params:
        by_learner.setdefault(p.learner, []).append(p)
    share = budget / max(len(by_learner), 1)
    total, count = 0.0, 0
    train = np.asarray(train, dtype=bool)[None, :]
    n_train = int(train.sum())
    # the path kernels fit numpy X and y only (fitting.block.fit_block): else one fit each
    path_aware = (path_aware and isinstance(X, np.ndarray) and X.ndim == 2
                  and isinstance(y, np.ndarray))
    if path_aware:
        for name, group in list(by_learner.items()):
            cost = _path_cost(group, n_train * X.shape[1])
            if cost is not None:
                total += cost * len(group)
                count += len(group)
                del by_learner[name]
    paths = {name: _first_path(group) if path_aware else [] for name, group in by_learner.items()}
    warm: dict[str, float] = {}
    with trial_running():                  # not the study's fits (see cvflow.fitting.trial.in_trial)
        for name, group in by_learner.items():  # warm-up: imports (and their libraries), caches
            t0 = time.perf_counter()
            fit_block(group[:1], X, y, train, params_slice=slice(0, 1),
                      splits_slice=slice(0, 1), positive=positive, path_aware=path_aware,
                      test_only=test_only)
            warm[name] = time.perf_counter() - t0
    if total_fits and by_learner and \
            max(warm.values()) * total_fits < (QUICK_STUDY if quick is None else quick):
        for name, group in by_learner.items():
            total += warm[name] * len(group)
            count += len(group)
        by_learner = {}
    with one_blas_thread() if by_learner else contextlib.nullcontext(), trial_running():
        for name, group in by_learner.items():
            path = paths[name]
            spent, k = 0.0, 1
            while True:
                fits = path or sample(group, k)
                t0 = time.perf_counter()
                fit_block(fits, X, y, train, params_slice=slice(0, len(fits)),
                          splits_slice=slice(0, 1), positive=positive, path_aware=path_aware,
                          test_only=test_only)
                elapsed = time.perf_counter() - t0
                spent += elapsed
                per_fit = elapsed / len(fits)
                if path or k >= len(group) or spent + 2 * elapsed > share:
                    break
                k = min(2 * k, len(group))
            total += per_fit * len(group)
            count += len(group)
    seconds = total / max(count, 1)
    log.debug("estimated %.3g s per fit", seconds)
    return seconds


# DESIGN CHOICE: the timing only picks threads over processes and sizes blocks. A study whose
# fits all take, at the warm-up fit's time, less than this fits in this process whatever the
# estimate's error up to ~3x (processes must save more than config warm_seconds, 0.3 s, to be
# picked), and its blocks are few whatever their size: its further timing fits (up to the
# budget, 20 ms) would be a fifth of a small study's own fits (a tree on breast cancer: 4 more
# fits beside GridSearchCV's 16, issue 41)
QUICK_STUDY = 0.1
# DESIGN CHOICE: under `auto` the timing's first use is the route (cvflow.execution.schedulers.
# choose): a study whose warm-up total is this many times below where worker processes would
# pay stays in this process whatever the finer timing says, so it is not timed further
# (run.py passes ``quick``): a tree or a scaled logistic grid on breast cancer paid 20-40 ms of
# timing fits beside GridSearchCV's 0.12 s (issue 41). The blocks of such a study are few and
# short whatever their size.
ESTIMATE_ERROR = 3.0


# DESIGN CHOICE: timing a path costs one of the study's own path fits on the client while the
# workers wait (a sixth of a 5-fold study's work, before any task starts; 0.4-0.8 s of a 2 s
# lasso study at n = 20000, p = 500). Path learners are charged by size instead, at any size:
# (seconds per fit, seconds per training value per fit) of their kernel (at n 16000 x p 500 a
# lasso fit is charged 4.8 ms, measured 3.5 ms). The estimate only sizes blocks and picks threads over processes, so
# these are round upper figures measured on this 2-core VM: ~1e-8 s per value is what a
# 20-alpha ridge path costs per alpha (one SVD shared by fewer alphas; 1.2e-9 for 100); a
# lasso / elastic-net path on the Gram matrix costs ~3e-5 s plus ~5e-10 per value and alpha
# (100 alphas, n 500-5000, p 50-200: 0.04-0.31 ms a fit, quiet); an lbfgs logistic fit (from scratch) pays ~2 ms of
# scikit-learn's per-fit checks plus ~1e-7 s per value (its iterations vary with C and the
# data, hence the margin).
PATH_COST = {"ridge": (0.0, 1e-8), "ridge_classifier": (0.0, 1e-8), "lasso": (3e-5, 6e-10),
             "enet": (3e-5, 6e-10), "logistic": (2e-3, 1e-7)}
# Path kernels whose work is BLAS/LAPACK (an SVD, products), which releases the GIL: threads of
# one process fit them in parallel, so worker processes save nothing on them (measured on 2
# cores: a 100-alpha ridge study, 6 paths, 362 ms on threads, 468 ms on forked workers).
THREAD_PARALLEL = {"ridge", "ridge_classifier"}


def _path_cost(group: list, values: int) -> float | None:
    """Charged seconds per fit when every param of the learner is fitted in a path kernel
    (:func:`cvflow.fitting.paths.plan`) of ``PATH_COST``, for ``values`` training values; else None."""
    from ..fitting.paths import plan

    kernels = {g.kernel for g in plan(group)}
    if not kernels or not kernels <= PATH_COST.keys():
        return None
    return max(PATH_COST[k][0] + PATH_COST[k][1] * values for k in kernels)   # type: ignore[index]


def gil_share(params: list, path_aware: bool = True) -> float:
    """The share of ``params`` whose fits hold the GIL: all but those fitted in a
    ``THREAD_PARALLEL`` path kernel (:func:`cvflow.fitting.paths.plan`)."""
    from ..fitting.paths import plan

    if not params or not path_aware:
        return 1.0
    free = sum(len(g.index) for g in plan(params) if g.kernel in THREAD_PARALLEL)
    return 1.0 - free / len(params)


SHARE_ROUNDS, SHARE_SECONDS = 3, 1.0      # thread_bound_share's repeats, while that short


def _queued(thread: int) -> float:
    """Seconds the thread ``thread`` (a native id) of this process has waited for a CPU so
    far, the time other processes took from it (Linux's ``/proc/self/task/ID/schedstat``); 0.0
    where the kernel does not say."""
    try:
        with open(f"/proc/self/task/{thread}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def thread_bound_share(params: list, X, y, train: np.ndarray, *, positive=None,
                       path_aware: bool = True, test_only: bool = False) -> float:
    """The share of a learner's fit time that two threads cannot run side by side, measured.

    One fit of the grid's middle param alone, then two at once on two threads (one OpenMP
    thread each, as blocks fit): 0 when the pair takes as long as one (the fit releases the GIL:
    libsvm, tree builders, BLAS), 1 when twice as long (it holds the GIL). Called only for a
    study whose estimate says worker processes may pay, so the two fits' cost is small beside
    it. Each time excludes the longest wait for a CPU of the measuring threads
    (:func:`_queued`): on a busy machine what is left errs towards 1 (processes), the old
    assumption, as the threads' waits need not overlap."""
    from concurrent.futures import ThreadPoolExecutor

    from ..fitting.block import fit_block
    from ..fitting.trial import trial_running

    middle = [params[len(params) // 2]]
    rows = np.asarray(train, dtype=bool)[None, :]

    def one(_=None) -> None:
        with one_openmp_thread_here():
            fit_block(middle, X, y, rows, params_slice=slice(0, 1), splits_slice=slice(0, 1),
                      positive=positive, path_aware=path_aware, test_only=test_only)

    # DESIGN CHOICE: the time other processes take from the measuring threads is taken out:
    # the longest of their waits for a CPU (the kernel's schedstat). The pair's wall time
    # alone told a 50-ms sleeping fit from a spinning one at random at load 18 on 2 cores
    # (shares of 0-1 for both, 15 tries); less each thread's wait, 0.00 and 0.99-1.67 in 12.
    # Not their sum: threads waiting for the GIL wake every 5 ms and wait for a CPU beside
    # the one holding it (a spinning pair's waits summed to 2-4x its wall time). Short fits
    # are also measured in up to SHARE_ROUNDS rounds (until SHARE_SECONDS have passed) and the
    # fastest of each kind kept, as timeit does.
    alone = both = np.inf
    start = time.perf_counter()
    started = threading.Barrier(3, timeout=60)
    with trial_running(), ThreadPoolExecutor(2, thread_name_prefix="cvflow-timing") as pool:
        # the pool's two threads started (each waits at the barrier), their ids known
        ids = [pool.submit(lambda: (started.wait(), threading.get_native_id())[1])
               for _ in range(2)]
        started.wait()
        threads = [threading.get_native_id(), *(f.result() for f in ids)]

        def measured(run) -> float:
            queued, t0 = [_queued(t) for t in threads], time.perf_counter()
            run()
            wall = time.perf_counter() - t0
            return wall - max(_queued(t) - q for t, q in zip(threads, queued))

        for _ in range(SHARE_ROUNDS):
            alone = min(alone, measured(one))
            both = min(both, measured(lambda: list(pool.map(one, range(2)))))
            if time.perf_counter() - start > SHARE_SECONDS:
                break
    return float(np.clip(both / max(alone, 1e-9) - 1.0, 0.0, 1.0))


def _first_path(group: list) -> list:
    """The params of the first path group (:func:`cvflow.fitting.paths.plan`) of a learner, or []."""
    from ..fitting.paths import plan

    found = next((g for g in plan(group) if g.kernel is not None), None)
    return [] if found is None else [group[h] for h in found.index]


_CONTROLLER = None
_SCAN: threading.Thread | None = None         # scan_soon's
_SCAN_STARTED = threading.Lock()


def scan_soon() -> None:
    """Start threadpoolctl's scan of the loaded libraries (:func:`_controller`) in a thread of
    its own, once per process, for a run that will fit in this process."""
    # DESIGN CHOICE (issue 41 item 1): the scan resolves the path of every loaded shared
    # library (~240 in a scikit-learn process: ~2,000 lstat calls, 10-25 ms, which GridSearchCV
    # never pays). Its system calls release the GIL, so a search started from the caller's
    # set-up (check_cv, the study's workflow, the route) overlaps the two on a second core; the
    # limit itself is still entered where it was, around the probe and the threads' fits. The
    # libraries the scan sees are those loaded when the search starts, as before: the
    # estimator's modules are imported by then (a library first loaded later was not limited
    # before either).
    global _SCAN
    with _SCAN_STARTED:
        if _CONTROLLER is None and _SCAN is None:
            _SCAN = threading.Thread(target=_scan, name="cvflow-blas-scan", daemon=True)
            _SCAN.start()


def _scan() -> None:
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    except Exception:  # noqa: BLE001 - _controller scans again in the caller, raising there
        pass


def _controller():
    """threadpoolctl's controller of this process's BLAS/OpenMP libraries, scanned once."""
    # DESIGN CHOICE: threadpoolctl scans the loaded libraries each time (~10-25 ms, the timing
    # budget's share of a small search): scan once per process and reuse the controller. A
    # BLAS/OpenMP library first loaded later is not limited; the timing is a rough estimate anyway.
    global _CONTROLLER
    scan = _SCAN
    if scan is not None:
        scan.join()
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


@contextlib.contextmanager
def _one_thread(user_api: str | None):
    """threadpoolctl's limit of one thread (``user_api`` None: BLAS and OpenMP)."""
    try:
        controller = _controller()
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        yield
        return
    with controller.limit(limits=1, user_api=user_api):
        yield


def one_openmp_thread_here():
    """One OpenMP thread for the fits of the calling thread.

    OpenMP's thread count is a per-thread setting (``omp_set_num_threads`` sets the caller's
    alone): the limit the client sets (:func:`one_blas_thread`) does not reach the threads a
    scheduler runs blocks on, where each OpenMP learner (HistGradientBoosting, KMeans, ...)
    would start a team of one thread per core beside the other blocks' teams. Measured on
    2 cores, ColumnTransformer + HistGradientBoosting on 392 samples: fits 3-6x slower than
    one at a time. Process workers have one OpenMP thread already (``OMP_NUM_THREADS=1``)."""
    return _one_thread("openmp")


def one_blas_thread():
    """One BLAS/OpenMP thread, as distributed gives process workers (OMP_NUM_THREADS=1 etc.);
    used by the timing and by in-process (threads) runs."""
    return _one_thread(None)
