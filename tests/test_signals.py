"""Ctrl-C, SIGTERM and a closed terminal (SIGHUP) at several moments, in fresh processes.

Every case runs the real entry point (``cvflow run``, ``Study.run``, ``SearchCV.fit``) in a
process of its own session, sends the signal as a terminal does (to the whole process group) or
as ``kill`` does (to the client alone), and checks what a user sees: exit status 130 (or
``RunInterrupted``, a KeyboardInterrupt, in Python), one line saying what was kept and how to
resume, no traceback from any process, the store's lock released, no process left, and the
rerun finishing the cube bit for bit as an uninterrupted run writes it
(:mod:`cvflow.execution.interrupts`, :mod:`cvflow.execution.worker_session`).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import fault_helpers as fh

pytestmark = pytest.mark.timeout(900)

N_FITS = 4 * 6
NOISE = re.compile(r"Traceback|Exception ignored|KeyboardInterrupt|CommClosedError|"
                   r"Cannot close a running event loop|IOLoop is closed")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    return fh.slow_workflow(tmp_path_factory.mktemp("signals") / "slow.yaml", delay=0.3)


@pytest.fixture(scope="module")
def clean(workflow, client):
    """The reference: the same workflow run without interruption (shared LocalCluster)."""
    import cvflow.execution.run

    store = workflow.parent / "clean.zarr"
    result = cvflow.execution.run.run(workflow, store=store, client=client, progress=False)
    assert result.fits_executed == N_FITS and result.failed == 0
    return store


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _left(procs: list[psutil.Process], wait: float = 30.0) -> list[int]:
    """The processes of ``procs`` still alive (not zombies) after at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p.pid)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _wait_for_workers(proc: subprocess.Popen, n: int, timeout: float = 300) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        pids = fh.worker_pids(proc)
        if len(pids) >= n:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"{n} worker processes did not start (rc {proc.poll()})")


def _stop(proc: subprocess.Popen, sig: int, to: str) -> tuple[str, list[psutil.Process]]:
    """Send ``sig`` to the group (a terminal) or the client (``kill``); its stderr and the
    processes it had then."""
    procs = _descendants(proc.pid)
    if to == "group":
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=180)
    return err, procs


def _assert_stopped(proc, err: str, procs, store) -> None:
    assert proc.returncode == 130, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("cvflow: interrupted")]
    assert len(lines) == 1, err[-3000:]
    assert re.search(r"cvflow: interrupted: (\d+ of 24 fits kept in \S+|nothing kept \(\S+ not "
                     r"created yet\)); resume with: cvflow run \S+ --store \S+", lines[0]), lines[0]
    assert not NOISE.search(err), err[-3000:]
    assert fh.read_lock_pid(store) is None            # the lock released
    assert not _left(procs), [p.pid for p in procs]   # no worker, no resource tracker left


def _resume(workflow, store, clean, *args: str) -> None:
    rc, out, err = fh.finish(fh.start_run(workflow, store, *args))
    assert rc == 0, err[-2000:]
    fh.assert_same_cube(store, clean)


def test_ctrl_c_on_local_cluster_during_fits(workflow, clean, tmp_path):
    """A terminal's Ctrl-C reaches only the client: the workers are in sessions of their own."""
    store = tmp_path / "s.zarr"
    args = ("--workers", "2", "--cluster", "local")
    proc = fh.start_run(workflow, store, *args)
    try:
        fh.wait_for_done(store, 4, proc, timeout=300)
        workers = fh.worker_pids(proc)
        assert workers and all(os.getsid(pid) != os.getsid(proc.pid) for pid in workers)
        err, procs = _stop(proc, signal.SIGINT, "group")
    finally:
        fh.reap(proc)
    _assert_stopped(proc, err, procs, store)
    assert re.search(r"cvflow: interrupted: \d+ of 24 fits kept in ", err)
    _resume(workflow, store, clean, *args)


def test_ctrl_c_while_workers_start(workflow, clean, tmp_path):
    """Ctrl-C while the worker processes import Python and distributed (before any preload):
    they start with the terminal's signals blocked, and print nothing."""
    store = tmp_path / "s.zarr"
    args = ("--workers", "2", "--cluster", "local")
    proc = fh.start_run(workflow, store, *args)
    try:
        _wait_for_workers(proc, 1)
        err, procs = _stop(proc, signal.SIGINT, "group")
    finally:
        fh.reap(proc)
    _assert_stopped(proc, err, procs, store)
    _resume(workflow, store, clean, *args)


