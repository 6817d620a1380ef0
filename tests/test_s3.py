"""Stores at URLs: a real S3-compatible server (moto in server mode) on 127.0.0.1, reached with
the standard AWS environment variables by the client, its workers and the CLI."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import fault_helpers as fh
from cvtest import QUICK, REPO
from cvflow.errors import InputError, StoreError

BUCKET = "cvflow-test"
QUICKSTART = REPO / "workflows" / "quickstart.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 and the AWS environment pointing at it (for children too)."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    s3fs = pytest.importorskip("s3fs", reason="s3fs is in the test extra")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # fsspec caches filesystems: one an earlier test made without these credentials is dropped
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        import boto3

        deadline = time.monotonic() + 60
        while True:
            try:
                boto3.client("s3").create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip("moto's S3 server did not start on 127.0.0.1")
                time.sleep(0.2)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        s3fs.S3FileSystem.clear_instance_cache()
        proc.terminate()
        proc.wait()


def _url() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}.zarr"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cvflow", *args], capture_output=True,
                          text=True, env=fh.cli_env(), cwd=REPO, timeout=timeout)


def _objects(url: str) -> list[str]:
    from cvflow.store.location import filesystem

    fs, path = filesystem(url)
    return fs.find(path)


@pytest.fixture(scope="module")
def quick_local(tmp_path_factory):
    path = tmp_path_factory.mktemp("local") / "q.zarr"
    out = _cli("run", str(QUICKSTART), "--store", str(path), "--workers", "2", "--dashboard-port", "0")
    assert out.returncode == 0, out.stderr[-2000:]
    return path


@pytest.mark.timeout(900)       # six CLI runs; ~7 min on a machine loaded 8x its cores
def test_quickstart_to_s3_equals_a_local_run(s3, quick_local, tmp_path):
    import warnings

    import xarray as xr

    import cvflow

    url = _url()
    out = _cli("run", str(QUICKSTART), "--store", url, "--workers", "2", "--dashboard-port", "0")
    assert out.returncode == 0, out.stderr[-2000:]
    assert url in out.stdout and not list(tmp_path.glob("s3*")) and not (REPO / "s3:").exists()
    assert any(key.endswith("pred/c/0/0/0") for key in _objects(url))   # on the server
    status = _cli("status", url, "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["complete"] and info["done"] == info["total"] == 120 and info["failed"] == 0
    report = _cli("report", url, "--json")
    assert report.returncode == 0, report.stderr
    local_report = _cli("report", str(quick_local), "--json")
    assert json.loads(report.stdout) == json.loads(local_report.stdout)
    # read in this process: no test leaves a default Client behind (conftest checks)
    cube, local = cvflow.open(url), cvflow.open(quick_local)
    assert cube["pred"].values.tobytes() == local["pred"].values.tobytes()
    assert cube["done"].values.all()
    with warnings.catch_warnings():          # plain xarray, consolidated metadata: silent
        warnings.simplefilter("error")
        plain = xr.open_zarr(url)
    assert plain["pred"].values.tobytes() == local["pred"].values.tobytes()
    again = _cli("run", str(QUICKSTART), "--store", url, "--dashboard-port", "0")
    assert again.returncode == 0 and "already complete, 0 fits performed" in again.stdout


def test_process_workers_write_an_s3_store(s3, quick_local, tmp_path):
    """Worker processes started by a client that already talks to S3 (its fsspec and zarr event
    loops running) write the cube of a local run, one block of 20 fits each."""
    import yaml

    import cvflow

    workflow = yaml.safe_load(QUICKSTART.read_text())
    workflow["execution"] = {"fits_per_task": 20}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(workflow))
    url = _url()
    cvflow.open(quick_local)                  # the client's S3 / zarr machinery is warm
    result = cvflow.run(tmp_path / "q.yaml", store=url, cluster="local", workers=2)
    assert result.execution == "local (as asked)" and result.fits_executed == 120
    assert result.tasks == 6
    cube, local = cvflow.open(url), cvflow.open(quick_local)
    assert cube["done"].values.all()
    assert cube["pred"].values.tobytes() == local["pred"].values.tobytes()


@pytest.mark.parametrize("in_place", [False, True])
def test_create_on_s3_writes_what_xarray_writes(s3, monkeypatch, in_place):
    """Reference: xarray's to_zarr of the same template to the same server, object for object
    (metadata parsed, chunks byte for byte); no creation marker left."""
    import warnings

    import xarray as xr

    from cvflow.store import creation
    from cvflow.store.group import CREATING, is_store
    from cvflow.store.location import filesystem, storage_options
    from test_store import _case, reference_encoding

    template = _case("multiclass", monkeypatch)
    if in_place:                               # every variable written in place, none staged
        monkeypatch.setattr(creation, "STAGED_BYTES", 64)
    ours, ref = _url(), _url()
    creation.create(ours, template)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        creation.lazy_blocks(template).to_zarr(ref, compute=False, consolidated=True, zarr_format=3, mode="w-",
                         storage_options=storage_options(ref),
                         encoding=reference_encoding(template))

    def objects(url):
        fs, path = filesystem(url)
        return {key[len(path):]: (json.loads(data) if key.endswith("zarr.json") else data)
                for key, data in fs.cat(fs.find(path)).items()}

    got, want = objects(ours), objects(ref)
    assert set(got) == set(want) and "/pred/zarr.json" in got
    for key in want:
        assert got[key] == want[key], key
    assert is_store(ours) and not _objects(ours + CREATING)
    xr.testing.assert_identical(xr.open_zarr(ours).load(), xr.open_zarr(ref).load())


def test_damage_and_foreign_objects_on_s3(s3, tmp_path):
    """On an object store too: a deleted pred object is seen by status and verify and refitted
    by run; a stray marker beside a prefix holding a user's object removes nothing."""
    from cvflow.store.location import filesystem

    workflow = tmp_path / "wf.yaml"
    workflow.write_text(QUICK + "execution: {fits_per_task: 4, cluster: threads}\n")
    url = _url()
    assert _cli("run", str(workflow), "--store", url).returncode == 0
    fresh = _cli("report", url, "--json").stdout
    fs, path = filesystem(url)
    fs.rm(f"{path}/pred/c/0/2/0")
    status = _cli("status", url)
    assert status.returncode == 1 and "damaged: pred chunk (0, 2, 0) is missing" in status.stdout
    verify = _cli("verify", url)
    assert verify.returncode == 1 and "pred chunk (0, 2, 0) is missing" in verify.stdout
    run = _cli("run", str(workflow), "--store", url)
    assert run.returncode == 0 and "4 fits performed" in run.stdout, run.stderr
    assert _cli("report", url, "--json").stdout == fresh and _cli("verify", url).returncode == 0
    theirs = _url()
    fs.pipe({f"{theirs[5:]}/notes.txt": b"mine", f"{theirs[5:]}.creating": b""})
    out = _cli("run", str(workflow), "--store", theirs)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "holds files cvflow did not write (notes.txt)" in out.stderr
    assert sorted(_objects(theirs)) == [f"{theirs[5:]}/notes.txt"] and _objects(theirs + ".creating")


