"""The loss of a cube: a loss's declaration checked against the cube's task, stored outputs and
class count (:func:`cube_loss`, :func:`loss_name`, :func:`pointwise`) and the per-sample losses
of its predictions (:func:`pointwise_loss`).

Public: the estimators, the reports and racing's runner resolve a cube's loss through these.
"""
from __future__ import annotations

import json

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from .losses import Loss, apply_loss, checked_loss, names_code
from .memory import load_if_small
from ..terminal import visible


def cube_classes(cube: xr.Dataset) -> list | None:
    """The class labels of a classification cube (their order is the ``class`` axis'), else None."""
    return json.loads(cube.attrs.get("classes") or "null") or None


def cube_loss(cube: xr.Dataset, loss: str | None) -> Loss:
    """The declaration of ``loss`` (default: the workflow's), checked against the cube's task,
    stored outputs and class count.

    A default loss that is a user function by dotted path is refused, not imported: a store is
    data (:mod:`cvflow.trust`); naming it as ``loss`` is the caller's own choice.
    """
    task = cube.attrs.get("task", "regression")
    name = loss or cube.attrs.get("loss") or ("squared" if task == "regression" else "zero_one")
    if loss is None and names_code(name):
        default = "squared" if task == "regression" else "zero_one"
        raise InputError(f"loss: the store's default loss {visible(name)} is a user function, and a store "
                         "is data: cvflow does not import the code it names; pass --trust to "
                         f"import it, or another loss, e.g. --loss {default} (Python: "
                         f"trust_code=True, or loss={name!r} / loss={default!r})")
    outputs = {str(v) for v in cube["output"].values} if "output" in cube.coords else ()
    return checked_loss(name, task, outputs, n_classes=len(cube_classes(cube) or ()))


def loss_name(cube: xr.Dataset, loss: str | None) -> str:
    """The loss to use: ``loss`` or the workflow's default, checked against the task/outputs."""
    return cube_loss(cube, loss).label


def pointwise(cube: xr.Dataset, loss: str | None, what: str) -> Loss:
    """:func:`cube_loss`, refused with one line when it is a per-fold metric (ROC AUC, R², ...)."""
    decl = cube_loss(cube, loss)
    if not decl.pointwise:
        raise InputError(f"loss: {decl.label!r} is a per-fold metric, but {what} averages "
                         "per-sample losses; use a pointwise loss (e.g. zero_one, log_loss, "
                         "squared) or the kfold / nested_cv estimators")
    return decl


def pointwise_loss(cube: xr.Dataset, loss: str | None = None, pred: xr.DataArray | None = None,
                   *, what: str = "this estimator") -> xr.DataArray:
    """ℓ_i(h, s) for every (param, split, sample); lazy when ``pred`` is lazy and too big to load.

    ``pred`` defaults to ``cube.pred``; pass a selection of it to compute fewer losses. A
    multiclass ``pred`` (with a ``class`` dim) gives losses without it.
    """
    decl = pointwise(cube, loss, what)
    pred = load_if_small(cube["pred"] if pred is None else pred)
    outputs = (pred if "output" in pred.coords else cube)["output"].values
    classes = [c for c in ("class",) if c in pred.dims]
    dims = [d for d in pred.dims if d not in classes]
    pred = pred.transpose("param", ..., "sample", *classes)
    values = apply_loss(decl, np.asarray(cube["y"].values), pred.data, cube_classes(cube),
                        outputs)
    template = pred.isel({c: 0 for c in classes}, drop=True)
    return template.copy(data=values).transpose(*dims).rename("loss")


def label_losses(cube: xr.Dataset, loss: str | None, pred: xr.DataArray,
                 *, what: str = "this estimator") -> np.ndarray:
    """ℓ(h, s) of every (param, split, sample) of ``pred`` had the sample's label been each of
    the cube's classes in turn: an array (param, split, sample, class) in the order of the
    ``class`` axis. It reads the stored predictions only, never ``y``: racing's per-unit range
    of a classification loss (:func:`cvflow.execution.racing_rule.label_ranges`)."""
    decl = pointwise(cube, loss, what)
    classes = cube_classes(cube)
    if classes is None:
        raise InputError(f"{what}: the losses at every label need a classification cube")
    pred = load_if_small(pred)
    outputs = (pred if "output" in pred.coords else cube)["output"].values
    dims = [d for d in ("class",) if d in pred.dims]
    values = np.asarray(pred.transpose("param", "split", "sample", *dims).values)
    n = values.shape[2]
    return np.stack([np.asarray(apply_loss(decl, np.asarray([label] * n), values, classes,
                                           outputs), dtype=np.float64)
                     for label in classes], axis=-1)
