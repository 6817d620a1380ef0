"""Losses and metrics applied to stored predictions, chosen at report time.

Every loss declares itself once, where it is defined (:func:`declare`): its name, the task,
the stored outputs it can read, whether it is pointwise, whether it handles more than two
classes, and an optional parameter (``pinball:0.9``, ``huber:1.5``). Everything else (the
workflow check, the reducers, the README table) reads :data:`DECLARED`.

A *pointwise* loss ``f(target, score, output, arg) -> array`` works elementwise and broadcasts,
so it runs unchanged on numpy and dask arrays; ``score`` carries params/splits first and
samples last (multiclass: then a trailing ``class`` axis). ``target`` is y for regression; for classification
the class index of y (binary: 1 for the positive class) or, with more than two classes, y
one-hot (n, C) in the order of the cube's ``classes``. A
binary cube stores one score per sample for class 1 (the positive class); a multiclass cube
stores C per sample. Stored labels (``predict``) are read as indicators: binary 1.0 for the
positive class, multiclass one-hot. NaN predictions (not written, or a failed fit) give NaN.

A *metric* (``pointwise=False``: ROC AUC, average precision, R², accuracy, F1, ...) is not a
mean of per-sample losses (or, for accuracy, is scored as scikit-learn's scorers score it: per
test fold); the reducers that allow it compute it per fold from the out-of-fold predictions,
``f(y, score, classes, output) -> float`` (``score`` as :func:`stored_scores` gives it,
``output`` the stored kind).

A custom pointwise loss is any importable function ``f(y_true, y_pred) -> per-sample array``
named by dotted path (``loss: mymodule.myloss``), imported like a learner (a workflow file's
own loss is also found beside the file); it receives y as the cube stores it and the
stored output of each fit (multiclass probabilities / decision values as (n, C), labels as
labels).
"""
from __future__ import annotations

import functools
import importlib
import math
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError

OUTPUTS = ("predict", "decision_function", "predict_proba")


@dataclass(frozen=True)
class Loss:
    """A loss's declaration; ``arg`` is its parameter's value once resolved (``pinball:0.9``)."""

    name: str
    func: Callable
    task: str | None                 # "regression" | "classification" | None (custom: any)
    outputs: tuple[str, ...]
    doc: str = ""
    pointwise: bool = True
    multiclass: bool = True
    greater_is_better: bool = False
    parameter: tuple[str, Callable] | None = None   # (symbol, check(value) -> error or "")
    multiclass_outputs: tuple[str, ...] | None = None   # when fewer than ``outputs``
    arg: float | None = None
    custom: bool = False
    # scikit-learn's scoring names for this loss (GridSearchCV(scoring=...)); a name starting
    # "neg_" is the loss with its sign flipped
    scorers: tuple[str, ...] = ()
    # every value the loss can take lies in [low, high] (None: unbounded); racing's
    # finite-sample test needs it (cvflow.execution.racing_rule)
    bounds: tuple[float, float] | None = None

    @property
    def label(self) -> str:
        return self.name if self.arg is None else f"{self.name}:{self.arg:g}"

    @property
    def sign(self) -> float:
        """+1 when smaller is better, -1 when larger is (selection minimises sign·value)."""
        return -1.0 if self.greater_is_better else 1.0

    def __reduce__(self):
        # DESIGN CHOICE: a declared loss pickles as its label and unpickles as the registry's
        # declaration (a fitted SearchCV keeps its scoring's loss): the functions of the metrics
        # (accuracy, f1_macro, ...) are made per name and no module attribute names them
        if self.custom or DECLARED.get(self.name) is None:
            return Loss, tuple(getattr(self, f.name) for f in fields(self))
        return get_loss, (self.label,)


DECLARED: dict[str, Loss] = {}


