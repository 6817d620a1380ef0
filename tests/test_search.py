"""cvflow.SearchCV against GridSearchCV on the same folds and scoring, and as a scikit-learn citizen."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import cvflow
from cvflow.estimators import corrected_kfold, cv_confidence

TOL = dict(rtol=1e-12, atol=1e-12)


def assert_same_search(ours, ref):
    """best_*, n_splits_ and every cv_results_ key but the timings equal GridSearchCV's."""
    assert ours.best_index_ == ref.best_index_
    assert ours.best_params_ == ref.best_params_
    assert ours.n_splits_ == ref.n_splits_
    if isinstance(ref.best_score_, float):
        assert ours.best_score_ == pytest.approx(ref.best_score_, rel=1e-12, abs=1e-12)
    timing = {"mean_score_time", "std_score_time"}
    assert set(ref.cv_results_) - set(ours.cv_results_) == timing
    assert set(ours.cv_results_) <= set(ref.cv_results_)
    for key, want in ref.cv_results_.items():
        if key in timing:
            continue
        got = ours.cv_results_[key]
        if key == "params":
            assert got == want
        elif key.startswith("param_"):
            assert list(np.ma.getmaskarray(got)) == list(np.ma.getmaskarray(want)), key
            assert [v for v in np.ma.compressed(got)] == [v for v in np.ma.compressed(want)], key
        elif key.startswith("rank_"):
            np.testing.assert_array_equal(got, want, err_msg=key)
        elif key.endswith("fit_time"):
            assert got.shape == want.shape and (got >= 0).all()
        else:
            np.testing.assert_allclose(got, want, err_msg=key, **TOL)


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:300], y[:300]


# grid names out of sorted order: candidates must still come in ParameterGrid's order
RIDGE_GRID = {"fit_intercept": [True, False], "alpha": [0.01, 0.3, 10.0]}


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "neg_mean_absolute_error",
                                     "explained_variance"])
def test_regression_equals_gridsearchcv(diabetes, scoring):
    X, y = diabetes
    cv = KFold(4, shuffle=True, random_state=0)               # 300 / 4: equal; 7 below: not
    for folds in (cv, 7):
        ours = cvflow.SearchCV(Ridge(), RIDGE_GRID, cv=folds, scoring=scoring,
                               cluster="threads").fit(X, y)
        ref = GridSearchCV(Ridge(), RIDGE_GRID, cv=folds, scoring=scoring).fit(X, y)
        assert_same_search(ours, ref)
        np.testing.assert_allclose(ours.predict(X), ref.predict(X), **TOL)
        assert ours.score(X, y) == pytest.approx(ref.score(X, y), rel=1e-12)
        assert ours.refit_time_ >= 0


def test_multimetric_with_train_scores_and_refit_name(diabetes):
    X, y = diabetes
    scoring = ["r2", "neg_mean_squared_error"]
    kw = dict(cv=5, scoring=scoring, refit="neg_mean_squared_error", return_train_score=True)
    ours = cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **kw).fit(X, y)
    ref = GridSearchCV(Ridge(), RIDGE_GRID, **kw).fit(X, y)
    assert_same_search(ours, ref)
    assert ours.multimetric_ and "mean_train_r2" in ours.cv_results_


@pytest.mark.parametrize("scoring", ["accuracy", "roc_auc", "neg_log_loss", "f1",
                                     "balanced_accuracy", "neg_brier_score"])
def test_binary_classification_equals_gridsearchcv(scoring):
    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:240], y[:240]
    model = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [0.003, 0.03, 0.3, 3.0]}
    cv = StratifiedKFold(5, shuffle=True, random_state=2)
    ours = cvflow.SearchCV(model, grid, cv=cv, scoring=scoring, cluster="threads").fit(X, y)
    ref = GridSearchCV(model, grid, cv=cv, scoring=scoring).fit(X, y)
    assert_same_search(ours, ref)
    assert is_classifier(ours) and list(ours.classes_) == [0, 1]
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), **TOL)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), **TOL)
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), rel=1e-12)


def test_multiclass_equals_gridsearchcv():
    X, y = load_wine(return_X_y=True)
    model = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [0.001, 0.01, 1.0]}
    scoring = ["f1_macro", "accuracy", "roc_auc_ovr", "neg_log_loss"]
    ours = cvflow.SearchCV(model, grid, cv=3, scoring=scoring, refit="f1_macro",
                           cluster="threads").fit(X, y)
    ref = GridSearchCV(model, grid, cv=3, scoring=scoring, refit="f1_macro").fit(X, y)
    assert_same_search(ours, ref)


def test_nested_cross_validate_and_pipeline_equal_scikit_learn(diabetes):
    X, y = diabetes
    inner = dict(cv=3, scoring="neg_mean_squared_error")
    ours = cross_validate(cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **inner),
                          X, y, cv=3, scoring="r2")
    ref = cross_validate(GridSearchCV(Ridge(), RIDGE_GRID, **inner), X, y, cv=3, scoring="r2")
    np.testing.assert_allclose(ours["test_score"], ref["test_score"], **TOL)
    pipe = make_pipeline(StandardScaler(), cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads",
                                                           **inner)).fit(X, y)
    want = make_pipeline(StandardScaler(), GridSearchCV(Ridge(), RIDGE_GRID, **inner)).fit(X, y)
    np.testing.assert_allclose(pipe.predict(X), want.predict(X), **TOL)


