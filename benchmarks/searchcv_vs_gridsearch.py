"""``cvflow.SearchCV`` with its defaults against ``GridSearchCV`` as whole processes (issue 31
item 1): what a user's script costs, start-up and imports included.

Every call is a fresh ``python`` process (``searchcv_tool.py CASE``, ``gridsearch_tool.py CASE
N_JOBS``, or ``python -m cvflow run WORKFLOW --store NEW``), timed from start to exit. Per case
the three tools run ``--repeats`` rounds, interleaved, the order rotated each round
(``cvflow, None, 2`` / ``None, 2, cvflow`` / ``2, cvflow, None``, ...), after ``--warmup``
untimed rounds (the page cache of the imports); medians are reported with the ratios
cvflow / ``GridSearchCV(n_jobs=None)`` and cvflow / ``GridSearchCV(n_jobs=2)``. The load
average is recorded before and after every case. A process that exits with an error is a
failure: its last stderr line is recorded instead of a time and the tool is not run again for
that case. A process still running after ``DEADLINE`` seconds is killed and counted as hung.

The cases are in ``searchcv_cases.py`` (a, b, c, d, e, g); ``f`` is two whole-workflow cases:
``f-quickstart`` (``cvflow run workflows/quickstart.yaml`` vs the plain GridSearchCV script of
``plain_quickstart.py``, with n_jobs None and 2) and ``f-cart`` (``cvflow run
benchmarks/cart_breast_cancer.yaml`` vs case a's GridSearchCV). SearchCV gets only the
estimator, the grid, ``cv`` and the case's ``scoring`` (its defaults: no store, i.e. a
temporary one; ``cluster`` None, i.e. ``auto``; ``progress`` False). Every process runs in a
user's environment: the one-thread BLAS/OpenMP pins of ``common.py`` are removed for them (a
user sets none; until 2026-11-28 they were inherited, which hid an OpenMP oversubscription of
cvflow's threads route and changed GridSearchCV's HistGradientBoosting times too). The tools'
choices are compared
(same ``best_params_``, same ``best_score_``).

Writes ``benchmarks/results/searchcv_vs_gridsearch.md`` (the table) and ``.json`` (every raw
time, the loads, failures, choices).

Run: ``python benchmarks/searchcv_vs_gridsearch.py [--repeats 5] [--cases a,b,c,d,e,f]
[--warmup 1] [--out benchmarks/results]``
"""
from __future__ import annotations

import common  # noqa: I001 - first: one BLAS thread before numpy loads (inherited by children)

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEADLINE = 300          # seconds: a process still running then is killed and counted as hung
TOOLS = ("SearchCV", "GridSearchCV(n_jobs=None)", "GridSearchCV(n_jobs=2)")
DESCRIPTION = {
    "a": "DecisionTreeClassifier, max_depth 2/4/8, breast cancer, cv=5",
    "b": "Pipeline(StandardScaler, LogisticRegression), 10 Cs, breast cancer, cv=5",
    "c": "DataFrame + ColumnTransformer(one-hot, scale) + HGB regressor, 6 params, ISLR Auto, cv=5",
    "d": "case a with fit(X, y, sample_weight=balanced)",
    "e": "nested: cross_validate(search of case b, cv=3)",
    "g": "SVC(gamma=0.001), 8 Cs, digits, cv=5 (fits of seconds)",
    "f-quickstart": "`cvflow run workflows/quickstart.yaml` vs plain GridSearchCV script",
    "f-cart": "`cvflow run benchmarks/cart_breast_cancer.yaml` vs GridSearchCV of case a",
}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


PINS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def env() -> dict:
    """The environment a user's script runs in: ``common``'s one-thread pins removed (a user
    sets none: GridSearchCV(n_jobs=None)'s HistGradientBoosting runs an OpenMP thread per core)."""
    out = {k: v for k, v in os.environ.items() if k not in PINS}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return out


