"""A small search's fixed cost (issue 41): ``cvflow.SearchCV`` without a store against
``GridSearchCV(n_jobs=None)``, each call a fresh ``python`` process, as a user's script runs.

Per case the two tools alternate (``SearchCV, GridSearchCV`` then ``GridSearchCV, SearchCV``,
...) for ``--repeats`` rounds after one untimed warm-up round (the page cache of the imports);
the medians of the whole process and of the time around ``fit`` (``cross_validate`` for the
nested case; the second ``fit`` in the process for ``a2``) are printed with their ratios
SearchCV / GridSearchCV, the load average before and after each case, and which of zarr,
numcodecs, xarray, distributed, bokeh, jinja2 the SearchCV process imported. The cases are
``searchcv_cases.py``'s; the default ones are issue 41's table: a (the tree), b4 (scaler +
logistic, 4 Cs), c3 (the Auto DataFrame, ColumnTransformer + HGB(max_iter=50), 2 learning
rates, cv=3), d (a with sample weights), e4 (b4 nested in ``cross_validate(..., cv=3)``), g
(SVC(gamma=0.001), 8 Cs on digits); ``a2`` is case a fitted twice in one process.

Run::

    python benchmarks/small_search.py [--repeats 5] [--cases a,b4,c3,d,e4,g,a2]
    python benchmarks/small_search.py --importtime a     # where SearchCV's imports go
    python benchmarks/small_search.py --profile a        # cProfile of SearchCV's fit
    python benchmarks/small_search.py --instructions a [--baseline ...]  # valgrind: no load noise
    python benchmarks/small_search.py --baseline /tmp/main-checkout   # before -> after

Nothing here asserts a time: it measures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOOLS = ("SearchCV", "GridSearchCV")
HEAVY = ("zarr", "numcodecs", "xarray", "distributed", "bokeh", "jinja2")
DEADLINE = 300


def child(tool: str, case: str) -> None:
    """One user's script: build the case, fit, print the seconds around the fit as JSON."""
    sys.path.insert(0, str(HERE))
    from searchcv_cases import CASES

    name = case.rstrip("2")
    est, grid, X, y, fit_params, options = CASES[name]()
    if tool == "SearchCV":
        import cvflow

        search = cvflow.SearchCV(est, grid, cv=options.get("cv", 5), scoring=options.get("scoring"))
    else:
        from sklearn.model_selection import GridSearchCV

        search = GridSearchCV(est, grid, cv=options.get("cv", 5), scoring=options.get("scoring"))
    calls = 2 if case.endswith("2") else 1
    for _ in range(calls):
        start = time.perf_counter()
        if options.get("nested"):
            from sklearn.model_selection import cross_validate

            cross_validate(search, X, y, cv=options["nested"])
        else:
            search.fit(X, y, **fit_params)
        seconds = time.perf_counter() - start
    print(json.dumps({"fit": seconds, "modules": len(sys.modules),
                      "heavy": sorted(m for m in HEAVY if m in sys.modules)}))


