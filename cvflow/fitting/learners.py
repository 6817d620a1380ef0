"""One fit of one param: build its estimator, fit it on a training set, predict every sample."""
from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Callable

import numpy as np

from .scoring import Scores, Scoring, score_fit, take
from .scoring import none as no_scores
from ..workflow.params import Param

log = logging.getLogger(__name__)


def sample_weight_key(model) -> str:
    """The fit keyword of sample weights: ``sample_weight``, routed to a Pipeline's last step."""
    from sklearn.pipeline import Pipeline

    if isinstance(model, Pipeline):
        return f"{model.steps[-1][0]}__{sample_weight_key(model.steps[-1][1])}"
    return "sample_weight"


def predict_output(model, X: np.ndarray, output: str, positive=None) -> np.ndarray:
    """Predictions of ``model`` on every sample in the stored form.

    ``positive`` is the positive class of a binary task (one score per sample: its
    probability or the decision value), or the tuple of all classes of a multiclass task:
    then (n, C) per-class probabilities or decision values in that order (a class missing
    from the training set gets probability 0 and decision value -inf), and ``predict`` one-hot.
    """
    if isinstance(positive, tuple):
        return _per_class(model, X, output, np.asarray(positive))
    if output == "predict":
        values = np.asarray(model.predict(X))
        if values.dtype.kind not in "biuf":
            raise ValueError(f"output 'predict' stores numbers but the learner predicts "
                             f"{values.dtype.name} labels; use output decision_function or "
                             "predict_proba")
        return values.astype(np.float64)
    if output == "decision_function":
        values = np.asarray(model.decision_function(X), dtype=np.float64)
        if values.ndim != 1:
            raise ValueError("decision_function returned several columns; cvflow handles binary tasks")
        return values
    proba = model.predict_proba(X)
    column = int(np.flatnonzero(np.asarray(model.classes_) == positive)[0])
    return np.asarray(proba[:, column], dtype=np.float64)


def _per_class(model, X: np.ndarray, output: str, classes: np.ndarray) -> np.ndarray:
    """(n, C) stored output of a multiclass task, columns in the order of ``classes``."""
    if output == "predict":
        return (np.asarray(model.predict(X))[:, None] == classes[None, :]).astype(np.float64)
    known = np.asarray(model.classes_)
    values = np.asarray(getattr(model, output)(X), dtype=np.float64)
    if values.ndim == 1:               # a 2-class model (a class missing from the training set)
        values = np.column_stack([-values, values]) if output == "decision_function" else values
    out = np.full((n_rows(X), len(classes)), 0.0 if output == "predict_proba" else -np.inf)
    out[:, np.searchsorted(classes, known)] = values
    return out


def pairwise(model) -> bool:
    """Whether ``model`` takes a precomputed kernel or distance matrix (its pairwise tag)."""
    from sklearn.utils import get_tags

    try:
        return bool(get_tags(model).input_tags.pairwise)
    except Exception:  # noqa: BLE001 - an estimator without tags is not pairwise
        return False


def columns(X, rows: np.ndarray):
    """The columns ``rows`` of a pairwise X (a kernel between samples): X[:, train]."""
    if not (isinstance(X, np.ndarray) or hasattr(X, "tocsr")):
        # scikit-learn's own words (_safe_split)
        raise ValueError("Precomputed kernels or affinity matrices have to be passed as arrays "
                         "or sparse matrices.")
    rows = np.asarray(rows)
    return X[:, np.flatnonzero(rows) if rows.dtype == bool else rows]


def fit_model(param: Param, X, y, train: np.ndarray, sample_weight=None):
    """``param``'s estimator fitted on the training rows (with their sample weights), as
    ``GridSearchCV`` fits: ``fit(X)`` without a target, a pairwise X as X[train][:, train]."""
    model = param.build(train)
    kwargs = fit_kwargs(param, model, X, train, sample_weight)
    X_train = take(X, train)
    if pairwise(model):
        if hasattr(X, "shape") and X.shape[0] != X.shape[1]:
            raise ValueError("X should be a square kernel matrix")    # _safe_split's words
        X_train = columns(X_train, train)
    y_train = None if y is None else take(y, train)
    hook = param.fit_hook or (lambda *args: contextlib.nullcontext())
    with hook(model, train, X_train, y_train,
              None if sample_weight is None else np.asarray(sample_weight)[train]):
        model.fit(X_train, **kwargs) if y is None else model.fit(X_train, y_train, **kwargs)
    return model


def fit_kwargs(param: Param, model, X, train: np.ndarray, sample_weight=None) -> dict:
    """The fit keywords of ``model`` (built from ``param``) on the training rows: the sample
    weights routed to its last step and the param's fit parameters, sliced."""
    kwargs = {} if sample_weight is None else {
        sample_weight_key(model): np.asarray(sample_weight)[train]}
    kwargs.update(fit_params_of(param.fit_params, n_rows(X), train))
    return kwargs


