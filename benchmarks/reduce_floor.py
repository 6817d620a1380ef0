"""The report of a big cube against its floor (issue 40 item 2): whole fresh processes, side by side.

    python benchmarks/reduce_floor.py                      # the 10^6-fit cube (1000 alphas x 1001 splits)
    python benchmarks/reduce_floor.py --alphas 200 --repeats 50   # a smaller one (2 x 10^5 fits)
    python benchmarks/reduce_floor.py --pairs --repeats 66         # with the pair splits (~10^6 fits)
    python benchmarks/reduce_floor.py --cluster local --workers 1,2  # + the report on LocalClusters
    python benchmarks/reduce_floor.py --tree /work/wt-pass40 --label pass40   # another checkout
    python benchmarks/reduce_floor.py --before /work/main      # + each report as CHECKOUT runs it
    python benchmarks/reduce_floor.py --store S.zarr           # an existing complete cube
    python benchmarks/reduce_floor.py --slurm cluster/slurm.yaml   # + the report on SLURM jobs
    python benchmarks/reduce_floor.py --s3                     # + the cube copied to a moto S3 server

The cube: ridge on diabetes (n = 442), ``alphas`` alphas (logspace -4..4) x (5 folds x
``repeats`` repeats + the full fit; with ``--pairs`` also the 10 pair splits of each repeat)
splits, float32, built once with ``cvflow run`` under
``--dir`` and reused while it exists. Then, after one untimed read of the whole store (so every
side finds it in the page cache), ``--runs`` rounds of, in turn:

- the floor (``floor_kfold.py``: zarr + numpy, each shard read once, one thread);
- ``cvflow report STORE --estimators kfold --json``;
- with ``--sides ...,text``: ``cvflow report STORE --estimators kfold`` (the text a user reads:
  its selected param's estimate, 6 significant digits, checked against the floor's);
- ``cvflow report STORE --estimators kfold,corrected_kfold,stability --json`` (the seed
  estimators this design has splits for; with ``--pairs``
  ``kfold,corrected_kfold,stability_nested,nested_cv``);
- with ``--cluster``: ``cvflow report STORE --estimators kfold --json --cluster ...``;
- with ``--slurm PROFILE``: ``cvflow report ... --cluster PROFILE --workers N`` (``--slurm-workers``);
- with ``--s3``: the store copied to a moto S3 server on 127.0.0.1 (started here, stopped at
  the end), then the floor, ``report kfold`` and ``report kfold --cluster local --workers N``
  (``--s3-workers``) of its ``s3://`` URL (every process, and the workers, reach it through
  ``AWS_ENDPOINT_URL``);
- with ``--before CHECKOUT``: each in-process report again with CHECKOUT first on PYTHONPATH
  (e.g. the code before a change); its JSON must equal this tree's to 1e-12 or the script fails.

Each is a fresh ``python`` process whose wall time is measured around it. Its CPU seconds (user
+ system, every thread) and peak resident memory are recorded twice: from ``os.wait4``, which
counts the child *and every descendant it reaped* (a LocalCluster's workers: its whole process
tree), and the child's own (``own_cpu.py`` runs each side and reads ``getrusage(RUSAGE_SELF)``
at exit: on a cluster, the client alone). The selected
alpha and the estimates of the floor and of each report are compared. The load average is
recorded before each run. Results go to ``benchmarks/results/reduce_floor.{json,md}`` under
``--label`` (other labels kept).
"""
from __future__ import annotations

import common  # noqa: F401 - one BLAS thread, before numpy

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SEED = ["kfold", "corrected_kfold", "stability"]
SEED_PAIRS = ["kfold", "corrected_kfold", "stability_nested", "nested_cv"]

WORKFLOW = """\
name: ridge_{alphas}x{splits}{suffix}
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {{logspace: [-4, 4, {alphas}]}}}}
design: {{folds: 5, repeats: {repeats}, seed: 0}}
estimators: [{estimators}]
execution: {{dtype: float32}}
"""


