"""Racing on classification losses by Monte Carlo: P(a truly best or equal-best param is dropped)
and fits saved, for the rule racing uses on a classification loss without a range (the betting
test on each unit's range over the labels, with the t-test: :func:`cvflow.execution.race_runner.look`'s
``by_label``) against the t-test alone (the rule before issue 43) and the ranges' betting test
alone (what issue 43 proposed).

    PYTHONPATH=. python benchmarks/racing_classification.py [--reps 2000] [--case NAME]

No fits, as benchmarks/racing_validity.py: each case draws fixed predictors' logits, the labels
from the true logit, and the losses at the drawn label and at every label (param, repeat, sample,
label), then races them stage by stage as a run does (:meth:`cvflow.execution.race_runner.Race.look`),
5 folds x 3 repeats with a full fit (7 looks), alpha 0.05. Writes
benchmarks/results/racing_classification.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scipy.special import logsumexp

from cvflow.execution.race_runner import Race

FOLDS, REPEATS, ALPHA = 5, 3, 0.05
RULES = {"labels": "now: ranges' betting and t", "t": "before: t-test",
         "ranges": "ranges' betting alone", "zero_one": "zero_one, betting [0, 1]"}


def design(n: int, rng) -> np.ndarray:
    return np.stack([rng.permutation(np.arange(n) % FOLDS) for _ in range(REPEATS)])


def binary(rng, x_true, logits, jitter=0.0):
    """Losses (param, repeat, sample), at every label (..., 2) and zero_one (param, repeat,
    sample) of binary logits (param, sample); y ~ Bernoulli(σ(x_true))."""
    n = len(x_true)
    y = rng.random(n) < 1 / (1 + np.exp(-x_true))
    z = logits[:, None, :] + jitter * rng.standard_normal((len(logits), REPEATS, n))
    every = np.stack([np.logaddexp(0, z), np.logaddexp(0, -z)], axis=-1)   # label 0, label 1
    lost = np.where(y, every[..., 1], every[..., 0])
    wrong = ((z > 0) != y) * 1.0
    return lost, every, wrong


def case_docs(rng, n):
    """The docs' case: y ~ Bernoulli(σ(3x)), x ~ N(0, 1), the calibrated σ(3x) against σ(3.75x)."""
    x = rng.standard_normal(n)
    return binary(rng, 3 * x, np.stack([3 * x, 3.75 * x])) + ([0],)


def case_steep(rng, n):
    """Steeper true logits: y ~ Bernoulli(σ(6x)), the calibrated σ(6x) against the
    over-confident σ(9x)."""
    x = rng.standard_normal(n)
    return binary(rng, 6 * x, np.stack([6 * x, 9 * x])) + ([0],)


def case_multiclass(rng, n):
    """Three classes: true logits 2.5·(x1, x2, 0), x ~ N(0, I); the calibrated model against one
    1.6 times as confident and one at 0.6 times (k = 3)."""
    x = rng.standard_normal((n, 2))
    true = 2.5 * np.column_stack([x, np.zeros(n)])
    p = np.exp(true - logsumexp(true, axis=1, keepdims=True))
    y = (rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1)
    z = np.stack([true, 1.6 * true, 0.6 * true])[:, None].repeat(REPEATS, axis=1)
    every = logsumexp(z, axis=-1, keepdims=True) - z                      # (param, rep, n, C)
    lost = np.take_along_axis(every, y[None, None, :, None], axis=-1)[..., 0]
    wrong = (z.argmax(axis=-1) != y) * 1.0
    return lost, every, wrong, [0]


def case_trade_off(rng, n):
    """Equal risk, traded between regions: x = 0 in 88.45% of samples, where h predicts 0.9 and
    g 0.5 for a truth of 0.5; x = 1 elsewhere, where h predicts 0.5 and g 0.9999 (truth 0.5).
    Both params are best (equal log-loss risk), but h is better only where their predictions
    differ the most, the range over the labels is widest, and the ranges' betting test weighs a
    unit least."""
    x = rng.random(n) < 0.1155
    logit = lambda p: np.log(p / (1 - p))                                   # noqa: E731
    h = np.where(x, 0.0, logit(0.9))
    g = np.where(x, logit(0.9999), 0.0)
    return binary(rng, np.zeros(n), np.stack([h, g])) + ([0, 1],)


