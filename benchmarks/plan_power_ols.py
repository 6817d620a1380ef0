"""A study sized by plan reaches the power it plans for: OLS (a stable learner), by Monte Carlo.

    PYTHONPATH=. python benchmarks/plan_power_ols.py [--sets 300]

y = x1 + 0.15·x2 + N(0, 1), x ~ N(0, I2); param a is OLS on (x1, x2), b OLS on x1 alone
(Δ = e_a − e_b ≈ −0.0225, Var d ≈ 0.0895). A pilot of 5,000 samples, 5 folds x 2 repeats
(its variance within ~5%; one of 1,000 read 0.134, d being heavy-tailed, and planned an n of
power 0.96) is planned against that Δ by plan's kernels (:func:`cvflow.estimators.study_size.components`,
:func:`cvflow.estimators.study_size.test_sizes`) for each test; then ``--sets`` studies of the
planned n (5 x 2, scikit-learn fits) are tested by that test: corrected_t from its formula
(Nadeau & Bengio), wald_cv as compare_all reads it (the within-fold variance over n, normal).
Writes benchmarks/results/plan_power_ols.{json,md}.
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

from cvflow.estimators.study_size import components, test_sizes

FOLDS, REPEATS, DELTA, PILOT = 5, 2, -0.0225, 5000


def study(rng, n):
    x = rng.standard_normal((n, 2))
    y = x[:, 0] + 0.15 * x[:, 1] + rng.standard_normal(n)
    d = np.empty((REPEATS, n))
    folds = np.stack([rng.permutation(n) % FOLDS for _ in range(REPEATS)])
    for r in range(REPEATS):
        for j in range(FOLDS):
            test, train = folds[r] == j, folds[r] != j
            loss = [(y[test] - LinearRegression().fit(x[train][:, c], y[train])
                     .predict(x[test][:, c])) ** 2 for c in ([0, 1], [0])]
            d[r, test] = loss[0] - loss[1]
    return d, folds


def rejects(test, d, folds):
    n = d.shape[1]
    if test == "corrected_t":
        means = np.array([d[r, folds[r] == j].mean() for r in range(REPEATS) for j in range(FOLDS)])
        se = math.sqrt((1 / (FOLDS * REPEATS) + 1 / (FOLDS - 1)) * means.var(ddof=1))
        return abs(means.mean()) / se > stats.t.ppf(0.975, FOLDS * REPEATS - 1)
    within = np.mean([sum(((d[r, folds[r] == j] - d[r, folds[r] == j].mean()) ** 2).sum()
                          for j in range(FOLDS)) / (n - FOLDS) for r in range(REPEATS)])
    return abs(d.mean()) / math.sqrt(within / n) > stats.norm.ppf(0.975)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=300)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_power_ols"))
    args = parser.parse_args()
    rng = np.random.default_rng(4343)
    start, load = time.time(), os.getloadavg()[0]
    pilot, _ = study(rng, PILOT)
    v = components(pilot)
    rows = []
    for test in ("corrected_t", "wald_cv"):
        n = int(test_sizes(test, v, PILOT, REPEATS, FOLDS, DELTA, 0.05, 0.8)["samples_needed"])
        power = float(np.mean([rejects(test, *study(rng, n)) for _ in range(args.sets)]))
        rows.append({"test": test, "n_planned": n, "sets": args.sets, "power": power,
                     "mc_se": math.sqrt(power * (1 - power) / args.sets)})
        print(rows[-1], flush=True)
    text = "\n".join(["| test | planned n | power (± MC se) |", "|---|---|---|"] + [
        f"| {r['test']} | {r['n_planned']} | {r['power']:.3f} ± {r['mc_se']:.3f} |" for r in rows])
    print(text)
    meta = {"sets": args.sets, "pilot": PILOT, "components": v, "seconds": round(time.time() - start),
            "load_average": round(max(load, os.getloadavg()[0]), 2)}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text(f"{json.dumps(meta)}\n\n{text}\n")


if __name__ == "__main__":
    main()
