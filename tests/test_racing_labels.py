"""Racing on a classification loss without a range (issue 43): each unit's range over the labels
by brute force, the betting test on it by hand and at its level by simulation of fixed
predictors, its failure alone on equal-risk params that trade off between regions (which the
t-test beside it catches), and the alpha a race spends when a loss leaves its loss_range."""
from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest

from cvflow.errors import RacingWarning
from cvflow.execution.race_runner import Race, look, threshold
from cvflow.execution.racing_rule import (BETS, label_range_p, label_ranges, skew_corrected_p,
                                          unit_means)

FOLDS, REPEATS = 5, 3


def _design():
    table = 1 + np.arange(REPEATS * FOLDS).reshape(REPEATS, FOLDS)
    return SimpleNamespace(fold_split=table, n_splits=1 + REPEATS * FOLDS)


def test_label_ranges_are_the_least_and_largest_unit_means_over_every_labelling():
    """Brute force: every assignment of a label to each sample (the same label in every
    repeat), the units' means (unit_means) of the differences at those labels; their least and
    largest per unit are label_ranges'. Samples, then groups; some fits not seen."""
    rng = np.random.default_rng(0)
    n, labels = 6, 3
    d = rng.normal(size=(2, n, labels))
    d[1, 2] = np.nan                                   # sample 2 seen in repeat 0 only
    d[:, 4] = np.nan                                   # sample 4 never seen
    for units in (None, np.array([3, 3, 1, 1, 1, 8])):
        low, high = label_ranges(d, units)
        means = np.array([unit_means(np.take_along_axis(d, np.array(y)[None, :, None],
                                                        axis=-1)[..., 0], units)
                          for y in itertools.product(range(labels), repeat=n)])
        np.testing.assert_allclose(low, means.min(axis=0), atol=1e-12)
        np.testing.assert_allclose(high, means.max(axis=0), atol=1e-12)


def test_label_range_p_by_hand():
    """x_u scaled by max(|low_u|, |high_u|), 0 where the range is 0; K the mean over the 7 bets
    of the products; p = 1/K (at most 1)."""
    x = np.array([0.5, -1.0, 2.0, 0.0])
    low = np.array([-2.0, -4.0, -1.0, 0.0])
    high = np.array([1.0, 1.0, 2.0, 0.0])
    scaled = [0.25, -0.25, 1.0, 0.0]
    wealth = np.mean([np.prod([1 + lam * s for s in scaled]) for lam in BETS])
    assert label_range_p(x, low, high) == pytest.approx(min(1.0, 1 / wealth), rel=1e-12)
    assert label_range_p(np.full(40, 1.0), np.full(40, -1.0), np.full(40, 1.0)) == pytest.approx(
        1 / np.mean([(1 + lam) ** 40 for lam in BETS]))


def _log_losses(rng, n, true, logits):
    """Binary log loss at the drawn label and at both labels, fixed predictors (param, sample)."""
    y = rng.random(n) < 1 / (1 + np.exp(-true))
    every = np.stack([np.logaddexp(0, logits), np.logaddexp(0, -logits)], axis=-1)
    return np.where(y, every[..., 1], every[..., 0]), every


def test_label_range_p_is_valid_at_its_level_when_the_best_is_calibrated():
    """Steep true logits 6x; the calibrated predictor against an over-confident 9x, 60 units:
    P(p ≤ δ) ≤ δ = 0.01 for the calibrated one (known truth: it is no worse at every x), where the
    t-test alone is liberal (its Monte Carlo rate over δ)."""
    rng = np.random.default_rng(43)
    reps, delta = 2000, 0.01
    bet = t = 0
    for _ in range(reps):
        x = rng.standard_normal(60)
        lost, every = _log_losses(rng, 60, 6 * x, np.stack([6 * x, 9 * x]))
        d = lost[0] - lost[1]
        low, high = label_ranges((every[0] - every[1])[None])
        bet += label_range_p(d, low, high) <= delta
        t += skew_corrected_p(d, guard=False) <= delta
    se = np.sqrt(delta * (1 - delta) / reps)
    assert bet / reps <= delta + 3 * se
    assert t / reps > delta + 3 * se                  # the harness can fail: the t-test does


def test_the_ranges_alone_drop_an_equal_best_that_trades_off_and_the_race_does_not():
    """Equal log-loss risk, traded between regions (benchmarks/racing_classification.py):
    h better only where the two disagree most, so the ranges' betting test, which weighs those
    units least, drops it in most data sets where it trails; racing's look asks the t-test too
    and keeps it in most of them."""
    rng = np.random.default_rng(7)
    trailing = alone = dropped = 0
    for _ in range(200):
        x = rng.random(300) < 0.1155
        h, g = np.where(x, 0.0, np.log(9.0)), np.where(x, np.log(9999.0), 0.0)
        lost, every = _log_losses(rng, 300, np.zeros(300), np.stack([h, g]))
        if lost[0].mean() <= lost[1].mean():
            continue                                  # h leads: it cannot be dropped
        trailing += 1
        low, high = label_ranges((every[0] - every[1])[None])
        alone += label_range_p(lost[0] - lost[1], low, high) <= 0.025
        dropped += bool(look(lost[:, None, :], np.ones(2, bool), alpha=0.05, k=2, looks=1,
                             by_label=every[:, None], cut=0.025, cut_t=0.025))
    assert trailing > 50
    assert alone > 0.5 * trailing and dropped < 0.15 * trailing