def case_clear(rng, n):
    """Savings: y ~ Bernoulli(σ(3x)); params 3(x + e), e ~ N(0, s²) per sample, s = 0, 0.5, 1,
    2, and the constant 0 (k = 5)."""
    x = rng.standard_normal(n)
    s = np.array([0.0, 0.5, 1.0, 2.0])
    logits = np.vstack([3 * (x + s[:, None] * rng.standard_normal((4, n))), np.zeros((1, n))])
    return binary(rng, 3 * x, logits) + ([0],)


CASES = {f"docs' log loss n={n}": (case_docs, n) for n in (100, 150, 200, 500)}
CASES.update({f"steeper logits n={n}": (case_steep, n) for n in (100, 150, 200, 500)})
CASES.update({f"multiclass (3 classes, k=3) n={n}": (case_multiclass, n) for n in (100, 150, 200, 500)})
CASES["equal risk traded between regions n=150"] = (case_trade_off, 150)
CASES["clear best (k=5) n=200"] = (case_clear, 200)


def race_one(losses, every, fold, rule: str):
    """(dropped params, fold fits not run) of one data set raced as a run races it."""
    k = losses.shape[0]
    table = 1 + np.arange(REPEATS * FOLDS).reshape(REPEATS, FOLDS)
    race = Race.start({"alpha": ALPHA, "stages": "auto", "min_units": 30},
                      SimpleNamespace(fold_split=table, n_splits=1 + REPEATS * FOLDS), k)
    race.labelled = rule in ("labels", "ranges")
    race.bounds = (0.0, 1.0) if rule == "zero_one" else None
    seen = np.full_like(losses, np.nan)
    seen_every = np.full_like(every, np.nan)
    skipped = 0
    for s, stage in enumerate(race.stages[:-1]):
        alive = race.alive
        skipped += int((~alive).sum()) * len(stage.folds)
        for r, j in stage.folds:
            members = np.flatnonzero(fold[r] == j)
            seen[np.ix_(alive, [r], members)] = losses[alive][:, [r]][:, :, members]
            seen_every[np.ix_(alive, [r], members)] = every[alive][:, [r]][:, :, members]
        if rule == "ranges":
            race.cut_t = lambda s: 1.0                                      # type: ignore
        race.look(s, seen, None, seen_every)
    return sorted(race.dropped), skipped


def run_case(name: str, reps: int, seed: int, rules) -> dict:
    func, n = CASES[name]
    rng = np.random.default_rng(seed)
    row: dict = {"case": name, "reps": reps, "doc": (func.__doc__ or "").split("\n")[0]}
    counts = {rule: [0, 0] for rule in rules}
    total = 0
    for _ in range(reps):
        lost, every, wrong, best = func(rng, n)
        fold = design(n, rng)
        total += lost.shape[0] * REPEATS * FOLDS
        for rule in rules:
            losses = wrong if rule == "zero_one" else lost
            gone, skipped = race_one(losses, every, fold, rule)
            counts[rule][0] += bool(np.isin(gone, best).any())
            counts[rule][1] += skipped
    for rule, (bad, skipped) in counts.items():
        p = bad / reps
        row[rule] = {"best_dropped": p, "mc_se": float(np.sqrt(max(p * (1 - p), 1 / reps) / reps)),
                     "saved": skipped / total}
    return row


def table(rows: list[dict]) -> str:
    lines = ["| case | rule | best dropped (± MC se) | fits saved |", "|---|---|---|---|"]
    for row in rows:
        for rule, label in RULES.items():
            if rule in row:
                r = row[rule]
                lines.append(f"| {row['case']} | {label} | {100 * r['best_dropped']:.2f}% ± "
                             f"{100 * r['mc_se']:.2f}% | {100 * r['saved']:.0f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"
                                             / "racing_classification"))
    args = parser.parse_args()
    rows = []
    start, load = time.time(), os.getloadavg()[0]
    for i, name in enumerate(args.case or list(CASES)):
        t = time.time()
        rules = ["labels", "t", "ranges"] + (["zero_one"] if name.startswith("clear") else [])
        rows.append(run_case(name, args.reps, args.seed + i, rules))
        print(name, {r: rows[-1][r] for r in rules}, f"({time.time() - t:.0f}s)", flush=True)
    load = max(load, os.getloadavg()[0])
    text = table(rows)
    print(text)
    meta = {"reps": args.reps, "alpha": ALPHA, "design": f"{FOLDS} folds x {REPEATS} repeats, 7 looks",
            "seconds": round(time.time() - start), "load_average": round(load, 2)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text(f"{json.dumps(meta)}\n\n{text}\n")


if __name__ == "__main__":
    main()
