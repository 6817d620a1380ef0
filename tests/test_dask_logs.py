"""No log line at INFO that GridSearchCV would not print (issue 41 item 5): a fresh process
that logs at INFO (``logging.basicConfig``) and fits a search prints as many log lines as the
same script with GridSearchCV (none), on every route; asked (config
``cvflow.execution.dask-logs: info``, ``verbose=1``), Dask's and cvflow's lines are shown, so
the count can fail."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a hang detector, not a speed limit: a search starting worker processes takes a few seconds
DEADLINE = 240
SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="LOG|%(name)s|%(levelname)s|%(message)s")
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV
from sklearn.tree import DecisionTreeClassifier
import cvflow
X, y = load_breast_cancer(return_X_y=True)
which, cluster, verbose = sys.argv[1], sys.argv[2], int(sys.argv[3])
if which == "gridsearchcv":
    search = GridSearchCV(DecisionTreeClassifier(random_state=0), {"max_depth": [1, 2]}, cv=3)
else:
    search = cvflow.SearchCV(DecisionTreeClassifier(random_state=0), {"max_depth": [1, 2]},
                             cv=3, cluster=None if cluster == "auto" else cluster,
                             verbose=verbose)
search.fit(X, y)
print("best", search.best_params_["max_depth"])
"""


def log_lines(tmp_path, which: str, cluster: str = "auto", verbose: int = 0,
              env: dict | None = None) -> list[str]:
    """The log records a fresh process fitting ``which`` wrote (stderr lines our format)."""
    script = tmp_path / "search.py"
    script.write_text(SCRIPT)
    # a user's environment: without the test suite's DASK_LOGGING__DISTRIBUTED (conftest.py)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    run = subprocess.run([sys.executable, str(script), which, cluster, str(verbose)],
                         capture_output=True, text=True, timeout=DEADLINE, cwd=tmp_path,
                         env={**environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "best 2" in run.stdout, run.stdout       # both found the same depth
    return [line for line in run.stderr.splitlines() if line.startswith("LOG|")]


@pytest.mark.timeout(3 * DEADLINE)
@pytest.mark.parametrize("cluster", ["auto", "threads", "local"])
def test_a_search_logs_what_gridsearchcv_logs(tmp_path, cluster):
    reference = log_lines(tmp_path, "gridsearchcv")
    ours = log_lines(tmp_path, "searchcv", cluster)
    assert ours == reference, ours


@pytest.mark.timeout(2 * DEADLINE)
def test_asked_the_lines_are_shown(tmp_path):
    lines = log_lines(tmp_path, "searchcv", "local", verbose=1,
                      env={"DASK_CVFLOW__EXECUTION__DASK_LOGS": "info"})
    names = {line.split("|")[1].split(".")[0] for line in lines}
    assert names >= {"cvflow", "distributed"}, lines
