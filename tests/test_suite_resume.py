"""A suite killed mid-run (SIGKILL to a fresh ``cvflow run`` process) resumes fitting only what
is missing, data set by data set (they overlap: the next starts in one's tail), to the cubes of
an uninterrupted run; its progress and ``cvflow status`` count per data set and in total."""
from __future__ import annotations

import os
import re
import signal
import textwrap

import numpy as np
import pytest

import fault_helpers as fh
from cvflow.execution.suite_run import run_suite
from cvflow.workflow import suite

pytestmark = pytest.mark.timeout(600)

LABELS = ("a", "b", "c")
PER = 3 * (3 + 1)        # 3 alphas x (3 folds + the full fit)


def _suite(path):
    path.write_text(textwrap.dedent("""\
        name: slow_suite
        data:
          - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 1, label: a}
          - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 2, label: b}
          - {source: synthetic, name: linear, params: {n: 60, p: 4}, seed: 3, label: c}
        task: regression
        learners:
          - name: ridge
            class: fault_helpers.SlowRidge
            params: {delay: 0.25}
            grid: {alpha: [0.1, 1.0, 10.0]}
        design: {folds: 3, seed: 0}
        estimators: [kfold]
        execution: {cluster: threads, workers: 1, fits_per_task: 1, trial_fits: false}
        """))
    return path


def _performed(out: str) -> dict[str, int]:
    """Data set -> fits this run performed, from ``cvflow run``'s per-data-set summaries."""
    found = {}
    for label, body in re.findall(r"== (\w+) ==\n([^\n]*)", out):
        m = re.search(r": (\d+) fits performed", body)
        found[label] = int(m.group(1)) if m else 0
        if not m:
            assert "already complete, 0 fits performed" in body, body
    return found


@pytest.mark.slow
def test_a_killed_suite_resumes_only_what_is_missing(tmp_path):
    path = _suite(tmp_path / "slow.yaml")
    clean = tmp_path / "clean.zarr"
    run_suite(suite.load(path), store=clean, progress=False)
    store = tmp_path / "s.zarr"
    proc = fh.start_run(path, store, dashboard=())
    try:
        fh.wait_for_done(store / "b", 3, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        fh.reap(proc)
    done = {label: fh.done_count(store / label) for label in LABELS}
    # the data sets overlap: c starts once b's tail begins (no block of b waiting for the one
    # worker thread); killed with 3 of b's 12 one-fit blocks back, c has not started
    assert done["a"] == PER and 3 <= done["b"] < PER and done["c"] == 0, done
    status = fh.finish(_cli("status", str(store)))
    started = 2 + (store / "c").exists()
    if started == 2:
        assert "== c ==\nnot started (no cube yet)\n" in status[1]
    # every data set counted (c's fits, recorded by the suite's store, though it has no cube);
    # the killed run holds no lock: b is incomplete, not running
    assert (f"suite: {sum(done.values())} of {3 * PER} fits done, 0 failed; 1 of 3 data sets "
            f"complete, 1 incomplete") in status[1]
    rc, out, err = fh.finish(fh.start_run(path, store, dashboard=()))
    assert rc == 0, err[-2000:]
    # resume fits exactly what is missing, data set by data set
    assert _performed(out) == {label: PER - done[label] for label in LABELS}
    # progress: each data set's place and the suite's fits done so far, then the total
    assert f"data set 2 of 3: b; suite: {PER + done['b']} of {3 * PER} fits done" in err
    assert f"suite: {3 * PER} of {3 * PER} fits done (every data set run)" in err
    for label in LABELS:
        fh.assert_same_cube(store / label, clean / label)
        assert np.asarray(fh.cube_arrays(store / label)["done"]).all()


def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "cvflow", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=fh.cli_env(), start_new_session=True)
