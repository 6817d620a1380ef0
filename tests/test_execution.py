"""Where a run fits, always a Dask scheduler: in this process (threads) for a short study of
cvflow's path kernels, else on worker processes (local); all write the same cube. Process workers
start without re-running the caller's script; a fit that kills its process or outlives
`fit_timeout` costs only itself; a stuck run stops and says where; a run that lost its lock
stops writing."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import dask.config
import numpy as np
import pytest
import zarr
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeRegressor

import cvflow
from cvflow.execution.schedulers import choose

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


RIDGE = MIXED.split("  - name: tree")[0] + "design: {folds: 5, seed: 0}\nestimators: [kfold]\n"


def test_path_study_in_process_and_a_learners_own_fits_on_processes_write_scikit_learns_cube(
        tmp_path, write_workflow):
    """auto: ridge alone (cvflow's path kernel) and, this short, a tree too (the learner's
    own fit code, issue 31) stay in this process; the cube equals scikit-learn's fits, and the
    forced process route writes the same bytes."""
    small = cvflow.run(write_workflow(RIDGE), store=tmp_path / "ridge.zarr", workers=2)
    assert small.execution.startswith("threads: Dask's scheduler in this process"), small.execution
    assert small.dashboard is None  # no dashboard unless a port is asked for
    mixed = cvflow.run(write_workflow(MIXED), store=tmp_path / "auto.zarr", workers=2)
    assert mixed.execution.startswith("threads: Dask's scheduler in this process"), mixed.execution
    assert mixed.dashboard is None             # a short study: no web server
    assert mixed.fits_executed == 6 * 6 and mixed.failed == 0
    pred = fh.cube_arrays(tmp_path / "auto.zarr")["pred"]
    np.testing.assert_allclose(pred, _reference(tmp_path / "auto.zarr"), rtol=1e-8, atol=1e-8)
    cvflow.run(write_workflow(MIXED), store=tmp_path / "local.zarr", cluster="local", workers=2)
    fh.assert_same_cube(tmp_path / "local.zarr", tmp_path / "auto.zarr")
    again = cvflow.run(write_workflow(MIXED), store=tmp_path / "auto.zarr")
    assert again.fits_executed == 0           # a finished store: nothing to fit


COUNTED = """\
name: counted
data: {{source: synthetic, name: linear, params: {{n: 60, p: 3}}}}
task: regression
learners:
  - name: ridge
    class: counting_learner.CountingRidge
    params: {{log: {log}}}
    grid: {{alpha: [0.1, 1.0, 10.0]}}
design: {{folds: 4, seed: 0}}
estimators: [kfold]
execution: {{path_aware: false}}
"""


def test_timing_fits_are_trials_not_the_studys_fits(tmp_path, write_workflow):
    """The fits that time a learner on a worker (block sizes) are marked as trials
    (cvflow.fitting.trial.in_trial), like the pre-run check: a learner that counts or gates its fits
    sees the study's fits only, 3 params x (full + 4 folds)."""
    log = tmp_path / "fits.log"
    result = cvflow.run(write_workflow(COUNTED.format(log=log)), store=tmp_path / "s.zarr",
                        cluster="local", workers=1)
    assert result.fits_executed == 15
    assert len(log.read_text().splitlines()) == 15


def test_forked_is_read_as_local_with_a_warning(tmp_path, write_workflow, caplog):
    with caplog.at_level("WARNING", logger="cvflow.execution.schedulers"):
        result = cvflow.run(write_workflow(RIDGE), store=tmp_path / "s.zarr", cluster="forked")
    assert result.execution == "local (as asked)"
    assert "--cluster forked was removed (forking a process that runs threads can hang)" in caplog.text


@pytest.mark.timeout(900)   # worker restarts: ~1 min quiet, several at load 20
def test_a_fit_that_kills_its_process_costs_only_itself_on_worker_processes(tmp_path):
    """alpha = 10 ends its process (os._exit(3)) on every split: on worker processes (asked
    for: crash isolation) the block is retried, split into single fits, and only the culprits
    are recorded failed; every other fit equals a clean run's bytes."""
    clean, dying = tmp_path / "clean.zarr", tmp_path / "dying.zarr"
    ok = cvflow.run(fh.dying_workflow(tmp_path / "c.yaml", "null", fits_per_task=4), store=clean,
                    workers=2, cluster="local")
    assert ok.failed == 0 and ok.execution.startswith("local")
    result = cvflow.run(fh.dying_workflow(tmp_path / "d.yaml", 10.0, fits_per_task=4), store=dying,
                        workers=2, cluster="local")
    assert result.fits_executed == 16 and result.failed == 4
    fh.assert_only_culprits_failed(dying, clean, "worker died: the fit "
                                   "ended its process with exit status 3")


