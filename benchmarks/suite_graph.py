"""A 10-data-set suite as one `cvflow run` against its ten workflows run one after another.

Issue 42 item 2's bar: the suite's wall time at most 0.7x the sum of the ten single-data-set
`cvflow run`s. Every run is a fresh process (`python -m cvflow run`), on one route at a time
(`--cluster local`: warm worker processes, `--cluster threads`: Dask's scheduler in the process);
the suite and the singles alternate, so a change of load hits both alike. Prints the medians,
their ratio and the load average before and after.

    python benchmarks/suite_graph.py [--runs 3] [--routes local,threads]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

# ten data sets of different sizes: the big ones at the start and the middle, so a suite run
# one data set after another has a big data set's tail to wait on
SIZES = [(2000, 20), (200, 5), (400, 8), (150, 4), (1500, 15), (300, 6), (800, 10),
         (250, 5), (1000, 12), (350, 7)]
COMMON = {
    "learners": [
        {"name": "ridge", "class": "sklearn.linear_model.Ridge",
         "grid": {"alpha": {"logspace": [-3, 3, 20]}}},
        {"name": "lasso", "class": "sklearn.linear_model.Lasso",
         "grid": {"alpha": {"logspace": [-3, 0, 10]}}},
    ],
    "design": {"folds": 5, "repeats": 2, "seed": 0},
    "estimators": ["kfold"],
}


def _entry(i: int, n: int, p: int) -> dict:
    return {"source": "synthetic", "name": "linear", "params": {"n": n, "p": p}, "seed": i,
            "label": f"d{i}"}


def write(where: Path) -> tuple[Path, list[Path]]:
    """The suite's workflow file and its ten single-data-set files."""
    suite = {"name": "suite10", "data": [_entry(i, n, p) for i, (n, p) in enumerate(SIZES)],
             **COMMON}
    (where / "suite10.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    singles = []
    for i, (n, p) in enumerate(SIZES):
        data = _entry(i, n, p)
        del data["label"]
        path = where / f"single{i}.yaml"
        path.write_text(yaml.safe_dump({"name": f"single{i}", "data": data, **COMMON},
                                       sort_keys=False))
        singles.append(path)
    return where / "suite10.yaml", singles


def cvflow_run(workflow: Path, store: Path, route: str) -> float:
    """Seconds of one fresh `python -m cvflow run` (its store replaced)."""
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cvflow", "run", str(workflow), "--store",
                           str(store), "--cluster", route], capture_output=True, text=True,
                          timeout=1800)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{workflow} --cluster {route} failed ({done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--routes", default="local,threads")
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="cvflow-suite-bench-"))
    try:
        suite, singles = write(where)
        print(f"10 data sets (linear, n x p: {', '.join(f'{n}x{p}' for n, p in SIZES)}), "
              f"ridge x 20 + lasso x 10, 5 folds x 2 repeats: {30 * 10 * 10} fits")
        for route in args.routes.split(","):
            load0 = os.getloadavg()[0]
            suite_s, singles_s = [], []
            for _ in range(args.runs):
                suite_s.append(cvflow_run(suite, where / "suite.zarr", route))
                singles_s.append(sum(cvflow_run(w, where / f"{w.stem}.zarr", route)
                                     for w in singles))
            s, t = statistics.median(suite_s), statistics.median(singles_s)
            print(f"--cluster {route}: suite {s:.1f} s (runs {', '.join(f'{x:.1f}' for x in suite_s)})"
                  f"; ten runs {t:.1f} s ({', '.join(f'{x:.1f}' for x in singles_s)}); "
                  f"ratio {s / t:.2f} (bar 0.7); load {load0:.1f} -> {os.getloadavg()[0]:.1f} "
                  f"on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
