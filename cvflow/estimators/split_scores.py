"""The K-fold scores: the estimate per param from the fold loss sums (:func:`kfold_scores`: the
kfold, corrected_kfold, stability and compare_all estimators, the live page) and the fits split
by split, as ``GridSearchCV`` scores them (``cv_results_``).

The same kernel as the ``kfold`` estimator (:func:`cvflow.estimators._cube.role_terms` for a
pointwise loss, :func:`cvflow.estimators.fold_metrics.metric_terms` for a per-fold metric) under
GridSearchCV's rules instead of cvflow's NaN rule: a failed fit is NaN in its own split only
(``error_score`` where given), and with ``weights`` each split is scored as GridSearchCV's
scorers score it when ``fit`` is given ``sample_weight``. :func:`cvflow.cv_results` lays these
out as columns and ``cvflow.SearchCV`` chooses by their :func:`rank`.
"""
from __future__ import annotations

import time
from typing import NamedTuple, Sequence

import numpy as np
from ..lazy import xarray as xr
from ..lazy import stats

from . import np_roles
from ._cube import require, role_terms
from .cube_losses import cube_loss
from .fold_metrics import metric_terms
from .losses import DECLARED, Loss, from_scoring

WHAT = "cv_results"


class SplitScores(NamedTuple):
    """One loss's scores of every param (P) on every fold split (S = R·K, repeat-major):
    ``test`` (P, S), ``pooled`` (P,) the mean over every analysis sample of a pointwise loss
    averaged over repeats (None for a per-fold metric), ``train`` (P, S) or None."""

    test: np.ndarray
    pooled: np.ndarray | None
    train: np.ndarray | None


def kfold_scores(fold_sum: np.ndarray, sizes: np.ndarray, *, pooled: bool = True,
                 average: str = "samples") -> xr.Dataset:
    """The K-fold estimate per param from the out-of-fold loss sums.

    ``fold_sum`` (param, repeat, outer) = Σ_{i∈N_j} ℓ_i(h, fold j), ``sizes`` (repeat, outer)
    = |N_j|. Returns ``estimate`` (param) pooled over folds and averaged over repeats,
    ``estimate_repeat`` (param, repeat), ``fold_score`` (param, repeat, outer), ``se``
    (param) = sd(fold scores) / sqrt(K) averaged over repeats (the naive se of one repeat),
    ``se_mean`` (param) the standard error of the repeat-averaged estimate by the corrected
    repeated K-fold variance (:func:`np_roles.corrected_repeated_se`) and ``fold_size``. A failed
    fold fit (NaN) makes its param NaN: no fold is ever skipped.

    ``pooled=False``: ``fold_sum`` holds per-fold metric values (ROC AUC, R², ...), which
    are the fold scores, and the estimate is their plain mean over the folds. ``average=
    "folds"``: the plain mean of the fold scores for a pointwise loss too (GridSearchCV's
    ``mean_test_score``), instead of the mean over the samples.
    """
    fold_score = fold_sum / sizes if pooled else fold_sum
    if pooled and average == "samples":
        per_repeat = fold_sum.sum(axis=2) / sizes.sum(axis=1)
    else:
        per_repeat = fold_score.mean(axis=2)
    k = sizes.shape[1]        # 1: a splitter's splits one by one, no fold-to-fold spread
    se = (fold_score.std(axis=2, ddof=1) / np.sqrt(k) if k > 1
          else np.full(fold_score.shape[:2], np.nan))
    dims = ("param", "repeat", "outer")
    return xr.Dataset({
        "estimate": ("param", per_repeat.mean(axis=1)),
        "estimate_repeat": (dims[:2], per_repeat),
        "fold_score": (dims, fold_score),
        "se": ("param", se.mean(axis=1)),
        "se_mean": ("param", np_roles.corrected_repeated_se(fold_score)),
        "fold_size": (dims[1:], sizes.astype(np.float64)),
    })


def fold_splits(cube: xr.Dataset) -> np.ndarray:
    """The split index of each fold fit, (R·K,) repeat-major, as scikit-learn numbers the
    splits of a repeated K-fold."""
    return np.asarray(require(cube, "fold_split", WHAT).values).ravel()


