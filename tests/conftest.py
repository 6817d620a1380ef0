"""Shared fixtures: a real LocalCluster with process workers, workflow files, the CLI."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

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


from cvtest import QUICK, REPO, run_cli, tree_digest  # noqa: E402,F401 - re-exported for fixtures
