"""What a reducer reads into this process, and how: the one in-memory budget
(:func:`fits_budget`, :func:`load_if_small`, dask config ``cvflow.reduce.in-memory-bytes``) and
where dask arrays are computed (:func:`compute_here`, :func:`store_here`, :func:`is_lazy`): on
the workers of the active ``distributed.Client`` when there is one (:func:`active_client`),
else in this process.

Public: the estimators, the reports and the plots read a lazy cube through these.
"""
from __future__ import annotations

import sys

import numpy as np
import xarray as xr

from .. import config


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
_DISTRIBUTED = ("dask.distributed", "distributed")


def _configured_scheduler():
    """Dask's configured scheduler, None when none is or it is a distributed cluster's."""
    import dask

    scheduler = dask.config.get("scheduler", None)
    return None if scheduler in _DISTRIBUTED else scheduler


def active_client():
    """The ``distributed.Client`` the reducers compute on: the current one (``with
    Client(...)``, or the latest made with ``set_as_default``, as Dask itself picks it), unless
    dask's config names another scheduler (``dask.config.set(scheduler="threads")``); else None.

    DESIGN CHOICE: a user holding a Client (a notebook on the cluster that fitted the study,
    ``cvflow report --cluster``) wants the cube reduced where its chunks can be read in
    parallel, by the workers, not in the client's threads. A client made with
    ``set_as_default=False`` (the session's warm cluster a run keeps,
    :func:`cvflow.execution.schedulers.warm_client`) is no one's current client and is not used.
    Without ``distributed`` imported there is no client: nothing is imported to find out.
    """
    if "distributed" not in sys.modules or _configured_scheduler() is not None:
        return None
    from distributed import Client

    try:
        client = Client.current()
    except ValueError:
        return None
    return client if client.status == "running" else None


def _on_client(client, array) -> np.ndarray:
    """``array`` computed by the client's workers, the result gathered here, within config
    ``cvflow.reduce.timeout`` seconds."""
    import dask.distributed

    seconds = config.get("cvflow.reduce.timeout")
    future = client.compute(array)
    try:
        return np.asarray(future.result(timeout=seconds))
    except dask.distributed.TimeoutError:
        raise TimeoutError(f"cluster {client.scheduler.address}: the reduction did not finish "
                           f"within {seconds:g} s (config cvflow.reduce.timeout); are its "
                           "workers up?") from None
    finally:
        future.release()


def compute_here(array):
    """A dask array computed where the reducers compute: on the workers of the active
    ``distributed.Client`` (:func:`active_client`), else in this process (synchronous scheduler
    unless one is configured)."""
    import dask
    from dask.local import get_sync

    client = active_client()
    if client is not None:
        return _on_client(client, array)
    # else respect what the caller set (e.g. a test's scheduler). The synchronous scheduler
    # itself, not its name "sync": dask resolves a name by first looking for a distributed
    # Client, which imports distributed (~0.3 s) into a plain `cvflow report`.
    (data,) = dask.compute(array, scheduler=_configured_scheduler() or get_sync)
    return data


def store_here(array, out: np.ndarray) -> None:
    """Compute the dask ``array`` into the numpy array ``out`` (same shape): chunk by chunk in
    this process, Dask's threads or its synchronous scheduler when that is configured; with an
    active ``distributed.Client``, on its workers, the result gathered into ``out`` (a numpy
    target cannot be written by a cluster's workers: the result is held twice for a moment)."""
    import dask.array as da
    from dask.local import get_sync
    from dask.threaded import get

    client = active_client()
    if client is not None:
        out[...] = _on_client(client, array)
        return
    # the schedulers themselves, not their names (see compute_here)
    scheduler = get_sync if _configured_scheduler() in _SYNC else get
    # each chunk writes its own region of `out`: no lock needed
    da.store(array, out, lock=False, scheduler=scheduler)


def is_lazy(array) -> bool:
    import dask.array as da

    return isinstance(array, da.Array)


def load_if_small(values: xr.DataArray) -> xr.DataArray:
    """``values`` with numpy data if it is dask-backed and within the in-memory budget."""
    if not is_lazy(values.data) or not fits_budget(values.nbytes):
        return values
    return values.copy(data=compute_here(values.data))
