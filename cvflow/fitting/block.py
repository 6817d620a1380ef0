"""Fitting a block: every (param, split) of a chunk-aligned rectangle, path-aware groups
together (:mod:`cvflow.fitting.paths`), one param at a time otherwise (:func:`cvflow.fitting.learners.fit_one`).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import numpy as np

from . import paths
from .learners import fit_one, pred_shape
from ..workflow.params import Param

log = logging.getLogger(__name__)


@dataclass
class BlockResult:
    """What a fitted block holds; the task writes ``pred`` and returns the rest (small)."""

    params: slice
    splits: slice
    pred: np.ndarray | None   # (params, splits, sample[, class]); None once written
    failed: np.ndarray        # (params, splits) bool
    error: np.ndarray         # (params, splits) object (str)
    fit_seconds: np.ndarray   # (params, splits)
    # (params, splits) bool: the cells this block fitted, when not all of them (a raced stage
    # fits part of a chunk; cells neither fitted now nor stored stay not ``done``)
    fitted: np.ndarray | None = None

    def without_pred(self) -> BlockResult:
        """The status part only (small: what a task sends back to the client)."""
        return BlockResult(self.params, self.splits, None, self.failed, self.error, self.fit_seconds,
                           self.fitted)

    def summary(self) -> dict:
        return {
            "params": (self.params.start, self.params.stop),
            "splits": (self.splits.start, self.splits.stop),
            "fits": int(self.failed.size),
            "failed": int(self.failed.sum()),
            "seconds": float(np.nansum(self.fit_seconds)),
        }



def fits_paths(params: list[Param], X, sample_weight=None, path_aware: bool = True) -> bool:
    """Whether :func:`fit_block` fits path-aware groups of ``params`` as paths: a numpy ``X``,
    no sample weights, no ``fit_seed``."""
    return (path_aware and sample_weight is None and isinstance(X, np.ndarray)
            and all(p.fit_seed is None for p in params))



def only_paths(params: list[Param], X, sample_weight=None, path_aware: bool = True) -> bool:
    """Whether every param is fitted by one of cvflow's path kernels (numpy and scipy code of
    this package, :mod:`cvflow.fitting.paths`): no learner's own ``fit`` runs."""
    return bool(params) and fits_paths(params, X, sample_weight, path_aware) and all(
        g.kernel is not None for g in paths.plan(params))


def fit_block(params: list[Param], X, y, train: np.ndarray, *, params_slice: slice,
              splits_slice: slice, positive=None, path_aware: bool = True,
              sample_weight=None, watch=None) -> BlockResult:
    """Fit every (param, split) of a block; ``train`` is (splits, sample) for the block's splits.

    With ``path_aware`` (the workflow's ``execution.path_aware``), params of one path-aware
    learner that differ only in the penalty (ridge / lasso / elastic net ``alpha``, logistic
    ``C``) are fitted together per training set (:mod:`cvflow.fitting.paths`); each of them is charged
    an equal share of the group's seconds. A group whose path fit raises is refitted one param
    at a time, so failures are recorded exactly as on the generic route. Path fits need a
    numpy ``X``, no sample weights and no ``fit_seed``.

    ``watch(cells)``, when given, is a context manager entered around each fit (a path group:
    its cells together), ``cells`` the block's (param, split) pairs it fits: the worker's
    time limit (:mod:`cvflow.execution.tasks`).
    """
    n_p, n_s = len(params), train.shape[0]
    watch = watch or (lambda cells: contextlib.nullcontext())
    pred = np.full((n_p, n_s) + pred_shape(X, positive), np.nan)     # multiclass: (n, C) a fit
    seconds = np.zeros((n_p, n_s))
    error = np.full((n_p, n_s), "", dtype=object)
    # a target given as a list or a Series, or none: one fit each, as the learners see it
    path_aware = isinstance(y, np.ndarray) and fits_paths(params, X, sample_weight, path_aware)
    groups = paths.plan(params) if path_aware else [paths.Group((h,)) for h in range(n_p)]
    for s in range(n_s):
        for group in groups:
            index = list(group.index)
            if group.kernel is not None:
                t0 = time.perf_counter()
                try:
                    with watch([(h, s) for h in index]):
                        pred[index, s] = paths.fit_path([params[h] for h in index], X, y,
                                                        train[s], positive=positive,
                                                        kernel=group.kernel)
                    seconds[index, s] = (time.perf_counter() - t0) / len(index)
                    continue
                except Exception as exc:  # noqa: BLE001 - fall back to one fit per param
                    log.debug("path fit of %s failed (%s); fitting one by one",
                              params[index[0]].learner, exc)
            for h in index:
                with watch([(h, s)]):
                    pred[h, s], seconds[h, s], error[h, s] = fit_one(params[h], X, y, train[s],
                                                                     positive, sample_weight)
    failed = error != ""
    return BlockResult(params_slice, splits_slice, pred, failed, error, seconds)