def declare(name: str, *, task, outputs, doc: str, pointwise: bool = True, multiclass: bool = True,
            greater_is_better: bool = False, parameter=None, multiclass_outputs=None,
            scorers=(), bounds: tuple[float, float] | None = None):
    """Decorator: declare the function below as the loss ``name`` (``scorers``: the
    scikit-learn scoring names it equals, see :func:`from_scoring`)."""
    def register(func):
        DECLARED[name] = Loss(name, func, task, tuple(outputs), doc, pointwise, multiclass,
                              greater_is_better, parameter, multiclass_outputs,
                              scorers=tuple(scorers), bounds=bounds)
        return func
    return register


# ---------------------------------------------------------------------------------------------
# pointwise losses

_EPS = np.finfo(np.float64).eps      # probabilities clipped to [eps, 1 - eps], as scikit-learn


def _keep_nan(values, score):
    """``values`` with NaN where ``score`` is NaN (any class, for a multiclass score)."""
    return values + score * 0.0


def _xlogy():
    """scipy.special.xlogy, imported when first used (the Poisson deviance): a report of
    other losses imports no scipy (cli._report_dask_array)."""
    from scipy.special import xlogy

    return xlogy


def _unit_interval(value) -> str:
    return "" if 0 < value < 1 else "must be in (0, 1)"


def _positive(value) -> str:
    return "" if value > 0 else "must be > 0"


@declare("squared", task="regression", outputs=("predict",), scorers=("neg_mean_squared_error",),
         doc="(y - ŷ)²; mean_squared_error")
def squared(y, pred, output=None, arg=None):
    return (y - pred) ** 2


@declare("absolute", task="regression", outputs=("predict",), scorers=("neg_mean_absolute_error",),
         doc="|y - ŷ|; mean_absolute_error")
def absolute(y, pred, output=None, arg=None):
    return abs(y - pred)


@declare("pinball", task="regression", outputs=("predict",), parameter=("Q", _unit_interval),
         doc="Q·max(y - ŷ, 0) + (1 - Q)·max(ŷ - y, 0); mean_pinball_loss(alpha=Q)")
def pinball(y, pred, output=None, arg=0.5):
    diff = y - pred
    return arg * diff * (diff >= 0) - (1 - arg) * diff * (diff < 0)


@declare("huber", task="regression", outputs=("predict",), parameter=("DELTA", _positive),
         doc="r²/2 if |r| ≤ δ else δ(|r| - δ/2), r = y - ŷ; scipy.special.huber(δ, r)")
def huber(y, pred, output=None, arg=1.0):
    r = abs(y - pred)
    small = r <= arg
    return small * 0.5 * r ** 2 + (1 - small) * arg * (r - 0.5 * arg)


@declare("absolute_percentage", task="regression", outputs=("predict",),
         scorers=("neg_mean_absolute_percentage_error",),
         doc="|y - ŷ| / max(|y|, eps); mean_absolute_percentage_error")
def absolute_percentage(y, pred, output=None, arg=None):
    return abs(y - pred) / np.maximum(abs(y), _EPS)


@declare("squared_log", task="regression", outputs=("predict",),
         scorers=("neg_mean_squared_log_error",),
         doc="(log(1 + y) - log(1 + ŷ))²; mean_squared_log_error (NaN below -1)")
def squared_log(y, pred, output=None, arg=None):
    with np.errstate(invalid="ignore"):
        return (np.log1p(y) - np.log1p(pred)) ** 2


@declare("poisson_deviance", task="regression", outputs=("predict",),
         scorers=("neg_mean_poisson_deviance",),
         doc="2 (y log(y / ŷ) - y + ŷ); mean_poisson_deviance (ŷ > 0)")
def poisson_deviance(y, pred, output=None, arg=None):
    with np.errstate(invalid="ignore", divide="ignore"):
        return 2 * (_xlogy()(y, y / pred) - y + pred)


@declare("gamma_deviance", task="regression", outputs=("predict",),
         scorers=("neg_mean_gamma_deviance",),
         doc="2 (log(ŷ / y) + y / ŷ - 1); mean_gamma_deviance (y, ŷ > 0)")
def gamma_deviance(y, pred, output=None, arg=None):
    with np.errstate(invalid="ignore", divide="ignore"):
        return 2 * (np.log(pred / y) + y / pred - 1)


