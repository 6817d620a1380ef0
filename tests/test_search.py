"""cvflow.SearchCV against GridSearchCV on the same folds and scoring, and as a scikit-learn citizen."""
from __future__ import annotations

import gc
import re
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
    """best_*, n_splits_ and cv_results_ (its keys in order, their dtypes, every value but the
    timings) equal GridSearchCV's."""
    for name in ("best_index_", "best_params_", "best_score_"):
        assert hasattr(ours, name) == hasattr(ref, name), name
    if hasattr(ref, "best_index_"):
        assert ours.best_index_ == ref.best_index_
        assert type(ours.best_index_) is type(ref.best_index_)
        assert ours.best_params_ == ref.best_params_
    assert ours.n_splits_ == ref.n_splits_
    if hasattr(ref, "best_score_"):
        assert ours.best_score_ == pytest.approx(ref.best_score_, rel=1e-12, abs=1e-12,
                                                 nan_ok=True)
    assert list(ours.cv_results_) == list(ref.cv_results_)
    for key, want in ref.cv_results_.items():
        got = ours.cv_results_[key]
        if key == "params":
            assert got == want
            continue
        assert type(got) is type(want) and got.dtype == want.dtype, key
        if key.startswith("param_"):
            assert list(np.ma.getmaskarray(got)) == list(np.ma.getmaskarray(want)), key
            assert [v for v in np.ma.compressed(got)] == [v for v in np.ma.compressed(want)], key
        elif key.startswith("rank_"):
            np.testing.assert_array_equal(got, want, err_msg=key)
        elif key.endswith("_time"):
            assert got.shape == want.shape and (got >= 0).all(), key
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
    want = cv_confidence(conf.cube_, loss="squared", alpha=0.2,
                         simplest={"alpha": "max"})
    assert conf.best_index_ == int(want["simplest"])
    assert conf.best_params_ == {"alpha": grid["alpha"][conf.best_index_]}
    assert conf.best_score_ == conf.cv_results_["mean_test_score"][conf.best_index_]
    nested = cvflow.SearchCV(Ridge(), grid, cv=4, scoring="neg_mean_squared_error",
                             select={"stability_nested": {"lambdas": [0, 1]}},
                             cluster="threads").fit(X, y)
    assert nested.best_index_ == int(nested.result_["stability_nested"]["selected"])


def test_temporary_cube_fits_the_folds_alone_and_a_given_store_the_full_data_too(diabetes,
                                                                                tmp_path):
    """As GridSearchCV, a search without a store fits each candidate on the folds only (its
    refit is best_estimator_): the cube has no full split unless an estimator reads one; a
    given store keeps the full fits (its reports show them). Counted by a learner that
    records the size of every training set it is fitted on."""
    X, y = diabetes
    grid = {"alpha": [0.1, 1.0]}
    seen = []

    class Counting(Ridge):
        def fit(self, X, y, sample_weight=None):
            from cvflow.fitting.trial import in_trial

            if not in_trial():
                seen.append(len(X))
            return super().fit(X, y, sample_weight=sample_weight)

    temporary = cvflow.SearchCV(Counting(), grid, cv=KFold(4), cluster="threads").fit(X, y)
    assert int(temporary.result_.cube.attrs["full_split"]) == -1
    # 2 candidates x 4 folds of 3/4 of the data, then the refit on all of it
    assert sorted(seen) == sorted([len(y) - len(y) // 4 - (i < len(y) % 4)
                                   for i in range(4)] * 2 + [len(y)])
    reference = GridSearchCV(Ridge(), grid, cv=KFold(4)).fit(X, y)
    assert_same_search(temporary, reference)
    seen.clear()
    kept = cvflow.SearchCV(Counting(), grid, cv=KFold(4), cluster="threads",
                           store=tmp_path / "kept.zarr").fit(X, y)
    assert int(kept.result_.cube.attrs["full_split"]) >= 0
    assert seen.count(len(y)) == 2 + 1              # each candidate's full fit, the refit
    # an estimator that reads the full fit gets it in a temporary cube too
    corrected = cvflow.SearchCV(Ridge(), grid, cv=KFold(4), cluster="threads",
                                scoring="neg_mean_squared_error",
                                select="corrected_kfold").fit(X, y)
    assert int(corrected.result_.cube.attrs["full_split"]) >= 0


