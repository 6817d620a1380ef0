"""Racing's statistical rule: one-sided tests of "param h is no worse than the leader", as numpy.

A look of a race (:func:`cvflow.execution.race_runner.look`) compares each survivor with the leader
on the paired out-of-fold loss differences seen so far and drops it when the p-value of this
module's test is at most ``alpha * share / (k * (k - 1))`` (Bonferroni over the ordered pairs
and the tests: every look for the t-test, ``share`` = 1 / looks; for the betting test the first
repeat's looks are one test, its wealth being a supermartingale as the folds bring new units,
:meth:`cvflow.execution.race_runner.Race.cut`; docs/guide/racing.md says why this protects the
truly best param).

The unit of the test is the one the rule has always used: the sample (the group, in a grouped
design). Each unit contributes **one** observation, the mean of its paired differences over
the repeats (and group members) seen so far (:func:`unit_means`): repeats reuse the same
samples, so they are not new units. The test assumes these unit observations independent with
a common mean, the difference of risks: exact for fixed predictors, and for learners the
first-order statement of Bayle et al. (2020, Thm. 1 and 3, under loss stability).

The test is chosen by what is known about the loss:

- **bounded** (the loss has a declared range, ``zero_one``, ``brier``, or ``racing.loss_range``):
  :func:`betting_p`, the inverse wealth of a mixture of bets on the differences (Waudby-Smith &
  Ramdas 2024, "Estimating means of bounded random variables by betting", JRSSB, Sect. 4).
  Its p-value is valid at every sample size, whatever the skewness (Markov's inequality),
  under the unit assumption above, and over the first repeat's looks at once (Ville's
  inequality: the wealth is a supermartingale as units arrive).
- **classification** (any other loss of a classification cube: log loss, hinge, a user's):
  :func:`label_range_p`, the same bets on each unit's difference scaled by the range it can
  take over the labels (:func:`label_ranges`, from the stored predictions), valid at every n
  when the best param is no worse at every x (not under the weaker null above: the scale
  depends on the covariates), together with :func:`skew_corrected_p` (without Cochran's
  guard), asymptotic under the weaker null: the runner drops only when both reject.
- **unbounded** (squared, absolute, ...): :func:`skew_corrected_p`, the t statistic through
  Hall's (1992) cubic transformation, which removes the O(n^-1/2) skewness term of its
  distribution. Valid only asymptotically: no test of a mean is valid at a finite n for every
  unbounded distribution (Bahadur & Savage 1956); benchmarks/racing_validity.py measures it.
"""
from __future__ import annotations

import math

import numpy as np

TEST_BOUNDED = ("one-sided betting test of the mean loss difference per unit (a mixture of "
                "bets, Waudby-Smith & Ramdas 2024), loss range {lo:g} to {hi:g}: finite-sample")
TEST_UNBOUNDED = ("one-sided t-test of the mean loss difference per unit with Hall's skewness "
                  "correction: asymptotic (unbounded loss)")
TEST_LABELS = ("one-sided betting test of the mean loss difference per unit, each unit's "
               "difference scaled by the range it can take over the labels (read from the stored "
               "predictions), and the t-test with Hall's skewness correction, both rejecting: "
               "finite-sample when the best param is no worse than each rival at every x, "
               "asymptotic otherwise (classification loss)")
# DESIGN CHOICE: a mixture of constant bets, 0.9 halved down to 0.014 (7 bets): the best of
# them grows the wealth nearly as fast as the growth-optimal bet λ ≈ μ / E x² when that is
# in the grid, for log 7 ≈ 2 more in log-wealth (about a quarter more units at racing's
# levels); predictable plug-in bets (Waudby-Smith & Ramdas's empirical-Bernstein ones) are
# capped at 1/2 and saved 33% of the fits against 55% for the old z-test on a clear-best
# zero_one grid (benchmarks/racing_validity.py), and depend on the order of the units.
BETS = 0.9 * 0.5 ** np.arange(7)
# Cochran's rule (Cochran 1977, Sampling Techniques, Sect. 2.15): a mean of n draws of skewness
# γ is near enough normal when n > 25 γ²
SKEW_UNITS = 25


