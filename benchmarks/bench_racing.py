"""Racing against the full study: fits run, wall time, and the same choice, on three grids.

    PYTHONPATH=. python benchmarks/bench_racing.py [--quick] [--grid NAME] [--runs N]

Each grid is run in full and raced (``racing: {alpha: 0.05}``), on the threaded scheduler with
2 workers, each into a new store: one warm-up run of each, then ``--runs`` (default 1) of each
in turn (full, raced, full, raced, ...: a change of load hits both sides alike); the median
wall times are printed with the load average of the machine (the machine is shared).
Grids (scikit-learn's diabetes data, 442 samples, 5 folds x 3 repeats):

- ridge + lasso, 2 x 20 alphas, generic fits (``path_aware: false``): one fit per (alpha, split);
- SVR (RBF kernel, scaled features) C x gamma, 6 x 6;
- gradient boosting max_depth x learning_rate, 4 x 6 (100 trees).
"""
from __future__ import annotations

import common  # noqa: F401  (one BLAS thread, first)

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

GRIDS = {
    "ridge_lasso_generic": """\
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: {logspace: [-3, 4, 20]}}
  - name: lasso
    class: sklearn.linear_model.Lasso
    params: {max_iter: 5000}
    grid: {alpha: {logspace: [-3, 2, 20]}}
execution: {cluster: threads, workers: 2, path_aware: false}
""",
    "svr_C_gamma": """\
learners:
  - name: svr
    class: sklearn.svm.SVR
    preprocess: [sklearn.preprocessing.StandardScaler]
    grid: {C: {logspace: [-1, 4, 6]}, gamma: {logspace: [-4, 1, 6]}}
execution: {cluster: threads, workers: 2}
""",
    "gbm_depth_lr": """\
learners:
  - name: gbm
    class: sklearn.ensemble.GradientBoostingRegressor
    params: {n_estimators: 100, random_state: 0}
    grid: {max_depth: [1, 2, 4, 8], learning_rate: [0.003, 0.01, 0.03, 0.1, 0.3, 1.0]}
execution: {cluster: threads, workers: 2}
""",
}

HEAD = """\
name: {name}
data: {{source: sklearn, name: diabetes}}
task: regression
loss: squared
design: {{folds: 5, repeats: {repeats}, seed: 0}}
estimators: [kfold]
"""


def run(name: str, body: str, racing: bool, repeats: int, where: Path) -> dict:
    import cvflow

    text = HEAD.format(name=name, repeats=repeats) + body
    if racing:
        text += "racing: {alpha: 0.05}\n"
    where = Path(tempfile.mkdtemp(dir=where))        # a new store each run
    wf = where / f"{name}-{racing}.yaml"
    wf.write_text(text)
    store = where / f"{name}-{racing}.zarr"
    t0 = time.perf_counter()
    result = cvflow.run(cvflow.load_workflow(wf), store=str(store))
    wall = time.perf_counter() - t0
    cube = cvflow.open(str(store))
    chosen = int(cvflow.estimators.kfold(cube)["selected"])
    return {"fits": result.fits_executed, "total": result.total_fits, "wall": wall,
            "chosen": chosen, "saved": result.saved_fits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="1 repeat, the first grid only")
    parser.add_argument("--grid", choices=list(GRIDS), action="append",
                        help="only this grid (repeatable)")
    parser.add_argument("--runs", type=int, default=1, help="timed runs of each side (median)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    grids = {g: GRIDS[g] for g in args.grid} if args.grid else GRIDS
    if args.quick and not args.grid:
        grids = dict(list(GRIDS.items())[:1])
    print(common.machine())
    where = Path(tempfile.mkdtemp(prefix="bench-racing-"))
    try:
        print(f"{'grid':22} {'fits full':>9} {'fits raced':>10} {'saved':>6} {'wall full':>9} "
              f"{'wall raced':>10} {'same choice':>11} {'load':>5}  runs")
        for name, body in grids.items():
            times, (full, raced) = common.interleaved(
                [lambda: run(name, body, False, repeats, where),
                 lambda: run(name, body, True, repeats, where)], runs=args.runs)
            load = os.getloadavg()[0]
            wall_full, wall_raced = (statistics.median(t) for t in times)
            print(f"{name:22} {full['fits']:9d} {raced['fits']:10d} "
                  f"{1 - raced['fits'] / full['fits']:6.0%} {wall_full:8.2f}s "
                  f"{wall_raced:9.2f}s {str(full['chosen'] == raced['chosen']):>11} "
                  f"{load:5.1f}  {args.runs} (full {' '.join(f'{t:.2f}' for t in times[0])}; "
                  f"raced {' '.join(f'{t:.2f}' for t in times[1])})", flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