def test_accuracy_of_an_svc_is_scored_on_its_predict_as_gridsearchcv_scores_it():
    """An SVC's predict (one-vs-one votes) is not always the argmax of its decision_function
    (one-vs-rest shape): on digits at C = 0.1 they disagree on a few samples. With a label
    scoring (the default accuracy) the cube stores predict, so cv_results_ equals
    GridSearchCV's (before: 0.94437 against its 0.94325)."""
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    grid = {"C": [0.1, 1.0]}
    ours = cvflow.SearchCV(SVC(gamma=0.001), grid, cv=5, cluster="threads").fit(X, y)
    ref = GridSearchCV(SVC(gamma=0.001), grid, cv=5).fit(X, y)
    assert_same_search(ours, ref)


def test_knn_ties_break_as_under_gridsearchcv_with_one_openmp_thread_per_worker():
    """KNeighbors breaks ties between equidistant neighbours by how its OpenMP threads split
    the distance computation: on this digits split GridSearchCV(n_jobs=None) (an OpenMP thread
    per core) scores fold 0 at n_neighbors=5 one sample apart from the same search with one
    OpenMP thread, as GridSearchCV(n_jobs=2)'s workers run (checked first where there are
    several cores). cvflow fits every block with one OpenMP thread: its cv_results_ equal the
    one-thread GridSearchCV's exactly (docs/guide/searchcv.md says so)."""
    import os

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier
    from threadpoolctl import threadpool_limits

    X, y = load_digits(return_X_y=True)
    X, _, y, _ = train_test_split(X, y, random_state=0)
    grid = {"n_neighbors": [3, 5]}
    with threadpool_limits(1, user_api="openmp"):
        ref = GridSearchCV(KNeighborsClassifier(), grid, cv=5).fit(X, y)
    if (os.cpu_count() or 1) > 1:
        many = GridSearchCV(KNeighborsClassifier(), grid, cv=5).fit(X, y)
        assert many.cv_results_["split0_test_score"][1] != ref.cv_results_["split0_test_score"][1]
    ours = cvflow.SearchCV(KNeighborsClassifier(), grid, cv=5, cluster="threads").fit(X, y)
    assert_same_search(ours, ref)