def unit_means(diff: np.ndarray, units: np.ndarray | None = None) -> np.ndarray:
    """One observation per unit seen: the mean of its paired differences seen so far.

    Parameters
    ----------
    diff : array (repeat, sample)
        ℓ_i(h) − ℓ_i(g) of the out-of-fold fits seen; NaN where not seen.
    units : array (sample,) of int, optional
        Each sample's unit (its group in a grouped design); None: the samples.

    Returns
    -------
    array (m,)
        The units' means, in the order of their labels (an order that does not depend on
        the losses, as the betting test needs).
    """
    seen = np.isfinite(diff)
    labels = np.arange(diff.shape[1]) if units is None else np.asarray(units)
    _, inverse = np.unique(labels, return_inverse=True)
    index = np.broadcast_to(inverse, diff.shape)[seen]
    count = np.bincount(index, minlength=inverse.max(initial=-1) + 1)
    total = np.bincount(index, weights=diff[seen], minlength=len(count))
    keep = count > 0
    return total[keep] / count[keep]


def betting_wealth(x: np.ndarray) -> float:
    """K: the wealth of the bets against H0 "the units' mean of ``x`` ≤ 0", ``x`` in [-1, 1].

    K = mean over the bets λ in :data:`BETS` of Π_i (1 + λ x_i) (Waudby-Smith & Ramdas 2024,
    Sect. 4, the capital process; a mixture over constant bets). Every factor is ≥ 0 (λ < 1)
    and, when each x_i has mean ≤ 0 given the others, of mean ≤ 1, so E K ≤ 1 under H0 and
    P(K ≥ 1/δ) ≤ δ (Markov): 1/K is a valid p-value at every n, whatever the skewness. A
    product of constant bets does not depend on the order of the units.
    """
    x = np.asarray(x, float)
    if not len(x):
        return 1.0
    log_wealth = np.log1p(np.multiply.outer(BETS, x)).sum(axis=1)
    top = float(log_wealth.max())
    return float(math.exp(top) * np.mean(np.exp(log_wealth - top))) if top < 700 else math.inf


def betting_p(x: np.ndarray, *, width: float) -> float:
    """p-value of H0 "mean of ``x`` ≤ 0" for ``x`` in [-width, width]: min(1, 1/K) of
    :func:`betting_wealth` on ``x / width``."""
    if width <= 0 or not len(x):
        return 1.0
    return float(min(1.0, 1.0 / betting_wealth(np.asarray(x) / width)))


