"""Processes a learner's fit leaves behind in the worker processes of a run's local cluster.

A fit may fork (a library that starts its own workers, a learner that daemonises a helper):
its processes outlive the fit, and when the cluster closes its worker processes they are
reparented to init and live on (issue 32: four ~175 MB copies of workers, alive 5 minutes
after ``Study.run`` returned). The local clusters cvflow starts tag their worker processes with
a token in their environment at start (distributed's ``pre-spawn-environ``: set before each
worker is spawned, so it is in the environment every descendant starts from, forked or
executed). When a run ends, every process carrying its cluster's token is ended (SIGKILL, with
a warning naming how many) but the worker processes themselves (a warm cluster kept for the
session keeps them) and what this process started otherwise (a user's subprocess and its
children): so the descendants of the workers, and the orphans of workers that died.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from typing import Iterator

log = logging.getLogger(__name__)

ENV = "CVFLOW_CLUSTER_TOKEN"
_RUNS: dict[str, int] = {}          # token -> runs using its (warm) cluster now
_RUNS_LOCK = threading.Lock()


@contextlib.contextmanager
def tagged() -> Iterator[str]:
    """While open, worker processes started by distributed's nannies carry a new token (start
    the cluster inside); yields it."""
    import dask.config

    token = uuid.uuid4().hex
    # distributed prefers a variable already in this process's environment to the config's
    # value, and its nannies set theirs here before each spawn (a restart after the start
    # too): one left by an earlier cluster, or inherited from a parent cvflow process, would
    # tag these workers with a token no run ends (their forks lived on)
    os.environ.pop(ENV, None)
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{ENV}": token}):
            yield token
    finally:
        os.environ.pop(ENV, None)


@contextlib.contextmanager
def ended_at_close() -> Iterator[str]:
    """:func:`tagged`, and on exit (after the cluster closed: enter this before starting it)
    the processes still carrying the token are ended."""
    with tagged() as token:
        try:
            yield token
        finally:
            end(token)


@contextlib.contextmanager
def ended_after_run(token: str | None) -> Iterator[None]:
    """For a run on a warm cluster (``token``: its tag): once the last run using it ends, what
    learners' fits left running in (or beside) its worker processes is ended."""
    if token is None:
        yield
        return
    with _RUNS_LOCK:
        _RUNS[token] = _RUNS.get(token, 0) + 1
    try:
        yield
    finally:
        with _RUNS_LOCK:
            _RUNS[token] -= 1
            last = _RUNS[token] == 0
        if last:
            end(token)


def end(token: str) -> list[int]:
    """SIGKILL every process carrying ``token`` but this process and its own children (the
    worker processes of a local cluster are: a warm cluster keeps them); their pids."""
    try:
        import psutil
    except ImportError:               # pragma: no cover - psutil comes with distributed
        return []
    me = psutil.Process()
    # this process's own children are spared (the workers, a user's subprocess), never their
    # descendants: only what a worker started carries the token, and a user's subprocess's
    # children do not
    spared = {me.pid}
    with contextlib.suppress(psutil.Error):
        spared |= {child.pid for child in me.children()}
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in spared:
            continue
        try:
            if proc.environ().get(ENV) == token:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=5)
    if found:
        log.warning("ended %d process(es) that learners' fits left running in the cluster's "
                    "worker processes (pids %s)", len(found),
                    ", ".join(str(p.pid) for p in found[:10]) + (" ..." if len(found) > 10
                                                                else ""))
    return [p.pid for p in found]
