"""Decision trees fitted with their input checks done once per block (cvflow.fitting.checked):
every prediction and every failure equals scikit-learn's own checked fit and predict."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from cvflow.fitting import checked
from cvflow.fitting.block import fit_block
from cvflow.fitting.learners import fit_one
from cvflow.workflow.params import Param

REG = "sklearn.tree.DecisionTreeRegressor"
CLF = "sklearn.tree.DecisionTreeClassifier"


def _trains(n: int, k: int = 3) -> np.ndarray:
    return np.stack([np.arange(n) % k != j for j in range(k)] + [np.ones(n, bool)])


def _block(params, X, y, train, positive=None):
    return fit_block(params, X, y, train, params_slice=slice(0, len(params)),
                     splits_slice=slice(0, train.shape[0]), positive=positive)


def _reference(cls, settings: dict, X, y, train, output: str, positive=None) -> np.ndarray:
    """scikit-learn's checked fit and predict, as a user calls them."""
    model = cls(**settings).fit(X[train], y[train])
    if output == "predict":
        return model.predict(X).astype(np.float64)
    proba = model.predict_proba(X)
    if isinstance(positive, tuple):
        out = np.zeros((X.shape[0], len(positive)))
        out[:, np.searchsorted(np.asarray(positive), model.classes_)] = proba
        return out
    return proba[:, list(model.classes_).index(positive)]


SETTINGS = [{"max_depth": d, "min_samples_leaf": leaf, "random_state": 0}
            for d in (1, 3, None) for leaf in (1, 5)] + [
    {"max_features": 0.5, "random_state": 3}, {"max_features": "sqrt", "random_state": 1,
                                               "splitter": "random"},
    {"criterion": "absolute_error", "max_depth": 4, "random_state": 2},
    {"ccp_alpha": 50.0, "random_state": 0}]


def test_regression_trees_equal_scikit_learns_checked_fits():
    X, y = load_diabetes(return_X_y=True)
    train = _trains(len(y))
    params = [Param("cart", REG, fixed=s) for s in SETTINGS]
    res = _block(params, X, y, train)
    assert not res.failed.any()
    for h, s in enumerate(SETTINGS):
        for j in range(train.shape[0]):
            np.testing.assert_array_equal(
                res.pred[h, j], _reference(DecisionTreeRegressor, s, X, y, train[j], "predict"))


@pytest.mark.parametrize("output", ["predict", "predict_proba"])
def test_classification_trees_equal_scikit_learns_checked_fits(output):
    X, y = load_iris(return_X_y=True)
    binary = (y == 2).astype(int)
    train = _trains(len(y))
    settings = SETTINGS[:6] + [{"class_weight": "balanced", "max_depth": 2, "random_state": 0}]
    params = [Param("cart", CLF, fixed=s, output=output) for s in settings]
    res = _block(params, X, binary, train, positive=1)
    # multiclass: a fold whose training set lacks class 2 (its column: probability 0)
    lacking = np.stack([y != 2, np.ones(len(y), bool)])
    multi = _block(params, X, y, lacking, positive=(0, 1, 2))
    for h, s in enumerate(settings):
        for j in range(train.shape[0]):
            np.testing.assert_array_equal(
                res.pred[h, j], _reference(DecisionTreeClassifier, s, X, binary, train[j],
                                           output, positive=1))
        for j in range(2):
            want = (_reference(DecisionTreeClassifier, s, X, y, lacking[j], output, (0, 1, 2))
                    if output == "predict_proba" else
                    (_reference(DecisionTreeClassifier, s, X, y, lacking[j], "predict")[:, None]
                     == np.arange(3)[None, :]).astype(float))
            np.testing.assert_array_equal(multi.pred[h, j], want)


def test_failures_and_unchecked_inputs_go_scikit_learns_checked_way():
    """An invalid setting, a Poisson tree on a negative target, a NaN in X (trees' missing
    values) and an output trees lack: each fit recorded exactly as the checked route records
    it (the same message or the same predictions)."""
    X, y = load_diabetes(return_X_y=True)
    train = _trains(len(y))[:2]
    params = [Param("cart", REG, fixed={"max_depth": -1}),
              Param("cart", REG, fixed={"criterion": "poisson"}),
              Param("cart", REG, fixed={"max_depth": 2}, output="decision_function"),
              Param("cart", REG, fixed={"max_depth": 3, "random_state": 0})]
    res = _block(params, X, y - y.mean(), train)
    for h, param in enumerate(params):
        for j in range(2):
            pred, _, message = fit_one(param, X, y - y.mean(), train[j])
            assert res.error[h, j] == message
            np.testing.assert_array_equal(res.pred[h, j], pred)
    assert res.failed[:3].all() and not res.failed[3].any()
    assert "max_depth" in res.error[0, 0] and "negative" in res.error[1, 0]
    holes = X.copy()
    holes[::7, 2] = np.nan
    assert checked.prepare(holes, y).X32 is None          # not finite: the checked route
    res = _block(params[3:], holes, y, train)
    for j in range(2):
        np.testing.assert_array_equal(
            res.pred[0, j], _reference(DecisionTreeRegressor, params[3].fixed, holes, y,
                                       train[j], "predict"))


def test_only_plain_numpy_blocks_without_weights_or_scorers_skip_the_checks():
    X, y = load_diabetes(return_X_y=True)
    assert checked.prepare(X, y) is not None
    assert checked.prepare(X, y, sample_weight=np.ones(len(y))) is None
    assert checked.prepare(X, y, scoring=object()) is None
    assert checked.prepare(X.tolist(), y) is None
    assert checked.prepare(X, y.astype(str)) is None
    assert checked.prepare(X, np.where(y > 100, np.nan, y)) is None
    quick = checked.prepare(X, y)
    ridge = Param("ridge", "sklearn.linear_model.Ridge", fixed={"alpha": 1.0})
    assert quick.fitted(ridge, np.ones(len(y), bool), None) is None
    assert quick.fitted(Param("cart", REG, fixed={}), np.ones(len(y), bool), None) is not None
