"""The scaling model of issue 17: what one task, one status write and one block write cost
here, and what that means at 1,000 workers and 10^8 fits.

    python benchmarks/bench_scale.py                 # ~1 min: the three costs and the model
    python benchmarks/bench_scale.py --million       # + the 10^6-fit study (minutes)
    python benchmarks/bench_scale.py --ten-million   # + the 10^6- and 10^7-fit studies (~1/2 h)

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
``cvflow run`` in a child process that reports its own peak memory, then counts the store's files;
the 10^7-fit study is the same with 2000 repeats (1000 alphas x 10001 splits), and ``cvflow status``
on each store is timed in a child process that reports its peak memory too.
"""
from __future__ import annotations

import common  # noqa: F401 - one BLAS thread, before numpy

import argparse
import os
import re
import shutil
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
TEN_MILLION = MILLION.replace("name: million", "name: ten_million").replace("repeats: 200",
                                                                           "repeats: 2000")

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


def _cost_store(tmp: Path, repeats: int):
    """A 1000-param store of 5 folds x ``repeats`` + 1 splits, blocks of 1000 x 6 (the ridge
    path's); (its path, its design, its params)."""
    from cvflow.workflow.data import Data
    from cvflow.workflow.params import Param
    from cvflow.store.creation import create, cube_template
    from cvflow.testing import simple_design

    n_params, n = 1000, 442
    design = simple_design(n, 5, seed=0, repeats=repeats)
    data = Data(X=np.zeros((n, 1)), y=np.zeros(n), feature_names=["x0"], is_test=np.zeros(n, bool))
    params = [Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": float(a)})
              for a in range(n_params)]
    store = tmp / f"costs-{repeats}.zarr"
    create(store, cube_template(data, design, params, chunks=(n_params, 6), dtype="float32",
                                attrs={"task": "regression", "loss": "squared", "classes": "null",
                                       "workflow": "{}", "workflow_hash": "", "data_hash": ""}))
    return store, design, params


def _block(n_params: int, s0: int, n: int = 442, *, pred: bool = False):
    from cvflow.fitting.block import BlockResult

    rng = np.random.default_rng(s0)
    return BlockResult(slice(0, n_params), slice(s0, s0 + 6),
                       rng.standard_normal((n_params, 6, n)).astype(np.float32) if pred else None,
                       np.zeros((n_params, 6), bool), np.full((n_params, 6), "", dtype=object),
                       rng.uniform(1e-4, 1e-3, (n_params, 6)))


def status_flush_seconds(tmp: Path, repeats: int, flushes: int = 10) -> float:
    """CPU seconds of one flush of the client's status (cvflow.store.writes.StatusWriter, what
    the run does) recording one new block of 1000 x 6 fits, in a store of 1000 x (5 x
    ``repeats`` + 1) fits."""
    from cvflow.store.writes import StatusWriter

    store, design, params = _cost_store(tmp, repeats)
    writer = StatusWriter(store, fresh=True)
    writer.write([_block(len(params), 0)])                   # opens the arrays
    blocks = [_block(len(params), 6 * i) for i in range(1, flushes + 1)]
    t0 = time.process_time()                 # CPU seconds (all threads): load-independent
    for block in blocks:
        writer.write([block])
    seconds = (time.process_time() - t0) / flushes
    shutil.rmtree(store)
    return seconds


def store_costs(tmp: Path) -> tuple[float, float]:
    """(seconds per status flush of one block, seconds per prediction byte written)."""
    from cvflow.store.writes import write_pred

    store, _, params = _cost_store(tmp, 200)
    block = _block(len(params), 0, pred=True)
    t0 = time.process_time()                 # CPU seconds (all threads): load-independent
    for _ in range(5):
        write_pred(store, block)
    pred_seconds = (time.process_time() - t0) / 5 / block.pred.nbytes
    shutil.rmtree(store)
    return status_flush_seconds(tmp, 200), pred_seconds


def _client(args: list[str], timeout: float) -> tuple[float, float, str]:
    """``cvflow ARGS`` in a child process: (its peak memory in GiB, its wall seconds, stdout)."""
    # 10,001,000 fits are over cvflow.limits.fits (10^7): raised, as its message says
    env = {**os.environ, "DASK_CVFLOW__LIMITS__FITS": str(2 * 10**7)}
    out = subprocess.run([sys.executable, "-c", CLIENT, *args], capture_output=True, text=True,
                         timeout=timeout, env=env)
    line = next((x for x in out.stderr.splitlines() if x.startswith("PEAK")), None)
    if line is None:
        raise RuntimeError(f"cvflow {' '.join(args)} failed: {out.stderr[-2000:]}")
    _, peak, _, wall = line.split()
    return int(peak) / 2**30, float(wall), out.stdout


