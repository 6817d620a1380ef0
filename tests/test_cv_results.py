"""cvflow.cv_results against GridSearchCV.cv_results_ on the same folds, and kfold's average."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import (GridSearchCV, KFold, RepeatedKFold, StratifiedKFold,
                                     cross_val_predict)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow
from cvflow.errors import InputError
from cvflow.estimators import kfold
from cvflow.testing import cube_from_predictions, simple_design

TOL = dict(rtol=1e-12, atol=1e-12)


def _compare(table, reference: dict, keys=None):
    """Every score column of ``reference`` (GridSearchCV.cv_results_) equal in ``table``."""
    keys = keys or [k for k in reference if "_test_" in k or "_train_" in k]
    for key in keys:
        assert key in table, key
        want = np.asarray(reference[key], dtype=float)
        np.testing.assert_allclose(table[key].to_numpy(dtype=float), want, err_msg=key, **TOL)
    return keys


@pytest.fixture(scope="module")
def diabetes(tmp_path_factory):
    """Ridge on diabetes (442 samples: 5 unequal folds), run through Study."""
    X, y = load_diabetes(return_X_y=True)
    cv = KFold(5, shuffle=True, random_state=0)
    grid = {"alpha": [0.001, 0.01, 0.1, 1.0, 10.0]}
    store = tmp_path_factory.mktemp("cvr") / "diabetes.zarr"
    result = cvflow.Study(Ridge(), param_grid=grid, cv=cv).run(X, y, store=store, progress=False)
    return X, y, cv, grid, store, result


def test_regression_folds_average_equals_gridsearchcv(diabetes):
    X, y, cv, grid, store, result = diabetes
    scoring = ["neg_mean_squared_error", "neg_mean_absolute_error", "r2", "explained_variance"]
    gs = GridSearchCV(Ridge(), grid, cv=cv, scoring=scoring, refit=False,
                      return_train_score=True).fit(X, y)
    table = cvflow.cv_results(store, scoring, average="folds", train=True)
    keys = _compare(table, gs.cv_results_)
    assert len(keys) == 4 * (5 + 2 + 5 + 2 + 1)             # splits, mean, std (test + train), rank
    assert table["params"].tolist() == gs.cv_results_["params"]
    assert table["param_alpha"].tolist() == list(gs.cv_results_["param_alpha"])
    assert (table["mean_fit_time"] > 0).all() and (table["std_fit_time"] >= 0).all()
    assert table.attrs["losses"]["neg_mean_squared_error"] == "squared"
    assert table.attrs["greater_is_better"] == dict.fromkeys(scoring, True)


def test_one_loss_as_a_string_gives_score_columns_and_natural_sign(diabetes):
    """A single name (not a list) gives *_test_score, as scikit-learn; cvflow's `squared` keeps
    its own sign (the MSE, rank 1 the smallest), `neg_mean_squared_error` scikit-learn's."""
    X, y, cv, grid, store, _ = diabetes
    gs = GridSearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
    table = cvflow.cv_results(store, "squared", average="folds")
    assert "mean_test_score" in table and "mean_test_squared" not in table
    np.testing.assert_allclose(table["mean_test_score"], -gs.cv_results_["mean_test_score"], **TOL)
    np.testing.assert_array_equal(table["rank_test_score"], gs.cv_results_["rank_test_score"])
    assert table.attrs["greater_is_better"] == {"score": False}
    scored = cvflow.cv_results(store, "squared", average="folds", sign="score")
    _compare(scored, gs.cv_results_)
    default = cvflow.cv_results(store)                      # the store's loss: squared, pooled
    np.testing.assert_allclose(default["mean_test_score"], kfold(cvflow.open(store))["estimate"],
                               **TOL)


def test_samples_average_is_the_pooled_out_of_fold_loss(diabetes):
    """average="samples": the MSE of scikit-learn's out-of-fold predictions over all samples,
    which differs from the fold mean on these unequal folds."""
    X, y, cv, grid, store, result = diabetes
    table = cvflow.cv_results(result, ["squared"])
    folds = cvflow.cv_results(result, ["squared"], average="folds")
    for h, alpha in enumerate(grid["alpha"]):
        oof = cross_val_predict(Ridge(alpha=alpha), X, y, cv=cv)
        assert table["mean_test_squared"][h] == pytest.approx(mean_squared_error(y, oof), rel=1e-12)
    gap = np.abs(table["mean_test_squared"] - folds["mean_test_squared"])
    assert (gap > 1e-6).all()
    _compare(table, {k: folds[k] for k in folds if k.startswith("split")})


