"""Fitting a block: every (param, split) of a chunk-aligned rectangle, path-aware groups
together (:mod:`cvflow.paths`), one param at a time otherwise (:func:`cvflow.learners.fit_one`).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import numpy as np

from . import paths
from .learners import Param, fit_one, pred_shape

log = logging.getLogger(__name__)


@dataclass
class BlockResult:
    """What a fitted block holds; the task writes ``pred`` and returns the rest (small)."""

    params: slice
    splits: slice
    pred: np.ndarray | None   # (params, splits, sample[, class]); None once written
    failed: np.ndarray        # (params, splits) bool
    error: np.ndarray         # (params, splits) object (str)
    fit_seconds: np.ndarray   # (params, splits)

    def without_pred(self) -> BlockResult:
        """The status part only (small: what a task sends back to the client)."""
        return BlockResult(self.params, self.splits, None, self.failed, self.error, self.fit_seconds)

    def summary(self) -> dict:
        return {
            "params": (self.params.start, self.params.stop),
            "splits": (self.splits.start, self.splits.stop),
            "fits": int(self.failed.size),
            "failed": int(self.failed.sum()),
            "seconds": float(np.nansum(self.fit_seconds)),
        }



def fit_block(params: list[Param], X, y, train: np.ndarray, *, params_slice: slice,
              splits_slice: slice, positive=None, path_aware: bool = True,
              sample_weight=None) -> BlockResult:
    """Fit every (param, split) of a block; ``train`` is (splits, sample) for the block's splits.

    With ``path_aware`` (the workflow's ``execution.path_aware``), params of one path-aware
    learner that differ only in the penalty (ridge / lasso / elastic net ``alpha``, logistic
    ``C``) are fitted together per training set (:mod:`cvflow.paths`); each of them is charged
    an equal share of the group's seconds. A group whose path fit raises is refitted one param
    at a time, so failures are recorded exactly as on the generic route. Path fits need a
    numpy ``X``, no sample weights and no ``fit_seed``.
    """
    n_p, n_s = len(params), train.shape[0]
    pred = np.full((n_p, n_s) + pred_shape(X, positive), np.nan)     # multiclass: (n, C) a fit
    seconds = np.zeros((n_p, n_s))
    error = np.full((n_p, n_s), "", dtype=object)
    path_aware = (path_aware and sample_weight is None and isinstance(X, np.ndarray)
                  and all(p.fit_seed is None for p in params))
    groups = paths.plan(params) if path_aware else [paths.Group((h,)) for h in range(n_p)]
    for s in range(n_s):
        for group in groups:
            index = list(group.index)
            if group.kernel is not None:
                t0 = time.perf_counter()
                try:
                    pred[index, s] = paths.fit_path([params[h] for h in index], X, y, train[s],
                                                    positive=positive, kernel=group.kernel)
                    seconds[index, s] = (time.perf_counter() - t0) / len(index)
                    continue
                except Exception as exc:  # noqa: BLE001 - fall back to one fit per param
                    log.debug("path fit of %s failed (%s); fitting one by one",
                              params[index[0]].learner, exc)
            for h in index:
                pred[h, s], seconds[h, s], error[h, s] = fit_one(params[h], X, y, train[s], positive,
                                                                 sample_weight)
    failed = error != ""
    return BlockResult(params_slice, splits_slice, pred, failed, error, seconds)


# ---------------------------------------------------------------------------------------------
# fits that kill their process


def death_message(code: int, memory: tuple[int, int] | None = None) -> str:
    """What a fit's process exit ``code`` (negative: the signal) says, and its likely cause;
    ``memory`` = (resident bytes, limit) when the watchdog stopped the fit over the limit."""
    import signal

    if memory is not None:
        used, limit = memory
        return (f"worker died: the fit used {_gib(used)} GiB, over the worker's memory limit of "
                f"{_gib(limit)} GiB; it was stopped alone in a child process")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        cause = {"SIGKILL": "out of memory (the kernel's OOM killer, or the worker's memory "
                            "limit) or an external kill",
                 "SIGSEGV": "a crash in compiled code (segmentation fault)",
                 "SIGABRT": "an abort in compiled code",
                 "SIGBUS": "a crash in compiled code (bus error)"}.get(name, "an external signal")
        return f"worker died: the fit was killed by signal {-code} ({name}); likely cause: {cause}"
    return (f"worker died: the fit ended its process with exit status {code}; likely cause: "
            "exit() or os._exit() in the learner's code, or a library that exits on error")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def worker_memory_limit() -> int | None:
    """The memory limit in bytes of the Dask worker running this task; None outside a worker
    or when the worker has none."""
    try:
        from distributed import get_worker

        return get_worker().memory_manager.memory_limit or None
    except (ImportError, ValueError, AttributeError):
        return None


class _MemoryWatch:
    """Polls a child's resident memory and kills it once over ``limit`` bytes: a forked fit's
    memory is not the worker's, so the nanny's own limit does not see it."""

    INTERVAL = 0.05

    def __init__(self, pid: int, limit: int | None):
        import threading

        self.pid, self.limit, self.over = pid, limit, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="cvflow-memwatch")
        if limit:
            self._thread.start()

    def _watch(self) -> None:
        import os
        import signal

        import psutil

        try:
            proc = psutil.Process(self.pid)
            while not self._stop.wait(self.INTERVAL):
                rss = proc.memory_info().rss
                if rss > self.limit:
                    self.over = (rss, self.limit)
                    os.kill(self.pid, signal.SIGKILL)
                    return
        except (psutil.Error, ProcessLookupError):
            return                                   # the child has ended

    def stop(self) -> tuple[int, int] | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.over


def fit_isolated(param: Param, X, y, train: np.ndarray, positive=None,
                 sample_weight=None, memory_limit: int | None = None) -> tuple[np.ndarray, float, str]:
    """:func:`cvflow.learners.fit_one` in a forked child process: a fit that kills its process
    (out of memory, a segfault, ``os._exit``) is reported as a failed fit, the caller lives.

    Task body of a block that killed its workers (:mod:`cvflow.engine` splits it into fits).
    The child is stopped once its resident memory passes ``memory_limit`` bytes (default: the
    running Dask worker's limit), so a fit too big for the worker is recorded failed instead
    of taking the machine's memory.
    """
    import os
    import pickle

    # DESIGN CHOICE: os.fork, not multiprocessing: Dask workers are daemonic processes, which
    # multiprocessing forbids to have children; the child only fits, pickles its result into a
    # pipe and leaves with os._exit (no atexit handlers, no Dask state touched).
    # the learner's modules are imported here, once per worker, not in every child
    with contextlib.suppress(Exception):
        param.build(train)
    limit = memory_limit if memory_limit is not None else worker_memory_limit()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child
        try:
            os.close(read_end)
            data = pickle.dumps(fit_one(param, X, y, train, positive, sample_weight))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write_end)
    watch = _MemoryWatch(pid, limit)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    over = watch.stop()
    code = os.waitstatus_to_exitcode(status)
    if code == 0 and data and over is None:
        return pickle.loads(data)
    return np.full(pred_shape(X, positive), np.nan), 0.0, death_message(code, over)
