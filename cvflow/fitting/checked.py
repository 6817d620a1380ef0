"""Fits whose input checks are done once per block: scikit-learn's decision trees.

``DecisionTreeRegressor`` and ``DecisionTreeClassifier`` take ``check_input=False`` in ``fit``,
``predict`` and ``predict_proba`` (their public signature): scikit-learn then skips
converting X to float32 and checking it, and checking y, work that repeats for every fit of a
grid and is ~25% of a CART fit on diabetes (a 100-param grid on one training set: 85 ms of CPU
checked, 64 ms this way, medians of 7). Here X is converted to float32 once per block, as
scikit-learn's own check converts it, and checked once: finite (a NaN, which trees take as
missing, or an infinity goes the checked route), y one numeric, finite column. Everything else
scikit-learn does in ``fit`` still runs (the parameters' validation, the class encoding, the
class weights, the builder with the same random state), so the predictions equal the checked
fit's bit for bit (tests/test_checked.py); a fit that raises is fitted again the checked way,
so that its failure is recorded in scikit-learn's own words.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from .learners import fit_model, predict_output
from ..workflow.params import Param, import_estimator


def _tree_classes() -> tuple[type, ...]:
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    return DecisionTreeRegressor, DecisionTreeClassifier


class _Unchecked:
    """A fitted tree whose ``predict`` / ``predict_proba`` skip the checks done for the block."""

    def __init__(self, tree):
        self.tree = tree
        if hasattr(tree, "classes_"):
            self.classes_ = tree.classes_

    def predict(self, X):
        return self.tree.predict(X, check_input=False)

    def predict_proba(self, X):
        return self.tree.predict_proba(X, check_input=False)


class Checked:
    """A block's X and y (:func:`prepare`); :meth:`fitted` gives a tree param's fit for
    :func:`cvflow.fitting.learners.fit_and_score` (its ``fitted``), or None for the checked
    route. X is converted and checked at the first tree's fit."""

    def __init__(self, X: np.ndarray, y: np.ndarray):
        self.X, self.y = X, y

    @functools.cached_property
    def X32(self) -> np.ndarray | None:
        # as scikit-learn's check converts it (check_array(X, dtype=np.float32)); not finite:
        # None (trees take NaN as missing values, found by the check skipped here)
        X32 = np.asarray(self.X, dtype=np.float32)
        return X32 if np.isfinite(X32).all() else None

    def fitted(self, param: Param, train: np.ndarray, positive) -> Callable | None:
        if param.preprocess or param.fit_params or param.fit_hook is not None:
            return None
        try:
            cls = (type(param.source[0]) if param.source is not None
                   else import_estimator(param.estimator))
        except Exception:  # noqa: BLE001 - the checked route reports it
            return None
        if cls not in _tree_classes() or self.X32 is None:
            return None
        X32 = self.X32

        def fit():
            model = param.build(train)
            # (scikit-learn keeps each constructor argument as the attribute of its name)
            if model.criterion == "poisson":      # its y is checked in fit
                return self._checked(param, train, positive)
            try:
                model.fit(X32[train], self.y[train], check_input=False)
                pred = predict_output(_Unchecked(model), X32, param.output, positive)
            except Exception:  # noqa: BLE001 - the checked route says what is wrong, as always
                return self._checked(param, train, positive)
            return model, lambda: pred

        return fit

    def _checked(self, param: Param, train: np.ndarray, positive):
        """The fit as the generic route does it (a tree: no pairwise X, no fit parameters)."""
        model = fit_model(param, self.X, self.y, train)
        return model, lambda: predict_output(model, self.X, param.output, positive)


def prepare(X, y, *, sample_weight=None, scoring=None) -> Checked | None:
    """The block's inputs for trees' unchecked fits, or None when its fits must check their
    own: X not a 2-D numeric numpy array, y not a 1-D numeric finite numpy array, sample
    weights, or scorers (they score the fitted model on X themselves)."""
    if sample_weight is not None or scoring is not None:
        return None
    if not (isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype.kind in "biuf"
            and isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "biuf"
            and np.isfinite(y).all()):
        return None
    return Checked(X, y)