def test_refusals_are_one_clear_line(diabetes):
    from sklearn.metrics import make_scorer, mean_squared_error

    X, y = diabetes
    cases = [
        (dict(scoring="sklearn"), "'sklearn' is not a valid scoring value. Use "
                                  r"sklearn.metrics.get_scorer_names\(\)"),
        (dict(scoring=make_scorer(mean_squared_error), select="corrected_kfold"),
         "select='corrected_kfold' reduces stored predictions with a loss, but scoring is a "
         "scorer computed at fit time; use select='kfold'"),
        (dict(scoring="adjusted_rand_score", racing={"alpha": 0.05}),
         "racing compares per-sample losses, but scoring 'adjusted_rand_score' is a "
         "scorer computed at fit time"),
        (dict(scoring="accuracy"), "scoring 'accuracy' is a classification score, and Ridge is "
                                   "a regressor"),
        (dict(select="bates_ncv"), "select='bates_ncv' is not a selecting estimator; use one of"),
        (dict(scoring=["r2", "neg_mean_squared_error"]),
         "For multi-metric scoring, the parameter refit must be set to a scorer key"),
        (dict(error_score="ignore"), "SearchCV: error_score='ignore'; give 'raise' or a number"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **kwargs).fit(X, y)


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
    assert ("`refit=False`. predict is available only after refitting on the best parameters"
            in str(info.value.__cause__))
    assert not hasattr(unrefit, "best_estimator_")


def test_a_search_without_a_store_keeps_its_cube_in_memory_and_saves_it(diabetes, tmp_path,
                                                                          monkeypatch):
    """No store asked: nothing is written (DESIGN.md section 3), the cube is in memory
    (``cube_``), ``save(path)`` writes the store a run with ``store=`` writes, which
    ``cvflow.open`` reads back value for value and whose ``cv_results`` are the search's."""
    monkeypatch.chdir(tmp_path)
    X, y = diabetes
    grid = {"alpha": [0.1, 1.0, 10.0]}
    search = cvflow.SearchCV(Ridge(), grid, cv=KFold(3), scoring="neg_mean_squared_error",
                             cluster="threads").fit(X, y)
    assert search.store_ is None and list(tmp_path.iterdir()) == []
    cube = search.cube_
    assert cube["pred"].shape == (3, 3, len(y)) and cube["done"].values.all()
    path = search.save(tmp_path / "saved.zarr")
    saved = cvflow.open(path)
    assert set(saved.variables) == set(cube.variables)
    for name in cube.variables:
        a, b = cube[name].values, saved[name].values
        if a.dtype.kind == "f":
            assert np.array_equal(a, b, equal_nan=True), name
            assert a.tobytes() == np.asarray(b, dtype=a.dtype).tobytes(), name
        elif a.dtype == object:                     # strings (read back as numpy's StringDType)
            assert [str(v) for v in a.ravel()] == [str(v) for v in np.asarray(b).ravel()], name
        else:
            assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert {k: v for k, v in saved.attrs.items()} == dict(cube.attrs)
    # the held-out folds' predictions are scikit-learn's own (cross_val_predict's folds)
    from sklearn.model_selection import cross_val_predict

    oof = np.full(len(y), np.nan)
    fold_split = saved["fold_split"].values[0]
    fold = saved["fold"].values[0]
    for j, s in enumerate(fold_split):
        oof[fold == j] = saved["pred"].values[1, s][fold == j]
    np.testing.assert_allclose(oof, cross_val_predict(Ridge(alpha=1.0), X, y, cv=KFold(3)),
                               rtol=1e-10)
    table = cvflow.cv_results(path, "neg_mean_squared_error", average="folds")
    np.testing.assert_allclose(table["mean_test_score"], search.cv_results_["mean_test_score"],
                               rtol=1e-12)
    reference = GridSearchCV(Ridge(), grid, cv=KFold(3), scoring="neg_mean_squared_error").fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=1e-12)
    with pytest.raises(cvflow.errors.StoreError, match="already exists"):
        search.save(path)


def test_a_search_saves_its_store_from_a_running_event_loop(diabetes, tmp_path):
    """``save(path)`` in a thread that runs an event loop (a Jupyter notebook's cell; here an
    ``async def`` under ``asyncio.run``) writes the store, whose ``cv_results`` are
    ``GridSearchCV``'s: the store's creation runs zarr's asynchronous API on a loop of its own,
    not with ``asyncio.run`` in the caller's loop (which raised RuntimeError)."""
    import asyncio

    X, y = diabetes
    grid = {"alpha": [0.1, 1.0, 10.0]}
    search = cvflow.SearchCV(Ridge(), grid, cv=KFold(3), scoring="neg_mean_squared_error",
                             cluster="threads").fit(X, y)

    async def cell():
        return search.save(tmp_path / "saved.zarr")

    path = asyncio.run(cell())
    table = cvflow.cv_results(path, "neg_mean_squared_error", average="folds")
    reference = GridSearchCV(Ridge(), grid, cv=KFold(3), scoring="neg_mean_squared_error").fit(X, y)
    np.testing.assert_allclose(table["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=1e-12)


def test_temporary_store_of_a_raced_search_lives_with_the_search(diabetes):
    X, y = diabetes
    search = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3, cluster="threads",
                             scoring="neg_mean_squared_error", racing={"alpha": 0.05}).fit(X, y)
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


# -- GridSearchCV's keywords and semantics (issue 31) --------------------------------------------

def test_signature_starts_as_gridsearchcv_and_round_trips():
    import inspect

    ours = inspect.signature(cvflow.SearchCV).parameters
    ref = inspect.signature(GridSearchCV).parameters
    shared = [n for n in ours if n in ref]
    assert shared == list(ref)                       # every GridSearchCV keyword, in its order
    for name in ref:                                 # the same defaults (NaN is NaN)
        want, got = ref[name].default, ours[name].default
        assert got is want or got == want or (got != got and want != want), name
    search = cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, n_jobs=2, verbose=1, pre_dispatch=4,
                             error_score="raise")
    copy = clone(search)
    assert {k: v for k, v in copy.get_params(deep=False).items() if k != "estimator"} == \
        {k: v for k, v in search.get_params(deep=False).items() if k != "estimator"}
    assert copy.set_params(n_jobs=3, error_score=0.0).get_params()["n_jobs"] == 3
    assert search._workers() == 2
    assert cvflow.SearchCV(Ridge(), {}, n_jobs=-1)._workers() is None
    assert cvflow.SearchCV(Ridge(), {}, n_jobs=4, workers=1)._workers() == 1


