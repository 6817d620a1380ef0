"""``cvflow.SearchCV(..., racing=...)``: a raced search chooses what GridSearchCV chooses, its
survivors' scores are GridSearchCV's, the dropped candidates are NaN and ranked last (as
GridSearchCV ranks failed candidates), and what racing cannot serve is refused."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV

import cvflow

GRID = {"alpha": [float(a) for a in np.logspace(-2, 5, 12)]}


@pytest.fixture(scope="module")
def data():
    return load_diabetes(return_X_y=True)


def test_raced_search_chooses_what_gridsearchcv_chooses(data):
    X, y = data
    search = cvflow.SearchCV(Ridge(), GRID, cv=5, scoring="neg_mean_squared_error",
                             racing={"alpha": 0.05}, cluster="threads").fit(X, y)
    ref = GridSearchCV(Ridge(), GRID, cv=5, scoring="neg_mean_squared_error").fit(X, y)
    race = json.loads(search.result_.cube.attrs["racing"])
    dropped = sorted(d["param"] for d in race["dropped"])
    alive = [h for h in range(12) if h not in dropped]
    assert dropped and ref.best_index_ in alive
    assert search.best_index_ == ref.best_index_ and search.best_params_ == ref.best_params_
    got, want = search.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"]
    np.testing.assert_allclose(got[alive], want[alive], rtol=1e-10)
    assert np.isnan(got[dropped]).all()
    for k in range(5):
        key = f"split{k}_test_score"
        np.testing.assert_allclose(search.cv_results_[key][alive], ref.cv_results_[key][alive],
                                   rtol=1e-10)
    # survivors ranked as GridSearchCV ranks them among themselves, the dropped last (tied)
    order = np.argsort(np.argsort(-want[alive], kind="stable"), kind="stable") + 1
    np.testing.assert_array_equal(search.cv_results_["rank_test_score"][alive], order)
    assert set(search.cv_results_["rank_test_score"][dropped]) == {len(alive) + 1}
    done = search.result_.cube["done"].values
    assert not done[dropped].all() and done[alive].all()
    np.testing.assert_allclose(search.predict(X[:5]), ref.predict(X[:5]), rtol=1e-10)


def test_raced_search_needs_a_pointwise_scoring_and_a_raced_selection(data):
    X, y = data
    with pytest.raises(ValueError, match=r"SearchCV: racing compares per-sample losses, but "
                                         r"scoring 'r2' is a per-fold metric"):
        cvflow.SearchCV(Ridge(), GRID, cv=5, racing=True, cluster="threads").fit(X, y)
    with pytest.raises(ValueError, match=r"bbc_cv needs every param on every split"):
        cvflow.SearchCV(Ridge(), GRID, cv=5, scoring="neg_mean_squared_error", select="bbc_cv",
                        racing=True, cluster="threads").fit(X, y)
