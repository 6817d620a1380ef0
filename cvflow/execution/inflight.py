"""What this process is fitting, written where the next run on the store finds it (issue 41
item 4).

On the in-process route (``threads``, and the learners' trial and timing fits under ``auto``) a
fit that ends the process (``os._exit``, a segfault, the kernel's OOM kill) ends the run, as it
ends ``GridSearchCV``. So before each block (and each probe) fitted in this process, the run's
lock record names it (:meth:`cvflow.store.lock.RunLock.mark`, written at once); the next run
taking that dead run's lock over reads it, says in one line which block and params were
running, and fits in worker processes, where such a fit is recorded failed
(:func:`cvflow.execution.run.run`). On worker processes nothing is recorded: no sink is set
there.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from typing import Callable, Iterator

_LOCK = threading.Lock()
_SINKS: list[Callable[[list | None], None]] = []     # the runs of this process (their locks)
_RUNNING: dict[int, dict] = {}                        # entry id -> what it fits
_IDS = itertools.count()


@contextlib.contextmanager
def recording(sink: Callable[[list | None], None]) -> Iterator[None]:
    """While open, what :func:`fitting` blocks fit in this process is given to ``sink``."""
    with _LOCK:
        _SINKS.append(sink)
    try:
        yield
    finally:
        with _LOCK:
            _SINKS.remove(sink)


def _publish() -> None:
    running = list(_RUNNING.values()) or None
    for sink in list(_SINKS):
        sink(running)


@contextlib.contextmanager
def fitting(what: dict) -> Iterator[None]:
    """Around fits run in this process: ``what`` (a small JSON record: ``block``, ``params``)
    is recorded before they start and forgotten when they end, however they end but with the
    process."""
    if not _SINKS:
        yield
        return
    key = next(_IDS)
    with _LOCK:
        _RUNNING[key] = what
        _publish()
    for stream in (sys.stdout, sys.stderr):   # what was printed before the fit reaches the user
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        yield
    finally:
        with _LOCK:
            _RUNNING.pop(key, None)
            _publish()


def block_record(params: list, params_slice: slice, splits_slice: slice) -> dict:
    """The record of a block: its params and splits, and each param's learner and settings."""
    return {"block": f"params {params_slice.start}-{params_slice.stop - 1} x splits "
                     f"{splits_slice.start}-{splits_slice.stop - 1}",
            "params": [f"{p.learner} {dict(p.hyper)}" for p in params]}


def crash_line(store: str, record: dict) -> str:
    """The one line the next run says about a run that ended in the middle of fits."""
    running = record.get("running") or []
    what = "; ".join(f"{r.get('block', '?')} ({', '.join(map(str, r.get('params', [])))})"
                     for r in running if isinstance(r, dict))
    return (f"store {store}: the last run (pid {record.get('pid', '?')} on "
            f"{record.get('host', '?')}) ended while fitting {what} in its process; this run "
            "fits every param in worker processes (crash isolation), where a fit that ends its "
            "process is recorded failed")
