"""Aghbalou, Portier & Sabourin, Section 7, over many random splits: model selection by the plain
K-fold versus the bias-corrected K-fold, scored on held-out data.

Split s runs the workflow (default: the ``concrete_k5`` data set of ``workflows/aghbalou.yaml``,
``--dataset`` names another of a suite's: SVR with a sigmoid kernel over a C grid, one third
held out) once per K with ``data.seed: s`` (a new held-out third) and
``design: {folds: K, seed: s}`` (a new fold draw), and reduces it with
``corrected_kfold``: the test risk of the full fit of the param each criterion selects, and
the best test risk over the grid (an oracle). Per K the table pairs the two criteria split by
split: how often the corrected choice tests lower / the same (same C) / higher, and the mean
paired gain (K-fold choice's test risk − corrected choice's) with its standard error.

Each (split, K) record is cached as ``<results>/k<K>/s<split>.json``: stop and resume at will,
or add splits later. ``--grid N`` replaces the workflow's C grid by N log-spaced values on the
same interval (a coarser grid costs proportionally fewer fits).

Run: python workflows/studies/aghbalou_splits.py [--splits 50 --folds 2 3 4 5 --workers 2
     --grid 41 --results /tmp/aghbalou_splits --no-run --json FILE --dataset concrete_k5] [WORKFLOW]
"""
from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import yaml
from cvflow.workflow.suite import entry_config
from splitstudy import Job, add_run_options, mean_se, run_all, shares

HERE = Path(__file__).resolve().parent


def config(base: dict, where: Path, split: int, folds: int, grid: int | None) -> dict:
    """The workflow of one (split, K): the base workflow with its seeds and K replaced."""
    c = copy.deepcopy(base)
    c["name"] = f"{c.get('name', 'aghbalou')}_k{folds}_s{split}"
    c["data"]["seed"] = split
    if "path" in c["data"]:
        c["data"]["path"] = str((where.parent / c["data"]["path"]).resolve())
    c["design"] = {**c.get("design", {}), "folds": folds, "seed": split}
    if grid:
        c["learners"][0]["grid"]["C"] = {"logspace": [*c["learners"][0]["grid"]["C"]["logspace"][:2],
                                                      grid]}
    # DESIGN CHOICE: one task per run (workers run whole splits side by side)
    c["execution"] = {**c.get("execution", {}), "fits_per_task": 100_000, "cluster": "threads"}
    return c


def reduce(cube) -> dict:
    """One (split, K)'s numbers from its cube."""
    from cvflow.estimators import corrected_kfold

    res = corrected_kfold(cube)
    c = res["C"].values
    risk = res["full_test_risk"].values                 # per param
    kf, corr = int(res["kfold_selected"]), int(res["selected"])
    best = int(np.nanargmin(risk))
    return {"kfold_C": float(c[kf]), "kfold_test_risk": float(risk[kf]),
            "corrected_C": float(c[corr]), "corrected_test_risk": float(risk[corr]),
            "best_C": float(c[best]), "best_test_risk": float(risk[best]),
            "loss": res.attrs["loss"]}


def summarise(rows: dict[int, list[dict]]) -> dict:
    out = {}
    for k, rs in rows.items():
        if len(rs) < 2:
            continue
        a = np.array([r["kfold_test_risk"] for r in rs])
        b = np.array([r["corrected_test_risk"] for r in rs])
        best = np.array([r["best_test_risk"] for r in rs])
        lower, same, higher = shares(b, a)
        out[k] = {"splits": len(rs), "loss": rs[0]["loss"], "corrected_lower": lower,
                  "same": same, "corrected_higher": higher,
                  "kfold_test_risk": mean_se(a), "corrected_test_risk": mean_se(b),
                  "gain": mean_se(a - b), "relative_gain": mean_se((a - b) / a),
                  "kfold_regret": mean_se(a - best), "corrected_regret": mean_se(b - best),
                  "best_test_risk": mean_se(best),
                  "kfold_C_median": float(np.median([r["kfold_C"] for r in rs])),
                  "corrected_C_median": float(np.median([r["corrected_C"] for r in rs]))}
    return out


def report(summary: dict) -> str:
    def ms(v, digits=2):
        return f"{v[0]:.{digits}f} ± {v[1]:.{digits}f}"

    lines = ["| K | splits | corrected lower / same / higher | K-fold choice: test risk | "
             "corrected choice: test risk | paired gain ± se | relative gain | "
             "excess over best: K-fold | corrected | median C: K-fold / corrected |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k, m in summary.items():
        rel = m["relative_gain"]
        lines.append(
            f"| {k} | {m['splits']} | {100 * m['corrected_lower']:.0f} / {100 * m['same']:.0f} / "
            f"{100 * m['corrected_higher']:.0f}% | {ms(m['kfold_test_risk'])} | "
            f"{ms(m['corrected_test_risk'])} | {ms(m['gain'])} | "
            f"{100 * rel[0]:+.1f}% ± {100 * rel[1]:.1f} | {ms(m['kfold_regret'])} | "
            f"{ms(m['corrected_regret'])} | {m['kfold_C_median']:.3g} / "
            f"{m['corrected_C_median']:.3g} |")
    lines.append("")
    lines.append("paired gain = test risk of the K-fold choice − test risk of the corrected "
                 "choice (positive: the corrected choice is better); ± one standard error over "
                 "splits.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workflow", nargs="?", type=Path, default=HERE.parent / "aghbalou.yaml")
    ap.add_argument("--dataset", default="concrete_k5", help="the suite's data set to study")
    ap.add_argument("--splits", type=int, default=50)
    ap.add_argument("--folds", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--grid", type=int, default=None,
                    help="N log-spaced C values on the workflow's interval (default: its grid)")
    add_run_options(ap, Path("/tmp/aghbalou_splits"), "--grid")
    a = ap.parse_args(argv)
    base = yaml.safe_load(a.workflow.read_text())
    if isinstance(base.get("data"), list):            # a suite: one of its data sets
        base = entry_config(a.workflow, a.dataset)
    t = time.perf_counter()
    jobs = [Job(a.results / f"k{k}", f"s{s:03d}", config(base, a.workflow, s, k, a.grid), reduce)
            for s in range(a.splits) for k in a.folds]
    rows: dict[int, list] = {k: [] for k in a.folds}
    for job, record in zip(jobs, run_all(jobs, workers=a.workers, run=not a.no_run)):
        if record is not None:
            rows[int(job.results.name[1:])].append(record)
    summary = summarise(rows)
    print(f"{a.workflow.name}: plain vs bias-corrected K-fold selection, up to {a.splits} random "
          f"test splits and fold draws, C grid {a.grid or 'as in the workflow'}; "
          f"{time.perf_counter() - t:.0f} s")
    print()
    print(report(summary))
    if a.json:
        a.json.write_text(json.dumps({str(k): v for k, v in summary.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
