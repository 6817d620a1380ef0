"""Dietterich's 5×2cv paired t-test (1998) and Alpaydın's combined 5×2cv F-test (1999).

On 5 repeats of 2-fold CV, ``p_i^(j)`` is the difference of the fold scores of params a and b
on fold j of repeat i (each fold's fit trains on the other fold). With
``p̄_i = (p_i^(1) + p_i^(2)) / 2`` and ``s_i² = (p_i^(1) − p̄_i)² + (p_i^(2) − p̄_i)²``:

- t = p_1^(1) / sqrt(Σ_i s_i² / 5), Student t with 5 df (the first fold of the first repeat
  in the numerator, as Dietterich and mlxtend's ``paired_ttest_5x2cv``);
- F = Σ_i Σ_j (p_i^(j))² / (2 Σ_i s_i²), F distribution with (10, 5) df (mlxtend's
  ``combined_ftest_5x2cv``).

"Fold 1" of a repeat is the fold the cube labels 0. The design must be exactly 2 folds × 5
repeats: the reference distributions hold for nothing else.
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import xarray as xr
from ..lazy import stats

from ..errors import InputError
from . import guardrails
from ._cube import fold_level_groups
from .cube_losses import loss_name
from .labels import param_text
from ._readers import compare_attrs, compare_check, compare_params, fold_scores
from .registry import Option, declare, fmt, param_refs, probability

SCALARS = ("estimate", "first_difference", "se", "t", "p_value", "lower", "upper", "f",
           "f_p_value")


def five_by_two_stats(p: np.ndarray, alpha: float) -> dict:
    """Dietterich's t and Alpaydın's F from the differences ``p`` (5, 2); NaN if any is NaN.

    Returns ``estimate`` (mean of the 10 differences), ``first_difference`` (p_1^(1)),
    ``variance`` (Σ s_i² / 5, not a result variable; t, F and the interval are NaN when it is 0
    up to rounding),
    ``se`` = sqrt(Σ s_i² / 5), ``t``, ``p_value`` (two-sided, 5 df), ``lower``/``upper``
    (p_1^(1) ± t_{5, 1−α/2}·se, the interval the t-test inverts), ``f`` and ``f_p_value``.
    """

    p = np.asarray(p, dtype=np.float64)
    s2 = ((p - p.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    out = {key: np.nan for key in SCALARS}
    out.update(estimate=float(p.mean()), first_difference=float(p[0, 0]),
               variance=float(s2.mean()))
    if np.isnan(p).any() or guardrails.flat(out["variance"], float(np.abs(p).max())):
        return out
    se = math.sqrt(s2.mean())
    t = p[0, 0] / se
    q = stats.t.ppf(1 - alpha / 2, 5)
    f = float((p ** 2).sum() / (2 * s2.sum()))
    out.update(se=se, t=t, p_value=float(2 * stats.t.sf(abs(t), 5)), lower=p[0, 0] - q * se,
               upper=p[0, 0] + q * se, f=f, f_p_value=float(stats.f.sf(f, 10, 5)))
    return out


def paired_5x2cv(cube: xr.Dataset, *, loss: str | None = None, compare=None,
                 alpha: float = 0.05) -> xr.Dataset:
    """5×2cv paired t-test and combined F-test of e_a − e_b; needs design {folds: 2, repeats: 5}.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with 5 repeats of 2-fold splits.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    compare : list, optional
        ``[a, b]``, each named as in :func:`cvflow.estimators.ustat` (a cube with two params
        needs none).
    alpha : float, default 0.05
        Level of the tests; 1 − alpha the coverage of the t interval.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate``, ``first_difference``, ``se``, ``t``, ``p_value``, ``lower``,
        ``upper``, ``f``, ``f_p_value``; ``difference`` (repeat, outer) the p_i^(j). attrs
        ``estimator``, ``loss``, ``mode``, ``a``, ``b``, ``alpha``, ``warnings``.
    """
    where = "paired_5x2cv"
    name = loss_name(cube, loss)
    a_level = probability(alpha, f"{where}.alpha")
    check_design(int(cube.sizes.get("outer", 0)), int(cube.sizes.get("repeat", 0)))
    a, b = compare_params(cube, compare, where)
    if b is None:
        raise InputError(f"{where}.compare: name two params to compare, e.g. compare: [0, 1]")
    scores, sizes = fold_scores(cube, name, [a, b], what=where)
    p = scores[0] - scores[1]
    res = five_by_two_stats(p, a_level)
    warnings = (guardrails.missing(int(np.isnan(scores).any(axis=(1, 2)).sum()), where)
                + guardrails.test_set_sizes(sizes)
                + guardrails.flat_variance(res["variance"], float(np.abs(p).max()), where)
                + liberal_design(int(sizes[0].sum()), int(cube.sizes.get("feature", 0))))
    out = xr.Dataset({**{key: xr.DataArray(float(res[key])) for key in SCALARS},
                      "difference": (("repeat", "outer"), p)})
    grouped, group_warnings = fold_level_groups(cube, where)
    out.attrs = {"estimator": where, "loss": name, **compare_attrs(cube, a, b),
                 "alpha": a_level, **grouped}
    return guardrails.attach(out, warnings + group_warnings, where)


# DESIGN CHOICE: 5×2cv trains on halves. Dietterich (1998) and Alpaydın (1999) give no size
# rule; both tests assume the ten differences are normal with one variance, which fails when a
# half is small for the model. We use the "10 samples per feature" rule of thumb on the half:
# it separates what was measured (5-feature OLS learners of equal true error on data with 10
# features, 2,000 datasets each, binomial se 0.5%): n = 80 (halves of 40 < 100) rejected 8.2%
# (t) and 9.4% (F) at nominal 5%; n = 200 (halves of 100) 5.6% and 6.2%.
SAMPLES_PER_FEATURE = 10


def liberal_design(n: int, features: int) -> list[dict]:
    """``liberal_design`` when a half of the n analysis samples has fewer than
    SAMPLES_PER_FEATURE samples per feature (features 0: unknown, no warning)."""
    half = n // 2
    if half >= SAMPLES_PER_FEATURE * features:
        return []
    return [guardrails.warning(
        "liberal_design", f"paired_5x2cv trains on halves of {half} samples with {features} "
        f"features (< {SAMPLES_PER_FEATURE} per feature): its t and F tests are known to run "
        "liberal there (8.2% and 9.4% rejections at nominal 5% with n = 80 and 10 features); "
        "prefer corrected_t on a K-fold design", half=half, features=features)]


def check_design(folds: int, repeats: int, where: str = "paired_5x2cv") -> None:
    """InputError unless the design is 2 folds × 5 repeats."""
    if (folds, repeats) != (2, 5):
        raise InputError(f"{where}: needs design {{folds: 2, repeats: 5}} (Dietterich's 5×2cv); "
                         f"this design has {folds} folds × {repeats} repeats")


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`paired_5x2cv`."""
    at = result.attrs
    v = {key: float(result[key]) for key in SCALARS}
    return [f"5×2cv tests (loss {at.get('loss')})", f"  a = {param_text(at.get('a') or {})}",
            f"  b = {param_text(at.get('b') or {})}",
            f"  mean e_a − e_b: {fmt(v['estimate'])}  Dietterich t = {fmt(v['t'])} (5 df, "
            f"p = {fmt(v['p_value'])})  Alpaydın F = {fmt(v['f'])} (10, 5 df, "
            f"p = {fmt(v['f_p_value'])})"]


def _check_workflow_design(design: dict) -> None:
    if (design["folds"], design["repeats"]) != (2, 5):
        raise InputError(f"paired_5x2cv needs {{folds: 2, repeats: 5}} (Dietterich's 5×2cv); "
                         f"got {design['folds']} folds × {design['repeats']} repeats")


declare(paired_5x2cv, raced=True, needs=("fold",), text=describe, check_design=_check_workflow_design,
        check_grid=compare_check(two=True),
        options=[Option("compare", None, param_refs(2, 2), "[a, b]: the two params"),
                 Option("alpha", 0.05, probability, "level of the tests")],
        results={**{v: () for v in SCALARS}, "difference": ("repeat", "outer")})
