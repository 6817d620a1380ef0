"""How many fits the threads route runs at once: decided by the study's own fits, one at a
time first, then side by side, kept side by side only where that fits faster.

Two fits of a learner that holds the GIL (an lbfgs ``LogisticRegression`` on a few hundred
rows: Python between short numpy calls) run no faster on two threads than on one, and slower:
each call that releases the GIL hands it to the other thread, which keeps it until the switch
interval (5 ms) makes it let go, so the threads wait on each other (a GIL convoy). The fits of
a learner that releases the GIL (tree builders, libsvm, BLAS) run side by side, twice as fast
on two free cores. Which kind a learner is shows in its fits' throughput: :class:`FitGate`
runs the study's first fit alone (a first fit the run's probe timed at :data:`LONG_FIT` or
more stands for it), then lets every thread fit; once ``threads`` fits that ran beside another
(or one reading :data:`SLOWER`) can be set against the same param's time alone, the pool fits
``threads / (their median wall over alone)`` times as many fits a second as one thread. Below
:data:`PAYS`, the rest of the run fits one at a time, as ``GridSearchCV(n_jobs=None)`` does,
each task of the pool's in turn (:meth:`FitGate.task`: one thread fits while the other waits,
not two taking turns fit by fit). Each fit's wait for a core (the kernel's run-queue delay) is
taken out of its time: other processes' doing.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

log = logging.getLogger(__name__)

# DESIGN CHOICE: the throughput side by side over one at a time below which the pool fits one
# at a time. A learner holding the GIL reads about 1 (or below: the threads convoy), one that
# releases it about the thread count; a margin, since one at a time costs a learner that
# gains little only what it gains, while side by side may cost a convoy
PAYS = 1.25
# DESIGN CHOICE: a first fit side by side reading slower than one at a time decides alone (each
# fit side by side of a learner holding the GIL is a convoy's: b4's first read 0.4-0.8 in fresh
# processes on 2 cores, the tree's 1.4-2.0); any other read waits for ``threads`` of them, side
# by side meanwhile (so a read for side by side would gain nothing by deciding early)
SLOWER = 1.0
# DESIGN CHOICE: a fit kept waiting by the gate goes after this many times the longest fit (or
# task, once one at a time) seen, at least GATE_PATIENCE seconds: the gate saves a convoy, it
# must never wait on a fit that does not end (the run's watchdog names that one)
GATE_PATIENCE = 1.0
PATIENCE_FACTOR = 3.0
# DESIGN CHOICE: a first fit timed by the run's probe (cvflow.execution.run._probe) at least
# this long stands for the fits timed alone: its first-call costs (imports, caches: ~2-3 ms,
# b4's probe fit ~5 ms against 2-2.5 ms later) are then a small share of it, and the pool's
# threads need not wait one fit each for it (SVC on digits, 66 ms fits: 0.1 s of a 1.3 s search)
LONG_FIT = 0.02
SCHEDSTAT = "/proc/thread-self/schedstat"


def _run_delay() -> float:
    """Seconds this thread has waited for a core (Linux), else 0.0."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class FitGate:
    """The fits of a pool of ``threads`` threads: :meth:`task` around each of the pool's
    tasks, :meth:`fit` around each fit (``cells``: the (param, split) pairs it fits, the params
    numbered in the study)."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self.limit = 1                            # fits at once: one while timing one alone
        self.decided = self.threads == 1
        self.speedup: float | None = None         # fits a second side by side over alone
        self._beside = False                      # past the fits timed alone
        self._cond = threading.Condition()
        self._running = 0                         # fits
        self._tasks = 0
        self._held = threading.local()            # a task fitting alone: its fits pass
        self._alone: dict[tuple, float] = {}      # params -> fastest wall of a fit alone
        self._ratios: list[float] = []            # beside: wall over the same params' alone
        self._longest = self._longest_task = 0.0

    def expect(self, key: tuple, seconds: float) -> None:
        """A fit of the params ``key`` took ``seconds`` alone before the run (the probe's): at
        :data:`LONG_FIT` or more, the threads fit side by side from the start, set against it."""
        with self._cond:
            if self.decided or self._beside or seconds < LONG_FIT:
                return
            self._alone[key] = seconds
            self._beside, self.limit = True, self.threads
            self._cond.notify_all()

    def _patience(self, longest: float) -> float:
        return max(GATE_PATIENCE, PATIENCE_FACTOR * longest)

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Entered around each task of the pool: once the fits run one at a time, a task waits
        for the one running to end, and then fits without waiting fit by fit."""
        held = False
        with self._cond:
            if self.decided and self.limit < self.threads:
                self._cond.wait_for(lambda: self._tasks < self.limit,
                                    timeout=self._patience(self._longest_task))
                held = True
            self._tasks += 1
        self._held.on = held
        start = time.perf_counter()
        try:
            yield
        finally:
            self._held.on = False
            with self._cond:
                self._tasks -= 1
                self._longest_task = max(self._longest_task, time.perf_counter() - start)
                self._cond.notify_all()

    @contextlib.contextmanager
    def fit(self, cells=()) -> Iterator[None]:
        """Entered around a fit of ``cells`` (:func:`cvflow.fitting.block.fit_block`'s watch,
        the params numbered in the study)."""
        with self._cond:
            if not getattr(self._held, "on", False) and self._running >= self.limit:
                self._cond.wait_for(lambda: self._running < self.limit,
                                    timeout=self._patience(self._longest))
            self._running += 1
            beside = self._beside and self._running > 1
            measured = not self.decided
        delay = _run_delay() if measured else 0.0
        start = time.perf_counter()
        try:
            yield
        finally:
            wall = time.perf_counter() - start
            if measured:
                # the time other processes took its core from it is not the threads' doing
                delay = _run_delay() - delay
            with self._cond:
                self._running -= 1
                self._longest = max(self._longest, wall)
                # a wait read past the fit's own time is schedstat's accounting, not the fit's
                if measured and not self.decided and delay < 0.9 * wall:
                    key = tuple(sorted({h for h, _ in cells}))
                    self._note(key, wall - delay, beside=beside and self._running > 0,
                               alone=not beside and self._running == 0)
                self._cond.notify_all()

    def _note(self, key: tuple, wall: float, *, beside: bool, alone: bool) -> None:
        """A fit of the params ``key`` that took ``wall`` seconds: ``alone`` (no other fit
        while it ran), or ``beside`` another from its start to its end, or neither."""
        if alone and not self._beside:
            # DESIGN CHOICE: one fit alone: the other threads' first fits are of the same first
            # param (blocks run params within a split), so they set against it at once; a
            # second fit alone cost the tree search one fit of its two-thread time
            self._alone[key] = wall
            self._beside, self.limit = True, self.threads
        elif beside and key in self._alone:
            self._ratios.append(wall / max(self._alone[key], 1e-9))
            speedup = self.threads / _median(self._ratios)
            if len(self._ratios) >= self.threads or speedup < SLOWER:
                self.decided, self.speedup = True, speedup
                if speedup < PAYS:
                    self.limit = 1
                log.debug("fits side by side: %.2f times as many a second as alone; %d at "
                          "once", self.speedup, self.limit)


def _median(values: list[float]) -> float:
    # not statistics.median: its import (fractions, decimal) costs a search's import ~1.5 ms
    ordered, mid = sorted(values), len(values) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


_HERE = threading.local()


def gate_here() -> FitGate | None:
    """The gate of the pool running this thread (:class:`cvflow.execution.threaded.FitThreads`),
    or None (a Dask worker's thread, the client's)."""
    return getattr(_HERE, "gate", None)


def serve(gate: FitGate) -> None:
    """This thread's fits go through ``gate`` (called by each thread of the pool)."""
    _HERE.gate = gate
