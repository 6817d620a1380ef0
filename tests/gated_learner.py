"""A learner whose fits on data sets of ``gated_features`` columns wait (at most 300 s) for a
file to exist: a test holds one data set of a suite running, in a fresh ``cvflow run`` process,
while it looks at the suite's page and status, then lets it finish."""
from __future__ import annotations

import os
import time

from sklearn.linear_model import Ridge

GATE_SECONDS = 300.0


class GatedRidge(Ridge):
    """Ridge whose fits on X with ``gated_features`` columns wait for the file ``gate``."""

    def __init__(self, alpha=1.0, fit_intercept=True, gate="", gated_features=-1):
        super().__init__(alpha=alpha, fit_intercept=fit_intercept)
        self.gate = gate
        self.gated_features = gated_features

    def fit(self, X, y, sample_weight=None):
        if X.shape[1] == self.gated_features:
            deadline = time.monotonic() + GATE_SECONDS
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().fit(X, y, sample_weight=sample_weight)
