"""Where a run fits: in this process (threads) for small studies, on worker processes when they
pay; both write the same cube. Process workers start without re-running the caller's script."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import dask.config
import numpy as np
import pytest
import zarr
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeRegressor

import cvflow
from cvflow.cluster import choose

import fault_helpers as fh

MIXED = """\
name: mixed
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 0.1, 1.0, 10.0]}
  - name: tree
    class: sklearn.tree.DecisionTreeRegressor
    params: {random_state: 0}
    grid: {max_depth: [2, 4]}
design: {folds: 5, seed: 0}
estimators: [kfold, corrected_kfold]
"""


def _reference(store) -> np.ndarray:
    """scikit-learn fits of every (param, split) on the stored training sets."""
    g = zarr.open_group(str(store), mode="r")
    X, y, train = g["X"][...], g["y"][...], g["train"][...]
    models = [Ridge(alpha=a) for a in (0.01, 0.1, 1.0, 10.0)]
    models += [DecisionTreeRegressor(max_depth=d, random_state=0) for d in (2, 4)]
    return np.array([[clone(m).fit(X[t], y[t]).predict(X) for t in train] for m in models])


def test_small_study_in_process_and_processes_write_identical_cubes(tmp_path, write_workflow):
    wf = write_workflow(MIXED)
    small = cvflow.run(wf, store=tmp_path / "threads.zarr", workers=2)
    assert small.execution.startswith("threads: in this process"), small.execution
    assert small.dashboard is None  # no dashboard unless a port is asked for
    # starting processes made free: the same choice now says they pay
    with dask.config.set({"cvflow.cluster.auto.process_start_seconds": 0.0}):
        procs = cvflow.run(wf, store=tmp_path / "procs.zarr", workers=2)
    assert procs.execution.startswith("local: 2 worker processes"), procs.execution
    assert procs.dashboard and procs.dashboard.startswith("http://127.0.0.1:")
    assert small.fits_executed == procs.fits_executed == 6 * 6
    pred = fh.cube_arrays(tmp_path / "threads.zarr")["pred"]
    np.testing.assert_allclose(pred, _reference(tmp_path / "threads.zarr"), rtol=1e-8, atol=1e-8)
    fh.assert_same_cube(tmp_path / "procs.zarr", tmp_path / "threads.zarr")


def test_threads_profile_serves_a_dashboard_when_asked(tmp_path, write_workflow):
    wf = write_workflow(MIXED)
    result = cvflow.run(wf, store=tmp_path / "s.zarr", cluster="threads", dashboard_port=0)
    assert result.execution == "threads (as asked)"
    assert result.dashboard and result.dashboard.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("seconds, workers, chosen", [
    (0.01, 2, "threads"), (3.9, 2, "threads"), (4.1, 2, "local"), (100.0, 1, "threads"),
    (2.6, 4, "threads"), (2.7, 4, "local")])
def test_auto_choice_weighs_the_estimate_against_process_start(seconds, workers, chosen):
    with dask.config.set({"cvflow.cluster.auto.process_start_seconds": 2.0}):
        name, why = choose("auto", seconds=seconds, workers=workers)
    assert name == chosen and why.startswith(chosen)
    assert choose("local", seconds=0.0) == ("local", "local (as asked)")


SCRIPT = """\
import cvflow
result = cvflow.run({wf!r}, store={store!r}, cluster="local", workers=2)
print("fits", result.fits_executed, result.execution)
"""


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_run_without_main_guard_on_process_workers(tmp_path, write_workflow, how):
    """No `if __name__ == "__main__":` guard, from a file or from `python -`: spawned workers
    must not re-run the caller's code (they would start clusters of their own)."""
    code = SCRIPT.format(wf=str(write_workflow(MIXED)), store=str(tmp_path / "s.zarr"))
    env = fh.cli_env()
    if how == "script":
        (tmp_path / "study.py").write_text(textwrap.dedent(code))
        proc = subprocess.run([sys.executable, "study.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)
    else:
        proc = subprocess.run([sys.executable, "-"], input=code, cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["fits 36 local (as asked)"], proc.stdout
    assert "Nanny failed" not in proc.stderr and "bootstrapping" not in proc.stderr
