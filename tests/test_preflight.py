"""A run's and a report's arguments and paths are checked before anything is written
(cvflow.execution.preflight): bad ones exit 2 with one line, and no store is created, grown or locked."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cvflow.cli import main

from cvtest import QUICK, tree_digest

THREADS = QUICK + "execution: {cluster: threads, workers: 1}\n"
# the same study with two more params: a run of it grows a store of THREADS
GROWN = THREADS.replace("[0.01, 0.1, 1.0, 10.0]", "[0.01, 0.1, 1.0, 10.0, 20.0, 30.0]")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path]:
    """(a finished store of THREADS, the workflow GROWN that would grow it)."""
    root = tmp_path_factory.mktemp("made")
    (root / "small.yaml").write_text(THREADS)
    (root / "grown.yaml").write_text(GROWN)
    assert main(["run", str(root / "small.yaml"), "--store", str(root / "s.zarr")]) == 0
    return root / "s.zarr", root / "grown.yaml"


@pytest.fixture
def store(made, tmp_path) -> Path:
    copy = tmp_path / "s.zarr"
    shutil.copytree(made[0], copy)
    return copy


def _one_line(capsys, fragment: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err


@pytest.mark.parametrize("args,fragment", [
    (["--workers", "-1"], "--workers: -1; give a number of workers >= 1"),
    (["--workers", "0"], "--workers: 0; give a number of workers >= 1"),
    (["--dashboard-port", "99999"], "--dashboard-port: 99999; give a port in 0..65535"),
    (["--dashboard-port", "-1"], "--dashboard-port: -1; give a port in 0..65535"),
    (["--cluster", "local", "--cluster-option", "workers=-2"],
     "--cluster: workers: -2 must be a positive integer or null"),
    (["--cluster", "nosuch"], "--cluster: 'nosuch' is not auto, a profile"),
])
def test_bad_run_arguments_touch_no_store(made, store, tmp_path, capsys, args, fragment):
    """Refused before a new store is created and before an existing one is grown."""
    _, grown = made
    new = tmp_path / "new" / "n.zarr"
    assert main(["run", str(grown), "--store", str(new), *args]) == 2
    _one_line(capsys, fragment)
    assert not (tmp_path / "new").exists()
    before = tree_digest(store)
    assert main(["run", str(grown), "--store", str(store), *args]) == 2
    _one_line(capsys, fragment)
    assert tree_digest(store) == before and not Path(f"{store}.lock").exists()


def test_bad_workers_in_a_fresh_process(made, store, tmp_path):
    """The real program: --workers -1 on an existing store, exit 2, the store byte-identical."""
    before = tree_digest(store)
    proc = subprocess.run([sys.executable, "-m", "cvflow", "run", str(made[1]), "--store",
                           str(store), "--workers", "-1"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 2
    assert proc.stderr == ("cvflow: error: --workers: -1; give a number of workers >= 1 (or "
                           "leave it out: one per CPU core)\n")
    assert proc.stdout == "" and tree_digest(store) == before


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "wf.yaml", "--workers", "many"])
    assert exc.value.code == 2
    _one_line(capsys, "cvflow: error: run: argument --workers: invalid int value: 'many' "
                      "(see cvflow run --help)")


# --- permissions ---------------------------------------------------------------------------

_DROP = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
         "--bounding-set=-dac_override,-dac_read_search"]


def _unprivileged() -> list[str]:
    """A command prefix under which file modes apply: none for a user, and for root the same
    uid without the capabilities that override file modes (CAP_DAC_OVERRIDE)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be tested")
    probe = subprocess.run([*_DROP, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}")
    return _DROP


def _read_only(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def _run_as_user(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*_unprivileged(), sys.executable, "-m", "cvflow", *map(str, args)],
                          capture_output=True, text=True, timeout=240)


def test_read_only_store_refused_before_fitting(made, store):
    """A store this user cannot write: one line, exit 2, before any fit (it used to fit, then
    fail with a PermissionError on the first chunk, exit 1, the store grown)."""
    before = tree_digest(store)
    _read_only(store)
    try:
        proc = _run_as_user("run", made[1], "--store", store)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert (f"cvflow: error: store: {store} cannot be written by this user ({store} is "
                "read-only; the run writes its chunks there)") in proc.stderr
        assert "fits to do" not in proc.stdout + proc.stderr
        assert tree_digest(store) == before
        _writable(store)
        (store / "pred").chmod(0o555)               # one variable's directory alone
        proc = _run_as_user("run", made[1], "--store", store)
        assert proc.returncode == 2 and f"({store / 'pred'} is read-only" in proc.stderr
        assert tree_digest(store) == before
    finally:
        _writable(store)


def test_new_store_in_a_read_only_directory(made, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = _run_as_user("run", made[1], "--store", locked / "deeper" / "s.zarr")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert (f"store: {locked / 'deeper' / 's.zarr'} cannot be written by this user "
                f"({locked} is read-only; the store's lock and directory go there)") in proc.stderr
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_store_under_a_file(made, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["run", str(made[1]), "--store", str(tmp_path / "afile" / "s.zarr")]) == 2
    _one_line(capsys, f"{tmp_path / 'afile'} is a file, not a directory")


# --- report --html ---------------------------------------------------------------------------

def test_html_report_paths_checked_before_reducing(made, tmp_path):
    store = made[0]
    proc = subprocess.run([sys.executable, "-m", "cvflow", "report", str(store), "--html",
                           str(tmp_path / "missing" / "r.html")], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"cvflow: error: --html: the directory {tmp_path / 'missing'} does "
                           "not exist; create it or write the file elsewhere\n")
    (tmp_path / "adir").mkdir()
    proc = subprocess.run([sys.executable, "-m", "cvflow", "report", str(store), "--html",
                           str(tmp_path / "adir")], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"cvflow: error: --html: {tmp_path / 'adir'} is a directory; give a "
                           f"file name, e.g. {tmp_path / 'adir' / 'report.html'}\n")
    assert list((tmp_path / "adir").iterdir()) == []


def test_html_report_into_a_read_only_directory(made, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = _run_as_user("report", made[0], "--html", locked / "r.html")
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (f"cvflow: error: --html: {locked / 'r.html'} cannot be written by "
                               "this user (permission denied)\n")
    finally:
        locked.chmod(0o755)


# --- decided once (issue 39) -----------------------------------------------------------------

@pytest.fixture
def counted(monkeypatch):
    """The profiles each load_profile call loads (its first argument, resolved), and the calls
    of check_run, over every cvflow module that holds either function."""
    from cvflow.execution import preflight, profiles

    loads, checks = [], []
    load, check = profiles.load_profile, preflight.check_run

    def counting_load(cluster=None, **kwargs):
        loads.append(profiles.cluster_name(cluster))
        return load(cluster, **kwargs)

    def counting_check(*args, **kwargs):
        checks.append(args[1:2])
        return check(*args, **kwargs)

    for module in [m for name, m in sys.modules.items() if name.startswith("cvflow")]:
        for attr, old, new in (("load_profile", load, counting_load),
                               ("check_run", check, counting_check)):
            if getattr(module, attr, None) is old:
                monkeypatch.setattr(module, attr, new)
    return loads, checks


@pytest.mark.parametrize("cluster", ["threads", "local", None])
def test_cvflow_run_loads_its_profile_once_and_checks_once(tmp_path, capsys, counted, cluster):
    """cvflow run: check_run once (by the run, not again by the face), and the profile loaded
    and validated once; auto loads its process profile (``local``) before the store's lock,
    and ``threads`` only when it picks that after timing the study (each profile once)."""
    loads, checks = counted
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(QUICK)
    assert main(["run", str(workflow), "--store", str(tmp_path / "s.zarr"),
                 *(["--cluster", cluster] if cluster else [])]) == 0
    execution = capsys.readouterr().err
    assert len(checks) == 1
    if cluster is None:
        assert loads == ["auto"] + (["threads"] if "execution: threads" in execution else [])
    else:
        assert loads == [cluster]


@pytest.mark.parametrize("cluster", ["threads", None])
def test_study_run_loads_its_profile_once_and_checks_once(tmp_path, counted, cluster):
    import numpy as np
    from sklearn.linear_model import Ridge

    import cvflow

    loads, checks = counted
    X = np.random.default_rng(0).normal(size=(30, 3))
    y = X.sum(axis=1)
    result = cvflow.Study(Ridge(), param_grid={"alpha": [0.1, 1.0]}, cv=3).run(
        X, y, store=tmp_path / "s.zarr", cluster=cluster, progress=False)
    assert len(checks) == 1
    # a short study: auto stays in this process (threads), after loading auto's local profile
    assert loads == (["auto", "threads"] if cluster is None else [cluster])
    assert result.run.execution.startswith("threads")


def test_a_threads_profile_file_is_read_by_its_kind(tmp_path, capsys):
    """The kind decides, not the profile's name: a profile file of kind threads is this
    process's threads, where a fit_timeout cannot stop a fit (refused before any store)."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("kind: threads\nworkers: 1\n")
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(QUICK + "execution: {fit_timeout: 5}\n")
    assert main(["run", str(workflow), "--store", str(tmp_path / "s.zarr"),
                 "--cluster", str(profile)]) == 2
    _one_line(capsys, "execution.fit_timeout: a fit in this process's threads cannot be stopped")
    assert not (tmp_path / "s.zarr").exists()
