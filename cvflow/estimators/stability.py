"""Hypothesis stability and stability-regularised selection (docs/guide/estimators.md; Cory-Wright & Gómez).

- :func:`stability`: the empirical hypothesis stability mu(h) of eq. (5) and, for given
  weights λ, the selections ``argmin_h kfold(h) + λ·mu(h)`` of eq. (7);
- :func:`stability_nested`: the nested choice of λ (eq. 8, Appendix C) end to end.

Both are reductions of stored predictions: the λ grid is a dimension of the results and
costs no fits. The nested part reads the pair splits through the machinery of
:mod:`cvflow.estimators._readers` (``stability_nested`` at λ = 0 is ``nested_cv``).
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import guardrails, np_roles
from ._cube import param_coords, role_terms
from .cube_losses import loss_name
from .labels import param_label, param_text
from ._readers import fold_sizes, inner_score, nested_choice
from .split_scores import kfold_scores
from .registry import Option, declare

DEFAULT_LAMBDAS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0)


def hypothesis_stability(fold_change: np.ndarray) -> xr.Dataset:
    """Eq. (5): ``mu(h) = max_j mean_{i∈D} |ℓ_i(h, fold j) − ℓ_i(h, full)|``.

    ``fold_change`` (param, repeat, outer) is the mean absolute change on D of removing fold
    j (from :func:`role_terms`). Returns ``stability`` (param) = the per-repeat max averaged
    over repeats, ``stability_repeat`` (param, repeat) and ``stability_fold`` (param, repeat,
    outer). A failed fit gives NaN for its param.
    """
    per_repeat = fold_change.max(axis=2)
    return xr.Dataset({"stability": ("param", per_repeat.mean(axis=1)),
                       "stability_repeat": (("param", "repeat"), per_repeat),
                       "stability_fold": (("param", "repeat", "outer"), fold_change)})


def check_lambdas(lambdas, where: str) -> np.ndarray:
    """The λ grid as a sorted array of distinct finite values >= 0 (ties then go to the smallest)."""
    if lambdas is None:
        return np.array(DEFAULT_LAMBDAS)
    if np.isscalar(lambdas):
        lambdas = [lambdas]
    try:
        values = [float(v) for v in lambdas]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {lambdas!r}; give a list of numbers >= 0") from None
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if not values or bad:
        raise InputError(f"{where}: {bad[0] if bad else '[]'} is not a weight; "
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
        ``selected`` (lambda), eq. (7), and attrs ``selected_params`` (a dict per λ).

    Returns
    -------
    xarray.Dataset
        ``stability`` (param), ``stability_repeat`` (param, repeat), ``stability_fold``
        (param, repeat, outer), ``kfold`` (param); with ``lambdas``: ``objective``
        (param, lambda), ``selected`` (lambda) and attrs ``selected_params`` (a dict per λ).
    """
    name = loss_name(cube, loss)
    terms = role_terms(cube, name, roles=("full", "fold", "change"), what="stability")
    out = hypothesis_stability(terms["fold_change"])
    out["kfold"] = kfold_scores(terms["fold_sum"], fold_sizes(cube))["estimate"]
    attrs = {"estimator": "stability", "loss": name}
    if lambdas is not None:
        lam = check_lambdas(lambdas, "stability.lambdas")
        out = out.assign_coords({"lambda": ("lambda", lam)})
        objective = _objective(out["kfold"].values, out["stability"].values, lam)
        out["objective"] = (("param", "lambda"), objective)
        out["selected"] = ("lambda", np_roles.argmin_first(objective, axis=0))
        attrs["selected_params"] = [param_label(cube, h) for h in out["selected"].values]
    out = out.assign_coords(param_coords(cube))
    out.attrs = attrs
    return guardrails.attach(out, guardrails.missing(int(terms["missing"].sum()), "stability"),
                             "stability")


