"""Losses against scikit-learn's metrics on the same predictions, through the reducers too."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import (hinge_loss, log_loss, mean_absolute_error, mean_squared_error,
                             zero_one_loss)

from cvflow.errors import InputError
from cvflow.estimators import corrected_kfold, kfold
from cvflow.learners import Param
from cvflow.losses import LOSSES, check_loss
from cvflow.testing import fit_cube, simple_design


def classification_data(labels):
    X, y01 = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    rows = rng.choice(len(y01), 120, replace=False)
    X = X[rows][:, :4]
    X = (X - X.mean(0)) / X.std(0)
    y = np.where(y01[rows] == 1, labels[1], labels[0])
    is_test = np.zeros(len(y), bool)
    is_test[rng.choice(len(y), 40, replace=False)] = True
    return X, y, is_test


def labels_from(stored, output, labels):
    """scikit-learn's binary ``predict`` rule on a stored output (decision > 0, proba > 0.5)."""
    if output == "predict":
        return stored
    threshold = 0.5 if output == "predict_proba" else 0.0
    return np.where(stored > threshold, labels[1], labels[0])


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (3, 7)])
@pytest.mark.parametrize("output,loss", [("decision_function", "hinge"),
                                         ("decision_function", "zero_one"),
                                         ("predict_proba", "zero_one"),
                                         ("predict", "zero_one"),
                                         ("predict_proba", "log_loss")])
def test_classifier_losses_equal_sklearn_metrics(labels, output, loss):
    """Every term of the corrected K-fold equals scikit-learn's metric on the stored predictions."""
    X, y, is_test = classification_data(labels)
    cs = [0.01, 1.0]
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c},
                    output=output) for c in cs]
    design = simple_design(len(y), 3, is_test=is_test, seed=2)
    cube = fit_cube(X, y, params, design, task="classification", is_test=is_test)
    res = corrected_kfold(cube, loss=loss)
    plain = kfold(cube, loss=loss)
    d = ~is_test
    n = d.sum()

    def metric(stored, rows):
        if loss == "hinge":
            return hinge_loss(y[rows], stored[rows])
        if loss == "log_loss":
            return log_loss(y[rows], stored[rows], labels=list(labels))
        return zero_one_loss(y[rows], labels_from(stored[rows], output, labels))

    for h in range(len(cs)):
        pred = cube["pred"].values[h]
        full = pred[design.full_split]
        folds = [(design.fold[0] == j, pred[s]) for j, s in enumerate(design.fold_split[0])]
        kf = sum(rows.sum() / n * metric(p, rows) for rows, p in folds)
        on_d = sum(rows.sum() / n * metric(p, d) for rows, p in folds)
        assert float(res["test_risk"][h]) == pytest.approx(metric(full, is_test), rel=1e-12)
        assert float(res["full_risk"][h]) == pytest.approx(metric(full, d), rel=1e-12)
        assert float(res["kfold"][h]) == pytest.approx(kf, rel=1e-12)
        assert float(plain["estimate"][h]) == pytest.approx(kf, rel=1e-12)
        assert float(res["fold_model_risk"][h]) == pytest.approx(on_d, rel=1e-12)
        assert float(res["estimate"][h]) == pytest.approx(kf + metric(full, d) - on_d, rel=1e-12)


def test_stored_decision_values_are_sklearns():
    """The cube's full-fit predictions are those of an independent scikit-learn fit."""
    X, y, is_test = classification_data((0, 1))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": 1.0},
                    output="decision_function")]
    design = simple_design(len(y), 3, is_test=is_test, seed=2)
    cube = fit_cube(X, y, params, design, task="classification", is_test=is_test)
    model = LogisticRegression(C=1.0).fit(X[~is_test], y[~is_test])
    np.testing.assert_allclose(cube["pred"].values[0, design.full_split],
                               model.decision_function(X), rtol=1e-3, atol=1e-3)


