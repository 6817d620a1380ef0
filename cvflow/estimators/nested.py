"""Classic nested cross-validation from the pair splits (DESIGN.md 6.4; Varma & Simon).

The inner machinery here is shared by every nested estimator:

- :func:`pair_losses` — ℓ_i(h, pair(t, l)) for every (param, repeat, outer t, inner l, sample);
- :func:`inner_scores` — the inner K-fold score s_t(h) of each outer fold t, i.e. the K-fold
  estimate on D \\ N_t with the K − 1 folds {N_l, l ≠ t};
- :func:`nested_choice` — for a penalised inner criterion, the per-outer choice h_t and its
  outer loss on N_t with the fold-t fit, pooled into the nested CV error.

``stability_nested`` (stability.py) adds λ·mu_t(h) to the inner score; ``nested_cv`` is the
λ = 0 case and calls the same functions; ``bates_ncv`` (bates.py) reads ``inner_scores`` for
its e_in. No fit depends on any of this: the pair splits are fitted once, each pair (j, l)
serving both orders (t, l) = (j, l) and (l, j).
"""
from __future__ import annotations

import json

import numpy as np
import xarray as xr

from ._cube import (argmin_first, at_splits, fold_membership, loss_name, param_coords, param_label,
                    pointwise_loss, require, weighted_sum)
from .kfold import fold_losses


def off_diagonal(k: int) -> xr.DataArray:
    """True where outer t != inner l; dims (outer, inner)."""
    return xr.DataArray(~np.eye(k, dtype=bool), dims=("outer", "inner"))


def pair_losses(cube: xr.Dataset, loss: str | None = None, *, what: str = "nested CV"
                ) -> xr.DataArray:
    """ℓ_i(h, pair(t, l)); dims (param, repeat, outer, inner, sample), NaN on the diagonal.

    Lazy when the cube is: one take of the pair splits along ``split``.
    """
    index = require(cube, "pair_split", what)
    return pointwise_loss(cube, loss, pred=at_splits(cube["pred"], index))


def inner_scores(cube: xr.Dataset, loss: str | None = None, *, what: str = "nested CV",
                 pairs: xr.DataArray | None = None) -> xr.Dataset:
    """The inner K-fold score of every outer fold (eq. 8 of Cory-Wright & Gómez).

    ``s_t(h) = Σ_{l≠t} Σ_{i∈N_l} ℓ_i(h, pair(t, l)) / (n − |N_t|)``: the pooled K-fold
    estimate on D \\ N_t, the same estimator (DESIGN.md 6.1) the final selection uses on D.

    Returns ``inner_score`` (param, repeat, outer), ``inner_sum`` (param, repeat, outer,
    inner) = Σ_{i∈N_l} ℓ_i(h, pair(t, l)) with 0 on the diagonal, and ``rest_size`` (repeat,
    outer) = n − |N_t|. A failed pair fit makes the param's score NaN (never skipped).
    """
    pairs = pair_losses(cube, loss, what=what) if pairs is None else pairs
    member = fold_membership(cube)
    k = member.sizes["outer"]
    sums = weighted_sum(pairs, member.rename(outer="inner"))
    sums = sums.where(off_diagonal(k), 0.0)
    sizes = member.sum("sample")
    rest = sizes.sum("outer") - sizes
    total = sums.sum("inner", skipna=False)
    return xr.Dataset({"inner_score": total / rest, "inner_sum": sums, "rest_size": rest})


