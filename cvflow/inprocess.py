"""Running a study's block tasks in this process: on a thread pool, or on worker processes
forked from this one. No scheduler, no comms, nothing to start but the pool (threads:
nothing; forked processes: ~10-20 ms each).

The engine (:mod:`cvflow.engine`) sends the same task bodies as to a cluster; their inputs
that every task shares (X, y, weights) are *inherited*: kept here under a token before the
pool starts, so forked workers find them in their copy of this process instead of receiving
them pickled with every task.
"""
from __future__ import annotations

import contextlib
import gc
import itertools
import multiprocessing
import sys
import threading
import warnings
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from typing import Callable, Iterator

# DESIGN CHOICE: forking a process that runs threads is safe here: a forked worker runs only
# cvflow's task bodies, and zarr and fsspec reset their event loops in a forked child. Python
# 3.12+ warns of it on every fork all the same; that one warning, for multiprocessing's fork
# context only, is silenced (a filter for the process: `catch_warnings` is not thread-safe).
warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                        category=DeprecationWarning, module=r"multiprocessing\.popen_fork")

_INHERITED: dict[str, object] = {}
_TOKENS = itertools.count()
_LOCK = threading.Lock()


def can_fork() -> bool:
    """Whether worker processes can be forked here: Linux (macOS forks unsafely once system
    frameworks run threads; Windows cannot fork), and not in a daemonic process (a Dask or
    multiprocessing worker), which multiprocessing forbids to have children."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


@contextlib.contextmanager
def inherited(value) -> Iterator[str]:
    """Keep ``value`` under a token for the tasks of a pool started while this is open."""
    with _LOCK:
        token = f"cvflow-inherited-{next(_TOKENS)}"
        _INHERITED[token] = value
    try:
        yield token
    finally:
        _INHERITED.pop(token, None)


def inheritance(token: str):
    """The value kept under ``token`` (in a forked worker: as it was when the pool forked)."""
    return _INHERITED[token]


@contextlib.contextmanager
def pool(workers: int, *, processes: bool) -> Iterator[Executor]:
    """A pool of ``workers`` threads, or of worker processes forked now from this process."""
    if not processes:
        with ThreadPoolExecutor(workers, thread_name_prefix="cvflow-fit") as threads:
            yield threads
        return
    forked = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        # the workers fork now (the executor forks all of them at its first task): they
        # inherit what is kept now (`inherited`) and nothing later. DESIGN CHOICE: the
        # parent's objects are frozen out of the collector's reach while it forks (Python's
        # gc.freeze advice): a collection in a worker would otherwise touch every object it
        # inherited and copy each page of the parent's heap (copy-on-write). Measured: a
        # worker's own memory after a collection, forked from a 271 MB client with cvflow,
        # scikit-learn, xarray and dask imported: 61 MB without, 4.5 MB with.
        ours = gc.get_freeze_count() == 0          # a caller's own frozen objects stay so
        if ours:
            gc.freeze()
        try:
            forked.submit(int)
        finally:
            if ours:
                gc.unfreeze()
        yield forked
    finally:
        # every task is back (or cancelled): the workers leave on their own, unwaited for
        forked.shutdown(wait=False, cancel_futures=True)


def execute(tasks: dict[str, tuple], executor: Executor, *,
            on_done: Callable[[str, object], None]) -> None:
    """Run independent ``tasks`` ``{key: (function, *args)}`` on ``executor`` (from
    :func:`pool`); ``on_done(key, result)`` is called in this thread as each task finishes.
    The first exception a task raises is raised here (the tasks not started are cancelled)."""
    # DESIGN CHOICE: every task is queued at once, not handed out as workers free up (Dask's
    # local scheduler keeps one task per worker in flight and dispatches the next only after
    # this thread has recorded the last one: the workers idled through every status write
    # and pickling round trip, ~20-40 ms a block here).
    futures = {executor.submit(function, *args): key for key, (function, *args) in tasks.items()}
    try:
        for future in as_completed(futures):
            on_done(futures[future], future.result())
    finally:
        for future in futures:
            future.cancel()
