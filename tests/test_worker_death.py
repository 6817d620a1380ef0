"""Fits that kill their worker process (os._exit for one grid value): retried as Dask does,
then their block is split so every other fit completes; the culprits are recorded failed
with the exit status. Reference: the same study with a learner that never dies."""
from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.linear_model import Ridge

import fault_helpers as fh


def test_fit_that_exits_its_process_is_a_failed_fit(tmp_path):
    """In a child process (cvflow.fitting.isolated) a fit that ends its process is recorded with its
    exit status; the fits before and after it (a new child) are unaffected."""
    from cvflow.fitting.isolated import fit_cells
    from cvflow.workflow.params import Param

    X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    train = (np.arange(10) < 8)[None, :]
    params = [Param("r", "fault_helpers.DyingRidge", hyper={"alpha": a, "die_at": 10.0})
              for a in (1.0, 10.0, 100.0)]
    out = fit_cells(params, X, y, train, [(0, 0), (1, 0), (2, 0)])
    for h in (0, 2):
        pred, _, error = out[(h, 0)]
        assert error == ""
        expected = Ridge(alpha=params[h].hyper["alpha"]).fit(X[:8], y[:8]).predict(X)
        np.testing.assert_allclose(pred, expected, rtol=1e-12)
    pred, _, error = out[(1, 0)]
    assert np.isnan(pred).all()
    assert error.startswith("worker died: the fit ended its process with exit status 3")


def test_fit_over_the_memory_limit_or_the_time_limit_is_stopped_in_its_child(tmp_path):
    from cvflow.fitting.isolated import fit_cells
    from cvflow.workflow.params import Param

    X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    train = (np.arange(10) < 8)[None, :]
    hungry = [Param("r", "fault_helpers.HungryRidge",
                    hyper={"alpha": 10.0, "hungry_at": 10.0, "hunger_mb": 400, "hold": 1.0})]
    pred, _, error = fit_cells(hungry, X, y, train, [(0, 0)], memory_limit=200 * 2**20)[(0, 0)]
    assert np.isnan(pred).all()
    used = float(re.search(r"the fit used ([0-9.]+) GiB, over the worker's memory limit of 0.20 GiB",
                           error).group(1))
    assert used > 0.19
    pred, _, error = fit_cells(hungry, X, y, train, [(0, 0)], memory_limit=2**30)[(0, 0)]   # room enough
    assert error == "" and np.isfinite(pred).all()
    sleeping = [Param("r", "fault_helpers.StuckRidge", hyper={"alpha": 1.0, "stuck_at": 1.0})]
    pred, seconds, error = fit_cells(sleeping, X, y, train, [(0, 0)], timeout=2.0)[(0, 0)]
    assert np.isnan(pred).all() and seconds == 2.0
    assert error == "timed out after 2 s (execution.fit_timeout); the fit was stopped"


