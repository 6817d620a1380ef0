"""What a reducer reads into this process, and how: the one in-memory budget
(:func:`fits_budget`, :func:`load_if_small`, dask config ``cvflow.reduce.in-memory-bytes``) and
dask arrays computed here (:func:`compute_here`, :func:`store_here`, :func:`is_lazy`).

Public: the estimators, the reports and the plots read a lazy cube through these.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Literal

import numpy as np
from ..lazy import xarray as xr

from .. import config, stalls


# DESIGN CHOICE: a role's selection of a lazy `pred` (e.g. the K fold fits of every param) is
# read into memory when it is small, in this process with the synchronous scheduler (for a few
# MB of chunks this beats threads and any round-trip through a distributed cluster): the reducer
# then runs on numpy, ~10x faster than many small dask graphs. A larger selection stays lazy
# and is reduced chunk by chunk, so memory stays bounded by this budget plus a few chunks per
# thread. Override with dask.config "cvflow.reduce.in-memory-bytes".
IN_MEMORY_BYTES = 256 * 2**20


def fits_budget(nbytes: int) -> bool:
    """Whether ``nbytes`` of a lazy selection may be read into memory (see IN_MEMORY_BYTES)."""

    return nbytes <= config.get("cvflow.reduce.in-memory-bytes")


_SYNC = ("sync", "synchronous", "single-threaded")


def _configured_scheduler():
    """Dask's configured scheduler, None when none is or it is a distributed cluster's (the
    reducers compute in this process)."""
    import dask

    scheduler = dask.config.get("scheduler", None)
    return None if scheduler in ("dask.distributed", "distributed") else scheduler


def active_client():
    """The ``distributed.Client`` the caller holds as its default, else None (distributed is
    not imported for this: a process that never imported it holds no client)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


Parallel = Literal[False, "threads", "cluster"]

# DESIGN CHOICE: on a distributed cluster a task of the one pass reads up to 32 MiB of `pred`
# (three shards of the 10^6-fit cube), not the 8 MiB of this process's threads: each task
# costs the client, which hosts the scheduler, ~2.4 ms of CPU (167 tasks of one shard 0.8-1.0 s,
# 56 tasks of three 0.6 s; the workers' CPU alike), and that rate caps how many workers one
# scheduler can feed (docs/benchmarks.md, the 10^8-fit model). Not more: a 64 MiB block is
# above glibc's largest mmap threshold, and the workers' system CPU doubled (page faults).
# A worker's memory is its own, so the client's thread count does not divide this.
CLUSTER_TASK_BYTES = 32 * 2**20


def on_cluster() -> bool:
    """Whether ``compute_here(..., parallel="cluster")`` would compute on an active
    ``distributed.Client``'s workers (not when dask config names another scheduler)."""
    return _configured_scheduler() is None and active_client() is not None


# the configured Dask schedulers that run tasks in this process (see runs_here)
IN_PROCESS = ("sync", "synchronous", "single-threaded", "threads", "threading")


def runs_here(parallel: Parallel) -> bool:
    """Whether ``compute_here(..., parallel=parallel)`` computes in this process (its threads
    or synchronously), so that its tasks can write into this process's arrays: not on an
    active client's workers, nor under a configured scheduler of other processes."""
    from dask.local import get_sync
    from dask.threaded import get

    configured = _configured_scheduler()
    if configured is None:
        return not (parallel == "cluster" and active_client() is not None)
    return configured in IN_PROCESS or configured is get or configured is get_sync


