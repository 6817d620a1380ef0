"""SearchCV's scikit-learn callbacks (set_callbacks) against GridSearchCV's, on threads and on
worker processes (cvflow.search.callbacks)."""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow


class FileRecorder:
    """A callback (scikit-learn's public protocol) that appends one JSON line per hook call to
    ``path``: on any thread or process, as scikit-learn's contract leaves the transport of what
    a callback records to the callback."""

    def __init__(self, path, label="recorder"):
        self.path, self.label = str(path), label

    def _write(self, hook, estimator, context, metadata=None):
        line = json.dumps({"callback": self.label, "hook": hook,
                           "estimator": "the search" if hasattr(estimator, "param_grid")
                           else type(estimator).__name__, "task": context.task_name,
                           "weights": None if not metadata or metadata.get("sample_weight") is None
                           else len(metadata["sample_weight"])})
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def setup(self, estimator, context):
        self._write("setup", estimator, context)

    def on_fit_task_begin(self, estimator, context, *, metadata=None):
        self._write("begin", estimator, context, metadata)

    def on_fit_task_end(self, estimator, context, *, metadata=None):
        self._write("end", estimator, context, metadata)

    def teardown(self, estimator, context):
        self._write("teardown", estimator, context)


class PropagatedFileRecorder(FileRecorder):
    """The same, auto-propagated to the sub-estimators' fits at every depth."""

    max_propagation_depth = None


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    return X[:150], y[:150], np.random.default_rng(0).uniform(0.5, 2.0, size=150)


def records(path) -> Counter:
    with open(path, encoding="utf-8") as f:
        return Counter(tuple(sorted(json.loads(line).items())) for line in f)


def recorded(search, tmp_path, name, X, y, w, own_callback=False):
    """Fit ``search`` with a plain and an auto-propagated recorder (and with ``own_callback``
    one set on its estimator); return what they recorded, as a multiset."""
    path = tmp_path / f"{name}.jsonl"
    search.set_callbacks(FileRecorder(path), PropagatedFileRecorder(path, "propagated"))
    if own_callback:
        search.estimator.set_callbacks(FileRecorder(path, "own"))
    search.fit(X, y, **({} if w is None else {"sample_weight": w}))
    return records(path)


GRID = {"logisticregression__C": [0.01, 1.0]}


def model():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=50))


@pytest.mark.parametrize("refit", [True, False])
@pytest.mark.parametrize("cluster", ["threads", "local"])
def test_hooks_as_gridsearchcv(data, tmp_path, cluster, refit):
    """Every hook of the search, of its evaluations (propagated into the Pipeline, its scaler
    and its lbfgs iterations) and of the refit, as often as GridSearchCV calls it: on this
    process's threads and on worker processes (the callbacks are copies there)."""
    X, y, _ = data
    cv = KFold(3, shuffle=True, random_state=0)
    ref = recorded(GridSearchCV(model(), GRID, cv=cv, refit=refit), tmp_path, "ref", X, y, None)
    ours = recorded(cvflow.SearchCV(model(), GRID, cv=cv, refit=refit, cluster=cluster),
                    tmp_path, "ours", X, y, None)
    assert ours == ref
    evaluations = sum(n for r, n in ref.items() if ("task", "candidate-split-evaluation") in r
                      and ("callback", "recorder") in r)
    assert evaluations == 2 * 2 * 3                # begin and end x 2 C x 3 folds
    # the propagated recorder's evaluation hooks are the Pipeline's (one task, two names)
    assert sum(n for r, n in ref.items() if ("callback", "propagated") in r) > 2 * evaluations


def test_sample_weight_and_own_callbacks_as_gridsearchcv(data, tmp_path):
    """The evaluations' metadata hold the training rows' weights, the refit's all of them; a
    callback set on the estimator itself is called in every fit, as under GridSearchCV."""
    X, y, w = data
    grid = {"C": [0.01, 1.0]}
    ref = recorded(GridSearchCV(LogisticRegression(max_iter=50), grid, cv=3), tmp_path, "ref",
                   X, y, w, own_callback=True)
    ours = recorded(cvflow.SearchCV(LogisticRegression(max_iter=50), grid, cv=3,
                                    cluster="threads"), tmp_path, "ours", X, y, w,
                    own_callback=True)
    assert ours == ref
    weights = {dict(r)["task"]: dict(r)["weights"] for r in ref if dict(r)["hook"] == "begin"
               and dict(r)["callback"] == "recorder"}
    assert weights["candidate-split-evaluation"] == 100   # 2/3 of 150 rows: a fold's fit
    assert weights["refit-with-best-params"] == 150
    assert any(dict(r)["callback"] == "own" for r in ref)


def test_set_callbacks_refuses_what_gridsearchcv_refuses():
    search = cvflow.SearchCV(LogisticRegression(), {"C": [1.0]})
    with pytest.raises(TypeError, match="callbacks must be instances following the FitCallback"):
        search.set_callbacks(FileRecorder)
    assert clone(search.set_callbacks(FileRecorder("x")))._skl_callbacks == search._skl_callbacks


@pytest.mark.parametrize("cluster", ["threads", "local"])
def test_scoring_monitor_of_the_estimator_as_gridsearchcv(data, cluster):
    """scikit-learn's ScoringMonitor set on the estimator records every lbfgs iteration of
    every fit in the search's task tree, the same rows and scores as under GridSearchCV: the
    fits use the instance given (or, in a worker process, copies that send to it)."""
    from sklearn.callback import ScoringMonitor

    X, y, _ = data
    rows = []
    for make in (GridSearchCV, lambda *a, **k: cvflow.SearchCV(*a, cluster=cluster, **k)):
        monitor = ScoringMonitor(scoring="accuracy")
        make(LogisticRegression(max_iter=20).set_callbacks(monitor), {"C": [0.1, 1.0]},
             cv=3).fit(X, y)
        log, = monitor.get_logs(select="all")
        rows.append(sorted((r["task_id_path"], r["task_name"], r["accuracy"]) for r in log.data))
    assert rows[1] == rows[0]
    assert len(rows[0]) == 7 * 21          # 6 fold fits and the refit: each fit, 20 iterations
