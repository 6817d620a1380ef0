"""The threads route's gate (cvflow.execution.fit_gate): how many fits run at once."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
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


def _timed_alone(gate: FitGate, walls: dict[tuple, float]) -> None:
    """The gate's first fit alone, ``walls`` {params: seconds} (the first; the others as the
    gate would have timed them alone)."""
    for i, (key, wall) in enumerate(walls.items()):
        if i == 0:
            gate._note(key, wall, beside=False, alone=True)
        else:
            gate._alone[key] = wall


def test_the_first_fit_runs_alone_then_side_by_side():
    gate = FitGate(2)
    assert gate.limit == 1 and not gate.decided
    assert _fits_at_once(gate, fits=1) == 1
    gate = FitGate(2)
    gate._note((0,), 0.010, beside=False, alone=True)
    assert gate.limit == 2 and not gate.decided and gate._alone == {(0,): 0.010}


def test_fits_twice_as_long_beside_another_run_one_at_a_time():
    gate = FitGate(2)
    _timed_alone(gate, {(0,): 0.010, (1,): 0.020})
    gate._note((2,), 0.001, beside=True, alone=False)     # no time alone to set it against
    gate._note((0,), 0.016, beside=True, alone=False)     # 2 / 1.6: no clear read alone
    assert not gate.decided and gate.limit == 2
    gate._note((1,), 0.048, beside=True, alone=False)
    # two fits at 1.6x and 2.4x their time alone: 2 / 2 fits a second
    assert gate.decided and gate.limit == 1 and abs(gate.speedup - 1.0) < 1e-12
    assert _fits_at_once(gate) == 1


def test_a_first_fit_beside_another_slower_than_alone_decides_alone():
    gate = FitGate(2)
    _timed_alone(gate, {(0,): 0.010, (1,): 0.020})
    gate._note((0,), 0.030, beside=True, alone=False)     # a convoy: 2 / 3
    assert gate.decided and gate.limit == 1 and abs(gate.speedup - 2 / 3) < 1e-12
    gate = FitGate(2)
    _timed_alone(gate, {(0,): 0.010, (1,): 0.020})
    gate._note((1,), 0.021, beside=True, alone=False)     # side by side: 2 / 1.05, not yet
    assert not gate.decided and gate.limit == 2


def test_fits_about_as_long_beside_another_stay_side_by_side():
    gate = FitGate(2)
    _timed_alone(gate, {(0,): 0.010, (1,): 0.020})
    gate._note((0,), 0.014, beside=True, alone=False)     # 2 / 1.4: no clear read alone
    assert not gate.decided
    gate._note((1,), 0.024, beside=True, alone=False)
    assert gate.decided and gate.limit == 2 and abs(gate.speedup - 2 / 1.3) < 1e-12
    assert _fits_at_once(gate) == 2


def test_a_long_first_fit_timed_before_the_run_stands_for_the_fits_alone():
    gate = FitGate(2)
    gate.expect((0,), fit_gate.LONG_FIT / 2)            # a short one: the fits are timed alone
    assert gate.limit == 1 and not gate._alone
    gate.expect((0,), 0.066)
    assert gate.limit == 2 and not gate.decided
    gate._note((0,), 0.070, beside=True, alone=False)
    gate._note((0,), 0.068, beside=True, alone=False)
    assert gate.decided and gate.limit == 2


def test_one_thread_is_decided_at_once():
    gate = FitGate(1)
    assert gate.decided and gate.limit == 1


def test_once_one_at_a_time_a_task_fits_while_the_others_wait():
    """Decided one at a time, each of the pool's tasks runs alone, its fits not gated one by
    one (two threads taking turns fit by fit still convoy between the fits)."""
    gate = FitGate(2)
    gate.decided, gate.limit = True, 1
    running, most, lock = [0], [0], threading.Lock()

    def task():
        with gate.task():
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            for _ in range(3):
                with gate.fit([(0, 0)]):
                    time.sleep(0.005)
            with lock:
                running[0] -= 1

    pool = [threading.Thread(target=task) for _ in range(2)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=30)
    assert most[0] == 1


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


@pytest.mark.parametrize("pays", [0.0, float("inf")])
def test_a_search_answers_as_gridsearchcv_whatever_the_gate_decides(monkeypatch, pays):
    """Whatever the gate decides, the answers are GridSearchCV's: side by side after the first
    fits (``PAYS`` 0), or one at a time (``PAYS`` infinite)."""
    monkeypatch.setattr(fit_gate, "PAYS", pays)
    X, y = load_breast_cancer(return_X_y=True)
    est = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [float(c) for c in np.logspace(-2, 1, 4)]}
    search = cvflow.SearchCV(est, grid, cv=5, cluster="threads").fit(X, y)
    reference = GridSearchCV(est, grid, cv=5).fit(X, y)
    assert search.best_index_ == reference.best_index_
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