def test_verbose_prints_gridsearchcv_lines(diabetes, capsys):
    import re

    X, y = diabetes
    kw = dict(cv=3, scoring="r2", verbose=3, return_train_score=True)
    GridSearchCV(Ridge(), {"alpha": [0.1, 1.0]}, **kw).fit(X, y)
    want = capsys.readouterr().out.splitlines()
    cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cluster="threads", **kw).fit(X, y)
    got = capsys.readouterr().out.splitlines()
    strip = re.compile(r"total time=.*$")
    assert [strip.sub("", line) for line in got] == [strip.sub("", line) for line in want]
    assert got[0] == "Fitting 3 folds for each of 2 candidates, totalling 6 fits"


def _one_class_folds():
    """KFold(3) over sorted labels: the first fold's training set has one class, so that fit
    of every candidate fails (LogisticRegression needs two)."""
    X = np.random.default_rng(0).normal(size=(30, 3))
    return X, np.array([0] * 10 + [1] * 20)


@pytest.mark.parametrize("error_score", [np.nan, -1.0])
def test_failed_fits_score_error_score_and_warn_as_gridsearchcv(error_score):
    from sklearn.exceptions import FitFailedWarning

    X, y = _one_class_folds()
    kw = dict(cv=KFold(3), error_score=error_score, return_train_score=True)
    grid = {"C": [0.1, 1.0]}
    message = (r"2 fits failed out of a total of 6.+will be set to " + str(error_score) +
               r".+2 fits failed with the following error.+ValueError: This solver needs "
               r"samples of at least 2 classes")
    with pytest.warns(FitFailedWarning, match=re.compile(message, re.DOTALL)):
        ours = cvflow.SearchCV(LogisticRegression(), grid, cluster="threads", **kw).fit(X, y)
    with pytest.warns(FitFailedWarning):
        ref = GridSearchCV(LogisticRegression(), grid, **kw).fit(X, y)
    assert_same_search(ours, ref)
    assert (ours.cv_results_["mean_score_time"] >= 0).all()
    assert (ours.cv_results_["split0_test_score"] == error_score).all() or np.isnan(error_score)


def test_all_fits_failed_and_error_score_raise_as_gridsearchcv(diabetes):
    from sklearn.utils._param_validation import InvalidParameterError

    X, y = diabetes
    grid = {"alpha": [-1.0, -2.0]}
    # scikit-learn groups the messages as they are (two groups: alpha -1.0 and -2.0), cvflow
    # up to the numbers they embed (one group of 6)
    for search, count in ((GridSearchCV(Ridge(), grid, cv=3), 3),
                          (cvflow.SearchCV(Ridge(), grid, cv=3, cluster="threads"), 6)):
        with pytest.raises(ValueError, match=re.compile(
                rf"^\nAll the 6 fits failed.+{count} fits failed with the following error.+"
                "The 'alpha' parameter of Ridge must be", re.DOTALL)):
            search.fit(X, y)
    X1, y1 = _one_class_folds()
    for search in (GridSearchCV(LogisticRegression(), {"C": [1.0]}, cv=KFold(3),
                                error_score="raise"),
                   cvflow.SearchCV(LogisticRegression(), {"C": [1.0]}, cv=KFold(3),
                                   error_score="raise", cluster="threads")):
        with pytest.raises(ValueError, match="needs samples of at least 2 classes"):
            search.fit(X1, y1)
    with pytest.raises(InvalidParameterError):       # the learner's own exception type
        cvflow.SearchCV(Ridge(), grid, cv=3, error_score="raise", cluster="threads").fit(X, y)