def whole(tool: str, case: str, flags: tuple[str, ...] = (), repo: Path = REPO) -> dict:
    # DESIGN CHOICE: bytecode is cached as in a user's environment (PYTHONDONTWRITEBYTECODE, set
    # on this machine, made every process compile cvflow's ~100 modules again: 0.3-0.8 s)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *flags, __file__, "--child", tool, case], env=env,
                          capture_output=True, text=True, timeout=DEADLINE, cwd=REPO)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{tool} {case} failed: {proc.stderr.strip().splitlines()[-1:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "process": seconds, "stderr": proc.stderr}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compare(cases: list[str], repeats: int, baseline: Path | None = None) -> None:
    """The table; with ``baseline`` (another checkout of cvflow) its SearchCV is a third tool,
    interleaved with the others, and its ratios come first (before -> after)."""
    tools = TOOLS + (("baseline",) if baseline else ())
    print("| case | GridSearchCV fit | SearchCV fit | fit ratio | GridSearchCV process | "
          "SearchCV process | process ratio | SearchCV imported | load before / after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        before = load()
        times: dict[str, dict[str, list[float]]] = {t: {"fit": [], "process": []} for t in tools}
        heavy: dict[str, list[str]] = {}
        for rnd in range(repeats + 1):
            for tool in tools[rnd % len(tools):] + tools[:rnd % len(tools)]:
                res = whole("SearchCV" if tool == "baseline" else tool, case,
                            repo=baseline if tool == "baseline" else REPO)
                if rnd:                               # round 0: warm-up
                    times[tool]["fit"].append(res["fit"])
                    times[tool]["process"].append(res["process"])
                heavy[tool] = res["heavy"]
        med = {t: {k: statistics.median(v) for k, v in d.items()} for t, d in times.items()}
        g = med["GridSearchCV"]

        def cell(tool: str, key: str, digits: int) -> str:
            return f"{med[tool][key]:.{digits}f} s"

        def ratio(tool: str, key: str) -> str:
            return f"{med[tool][key] / g[key]:.2f}x"

        def both(tool_key, fmt):
            return (f"{fmt('baseline', *tool_key)} -> " if baseline else "") + fmt("SearchCV", *tool_key)

        imported = (f"{', '.join(heavy['baseline']) or 'none'} -> " if baseline else "") + \
            (", ".join(heavy["SearchCV"]) or "none of " + "/".join(HEAVY))
        print(f"| {case} | {g['fit']:.3f} s | {both(('fit', 3), cell)} | {both(('fit',), ratio)} | "
              f"{g['process']:.2f} s | {both(('process', 2), cell)} | "
              f"{both(('process',), ratio)} | {imported} | {before} / {load()} |", flush=True)


def importtime(case: str) -> None:
    """The SearchCV process's import time summed by top-level package (self times), largest
    first, and the heavy packages it imported."""
    res = whole("SearchCV", case, ("-X", "importtime"))
    total: dict[str, int] = {}
    for line in res["stderr"].splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|")
        top = name.strip().split(".")[0]
        total[top] = total.get(top, 0) + int(self_us)
    print(f"load {load()}; fit {res['fit']:.3f} s; {res['modules']} modules; heavy: "
          f"{', '.join(res['heavy']) or 'none'}")
    for top, us in sorted(total.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {us / 1e3:8.1f} ms  {top}")


def instructions(case: str, baseline: Path | None = None) -> None:
    """The instructions each tool's process executes (valgrind's callgrind, one run each, side
    by side): the whole process and its interpreter teardown (``Py_FinalizeEx``). Counts do not
    depend on the machine's load (unlike its seconds), so they say where SearchCV's extra work
    goes while other runs load the machine; ~50x slower than a run."""
    import shutil
    import tempfile

    if not (shutil.which("valgrind") and shutil.which("callgrind_annotate")):
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    tools = [("GridSearchCV", REPO), ("SearchCV", REPO)] + ([("SearchCV", baseline)] if baseline else [])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OPENBLAS_NUM_THREADS"] = "1"     # BLAS threads spinning would count as work
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i, (tool, repo) in enumerate(tools):
            subprocess.run([sys.executable, __file__, "--child", tool, case], env={
                **env, "PYTHONPATH": str(repo)}, capture_output=True, cwd=REPO)   # bytecode cached
            out = Path(tmp, f"{i}.out")
            procs.append(subprocess.Popen(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                 __file__, "--child", tool, case], env={**env, "PYTHONPATH": str(repo)},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO))
        for proc in procs:
            proc.wait()
        rows = []
        for i, (tool, repo) in enumerate(tools):
            text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(Path(tmp, f"{i}.out"))],
                                  capture_output=True, text=True).stdout
            total = teardown = 0
            for line in text.splitlines():
                count = line.split()[0].replace(",", "") if line.strip() else ""
                if "PROGRAM TOTALS" in line:
                    total = int(count)
                elif line.rstrip().endswith("]") and ":Py_FinalizeEx [" in line:
                    teardown = int(count)
            rows.append((f"{tool} ({'baseline' if i == 2 else 'this checkout'})", total, teardown))
    print(f"case {case}: instructions (millions), OPENBLAS_NUM_THREADS=1")
    print("| tool | whole process | teardown | process - GridSearchCV's |")
    print("|---|---|---|---|")
    for name, total, teardown in rows:
        print(f"| {name} | {total / 1e6:.0f} | {teardown / 1e6:.0f} | {(total - rows[0][1]) / 1e6:+.0f} |")


def profile(case: str) -> None:
    import cProfile
    import pstats

    sys.path.insert(0, str(HERE))
    from searchcv_cases import CASES

    import cvflow

    est, grid, X, y, fit_params, options = CASES[case]()
    search = cvflow.SearchCV(est, grid, cv=options.get("cv", 5), scoring=options.get("scoring"))
    prof = cProfile.Profile()
    prof.runcall(search.fit, X, y, **fit_params)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default="a,b4,c3,e4,g,d,a2")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "CASE"), help=argparse.SUPPRESS)
    parser.add_argument("--importtime", metavar="CASE")
    parser.add_argument("--profile", metavar="CASE")
    parser.add_argument("--instructions", metavar="CASE",
                        help="instructions of each tool's process (valgrind), load-independent")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="another cvflow checkout whose SearchCV runs beside (before -> after)")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
    elif args.importtime:
        importtime(args.importtime)
    elif args.profile:
        profile(args.profile)
    elif args.instructions:
        instructions(args.instructions, args.baseline)
    else:
        compare(args.cases.split(","), args.repeats, args.baseline)


if __name__ == "__main__":
    main()
