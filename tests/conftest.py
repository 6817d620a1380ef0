"""Shared fixtures: a real LocalCluster with process workers, workflow files, the CLI."""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")


@pytest.fixture(scope="session")
def client():
    """One real LocalCluster (2 process workers on 127.0.0.1) shared by the engine tests.

    Not the default client: as the default it outlived the test that first asked for it, and
    every later test's dask computation went to its workers (started before, say, test_s3 set
    the AWS environment), and dask chose P2P rechunking for graphs that then ran on threads.
    """
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(autouse=True)
def no_default_client_left_behind():
    """Fail a test that leaves a default distributed Client (an unclosed Client or cluster)."""
    yield
    if "distributed" not in sys.modules:
        return
    from distributed import default_client

    try:
        leaked = default_client()
    except ValueError:
        return
    leaked.close()
    pytest.fail(f"the test left a default distributed Client ({leaked}); close it (a `with` block)")


@pytest.fixture
def write_workflow(tmp_path):
    """Write a workflow YAML (dedented text) into tmp_path and return its path."""
    def write(text: str, name: str = "wf.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path
    return write


from cvtest import QUICK, REPO, run_cli, tree_digest  # noqa: E402,F401 - re-exported for fixtures
