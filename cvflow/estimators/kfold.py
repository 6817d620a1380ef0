"""Plain K-fold cross-validation from the cube (DESIGN.md 6.1)."""
from __future__ import annotations

import numpy as np
import xarray as xr

from ._cube import (argmin_first, param_coords, at_splits, fold_membership, loss_name, param_label,
                    pointwise_loss, require, weighted_sum)


def fold_losses(cube: xr.Dataset, loss: str | None = None) -> xr.DataArray:
    """Summed out-of-fold loss Σ_{i∈N_j} ℓ_i(h, fold j); dims (param, repeat, outer)."""
    index = require(cube, "fold_split", "K-fold")
    per_sample = pointwise_loss(cube, loss, pred=at_splits(cube["pred"], index))
    return weighted_sum(per_sample, fold_membership(cube))


def kfold_scores(cube: xr.Dataset, loss: str | None = None) -> xr.Dataset:
    """Per-param K-fold estimate (pooled over folds, averaged over repeats) and fold scores.

    Returns ``estimate`` (param), ``fold_score`` (param, repeat, outer), ``se`` (param) =
    sd(fold scores) / sqrt(K) averaged over repeats, and ``fold_size`` (repeat, outer).
    """
    sums = fold_losses(cube, loss)
    sizes = fold_membership(cube).sum("sample")
    n = sizes.sum("outer")
    fold_score = sums / sizes
    # a failed fold fit (NaN) must make the param NaN, not drop the fold: skipna=False
    per_repeat = sums.sum("outer", skipna=False) / n
    k = sizes.sizes["outer"]
    se = fold_score.std("outer", ddof=1, skipna=False) / np.sqrt(k)
    return xr.Dataset({
        "estimate": per_repeat.mean("repeat", skipna=False),
        "estimate_repeat": per_repeat,
        "fold_score": fold_score,
        "se": se.mean("repeat", skipna=False),
        "fold_size": sizes,
    })


def kfold(cube: xr.Dataset, *, loss: str | None = None) -> xr.Dataset:
    """K-fold estimate per param, its fold scores, naive standard error and the selection.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the schema of DESIGN.md section 3 (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.

    Returns
    -------
    xarray.Dataset
        ``estimate`` (param), ``fold_score`` (param, repeat, outer), ``se`` (param) and
        ``selected`` (scalar index of the first minimiser); attrs ``loss`` and
        ``selected_param`` (JSON of the chosen setting).
    """
    import json

    name = loss_name(cube, loss)
    out = kfold_scores(cube, name).compute()
    selected = int(argmin_first(out["estimate"]))
    out["selected"] = xr.DataArray(selected)
    out = out.assign_coords(param_coords(cube))
    out.attrs = {"estimator": "kfold", "loss": name,
                 "selected_param": json.dumps(param_label(cube, selected))}
    return out
