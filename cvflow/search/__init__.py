"""``cvflow.SearchCV``: cvflow's selection as a scikit-learn estimator (docs/guide/searchcv.md).

A drop-in for ``GridSearchCV``: ``fit`` runs the grid as a cvflow study (:class:`cvflow.Study`,
so :func:`cvflow.execution.run.run` fits it, writing a prediction cube), the chosen param is any
selecting estimator's (``select``), and ``cv_results_`` is :func:`cvflow.cv_results` of the
cube in GridSearchCV's layout and sign. With ``select="kfold"`` (and the default
``average="folds"``) it equals ``GridSearchCV`` on the same folds and scoring::

    search = cvflow.SearchCV(make_pipeline(StandardScaler(), SVC()),
                             {"svc__C": [0.1, 1, 10]}, cv=5, scoring="accuracy",
                             select={"cv_confidence": {"simplest": {"svc__C": "min"}}})
    search.fit(X, y).predict(X_new)
    search.result_["cv_confidence"]        # the selecting estimator's whole result
    search.report()                        # K-fold and corrected K-fold of the choice, warnings
    cvflow.open(search.store_)             # the cube
"""
from __future__ import annotations

import numbers
import shutil
import tempfile
import time
import warnings
import weakref
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.callback import CallbackSupportMixin, with_callbacks
from sklearn.exceptions import FitFailedWarning
from sklearn.model_selection import ParameterGrid, check_cv
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted
from sklearn import get_config
from sklearn.metrics import accuracy_score, check_scoring, get_scorer, get_scorer_names

from ..errors import RunInterrupted
from ..estimators.losses import apply_loss
from ..execution import run as _engine  # noqa: F401  # with the search, as GridSearchCV's own
from ..execution.dask_logs import quiet_info
from ..fitting.scoring import estimator_score
from ..objects import describe_splitter
from . import scoring_arg
from .callbacks import SearchTasks
from .inputs import (NO_FITS, Scorings, check_task, default_client, fitting_here, output_of,
                     refit_failed, sorted_grid, splitter_of, task_of, weights_for)
from ..estimators.registry import REGISTRY
from ..report.tables import cv_results, failure_message, fit_lines, fit_records, param_arrays
from ..study import Study


def _check_refit(search, method: str) -> None:
    """GridSearchCV's refusal of a delegated method when ``refit=False``."""
    if not search.refit:
        raise AttributeError(f"This {type(search).__name__} instance was initialized with "
                             f"`refit=False`. {method} is available only after refitting on the "
                             "best parameters. You can refit an estimator manually using the "
                             "`best_params_` attribute")


def _has(method: str):
    """``available_if`` check: refit, and the fitted best estimator (else the unfitted one) has
    ``method``."""
    def check(self) -> bool:
        _check_refit(self, method)
        est = getattr(self, "best_estimator_", None)
        getattr(self.estimator if est is None else est, method)   # AttributeError if it lacks it
        return True
    return check


def _delegate(method: str):
    """``best_estimator_.<method>(X)``, present when the estimator has it (``_has``)."""
    def call(self, X):
        check_is_fitted(self, "best_estimator_")
        return getattr(self.best_estimator_, method)(X)

    call.__name__ = call.__qualname__ = method
    call.__doc__ = f"``best_estimator_.{method}(X)``, as ``GridSearchCV.{method}``."
    return available_if(_has(method))(call)


