"""Every failure one line naming the thing (issue 44): bad settings, a full disk, a store whose
creation did not finish, a data path that is not a regular file. Each through ``cvflow`` in a
fresh process, as a user meets it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import fault_helpers as fh
from cvflow import config


def _cvflow(*args: str, env: dict | None = None, cwd=None) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "cvflow", *args], capture_output=True,
                          text=True, env=env or fh.cli_env(), cwd=cwd, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("cvflow: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.fixture
def workflow(tmp_path):
    return fh.slow_workflow(tmp_path / "slow.yaml", alphas=(0.1, 1.0), folds=3, delay=0.0)


@pytest.mark.parametrize("variable, value, said", [
    ("DASK_CVFLOW__LOCK__STALE_AFTER", "10",
     r"config cvflow\.lock\.stale-after \(DASK_CVFLOW__LOCK__STALE_AFTER\): 10 s; give more "
     r"seconds than cvflow\.lock\.heartbeat \(10 s"),
    ("DASK_CVFLOW__LOCK__HEARTBEAT", "0",
     r"config cvflow\.lock\.heartbeat \(DASK_CVFLOW__LOCK__HEARTBEAT\): 0; give a number more "
     "than 0"),
    ("DASK_CVFLOW__EXECUTION__STALL_SECONDS", "-5",
     r"config cvflow\.execution\.stall-seconds \(DASK_CVFLOW__EXECUTION__STALL_SECONDS\): -5; "
     "give a number more than 0"),
])
def test_a_setting_out_of_range_is_named_with_its_range(workflow, tmp_path, variable, value, said):
    import re

    store = tmp_path / "s.zarr"
    rc, _, err = _cvflow("run", str(workflow), "--store", str(store), "--cluster", "threads",
                         env=fh.cli_env(**{variable: value}))
    assert rc == 2 and re.search(said, _one_line(err)), err
    assert not (tmp_path / "s.zarr.lock").exists()


def _variable(key: str) -> str:
    """Dask's environment variable for a config key (its documented rule)."""
    return "DASK_" + key.upper().replace(".", "__").replace("-", "_")


# every setting with a range, and a value just out of it: the schema's list, so that a range
# added later is tested too
RANGED = sorted(config.RANGES)


@pytest.mark.parametrize("key", RANGED)
def test_every_setting_with_a_range_refuses_a_value_out_of_it_in_one_line(workflow, tmp_path,
                                                                         key):
    """Whether or not the route reads it (allowed-failures only on distributed's schedulers,
    in-memory-bytes only when the report reduces): exit 2 before anything is written, one
    line naming the setting, its variable and its range."""
    above, least = config.RANGES[key]
    value, allowed = (f"{above:g}", f"more than {above:g}") if above is not None else \
        (f"{least - 1:g}", f"at least {least:g}")
    store = tmp_path / "s.zarr"
    rc, _, err = _cvflow("run", str(workflow), "--store", str(store), "--cluster", "threads",
                         env=fh.cli_env(**{_variable(key): value}))
    assert rc == 2, err[-2000:]
    assert _one_line(err) == (f"cvflow: error: config {key} ({_variable(key)}): {value}; "
                              f"give a number {allowed}"), err
    assert not store.exists() and not (tmp_path / "s.zarr.lock").exists()


@pytest.mark.parametrize("key, value, kind, said", [
    ("cvflow.execution.no-worker-seconds", "soon", "str", "number"),
    ("cvflow.execution.allowed-failures", "1.5", "float", "whole number"),
    ("cvflow.reduce.in-memory-bytes", "true", "bool", "number"),
    ("cvflow.cluster.auto.probe_seconds", "[1]", "list", "number"),
])
def test_a_setting_of_the_wrong_type_is_named_with_the_type_it_takes(workflow, tmp_path, key,
                                                                    value, kind, said):
    rc, _, err = _cvflow("run", str(workflow), "--store", str(tmp_path / "s.zarr"),
                         "--cluster", "threads", env=fh.cli_env(**{_variable(key): value}))
    assert rc == 2, err[-2000:]
    line = _one_line(err)
    assert line.startswith(f"cvflow: error: config {key} ({_variable(key)}): "), line
    assert line.endswith(f" ({kind}); give a {said}"), line
    assert not (tmp_path / "s.zarr").exists()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 300 kB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)])


