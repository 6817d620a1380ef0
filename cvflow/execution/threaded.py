"""The threads route's scheduler in this process, behind the few client calls the one loop makes.

A short study on the ``threads`` route (no dashboard asked or needed) runs its tasks on a pool
of this process's threads, as Dask's threaded scheduler would (:class:`ThreadedClient` says why
not through it): no ``dask`` or ``distributed`` import (~0.1 s and ~0.2 s), no scheduler to
start or close, nothing at interpreter exit. The loop (:mod:`.loop`) sees the
same calls as on a ``distributed.Client``: ``submit`` returns a future whose done callbacks,
``result(timeout)``, ``cancel`` and ``release`` mean what they mean there; ``scheduler_info``
reports this process's CPU use as one worker's (the loop's watchdog reads it), and
``call_stack`` the running tasks' stacks. A study long enough to watch runs on distributed's
in-process scheduler instead, which serves the dashboard (:func:`.schedulers.connect`).

The task bodies (:mod:`.tasks`) wait for the store's creation on a named event: here a
``threading.Event`` found by its name (:func:`event`), there a ``distributed.Event``.
"""
from __future__ import annotations

import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import CancelledError, Executor, Future
from typing import Callable

from .fit_gate import FitGate, serve

log = logging.getLogger(__name__)

WORKER = "threads"                   # the one worker scheduler_info reports
_EVENTS: dict[str, "LocalEvent"] = {}
_EVENTS_LOCK = threading.Lock()


class LocalEvent:
    """A named ``threading.Event`` the tasks of this process find by name (:func:`event`)."""

    def __init__(self, name: str):
        self.name, self._event = name, threading.Event()
        with _EVENTS_LOCK:
            _EVENTS[name] = self

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def clear(self) -> None:
        """Forgotten, as distributed's scheduler forgets a cleared event."""
        with _EVENTS_LOCK:
            _EVENTS.pop(self.name, None)


def event(name: str) -> LocalEvent | None:
    """The event of this process named ``name``, or None (then it is distributed's)."""
    with _EVENTS_LOCK:
        return _EVENTS.get(name)


class ThreadedFuture:
    """One submitted task: pending, then finished, error or cancelled."""

    def __init__(self, key: str):
        self.key, self.status = key, "pending"
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable] = []
        self._value: object = None
        self._error: BaseException | None = None
        self.thread: int | None = None        # the thread running it, while it runs

    def _finish(self, status: str, value=None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self.status, self._value, self._error = status, value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None):
        if not self._done.wait(timeout):
            raise TimeoutError(f"task {self.key} not finished within {timeout} s")
        if self.status == "cancelled":
            raise CancelledError(self.key)
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        """Cancelled unless running or done: a running fit cannot be stopped (it ends; the
        task's writes are fenced by the store's lock)."""
        if self.thread is None:
            self._finish("cancelled")

    def release(self) -> None:
        """Nothing is held for it elsewhere."""


class _Task:
    """A submitted call, opaque to Dask's graph traversal (its arguments are no tasks)."""

    def __init__(self, future: ThreadedFuture, fn: Callable, args: tuple, kwargs: dict):
        self.future, self.fn, self.args, self.kwargs = future, fn, args, kwargs


def _execute(task: _Task) -> None:
    """Run one task in a pool thread and finish its future (its exception kept on it)."""
    future = task.future
    if future.done():                      # cancelled while queued
        return
    future.thread = threading.get_ident()
    try:
        value = task.fn(*task.args, **task.kwargs)
    except Exception as exc:  # noqa: BLE001 - raised where the loop reads the result
        future._finish("error", error=exc)
    else:
        future._finish("finished", value)
    finally:
        future.thread = None


