"""The scaling model of issue 17: what one task, one status write and one block write cost
here, and what that means at 1,000 workers and 10^8 fits.

    python benchmarks/bench_scale.py                 # ~1 min: the three costs and the model
    python benchmarks/bench_scale.py --million       # + the 10^6-fit study (minutes)

Measured (not assumed), on this machine:
- per-task scheduler cost: the CPU seconds of a scheduler process of its own over 4,000 no-op
  tasks (2 workers), per task;
- status-write cost: the client's write of the (param, split) status of a 1000 x 1000 cube
  (cvflow.store.writes.StatusWriter, what the run does every flush), per cell;
- store-write cost: one block of predictions (1000 params x 6 splits x 442 samples, float32,
  a shard) written by cvflow.store.writes.write_pred, per byte.
Status and block writes are timed in CPU seconds of this process (zarr's threads included), so
the machine's load does not inflate them; the disk's own time is not in them.
The 10^6-fit study (ridge path, 1000 alphas x 1001 splits, float32) runs as a user would,
``cvflow run`` in a child process that reports its own peak memory, then counts the store's files.
"""
from __future__ import annotations

import common  # noqa: F401 - one BLAS thread, before numpy

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

MILLION = """\
    name: million
    data: {source: sklearn, name: diabetes}
    task: regression
    learners:
      - name: ridge
        estimator: sklearn.linear_model.Ridge
        grid: {alpha: {logspace: [-4, 4, 1000]}}
    design: {folds: 5, repeats: 200, seed: 0}
    estimators: [kfold]
    execution: {dtype: float32, cluster: local}
    """

CLIENT = """\
import resource, sys, time
from cvflow.cli import main
t0 = time.perf_counter()
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(f"PEAK {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024} "
      f"WALL {time.perf_counter() - t0}", file=sys.stderr)
"""


def scheduler_seconds_per_task(n_tasks: int = 4000) -> float:
    """CPU seconds the scheduler process spends per task (a scheduler of its own, 2 workers):
    CPU time, not wall, so a loaded machine does not inflate it."""
    import psutil
    from distributed import Client, wait

    with tempfile.TemporaryDirectory() as tmp:
        sched_file = Path(tmp) / "scheduler.json"
        procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                   "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(sched_file)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        try:
            while not sched_file.exists():
                time.sleep(0.1)
            procs += [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                        "--scheduler-file", str(sched_file), "--nthreads", "1",
                                        "--no-nanny", "--no-dashboard"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for _ in range(2)]
            with Client(scheduler_file=str(sched_file)) as client:
                client.wait_for_workers(2, timeout=120)
                wait(client.map(abs, range(200), pure=False))          # warm
                scheduler = psutil.Process(procs[0].pid)
                before = sum(scheduler.cpu_times()[:2])
                wait(client.map(abs, range(n_tasks), pure=False))
                return (sum(scheduler.cpu_times()[:2]) - before) / n_tasks
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=30)


def store_costs(tmp: Path) -> tuple[float, float]:
    """(seconds per status cell written, seconds per prediction byte written)."""
    from cvflow.workflow.data import Data
    from cvflow.fitting.block import BlockResult
    from cvflow.workflow.params import Param
    from cvflow.store.creation import create, cube_template
    from cvflow.store.writes import StatusWriter, write_pred
    from cvflow.testing import simple_design

    n_params, n = 1000, 442
    design = simple_design(n, 5, seed=0, repeats=200)       # 1001 splits
    data = Data(X=np.zeros((n, 1)), y=np.zeros(n), feature_names=["x0"], is_test=np.zeros(n, bool))
    params = [Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(n_params)]
    store = tmp / "costs.zarr"
    create(store, cube_template(data, design, params, chunks=(n_params, 6), dtype="float32",
                                attrs={"task": "regression", "loss": "squared", "classes": "null",
                                       "workflow": "{}", "workflow_hash": "", "data_hash": ""}))
    block = BlockResult(slice(0, n_params), slice(0, 6),
                        np.random.default_rng(0).standard_normal((n_params, 6, n)).astype(np.float32),
                        np.zeros((n_params, 6), bool), np.full((n_params, 6), "", dtype=object),
                        np.zeros((n_params, 6)))
    t0 = time.process_time()                 # CPU seconds (all threads): load-independent
    for _ in range(5):
        write_pred(store, block)
    pred_seconds = (time.process_time() - t0) / 5 / block.pred.nbytes
    writer = StatusWriter(store, fresh=True)
    writer.write([block])                                     # opens the arrays
    t0 = time.process_time()
    for _ in range(5):
        writer.write([block])
    status_seconds = (time.process_time() - t0) / 5 / (n_params * design.n_splits)
    return status_seconds, pred_seconds


def million_study(tmp: Path) -> dict:
    wf = tmp / "million.yaml"
    wf.write_text(textwrap.dedent(MILLION))
    store = tmp / "million.zarr"
    out = subprocess.run([sys.executable, "-c", CLIENT, "run", str(wf), "--store", str(store),
                          "--workers", "2"], capture_output=True, text=True)
    line = next(x for x in out.stderr.splitlines() if x.startswith("PEAK"))
    _, peak, _, wall = line.split()
    files = sum(1 for p in store.rglob("*") if p.is_file())
    head = out.stdout.splitlines()[0] if out.stdout else out.stderr[-500:]
    return {"peak_gib": int(peak) / 2**30, "wall": float(wall), "files": files, "summary": head}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--million", action="store_true", help="also run the 10^6-fit study")
    args = ap.parse_args()
    print(common.machine())
    with tempfile.TemporaryDirectory() as tmp:
        per_task = scheduler_seconds_per_task()
        per_cell, per_byte = store_costs(Path(tmp))
        print(f"scheduler CPU, per task:       {per_task * 1e6:8.0f} us (4,000 no-op tasks, 2 workers)")
        print(f"status write CPU, per cell:     {per_cell * 1e9:8.1f} ns (a 1000 x 1001 cube, one flush)")
        print(f"prediction write CPU, per MB:   {per_byte * 2**20 * 1e3:8.1f} ms (a 10.6 MB shard)")
        # the model: 10^8 fits of 442 float32 predictions on 1,000 workers, tasks of 0.3 s
        fits, workers, task_s, n = 1e8, 1000, 0.3, 442
        tasks_per_s = workers / task_s
        print("\n10^8 fits, 1,000 workers, 0.3 s tasks (cvflow.execution.sizing.TARGET_TASK_SECONDS):")
        print(f"  scheduler busy {tasks_per_s * per_task:6.2f} s per second "
              f"({tasks_per_s:.0f} tasks/s; > 1 means the scheduler is the bottleneck)")
        cells = fits
        print(f"  one status flush of 10^8 cells: {cells * per_cell:6.1f} s; the client's status "
              f"copy ~{cells * (1 + 1 + 8 + 8) / 2**30:.1f} GiB + error strings")
        print(f"  predictions: {fits * n * 4 / 2**30:,.0f} GiB, {fits * n * 4 * per_byte / workers:,.0f} s "
              f"of writing per worker at this machine's disk speed")
        if args.million:
            r = million_study(Path(tmp))
            print(f"\n10^6-fit study: {r['summary']}")
            print(f"  client peak {r['peak_gib']:.2f} GiB, {r['files']} files, {r['wall']:.0f} s wall")
    print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
