"""Path-aware fitting against scikit-learn's own estimators, fitted one by one."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, make_classification
from sklearn.exceptions import ConvergenceWarning
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

from cvflow.fitting import paths
from cvflow.fitting.block import fit_block
from cvflow.workflow.params import Param


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


# --- the named estimator's own fit, also where the solver stops early (issue: warm starts) ----

LOGREG = "sklearn.linear_model.LogisticRegression"


def five_folds(n: int) -> np.ndarray:
    return np.random.default_rng(0).permutation(np.arange(n) % 5)


def kfold_oof(pred: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """(params, n) out-of-fold predictions of a block whose split k trains on fold != k."""
    return pred[:, fold, np.arange(len(fold))]


@pytest.mark.parametrize("output", ["decision_function", "predict_proba"])
@pytest.mark.parametrize("case", ["unscaled, lbfgs stops at max_iter",
                                  "scaled, every fit converges"])
def test_logistic_path_stores_the_named_estimators_own_fits(case, output):
    """Breast cancer, 5 folds: every stored prediction is LogisticRegression(C=c)'s own fit on
    the training rows (cold), to 1e-10, and K-fold zero_one is cross_val_predict's. Warm
    starts from the previous C gave other models: up to 18 in decision value when lbfgs
    stopped at max_iter, up to 186 when every fit converged (large C, scaled data)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import PredefinedSplit, cross_val_predict
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    if case.startswith("unscaled"):
        Cs, fixed = [0.01, 1.0, 10.0], {}
    else:
        X, Cs, fixed = StandardScaler().fit_transform(X), [1.0, 100.0, 1000.0], {"max_iter": 10_000}
    fold = five_folds(len(y))
    train = np.stack([fold != k for k in range(5)])
    params = params_of(LOGREG, "C", Cs, fixed, output)
    assert [g.kernel for g in paths.plan(params)] == ["logistic"]
    res = fit_block(params, X, y, train, params_slice=slice(0, 3), splits_slice=slice(0, 5),
                    positive=1)
    assert not res.failed.any()
    for s in range(5):
        want = reference(LogisticRegression, [{"C": c, **fixed} for c in Cs], X, y, train[s],
                         output, 1)
        np.testing.assert_allclose(res.pred[:, s], want, rtol=0, atol=1e-10)
    n_iter = [LogisticRegression(C=c, **fixed).fit(X[train[0]], y[train[0]]).n_iter_[0]
              for c in Cs]
    if case.startswith("unscaled"):
        assert n_iter == [100] * 3          # the case at issue: not converged
    else:
        assert max(n_iter) < 10_000
    oof = kfold_oof(res.pred, fold)
    threshold = 0.0 if output == "decision_function" else 0.5
    for h, c in enumerate(Cs):
        cvp = cross_val_predict(LogisticRegression(C=c, **fixed), X, y, cv=PredefinedSplit(fold))
        assert np.mean((oof[h] > threshold) != y) == np.mean(cvp != y)


def test_lasso_path_alpha_stopped_by_max_iter_is_the_lassos_own_fit():
    """Lasso(max_iter=5) on diabetes, 5 folds: the path's warm starts would carry each
    unconverged alpha's coefficients into the next; every stored prediction is
    Lasso(alpha, max_iter=5)'s own fit (1e-10), and K-fold squared error is
    cross_val_predict's."""
    from sklearn.model_selection import PredefinedSplit, cross_val_predict

    X, y = load_diabetes(return_X_y=True)
    alphas, fixed = [0.001, 0.01, 0.1], {"max_iter": 5}
    fold = five_folds(len(y))
    train = np.stack([fold != k for k in range(5)])
    params = params_of("sklearn.linear_model.Lasso", "alpha", alphas, fixed)
    assert [g.kernel for g in paths.plan(params)] == ["lasso"]
    res = fit_block(params, X, y, train, params_slice=slice(0, 3), splits_slice=slice(0, 5))
    for s in range(5):
        want = reference(Lasso, [{"alpha": a, **fixed} for a in alphas], X, y, train[s])
        np.testing.assert_allclose(res.pred[:, s], want, rtol=0, atol=1e-10 * np.abs(y).max())
    assert all(Lasso(alpha=a, **fixed).fit(X[train[0]], y[train[0]]).n_iter_ == 5 for a in alphas)
    oof = kfold_oof(res.pred, fold)
    for h, a in enumerate(alphas):
        cvp = cross_val_predict(Lasso(alpha=a, **fixed), X, y, cv=PredefinedSplit(fold))
        assert np.mean((oof[h] - y) ** 2) == pytest.approx(np.mean((cvp - y) ** 2), rel=1e-12)


