"""A search without a store predicts each fit's test rows alone, as GridSearchCV's scorer does
(issue 41: an SVC on digits predicted every sample at 2.6x its fit's cost; DESIGN.md section 3,
a temporary cube holds the cells its estimators read). Checked against scikit-learn: the same
cv_results_ and choice as GridSearchCV, a pairwise (precomputed kernel) learner too, and
report()'s corrected estimate, whose fold models are fitted again for their training rows,
against a hand computation with scikit-learn's fits."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import SVC

import cvflow

KNN = KNeighborsClassifier()
GRID = {"n_neighbors": [3, 9, 15]}


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X[:300], y[:300]


def _train_rows(search) -> np.ndarray:
    return np.asarray(search.cube_["train"].values, dtype=bool)


def test_the_fits_predict_their_test_rows_alone_with_gridsearchcvs_answer(cancer):
    X, y = cancer
    search = cvflow.SearchCV(KNN, GRID, cv=5, cluster="threads").fit(X, y)
    reference = GridSearchCV(KNN, GRID, cv=5).fit(X, y)
    pred, train = search.cube_["pred"].values, _train_rows(search)
    assert np.isnan(pred[:, train]).all() and np.isfinite(pred[:, ~train]).all()
    for key in ("mean_test_score", "std_test_score", "rank_test_score"):
        np.testing.assert_allclose(search.cv_results_[key], reference.cv_results_[key],
                                   rtol=0, atol=1e-12)
    assert search.best_index_ == reference.best_index_


def test_train_scores_keep_every_row(cancer):
    X, y = cancer
    search = cvflow.SearchCV(KNN, GRID, cv=5, cluster="threads",
                             return_train_score=True).fit(X, y)
    reference = GridSearchCV(KNN, GRID, cv=5, return_train_score=True).fit(X, y)
    assert np.isfinite(search.cube_["pred"].values).all()
    np.testing.assert_allclose(search.cv_results_["mean_train_score"],
                               reference.cv_results_["mean_train_score"], rtol=0, atol=1e-12)


def test_a_precomputed_kernel_predicts_from_its_test_rows_training_columns(cancer):
    X, y = cancer
    K = rbf_kernel(X / X.std(axis=0))
    grid = {"C": [0.1, 1.0, 10.0]}
    search = cvflow.SearchCV(SVC(kernel="precomputed"), grid, cv=5, cluster="threads").fit(K, y)
    reference = GridSearchCV(SVC(kernel="precomputed"), grid, cv=5).fit(K, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
    assert search.best_index_ == reference.best_index_


def test_report_fits_the_chosen_fold_models_again_for_the_corrected_estimate(cancer):
    X, y = cancer
    search = cvflow.SearchCV(KNN, GRID, cv=5, scoring="neg_brier_score",
                             cluster="threads").fit(X, y)
    out = io.StringIO()
    search.report(file=out)
    match = re.search(r"corrected K-fold estimate \([^)]*\):\s+(\S+)\s+se (\S+)", out.getvalue())
    assert match, out.getvalue()
    # by hand: corrected = K-fold + mean_D loss(full) - sum_j p_j mean_D loss(fold j)
    params = search.best_params_
    full = clone(KNN).set_params(**params).fit(X, y)
    full_risk = ((full.predict_proba(X)[:, 1] - y) ** 2).mean()
    scores, risks, sizes = [], [], []
    for train, test in StratifiedKFold(5).split(X, y):
        model = clone(KNN).set_params(**params).fit(X[train], y[train])
        values = (model.predict_proba(X)[:, 1] - y) ** 2
        scores.append(values[test].mean())
        risks.append(values.mean())
        sizes.append(len(test))
    scores, risks, sizes = map(np.asarray, (scores, risks, sizes))
    kfold = (scores * sizes).sum() / sizes.sum()
    corrected = kfold + full_risk - (sizes / sizes.sum() * risks).sum()
    assert float(match.group(1)) == pytest.approx(corrected, rel=1e-5)
    # the cube itself still holds the test rows alone (nothing written into it)
    assert np.isnan(search.cube_["pred"].values[:, _train_rows(search)]).all()
