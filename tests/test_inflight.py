"""A fit that ends the process on the in-process route (issue 41 item 4), in fresh processes:
the run ends (as GridSearchCV does) with its lock naming the fits it was running; the next run
on that store, CLI or Python, says in one line which block and params were running, fits in
worker processes, and records the culprit's fits failed (every other fit equal to
scikit-learn's Ridge on its training set). ``os._exit(3)`` through ``cvflow run``, a
segmentation fault through ``Study.run``. Deadlines are hang detectors, not speed limits."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fault_helpers as fh

DEADLINE = 600            # a run that starts worker processes at load 20 takes ~2 min
ALPHAS = (0.1, 1.0, 10.0, 100.0)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # the default route (auto) as a user gets it, with the suite's Dask log level
    return subprocess.run(argv, cwd=cwd, env=fh.cli_env(), capture_output=True, text=True,
                          timeout=DEADLINE)


def assert_culprit_failed(store: Path, message: str) -> None:
    """Param 2 (alpha = 10) failed on every fold split with ``message``; every other fit is
    done and equal to Ridge's."""
    import zarr
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge

    cube = fh.cube_arrays(store)
    group = zarr.open_group(str(store), mode="r")
    train = np.asarray(group["train"][...])
    assert cube["done"].all(), f"{(~cube['done']).sum()} fits not done"
    failed = np.asarray(cube["failed"])
    assert failed[2].all() and not np.delete(failed, 2, axis=0).any(), failed
    assert all(re.search(message, e) for e in cube["error"][2]), cube["error"][2]
    X, y = load_diabetes(return_X_y=True)
    for h, alpha in enumerate(ALPHAS):
        for s, rows in enumerate(train):
            if h != 2 and rows.any():
                want = Ridge(alpha=alpha).fit(X[rows], y[rows]).predict(X)
                np.testing.assert_allclose(cube["pred"][h, s], want, rtol=1e-10)


def crash_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "the last run (pid" in line]


@pytest.mark.timeout(3 * DEADLINE)
def test_cli_a_fit_that_exits_is_named_and_isolated_by_the_next_run(tmp_path):
    from cvflow.store.lock import read_lock

    workflow = fh.faulty_workflow(tmp_path / "dying.yaml", "BlockDyingRidge", "die_at", 10.0)
    store = tmp_path / "dying.zarr"
    argv = [sys.executable, "-m", "cvflow", "run", str(workflow), "--store", str(store)]
    first = run(argv, tmp_path)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "execution: threads" in first.stdout + first.stderr      # printed before it died
    record = read_lock(store)
    assert record and any("'alpha': 10.0" in p for r in record["running"] for p in r["params"])
    second = run(argv, tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    line, = crash_lines(second.stderr)
    assert f"pid {record['pid']}" in line and "faulty_ridge {'alpha': 10.0}" in line, line
    assert "worker processes" in line
    assert read_lock(store) is None
    assert_culprit_failed(store, r"exit status 3\b")


SCRIPT = """
import sys
import cvflow
import fault_helpers as fh
from sklearn.datasets import load_diabetes

X, y = load_diabetes(return_X_y=True)
study = cvflow.Study(fh.SegfaultRidge(crash_at=10.0), param_grid={"alpha": %r}, cv=3)
study.run(X, y, store=sys.argv[1])
print("done")
"""


@pytest.mark.timeout(3 * DEADLINE)
def test_python_a_segfault_is_named_and_isolated_by_the_next_run(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(textwrap.dedent(SCRIPT % (list(ALPHAS),)))
    store = tmp_path / "segv.zarr"
    argv = [sys.executable, str(script), str(store)]
    first = run(argv, tmp_path)
    assert first.returncode == -11 if os.name == "posix" else first.returncode != 0, first.stderr
    second = run(argv, tmp_path)
    assert second.returncode == 0 and "done" in second.stdout, second.stderr[-2000:]
    line, = crash_lines(second.stderr)
    # the fit died in a block (its params named) or in the learners' trial and timing fits
    # before the blocks (the learner named: those fits sample the grid), as the timing goes
    assert ("{'alpha': 10.0}" in line
            or "the learners' trial and timing fits (SegfaultRidge)" in line), line
    assert_culprit_failed(store, r"signal 11|SIGSEGV|[Ss]egmentation")