def run_child(argv: list[str], env: dict, timeout: float, stdout: str | None = None) -> dict:
    """Run ``argv`` as a fresh process: wall seconds, peak RSS (bytes), CPU seconds, its stdout,
    exit code; a ``python`` argv through ``own_cpu.py``, which adds the child's own CPU seconds
    and peak RSS (``own_cpu``, ``own_rss``: without the descendants it reaped). With ``stdout``
    (a file name) its output goes there, not into the result.

    A child's peak RSS is at least this process's at the child's start (Linux carries the peak
    of the memory the child starts from, this process's, across ``exec``), so this process
    never reads a report's JSON itself (:func:`summary`, :func:`compare`: in a child each)."""
    own = None
    if argv[0] == sys.executable:
        fd, own = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        argv, env = [argv[0], str(HERE / "own_cpu.py"), *argv[1:]], {**env, "OWN_CPU_FILE": own}
    with (open(stdout, "wb") if stdout else tempfile.TemporaryFile()) as out, \
            tempfile.TemporaryFile() as err:
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        deadline = t0 + timeout
        while True:                    # os.wait4 gives the child's own rusage; poll to a deadline
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        result = {"wall": wall, "peak_rss": usage.ru_maxrss * 1024, "code": child.returncode,
                  "cpu": usage.ru_utime + usage.ru_stime, "load": load}
        if not stdout:
            out.seek(0)
            result["stdout"] = out.read().decode()
        if child.returncode:
            result["stderr"] = err.read().decode()[-2000:]
        if own is not None:
            with open(own) as f:
                text = f.read()
            os.unlink(own)
            if text:
                mine = json.loads(text)
                result["own_cpu"], result["own_rss"] = mine["cpu"], mine["peak_rss"]
        return result


def n_splits(repeats: int, pairs: bool) -> int:
    """The design's splits: the full fit, 5 fold splits a repeat, and 10 pair splits a repeat."""
    return 1 + repeats * (15 if pairs else 5)


def build(store: Path, alphas: int, repeats: int, seed: list[str], env: dict) -> dict | None:
    """The cube, fitted with ``cvflow run`` unless ``store`` holds it already (every fit done)."""
    import zarr

    if store.exists():
        done = np.asarray(zarr.open_group(str(store), mode="r")["done"][:])
        if done.all() and done.shape == (alphas, n_splits(repeats, seed == SEED_PAIRS)):
            return None
        raise SystemExit(f"{store}: exists but is not the complete cube of {alphas} params; "
                         "remove it or give another --dir")
    store.parent.mkdir(parents=True, exist_ok=True)
    workflow = store.with_suffix(".yaml")
    splits = n_splits(repeats, seed == SEED_PAIRS)
    workflow.write_text(WORKFLOW.format(alphas=alphas, repeats=repeats, splits=splits,
                                        suffix="_pairs" if seed == SEED_PAIRS else "",
                                        estimators=", ".join(seed)))
    print(f"building {store} ({alphas} x {splits} fits) ...", flush=True)
    fitted = run_child([sys.executable, "-m", "cvflow", "run", str(workflow), "--store", str(store)],
                       env, timeout=3600)
    if fitted["code"]:
        raise SystemExit(f"cvflow run failed: {fitted.get('stderr', '')}")
    return {"wall": fitted["wall"], "peak_rss": fitted["peak_rss"], "load": fitted["load"]}


def kfold_of(report: dict) -> dict:
    """The selected index and estimates of a ``cvflow report --json`` kfold entry."""
    kfold = report["kfold"]
    estimate = np.asarray(kfold["estimate"]["values"], dtype=np.float64)
    selected = int(kfold["selected"])
    return {"selected": selected, "estimate": float(estimate[selected]),
            "estimate_sum": float(estimate.sum())}


def summary(path: str) -> dict:
    """:func:`kfold_of` the report JSON in the file ``path`` (a floor's line as it is), read in
    a child process (see :func:`run_child`)."""
    out = subprocess.run([sys.executable, __file__, "--summary", path], capture_output=True,
                         text=True, timeout=600, check=True)
    return json.loads(out.stdout)


def compare(a: str, b: str) -> None:
    """The report JSONs in the files ``a`` and ``b`` equal (:func:`same`), checked in a child."""
    out = subprocess.run([sys.executable, __file__, "--compare", a, b], capture_output=True,
                         text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"{a} and {b} differ: {out.stderr[-2000:]}")