def commands(case: str, store) -> dict:
    """The argv of each tool for ``case`` (``store()`` gives a fresh store path)."""
    py = sys.executable
    if case.startswith("f-"):
        flow = {"f-quickstart": (REPO / "workflows" / "quickstart.yaml", "quickstart"),
                "f-cart": (HERE / "cart_breast_cancer.yaml", "cart")}[case]
        return {TOOLS[0]: lambda: [py, "-m", "cvflow", "run", str(flow[0]), "--store", store()],
                TOOLS[1]: lambda: [py, str(HERE / "gridsearch_tool.py"), flow[1], "None"],
                TOOLS[2]: lambda: [py, str(HERE / "gridsearch_tool.py"), flow[1], "2"]}
    return {TOOLS[0]: lambda: [py, str(HERE / "searchcv_tool.py"), case],
            TOOLS[1]: lambda: [py, str(HERE / "gridsearch_tool.py"), case, "None"],
            TOOLS[2]: lambda: [py, str(HERE / "gridsearch_tool.py"), case, "2"]}


def run(argv: list[str]) -> dict:
    """One whole process: its wall seconds and outcome (ok, failed with its last stderr line, or
    hung)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=REPO)
    try:
        out, err = proc.communicate(timeout=DEADLINE)
        seconds = time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"status": "hung", "error": f"still running after {DEADLINE} s (killed)"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)       # anything it left behind
    if proc.returncode:
        lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        return {"status": "failed", "seconds": seconds,
                "error": f"exit {proc.returncode}: {lines[-1] if lines else '(no stderr)'}"}
    return {"status": "ok", "seconds": seconds, "choice": choice(out, err)}


def choice(out: str, err: str = ""):
    """The choice a process printed: the tool scripts' JSON line, or the selected param and its
    K-fold estimate of ``cvflow run``'s table (and its route, printed on stderr)."""
    lines = out.strip().splitlines()
    with contextlib.suppress(ValueError, IndexError):
        return json.loads(lines[-1])
    selected = re.search(r"selected: \S+\((.*)\)", out)
    if not selected:
        return None
    row = re.search(r"^\s+\S+\(" + re.escape(selected.group(1)) + r"\)\s+(\S+)", out, re.M)
    execution = re.search(r"^execution: ([^(\n]*)", out + "\n" + err, re.M)
    return {"selected": selected.group(1), "kfold_estimate": float(row.group(1)) if row else None,
            "execution": execution.group(1).strip() if execution else None}


def time_case(case: str, repeats: int, warmup: int, tmp: Path) -> dict:
    stores = iter(range(10**6))
    argv = commands(case, lambda: str(tmp / f"{case}-{next(stores)}.zarr"))
    record = {"case": case, "description": DESCRIPTION[case], "load_before": load(),
              "commands": {tool: make() for tool, make in argv.items()},
              "times": {tool: [] for tool in TOOLS}, "warmup_times": {tool: [] for tool in TOOLS},
              "failure": {}, "hung": {tool: 0 for tool in TOOLS}, "choice": {}, "order": [],
              "execution": None}
    print(f"case {case}: {DESCRIPTION[case]}; load average {record['load_before']}", flush=True)
    for rnd in range(warmup + repeats):
        order = TOOLS[rnd % len(TOOLS):] + TOOLS[:rnd % len(TOOLS)]
        record["order"].append(list(order))
        for tool in order:
            if tool in record["failure"]:
                continue
            res = run(argv[tool]())
            if res["status"] == "failed":
                record["failure"][tool] = res["error"]
                print(f"  {tool:<26} FAILED {res['error']}", flush=True)
                continue
            if res["status"] == "hung":
                record["hung"][tool] += 1
                print(f"  {tool:<26} HUNG", flush=True)
                continue
            (record["warmup_times"] if rnd < warmup else record["times"])[tool].append(
                res["seconds"])
            record["choice"][tool] = dict(res["choice"] or {})
            record["execution"] = record["choice"][tool].pop("execution", record.get("execution"))
            print(f"  {'warm-up' if rnd < warmup else f'round {rnd - warmup + 1}'}: "
                  f"{tool:<26} {res['seconds']:7.2f} s", flush=True)
    record["load_after"] = load()
    med = {tool: statistics.median(t) if t else None for tool, t in record["times"].items()}
    record["median"] = med
    ours = med[TOOLS[0]]
    record["ratio"] = {tool: (ours / med[tool] if ours and med[tool] else None)
                       for tool in TOOLS[1:]}
    record["same_choice"] = agree(case, record["choice"])
    print(f"  medians {', '.join(f'{t} {m:.2f} s' for t, m in med.items() if m)}; ratios "
          f"{', '.join(f'{r:.2f}' for r in record['ratio'].values() if r)}; same choice: "
          f"{record['same_choice']}; load average {record['load_after']}", flush=True)
    return record