@pytest.mark.timeout(900)   # worker restarts: ~1 min quiet, several at load 20
def test_a_fit_past_fit_timeout_is_recorded_timed_out(tmp_path):
    """alpha = 10 never ends; fit_timeout: 2 stops it (its worker process) on every split and
    records it; the retried block skips it, so every other fit completes once."""
    clean, sleeping = tmp_path / "clean.zarr", tmp_path / "sleeping.zarr"
    cvflow.run(fh.sleeping_workflow(tmp_path / "c.yaml", "null"), store=clean, workers=2)
    result = cvflow.run(fh.sleeping_workflow(tmp_path / "s.yaml", 10.0,
                                             "fits_per_task: 4, fit_timeout: 2"),
                        store=sleeping, workers=2)
    assert result.execution.startswith("local"), result.execution
    assert result.fits_executed == 16 and result.failed == 4
    fh.assert_only_culprits_failed(sleeping, clean, "timed out after 2 s (execution.fit_timeout)")


def test_fit_timeout_in_this_process_is_refused_before_any_store_work(tmp_path):
    from cvflow.errors import InputError

    wf = fh.sleeping_workflow(tmp_path / "s.yaml", "null", "fit_timeout: 2")
    with pytest.raises(InputError, match=r"^execution.fit_timeout: a fit in this process's threads "
                                         "cannot be stopped; use --cluster local"):
        cvflow.run(wf, store=tmp_path / "s.zarr", cluster="threads")
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.timeout(900)   # worker restarts: ~1 min quiet, several at load 20
def test_a_stuck_run_stops_says_where_and_releases_its_lock(tmp_path):
    """A fit that never ends and no time limit: once every worker is idle for stall-seconds,
    the run stops (exit 1) naming the task and where it waits; the lock is released."""
    wf = fh.faulty_workflow(tmp_path / "s.yaml", "BlockStuckRidge", "stuck_at", 10.0,
                            "fits_per_task: 16")
    env = fh.cli_env(DASK_CVFLOW__EXECUTION__STALL_SECONDS="6")
    code, _, err = fh.finish(fh.start_run(wf, tmp_path / "s.zarr", "--workers", "1", env=env,
                                          dashboard=()))
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("cvflow: error: StallError: no progress for "), last
    # the route auto picks for so short a study (issue 31: Dask's threads in this process,
    # which the process no longer waits for at exit) or worker processes (tls://)
    assert "tasks not back, 1 workers idle" in last, last
    assert " on tls://127.0.0.1:" in last or " on threads:" in last, last
    assert "sleep" in last, last                    # the stack names where it waits
    assert not (tmp_path / "s.zarr.lock").exists()


# the in-process distributed route: Dask's worker in this process (`--cluster threads` with a
# dashboard, where `auto` sends a study whose fits look longer than 10 s). Its CPU, as Dask
# reports it, is the whole process's: the event loop serving the scheduler, the client and the
# dashboard used 4-8 % of a core beside a sleeping fit, and the run did not stop in 2 minutes
# with stall-seconds 12; then the worker's close waited 30 s more for the stuck fit.
IN_PROCESS = ("--cluster", "threads", "--dashboard-port", "0", "--workers", "1")


def _run_in_process(tmp_path, learner: str, attr: str, *, stall_seconds: int):
    """``cvflow run`` of ``learner`` (misbehaving at alpha 10, 16 fits a task) on that route, in a
    fresh process: (exit code, stderr)."""
    wf = fh.faulty_workflow(tmp_path / "s.yaml", learner, attr, 10.0, "fits_per_task: 16")
    env = fh.cli_env(DASK_CVFLOW__EXECUTION__STALL_SECONDS=str(stall_seconds))
    code, _, err = fh.finish(fh.start_run(wf, tmp_path / "s.zarr", *IN_PROCESS, env=env,
                                          dashboard=()), timeout=120)
    return code, err


