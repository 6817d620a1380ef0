"""The real one-node SLURM: end-to-end quickstart, TLS, a cancelled worker job mid-run."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fault_helpers as fh

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "cluster" / "slurm.yaml"


def _cvflow(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "cvflow", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env or fh.cli_env(), cwd=REPO)


def test_sbatch_runs_a_job():
    out = subprocess.run(["srun", "-p", "debug", "-N1", "-n1", "hostname"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_quickstart_on_slurm_equals_local_bit_for_bit(tmp_path, no_jobs_left):
    wf = REPO / "workflows" / "quickstart.yaml"
    t0 = time.perf_counter()
    slurm = _cvflow("run", wf, "--store", tmp_path / "slurm.zarr", "--cluster", PROFILE,
                    "--dashboard-port", "0")
    t_slurm = time.perf_counter() - t0
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    t0 = time.perf_counter()
    local = _cvflow("run", wf, "--store", tmp_path / "local.zarr", "--dashboard-port", "0")
    t_local = time.perf_counter() - t0
    assert local.returncode == 0, local.stderr[-3000:]
    # the store sits under /tmp here: fine on one node, but the user is told
    assert "usually local to each node" in slurm.stderr
    a = fh.cube_arrays(tmp_path / "slurm.zarr")
    b = fh.cube_arrays(tmp_path / "local.zarr")
    print(f"quickstart: SLURM {t_slurm:.1f}s, local {t_local:.1f}s, "
          f"{a['done'].sum()}/{a['done'].size} fits, pred {a['pred'].shape}")
    assert a["done"].all() and not a["failed"].any()
    assert a["pred"].tobytes() == b["pred"].tobytes()
    def report(out):  # the estimates, without the run's timings
        return [line for line in out.splitlines() if "fits performed" not in line]

    assert re.search(r"selected: ", slurm.stdout) and report(slurm.stdout) == report(local.stdout)


def test_slurm_cluster_with_tls(no_jobs_left):
    from cvflow.execution.schedulers import connect

    with connect("slurm", tls=True, workers=1, dashboard_port=0) as client:
        client.wait_for_workers(1, timeout=120)
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
        assert client.submit(sum, [20, 22]).result(timeout=120) == 42  # builtins: importable anywhere


def _worker_jobs() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", "dask-worker", "-t", "RUNNING", "-o", "%i"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def test_scancel_worker_job_mid_run(tmp_path, client, no_jobs_left):
    import cvflow.execution.run

    wf = fh.slow_workflow(tmp_path / "slow.yaml", delay=0.3)
    clean = tmp_path / "clean.zarr"
    cvflow.execution.run.run(wf, store=clean, client=client)
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--cluster", str(PROFILE))
    try:
        before = fh.wait_for_done(store, 4, proc, timeout=300)
        jobs = _worker_jobs()
        assert jobs, "no running dask-worker job"
        subprocess.run(["scancel", jobs[0]], check=True, timeout=30)
        print(f"scancel {jobs[0]} (of {jobs}) with {before}/24 fits done")
        rc, out, err = fh.finish(proc, timeout=600)
    finally:
        fh.reap(proc)
    assert rc == 0, err[-3000:]
    fh.assert_same_cube(store, clean)


@pytest.mark.skipif(os.environ.get("CVFLOW_SLURM_LIFETIME_TEST") != "1",
                    reason="timing-sensitive (set CVFLOW_SLURM_LIFETIME_TEST=1): workers living "
                           "20-40 s retire mid-task; passed 3 of 4 runs, once ran past 600 s")
def test_workers_retire_before_walltime_and_are_replaced(tmp_path, client, no_jobs_left):
    """Jobs with a 1-minute walltime, workers retiring at 30-40 s (lifetime + stagger): the
    adaptive cluster submits fresh jobs as they go, no job reaches its walltime, and the
    study outlives every job, ending with the cube of a run that never lost a worker."""
    import cvflow.execution.run

    wf = fh.slow_workflow(tmp_path / "slow.yaml", alphas=(0.01, 0.1, 1.0, 10.0, 100.0, 1000.0),
                          delay=2.5)
    clean = tmp_path / "clean.zarr"
    cvflow.execution.run.run(wf, store=clean, client=client)
    logs = tmp_path / "logs"
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--cluster", str(PROFILE),
                        "--cluster-option", "jobqueue.walltime=00:01:00",
                        "--cluster-option", "lifetime=30s",
                        "--cluster-option", "lifetime_stagger=10s",
                        "--cluster-option", f"jobqueue.log_directory={logs}",
                        env=fh.cli_env(DASK_LOGGING__DISTRIBUTED="info"))   # the jobs log why they end
    t0 = time.perf_counter()
    try:
        rc, out, err = fh.finish(proc, timeout=600)
    finally:
        fh.reap(proc)
    assert rc == 0, err[-3000:]
    fh.assert_same_cube(store, clean)
    texts = {p.name: p.read_text(errors="replace") for p in logs.glob("*.err")}   # one per job
    print(f"run {time.perf_counter() - t0:.0f} s;", {n: len(t) for n, t in texts.items()})
    assert len(texts) > 2, f"no job was replaced: {sorted(texts)}"      # 2 at a time, then more
    assert not [n for n, t in texts.items() if "TIME LIMIT" in t], "a job reached its walltime"
    retired = [n for n, t in texts.items() if "worker-lifetime-reached" in t]
    assert retired, "no worker retired by its lifetime"


def test_report_on_slurm_equals_the_report_in_process(tmp_path, no_jobs_left):
    """``cvflow report STORE --cluster PROFILE`` (above the in-memory budget: the SLURM job's
    worker reads the store's blocks itself) gives the JSON of the report in this process."""
    import json

    store = tmp_path / "q.zarr"
    run = _cvflow("run", REPO / "workflows" / "quickstart.yaml", "--store", store,
                  "--cluster", "threads")
    assert run.returncode == 0, run.stderr[-3000:]
    env = fh.cli_env(DASK_CVFLOW__REDUCE__IN_MEMORY_BYTES="0")
    here = _cvflow("report", store, "--json", env=env)
    there = _cvflow("report", store, "--json", "--cluster", PROFILE, "--workers", "1", env=env)
    assert here.returncode == 0, here.stderr[-3000:]
    assert there.returncode == 0, there.stderr[-3000:]
    assert json.loads(there.stdout) == json.loads(here.stdout)


SUITE = """\
name: pair
data:
  - {source: synthetic, name: linear, params: {n: 120, p: 5}, seed: 1, label: lin}
  - {source: synthetic, name: sparse_linear, params: {n: 90, p: 8}, seed: 2, label: sparse}
learners:
  - {name: ridge, class: sklearn.linear_model.Ridge, grid: {alpha: [0.1, 1.0, 10.0]}}
  - {name: lasso, class: sklearn.linear_model.Lasso, grid: {alpha: [0.01, 0.1]}}
design: {folds: 5, repeats: 1, seed: 0}
estimators: [kfold]
"""


def test_a_suite_on_slurm_equals_its_threads_run_bit_for_bit(tmp_path, no_jobs_left):
    """A 2-data-set suite on the SLURM jobs (its data sets connecting from threads of their
    own, sharing one SLURMCluster) writes each cube as a run on Dask's threads does."""
    wf = tmp_path / "pair.yaml"
    wf.write_text(SUITE)
    slurm = _cvflow("run", wf, "--store", tmp_path / "slurm.zarr", "--cluster", PROFILE,
                    "--dashboard-port", "0")
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    threads = _cvflow("run", wf, "--store", tmp_path / "threads.zarr", "--cluster", "threads")
    assert threads.returncode == 0, threads.stderr[-3000:]
    for label in ("lin", "sparse"):
        fh.assert_same_cube(tmp_path / "slurm.zarr" / label, tmp_path / "threads.zarr" / label)
    assert slurm.stderr.count("execution: ") == 1, slurm.stderr[-3000:]   # one cluster, said once