@pytest.mark.slow
@pytest.mark.parametrize("cluster, sig, to", [("local", signal.SIGTERM, "client"),
                                              ("local", signal.SIGHUP, "group"),
                                              ("threads", signal.SIGINT, "group"),
                                              ("threads", signal.SIGTERM, "client"),
                                              ("threads", signal.SIGHUP, "group")])
def test_signal_during_fits(workflow, clean, tmp_path, cluster, sig, to):
    store = tmp_path / "s.zarr"
    args = ("--workers", "2", "--cluster", cluster)
    proc = fh.start_run(workflow, store, *args)
    try:
        fh.wait_for_done(store, 4, proc, timeout=300)
        err, procs = _stop(proc, sig, to)
    finally:
        fh.reap(proc)
    _assert_stopped(proc, err, procs, store)
    _resume(workflow, store, clean, *args)


SCRIPT = textwrap.dedent("""\
    import os, signal, sys, time
    from sklearn.datasets import load_diabetes
    import cvflow
    import cvflow.execution.progress as progress
    from fault_helpers import SlowRidge

    class Dropped:
        def __del__(self):            # a Ctrl-C that lands while Python runs a destructor
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)

    def summary_lines(result, real=progress.summary_lines):
        Dropped()                     # during the closing report
        return real(result)

    if sys.argv[3] == "report":
        progress.summary_lines = summary_lines
    X, y = load_diabetes(return_X_y=True)
    study = cvflow.Study({"slow": (SlowRidge(delay=float(sys.argv[4])),
                                   {"alpha": [0.01, 0.1, 1.0, 10.0]})}, cv=5,
                         execution={"fits_per_task": 1})
    try:
        study.run(X, y, store=sys.argv[1], cluster=sys.argv[2], workers=2)
    except KeyboardInterrupt as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        raise
    print("carried on", flush=True)
    """)


@pytest.mark.parametrize("cluster", ["threads", pytest.param("local", marks=pytest.mark.slow)])
def test_ctrl_c_in_a_destructor_during_the_closing_report(tmp_path, cluster):
    """Python cannot raise in a destructor: the Ctrl-C is raised by Study.run after it, not lost
    (it used to print ``Exception ignored ... KeyboardInterrupt`` and carry on, exit 0)."""
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    store = tmp_path / "s.zarr"
    proc = subprocess.run([sys.executable, str(script), str(store), cluster, "report", "0"],
                          capture_output=True, text=True, env=fh.cli_env(), timeout=600,
                          start_new_session=True)
    # Python's own exit on the uncaught KeyboardInterrupt (1, or the signal): not 0
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert re.search(r"RunInterrupted: interrupted: 24 of 24 fits kept in \S+, all of them; run "
                     "it again for the results", proc.stdout), proc.stdout
    assert "carried on" not in proc.stdout
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    assert fh.read_lock_pid(store) is None


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["threads", "local"])
def test_ctrl_c_in_study_run_then_resume(tmp_path, cluster):
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    store = tmp_path / "s.zarr"
    proc = subprocess.Popen([sys.executable, str(script), str(store), cluster, "fits", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=fh.cli_env(), start_new_session=True)
    try:
        fh.wait_for_done(store, 4, proc, timeout=300)
        procs = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        fh.reap(proc)
    assert re.search(r"RunInterrupted: interrupted: \d+ of 24 fits kept in ", out), out + err
    assert "carried on" not in out
    # Python's own report of the uncaught KeyboardInterrupt is the only traceback
    assert err.count("Traceback") == 1 and "Exception ignored" not in err, err[-3000:]
    assert fh.read_lock_pid(store) is None and not _left(procs)
    reference = tmp_path / "reference.zarr"
    for path in (store, reference):            # resumed, and run once without interruption
        proc = subprocess.run([sys.executable, str(script), str(path), cluster, "fits", "0.3"],
                              capture_output=True, text=True, env=fh.cli_env(), timeout=600)
        assert "carried on" in proc.stdout, proc.stderr[-3000:]
    fh.assert_same_cube(store, reference)