def test_refit_callable_as_gridsearchcv(diabetes):
    X, y = diabetes
    grid = {"alpha": [0.1, 1.0, 10.0]}

    def worst(cv_results):
        return int(np.argmin(cv_results["mean_test_score"]))

    ours = cvflow.SearchCV(Ridge(), grid, cv=3, refit=worst, cluster="threads").fit(X, y)
    ref = GridSearchCV(Ridge(), grid, cv=3, refit=worst).fit(X, y)
    assert_same_search(ours, ref)
    assert not hasattr(ours, "best_score_")
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), **TOL)
    for refit, error, message in [(lambda r: "1", TypeError, "best_index_ returned is not an "
                                   "integer"), (lambda r: 3, IndexError, "best_index_ index out "
                                                "of range")]:
        for search in (GridSearchCV(Ridge(), grid, cv=3, refit=refit),
                       cvflow.SearchCV(Ridge(), grid, cv=3, refit=refit, cluster="threads")):
            with pytest.raises(error, match=message):
                search.fit(X, y)


def test_refit_false_with_several_scorings_sets_no_best(diabetes):
    X, y = diabetes
    kw = dict(cv=3, scoring={"mse": "neg_mean_squared_error", "r2": "r2"}, refit=False)
    ours = cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **{**kw, "refit": "mse"})
    assert hasattr(ours.fit(X, y), "best_estimator_")
    ours.set_params(refit=False).fit(X, y)               # the earlier fit's best_* go
    assert_same_search(ours, GridSearchCV(Ridge(), RIDGE_GRID, **kw).fit(X, y))
    assert not hasattr(ours, "best_index_") and not hasattr(ours, "best_estimator_")
    assert "mean_test_mse" in ours.cv_results_
    with pytest.raises(AttributeError) as info:
        ours.predict(X)
    assert "`refit=False`. predict is available only after" in str(info.value.__cause__)


def test_fitted_estimator_is_cloned(diabetes):
    X, y = diabetes
    given = Ridge().fit(X, y)
    search = cvflow.SearchCV(given, {"alpha": [0.1, 1.0]}, cv=3, cluster="threads").fit(X, y)
    ref = GridSearchCV(given, {"alpha": [0.1, 1.0]}, cv=3).fit(X, y)
    assert_same_search(search, ref)
    assert search.best_estimator_ is not given and given.alpha == 1.0


def test_param_columns_follow_gridsearchcv_dtypes():
    from sklearn.svm import SVC

    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:120, :4], y[:120]
    grid = [{"kernel": ["rbf"], "C": [1, 10], "gamma": [0.1, 1.0]},
            {"kernel": ["poly"], "degree": [1, 2], "class_weight": [None, "balanced"]}]
    ours = cvflow.SearchCV(SVC(), grid, cv=3, cluster="threads").fit(X, y)
    ref = GridSearchCV(SVC(), grid, cv=3).fit(X, y)
    assert_same_search(ours, ref)
    assert {k: v.dtype.kind for k, v in ours.cv_results_.items() if k.startswith("param_")} == \
        {"param_C": "i", "param_gamma": "f", "param_kernel": "O", "param_class_weight": "O",
         "param_degree": "i"}


