"""Shared Pipeline prefixes (issue 34 item 1): ``cvflow.SearchCV`` against ``GridSearchCV`` and
``GridSearchCV`` with ``Pipeline(memory=...)`` on an expensive prefix.

The case: ``Pipeline(PCA(50, svd_solver="full"), LogisticRegression())`` over 8 values of
``logisticregression__C``, ``cv=5``, on ``make_classification(N, P)`` (default 4000 x 400: one
PCA fit is a full SVD of a 3200 x 400 matrix, the expensive part; the logistic fits on 50
columns are cheap). GridSearchCV fits the PCA 8 x 5 + 1 (refit) times; with ``memory=`` it
hashes X and y on every call and fits each fold's PCA once (a new cache directory per process);
cvflow fits it once per training set (5 folds + the full fit) and once more for
``best_estimator_``.

Every call is a fresh ``python`` process (``shared_prefix.py --child TOOL``), timed from start
to exit (imports included, as a user's script) and, inside it, the ``fit`` call alone. The tools
run ``--repeats`` rounds interleaved, the order rotated each round, after ``--warmup`` untimed
rounds; medians are reported. Each child counts the PCA fits it made (in every process: a line
per fit appended to a file; cvflow's trial fits before a run are left out) and its
``best_params_``, which must agree. The load average is recorded before and after.

Writes ``benchmarks/results/shared_prefix_NxP.md`` (the table) and ``.json`` (every raw time).

Run: ``python benchmarks/shared_prefix.py [--repeats 3] [--warmup 1] [--n 4000] [--p 400]``
"""
from __future__ import annotations

import common  # noqa: I001 - first: one BLAS thread before numpy loads (inherited by children)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from sklearn.decomposition import PCA

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOOLS = ("SearchCV", "GridSearchCV(n_jobs=None)", "GridSearchCV(n_jobs=2)",
         "GridSearchCV(memory=)")
CS = [float(c) for c in np.logspace(-3, 2, 8)]


class LoggedPCA(PCA):
    """PCA that appends a line to ``$SHARED_PREFIX_LOG`` per fit (outside cvflow's trial fits)."""

    def _log(self) -> None:
        if "cvflow" in sys.modules:
            from cvflow.fitting.trial import in_trial

            if in_trial():
                return
        fd = os.open(os.environ["SHARED_PREFIX_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, b"fit\n")
        finally:
            os.close(fd)

    def fit(self, X, y=None):
        self._log()
        return super().fit(X, y)

    def fit_transform(self, X, y=None):
        self._log()
        return super().fit_transform(X, y)


def child(tool: str, n: int, p: int) -> dict:
    """One tool's whole call in this process: {seconds of fit, PCA fits, best_params_}."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    X, y = make_classification(n_samples=n, n_features=p, n_informative=30, random_state=0)
    cache = tempfile.mkdtemp(prefix="shared-prefix-") if "memory" in tool else None
    pipe = Pipeline([("pca", LoggedPCA(50, svd_solver="full")),
                     ("logisticregression", LogisticRegression())], memory=cache)
    grid = {"logisticregression__C": CS}
    if tool == "SearchCV":
        import cvflow

        search = cvflow.SearchCV(pipe, grid, cv=5)
    else:
        search = GridSearchCV(pipe, grid, cv=5, n_jobs=2 if "n_jobs=2" in tool else None)
    t0 = time.perf_counter()
    search.fit(X, y)
    seconds = time.perf_counter() - t0
    fits = len(Path(os.environ["SHARED_PREFIX_LOG"]).read_text().splitlines())
    return {"fit_seconds": seconds, "pca_fits": fits,
            "best_params": {k: float(v) for k, v in search.best_params_.items()},
            "best_score": float(search.best_score_)}


def run_child(tool: str, n: int, p: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SHARED_PREFIX_LOG=str(Path(tmp) / "fits.log"),
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, str(Path(__file__)), "--child", tool, "--n", str(n),
                              "--p", str(p)], env=env, capture_output=True, text=True,
                             timeout=900, cwd=REPO)
        wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"{tool}: {out.stderr.strip().splitlines()[-1:]}")
    record = json.loads(out.stdout.strip().splitlines()[-1])
    record["wall"] = wall
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--p", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.p)))
        return
    load = [os.getloadavg()]
    for _ in range(args.warmup):
        for tool in TOOLS:
            run_child(tool, args.n, args.p)
    runs: dict[str, list[dict]] = {tool: [] for tool in TOOLS}
    for r in range(args.repeats):
        order = TOOLS[r % len(TOOLS):] + TOOLS[:r % len(TOOLS)]
        for tool in order:
            runs[tool].append(run_child(tool, args.n, args.p))
            print(tool, {k: v for k, v in runs[tool][-1].items() if k != "best_params"},
                  flush=True)
    load.append(os.getloadavg())
    med = {tool: {key: statistics.median(r[key] for r in rs) for key in ("wall", "fit_seconds")}
           for tool, rs in runs.items()}
    choices = {tool: rs[-1]["best_params"] for tool, rs in runs.items()}
    base = med["GridSearchCV(n_jobs=None)"]
    lines = [
        f"# Shared Pipeline prefixes: PCA(50, full SVD) + LogisticRegression, 8 C, cv=5, "
        f"{args.n} x {args.p}",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {common.machine()}",
        f"load average (1, 5, 15 min) before {tuple(round(v, 2) for v in load[0])}, after "
        f"{tuple(round(v, 2) for v in load[1])}; medians of {args.repeats} fresh processes per "
        "tool, interleaved, one BLAS thread each",
        "",
        "| tool | PCA fits | whole process, s | fit call, s | process / GridSearchCV | "
        "fit call / GridSearchCV |",
        "|---|---|---|---|---|---|",
    ]
    for tool in TOOLS:
        m = med[tool]
        lines.append(f"| {tool} | {runs[tool][-1]['pca_fits']} | {m['wall']:.2f} | "
                     f"{m['fit_seconds']:.2f} | {m['wall'] / base['wall']:.2f} | "
                     f"{m['fit_seconds'] / base['fit_seconds']:.2f} |")
    agree = len({json.dumps(c, sort_keys=True) for c in choices.values()}) == 1
    lines += ["", f"Same best_params_ for every tool: {agree} ({choices['SearchCV']})."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"shared_prefix_{args.n}x{args.p}"
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(json.dumps(
        {"n": args.n, "p": args.p, "load": load, "runs": runs, "medians": med}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
