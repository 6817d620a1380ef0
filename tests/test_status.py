"""`cvflow status` while a run writes: per-learner progress that only grows, failures grouped."""
from __future__ import annotations

import threading
import time

from cvflow.execution.run import run
from cvflow.report import format_status, status

STUDY = """\
name: live
data: {source: synthetic, name: linear, params: {n: 30, p: 2}}
task: regression
learners:
  - name: slow
    class: fault_helpers.SlowRidge
    params: {delay: 0.08}
    grid: {alpha: [0.1, 1.0, -1.0]}
  - name: fast
    class: sklearn.linear_model.Ridge
    grid: {alpha: [1.0, -2.0]}
design: {folds: 3, seed: 0}
execution: {fits_per_task: 1, path_aware: false}
"""


def test_status_is_consistent_while_a_run_writes(tmp_path, write_workflow, client):
    wf = write_workflow(STUDY)
    store = tmp_path / "live.zarr"
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(r=run(wf, store=store, client=client)))
    worker.start()
    seen = []
    while worker.is_alive():
        if (store / "zarr.json").exists():
            try:
                info = status(store)
            except FileNotFoundError:          # arrays not created yet
                info = None
            if info and info["total"]:                   # 0: the store is being created
                assert sum(s["done"] for s in info["learners"].values()) == info["done"]
                assert sum(s["failed"] for s in info["learners"].values()) == info["failed"]
                assert info["failed"] <= info["done"] <= info["total"] == 5 * 4
                assert sum(info["failures"].values()) == info["failed"]
                seen.append(info["done"])
                format_status(info)
        time.sleep(0.05)
    worker.join()
    assert outcome["r"].fits_executed == 20
    assert seen == sorted(seen) and any(0 < d < 20 for d in seen)   # watched it grow
    final = status(store)
    assert final["complete"] and final["learners"] == {
        "slow": {"done": 12, "total": 12, "failed": 4},
        "fast": {"done": 8, "total": 8, "failed": 4}}
    assert sorted(final["failures"].values()) == [4, 4]        # two messages, 4 fits each
    text = format_status(final)
    assert "slow: 12/12 done, 4 failed" in text and "4 fit(s) failed: " in text
