"""Stopping a run on Ctrl-C, SIGTERM or a closed terminal (SIGHUP), cleanly and in one line.

While :func:`stoppable` is open (around a run, in the main thread), the three signals stop the
run the way Ctrl-C does: a ``KeyboardInterrupt`` raised in the main thread; the run's
``finally`` blocks then cancel its tasks, write what finished and release the store's lock, and a
second signal meanwhile does not cut them short (it is noted, and raised only if the run goes on;
a third is raised at once). Python cannot raise
an exception out of a destructor or a callback it runs for the garbage collector: a Ctrl-C that
lands there was printed as ``Exception ignored in ... KeyboardInterrupt`` and lost, the script
went on and exited 0 (issue 44). Such an interrupt is noted here instead (``sys.unraisablehook``)
and raised at the next point the run checks (:func:`check`: the loop's every wake-up) or when the
block ends. Handlers a caller installed for SIGTERM or SIGHUP are kept, and nothing is installed
outside the main thread (Python delivers signals there only).
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                if hasattr(signal, name))

_state = {"depth": 0, "raised": False, "noted": None}
# set by a suite stopping (cvflow.execution.suite_run): the runs in its other threads raise a
# KeyboardInterrupt at their next check (the signal reached the main thread only)
_STOP = threading.Event()


def _handler(signum, frame) -> None:
    name = signal.Signals(signum).name
    if _state["raised"] and _state["noted"] is None:
        # the run is stopping (its finally blocks release the lock): a second signal is noted;
        # raised by check() should the first have been caught somewhere; a third is raised
        _state["noted"] = name
        return
    _state.update(raised=True, noted=None)
    raise KeyboardInterrupt(name)


def _ours(signum: int) -> bool:
    """Whether ``signum``'s handler is Python's default (the caller has not chosen one)."""
    current = signal.getsignal(signum)
    if signum == signal.SIGINT:
        return current is signal.default_int_handler
    return current in (signal.SIG_DFL, None)


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP stop the code inside with a KeyboardInterrupt (see the
    module's docstring); nested blocks share the outermost one's handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield                            # signals reach the main thread only
        check()
        return
    if _state["depth"]:
        _state["depth"] += 1
        try:
            yield
            check()
        finally:
            _state["depth"] -= 1
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS if _ours(s)}
    unraisable = sys.unraisablehook

    def hook(info) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt) or (
                info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt)):
            # raised in a destructor, and lost: check() raises it again
            _state.update(raised=False, noted=_state["noted"] or "SIGINT")
            return
        unraisable(info)

    _state.update(depth=1, raised=False, noted=None)
    sys.unraisablehook = hook
    for s in previous:
        signal.signal(s, _handler)
    try:
        yield
        check()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sys.unraisablehook = unraisable
        _state.update(depth=0, raised=False, noted=None)


@contextlib.contextmanager
def threads_stoppable() -> Iterator[threading.Event]:
    """While open, setting the yielded event stops the runs in threads other than the main one
    (:func:`check` raises a KeyboardInterrupt there); cleared when it closes."""
    _STOP.clear()
    try:
        yield _STOP
    finally:
        _STOP.clear()


def check() -> None:
    """Raise the KeyboardInterrupt of a signal that came while Python could not raise it (and,
    outside the main thread, of a suite stopping: :func:`threads_stoppable`)."""
    if _STOP.is_set() and threading.current_thread() is not threading.main_thread():
        raise KeyboardInterrupt("the suite stopped")
    noted = _state["noted"]
    if noted:
        _state.update(raised=True, noted=None)
        raise KeyboardInterrupt(noted)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """The three signals are ignored inside (cleaning up after a run stopped: closing its
    worker processes within their deadlines must not be cut short)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in previous:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def held() -> Iterator[list[str]]:
    """The three signals are noted, not raised, inside (the names yielded, in order): for a
    step that must not be cut in the middle (a cluster starting: cut, it could no longer be
    closed); the caller undoes the step and raises when one came."""
    noted: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS
                if _ours(s) or signal.getsignal(s) is _handler}
    for s in previous:
        signal.signal(s, lambda signum, frame: noted.append(signal.Signals(signum).name))
    try:
        yield noted
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
