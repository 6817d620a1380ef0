"""Learners: params from a grid, estimators from dotted paths, one fit of one param."""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from ..objects import build_params, import_path
from ..errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Param:
    """One learner with one full hyperparameter setting (a row of the grid)."""

    learner: str
    estimator: str                      # dotted path, e.g. sklearn.linear_model.Ridge
    fixed: dict = field(default_factory=dict)
    hyper: dict = field(default_factory=dict)
    output: str = "predict"
    # transformers fitted on each training set before the estimator: (dotted path, JSON params)
    preprocess: tuple[tuple[str, str], ...] = ()
    # the workflow's execution.fit_seed: unset random_state params get a seed per (param, split)
    fit_seed: int | None = None

    def settings(self) -> dict:
        return {**self.fixed, **self.hyper}

    def to_json(self) -> str:
        setting = {"learner": self.learner, "estimator": self.estimator,
                   "params": self.settings(), "output": self.output}
        if self.preprocess:
            setting["preprocess"] = [{"estimator": path, "params": json.loads(params)}
                                     for path, params in self.preprocess]
        return json.dumps(setting, sort_keys=True)

    def build(self, train: np.ndarray | None = None):
        """A fresh, unfitted estimator (one per fit, as scikit-learn's clone gives); with
        ``preprocess`` a scikit-learn Pipeline, so the transformers learn from the training
        rows only.

        Settings are descriptions (:mod:`cvflow.objects`): nested estimators and functions
        are built anew on every call; nested keys (``ridge__alpha``) go through ``set_params``.
        With ``fit_seed`` and the training rows ``train``, every unset ``random_state`` gets
        the seed of this (param, training set), see :func:`fit_seed`.
        """
        cls = import_estimator(self.estimator)
        settings = build_params(self.settings(), cls, self.learner)
        model = cls(**{k: v for k, v in settings.items() if "__" not in k})
        nested = {k: v for k, v in settings.items() if "__" in k}
        if nested:
            model.set_params(**nested)
        if self.fit_seed is not None and train is not None:
            seed_random_states(model, fit_seed(self.fit_seed, self.to_json(), train))
        if not self.preprocess:
            return model
        from sklearn.pipeline import make_pipeline

        steps = [import_estimator(path)(**json.loads(params)) for path, params in self.preprocess]
        return make_pipeline(*steps, model)


def fit_seed(seed: int, param_json: str, train: np.ndarray) -> int:
    """The seed of one fit: a hash of the workflow seed, the param and its training set.

    It does not depend on indices, so appending params or splits to a store, resuming a run
    or refitting a chosen param (:meth:`cvflow.study.StudyResult.refit`) gives the same seed.
    """
    h = hashlib.sha256(f"{seed}|{param_json}|".encode())
    h.update(np.packbits(np.asarray(train, dtype=bool)).tobytes())
    return int.from_bytes(h.digest()[:4], "little") & 0x7FFFFFFF


def seed_random_states(model, seed: int) -> None:
    """Set every unset ``random_state`` of ``model`` (nested ones included) from ``seed``."""
    unset = sorted(k for k, v in model.get_params(deep=True).items()
                   if (k == "random_state" or k.endswith("__random_state")) and v is None)
    if unset:
        model.set_params(**{k: (seed + i) & 0x7FFFFFFF for i, k in enumerate(unset)})


def sample_weight_key(model) -> str:
    """The fit keyword of sample weights: ``sample_weight``, routed to a Pipeline's last step."""
    from sklearn.pipeline import Pipeline

    if isinstance(model, Pipeline):
        return f"{model.steps[-1][0]}__{sample_weight_key(model.steps[-1][1])}"
    return "sample_weight"


def import_estimator(path: str):
    """The estimator class at a dotted path; InputError if it does not import or is no estimator."""
    cls = import_path(path, "estimator")
    if not (isinstance(cls, type) and hasattr(cls, "fit") and hasattr(cls, "get_params")):
        raise InputError(f"estimator: {path!r} is not a scikit-learn estimator class (no fit/get_params)")
    return cls


def expand_grid(grid: dict[str, list]) -> list[dict]:
    """Cartesian product of a grid in grid order (last name varies fastest)."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*grid.values())]


def default_output(cls, task: str) -> str:
    """The stored output whatever the loss: predict for regression, else the decision value
    where the learner has one, else its probabilities."""
    if task == "regression":
        return "predict"
    return "decision_function" if hasattr(cls, "decision_function") else "predict_proba"


def infer_output(cls, task: str, loss=None, n_classes: int = 2) -> str:
    """The stored output of a learner whose workflow (or Study) names none: the
    :func:`default_output`, unless the loss (a :class:`cvflow.estimators.losses.Loss`) cannot read it with
    this many classes; then the first of predict_proba, decision_function that the loss reads
    and the learner has (log_loss, brier and multiclass roc_auc: predict_proba). When none
    fits, the default: the loss check then says what is missing.

    DESIGN CHOICE: one rule for both faces (YAML and :class:`cvflow.Study`), applied where the
    workflow is parsed (two classes assumed) and again once the data give the class count
    (:meth:`cvflow.workflow.spec.Workflow.build`).
    """
    default = default_output(cls, task)
    if loss is None or task == "regression":
        return default
    accepted = (loss.multiclass_outputs if n_classes > 2 and loss.multiclass_outputs
                else loss.outputs)
    if default in accepted:
        return default
    return next((o for o in ("predict_proba", "decision_function")
                 if o in accepted and hasattr(cls, o)), default)


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
    out = np.full((X.shape[0], len(classes)), 0.0 if output == "predict_proba" else -np.inf)
    out[:, np.searchsorted(classes, known)] = values
    return out


def take(X, rows: np.ndarray):
    """Rows of a numpy array or a pandas DataFrame."""
    return X.iloc[rows] if hasattr(X, "iloc") else X[rows]


def fit_model(param: Param, X, y, train: np.ndarray, sample_weight=None):
    """``param``'s estimator fitted on the training rows (with their sample weights)."""
    model = param.build(train)
    kwargs = {} if sample_weight is None else {
        sample_weight_key(model): np.asarray(sample_weight)[train]}
    model.fit(take(X, train), y[train], **kwargs)
    return model


def fit_one(param: Param, X, y, train: np.ndarray, positive=None,
            sample_weight=None) -> tuple[np.ndarray, float, str]:
    """Fit ``param`` on the training rows and predict every sample.

    Returns (predictions, seconds, error message or ""); a raising fit gives NaN predictions.
    """
    t0 = time.perf_counter()
    try:
        model = fit_model(param, X, y, train, sample_weight)
        pred = predict_output(model, X, param.output, positive)
        if pred.shape != pred_shape(X, positive):
            raise ValueError(f"prediction has shape {pred.shape}, expected {pred_shape(X, positive)}")
        return pred, time.perf_counter() - t0, ""
    except Exception as exc:  # noqa: BLE001 - a failing fit is data, not a crash
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        return np.full(pred_shape(X, positive), np.nan), time.perf_counter() - t0, message


def pred_shape(X, positive) -> tuple[int, ...]:
    """Shape of one fit's stored predictions: (n,) or, multiclass, (n, C)."""
    return (X.shape[0],) + ((len(positive),) if isinstance(positive, tuple) else ())
