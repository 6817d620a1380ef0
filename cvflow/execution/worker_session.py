"""Worker processes of cvflow's local cluster out of reach of the terminal's signals.

Ctrl-C in a terminal (and a closed terminal's SIGHUP) reaches every process of its foreground
process group: worker processes spawned by distributed's nannies were in the client's, so each
printed its own ``KeyboardInterrupt`` traceback while the client was stopping them (issue 44).
Two halves keep them out, the client alone gets the signal and closes its cluster:

- **in the client**, the local clusters run on :func:`spawning_loop`, an IO loop in a thread
  that blocks SIGINT and SIGHUP. A process inherits the signal mask of the thread that starts
  it, and the nannies spawn their workers from that loop's threads: a worker starts (Python
  and distributed imported, ~1-10 s under load) with both signals held pending, never raised;
- **in the worker**, this module is a nanny ``preload`` (:func:`cvflow.execution.schedulers._local`):
  its ``dask_setup`` puts the worker in a session of its own (``os.setsid``), drops the
  signals held meanwhile (they were the terminal's, meant for the client) and unblocks them.

``tests/test_signals.py`` fails if a worker shares the client's session, or prints a traceback
when the terminal's process group gets Ctrl-C during the cluster's start or the fits.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading

TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP)
LOOP_START_SECONDS = 10.0

_LOOP: dict = {}
_LOOP_LOCK = threading.Lock()


def spawning_loop():
    """The tornado IO loop cvflow's local clusters and their clients run on (one per process,
    started on first use, a daemon thread): worker processes its nannies spawn inherit its
    thread's mask, the terminal's signals blocked."""
    from multiprocessing import resource_tracker

    from tornado.ioloop import IOLoop

    with _LOOP_LOCK:
        if _LOOP and _LOOP["thread"].is_alive():
            return _LOOP["loop"]
        ready = threading.Event()

        async def serve() -> None:
            # multiprocessing's resource tracker, started by the first spawn, unblocks SIGINT
            # in the spawning thread after starting itself: start it first, then block again
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
            _LOOP["loop"] = IOLoop.current()
            ready.set()
            await asyncio.Event().wait()          # for the life of the process

        thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True,
                                  name="cvflow-cluster-loop")
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
        try:
            thread.start()                        # the new thread inherits the mask
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if not ready.wait(LOOP_START_SECONDS):
            raise RuntimeError(f"the local cluster's IO loop did not start within "
                               f"{LOOP_START_SECONDS:g} s")
        _LOOP["thread"] = thread
        return _LOOP["loop"]


def own_session() -> None:
    """In a worker process: leave the terminal's session, drop the terminal's signals held
    since the start, unblock them."""
    with contextlib.suppress(OSError):        # already a group leader (not a spawned worker)
        os.setsid()
    while signal.sigtimedwait(TERMINAL_SIGNALS, 0) is not None:
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TERMINAL_SIGNALS)


def quiet_closed_clients() -> None:
    """In a worker process: the client a worker made for its tasks (distributed's
    ``get_client``: cvflow's store event, fit timeouts) is collected after the worker's loop
    closed, and its ``__del__`` printed ``Exception ignored ... RuntimeError: IOLoop is
    closed`` on the terminal the worker shares with its client (a run's stop, issue 44). That
    message alone is dropped; every other goes to Python's hook as before."""
    previous = sys.unraisablehook

    def hook(info) -> None:
        if (isinstance(info.exc_value, RuntimeError) and str(info.exc_value) == "IOLoop is closed"
                and getattr(info.object, "__qualname__", "") == "Client.__del__"):
            return
        previous(info)

    sys.unraisablehook = hook


def dask_setup(worker) -> None:                # distributed's preload interface
    own_session()
    quiet_closed_clients()
