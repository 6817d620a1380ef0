"""Correlated Bayesian t-test (Corani & Benavoli 2015; Benavoli, Corani, Demšar & Zaffalon,
JMLR 2017) on the fold design.

The data are the K·R fold-level differences ``d_{r,j}`` = fold score of a − fold score of b
on fold j of repeat r (the values :func:`cvflow.estimators.corrected_t` tests). They are
modelled as normal with mean δ and a correlation ρ = n_test/n_total = 1/K between any two of
them (the overlap of the training sets). Under the non-informative prior of Corani & Benavoli
the posterior of δ is a Student t with

    df = K·R − 1,   location = d̄,   scale² = (1/(K·R) + ρ/(1 − ρ)) · s²,   ρ/(1 − ρ) = 1/(K − 1),

with d̄ and s² the mean and sample variance of the K·R values: the scale is corrected_t's
standard error. With a region of practical equivalence (rope) r ≥ 0, in the loss's units:

    P(a better) = P(δ < −r),   P(rope) = P(−r ≤ δ ≤ r),   P(b better) = P(δ > r).

Equal to baycomp's ``two_on_single(x, y, rope, runs=R)`` with x, y the fold scores of a and
b written as scores (higher is better: the negated losses), whose ``(p_left, p_rope,
p_right)`` are (P(a better), P(rope), P(b better)); with ``rope = 0`` baycomp returns
``(p_left, p_right)`` and P(rope) is 0 (tests/test_bayes_t.py).
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr
from ..lazy import stats

from ..errors import InputError
from . import guardrails
from .cube_losses import loss_name
from .labels import param_text
from ._readers import compare_attrs, compare_check, compare_params, fold_scores
from .np_roles import corrected_repeated_se
from .registry import Option, declare, fmt, number, param_refs

PROBABILITIES = ("p_a_better", "p_rope", "p_b_better")
POSTERIOR = ("location", "scale")


def bayes_t_stats(d: np.ndarray, rope: float) -> dict:
    """The posterior of the mean difference δ from fold-level values ``d`` (R, K), K ≥ 2.

    Returns ``df`` (K·R − 1), ``location`` (d̄), ``scale`` and the three probabilities
    ``p_a_better`` (δ < −rope), ``p_rope``, ``p_b_better`` (δ > rope). Everything but ``df`` is
    NaN if any d is NaN; the probabilities and the scale are NaN when the values do not vary
    (:func:`guardrails.flat`).
    """
    d = np.asarray(d, dtype=np.float64)
    r, k = d.shape
    flat = d.ravel()
    location = float(flat.mean())
    scale = float(corrected_repeated_se(d))
    out = {"df": r * k - 1, "location": location, "scale": scale,
           **{key: np.nan for key in PROBABILITIES}}
    s2 = float(flat.var(ddof=1)) if flat.size > 1 else np.nan
    # DESIGN CHOICE: values that do not vary have no spread to learn from: baycomp then puts
    # the whole posterior on d̄ (P = 0 or 1); here the probabilities are NaN and
    # variance_not_positive says why, as corrected_t's t and p are.
    if not np.isfinite(scale) or guardrails.flat(s2, float(np.abs(flat).max(initial=0.0))):
        out["scale"] = np.nan if not np.isfinite(scale) else scale
        return out

    posterior = stats.t(r * k - 1, loc=location, scale=scale)
    low = float(posterior.cdf(-rope))
    high = float(posterior.sf(rope))
    out.update(p_a_better=low, p_b_better=high, p_rope=max(0.0, 1.0 - low - high))
    return out


def bayes_t(cube: xr.Dataset, *, loss: str | None = None, compare=None,
            rope: float = 0.0) -> xr.Dataset:
    """Correlated Bayesian t-test of e_a − e_b on the fold design, with a rope.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with K-fold splits (any number of repeats; K ≥ 2).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    compare : list, optional
        ``[a, b]``, each an index, a learner name with one param, ``"learner(key=value)"``
        or ``{learner: name, key: value}``. A cube with two params needs none.
    rope : float, default 0
        Half-width of the region of practical equivalence, in the loss's units (e.g. 0.01:
        one percentage point of misclassification with ``zero_one``). 0 gives P(rope) = 0.

    Returns
    -------
    xarray.Dataset
        Scalars ``p_a_better``, ``p_rope``, ``p_b_better`` and the posterior Student t of
        e_a − e_b: ``df``, ``location``, ``scale``; ``difference`` (repeat, outer) the
        fold-level values. attrs ``estimator``, ``loss``, ``mode``, ``a``, ``b``, ``rope``,
        ``folds``, ``repeats``, ``warnings``.

    Examples
    --------
    >>> bayes_t(cube, compare=["ridge(alpha=1.0)", "lasso(alpha=0.1)"], rope=0.01)  # doctest: +SKIP
    """
    where = "bayes_t"
    name = loss_name(cube, loss)
    width = number(0.0)(rope, f"{where}.rope")
    a, b = compare_params(cube, compare, where)
    if b is None:
        raise InputError(f"{where}.compare: name two params to compare, e.g. compare: [0, 1]")
    scores, sizes = fold_scores(cube, name, [a, b], what=where)
    d = scores[0] - scores[1]
    res = bayes_t_stats(d, width)
    r, k = d.shape
    s2 = float(d.var(ddof=1)) if d.size > 1 else np.nan
    warnings = (guardrails.missing(int(np.isnan(scores).any(axis=(1, 2)).sum()), where)
                + guardrails.test_set_sizes(sizes) + guardrails.fold_count(r * k, where)
                + guardrails.flat_variance(s2, float(np.abs(d).max()), where))
    out = xr.Dataset({
        **{key: xr.DataArray(float(res[key])) for key in PROBABILITIES + POSTERIOR},
        "df": xr.DataArray(int(res["df"])),
        "difference": (("repeat", "outer"), d),
    })
    out.attrs = {"estimator": where, "loss": name, **compare_attrs(cube, a, b), "rope": width,
                 "folds": k, "repeats": r}
    return guardrails.attach(out, warnings, where)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`bayes_t`."""
    at = result.attrs
    v = {key: float(result[key]) for key in PROBABILITIES + POSTERIOR}
    return [f"correlated Bayesian t-test (K = {at.get('folds')}, R = {at.get('repeats')}, "
            f"loss {at.get('loss')}, rope {fmt(float(at.get('rope', 0.0)))})",
            f"  a = {param_text(at.get('a') or {})}", f"  b = {param_text(at.get('b') or {})}",
            f"  P(a better) = {fmt(v['p_a_better'])}  P(rope) = {fmt(v['p_rope'])}  "
            f"P(b better) = {fmt(v['p_b_better'])}",
            f"  posterior of e_a − e_b: Student t, df {int(result['df'])}, location "
            f"{fmt(v['location'])}, scale {fmt(v['scale'])}"]


