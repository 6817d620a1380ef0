"""The racing rule keeps its promise: P(a truly best param is ever dropped) <= alpha.

Simulated studies of real cross-validated fits with correlated folds and repeats: k one-feature
least-squares learners on exchangeable features (so every param has exactly the same expected
risk), each replicate fitted by K-fold x R repeats and raced stage by stage with the library's
own stages (:func:`cvflow.execution.race_runner.plan_stages`) and rule (:meth:`cvflow.execution.race_runner.Race.look`).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cvflow.execution.race_runner import Race, look
from cvflow.workflow.racing_options import check_options

FOLDS, REPEATS = 5, 3


def _design() -> SimpleNamespace:
    """The role table of a K-fold x R design: split 1 + r*K + j is fold j of repeat r (0: full)."""
    table = 1 + np.arange(REPEATS * FOLDS).reshape(REPEATS, FOLDS)
    return SimpleNamespace(fold_split=table, n_splits=1 + REPEATS * FOLDS)


def simulate(rng, n: int, coef: np.ndarray, noise: float = 1.0):
    """Out-of-fold squared losses (param, repeat, sample) of k one-feature OLS learners (param
    h regresses y on feature h with an intercept), K-fold x R repeats on one fresh data set;
    and the fold labels (repeat, sample)."""
    k = len(coef)
    X = rng.standard_normal((n, k))
    y = X @ coef + noise * rng.standard_normal(n)
    losses = np.empty((k, REPEATS, n))
    fold = np.stack([rng.permutation(np.arange(n) % FOLDS) for _ in range(REPEATS)])
    for r in range(REPEATS):
        for j in range(FOLDS):
            test, train = fold[r] == j, fold[r] != j
            xm, ym = X[train].mean(0), y[train].mean()
            xc, yc = X[train] - xm, y[train] - ym
            slope = (xc * yc[:, None]).sum(0) / (xc ** 2).sum(0)          # (k,)
            pred = ym + (X[test] - xm) * slope                               # (n_test, k)
            losses[:, r, test] = ((y[test][:, None] - pred) ** 2).T
    return losses, fold


def race(losses: np.ndarray, fold: np.ndarray, options: dict, naive: bool = False) -> Race:
    """Race one replicate as a run does: after each stage but the last, a look on the
    out-of-fold losses of the folds fitted so far (only the survivors' are fitted).
    ``naive``: each comparison at level alpha, no correction (what the rule must not be)."""
    r_ = Race.start(options, _design(), losses.shape[0])
    seen = np.full_like(losses, np.nan)
    for s, stage in enumerate(r_.stages[:-1]):
        alive = r_.alive
        for r, j in stage.folds:
            seen[np.ix_(alive, [r], np.flatnonzero(fold[r] == j))] = \
                losses[alive][:, [r]][:, :, fold[r] == j]
        if naive:
            for d in look(seen, r_.alive, alpha=2 * options["alpha"], k=2, looks=1):
                r_.dropped[d["param"]] = d
        else:
            r_.look(s, seen, None)
    return r_


def drop_rate(k: int, coef: np.ndarray, options: dict, reps: int, seed: int, n: int = 200,
              naive: bool = False) -> tuple[float, np.ndarray]:
    """Share of replicates dropping any of the params ``best`` (the first ones of equal,
    lowest risk), and how often each param was dropped."""
    rng = np.random.default_rng(seed)
    dropped = np.zeros(k)
    any_best = 0
    best = np.flatnonzero(np.isclose(np.abs(coef), np.abs(coef).max()))
    for _ in range(reps):
        losses, fold = simulate(rng, n, coef)
        out = race(losses, fold, options, naive)
        gone = np.array(sorted(out.dropped), dtype=int)
        dropped[gone] += 1
        any_best += bool(np.isin(gone, best).any())
    return any_best / reps, dropped / reps


def mc_bound(alpha: float, reps: int) -> float:
    """alpha plus three Monte Carlo standard errors."""
    return alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 5, 10])
def test_equal_risk_params_are_dropped_at_most_alpha(k):
    """k params of exactly equal expected risk: P(any is ever dropped) <= alpha (MC error)."""
    alpha, reps = 0.05, 600
    rate, _ = drop_rate(k, np.full(k, 0.5), check_options({"alpha": alpha, "stages": "folds"}),
                        reps, seed=k)
    assert rate <= mc_bound(alpha, reps), rate


@pytest.mark.slow
def test_the_harness_sees_an_uncorrected_rule_fail():
    """The simulation can fail: the same race with each comparison at level 0.05 and no
    correction for the pairs and looks drops a param of equal risk far more often than 0.05."""
    rate, _ = drop_rate(5, np.full(5, 0.5), check_options({"alpha": 0.05, "stages": "folds"}),
                        300, seed=1, naive=True)
    assert rate > mc_bound(0.05, 300), rate


@pytest.mark.slow
def test_a_clear_best_is_kept_and_hopeless_params_dropped():
    """One clearly best param (its feature carries the signal) is kept in >= 1 - alpha of the
    replicates, and the params without signal are dropped in most of them."""
    coef = np.array([1.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    alpha, reps = 0.05, 300
    rate, dropped = drop_rate(6, coef, check_options({"alpha": alpha}), reps, seed=7)
    assert rate <= mc_bound(alpha, reps)
    assert dropped[0] == 0
    assert dropped[1:].min() > 0.9, dropped


def test_one_replicate_drops_the_hopeless_only():
    """Fast: one simulated study with one signal feature drops the others, keeps the best."""
    rng = np.random.default_rng(3)
    losses, fold = simulate(rng, 300, np.array([2.0, 0.0, 0.0]))
    out = race(losses, fold, check_options({"alpha": 0.05}))
    assert sorted(out.dropped) == [1, 2]
    assert all(d["leader"] == 0 for d in out.dropped.values())
