"""cvflow.SearchCV on what GridSearchCV accepts beyond numpy arrays and importable estimators
(issue 31): objects no name imports, private-module classes, Pipeline steps in the grid,
sparse X, X and y as lists / Series / indexable objects, precomputed kernels, splitters that
do not partition the samples, shuffling splitters without a seed, column-vector y. Each
against GridSearchCV on the same data: best_params_, cv_results_ to 1e-12, predictions."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import make_classification
from sklearn.decomposition import PCA
from sklearn.exceptions import DataConversionWarning
from sklearn.feature_selection import SelectKBest
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.model_selection import (GridSearchCV, GroupShuffleSplit, KFold, LeavePGroupsOut,
                                     StratifiedShuffleSplit)
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, SplineTransformer
from sklearn.svm import SVC, LinearSVC
from sklearn.utils._mocking import CheckingClassifier, MockDataFrame

import cvflow
from cvflow.errors import InputError

TOL = dict(rtol=1e-12, atol=1e-12)


def search(estimator, grid, **kwargs):
    """SearchCV as GridSearchCV runs (in this process), and GridSearchCV."""
    return (cvflow.SearchCV(estimator, grid, cluster="threads", **kwargs),
            GridSearchCV(estimator, grid, **kwargs))


def assert_same(ours, ref, X_new=None, scores_only=False):
    """best_params_ and every score of cv_results_ equal; the same predictions on X_new."""
    assert ours.best_index_ == ref.best_index_
    assert ours.n_splits_ == ref.n_splits_
    for key, want in ref.cv_results_.items():
        if "_time" in key or key.startswith("param_") or key == "params":
            continue
        np.testing.assert_allclose(ours.cv_results_[key], want, err_msg=key, **TOL)
    if scores_only:
        return
    assert repr(ours.best_params_) == repr(ref.best_params_)
    if X_new is not None:
        np.testing.assert_array_equal(ours.predict(X_new), ref.predict(X_new))


@pytest.fixture(scope="module")
def clf_data():
    return make_classification(n_samples=80, n_features=6, random_state=0)


def test_lambdas_local_classes_and_array_values(clf_data):
    X, y = clf_data

    class Scaled(ClassifierMixin, BaseEstimator):
        def __init__(self, C=1.0):
            self.C = C

        def fit(self, X, y):
            self.model_ = LogisticRegression(C=self.C).fit(X, y)
            self.classes_ = self.model_.classes_
            return self

        def predict(self, X):
            return self.model_.predict(X)

        def decision_function(self, X):
            return self.model_.decision_function(X)

    pipe = make_pipeline(FunctionTransformer(lambda v: np.tanh(v)), Scaled())
    grid = {"scaled__C": [0.01, 1.0], "functiontransformer__func": [np.tanh, lambda v: v ** 3]}
    ours, ref = search(pipe, grid, cv=4)
    assert_same(ours.fit(X, y), ref.fit(X, y), X, scores_only=True)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    knots = [np.linspace(-3, 3, k)[:, None].repeat(6, axis=1) for k in (4, 7)]
    spline = make_pipeline(SplineTransformer(extrapolation="periodic"), LogisticRegression())
    ours, ref = search(spline, {"splinetransformer__knots": knots}, cv=3)
    assert_same(ours.fit(X, y), ref.fit(X, y), X, scores_only=True)
    assert ours.cv_results_["param_splinetransformer__knots"].dtype == object


def test_lists_series_and_indexable_objects_reach_the_fits_as_given(clf_data):
    """CheckingClassifier (from the private sklearn.utils._mocking) sees X and y as given,
    sliced as GridSearchCV slices them; a real classifier scores as under GridSearchCV."""
    X = np.arange(100).reshape(10, 10)
    y = np.array([0] * 5 + [1] * 5)
    cases = [(X.tolist(), y, list, np.ndarray), (X, y.tolist(), np.ndarray, list),
             (pd.DataFrame(X), pd.Series(y), pd.DataFrame, pd.Series),
             (MockDataFrame(X), MockDataFrame(y), MockDataFrame, MockDataFrame)]
    for X_given, y_given, x_type, y_type in cases:
        # a fit given other types fails its check (the trial fit first: InputError); the
        # checks travel with the task (a copy), so they are asserted by the fits' outcome
        clf = CheckingClassifier(check_X=lambda v, t=x_type: type(v) is t,
                                 check_y=lambda v, t=y_type: type(v) is t,
                                 methods_to_check=["fit"])
        ours = cvflow.SearchCV(clf, {"foo_param": [1, 2, 3]}, cv=KFold(3), cluster="threads")
        ours.fit(X_given, y_given)
        assert not ours.result_.cube["failed"].values.any()
    X, y = clf_data
    for X_given, y_given in [(X.tolist(), y.tolist()), (pd.DataFrame(X), pd.Series(y)),
                             (MockDataFrame(X), MockDataFrame(y))]:
        ours, ref = search(LogisticRegression(), {"C": [0.01, 1.0]}, cv=KFold(4))
        assert_same(ours.fit(X_given, y_given), ref.fit(X_given, y_given), X)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_sparse_X_is_fitted_sparse_and_stored_dense(clf_data, fmt):
    X, y = clf_data
    X = np.where(np.abs(X) > 1, X, 0.0)
    X_sparse = sp.csr_matrix(X).asformat(fmt)
    ours, ref = search(LinearSVC(), {"C": [0.1, 1.0]}, cv=3, scoring="accuracy")
    assert_same(ours.fit(X_sparse, y), ref.fit(X_sparse, y), X_sparse)
    np.testing.assert_array_equal(ours.result_.cube["X"].values, X)
    # the fits get CSR rows, as sklearn.utils.indexable makes them (else the check fails them)
    checking = CheckingClassifier(check_X=lambda v: sp.issparse(v) and v.format == "csr",
                                  methods_to_check=["fit"])
    fitted = cvflow.SearchCV(checking, {"foo_param": [1, 2]}, cv=3, cluster="threads")
    assert not fitted.fit(X_sparse.tocsr(), y).result_.cube["failed"].values.any()


def test_a_sparse_X_too_large_to_store_dense_is_refused(monkeypatch):
    from cvflow.workflow import data

    monkeypatch.setattr(data, "SPARSE_DENSE_BYTES", 1000)
    X = sp.random(30, 10, density=0.2, format="csr", random_state=0)
    with pytest.raises(InputError, match=r"X is a sparse 30 x 10 matrix; the cube stores X "
                                         "dense"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, cluster="threads").fit(X, np.arange(30.0))


def test_pipeline_steps_in_the_grid():
    X, y = make_classification(n_samples=60, n_features=8, random_state=1)
    pipe = Pipeline([("reduce", PCA(2)), ("clf", LogisticRegression())])
    grid = {"reduce": [PCA(3), SelectKBest(k=3)], "clf__C": [0.1, 10.0]}
    ours, ref = search(pipe, grid, cv=3)
    assert_same(ours.fit(X, y), ref.fit(X, y), X, scores_only=True)
    assert [type(v).__name__ for v in ours.cv_results_["param_reduce"]] == \
        [type(v).__name__ for v in ref.cv_results_["param_reduce"]]
    reg = Pipeline([("regressor", LinearRegression())])
    ours, ref = search(reg, {"regressor": [LinearRegression(), Ridge()]}, cv=2)
    Xr, yr = X, X[:, 0] + 0.1 * y
    assert_same(ours.fit(Xr, yr), ref.fit(Xr, yr), Xr, scores_only=True)
    assert not hasattr(ours.cv_results_["param_regressor"][0], "coef_")


@pytest.mark.parametrize("kind", ["kernel", "distances"])
def test_precomputed_kernels_and_distances(clf_data, kind):
    X, y = clf_data
    if kind == "kernel":
        K, est, grid = X @ X.T, SVC(kernel="precomputed"), {"C": [0.1, 1.0]}
    else:
        K, est, grid = euclidean_distances(X), KNeighborsClassifier(metric="precomputed"), \
            {"n_neighbors": [3, 9]}
    ours, ref = search(est, grid, cv=4)
    assert_same(ours.fit(K, y), ref.fit(K, y), K)
    with pytest.raises(ValueError, match="Precomputed kernels or affinity matrices have to be "
                                         "passed as arrays or sparse matrices"):
        cvflow.SearchCV(est, grid, cv=4, cluster="threads").fit(K.tolist(), y)


@pytest.mark.parametrize("cv", [LeavePGroupsOut(2), GroupShuffleSplit(4, random_state=0),
                                StratifiedShuffleSplit(5, random_state=0)], ids=type)
def test_splitters_that_do_not_partition_with_select_kfold(clf_data, cv):
    X, y = clf_data
    groups = np.arange(80) % 5 if "Group" in type(cv).__name__ else None
    ours, ref = search(LogisticRegression(), {"C": [0.01, 0.1, 1.0]}, cv=cv,
                       scoring="neg_log_loss", return_train_score=True)
    assert_same(ours.fit(X, y, groups=groups), ref.fit(X, y, groups=groups), X)
    with pytest.raises(InputError, match=r"does not partition the samples .* estimators\[0\] "
                                         r"\(corrected_kfold\) needs folds that partition"):
        cvflow.SearchCV(LogisticRegression(), {"C": [1.0]}, cv=cv, cluster="threads",
                        scoring="neg_log_loss", select="corrected_kfold").fit(X, y, groups=groups)


def test_a_shuffling_splitter_without_seed_draws_its_folds_once(clf_data):
    X, y = clf_data
    np.random.seed(0)
    ours = cvflow.SearchCV(LogisticRegression(), {"C": [0.1, 0.1, 1.0]}, cluster="threads",
                           cv=KFold(4, shuffle=True)).fit(X, y)
    splitter = json.loads(ours.result_.cube.attrs["workflow"])["design"]["splitter"]
    seed = splitter["random_state"]
    np.random.seed(0)
    assert seed == np.random.randint(np.iinfo(np.int32).max)     # numpy's global state, once
    ref = GridSearchCV(LogisticRegression(), {"C": [0.1, 0.1, 1.0]},
                       cv=KFold(4, shuffle=True, random_state=seed)).fit(X, y)
    assert_same(ours, ref, X)
    for k in range(4):                  # one draw for every candidate
        split = ours.cv_results_[f"split{k}_test_score"]
        assert split[0] == split[1]


def test_column_vector_y_warns_and_is_raveled(clf_data):
    X, y = clf_data
    ours, ref = search(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3)
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        ours.fit(X, y[:, None])
    assert_same(ours, ref.fit(X, y), X)


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "r2"])
def test_several_targets_scored_at_fit_time_as_gridsearchcv(clf_data, scoring):
    """A multioutput y: every scoring computed where each fit runs, as GridSearchCV scores it."""
    X, y = clf_data
    Y = np.column_stack([X[:, 0] + y, X[:, 1] - y])
    ours, ref = search(Ridge(), {"alpha": [0.1, 10.0]}, cv=3, scoring=scoring,
                       return_train_score=True)
    assert_same(ours.fit(X, Y), ref.fit(X, Y), X)


def test_multilabel_and_nd_inputs_as_gridsearchcv():
    """A multilabel y, and an X and a y of more than two dimensions fitted as given."""
    from sklearn.datasets import make_multilabel_classification
    from sklearn.tree import DecisionTreeClassifier

    X, Y = make_multilabel_classification(n_samples=60, return_indicator=True, random_state=0)
    ours, ref = search(DecisionTreeClassifier(random_state=0), {"max_depth": [1, 3]}, cv=3)
    assert_same(ours.fit(X, Y), ref.fit(X, Y), X)
    X4, Y3 = X.reshape(60, 5, 2, 2), np.stack([Y, 1 - Y], axis=2)
    model = CheckingClassifier(check_X=lambda x: x.shape[1:] == (5, 2, 2),
                               check_y=lambda v: v.shape[1:] == (5, 2), methods_to_check=["fit"])
    ours, ref = search(model, {"foo_param": [0, 1]}, cv=3)
    ours.fit(X4, Y3), ref.fit(X4, Y3)
    np.testing.assert_array_equal(ours.cv_results_["mean_test_score"],
                                  ref.cv_results_["mean_test_score"])


def test_several_targets_refused_with_a_loss(clf_data, tmp_path):
    X, y = clf_data
    Y = np.column_stack([y, y]).astype(float)
    with pytest.raises(ValueError, match="scoring 'squared' is a cvflow loss of one target per "
                                         "sample, and y has several"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, scoring="squared", cluster="threads").fit(X, Y)
    with pytest.raises(InputError, match=r"y has shape \(80, 2\); cvflow's losses read one "
                                         "target per sample"):
        cvflow.Study(Ridge(), loss="squared").run(X, Y, store=tmp_path / "s.zarr",
                                                  progress=False)


def test_object_and_complex_X(clf_data):
    X, y = clf_data
    ours, ref = search(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3)
    assert_same(ours.fit(X.astype(object), y), ref.fit(X, y), X)
    bad = X.astype(object)
    bad[0, 0] = {"foo": "bar"}
    with pytest.raises(TypeError, match="argument must be a string or a real number"):
        ours.fit(bad, y)
    with pytest.raises(InputError, match="Complex data not supported"):
        ours.fit(X + 1j, y)
