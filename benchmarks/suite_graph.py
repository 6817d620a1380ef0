"""A 10-data-set suite as one `cvflow run` against its ten workflows run one after another.

Issue 42 item 2's bar: the suite's wall time at most 0.7x the sum of the ten single-data-set
`cvflow run`s. Every run is a fresh process (`python -m cvflow run`), on one route at a time
(`--cluster local`: warm worker processes, `--cluster threads`: Dask's scheduler in the process);
the suite and the singles alternate, so a change of load hits both alike. Prints the medians,
their ratio and the load average before and after.

`--case skewed`: one data set ~40x the others' work (where a suite run one data set after
another leaves workers idle in the big one's tail). `--trees before=/work/main,after=.` runs the
suite with each source tree (PYTHONPATH) in turn, side by side, the singles with the last; each
suite run's run phase is printed too (from its first data set's start line to its last line:
without the start-up, the validation and the closing report), its worker use (its fits'
seconds, from the per-data-set summaries, over the run phase x the route's workers, this
machine's cores) and the run phase beyond that floor ("idle": the workers' idle time, the
tails included). `--case tail`: fits that sleep
(benchmarks/sleepy.py, no CPU) in known blocks, one data set 3 blocks of ~10 s, nine of ~0.3 s:
the tail's idle worker shows whatever the machine's load.

`--slurm PROFILE` adds the SLURM route (`--cluster PROFILE --dashboard-port 0`, e.g.
cluster/slurm.yaml on the dev SLURM of cluster/slurm-dev/start.sh) and counts the batch jobs
each run submits (the `_slurm_rpc_submit_batch_job` lines slurmctld logs, where this user can
read that log: a suite submits its workers' jobs once, ten runs ten times). After the last run
of every route each data set's cube in the suite's store is compared with its single run's
(bit for bit: predictions and done masks).

    python benchmarks/suite_graph.py [--runs 3] [--routes local,threads] [--case ten|skewed]
                                     [--trees before=/work/main,after=.] [--no-singles]
                                     [--slurm cluster/slurm.yaml]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
import zarr

# ten data sets of different sizes: the big ones at the start and the middle, so a suite run
# one data set after another has a big data set's tail to wait on
SIZES = [(2000, 20), (200, 5), (400, 8), (150, 4), (1500, 15), (300, 6), (800, 10),
         (250, 5), (1000, 12), (350, 7)]
# one data set much bigger than the other nine (the big one in the middle of the file)
SKEWED = [(300, 6), (200, 5), (400, 8), (150, 4), (20000, 60), (300, 6), (250, 5),
          (250, 5), (350, 7), (350, 7)]
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


# --case tail: fits that sleep 1e-4 s a training row (benchmarks/sleepy.py) in blocks of 6: the
# big data set is 3 blocks of ~10 s, so run alone its last block leaves one of 2 workers idle
# ~10 s; the nine small ones hold ~0.3 s of fits each
TAIL_SIZES = [(300, 4), (250, 4), (300, 4), (250, 4), (25000, 4), (300, 4), (250, 4),
              (300, 4), (250, 4), (300, 4)]
TAIL = {
    "learners": [{"name": "sleepy", "class": "sleepy.SleepyRidge",
                  "grid": {"alpha": [0.1, 1.0, 10.0]}}],
    "design": {"folds": 5, "repeats": 1, "seed": 0},
    "estimators": ["kfold"],
    "execution": {"fits_per_task": 6, "trial_fits": False},
}


def _entry(i: int, n: int, p: int) -> dict:
    return {"source": "synthetic", "name": "linear", "params": {"n": n, "p": p}, "seed": i,
            "label": f"d{i}"}


def write(where: Path, sizes=SIZES, common=COMMON) -> tuple[Path, list[Path]]:
    """The suite's workflow file and its ten single-data-set files."""
    suite = {"name": "suite10", "data": [_entry(i, n, p) for i, (n, p) in enumerate(sizes)],
             **common}
    (where / "suite10.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    singles = []
    for i, (n, p) in enumerate(sizes):
        data = _entry(i, n, p)
        del data["label"]
        path = where / f"single{i}.yaml"
        path.write_text(yaml.safe_dump({"name": f"single{i}", "data": data, **common},
                                       sort_keys=False))
        singles.append(path)
    return where / "suite10.yaml", singles


def _slurmctld_log() -> Path | None:
    """The dev SLURM's controller log, when this user can read it (job submissions counted)."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^SlurmctldLogFile\s*=\s*(\S+)", out, re.M)
    path = Path(found.group(1)) if found else None
    return path if path is not None and os.access(path, os.R_OK) else None


def submitted(log: Path | None) -> int:
    """Batch jobs submitted so far (lines of the controller's log); -1 without the log."""
    if log is None:
        return -1
    return log.read_text(errors="replace").count("_slurm_rpc_submit_batch_job")


def same_cubes(suite_store: Path, singles: list[Path], stores: list[Path]) -> str:
    """Each data set's cube in the suite's store against its single run's: bit for bit."""
    bad = []
    for i, (single, store) in enumerate(zip(singles, stores)):
        a = zarr.open_group(str(suite_store / f"d{i}"), mode="r")
        b = zarr.open_group(str(store), mode="r")
        pa, pb = np.asarray(a["pred"][...]), np.asarray(b["pred"][...])
        da, db = np.asarray(a["done"][...]), np.asarray(b["done"][...])
        if not (da.all() and (da == db).all() and pa.tobytes() == pb.tobytes()):
            bad.append(single.stem)
    return (f"all {len(singles)} cubes equal their single runs' bit for bit" if not bad
            else f"cubes DIFFER from the single runs': {', '.join(bad)}")


def cvflow_run(workflow: Path, store: Path, route: str, tree: str | None = None,
               extra: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """Seconds of one fresh `python -m cvflow run` (its store replaced), of its run phase (from
    the first data set's start line to the suite's last line on stderr; the whole run for one
    data set) and its fits' seconds (summed over its summaries' "s of fitting"); ``tree``: the
    source tree to run."""
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)         # sleepy.SleepyRidge (--case tail)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, here, env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cvflow", "run", str(workflow), "--store",
                             str(store), "--cluster", route, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            cwd=store.parent)   # not this tree: `-m` puts the cwd on sys.path
    first = last = None
    err = []
    for line in proc.stderr:             # ends when the run ends (the CLI's every-2-s lines)
        err.append(line)
        if line.startswith("data set ") and first is None:
            first = time.perf_counter()
        if line.startswith("suite: ") and "every data set run" in line:
            last = time.perf_counter()
    out = proc.stdout.read()
    proc.wait(timeout=1800)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{workflow} --cluster {route} failed ({proc.returncode}):\n"
                         f"{''.join(err)[-2000:]}")
    fitting = sum(float(x) for x in re.findall(r"([0-9.]+)s of fitting", out))
    phase = last - first if first is not None and last is not None else seconds
    return seconds, phase, fitting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--routes", default="local,threads")
    parser.add_argument("--case", choices=("ten", "skewed", "tail"), default="ten")
    parser.add_argument("--trees", default="",
                        help="label=path,...: run the suite with each source tree in turn")
    parser.add_argument("--no-singles", action="store_true",
                        help="the suites only (side by side), not the ten separate runs")
    parser.add_argument("--slurm", default=None, metavar="PROFILE",
                        help="also the SLURM route: `cvflow run --cluster PROFILE`")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees.split(",")) if args.trees else {"": ""}
    trees = {label: str(Path(path).resolve()) if path else "" for label, path in trees.items()}
    sizes = {"ten": SIZES, "skewed": SKEWED, "tail": TAIL_SIZES}[args.case]
    common = TAIL if args.case == "tail" else COMMON
    where = Path(tempfile.mkdtemp(prefix="cvflow-suite-bench-"))
    cores = os.cpu_count() or 1
    try:
        suite, singles = write(where, sizes, common)
        print(f"10 data sets (linear, n x p: {', '.join(f'{n}x{p}' for n, p in sizes)}), "
              + ("a ridge sleeping 1e-4 s a training row x 3 alphas, 5 folds, blocks of 6 fits: "
                 "180 fits" if args.case == "tail" else
                 f"ridge x 20 + lasso x 10, 5 folds x 2 repeats: {30 * 11 * 10} fits"))
        routes = [r for r in args.routes.split(",") if r]
        if args.slurm:
            routes.append(str(Path(args.slurm).resolve()))
        log = _slurmctld_log() if args.slurm else None
        for route in routes:
            slurm = route == routes[-1] and args.slurm is not None
            extra = ("--dashboard-port", "0") if slurm else ()
            load0 = os.getloadavg()[0]
            suite_s: dict[str, list] = {label: [] for label in trees}
            singles_s = []
            jobs_suite, jobs_singles = [], []
            for _ in range(args.runs):
                for label, tree in trees.items():
                    j0 = submitted(log)
                    suite_s[label].append(cvflow_run(suite, where / f"suite-{label}.zarr", route,
                                                     tree, extra))
                    jobs_suite.append(submitted(log) - j0)
                last = list(trees.values())[-1]
                if not args.no_singles:
                    j0 = submitted(log)
                    singles_s.append(sum(cvflow_run(w, where / f"{w.stem}.zarr", route, last,
                                                    extra)[0] for w in singles))
                    jobs_singles.append(submitted(log) - j0)
            t = statistics.median(singles_s) if singles_s else float("nan")
            load1 = os.getloadavg()[0]
            name = Path(route).name if slurm else route
            print(f"--cluster {name}: ten runs {t:.1f} s ({', '.join(f'{x:.1f}' for x in singles_s)})"
                  f"; load {load0:.1f} -> {load1:.1f} on {cores} cores")
            if slurm and log is not None:
                print(f"  SLURM batch jobs submitted: suite {jobs_suite}, ten runs {jobs_singles}")
            if not args.no_singles:
                print("  " + same_cubes(where / f"suite-{list(trees)[-1]}.zarr", singles,
                                        [where / f"{w.stem}.zarr" for w in singles]))
            for label, runs in suite_s.items():
                walls = [w for w, _, _ in runs]
                s = statistics.median(walls)
                phase = [ph for _, ph, _ in runs]
                use = [f / (ph * cores) for _, ph, f in runs]
                idle = [ph - f / cores for _, ph, f in runs]
                print(f"  suite{f' ({label})' if label else ''}: {s:.1f} s (runs "
                      f"{', '.join(f'{x:.1f}' for x in walls)}); ratio {s / t:.2f} (bar 0.7); "
                      f"run phase {statistics.median(phase):.1f} s "
                      f"({', '.join(f'{x:.1f}' for x in phase)}), worker use "
                      f"{statistics.median(use):.0%} ({', '.join(f'{u:.0%}' for u in use)}), "
                      f"idle {statistics.median(idle):.1f} s")
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
