"""compare_all's family-wise error with the wald_cv test on a 5 x 1 design, by Monte Carlo.

    PYTHONPATH=. python benchmarks/compare_all_fwer.py [--reps 1000] [--k 5] [--n 200]

k predictors of exactly equal risk (squared loss, y = x + t3 or normal noise, predictions
x + N(0, 0.5²) per param, fixed: no fits), 5-fold x 1 repeat, each data set held in a cube
(:func:`cvflow.testing.cube_from_predictions`) and reduced by ``compare_all(cube, params=all,
test="wald_cv", adjust="holm")`` itself. The family-wise error is the share of data sets with
any pair significant (every null is true); Holm's promise is at most alpha = 0.05. Also
counts the data sets whose result carried a ``skewed_differences`` warning. Writes
benchmarks/results/compare_all_fwer.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from cvflow.estimators import compare_all
from cvflow.testing import cube_from_predictions, simple_design


def one(rng, n: int, k: int, noise: str) -> tuple[bool, bool]:
    x = rng.standard_normal(n)
    e = rng.standard_t(3, n) if noise == "t3" else rng.standard_normal(n)
    y = x + e
    design = simple_design(n, 5, seed=int(rng.integers(1 << 30)))
    pred = np.broadcast_to((x + 0.5 * rng.standard_normal((k, n)))[:, None, :],
                           (k, design.n_splits, n)).copy()
    cube = cube_from_predictions(pred, y, design, loss="squared")
    res = compare_all(cube, params=list(range(k)), test="wald_cv", adjust="holm")
    codes = {w["code"] for w in json.loads(res.attrs.get("warnings", "[]"))}
    return bool(np.asarray(res["significant"].values).any()), "skewed_differences" in codes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    rows = []
    start, load = time.time(), os.getloadavg()[0]
    for noise in ("normal", "t3"):
        rng = np.random.default_rng(7)
        hits = [one(rng, args.n, args.k, noise) for _ in range(args.reps)]
        fwer = float(np.mean([h for h, _ in hits]))
        rows.append({"noise": noise, "reps": args.reps, "k": args.k, "n": args.n,
                     "fwer": fwer, "mc_se": float(np.sqrt(fwer * (1 - fwer) / args.reps)),
                     "skew_warned": float(np.mean([w for _, w in hits]))})
        print(rows[-1], flush=True)
    meta = {"seconds": round(time.time() - start), "load_average": round(max(load, os.getloadavg()[0]), 2)}
    out = Path(__file__).parent / "results" / "compare_all_fwer.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
