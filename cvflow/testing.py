"""Building cubes in memory, without a store or a cluster (for tests and small studies).

``fit_cube`` fits every (param, split) in-process; ``cube_from_predictions`` wraps hand-made
predictions so reducers can be checked against hand computations.
"""
from __future__ import annotations

import json

import numpy as np
import xarray as xr

from .workflow.data import Data
from .workflow.designs import Design, fold_labels, make_design, subset_splits
from .fitting.block import fit_block
from .workflow.params import Param
from .store.creation import cube_template


def simple_design(n: int, folds: int, *, repeats: int = 1, pairs: bool = False, seed: int = 0,
                  is_test: np.ndarray | None = None, fold: np.ndarray | None = None,
                  subset: dict | None = None, y: np.ndarray | None = None,
                  splitter: str = "kfold") -> Design:
    """A design over n samples; pass ``fold`` (repeats, n) to fix the fold labels by hand."""
    is_test = np.zeros(n, dtype=bool) if is_test is None else np.asarray(is_test, bool)
    if fold is None:
        fold = fold_labels(np.zeros(n) if y is None else y, is_test, folds=folds, repeats=repeats,
                           seed=seed, splitter=splitter)
    subsets = subset_splits(is_test, seed=seed, **subset) if subset else None
    return make_design(np.atleast_2d(np.asarray(fold, dtype=np.int32)), is_test, pairs=pairs,
                       subsets=subsets)


def _attrs(task: str, loss: str | None, classes) -> dict:
    loss = loss or ("squared" if task == "regression" else "zero_one")
    return {"task": task, "loss": loss, "classes": json.dumps(classes),
            "workflow": "{}", "workflow_hash": "", "data_hash": ""}


def fit_cube(X, y, params: list[Param], design: Design, *, task: str = "regression",
             is_test=None, classes=None, loss: str | None = None) -> xr.Dataset:
    """Fit every (param, split) in-process and return the cube in memory."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    is_test = np.zeros(len(y), bool) if is_test is None else np.asarray(is_test, bool)
    if task == "classification" and classes is None:
        classes = np.unique(y).tolist()
    data = Data(X=X, y=y, feature_names=[f"x{j}" for j in range(X.shape[1])], is_test=is_test,
                classes=classes)
    cube = cube_template(data, design, params, attrs=_attrs(task, loss, classes),
                         chunks=(len(params), design.n_splits)).copy(deep=True)
    res = fit_block(params, X, y, design.train, params_slice=slice(0, len(params)),
                    splits_slice=slice(0, design.n_splits), positive=data.positive)
    cube["pred"][:] = res.pred
    cube["failed"][:] = res.failed
    cube["error"][:] = res.error
    cube["fit_seconds"][:] = res.fit_seconds
    cube["done"][:] = True
    return cube


def cube_from_predictions(pred, y, design: Design, *, task: str = "regression", params=None,
                          classes=None, loss: str | None = None, output: str | None = None,
                          X=None) -> xr.Dataset:
    """A cube holding given predictions ``pred`` (param, split, sample[, class]) for ``design``."""
    pred = np.asarray(pred, dtype=np.float64)
    y = np.asarray(y)
    n_params = pred.shape[0]
    if output is None:
        output = "predict" if task == "regression" else "decision_function"
    if params is None:
        params = [Param("hand", "sklearn.dummy.DummyRegressor", hyper={"h": h}, output=output)
                  for h in range(n_params)]
    X = np.zeros((len(y), 1)) if X is None else np.asarray(X, dtype=np.float64)
    if task == "classification" and classes is None:
        classes = np.unique(y).tolist()
    data = Data(X=X, y=y, feature_names=[f"x{j}" for j in range(X.shape[1])],
                is_test=~design.train.any(axis=0) & (design.fold[0] < 0) if design.fold.size
                else np.zeros(len(y), bool), classes=classes)
    cube = cube_template(data, design, params, attrs=_attrs(task, loss, classes),
                         chunks=(n_params, design.n_splits)).copy(deep=True)
    cube["pred"][:] = pred
    cube["failed"][:] = np.isnan(pred).reshape(pred.shape[:2] + (-1,)).all(axis=-1)
    cube["done"][:] = True
    return cube