@declare("zero_one", task="classification", outputs=OUTPUTS, bounds=(0.0, 1.0),
         doc="1 if the predicted class is wrong; zero_one_loss (binary: decision > 0 or "
             "p > 0.5; multiclass: argmax)")
def zero_one(target, score, output, arg=None):
    if target.ndim == 2:                             # multiclass: one-hot target, C scores
        wrong = (score.argmax(axis=-1) != target.argmax(axis=-1)) * 1.0
        return _keep_nan(wrong, score.sum(axis=-1))
    threshold = 0.0 if output == "decision_function" else 0.5
    return _keep_nan(((score > threshold) != (target == 1)) * 1.0, score)


@declare("hinge", task="classification", outputs=("decision_function",), multiclass=False,
         doc="max(0, 1 - y·f(x)), y in {-1, +1}; hinge_loss")
def hinge(target, score, output=None, arg=None):
    margin = 1.0 - (2.0 * (target == 1) - 1.0) * score
    return _keep_nan(margin * (margin > 0), score)


@declare("log_loss", task="classification", outputs=("predict_proba",), scorers=("neg_log_loss",),
         doc="-log p(y | x); log_loss")
def log_loss(target, score, output=None, arg=None):
    if target.ndim == 2:
        return -np.log(np.clip((score * target).sum(axis=-1), _EPS, 1 - _EPS))
    p = np.clip(score, _EPS, 1 - _EPS)               # binary: p is P(class 1)
    return -((target == 1) * np.log(p) + (target != 1) * np.log(1 - p))


# binary (1{y = 1} - p)² is at most 1, the multiclass sum over classes at most 2
@declare("brier", task="classification", outputs=("predict_proba",), scorers=("neg_brier_score",),
         bounds=(0.0, 2.0),
         doc="Σ over classes of (1{y = c} - p_c)² (binary: (1{y = 1} - p)²); brier_score_loss")
def brier(target, score, output=None, arg=None):
    if target.ndim == 2:
        return ((target - score) ** 2).sum(axis=-1)
    return ((target == 1) - score) ** 2


# ---------------------------------------------------------------------------------------------
# metrics: computed per fold from out-of-fold predictions

def _binary_score(y, score, classes):
    return np.asarray(y) == classes[-1], score


def _classes_of(y, score, classes, output):
    """(true class index, predicted class index) of a test fold, by scikit-learn's ``predict``
    rule on the stored output: binary decision > 0 / p > 0.5 / the stored label, multiclass
    the argmax (a stored label is one-hot). Index 1 of a binary cube is its positive class,
    the last of ``classes``."""
    truth = class_index(y, classes)
    if np.ndim(score) == 2:
        return truth, np.asarray(score).argmax(axis=-1)
    threshold = 0.0 if output == "decision_function" else 0.5
    return truth, (np.asarray(score) > threshold).astype(np.int64)


# DESIGN CHOICE: the label metrics are per-fold metrics, like scikit-learn's scorers in
# GridSearchCV / cross_validate: accuracy on each test fold, then the mean over folds. Labels
# are compared as class indices (the same classes, so the same values): a binary `f1`,
# `precision` or `recall` scores the positive class, the last of the cube's classes (1 for 0/1
# or -1/+1 labels, scikit-learn's pos_label=1; for other labels scikit-learn's scorer needs
# pos_label, cvflow takes the larger label). The averaged variants (`_macro`, `_micro`,
# `_weighted`) average over the classes present in the fold, as scikit-learn does.
def _label_metric(name: str, metric: str, doc: str, average: str | None = None, **kwargs):
    binary = average == "binary"

    @declare(name, task="classification", outputs=OUTPUTS, pointwise=False,
             greater_is_better=True, multiclass=not binary, doc=doc, scorers=(name,))
    def label_metric(y, score, classes, output="predict", sample_weight=None):
        import sklearn.metrics

        truth, guess = _classes_of(y, score, classes, output)
        if metric == "accuracy_score" and not kwargs:
            # DESIGN CHOICE: accuracy_score on numpy labels is numpy.average(y_true == y_pred,
            # weights=sample_weight), the same value; its input checks (~1 ms a fold, on class
            # indices cvflow made itself) were a fifth of a small search's fit (issue 41)
            return float(np.average(np.asarray(truth) == np.asarray(guess),
                                    weights=None if sample_weight is None
                                    else np.asarray(sample_weight)))
        extra = dict(kwargs) if average is None else {"average": average, **kwargs}
        if binary:
            extra["pos_label"] = 1
        return float(getattr(sklearn.metrics, metric)(truth, guess, sample_weight=sample_weight,
                                                      **extra))

    label_metric.__name__ = label_metric.__qualname__ = name
    return label_metric


