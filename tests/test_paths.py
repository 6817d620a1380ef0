"""Path-aware fitting against scikit-learn's own estimators, fitted one by one."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, make_classification
from sklearn.linear_model import (
    ElasticNet,
    ElasticNetCV,
    Lasso,
    LassoCV,
    LogisticRegression,
    Ridge,
    RidgeClassifier,
    lasso_path,
)
from sklearn.model_selection import KFold

from cvflow import paths
from cvflow.fit import fit_block
from cvflow.learners import Param


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:150], y[:150]
    rng = np.random.default_rng(0)
    train = np.zeros((2, len(y)), bool)
    for s in range(2):
        train[s, rng.permutation(len(y))[:100]] = True
    return X, y, train


@pytest.fixture(scope="module")
def binary():
    X, y = make_classification(n_samples=120, n_features=6, n_informative=4, random_state=0)
    train = np.zeros(len(y), bool)
    train[np.random.default_rng(1).permutation(len(y))[:80]] = True
    return X, y, train


def reference(cls, settings_list, X, y, train, output="predict", positive=None):
    """scikit-learn fitted once per setting on the training rows, predicting every row."""
    out = []
    for settings in settings_list:
        model = cls(**settings).fit(X[train], y[train])
        if output == "predict_proba":
            col = list(model.classes_).index(positive)
            out.append(model.predict_proba(X)[:, col])
        else:
            out.append(getattr(model, output)(X))
    return np.array(out, dtype=np.float64)


def params_of(estimator, key, values, fixed=None, output="predict"):
    return [Param("m", estimator, fixed=fixed or {}, hyper={key: float(v)}, output=output)
            for v in values]


def rel_err(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_ridge_path_matches_sklearn_to_1e8(diabetes, fit_intercept):
    X, y, train = diabetes
    alphas = np.r_[0.0, np.logspace(-4, 4, 15)]
    got = paths.ridge_path(X, y, train[0], alphas, fit_intercept=fit_intercept)
    want = reference(Ridge, [{"alpha": a, "fit_intercept": fit_intercept} for a in alphas],
                     X, y, train[0])
    assert got.shape == (len(alphas), len(y))
    assert rel_err(got, want) < 1e-8


def test_ridge_path_wide_data_matches_sklearn():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 80)), rng.normal(size=30)
    train = np.arange(30) < 20
    alphas = np.logspace(-2, 2, 5)
    got = paths.ridge_path(X, y, train, alphas)
    want = reference(Ridge, [{"alpha": a} for a in alphas], X, y, train)
    assert rel_err(got, want) < 1e-8


@pytest.mark.parametrize("output", ["decision_function", "predict"])
def test_ridge_classifier_path_matches_sklearn(binary, output):
    X, y, train = binary
    alphas = np.logspace(-3, 3, 7)
    params = params_of("sklearn.linear_model.RidgeClassifier", "alpha", alphas, output=output)
    got = paths.fit_path(params, X, y, train, positive=1)
    want = reference(RidgeClassifier, [{"alpha": a} for a in alphas], X, y, train, output)
    assert rel_err(got, want) < 1e-8


@pytest.mark.parametrize("cls,fixed", [
    (Lasso, {"tol": 1e-12, "max_iter": 100_000}),
    (ElasticNet, {"l1_ratio": 0.3, "tol": 1e-12, "max_iter": 100_000}),
    (Lasso, {"fit_intercept": False, "tol": 1e-12, "max_iter": 100_000}),
])
def test_enet_path_matches_sklearn_to_solver_tolerance(diabetes, cls, fixed):
    X, y, train = diabetes
    alphas = np.logspace(-3, 0.5, 12)[::-1][[3, 0, 7, 11, 5, 1, 2, 4, 6, 8, 9, 10]]  # unsorted
    params = params_of(f"sklearn.linear_model.{cls.__name__}", "alpha", alphas, fixed)
    got = paths.fit_path(params, X, y, train[1])
    want = reference(cls, [{"alpha": a, **fixed} for a in alphas], X, y, train[1])
    assert rel_err(got, want) < 1e-6


def test_lasso_default_tolerance_is_close(diabetes):
    X, y, train = diabetes
    alphas = np.logspace(-2, 0, 8)
    params = params_of("sklearn.linear_model.Lasso", "alpha", alphas)
    got = paths.fit_path(params, X, y, train[0])
    want = reference(Lasso, [{"alpha": a} for a in alphas], X, y, train[0])
    assert rel_err(got, want) < 1e-3


@pytest.mark.parametrize("cls,cv_cls,fixed", [
    (Lasso, LassoCV, {}),
    (ElasticNet, ElasticNetCV, {"l1_ratio": 0.5}),
])
def test_enet_path_gives_sklearn_cv_mse_path(cls, cv_cls, fixed):
    """Default settings (tol 1e-4, n > p so the Gram matrix): the per-fold test MSE of every
    alpha equals LassoCV's / ElasticNetCV's mse_path_ on the same folds and alphas, which fit
    the same warm-started coordinate-descent path on the Gram matrix."""
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=300, n_features=30, n_informative=8, noise=5.0,
                           random_state=0)
    folds = list(KFold(5, shuffle=True, random_state=0).split(X))
    ref = cv_cls(alphas=40, cv=folds, **fixed).fit(X, y)
    alphas = ref.alphas_                        # decreasing; given here in another order
    shuffled = np.random.default_rng(0).permutation(len(alphas))
    params = params_of(f"sklearn.linear_model.{cls.__name__}", "alpha", alphas[shuffled], fixed)
    mse = np.empty((len(alphas), len(folds)))
    for j, (train_idx, test_idx) in enumerate(folds):
        train = np.zeros(len(y), bool)
        train[train_idx] = True
        pred = np.empty((len(alphas), len(y)))
        pred[shuffled] = paths.fit_path(params, X, y, train)
        mse[:, j] = ((pred[:, test_idx] - y[test_idx]) ** 2).mean(axis=1)
    assert rel_err(mse, ref.mse_path_) < 1e-7
    assert alphas[mse.mean(axis=1).argmin()] == ref.alpha_


@pytest.mark.parametrize("n_train", [100, 20])         # Gram route (n > p) and plain CD (n < p)
def test_lasso_path_predictions_equal_lasso_path(n_train):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(130, 40))
    y = X[:, :5] @ np.arange(1.0, 6.0) + rng.normal(size=130)
    train = np.arange(130) < n_train
    alphas = np.geomspace(2.0, 0.002, 30)
    got = paths.enet_path_predictions(X, y, train, alphas)
    x_mean, y_mean = X[train].mean(axis=0), y[train].mean()
    _, coefs, _ = lasso_path(X[train] - x_mean, y[train] - y_mean, alphas=alphas)
    want = ((X - x_mean) @ coefs).T + y_mean
    assert rel_err(got, want) < 1e-9


@pytest.mark.parametrize("output", ["decision_function", "predict_proba"])
def test_logistic_warm_path_matches_sklearn(binary, output):
    X, y, train = binary
    Cs = np.logspace(-2, 2, 6)[[2, 0, 5, 1, 4, 3]]
    fixed = {"tol": 1e-10, "max_iter": 10_000}
    params = params_of("sklearn.linear_model.LogisticRegression", "C", Cs, fixed, output)
    got = paths.fit_path(params, X, y, train, positive=1)
    want = reference(LogisticRegression, [{"C": c, **fixed} for c in Cs], X, y, train, output, 1)
    assert rel_err(got, want) < 1e-5


def test_plan_groups_by_everything_but_the_path_key():
    ridge = "sklearn.linear_model.Ridge"
    params = [
        Param("r", ridge, hyper={"alpha": 1.0, "fit_intercept": True}),
        Param("r", ridge, hyper={"alpha": 2.0, "fit_intercept": False}),
        Param("r", ridge, hyper={"alpha": 3.0, "fit_intercept": True}),
        Param("r", ridge, hyper={"alpha": 4.0, "fit_intercept": False}),
        Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": 2}),
        Param("r", ridge, fixed={"solver": "sag"}, hyper={"alpha": 1.0}),      # iterative solver
        Param("r", ridge, fixed={"solver": "sag"}, hyper={"alpha": 2.0}),
        Param("r", ridge, hyper={"alpha": -1.0, "fit_intercept": True}),       # invalid: generic
        Param("l", "sklearn.linear_model.LogisticRegression", fixed={"solver": "liblinear"},
              hyper={"C": 1.0}, output="decision_function"),
        Param("l", "sklearn.linear_model.LogisticRegression", fixed={"solver": "liblinear"},
              hyper={"C": 2.0}, output="decision_function"),
    ]
    groups = paths.plan(params)
    path_groups = {g.index: g.kernel for g in groups if g.kernel}
    assert path_groups == {(0, 2): "ridge", (1, 3): "ridge"}
    singles = sorted(i for g in groups if g.kernel is None for i in g.index)
    assert singles == [4, 5, 6, 7, 8, 9]


def test_fit_block_path_equals_generic_and_splits_time(diabetes):
    X, y, train = diabetes
    params = (params_of("sklearn.linear_model.Ridge", "alpha", np.logspace(-3, 3, 10))
              + [Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": 2,
                                                                          "random_state": 0})])
    kw = dict(params_slice=slice(0, 11), splits_slice=slice(0, 2))
    fast = fit_block(params, X, y, train, **kw)
    slow = fit_block(params, X, y, train, path_aware=False, **kw)
    assert fast.pred.shape == slow.pred.shape == (11, 2, len(y))
    assert rel_err(fast.pred, slow.pred) < 1e-8
    assert not fast.failed.any()
    assert (fast.fit_seconds > 0).all()
    # every member of a path group is charged the same share of the group's time
    assert np.allclose(fast.fit_seconds[:10], fast.fit_seconds[0])


def test_failing_path_falls_back_and_records_like_generic(diabetes):
    X, y, train = diabetes
    X = X.copy()
    X[5, 2] = np.nan
    params = params_of("sklearn.linear_model.Ridge", "alpha", [0.1, 1.0, 10.0])
    res = fit_block(params, X, y, train[:1], params_slice=slice(0, 3), splits_slice=slice(0, 1))
    generic = fit_block(params, X, y, train[:1], params_slice=slice(0, 3),
                        splits_slice=slice(0, 1), path_aware=False)
    assert res.failed.all()
    assert np.isnan(res.pred).all()
    assert list(res.error.ravel()) == list(generic.error.ravel())
    assert "NaN" in res.error[0, 0]


def test_logistic_path_with_nan_falls_back_and_records_like_generic(binary):
    X, y, train = binary
    X = X.copy()
    X[3, 1] = np.nan
    params = params_of("sklearn.linear_model.LogisticRegression", "C", [0.1, 1.0],
                       output="decision_function")
    kw = dict(params_slice=slice(0, 2), splits_slice=slice(0, 1), positive=1)
    res = fit_block(params, X, y, train[None, :], **kw)
    generic = fit_block(params, X, y, train[None, :], path_aware=False, **kw)
    assert res.failed.all()
    assert list(res.error.ravel()) == list(generic.error.ravel())
    assert "NaN" in res.error[0, 0]


def test_invalid_member_fails_alone(diabetes):
    X, y, train = diabetes
    params = params_of("sklearn.linear_model.Ridge", "alpha", [0.1, -1.0, 10.0])
    res = fit_block(params, X, y, train[:1], params_slice=slice(0, 3), splits_slice=slice(0, 1))
    assert res.failed[:, 0].tolist() == [False, True, False]
    assert "alpha" in res.error[1, 0]
    want = reference(Ridge, [{"alpha": 0.1}, {"alpha": 10.0}], X, y, train[0])
    assert rel_err(res.pred[[0, 2], 0], want) < 1e-8


def test_fit_path_refuses_mixed_learners(diabetes):
    X, y, train = diabetes
    params = [Param("r", "sklearn.linear_model.Ridge", hyper={"alpha": 1.0}),
              Param("t", "sklearn.tree.DecisionTreeRegressor", hyper={"max_depth": 2})]
    with pytest.raises(ValueError, match="not one path-aware learner"):
        paths.fit_path(params, X, y, train[0])