def test_look_on_labels_asks_both_tests_and_records_them():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(400)
    lost, every = _log_losses(rng, 400, 3 * x, np.stack([3 * x, 3 * x, 0.0 * x]))
    out = look(lost[:, None, :], np.ones(3, bool), alpha=0.05, k=3, looks=4,
               by_label=every[:, None], cut=0.01, cut_t=0.001)
    assert [d["param"] for d in out] == [2] and out[0]["bounded"] is False
    d = lost[2] - lost[out[0]["leader"]]
    low, high = label_ranges((every[2] - every[out[0]["leader"]])[None])
    assert out[0]["p_value"] == pytest.approx(label_range_p(d, low, high))
    assert out[0]["p_t"] == pytest.approx(skew_corrected_p(d, guard=False))
    assert out[0]["p_value"] <= 0.01 and out[0]["p_t"] <= 0.001


# --- a loss leaving its loss_range: the race spends at most alpha ------------------------------

def _left_at(s):
    race = Race.start({"alpha": 0.05, "stages": "auto", "min_units": 30}, _design(), 5)
    race.bounds = (0.0, 1.0)
    losses = np.zeros((5, REPEATS, 50))
    for look_ in range(s):
        race.look(look_, np.where(np.isfinite(losses), 0.5, np.nan), None)
    with pytest.warns(RacingWarning, match="outside the range 0 to 1"):
        race.look(s, losses + 2.0, None)
    return race


@pytest.mark.parametrize("s, later", [(0, 1 / 7), (2, 0.2 / 5), (5, 0.1), (6, 0.1)])
def test_a_loss_leaving_its_range_spends_what_the_earlier_looks_left(s, later):
    """5 folds x 3 repeats, 7 looks: the first repeat's looks one test at 0.8 of alpha, the later
    ones 0.1 each. Leaving at look s: the looks from s on share 1 − (0.8 if s ≥ 1, + 0.1 per
    later look before s), so that in all the race spends alpha (before: 1/7 each on top, up to
    0.8 + 6/7 = 1.66 alpha)."""
    race = _left_at(s)
    assert race.left_range == s and race.bounds is None
    shares = [race.share(j) for j in range(7)]
    assert shares[s:] == pytest.approx([later] * (7 - s))
    total = (0.8 if s >= 1 else 0.0) + sum(shares[5:s]) + sum(shares[s:])
    assert total == pytest.approx(1.0)
    assert race.cut(s) == pytest.approx(threshold(0.05 * later, 5, 1))


class FixedLogit:
    """P(y = 1 | x) = σ(scale·x₀) whatever the training data: a fixed predictor."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def get_params(self, deep=True):
        return {"scale": self.scale}

    def set_params(self, **params):
        self.scale = params.get("scale", self.scale)
        return self

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, X):
        p = 1 / (1 + np.exp(-self.scale * np.asarray(X)[:, 0]))
        return np.column_stack([1 - p, p])

    def predict(self, X):
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]


@pytest.mark.slow
def test_engine_races_the_steep_log_loss_case_within_alpha(tmp_path):
    """Issue 43's skewed case through the engine: the calibrated σ(6x) against the
    over-confident σ(9x), y ~ Bernoulli(σ(6x)), n = 150, 5 folds x 3 repeats, 60 data sets:
    the calibrated param is dropped in at most 8 (Binomial(60, 0.05) exceeds 8 with
    probability 0.003; the t-test alone drops it in 12% of the rule-level data sets of
    benchmarks/racing_classification.py)."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.model_selection import RepeatedKFold

    import cvflow

    class Fixed(ClassifierMixin, BaseEstimator, FixedLogit):
        def __init__(self, scale: float = 1.0):
            self.scale = scale

    rng = np.random.default_rng(43)
    dropped = 0
    for i in range(60):
        x = rng.standard_normal((150, 1))
        y = (rng.random(150) < 1 / (1 + np.exp(-6 * x[:, 0]))).astype(int)
        study = cvflow.Study(Fixed(), param_grid={"scale": [6.0, 9.0]},
                             cv=RepeatedKFold(n_splits=5, n_repeats=3, random_state=i),
                             loss="log_loss", racing={"alpha": 0.05},
                             execution={"cluster": "threads"})
        study.run(x, y, store=str(tmp_path / f"s{i}.zarr"))
        race = json.loads(cvflow.open(str(tmp_path / f"s{i}.zarr")).attrs["racing"])
        assert "range it can take over the labels" in race["test"]
        dropped += any(d["param"] == 0 for d in race["dropped"])
    assert dropped <= 8
