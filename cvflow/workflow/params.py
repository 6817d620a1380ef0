"""Params: one learner with one full hyperparameter setting, from a grid and dotted paths.

What to fit, as data: a :class:`Param` builds a fresh estimator for each fit; nothing here
fits (that is :mod:`cvflow.fitting`). See docs/developer/architecture.md.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from ..objects import build_params, import_path, init_signature


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
    # the Python face's own objects, (estimator, {name: value} of this grid point): what is
    # fitted, while ``fixed`` and ``hyper`` describe it (cvflow.objects); in memory only, never
    # stored, shipped to worker processes by value as distributed ships objects
    source: tuple[Any, dict] | None = field(default=None, compare=False, repr=False)
    # the Python face's fit parameters beyond sample_weight ({name: value}, as GridSearchCV's
    # fit(**params)): a sample-aligned value is taken by the training rows, any other passed
    # as it is (cvflow.fitting.learners.fit_model); in memory only, never stored
    fit_params: dict | None = field(default=None, compare=False, repr=False)
    # the Python face's hook around each of this param's fits (scikit-learn's callbacks of a
    # SearchCV, cvflow.search.callbacks): ``fit_hook(model, train, X_train, y_train,
    # sample_weight)`` is a context manager entered around ``model.fit``; in memory only, never
    # stored; it turns the path kernels off (each fit is the learner's own)
    fit_hook: Any = field(default=None, compare=False, repr=False)

    def settings(self) -> dict:
        return {**self.fixed, **self.hyper}

    @functools.cached_property
    def settings_json(self) -> str:
        """:meth:`settings` as JSON, keys sorted (TypeError or ValueError for values that are
        not plain data), computed once per param: the path planner reads it for every block
        (cvflow.fitting.paths.plan; ~1.5 ms of GIL-held work a plan of the lasso's 100 params)."""
        return json.dumps(self.settings(), sort_keys=True)

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

        With ``source`` (the Python face), the estimator is cloned and the grid point's values,
        cloned too, go through ``set_params``, as ``GridSearchCV`` builds each candidate.
        Otherwise the settings are descriptions (:mod:`cvflow.objects`): nested estimators and
        functions are built anew on every call; the constructor's own arguments go to it, every
        other key (``ridge__alpha``, a Pipeline step ``reduce``) through ``set_params``. With
        ``fit_seed`` and the training rows ``train``, every unset ``random_state`` gets the
        seed of this (param, training set), see :func:`fit_seed`.
        """
        if self.source is not None:
            from sklearn.base import clone

            estimator, values = self.source
            model = clone(estimator)
            if values:
                model.set_params(**clone(values, safe=False))
        else:
            cls = import_estimator(self.estimator)
            settings = build_params(self.settings(), cls, self.learner)
            names = init_names(cls)
            ctor = {k for k in settings if (k in names if names is not None else "__" not in k)}
            model = cls(**{k: v for k, v in settings.items() if k in ctor})
            rest = {k: v for k, v in settings.items() if k not in ctor}
            if rest:
                model.set_params(**rest)
        if self.fit_seed is not None and train is not None:
            seed_random_states(model, fit_seed(self.fit_seed, self.to_json(), train))
        if not self.preprocess:
            return model
        from sklearn.pipeline import make_pipeline

        steps = [import_estimator(path)(**json.loads(params)) for path, params in self.preprocess]
        return make_pipeline(*steps, model)


def init_names(cls) -> set[str] | None:
    """The keyword arguments of ``cls``'s constructor; None when it takes ``**kwargs`` or its
    signature is unknown (then every key without ``__`` goes to it)."""
    signature = init_signature(cls)
    if signature is None:
        return None
    parameters = list(signature.parameters.values())
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name != "self"}


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