@pytest.mark.parametrize("cls", [Lasso, ElasticNet])
def test_wide_training_sets_store_the_estimators_own_fits(cls):
    """100 x 300 regression, the default max_iter: some alphas' own cold fits stop at max_iter
    while a warm-started path converges (the path cannot see it); wide training sets are
    therefore fitted cold: every stored prediction is the estimator's own fit (1e-10)."""
    from sklearn.datasets import make_regression

    X, y = make_regression(100, 300, n_informative=20, noise=5.0, random_state=0)
    amax = np.abs((X - X.mean(0)).T @ (y - y.mean())).max() / len(y)
    alphas = list(np.geomspace(amax, amax * 1e-3, 8))
    fold = five_folds(len(y))
    train = np.stack([fold != k for k in range(2)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        stuck = [cls(alpha=a).fit(X[train[0]], y[train[0]]).n_iter_ >= 1000 for a in alphas]
        params = params_of(f"sklearn.linear_model.{cls.__name__}", "alpha", alphas, {})
        res = fit_block(params, X, y, train, params_slice=slice(0, 8), splits_slice=slice(0, 2))
        for s in range(2):
            want = reference(cls, [{"alpha": a} for a in alphas], X, y, train[s])
            np.testing.assert_allclose(res.pred[:, s], want, rtol=0, atol=1e-10 * np.abs(y).max())
    if cls is Lasso:       # the case is real: a cold fit stops where a warm path converges
        assert any(stuck)


def test_enet_path_n_iter_says_which_alphas_stopped_at_max_iter(diabetes):
    X, y, train = diabetes
    alphas = np.array([0.001, 1.0, 0.01])
    pred, n_iter = paths.enet_path_predictions(X, y, train[0], alphas, max_iter=5,
                                               return_n_iter=True)
    want = [Lasso(alpha=a, max_iter=10_000).fit(X[train[0]], y[train[0]]).n_iter_ for a in alphas]
    assert pred.shape == (3, len(y))
    assert [n >= 5 for n in n_iter.tolist()] == [w >= 5 for w in want]


LR_YAML = """\
name: lr
data: {source: sklearn, name: breast_cancer}
task: classification
loss: zero_one
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    grid: {C: [0.01, 1.0, 10.0]}
design: {folds: 5, seed: 0}
estimators: [kfold]
execution: {cluster: threads, workers: 1}
"""


def test_cli_logistic_kfold_zero_one_is_cross_val_predicts(tmp_path):
    """The tester's study as a user runs it: `cvflow run lr.yaml` (default max_iter, lbfgs stops
    at 100 iterations) prints and stores K-fold zero_one equal to cross_val_predict's of
    LogisticRegression(C=c) on the store's folds; before, C=1 gave 0.0457 instead of 0.0545."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import PredefinedSplit, cross_val_predict

    import cvflow
    from cvtest import run_cli

    wf = tmp_path / "lr.yaml"
    wf.write_text(LR_YAML)
    store = tmp_path / "lr.zarr"
    res = run_cli("run", wf, "--store", store)
    assert res.returncode == 0, res.stderr
    X, y = load_breast_cancer(return_X_y=True)
    cube = cvflow.open(store)
    fold = cube["fold"].values[0]
    got = cvflow.estimators.kfold(cube, loss="zero_one")["estimate"].values.ravel()
    report = run_cli("report", store)
    assert report.returncode == 0, report.stderr
    for h, c in enumerate([0.01, 1.0, 10.0]):
        cvp = cross_val_predict(LogisticRegression(C=c), X, y, cv=PredefinedSplit(fold))
        want = np.mean(cvp != y)
        assert got[h] == pytest.approx(want, abs=1e-12)
        line = next(ln for ln in report.stdout.splitlines() if f"logreg(C={c:g})" in ln)
        assert f"{want:.6g}" in line, line