def label_ranges(diff_by_label: np.ndarray, units: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The range each unit's observation (:func:`unit_means`) can take over the labels.

    Parameters
    ----------
    diff_by_label : array (repeat, sample, label)
        ℓ_i(h) − ℓ_i(g) of the out-of-fold fits seen, had sample i's label been each class in
        turn (the stored predictions give it without reading y); NaN where not seen.
    units : array (sample,) of int, optional
        As for :func:`unit_means`.

    Returns
    -------
    low, high : arrays (m,)
        Per unit, in :func:`unit_means`' order: a sample's label is the same in every repeat,
        so its observation is the mean over its seen repeats at one label, between the least
        and the largest of those means over the labels; a group's members' labels vary
        independently, so its range is its members' ranges averaged as :func:`unit_means`
        averages their differences.
    """
    seen = np.isfinite(diff_by_label[..., 0])
    count = seen.sum(axis=0)
    total = np.where(seen[..., None], diff_by_label, 0.0).sum(axis=0)
    per_sample = total / np.maximum(count, 1)[:, None]           # (sample, label)
    low = np.where(seen, per_sample.min(axis=-1), np.nan)
    high = np.where(seen, per_sample.max(axis=-1), np.nan)
    return unit_means(low, units), unit_means(high, units)


def label_range_p(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """p-value of H0 "given its covariates, each unit's ``x`` has mean ≤ 0", ``x`` in
    [``low``, ``high``] per unit: min(1, 1/K) of :func:`betting_wealth` on x_u / max(|low_u|,
    |high_u|) (0 where the range is 0: both params predict alike whatever the label).

    Valid at every n under that null: each unit's range depends on its covariates only (the
    stored out-of-fold predictions, not its label), so given them the scaled observation lies
    in [−1, 1] with mean ≤ 0 and every factor of the wealth is ≥ 0 with mean ≤ 1
    (Waudby-Smith & Ramdas 2024, Sect. 4, with each observation's bounds known before it).
    NOT valid under the weaker H0 "the units' mean ≤ 0": the scale depends on the covariates,
    so the test weighs units unequally and tests a weighted mean, which can be > 0 when the
    plain one is ≤ 0 (a param better only where the two disagree the most: docs/guide/racing.md,
    benchmarks/racing_classification.py); racing pairs it with the t-test
    (:func:`cvflow.execution.race_runner.look`).

    DESIGN CHOICE: scaled by the range's larger side, not by the fall −low_u alone (which keeps
    the factors ≥ 0 too): on the clear-best grid of benchmarks/racing_classification.py the
    fall alone, clipped at 1, saved 8% of the fits against 36% (200 data sets).
    """
    x = np.asarray(x, float)
    if not len(x):
        return 1.0
    scale = np.maximum(np.abs(low), np.abs(high))
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(scale > 0, x / scale, 0.0)
    return float(min(1.0, 1.0 / betting_wealth(np.clip(scaled, -1.0, 1.0))))


def skew_corrected_p(x: np.ndarray, *, guard: bool = True) -> float:
    """One-sided p-value of H0 "mean of ``x`` ≤ 0": the t statistic, corrected for skewness
    where skewness makes it liberal, and 1 where that skewness is too strong for a normal tail.

    With W = x̄ / s and γ̂ the sample skewness, Hall (1992, "On the removal of skewness by
    transformation", JRSSB 54, eq. 2.4) shows √n (W + γ̂W²/3 + γ̂²W³/27 + γ̂/(6n)) is standard
    normal up to O(1/n) (the cubic is increasing). The p-value is the larger of that one's and
    the plain t's normal tail: differences skewed to the left (a rival's rare large losses) make
    the plain t liberal at the upper tail and the correction conservative; to the right, the
    plain t is the conservative one, and the correction, driven by a noisy γ̂ under heavy
    tails, is not (benchmarks/racing_validity.py measured 12% drops of equal-risk params with
    it alone, t3 noise). Skewed to the left, no param is dropped on n < 25 γ̂² units
    (:data:`SKEW_UNITS`, Cochran's rule for a normal approximation of a mean).

    DESIGN CHOICE: the guard is not applied to right skew, where the t's upper tail is light:
    there it cost savings (hopeless params of tests/test_racing_promise.py kept in 10% of the
    data sets, squared-loss differences of skewness ~3) and protected only against a rival's
    rare large losses absent from the sample, which no test of an unbounded mean can see
    (Bahadur & Savage 1956): ``racing.loss_range`` is the answer there.

    ``guard=False`` leaves Cochran's guard out: beside the betting test on the labels' ranges
    (:func:`label_range_p`), which holds at every n when the best param is no worse at every x,
    the t-test is there for the other case, asymptotically, and the guard would block every drop
    behind a confident leader (its rare confident mistakes skew the differences to the left:
    no drop of the hopeless params of LogisticRegression(C=1e-5) on breast cancer,
    tests/test_racing.py).
    """
    from scipy.stats import norm

    x = np.asarray(x, float)
    n = len(x)
    if n < 3:
        return float("nan")
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if not sd > 0:
        return 0.0 if mean > 0 else 1.0
    gamma = float(np.mean((x - mean) ** 3)) / float(x.std()) ** 3
    if guard and gamma < 0 and n < SKEW_UNITS * gamma ** 2:
        return 1.0
    w = mean / sd
    hall = math.sqrt(n) * (w + gamma * w ** 2 / 3 + gamma ** 2 * w ** 3 / 27 + gamma / (6 * n))
    return float(norm.sf(min(hall, math.sqrt(n) * w)))