def test_an_array_metadata_at_odds_with_the_consolidated_copy_on_s3(s3, tmp_path):
    """Issue 32, on an object store: pred/zarr.json without its crc32c codec (the consolidated
    copy keeps it) is named by report and run (exit 2, nothing written) and listed by status
    and verify (exit 1)."""
    from cvflow.store.location import filesystem

    workflow = tmp_path / "wf.yaml"
    workflow.write_text(QUICK + "execution: {fits_per_task: 4, cluster: threads}\n")
    url = _url()
    assert _cli("run", str(workflow), "--store", url).returncode == 0
    fs, path = filesystem(url)
    meta = json.loads(fs.cat_file(f"{path}/pred/zarr.json"))
    meta["codecs"] = [c for c in meta["codecs"] if c["name"] != "crc32c"]
    fs.pipe_file(f"{path}/pred/zarr.json", json.dumps(meta).encode())
    before = {k: v["ETag"] for k, v in fs.find(path, detail=True).items()}
    problem = ("pred/zarr.json is inconsistent with the consolidated metadata in the root "
               "zarr.json (codecs: [bytes, zstd, crc32c] there, [bytes, zstd] here)")
    for args in (("report", url), ("run", str(workflow), "--store", url)):
        out = _cli(*args)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and problem in lines[0], out.stderr
    for cmd in ("status", "verify"):
        out = _cli(cmd, url)
        assert out.returncode == 1 and problem in out.stdout, out.stdout + out.stderr
    fs.invalidate_cache()
    assert {k: v["ETag"] for k, v in fs.find(path, detail=True).items()} == before


def test_readers_during_a_grow_on_s3_see_the_old_or_the_new_study(s3, tmp_path):
    """Issue 32, on an object store: readers in a loop while a run (pausing between its
    writes) appends params and splits see the old study or the new one, never neither."""
    from test_extend import grow_while_reading

    url = _url()
    grow_while_reading(tmp_path, url, _cli)
    assert not _objects(url + ".growing")


def test_second_run_on_a_held_url_is_refused(s3):
    from cvflow.store.lock import read_lock, run_lock

    url = _url()
    with run_lock(url) as lock:
        assert read_lock(url)["token"] == lock.token and _objects(url + ".lock")
        out = _cli("run", str(QUICKSTART), "--store", url, "--dashboard-port", "0")
        assert out.returncode == 2
        assert "is being written by another cvflow run" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert not _objects(url)                       # nothing created
    assert read_lock(url) is None