def study(tmp: Path, name: str, text: str, *, timeout: float = 7200) -> dict:
    """Run the workflow ``text`` as ``cvflow run`` (its report included), then ``cvflow status``
    on its store, each in a child process: their peak memory and wall time, the store's files."""
    wf = tmp / f"{name}.yaml"
    wf.write_text(textwrap.dedent(text))
    store = tmp / f"{name}.zarr"
    peak, wall, stdout = _client(["run", str(wf), "--store", str(store), "--workers", "2"], timeout)
    files = sum(1 for p in store.rglob("*") if p.is_file())
    head = stdout.splitlines()[0] if stdout else ""
    found = re.search(r"(\d+) fits performed in (\d+) tasks \(([\d.]+)s wall", head)
    if found is None:
        raise RuntimeError(f"cvflow run {wf}: {stdout[-2000:]}")
    fits, tasks, run_wall = (float(x) for x in found.groups())
    status_peak, status_wall, status_out = _client(["status", str(store)], 600)
    return {"peak_gib": peak, "wall": wall, "files": files, "summary": head, "fits": int(fits),
            "tasks": int(tasks), "run_wall": run_wall, "status_peak_gib": status_peak,
            "status_wall": status_wall, "status": status_out.splitlines()[0]}


def million_study(tmp: Path) -> dict:
    return study(tmp, "million", MILLION)


def print_study(label: str, r: dict) -> None:
    print(f"\n{label}: {r['summary']}")
    print(f"  client peak {r['peak_gib']:.2f} GiB, {r['files']} files, {r['tasks']} tasks, "
          f"{r['wall']:.0f} s wall with the report ({r['run_wall']:.0f} s the run: "
          f"{r['run_wall'] / r['fits'] * 1e6:.1f} us per fit)")
    print(f"  cvflow status: {r['status_wall']:.2f} s, peak {r['status_peak_gib']:.2f} GiB: "
          f"{r['status']}")
    print(f"  load average: {Path('/proc/loadavg').read_text().split()[:3]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--million", action="store_true", help="also run the 10^6-fit study")
    ap.add_argument("--ten-million", action="store_true",
                    help="also run the 10^6- and 10^7-fit studies (the same session)")
    args = ap.parse_args()
    print(common.machine())
    with tempfile.TemporaryDirectory() as tmp:
        per_task = scheduler_seconds_per_task()
        per_flush, per_byte = store_costs(Path(tmp))
        per_flush_10 = status_flush_seconds(Path(tmp), 2000)
        print(f"scheduler CPU, per task:       {per_task * 1e6:8.0f} us (4,000 no-op tasks, 2 workers)")
        print(f"status flush CPU, one block:    {per_flush * 1e3:8.1f} ms (a 1000 x 1001 cube), "
              f"{per_flush_10 * 1e3:.1f} ms (1000 x 10001): the chunks it changed, whatever the cube")
        print(f"prediction write CPU, per MB:   {per_byte * 2**20 * 1e3:8.1f} ms (a 10.6 MB shard)")
        # the model: 10^8 fits of 442 float32 predictions on 1,000 workers, tasks of 0.3 s
        fits, workers, task_s, n = 1e8, 1000, 0.3, 442
        tasks_per_s = workers / task_s
        print("\n10^8 fits, 1,000 workers, 0.3 s tasks (cvflow.execution.sizing.TARGET_TASK_SECONDS):")
        print(f"  scheduler busy {tasks_per_s * per_task:6.2f} s per second "
              f"({tasks_per_s:.0f} tasks/s; > 1 means the scheduler is the bottleneck)")
        print(f"  one status flush of a block: {per_flush_10 * 1e3:.1f} ms whatever the cube; the "
              f"client's status copy ~{fits * (1 + 1 + 8) / 2**30:.1f} GiB (done, failed, "
              "fit_seconds; errors kept sparse)")
        print(f"  predictions: {fits * n * 4 / 2**30:,.0f} GiB, {fits * n * 4 * per_byte / workers:,.0f} s "
              f"of writing per worker at this machine's disk speed")
        if args.million or args.ten_million:
            r = million_study(Path(tmp))
            print_study("10^6-fit study", r)
            shutil.rmtree(Path(tmp) / "million.zarr")
        if args.ten_million:
            r10 = study(Path(tmp), "ten_million", TEN_MILLION)
            print_study("10^7-fit study", r10)
            print(f"  time per fit, 10^7 against 10^6: "
                  f"{(r10['run_wall'] / r10['fits']) / (r['run_wall'] / r['fits']):.2f}x")
    print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