_label_metric("accuracy", "accuracy_score", "fraction of correct labels per fold; accuracy_score")
_label_metric("balanced_accuracy", "balanced_accuracy_score",
              "mean recall over classes per fold; balanced_accuracy_score")
for _base in ("f1", "precision", "recall", "jaccard"):
    _label_metric(_base, f"{_base}_score", f"{_base} of the positive class (the last label) "
                  f"per fold; {_base}_score", average="binary")
    for _average in ("macro", "micro", "weighted"):
        _label_metric(f"{_base}_{_average}", f"{_base}_score",
                      f"{_base} per fold, {_average} average over classes; "
                      f"{_base}_score(average={_average!r})", average=_average)
_label_metric("matthews_corrcoef", "matthews_corrcoef",
              "Matthews correlation coefficient per fold; matthews_corrcoef")


@declare("roc_auc", task="classification", outputs=("decision_function", "predict_proba"),
         pointwise=False, greater_is_better=True, multiclass_outputs=("predict_proba",),
         scorers=("roc_auc", "roc_auc_ovr"),
         doc="area under the ROC curve per fold; roc_auc_score (multiclass: one-vs-rest, "
             "macro, on predict_proba)")
def roc_auc(y, score, classes, output=None, sample_weight=None):
    from sklearn.metrics import roc_auc_score

    if score.ndim == 1:
        return roc_auc_score(*_binary_score(y, score, classes), sample_weight=sample_weight)
    return roc_auc_score(y, score, multi_class="ovr", labels=list(classes),
                         sample_weight=sample_weight)


@declare("average_precision", task="classification",
         outputs=("decision_function", "predict_proba"), pointwise=False, multiclass=False,
         greater_is_better=True, scorers=("average_precision",),
         doc="average precision per fold; average_precision_score")
def average_precision(y, score, classes, output=None, sample_weight=None):
    from sklearn.metrics import average_precision_score

    return average_precision_score(*_binary_score(y, score, classes), sample_weight=sample_weight)


@declare("r2", task="regression", outputs=("predict",), pointwise=False, greater_is_better=True,
         scorers=("r2",),
         doc="coefficient of determination per fold; r2_score")
def r2(y, pred, classes=None, output=None, sample_weight=None):
    from sklearn.metrics import r2_score

    return r2_score(y, pred, sample_weight=sample_weight)


@declare("explained_variance", task="regression", outputs=("predict",), pointwise=False,
         greater_is_better=True, scorers=("explained_variance",),
         doc="explained variance per fold; explained_variance_score")
def explained_variance(y, pred, classes=None, output=None, sample_weight=None):
    from sklearn.metrics import explained_variance_score

    return explained_variance_score(y, pred, sample_weight=sample_weight)


def _regression_metric(name: str, metric: str, doc: str, scorer: str, *, better: bool = False,
                       weights: bool = True):
    """A per-fold regression metric that is scikit-learn's ``metric`` (its scorer ``scorer``);
    ``weights``: the metric takes ``sample_weight`` (scikit-learn's max_error does not)."""
    @declare(name, task="regression", outputs=("predict",), pointwise=False,
             greater_is_better=better, scorers=(scorer,), doc=doc)
    def regression_metric(y, pred, classes=None, output=None, sample_weight=None):
        import sklearn.metrics

        extra = {"sample_weight": sample_weight} if weights else {}
        return float(getattr(sklearn.metrics, metric)(y, pred, **extra))

    regression_metric.__name__ = regression_metric.__qualname__ = name
    return regression_metric