def test_a_stuck_fit_in_process_with_a_dashboard_stops_the_run(tmp_path):
    """The fits' own CPU is watched (cvflow.execution.fit_cpu): a fit that never returns stops
    the run with StallError's line (exit 1), naming the in-process worker and where it waits;
    the lock is released."""
    code, err = _run_in_process(tmp_path, "BlockStuckRidge", "stuck_at", stall_seconds=6)
    assert code == 1, err
    assert "dashboard: http://127.0.0.1:" in err, err          # the route this test names
    last = err.strip().splitlines()[-1]
    assert last.startswith("cvflow: error: StallError: no progress for "), last
    assert "tasks not back, 1 workers idle" in last and " on inproc://" in last, last
    assert "sleep" in last, last
    assert not (tmp_path / "s.zarr.lock").exists()


def test_a_long_computing_fit_in_process_is_no_stall(tmp_path):
    """The other way: a block computing for longer than stall-seconds (4 fits of 1.5 s of CPU
    in one task, against 3 s) is progress on that route: the run ends with every fit done,
    none failed."""
    code, err = _run_in_process(tmp_path, "BlockBusyRidge", "busy_at", stall_seconds=3)
    assert code == 0, err
    assert "dashboard: http://127.0.0.1:" in err, err
    cube = fh.cube_arrays(tmp_path / "s.zarr")
    assert cube["done"].all() and not cube["failed"].any(), cube


def test_a_run_that_lost_its_lock_stops_and_writes_no_more(tmp_path):
    """Another run takes the lock over (its record replaces ours): the heartbeat notices, the
    loop cancels every task and raises; a task already running refuses to write (fenced)."""
    import json
    import threading

    from cvflow.errors import LockLostError
    from cvflow.store.lock import lock_path

    wf = fh.slow_workflow(tmp_path / "s.yaml", delay=0.3)
    store = tmp_path / "s.zarr"
    recorded = []
    stolen = threading.Event()

    def steal(event):
        recorded.append(event)
        if event["event"] == "block" and len(recorded) == 3:
            path = lock_path(store)
            record = json.loads(path.read_text())
            path.write_text(json.dumps({**record, "token": "another-run", "pid": 1}))
            stolen.set()

    with dask.config.set({"cvflow.lock.heartbeat": 0.2, "cvflow.lock.stale-after": 60}):
        with pytest.raises(LockLostError, match="this run"):
            cvflow.run(wf, store=store, workers=2, progress=steal)
    assert stolen.is_set()
    done = fh.cube_arrays(store)["done"]
    assert 2 <= done.sum() < done.size           # stopped: most blocks never written


@pytest.mark.parametrize("seconds, workers, safe, timeout, warm, chosen", [
    # issue 31: any study stays in this process unless processes save (seconds * (1 -
    # 1/workers)) more than their 2 s start, or 0.3 s once this session's warm cluster runs;
    # a fit_timeout always picks processes
    (0.01, 2, False, None, False, "threads"), (600.0, 2, False, None, False, "local"),
    (0.01, 2, True, None, False, "threads"), (3.9, 2, True, None, False, "threads"),
    (3.9, 2, False, None, False, "threads"), (4.1, 2, False, None, False, "local"),
    (4.1, 2, True, None, False, "local"), (100.0, 1, True, None, False, "threads"),
    (1.0, 2, False, None, True, "local"), (1.0, 2, False, None, False, "threads"),
    (0.01, 2, True, 5, False, "local"), (0.01, 2, False, 5, False, "local")])
def test_auto_choice(seconds, workers, safe, timeout, warm, chosen, monkeypatch):
    from cvflow.execution import schedulers

    monkeypatch.setattr(schedulers, "warm_alive", lambda: warm)
    monkeypatch.setattr(schedulers, "_busy", lambda: 1.0)      # as on idle cores
    with dask.config.set({"cvflow.cluster.auto": {"process_start_seconds": 2.0,
                                                  "warm_seconds": 0.3}}):
        name, why = choose("auto", seconds=seconds, workers=workers, in_process_safe=safe,
                           fit_timeout=timeout)
    assert name == chosen and why.startswith(chosen)


