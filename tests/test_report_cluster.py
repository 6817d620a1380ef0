"""Reducing a stored cube on a cluster (issue 40 item 3): ``cvflow report --cluster`` and any
estimator under an active ``distributed.Client`` compute on the workers, which read the store's
chunks themselves, and give the answers computed in this process and by brute force (numpy on
the arrays zarr reads, no cvflow reducer)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import dask
import numpy as np
import pytest
import zarr

import cvflow
from cvflow import estimators
from cvtest import REPO
from test_s3 import BUCKET, s3  # noqa: F401 - the moto S3 server fixture

WORKFLOW = """\
name: ridge_cluster
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: {logspace: [-3, 3, 8]}}
design: {folds: 5, repeats: 2, seed: 0}
estimators: [kfold, corrected_kfold, stability, nested_cv]
execution: {cluster: threads}
"""
NAMES = ["kfold", "corrected_kfold", "stability", "nested_cv"]


def _cli(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, with distributed's logging as a user has it (not the tests')."""
    environ = {k: v for k, v in os.environ.items() if k != "DASK_LOGGING__DISTRIBUTED"}
    return subprocess.run([sys.executable, "-m", "cvflow", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, env={**environ, **(env or {})},
                          timeout=timeout)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A ridge study with the full, fold and pair splits (8 params x 41 splits)."""
    path = tmp_path_factory.mktemp("cluster") / "ridge.zarr"
    workflow = path.with_suffix(".yaml")
    workflow.write_text(WORKFLOW)
    out = _cli("run", workflow, "--store", path)
    assert out.returncode == 0, out.stderr[-2000:]
    return path


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of 2 worker processes on 127.0.0.1 (no client: each test makes its own)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as started:
        yield started


def brute_force_kfold(path, storage_options=None) -> tuple[np.ndarray, np.ndarray]:
    """Each param's K-fold estimate (squared loss) and fold scores (param, repeat, outer), from
    the arrays zarr reads: split fold_split[r, j] scored on the samples with fold[r] == j."""
    group = zarr.open_group(str(path), mode="r", storage_options=storage_options)
    pred, y = np.asarray(group["pred"][:], dtype=np.float64), np.asarray(group["y"][:])
    fold, fold_split = np.asarray(group["fold"][:]), np.asarray(group["fold_split"][:])
    scores = np.empty((pred.shape[0],) + fold_split.shape)
    for r, j in np.ndindex(fold_split.shape):
        rows = fold[r] == j
        scores[:, r, j] = ((pred[:, fold_split[r, j], rows] - y[rows]) ** 2).mean(axis=1)
    sizes = np.array([[np.sum(fold[r] == j) for j in range(fold_split.shape[1])]
                      for r in range(fold_split.shape[0])])
    estimate = (scores * sizes).sum(axis=(1, 2)) / sizes.sum()
    return estimate, scores


def assert_same(a, b) -> None:
    """Two estimators' results equal to 1e-12: every numeric variable, the selections."""
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        if np.issubdtype(a[name].dtype, np.number) or a[name].dtype == bool:
            np.testing.assert_allclose(a[name].values, b[name].values, rtol=1e-12, atol=0,
                                       err_msg=name)
        else:
            assert (a[name].values == b[name].values).all(), name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("budget", [None, 0], ids=["within-budget", "param-groups"])
def test_estimators_under_a_client_compute_on_its_workers(store, cluster, budget):
    """``with Client(cluster)``: the reductions' tasks read ``pred`` on the workers (the task
    stream lists them there), and every estimator gives the in-process answer (1e-12), K-fold
    the brute-force one. ``budget`` 0: the reducers' param groups (a cube above the budget)."""
    from distributed import Client, get_task_stream

    config = {} if budget is None else {"cvflow.reduce.in-memory-bytes": budget}
    with dask.config.set(config):
        cube = cvflow.open(store)
        here = {name: getattr(estimators, name)(cube) for name in NAMES}
        with Client(cluster) as client, get_task_stream(client) as stream:
            there = {name: getattr(estimators, name)(cvflow.open(store)) for name in NAMES}
            workers = set(client.scheduler_info()["workers"])
    assert stream.data, "no task ran on the cluster"
    assert {t["worker"] for t in stream.data} <= workers
    for name in NAMES:
        assert_same(there[name], here[name])
    estimate, scores = brute_force_kfold(store)
    np.testing.assert_allclose(there["kfold"]["estimate"].values, estimate, rtol=1e-12)
    np.testing.assert_allclose(there["kfold"]["fold_score"].values, scores, rtol=1e-12)
    assert int(there["kfold"]["selected"]) == int(np.argmin(estimate))


USER_SCRIPT = """\
import json, sys
import cvflow
from cvflow import estimators
from cvflow.estimators import one_pass
from distributed import Client, LocalCluster, get_task_stream

def opened():      # the stores this process opened for the pass (one_pass._pred_array's cache)
    return one_pass._pred_array.cache_info().currsize

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        cube = cvflow.open(sys.argv[1])
        with get_task_stream(client) as stream:      # its data is there once it is left
            kfold, corrected = estimators.kfold(cube), estimators.corrected_kfold(cube)
        ran = sorted({t["worker"] for t in stream.data})
        print(json.dumps({"estimate": kfold["estimate"].values.tolist(),
                          "selected": int(kfold["selected"]),
                          "corrected": corrected["estimate"].values.tolist(),
                          "ran": ran, "opened": client.run(opened), "here": opened()}))
"""


@pytest.mark.timeout(600)
def test_a_user_script_s_client_reduces_on_workers_that_open_the_store(store, tmp_path):
    """As a user runs it (a fresh ``python script.py``): ``cvflow.open(store)`` and estimators
    under the script's ``Client`` run the pass on the workers, each worker that ran a task opened
    the store itself (the client opened it for none of them), and the answers are the brute
    force's (K-fold) and the in-process ones (corrected K-fold, 1e-12)."""
    script = tmp_path / "reduce_on_workers.py"
    script.write_text(USER_SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(store)], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ran"], "no task ran on a worker"
    assert all(got["opened"][worker] >= 1 for worker in got["ran"]), got
    assert got["here"] == 0, "the client process read pred itself"
    estimate, _ = brute_force_kfold(store)
    np.testing.assert_allclose(got["estimate"], estimate, rtol=1e-12)
    assert got["selected"] == int(np.argmin(estimate))
    here = estimators.corrected_kfold(cvflow.open(store))
    np.testing.assert_allclose(got["corrected"], here["estimate"].values, rtol=1e-12)


def test_a_client_made_without_set_as_default_is_not_used(store, cluster):
    """A client nobody made current (the session's warm cluster a run keeps is one) leaves the
    reduction in this process: no task reaches its scheduler."""
    from distributed import Client, get_task_stream

    with Client(cluster, set_as_default=False) as client, get_task_stream(client) as stream, \
            dask.config.set({"cvflow.reduce.in-memory-bytes": 0}):
        result = estimators.kfold(cvflow.open(store))
    assert stream.data == []
    np.testing.assert_allclose(result["estimate"].values, brute_force_kfold(store)[0], rtol=1e-12)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_cli_report_on_a_local_cluster_equals_in_process_and_brute_force(store, workers):
    """``cvflow report STORE --cluster local --workers 1|2`` (above the in-memory budget, so the
    workers read the chunks; workers without MALLOC_TRIM_THRESHOLD_): the same JSON as the
    report in process, K-fold as by hand."""
    names = ",".join(NAMES)
    env = {"DASK_CVFLOW__REDUCE__IN_MEMORY_BYTES": "0"}
    here = _cli("report", store, "--json", "--estimators", names, env=env)
    there = _cli("report", store, "--json", "--estimators", names, "--cluster", "local",
                 "--workers", workers, env=env)
    assert here.returncode == 0, here.stderr[-2000:]
    assert there.returncode == 0, there.stderr[-2000:]
    assert there.stderr == ""            # no log line of the cluster's start and close
    here_json, there_json = json.loads(here.stdout), json.loads(there.stdout)
    assert there_json.keys() == here_json.keys() == set(NAMES)
    for name in NAMES:
        for key, value in here_json[name].items():
            if isinstance(value, dict) and "values" in value:
                np.testing.assert_allclose(np.asarray(there_json[name][key]["values"], float),
                                           np.asarray(value["values"], float), rtol=1e-12,
                                           err_msg=f"{name}.{key}")
            else:
                assert there_json[name][key] == value, f"{name}.{key}"
    estimate, _ = brute_force_kfold(store)
    np.testing.assert_allclose(there_json["kfold"]["estimate"]["values"], estimate, rtol=1e-12)
    assert there_json["kfold"]["selected"] == int(np.argmin(estimate))


@pytest.mark.parametrize("cluster_arg, message", [
    ("bogus", r"--cluster: 'bogus' is not auto, a profile"),
    ("nothere.yaml", r"--cluster: profile file nothere.yaml does not exist"),
    ("tcp://", r"--cluster: 'tcp://' is not a scheduler address; give tcp://HOST:PORT"),
    ("tcp://10.0.0.5", r"--cluster: 'tcp://10.0.0.5' is not a scheduler address"),
])
def test_bad_cluster_is_one_line_and_exit_2(store, cluster_arg, message):
    out = _cli("report", store, "--cluster", cluster_arg, timeout=120)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cvflow: error: ")
    assert re.search(message, lines[0]), lines[0]


def test_bad_workers_and_profile_file_are_one_line_and_exit_2(store, tmp_path):
    profile = tmp_path / "cluster.yaml"
    profile.write_text("kind: nope\n")
    for args, message in ((["--cluster", "local", "--workers", "0"], "workers: 0 must be a positive"),
                          (["--cluster", profile], "kind: 'nope' is not one of")):
        out = _cli("report", store, *args, timeout=120)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines


def test_report_in_process_imports_no_distributed(store):
    """Without --cluster nothing looks for a client: distributed is not imported."""
    code = ("import sys; from cvflow.cli import main; main(['report', sys.argv[1], '--json']); "
            "assert 'distributed' not in sys.modules, 'distributed imported'")
    out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.timeout(600)
def test_workers_read_an_s3_store_themselves(s3, tmp_path):  # noqa: F811 - the fixture
    """A store on S3 (moto): under a Client of 2 worker processes (started with the AWS
    environment, as a cluster's jobs would be), the estimators' tasks read ``pred`` from the
    object store on the workers, and K-fold equals the brute force over zarr's read of the URL."""
    from distributed import Client, LocalCluster, get_task_stream

    url = f"s3://{BUCKET}/cluster-{os.getpid()}.zarr"
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(WORKFLOW)
    out = _cli("run", workflow, "--store", url)
    assert out.returncode == 0, out.stderr[-2000:]
    with dask.config.set({"cvflow.reduce.in-memory-bytes": 0}):
        here = {name: getattr(estimators, name)(cvflow.open(url)) for name in ("kfold", "nested_cv")}
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0") as started, \
                Client(started) as client, get_task_stream(client) as stream:
            there = {name: getattr(estimators, name)(cvflow.open(url)) for name in here}
    assert stream.data, "no task ran on the cluster"
    for name in here:
        assert_same(there[name], here[name])
    estimate, scores = brute_force_kfold(url, {"endpoint_url": s3["AWS_ENDPOINT_URL"]})
    np.testing.assert_allclose(there["kfold"]["estimate"].values, estimate, rtol=1e-12)
    np.testing.assert_allclose(there["kfold"]["fold_score"].values, scores, rtol=1e-12)


@pytest.mark.timeout(300)
def test_a_scheduler_without_workers_is_given_up_with_one_line(store):
    """``--cluster tcp://ADDR`` of a scheduler no worker joins: exit 1 with one line after config
    ``cvflow.execution.no-worker-seconds``, not a wait for ever."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, host="127.0.0.1", protocol="tcp://",
                      dashboard_address=None) as empty:
        out = _cli("report", store, "--cluster", empty.scheduler_address,
                   env={"DASK_CVFLOW__EXECUTION__NO_WORKER_SECONDS": "2"}, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no worker connected within 2 s" in lines[0], lines


def _sleep_idle(seconds: float, gate: str | None = None) -> str:
    """Wait without CPU for ``seconds``, or until the file ``gate`` exists."""
    import os
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end and not (gate and os.path.exists(gate)):
        time.sleep(0.1)
    return "woke"


def _fail() -> None:
    raise ValueError("a pass task failed")


@pytest.mark.timeout(300)
def test_a_pass_under_a_client_without_workers_stops_and_says_what_it_waited_on(store):
    """An estimator under a Client whose scheduler has no worker: StallError after config
    ``cvflow.reduce.no-worker-seconds``, naming the tasks not back and the missing workers;
    its tasks are cancelled (the scheduler holds none after)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=0, processes=False, host="127.0.0.1", protocol="tcp://",
                      dashboard_address=None) as empty, Client(empty) as client, \
            dask.config.set({"cvflow.reduce.no-worker-seconds": 2}):
        assert client.status == "running"
        with pytest.raises(cvflow.errors.StallError) as caught:
            estimators.kfold(cvflow.open(store))
        message = str(caught.value)
        assert re.search(r"no progress for \d+ s: \d+ of the reduction's \d+ tasks not back, "
                         r"no worker connected", message), message
        assert "cvflow.reduce.no-worker-seconds" in message