class SearchCV(MetaEstimatorMixin, CallbackSupportMixin, BaseEstimator):
    """Exhaustive search over a grid, selected by any cvflow criterion, as a scikit-learn estimator.

    ``GridSearchCV``'s parameters come first, in its order and with its defaults; cvflow's
    follow (``select`` to ``racing``).

    Parameters
    ----------
    estimator : estimator object
        A scikit-learn estimator (Pipelines included); cloned, so a fitted one is accepted.
    param_grid : dict or list of dicts
        As ``GridSearchCV``'s (``ParameterGrid``); candidates come in ``ParameterGrid``'s
        order, so ``cv_results_`` rows match ``GridSearchCV``'s.
    scoring : str, callable, list, dict or None, default None
        As ``GridSearchCV``'s. A scikit-learn scoring name that equals a cvflow loss
        (``neg_mean_squared_error``, ``neg_root_mean_squared_error``,
        ``neg_mean_absolute_error``, ``neg_log_loss``, ``neg_brier_score``, ``roc_auc``,
        ``average_precision``, ``accuracy``, ``balanced_accuracy``, ``f1``,
        ``precision_macro``, ``jaccard``, ``r2``, ... see docs/guide/searchcv.md) or a cvflow
        loss name (``squared``, ``zero_one``, ``hinge``, ``pinball:0.9``, ...) is scored from
        the stored predictions (every selector and reanalysis serve it). Anything else needs
        the fitted model and is computed where each fit runs, stored in the cube (``score``):
        a scorer object (``make_scorer(f1_score)``), a callable ``(estimator, X, y) ->
        float`` (or a dict of floats: several scorings), a scoring name with no cvflow loss
        (``adjusted_rand_score``), and None with an estimator whose ``score`` is its own
        (None with scikit-learn's: ``accuracy`` for a classifier, ``r2`` otherwise). A list
        or a dict ``{column name: scoring}`` scores several (columns ``*_test_<name>``);
        ``refit`` then names the one that selects.
    n_jobs : int, optional
        cvflow's scheduler decides where and how many fits run at once (``cluster``,
        ``workers``); an int > 1 is ``workers=n_jobs`` when ``workers`` is not given, -1 or
        None leave the choice to ``cluster`` (``auto`` by default).
    refit : bool, str or callable, default True
        Fit the chosen candidate on the whole data as ``best_estimator_``. With several
        scorings, the scoring name that selects (as ``GridSearchCV``'s ``refit``). A callable
        gets ``cv_results_`` and returns ``best_index_`` (it replaces ``select``; no
        ``best_score_``). ``False`` with several scorings: no ``best_*`` attributes.
    cv : int, splitter or iterable of (train, test), default None (5 folds)
        As ``GridSearchCV``'s (``check_cv``: an int is ``StratifiedKFold`` for a classifier
        on a binary or multiclass target, else ``KFold``, unshuffled). A shuffling splitter
        without ``random_state`` is seeded once per ``fit`` from numpy's global random state.
        A scikit-learn splitter whose test sets do not partition the samples (``ShuffleSplit``,
        ``LeavePGroupsOut``, ...) is read split by split, for ``select="kfold"`` only; an
        iterable of splits must partition them (cvflow's other estimators need folds).
    verbose : int, default 0
        ``GridSearchCV``'s lines on stdout: > 0 the number of fits before the run; > 1 one
        ``[CV] END`` line per fit after the run (> 2 with its scores and split number).
    pre_dispatch : int or str, default "2*n_jobs"
        Accepted for ``GridSearchCV``'s signature; cvflow sizes its own tasks.
    error_score : "raise" or float, default NaN
        The split score of a fit that failed, as ``GridSearchCV``'s: failed fits give a
        ``FitFailedWarning`` with their messages grouped, and ``ValueError`` "All the N fits
        failed" when every fit failed. ``"raise"``: the first failed fit is fitted again
        here, so its own exception is raised (after the run: cvflow fits every candidate
        first).
    return_train_score : bool, default False
        ``cv_results_`` also holds the train scores (read from the stored predictions).
    select : str or {name: options}, default "kfold"
        The selecting estimator of cvflow's registry: ``"kfold"`` (``GridSearchCV``'s
        choice: the best ``rank_test_*``), ``"corrected_kfold"``, ``{"stability_nested":
        {"lambdas": [0, 1]}}``, ``{"cv_confidence": {"simplest": {"alpha": "max"}}}``, ...
        Its ``selected`` is the choice (``cv_confidence`` with ``simplest``: the simplest
        member of its set). A scoring computed at fit time selects with ``"kfold"`` only;
        the other selectors reduce stored predictions with a loss.
    store : path or URL, optional
        Where the cube is written (kept). None: kept in memory (``cube_``, ``save(path)``); a
        raced search: a temporary directory removed with the search object. A given store is
        resumed or extended on refits with the same data, and refused for other data.
    estimators : tuple, default ()
        Other estimators to run over the same cube (their results in ``result_``).
    average : {"folds", "samples"}, default "folds"
        ``mean_test_*`` and the ``kfold`` selection: the mean of the fold scores
        (``GridSearchCV``'s) or the mean over every sample (cvflow's K-fold estimate).
    cluster : str, optional
        Where the fits run (:func:`cvflow.run`'s ``cluster``): None picks ``auto``, unless
        a ``distributed.Client`` is the default client in this process: then that client
        runs every fit (one cluster for all the searches of a nested CV).
    workers : int, optional
        Local workers or threads (:func:`cvflow.run`'s).
    fit_seed : int, optional
        Seed every unset ``random_state`` per fit (:class:`cvflow.Study`'s ``fit_seed``).
    progress : bool, default False
        Show the run's progress.
    racing : dict or bool, optional
        Fit in stages and stop fitting the candidates a sequential test has beaten, e.g.
        ``{"alpha": 0.05}``: the chance that the truly best candidate is ever dropped is at
        most ``alpha`` (:class:`cvflow.Study`'s ``racing``, docs/guide/racing.md). The
        dropped candidates' test scores are NaN in ``cv_results_`` (ranked last) and the
        race is in ``result_.cube.attrs["racing"]`` (``cvflow.report.racing.summary``). Needs a
        pointwise scoring (``neg_mean_squared_error``, ``neg_log_loss``, ``accuracy``, ...)
        and a ``select`` that a raced cube serves (``kfold``, ``corrected_kfold``, ...).

    Attributes
    ----------
    cv_results_ : dict of numpy arrays
        GridSearchCV's keys, order, dtypes and meaning: ``mean_fit_time``, ``std_fit_time``
        (each fold fit, its predictions of every sample included), ``mean_score_time``,
        ``std_score_time`` (scoring the stored test predictions of each fit and, with
        scorers, the seconds they took where the fit ran; 0 for a failed fit),
        ``param_<name>`` (masked arrays, GridSearchCV's dtype rule), ``params``,
        ``split<k>_test_<s>``, ``mean_test_<s>``, ``std_test_<s>``, ``rank_test_<s>`` (``<s>``
        is ``score`` for one scoring) and with ``return_train_score`` the train columns.
        Scores are "greater is better", scikit-learn's sign: a loss is negated
        (``scoring="squared"`` gives minus the mean squared error, as
        ``neg_mean_squared_error``). With ``fit(..., sample_weight=w)`` each split is scored
        with its weights, as ``GridSearchCV``'s scorers score it.
    best_index_, best_params_ : int, dict
        The selecting estimator's choice (or ``refit(cv_results_)``) and its candidate.
    best_score_ : float
        ``mean_test_<refit scoring>`` of the choice.
    best_estimator_ : estimator
        A clone of ``estimator`` with the choice, fitted on all of X (with ``refit``).
    refit_time_ : float
        Seconds of that fit.
    scorer_ : scorer or dict
        scikit-learn's scorer of each scoring name it knows, and each scorer given (for
        ``score``).
    n_splits_ : int
        Number of CV splits (folds x repeats).
    classes_, n_features_in_, feature_names_in_
        Of ``best_estimator_`` (``feature_names_in_`` when it has them).
    multimetric_ : bool
    store_, cube_ : str or None, xarray.Dataset
        The cube's path (None: in memory, ``save(path)`` writes it) and the cube.
    result_ : cvflow.study.StudyResult
        The cvflow results over the cube (``result_["kfold"]``, ``result_.cube``, ...).
    """

    def __init__(self, estimator, param_grid, *, scoring=None, n_jobs=None, refit=True, cv=None,
                 verbose=0, pre_dispatch="2*n_jobs", error_score=np.nan,
                 return_train_score=False, select="kfold", store=None, estimators=(),
                 average="folds", cluster=None, workers=None, fit_seed=None, progress=False,
                 racing=None):
        self.estimator = estimator
        self.param_grid = param_grid
        self.scoring = scoring
        self.n_jobs = n_jobs
        self.refit = refit
        self.cv = cv
        self.verbose = verbose
        self.pre_dispatch = pre_dispatch
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.select = select
        self.store = store
        self.estimators = estimators
        self.average = average
        self.cluster = cluster
        self.workers = workers
        self.fit_seed = fit_seed
        self.progress = progress
        self.racing = racing

    # -- scikit-learn's conventions ----------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        sub = get_tags(self.estimator)
        tags.estimator_type = sub.estimator_type
        tags.classifier_tags = deepcopy(sub.classifier_tags)
        tags.regressor_tags = deepcopy(sub.regressor_tags)
        tags.input_tags.pairwise = sub.input_tags.pairwise
        tags.input_tags.sparse = sub.input_tags.sparse
        return tags

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_owner", None)          # a copy does not own (and remove) the temporary store
        state.pop("_fit_X", None)          # nor the caller's X, y (report's corrected estimate)
        return state

    def _sk_visual_block_(self):
        """The HTML diagram: ``best_estimator_`` once refitted, else ``estimator`` (GridSearchCV's)."""
        key, est = (("best_estimator_", self.best_estimator_) if hasattr(self, "best_estimator_")
                    else ("estimator", self.estimator))
        from .diagram import parallel_block    # drawn in a notebook, never by a fit
        block = parallel_block(est, f"{key}: {type(est).__name__}")
        if block is None:       # scikit-learn catches it and draws the search as one box
            raise NotImplementedError("this scikit-learn has no parallel diagram block")
        return block

    # -- fit -----------------------------------------------------------------------------------

    @with_callbacks
    def fit(self, X, y=None, groups=None, **fit_params):
        """Run every candidate on every split as a cvflow study, select, refit.

        scikit-learn's callbacks (``set_callbacks``) are called as ``GridSearchCV`` calls
        them, on whichever threads or processes the fits run (:mod:`cvflow.search.callbacks`).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        groups : array-like of shape (n_samples,), optional
            Group labels for a group splitter (``GroupKFold``), as ``GridSearchCV``'s.
        **fit_params
            Passed to every fit and to the refit, as ``GridSearchCV`` passes them: a
            sample-aligned value taken by each fit's training rows, any other as it is.
            ``sample_weight`` is also stored with the data and weighs the test scores as
            ``GridSearchCV``'s scorers weigh them; the others are not stored.

        Returns
        -------
        self
        """

        self._check_options()
        fitting_here(self.cluster)     # its fits' one BLAS thread: the scan starts now
        # first, as GridSearchCV: no scoring at all is a TypeError; each scoring's loss resolved
        # here, once, and kept for score()
        sc = self._scoring = scoring_arg.resolved(self._scorings())
        self.multimetric_ = sc.multimetric
        key = sc.key
        tasks = SearchTasks(self, X, y, fit_params.get("sample_weight"))
        y_arr = None if y is None else np.asarray(y)
        if y_arr is not None and y_arr.ndim > 1 and y_arr.shape[1:] != (1,):
            sc = scoring_arg.several_targets(sc, self.scoring)
        if y is None and sc.losses:      # scorers alone score fit(X)'s models without a target
            raise ValueError("SearchCV.fit: y is required to score with a loss (it compares the "
                             "stored predictions with the target); without y give a scorer, "
                             "e.g. scoring=None for an estimator's own score")
        estimator = clone(self.estimator)
        decls = sc.decls
        task = ("regression" if y is None       # no target: predict stored as it is
                else task_of(estimator, list(decls.values()), y_arr))
        for name, s in sc.losses.items():
            check_task(estimator, s, decls[name], task)
        classifier = task == "classification"
        n_classes = len(np.unique(y_arr)) if classifier else 0
        select, options = self._select()
        scoring_arg.check(sc, select, self.racing, self, fit_params.get("sample_weight"))
        if self.racing not in (None, False) and not decls[key].pointwise:
            raise ValueError(f"SearchCV: racing compares per-sample losses, but scoring "
                             f"{sc.losses[key]!r} is a per-fold metric; give a pointwise scoring "
                             "such as neg_mean_squared_error, neg_log_loss or accuracy")
        candidates = self._candidates()
        if not candidates:
            raise ValueError(NO_FITS)
        cv = check_cv(self.cv, y_arr, classifier=is_classifier(estimator))
        splitter = splitter_of(cv, X, y_arr, groups)
        n_splits = splitter.get_n_splits(X, y_arr, groups)
        if self.verbose > 0:
            print(f"Fitting {n_splits} folds for each of {len(candidates)} candidates, totalling "
                  f"{n_splits * len(candidates)} fits")
        extra = [e for e in self.estimators if (e if isinstance(e, str) else next(iter(e))) != select]
        # DESIGN CHOICE: the temporary cube of a search holds the folds' fits alone, as
        # GridSearchCV fits (best_estimator_ is refitted): a full-data fit per candidate would
        # cost 1/K more fitting for what no estimator reads; a given store keeps the full fits
        # (its reports show them, and a later run may resume or extend it)
        design = ({"splitter": describe_splitter(splitter), "full_fit": False}
                  if self.store is None else splitter)
        # DESIGN CHOICE (DESIGN.md 3: a temporary cube holds the cells its estimators read): the
        # K-fold choice alone reads test rows, which the fits then predict alone, as GridSearchCV
        # (an SVC on digits: every sample cost 2.6x its fit); report() refits for the rest
        self._test_only = test_only = (self.store is None and not self.return_train_score
                                       and not extra and select == "kfold")
        study = Study(estimator, param_grid=self._study_grid(candidates), cv=design,
                      estimators=[{select: options}, *extra],
                      loss=decls[key if key in decls else next(iter(decls))].label
                      if decls else None,
                      task=task, fit_seed=self.fit_seed, name="search", racing=self.racing,
                      output=output_of(estimator, candidates, list(decls.values()),
                                     n_classes, task, numeric_labels=y_arr is None
                                     or y_arr.dtype.kind in "biuf"),
                      scorers=sc.scorers or None,
                      train_scores=bool(sc.scorers) and bool(self.return_train_score),
                      # DESIGN CHOICE: a learner that cannot fit is recorded fit by fit and
                      # reported as GridSearchCV reports it (error_score), not refused up front
                      execution={"trial_fits": False,
                                 "predict_rows": "test" if test_only else "all"})
        self._release()
        for name in ("best_index_", "best_params_", "best_score_", "best_estimator_",
                     "refit_time_", "feature_names_in_", "scorer_"):
            self.__dict__.pop(name, None)           # a refit with other settings: no stale ones
        store = self._new_store()
        weights = fit_params.get("sample_weight")
        hooks = tasks.hooks(len(candidates), splitter, X, y_arr, groups)
        # DESIGN CHOICE: GridSearchCV logs nothing; cvflow's INFO lines (the route chosen, the
        # cluster started) are shown when asked: verbose > 0, or a level set on cvflow's logger
        try:
            with quiet_info("cvflow", asked=self.verbose > 0):
                result = study.run(X, y, groups, sample_weight=weights, store=store,
                                   client=default_client(self.cluster), cluster=self.cluster,
                                   workers=self._workers(),
                                   progress=None if self.progress else False,
                                   fit_params={k: v for k, v in fit_params.items()
                                               if k != "sample_weight"}, fit_hooks=hooks)
        except RunInterrupted:
            if self.store is not None:
                raise
            self._release()          # the temporary store: nothing a later fit could resume
            raise RunInterrupted(None, why="the search had no store=, its temporary one is "
                                 "removed; give store= to keep a search's fits and resume it"
                                 ) from None
        self.store_, self.result_ = None if store is None else str(store), result
        # a reference, not a copy: report() predicts it with best_estimator_ when asked
        self._fit_X = (X, y, weights)
        self._failures(X, y_arr, estimator, candidates, fit_params)
        tasks.searched()
        sc = self._results(result, sc, candidates, weighted=weights is not None)
        self.n_splits_ = n_splits
        self._scorer(estimator, sc)
        if self.verbose > 1:         # GridSearchCV's `[CV] END` line of every fit, after the run
            for line in fit_lines(self.cv_results_, candidates, fit_records(result)[2],
                                  [self._column(n) for n in sc.names], verbose=self.verbose,
                                  multimetric=self.multimetric_, train=self.return_train_score):
                print(line)   # DESIGN CHOICE: verbose is GridSearchCV's stdout contract: print
        self._choose(result, select, sc, candidates)
        if self.refit:
            start = time.perf_counter()
            best = clone(estimator).set_params(**clone(self.best_params_, safe=False))
            with tasks.refit(best):
                best.fit(X, y, **weights_for(best, fit_params))
            self.refit_time_ = time.perf_counter() - start
            self.best_estimator_ = best
            if hasattr(best, "feature_names_in_"):        # as GridSearchCV: only when it has them
                self.feature_names_in_ = best.feature_names_in_
        tasks.done()
        return self

    def _check_options(self) -> None:
        error_score = self.error_score
        if not (error_score == "raise" if isinstance(error_score, str) else
                isinstance(error_score, numbers.Real) and not isinstance(error_score, bool)):
            raise ValueError(f"SearchCV: error_score={error_score!r}; give 'raise' or a number "
                             "(the score of a failed fit, e.g. np.nan)")
        if not (self.refit in (True, False) or isinstance(self.refit, str) or callable(self.refit)):
            raise ValueError(f"SearchCV: refit={self.refit!r}; give True, False, a scoring name "
                             "or a callable cv_results_ -> best_index_")
        if self.n_jobs is not None and (not isinstance(self.n_jobs, numbers.Integral)
                                        or self.n_jobs == 0 or self.n_jobs < -1):
            raise ValueError(f"SearchCV: n_jobs={self.n_jobs!r}; give None, -1 or a positive int")

    def _candidates(self) -> list[dict]:
        """The candidates, in ``cv_results_`` order: ``ParameterGrid``'s."""
        return list(ParameterGrid(self.param_grid))

    def _study_grid(self, candidates: list[dict]):
        """The study's grid, which it expands into ``candidates`` in their order."""
        return sorted_grid(self.param_grid)

    def _workers(self) -> int | None:
        """``workers``, else ``n_jobs`` > 1 (cvflow's scheduler decides for None, 1 and -1)."""
        if self.workers is not None or self.n_jobs is None or self.n_jobs < 2:
            return self.workers
        return int(self.n_jobs)

    def _scorings(self) -> Scorings:
        """The scorings (:class:`~cvflow.search.inputs.Scorings`; ``multimetric`` with several).

        A scoring name with a cvflow loss is scored from the stored predictions
        (``Scorings.losses``); anything else that scores a fitted model is computed where each
        fit runs and stored in the cube (``Scorings.scorers``, :mod:`cvflow.search.scoring_arg`):
        a scorer object, a callable, a scoring name without a cvflow loss, and ``scoring=None``
        with an estimator whose ``score`` is its own.
        """
        scoring = self.scoring
        if scoring is None or isinstance(scoring, str) or callable(scoring):
            if scoring is None:
                own = scoring_arg.own_score(self.estimator)
                if own is None:                      # GridSearchCV: estimator.score
                    return Scorings(["score"], "score", {}, {"score": estimator_score})
                scoring = own
            if not isinstance(scoring, str):
                return Scorings(["score"], "score", {}, {"score": scoring})
            return Scorings([scoring], scoring, *scoring_arg.split({scoring: scoring}))
        if isinstance(scoring, dict):
            named = {str(k): v for k, v in scoring.items()}
        elif isinstance(scoring, (list, tuple, set)):
            named = {}
            for item in scoring:
                named[item if isinstance(item, str) else scoring_arg.scorer_name(item, named)] = item
        else:
            raise ValueError(f"SearchCV: scoring={scoring!r}; give a scoring name, a scorer "
                             "(make_scorer(...), a callable (estimator, X, y) -> float), a "
                             "list of names or a dict name -> scoring")
        if not named:
            raise ValueError(f"SearchCV: scoring={scoring!r} is empty; give at least one scoring")
        losses, scorers = scoring_arg.split(named)
        refit = self.refit
        if refit is not False and not callable(refit) and not (isinstance(refit, str)
                                                               and refit in named):
            raise ValueError("For multi-metric scoring, the parameter refit must be set to a "
                             "scorer key or a callable to refit an estimator with the best "
                             "parameter setting on the whole data and make the best_* "
                             "attributes available for that metric. If this is not needed, "
                             f"refit should be set to False explicitly. {refit!r} was passed.")
        key = refit if isinstance(refit, str) else next(iter(named))
        return Scorings(list(named), key, losses, scorers, True)

    def _column(self, name: str) -> str:
        """The ``cv_results_`` suffix of scoring ``name``: itself, or "score" for one scoring."""
        return name if self.multimetric_ else "score"

    def _select(self) -> tuple[str, dict]:
        select = self.select
        if isinstance(select, str):
            name, options = select, {}
        elif isinstance(select, dict) and len(select) == 1:
            (name, options), = select.items()
            options = dict(options or {})
        else:
            raise ValueError(f"SearchCV: select={select!r}; give an estimator name or "
                             "{name: {options}}, e.g. 'kfold' or {'cv_confidence': {'alpha': 0.1}}")
        spec = REGISTRY.get(name)
        if spec is None or spec.results.get("selected") != ():
            choices = sorted(n for n, s in REGISTRY.items() if s.results.get("selected") == ())
            raise ValueError(f"SearchCV: select={name!r} is not a selecting estimator; use one "
                             f"of {', '.join(choices)}")
        if name == "kfold":
            options.setdefault("average", self.average)
        return name, options

    def _new_store(self) -> Path | None:
        if self.store is not None:
            return Path(self.store)
        if self.racing in (None, False):
            return None     # the cube in memory (DESIGN.md section 3): save(path) writes it
        # racing reads its store between stages: a raced search without one gets a temporary one
        # DESIGN CHOICE: the cube of a search without a store lives as long as the search
        # object (result_ reads it lazily): removed when the object is collected or refitted
        tmp = tempfile.mkdtemp(prefix="cvflow-search-")
        self._owner = weakref.finalize(self, shutil.rmtree, tmp, True)
        return Path(tmp) / "search.zarr"

    def _release(self) -> None:
        owner = self.__dict__.pop("_owner", None)
        if owner is not None:
            owner()

    # -- after the run -------------------------------------------------------------------------

    def _failures(self, X, y, estimator, candidates: list[dict], fit_params: dict) -> None:
        """scikit-learn's ``_warn_or_raise_about_fit_failures`` on the cube's failed fits;
        ``error_score="raise"`` refits the first failed fit here to raise its own exception."""
        failed, errors, _ = fit_records(self.result_)
        if not failed.any():
            return
        if isinstance(self.error_score, str):              # "raise"
            h, s = (int(i) for i in np.argwhere(failed)[0])
            refit_failed(self.result_.cube, X, y, estimator, candidates[h], s, fit_params)
            raise ValueError(f"SearchCV: the fit of {candidates[h]} on split {s} failed: "
                             f"{errors[h, s]} (error_score='raise'; fitted again here, it did "
                             "not fail)")
        message = failure_message(failed, errors, self.error_score)
        if failed.all():
            raise ValueError(message)
        warnings.warn(message, FitFailedWarning, stacklevel=3)

    def _results(self, result, sc: Scorings, candidates: list[dict], *,
                 weighted: bool) -> Scorings:
        """``cv_results_`` in GridSearchCV's key order, with its dtypes and warnings; returns
        the scorings as the fits gave them (a callable that returned a dict of scores is
        several: :func:`cvflow.search.scoring_arg.returned`)."""
        sc = scoring_arg.returned(sc, result.readable, self.refit)
        self.multimetric_ = sc.multimetric
        # a scorer computed at fit time is read by its name in the store; a loss is its cvflow
        # loss (resolved once in fit), in scikit-learn's sign (sign="score")
        stored = {name: sc.decls.get(name, name) for name in sc.names}
        table = cv_results(result, stored if self.multimetric_ else stored[sc.key],
                           average=self.average, train=self.return_train_score,
                           sign="score", weighted=weighted,
                           error_score=np.nan if isinstance(self.error_score, str)
                           else float(self.error_score))
        out: dict[str, Any] = {}
        for column in ("mean_fit_time", "std_fit_time", "mean_score_time", "std_score_time"):
            out[column] = table[column].to_numpy(dtype=np.float64)
        out.update(param_arrays(candidates))
        out["params"] = candidates
        for column in table.columns:
            if "_test_" in column or "_train_" in column:
                out[column] = table[column].to_numpy()
        for name in sc.names:
            for part in ("test", "train"):
                means = out.get(f"mean_{part}_{self._column(name)}")
                if means is not None and not np.isfinite(means).all():
                    warnings.warn(f"One or more of the {part} scores are non-finite: {means}",
                                  UserWarning, stacklevel=3)
        self.cv_results_ = out
        return sc

    def _scorer(self, estimator, sc: Scorings) -> None:
        """``scorer_`` as GridSearchCV's: scikit-learn's scorer of each scoring (by name with
        several); a cvflow loss name without one is left out."""
        if scoring_arg.dict_callable(sc):
            self.scorer_ = sc.scorers["score"]       # a callable returning a dict: itself
            return
        known = set(get_scorer_names())
        scorers = {n: (scoring_arg.as_scorer(sc.scorers[n]) if n in sc.scorers
                       else get_scorer(sc.losses[n]))
                   for n in sc.names if n in sc.scorers or sc.losses[n] in known}
        if self.multimetric_:
            self.scorer_ = scorers
        elif self.scoring is None:
            self.scorer_ = check_scoring(estimator)
        elif scorers:
            self.scorer_ = scorers[sc.key]

    def _choose(self, result, select: str, sc: Scorings, candidates: list[dict]) -> None:
        """``best_index_``, ``best_params_``, ``best_score_`` as GridSearchCV sets them."""
        refit = self.refit
        if self.multimetric_ and refit is False:
            return                               # GridSearchCV: no best_* without a refit key
        if callable(refit):
            index = refit(self.cv_results_)
            if not isinstance(index, numbers.Integral):
                raise TypeError("best_index_ returned is not an integer")
            if index < 0 or index >= len(candidates):
                raise IndexError("best_index_ index out of range")
            self.best_index_ = int(index)
        else:
            column = self._column(sc.key)
            # np.intp as GridSearchCV's (its rank_test_ column's argmin), not a Python int
            self.best_index_ = np.intp(self._choice(result, select, column))
            self.best_score_ = float(self.cv_results_[f"mean_test_{column}"][self.best_index_])
        self.best_params_ = candidates[self.best_index_]

    def _choice(self, result, select: str, column: str) -> int:
        # DESIGN CHOICE: kfold's choice is GridSearchCV's, the best rank_test_* of cv_results_,
        # so failed fits count as error_score, NaN means rank last and sample weights weigh
        # the scores exactly as there; every other estimator chooses on the cube
        if select == "kfold":
            return int(np.argmin(self.cv_results_[f"rank_test_{column}"]))
        res = result[select]
        # cv_confidence with `simplest` chooses the simplest member of its set (what the
        # option asks); every other selecting estimator's choice is its `selected`
        var = "simplest" if select == "cv_confidence" and "simplest" in res else "selected"
        index = int(res[var])
        if index < 0:
            raise ValueError(f"SearchCV: {select} chose no candidate (every candidate's fits "
                             f"failed?); see search.result_[{select!r}]")
        return index

    # -- what cvflow adds ----------------------------------------------------------------------

    def report(self, file=None) -> None:
        """Print what cvflow adds to ``GridSearchCV``'s answer for the chosen candidate: the
        K-fold estimate with its standard error (sd of the fold scores / sqrt(K)), the
        bias-corrected K-fold estimate (Burman 1989, the ``corrected_kfold`` estimator's kernel;
        a pointwise scoring or accuracy, with ``refit``) and every warning (the estimators'
        guardrails, failed fits). ``file``: where to print (default stdout).

        The chosen candidate's full fit is ``best_estimator_`` (it predicts X here); its fold
        models' predictions of their training rows are the cube's, or (a search without a
        store, which predicts the test folds alone) those of its K fold models fitted again."""
        check_is_fitted(self, "result_")
        if not hasattr(self, "best_index_"):
            raise AttributeError(f"{type(self).__name__}.report: no chosen candidate (several"
                                 " scorings and refit=False); give refit a scoring name")
        from .estimates import text   # DESIGN CHOICE: its estimators are off a fit's imports
        print(text(self), file=file)

    cube_ = property(lambda self: self.result_.cube, doc="The cube (``result_.cube``).")

    def save(self, path) -> Path:
        """Write the cube kept in memory (no ``store``) as a new store at ``path``."""
        return self.result_.save(path)

    # -- delegation ----------------------------------------------------------------------------

    @property
    def classes_(self):
        _check_refit(self, "classes_")
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.classes_

    @property
    def n_features_in_(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.n_features_in_

    predict = _delegate("predict")
    predict_proba = _delegate("predict_proba")
    predict_log_proba = _delegate("predict_log_proba")
    decision_function = _delegate("decision_function")
    transform = _delegate("transform")
    inverse_transform = _delegate("inverse_transform")
    score_samples = _delegate("score_samples")

    def score(self, X, y=None, sample_weight=None, **params):
        """The selecting scoring of ``best_estimator_`` on (X, y), greater is better (a loss
        negated), as ``GridSearchCV.score``: scikit-learn's scorer of that name (a cvflow loss
        name: the scorer it equals, else cvflow's loss of the estimator's predictions)."""
        _check_refit(self, "score")
        check_is_fitted(self, "best_estimator_")
        if params and not get_config().get("enable_metadata_routing", False):
            raise ValueError(f"Passing extra keyword arguments to {type(self).__name__}.score is "
                             "only supported if enable_metadata_routing=True, which you can set "
                             "using `sklearn.set_config`. See the User Guide "
                             "<https://scikit-learn.org/stable/metadata_routing.html> for more "
                             f"details. Extra parameters passed are: {set(params)}")
        if set(params) - {"sample_weight"}:
            raise ValueError(f"SearchCV.score: {sorted(set(params) - {'sample_weight'})[0]!r}: "
                             "only sample_weight reaches cvflow's scoring")
        sample_weight = params.get("sample_weight", sample_weight)
        sc = self._scoring                      # as fit resolved it
        weights = {} if sample_weight is None else {"sample_weight": sample_weight}
        model = self.best_estimator_
        if sc.key in sc.scorers:                 # a scorer computed at fit time: itself
            value = scoring_arg.as_scorer(sc.scorers[sc.key])(model, X, y, **weights)
            return float(value[self.refit] if isinstance(value, dict) else value)
        key, decl = sc.losses[sc.key], sc.decls[sc.key]
        names = [key] if key in decl.scorers else list(decl.scorers)
        if len(names) > 1:             # roc_auc: scikit-learn's multiclass scorer is roc_auc_ovr
            names = [names[-1] if len(model.classes_) > 2 else names[0]]
        if names:
            return float(get_scorer(names[0])(model, X, y, **weights))
        if decl.name == "zero_one":
            return -(1.0 - float(accuracy_score(y, model.predict(X), **weights)))
        output = "decision_function" if decl.name == "hinge" else "predict"
        pred = np.asarray(getattr(model, output)(X), dtype=np.float64)
        classes = list(model.classes_) if decl.task == "classification" else None
        values = np.asarray(apply_loss(decl, np.asarray(y), pred[None], classes, [output]))[0]
        return -float(np.average(values, weights=sample_weight))
