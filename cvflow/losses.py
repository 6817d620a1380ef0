"""Loss functions applied to stored predictions.

Every loss is a numpy-compatible function ``loss(y, pred, positive) -> array`` that works
elementwise and broadcasts, so it runs unchanged on numpy, dask and xarray objects. ``pred``
is what the cube stores: a regression prediction, a decision value, or the probability of
the positive class. NaN predictions (not written, or failed fits) give NaN losses.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import InputError
from .types import CLASSIFICATION_LOSSES, REGRESSION_LOSSES

# Probabilities are clipped away from 0 and 1 in the log loss, as scikit-learn does.
_EPS = np.finfo(np.float64).eps


def _signed(y, positive):
    """Labels as +1 (positive class) / -1 (any other class)."""
    return 2.0 * (y == positive) - 1.0


def squared(y, pred, positive=None):
    return (y - pred) ** 2


def absolute(y, pred, positive=None):
    return abs(y - pred)


def zero_one(y, pred, positive=None, *, output: str = "decision_function"):
    """1 when the predicted class differs from y.

    Decision values predict the positive class when > 0, probabilities when > 0.5
    (scikit-learn's ``predict`` conventions); ``output="predict"`` compares labels.
    """
    if output == "predict":
        wrong = (pred != y) * 1.0
    else:
        threshold = 0.5 if output == "predict_proba" else 0.0
        wrong = ((pred > threshold) != (y == positive)) * 1.0
    return wrong + pred * 0.0  # keeps NaN where pred is NaN


def hinge(y, pred, positive=None):
    """max(0, 1 - y f(x)) on the decision value, y in {-1, +1}."""
    margin = 1.0 - _signed(y, positive) * pred
    return margin * (margin > 0) + pred * 0.0


def log_loss(y, pred, positive=None):
    """-log p(y | x) on the probability of the positive class."""
    p = pred.clip(_EPS, 1 - _EPS) if hasattr(pred, "clip") else np.clip(pred, _EPS, 1 - _EPS)
    is_pos = y == positive
    return -(is_pos * np.log(p) + (1 - is_pos) * np.log(1 - p))


LOSSES: dict[str, Callable] = {
    "squared": squared,
    "absolute": absolute,
    "zero_one": zero_one,
    "hinge": hinge,
    "log_loss": log_loss,
}

# Which stored outputs a loss can read.
LOSS_OUTPUTS: dict[str, tuple[str, ...]] = {
    "squared": ("predict",),
    "absolute": ("predict",),
    "zero_one": ("predict", "decision_function", "predict_proba"),
    "hinge": ("decision_function",),
    "log_loss": ("predict_proba",),
}


def apply_loss(name: str, y, pred, positive=None, outputs=None):
    """Loss ``name`` of predictions ``pred`` (params first, samples last) against ``y``.

    ``outputs`` (one per param along the first axis) tells ``zero_one`` how to read each
    param's stored values (labels, decision values or probabilities). Works on numpy and
    dask arrays alike.
    """
    fn = LOSSES[name]
    if name != "zero_one":
        return fn(y, pred, positive)
    outputs = np.asarray(outputs, dtype=object)
    kinds = sorted(set(outputs.tolist()))
    out = fn(y, pred, positive, output=kinds[0])
    for kind in kinds[1:]:
        rows = (outputs == kind).reshape((-1,) + (1,) * (np.ndim(pred) - 1))
        out = np.where(rows, fn(y, pred, positive, output=kind), out)
    return out


def check_loss(loss: str, task: str, outputs=()) -> str:
    """Validate a loss name for a task and the stored prediction outputs; return it."""
    valid = REGRESSION_LOSSES if task == "regression" else CLASSIFICATION_LOSSES
    if loss not in valid:
        raise InputError(f"loss: {loss!r} is not a {task} loss; use one of {', '.join(valid)}")
    bad = sorted(set(outputs) - set(LOSS_OUTPUTS[loss]))
    if bad:
        raise InputError(
            f"loss: {loss!r} cannot be computed from stored {bad[0]} values; "
            f"it needs {' or '.join(LOSS_OUTPUTS[loss])} (set the learner's `output`)"
        )
    return loss
