"""The store run lock: refused while a live run holds it, taken over when its owner is gone."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from cvflow.errors import InputError, StoreError
from cvflow.store.lock import lock_path, read_lock, run_lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write(store, **record):
    path = lock_path(store)
    path.write_text(json.dumps(record))
    return path


def test_lock_is_a_sibling_file_removed_on_exit(tmp_path):
    store = tmp_path / "s.zarr"
    with run_lock(store) as lock:
        record = read_lock(store)
        assert lock.path == tmp_path / "s.zarr.lock" and lock.path.exists()
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert record["token"] == lock.token
    assert not lock_path(store).exists() and read_lock(store) is None


def test_lock_released_when_the_block_raises(tmp_path):
    store = tmp_path / "s.zarr"
    with pytest.raises(KeyboardInterrupt), run_lock(store):
        raise KeyboardInterrupt
    assert read_lock(store) is None


def test_second_holder_refused_with_owner_named(tmp_path):
    store = tmp_path / "s.zarr"
    with run_lock(store):
        with pytest.raises(StoreError, match=rf"s\.zarr is being written by another cvflow run "
                                             rf"\(pid {os.getpid()} on {socket.gethostname()}"):
            with run_lock(store):
                pass
    with run_lock(store):  # free again
        pass


def test_live_process_in_another_interpreter_refuses(tmp_path):
    store = tmp_path / "s.zarr"
    code = ("import sys, time; from cvflow.store.lock import run_lock\n"
            f"with run_lock({str(store)!r}):\n    print('held', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=f"pid {proc.pid} on"):
            with run_lock(store):
                pass
        proc.kill()  # SIGKILL: no cleanup, the lock file stays behind
        proc.wait()
        assert read_lock(store)["pid"] == proc.pid
        with run_lock(store) as lock:  # dead pid on this host: taken over at once
            assert read_lock(store)["token"] == lock.token
    finally:
        proc.kill()
        proc.wait()


def test_stale_lock_of_dead_pid_taken_over(tmp_path, caplog):
    store = tmp_path / "s.zarr"
    now = time.time()
    _write(store, host=socket.gethostname(), pid=_dead_pid(), started=now, heartbeat=now, token="x")
    with caplog.at_level("WARNING", logger="cvflow.store.lock"), run_lock(store) as lock:
        assert read_lock(store)["token"] == lock.token
    assert "taking over the stale lock" in caplog.text and "is gone" in caplog.text


def test_other_host_refused_while_heartbeat_fresh_taken_when_old(tmp_path):
    store = tmp_path / "s.zarr"
    now = time.time()
    _write(store, host="elsewhere", pid=1, started=now, heartbeat=now - 5, token="x")
    with pytest.raises(StoreError, match="pid 1 on elsewhere"):
        with run_lock(store, heartbeat=1, stale_after=30):
            pass
    _write(store, host="elsewhere", pid=1, started=now, heartbeat=now - 31, token="x")
    with run_lock(store, heartbeat=1, stale_after=30) as lock:
        assert read_lock(store)["token"] == lock.token


def test_reused_pid_does_not_keep_the_lock_forever(tmp_path):
    """Our own pid is alive, but a heartbeat that old means the record is from another life."""
    store = tmp_path / "s.zarr"
    now = time.time()
    _write(store, host=socket.gethostname(), pid=os.getpid(), started=now - 999,
           heartbeat=now - 999, token="x")
    with run_lock(store, heartbeat=1, stale_after=60):
        pass


@pytest.mark.parametrize("content", [b"", b"not json", b'{"host": "h", "pi'])
def test_unreadable_lock_is_taken_over_not_obeyed(tmp_path, caplog, content):
    """An empty or cut lock (a run stopped while writing it) belongs to no live run: cvflow
    writes its locks whole. It used to refuse every run for stale_after with "pid ? on ?"."""
    store = tmp_path / "s.zarr"
    path = lock_path(store)
    path.write_bytes(content)
    old = time.time() - 60
    os.utime(path, (old, old))
    with run_lock(store, heartbeat=1, stale_after=120) as lock:
        assert read_lock(store)["token"] == lock.token
    assert "the lock file is empty or unreadable, 60 s old (a run stopped while writing it" \
        in caplog.text


def test_fresh_unreadable_lock_is_judged_after_a_short_grace(tmp_path, caplog):
    """Just written: given the time an older cvflow's open-then-write takes, then taken over
    (not refused for stale_after)."""
    store = tmp_path / "s.zarr"
    lock_path(store).write_bytes(b"")
    with run_lock(store, heartbeat=1, stale_after=120) as lock:
        assert read_lock(store)["token"] == lock.token
    assert "the lock file is empty or unreadable" in caplog.text


def test_lock_write_on_a_full_disk_leaves_no_lock(tmp_path, caplog):
    """A lock write that fails (here: the file size limit of the process, EFBIG, as ENOSPC on a
    full disk) leaves nothing behind, so the next run takes the lock at once."""
    store = tmp_path / "s.zarr"
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))\n"
            "from cvflow.store.lock import run_lock\n"
            "try:\n    run_lock(sys.argv[1]).__enter__()\n"
            "except OSError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # the errno kept: a full disk (ENOSPC) is told apart (cvflow.execution.run.disk_full)
    assert proc.stdout.startswith(f"[Errno 27] cannot write the run lock {lock_path(store)}: "
                                  "File too large"), proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []      # no lock, no temporary file
    with run_lock(store, heartbeat=1, stale_after=120):
        pass
    assert "taking over" not in caplog.text                      # there was nothing to take


def test_heartbeat_refreshes_the_record(tmp_path):
    store = tmp_path / "s.zarr"
    with run_lock(store, heartbeat=0.1, stale_after=5):
        first = read_lock(store)["heartbeat"]
        time.sleep(0.5)
        assert read_lock(store)["heartbeat"] > first


def test_bad_timing_arguments(tmp_path):
    with pytest.raises(InputError, match=r"^config cvflow\.lock\.stale-after "
                       r"\(DASK_CVFLOW__LOCK__STALE_AFTER\): 1 s; give more seconds than "
                       r"cvflow\.lock\.heartbeat \(2 s; the defaults: 120 and 10\)$"):
        with run_lock(tmp_path / "s.zarr", heartbeat=2, stale_after=1):
            pass


def test_a_symlinked_store_is_the_same_store_for_the_lock(tmp_path):
    """Issue 32: the lock keyed on the name given, so a run through ``link.zarr -> real.zarr``
    took ``link.zarr.lock`` while another held ``real.zarr.lock``."""
    real = tmp_path / "real.zarr"
    real.mkdir()
    link = tmp_path / "link.zarr"
    link.symlink_to(real)
    (tmp_path / "dir").symlink_to(tmp_path)          # an alias of a parent directory too
    assert lock_path(link) == lock_path(real) == lock_path(tmp_path / "dir" / "link.zarr")
    with run_lock(real):
        for alias in (link, tmp_path / "dir" / "real.zarr"):
            with pytest.raises(StoreError, match=r"is being written by another cvflow run"):
                with run_lock(alias):
                    pass
    with run_lock(link):
        assert read_lock(real) is not None
        with pytest.raises(StoreError, match=r"is being written by another cvflow run"):
            with run_lock(real):
                pass


def test_a_run_through_a_symlink_is_refused_while_another_runs(tmp_path):
    """Two ``cvflow run`` processes: A on real.zarr (one fit held open at a gate), B on
    link.zarr -> real.zarr while A runs: B is refused with one line (it used to write the same
    store beside A, both exiting 0); A finishes."""
    import fault_helpers as fh
    from cvtest import QUICK

    wf = tmp_path / "wf.yaml"
    wf.write_text(QUICK.replace("class: sklearn.linear_model.Ridge",
                                "class: fault_helpers.GatedRidge\n"
                                f"    params: {{gate: {str(tmp_path / 'gate')!r}, "
                                f"claim: {str(tmp_path / 'claim')!r}, limit: 600}}")
                  + "execution: {fits_per_task: 1}\n")
    real, link = tmp_path / "real.zarr", tmp_path / "link.zarr"
    a = fh.start_run(wf, real, "--cluster", "threads", dashboard=())
    try:
        fh.wait_for_done(real, 1, a, timeout=240)
        link.symlink_to(real)
        b = subprocess.run([sys.executable, "-m", "cvflow", "run", str(wf), "--store", str(link),
                            "--cluster", "threads"], capture_output=True, text=True,
                           env=fh.cli_env(), timeout=240)
        (tmp_path / "gate").touch()
        rc, _, err = fh.finish(a)
    finally:
        (tmp_path / "gate").touch()
        fh.reap(a)
    assert b.returncode == 2, b.stderr[-2000:]
    lines = b.stderr.strip().splitlines()
    assert len(lines) == 1 and "link.zarr is being written by another cvflow run" in lines[0], \
        b.stderr[-2000:]
    assert rc == 0, err[-2000:]


@pytest.mark.parametrize("beat", [time.time() + 10**9, float("nan"), float("inf"), "soon"],
                         ids=["future", "nan", "inf", "text"])
def test_a_heartbeat_that_is_no_time_of_ours_goes_stale_by_the_files_age(tmp_path, caplog, beat):
    """Issue 32: a heartbeat far in the future (or NaN) was never stale: every run was refused
    for ever ("heartbeat -998204179311 s ago"). The lock file's age stands for it."""
    store = tmp_path / "s.zarr"
    path = _write(store, host="elsewhere", pid=1, started=time.time(), heartbeat=beat, token="x")
    old = time.time() - 300
    os.utime(path, (old, old))
    with caplog.at_level("WARNING", logger="cvflow.store.lock"), \
            run_lock(store, heartbeat=1, stale_after=120) as lock:
        assert read_lock(store)["token"] == lock.token
    assert f"taking over the stale lock of {store}: its heartbeat " in caplog.text
    assert "and the lock file has not changed for 300 s" in caplog.text


