"""Faults on a real LocalCluster with process workers: killed workers, killed clients, cuts.

Every run here goes through the real ``cvflow run`` entry point in its own process group,
with ``fault_helpers.SlowRidge`` (Ridge + a sleep per fit, one fit per task) so there is time
to cut it; the reference is a clean, uninterrupted run of the same workflow.
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time

import pytest

import fault_helpers as fh
from cvflow.errors import StoreError

pytestmark = pytest.mark.timeout(600)

N_FITS = 4 * 6  # 4 alphas x (5 folds + full fit)
PERFORMED = re.compile(r": (\d+) fits performed in (\d+) tasks")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    return fh.slow_workflow(tmp_path_factory.mktemp("faults") / "slow.yaml", delay=0.25)


@pytest.fixture(scope="module")
def clean(workflow, client):
    """The reference: the same workflow run without interruption (shared LocalCluster)."""
    import cvflow.execution.run

    store = workflow.parent / "clean.zarr"
    result = cvflow.execution.run.run(workflow, store=store, client=client)
    assert result.fits_executed == N_FITS and result.failed == 0
    return store


def _performed(out: str) -> int:
    m = PERFORMED.search(out)
    if m:
        return int(m.group(1))
    assert "already complete, 0 fits performed" in out, out
    return 0


@pytest.mark.slow
def test_sigkill_one_worker_mid_run(workflow, clean, tmp_path):
    store = tmp_path / "s.zarr"
    proc = fh.start_run(workflow, store, "--workers", "2")
    try:
        before = fh.wait_for_done(store, 4, proc)
        workers = fh.worker_pids(proc)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        print(f"killed worker {workers[0]} with {before}/{N_FITS} fits done")
        rc, out, err = fh.finish(proc)
    finally:
        fh.reap(proc)
    assert rc == 0, err[-2000:]
    assert _performed(out) == N_FITS
    fh.assert_same_cube(store, clean)


@pytest.mark.slow
def test_sigkill_client_then_resume_fits_only_missing(workflow, clean, tmp_path):
    store = tmp_path / "s.zarr"
    proc = fh.start_run(workflow, store, "--workers", "2")
    try:
        fh.wait_for_done(store, 6, proc)
        # A second run on the same store while the first one goes on: refused, nothing touched.
        with pytest.raises(StoreError, match=r"s\.zarr is being written by another cvflow run "
                                             rf"\(pid {proc.pid} on "):
            import cvflow.execution.run
            cvflow.execution.run.run(workflow, store=store)
        os.kill(proc.pid, signal.SIGKILL)  # the client only; its workers die with it
        proc.wait()
    finally:
        fh.reap(proc)
    time.sleep(0.5)
    done_before = fh.done_count(store)
    assert 6 <= done_before < N_FITS
    assert fh.read_lock_pid(store) == proc.pid  # the dead client's lock is still there
    rc, out, err = fh.finish(fh.start_run(workflow, store, "--workers", "2"))
    assert rc == 0, err[-2000:]
    performed = _performed(out)
    print(f"client killed with {done_before}/{N_FITS} done; the rerun fitted {performed}")
    assert performed == N_FITS - done_before
    fh.assert_same_cube(store, clean)


@pytest.mark.slow
def test_all_workers_killed_mid_run(workflow, clean, tmp_path):
    store = tmp_path / "s.zarr"
    proc = fh.start_run(workflow, store, "--workers", "2")
    try:
        before = fh.wait_for_done(store, 4, proc)
        workers = fh.worker_pids(proc)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        print(f"killed all {len(workers)} workers with {before}/{N_FITS} fits done")
        rc, out, err = fh.finish(proc)
    finally:
        fh.reap(proc)
    if rc != 0:  # the scheduler may give up on a task after its workers died; resume then
        print(f"run failed after the kill ({err.strip().splitlines()[-1]}); resuming")
        rc, out, err = fh.finish(fh.start_run(workflow, store, "--workers", "2"))
    assert rc == 0, err[-2000:]
    fh.assert_same_cube(store, clean)


@pytest.mark.slow
@pytest.mark.parametrize("cluster, who", [("local", "client"), ("auto", "client"),
                                          ("auto", "process group")])
def test_ctrl_c_then_resume(workflow, clean, tmp_path, cluster, who):
    """Ctrl-C in a terminal reaches the whole process group (the worker processes too)."""
    store = tmp_path / "s.zarr"
    port = ("--dashboard-port", "0") if cluster == "local" else ()
    proc = fh.start_run(workflow, store, "--workers", "2", "--cluster", cluster, dashboard=port)
    try:
        fh.wait_for_done(store, 4, proc)
        if who == "client":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        left = fh.group_alive(proc.pid, wait=30)        # workers leave with their client
    finally:
        fh.reap(proc)
    assert proc.returncode == 130 and re.search(r"cvflow: interrupted: \d+ of 24 fits kept in "
                                                r".*; resume with: cvflow run ", err), err[-2000:]
    assert fh.read_lock_pid(store) is None  # released on Ctrl-C
    assert not left
    done_before = fh.done_count(store)
    rc, out, err = fh.finish(fh.start_run(workflow, store, "--workers", "2", "--cluster", cluster,
                                          dashboard=port))
    assert rc == 0, err[-2000:]
    assert _performed(out) == N_FITS - done_before
    fh.assert_same_cube(store, clean)


@pytest.mark.slow
def test_cli_second_run_refused(workflow, tmp_path):
    store = tmp_path / "s.zarr"
    first = fh.start_run(workflow, store, "--workers", "1")
    try:
        fh.wait_for_done(store, 1, first)
        rc, out, err = fh.finish(fh.start_run(workflow, store, "--workers", "1"), timeout=120)
        assert rc == 2 and err.count("\n") == 1, err
        assert re.match(rf"cvflow: error: store: {re.escape(str(store))} is being written by "
                        rf"another cvflow run \(pid {first.pid} on ", err), err
        rc, out, err = fh.finish(first)
        assert rc == 0, err[-2000:]
    finally:
        fh.reap(first)


def _cut_until_complete(workflow, store, clean, *, cuts: int, seed: int) -> list[str]:
    """Start the run and cut it ``cuts`` times, at a random moment (a random delay, which may
    fall in start-up or store creation, or a random number of fits done) and in a random way;
    then run once more uninterrupted and compare with the clean cube."""
    rng = random.Random(seed)
    log = []
    for i in range(cuts):
        proc = fh.start_run(workflow, store, "--workers", "2")
        how = rng.choice(["sigkill-client", "sigint-client", "sigkill-workers"])
        if rng.random() < 0.5:
            when, target = f"after {rng.uniform(0.2, 12.0):.1f}s", None
            deadline = time.monotonic() + float(when.split()[1][:-1])
        else:
            # a target above what is done (an earlier cut may have left all but one done)
            target = rng.randint(min(fh.done_count(store) + 1, N_FITS - 1), N_FITS - 1)
            when, deadline = f"at {target} fits done", time.monotonic() + 300
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                if target is not None and fh.done_count(store) >= target:
                    break
                time.sleep(0.05)
            if how == "sigkill-client":
                os.kill(proc.pid, signal.SIGKILL)
            elif how == "sigint-client":
                os.kill(proc.pid, signal.SIGINT)
            else:
                for pid in fh.worker_pids(proc):
                    os.kill(pid, signal.SIGKILL)
            try:  # Ctrl-C ends the run by itself; after killed workers the run goes on a bit
                proc.wait(timeout=30 if how == "sigint-client" else 3)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        except ProcessLookupError:
            pass
        finally:
            fh.reap(proc)
        log.append(f"cut {i + 1}: {how} {when} -> rc {proc.returncode}, "
                   f"{fh.done_count(store)}/{N_FITS} done")
    rc, out, err = fh.finish(fh.start_run(workflow, store, "--workers", "2"))
    log.append(f"final run: rc {rc}, {_performed(out) if rc == 0 else '?'} fits performed")
    print("\n".join(log))
    assert rc == 0, err[-2000:]
    fh.assert_same_cube(store, clean)
    return log


@pytest.mark.slow
def test_random_cuts_six_times_then_complete(workflow, clean, tmp_path):
    _cut_until_complete(workflow, tmp_path / "s.zarr", clean, cuts=6, seed=20240)


def test_store_creation_cut_midway_leaves_no_half_store(tmp_path, monkeypatch):
    """A run killed while creating the store leaves no store at its path; the rerun creates it."""
    import cvflow.execution.run
    from cvflow.store import creation, cube as cube_store
    from cvflow.store.group import is_store, read_mask
    from cvflow.workflow.spec import load_workflow

    wf = load_workflow(fh.slow_workflow(tmp_path / "wf.yaml"))
    study = wf.build()
    path = tmp_path / "s.zarr"

    real = creation.put_all

    def cut(location, objects):                        # half the objects written (the root's
        real(location, dict(list(objects.items())[:len(objects) // 2]))   # metadata first),
        raise KeyboardInterrupt                        # then the process is cut

    monkeypatch.setattr(creation, "put_all", cut)
    with pytest.raises(KeyboardInterrupt):
        cvflow.execution.run.prepare_store(wf, study, path)
    monkeypatch.undo()
    assert (path / "zarr.json").exists() and not is_store(path)
    with pytest.raises(StoreError, match=r"s\.zarr: its creation did not finish \(the run "
                                         r"creating it stopped or failed; .*s\.zarr\.creating "
                                         r"remains\); run the same command again"):
        cube_store.open_cube(path)
    layout = cvflow.execution.run.prepare_store(wf, study, path)  # the rerun
    assert is_store(path) and not (tmp_path / "s.zarr.creating").exists()
    assert read_mask(path, "done").shape == (4, study.design.n_splits)
    assert layout.chunks == (1, 1)