def compute_here(collection, *, parallel: Parallel = False):
    """A dask collection computed: the one place the reducers pick their scheduler.

    ``parallel=False`` (a role's few MB of chunks): the synchronous scheduler in this process.
    ``"threads"``: Dask's threads in this process. ``"cluster"`` (the one pass over ``pred``,
    :mod:`cvflow.estimators.one_pass`, whose tasks read the store themselves): the active
    ``distributed.Client``'s workers when the caller holds one, else Dask's threads. A
    scheduler set in dask config (e.g. a test's "sync") is respected, but for "cluster" when
    that scheduler is the active Client's.
    """
    import dask
    from dask.local import get_sync
    from dask.threaded import get

    configured = _configured_scheduler()
    client = active_client() if parallel == "cluster" and configured is None else None
    if client is not None:
        return on_client(client, collection)
    if configured is not None:
        scheduler = configured
    else:
        # the schedulers themselves, not their names: dask resolves a name by first looking
        # for a distributed Client, which imports distributed (~0.3 s) into a plain `cvflow report`
        scheduler = get if parallel else get_sync
    (data,) = dask.compute(collection, scheduler=scheduler)
    return data


WAKE_SECONDS = 1.0


class _ReductionWatch(stalls.Watchdog):
    """The reduction's :class:`cvflow.stalls.Watchdog` (config ``cvflow.reduce.*``): its
    error counts the reduction's tasks, names the scheduler and the setting."""

    def __init__(self, client, total: int) -> None:
        super().__init__(client, "reduce", "the reduction")
        self.total = total

    def waiting(self, pending: list, workers: dict) -> str:
        return (f"{len(pending)} of the reduction's {self.total} tasks not back, "
                + (f"{len(workers)} workers idle" if workers else "no worker connected")
                + f" (scheduler {self.client.scheduler.address})")

    def stopping(self, quiet: float, waiting: str, pending: list, key: str) -> str:
        return (f"no progress for {quiet:.0f} s: {waiting}; "
                f"{self.stacks(pending) or 'their stacks unknown'} (config cvflow.reduce.{key})")


def on_client(client, collection):
    """``collection`` computed on ``client``'s workers, with a deadline: as the run loop, a wait
    in which no task comes back while every worker is idle (config
    ``cvflow.reduce.stall-seconds``), or no worker is connected
    (``cvflow.reduce.no-worker-seconds``), ends in a StallError that says how many tasks it
    waited on and where the running ones are (:class:`cvflow.stalls.Watchdog`); the tasks are
    cancelled."""
    from distributed import futures_of, wait

    computed = client.compute(collection)
    pending = set(futures_of(computed))
    watchdog = _ReductionWatch(client, len(pending))
    try:
        while pending:
            # one wait on all of them a second (a wait for the first one, once per task, made
            # the client's CPU grow with the square of the tasks: 167 tasks, ~2 s)
            with contextlib.suppress(TimeoutError):
                wait(pending, timeout=WAKE_SECONDS)
            done = {future for future in pending if future.done()}
            pending -= done
            for future in done:
                if future.status == "error":
                    future.result()                # the task's own exception, here
            if done:
                watchdog.progressed()
            else:
                watchdog.check(list(pending))
        return client.gather(computed)
    finally:
        if pending:
            client.cancel(list(pending))


def store_here(array, out: np.ndarray) -> None:
    """Compute the dask ``array`` into the numpy array ``out`` (same shape) in this process,
    chunk by chunk: Dask's threads, or its synchronous scheduler when that is configured (a
    numpy target cannot be written by a distributed cluster's workers nor by other processes)."""
    import dask.array as da
    from dask.local import get_sync
    from dask.threaded import get

    # the schedulers themselves, not their names (see compute_here)
    scheduler = get_sync if _configured_scheduler() in _SYNC else get
    # each chunk writes its own region of `out`: no lock needed
    da.store(array, out, lock=False, scheduler=scheduler)


def is_lazy(array) -> bool:
    # a dask array exists only once dask.array is imported: a numpy cube (a search's in
    # memory) is told without importing it (~0.2 s; tests/test_startup.py)
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(array, da.Array)


def load_if_small(values: xr.DataArray) -> xr.DataArray:
    """``values`` with numpy data if it is dask-backed and within the in-memory budget."""
    if not is_lazy(values.data) or not fits_budget(values.nbytes):
        return values
    return values.copy(data=compute_here(values.data))