@pytest.mark.timeout(300)
def test_a_stuck_pass_task_stops_with_its_stack_and_an_error_is_raised_as_is(cluster, tmp_path):
    """A task that waits without using CPU (a hung read): StallError after config
    ``cvflow.reduce.stall-seconds`` with the task's stack; a task that raises: its exception."""
    from distributed import Client

    from cvflow.estimators.memory import compute_here

    gate = tmp_path / "gate"          # the stuck task ends once the test saw the stop
    with Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        try:
            with dask.config.set({"cvflow.reduce.stall-seconds": 2}), \
                    pytest.raises(cvflow.errors.StallError) as caught:
                compute_here([dask.delayed(_sleep_idle)(240, str(gate))], parallel="cluster")
        finally:
            # (the worker's close waited for the stuck task: 120 s of the test's 121 s)
            gate.touch()
        message = str(caught.value)
        assert "1 of the reduction's 1 tasks not back, 2 workers idle" in message, message
        assert "_sleep_idle" in message and "cvflow.reduce.stall-seconds" in message, message
        with pytest.raises(ValueError, match="a pass task failed"):
            compute_here([dask.delayed(_fail)()], parallel="cluster")
        assert compute_here([dask.delayed(_sleep_idle)(0)], parallel="cluster") == ["woke"]


@pytest.mark.timeout(300)
def test_the_report_s_local_workers_start_without_malloc_trim_threshold():
    """The workers of a cluster started with ``glibc_malloc`` (as ``report --cluster local``
    starts its own) have no MALLOC_TRIM_THRESHOLD_; those of one started without it have
    distributed's 65536 (a fresh process each: a nanny writes the variable into its starter's
    environment)."""
    code = ("import contextlib, os, sys\n"
            "from cvflow.execution.schedulers import connect, first_worker, glibc_malloc\n"
            "with (glibc_malloc() if sys.argv[1] == 'yes' else contextlib.nullcontext()), "
            "connect('local', workers=1, dashboard_port=0) as client:\n"
            "    first_worker(client)\n"
            "    print(list(client.run(os.environ.get, 'MALLOC_TRIM_THRESHOLD_').values()))\n")
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    seen = {}
    for untrimmed in ("yes", "no"):
        out = subprocess.run([sys.executable, "-c", code, untrimmed], capture_output=True,
                             text=True, cwd=REPO, env=environ, timeout=240)
        assert out.returncode == 0, out.stderr[-2000:]
        seen[untrimmed] = out.stdout.strip().splitlines()[-1]
    assert seen == {"yes": "[None]", "no": "['65536']"}
