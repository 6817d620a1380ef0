"""Racing on log loss through the engine: the steeper-logit case of issue 43 (the calibrated
σ(6x) against the over-confident σ(9x), y ~ Bernoulli(σ(6x)), n = 150, 5 folds x 3 repeats),
raced by cvflow.Study with fixed-logit classifiers, counting the data sets in which the
calibrated (truly best) param was dropped.

    PYTHONPATH=. python benchmarks/racing_engine_classification.py [--sets 100]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import RepeatedKFold

import cvflow


class FixedLogit(ClassifierMixin, BaseEstimator):
    """P(y = 1 | x) = σ(scale·x₀), whatever the training data (a fixed predictor)."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, X):
        p = 1 / (1 + np.exp(-self.scale * np.asarray(X)[:, 0]))
        return np.column_stack([1 - p, p])

    def predict(self, X):
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=100)
    parser.add_argument("--n", type=int, default=150)
    args = parser.parse_args()
    rng = np.random.default_rng(4343)
    start, load = time.time(), os.getloadavg()[0]
    dropped, tests = 0, set()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.sets):
            x = rng.standard_normal((args.n, 1))
            y = (rng.random(args.n) < 1 / (1 + np.exp(-6 * x[:, 0]))).astype(int)
            study = cvflow.Study(FixedLogit(), param_grid={"scale": [6.0, 9.0]},
                                 cv=RepeatedKFold(n_splits=5, n_repeats=3, random_state=i),
                                 loss="log_loss", racing={"alpha": 0.05},
                                 execution={"cluster": "threads"})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                study.run(x, y, store=f"{tmp}/s{i}.zarr")
            race = json.loads(cvflow.open(f"{tmp}/s{i}.zarr").attrs["racing"])
            tests.add(race["test"][:60])
            dropped += any(d["param"] == 0 for d in race["dropped"])
    p = dropped / args.sets
    print(json.dumps({"sets": args.sets, "n": args.n, "best_dropped": p,
                      "mc_se": float(np.sqrt(max(p * (1 - p), 1 / args.sets) / args.sets)),
                      "tests": sorted(tests), "seconds": round(time.time() - start),
                      "load_average": round(max(load, os.getloadavg()[0]), 2)}))


if __name__ == "__main__":
    main()
