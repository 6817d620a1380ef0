"""Classic nested cross-validation from the pair splits (docs/guide/estimators.md; Varma & Simon).

The inner machinery every nested estimator reads is in :mod:`cvflow.estimators._readers`:

- :func:`~cvflow.estimators._readers.inner_score` — the inner K-fold score s_t(h) of each
  outer fold t, i.e. the K-fold estimate on D \\ N_t with the K − 1 folds {N_l, l ≠ t}, from
  the pair-role loss sums of :func:`cvflow.estimators._cube.role_terms`;
- :func:`~cvflow.estimators._readers.nested_choice` — for a penalised inner criterion, the
  per-outer choice h_t and its outer loss on N_t with the fold-t fit, pooled into the nested
  CV error.

``stability_nested`` (stability.py) adds λ·mu_t(h) to the inner score; ``nested_cv`` is the
λ = 0 case and calls the same functions; ``bates_ncv`` (bates.py) and ``nested_compare`` read
``inner_score`` too. No fit depends on any of this: the pair splits are fitted once, each pair
(j, l) serving both orders (t, l) = (j, l) and (l, j).
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from . import guardrails, np_roles
from ._cube import param_coords, role_terms
from .cube_losses import cube_loss
from .labels import param_label, param_text
from ._readers import fold_sizes, inner_score, nested_choice
from .fold_metrics import metric_terms
from .registry import declare


def nested_cv(cube: xr.Dataset, *, loss: str | None = None) -> xr.Dataset:
    """Classic nested CV (Varma & Simon): tune by inner K-fold, score on the outer fold.

    For each repeat r and outer fold t, ``h_t = argmin_h s_t(h)`` (the inner K-fold score on
    D \\ N_t with K − 1 inner folds, :func:`inner_score`), scored on N_t with the fold-t fit.
    It is ``stability_nested`` at λ = 0.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with fold and pair splits (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's. With a per-fold
        metric (``roc_auc``, ``r2``, ...) every score is the metric on a test fold, inner
        scores are the mean over the inner folds, the choice maximises it when larger is
        better, and the estimate is the mean of the outer folds' metrics.

    Returns
    -------
    xarray.Dataset
        ``estimate`` (scalar): the nested CV error (pooled over outer folds, mean over
        repeats); ``estimate_repeat`` (repeat); ``chosen`` (repeat, outer) param index per
        outer fold; ``outer_score`` (repeat, outer) its mean loss on N_t; ``inner_score``
        (param, repeat, outer); ``kfold`` (param) the plain K-fold estimate and
        ``kfold_min`` its minimum (the optimistic "best CV score"); attrs ``loss``,
        ``chosen_params`` (the chosen settings as dicts, a list per repeat and outer fold) and
        ``warnings``. A param missing a fold or pair fit is NaN throughout and never chosen;
        an outer fold where every param is missing makes the estimate NaN (no repeat is
        dropped).
    """
    decl = cube_loss(cube, loss)
    sizes = fold_sizes(cube)
    if decl.pointwise:
        terms = role_terms(cube, decl, roles=("pair",), what="nested_cv")
        score = inner_score(terms["inner_sum"], sizes)
        out = nested_choice(score, terms["fold_sum"], sizes)
        kf = (terms["fold_sum"].sum(axis=2) / sizes.sum(axis=1)).mean(axis=1)
    else:
        terms, score, out, kf = _metric_nested(cube, decl, sizes)
    out["inner_score"] = (("param", "repeat", "outer"), score)
    out["kfold"] = ("param", kf)
    best = np.nanmin(decl.sign * kf) * decl.sign if not np.isnan(kf).all() else np.nan
    out["kfold_min"] = xr.DataArray(best)
    out["fold_size"] = (("repeat", "outer"), sizes.astype(np.float64))
    out = out.assign_coords(param_coords(cube))
    chosen = out["chosen"].values
    out.attrs = {"estimator": "nested_cv", "loss": decl.label,
                 "greater_is_better": int(decl.greater_is_better),
                 "chosen_params": [[param_label(cube, h) for h in row] for row in chosen]}
    return guardrails.attach(out, guardrails.missing(int(terms["missing"].sum()), "nested_cv"),
                             "nested_cv")


def _metric_nested(cube: xr.Dataset, decl, sizes: np.ndarray):
    """Nested CV with a per-fold metric: (terms, inner score, choice dataset, K-fold estimate).

    The inner score of outer fold t is the mean over l ≠ t of the metric of pair (t, l) on
    N_l; h_t is its best param; the nested estimate is the mean over outer folds of the
    metric of fold t's fit of h_t on N_t (fold means, as the metric's K-fold estimate).
    """
    terms = metric_terms(cube, decl, roles=("pair",), what="nested_cv")
    fold_metric, k = terms["fold_metric"], sizes.shape[1]
    inner = np.where(np.eye(k, dtype=bool), 0.0, terms["inner_metric"])
    score = inner.sum(axis=3) / (k - 1)            # a failed pair fit (NaN) makes it NaN
    chosen = np_roles.argmin_first(np.where(np.isnan(fold_metric), np.nan, decl.sign * score))
    picked = np.take_along_axis(fold_metric, np.maximum(chosen, 0)[None], axis=0)[0]
    outer = np.where(chosen >= 0, picked, np.nan)
    dims = ("repeat", "outer")
    out = xr.Dataset({
        "chosen": (dims, chosen),
        "outer_score": (dims, outer),
        "estimate_repeat": ("repeat", outer.mean(axis=1)),
        "estimate": ((), outer.mean(axis=1).mean()),
    })
    return terms, score, out, fold_metric.mean(axis=2).mean(axis=1)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`nested_cv`."""
    lines = [f"nested CV error ({result.attrs.get('loss')}): {float(result['estimate']):.6g}"
             f"   (best plain K-fold score: {float(result['kfold_min']):.6g})"]
    chosen = result.attrs.get("chosen_params", [])
    for r, row in enumerate(chosen):
        picks = ", ".join(param_text(p) for p in row)
        lines.append(f"  repeat {r}: chosen per outer fold: {picks}")
    return lines


declare(nested_cv, needs=("fold", "pair"), terms=("pair",), metrics=True, text=describe,
        results={"estimate": (), "estimate_repeat": ("repeat",), "chosen": ("repeat", "outer"),
                 "outer_sum": ("repeat", "outer"), "outer_score": ("repeat", "outer"),
                 "inner_score": ("param", "repeat", "outer"), "kfold": ("param",),
                 "kfold_min": (), "fold_size": ("repeat", "outer")})
