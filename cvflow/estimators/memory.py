"""What a reducer reads into this process, and how: the one in-memory budget
(:func:`fits_budget`, :func:`load_if_small`, dask config ``cvflow.reduce.in-memory-bytes``) and
dask arrays computed here (:func:`compute_here`, :func:`store_here`, :func:`is_lazy`).

Public: the estimators, the reports and the plots read a lazy cube through these.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Literal

import numpy as np
from ..lazy import xarray as xr

from .. import config
from ..errors import StallError

log = logging.getLogger(__name__)


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


# a worker above this CPU percent is working (as the run loop's watchdog counts it)
IDLE_CPU_PERCENT = 5.0
WAKE_SECONDS = 1.0
SAY_AFTER_SECONDS = 30.0


def on_client(client, collection):
    """``collection`` computed on ``client``'s workers, with a deadline: as the run loop's
    watchdog (:class:`cvflow.execution.loop.Watchdog`), a wait in which no task comes back
    while every worker is idle (config ``cvflow.reduce.stall-seconds``), or no worker is
    connected (``cvflow.reduce.no-worker-seconds``), ends in a StallError that says how many
    tasks it waited on and where the running ones are; the tasks are cancelled."""
    from distributed import futures_of, wait

    stall = float(config.get("cvflow.reduce.stall-seconds"))
    no_worker = float(config.get("cvflow.reduce.no-worker-seconds"))
    computed = client.compute(collection)
    pending = set(futures_of(computed))
    total, last, said = len(pending), time.monotonic(), 0.0
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
            now = time.monotonic()
            if done or _workers_busy(client):
                last = now
                continue
            workers = _workers(client)
            quiet, limit = now - last, (stall if workers else no_worker)
            waiting = (f"{len(pending)} of the reduction's {total} tasks not back, "
                       + (f"{len(workers)} workers idle" if workers else "no worker connected")
                       + f" (scheduler {client.scheduler.address})")
            if quiet > limit:
                key = "stall-seconds" if workers else "no-worker-seconds"
                raise StallError(f"no progress for {quiet:.0f} s: {waiting}; "
                                 f"{_stacks(client, pending)} (config cvflow.reduce.{key})")
            if quiet > SAY_AFTER_SECONDS and now - said > SAY_AFTER_SECONDS:
                log.warning("waiting for %s: no progress for %.0f s (stops after %.0f s)",
                            waiting, quiet, limit)
                said = now
        return client.gather(computed)
    finally:
        if pending:
            client.cancel(list(pending))


def _workers(client) -> dict:
    try:
        return client.scheduler_info().get("workers", {})
    except Exception:  # noqa: BLE001 - a scheduler that does not answer is no progress
        return {}


def _workers_busy(client) -> bool:
    return any(w.get("metrics", {}).get("cpu", 0.0) > IDLE_CPU_PERCENT
               for w in _workers(client).values())


def _stacks(client, pending) -> str:
    """Where the running tasks are (Dask's call stacks), in one line."""
    try:
        stacks = client.call_stack(list(pending))
    except Exception:  # noqa: BLE001
        return "their stacks unknown"
    parts = [f"{key} on {worker}: " + " <- ".join(reversed(
                 [" ".join(str(f).split()) for f in frames][-3:]))
             for worker, tasks in (stacks or {}).items() for key, frames in tasks.items()]
    return ("running: " + " | ".join(parts[:4])) if parts else "no task is running"


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
