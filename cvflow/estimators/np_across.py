"""Numpy kernels that compare k learners across N data sets (Demšar 2006; Benavoli et al. 2014;
Cory-Wright & Gómez).

Every kernel reads ``losses`` (N, k): one estimate per data set and learner, lower is better
(:mod:`cvflow.estimators.compare_learners` negates scores before calling them), complete (no
NaN: a data set with a missing learner is dropped before). The labelled wrapper is
:func:`cvflow.estimators.compare_learners`.
"""
from __future__ import annotations

import numpy as np
from ..lazy import stats

from .multiplicity import holm
from .np_roles import corrected_repeated_se


def average_ranks(losses: np.ndarray) -> np.ndarray:
    """Ranks within each data set (N, k): 1 for the lowest loss, ties get their average rank."""
    return stats.rankdata(np.asarray(losses, dtype=np.float64), axis=1, method="average")


def rank_scale(n: int, k: int) -> float:
    """The standard error of a difference of two mean ranks under the null,
    sqrt(k(k + 1) / (6N)) (Demšar 2006, eq. for z and the critical difference)."""
    return float(np.sqrt(k * (k + 1) / (6.0 * n)))


def friedman(ranks: np.ndarray) -> dict:
    """Friedman's χ² from the ranks (N, k), corrected for ties as scipy.stats.friedmanchisquare,
    and Iman & Davenport's F = (N − 1)χ² / (N(k − 1) − χ²) on (k − 1, (k − 1)(N − 1)) df.

    Without ties χ² = 12N / (k(k + 1)) · (Σ_j R̄_j² − k(k + 1)²/4), R̄_j the mean ranks; the tie
    correction divides it by 1 − Σ(t³ − t) / (N k (k² − 1)), t the sizes of the tied groups.
    """
    n, k = ranks.shape
    mean = ranks.mean(axis=0)
    chi2 = 12.0 * n / (k * (k + 1)) * (float(np.sum(mean ** 2)) - k * (k + 1) ** 2 / 4.0)
    tied = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        tied += float(np.sum(counts ** 3 - counts))
    correction = 1.0 - tied / (n * k * (k * k - 1))
    chi2 = chi2 / correction if correction > 0 else np.nan
    df1, df2 = k - 1, (k - 1) * (n - 1)
    denominator = n * (k - 1) - chi2
    # all learners ranked the same way on every data set: χ² = N(k − 1), F infinite, p 0
    f = (n - 1) * chi2 / denominator if denominator > 0 else np.inf
    return {"statistic": chi2, "p_value": float(stats.chi2.sf(chi2, df1)), "df": df1,
            "f": f, "f_p_value": float(stats.f.sf(f, df1, df2)), "f_df1": df1, "f_df2": df2}


def nemenyi(mean_ranks: np.ndarray, n: int, alpha: float) -> dict:
    """Nemenyi's all-pairs test: ``p_value`` (k, k) from q = |R̄_i − R̄_j| / sqrt(k(k + 1)/(6N))
    against the studentized range of k means with infinite df (q·√2), as scikit-posthocs'
    ``posthoc_nemenyi_friedman``; ``critical_difference`` = q_α · sqrt(k(k + 1)/(6N)) with
    q_α = studentized range's 1 − α quantile / √2 (Demšar 2006, Table 5a: 2.343 for k = 3)."""
    k = mean_ranks.size
    scale = rank_scale(n, k)
    q = np.abs(mean_ranks[:, None] - mean_ranks[None, :]) / scale
    p = np.ones((k, k))
    upper = np.triu_indices(k, 1)
    p[upper] = stats.studentized_range.sf(q[upper] * np.sqrt(2.0), k, np.inf)
    p.T[upper] = p[upper]
    q_alpha = float(stats.studentized_range.ppf(1.0 - alpha, k, np.inf) / np.sqrt(2.0))
    return {"p_value": p, "q_alpha": q_alpha, "critical_difference": q_alpha * scale}


def against_control(mean_ranks: np.ndarray, n: int, control: int) -> dict:
    """Each learner against ``control`` (Demšar 2006, 3.2.2): z = (R̄_i − R̄_c) / sqrt(k(k + 1)/(6N)),
    two-sided normal p, Holm-adjusted over the k − 1 comparisons (NaN at the control)."""
    k = mean_ranks.size
    z = (mean_ranks - mean_ranks[control]) / rank_scale(n, k)
    p = 2.0 * stats.norm.sf(np.abs(z))
    z[control] = p[control] = np.nan
    return {"z": z, "p_value": p, "p_adjusted": holm(p)}


def pairs(k: int) -> list[tuple[int, int]]:
    """Every pair (i, j), i < j, in the learners' order."""
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