def agree(case: str, choices: dict) -> str:
    """Whether SearchCV (or cvflow run) chose as GridSearchCV did."""
    ours, theirs = choices.get(TOOLS[0]), choices.get(TOOLS[1]) or choices.get(TOOLS[2])
    if not ours or not theirs:
        return "n/a"
    if "selected" in ours:          # cvflow run: "alpha=0.001" against {"alpha": 0.001}
        params = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in sorted(theirs["best_params"].items()))
        same = ours["selected"].replace(" ", "") == params.replace(" ", "")
        note = ("; other folds: the workflow's kfold design is shuffled (seed 0), KFold(5) is not"
                if case == "f-quickstart" else "")
        return "yes" if same else f"no ({ours['selected']} vs {params}{note})"
    if ours == theirs:
        return "yes"
    if ours.get("best_params") == theirs.get("best_params"):
        return (f"params yes, best_score no ({ours.get('best_score')} vs "
                f"{theirs.get('best_score')})")
    return "no"


def fmt(x, digits=2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def markdown(records: list[dict], meta: dict) -> str:
    lines = [
        "# SearchCV (defaults) vs GridSearchCV, whole processes (issue 31 item 1)", "",
        f"{meta['when']}, commit {meta['commit']}, `--repeats {meta['repeats']} --warmup "
        f"{meta['warmup']}`; {meta['machine']}", "",
        f"Load average (1, 5, 15 min): {meta['load_before']} before, {meta['load_after']} after "
        "(2 cores, shared).", "",
        "| case | SearchCV (f: cvflow run) s | GridSearchCV(n_jobs=None) s | GridSearchCV(n_jobs=2) s | "
        "ratio vs None | ratio vs 2 | same choice | cvflow's route | load before → after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        med, ratio = r["median"], r["ratio"]
        cells = []
        for tool in TOOLS:
            if tool in r["failure"]:
                cells.append("FAILED")
            else:
                cells.append(fmt(med[tool]) + (f" ({r['hung'][tool]} hung)" if r["hung"][tool]
                                               else ""))
        lines.append(f"| {r['case']}: {r['description']} | {' | '.join(cells)} | "
                     f"{fmt(ratio[TOOLS[1]])} | {fmt(ratio[TOOLS[2]])} | {r['same_choice']} | "
                     f"{r.get('execution') or '—'} | "
                     f"{r['load_before'][0]} → {r['load_after'][0]} |")
    failures = [(r["case"], tool, err) for r in records for tool, err in r["failure"].items()]
    lines += ["", "Failures: " + ("none" if not failures else "")]
    lines += [f"- {case}, {tool}: `{err}`" for case, tool, err in failures]
    lines += ["", "Raw times: `searchcv_vs_gridsearch.json` (per tool, in round order; the "
              "order of each round is recorded)."]
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds per case")
    ap.add_argument("--cases", default="a,b,c,d,e,f,g")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    cases = []
    for c in args.cases.split(","):
        cases += ["f-quickstart", "f-cart"] if c == "f" else [c]
    unknown = [c for c in cases if c not in DESCRIPTION]
    if unknown:
        raise SystemExit(f"unknown case {unknown[0]!r}; cases: a, b, c, d, e, g, f "
                         "(= f-quickstart, f-cart)")
    meta = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), "repeats": args.repeats, "warmup": args.warmup,
            "machine": common.machine(), "python": sys.executable, "load_before": load()}
    print(meta["machine"])
    print(f"load average before: {meta['load_before']}", flush=True)
    with common.scratch() as tmp:
        records = [time_case(case, args.repeats, args.warmup, tmp) for case in cases]
    meta["load_after"] = load()
    print(f"load average after: {meta['load_after']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(records, meta)
    (out / "searchcv_vs_gridsearch.md").write_text(table)
    (out / "searchcv_vs_gridsearch.json").write_text(
        json.dumps({"meta": meta, "cases": records}, indent=1, default=str) + "\n")
    print(table)


if __name__ == "__main__":
    main()