def test_regression_losses_equal_sklearn_metrics():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3))
    y = X @ [1.0, -2.0, 0.5] + rng.normal(size=50)
    is_test = np.zeros(50, bool)
    is_test[:15] = True
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": 3.0})]
    cube = fit_cube(X, y, params, simple_design(50, 4, is_test=is_test), is_test=is_test)
    model = Ridge(alpha=3.0).fit(X[~is_test], y[~is_test])
    for loss, metric in (("squared", mean_squared_error), ("absolute", mean_absolute_error)):
        res = corrected_kfold(cube, loss=loss)
        assert float(res["test_risk"][0]) == pytest.approx(
            metric(y[is_test], model.predict(X[is_test])), rel=1e-10)
        assert float(res["full_risk"][0]) == pytest.approx(
            metric(y[~is_test], model.predict(X[~is_test])), rel=1e-10)


def test_elementwise_losses_on_arrays():
    y = np.array([0, 1, 1, 0, 1])
    f = np.array([-2.0, 0.3, -0.1, 0.5, np.nan])
    np.testing.assert_allclose(LOSSES["hinge"](y, f, 1)[:4], [0, 0.7, 1.1, 1.5])
    np.testing.assert_allclose(LOSSES["zero_one"](y, f, 1)[:4], [0, 0, 1, 1])
    p = np.array([0.1, 0.8, 0.4, 0.6, np.nan])
    np.testing.assert_allclose(LOSSES["zero_one"](y, p, 1, output="predict_proba")[:4], [0, 0, 1, 1])
    np.testing.assert_allclose(LOSSES["log_loss"](y, p, 1)[:4],
                               -np.log([0.9, 0.8, 0.4, 0.4]), rtol=1e-12)
    # a failed fit (NaN prediction) gives a NaN loss, never a silent 0 or 1
    for name in ("hinge", "zero_one", "log_loss"):
        assert np.isnan(LOSSES[name](y, f if name != "log_loss" else p, 1)[4])
    assert np.isnan(LOSSES["zero_one"](y, f, 1, output="predict")[4])


def test_check_loss_errors():
    assert check_loss("hinge", "classification", {"decision_function"}) == "hinge"
    with pytest.raises(InputError, match="'hinge' is not a regression loss"):
        check_loss("hinge", "regression")
    with pytest.raises(InputError, match="'hinge' cannot be computed from stored predict_proba"):
        check_loss("hinge", "classification", {"predict_proba"})
    with pytest.raises(InputError, match="'log_loss' cannot be computed from stored decision_function"):
        check_loss("log_loss", "classification", {"decision_function"})


def test_reducer_refuses_a_loss_the_stored_output_cannot_give():
    X, y, is_test = classification_data((0, 1))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", output="predict_proba")]
    cube = fit_cube(X, y, params, simple_design(len(y), 3, is_test=is_test), task="classification",
                    is_test=is_test)
    with pytest.raises(InputError, match="needs decision_function"):
        corrected_kfold(cube, loss="hinge")


@pytest.mark.parametrize("lazy", [False, True])
def test_zero_one_reads_each_params_own_output(lazy):
    """One cube, three learners storing decision values, probabilities and labels: each
    param's zero-one loss equals scikit-learn's on its own predicted labels."""
    import dask.array as da

    from cvflow.losses import apply_loss

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 30)
    outputs = ["decision_function", "predict_proba", "predict", "decision_function"]
    stored = np.stack([rng.normal(size=30), rng.uniform(size=30), rng.integers(0, 2, 30),
                       rng.normal(size=30)]).astype(float)
    labels = [(stored[0] > 0), (stored[1] > 0.5), stored[2], (stored[3] > 0)]
    data = da.from_array(stored, chunks=(1, 30)) if lazy else stored
    got = np.asarray(apply_loss("zero_one", y, data, 1, outputs))
    for h in range(4):
        assert got[h].mean() == pytest.approx(zero_one_loss(y, labels[h].astype(int)))
