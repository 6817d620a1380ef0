"""Where a run fits: in this process (threads) for tiny studies, on worker processes forked from
it or on a process cluster when they pay; all write the same cube. Process workers start without
re-running the caller's script; a forked worker that dies costs only its culprit fits."""
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
    no_fork = {"cvflow.cluster.auto.fork_start_seconds": 1e9}   # the timed estimate varies with load
    with dask.config.set(no_fork):
        small = cvflow.run(wf, store=tmp_path / "threads.zarr", workers=2)
    assert small.execution.startswith("threads: in this process"), small.execution
    assert small.dashboard is None  # no dashboard unless a port is asked for
    # starting processes made free: the same choice now says they pay
    with dask.config.set({"cvflow.cluster.auto.process_start_seconds": 0.0, **no_fork}):
        procs = cvflow.run(wf, store=tmp_path / "procs.zarr", workers=2)
    assert procs.execution.startswith("local: 2 worker processes"), procs.execution
    assert procs.dashboard and procs.dashboard.startswith("http://127.0.0.1:")
    assert small.fits_executed == procs.fits_executed == 6 * 6
    pred = fh.cube_arrays(tmp_path / "threads.zarr")["pred"]
    np.testing.assert_allclose(pred, _reference(tmp_path / "threads.zarr"), rtol=1e-8, atol=1e-8)
    fh.assert_same_cube(tmp_path / "procs.zarr", tmp_path / "threads.zarr")


def test_forked_workers_write_the_cube_of_threads_and_of_scikit_learn(tmp_path, write_workflow):
    wf = write_workflow(MIXED)
    forked = cvflow.run(wf, store=tmp_path / "forked.zarr", cluster="forked", workers=2)
    assert forked.execution == "forked (as asked)" and forked.dashboard is None
    assert forked.fits_executed == 6 * 6 and forked.failed == 0
    pred = fh.cube_arrays(tmp_path / "forked.zarr")["pred"]
    np.testing.assert_allclose(pred, _reference(tmp_path / "forked.zarr"), rtol=1e-8, atol=1e-8)
    cvflow.run(wf, store=tmp_path / "threads.zarr", cluster="threads", workers=2)
    fh.assert_same_cube(tmp_path / "threads.zarr", tmp_path / "forked.zarr")
    again = cvflow.run(wf, store=tmp_path / "forked.zarr", cluster="forked")
    assert again.fits_executed == 0           # a finished store: nothing to fit


def test_auto_forks_workers_when_they_pay(tmp_path, write_workflow):
    wf = write_workflow(MIXED)
    with dask.config.set({"cvflow.cluster.auto.fork_start_seconds": 0.0}):
        result = cvflow.run(wf, store=tmp_path / "s.zarr", workers=2)
    assert result.execution.startswith("forked: 2 worker processes forked"), result.execution
    np.testing.assert_allclose(fh.cube_arrays(tmp_path / "s.zarr")["pred"],
                               _reference(tmp_path / "s.zarr"), rtol=1e-8, atol=1e-8)


