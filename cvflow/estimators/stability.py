"""Hypothesis stability and stability-regularised selection (DESIGN.md 6.3; Cory-Wright & Gómez).

- :func:`stability`: the empirical hypothesis stability mu(h) of eq. (5) and, for given
  weights λ, the selections ``argmin_h kfold(h) + λ·mu(h)`` of eq. (7);
- :func:`stability_nested`: the nested choice of λ (eq. 8, Appendix C) end to end.

Both are reductions of stored predictions: the λ grid is a dimension of the results and
costs no fits. The nested part reads the pair splits through the machinery of
:mod:`cvflow.estimators.nested` (``stability_nested`` at λ = 0 is ``nested_cv``).
"""
from __future__ import annotations

import json
import math

import numpy as np
import xarray as xr

from ..errors import InputError
from ._cube import (analysis_weights, argmin_first, at_splits, fold_membership, loss_name,
                    param_coords, param_label, pointwise_loss, require, weighted_mean,
                    weighted_sum)
from .kfold import kfold_scores
from .nested import _short, inner_scores, nested_choice, off_diagonal, pair_losses
from .selection import full_fit_losses, has_test_set, heldout_risk

DEFAULT_LAMBDAS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0)


def fold_fit_losses(cube: xr.Dataset, loss: str | None = None, *, what: str = "stability"
                    ) -> xr.DataArray:
    """ℓ_i(h, fold j) on every sample; dims (param, repeat, outer, sample), lazy."""
    index = require(cube, "fold_split", what)
    return pointwise_loss(cube, loss, pred=at_splits(cube["pred"], index))


def hypothesis_stability(cube: xr.Dataset, loss: str | None = None, *, what: str = "stability",
                         folds: xr.DataArray | None = None) -> xr.Dataset:
    """Eq. (5): ``mu(h) = max_j mean_{i∈D} |ℓ_i(h, fold j) − ℓ_i(h, full)|``.

    Returns ``stability`` (param) = the per-repeat max averaged over repeats,
    ``stability_repeat`` (param, repeat) and ``stability_fold`` (param, repeat, outer), the
    mean absolute change on D of removing fold j. A failed fit gives NaN for its param.
    """
    folds = fold_fit_losses(cube, loss, what=what) if folds is None else folds
    full = full_fit_losses(cube, loss, what=what)
    per_fold = weighted_mean(abs(folds - full), analysis_weights(cube))
    per_repeat = per_fold.max("outer", skipna=False)
    return xr.Dataset({"stability": per_repeat.mean("repeat", skipna=False),
                       "stability_repeat": per_repeat, "stability_fold": per_fold})


def check_lambdas(lambdas, where: str) -> np.ndarray:
    """The λ grid as a sorted array of distinct finite values >= 0 (ties then go to the smallest)."""
    if lambdas is None:
        return np.array(DEFAULT_LAMBDAS)
    if np.isscalar(lambdas):
        lambdas = [lambdas]
    try:
        values = [float(v) for v in lambdas]
    except (TypeError, ValueError):
        raise InputError(f"{where}.lambdas: {lambdas!r}; give a list of numbers >= 0") from None
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if not values or bad:
        raise InputError(f"{where}.lambdas: {bad[0] if bad else '[]'} is not a weight; "
                         "give a non-empty list of finite numbers >= 0, e.g. [0, 0.1, 1, 10]")
    # DESIGN CHOICE: sorted ascending, so an argmin tie over λ goes to the least regularised λ.
    return np.unique(np.array(values, dtype=np.float64))


