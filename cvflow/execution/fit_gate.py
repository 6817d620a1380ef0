"""How many fits the threads route runs at once: one a thread, until its first fits side by
side show that they hold the GIL; then one at a time.

Two fits of a learner that holds the GIL (an lbfgs ``LogisticRegression`` on a few hundred
rows: Python between short numpy calls) run no faster on two threads than on one, and slower:
each call that releases the GIL hands it to the other thread, which keeps it until the switch
interval (5 ms) makes it let go, so the threads wait on each other (a GIL convoy). The fits of
a learner that releases the GIL (tree builders, libsvm, BLAS) run side by side, twice as fast
on two free cores. Which kind a learner is shows in its fits: the time a fit's thread neither
ran (its CPU time) nor waited for a core (the kernel's run-queue delay,
``/proc/thread-self/schedstat``) is time it slept, on the GIL. :class:`FitGate` lets every
thread fit until ``2 x threads`` fits have run beside another; if they slept more than
:data:`GIL_BOUND` of their time, the rest of the run fits one at a time, as
``GridSearchCV(n_jobs=None)`` does. Where the kernel does not give the run-queue delay, the
threads stay side by side (a busy machine's waits for a core would read as the GIL's).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

log = logging.getLogger(__name__)

# DESIGN CHOICE: the share of its wall time a fit beside another may sleep (on the GIL) for the
# threads to stay side by side. Measured on 2 cores, fits of issue 41's cases beside another
# (schedstat, 8 searches each): a decision tree sleeps 0.00-0.06 of its time (one outlier 0.45
# in 16), StandardScaler + LogisticRegression up to 0.39 at load 9-18, where waits for a core
# hide most of its waits for the GIL. One fit at a time: b4 240 ms against 384 ms a search
# (load 18), the tree 229 ms against 197 ms (load 16: its two threads pay even there).
GIL_BOUND = 0.3
# DESIGN CHOICE: a fit kept waiting by the gate goes after this many times the longest fit seen
# (at least GATE_PATIENCE seconds): the gate saves a convoy, it must never wait on a fit that
# does not end (the run's watchdog names that one)
GATE_PATIENCE = 1.0
PATIENCE_FACTOR = 3.0
SCHEDSTAT = "/proc/thread-self/schedstat"


def _run_delay() -> float | None:
    """Seconds this thread has waited for a core (Linux), or None."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class FitGate:
    """The fits of a pool of ``threads`` threads: :meth:`fit` around each one."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self.limit = self.threads                 # fits at once
        self.decided = self.threads == 1 or _run_delay() is None
        self.slept = 0.0                          # share of the measured fits' wall time
        self._cond = threading.Condition()
        self._running = 0
        self._measured = 0
        self._slept = self._wall = 0.0
        self._longest = 0.0

    @contextlib.contextmanager
    def fit(self, cells=None) -> Iterator[None]:
        """Entered around a fit (``cells``, unused, as :func:`cvflow.fitting.block.fit_block`
        passes them to its ``watch``)."""
        with self._cond:
            if self._running >= self.limit:
                patience = max(GATE_PATIENCE, PATIENCE_FACTOR * self._longest)
                self._cond.wait_for(lambda: self._running < self.limit, timeout=patience)
            self._running += 1
            beside = self._running > 1
        measure = not self.decided
        wall, cpu = time.perf_counter(), time.thread_time()
        delay = _run_delay() if measure else None
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            if delay is not None:
                delay = (_run_delay() or delay) - delay
            with self._cond:
                self._running -= 1
                self._longest = max(self._longest, wall)
                if delay is not None and not self.decided and (beside or self._running):
                    self._note(wall, wall - cpu - delay)
                self._cond.notify()

    def _note(self, wall: float, slept: float) -> None:
        """A fit that ran beside another: ``slept`` of its ``wall`` seconds asleep."""
        self._measured += 1
        self._wall += wall
        self._slept += max(slept, 0.0)
        if self._measured >= 2 * self.threads:
            self.decided = True
            self.slept = self._slept / max(self._wall, 1e-9)
            if self.slept > GIL_BOUND:
                self.limit = 1
            log.debug("fits beside another slept %.2f of their time: %d at once", self.slept,
                      self.limit)


_HERE = threading.local()


def gate_here() -> FitGate | None:
    """The gate of the pool running this thread (:class:`cvflow.execution.threaded.FitThreads`),
    or None (a Dask worker's thread, the client's)."""
    return getattr(_HERE, "gate", None)


def serve(gate: FitGate) -> None:
    """This thread's fits go through ``gate`` (called by each thread of the pool)."""
    _HERE.gate = gate