def test_nan_scores_rank_last_and_warn_as_gridsearchcv():
    """r2 of one-sample test folds is NaN: every mean is NaN, the first candidate is chosen."""
    import warnings

    from sklearn.tree import DecisionTreeRegressor

    X, y = np.arange(5.0)[:, None], np.array([0.0, 0, 0, 0, 1])
    grid = {"max_depth": [1, 2]}
    found = []
    for search in (GridSearchCV(DecisionTreeRegressor(random_state=0), grid, cv=KFold(5)),
                   cvflow.SearchCV(DecisionTreeRegressor(random_state=0), grid, cv=KFold(5),
                                   cluster="threads")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            search.fit(X, y)
        found.append([str(w.message) for w in caught if w.category is UserWarning
                      and "non-finite" in str(w.message)])
    assert found[0] == found[1] == ["One or more of the test scores are non-finite: [nan nan]"]
    assert_same_search(search, GridSearchCV(DecisionTreeRegressor(random_state=0), grid,
                                            cv=KFold(5)).fit(X, y))


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "neg_mean_absolute_error",
                                     "neg_root_mean_squared_error", "r2"])
def test_sample_weight_scores_weighted_as_gridsearchcv(diabetes, scoring):
    X, y = diabetes
    w = np.random.default_rng(1).integers(0, 4, size=len(y)).astype(float)
    kw = dict(cv=KFold(4, shuffle=True, random_state=0), scoring=scoring,
              return_train_score=True)
    ours = cvflow.SearchCV(Ridge(), RIDGE_GRID, cluster="threads", **kw).fit(X, y, sample_weight=w)
    ref = GridSearchCV(Ridge(), RIDGE_GRID, **kw).fit(X, y, sample_weight=w)
    assert_same_search(ours, ref)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), **TOL)


@pytest.mark.parametrize("scoring", [None, "roc_auc", "neg_log_loss", "f1", "neg_brier_score"])
def test_sample_weight_classification_as_gridsearchcv(scoring):
    X, y = load_breast_cancer(return_X_y=True)
    X, y = StandardScaler().fit_transform(X[:200]), y[:200]
    w = np.random.default_rng(2).uniform(0.2, 3.0, size=len(y))
    grid = {"C": [0.01, 1.0]}
    kw = dict(cv=StratifiedKFold(4, shuffle=True, random_state=0), scoring=scoring,
              return_train_score=True)
    ours = cvflow.SearchCV(LogisticRegression(), grid, cluster="threads", **kw).fit(
        X, y, sample_weight=w)
    assert_same_search(ours, GridSearchCV(LogisticRegression(), grid, **kw).fit(
        X, y, sample_weight=w))


@pytest.mark.parametrize("cluster", ["threads", None])
def test_balanced_sample_weight_of_the_benchmark_as_gridsearchcv(cluster):
    """benchmarks/searchcv_cases.py case d: a tree fitted with balanced weights. Its best_score_
    was the mean of unweighted fold accuracies (0.9384878125, at 8336b7b) where GridSearchCV
    weights each fold's accuracy by the fold's weights (0.9395102193): scikit-learn 1.9 passes
    sample_weight to every scorer that takes it (BaseSearchCV._get_routed_params_for_fit)."""
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.utils.class_weight import compute_sample_weight

    X, y = load_breast_cancer(return_X_y=True)
    w = compute_sample_weight("balanced", y)
    grid = {"max_depth": [2, 4, 8]}
    ours = cvflow.SearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5,
                           cluster=cluster).fit(X, y, sample_weight=w)
    ref = GridSearchCV(DecisionTreeClassifier(random_state=0), grid, cv=5).fit(
        X, y, sample_weight=w)
    assert_same_search(ours, ref)
    assert ours.best_score_ == pytest.approx(0.9395102193289899, rel=1e-12)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))       # the weighted refit