def fold_values(cube: xr.Dataset, values: xr.DataArray) -> np.ndarray:
    """``values`` (param, split) at the fold splits: (P, R·K), repeat-major."""
    # a (param, split) variable, small: read whole and taken at the fold splits (no fold
    # split is missing: require), in numpy, so that a cube in memory needs no xarray
    index = np.asarray(require(cube, "fold_split", WHAT).values).ravel()
    return np.asarray(values.values, dtype=np.float64)[:, index]


def scoring_loss(cube: xr.Dataset, name, *, where: str = "cv_results: losses"
                 ) -> tuple[Loss, float]:
    """A cvflow loss (a name, a declaration) or a scikit-learn scoring name that equals one,
    checked against the cube, and the factor (+1 or -1) to the sign of the name asked
    (``neg_mean_squared_error`` -> (``squared``, -1))."""
    factor = 1.0
    if isinstance(name, str) and name.partition(":")[0] not in DECLARED and "." not in name:
        name, factor = from_scoring(name, where=where)
    return cube_loss(cube, name), factor


def split_scores(cube: xr.Dataset, decls: Sequence[Loss], *, train: bool = False,
                 weights: np.ndarray | None = None) -> tuple[list[SplitScores], np.ndarray]:
    """Each fold fit scored on its test fold (and, ``train``, its training set) from the stored
    predictions, for each of ``decls`` (checked against the cube: :func:`scoring_loss`).

    Returns ``([SplitScores per loss], seconds (P, S))``, ``seconds`` the time spent scoring
    each fit's predictions (every loss together, spread evenly over the fits a pass scored).
    A failed or missing fit is NaN in its own split only. ``weights`` (n,): the weighted mean
    of a pointwise loss, a metric's ``sample_weight``.
    """
    member = np_roles.fold_members(cube["fold"].values,
                                   int(require(cube, "fold_split", WHAT).shape[1]))
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    ones = np.ones(analysis.shape) if w is None else w
    tested = member @ ones                                     # (R, K): Σ w over N_j
    trained = (~member & analysis) @ ones                      # (R, K): Σ w over D ∖ N_j
    n_params, n_splits = int(cube.sizes["param"]), tested.size
    seconds = np.zeros((n_params, n_splits))
    out = []
    for decl in decls:
        t0 = time.perf_counter()
        if decl.pointwise:
            terms = role_terms(cube, decl, roles=("fold", "train") if train else ("fold",),
                               what=WHAT, weights=w, nan_rule=False)
            sums = terms["fold_sum"]                           # (P, R, K)
            test = (sums / tested).reshape(n_params, -1)
            pooled = (sums.sum(axis=2) / (analysis * ones).sum()).mean(axis=1)
            tr = (terms["train_sum"] / trained).reshape(n_params, -1) if train else None
        else:
            terms = metric_terms(cube, decl, roles=("fold", "train") if train else ("fold",),
                                 what=WHAT, weights=w, nan_rule=False)
            test, pooled = terms["fold_metric"].reshape(n_params, -1), None
            tr = terms["train_metric"].reshape(n_params, -1) if train else None
        seconds += (time.perf_counter() - t0) / max(n_params * n_splits, 1)
        out.append(SplitScores(test, pooled, tr))
    return out, seconds


def with_error_score(splits: np.ndarray, mean: np.ndarray, failed: np.ndarray,
                     error_score: float) -> tuple[np.ndarray, np.ndarray]:
    """GridSearchCV's ``error_score``: a failed fit's split is ``error_score`` (NaN: left NaN)
    and its param's mean the mean of its split scores, that number included."""
    if np.isnan(error_score):
        return splits, mean
    splits = splits.copy()
    splits[failed] = error_score
    return splits, np.where(failed.any(axis=1), splits.mean(axis=1), mean)


def spread(splits: np.ndarray) -> np.ndarray:
    """The standard deviation of each row over the splits (ddof=0), as ``cv_results_``'s."""
    return np.sqrt(((splits - splits.mean(axis=1, keepdims=True)) ** 2).mean(axis=1))


def rank(goodness: np.ndarray) -> np.ndarray:
    """GridSearchCV's ``rank_test_*`` of the means in ``goodness`` (larger is better): 1 the
    best, ties share the smallest rank, a NaN ranks last (all NaN: every rank 1)."""
    if np.isnan(goodness).all():
        return np.ones(len(goodness), dtype=np.int32)
    goodness = np.where(np.isnan(goodness), np.nanmin(goodness) - 1, goodness)
    return stats.rankdata(-goodness, method="min").astype(np.int32)
