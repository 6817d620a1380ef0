"""Shared fixtures: a real LocalCluster with process workers, workflow files, the CLI."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")


@pytest.fixture(scope="session")
def client():
    """One real LocalCluster (2 process workers on 127.0.0.1) shared by the engine tests."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture
def write_workflow(tmp_path):
    """Write a workflow YAML (dedented text) into tmp_path and return its path."""
    def write(text: str, name: str = "wf.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path
    return write


def run_cli(*args: str, cwd=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real entry point, in a subprocess (``python -m cvflow`` == the ``cvflow`` script)."""
    return subprocess.run([sys.executable, "-m", "cvflow", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def tree_digest(path: Path) -> str:
    """Hash of every file (name + bytes) under a path: proves a store was not touched."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


QUICK = """\
name: quick
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    estimator: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 0.1, 1.0, 10.0]}
design: {folds: 5, seed: 0}
estimators: [kfold]
"""