def test_balanced_sample_weight_multiclass_scorings_as_gridsearchcv():
    """Weighted test and train scores of a multiclass target on unequal folds, for scorings
    that are cvflow losses and per-fold metrics alike."""
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.utils.class_weight import compute_sample_weight

    X, y = load_wine(return_X_y=True)
    w = compute_sample_weight("balanced", y)
    scoring = ["accuracy", "balanced_accuracy", "f1_macro", "f1_weighted", "roc_auc_ovr",
               "neg_log_loss", "precision_macro", "recall_macro"]
    kw = dict(cv=4, scoring=scoring, refit="balanced_accuracy", return_train_score=True)
    grid = {"max_depth": [1, 2, 4]}
    ours = cvflow.SearchCV(DecisionTreeClassifier(random_state=0), grid, cluster="threads",
                           **kw).fit(X, y, sample_weight=w)
    assert_same_search(ours, GridSearchCV(DecisionTreeClassifier(random_state=0), grid,
                                          **kw).fit(X, y, sample_weight=w))


def test_sample_weight_of_a_pipeline_goes_to_its_last_step(diabetes):
    """GridSearchCV refuses fit(sample_weight=...) for a Pipeline (every fit fails); cvflow
    passes the weights to the last step, in the fold fits and the refit alike."""
    X, y = diabetes
    w = np.random.default_rng(3).uniform(0.5, 2.0, size=len(y))
    model = make_pipeline(StandardScaler(), Ridge())
    grid = {"ridge__alpha": [0.1, 10.0]}
    ours = cvflow.SearchCV(model, grid, cv=3, scoring="neg_mean_squared_error",
                           cluster="threads").fit(X, y, sample_weight=w)
    ref = GridSearchCV(model, grid, cv=3, scoring="neg_mean_squared_error").fit(
        X, y, ridge__sample_weight=w)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), **TOL)
    assert ours.best_params_ == ref.best_params_


@pytest.mark.parametrize("scoring", ["neg_root_mean_squared_error", "neg_median_absolute_error",
                                     "neg_max_error", "neg_mean_absolute_percentage_error",
                                     "neg_mean_squared_log_error", "neg_mean_poisson_deviance",
                                     "neg_mean_gamma_deviance", "d2_absolute_error_score",
                                     "neg_root_mean_squared_log_error"])
def test_more_regression_scorings_equal_gridsearchcv(diabetes, scoring):
    X, y = diabetes
    grid = {"alpha": [0.01, 0.1]}                     # predictions stay positive on diabetes
    kw = dict(cv=5, scoring=scoring, return_train_score=True)
    ours = cvflow.SearchCV(Ridge(), grid, cluster="threads", **kw).fit(X, y)
    assert_same_search(ours, GridSearchCV(Ridge(), grid, **kw).fit(X, y))


def test_jaccard_scorings_equal_gridsearchcv():
    X, y = load_wine(return_X_y=True)
    model = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [0.01, 1.0]}
    kw = dict(cv=3, scoring=["jaccard_macro", "jaccard_weighted"], refit="jaccard_macro")
    assert_same_search(cvflow.SearchCV(model, grid, cluster="threads", **kw).fit(X, y),
                       GridSearchCV(model, grid, **kw).fit(X, y))
    Xb, yb = load_breast_cancer(return_X_y=True)
    kw = dict(cv=3, scoring="jaccard")
    assert_same_search(cvflow.SearchCV(model, grid, cluster="threads", **kw).fit(Xb, yb),
                       GridSearchCV(model, grid, **kw).fit(Xb, yb))


def test_an_estimator_of_no_type_takes_the_task_of_its_scoring():
    """LocalOutlierFactor is no classifier; scored by precision, it is one (predict stored)."""
    from sklearn.neighbors import LocalOutlierFactor

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(scale=0.5, size=(80, 2)), rng.uniform(-6, 6, size=(20, 2))])
    y = np.array([1] * 80 + [-1] * 20)
    kw = dict(cv=KFold(4, shuffle=True, random_state=0), scoring="precision")
    grid = {"n_neighbors": [5, 10]}
    ours = cvflow.SearchCV(LocalOutlierFactor(novelty=True), grid, cluster="threads", **kw)
    ref = GridSearchCV(LocalOutlierFactor(novelty=True), grid, **kw).fit(X, y)
    assert_same_search(ours.fit(X, y), ref)
    assert ours.result_.cube["output"].values[0] == "predict"
    np.testing.assert_allclose(ours.score_samples(X), ref.score_samples(X), **TOL)


