"""A suite's data sets overlap on its one client (issue 42 item 2): the next data set starts
while the last block of one still runs; each cube stays bit-identical to a separate
`cvflow run` of its one-data-set workflow; a stopped suite (SIGINT) says what it kept in one
line, exits 130, and a second run finishes it to the same cubes."""
from __future__ import annotations

import os
import signal
import textwrap

import numpy as np
import pytest
import yaml

import fault_helpers as fh
from cvflow.execution.suite_run import run_suite
from cvflow.workflow import suite


def test_the_next_data_set_starts_while_the_last_block_of_one_runs(tmp_path):
    # data set `big` is one block (fits_per_task covers it) holding fits that wait for the gate;
    # only data set `small` starting opens it. Run one after another, `big`'s fits would wait
    # out their 60 s and see the gate shut.
    path = tmp_path / "gate.yaml"
    path.write_text(textwrap.dedent("""\
        name: gate
        data:
          - {source: synthetic, name: linear, params: {n: 40, p: 3}, seed: 1, label: small}
          - {source: synthetic, name: linear, params: {n: 200, p: 6}, seed: 2, label: big}
        task: regression
        learners:
          - name: ridge
            class: fault_helpers.GateRidge
            grid: {alpha: [1.0], wait: [false, true]}
        design: {folds: 3, seed: 0}
        estimators: [kfold]
        execution: {cluster: threads, workers: 1, fits_per_task: 100, trial_fits: false}
        """))
    fh.GATE.clear()
    fh.GATE_SEEN.clear()
    events = []

    def progress(event):
        events.append((event["dataset"], event["event"]))
        if event == {**event, "dataset": "small", "event": "start"}:
            fh.GATE.set()

    results = run_suite(suite.load(path), store=tmp_path / "gate.zarr", progress=progress)
    assert fh.GATE_SEEN and all(fh.GATE_SEEN), fh.GATE_SEEN
    # the biggest data set starts first; its block came back after the small one started
    assert events.index(("big", "start")) < events.index(("small", "start")) < \
        events.index(("big", "block"))
    assert all(r.fits_executed == r.total_fits for r in results.values())
    assert list(results) == ["small", "big"]          # the file's order


UNEQUAL = """\
name: unequal
data:
  - {source: synthetic, name: linear, params: {n: 80, p: 4}, seed: 1, label: s1}
  - {source: synthetic, name: linear, params: {n: 1500, p: 20}, seed: 2, label: big}
  - {source: synthetic, name: sparse_linear, params: {n: 90, p: 6}, seed: 3, label: s2}
  - {source: synthetic, name: linear, params: {n: 60, p: 3}, seed: 4, label: s3}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: {logspace: [-3, 3, 8]}}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: {logspace: [-3, 0, 4]}}
design: {folds: 5, repeats: 2, seed: 0}
estimators: [kfold]
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("route", ["threads", "local"])
def test_each_overlapped_cube_equals_a_separate_cvflow_run(tmp_path, route):
    path = tmp_path / "unequal.yaml"
    path.write_text(UNEQUAL)
    rc, out, err = fh.finish(fh.start_run(path, tmp_path / "u.zarr", "--cluster", route,
                                          dashboard=()), timeout=600)
    assert rc == 0, err[-2000:]
    assert "suite: 528 of 528 fits done (every data set run)" in err
    config = yaml.safe_load(UNEQUAL)
    for entry in config["data"]:
        label = entry.pop("label")
        one = tmp_path / f"{label}.yaml"
        one.write_text(yaml.safe_dump({**config, "name": label, "data": entry}))
        rc, _, err = fh.finish(fh.start_run(one, tmp_path / f"{label}.zarr", "--cluster", route,
                                            dashboard=()), timeout=600)
        assert rc == 0, err[-2000:]
        fh.assert_same_cube(tmp_path / "u.zarr" / label, tmp_path / f"{label}.zarr")


SLOW = """\
name: slow_overlap
data:
  - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 1, label: a}
  - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 2, label: b}
  - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 3, label: c}
task: regression
learners:
  - name: ridge
    class: fault_helpers.SlowRidge
    params: {delay: 0.2}
    grid: {alpha: [0.1, 1.0, 10.0]}
design: {folds: 3, seed: 0}
estimators: [kfold]
execution: {cluster: threads, workers: 2, fits_per_task: 2, trial_fits: false}
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_suite_stopped_by_sigint_says_what_it_kept_and_resumes(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW)
    clean = tmp_path / "clean.zarr"
    run_suite(suite.load(path), store=clean, progress=False)
    store = tmp_path / "s.zarr"
    proc = fh.start_run(path, store, dashboard=())
    try:
        fh.wait_for_done(store / "b", 2, proc)
        os.killpg(proc.pid, signal.SIGINT)
        rc, out, err = fh.finish(proc, timeout=120)
    finally:
        fh.reap(proc)
    assert rc == 130, err[-2000:]
    kept = sum(fh.done_count(store / label) for label in "abc")
    assert f"interrupted: {kept} of " in err and f"fits kept in {store}" in err, err[-2000:]
    for label in "abc":                 # every lock released: no takeover needed
        assert fh.read_lock_pid(store / label) is None if (store / label).exists() else True
    rc, out, err = fh.finish(fh.start_run(path, store, dashboard=()))
    assert rc == 0, err[-2000:]
    for label in "abc":
        fh.assert_same_cube(store / label, clean / label)
        assert np.asarray(fh.cube_arrays(store / label)["done"]).all()
