"""plan's variance model against the truth for stable and unstable learners: the variance of d̄
over data sets against the model's (between samples, within a sample, between repeats), and
the share σ²_w / (σ²_s + σ²_w) of a sample's difference that moves with its fold (plan's
instability measure), by Monte Carlo with scikit-learn fits (no cvflow engine).

    PYTHONPATH=. python benchmarks/plan_instability.py [--sets 300] [--n 200]

Two params of exactly equal risk (by symmetry): y = x1 + x2 + N(0, 1), x ~ N(0, I4); a learner
on (x1, x3) against the same learner on (x2, x4); squared loss, 5 folds x 2 repeats per data
set. Columns: the true Var(d̄) over the data sets divided by the mean of plan's model variance,
the mean instability share, and the z-test's level with the model's variance (a study sized by
plan tests at that level; the promise is 5%). Writes benchmarks/results/plan_instability.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.linear_model import LinearRegression
from sklearn.neighbors import KNeighborsRegressor
from sklearn.tree import DecisionTreeRegressor

from cvflow.estimators.study_size import components, true_variance

LEARNERS = {"OLS": LinearRegression, "1-NN": lambda: KNeighborsRegressor(1),
            "CART": lambda: DecisionTreeRegressor(random_state=0),
            "CART depth 2": lambda: DecisionTreeRegressor(max_depth=2, random_state=0)}
FOLDS, REPEATS = 5, 2


def differences(make, rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """d (repeat, sample): out-of-fold squared loss of the learner on (x1, x3) minus on (x2, x4),
    and the fold labels (repeat, sample)."""
    x = rng.standard_normal((n, 4))
    y = x[:, 0] + x[:, 1] + rng.standard_normal(n)
    d = np.empty((REPEATS, n))
    folds = np.stack([rng.permutation(n) % FOLDS for _ in range(REPEATS)])
    for r in range(REPEATS):
        fold = folds[r]
        for j in range(FOLDS):
            test, train = fold == j, fold != j
            losses = []
            for cols in ([0, 2], [1, 3]):
                model = make().fit(x[train][:, cols], y[train])
                losses.append((y[test] - model.predict(x[test][:, cols])) ** 2)
            d[r, test] = losses[0] - losses[1]
    return d, folds


def corrected_t_rejects(d: np.ndarray, folds: np.ndarray, alpha: float = 0.05) -> bool:
    """The corrected repeated K-fold t-test (Nadeau & Bengio 2003; Bouckaert & Frank 2004) from
    its formula: (1/(K·R) + 1/(K − 1))·s² of the K·R fold means, t on K·R − 1 df."""
    means = np.array([d[r, folds[r] == j].mean() for r in range(REPEATS) for j in range(FOLDS)])
    se = np.sqrt((1 / (FOLDS * REPEATS) + 1 / (FOLDS - 1)) * means.var(ddof=1))
    return bool(abs(means.mean()) / se > stats.t.ppf(1 - alpha / 2, FOLDS * REPEATS - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=300)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_instability"))
    args = parser.parse_args()
    rng = np.random.default_rng(43)
    start, load = time.time(), os.getloadavg()[0]
    rows = []
    for name, make in LEARNERS.items():
        means, model, share, rejected, rejected_t = [], [], [], 0, 0
        for _ in range(args.sets):
            d, folds = differences(make, rng, args.n)
            rejected_t += corrected_t_rejects(d, folds)
            v = components(d)
            var = true_variance(v, args.n, REPEATS)
            means.append(d.mean())
            model.append(var)
            share.append(v["var_within"] / max(v["var_sample"] + v["var_within"], 1e-300))
            rejected += abs(d.mean()) > 1.959964 * math.sqrt(var)
        ratio = float(np.var(means, ddof=1) / np.mean(model))
        level, level_t = rejected / args.sets, rejected_t / args.sets
        rows.append({"learner": name, "sets": args.sets, "n": args.n, "var_ratio": ratio,
                     "var_ratio_se": ratio * math.sqrt(2 / (args.sets - 1)),
                     "instability": float(np.mean(share)), "z_level": level,
                     "z_level_se": math.sqrt(max(level * (1 - level), 1 / args.sets) / args.sets),
                     "corrected_t_level": level_t,
                     "corrected_t_level_se": math.sqrt(max(level_t * (1 - level_t), 1 / args.sets)
                                                       / args.sets)})
        print(rows[-1], flush=True)
    lines = ["| learner | true Var(d̄) / plan's model | instability σ²_w/(σ²_s+σ²_w) | z-test level "
             "at 5% | corrected_t level |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['learner']} | {r['var_ratio']:.2f} ± {r['var_ratio_se']:.2f} | "
                     f"{r['instability']:.2f} | {100 * r['z_level']:.1f}% ± {100 * r['z_level_se']:.1f}% | "
                     f"{100 * r['corrected_t_level']:.1f}% ± {100 * r['corrected_t_level_se']:.1f}% |")
    text = "\n".join(lines)
    print(text)
    meta = {"sets": args.sets, "n": args.n, "design": f"{FOLDS} folds x {REPEATS} repeats",
            "seconds": round(time.time() - start),
            "load_average": round(max(load, os.getloadavg()[0]), 2)}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text(f"{json.dumps(meta)}\n\n{text}\n")


if __name__ == "__main__":
    main()
