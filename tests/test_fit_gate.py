"""The threads route's gate (cvflow.execution.fit_gate): how many fits run at once."""
from __future__ import annotations

import threading
import time

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow
from cvflow.execution import fit_gate
from cvflow.execution.fit_gate import FitGate, gate_here
from cvflow.execution.threaded import FitThreads


def _fits_at_once(gate: FitGate, threads: int = 2, fits: int = 3, seconds: float = 0.02) -> int:
    """The most fits that ran at once, ``threads`` threads fitting ``fits`` each."""
    running, most, lock = [0], [0], threading.Lock()

    def work():
        for _ in range(fits):
            with gate.fit():
                with lock:
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                time.sleep(seconds)
                with lock:
                    running[0] -= 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=30)
    return most[0]


def test_fits_that_slept_beside_another_run_one_at_a_time():
    gate = FitGate(2)
    gate.decided = False
    for _ in range(3):
        gate._note(0.01, 0.005)          # half of each fit asleep: the GIL's
    assert gate.limit == 2 and not gate.decided
    gate._note(0.01, 0.005)
    assert gate.decided and gate.limit == 1 and abs(gate.slept - 0.5) < 1e-12
    assert _fits_at_once(gate) == 1


def test_fits_that_ran_beside_another_stay_side_by_side():
    gate = FitGate(2)
    gate.decided = False
    for _ in range(4):
        gate._note(0.01, 0.0005)
    assert gate.decided and gate.limit == 2
    assert _fits_at_once(gate) == 2


def test_a_fit_that_does_not_end_keeps_no_other_waiting_past_the_patience(monkeypatch):
    monkeypatch.setattr(fit_gate, "GATE_PATIENCE", 0.05)
    gate = FitGate(2)
    gate.decided, gate.limit = True, 1
    release = threading.Event()

    def stuck():
        with gate.fit():
            release.wait(30)

    t = threading.Thread(target=stuck)
    t.start()
    while gate._running == 0:
        time.sleep(0.001)
    start = time.perf_counter()
    with gate.fit():
        waited = time.perf_counter() - start
    release.set()
    t.join(timeout=30)
    assert 0.04 <= waited < 10


def test_the_pools_threads_and_only_they_fit_through_its_gate():
    pool = FitThreads(2)
    try:
        assert pool.submit(gate_here).result(timeout=30) is pool.gate
    finally:
        pool.shutdown()
    assert gate_here() is None


def test_a_search_whose_fits_run_one_at_a_time_answers_as_gridsearchcv(monkeypatch):
    """Whatever the gate decides, the answers are GridSearchCV's: forced to one fit at a time
    after the first fits side by side (the bound 0: any sleep is the GIL's)."""
    monkeypatch.setattr(fit_gate, "GIL_BOUND", -1.0)
    X, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [float(c) for c in np.logspace(-2, 1, 4)]}
    search = cvflow.SearchCV(est, grid, cv=5, cluster="threads").fit(X, y)
    reference = GridSearchCV(est, grid, cv=5).fit(X, y)
    assert search.best_index_ == reference.best_index_
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
