"""Numpy kernels of the reducers: loss sums over the samples each role of a fit scores.

Plain arrays, no labels: the estimator modules name the dimensions (STYLE: a numpy function
computes, a thin xarray function labels). Shapes: P params (a block of them), R repeats,
K folds, n samples. Losses hold NaN where a fit failed or is missing: a sum propagates the
NaN of the samples it covers and never looks at the others.

For a param h, with folds N_1..N_K of D (``member``) and D the analysis samples:

==================  ======  ===============  ==================================================
term                role    shape            value
==================  ======  ===============  ==================================================
full_risk           full    (P,)             mean_{i∈D} ℓ_i(h, full)
test_risk           full    (P,)             mean over the held-out test samples of ℓ_i(h, full)
fold_sum            fold    (P, R, K)        Σ_{i∈N_j} ℓ_i(h, fold j)
fold_risk           fold    (P, R, K)        mean_{i∈D} ℓ_i(h, fold j)
fold_change         change  (P, R, K)        mean_{i∈D} |ℓ_i(h, fold j) − ℓ_i(h, full)|
inner_sum           pair    (P, R, K, K)     Σ_{i∈N_l} ℓ_i(h, pair(t, l)); 0 on the diagonal
inner_change        pair    (P, R, K, K)     mean_{i∈D∖N_t} |ℓ_i(h, pair(t, l)) − ℓ_i(h, fold t)|; 0 diag.
oof_loss            oof     (P, R, n)        ℓ_i(h, fold j(i)), i ∈ N_j; 0 on held-out test samples
==================  ======  ===============  ==================================================

:func:`nan_rule` then makes every term of a param NaN when any is (a needed fit is missing).
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import stats

from .guardrails import flat

# the role of each term (the table above): the role a reducer asks for to get the term
TERM_ROLE = {"full_risk": "full", "test_risk": "full", "fold_sum": "fold", "fold_risk": "fold",
             "train_sum": "train",
             "fold_change": "change", "inner_sum": "pair", "inner_change": "pair",
             "oof_loss": "oof"}


def fold_members(fold: np.ndarray, k: int) -> np.ndarray:
    """(R, K, n) bool: sample i is in fold j of repeat r (test samples, label -1, in none)."""
    return np.asarray(fold)[:, None, :] == np.arange(k)[None, :, None]


def masked_sum(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Σ over the last axis of ``values`` where ``mask`` (broadcast); NaN outside never counts."""
    if mask.all():          # every sample (no held-out test set): the same sum, no masked copy
        return values.sum(axis=-1)
    return np.where(mask, values, 0.0).sum(axis=-1)


def full_terms(full_loss: np.ndarray, analysis: np.ndarray) -> dict[str, np.ndarray]:
    """``full_risk`` and, when some samples are held out, ``test_risk`` from ℓ(h, full) (P, n)."""
    test = ~analysis
    out = {"full_risk": masked_sum(full_loss, analysis) / analysis.sum()}
    if test.any():
        out["test_risk"] = masked_sum(full_loss, test) / test.sum()
    return out