def test_stored_output_is_one_every_candidate_has():
    """SVC has predict_proba only with probability=True, which the grid sets."""
    from sklearn.svm import SVC

    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:150, :5], y[:150]
    grid = {"probability": [True], "C": [0.5, 2.0], "random_state": [0]}
    kw = dict(cv=3, scoring="neg_log_loss")
    ours = cvflow.SearchCV(SVC(), grid, cluster="threads", **kw).fit(X, y)
    assert_same_search(ours, GridSearchCV(SVC(), grid, **kw).fit(X, y))
    assert ours.result_.cube["output"].values[0] == "predict_proba"


def test_html_repr_shows_the_refitted_best_estimator(diabetes):
    from sklearn import config_context

    X, y = diabetes
    search = cvflow.SearchCV(make_pipeline(StandardScaler(), Ridge()), {"ridge__alpha": [1.0]},
                             cv=3, cluster="threads")
    with config_context(display="diagram"):
        assert "estimator: Pipeline" in search._repr_html_()
        search.fit(X, y)
        assert "best_estimator_: Pipeline" in search._repr_html_()


def test_score_refuses_extra_params_without_routing(diabetes):
    X, y = diabetes
    search = cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, cv=3, cluster="threads").fit(X, y)
    ref = GridSearchCV(Ridge(), {"alpha": [1.0]}, cv=3).fit(X, y)
    for fitted in (search, ref):
        with pytest.raises(ValueError, match="is only supported if enable_metadata_routing=True"):
            fitted.score(X, y, metadata=1)


class OffsetRidge(Ridge):
    """A Ridge whose fit takes a per-sample offset and a scalar (fit parameters)."""

    def fit(self, X, y, offset=None, scale=1.0):
        return super().fit(X, (y - offset) * scale)


def test_fit_params_reach_every_fit_and_the_refit_as_gridsearchcv(diabetes):
    """A sample-aligned fit parameter is taken by each fit's training rows, a scalar passed
    as it is (GridSearchCV's rule); the refit gets them whole."""
    X, y = diabetes
    offset = np.linspace(0.0, 10.0, len(y))
    kw = dict(cv=KFold(3, shuffle=True, random_state=0), scoring="neg_mean_squared_error",
              return_train_score=True)
    ours = cvflow.SearchCV(OffsetRidge(), {"alpha": [0.1, 1.0]}, cluster="threads", **kw).fit(
        X, y, offset=offset, scale=2.0)
    ref = GridSearchCV(OffsetRidge(), {"alpha": [0.1, 1.0]}, **kw).fit(
        X, y, offset=offset, scale=2.0)
    assert_same_search(ours, ref)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), **TOL)


def test_a_fit_failing_for_its_fit_params_raises_its_own_error():
    from sklearn.utils._mocking import CheckingClassifier

    X, y = np.arange(100.0).reshape(10, 10), np.array([0] * 5 + [1] * 5)
    for search in (GridSearchCV(CheckingClassifier(expected_fit_params=["spam", "eggs"]),
                                {"foo_param": [1, 2]}, cv=2, error_score="raise"),
                   cvflow.SearchCV(CheckingClassifier(expected_fit_params=["spam", "eggs"]),
                                   {"foo_param": [1, 2]}, cv=2, error_score="raise",
                                   cluster="threads")):
        with pytest.raises(AssertionError, match=r"Expected fit parameter\(s\) \['eggs'\]"):
            search.fit(X, y, spam=np.ones(10))
        with pytest.raises(AssertionError, match="Fit parameter spam has length 1; expected"):
            search.fit(X, y, spam=np.ones(1), eggs=np.zeros(10))
        search.fit(X, y, spam=np.ones(10), eggs=np.zeros(10))