_regression_metric("root_squared", "root_mean_squared_error",
                   "root mean squared error per fold; root_mean_squared_error",
                   "neg_root_mean_squared_error")
_regression_metric("root_squared_log", "root_mean_squared_log_error",
                   "root mean squared logarithmic error per fold; root_mean_squared_log_error",
                   "neg_root_mean_squared_log_error")
_regression_metric("median_absolute", "median_absolute_error",
                   "median absolute error per fold; median_absolute_error",
                   "neg_median_absolute_error")
_regression_metric("max_error", "max_error", "largest absolute error per fold; max_error",
                   "neg_max_error", weights=False)
_regression_metric("d2_absolute_error", "d2_absolute_error_score",
                   "fraction of absolute error explained per fold; d2_absolute_error_score",
                   "d2_absolute_error_score", better=True)


# ---------------------------------------------------------------------------------------------
# resolving a name and applying a loss

def get_loss(spec: str, *, search: str | Path | None = None, where: str = "loss") -> Loss:
    """The declaration of ``spec``: ``name``, ``name:ARG``, a dotted path to a function, or
    (from Python) the function itself.

    ``search`` (a workflow's directory) is tried first for a dotted path; without it a dotted
    path is imported the ordinary way (installed packages, ``PYTHONPATH``), never from the
    working directory: see :mod:`cvflow.trust`.
    """
    if isinstance(spec, Loss):
        return spec
    if callable(spec):                           # Python: the function itself
        decl = Loss(f"{spec.__module__}.{spec.__qualname__}", spec, None, OUTPUTS,
                    "custom pointwise loss", custom=True)
        _GIVEN[decl.name] = decl                 # its label resolves to it from now on
        return decl
    if spec in _GIVEN:
        return _GIVEN[spec]
    if not isinstance(spec, str) or not spec:
        raise InputError(f"{where}: {spec!r} is not a loss; use one of {', '.join(_names())}")
    name, colon, raw = spec.partition(":")
    if name in DECLARED:
        loss = DECLARED[name]
        if loss.parameter is None:
            if colon:
                raise InputError(f"{where}: {name!r} takes no parameter; write {name}")
            return loss
        symbol, check = loss.parameter
        if not colon:
            raise InputError(f"{where}: {name!r} needs its parameter: write {name}:{symbol}, "
                             f"e.g. {name}:{'0.9' if name == 'pinball' else '1.0'}")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        problem = "is not a number" if not math.isfinite(value) else check(value)
        if problem:
            raise InputError(f"{where}: {spec!r}: {symbol} = {raw!r} {problem}")
        return _with_arg(loss, value)
    if "." in spec and not colon:
        return _custom(spec, str(search) if search is not None else None, where)
    raise InputError(f"{where}: unknown loss {spec!r}; use one of {', '.join(_names())} "
                     "or a function by dotted path (module.function)")


def declared_task(spec) -> str | None:
    """The task the loss spelled ``spec`` declares (``"regression"`` or ``"classification"``),
    read from its declaration (:func:`declare`, a :class:`Loss`, a function given from Python);
    None for a loss that declares none (a custom function: any task) or a spelling that names
    no declared loss (:func:`get_loss` refuses it with its message). Imports nothing."""
    if isinstance(spec, Loss):
        return spec.task
    if not isinstance(spec, str):
        return None                  # a function given from Python: a custom loss, any task
    decl = _GIVEN.get(spec) or DECLARED.get(spec.partition(":")[0])
    return None if decl is None else decl.task