def _within(seconds: float, condition) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_lease_heartbeat_takeover_and_lost_lease(s3):
    """Conditional writes: a refresh needs our ETag; a takeover deletes only the stale record."""
    from cvflow.store.lock import _slot, read_lock, run_lock

    url = _url()
    slot = _slot(url)
    stale = json.dumps({"host": "elsewhere", "pid": 1, "started": 0, "heartbeat": time.time() - 60,
                        "token": "old"}).encode()
    slot.create(stale)
    with pytest.raises(FileExistsError):               # create-if-absent: If-None-Match
        slot.create(stale)
    with run_lock(url, heartbeat=0.2, stale_after=30) as lock:   # 60 s old: taken over
        first = read_lock(url)
        assert first["token"] == lock.token
        # refreshed with If-Match (each beat a GET and a conditional PUT to the server: under
        # CI's load one beat once took longer than a fixed 0.7 s, so wait for it, at most 30 s)
        assert _within(30, lambda: read_lock(url)["heartbeat"] > first["heartbeat"])
        with pytest.raises(OSError):                   # someone else's ETag: refused
            slot.replace(b"{}", '"not-the-etag"')
        with pytest.raises(OSError):
            slot.delete('"not-the-etag"')
        # another run takes the lease (as after a long freeze): we learn it at the next beat
        slot.delete(None)
        slot.create(json.dumps({"host": "other", "pid": 2, "started": 0,
                                "heartbeat": time.time(), "token": "new"}).encode())
        assert _within(30, lambda: lock.lost)
    assert read_lock(url)["token"] == "new"            # not removed by the run that lost it


def test_urls_that_are_not_stores_are_refused(s3, tmp_path):
    from cvflow.store.location import resolve

    for bad, match in (("nosuch://bucket/x.zarr", "unknown or unavailable URL scheme"),
                       ("s3:/bucket/x.zarr", "missing slash")):
        with pytest.raises(InputError, match=match):
            resolve(bad)
        out = _cli("run", str(QUICKSTART), "--store", bad)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    for cmd in ("status", "report"):
        out = _cli(cmd, f"s3://{BUCKET}/absent.zarr")
        assert out.returncode == 2 and "does not exist" in out.stderr, out.stderr
    import cvflow

    with pytest.raises(StoreError, match="does not exist"):
        cvflow.open(f"s3://{BUCKET}/absent.zarr")


def test_a_missing_bucket_is_refused_with_one_line(s3, tmp_path):
    """Issue 32: a store in a bucket that does not exist failed at the run lock with the object
    store's own error (OSError, exit 1). Refused with one line naming the bucket (exit 2)."""
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(QUICK + "execution: {cluster: threads}\n")
    url = "s3://no-such-bucket-here/s.zarr"
    out = _cli("run", str(workflow), "--store", url)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert (f"store: {url}: the bucket 'no-such-bucket-here' does not exist (or these "
            "credentials cannot see it); create it first (e.g. aws s3 mb "
            "s3://no-such-bucket-here)") in lines[0]
    for cmd in ("status", "report", "verify"):
        out = _cli(cmd, url)
        assert out.returncode == 2 and "does not exist" in out.stderr, out.stderr


@pytest.mark.slow
def test_client_sigkill_then_rerun_completes_to_the_reference_cube(s3, tmp_path):
    # ~30 s: time to cut it; after 6 fits the other 18 take ~22 s on 2 workers, the margin for
    # the in-process refusal below (with 1.5 s fits the run once finished first, 64 s, CI)
    workflow = fh.slow_workflow(tmp_path / "wf.yaml", delay=2.5)
    clean = tmp_path / "clean.zarr"
    rc, _, err = fh.finish(fh.start_run(workflow, clean, "--workers", "2", "--cluster", "local"))
    assert rc == 0, err[-2000:]
    url = _url()
    proc = fh.start_run(workflow, url, "--workers", "2", "--cluster", "local")
    try:
        fh.wait_for_done(url, 6, proc, timeout=240)
        import cvflow.execution.run

        with pytest.raises(StoreError, match="being written by another cvflow run"):
            cvflow.execution.run.run(workflow, store=url)       # in-process: no CLI start-up to wait
        os.kill(proc.pid, signal.SIGKILL)              # the client only
        proc.wait()
    finally:
        fh.reap(proc)
    done_before = fh.done_count(url)
    assert 6 <= done_before < 24
    # the dead client's lease stays until it is stale (no pid check across machines)
    env = fh.cli_env(DASK_CVFLOW__LOCK__STALE_AFTER="3", DASK_CVFLOW__LOCK__HEARTBEAT="1")
    time.sleep(3.5)
    rc, out, err = fh.finish(fh.start_run(workflow, url, "--workers", "2", "--cluster", "local",
                                          env=env))
    assert rc == 0, err[-2000:]
    fh.assert_same_cube(url, clean)
    assert Path(clean).exists()
    assert np.asarray(fh.cube_arrays(url)["done"]).all()


def test_s3_store_without_s3fs_names_the_extra(tmp_path):
    """docs/guide/s3.md: without s3fs an s3:// store is refused with one line naming
    `pip install 'cvflow[s3]'` (exit 2), in a fresh interpreter where s3fs cannot be imported."""
    script = ("import sys; sys.modules['s3fs'] = None\n"
              "from cvflow.cli import main\n"
              "sys.exit(main(['status', 's3://bucket/study.zarr']))\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'cvflow[s3]'" in lines[0], res.stderr
    assert "pip install 'cvflow[s3]'" in (REPO / "docs" / "guide" / "s3.md").read_text()