def _objective(score: np.ndarray, mu: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """score + λ·mu with a trailing λ axis; λ = 0 gives exactly ``score`` (NaN mu ignored).
    One array, computed in place (a nested criterion (param, repeat, outer, λ) is 16 MB on
    the 10^6-fit cube with pair splits)."""
    out = mu[..., None] * lam
    out[..., lam == 0] = 0.0
    out += score[..., None]
    return out


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
        ``estimate`` (lambda) = m_λ the nested CV error, ``estimate_repeat`` (repeat, lambda),
        ``chosen`` (repeat, outer, lambda) = h_{λ,t}, ``outer_score`` (repeat, outer, lambda),
        ``inner_score`` and ``inner_stability`` (param, repeat, outer), ``kfold``,
        ``stability`` (param), ``objective`` (param, lambda), ``selected_per_lambda``
        (lambda) the eq. (7) choice for every λ, scalars ``lambda_star``, ``selected`` (h*),
        ``kfold_selected`` (the plain K-fold choice), and with a held-out test set
        ``full_test_risk`` (param), ``test_risk`` (of h*) and ``kfold_test_risk``. attrs
        ``selected_params`` and ``kfold_selected_params`` (dicts), ``warnings``.
    """
    name = loss_name(cube, loss)
    lam = check_lambdas(lambdas, "stability_nested.lambdas")
    terms = role_terms(cube, name, roles=("full", "pair", "change"), what="stability_nested")
    sizes = fold_sizes(cube)
    score = inner_score(terms["inner_sum"], sizes)
    # eq. (5) on D \\ N_t, whose "full" fit is fold t and whose fold fits are the pairs (t, l)
    mu_t = terms["inner_change"].max(axis=3)
    nested = nested_choice(_objective(score, mu_t, lam), terms["fold_sum"], sizes,
                           extra_dims=("lambda",))
    full = hypothesis_stability(terms["fold_change"])
    kf = kfold_scores(terms["fold_sum"], sizes)["estimate"].values
    objective = _objective(kf, full["stability"].values, lam)            # (param, lambda)
    per_lambda = np_roles.argmin_first(objective, axis=0)
    star = int(np_roles.argmin_first(nested["estimate"].values))
    lambda_star = float(lam[star]) if star >= 0 else float("nan")
    selected = int(per_lambda[star]) if star >= 0 else -1
    kfold_selected = int(np_roles.argmin_first(kf))

    out = xr.Dataset({
        "estimate": nested["estimate"],
        "estimate_repeat": nested["estimate_repeat"],
        "chosen": nested["chosen"],
        "outer_score": nested["outer_score"],
        "inner_score": (("param", "repeat", "outer"), score),
        "inner_stability": (("param", "repeat", "outer"), mu_t),
        "kfold": ("param", kf),
        "stability": full["stability"],
        "objective": (("param", "lambda"), objective),
        "selected_per_lambda": ("lambda", per_lambda),
        "lambda_star": xr.DataArray(lambda_star),
        "selected": xr.DataArray(selected),
        "kfold_selected": xr.DataArray(kfold_selected),
    }, coords={"lambda": ("lambda", lam)})
    if "test_risk" in terms:
        risk = terms["test_risk"]
        out["full_test_risk"] = ("param", risk)
        for prefix, h in (("", selected), ("kfold_", kfold_selected)):
            out[f"{prefix}test_risk"] = xr.DataArray(float(risk[h]) if h >= 0 else float("nan"))
    out = out.assign_coords(param_coords(cube))
    out.attrs = {"estimator": "stability_nested", "loss": name,
                 "selected_params": param_label(cube, selected),
                 "kfold_selected_params": param_label(cube, kfold_selected)}
    return guardrails.attach(out, guardrails.missing(int(terms["missing"].sum()),
                                                     "stability_nested"), "stability_nested")

def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`stability_nested` (m_λ against λ and both selections)."""
    lines = [f"stability-regularised nested CV ({result.attrs.get('loss')}):",
             "  lambda        m_lambda (nested CV error)   eq. 7 choice"]
    star = float(result["lambda_star"])
    for i, lam in enumerate(result["lambda"].values):
        mark = "  <- lambda*" if lam == star else ""
        lines.append(f"  {lam:<12.4g}  {float(result['estimate'].values[i]):<28.6g} "
                     f"#{int(result['selected_per_lambda'].values[i])}{mark}")
    test = "test_risk" in result
    lines.append(f"  nested stability choice h*: {param_text(result.attrs['selected_params'])}"
                 + (f"   test risk {float(result['test_risk']):.6g}" if test else ""))
    lines.append(f"  plain K-fold choice:        "
                 f"{param_text(result.attrs['kfold_selected_params'])}"
                 + (f"   test risk {float(result['kfold_test_risk']):.6g}" if test else ""))
    return lines

def describe_stability(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`stability`."""
    mu = result["stability"].values
    kf = result["kfold"].values
    order = np.argsort(np.where(np.isnan(kf), np.inf, kf), kind="stable")[:5]
    lines = [f"hypothesis stability mu(h), eq. 5 ({result.attrs.get('loss')}); best K-fold params:"]
    for h in order:
        lines.append(f"  #{int(h):<4d} kfold {kf[h]:<12.6g} mu {mu[h]:.6g}")
    return lines


def render_stability(result: xr.Dataset, page) -> None:
    """HTML: mu(h) along the grid, per learner."""
    page.grid_panel("stability", "hypothesis stability mu(h) along the grid", result["stability"],
                    legend="mu(h) = max_j mean_i |l_i(h, fold j) - l_i(h, full)|", y_label="mu(h)")


def render(result: xr.Dataset, page) -> None:
    """HTML: m_λ against λ with λ* marked; h* and the test risk on the grid; mu(h)."""
    lam = result["lambda"].values
    star = float(result["lambda_star"])
    mark = int(np.flatnonzero(lam == star)[0]) if math.isfinite(star) else None
    page.curve("m-lambda", f"stability-regularised nested CV error m_λ ({result.attrs.get('loss')})",
               lam, result["estimate"], x_label="λ", y_label="m_λ", mark=mark,
               mark_label=f"λ* = {star:.4g}", section="Choosing λ: nested CV error m_λ")
    page.grid_mark("stability-regularised h*", result["selected"])
    if "full_test_risk" in result:
        page.grid_curve("test risk (full fit)", result["full_test_risk"])
    render_stability(result, page)


def _lambdas_option(value, where: str) -> list[float]:
    return check_lambdas(value, where).tolist()


declare(stability, raced=True, needs=("full", "fold"), terms=("full", "fold", "change"), overview=True,
        options=[Option("lambdas", None, _lambdas_option,
                        "weights λ >= 0: adds the eq. (7) selections per λ")],
        text=describe_stability, html=render_stability,
        results={"stability": ("param",), "stability_repeat": ("param", "repeat"),
                 "stability_fold": ("param", "repeat", "outer"), "kfold": ("param",),
                 "objective?": ("param", "lambda"), "selected?": ("lambda",)})
declare(stability_nested, needs=("full", "fold", "pair"), terms=("full", "pair", "change"),
        text=describe,
        options=[Option("lambdas", list(DEFAULT_LAMBDAS), _lambdas_option,
                        "the λ grid (weights >= 0) nested CV chooses from; costs no fits")],
        html=render,
        results={"estimate": ("lambda",), "estimate_repeat": ("repeat", "lambda"),
                 "chosen": ("repeat", "outer", "lambda"),
                 "outer_score": ("repeat", "outer", "lambda"),
                 "inner_score": ("param", "repeat", "outer"),
                 "inner_stability": ("param", "repeat", "outer"), "kfold": ("param",),
                 "stability": ("param",), "objective": ("param", "lambda"),
                 "selected_per_lambda": ("lambda",), "lambda_star": (), "selected": (),
                 "kfold_selected": (), "full_test_risk?": ("param",), "test_risk?": (),
                 "kfold_test_risk?": ()})