def fit_params_of(fit_params: dict | None, n_samples: int, train: np.ndarray) -> dict:
    """The fit parameters of one fit, as ``GridSearchCV`` slices them: an array-like of
    ``n_samples`` values (an array, a list, a Series) taken by the training rows, anything
    else (a scalar, a callable, a tuple of validation arrays) passed as it is."""
    def aligned(value) -> bool:
        if isinstance(value, (str, bytes, tuple, dict)) or not (
                hasattr(value, "shape") or hasattr(value, "__len__")):
            return False
        try:
            return n_rows(value) == n_samples
        except TypeError:
            return False

    return {k: take(v, train) if aligned(v) else v for k, v in (fit_params or {}).items()}


def fit_one(param: Param, X, y, train: np.ndarray, positive=None,
            sample_weight=None) -> tuple[np.ndarray, float, str]:
    """Fit ``param`` on the training rows and predict every sample (a pairwise X: from its
    columns of the training samples).

    Returns (predictions, seconds, error message or ""); a raising fit gives NaN predictions.
    """
    return fit_and_score(param, X, y, train, positive, sample_weight)[:3]


def fit_and_score(param: Param, X, y, train: np.ndarray, positive=None, sample_weight=None,
                  scoring: Scoring | None = None, fitted: Callable | None = None,
                  test_only: bool = False) -> tuple[np.ndarray, float, str, Scores | None]:
    """:func:`fit_one`, and with ``scoring`` the fitted model scored where it was fitted
    (:func:`cvflow.fitting.scoring.score_fit`): (predictions, seconds of fit and predict,
    error message or "", scores or None).

    With scorers, a model whose predictions cannot be stored (a learner whose ``predict``
    returns no array of one number per sample) is not a failed fit: its scores are what the
    study asks of it. Its predictions stay NaN and the reason is among the scores' messages.

    ``fitted``, when given, replaces the fit: ``fitted()`` returns (the fitted model, a function
    of no argument returning its stored predictions); a shared Pipeline prefix
    (:mod:`cvflow.fitting.prefix`) fits only the last step and predicts from every sample
    transformed once.

    ``test_only``: the model predicts its test rows (those not in ``train``) alone, as
    GridSearchCV's scorer does; its training rows' predictions stay NaN.
    """
    shape = pred_shape(X, positive)
    t0 = time.perf_counter()
    try:
        if fitted is None:
            model = fit_model(param, X, y, train, sample_weight)
            predict = functools.partial(_predict, model, param, X, train, positive, test_only)
        else:
            model, predict = fitted()
    except Exception as exc:  # noqa: BLE001 - a failing fit is data, not a crash
        return (np.full(shape, np.nan), time.perf_counter() - t0, _message(exc),
                None if scoring is None else no_scores(scoring))
    unstored = ""
    try:
        pred = predict()
        if pred.shape != shape:
            raise ValueError(f"prediction has shape {pred.shape}, expected {shape}")
    except Exception as exc:  # noqa: BLE001 - as a failing fit, unless scorers score it
        if scoring is None:
            return np.full(shape, np.nan), time.perf_counter() - t0, _message(exc), None
        pred, unstored = np.full(shape, np.nan), f"predictions not stored: {_message(exc)}"
    seconds = time.perf_counter() - t0
    if scoring is None:
        return pred, seconds, "", None
    # a pairwise learner is scored from its columns of the training samples, as it predicts
    scores = score_fit(scoring, model, columns(X, train) if pairwise(model) else X, y, train,
                       sample_weight)
    if unstored:
        scores.errors.insert(0, unstored)
    return pred, seconds, "", scores


def _predict(model, param: Param, X, train: np.ndarray, positive,
             test_only: bool = False) -> np.ndarray:
    """The stored predictions of a fitted ``model`` (a pairwise one: from its columns of the
    training samples); with ``test_only`` of the rows not in ``train`` alone (NaN elsewhere)."""
    if not test_only:
        return predict_output(model, columns(X, train) if pairwise(model) else X, param.output,
                              positive)
    test = ~np.asarray(train, dtype=bool)
    rows = take(X, test)
    out = np.full(pred_shape(X, positive), np.nan)
    if test.any():
        out[test] = predict_output(model, columns(rows, train) if pairwise(model) else rows,
                                   param.output, positive)
    return out


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def pred_shape(X, positive) -> tuple[int, ...]:
    """Shape of one fit's stored predictions: (n,) or, multiclass, (n, C)."""
    return (n_rows(X),) + ((len(positive),) if isinstance(positive, tuple) else ())


def n_rows(X) -> int:
    """Samples in X: its first dimension, or its length (a list)."""
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)
