"""Corrected repeated K-fold t-test (Nadeau & Bengio 2003; Bouckaert & Frank 2004).

On R repeats of K-fold, the fold-level values are ``d_{r,j}`` = the difference of the fold
scores of params a and b on fold j of repeat r (``mean_{i∈N_j} ℓ_i(a, fold j) −
mean_{i∈N_j} ℓ_i(b, fold j)``), or the fold score of a alone in one-learner mode. With
``d̄`` their mean and ``s²`` their sample variance over the K·R folds,

    variance = (1/(K·R) + n_test/n_train) · s²,   t = d̄ / sqrt(variance),   K·R − 1 df.

The naive factor 1/(K·R) treats the folds as independent; the added n_test/n_train
accounts for the overlap of the training sets. With unequal folds n_test = n/K (the mean
fold size) and n_train = n − n/K, so the ratio is 1/(K − 1) as for equal folds. The kernel is
the one :func:`cvflow.estimators.ustat.nadeau_bengio` applies to the subset design.

In one-learner mode the result is an interval for a's error (``t`` and ``p_value`` NaN): it
is also the standard error of the repeat-averaged K-fold estimate (Bouckaert & Frank's
corrected repeated K-fold variance).
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from . import guardrails
from ._cube import fold_level_groups
from .cube_losses import loss_name
from .labels import param_text
from ._readers import compare_attrs, compare_check, compare_params, fold_scores, out_of_fold
from .np_roles import corrected_t_stats
from .registry import Option, declare, fmt, param_refs, probability

SCALARS = ("estimate", "sample_variance", "variance", "se", "t", "p_value", "lower", "upper")


def corrected_t(cube: xr.Dataset, *, loss: str | None = None, compare=None,
                alpha: float = 0.05) -> xr.Dataset:
    """Corrected repeated K-fold t-test of e_a − e_b (or an interval for e_a) on the fold design.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with K-fold splits (any number of repeats; K ≥ 2).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    compare : list, optional
        ``[a, b]`` (two params) or ``[a]`` (one-learner mode), each an index, a learner name
        with one param, ``"learner(key=value)"`` or ``{learner: name, key: value}``. A cube
        with one or two params needs none.
    alpha : float, default 0.05
        Level of the two-sided test; 1 − alpha the interval's coverage.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (mean fold-level difference d̄), ``sample_variance``,
        ``variance``, ``se``, ``t``, ``df``, ``p_value``, ``lower``, ``upper``, ``ratio``;
        ``difference`` (repeat, outer) the fold-level values. attrs ``estimator``, ``loss``,
        ``mode``, ``a``, ``b``, ``alpha``, ``folds``, ``repeats``, ``warnings``; on grouped
        data ``groups`` (G) and ``inference``. Grouped data needs no change here when the
        folds keep groups whole (``splitter: group``): see
        :func:`cvflow.estimators._cube.fold_level_groups` and docs/guide/grouped.md; when
        groups cross folds a ``groups_cross_folds`` warning says the test is liberal.

    Examples
    --------
    >>> corrected_t(cube, compare=["ridge(alpha=1.0)", "lasso(alpha=0.1)"])  # doctest: +SKIP
    """
    where = "corrected_t"
    name = loss_name(cube, loss)
    a_level = probability(alpha, f"{where}.alpha")
    a, b = compare_params(cube, compare, where)
    scores, sizes = fold_scores(cube, name, [a] if b is None else [a, b], what=where)
    d = scores[0] if b is None else scores[0] - scores[1]
    res = corrected_t_stats(d, a_level)
    if b is None:
        res["t"] = res["p_value"] = np.nan
    r, k = d.shape
    warnings = (guardrails.missing(int(np.isnan(scores).any(axis=(1, 2)).sum()), where)
                + guardrails.test_set_sizes(sizes) + guardrails.fold_count(r * k, where)
                + guardrails.flat_variance(float(res["sample_variance"]),
                                           float(np.abs(d).max()), where))
    if b is not None:
        e, _ = out_of_fold(cube, name, where, [a, b])
        warnings += guardrails.skewed_differences(e[0] - e[1], where)
    grouped, group_warnings = fold_level_groups(cube, where)
    out = xr.Dataset({
        **{key: xr.DataArray(float(res[key])) for key in SCALARS + ("ratio",)},
        "df": xr.DataArray(int(res["df"])),
        "difference": (("repeat", "outer"), d),
    })
    out.attrs = {"estimator": where, "loss": name, **compare_attrs(cube, a, b),
                 "alpha": a_level, "folds": k, "repeats": r, **grouped}
    return guardrails.attach(out, warnings + group_warnings, where)



def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`corrected_t`."""
    at = result.attrs
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    v = {key: float(result[key]) for key in SCALARS}
    head = (f"corrected repeated K-fold t (K = {at.get('folds')}, R = {at.get('repeats')}, "
            f"df {int(result['df'])}, loss {at.get('loss')})")
    if at.get("mode") == "difference":
        return [head, f"  a = {param_text(at.get('a') or {})}",
                f"  b = {param_text(at.get('b') or {})}",
                f"  e_a − e_b: {fmt(v['estimate'])}  se {fmt(v['se'])}  t = {fmt(v['t'])}  "
                f"p = {fmt(v['p_value'])}  {level:g}% CI [{fmt(v['lower'])}, {fmt(v['upper'])}]"]
    return [head, f"  param = {param_text(at.get('a') or {})}",
            f"  error: {fmt(v['estimate'])}  se {fmt(v['se'])}  {level:g}% CI "
            f"[{fmt(v['lower'])}, {fmt(v['upper'])}]"]


declare(corrected_t, raced=True, needs=("fold",), text=describe, check_grid=compare_check(),
        options=[Option("compare", None, param_refs(1, 2),
                        "[a, b] (two params) or [a] (an interval for e_a)"),
                 Option("alpha", 0.05, probability, "level of the test; 1 - alpha the coverage")],
        results={**{v: () for v in SCALARS + ("ratio", "df")},
                 "difference": ("repeat", "outer")})
