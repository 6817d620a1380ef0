"""cvflow.RandomizedSearchCV against scikit-learn's RandomizedSearchCV (issue 41 item 5): the
same candidates (ParameterSampler's draw, duplicates included), every cv_results_ column to
1e-12, best_params_, predictions; scikit-learn's signature, clone and errors."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import loguniform, randint, uniform
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold, ParameterSampler, RandomizedSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

import cvflow

TOL = dict(rtol=1e-12, atol=1e-12)


def both(estimator, distributions, X, y, **kwargs):
    ours = cvflow.RandomizedSearchCV(estimator, distributions, cluster="threads", **kwargs)
    return ours.fit(X, y), RandomizedSearchCV(estimator, distributions, **kwargs).fit(X, y)


def assert_same(ours, ref, X_new):
    assert list(ours.cv_results_) == list(ref.cv_results_)
    assert ours.cv_results_["params"] == ref.cv_results_["params"]
    for key, want in ref.cv_results_.items():
        if "_time" in key or key == "params":
            continue
        got = ours.cv_results_[key]
        if key.startswith("param_"):
            assert got.dtype == want.dtype, key
            np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))
            assert list(got.compressed()) == list(want.compressed()), key
        else:
            np.testing.assert_allclose(got, want, err_msg=key, **TOL)
    assert ours.best_params_ == ref.best_params_ and ours.best_index_ == ref.best_index_
    assert ours.best_score_ == pytest.approx(ref.best_score_, abs=1e-12)
    np.testing.assert_array_equal(ours.predict(X_new), ref.predict(X_new))


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


def test_distributions_and_lists_as_randomizedsearchcv(cancer):
    X, y = cancer
    dists = {"max_depth": randint(1, 8), "min_samples_leaf": [1, 5, 10],
             "ccp_alpha": loguniform(1e-4, 1e-1)}
    ours, ref = both(DecisionTreeClassifier(random_state=0), dists, X, y, n_iter=12,
                     random_state=3, cv=4, return_train_score=True)
    # the draw is ParameterSampler's, and max_depth repeats: duplicates are fitted as drawn
    assert ref.cv_results_["params"] == list(ParameterSampler(dists, 12, random_state=3))
    assert len({p["max_depth"] for p in ref.cv_results_["params"]}) < 12
    assert_same(ours, ref, X[:30])


def test_a_list_of_distributions_and_several_scorings(cancer):
    X, y = cancer
    dists = [{"svc__kernel": ["linear"], "svc__C": loguniform(1e-2, 1e1)},
             {"svc__kernel": ["rbf"], "svc__gamma": uniform(0.001, 0.1), "svc__C": [0.5, 2.0]}]
    kwargs = dict(n_iter=6, cv=3, scoring=["accuracy", "balanced_accuracy"],
                  refit="balanced_accuracy")
    # a RandomState is drawn from (and advanced) by the fit, as scikit-learn's: one each
    ours = cvflow.RandomizedSearchCV(make_pipeline(StandardScaler(), SVC()), dists,
                                     random_state=np.random.RandomState(7), cluster="threads",
                                     **kwargs).fit(X, y)
    ref = RandomizedSearchCV(make_pipeline(StandardScaler(), SVC()), dists,
                             random_state=np.random.RandomState(7), **kwargs).fit(X, y)
    assert_same(ours, ref, X[:30])


def test_random_state_none_draws_from_numpys_global_state():
    X, y = load_diabetes(return_X_y=True)
    dists = {"alpha": loguniform(1e-3, 1e2)}
    np.random.seed(11)
    ref = RandomizedSearchCV(Ridge(), dists, n_iter=5, cv=KFold(4)).fit(X, y)
    np.random.seed(11)
    ours = cvflow.RandomizedSearchCV(Ridge(), dists, n_iter=5, cv=KFold(4),
                                     cluster="threads").fit(X, y)
    assert_same(ours, ref, X[:10])


def test_a_grid_smaller_than_n_iter_warns_as_scikit_learn(cancer):
    X, y = cancer
    grid = {"max_depth": [1, 2, 3]}
    with pytest.warns(UserWarning, match="The total space of parameters 3 is smaller than n_iter"):
        ref = RandomizedSearchCV(DecisionTreeClassifier(random_state=0), grid, n_iter=10,
                                 random_state=0, cv=3).fit(X, y)
    with pytest.warns(UserWarning, match="The total space of parameters 3 is smaller than n_iter"):
        ours = cvflow.RandomizedSearchCV(DecisionTreeClassifier(random_state=0), grid, n_iter=10,
                                         random_state=0, cv=3, cluster="threads").fit(X, y)
    assert_same(ours, ref, X[:10])


def test_signature_and_clone():
    ref = RandomizedSearchCV(Ridge(), {"alpha": [1.0]})
    ours = cvflow.RandomizedSearchCV(Ridge(), {"alpha": [1.0]}, n_iter=3, random_state=5)
    params = ours.get_params(deep=False)
    assert set(ref.get_params(deep=False)) <= set(params)
    assert params["n_iter"] == 3 and params["random_state"] == 5
    twin = clone(ours)
    assert twin.get_params(deep=False)["n_iter"] == 3 and twin is not ours


def test_no_candidate_or_no_split_is_refused_as_scikit_learn():
    X, y = load_diabetes(return_X_y=True)
    with pytest.raises(ValueError, match="No fits were performed"):
        cvflow.RandomizedSearchCV(Ridge(), {"alpha": [1.0]}, n_iter=0,
                                  cluster="threads").fit(X, y)
    splits = KFold(3).split(X)
    list(splits)                                         # exhausted
    with pytest.raises(ValueError, match="No fits were performed"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, cv=splits, cluster="threads").fit(X, y)
