"""A ridge regressor that appends one line per fit to a log file (counts fits on any worker)."""
from __future__ import annotations

import os

from sklearn.linear_model import Ridge


class CountingRidge(Ridge):
    """Ridge whose ``fit`` appends ``alpha`` and the training size to the file ``log``
    (the study's fits; the trial fit before a run, :mod:`cvflow.fitting.trial`, is left out)."""

    def __init__(self, alpha=1.0, fit_intercept=True, log=None):
        super().__init__(alpha=alpha, fit_intercept=fit_intercept)
        self.log = log

    def fit(self, X, y, sample_weight=None):
        from cvflow.fitting.trial import in_trial

        if self.log and not in_trial():
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{self.alpha!r} {len(y)}\n".encode())
            finally:
                os.close(fd)
        return super().fit(X, y, sample_weight=sample_weight)


class SleepyCountingRidge(CountingRidge):
    """CountingRidge that also sleeps ``delay`` seconds per fit (a known lower bound on cost)."""

    def __init__(self, alpha=1.0, fit_intercept=True, log=None, delay=0.005):
        super().__init__(alpha=alpha, fit_intercept=fit_intercept, log=log)
        self.delay = delay

    def fit(self, X, y, sample_weight=None):
        import time

        time.sleep(self.delay)
        return super().fit(X, y, sample_weight=sample_weight)


class OtherCountingRidge(CountingRidge):
    """The same learner under another dotted path (a changed ``estimator``)."""


class Clock:
    """A fake ``time.perf_counter``: advances only when a :class:`TickingRidge` fits (or when
    told), so timings are counted work, whatever the machine's load."""

    now = 0.0

    @classmethod
    def read(cls) -> float:
        return cls.now

    @classmethod
    def tick(cls, seconds: float) -> None:
        cls.now += seconds


class TickingRidge(Ridge):
    """Ridge whose ``fit`` costs exactly ``delay`` seconds on :class:`Clock` (no sleeping)."""

    def __init__(self, alpha=1.0, delay=0.0):
        super().__init__(alpha=alpha)
        self.delay = delay

    def fit(self, X, y, sample_weight=None):
        Clock.tick(self.delay)
        return super().fit(X, y, sample_weight=sample_weight)