def test_a_fresh_lock_with_no_time_for_a_heartbeat_is_taken_after_stale_after(tmp_path, caplog):
    """Just written, with a heartbeat in the future: judged after stale_after seconds of this
    machine's clock during which it did not change, with a warning naming the lock."""
    store = tmp_path / "s.zarr"
    _write(store, host="elsewhere", pid=1, started=time.time(), heartbeat=time.time() + 3600,
           token="x")
    with caplog.at_level("WARNING", logger="cvflow.store.lock"), \
            run_lock(store, heartbeat=0.1, stale_after=1) as lock:
        assert read_lock(store)["token"] == lock.token
    assert (f"the run lock {lock_path(store)} has a heartbeat 3600 s in the future (pid 1 on "
            "elsewhere") in caplog.text
    assert "it is taken over if it does not change for 1 s" in caplog.text
    assert "its heartbeat 3600 s in the future, and it did not change for 1 s" in caplog.text


def test_a_live_owner_with_a_clock_ahead_keeps_its_lock(tmp_path):
    """An owner whose clock runs an hour ahead still refreshes its lock: it is alive."""
    import threading

    store = tmp_path / "s.zarr"
    stop = threading.Event()

    def owner():                         # rewrites its lock whole, as cvflow does
        tmp = tmp_path / "tmp"
        while not stop.is_set():
            tmp.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": time.time(),
                                       "heartbeat": time.time() + 3600, "token": "x"}))
            os.replace(tmp, lock_path(store))
            stop.wait(0.05)

    thread = threading.Thread(target=owner)
    thread.start()
    try:
        time.sleep(0.2)
        with pytest.raises(StoreError, match=r"s\.zarr is being written by another cvflow run "
                                             r"\(pid 1 on elsewhere, .*heartbeat 3600 s in the "
                                             r"future\)"):
            with run_lock(store, heartbeat=0.2, stale_after=2):
                pass
    finally:
        stop.set()
        thread.join()


def test_what_a_run_fits_is_in_its_lock_and_inherited_from_a_dead_run(tmp_path):
    """``mark`` writes the running fits into the record at once (read back from the file);
    a run taking over a dead run's lock that names running fits keeps that record
    (``inherited``), one that names none does not."""
    store = tmp_path / "s.zarr"
    running = [{"block": "params 2-2 x splits 0-3", "params": ["ridge {'alpha': 10.0}"]}]
    with run_lock(store) as lock:
        assert lock.inherited is None
        lock.mark(running)
        assert read_lock(store)["running"] == running
        lock.mark(None)
        assert "running" not in read_lock(store)
    now = time.time()
    _write(store, host=socket.gethostname(), pid=_dead_pid(), started=now, heartbeat=now,
           token="x", running=running)
    with run_lock(store) as lock:
        assert lock.inherited["running"] == running
        assert "running" not in read_lock(store)
