"""Racing's promise by Monte Carlo: P(a truly best or equal-best param is dropped), fits saved, and
agreement with the unraced choice, for the rule of :func:`cvflow.execution.race_runner.look` against
the rule it replaced (a normal z-test at the same Bonferroni level).

    PYTHONPATH=. python benchmarks/racing_validity.py [--reps 2000] [--quick] [--case NAME]

No fits: each case draws the out-of-fold losses (param, repeat, sample) of fixed predictors
(a small per-repeat perturbation stands in for the fold models' variation where noted), and
races them stage by stage exactly as a run does (:func:`cvflow.execution.race_runner.plan_stages`,
:meth:`cvflow.execution.race_runner.Race.look`), on a 5 folds x 3 repeats design with a full fit
(7 looks), alpha 0.05. ``--quick`` runs 300 data sets per row. Writes
benchmarks/results/racing_validity.{json,md}.

Columns: ``best dropped`` the share of data sets in which any param of lowest true risk was
dropped (the promise: at most alpha) with its Monte Carlo standard error; ``saved`` the share
of the fold fits not run; ``agree`` the share in which the raced choice (lowest mean
out-of-fold loss among the survivors) is the unraced one (among all params).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scipy.stats import norm

from cvflow.execution.race_runner import Race, paired_z, threshold

FOLDS, REPEATS, ALPHA = 5, 3, 0.05


def design(n: int, rng, fold_shares=None, groups=None) -> np.ndarray:
    """Fold labels (repeat, sample): shuffled equal folds, folds of the given shares, or whole
    groups dealt to folds at random (a grouped design)."""
    out = []
    for _ in range(REPEATS):
        if groups is not None:
            g = rng.permutation(groups.max() + 1) % FOLDS
            out.append(g[groups])
        elif fold_shares is not None:
            sizes = np.floor(np.asarray(fold_shares) * n).astype(int)
            sizes[-1] += n - sizes.sum()
            out.append(rng.permutation(np.repeat(np.arange(FOLDS), sizes)))
        else:
            out.append(rng.permutation(np.arange(n) % FOLDS))
    return np.stack(out)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def log_loss(y, z):
    """-log p(y) of the logit z (stable)."""
    return np.where(y, np.logaddexp(0, -z), np.logaddexp(0, z))


def repeat(losses: np.ndarray) -> np.ndarray:
    """(param, sample) -> (param, repeat, sample): fixed predictors, the same every repeat."""
    return np.repeat(losses[:, None, :], REPEATS, axis=1)


# --- the cases: (losses (param, repeat, sample), fold labels, units, best params) ----------------

def case_log_loss(rng, n):
    """The issue's case: y ~ Bernoulli(σ(3x)), the calibrated σ(3x) against σ(3.75x)."""
    x = rng.standard_normal(n)
    y = rng.random(n) < sigmoid(3 * x)
    return repeat(np.stack([log_loss(y, 3 * x), log_loss(y, 3.75 * x)])), design(n, rng), None, [0]


def case_log_loss_rare(rng, n):
    """A rival with rare large losses: calibrated except for |x| > 2 (5% of samples), where it
    is certain of the likelier class (probabilities clipped to 1e-12: a loss of 27.6 when wrong)."""
    x = rng.standard_normal(n)
    y = rng.random(n) < sigmoid(3 * x)
    z_rival = np.where(np.abs(x) > 2, np.sign(x) * 27.6, 3 * x)
    return repeat(np.stack([log_loss(y, 3 * x), log_loss(y, z_rival)])), design(n, rng), None, [0]


def case_zero_one_tie(rng, n, k=5):
    """k classifiers each wrong with probability 0.3 on a sample, independently; each repeat's
    fold models flip 10% of their errors (equal risk: 0.3 x 0.9 + 0.7 x 0.1 = 0.34)."""
    base = rng.random((k, 1, n)) < 0.3
    flip = rng.random((k, REPEATS, n)) < 0.1
    return (base ^ flip) * 1.0, design(n, rng), None, list(range(k))


def case_brier_tie(rng, n, k=5):
    """k probability forecasts σ(3x + e), e ~ N(0, 1) per param and sample (equal risk)."""
    x = rng.standard_normal(n)
    y = rng.random(n) < sigmoid(3 * x)
    p = sigmoid(3 * x + rng.standard_normal((k, REPEATS, n)) * 0.3 + rng.standard_normal((k, 1, n)))
    return (y - p) ** 2, design(n, rng), None, list(range(k))