def stability(cube: xr.Dataset, *, loss: str | None = None, lambdas=None) -> xr.Dataset:
    """Empirical hypothesis stability per param (eq. 5) and stability-regularised selections.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the full and fold splits (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    lambdas : list of float, optional
        Weights λ >= 0; when given, also ``objective`` (lambda, param) = kfold + λ·mu and
        ``selected`` (lambda), eq. (7).

    Returns
    -------
    xarray.Dataset
        ``stability`` (param), ``stability_repeat`` (param, repeat), ``stability_fold``
        (param, repeat, outer), ``kfold`` (param); with ``lambdas``: ``objective``,
        ``selected`` (lambda) and attrs ``selected_params`` (JSON list per λ).
    """
    name = loss_name(cube, loss)
    out = hypothesis_stability(cube, name).compute()
    out["kfold"] = kfold_scores(cube, name)["estimate"].compute()
    attrs = {"estimator": "stability", "loss": name}
    if lambdas is not None:
        lam = xr.DataArray(check_lambdas(lambdas, "stability"), dims="lambda")
        out = out.assign_coords({"lambda": lam})
        out["objective"] = _objective(out["kfold"], out["stability"], out["lambda"])
        out["selected"] = argmin_first(out["objective"], "param")
        attrs["selected_params"] = json.dumps([param_label(cube, h) for h in out["selected"].values])
    out = out.assign_coords(param_coords(cube))
    out.attrs = attrs
    return out


def _objective(score: xr.DataArray, mu: xr.DataArray, lam: xr.DataArray) -> xr.DataArray:
    """score + λ·mu, with λ = 0 giving exactly ``score`` (bit for bit, NaN mu ignored)."""
    return score + xr.where(lam == 0, 0.0, lam * mu)


def inner_stability(cube: xr.Dataset, pairs: xr.DataArray, folds: xr.DataArray,
                    rest_size: xr.DataArray) -> xr.DataArray:
    """``mu_t(h) = max_{l≠t} mean_{i∈D\\N_t} |ℓ_i(h, pair(t, l)) − ℓ_i(h, fold t)|``.

    Eq. (5) applied to D \\ N_t, whose "full" fit is fold t and whose fold fits are the pairs.
    Dims (param, repeat, outer).
    """
    member = fold_membership(cube)
    rest = analysis_weights(cube) - member
    sums = weighted_sum(abs(pairs - folds), rest)
    per_inner = (sums / rest_size).where(off_diagonal(member.sizes["outer"]), 0.0)
    return per_inner.max("inner", skipna=False)