def wilcoxon(losses: np.ndarray) -> dict:
    """The Wilcoxon signed-rank test of every pair (scipy.stats.wilcoxon, its defaults, zeros
    split between the signs: ``zero_method="zsplit"``) and Holm's adjustment over the pairs.
    A pair whose differences are all 0 has p = 1 (nothing tells the learners apart)."""
    statistic, p = [], []
    for i, j in pairs(losses.shape[1]):
        d = losses[:, i] - losses[:, j]
        if not np.any(d):
            statistic.append(np.nan)
            p.append(1.0)
            continue
        res = stats.wilcoxon(losses[:, i], losses[:, j], zero_method="zsplit")
        statistic.append(float(res.statistic))
        p.append(float(res.pvalue))
    p_value = np.asarray(p)
    return {"statistic": np.asarray(statistic), "p_value": p_value, "p_adjusted": holm(p_value)}


def _heaviside(values: np.ndarray, threshold: float) -> np.ndarray:
    return (values > threshold).astype(float) + 0.5 * (values == threshold).astype(float)


def bayes_signed_rank(d: np.ndarray, rope: float, *, prior: float = 0.5, samples: int = 50000,
                      seed: int | None = 0, chunk: int = 2000) -> tuple[float, float, float]:
    """Bayesian signed-rank test (Benavoli et al. 2014) of differences ``d`` (N,) = loss of a −
    loss of b: (P(a better), P(rope), P(b better)).

    The distribution of the differences has a Dirichlet process posterior with a pseudo-
    observation 0 of weight ``prior``: each draw w ~ Dirichlet(prior, 1, …, 1) over (0, d_1, …,
    d_N) gives θ_below = Σ_ij w_i w_j H(−(d_i + d_j) − 2·rope), θ_above likewise with
    H(d_i + d_j − 2·rope), H the step function with H(0) = 1/2, and θ_rope = 1 − both. A draw
    votes for the largest of (θ_below, θ_rope, θ_above); the probabilities are the vote shares
    over ``samples`` draws. With rope 0: P(rope) = 0 and each draw votes below or above.

    Equal to baycomp's ``SignedRankTest.probs(x, y, rope, nsamples=samples,
    random_state=seed)`` with x = −loss of a, y = −loss of b (baycomp's scores, higher better):
    the same draws from ``numpy.random.RandomState(seed)``, in the same order, the same sums.
    """
    diff = np.concatenate(([0.0], np.asarray(d, dtype=np.float64)))
    sums = diff[:, None] + diff[None, :]
    weights = np.ones(diff.size)
    weights[0] = prior
    m = diff.size
    draws = np.random.RandomState(seed).dirichlet(weights, samples)
    if rope > 0:
        below = _heaviside(-sums, 2 * rope).ravel()
        above = _heaviside(sums, 2 * rope).ravel()
    else:
        below, above = None, _heaviside(sums, 0).ravel()
    votes = np.zeros(3, dtype=np.int64)
    for start in range(0, samples, chunk):
        w = draws[start:start + chunk]
        outer = (w[:, :, None] * w[:, None, :]).reshape(-1, m * m)
        theta = np.zeros((w.shape[0], 3))
        theta[:, 2] = np.sum(outer * above, axis=1)
        if below is not None:
            theta[:, 0] = np.sum(outer * below, axis=1)
            theta[:, 1] = -theta[:, 0] - theta[:, 2] + 1
        else:
            theta[:, 0] = -theta[:, 2] + 1
        votes += np.bincount(np.argmax(theta, axis=1), minlength=3)
    left, middle, right = votes / samples
    if rope > 0:
        return float(left), float(middle), float(right)
    return float(left / (left + right)), 0.0, float(right / (left + right))


def geometric_mean_ratio(a: np.ndarray, b: np.ndarray, *, level: float, resamples: int,
                         seed: int | None) -> tuple[float, float, float]:
    """The geometric mean over data sets of a_d / b_d (Cory-Wright & Gómez's summary: 0.96 is
    "a's loss 4% lower on average") and its percentile bootstrap interval at ``level``, data sets
    drawn with replacement ``resamples`` times. NaN when a value is not positive."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not (np.all(a > 0) and np.all(b > 0)):
        return np.nan, np.nan, np.nan
    logs = np.log(a) - np.log(b)
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, logs.size, size=(resamples, logs.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))


def paired_resolved(folds: np.ndarray, level: float) -> np.ndarray:
    """Per data set, whether the paired difference of two learners is resolved: ``folds`` (N, R,
    K) the fold-level loss differences; the corrected repeated K-fold t interval (Nadeau & Bengio;
    t with K·R − 1 df, se of :func:`np_roles.corrected_repeated_se`) excludes 0."""
    n, r, k = folds.shape
    se = corrected_repeated_se(folds)
    half = stats.t.ppf((1 + level) / 2, r * k - 1) * se
    return np.abs(folds.reshape(n, r * k).mean(axis=1)) > half


def win_tie_loss(d: np.ndarray, resolved: np.ndarray) -> tuple[int, int, int]:
    """Counts over data sets of a's wins (d < 0 and resolved), ties (not resolved, or d = 0) and
    losses (d > 0 and resolved), with d = loss of a − loss of b."""
    resolved = np.asarray(resolved, dtype=bool) & (d != 0)
    wins = int(np.sum(resolved & (d < 0)))
    losses = int(np.sum(resolved & (d > 0)))
    return wins, int(d.size - wins - losses), losses
