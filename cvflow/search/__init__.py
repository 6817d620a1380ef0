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
    cvflow.open(search.store_)             # the cube
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
import weakref
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.model_selection import ParameterGrid, PredefinedSplit, check_cv
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from .estimators.losses import Loss, from_scoring


def _has(method: str):
    """``available_if`` check: the fitted best estimator (else the unfitted one) has ``method``."""
    def check(self) -> bool:
        est = getattr(self, "best_estimator_", None)
        est = self.estimator if est is None else est
        if self.refit is False and hasattr(self, "result_"):
            raise AttributeError(f"This SearchCV was fitted with refit=False: {method} is "
                                 "available after fitting with refit=True")
        getattr(est, method)            # raises AttributeError when the estimator lacks it
        return True
    return check


class SearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over a grid, selected by any cvflow criterion, as a scikit-learn estimator.

    Parameters
    ----------
    estimator : estimator object
        A scikit-learn estimator (Pipelines included), unfitted.
    param_grid : dict or list of dicts
        As ``GridSearchCV``'s (``ParameterGrid``); candidates come in ``ParameterGrid``'s
        order, so ``cv_results_`` rows match ``GridSearchCV``'s.
    cv : int, splitter or iterable of (train, test), default 5
        As ``GridSearchCV``'s (``check_cv``: an int is ``StratifiedKFold`` for a classifier
        on a binary or multiclass target, else ``KFold``, unshuffled). The test sets must
        partition the samples once per repeat (cvflow's estimators are defined on folds).
    scoring : str, list of str or None, default None
        A scikit-learn scoring name that equals a cvflow loss (``neg_mean_squared_error``,
        ``neg_mean_absolute_error``, ``neg_log_loss``, ``neg_brier_score``, ``roc_auc``,
        ``roc_auc_ovr``, ``average_precision``, ``accuracy``, ``balanced_accuracy``, ``f1``,
        ``f1_macro``, ... ``matthews_corrcoef``, ``r2``, ``explained_variance``) or a cvflow
        loss name (``squared``, ``zero_one``, ``hinge``, ``pinball:0.9``, ...). None: the
        estimator's ``score`` (``accuracy`` for a classifier, ``r2`` for a regressor). A
        scorer object, or a name with no cvflow loss, is refused (ValueError): cvflow scores
        stored predictions, so it needs a loss it can apply to them. A list scores several;
        ``refit`` then names the one that selects.
    select : str or {name: options}, default "kfold"
        The selecting estimator of cvflow's registry: ``"kfold"``, ``"corrected_kfold"``,
        ``{"stability_nested": {"lambdas": [0, 1]}}``, ``{"cv_confidence": {"simplest":
        {"alpha": "max"}}}``, ``"nested_cv"``, ... Its ``selected`` is the choice
        (``cv_confidence`` with ``simplest``: the simplest member of its set).
    refit : bool or str, default True
        Fit the chosen candidate on the whole data as ``best_estimator_``. With several
        scorings, the scoring name that selects (as ``GridSearchCV``'s ``refit``).
    store : path or URL, optional
        Where the cube is written (kept). None: a temporary directory removed with the search
        object (or at its next ``fit``). A given store is resumed or extended on refits with
        the same data, and refused for other data (a store keeps one study).
    estimators : tuple, default ()
        Other estimators to run over the same cube (their results in ``result_``).
    average : {"folds", "samples"}, default "folds"
        ``mean_test_*`` and the ``kfold`` selection: the mean of the fold scores
        (``GridSearchCV``'s) or the mean over every sample (cvflow's K-fold estimate).
    return_train_score : bool, default False
        ``cv_results_`` also holds the train scores (read from the stored predictions).
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
        GridSearchCV's keys and meaning: ``params``, ``param_<name>`` (masked arrays),
        ``split<k>_test_<s>``, ``mean_test_<s>``, ``std_test_<s>``, ``rank_test_<s>`` (``<s>``
        is ``score`` for one scoring), ``mean_fit_time``, ``std_fit_time`` (each fold fit,
        its predictions of every sample included) and with ``return_train_score`` the train
        columns. Scores are "greater is better", scikit-learn's sign: a loss is negated
        (``scoring="squared"`` gives minus the mean squared error, as
        ``neg_mean_squared_error``). No ``*_score_time`` keys: scoring is a reduction of
        stored predictions.
    best_index_, best_params_ : int, dict
        The selecting estimator's choice and its candidate.
    best_score_ : float
        ``mean_test_<refit scoring>`` of the choice.
    best_estimator_ : estimator
        The choice fitted on all of X (with ``refit``).
    refit_time_ : float
        Seconds of that fit.
    n_splits_ : int
        Number of CV splits (folds x repeats).
    classes_, n_features_in_, feature_names_in_
        Of ``best_estimator_``.
    multimetric_ : bool
    store_ : str
        The cube's path; ``cvflow.open(search.store_)`` opens it.
    result_ : cvflow.study.StudyResult
        The cvflow results over the cube (``result_["kfold"]``, ``result_.cube``, ...).
    """

    def __init__(self, estimator, param_grid, *, cv=5, scoring=None, select="kfold", refit=True,
                 store=None, estimators=(), average="folds", return_train_score=False,
                 cluster=None, workers=None, fit_seed=None, progress=False, racing=None):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.scoring = scoring
        self.select = select
        self.refit = refit
        self.store = store
        self.estimators = estimators
        self.average = average
        self.return_train_score = return_train_score
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
        return state

    # -- fit -----------------------------------------------------------------------------------

    def fit(self, X, y=None, groups=None, **fit_params):
        """Run every candidate on every split as a cvflow study, select, refit.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        groups : array-like of shape (n_samples,), optional
            Group labels for a group splitter (``GroupKFold``), as ``GridSearchCV``'s.
        **fit_params
            ``sample_weight`` only (stored with the data and passed to every fit).

        Returns
        -------
        self
        """
        from .study import Study

        unknown = sorted(set(fit_params) - {"sample_weight"})
        if unknown:
            raise ValueError(f"SearchCV.fit: fit parameter {unknown[0]!r} is not supported; cvflow "
                             "stores the data of every fit and passes only sample_weight")
        if y is None:
            raise ValueError("SearchCV.fit: y is required (cvflow studies are supervised)")
        scorings, key = self._scorings()
        classifier = is_classifier(self.estimator)
        task = "classification" if classifier else "regression"
        y_arr = np.asarray(y)
        n_classes = len(np.unique(y_arr)) if classifier else 0
        losses = {s: self._loss(s, task) for s in scorings}
        select, options = self._select()
        if self.racing not in (None, False) and not losses[key][0].pointwise:
            raise ValueError(f"SearchCV: racing compares per-sample losses, but scoring "
                             f"{key!r} is a per-fold metric; give a pointwise scoring such as "
                             "neg_mean_squared_error, neg_log_loss or accuracy")
        candidates = list(ParameterGrid(self.param_grid))
        grid = _sorted_grid(self.param_grid)
        splitter = _splitter(check_cv(self.cv, y_arr, classifier=classifier), X, y_arr, groups)
        selector = {select: options}
        extra = [e for e in self.estimators if (e if isinstance(e, str) else next(iter(e))) != select]
        study = Study(self.estimator, param_grid=grid, cv=splitter, estimators=[selector, *extra],
                      loss=losses[key][0].label, task=task, fit_seed=self.fit_seed,
                      output=_output(self.estimator, [d for d, _ in losses.values()], n_classes),
                      name="search", racing=self.racing)
        self._release()
        store = self._new_store()
        result = study.run(X, y, groups, sample_weight=fit_params.get("sample_weight"),
                           store=store, client=_default_client(self.cluster),
                           cluster=self.cluster, workers=self.workers,
                           progress=None if self.progress else False)
        self.store_, self.result_ = str(store), result
        self._results(result, scorings, key, candidates)
        self.best_index_ = self._choice(result, select)
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(self.cv_results_[f"mean_test_{key if self.multimetric_ else 'score'}"]
                                 [self.best_index_])
        if self.refit is not False:
            start = time.perf_counter()
            best = clone(self.estimator).set_params(**clone(self.best_params_, safe=False))
            self.best_estimator_ = best.fit(X, y, **fit_params)
            self.refit_time_ = time.perf_counter() - start
        return self

    def _scorings(self) -> tuple[list[str], str]:
        """(the scoring names, the one that selects)."""
        scoring = self.scoring
        if scoring is None:
            scoring = "accuracy" if is_classifier(self.estimator) else "r2"
        if isinstance(scoring, str):
            self.multimetric_ = False
            return [scoring], scoring
        if isinstance(scoring, (list, tuple, set)) and scoring and \
                all(isinstance(s, str) for s in scoring):
            names = list(dict.fromkeys(scoring))
            self.multimetric_ = True
            if not isinstance(self.refit, str) or self.refit not in names:
                if self.refit is False:
                    return names, names[0]
                raise ValueError(f"SearchCV: with several scorings, refit names the one that "
                                 f"selects, one of {names}; got refit={self.refit!r}")
            return names, self.refit
        raise ValueError(f"SearchCV: scoring={scoring!r}: a scorer object has no cvflow loss "
                         "(cvflow scores stored predictions); give a scoring name such as "
                         "'neg_mean_squared_error' or 'accuracy', or a list of them")

    def _loss(self, scoring: str, task: str) -> tuple[Loss, float]:
        decl, factor = from_scoring(scoring, where=f"SearchCV: scoring {scoring!r}")
        if decl.task is not None and decl.task != task:
            raise ValueError(f"SearchCV: scoring {scoring!r} is a {decl.task} score, and "
                             f"{type(self.estimator).__name__} is a "
                             f"{'classifier' if task == 'classification' else 'regressor'}")
        return decl, factor

    def _select(self) -> tuple[str, dict]:
        from .estimators.registry import REGISTRY

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

    def _new_store(self) -> Path:
        if self.store is not None:
            return Path(self.store)
        # DESIGN CHOICE: the cube of a search without a store lives as long as the search
        # object (result_ reads it lazily): removed when the object is collected or refitted
        tmp = tempfile.mkdtemp(prefix="cvflow-search-")
        self._owner = weakref.finalize(self, shutil.rmtree, tmp, True)
        return Path(tmp) / "search.zarr"

    def _release(self) -> None:
        owner = self.__dict__.pop("_owner", None)
        if owner is not None:
            owner()

    def _results(self, result, scorings: list[str], key: str, candidates: list[dict]) -> None:
        from .report.tables import cv_results

        table = cv_results(result, scorings if self.multimetric_ else scorings[0],
                           average=self.average, train=self.return_train_score, sign="score")
        out: dict[str, Any] = {}
        for column in table.columns:
            if column.startswith("param_"):
                name = column[len("param_"):]
                values = [c.get(name) for c in candidates]
                out[column] = np.ma.MaskedArray(np.empty(len(values), dtype=object),
                                                mask=[name not in c for c in candidates])
                for i, c in enumerate(candidates):
                    if name in c:
                        out[column][i] = values[i]
            elif column == "params":
                out[column] = candidates
            elif column != "learner":
                out[column] = table[column].to_numpy()
        self.cv_results_ = out
        self.n_splits_ = sum(1 for c in table.columns if c.startswith("split")
                             and c.endswith(f"_test_{key if self.multimetric_ else 'score'}"))

    def _choice(self, result, select: str) -> int:
        res = result[select]
        # DESIGN CHOICE: cv_confidence with `simplest` chooses the simplest member of its set
        # (what the option asks); every other selecting estimator's choice is its `selected`
        var = "simplest" if select == "cv_confidence" and "simplest" in res else "selected"
        index = int(res[var])
        if index < 0:
            raise ValueError(f"SearchCV: {select} chose no candidate (every candidate's fits "
                             f"failed?); see search.result_[{select!r}]")
        return index

    # -- delegation ----------------------------------------------------------------------------

    @property
    def classes_(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.classes_

    @property
    def n_features_in_(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.n_features_in_

    @property
    def feature_names_in_(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.feature_names_in_

    @available_if(_has("predict"))
    def predict(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    @available_if(_has("predict_proba"))
    def predict_proba(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict_proba(X)

    @available_if(_has("predict_log_proba"))
    def predict_log_proba(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict_log_proba(X)

    @available_if(_has("decision_function"))
    def decision_function(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.decision_function(X)

    @available_if(_has("transform"))
    def transform(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.transform(X)

    @available_if(_has("inverse_transform"))
    def inverse_transform(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.inverse_transform(X)

    @available_if(_has("score_samples"))
    def score_samples(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score_samples(X)

    def score(self, X, y=None, sample_weight=None):
        """The selecting scoring of ``best_estimator_`` on (X, y), greater is better (a loss
        negated), as ``GridSearchCV.score``: scikit-learn's scorer of that name (a cvflow loss
        name: the scorer it equals, else cvflow's loss of the estimator's predictions)."""
        from sklearn.metrics import accuracy_score, get_scorer

        check_is_fitted(self, "best_estimator_")
        _, key = self._scorings()
        classifier = is_classifier(self.estimator)
        decl, _ = self._loss(key, "classification" if classifier else "regression")
        weights = {} if sample_weight is None else {"sample_weight": sample_weight}
        model = self.best_estimator_
        names = [key] if key in decl.scorers else list(decl.scorers)
        if len(names) > 1:             # roc_auc: scikit-learn's multiclass scorer is roc_auc_ovr
            names = [names[-1] if len(model.classes_) > 2 else names[0]]
        if names:
            return float(get_scorer(names[0])(model, X, y, **weights))
        if decl.name == "zero_one":
            return -(1.0 - float(accuracy_score(y, model.predict(X), **weights)))
        from .estimators.losses import apply_loss

        output = "decision_function" if decl.name == "hinge" else "predict"
        pred = np.asarray(getattr(model, output)(X), dtype=np.float64)
        classes = list(model.classes_) if classifier else None
        values = np.asarray(apply_loss(decl, np.asarray(y), pred[None], classes, [output]))[0]
        return -float(np.average(values, weights=sample_weight))


def _sorted_grid(param_grid):
    """The grid with its names sorted: cvflow expands a grid in its names' order (last fastest),
    ``ParameterGrid`` in sorted order; sorted, the candidates come in the same order."""
    if isinstance(param_grid, dict):
        return {k: list(param_grid[k]) for k in sorted(param_grid)}
    return [_sorted_grid(g) for g in param_grid]


def _splitter(cv, X, y, groups):
    """A splitter cvflow can store: scikit-learn's own splitter classes as they are; anything
    else (an iterable of splits, a custom class) as the ``PredefinedSplit`` of its test folds,
    which must partition the samples (one repeat)."""
    module = type(cv).__module__
    if module.startswith("sklearn.") and not type(cv).__name__.startswith("_"):
        return cv
    labels = np.full(len(y), -1)
    for j, (_, test) in enumerate(cv.split(X, y, groups)):
        if (labels[test] >= 0).any():
            raise ValueError("SearchCV: cv tests some samples twice; cvflow needs test folds "
                             "that partition the samples (KFold, StratifiedKFold, GroupKFold, ...)")
        labels[test] = j
    if (labels < 0).any():
        raise ValueError("SearchCV: cv never tests some samples; cvflow needs test folds that "
                         "partition the samples (KFold, StratifiedKFold, GroupKFold, ...)")
    return PredefinedSplit(labels)


def _output(estimator, losses: list[Loss], n_classes: int) -> str | None:
    """The stored output that serves every loss, as scikit-learn's scorers prefer it:
    decision_function, else predict_proba, else predict (None for a regressor)."""
    if not is_classifier(estimator):
        return None
    allowed = set.intersection(*[set(d.multiclass_outputs or d.outputs if n_classes > 2
                                     else d.outputs) for d in losses])
    for output in ("decision_function", "predict_proba", "predict"):
        if output in allowed and hasattr(estimator, output):
            return output
    names = ", ".join(d.label for d in losses)
    raise ValueError(f"SearchCV: no output of {type(estimator).__name__} serves every scoring "
                     f"({names}); score them in separate searches")


def _default_client(cluster):
    """The default ``distributed.Client`` of this process when ``cluster`` is None, else None.

    DESIGN CHOICE: a search inside ``cross_validate`` is cloned and fitted once per outer fold;
    with ``auto`` each fit would start (and stop) its own worker processes. A Client the user
    opened around the nested CV is used by every one of them instead (as dask-ml's searches
    use the default client). Only looked for when distributed is already imported.
    """
    if cluster is not None or "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:                    # no client
        return None