def test_ridge_paths_release_the_gil_lasso_and_trees_hold_it():
    from cvflow.execution.sizing import gil_share
    from cvflow.workflow.params import Param

    ridge = [Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 1.0, 10.0)]
    lasso = [Param("l", "sklearn.linear_model.Lasso", hyper={"alpha": a}) for a in (0.1, 1.0)]
    tree = [Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": 2})]
    assert gil_share(ridge) == 0.0 and gil_share(ridge, path_aware=False) == 1.0
    assert gil_share(lasso + tree) == 1.0
    assert gil_share(ridge + lasso + tree) == pytest.approx(3 / 6)
    assert choose("local", seconds=0.0) == ("local", "local (as asked)")


class NapRegressor(Ridge):
    """A fit that waits 150 ms without holding the GIL (as libsvm's SVC fit computes): long
    beside the scheduling noise of a loaded machine (at 40 ms the measured share read 0.5+
    once while two suites ran side by side)."""

    def fit(self, X, y, sample_weight=None):
        time.sleep(0.15)
        return super().fit(X, y, sample_weight=sample_weight)


def test_auto_keeps_in_threads_a_study_whose_fits_release_the_gil(tmp_path, monkeypatch):
    """A study long enough for worker processes to pay if its fits held the GIL (6 params x 5
    folds of 150 ms: 4.5 s, processes to start in 1 s here: they pay above a measured share of
    0.44) stays in threads when two of its fits run side by side in the time of one: measured,
    and said in the reason."""
    from sklearn.datasets import load_diabetes

    from cvflow.execution import schedulers

    monkeypatch.setattr(schedulers, "warm_alive", lambda: False)
    monkeypatch.setattr(schedulers, "_busy", lambda: 1.0)
    X, y = load_diabetes(return_X_y=True)
    study = cvflow.Study(NapRegressor(), param_grid={"alpha": list(np.logspace(-2, 2, 6))}, cv=5,
                         estimators=["kfold"])
    with dask.config.set({"cvflow.cluster.auto": {"process_start_seconds": 1.0}}):
        result = study.run(X, y, store=tmp_path / "s.zarr")
    assert result.run.execution.startswith("threads"), result.run.execution
    assert "of it holding the GIL" in result.run.execution


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


@pytest.mark.timeout(900)   # worker restarts: ~1 min quiet, several at load 20
def test_no_worker_outlives_its_killed_client_and_nothing_is_written_after(tmp_path):
    """issue 23: after a SIGKILL of the client its workers lived on and wrote chunks for a
    minute with no lock held. Process workers watch their parent: they end with it."""
    import os
    import signal
    import time

    wf = fh.slow_workflow(tmp_path / "s.yaml", delay=0.3)
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--workers", "2", dashboard=())
    try:
        fh.wait_for_done(store, 4, proc)
        workers = fh.worker_pids(proc)
        assert len(workers) == 2, workers
        os.kill(proc.pid, signal.SIGKILL)                 # the client only
        proc.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "a worker outlived its client"
        before = {p: p.stat().st_mtime_ns for p in (store / "pred").rglob("*") if p.is_file()}
        time.sleep(3)
        after = {p: p.stat().st_mtime_ns for p in (store / "pred").rglob("*") if p.is_file()}
        assert after == before, "a chunk was written after the client died"
    finally:
        fh.reap(proc)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


NO_FORK = """\
import os, sys
forks = []
os.register_at_fork(before=lambda: forks.append(1))    # os.fork / multiprocessing's fork
import cvflow
result = cvflow.run(sys.argv[1], store=sys.argv[2], cluster=sys.argv[3], workers=2)
print("forks", len(forks), result.execution.split(":")[0].split(" ")[0], result.failed)
"""


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cluster", ["auto", "threads", "local"])
def test_a_run_never_forks_its_threaded_process(tmp_path, cluster):
    """issue 22: forking the client while a zarr thread held zarr's loop lock hung the forked
    workers (zarr 3.1 resets its loop after a fork, not its lock). No route forks the client:
    workers are spawned (multiprocessing's spawn, subprocess: fork and exec in one C call,
    which runs no Python at-fork handler). A fresh interpreter counts the forks."""
    wf = fh.dying_workflow(tmp_path / "w.yaml", 10.0, fits_per_task=4)     # a dead worker too
    proc = subprocess.run([sys.executable, "-c", NO_FORK, str(wf), str(tmp_path / "s.zarr"),
                           cluster], env=fh.cli_env(), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    if cluster in ("threads", "auto"):
        # the learner's os._exit ends the client: the price of threads, which auto picks for a
        # study this short (as GridSearchCV(n_jobs=None) fits in the caller's process)
        assert proc.returncode == 3, proc.stderr[-2000:]
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["forks", "0", "local", "4"], proc.stdout


def test_the_python_entry_refuses_bad_arguments_before_any_store_work(tmp_path, write_workflow):
    """`cvflow.run` checks what `cvflow run` checks (cvflow.execution.preflight) before the lock and store."""
    from cvflow.errors import InputError

    for kwargs, match in (({"workers": 0}, "workers"), ({"dashboard_port": 99999}, "dashboard")):
        with pytest.raises(InputError, match=match):
            cvflow.run(write_workflow(RIDGE), store=tmp_path / "s.zarr", **kwargs)
        assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "s.zarr.lock").exists()


GATED = """\
name: gated
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: ridge
    class: fault_helpers.GatedRidge
    params: {{gate: {gate}, claim: {claim}}}
    grid: {{alpha: [0.1, 1.0, 10.0]}}
design: {{folds: 3, seed: 0}}
estimators: [kfold]
execution: {{fits_per_task: 1, cluster: local, path_aware: false}}
"""


@pytest.mark.timeout(600)
def test_fits_back_before_a_slow_one_are_written_while_it_runs(tmp_path):
    """A burst of fits back while one fit is still running is written to the store (and so to
    `cvflow status`) without waiting for the next fit to come back."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(GATED.format(gate=tmp_path / "gate", claim=tmp_path / "claim"))
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--workers", "2", dashboard=())
    try:
        fh.wait_for_done(store, 11, proc, timeout=300)     # 12 fits, one held by its gate
        assert proc.poll() is None                         # the gate holds it: still running
        status = subprocess.run([sys.executable, "-m", "cvflow", "status", str(store)],
                                capture_output=True, text=True, env=fh.cli_env(), timeout=120)
        assert "11 of 12" in status.stdout or "11/12" in status.stdout, status.stdout
        (tmp_path / "gate").touch()
        rc, _, err = fh.finish(proc)
        assert rc == 0, err[-2000:]
        assert fh.done_count(store) == 12
    finally:
        fh.reap(proc)


def test_a_large_data_set_runs_without_distributeds_large_graph_warning(tmp_path, recwarn):
    """X of 12 MB travels in the task that holds it: no "Sending large graph" advice printed."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 500))
    y = X[:, :5].sum(axis=1) + rng.normal(size=3000)
    study = cvflow.Study({"ridge": (Ridge(), {"alpha": [0.1, 1.0, 10.0]})}, cv=3,
                         estimators=["kfold"])
    study.run(X, y, store=tmp_path / "s.zarr")
    assert not [w for w in recwarn if "large graph" in str(w.message)], \
        [str(w.message)[:80] for w in recwarn]


@pytest.mark.slow
@pytest.mark.timeout(900)   # worker restarts: 7 min at load 18
def test_a_first_grid_point_that_kills_its_process_is_checked_on_the_workers(tmp_path):
    """The pre-run check fits each learner's first grid point: on worker processes (asked for:
    crash isolation) it runs on the workers, so a fit ending its process there (alpha = 0.1, the
    first) leaves `cvflow run` alive; the study runs and records those fits failed, exit 0. (On
    the in-process route auto picks for so short a study, the fit ends `cvflow run`, as it ends
    GridSearchCV(n_jobs=None): test_a_run_never_forks_its_threaded_process.)"""
    wf = fh.dying_workflow(tmp_path / "d.yaml", 0.1, fits_per_task=4)
    store = tmp_path / "s.zarr"
    res = subprocess.run([sys.executable, "-m", "cvflow", "run", str(wf), "--store", str(store),
                          "--cluster", "local"],
                         capture_output=True, text=True, env=fh.cli_env(), timeout=840)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "the trial fit before the run ended its worker process" in res.stderr
    cube = fh.cube_arrays(store)
    assert cube["done"].all()
    np.testing.assert_array_equal(cube["failed"].any(axis=1), [True, False, False, False])
    assert cube["failed"][0].all()
    assert all("exit status 3" in e for e in cube["error"][0]), cube["error"][0]
