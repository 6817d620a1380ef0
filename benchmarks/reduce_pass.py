"""The report's one pass over ``pred`` (issue 40 item 1): `cvflow report` before and after, in
fresh processes, on a cube built here.

The cube: ridge over ``--alphas`` alphas x (5 folds x ``--repeats`` repeats + the full fit) on
diabetes, float32 (the issue's 10^6-fit cube is ``--alphas 1000 --repeats 200``; the default
``--alphas 1000 --repeats 40``, 201 splits, is 2 x 10^5 fits), fitted once by ``cvflow run``
(``--store`` reuses one). Then, alternating, each ``--runs`` times, whole processes as a user
runs them:

- ``before``: ``python -m cvflow report STORE --json --estimators E`` with ``--before`` (a
  checkout of the code before the pass, e.g. /work/main) first on PYTHONPATH;
- ``after``: the same with this tree first on PYTHONPATH;
- ``floor``: zarr + numpy in one thread, each shard of ``pred`` read once, the test rows'
  squared errors summed per param (the K-fold sums only: what ``kfold`` needs at the least).

Each process's wall (``time.perf_counter`` around it, imports included) and peak RSS
(``getrusage`` in the child) are printed with the machine's load before and after; the
JSON of before and after must agree (1e-12 relative) or the script fails.

Run: ``python benchmarks/reduce_pass.py --before /work/main [--store S] [--estimators
kfold,corrected_kfold,stability] [--runs 3]``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEADLINE = 3600        # seconds a child may take before it is killed and the run fails

WORKFLOW = """\
name: reduce_pass
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {{logspace: [-4, 4, {alphas}]}}}}
design: {{folds: 5, repeats: {repeats}, seed: 0}}
estimators: [kfold, corrected_kfold, stability]
execution: {{dtype: float32}}
"""

FLOOR = """\
import sys, time
import numpy as np, zarr
t0 = time.perf_counter()
group = zarr.open_group(sys.argv[1], mode="r")
pred, y, fold = group["pred"], group["y"][:], group["fold"][:]
fold_split = group["fold_split"][:]
shard = (pred.shards or pred.chunks)[1]
sums = np.zeros(pred.shape[0])
role = {int(s): (r, j) for (r, j), s in np.ndenumerate(fold_split)}
for s0 in range(0, pred.shape[1], shard):
    wanted = [s for s in range(s0, min(s0 + shard, pred.shape[1])) if s in role]
    if not wanted:
        continue
    block = pred[:, s0:s0 + shard]
    for s in wanted:
        r, j = role[s]
        test = fold[r] == j
        sums += ((block[:, s - s0][:, test] - y[test]) ** 2).sum(axis=1)
estimate = sums / fold_split.shape[0] / (fold[0] >= 0).sum()
print(int(np.argmin(estimate)), f"{time.perf_counter() - t0:.3f}")
"""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f})"


# runs a module (-m NAME) or a script under this process's rusage: its own peak RSS, on stderr
WRAP = """\
import atexit, resource, runpy, sys
def _usage():
    own = resource.getrusage(resource.RUSAGE_SELF)
    print("PEAK_KIB", own.ru_maxrss, own.ru_utime + own.ru_stime, file=sys.stderr)
atexit.register(_usage)
target, sys.argv = sys.argv[1], sys.argv[1:]
if target == "-m":
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(target, run_name="__main__")
"""


def child(args: list[str], pythonpath: str | None) -> tuple[float, float, float, str]:
    """Run ``python ARGS`` in a fresh process: (wall seconds, its peak RSS in GiB, its CPU
    seconds (user + system, every thread), stdout)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WRAP, *args], capture_output=True, text=True,
                         env=env, timeout=DEADLINE)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {out.stderr[-2000:]}")
    usage = [line.split() for line in out.stderr.splitlines() if line.startswith("PEAK_KIB")]
    if not usage:
        return wall, math.nan, math.nan, out.stdout
    return wall, int(usage[-1][1]) / 2**20, float(usage[-1][2]), out.stdout


def same(a, b, where="report") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys differ"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a checkout of cvflow before the pass")
    ap.add_argument("--store", help="reuse this store (else one is fitted in a temporary dir)")
    ap.add_argument("--alphas", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--estimators", default="kfold,corrected_kfold,stability")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store
        if store is None or not Path(store).exists():
            store = store or str(Path(tmp) / "cube.zarr")
            wf = Path(tmp) / "wf.yaml"
            wf.write_text(textwrap.dedent(WORKFLOW.format(alphas=args.alphas,
                                                          repeats=args.repeats)))
            print(f"fitting {args.alphas} x {5 * args.repeats + 1} ({load()})", flush=True)
            wall, _, _, _ = child(["-m", "cvflow", "run", str(wf), "--store", store], str(REPO))
            print(f"  fitted in {wall:.1f} s ({load()})", flush=True)
        floor_script = Path(tmp) / "floor.py"
        floor_script.write_text(FLOOR)
        # timed: the text report (as the issue timed it); the JSON once each, compared
        report = ["-m", "cvflow", "report", store, "--estimators", args.estimators]
        before_path, after_path = str(Path(args.before).resolve()), str(REPO)
        same(json.loads(child(report + ["--json"], before_path)[3]),
             json.loads(child(report + ["--json"], after_path)[3]))
        routes = {"floor": ([str(floor_script), store], None),
                  "after": (report, after_path), "before": (report, before_path)}
        walls: dict[str, list[float]] = {name: [] for name in routes}
        cpus: dict[str, list[float]] = {name: [] for name in routes}
        peaks: dict[str, list[float]] = {name: [] for name in routes}
        for run in range(args.runs):
            for name, (argv, path) in routes.items():
                before = load()
                wall, peak, cpu, _ = child(argv, path)
                walls[name].append(wall)
                peaks[name].append(peak)
                cpus[name].append(cpu)
                print(f"  run {run + 1} {name:6s} {wall:7.2f} s wall {cpu:7.2f} s CPU {peak:.2f} GiB  "
                      f"({before} -> {load()})", flush=True)
        print(f"\nstore {store}; estimators {args.estimators}; JSON of before and after agree "
              "(1e-12)")
        for name, values in walls.items():
            print(f"  {name:6s} median {sorted(values)[len(values) // 2]:7.2f} s  "
                  f"(runs {', '.join(f'{v:.2f}' for v in values)}), CPU median "
                  f"{sorted(cpus[name])[len(values) // 2]:.2f} s, peak RSS {max(peaks[name]):.2f} GiB")


if __name__ == "__main__":
    main()
