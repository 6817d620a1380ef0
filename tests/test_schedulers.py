"""Cluster profiles (packaged, files, overrides) and connecting to real local clusters."""
from __future__ import annotations

import contextlib
import re
import time
import warnings
from pathlib import Path

import dask.config
import pytest
import yaml

from cvflow.execution.profiles import (env_options, load_profile, parse_options, store_warning,
                                      walltime_seconds)
from cvflow.execution.jobqueue import slurm_kwargs
from cvflow.execution.schedulers import connect
from cvflow.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def _strip(profile: dict) -> dict:
    return {k: v for k, v in profile.items() if k != "name"}


@pytest.mark.parametrize("name", ["local", "slurm"])
def test_repo_profile_files_equal_the_packaged_defaults(name):
    """cluster/*.yaml are the packaged defaults written out, key for key."""
    from_file = yaml.safe_load((REPO / "cluster" / f"{name}.yaml").read_text())
    assert _strip(load_profile(name)) == from_file
    assert _strip(load_profile(str(REPO / "cluster" / f"{name}.yaml"))) == from_file


def test_default_profile_is_local_on_loopback():
    prof = load_profile(None)
    assert prof["name"] == "local" and prof["kind"] == "local"
    assert prof["host"] == "127.0.0.1" and prof["tls"] is True
    with dask.config.set({"cvflow.cluster.default": "slurm"}):
        assert load_profile(None)["kind"] == "slurm"