def _squared_tie(rng, n, k, folds, groups=None):
    x = rng.standard_normal(n)
    y = x + rng.standard_t(3, n)
    shift = 0.0 if groups is None else rng.standard_normal((k, 1, groups.max() + 1))[..., groups] * 0.5
    pred = x + shift + 0.5 * rng.standard_normal((k, 1, n)) + 0.1 * rng.standard_normal((k, REPEATS, n))
    return (y - pred) ** 2, folds


def case_squared_t3_tie(rng, n, k=5):
    """Squared loss, y = x + t3 noise; k predictors x + N(0, 0.5²) (+ 0.1 per repeat): equal risk."""
    losses, folds = _squared_tie(rng, n, k, design(n, rng))
    return losses, folds, None, list(range(k))


def case_unequal_folds(rng, n, k=5):
    """The squared t3 tie on folds of 10%, 15%, 20%, 25% and 30% of the samples."""
    losses, folds = _squared_tie(rng, n, k, design(n, rng, fold_shares=[.1, .15, .2, .25, .3]))
    return losses, folds, None, list(range(k))


def case_grouped(rng, n, k=5):
    """The squared t3 tie with a per-group error of each predictor, groups of 2-10 samples dealt
    whole to folds; the groups are the units."""
    sizes = rng.integers(2, 11, size=n)
    groups = np.repeat(np.arange(n), sizes)[:n]
    losses, folds = _squared_tie(rng, n, k, design(n, rng, groups=groups), groups)
    return losses, folds, groups, list(range(k))


def case_clear_best(rng, n, k=5):
    """Savings: squared loss, y = x + N(0, 1); predictors c·x, c = 1, 0.8, 0.5, 0.2, 0."""
    x = rng.standard_normal(n)
    y = x + rng.standard_normal(n)
    c = np.array([1.0, 0.8, 0.5, 0.2, 0.0])[:k]
    pred = c[:, None, None] * x + 0.05 * rng.standard_normal((k, REPEATS, n))
    return (y - pred) ** 2, design(n, rng), None, [0]


def case_zero_one_clear(rng, n):
    """Savings, bounded: classifiers wrong with probability 0.15, 0.25, 0.35, 0.45, 0.5."""
    wrong = rng.random((5, 1, n)) < np.array([0.15, 0.25, 0.35, 0.45, 0.5])[:, None, None]
    return np.repeat(wrong * 1.0, REPEATS, axis=1), design(n, rng), None, [0]


CASES = {   # name: (function, n, bounds of the loss as the race knows them)
    "log_loss n=100": (case_log_loss, 100, None),
    "log_loss n=200": (case_log_loss, 200, None),
    "log_loss n=500": (case_log_loss, 500, None),
    "log_loss rare large losses n=200": (case_log_loss_rare, 200, None),
    "log_loss rare large, loss_range [0, 27.7] n=200": (case_log_loss_rare, 200, (0.0, 27.7)),
    "zero_one tie (k=5) n=200": (case_zero_one_tie, 200, (0.0, 1.0)),
    "brier tie (k=5) n=200": (case_brier_tie, 200, (0.0, 2.0)),
    "squared t3 tie (k=5) n=200": (case_squared_t3_tie, 200, None),
    "unequal folds, squared t3 tie n=200": (case_unequal_folds, 200, None),
    "grouped (600 samples, ~100 groups), squared t3 tie": (case_grouped, 600, None),
    "clear best, squared (k=5) n=200": (case_clear_best, 200, None),
    "clear best, zero_one (k=5) n=200": (case_zero_one_clear, 200, (0.0, 1.0)),
}


# --- the race of one data set --------------------------------------------------------------------

def old_look(losses, alive, *, alpha, k, looks, units=None, min_units=30, bounds=None):
    """The rule before issue 33 (for comparison only): one-sided z-test of the pooled mean
    difference (cvflow's paired_z), normal tail, the same Bonferroni threshold."""
    seen = np.isfinite(losses)
    count = seen.sum(axis=(1, 2))
    means = np.where(count > 0, np.nansum(losses, axis=(1, 2)) / np.maximum(count, 1), np.nan)
    cand = np.flatnonzero(alive & np.isfinite(means))
    if len(cand) < 2:
        return []
    leader = int(cand[np.argmin(means[cand])])
    out = []
    for h in cand:
        if h == leader:
            continue
        mean, se, m = paired_z(losses[h] - losses[leader], units)
        p = norm.sf(mean / se) if se > 0 else float(mean <= 0)
        if m >= min_units and p <= threshold(alpha, k, looks):
            out.append({"param": int(h), "leader": leader})
    return out