def from_scoring(scoring: str, *, where: str = "scoring") -> tuple[Loss, float]:
    """The cvflow loss a scikit-learn scoring name equals, and the factor (+1 or -1) that turns
    cvflow's value into scikit-learn's: ``neg_mean_squared_error`` -> (``squared``, -1).

    A cvflow loss's own name is accepted too (factor +1). A scoring name with no cvflow loss
    (a scorer object, ``neg_root_mean_squared_error``, ...) is refused with one line
    (:class:`~cvflow.errors.InputError`, a ValueError).
    """
    if isinstance(scoring, str):
        for decl in DECLARED.values():
            if scoring in decl.scorers:
                return decl, (-1.0 if scoring.startswith("neg_") else 1.0)
        if scoring.partition(":")[0] in DECLARED:
            return get_loss(scoring, where=where), 1.0
    known = sorted({s for d in DECLARED.values() for s in d.scorers})
    shown = scoring if isinstance(scoring, str) else f"a {type(scoring).__name__} object"
    raise InputError(f"{where}: {shown!r} has no cvflow loss (cvflow scores stored predictions, "
                     f"so it needs a loss it can apply to them); use one of {', '.join(known)} "
                     "or a cvflow loss name (docs/guide/metrics.md)")


# custom losses given as functions from Python, by label (reducers pass labels around)
_GIVEN: dict[str, Loss] = {}


def _names() -> list[str]:
    return [n if l.parameter is None else f"{n}:{l.parameter[0]}" for n, l in DECLARED.items()]


@functools.lru_cache(maxsize=None)
def _with_arg(loss: Loss, value: float) -> Loss:
    return replace(loss, arg=value)


def names_code(spec) -> bool:
    """Whether the loss spelled ``spec`` is a function by dotted path that importing would run
    (not a declared loss, nor a function given from Python in this process)."""
    return (isinstance(spec, str) and "." in spec and ":" not in spec
            and spec not in DECLARED and spec not in _GIVEN)


@functools.lru_cache(maxsize=64)
def _custom(path: str, search: str | None, where: str) -> Loss:
    module_name, _, attr = path.rpartition(".")
    # DESIGN CHOICE: only a workflow file's own directory is searched (the file is code); a
    # name read from a store or typed on the command line imports the ordinary way, so the
    # working directory never supplies code (cvflow.trust)
    added = search is not None and search not in sys.path
    if added:
        sys.path.insert(0, search)
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{where}: {path!r} does not import ({exc}); install its module or put "
                         "its directory on PYTHONPATH") from None
    finally:
        if added:
            sys.path.remove(search)
    if not callable(func):
        raise InputError(f"{where}: {path!r} is not a function f(y_true, y_pred) -> per-sample array")
    return Loss(path, func, None, OUTPUTS, "custom pointwise loss", custom=True)


def check_loss(loss, task: str, outputs=(), *, n_classes: int = 2, search=None,
               where: str = "loss", fix: str = "set the learner's `output`") -> str:
    """Validate a loss for a task, the stored outputs and the number of classes; return its name."""
    return checked_loss(loss, task, outputs, n_classes=n_classes, search=search, where=where,
                        fix=fix).label


def checked_loss(loss, task: str, outputs=(), *, n_classes: int = 2, search=None,
                 where: str = "loss", fix: str = "set the learner's `output`") -> Loss:
    """:func:`get_loss` checked against the task, the stored outputs and the class count;
    ``fix`` says how to store another output (a workflow file's key, or Study's argument)."""
    decl = get_loss(loss, search=search, where=where)
    if decl.task is not None and decl.task != task:
        valid = [n for n in _names() if DECLARED[n.partition(":")[0]].task == task]
        raise InputError(f"{where}: {decl.label!r} is not a {task} loss; use one of "
                         f"{', '.join(valid)}")
    if n_classes > 2 and not decl.multiclass:
        raise InputError(f"{where}: {decl.label!r} is defined for two classes only, and the data "
                         f"have {n_classes}")
    bad = sorted(set(outputs) - set(decl.outputs))
    if bad:
        raise InputError(f"{where}: {decl.label!r} cannot be computed from stored {bad[0]} values; "
                         f"it needs {' or '.join(decl.outputs)} ({fix})")
    wanted = decl.multiclass_outputs or decl.outputs
    if n_classes > 2 and set(outputs) - set(wanted):
        raise InputError(f"{where}: {decl.label!r} with {n_classes} classes needs "
                         f"{' or '.join(wanted)} outputs ({fix})")
    return decl