def test_iterable_cv_equals_gridsearchcv(diabetes):
    X, y = diabetes
    splits = list(KFold(3, shuffle=True, random_state=5).split(X))
    ours = cvflow.SearchCV(Ridge(), RIDGE_GRID, cv=splits, scoring="r2", cluster="threads").fit(X, y)
    assert_same_search(ours, GridSearchCV(Ridge(), RIDGE_GRID, cv=splits, scoring="r2").fit(X, y))
    with pytest.raises(ValueError, match="SearchCV: cv never tests some samples"):
        cvflow.SearchCV(Ridge(), RIDGE_GRID, cv=splits[:2], cluster="threads").fit(X, y)


def test_other_selecting_estimators_choose_and_keep_the_cube(diabetes, tmp_path):
    X, y = diabetes
    grid = {"alpha": list(np.logspace(-2, 3, 8))}
    store = tmp_path / "kept.zarr"
    search = cvflow.SearchCV(Ridge(), grid, cv=5, scoring="neg_mean_squared_error",
                             select="corrected_kfold", store=store, cluster="threads",
                             estimators=["kfold"]).fit(X, y)
    cube = cvflow.open(search.store_)
    assert search.store_ == str(store)
    assert search.best_index_ == int(corrected_kfold(cube, loss="squared")["selected"])
    assert set(search.result_.results) == {"corrected_kfold", "kfold"}
    simplest = {"cv_confidence": {"simplest": {"alpha": "max"}, "alpha": 0.2}}
    conf = cvflow.SearchCV(Ridge(), grid, cv=5, scoring="neg_mean_squared_error",
                           select=simplest, cluster="threads").fit(X, y)
    want = cv_confidence(cvflow.open(conf.store_), loss="squared", alpha=0.2,
                         simplest={"alpha": "max"})
    assert conf.best_index_ == int(want["simplest"])
    assert conf.best_params_ == {"alpha": grid["alpha"][conf.best_index_]}
    assert conf.best_score_ == conf.cv_results_["mean_test_score"][conf.best_index_]
    nested = cvflow.SearchCV(Ridge(), grid, cv=4, scoring="neg_mean_squared_error",
                             select={"stability_nested": {"lambdas": [0, 1]}},
                             cluster="threads").fit(X, y)
    assert nested.best_index_ == int(nested.result_["stability_nested"]["selected"])


def test_refusals_are_one_clear_line(diabetes):
    from sklearn.metrics import make_scorer, mean_squared_error

    X, y = diabetes
    cases = [
        (dict(scoring=make_scorer(mean_squared_error)),
         "scoring=make_scorer.*a scorer object has no cvflow loss"),
        (dict(scoring="neg_root_mean_squared_error"),
         "'neg_root_mean_squared_error' has no cvflow loss"),
        (dict(scoring="accuracy"), "scoring 'accuracy' is a classification score, and Ridge is "
                                   "a regressor"),
        (dict(select="bates_ncv"), "select='bates_ncv' is not a selecting estimator; use one of"),
        (dict(scoring=["r2", "neg_mean_squared_error"]),
         "with several scorings, refit names the one that selects"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **kwargs).fit(X, y)
    with pytest.raises(ValueError, match="fit parameter 'check_input' is not supported"):
        cvflow.SearchCV(Ridge(), RIDGE_GRID).fit(X, y, check_input=False)


def test_scikit_learn_conventions(diabetes):
    X, y = diabetes
    search = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3, cluster="threads")
    copy = clone(search)
    assert copy.get_params()["param_grid"] == {"alpha": [0.1, 1.0]}
    assert copy.set_params(estimator__alpha=5.0).estimator.alpha == 5.0
    assert is_regressor(search) and not is_classifier(search)
    assert not hasattr(search, "predict_proba") and hasattr(search, "predict")
    unrefit = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3, refit=False,
                              cluster="threads").fit(X, y)
    assert unrefit.best_params_ in ({"alpha": 0.1}, {"alpha": 1.0})
    with pytest.raises(AttributeError, match="has no attribute 'predict'") as info:
        unrefit.predict(X)
    assert "fitted with refit=False" in str(info.value.__cause__)
    assert not hasattr(unrefit, "best_estimator_")


def test_temporary_store_lives_with_the_search(diabetes):
    X, y = diabetes
    search = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3, cluster="threads").fit(X, y)
    first = Path(search.store_)
    assert cvflow.open(first)["pred"].shape[0] == 2
    search.fit(X, y)                                      # a refit replaces it
    assert not first.parent.exists() and Path(search.store_).exists()
    second = Path(search.store_)
    del search
    gc.collect()
    assert not second.parent.exists()


def test_default_distributed_client_runs_every_fit(diabetes):
    """One cluster for all the searches of a nested CV: the default client is used."""
    from distributed import Client

    X, y = diabetes
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None):
        search = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3).fit(X, y)
    assert search.result_.run.execution == "the given client"


def test_fresh_interpreter_default_route(tmp_path):
    """As a user runs it, in a fresh interpreter: the default cluster (auto: so short a
    search stays in this process, issue 31) gives GridSearchCV's choice."""
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from sklearn.datasets import load_breast_cancer
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import GridSearchCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        import cvflow

        X, y = load_breast_cancer(return_X_y=True)
        X = X[:150, :5]; y = y[:150]
        model = make_pipeline(StandardScaler(), LogisticRegression())
        grid = {"logisticregression__C": [0.01, 1.0]}
        ours = cvflow.SearchCV(model, grid, cv=3).fit(X, y)
        ref = GridSearchCV(model, grid, cv=3).fit(X, y)
        assert ours.best_params_ == ref.best_params_, (ours.best_params_, ref.best_params_)
        assert abs(ours.best_score_ - ref.best_score_) < 1e-12
        print("execution:", ours.result_.run.execution.split(":")[0])
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("execution: threads")