def test_a_fit_that_forks_neither_hangs_its_child_nor_outlives_it(tmp_path):
    """Issue 32: a fit in a child process that forked left a grandchild holding the child's
    stdout; the worker waited for end-of-file there as long as the grandchild lived (600 s, a
    study that never finished). Each mode: the fit forks a grandchild that would live 10
    minutes, then returns, exits or hangs; every fit is recorded at once (the hang at its
    time limit) and no grandchild outlives fit_cells."""
    from cvflow.fitting.isolated import fit_cells
    from cvflow.workflow.params import Param

    X, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    train = (np.arange(10) < 8)[None, :]
    pids = tmp_path / "pids"
    pids.mkdir()
    params = [Param("r", "fault_helpers.ForkingRidge",
                    hyper={"alpha": a, "fork_at": a, "then": then, "pids": str(pids)})
              for a, then in ((1.0, "exit"), (2.0, "return"), (3.0, "hang"))]
    params.append(Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": 4.0}))
    out = fit_cells(params, X, y, train, [(h, 0) for h in range(4)], timeout=5.0)
    assert out[(0, 0)][2].startswith("worker died: the fit ended its process with exit status 3")
    assert out[(2, 0)][2] == "timed out after 5 s (execution.fit_timeout); the fit was stopped"
    for h in (1, 3):
        pred, _, error = out[(h, 0)]
        assert error == ""
        expected = Ridge(alpha=params[h].hyper["alpha"]).fit(X[:8], y[:8]).predict(X)
        np.testing.assert_allclose(pred, expected, rtol=1e-12)
    assert len(list(pids.iterdir())) == 3
    assert fh.pids_alive(pids) == []


@pytest.mark.parametrize("inherited", [None, "a-token-of-another-cluster"])
def test_processes_a_fit_forks_in_a_worker_do_not_outlive_the_run(tmp_path, inherited):
    """Issue 32: processes forked by a learner's fit in the worker processes were reparented
    to init when the cluster closed, and lived on after ``cvflow.run`` returned. A fresh
    interpreter runs a study whose fits of one alpha each fork a grandchild that would live
    10 minutes (on worker processes); once ``run`` has returned, none is alive. Also when the
    interpreter inherits another cluster's token (a parent that ran a cluster: distributed
    prefers the environment's value, so the workers were tagged with it and nothing ended)."""
    import subprocess
    import sys

    from cvflow.execution.processes import ENV

    pids = tmp_path / "pids"
    pids.mkdir()
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""\
name: forks
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: ridge
    class: fault_helpers.ForkingRidge
    params: {{fork_at: 1.0, pids: {str(pids)!r}}}
    grid: {{alpha: [0.1, 1.0]}}
design: {{folds: 3, seed: 0}}
estimators: [kfold]
execution: {{cluster: local, workers: 2, fits_per_task: 1}}
""")
    code = ("import sys, cvflow\n"
            "r = cvflow.run(sys.argv[1], store=sys.argv[2], progress=False)\n"
            "print('done', r.fits_executed, r.failed, flush=True)\n")
    env = fh.cli_env(**({ENV: inherited} if inherited else {}))
    proc = subprocess.run([sys.executable, "-c", code, str(wf), str(tmp_path / "s.zarr")],
                          capture_output=True, text=True, env=env, timeout=280)
    assert proc.returncode == 0 and "done 8 0" in proc.stdout, proc.stderr[-3000:]
    assert len(list(pids.iterdir())) == 4                     # alpha 1: 3 folds + full fit
    assert fh.pids_alive(pids, wait=5) == []
    assert "ended 4 process(es) that learners' fits left running" in proc.stderr


@pytest.mark.slow
def test_a_study_whose_fits_fork_then_die_or_hang_finishes(tmp_path):
    """Issue 32: a study of hostile learners never finished (580 s): after a block's workers
    died, its refit in a child process waited for a grandchild the fit had forked. One alpha
    forks then ends its process, one forks then hangs (fit_timeout 15 s); the study finishes
    with exactly those fits failed, each with what happened, and no grandchild left."""
    pids = tmp_path / "pids"
    pids.mkdir()
    rc, out, err = fh.finish(fh.start_run(_forking_workflow(tmp_path, pids), tmp_path / "s.zarr",
                                          "--workers", "2", dashboard=()), timeout=900)
    assert rc == 0, err[-3000:]
    cube = fh.cube_arrays(tmp_path / "s.zarr")
    assert cube["done"].all()
    failed = {str(e) for e in cube["error"][cube["failed"]]}
    assert any(e.startswith("worker died: the fit ended its process with exit status 3")
               for e in failed), failed
    assert any(e.startswith("timed out after 15 s") for e in failed), failed
    assert cube["failed"].sum() == 8 and (~cube["failed"]).sum() == 8
    assert fh.pids_alive(pids, wait=10) == []


def _forking_workflow(tmp_path, pids):
    path = tmp_path / "forks.yaml"
    path.write_text(f"""\
name: forks
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: exits
    class: fault_helpers.ForkingRidge
    params: {{fork_at: 1.0, then: exit, pids: {str(pids)!r}}}
    grid: {{alpha: [0.1, 1.0]}}
  - name: hangs
    class: fault_helpers.ForkingRidge
    params: {{fork_at: 1.0, then: hang, pids: {str(pids)!r}}}
    grid: {{alpha: [0.1, 1.0]}}
design: {{folds: 3, seed: 0}}
estimators: [kfold]
execution: {{cluster: local, fits_per_task: 4, fit_timeout: 15}}
""")
    return path


@pytest.mark.slow
def test_block_that_kills_its_workers_is_split_and_completes(tmp_path):
    clean, dying = tmp_path / "clean.zarr", tmp_path / "dying.zarr"
    rc, _, err = fh.finish(fh.start_run(fh.dying_workflow(tmp_path / "c.yaml", "null"), clean,
                                        "--workers", "2", "--cluster", "local"))
    assert rc == 0, err[-2000:]
    rc, out, err = fh.finish(fh.start_run(fh.dying_workflow(tmp_path / "d.yaml", 10.0), dying,
                                          "--workers", "2", "--cluster", "local"), timeout=600)
    assert rc == 0, err[-2000:]
    print(out, err[-3000:])
    assert re.search(r"16 fits performed .* 4 failed", out), out
    fh.assert_only_culprits_failed(dying, clean,
                                   "worker died: the fit ended its process with exit status 3")


@pytest.mark.slow
def test_fit_over_the_worker_memory_limit_is_recorded_not_retried_forever(tmp_path):
    """Workers limited to 600 MB; one alpha holds 1.5 GB. Dask's nanny restarts the worker
    (allowed-failures), the block is split, the child is stopped by cvflow's watch: that
    alpha's fits are failed with the limit in the message, every other fit is done."""
    clean, hungry = tmp_path / "clean.zarr", tmp_path / "hungry.zarr"
    args = ("--workers", "2", "--cluster", "local", "--cluster-option", "memory_limit=600MB")
    rc, _, err = fh.finish(fh.start_run(fh.dying_workflow(tmp_path / "c.yaml", "null", "HungryRidge",
                                                        "hungry_at"), clean, *args))
    assert rc == 0, err[-2000:]
    rc, out, err = fh.finish(fh.start_run(fh.dying_workflow(tmp_path / "h.yaml", 10.0, "HungryRidge",
                                                          "hungry_at"), hungry, *args), timeout=600)
    assert rc == 0, err[-2000:]
    fh.assert_only_culprits_failed(hungry, clean, "over the worker's memory limit of 0.56 GiB")
