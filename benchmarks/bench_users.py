"""What a user would pick instead, side by side: LassoCV, RidgeCV(cv=K), LogisticRegressionCV,
and the quickstart as a whole process against the plain GridSearchCV script.

Every comparison is interleaved (cvflow, competitor, cvflow, competitor, ...) after one warm-up
of each, on the very same folds and grid, and reports medians and their ratio. cvflow runs as a
user runs it: ``cvflow.run(workflow)`` with the default ``--cluster auto`` (its choice is
printed), a fresh store each time, then the reducers; the competitor runs with ``n_jobs=2``
(joblib's loky pool, warm after the warm-up).

- quickstart: ``python -m cvflow run workflows/quickstart.yaml`` (120 ridge fits, results
  printed) vs ``benchmarks/plain_quickstart.py`` (``GridSearchCV(Ridge(), 20 alphas,
  cv=KFold(5))``, best params printed), both whole processes, imports included.
- lasso: n = 2000, p = 200, 100 alphas (LassoCV's own grid), 5 folds: ``cvflow.run`` +
  ``kfold`` + ``corrected_kfold`` vs ``LassoCV(alphas=..., cv=PredefinedSplit, n_jobs=2)``.
- ridge: the same data, 100 alphas: cvflow (one SVD per training set) + ``kfold`` vs
  ``RidgeCV(alphas, cv=PredefinedSplit)`` (a GridSearchCV inside, one job).
- logistic: n = 2000, p = 50, 20 values of C, lbfgs, log loss: cvflow (warm-started C path) +
  ``kfold`` vs ``LogisticRegressionCV(Cs, cv=PredefinedSplit, scoring="neg_log_loss",
  n_jobs=2)``; both must pick the same C.

Run: ``python benchmarks/bench_users.py [--runs 5] [--only quickstart,lasso,ridge,logistic]``
"""
from __future__ import annotations

import common  # noqa: I001 - first: one BLAS thread before numpy loads

import argparse
import os
import warnings
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def interleaved(a, b, runs: int) -> tuple[list[float], list[float], object, object]:
    """Times of ``a()`` and ``b()`` called alternately ``runs`` times after one warm-up each."""
    (ta, tb), (ra, rb) = common.interleaved((a, b), runs=runs)
    return ta, tb, ra, rb


def report(name: str, ta: list, tb: list, competitor: str, goal: float) -> float:
    ma, mb = statistics.median(ta), statistics.median(tb)
    ratio = ma / mb
    print(f"  {name}: cvflow {ma:.3f} s (runs {', '.join(f'{t:.2f}' for t in ta)}) vs "
          f"{competitor} {mb:.3f} s (runs {', '.join(f'{t:.2f}' for t in tb)})")
    print(common.row(f"{name}: cvflow / {competitor}, wall (median)", f"{ratio:.2f}",
                     f"<= {goal}", ratio <= goal))
    return ratio


def quickstart(runs: int, tmp: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    def cv_cmd():
        return [sys.executable, "-m", "cvflow", "run", str(REPO / "workflows" / "quickstart.yaml"),
                "--store", str(fresh_store(tmp / "quickstart"))]

    def plain_cmd():
        return [sys.executable, str(REPO / "benchmarks" / "plain_quickstart.py")]

    def call(cmd):
        def go():
            out = subprocess.run(cmd(), env=env, capture_output=True, text=True, check=True)
            return out.stdout + out.stderr
        return go

    ta, tb, out_a, out_b = interleaved(call(cv_cmd), call(plain_cmd), runs)
    chosen = next((ln for ln in out_a.splitlines() if ln.startswith("execution:")), "?")
    print(f"  cvflow {chosen}")
    print(f"  cvflow selected: {[ln.strip() for ln in out_a.splitlines() if 'selected' in ln]}; "
          f"plain script: {out_b.strip().splitlines()[-1]}")
    report("quickstart, whole process", ta, tb, "plain GridSearchCV script", 1.5)


def regression_data(tmp: Path):
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=2000, n_features=200, n_informative=20, noise=10.0,
                           random_state=0)
    path = tmp / "reg.npz"
    np.savez(path, X=X, y=y)
    return X, y, path


def classification_data(tmp: Path):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=2000, n_features=50, n_informative=10,
                               random_state=0)
    path = tmp / "clf.npz"
    np.savez(path, X=X, y=y)
    return X, y, path


def config(name: str, data: Path, task: str, loss: str, learner: dict, estimators) -> dict:
    return {"name": name, "data": {"source": "npz", "path": str(data), "seed": 0},
            "task": task, "loss": loss, "learners": [learner],
            "design": {"folds": 5, "repeats": 1, "splitter": "kfold", "seed": 0},
            "estimators": list(estimators)}


def fresh_store(where: Path) -> Path:
    """A new store path in ``where`` (stores are removed with the scratch directory, so no
    run is timed deleting the previous one)."""
    where.mkdir(exist_ok=True)
    return where / f"{len(list(where.iterdir()))}.zarr"


