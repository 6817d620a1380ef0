"""Bias-corrected K-fold (Burman 1989; Aghbalou, Portier & Sabourin, Section 5) and selection by it.

For folds N_1..N_K of D (n = |D|, p_j = |N_j| / n) and a loss ℓ,

    corrected(h) = kfold(h) + mean_{i∈D} ℓ_i(h, full) − Σ_j p_j · mean_{i∈D} ℓ_i(h, fold j)

(DESIGN.md 6.2). The last term evaluates each fold model on all of D, its own training samples
included, which is why the cube stores every fit's predictions on every sample. With equal
folds p_j = 1/K and this is the paper's display in Section 5.

The reducer reads only the full split and the K-fold splits of the cube (never the pair or
subset splits) and reduces over ``sample`` with dot products, so it stays lazy on big stores
until the single ``compute`` at the end.
"""
from __future__ import annotations

import json

import numpy as np
import xarray as xr

from ._cube import (analysis_weights, at_splits, fold_membership, loss_name, param_coords,
                    pointwise_loss, require, weighted_mean)
from .kfold import kfold_scores
from .selection import full_fit_risk, has_test_set, selection


def fold_model_risk(cube: xr.Dataset, loss: str | None = None) -> xr.DataArray:
    """Σ_j p_j · mean_{i∈D} ℓ_i(h, fold j): the fold models' empirical risk on all of D.

    Dims (param, repeat), lazy when the cube is. A failed fold fit gives NaN for its param.
    """
    index = require(cube, "fold_split", "the corrected K-fold")
    per_sample = pointwise_loss(cube, loss, pred=at_splits(cube["pred"], index))
    on_d = weighted_mean(per_sample, analysis_weights(cube))            # (param, repeat, outer)
    sizes = fold_membership(cube).sum("sample")                          # (repeat, outer)
    share = sizes / sizes.sum("outer")
    return (on_d * share).sum("outer", skipna=False)


def corrected_scores(cube: xr.Dataset, loss: str | None = None) -> xr.Dataset:
    """Per-param terms of the corrected K-fold, lazy (call ``.compute()``).

    Returns ``kfold`` (param) the plain K-fold estimate, ``full_risk`` (param) the full fit's
    empirical risk on D, ``fold_model_risk`` (param) the mean fold-model risk on D, ``estimate``
    (param) the corrected estimate, each averaged over repeats, and the per-repeat
    ``kfold_repeat``, ``fold_model_risk_repeat``, ``estimate_repeat`` (param, repeat).
    """
    plain = kfold_scores(cube, loss)
    kfold_repeat = plain["estimate_repeat"]
    fold_model = fold_model_risk(cube, loss)
    full = full_fit_risk(cube, loss, on="analysis")
    corrected = kfold_repeat + full - fold_model
    return xr.Dataset({
        "kfold": kfold_repeat.mean("repeat", skipna=False),
        "full_risk": full,
        "fold_model_risk": fold_model.mean("repeat", skipna=False),
        "estimate": corrected.mean("repeat", skipna=False),
        "kfold_repeat": kfold_repeat,
        "fold_model_risk_repeat": fold_model,
        "estimate_repeat": corrected,
    })


def corrected_kfold(cube: xr.Dataset, *, loss: str | None = None) -> xr.Dataset:
    """Bias-corrected K-fold per param and model selection by it and by the plain K-fold.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the schema of DESIGN.md section 3 (lazy or in memory) holding the full
        split and the K-fold splits.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.

    Returns
    -------
    xarray.Dataset
        Per param: ``estimate`` (corrected), ``kfold``, ``full_risk``, ``fold_model_risk`` and
        their per-repeat versions (see :func:`corrected_scores`); ``test_risk`` (param), the
        full fit's risk on the held-out test set, when the workflow has one.
        Scalars: ``selected`` / ``selected_estimate`` (argmin of the corrected estimate, ties to
        the first param in grid order, NaN params skipped, -1 if all failed) and
        ``selected_kfold`` / ``selected_kfold_estimate`` (argmin of the plain K-fold), plus
        ``selected_test_risk`` / ``selected_kfold_test_risk`` when there is a test set.
        attrs: ``estimator``, ``loss``, ``folds``, ``repeats``, ``selected_param`` and
        ``selected_param_kfold`` (JSON of the chosen settings).

    Examples
    --------
    >>> from sklearn.linear_model import Ridge  # doctest: +SKIP
    >>> res = corrected_kfold(cube, loss="absolute")  # doctest: +SKIP
    >>> int(res.selected), float(res.selected_test_risk)  # doctest: +SKIP
    """
    name = loss_name(cube, loss)
    parts = corrected_scores(cube, name)
    if has_test_set(cube):
        parts["test_risk"] = full_fit_risk(cube, name, on="test")
    out = parts.compute()
    corrected = selection(cube, out["estimate"], loss=name, test=out.get("test_risk"))
    plain = selection(cube, out["kfold"], loss=name, test=out.get("test_risk"))
    for prefix, choice in (("selected", corrected), ("selected_kfold", plain)):
        out[prefix] = xr.DataArray(choice["index"])
        out[f"{prefix}_estimate"] = xr.DataArray(choice["estimate"])
        if choice["test_risk"] is not None:
            out[f"{prefix}_test_risk"] = xr.DataArray(choice["test_risk"])
    out = out.assign_coords(param_coords(cube))
    out.attrs = {
        "estimator": "corrected_kfold",
        "loss": name,
        "folds": int(cube.sizes.get("outer", 0)),
        "repeats": int(cube.sizes.get("repeat", 0)),
        "selected_param": json.dumps(corrected["param"]),
        "selected_param_kfold": json.dumps(plain["param"]),
    }
    return out


def _setting(text: str, varied=None) -> str:
    """``learner(name=value, ...)``, showing only the hyperparameters of the grid (``varied``)."""
    setting = json.loads(text)
    if not setting:
        return "(none: every param failed)"
    shown = {k: v for k, v in setting.items() if k not in ("index", "learner")
             and (varied is None or k in varied)}
    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in shown.items())
    return f"{setting['learner']}({values})" if values else str(setting["learner"])


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines: the K-fold and the corrected K-fold selections side by side."""
    a = result.attrs
    varied = {k for k, c in result.coords.items() if c.dims == ("param",)} - {
        "learner", "output", "param_json"}
    rows = [("chosen param", _setting(a["selected_param_kfold"], varied),
             _setting(a["selected_param"], varied)),
            ("grid index", str(int(result["selected_kfold"])), str(int(result["selected"]))),
            ("CV estimate", f"{float(result['selected_kfold_estimate']):.6g}",
             f"{float(result['selected_estimate']):.6g}")]
    if "selected_test_risk" in result:
        rows.append(("test risk (full fit)", f"{float(result['selected_kfold_test_risk']):.6g}",
                     f"{float(result['selected_test_risk']):.6g}"))
    width = max(len(r[0]) for r in rows)
    col = max(len("K-fold"), *(len(r[1]) for r in rows))
    lines = [f"corrected K-fold (loss {a['loss']}, K={a['folds']}, repeats={a['repeats']})",
             f"  {'':<{width}}  {'K-fold':<{col}}  corrected K-fold"]
    lines += [f"  {r[0]:<{width}}  {r[1]:<{col}}  {r[2]}" for r in rows]
    if "test_risk" in result and not np.isnan(result["test_risk"].values).all():
        best = int(np.nanargmin(result["test_risk"].values))
        lines.append(f"  (best test risk over the grid: {float(result['test_risk'][best]):.6g} "
                     f"at grid index {best})")
    return lines