def stability_nested(cube: xr.Dataset, *, loss: str | None = None, lambdas=None) -> xr.Dataset:
    """Stability-regularised selection with λ chosen by nested CV (Cory-Wright & Gómez, App. C).

    For each repeat r and outer fold t: inner scores s_t(h) (the pooled K-fold estimate on
    D \\ N_t from the pair fits, eq. 8), inner stabilities mu_t(h); for every λ the choice
    ``h_{λ,t} = argmin_h s_t(h) + λ·mu_t(h)`` and ``m_{λ,t} = Σ_{i∈N_t} ℓ_i(h_{λ,t}, fold t)``.
    Then ``m_λ = Σ_t m_{λ,t} / n`` (mean over repeats), ``λ* = argmin_λ m_λ`` and
    ``h* = argmin_h kfold(h) + λ*·mu(h)`` (eq. 7). λ = 0 is classic nested CV.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the full, fold and pair splits (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    lambdas : list of float, optional
        Weights λ >= 0 (sorted; ties in m_λ go to the smallest). Default
        ``[0, 0.1, 0.3, 1, 3, 10]``. Adding values costs no fits.

    Returns
    -------
    xarray.Dataset
        ``nested_error`` (lambda) = m_λ, ``nested_error_repeat`` (repeat, lambda),
        ``chosen`` (repeat, outer, lambda) = h_{λ,t}, ``outer_score`` (repeat, outer, lambda),
        ``inner_score`` and ``inner_stability`` (param, repeat, outer), ``kfold``,
        ``stability`` (param), ``objective`` (lambda, param), ``selected_lambda`` (lambda)
        eq. (7) choice for every λ, scalars ``lambda_star``, ``selected`` (h*),
        ``kfold_selected`` (the λ = 0 plain K-fold choice), ``nested_error_min`` (m_λ*),
        and with a held-out test set ``test_risk`` (param), ``test_risk_selected``,
        ``test_risk_kfold``. Attrs ``selected_param`` and ``kfold_param`` (JSON).
    """
    name = loss_name(cube, loss)
    lam = xr.DataArray(check_lambdas(lambdas, "stability_nested"), dims="lambda")
    lam = lam.assign_coords({"lambda": lam})
    pairs = pair_losses(cube, name, what="stability_nested")
    folds = fold_fit_losses(cube, name, what="stability_nested")
    inner = inner_scores(cube, name, pairs=pairs).compute()
    mu_t = inner_stability(cube, pairs, folds, inner["rest_size"]).compute()
    member = fold_membership(cube)
    sizes = member.sum("sample")
    outer_sums = weighted_sum(folds, member).compute()
    criterion = _objective(inner["inner_score"], mu_t, lam)
    nested = nested_choice(criterion, outer_sums, sizes)

    full = hypothesis_stability(cube, name, what="stability_nested", folds=folds).compute()
    kf = kfold_scores(cube, name)["estimate"].compute()
    objective = _objective(kf, full["stability"], lam)
    selected_lambda = argmin_first(objective, "param")
    star = int(argmin_first(nested["estimate"], "lambda"))
    lambda_star = float(lam.values[star]) if star >= 0 else float("nan")
    selected = int(selected_lambda.values[star]) if star >= 0 else -1
    kfold_selected = int(argmin_first(kf))

    out = xr.Dataset({
        "nested_error": nested["estimate"],
        "nested_error_repeat": nested["estimate_repeat"],
        "chosen": nested["chosen"],
        "outer_score": nested["outer_score"],
        "inner_score": inner["inner_score"],
        "inner_stability": mu_t,
        "kfold": kf,
        "stability": full["stability"],
        "objective": objective.transpose("lambda", "param"),
        "selected_lambda": selected_lambda,
        "lambda_star": xr.DataArray(lambda_star),
        "selected": xr.DataArray(selected),
        "kfold_selected": xr.DataArray(kfold_selected),
        "nested_error_min": xr.DataArray(float(nested["estimate"].values[star]) if star >= 0
                                         else float("nan")),
    })
    if has_test_set(cube):
        risk = heldout_risk(cube, loss=name)
        out["test_risk"] = risk
        out["test_risk_selected"] = xr.DataArray(float(risk.values[selected]) if selected >= 0
                                                 else float("nan"))
        out["test_risk_kfold"] = xr.DataArray(float(risk.values[kfold_selected])
                                              if kfold_selected >= 0 else float("nan"))
    out = out.assign_coords(param_coords(cube))
    out.attrs = {"estimator": "stability_nested", "loss": name,
                 "selected_param": json.dumps(param_label(cube, selected)),
                 "kfold_param": json.dumps(param_label(cube, kfold_selected))}
    return out


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`stability_nested` (m_λ against λ and both selections)."""
    lines = [f"stability-regularised nested CV ({result.attrs.get('loss')}):",
             "  lambda        m_lambda (nested CV error)   eq. 7 choice"]
    star = float(result["lambda_star"])
    for i, lam in enumerate(result["lambda"].values):
        mark = "  <- lambda*" if lam == star else ""
        lines.append(f"  {lam:<12.4g}  {float(result['nested_error'].values[i]):<28.6g} "
                     f"#{int(result['selected_lambda'].values[i])}{mark}")
    sel = json.loads(result.attrs.get("selected_param", "{}"))
    kf = json.loads(result.attrs.get("kfold_param", "{}"))
    test = "test_risk_selected" in result
    lines.append(f"  nested stability choice h*: {_short(sel)}"
                 + (f"   test risk {float(result['test_risk_selected']):.6g}" if test else ""))
    lines.append(f"  plain K-fold choice:        {_short(kf)}"
                 + (f"   test risk {float(result['test_risk_kfold']):.6g}" if test else ""))
    return lines


def describe_stability(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`stability`."""
    mu = result["stability"].values
    kf = result["kfold"].values
    order = np.argsort(np.where(np.isnan(kf), np.inf, kf))[:5]
    lines = [f"hypothesis stability mu(h), eq. 5 ({result.attrs.get('loss')}); best K-fold params:"]
    for h in order:
        lines.append(f"  #{int(h):<4d} kfold {kf[h]:<12.6g} mu {mu[h]:.6g}")
    return lines