class FitThreads(Executor):
    """The pool of threads the fits run in:
    ``workers`` daemon threads, so that a fit that never returns does not hold the process at
    exit once the run has stopped and said so (StallError, Ctrl-C). Their fits go through one
    :class:`cvflow.execution.fit_gate.FitGate` (``gate``): side by side where that fits faster
    than one at a time, its tasks one at a time otherwise."""

    # DESIGN CHOICE: concurrent.futures.ThreadPoolExecutor joins its threads when the
    # interpreter exits, so a stuck fit on the threads route hung `cvflow run` for ever after it
    # printed its StallError (tests/test_execution.py::test_a_stuck_run_stops_says_where_and_
    # releases_its_lock, whenever auto picked threads); its threads cannot be made daemons
    # through its public API, so the few lines of a pool are ours

    def __init__(self, workers: int, name: str = "cvflow-fit"):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._max_workers = workers
        self.gate = FitGate(workers)
        for i in range(workers):
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True).start()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._closed:
            raise RuntimeError("cannot submit to the fit threads after shutdown")
        future: Future = Future()
        self._queue.put((future, fn, args, kwargs))
        return future

    def _work(self) -> None:
        serve(self.gate)
        while (item := self._queue.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                with self.gate.task():
                    result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the caller reads it from the future
                future.set_exception(exc)
            else:
                future.set_result(result)
        self._queue.put(None)              # wake the next thread: every one ends

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more tasks; queued ones cancelled with ``cancel_futures``; running ones end in
        their threads (nothing joins them: ``wait`` is accepted for the Executor interface)."""
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        self._queue.put(None)


class ThreadedClient:
    """The client calls the loop makes, on a pool of ``workers`` threads of this process.

    A submitted task runs in the pool as soon as a thread is free; a task's future arguments
    (the study's data) are resolved when it is submitted.
    """

    # DESIGN CHOICE: the tasks run on the pool itself, not through `dask.threaded.get`. The
    # loop's tasks are independent (no task reads another's result), and on such a graph Dask's
    # threaded scheduler only hands each task to this pool, which it still does here; but
    # `import dask` costs 50-100 ms and imports jinja2 (dask.widgets), more than a small
    # study's fits (issue 41: a SearchCV without a store pays for what GridSearchCV does,
    # DESIGN.md sections 3-4: a default never slower than the GridSearchCV it replaces). What
    # the route guarantees is unchanged: the same loop submits the same blocks and records
    # what comes back (a fit that raises recorded failed, Ctrl-C, the watchdog's deadline).

    dashboard_link = ""

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self.pool = FitThreads(self.workers)
        self._futures: dict[str, ThreadedFuture] = {}
        self._metadata: dict = {}
        self._keys = itertools.count()
        self._cpu = (time.process_time(), time.monotonic())

    # --- tasks ----------------------------------------------------------------------------

    def submit(self, fn: Callable, *args, key: str | None = None, pure: bool = False,
               **kwargs) -> ThreadedFuture:
        future = ThreadedFuture(key or f"{getattr(fn, '__name__', 'task')}-{next(self._keys)}")
        args = tuple(a.result() if isinstance(a, ThreadedFuture) else a for a in args)
        self._futures[future.key] = future
        future.add_done_callback(lambda f: self._futures.pop(f.key, None))
        try:
            self.pool.submit(_execute, _Task(future, fn, args, kwargs))
        except RuntimeError as exc:          # closed
            future._finish("error", error=exc)
        return future

    def cancel(self, futures) -> None:
        for future in futures:
            future.cancel()

    # --- what the loop's watchdog asks ----------------------------------------------------

    def scheduler_info(self) -> dict:
        """This process as one worker: its CPU use since the last call, in percent."""
        cpu, wall = time.process_time(), time.monotonic()
        (cpu0, wall0), self._cpu = self._cpu, (cpu, wall)
        percent = 100.0 * (cpu - cpu0) / max(wall - wall0, 1e-9)
        return {"workers": {WORKER: {"name": WORKER, "metrics": {"cpu": percent}}}}

    def call_stack(self, futures) -> dict:
        """The running tasks' stacks (the frames' text, innermost last), as distributed's."""
        frames = sys._current_frames()
        out = {}
        for future in futures:
            thread = getattr(future, "thread", None)
            if thread in frames:
                out[future.key] = [line.strip() for line in
                                   traceback.format_stack(frames[thread])]
        return {WORKER: out} if out else {}

    def set_metadata(self, keys, value) -> None:
        self._metadata[repr(keys)] = value

    def get_metadata(self, keys, default=None):
        return self._metadata.get(repr(keys), default)

    def event(self, name: str) -> LocalEvent:
        return LocalEvent(name)

    def close(self) -> None:
        """Queued tasks cancelled; running fits end in their threads, nothing waits for them."""
        for future in list(self._futures.values()):
            future.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "ThreadedClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