def test_a_full_disk_names_the_store_and_what_to_do_then_resumes(tmp_path, tiny_disk, client):
    import cvflow.execution.run

    wf = fh.slow_workflow(tmp_path / "slow.yaml", delay=0.0)     # 24 fits, ~600 kB of store
    store = tiny_disk / "s.zarr"
    rc, _, err = _cvflow("run", str(wf), "--store", str(store), "--cluster", "threads")
    line = _one_line(err)
    assert rc == 1 and line.startswith(f"cvflow: error: DiskFullError: store: {store}: "), line
    assert line.endswith("No space left on device; free space on its disk and run the same "
                         "command again: the fits done are kept, the rest is fitted"), line
    assert fh.read_lock_pid(store) is None
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_disk)], check=True)  # freed
    rc, out, err = _cvflow("run", str(wf), "--store", str(store), "--cluster", "threads")
    assert rc == 0, err[-2000:]
    reference = tmp_path / "clean.zarr"
    cvflow.execution.run.run(wf, store=reference, client=client, progress=False)
    fh.assert_same_cube(store, reference)


def test_status_of_a_store_whose_creation_did_not_finish(tmp_path, monkeypatch):
    from cvflow.store import creation
    from cvflow.workflow.spec import load_workflow
    import cvflow.execution.run

    wf = load_workflow(fh.slow_workflow(tmp_path / "wf.yaml"))
    path = tmp_path / "s.zarr"

    def cut(location, objects):                 # the disk filled up halfway through
        real(location, dict(list(objects.items())[:len(objects) // 2]))
        raise OSError(28, "No space left on device")

    real = creation.put_all
    monkeypatch.setattr(creation, "put_all", cut)
    with pytest.raises(OSError):
        cvflow.execution.run.prepare_store(wf, wf.build(), path)
    monkeypatch.undo()
    rc, _, err = _cvflow("status", str(path))
    assert rc == 2 and _one_line(err) == (
        f"cvflow: error: store: {path}: its creation did not finish (the run creating it "
        f"stopped or failed; {path}.creating remains); run the same command again to create "
        "it anew"), err


@pytest.mark.parametrize("kind", ["fifo", "device", "link to device", "dangling link",
                                  "directory"])
def test_a_data_path_that_is_not_a_regular_file_is_named_as_what_it_is(tmp_path, kind):
    data = tmp_path / "data.csv"
    said = {"fifo": "is a named pipe (FIFO); give a regular file",
            "device": "is a character device; give a regular file",
            "link to device": "is a symbolic link to /dev/zero, a character device; give a "
                              "regular file",
            "dangling link": f"is a symbolic link to {tmp_path / 'gone.csv'}, which does not "
                             "exist",
            "directory": "is a directory; give a regular file"}[kind]
    if kind == "fifo":
        os.mkfifo(data)
    elif kind == "device":
        data = Path("/dev/zero")
    elif kind == "link to device":
        data.symlink_to("/dev/zero")
    elif kind == "dangling link":
        data.symlink_to(tmp_path / "gone.csv")
    else:
        data.mkdir()
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: d\ndata: {{source: csv, path: {data}, target: y}}\ntask: regression\n"
                  "learners: [{class: sklearn.linear_model.Ridge}]\n")
    for command in ("validate", "run"):        # never opened: a FIFO would block the reader
        rc, _, err = _cvflow(command, str(wf), cwd=tmp_path)
        assert rc == 2 and _one_line(err) == f"cvflow: error: {wf}: data.path: {data} {said}", err
