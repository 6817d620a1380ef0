"""Where a K-fold report's wall time goes, part by part, against the floor (issue 40 item 2).

    python benchmarks/report_parts.py --store S.zarr [--runs 3]

Each part is a fresh ``python`` process (medians of ``--runs``; wall around the process, CPU
user + system from ``os.wait4``), every part in turn in each round:

- ``interpreter``: ``python -c pass``;
- ``numpy + zarr``: their imports (what the floor imports);
- ``report imports``: numpy, zarr and every module ``cvflow report --estimators kfold`` imports
  (xarray, pandas, dask, dask.array and what it pulls in, cvflow's own);
- ``decode``: numpy + zarr, then every shard of ``pred`` holding a fold split read and decoded
  once, one thread (the floor without its sums);
- ``floor``: ``floor_kfold.py`` (read, decode and the squared errors' sums, one thread);
- ``report``: ``cvflow report STORE --estimators kfold --json`` and without ``--json`` (text).

and, in one process after the report's imports and ``cvflow.open``, its phases: the open,
the pass (``split_sums``, as the report runs it: zarr's decoding pool and Dask's threads, one
a core; the CPU of each thread, from ``/proc``) and the JSON of the K-fold result. The lower
bound of the report's wall on ``cores`` cores is then: the parts that cannot overlap (the
interpreter, numpy and zarr: the pass needs them; the JSON: it needs the pass's end) plus
everything else's CPU spread evenly over the cores.
"""
from __future__ import annotations

import common  # noqa: F401 - one BLAS thread, before numpy

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMPORTS = ("import numpy, zarr, xarray, dask.array, cvflow.cli, cvflow.report.results, "
           "cvflow.store.cube, cvflow.estimators.one_pass, cvflow.estimators.kfold")
DECODE = """
import sys, numpy as np, zarr
zarr.config.set({"threading.max_workers": 1, "async.concurrency": 1})
g = zarr.open_group(sys.argv[1], mode="r")
pred, fold_split = g["pred"], np.asarray(g["fold_split"][:])
step = pred.shards or pred.chunks
wanted = {int(s) // step[1] for s in fold_split.ravel()}
for c in sorted(wanted):
    for p0 in range(0, pred.shape[0], step[0]):
        pred[p0:p0 + step[0], c * step[1]:(c + 1) * step[1]]
"""
PHASES = """
import io, json, os, sys, threading, time
t0, c0 = time.perf_counter(), time.process_time()
import numpy, zarr, dask
from cvflow import cli
from cvflow.report import results as report, json_stream
from cvflow.store.cube import open_cube
import xarray, dask.array, cvflow.estimators.one_pass, cvflow.estimators.kfold
out = {"imports": (time.perf_counter() - t0, time.process_time() - c0)}
tick = os.sysconf("SC_CLK_TCK")

def threads():
    names = {t.native_id: t.name for t in threading.enumerate()}
    cpu = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu[int(tid)] = ((int(fields[11]) + int(fields[12])) / tick, names.get(int(tid), tid))
    return cpu

def timed(name, call):
    t, c = time.perf_counter(), time.process_time()
    value = call()
    out[name] = (time.perf_counter() - t, time.process_time() - c)
    return value

cli._decode_threads(sys.argv[1])
cube = timed("open", lambda: report.workflow_view(open_cube(sys.argv[1])))
before = threads()
results = timed("pass and estimator", lambda: report.compute(cube, ["kfold"]))
after = threads()
per_thread = {}
for tid, (cpu, name) in after.items():
    used = cpu - before.get(tid, (0.0, ""))[0]
    if used > 0.005:
        kind = str(name).rstrip("0123456789_")
        per_thread[kind] = per_thread.get(kind, 0.0) + used
out["threads"] = per_thread
timed("json", lambda: json_stream.write(report.to_json(results, cube, arrays=True), io.StringIO()))
print(json.dumps(out))
"""


def run(argv: list[str], env: dict) -> dict:
    """A fresh process: wall seconds and its stdout (its CPU: the caller's ``os.times``)."""
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    stdout, stderr = child.communicate(timeout=600)
    wall = time.perf_counter() - t0
    if child.returncode:
        raise SystemExit(f"{argv}: exit {child.returncode}\n{stderr.decode()[-2000:]}")
    return {"wall": wall, "stdout": stdout.decode()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True, help="a complete cube with fold splits")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    p.add_argument("--tree", default=str(HERE.parent), help="the cvflow checkout timed")
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(args.tree).resolve())}
    py = sys.executable
    parts = {"interpreter": [py, "-c", "pass"], "numpy + zarr": [py, "-c", "import numpy, zarr"],
             "report imports": [py, "-c", IMPORTS], "decode": [py, "-c", DECODE, args.store],
             "floor": [py, str(HERE / "floor_kfold.py"), args.store],
             "report --json": [py, "-m", "cvflow", "report", args.store, "--estimators", "kfold",
                               "--json"],
             "report (text)": [py, "-m", "cvflow", "report", args.store, "--estimators", "kfold"],
             "phases": [py, "-c", PHASES, args.store]}
    times: dict[str, list] = {name: [] for name in parts}
    phases = []
    loads = []
    run(parts["decode"], env)                          # the store in the page cache
    for _ in range(args.runs):
        for name, argv in parts.items():
            loads.append(os.getloadavg()[0])
            usage_before = os.times()
            result = run(argv, env)
            usage = os.times()
            cpu = (usage.children_user - usage_before.children_user
                   + usage.children_system - usage_before.children_system)
            times[name].append((result["wall"], cpu))
            if name == "phases":
                phases.append(json.loads(result["stdout"]))
    med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for name, v in times.items()}
    print(f"load {min(loads):.1f}-{max(loads):.1f}, {args.runs} runs, medians, {args.cores} cores")
    for name, (wall, cpu) in med.items():
        if name != "phases":
            print(f"{name:16s} wall {wall:6.2f} s   CPU {cpu:6.2f} s")
    phase = {key: statistics.median(p[key][i] for p in phases)
             for key in phases[0] if key != "threads" for i in (1,)}
    walls = {key: statistics.median(p[key][0] for p in phases) for key in phases[0] if key != "threads"}
    kinds = sorted({k for p in phases for k in p["threads"]})
    threads = {k: statistics.median(p["threads"].get(k, 0.0) for p in phases) for k in kinds}
    print("in one process: " + ", ".join(f"{k} {walls[k]:.2f} s wall / {phase[k]:.2f} s CPU"
                                         for k in phase))
    print("the pass's CPU by thread: " + ", ".join(f"{k} {v:.2f} s" for k, v in threads.items()))
    serial = med["numpy + zarr"][1] + phase["json"]
    spread = (med["report imports"][1] - med["numpy + zarr"][1]) + phase["open"] \
        + phase["pass and estimator"]
    bound = serial + spread / args.cores
    # the floor runs on one thread: on a quiet core its wall is its CPU (under load, wall is
    # the load's; the CPU is the comparable number)
    floor = med["floor"][1]
    print(f"lower bound of `report --json` on {args.cores} cores: {serial:.2f} s serial + "
          f"{spread:.2f} s / {args.cores} = {bound:.2f} s = {bound / floor:.2f}x the floor's "
          f"{floor:.2f} s of CPU (its wall on a quiet core); 0.7x is {0.7 * floor:.2f} s")
    bound_text = med["numpy + zarr"][1] + spread / args.cores
    print(f"the same without the JSON (text report): {bound_text:.2f} s = "
          f"{bound_text / floor:.2f}x")


if __name__ == "__main__":
    main()
