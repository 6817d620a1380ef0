"""The threads route without a dashboard: Dask's threaded scheduler behind the loop's client
calls (cvflow.execution.threaded). References: scikit-learn's GridSearchCV for the answers,
concurrent.futures' semantics for the futures."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import CancelledError

import pytest

from cvflow.execution.threaded import ThreadedClient


def test_a_default_search_in_a_fresh_process_runs_on_dasks_threaded_scheduler():
    """A whole process as a user runs it: SearchCV with its defaults gives GridSearchCV's
    cv_results_ and choice, on Dask's threaded scheduler, and never imports distributed."""
    script = textwrap.dedent("""\
        import sys
        import numpy as np
        from sklearn.datasets import load_breast_cancer
        from sklearn.model_selection import GridSearchCV
        from sklearn.tree import DecisionTreeClassifier
        import cvflow

        X, y = load_breast_cancer(return_X_y=True)
        grid = {"max_depth": [2, 4, 8]}
        ours = cvflow.SearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5).fit(X, y)
        ref = GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5).fit(X, y)
        assert ours.best_params_ == ref.best_params_, (ours.best_params_, ref.best_params_)
        np.testing.assert_allclose(ours.cv_results_["mean_test_score"],
                                   ref.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
        for k in range(5):
            key = f"split{k}_test_score"
            np.testing.assert_allclose(ours.cv_results_[key], ref.cv_results_[key], atol=1e-12)
        print(ours.result_.run.execution.split(":")[0], "distributed" in sys.modules)
        """)
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["threads", "False"]


def _wait(event: threading.Event, value):
    assert event.wait(60), "the test never released the task"
    return value


def _fail():
    raise KeyError("the task's own error")


def test_futures_finish_fail_and_cancel_as_concurrent_futures_do():
    """One worker thread: a running task holds it, so a task queued behind it can be cancelled;
    a task's exception is raised by result(); done callbacks run once per future; result()
    with a timeout raises TimeoutError while the task runs."""
    gate = threading.Event()
    seen: list[str] = []
    with ThreadedClient(1) as client:
        running = client.submit(_wait, gate, 1, key="running")
        queued = client.submit(_wait, gate, 2, key="queued")
        failing = client.submit(_fail, key="failing")
        for f in (running, queued, failing):
            f.add_done_callback(lambda f: seen.append(f.key))
        with pytest.raises(TimeoutError):
            running.result(timeout=0.05)
        client.cancel([queued])
        gate.set()
        assert running.result(timeout=60) == 1
        with pytest.raises(CancelledError):
            queued.result(timeout=60)
        with pytest.raises(KeyError, match="the task's own error"):
            failing.result(timeout=60)
        assert sorted(seen) == ["failing", "queued", "running"]
        assert (running.status, queued.status, failing.status) == ("finished", "cancelled",
                                                                     "error")


def test_a_tasks_future_argument_is_its_value_and_stacks_name_the_running_task():
    gate = threading.Event()
    with ThreadedClient(2) as client:
        data = client.submit(lambda: 41, key="data")
        running = client.submit(_wait, gate, data, key="uses-data")
        for _ in range(600):               # until the task has started (a deadline, no timing)
            stacks = client.call_stack([running])
            if stacks:
                break
            threading.Event().wait(0.05)
        assert "_wait" in " ".join(stacks["threads"]["uses-data"])
        gate.set()
        assert running.result(timeout=60) == 41


@pytest.mark.parametrize("watch_after", [None, "0"])
def test_a_default_run_long_enough_to_watch_serves_its_dashboard(tmp_path, watch_after):
    """`cvflow run` with its defaults, a whole process: a short study prints no dashboard (it
    runs on Dask's threaded scheduler); one whose fits are estimated past
    ``cvflow.cluster.auto.dashboard_after_seconds`` (0 here) prints the dashboard and the live
    study page on a loopback port, without being asked."""
    import fault_helpers as fh
    from cvtest import REPO

    env = fh.cli_env()
    if watch_after is not None:
        env["DASK_CVFLOW__CLUSTER__AUTO__DASHBOARD_AFTER_SECONDS"] = watch_after
    out = subprocess.run([sys.executable, "-m", "cvflow", "run",
                          str(REPO / "workflows" / "quickstart.yaml"), "--store",
                          str(tmp_path / "q.zarr")], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "execution: threads" in out.stderr
    links = [line.split(": ", 1)[1] for line in out.stderr.splitlines()
             if line.startswith(("dashboard: ", "live study page: "))]
    if watch_after is None:
        assert links == []
    else:
        assert len(links) == 2 and all(u.startswith("http://127.0.0.1:") for u in links), links
