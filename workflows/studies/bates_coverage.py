"""Bates, Hastie & Tibshirani's low-dimensional logistic setting: miscoverage of the naive CV
interval and of the nested CV interval over many simulated datasets.

Setting (Bates et al. Sec. 5; review in papers/004): x ~ N(0, I_20), P(y=1|x) = sigmoid(x'θ),
θ = c·(1,1,1,1,0,...,0) with c set so the Bayes error is 33%; n = 100; unregularised
logistic regression; misclassification (zero_one) loss; nominal miscoverage α = 10%.

For each dataset: K-fold with R repeats (fold, pair and full fits by ``cvflow.testing.fit_cube``,
in-process), ``bates_ncv`` gives both intervals; Err_XY is the full fit's error on a large
fresh sample and Err (the target of both intervals) is the mean of Err_XY over the datasets.
A "Hi" miss: the interval lies above the target; "Lo": below.

Run: python workflows/studies/bates_coverage.py [--datasets 200 --repeats 10 --folds 5]
"""
from __future__ import annotations

import argparse
import math
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

P, N, K_SIGNAL, BAYES = 20, 100, 4, 0.33


def bayes_error(c: float) -> float:
    """E[min(σ(s), 1 − σ(s))], s = θ'x ~ N(0, k c²): by Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    s = math.sqrt(K_SIGNAL) * c * nodes
    return float(np.sum(weights / np.sqrt(2 * np.pi) / (1 + np.exp(np.abs(s)))))


def signal_for(bayes: float = BAYES) -> float:
    """c with Bayes error ``bayes`` (bisection; the error decreases in c)."""
    lo, hi = 1e-6, 20.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bayes_error(mid) > bayes else (lo, mid)
    return (lo + hi) / 2


def one_dataset(args):
    seed, folds, repeats, alpha, c = args
    from sklearn.linear_model import LogisticRegression

    from cvflow.workflow.data import logistic
    from cvflow.estimators import bates_ncv
    from cvflow.fitting.learners import Param
    from cvflow.testing import fit_cube, simple_design

    X, y, beta = logistic(N, P, signal=c, k=K_SIGNAL, seed=seed)
    params = [Param("logistic", "sklearn.linear_model.LogisticRegression",
                    fixed={"penalty": None, "solver": "newton-cholesky"}, output="decision_function")]
    design = simple_design(N, folds, repeats=repeats, pairs=True, seed=seed, y=y,
                           splitter="stratified")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cube = fit_cube(X, y, params, design, task="classification", loss="zero_one")
        full = LogisticRegression(penalty=None, solver="newton-cholesky").fit(X, y)
    out = bates_ncv(cube, param=0, alpha=alpha)
    Xt, yt, _ = logistic(20000, P, signal=c, k=K_SIGNAL, seed=10_000_000 + seed)
    err_xy = float(np.mean(full.predict(Xt) != yt))
    # the paper's naive interval comes from one K-fold run: the first repeat alone
    single = bates_ncv(cube.isel(repeat=[0]), param=0, alpha=alpha)
    keys = ("estimate", "lower", "upper", "err_cv", "naive_lower", "naive_upper", "width_ratio")
    return ({k: float(out[k]) for k in keys} | {"err_xy": err_xy}
            | {"naive1_lower": float(single["naive_lower"]),
               "naive1_upper": float(single["naive_upper"])})


def simulate(datasets: int = 200, folds: int = 5, repeats: int = 10, alpha: float = 0.1,
             seed: int = 0, workers: int = 1) -> dict:
    """Run the study; returns miscoverage rates (of Err and of Err_XY) and mean widths."""
    c = signal_for()
    jobs = [(seed + d, folds, repeats, alpha, c) for d in range(datasets)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            rows = list(pool.map(one_dataset, jobs, chunksize=4))
    else:
        rows = [one_dataset(j) for j in jobs]
    get = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    err = get["err_xy"].mean()
    res = {"c": c, "bayes": bayes_error(c), "datasets": datasets, "folds": folds,
           "repeats": repeats, "alpha": alpha, "err": err,
           "cv_mean": get["err_cv"].mean(), "ncv_mean": get["estimate"].mean(),
           "width_ratio": get["width_ratio"].mean()}
    for name, lo, hi in (("naive1", "naive1_lower", "naive1_upper"),
                         ("naive", "naive_lower", "naive_upper"), ("ncv", "lower", "upper")):
        for target, value in (("", err), ("_xy", get["err_xy"])):
            res[f"hi_{name}{target}"] = float(np.mean(get[lo] > value))
            res[f"lo_{name}{target}"] = float(np.mean(get[hi] < value))
            res[f"miss_{name}{target}"] = res[f"hi_{name}{target}"] + res[f"lo_{name}{target}"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=200)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    r = simulate(a.datasets, a.folds, a.repeats, a.alpha, a.seed, a.workers)
    se = math.sqrt(0.1 * 0.9 / r["datasets"])
    print(f"Bates low-dim logistic: p={P}, n={N}, c={r['c']:.4f} (Bayes error {r['bayes']:.3f}), "
          f"{r['datasets']} datasets, K={r['folds']}, R={r['repeats']}, nominal miscoverage "
          f"{r['alpha']:.0%} (binomial se of a rate ~{se:.1%}); {time.perf_counter() - t:.0f} s")
    print(f"Err (mean test error of the full fit) = {r['err']:.3f}; mean CV estimate "
          f"{r['cv_mean']:.3f}; mean bias-corrected NCV estimate {r['ncv_mean']:.3f}; "
          f"mean width ratio NCV/naive {r['width_ratio']:.2f}")
    print()
    print("| target | interval | miscoverage | Hi | Lo |")
    print("|---|---|---|---|---|")
    for target, label in (("_xy", "Err_XY"), ("", "Err")):
        for name, lab in (("naive1", "naive CV, one K-fold run"),
                          ("naive", f"naive CV, mean of {r['repeats']} repeats"),
                          ("ncv", "nested CV")):
            print(f"| {label} | {lab} | {r[f'miss_{name}{target}']:.1%} | "
                  f"{r[f'hi_{name}{target}']:.1%} | {r[f'lo_{name}{target}']:.1%} |")


if __name__ == "__main__":
    main()
