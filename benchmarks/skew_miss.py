"""How far the skewed_differences warning's "a side's error" goes: the miss of each side of a
95% normal interval of a mean per-sample loss difference, by Monte Carlo, where that warning
fires (n < 25 skewness², :func:`cvflow.estimators.guardrails.skewed_differences`).

    PYTHONPATH=. python benchmarks/skew_miss.py [--reps 20000]

Fixed predictors (the first-order interval of wald_cv, kfold and corrected_t's per-sample
variance: mean ± 1.96 sd / √n of the n per-sample differences), seeded; the true mean
difference from 2,000,000 draws. Writes benchmarks/results/skew_miss.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from cvflow.estimators.guardrails import SKEWED


def log_loss(y, z):
    return np.where(y, np.logaddexp(0, -z), np.logaddexp(0, z))


def docs_case(rng, shape):
    """log loss, y ~ Bernoulli(σ(3x)): the calibrated σ(3x) minus the over-confident σ(3.75x)."""
    x = rng.standard_normal(shape)
    y = rng.random(shape) < 1 / (1 + np.exp(-3 * x))
    return log_loss(y, 3 * x) - log_loss(y, 3.75 * x)


def steep_case(rng, shape):
    """log loss, y ~ Bernoulli(σ(6x)): the calibrated σ(6x) minus the over-confident σ(9x)."""
    x = rng.standard_normal(shape)
    y = rng.random(shape) < 1 / (1 + np.exp(-6 * x))
    return log_loss(y, 6 * x) - log_loss(y, 9 * x)


def squared_case(rng, shape):
    """squared loss, y = x + t3 noise: x minus x + N(0, 0.5²)."""
    x = rng.standard_normal(shape)
    y = x + rng.standard_t(3, shape)
    return (y - x) ** 2 - (y - x - 0.5 * rng.standard_normal(shape)) ** 2


CASES = {"log loss σ(3x) vs σ(3.75x)": docs_case, "log loss σ(6x) vs σ(9x)": steep_case,
         "squared, t3 noise": squared_case}


def run(func, n: int, reps: int, rng, truth: float) -> dict:
    low = high = warned = low_w = high_w = 0
    for start in range(0, reps, 2000):
        d = func(rng, (min(2000, reps - start), n))
        mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
        half = 1.959964 * sd / np.sqrt(n)
        centred = d - mean[:, None]
        gamma = (centred ** 3).mean(axis=1) / d.std(axis=1) ** 3
        fires = n < SKEWED * gamma ** 2
        above, below = mean - half > truth, mean + half < truth    # truth under / over the interval
        low += below.sum()
        high += above.sum()
        warned += fires.sum()
        low_w += (below & fires).sum()
        high_w += (above & fires).sum()
    return {"n": n, "reps": reps, "miss_low": low / reps, "miss_high": high / reps,
            "warned": warned / reps, "miss_low_warned": low_w / max(warned, 1),
            "miss_high_warned": high_w / max(warned, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "skew_miss"))
    args = parser.parse_args()
    rng = np.random.default_rng(43)
    start, load = time.time(), os.getloadavg()[0]
    rows = []
    for name, func in CASES.items():
        truth = float(np.mean([func(rng, 1_000_000).mean() for _ in range(2)]))
        for n in (50, 100, 200, 500):
            rows.append({"case": name, "truth": truth, **run(func, n, args.reps, rng, truth)})
            print(rows[-1], flush=True)
    lines = ["| case | n | warned | miss below (all / warned) | miss above (all / warned) |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['n']} | {100 * r['warned']:.0f}% | "
                     f"{100 * r['miss_low']:.1f}% / {100 * r['miss_low_warned']:.1f}% | "
                     f"{100 * r['miss_high']:.1f}% / {100 * r['miss_high_warned']:.1f}% |")
    text = "\n".join(lines)
    print(text)
    meta = {"reps": args.reps, "seconds": round(time.time() - start),
            "load_average": round(max(load, os.getloadavg()[0]), 2)}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text(f"{json.dumps(meta)}\n\n{text}\n")


if __name__ == "__main__":
    main()