def fold_terms(fold_loss: np.ndarray, member: np.ndarray, analysis: np.ndarray,
               full_loss: np.ndarray | None = None, *, train: bool = False,
               weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``fold_sum``, ``fold_risk``, (given ℓ(h, full) (P, n)) ``fold_change`` and (``train``)
    ``train_sum``, Σ over each fold fit's training set D ∖ N_j.

    ``fold_loss`` (P, R, K, n) is ℓ_i(h, fold j) on every sample. ``weights`` (n,): the sums
    weigh sample i by w_i (GridSearchCV's scorers given ``sample_weight``), ``fold_risk`` the
    weighted mean over D.
    """
    if weights is not None:
        if full_loss is not None:
            raise ValueError("fold_terms: fold_change is not weighted; give no weights")
        return _weighted_fold_terms(fold_loss, member, analysis, weights, train)
    n_d = analysis.sum()
    out = {"fold_sum": masked_sum(fold_loss, member[None]),
           "fold_risk": masked_sum(fold_loss, analysis) / n_d}
    if train:
        out["train_sum"] = masked_sum(fold_loss, (~member & analysis)[None])
    if full_loss is not None:
        change = np.abs(fold_loss - full_loss[:, None, None, :])
        out["fold_change"] = masked_sum(change, analysis) / n_d
    return out


def _weighted_fold_terms(fold_loss: np.ndarray, member: np.ndarray, analysis: np.ndarray,
                        w: np.ndarray, train: bool) -> dict[str, np.ndarray]:
    """:func:`fold_terms` with sample weights ``w`` (n,): Σ_i w_i ℓ_i over each set (NaN
    outside a set never counts)."""
    w = np.asarray(w, dtype=np.float64)
    out = {"fold_sum": np.where(member[None], fold_loss, 0.0) @ w,
           "fold_risk": (np.where(analysis, fold_loss, 0.0) @ w) / (analysis * w).sum()}
    if train:
        out["train_sum"] = np.where((~member & analysis)[None], fold_loss, 0.0) @ w
    return out


def out_of_fold(fold_loss: np.ndarray, member: np.ndarray) -> np.ndarray:
    """``oof_loss`` (P, R, n): each sample's loss under the fit of the fold it is in."""
    return np.where(member[None], fold_loss, 0.0).sum(axis=2)


def nan_rule(terms: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every term of a param NaN when any of its terms is; adds ``missing`` (P,) bool."""
    missing = np.zeros(len(next(iter(terms.values()))), dtype=bool)
    for value in terms.values():
        missing |= np.isnan(value.reshape(len(value), -1)).any(axis=1)
    # DESIGN CHOICE: the terms themselves when no param misses a fit: a copy of each is 16
    # bytes a fit for the K-fold sums (0.15 GiB at 10^7 fits). Estimators never write into
    # them (shared by a report's estimators: test_laziness.py::
    # test_a_report_reads_a_lazy_cube_once_for_all_its_estimators compares each with it alone)
    out = {key: np.where(missing.reshape((-1,) + (1,) * (value.ndim - 1)), np.nan, value)
           if missing.any() else value for key, value in terms.items()}
    out["missing"] = missing
    return out


def pair_terms(losses: np.ndarray, pair_at: np.ndarray, fold_at: np.ndarray, member: np.ndarray,
               analysis: np.ndarray) -> dict[str, np.ndarray]:
    """``inner_sum`` and ``inner_change`` of every outer fold's inner study.

    The inner study of outer fold t is D ∖ N_t with folds {N_l, l ≠ t}: its fold fits are the
    pairs (t, l) and its "full" fit is fold t. ``losses`` (P, S, n) holds ℓ_i of S splits;
    ``pair_at`` (R, K, K) and ``fold_at`` (R, K) give the position in S of pair (t, l) and of
    fold t (the diagonal of ``pair_at`` is never read). Only the samples of D ∖ N_t are read
    for outer fold t.
    """
    n_params = losses.shape[0]
    n_repeats, k = fold_at.shape
    inner_sum = np.zeros((n_params, n_repeats, k, k))
    inner_change = np.zeros((n_params, n_repeats, k, k))
    for r in range(n_repeats):
        for t in range(k):
            others = np.flatnonzero(np.arange(k) != t)
            rest = analysis & ~member[r, t]                              # D ∖ N_t
            on_rest = losses[:, pair_at[r, t, others]][:, :, rest]      # (P, K-1, |rest|)
            base = losses[:, fold_at[r, t]][:, rest]                    # (P, |rest|)
            inner_change[:, r, t, others] = np.abs(on_rest - base[:, None]).sum(-1) / rest.sum()
            inner_sum[:, r, t, others] = masked_sum(on_rest, member[r, others][:, rest])
    return {"inner_sum": inner_sum, "inner_change": inner_change}


def normal_quantile(p: float) -> float:
    """The standard normal quantile (Wichura's AS 241 in the standard library, ~1e-16)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def argmin_first(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Index of the minimum along ``axis``: ties to the first, NaN skipped, -1 if all NaN."""
    values = np.asarray(values, dtype=np.float64)
    nan = np.isnan(values)
    index = np.argmin(np.where(nan, np.inf, values), axis=axis)
    return np.where(nan.all(axis=axis), -1, index)


def nested_choice(criterion: np.ndarray, outer_sum: np.ndarray, sizes: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """Per outer fold the param ``h_t = argmin_h criterion`` and its loss sum on N_t.

    ``criterion`` (P, R, K, ...) (extra trailing dims, e.g. λ, are kept), ``outer_sum``
    (P, R, K) = Σ_{i∈N_t} ℓ_i(h, fold t), ``sizes`` (R, K) = |N_t|. A param whose fold-t fit
    failed (NaN ``outer_sum``) is never chosen for t. Returns ``chosen`` (R, K, ...),
    ``outer_sum`` m_t (R, K, ...) and ``estimate_repeat`` (R, ...) = Σ_t m_t / n.
    """
    extra = (None,) * (criterion.ndim - 3)
    sums = outer_sum[(...,) + extra]
    # one trailing index at a time (a λ grid: no masked copy of the whole criterion)
    width = int(np.prod(criterion.shape[3:]))
    flat = criterion.reshape(tuple(criterion.shape[:3]) + (width,))
    failed = np.isnan(outer_sum)
    chosen = np.stack([argmin_first(np.where(failed, np.nan, flat[..., e]), axis=0)
                       for e in range(width)], axis=-1).reshape(criterion.shape[1:])
    picked = np.take_along_axis(np.broadcast_to(sums, criterion.shape),
                                np.maximum(chosen, 0)[None], axis=0)[0]
    m = np.where(chosen >= 0, picked, np.nan)
    n = sizes.sum(axis=1)
    return {"chosen": chosen, "outer_sum": m,
            "estimate_repeat": m.sum(axis=1) / n[(...,) + extra]}


def group_codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer codes 0..G−1 of ``labels`` (n,) (equal labels, equal codes) and G."""
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    codes = codes.reshape(-1)
    return codes, int(codes.max()) + 1 if codes.size else 0


def cluster_sums(values: np.ndarray, codes: np.ndarray, groups: int) -> np.ndarray:
    """S_g = Σ_{i∈g} values_i: (..., n) -> (..., G) for codes (n,) in 0..G−1."""
    onehot = codes[None, :] == np.arange(groups)[:, None]              # (G, n)
    return values @ onehot.T.astype(values.dtype if values.dtype.kind == "f" else np.float64)


def cluster_variance(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """CR1 cluster-robust variance of the mean of ``values`` (..., n) with clusters ``codes``
    (n,) in 0..G−1: ``G/(G−1) · Σ_g (S_g − n_g·ē)² / n²``, S_g the cluster's sum, n_g its size
    and ē the mean over all n. With one sample per cluster it is the all-pairs variance
    Σ_i (e_i − ē)² / n times n/(n − 1), divided by n. NaN when G < 2 or a value is NaN.
    """
    values = np.asarray(values, dtype=np.float64)
    groups = int(codes.max()) + 1 if codes.size else 0
    n = values.shape[-1]
    if groups < 2:
        return np.full(values.shape[:-1], np.nan)
    sums = cluster_sums(values, codes, groups)
    sizes = np.bincount(codes, minlength=groups)
    dev = sums - sizes * values.mean(axis=-1, keepdims=True)
    return groups / (groups - 1) * (dev ** 2).sum(axis=-1) / n ** 2


def corrected_repeated_se(values: np.ndarray) -> np.ndarray:
    """Standard error of the mean of fold-level values ``values`` (..., R, K) by the corrected
    repeated K-fold variance (Nadeau & Bengio 2003; Bouckaert & Frank 2004):
    sqrt((1/(K·R) + 1/(K − 1)) · s²), s² the sample variance over all K·R values.

    s² pools the within-repeat and between-repeat variation of the fold values; the 1/(K − 1)
    = n_test/n_train term accounts for the overlap of the training sets. NaN in, NaN out;
    NaN with one fold a repeat (K = 1: the splits of a splitter that does not partition).
    """
    r, k = values.shape[-2:]
    flat = values.reshape(values.shape[:-2] + (r * k,))
    if k < 2 or r * k < 2:       # one fold a repeat (a splitter's splits, one by one): undefined
        return np.full(flat.shape[:-1], np.nan)
    s2 = flat.var(axis=-1, ddof=1)
    return np.sqrt((1.0 / (k * r) + 1.0 / (k - 1)) * s2)


def nadeau_bengio_stats(d: np.ndarray, n: float, g: float, alpha: float) -> dict:
    """Corrected resampled t-test (Nadeau & Bengio 2003) from per-fit mean differences d_f.

    Variance (1/F + (n - g)/g)·s²_d, Student t with F - 1 degrees of freedom. The kernel of
    ``nadeau_bengio`` (the subset design) and, through :func:`corrected_t_stats`, of
    ``corrected_t`` and ``nested_compare`` (the fold design).
    """
    n_fits = d.size
    mean = float(d.mean()) if n_fits else np.nan
    s2 = float(d.var(ddof=1)) if n_fits >= 2 else np.nan
    variance = (1.0 / n_fits + (n - g) / g) * s2 if n_fits >= 2 else np.nan
    out = {"estimate": mean, "sample_variance": s2, "variance": variance, "df": n_fits - 1}
    if not np.isfinite(variance) or flat(s2, float(np.abs(d).max(initial=0.0))):
        out.update(se=np.nan, t=np.nan, p_value=np.nan, lower=np.nan, upper=np.nan)
        return out

    se = math.sqrt(variance)
    t = mean / se
    q = stats.t.ppf(1 - alpha / 2, n_fits - 1)
    out.update(se=se, t=t, p_value=float(2 * stats.t.sf(abs(t), n_fits - 1)),
               lower=mean - q * se, upper=mean + q * se)
    return out


def corrected_t_stats(d: np.ndarray, alpha: float) -> dict:
    """The corrected repeated K-fold t-test from fold-level values ``d`` (R, K).

    Returns ``estimate`` (d̄), ``sample_variance`` (s²), ``variance``, ``se``, ``t``,
    ``df`` (K·R − 1), ``p_value`` (two-sided), ``lower``/``upper`` (the 1 − alpha interval
    from Student's t) and ``ratio`` (n_test / n_train = 1 / (K − 1)). NaN if any d is NaN.
    """
    k = d.shape[1]
    # n_test / n_train = (n/K) / (n − n/K): nadeau_bengio_stats takes it as (n − g)/g, g = 1 − 1/K
    out = nadeau_bengio_stats(np.asarray(d, dtype=np.float64).ravel(), 1.0, 1.0 - 1.0 / k, alpha)
    if np.isnan(d).any():
        out.update({key: np.nan for key in out if key != "df"})
    out["ratio"] = 1.0 / (k - 1)
    return out