def race_one(losses, fold, units, bounds, rule: str):
    """(dropped params, fold fits not run) of one data set raced as a run races it."""
    k = losses.shape[0]
    table = 1 + np.arange(REPEATS * FOLDS).reshape(REPEATS, FOLDS)
    race = Race.start({"alpha": ALPHA, "stages": "auto", "min_units": 30},
                      SimpleNamespace(fold_split=table, n_splits=1 + REPEATS * FOLDS), k)
    race.bounds = bounds
    seen = np.full_like(losses, np.nan)
    skipped = 0
    for s, stage in enumerate(race.stages[:-1]):
        alive = race.alive
        skipped += int((~alive).sum()) * len(stage.folds)
        for r, j in stage.folds:
            members = np.flatnonzero(fold[r] == j)
            seen[np.ix_(alive, [r], members)] = losses[alive][:, [r]][:, :, members]
        if rule == "new":
            race.look(s, seen, units)
        else:
            for d in old_look(seen, race.alive, alpha=ALPHA, k=k, looks=race.looks, units=units):
                race.dropped[d["param"]] = d
    return sorted(race.dropped), skipped


def run_case(name: str, reps: int, seed: int) -> dict:
    func, n, bounds = CASES[name]
    rng = np.random.default_rng(seed)
    row: dict = {"case": name, "reps": reps, "doc": (func.__doc__ or "").split("\n")[0]}
    counts = {rule: [0, 0, 0] for rule in ("new", "old")}    # best dropped, skipped, agree
    total_fits = 0
    for _ in range(reps):
        losses, fold, units, best = func(rng, n)
        total_fits += losses.shape[0] * REPEATS * FOLDS
        full_means = np.nanmean(losses, axis=(1, 2))
        choice = int(np.argmin(full_means))
        for rule in counts:
            gone, skipped = race_one(losses, fold, units, bounds, rule)
            survivors = np.setdiff1d(np.arange(losses.shape[0]), gone)
            raced = int(survivors[np.argmin(full_means[survivors])])
            counts[rule][0] += bool(np.isin(gone, best).any())
            counts[rule][1] += skipped
            counts[rule][2] += raced == choice
    for rule, (bad, skipped, agree) in counts.items():
        p = bad / reps
        row[rule] = {"best_dropped": p, "mc_se": float(np.sqrt(max(p * (1 - p), 1 / reps) / reps)),
                     "saved": skipped / total_fits, "agree": agree / reps}
    return row


def table(rows: list[dict]) -> str:
    lines = ["| case | rule | best dropped (± MC se) | fits saved | raced = unraced |",
             "|---|---|---|---|---|"]
    for row in rows:
        for rule, label in (("new", "now"), ("old", "before")):
            r = row[rule]
            lines.append(f"| {row['case']} | {label} | {100 * r['best_dropped']:.2f}% ± "
                         f"{100 * r['mc_se']:.2f}% | {100 * r['saved']:.0f}% | "
                         f"{100 * r['agree']:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="300 data sets per row")
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "racing_validity"))
    args = parser.parse_args()
    reps = 300 if args.quick else args.reps
    rows = []
    start, load = time.time(), os.getloadavg()[0]
    for i, name in enumerate(args.case or list(CASES)):
        t = time.time()
        rows.append(run_case(name, reps, args.seed + i))
        print(f"{name}: now {rows[-1]['new']}, before {rows[-1]['old']} ({time.time() - t:.0f}s)",
              flush=True)
    load = max(load, os.getloadavg()[0])
    text = table(rows)
    print(text)
    meta = {"reps": reps, "alpha": ALPHA, "design": f"{FOLDS} folds x {REPEATS} repeats, 7 looks",
            "seconds": round(time.time() - start), "load_average": round(load, 2)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    Path(args.out + ".md").write_text(f"{json.dumps(meta)}\n\n{text}\n")


if __name__ == "__main__":
    main()
