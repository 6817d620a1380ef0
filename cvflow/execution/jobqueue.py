"""SLURM jobs through dask-jobqueue: a profile's ``SLURMCluster`` arguments, and the import of
dask_jobqueue that keeps this process's SIGINT handler (cvflow.execution.schedulers starts the
cluster)."""
from __future__ import annotations

import os
import signal
import sys
import threading


def slurm_kwargs(prof: dict) -> dict:
    """Keyword arguments of ``dask_jobqueue.SLURMCluster`` for a resolved slurm profile."""
    jq = {k: v for k, v in dict(prof.get("jobqueue") or {}).items()}
    for key in ("log_directory", "local_directory", "shared_temp_directory"):
        if jq.get(key):
            jq[key] = os.path.expanduser(os.path.expandvars(str(jq[key])))
    host, port = prof.get("host"), prof.get("dashboard_port")
    worker_args = [str(a) for a in (jq.pop("worker_extra_args", None) or [])]
    scheduler = dict(jq.pop("scheduler_options", None) or {})
    if host:
        scheduler.setdefault("host", host)
        worker_args += ["--host", str(host)]
    if port is not None:
        scheduler.setdefault("dashboard_address", f"{host or ''}:{port}")
    if prof.get("lifetime"):
        worker_args += ["--lifetime", str(prof["lifetime"])]
        if prof.get("lifetime_stagger"):
            worker_args += ["--lifetime-stagger", str(prof["lifetime_stagger"])]
    if prof.get("interface"):
        jq["interface"] = prof["interface"]
    jq["scheduler_options"] = scheduler
    jq["worker_extra_args"] = worker_args
    return jq


def import_jobqueue():
    """``dask_jobqueue.SLURMCluster``, imported keeping this process's SIGINT handler.

    Importing dask_jobqueue sets a SIGINT handler of its own (``dask_jobqueue.runner``), which
    only the main thread may (elsewhere: ValueError): a suite, whose data sets connect from
    threads of their own, imports it first, in the main thread (cvflow.execution.suite_run).
    """
    if "dask_jobqueue" not in sys.modules and threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
        try:
            import dask_jobqueue  # noqa: F401
        finally:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    from dask_jobqueue import SLURMCluster
    return SLURMCluster