def text_kfold(text: str) -> dict:
    """The selected param and its estimate as the text report prints them (6 significant
    digits): ``selected: LABEL`` and the row of LABEL in the K-fold table."""
    label = next(line.split("selected:", 1)[1].strip() for line in text.splitlines()
                 if line.strip().startswith("selected:"))
    row = next(line for line in text.splitlines() if line.strip().startswith(label + " "))
    return {"text": True, "selected_label": label,
            "estimate": float(row.strip()[len(label):].split()[0])}


def agree(floor: dict, other: dict) -> bool:
    if other.get("text"):           # printed to 6 significant digits
        return bool(np.isclose(floor["estimate"], other["estimate"], rtol=1e-5))
    return (floor["selected"] == other["selected"]
            and np.isclose(floor["estimate"], other["estimate"], rtol=1e-9)
            and np.isclose(floor["estimate_sum"], other["estimate_sum"], rtol=1e-9))


def same(a, b, where: str = "report") -> None:
    """Two reports' JSON equal: the same keys and strings, floats to 1e-12 (AssertionError)."""
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
    if sys.argv[1:2] == ["--summary"]:
        content = Path(sys.argv[2]).read_text()
        if not content.lstrip().startswith("{"):
            print(json.dumps(text_kfold(content)))
            return
        answer = json.loads(content)
        print(json.dumps(answer if "selected" in answer else kfold_of(answer)))
        return
    if sys.argv[1:2] == ["--compare"]:
        same(json.loads(Path(sys.argv[2]).read_text()), json.loads(Path(sys.argv[3]).read_text()))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alphas", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=200, help="5-fold repeats (splits: 5 x this + 1)")
    p.add_argument("--pairs", action="store_true",
                   help="a design with the pair splits (15 x repeats + 1 splits) and the nested "
                        "seed estimators")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "cvflow_reduce_floor"))
    p.add_argument("--tree", default=str(HERE.parent),
                   help="the cvflow checkout whose `cvflow report` is timed (default: this one)")
    p.add_argument("--label", default=None, help="the results' key (default: the tree's branch)")
    p.add_argument("--cluster", default=None, help="also time `cvflow report --cluster` on this")
    p.add_argument("--workers", default="2", help="the cluster's workers, comma-separated for "
                   "several sizes (e.g. 1,2,4): one process each")
    p.add_argument("--slurm", default=None, metavar="PROFILE",
                   help="also time `cvflow report --cluster PROFILE` (a SLURM profile)")
    p.add_argument("--slurm-workers", default="2", help="the SLURM route's --workers")
    p.add_argument("--s3", action="store_true",
                   help="also copy the store to a moto S3 server and time its floor and reports")
    p.add_argument("--s3-workers", default="2",
                   help="the S3 route's LocalCluster workers, comma-separated")
    p.add_argument("--sides", default="kfold,seed",
                   help="the in-process reports timed beside the floor, comma-separated: kfold "
                        "and seed (--json; the default), text (kfold as text), or none (with "
                        "--cluster: only the cluster's)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per process at most")
    p.add_argument("--before", default=None,
                   help="a cvflow checkout whose reports are timed too (e.g. before a change); "
                        "their JSON must equal this tree's (1e-12)")
    p.add_argument("--store", default=None,
                   help="an existing complete cube (the floor's design: folds, full fit) instead "
                        "of the one built under --dir")
    args = p.parse_args()

    tree = Path(args.tree).resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    label = args.label or subprocess.run(["git", "-C", str(tree), "rev-parse", "--abbrev-ref", "HEAD"],
                                         capture_output=True, text=True).stdout.strip() or "tree"
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    seed = SEED_PAIRS if args.pairs else SEED
    splits = n_splits(args.repeats, args.pairs)
    if args.store:
        import zarr

        store, fitted = Path(args.store), None
        args.alphas, splits = zarr.open_group(str(store), mode="r")["done"].shape
    else:
        store = Path(args.dir) / f"ridge_{args.alphas}x{splits}{'_pairs' if args.pairs else ''}.zarr"
        fitted = build(store, args.alphas, args.repeats, seed, env)
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())

    python = [sys.executable]
    report = [*python, "-m", "cvflow", "report", str(store), "--json", "--estimators"]
    wanted = {side.strip() for side in args.sides.split(",")}
    sides = {"floor": [*python, str(HERE / "floor_kfold.py"), str(store)]}
    if "kfold" in wanted:
        sides["report kfold"] = [*report, "kfold"]
    if "text" in wanted:          # the report as a user reads the selected param: no --json
        sides["report kfold (text)"] = [a for a in report if a != "--json"] + ["kfold"]
    if "seed" in wanted:
        sides["report " + ",".join(seed)] = [*report, ",".join(seed)]
    for workers in (args.workers.split(",") if args.cluster else []):
        sides[f"report kfold --cluster {args.cluster} --workers {workers}"] = [
            *report, "kfold", "--cluster", args.cluster, "--workers", workers.strip()]
    if args.slurm:
        sides[f"report kfold --cluster {Path(args.slurm).name} --workers {args.slurm_workers}"] = [
            *report, "kfold", "--cluster", args.slurm, "--workers", args.slurm_workers]
    envs = {name: env for name in sides}
    moto = None
    if args.s3:
        moto, aws, url = s3_copy(store)
        s3_env = {**env, **aws}
        s3_report = [*python, "-m", "cvflow", "report", url, "--json", "--estimators", "kfold"]
        s3_sides = {"floor (s3)": [*python, str(HERE / "floor_kfold.py"), url],
                    "report kfold (s3)": s3_report}
        for workers in args.s3_workers.split(","):
            s3_sides[f"report kfold --cluster local --workers {workers.strip()} (s3)"] = [
                *s3_report, "--cluster", "local", "--workers", workers.strip()]
        sides.update(s3_sides)
        envs.update({name: s3_env for name in s3_sides})
    if args.before:
        before = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
        for name in [n for n in sides if n.startswith("report") and "--cluster" not in n]:
            sides[f"{name} (before)"], envs[f"{name} (before)"] = sides[name], before

    try:
        runs = time_sides(sides, envs, env, args)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=30)
    entry_of(runs, sides, args, store, fitted, tree, commit, label, splits, size)