def cvflow_study(wf, where: Path):
    """A user's whole study: run (default cluster choice) into a new store, reopen it, reduce
    it with the workflow's estimators (what ``cvflow report`` computes)."""
    import cvflow
    from cvflow import report as cv_report

    store = fresh_store(where)
    result = cvflow.run(wf, store=store)
    return result, cv_report.compute(cvflow.open(store))


def selected(results: dict, name: str = "kfold") -> str:
    ds = results[name]
    return str(ds.attrs.get("selected_params", "?"))


def lasso(runs: int, tmp: Path) -> None:
    from sklearn.linear_model import LassoCV
    from sklearn.model_selection import PredefinedSplit

    X, y, data = regression_data(tmp)
    alphas = _lasso_alphas(X, y)
    est = ("kfold", "corrected_kfold")
    wf = common.workflow(config("lasso", data, "regression", "squared", {
        "name": "lasso", "class": "sklearn.linear_model.Lasso",
        "grid": {"alpha": [float(a) for a in alphas]}}, est), tmp)
    fold = common.fold_labels(wf)
    cv = PredefinedSplit(fold)
    ta, tb, (res, out), ref = interleaved(
        lambda: cvflow_study(wf, tmp / "lasso"),
        lambda: LassoCV(alphas=alphas, cv=cv, n_jobs=2).fit(X, y), runs)
    print(f"  cvflow execution: {res.execution}; {res.tasks} tasks, chunks {res.chunks}")
    print(f"  LassoCV alpha_ = {ref.alpha_:.6g}; cvflow kfold selected: {selected(out)}")
    report("lasso K-fold selection (100 alphas, n=2000, p=200)", ta, tb, "LassoCV(n_jobs=2)", 1.0)


def _lasso_alphas(X, y, n_alphas: int = 100, eps: float = 1e-3) -> np.ndarray:
    """LassoCV's default grid on the whole data: alpha_max = max |X_c^T y_c| / n, log-spaced."""
    Xc, yc = X - X.mean(axis=0), y - y.mean()
    alpha_max = np.abs(Xc.T @ yc).max() / len(y)
    return np.geomspace(alpha_max, alpha_max * eps, n_alphas)


def ridge(runs: int, tmp: Path) -> None:
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import PredefinedSplit

    X, y, data = regression_data(tmp)
    alphas = np.logspace(-3, 3, 100)
    wf = common.workflow(config("ridge", data, "regression", "squared", {
        "name": "ridge", "class": "sklearn.linear_model.Ridge",
        "grid": {"alpha": [float(a) for a in alphas]}}, ("kfold",)), tmp)
    cv = PredefinedSplit(common.fold_labels(wf))
    ta, tb, (res, out), ref = interleaved(
        lambda: cvflow_study(wf, tmp / "ridge"),
        lambda: RidgeCV(alphas=alphas, cv=cv).fit(X, y), runs)
    print(f"  cvflow execution: {res.execution}")
    print(f"  RidgeCV alpha_ = {ref.alpha_:.6g}; cvflow kfold selected: {selected(out)}")
    report("ridge K-fold selection (100 alphas)", ta, tb, "RidgeCV(cv=5)", 1.0)


def logistic(runs: int, tmp: Path) -> None:
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import PredefinedSplit

    X, y, data = classification_data(tmp)
    Cs = np.logspace(-3, 2, 20)
    wf = common.workflow(config("logistic", data, "classification", "log_loss", {
        "name": "logistic", "class": "sklearn.linear_model.LogisticRegression",
        "params": {"max_iter": 1000}, "output": "predict_proba",
        "grid": {"C": [float(c) for c in Cs]}}, ("kfold",)), tmp)
    cv = PredefinedSplit(common.fold_labels(wf))
    ta, tb, (res, out), ref = interleaved(
        lambda: cvflow_study(wf, tmp / "logistic"),
        lambda: LogisticRegressionCV(Cs=Cs, cv=cv, scoring="neg_log_loss", max_iter=1000,
                                     n_jobs=2).fit(X, y), runs)
    print(f"  cvflow execution: {res.execution}")
    print(f"  LogisticRegressionCV C_ = {ref.C_[0]:.6g}; cvflow kfold selected: {selected(out)}")
    report("logistic C path (20 Cs, n=2000, p=50)", ta, tb, "LogisticRegressionCV(n_jobs=2)", 1.0)


CASES = {"quickstart": quickstart, "lasso": lasso, "ridge": ridge, "logistic": logistic}


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)   # LogisticRegressionCV's 1.10 notices
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    print(common.machine())
    print(f"load average before: {os.getloadavg()[0]:.2f} (the machine is shared: ratios may "
          "shift on a quiet machine)")
    with common.scratch() as tmp:
        for name in args.only.split(","):
            print(f"{name}:")
            CASES[name](args.runs, tmp)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