def render(result: xr.Dataset, page) -> None:
    """HTML: the three probabilities and the posterior's parameters as a table."""
    at = result.attrs
    page.table(f"bayes_t: a = {param_text(at.get('a') or {})}, "
               f"b = {param_text(at.get('b') or {})}, rope {at.get('rope')}",
               {"P(a better)": float(result["p_a_better"]), "P(rope)": float(result["p_rope"]),
                "P(b better)": float(result["p_b_better"]), "posterior df": int(result["df"]),
                "posterior location (e_a − e_b)": float(result["location"]),
                "posterior scale": float(result["scale"])})


# DESIGN CHOICE: a raced cube serves bayes_t (raced=True). Its two params are named by the
# user, not chosen from the results; when both survived the race their fold scores are the full
# study's (every fold fitted), and the posterior depends on the data only through the
# likelihood, so the race's data-dependent stopping of *other* params leaves it as it is (the
# likelihood principle: a stopping rule is ignorable for a Bayesian posterior). A named param
# the race dropped lacks later folds: NaN with the missing-fits warning (the NaN rule), and the
# report's racing section says when it was dropped. tests/test_racing_report.py checks both.
declare(bayes_t, raced=True, needs=("fold",), text=describe, html=render,
        check_grid=compare_check(two=True),
        options=[Option("compare", None, param_refs(1, 2), "[a, b]: the two params"),
                 Option("rope", 0.0, number(0.0),
                        "half-width of the region of practical equivalence, in loss units")],
        results={**{v: () for v in PROBABILITIES + POSTERIOR + ("df",)},
                 "difference": ("repeat", "outer")})