def test_auto_does_not_fork_inside_a_daemonic_worker(tmp_path, write_workflow):
    """A study run from inside a Dask or multiprocessing worker (daemonic: no children
    allowed) stays in its process."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:          # pool workers are daemonic
        chosen = pool.apply(_choice_in_worker)
    assert chosen == "threads"


def test_forked_where_it_cannot_fork_is_refused_before_any_store_work(tmp_path, write_workflow,
                                                                      monkeypatch):
    from cvflow import inprocess
    from cvflow.errors import InputError

    monkeypatch.setattr(inprocess, "can_fork", lambda: False)      # macOS, Windows, a daemon
    with pytest.raises(InputError, match=r"^--cluster forked: worker processes cannot be forked "):
        cvflow.run(write_workflow(MIXED), store=tmp_path / "s.zarr", cluster="forked")
    assert not (tmp_path / "s.zarr").exists()


def _choice_in_worker() -> str:
    with dask.config.set({"cvflow.cluster.auto.fork_start_seconds": 0.0}):
        return choose("auto", seconds=1.0, workers=2)[0]     # forked anywhere else


def test_forked_workers_with_a_dashboard_are_refused_before_any_store_work(tmp_path, write_workflow):
    from cvtest import run_cli, tree_digest

    wf, store = write_workflow(MIXED), tmp_path / "s.zarr"
    cvflow.run(wf, store=store, cluster="threads")
    before = tree_digest(store)
    proc = run_cli("run", wf, "--store", store, "--cluster", "forked", "--dashboard-port", "0",
                   "--overwrite")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "cvflow: error: --dashboard-port: forked workers run on a pool of this process, with no "
        "scheduler and no dashboard; use --cluster local (or threads) for one")
    assert tree_digest(store) == before


def test_a_forked_worker_that_dies_costs_only_its_culprit_fits(tmp_path):
    """alpha = 10 ends its process (os._exit(3)): the pool breaks, the blocks not back are
    refitted one fit per child; the culprits are failed with the exit status, every other fit
    equals a clean run's bytes."""
    clean, dying = tmp_path / "clean.zarr", tmp_path / "dying.zarr"
    ok = cvflow.run(fh.dying_workflow(tmp_path / "c.yaml", "null", fits_per_task=4), store=clean,
                    cluster="forked", workers=2)
    assert ok.failed == 0
    result = cvflow.run(fh.dying_workflow(tmp_path / "d.yaml", 10.0, fits_per_task=4), store=dying,
                        cluster="forked", workers=2)
    assert result.fits_executed == 16 and result.failed == 4
    fh.assert_only_culprits_failed(dying, clean,
                                   "worker died: the fit ended its process with exit status 3")


def test_threads_profile_serves_a_dashboard_when_asked(tmp_path, write_workflow):
    wf = write_workflow(MIXED)
    result = cvflow.run(wf, store=tmp_path / "s.zarr", cluster="threads", dashboard_port=0)
    assert result.execution == "threads (as asked)"
    assert result.dashboard and result.dashboard.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("seconds, workers, dashboard, chosen", [
    # processes save seconds * (1 - 1/workers): forked ones pay past 0.1 s, a local cluster
    # past 2 s; studies over 30 s a worker (or asking for a dashboard) get the local cluster
    (0.01, 2, False, "threads"), (0.19, 2, False, "threads"), (0.21, 2, False, "forked"),
    (60.0, 2, False, "forked"), (60.2, 2, False, "local"), (100.0, 1, False, "threads"),
    (0.13, 4, False, "threads"), (0.14, 4, False, "forked"), (0.3, 2, True, "threads"), (3.9, 2, True, "threads"),
    (4.1, 2, True, "local"), (2.7, 4, True, "local")])
def test_auto_choice_weighs_the_estimate_against_process_start(seconds, workers, dashboard, chosen):
    with dask.config.set({"cvflow.cluster.auto": {"process_start_seconds": 2.0,
                                                  "fork_start_seconds": 0.1,
                                                  "local_after_seconds": 30.0}}):
        name, why = choose("auto", seconds=seconds, workers=workers, dashboard=dashboard)
        # fits in BLAS (the GIL released) save nothing on processes
        assert choose("auto", seconds=seconds, workers=workers, dashboard=dashboard,
                      gil_share=0.0)[0] == "threads"
    assert name == chosen and why.startswith(chosen)


def test_ridge_paths_release_the_gil_lasso_and_trees_hold_it():
    from cvflow.blocks import gil_share
    from cvflow.learners import Param

    ridge = [Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 1.0, 10.0)]
    lasso = [Param("l", "sklearn.linear_model.Lasso", hyper={"alpha": a}) for a in (0.1, 1.0)]
    tree = [Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": 2})]
    assert gil_share(ridge) == 0.0 and gil_share(ridge, path_aware=False) == 1.0
    assert gil_share(lasso + tree) == 1.0
    assert gil_share(ridge + lasso + tree) == pytest.approx(3 / 6)
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