def test_base_install_has_what_the_default_cluster_needs():
    """`pip install -e .` alone runs a study on the default (TLS) local cluster: TLS's temporary
    certificates need `cryptography`, so it is a base dependency, not only an extra's.
    Before, a fresh venv failed its first process-cluster study with "--tls needs the
    cryptography package" although the user passed no --tls."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower() for dep in deps}
    assert load_profile(None)["tls"] is True
    assert "cryptography" in names


def test_partial_profile_file_is_merged_over_its_kind(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("kind: slurm\njobqueue: {queue: short, memory: 8GB}\nadaptive: null\n")
    prof = load_profile(str(path))
    assert prof["jobqueue"]["queue"] == "short" and prof["jobqueue"]["memory"] == "8GB"
    assert prof["jobqueue"]["walltime"] == "01:00:00"      # from the packaged slurm profile
    assert prof["adaptive"] is None and prof["name"] == str(path)


def test_overrides_precedence_file_env_options(tmp_path):
    env = {"CVFLOW_CLUSTER__JOBQUEUE__QUEUE": "from-env", "CVFLOW_CLUSTER__WORKERS": "3",
           "CVFLOW_CLUSTER__JOBQUEUE__ACCOUNT": "proj", "UNRELATED": "x"}
    prof = load_profile("slurm", env=env, options=["jobqueue.queue=from-cli", "adaptive.maximum=7",
                                                    "jobqueue.job-extra-directives=[--qos=low]"])
    assert prof["jobqueue"]["queue"] == "from-cli"           # options beat the environment
    assert prof["jobqueue"]["account"] == "proj" and prof["workers"] == 3
    assert prof["adaptive"] == {"minimum": 1, "maximum": 7}
    assert prof["jobqueue"]["job_extra_directives"] == ["--qos=low"]
    assert env_options({"CVFLOW_CLUSTER__TLS": "true"}) == {"tls": True}
    assert parse_options(["a.b=1", "a.c=x", "d="]) == {"a": {"b": 1, "c": "x"}, "d": None}


def test_slurm_kwargs_bind_loopback_and_retire_workers_before_walltime():
    kw = slurm_kwargs(load_profile("slurm", options=["dashboard_port=0"]))
    assert kw["scheduler_options"] == {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}
    assert kw["worker_extra_args"] == ["--host", "127.0.0.1", "--lifetime", "55m",
                                       "--lifetime-stagger", "4m"]
    assert kw["queue"] == "debug" and not kw["log_directory"].startswith("~")


def test_slurm_job_script_without_slurm():
    """The job script dask-jobqueue would submit (no SLURM needed to build it)."""
    from dask_jobqueue import SLURMCluster

    kw = slurm_kwargs(load_profile("slurm", options=["dashboard_port=0",
                                                     "jobqueue.log_directory=null"]))
    with SLURMCluster(**kw) as cluster:
        script = cluster.job_script()
    assert "#SBATCH -p debug" in script and "#SBATCH -t 01:00:00" in script
    assert "--host 127.0.0.1" in script and "--lifetime 55m --lifetime-stagger 4m" in script
    assert "tcp://127.0.0.1:" in script


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("01:00:00", 3600), ("90:30", 5430),
                                          ("1-02", 93600), ("2-00:30:00", 174600)])
def test_walltime_seconds(text, seconds):
    assert walltime_seconds(text) == seconds


@pytest.mark.parametrize("cluster,options,match", [
    ("nosuch", None, r"--cluster: 'nosuch' is not auto, a profile \(local, slurm, threads\), a profile file"),
    ("missing.yaml", None, r"--cluster: profile file missing.yaml does not exist"),
    ("local", ["threads=2"], r"--cluster: unknown key 'threads' in a local profile; known: "),
    ("local", ["workers=0"], r"workers: 0 must be a positive integer or null"),
    ("local", ["dashboard_port=70000"], r"dashboard_port: 70000 must be 0..65535"),
    ("slurm", ["adaptive.minimum=5"], r"adaptive: need 0 <= minimum <= maximum"),
    ("slurm", ["lifetime=59m"], r"lifetime 59m \+ lifetime_stagger 4m must end before "
                                r"jobqueue.walltime 01:00:00"),
    ("slurm", ["lifetime=soon"], r"lifetime: 'soon' is not a duration"),
    ("local", ["workers"], r"--cluster-option: 'workers' is not KEY=VALUE"),
])
def test_profile_errors(cluster, options, match):
    with pytest.raises(InputError, match=match):
        load_profile(cluster, options=options)


def test_profile_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: pbs\n")
    with pytest.raises(InputError, match=r"bad.yaml: kind: 'pbs' is not one of local, slurm"):
        load_profile(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match=r"bad.yaml: a cluster profile must be a mapping"):
        load_profile(str(bad))


def test_store_warning_only_for_node_local_slurm_stores(tmp_path):
    assert store_warning("/tmp/x.zarr", "local") is None
    assert "is under /tmp, usually local to each node" in store_warning("/tmp/x.zarr", "slurm")
    assert "is a relative path" in store_warning("x.zarr", "slurm")
    assert store_warning("/home/me/x.zarr", "slurm") is None


def _double(x):
    return 2 * x


def test_local_cluster_listens_on_loopback_with_dashboard():
    with connect("local", workers=1, dashboard_port=0, tls=False) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 1 and all(a.startswith("tcp://127.0.0.1:") for a in workers)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/status\?token=[\w-]{32}",
                            client.dashboard_link), client.dashboard_link
        assert client.submit(_double, 21).result() == 42


def test_a_local_cluster_without_dashboard_takes_no_fixed_port():
    """No dashboard asked (auto's short studies): the scheduler's HTTP server still starts, on a
    free loopback port, not 8787: two runs at once never contend for it."""
    import socket

    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))          # 8787 taken, by us or by someone else
    except OSError:
        pass
    try:
        with _no_port_warning():
            with connect("local", workers=1, tls=False, options={"dashboard_port": None}) as client:
                ports = client.run_on_scheduler(
                    lambda dask_scheduler: dask_scheduler.http_server.port)
                assert ports != 8787
                assert client.submit(_double, 2).result() == 4
    finally:
        holder.close()


@contextlib.contextmanager
def _no_port_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [w for w in caught if "already in use" in str(w.message)], \
        [str(w.message) for w in caught]


def test_local_cluster_with_tls():
    with connect("local", workers=1, dashboard_port=0, tls=True) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
        assert client.submit(_double, 4).result() == 8


# another local user's process: connects with what it can have (no certificate, or one of its own)
INTRUDER = """import sys
from distributed import Client
from distributed.security import Security
address = sys.argv[1]
for how, kwargs in (("plain tcp", dict(address=address.replace("tls://", "tcp://"))),
                    ("tls without certificate", dict(address=address)),
                    ("tls with its own certificate", dict(address=address, security=Security.temporary()))):
    try:
        with Client(timeout=3, **kwargs) as c:
            c.submit(lambda: open(sys.argv[2], "w").write("ran"), pure=False).result(timeout=3)
        print("CONNECTED", how)
    except Exception as exc:
        print("REFUSED", how, type(exc).__name__)
"""


def test_the_default_local_cluster_accepts_only_its_own_client(tmp_path):
    """issue 23: another local user connected to the default local cluster and ran code in its
    workers. By default (tls: true) the cluster speaks TLS with temporary certificates that only
    this process holds: a client without them, or with its own, is refused."""
    import subprocess
    import sys

    marker = tmp_path / "intruder-ran"
    with connect("local", workers=1) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        out = subprocess.run([sys.executable, "-c", INTRUDER, address, str(marker)],
                             capture_output=True, text=True, timeout=120)
        assert client.submit(_double, 4).result() == 8       # ours still works
    assert "CONNECTED" not in out.stdout, out.stdout + out.stderr
    assert out.stdout.count("REFUSED") == 3, out.stdout + out.stderr
    assert not marker.exists()


def test_connect_to_running_scheduler_address():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        with connect(cluster.scheduler_address) as client:
            assert client.submit(_double, 5).result() == 10


def test_cli_cluster_option_errors_are_input_errors(tmp_path):
    import subprocess
    import sys

    wf = tmp_path / "wf.yaml"
    wf.write_text((REPO / "workflows" / "quickstart.yaml").read_text())
    out = subprocess.run([sys.executable, "-m", "cvflow", "run", str(wf), "--store",
                          str(tmp_path / "s.zarr"), "--cluster-option", "nosuch=1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("cvflow: error: --cluster: unknown key 'nosuch' in a local "
                                  "profile; known: dashboard_port, host, kind, memory_limit, "
                                  "threads_per_worker, tls, workers")


def test_workers_whose_nanny_closed_for_good_are_replaced():
    """A nanny that gave up (its worker failed to restart) is replaced by a new worker."""
    from distributed.core import Status

    from cvflow.execution.schedulers import replace_lost_workers

    with connect("local", workers=2, tls=False, options={"dashboard_port": None}) as client:
        client.wait_for_workers(2, timeout=120)
        nanny = next(iter(client.cluster.workers.values()))
        client.cluster.sync(nanny.close)                   # as after a failed restart
        assert nanny.status in (Status.closed, Status.failed)
        assert replace_lost_workers(client) == 1
        client.wait_for_workers(2, timeout=120)
        assert nanny not in client.cluster.workers.values()    # a new nanny (its name may be reused)
        assert len(client.scheduler_info()["workers"]) == 2
        assert client.submit(_double, 3).result() == 6
        assert replace_lost_workers(client) == 0


def test_workers_whose_nanny_the_cluster_dropped_are_replaced():
    """distributed's SpecCluster closes and forgets a nanny whose worker stays away longer than
    distributed.deploy.lost-worker-timeout (15 s: a restart under load, issue 44), keeping its
    spec and never opening it again; such a worker is replaced, once (its replacement is waited
    for while it starts), and the cluster has its two workers again."""
    from cvflow.execution.schedulers import replace_lost_workers

    with connect("local", workers=2, tls=False, options={"dashboard_port": None}) as client:
        client.wait_for_workers(2, timeout=120)
        cluster = client.cluster
        name, nanny = next(iter(cluster.workers.items()))
        cluster.sync(nanny.close)                       # what SpecCluster does, then forgets it
        del cluster.workers[name]
        deadline = time.monotonic() + 60
        while len(client.scheduler_info()["workers"]) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert replace_lost_workers(client) == 1
        assert replace_lost_workers(client) == 0         # the new one starting is waited for
        client.wait_for_workers(2, timeout=120)
        connected = {w["name"] for w in client.scheduler_info()["workers"].values()}
        assert len(connected) == 2 and name not in connected    # a name never used
        assert client.submit(_double, 3).result() == 6
        assert replace_lost_workers(client) == 0


def test_kept_workers_are_not_reused_after_the_environment_changed(tmp_path):
    """A whole process: a run on worker processes (kept warm for the session), then an
    environment variable set (as credentials or an S3 endpoint are) and a second run whose
    learner fails unless its worker sees that variable. Reference: a fresh cluster inherits the
    client's environment, so no fit of the second run may fail."""
    import subprocess
    import sys
    import textwrap

    import fault_helpers as fh

    first = fh._ridge_workflow(tmp_path / "a.yaml", "plain", "SlowRidge", "delay: 0.0", (1.0,), 2,
                               "cluster: local")
    second = fh._ridge_workflow(tmp_path / "b.yaml", "env", "EnvRidge",
                                "needs: CVFLOW_TEST_MARK", (1.0, 2.0), 2, "cluster: local")
    script = textwrap.dedent(f"""\
        import os, cvflow
        a = cvflow.run({str(first)!r}, store={str(tmp_path / 'a.zarr')!r})
        os.environ["CVFLOW_TEST_MARK"] = "1"
        b = cvflow.run({str(second)!r}, store={str(tmp_path / 'b.zarr')!r})
        print(a.execution, "|", b.execution, "|", b.failed)
        """)
    env = fh.cli_env()
    env.pop("CVFLOW_TEST_MARK", None)
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first_route, second_route, failed = out.stdout.strip().splitlines()[-1].split(" | ")
    assert first_route == second_route == "local (as asked)"
    assert failed == "0"


def test_importing_dask_jobqueue_keeps_the_sigint_handler_and_then_works_in_a_thread():
    """dask_jobqueue sets a SIGINT handler when imported (only the main thread may): imported
    through import_jobqueue the process keeps its own, and a thread (a suite's data set) then
    gets SLURMCluster. A fresh process: this one may have imported it already."""
    import subprocess
    import sys

    code = (
        "import signal, threading\n"
        "from cvflow.execution.jobqueue import import_jobqueue\n"
        "mine = lambda *a: None\n"
        "signal.signal(signal.SIGINT, mine)\n"
        "import_jobqueue()\n"
        "assert signal.getsignal(signal.SIGINT) is mine, signal.getsignal(signal.SIGINT)\n"
        "got = []\n"
        "t = threading.Thread(target=lambda: got.append(import_jobqueue().__name__))\n"
        "t.start(); t.join(60)\n"
        "print(got)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['SLURMCluster']"