def test_classification_metrics_and_train_scores_equal_gridsearchcv(tmp_path):
    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:200], y[:200]
    model = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [0.001, 0.01, 0.1, 1.0]}
    cv = StratifiedKFold(4, shuffle=True, random_state=1)
    result = cvflow.Study(model, param_grid=grid, cv=cv, output="predict_proba").run(
        X, y, store=tmp_path / "bc.zarr", progress=False)
    scoring = ["accuracy", "balanced_accuracy", "f1", "roc_auc", "neg_log_loss",
               "neg_brier_score", "matthews_corrcoef"]
    gs = GridSearchCV(model, grid, cv=cv, scoring=scoring, refit=False,
                      return_train_score=True).fit(X, y)
    table = cvflow.cv_results(result, scoring, average="folds", train=True)
    for key in [k for k in gs.cv_results_ if "_test_" in k or "_train_" in k]:
        np.testing.assert_allclose(table[key].to_numpy(dtype=float), gs.cv_results_[key],
                                   err_msg=key, **TOL)


def test_repeated_kfold_numbers_splits_as_scikit_learn(tmp_path):
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:150], y[:150]
    cv = RepeatedKFold(n_splits=3, n_repeats=2, random_state=0)
    grid = {"alpha": [0.1, 10.0]}
    result = cvflow.Study(Ridge(), param_grid=grid, cv=cv).run(
        X, y, store=tmp_path / "rep.zarr", progress=False)
    gs = GridSearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
    table = cvflow.cv_results(result, "neg_mean_squared_error", average="folds")
    keys = _compare(table, gs.cv_results_)
    assert "split5_test_score" in keys


def test_a_missing_fit_ranks_last_and_is_nan():
    design = simple_design(12, 3, seed=0)
    rng = np.random.default_rng(0)
    y = rng.normal(size=12)
    pred = y + rng.normal(scale=[[0.1], [1.0], [0.5]], size=(3, 12))[:, None, :].repeat(
        design.n_splits, 1)
    pred[0, design.fold_split[0, 1]] = np.nan                # param 0: one fold fit failed
    table = cvflow.cv_results(cube_from_predictions(pred, y, design), ["squared"])
    assert np.isnan(table["mean_test_squared"][0])
    assert table["rank_test_squared"].tolist() == [3, 2, 1]


def test_bad_arguments_are_refused_with_one_line(diabetes):
    store = diabetes[4]
    with pytest.raises(InputError, match="cv_results: average='pooled'; use 'samples' or 'folds'"):
        cvflow.cv_results(store, average="pooled")
    with pytest.raises(InputError, match="'adjusted_rand_score' has no cvflow loss"):
        cvflow.cv_results(store, ["adjusted_rand_score"])
    with pytest.raises(InputError, match="'accuracy' is not a regression loss"):
        cvflow.cv_results(store, ["accuracy"])
    with pytest.raises(InputError, match="'squared' is given twice"):
        cvflow.cv_results(store, ["squared", "squared"])
    with pytest.raises(InputError, match="cv_results: list is not a store"):
        cvflow.cv_results([1, 2])


def test_kfold_average_option(diabetes):
    """kfold(average="folds") is GridSearchCV's mean_test_score (sign aside); its default stays
    the pooled mean; a bad value is refused naming the option."""
    X, y, cv, grid, store, _ = diabetes
    cube = cvflow.open(store)
    gs = GridSearchCV(Ridge(), grid, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
    res = kfold(cube, average="folds")
    np.testing.assert_allclose(res["estimate"], -gs.cv_results_["mean_test_score"], **TOL)
    assert int(res["selected"]) == gs.best_index_ and res.attrs["average"] == "folds"
    assert kfold(cube).attrs["average"] == "samples"
    with pytest.raises(InputError, match="kfold.average: 'mean'; use one of 'samples', 'folds'"):
        kfold(cube, average="mean")


def test_kfold_average_in_a_workflow_and_report(tmp_path):
    import json

    from cvtest import QUICK, run_cli

    wf = tmp_path / "wf.yaml"
    wf.write_text(QUICK.replace("estimators: [kfold]",
                                "estimators: [{kfold: {average: folds}}]"))
    store = tmp_path / "q.zarr"
    assert run_cli("run", wf, "--store", store, "--workers", "1").returncode == 0
    out = run_cli("report", store, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kfold"]["average"] == "folds"
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICK.replace("estimators: [kfold]", "estimators: [{kfold: {average: x}}]"))
    done = run_cli("validate", bad)
    assert done.returncode == 2
    assert "kfold.average: 'x'; use one of 'samples', 'folds'" in done.stderr