def class_index(y, classes) -> np.ndarray:
    """Position of each label of ``y`` in ``classes`` (numbers or strings, as the store keeps)."""
    y = np.asarray(y)
    if y.dtype.kind in "biuf":
        classes = np.asarray(classes, dtype=np.float64)
        order = np.argsort(classes, kind="stable")
        return order[np.searchsorted(classes, y, sorter=order)]
    lookup = {str(c): i for i, c in enumerate(classes)}
    return np.asarray([lookup[str(v)] for v in y.tolist()], dtype=np.int64)


def stored_scores(pred, output: str, classes):
    """The stored values of one output as the pointwise losses read them (see module doc)."""
    if output != "predict" or classes is None:
        return pred
    if len(classes) > 2:
        return pred                  # a multiclass cube stores predicted labels one-hot
    return _keep_nan((pred == classes[-1]) * 1.0, pred)


def apply_loss(loss, y, pred, classes=None, outputs=None):
    """Loss of predictions ``pred`` (params first, samples last) against ``y``.

    ``loss`` is a name or a :class:`Loss`; ``classes`` the cube's class labels (None for
    regression); ``outputs`` (one per param along the first axis) tells each param's stored
    form. Works on numpy and dask arrays alike (a custom loss: numpy only, row by row).
    """
    decl = get_loss(loss)
    if not decl.pointwise:
        raise InputError(f"loss: {decl.label!r} is a per-fold metric, not a pointwise loss")
    outputs = np.asarray(["predict"] * len(pred) if outputs is None else outputs, dtype=object)
    if decl.custom:
        return _apply_custom(decl, y, pred, classes, outputs)
    target = np.asarray(y) if classes is None else class_index(y, classes)
    if classes is not None and len(classes) > 2:
        target = (target[:, None] == np.arange(len(classes))) * 1.0    # one-hot (n, C)
    kinds = list(dict.fromkeys(outputs.tolist()))
    out = None
    for kind in kinds:
        values = decl.func(target, stored_scores(pred, kind, classes), kind, decl.arg)
        if out is None:
            out = values
        else:
            rows = (outputs == kind).reshape((-1,) + (1,) * (np.ndim(values) - 1))
            out = np.where(rows, values, out)
    return out


def _apply_custom(decl: Loss, y, pred, classes, outputs):
    if not isinstance(pred, np.ndarray):            # dask: the loss runs on each whole block
        import dask.array as da

        # tasks, not dask's p2p default under a Client: see cvflow.estimators._cube._lazy_terms
        pred = pred.rechunk({0: 1, -1: -1} if len(classes or ()) <= 2 else {0: 1, -2: -1, -1: -1},
                            method="tasks")
        multi = classes is not None and len(classes) > 2
        return da.map_blocks(
            lambda block, block_info=None: _apply_custom(
                decl, y, block, classes,
                outputs[block_info[0]["array-location"][0][0]:][:len(block)]),
            pred, dtype=np.float64, drop_axis=pred.ndim - 1 if multi else None)
    multi = classes is not None and len(classes) > 2
    n = len(y)
    out = np.full(pred.shape[:-1] if multi else pred.shape, np.nan)
    for index in np.ndindex(*pred.shape[:-2 if multi else -1]):
        row = pred[index]
        if np.isnan(row).any():
            continue
        if multi and outputs[index[0]] == "predict":
            row = np.asarray(classes)[row.argmax(axis=-1)]
        values = np.asarray(decl.func(y, row), dtype=np.float64)
        if values.shape != (n,):
            raise InputError(f"loss: {decl.name} returned shape {values.shape}; a pointwise loss "
                             f"returns one value per sample, shape ({n},)")
        out[index] = values
    return out
