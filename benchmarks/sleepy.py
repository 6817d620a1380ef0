"""A learner whose fits wait (sleep) in proportion to the training rows, then fit a ridge:
`benchmarks/suite_graph.py --case tail` uses it so that a data set's work is known and the
workers' idle time shows whatever the machine's load (a sleeping fit uses no CPU)."""
from __future__ import annotations

import time

from sklearn.linear_model import Ridge


class SleepyRidge(Ridge):
    """Ridge whose fit first sleeps ``per_row`` seconds per training row."""

    def __init__(self, alpha=1.0, per_row=1e-4):
        super().__init__(alpha=alpha)
        self.per_row = per_row

    def fit(self, X, y, sample_weight=None):
        time.sleep(self.per_row * len(X))
        return super().fit(X, y, sample_weight=sample_weight)