def s3_copy(store: Path) -> tuple[subprocess.Popen, dict, str]:
    """A moto S3 server on a free port of 127.0.0.1 (its process, to stop), the AWS environment
    that reaches it, and the URL of ``store`` copied there."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(aws)
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=aws["AWS_ENDPOINT_URL"])
    deadline = time.monotonic() + 60
    while True:
        try:
            fs.mkdir("cvflow-bench")
            break
        except Exception:  # noqa: BLE001 - the server is still starting
            if moto.poll() is not None or time.monotonic() > deadline:
                moto.kill()
                raise SystemExit("moto's S3 server did not start on 127.0.0.1") from None
            time.sleep(0.2)
    url = f"s3://cvflow-bench/{store.name}"
    t0 = time.perf_counter()
    # in a child: s3fs's put grows this process by the store's size, and a child forked from
    # it starts with that peak RSS recorded (Linux keeps the pre-exec high-water mark)
    code = ("import sys, s3fs; s3fs.S3FileSystem(endpoint_url=sys.argv[1]).put(sys.argv[2], "
            "sys.argv[3], recursive=True)")
    subprocess.run([sys.executable, "-c", code, aws["AWS_ENDPOINT_URL"], str(store), url],
                   check=True, timeout=3600)
    print(f"copied {store} to {url} in {time.perf_counter() - t0:.1f} s", flush=True)
    return moto, aws, url


def time_sides(sides: dict, envs: dict, env: dict, args) -> dict[str, list[dict]]:
    """Each side run ``args.runs`` times in turn (one untimed floor first), answers checked."""
    run_child(sides["floor"], env, args.timeout)          # untimed: the store in the page cache
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    scratch = tempfile.mkdtemp(prefix="reduce_floor_")
    for i in range(args.runs):
        for name, argv in sides.items():
            out = os.path.join(scratch, "out.json")
            r = run_child(argv, envs[name], args.timeout, stdout=out)
            if r["code"]:
                raise SystemExit(f"{name}: exit {r['code']}: {r.get('stderr', '')}")
            if name.endswith(" (before)") and i == 0 and "--json" in argv:
                ours = os.path.join(scratch, "ours.json")
                run_child(sides[name], env, args.timeout, stdout=ours)
                compare(ours, out)
            r["answer"] = summary(out)
            runs[name].append(r)
            print(f"run {i + 1} {name}: {r['wall']:.2f} s, {r['cpu']:.2f} s CPU "
                  f"({r.get('own_cpu', r['cpu']):.2f} s its own), "
                  f"{r['peak_rss'] / 2**30:.2f} GiB, "
                  f"load {r['load']:.1f}", flush=True)
    shutil.rmtree(scratch)
    return runs


def entry_of(runs, sides, args, store, fitted, tree, commit, label, splits, size) -> None:
    """The results of ``runs`` written under ``label`` (json and markdown)."""
    floor = runs["floor"][0]["answer"]
    wall = {name: statistics.median(r["wall"] for r in rs) for name, rs in runs.items()}
    rss = {name: statistics.median(r["peak_rss"] for r in rs) for name, rs in runs.items()}
    entry = {
        "commit": commit, "tree": str(tree), "machine": common.machine(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cube": {"alphas": args.alphas, "splits": splits, "fits": args.alphas * splits,
                 "pairs": args.pairs,
                 "samples": 442, "dtype": "float32", "bytes_on_disk": size, "store": str(store),
                 "fit": fitted},
        "runs": runs,
        "median_wall": wall, "peak_rss": rss,
        "median_cpu": {name: statistics.median(r["cpu"] for r in rs) for name, rs in runs.items()},
        "median_own_cpu": {name: statistics.median(r.get("own_cpu", r["cpu"]) for r in rs)
                           for name, rs in runs.items()},
        "s3_bytes": size if args.s3 else None,
        "ratio_wall": {name: wall[name] / wall["floor"] for name in sides},
        "ratio_rss": {name: rss[name] / rss["floor"] for name in sides},
        "same_answer": {name: all(agree(floor, r["answer"]) for r in rs) for name, rs in runs.items()},
        "load": [r["load"] for rs in runs.values() for r in rs],
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "reduce_floor.json"
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything[label] = entry
    path.write_text(json.dumps(everything, indent=1) + "\n")
    (RESULTS / "reduce_floor.md").write_text(markdown(everything))
    print((RESULTS / "reduce_floor.md").read_text())


def markdown(everything: dict) -> str:
    lines = ["# A report against its floor (benchmarks/reduce_floor.py)", "",
             "Whole fresh processes, one after the other, store in the page cache; medians of the "
             "runs' wall time and peak RSS (the client process's own, not its workers'); "
             "ratios to the floor (zarr + numpy, each shard read once, one thread). The load "
             "average (1 min) is read before each run; the machine has 2 cores shared with "
             "other jobs.", ""]
    for label, e in everything.items():
        cube = e["cube"]
        loads = e["load"]
        lines += [f"## {label} ({e['commit']}, {e['when']})", "",
                  f"Cube: ridge, {cube['alphas']} alphas x {cube['splits']} splits = "
                  f"{cube['fits']:,} fits{' (with the pair splits)' if cube.get('pairs') else ''}, "
                  f"{cube['samples']} samples, {cube['dtype']}, "
                  f"{cube['bytes_on_disk'] / 2**30:.2f} GiB on disk"
                  + (f"; fitted in {cube['fit']['wall']:.0f} s (load {cube['fit']['load']:.1f})"
                     if cube.get("fit") else "") + ".",
                  f"Load average during the runs: {min(loads):.1f}-{max(loads):.1f}; "
                  f"{len(next(iter(e['runs'].values())))} runs. {e['machine']}", "",
                  "| process | wall (s) | peak RSS (GiB) | wall / floor | RSS / floor "
                  "| same selection and estimates as the floor |"
                  + (" CPU, process tree (s) | CPU, its own (s) |" if "median_own_cpu" in e else ""),
                  "|---|---|---|---|---|---|" + ("---|---|" if "median_own_cpu" in e else "")]
        for name in e["median_wall"]:
            lines.append(f"| {name} | {e['median_wall'][name]:.2f} | "
                         f"{e['peak_rss'][name] / 2**30:.2f} | {e['ratio_wall'][name]:.2f} | "
                         f"{e['ratio_rss'][name]:.2f} | {'yes' if e['same_answer'][name] else 'NO'} |"
                         + (f" {e['median_cpu'][name]:.2f} | {e['median_own_cpu'][name]:.2f} |"
                            if "median_own_cpu" in e else ""))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
