"""Fitting a block: every (param, split) of a chunk-aligned rectangle, path-aware groups
together (:mod:`cvflow.fitting.paths`), one param at a time otherwise (:func:`cvflow.fitting.learners.fit_one`).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace

import numpy as np

from . import checked, paths, prefix
from .learners import fit_and_score, pred_shape
from .scoring import Scoring
from ..workflow.params import Param

log = logging.getLogger(__name__)


@dataclass(repr=False, eq=False)
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
    # with scorers (cvflow.fitting.scoring): (params, splits, scorers) test and train scores
    # (train: None unless asked), (params, splits) seconds of the test scoring; None without
    score: np.ndarray | None = None
    train_score: np.ndarray | None = None
    score_time: np.ndarray | None = None
    notes: list[str] | None = None     # what scorers said (their scores NaN), once each

    def without_pred(self) -> BlockResult:
        """The status part only (small: what a task sends back to the client)."""
        return replace(self, pred=None)

    def summary(self) -> dict:
        return {
            "params": (self.params.start, self.params.stop),
            "splits": (self.splits.start, self.splits.stop),
            "fits": int(self.failed.size),
            "failed": int(self.failed.sum()),
            "seconds": float(np.nansum(self.fit_seconds)),
        }



def fits_paths(params: list[Param], X, sample_weight=None, path_aware: bool = True,
               scoring: Scoring | None = None) -> bool:
    """Whether :func:`fit_block` fits path-aware groups of ``params`` as paths: a numpy ``X``,
    no sample weights nor other fit parameters, no ``fit_seed``, no scorers (they score a fitted model, which a path
    kernel does not make)."""
    return (path_aware and sample_weight is None and isinstance(X, np.ndarray) and X.ndim == 2
            and all(p.fit_seed is None and not p.fit_params and p.fit_hook is None
                    for p in params)
            and not (scoring and scoring.scorers))


def only_paths(params: list[Param], X, sample_weight=None, path_aware: bool = True,
               scoring: Scoring | None = None) -> bool:
    """Whether every param is fitted by one of cvflow's path kernels (numpy and scipy code of
    this package, :mod:`cvflow.fitting.paths`): no learner's own ``fit`` runs."""
    return bool(params) and fits_paths(params, X, sample_weight, path_aware, scoring) and all(
        g.kernel is not None for g in paths.plan(params))


def fit_block(params: list[Param], X, y, train: np.ndarray, *, params_slice: slice,
              splits_slice: slice, positive=None, path_aware: bool = True,
              sample_weight=None, watch=None, scoring: Scoring | None = None,
              test_only: bool = False) -> BlockResult:
    """Fit every (param, split) of a block; ``train`` is (splits, sample) for the block's splits.

    With ``path_aware`` (the workflow's ``execution.path_aware``), params of one path-aware
    learner that differ only in the penalty (ridge / lasso / elastic net ``alpha``, logistic
    ``C``) are fitted together per training set (:mod:`cvflow.fitting.paths`); each of them is charged
    an equal share of the group's seconds. A group whose path fit raises is refitted one param
    at a time, so failures are recorded exactly as on the generic route. Path fits need a
    numpy ``X``, no sample weights and no ``fit_seed``.

    Pipeline params whose transformers (every step but the last) have the same settings share
    them per training set: the prefix is fitted once, on this worker once across blocks while
    it fits :data:`cvflow.fitting.prefix.CACHE_BYTES`, and each param fits its last step on the
    transformed rows (:mod:`cvflow.fitting.prefix`; predictions equal the whole fits' bit for
    bit). Each param is charged its own last step and an equal share of the prefix's seconds
    among the block's params that used it, nothing when the prefix came from another block.

    ``watch(cells)``, when given, is a context manager entered around each fit (a path group:
    its cells together), ``cells`` the block's (param, split) pairs it fits: the worker's
    time limit (:mod:`cvflow.execution.tasks`).

    ``scoring`` (:class:`cvflow.fitting.scoring.Scoring`): every fitted model is also scored
    by the study's scorers where it is fitted; the block then holds ``score``,
    ``train_score`` and ``score_time``, and messages of scorers that raised in ``notes``
    (the fit is not failed for them).

    ``test_only``: a param fitted on its own (not in a path or a shared prefix) predicts its
    test rows alone (:func:`cvflow.fitting.learners.fit_and_score`).
    """
    n_p, n_s = len(params), train.shape[0]
    watch = watch or (lambda cells: contextlib.nullcontext())
    pred = np.full((n_p, n_s) + pred_shape(X, positive), np.nan)     # multiclass: (n, C) a fit
    seconds = np.zeros((n_p, n_s))
    error = np.full((n_p, n_s), "", dtype=object)
    scoring = scoring if scoring is not None and scoring.scorers else None
    scored = None if scoring is None else _Scored(scoring, (n_p, n_s))
    # a target given as a list or a Series, or none: one fit each, as the learners see it
    path_aware = isinstance(y, np.ndarray) and fits_paths(params, X, sample_weight, path_aware, scoring)
    groups = paths.plan(params) if path_aware else [paths.Group((h,)) for h in range(n_p)]
    # decision trees: X converted and checked once for the block, not by every fit
    quick = checked.prepare(X, y, sample_weight=sample_weight, scoring=scoring)

    def fit(h: int, s: int, fitted=None) -> None:
        with watch([(h, s)]):
            pred[h, s], seconds[h, s], error[h, s], scores = fit_and_score(
                params[h], X, y, train[s], positive, sample_weight, scoring, fitted,
                test_only=test_only and fitted is None)
        if scored is not None:
            scored.put(h, s, scores)

    for s in range(n_s):
        whole: list[int] = []            # params fitted one by one
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
            whole += index
        # Pipelines sharing a prefix: fitted once for its group (cvflow.fitting.prefix), kept
        # until the group's last param is fitted
        shared, whole = prefix.plan(params, whole, X, train[s], sample_weight)
        for h in whole:
            fit(h, s, None if quick is None else quick.fitted(params[h], train[s], positive))
        for g in shared:
            for i, (h, _, _) in enumerate(g.members):
                fit(h, s, g.fitted(i, X, y, train[s], positive))
            seconds[[h for h, _, _ in g.members], s] += g.share
            g.prefix = None
    failed = error != ""
    result = BlockResult(params_slice, splits_slice, pred, failed, error, seconds)
    return result if scored is None else scored.into(result)


class _Scored:
    """A block's scores, filled fit by fit (:func:`cvflow.fitting.learners.fit_and_score`)."""

    def __init__(self, scoring: Scoring, shape: tuple[int, int]):
        self.score = scoring.nan(shape)
        self.train_score = scoring.nan(shape) if scoring.train else None
        self.score_time = np.zeros(shape)
        self.notes: list[str] = []

    def put(self, h: int, s: int, scores) -> None:
        self.score[h, s] = scores.test
        if self.train_score is not None:
            self.train_score[h, s] = scores.train
        self.score_time[h, s] = scores.seconds
        self.notes += [n for n in scores.errors if n not in self.notes]

    def into(self, result: BlockResult) -> BlockResult:
        result.score, result.train_score = self.score, self.train_score
        result.score_time, result.notes = self.score_time, self.notes
        return result
