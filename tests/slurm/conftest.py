"""SLURM tests run on a real SLURM (``cluster/slurm-dev/start.sh`` makes a one-node one).

They are skipped when ``sinfo`` cannot reach a controller, unless ``CVFLOW_REQUIRE_SLURM=1``
(set by CI), which turns that skip into a failure.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _slurm_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "sinfo not found (run cluster/slurm-dev/start.sh)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %a %t"], capture_output=True, text=True,
                             timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo timed out"
    if out.returncode != 0:
        return f"sinfo failed: {out.stderr.strip() or out.stdout.strip()}"
    if not any(s in out.stdout for s in ("idle", "mix", "alloc")):
        return f"no usable SLURM node: {out.stdout.strip()!r}"
    return None


@pytest.fixture(autouse=True, scope="session")
def slurm_available():
    problem = _slurm_problem()
    if problem:
        if os.environ.get("CVFLOW_REQUIRE_SLURM") == "1":
            pytest.fail(f"CVFLOW_REQUIRE_SLURM=1 but SLURM is not reachable: {problem}")
        pytest.skip(f"no SLURM reachable: {problem}")


@pytest.fixture
def no_jobs_left():
    """Yield; afterwards fail if dask-worker jobs are still queued (the cluster leaked them)."""
    yield
    import time

    for _ in range(60):
        out = subprocess.run(["squeue", "-h", "-n", "dask-worker", "-o", "%i"],
                             capture_output=True, text=True).stdout.split()
        if not out:
            return
        time.sleep(1)
    subprocess.run(["scancel", *out])
    pytest.fail(f"dask-worker jobs left behind: {out}")