def nested_choice(criterion: xr.DataArray, outer_sums: xr.DataArray, sizes: xr.DataArray
                  ) -> xr.Dataset:
    """Per-outer choice ``h_t = argmin_h criterion`` and its outer loss, pooled.

    Parameters
    ----------
    criterion : DataArray (param, repeat, outer, ...)
        The inner criterion of each outer fold (extra dims, e.g. ``lambda``, are kept).
    outer_sums : DataArray (param, repeat, outer)
        Σ_{i∈N_t} ℓ_i(h, fold t).
    sizes : DataArray (repeat, outer)
        |N_t|.

    Returns
    -------
    Dataset with ``chosen`` (repeat, outer, ...) param index (ties to the first, NaN params
    skipped, -1 if all NaN), ``outer_sum`` = m_t = Σ_{i∈N_t} ℓ_i(h_t, fold t), ``outer_score``
    = m_t / |N_t|, ``estimate_repeat`` (repeat, ...) = Σ_t m_t / n and ``estimate`` (...) its
    mean over repeats: the nested CV error.
    """
    # a param whose fold-t fit failed cannot be scored on N_t: never choose it there
    crit = criterion.where(outer_sums.notnull()).transpose("param", ...)
    chosen = argmin_first(crit, "param")
    sums = outer_sums.transpose("param", "repeat", "outer").values
    idx = chosen.transpose("repeat", "outer", ...).values
    r, t = np.indices(sums.shape[1:])
    extra = idx.ndim - 2
    r = r.reshape(r.shape + (1,) * extra)
    t = t.reshape(t.shape + (1,) * extra)
    picked = np.where(idx >= 0, sums[np.maximum(idx, 0), r, t], np.nan)
    dims = chosen.transpose("repeat", "outer", ...).dims
    m = xr.DataArray(picked, dims=dims)
    n = sizes.sum("outer")
    per_repeat = m.sum("outer", skipna=False) / n
    return xr.Dataset({
        "chosen": chosen.transpose("repeat", "outer", ...),
        "outer_sum": m,
        "outer_score": m / sizes,
        "estimate_repeat": per_repeat,
        "estimate": per_repeat.mean("repeat"),
    })


def nested_cv(cube: xr.Dataset, *, loss: str | None = None) -> xr.Dataset:
    """Classic nested CV (Varma & Simon): tune by inner K-fold, score on the outer fold.

    For each repeat r and outer fold t, ``h_t = argmin_h s_t(h)`` (the inner K-fold score on
    D \\ N_t with K − 1 inner folds, :func:`inner_scores`), scored on N_t with the fold-t fit.
    It is ``stability_nested`` at λ = 0.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with fold and pair splits (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.

    Returns
    -------
    xarray.Dataset
        ``estimate`` (scalar): the nested CV error (pooled over outer folds, mean over
        repeats); ``estimate_repeat`` (repeat); ``chosen`` (repeat, outer) param index per
        outer fold; ``outer_score`` (repeat, outer) its mean loss on N_t; ``inner_score``
        (param, repeat, outer); ``kfold`` (param) the plain K-fold estimate and
        ``kfold_min`` its minimum (the optimistic "best CV score"); attrs ``loss`` and
        ``chosen_params`` (JSON list per repeat and outer fold).
    """
    name = loss_name(cube, loss)
    inner = inner_scores(cube, name, what="nested_cv").compute()
    outer = fold_losses(cube, name).compute()
    sizes = fold_membership(cube).sum("sample")
    out = nested_choice(inner["inner_score"], outer, sizes)
    kf = (outer.sum("outer", skipna=False) / sizes.sum("outer")).mean("repeat")
    out["inner_score"] = inner["inner_score"]
    out["kfold"] = kf
    out["kfold_min"] = kf.min(skipna=True)
    out["fold_size"] = sizes
    out = out.assign_coords(param_coords(cube))
    chosen = out["chosen"].values
    out.attrs = {"estimator": "nested_cv", "loss": name,
                 "chosen_params": json.dumps([[param_label(cube, h) for h in row] for row in chosen])}
    return out


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`nested_cv`."""
    lines = [f"nested CV error ({result.attrs.get('loss')}): {float(result['estimate']):.6g}"
             f"   (best plain K-fold score: {float(result['kfold_min']):.6g})"]
    chosen = json.loads(result.attrs.get("chosen_params", "[]"))
    for r, row in enumerate(chosen):
        picks = ", ".join(_short(p) for p in row)
        lines.append(f"  repeat {r}: chosen per outer fold: {picks}")
    return lines


def _short(label: dict) -> str:
    if not label:
        return "(none)"
    rest = {k: v for k, v in label.items() if k not in ("index", "learner")}
    inner = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rest.items())
    return f"#{label['index']} {label['learner']}({inner})"
