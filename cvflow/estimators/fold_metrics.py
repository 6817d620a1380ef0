"""Per-fold metrics (ROC AUC, average precision, R², ...) from stored out-of-fold predictions.

A metric that is not a mean of per-sample losses is computed on each test fold separately,
from the fold fit's predictions on that fold, and the fold values are averaged (scikit-learn's
``cross_val_score`` convention). Terms, for a param h, with folds N_1..N_K of repeat r:

==================  ===============  ====================================================
term                shape            value
==================  ===============  ====================================================
fold_metric         (P, R, K)        metric(y[N_j], fit (h, fold j) on N_j)
inner_metric        (P, R, K, K)     metric(y[N_l], fit (h, pair(t, l)) on N_l); 0 diag.
train_metric        (P, R, K)        metric(y[D ∖ N_j], fit (h, fold j) on its training set)
==================  ===============  ====================================================

A fit that failed (any NaN prediction on the fold) gives NaN, never a skipped fold, and
:func:`np_roles.nan_rule` then makes every term of its param NaN (``missing``), as for losses.
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from .losses import Loss, stored_scores
from . import np_roles
from ._cube import at_splits, require
from .cube_losses import cube_classes
from .memory import IN_MEMORY_BYTES, compute_here, is_lazy


def metric_terms(cube: xr.Dataset, decl: Loss, *, roles=("fold",), what: str,
                 weights: np.ndarray | None = None, nan_rule: bool = True
                 ) -> dict[str, np.ndarray]:
    """``fold_metric``, (with role "pair") ``inner_metric``, (with role "train")
    ``train_metric`` and ``missing`` (P,) bool; see the module table.

    ``nan_rule=False``: GridSearchCV's rule instead, a failed fit NaN in its own fold only (no
    ``missing``). ``weights`` (n,): each fold's metric is given the ``sample_weight`` of its rows.

    Reads the role's predictions a block of params at a time (about ``IN_MEMORY_BYTES``).
    """
    tables = {"fold_metric": require(cube, "fold_split", what)}
    if "pair" in roles:
        tables["inner_metric"] = require(cube, "pair_split", what)
    if "train" in roles:
        tables["train_metric"] = tables["fold_metric"]
    k = int(cube.sizes["outer"])
    member = np_roles.fold_members(cube["fold"].values, k)
    # a fold fit's training set: the analysis samples outside its test fold
    trained = ~member & ~np.asarray(cube["is_test"].values, dtype=bool)
    y = np.asarray(cube["y"].values)
    classes = cube_classes(cube)
    outputs = [str(o) for o in cube["output"].values]
    pred = cube["pred"]
    n_params = int(pred.sizes["param"])
    out = {}
    for key, table in tables.items():
        # (param, repeat, outer[, inner], ...): numpy, or dask on a lazy cube
        picked = at_splits(pred, table).data
        per_param = picked.nbytes // max(n_params, 1)
        step = max(1, IN_MEMORY_BYTES // max(per_param, 1))
        values = np.full(picked.shape[:len(table.dims) + 1], np.nan)
        if key == "inner_metric":                         # the pair diagonal is no fit
            values[:, :, np.eye(k, dtype=bool)] = 0.0
        for p0 in range(0, n_params, step):
            block = picked[p0:p0 + step]
            block = np.asarray(compute_here(block) if is_lazy(block) else block)
            for index in np.ndindex(*block.shape[:values.ndim]):
                h, r, scored = p0 + index[0], index[1], index[-1]   # N_scored: outer j or inner l
                rows = (trained if key == "train_metric" else member)[r, scored]
                score = block[index][rows]
                if (key == "inner_metric" and index[2] == scored) or np.isnan(score).any():
                    continue
                extra = {} if weights is None else {"sample_weight": weights[rows]}
                values[(h,) + index[1:]] = decl.func(
                    y[rows], stored_scores(score, outputs[h], classes), classes, outputs[h],
                    **extra)
        out[key] = values
    return np_roles.nan_rule(out) if nan_rule else out
