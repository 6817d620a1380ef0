"""cvflow.Study: scikit-learn objects on arrays and DataFrames, checked against scikit-learn."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.ensemble import RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, hinge_loss, log_loss
from sklearn.model_selection import (GroupKFold, KFold, PredefinedSplit, RepeatedKFold,
                                     ShuffleSplit, StratifiedGroupKFold, StratifiedKFold,
                                     cross_val_predict)
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import cvflow
from cvflow.errors import InputError, ReproducibilityWarning

from cvtest import REPO, run_cli


def frame(n=90, seed=0):
    """Numeric columns with NaN, a string column and a categorical one; a linear target."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                       "color": rng.choice(["red", "green", "blue"], n),
                       "size": pd.Categorical(rng.choice(["S", "M", "L"], n),
                                              categories=["S", "M", "L"], ordered=True)})
    y = 2 * df["a"] - df["b"] + 1.5 * (df["color"] == "red") + 0.3 * rng.normal(size=n)
    df.loc[rng.choice(n, 12, replace=False), "a"] = np.nan
    df.loc[rng.choice(n, 5, replace=False), "b"] = np.nan
    df.loc[rng.choice(n, 4, replace=False), "color"] = None
    return df, y.to_numpy()


def pipeline():
    num = Pipeline([("imputer", SimpleImputer()), ("scaler", StandardScaler())])
    cat = Pipeline([("imputer", SimpleImputer(strategy="most_frequent")),
                    ("onehot", OneHotEncoder(handle_unknown="ignore"))])
    prep = ColumnTransformer([("num", num, ["a", "b"]), ("cat", cat, ["color", "size"])])
    return Pipeline([("prep", prep), ("ridge", Ridge())])


GRID = {"ridge__alpha": [0.1, 1.0, 10.0], "prep__num__imputer__strategy": ["mean", "median"]}


def same_params(a, b, where="") -> None:
    """get_params(deep=True) equality, nested estimators compared by class and params."""
    if isinstance(a, BaseEstimator) or isinstance(b, BaseEstimator):
        assert type(a) is type(b), where
        pa, pb = a.get_params(deep=True), b.get_params(deep=True)
        assert pa.keys() == pb.keys(), where
        for k in pa:
            same_params(pa[k], pb[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, z) in enumerate(zip(a, b)):
            same_params(x, z, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def frame_study(tmp_path_factory, client):
    df, y = frame()
    study = cvflow.Study(pipeline(), param_grid=GRID, cv=KFold(5, shuffle=True, random_state=0),
                         estimators=["kfold", "corrected_kfold"])
    store = tmp_path_factory.mktemp("frame") / "s.zarr"
    return study, df, y, study.run(df, y, store=store, client=client)


def test_pipeline_on_a_dataframe_matches_cross_val_predict(frame_study):
    study, df, y, result = frame_study
    cube = result.cube
    pred = cube["pred"].values
    assert not np.isnan(pred).any() and not cube["failed"].values.any()
    fold = cube["fold"].values[0]
    np.testing.assert_array_equal(
        fold, np.concatenate([np.full(len(t), j) for j, (_, t) in
                              enumerate(KFold(5, shuffle=True, random_state=0).split(df))])[
            np.argsort(np.concatenate([t for _, t in KFold(5, shuffle=True, random_state=0).split(df)]))])
    estimate = result["kfold"]["estimate"].values
    for h, setting in enumerate(cube["param_json"].values):
        params = json.loads(str(setting))["params"]
        model = pipeline().set_params(**{k: params[k] for k in GRID})
        oof = cross_val_predict(model, df, y, cv=PredefinedSplit(fold))
        np.testing.assert_allclose(estimate[h], np.mean((y - oof) ** 2), rtol=1e-10, atol=1e-12)
    # the stored X keeps names and categories; NaN stays NaN
    assert list(cube["feature"].values) == ["a", "b", "color", "size"]
    columns = json.loads(cube.attrs["columns"])
    assert columns[2]["categories"] == ["blue", "green", "red"] and columns[3]["ordered"]
    assert np.isnan(cube["X"].values[:, 0]).sum() == 12


def test_selected_and_refit_equal_the_full_split(frame_study):
    study, df, y, result = frame_study
    chosen = result.selected["kfold"]
    estimate = result["kfold"]["estimate"].values
    assert chosen["index"] == int(np.argmin(estimate))
    assert set(chosen["params"]) == set(GRID) and chosen["learner"] == "Pipeline"
    model = result.refit("kfold")
    full = result.cube["pred"].values[chosen["index"], int(result.cube.attrs["full_split"])]
    np.testing.assert_array_equal(model.predict(df), full)
    assert model.get_params()["ridge__alpha"] == chosen["params"]["ridge__alpha"]
    assert "<table>" in result._repr_html_() and "kfold" in repr(result)


def test_from_store_rebuilds_equal_estimators(frame_study):
    study, df, y, result = frame_study
    again = cvflow.Study.from_store(result.store)
    (name, (est, grid)), = again.learners.items()
    same_params(est, pipeline())
    assert grid == GRID
    assert isinstance(again.cv, KFold) and again.cv.random_state == 0


PREPROCESS_WF = """
name: pp
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    preprocess: [sklearn.preprocessing.StandardScaler]
    grid: {alpha: [0.01, 1.0, 100.0]}
design: {folds: 4, seed: 0}
estimators: [kfold]
execution: {cluster: threads}
"""


def test_from_store_keeps_preprocess_and_refits_the_runs_model(tmp_path, client):
    from sklearn.datasets import load_diabetes

    (tmp_path / "wf.yaml").write_text(PREPROCESS_WF)
    out = run_cli("run", tmp_path / "wf.yaml", "--store", tmp_path / "s.zarr")
    assert out.returncode == 0, out.stderr
    X, y = load_diabetes(return_X_y=True)
    study = cvflow.Study.from_store(tmp_path / "s.zarr")
    assert study.learner_options == {"ridge": {"preprocess": ["sklearn.preprocessing.StandardScaler"]}}
    result = study.run(X, y, store=tmp_path / "again.zarr", client=client, progress=False)
    # the rebuilt study's folds, estimates, choice and refit: scikit-learn's scaled ridge
    fold = result.cube["fold"].values[0]
    alphas = [0.01, 1.0, 100.0]
    want = [np.mean((y - cross_val_predict(make_pipeline(StandardScaler(), Ridge(alpha=a)), X, y,
                                           cv=PredefinedSplit(fold))) ** 2) for a in alphas]
    np.testing.assert_allclose(result["kfold"]["estimate"].values, want, rtol=1e-10)
    chosen = result.selected["kfold"]
    assert chosen["params"] == {"alpha": alphas[int(np.argmin(want))]}
    hand = make_pipeline(StandardScaler(), Ridge(alpha=chosen["params"]["alpha"])).fit(X, y)
    np.testing.assert_allclose(result.refit("kfold").predict(X), hand.predict(X), rtol=1e-12)
    # and it is the run's own study: run on the store it came from, it fits nothing
    assert study.run(X, y, store=tmp_path / "again.zarr", client=client,
                     progress=False).run.fits_executed == 0


def test_from_store_keeps_each_learners_output(tmp_path, client):
    from sklearn.datasets import load_breast_cancer
    from sklearn.svm import LinearSVC

    X, y = load_breast_cancer(return_X_y=True)
    X, y = StandardScaler().fit_transform(X[:150]), y[:150]
    np.savez(tmp_path / "d.npz", X=X, y=y)
    (tmp_path / "wf.yaml").write_text(textwrap.dedent("""
        data: {source: npz, path: d.npz}
        task: classification
        loss: zero_one
        learners:
          - {name: logit, class: sklearn.linear_model.LogisticRegression, output: predict_proba}
          - {name: svc, class: sklearn.svm.LinearSVC}
        design: {folds: 3, seed: 0}
        execution: {cluster: threads}
    """))
    out = run_cli("run", tmp_path / "wf.yaml", "--store", tmp_path / "s.zarr")
    assert out.returncode == 0, out.stderr
    study = cvflow.Study.from_store(tmp_path / "s.zarr")
    result = study.run(X, y, store=tmp_path / "again.zarr", client=client, progress=False)
    cube = result.cube
    fold = cube["fold"].values[0]
    full = int(cube.attrs["full_split"])
    cv = PredefinedSplit(fold)
    pred = cube["pred"].values
    logit = cross_val_predict(LogisticRegression(), X, y, cv=cv, method="predict_proba")[:, 1]
    svc = cross_val_predict(LinearSVC(), X, y, cv=cv, method="decision_function")
    for h, want in enumerate((logit, svc)):
        oof = np.array([pred[h, int(cube["fold_split"].values[0, fold[i]]), i]
                        for i in range(len(y))])
        np.testing.assert_allclose(oof, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(pred[1, full], LinearSVC().fit(X, y).decision_function(X),
                               rtol=1e-6, atol=1e-9)


def test_learner_options_are_checked():
    study = cvflow.Study({"r": Ridge()}, learner_options={"ridge": {"preprocess": []}})
    with pytest.raises(InputError, match=r"learner_options\['ridge'\]: no learner of that name"):
        study.config("regression")
    study = cvflow.Study({"r": Ridge()}, learner_options={"r": {"scale": True}})
    with pytest.raises(InputError, match=r"unknown key\(s\) \['scale'\]; use preprocess, output"):
        study.config("regression")


def test_to_yaml_then_cli_run_is_bit_identical(frame_study, tmp_path):
    study, df, y, result = frame_study
    wf = study.to_yaml(tmp_path / "study.yaml", df, y)
    text = wf.read_text()
    assert "sklearn.compose.ColumnTransformer" in text and "source: npz" in text
    out = run_cli("run", wf, "--store", tmp_path / "cli.zarr", "--workers", "1")
    assert out.returncode == 0, out.stderr
    other = cvflow.open(tmp_path / "cli.zarr")
    for name in ("pred", "X", "y", "train", "fold", "failed"):
        np.testing.assert_array_equal(other[name].values, result.cube[name].values, err_msg=name)
    assert other.attrs["data_hash"] == result.cube.attrs["data_hash"]
    assert other.attrs["workflow_hash"] != ""


def test_opening_and_reducing_imports_no_learner_and_unpickles_nothing(frame_study):
    study, df, y, result = frame_study
    code = textwrap.dedent(f"""
        import pickle, sys
        def refuse(*a, **k):
            raise AssertionError("unpickled")
        pickle.loads = pickle.load = refuse
        import cvflow
        from cvflow.report import compute
        cube = cvflow.open({str(result.store)!r})
        out = compute(cube)
        assert float(out["kfold"]["estimate"].min()) > 0
        bad = [m for m in sys.modules if m.startswith(("sklearn.linear_model", "sklearn.pipeline",
               "sklearn.compose", "sklearn.impute", "sklearn.preprocessing"))]
        assert not bad, bad
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_binary_classification_with_string_labels(tmp_path, client):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = data.data[:200], np.where(data.target[:200] == 1, "benign", "malignant")
    model = make_pipeline(StandardScaler(), LogisticRegression())
    cv = StratifiedKFold(4, shuffle=True, random_state=1)
    grid = {"logisticregression__C": [0.1, 1.0]}
    for loss, metric, method in (("log_loss", "log_loss", "predict_proba"),
                                 ("hinge", "hinge", "decision_function")):
        study = cvflow.Study(model, param_grid=grid, cv=cv, loss=loss)
        result = study.run(X, y, store=tmp_path / f"{loss}.zarr", client=client)
        cube = result.cube
        assert json.loads(cube.attrs["classes"]) == ["benign", "malignant"]
        assert set(np.asarray(cube["y"].values).tolist()) == {"benign", "malignant"}
        for h, C in enumerate(grid["logisticregression__C"]):
            ref = cross_val_predict(model.set_params(logisticregression__C=C), X, y, cv=cv,
                                    method=method)
            if method == "predict_proba":
                want = log_loss(y, ref, labels=["benign", "malignant"])
                zero_one = 1 - accuracy_score(y, np.where(ref[:, 1] > 0.5, "malignant", "benign"))
            else:
                want = hinge_loss(y, ref, labels=["benign", "malignant"])
                zero_one = 1 - accuracy_score(y, np.where(ref > 0, "malignant", "benign"))
            got = cvflow.estimators.kfold(cube)["estimate"].values[h]
            np.testing.assert_allclose(got, want, rtol=1e-10)
            got01 = cvflow.estimators.kfold(cube, loss="zero_one")["estimate"].values[h]
            np.testing.assert_allclose(got01, zero_one, rtol=1e-12)
        assert "positive class: malignant" in repr(result)
        from cvflow.report.html import write_html

        page = write_html(cube, result.results, tmp_path / f"{loss}.html").read_text()
        assert "classes: benign, malignant (positive class: &lt;b&gt;malignant" in page
    out = run_cli("report", tmp_path / "hinge.zarr")
    assert out.returncode == 0 and "classes: benign, malignant" in out.stdout


def test_sample_weights_reach_the_fit(tmp_path, client):
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    w = rng.uniform(0.1, 3, size=60)
    model = make_pipeline(StandardScaler(), Ridge(alpha=2.0))
    result = cvflow.Study(model, cv=KFold(3, shuffle=True, random_state=0)).run(
        X, y, sample_weight=w, store=tmp_path / "w.zarr", client=client)
    np.testing.assert_array_equal(result.cube["sample_weight"].values, w)
    fold = result.cube["fold"].values[0]
    oof = cross_val_predict(model, X, y, cv=PredefinedSplit(fold),
                            params={"ridge__sample_weight": w})
    np.testing.assert_allclose(result["kfold"]["estimate"].values[0], np.mean((y - oof) ** 2),
                               rtol=1e-10)


@pytest.mark.parametrize("cv,groups", [
    (GroupKFold(3), True), (StratifiedGroupKFold(3, shuffle=True, random_state=0), True),
    (RepeatedKFold(n_splits=3, n_repeats=2, random_state=0), False)])
def test_splitter_objects_give_their_own_folds(cv, groups):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 2)), rng.integers(0, 2, 40)
    g = np.repeat(np.arange(10), 4) if groups else None
    study = cvflow.Study(LogisticRegression(), cv=cv)
    built = study.workflow(X, y, g).build()
    splits = list(cv.split(X, y, g))
    n_folds = len(splits) // getattr(cv, "n_repeats", 1)
    for k, (train, test) in enumerate(splits):
        r, j = divmod(k, n_folds)
        mask = built.design.train[built.design.fold_split[r, j]]
        np.testing.assert_array_equal(np.flatnonzero(mask), train)
    assert study.validate(X, y, g).startswith("valid")


def test_refused_before_any_store(tmp_path):
    X, y = np.random.default_rng(0).normal(size=(30, 2)), np.arange(30.0)
    store = tmp_path / "never.zarr"
    bad = Pipeline([("a", Ridge()), ("b", Ridge())])
    with pytest.raises(InputError, match="All intermediate steps should be transformers"):
        cvflow.Study(bad).run(X, y, store=store)
    with pytest.raises(InputError, match="stratified splitter needs class labels"):
        cvflow.Study(Ridge(), cv=StratifiedKFold(3)).run(X, y, store=store)
    with pytest.raises(InputError, match=r"ShuffleSplit does not partition the samples .*"
                                         r"estimators\[1\] \(corrected_kfold\) needs folds"):
        cvflow.Study(Ridge(), cv=ShuffleSplit(3, random_state=0),
                     estimators=["kfold", "corrected_kfold"]).validate(X, y)
    with pytest.raises(InputError, match="a fitted Ridge"):
        cvflow.Study(Ridge().fit(X, y)).validate(X, y)
    assert not store.exists() and not list(tmp_path.iterdir())


def test_transformed_target_with_numpy_log_by_dotted_path(tmp_path):
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.exp(X[:, 0] + 1)
    study = cvflow.Study(TransformedTargetRegressor(Ridge(), func=np.log, inverse_func=np.exp),
                         param_grid={"regressor__alpha": [0.1, 1.0]}, cv=3)
    study.to_yaml(tmp_path / "t.yaml", X, y)
    assert "function: numpy.log" in (tmp_path / "t.yaml").read_text()
    wf = cvflow.load_workflow(tmp_path / "t.yaml")
    same_params(wf.params[0].build(), study.learners["TransformedTargetRegressor"][0].set_params(
        regressor__alpha=0.1))
    assert run_cli("validate", tmp_path / "t.yaml").returncode == 0
    with pytest.raises(InputError, match="a trial fit on 30 samples failed: ValueError: Input y contains NaN"):
        cvflow.Study(TransformedTargetRegressor(Ridge(), func=np.log, inverse_func=np.exp,
                                                check_inverse=False),
                     cv=3).validate(X, -y)


def test_unset_random_state_warns_and_fit_seed_makes_runs_equal(tmp_path, client):
    X = np.random.default_rng(0).normal(size=(60, 3))
    y = X[:, 0] + np.random.default_rng(1).normal(size=60)
    forest = RandomForestRegressor(n_estimators=5, max_features=1)
    with pytest.warns(ReproducibilityWarning, match="random_state unset"):
        cvflow.Study(forest, cv=3).validate(X, y)
    seeded = cvflow.Study(forest, cv=3, fit_seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibilityWarning)
        seeded.validate(X, y)
    one = seeded.run(X, y, store=tmp_path / "1.zarr", client=client)
    two = seeded.run(X, y, store=tmp_path / "2.zarr", client=client)
    np.testing.assert_array_equal(one.cube["pred"].values, two.cube["pred"].values)
    full = int(one.cube.attrs["full_split"])
    np.testing.assert_array_equal(one.refit().predict(X), one.cube["pred"].values[0, full])


def test_rerun_fits_nothing_and_a_longer_grid_fits_only_the_new_params(tmp_path, client):
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    model = make_pipeline(StandardScaler(), Ridge())
    cv = KFold(4, shuffle=True, random_state=0)
    store = tmp_path / "s.zarr"
    first = cvflow.Study(model, param_grid={"ridge__alpha": [0.1, 1.0]}, cv=cv).run(
        X, y, store=store, client=client)
    assert first.run.fits_executed == 2 * 5
    again = cvflow.Study(model, param_grid={"ridge__alpha": [0.1, 1.0]}, cv=cv).run(
        X, y, store=store, client=client)
    assert again.run.fits_executed == 0
    longer = cvflow.Study(model, param_grid={"ridge__alpha": [0.1, 1.0, 10.0]}, cv=cv).run(
        X, y, store=store, client=client)
    assert longer.run.fits_executed == 5
    np.testing.assert_array_equal(longer.cube["pred"].values[:2], first.cube["pred"].values)
    with pytest.raises(InputError, match="fit_seed: None -> 3"):
        cvflow.Study(model, param_grid={"ridge__alpha": [0.1]}, cv=cv, fit_seed=3).run(
            X, y, store=store, client=client)


class LocalScaler(StandardScaler):
    """A transformer defined in a test module: importable, so describable."""


def test_a_class_in_a_test_module_or_a_private_module_is_described_by_name():
    from sklearn.utils._mocking import CheckingClassifier

    from cvflow.objects import build, describe, unbuildable

    assert describe(LocalScaler())["class"] == "test_study.LocalScaler"
    # exported by no public package: named by its own (private) module, and rebuilt from it
    desc = describe(CheckingClassifier(foo_param=2))
    assert desc == {"class": "sklearn.utils._mocking.CheckingClassifier", "foo_param": 2}
    assert type(build(desc)) is CheckingClassifier and not unbuildable(desc)


def test_objects_no_name_imports_are_fitted_recorded_and_not_rebuilt(tmp_path):
    """A __main__ class, a lambda, a local class and an array value: fitted as given (here on
    threads), the store describes them, Study.from_store and to_yaml refuse with one line, the
    report reads the store."""
    from sklearn.preprocessing import FunctionTransformer, SplineTransformer

    from cvflow.objects import unbuildable

    main_cls = type("MainScaler", (StandardScaler,), {"__module__": "__main__"})

    class Shift(BaseEstimator):              # a local class
        def __init__(self, by=0.0):
            self.by = by

        def fit(self, X, y=None):
            return self

        def transform(self, X):
            return np.asarray(X) + self.by

    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, size=(40, 2))
    y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    knots = [np.linspace(0, 1, k)[:, None].repeat(2, axis=1) for k in (4, 6)]
    pipe = Pipeline([("scale", main_cls()), ("double", FunctionTransformer(lambda v: 2 * v)),
                     ("shift", Shift()), ("spline", SplineTransformer()), ("ridge", Ridge())])
    grid = {"spline__knots": knots, "shift__by": [0.0, 1.0]}
    study = cvflow.Study(pipe, param_grid=grid, cv=KFold(4, shuffle=True, random_state=0))
    result = study.run(X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    cube = result.cube
    assert not cube["failed"].values.any()
    # the predictions are the objects' own, fitted as cross_val_predict fits them
    fold = cube["fold"].values[0]
    for h, point in enumerate(ParameterGrid_points(grid)):
        oof = cross_val_predict(clone_with(pipe, point), X, y, cv=PredefinedSplit(fold))
        for j in range(4):
            s = int(cube["fold_split"].values[0, j])
            np.testing.assert_allclose(cube["pred"].values[h, s][fold == j], oof[fold == j],
                                       rtol=1e-12, atol=1e-12)
    workflow = json.loads(cube.attrs["workflow"])
    kept = unbuildable(workflow["learners"])
    assert any(k.startswith("__main__.MainScaler") for k in kept)
    assert any("<lambda>" in k for k in kept) and any("Shift" in k for k in kept)
    assert any(k.startswith("ndarray(shape=(4, 2)") for k in kept)
    # two different arrays, two descriptions (a fingerprint each)
    assert len(set(cube["param_json"].values)) == 4
    with pytest.raises(InputError, match=r"^Study.from_store: .* cannot be rebuilt: its study "
                                         r"fitted __main__.MainScaler"):
        cvflow.Study.from_store(tmp_path / "s.zarr")
    with pytest.raises(InputError, match=r"^Study.to_yaml: __main__.MainScaler is a Python "
                                         "object that no name imports"):
        study.to_yaml(tmp_path / "s.yaml", X, y)
    assert not (tmp_path / "s.yaml").exists()
    reopened = cvflow.StudyResult.from_store(tmp_path / "s.zarr")
    assert reopened.selected["kfold"]["index"] == result.selected["kfold"]["index"]
    assert "K-fold" in repr(reopened)
    with pytest.raises(InputError, match=r"refit: param \d+ of .* fitted .*no name imports"):
        reopened.refit()
    # the run's own result refits its objects: the full split's predictions
    full = int(cube.attrs["full_split"])
    h = result.selected["kfold"]["index"]
    np.testing.assert_allclose(result.refit().predict(X), cube["pred"].values[h, full],
                               rtol=1e-12, atol=1e-12)


def ParameterGrid_points(grid):
    """The grid's points in cvflow's order (the grid's names, the last varying fastest)."""
    import itertools

    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*grid.values())]


def clone_with(estimator, point):
    from sklearn.base import clone

    return clone(estimator).set_params(**clone(point, safe=False))


def test_a_main_class_fits_on_worker_processes(tmp_path):
    """A class and a lambda of a script's __main__ travel to worker processes by value."""
    script = textwrap.dedent(f"""
        import numpy as np
        from sklearn.base import BaseEstimator, RegressorMixin
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import FunctionTransformer
        import cvflow

        class Mean(RegressorMixin, BaseEstimator):
            def __init__(self, shrink=1.0):
                self.shrink = shrink
            def fit(self, X, y):
                self.m_ = self.shrink * np.mean(y)
                return self
            def predict(self, X):
                return np.full(len(X), self.m_)

        if __name__ == "__main__":
            X = np.arange(40.0).reshape(20, 2)
            y = np.arange(20.0)
            pipe = make_pipeline(FunctionTransformer(lambda v: v + 1), Mean())
            study = cvflow.Study(pipe, param_grid={{"mean__shrink": [0.5, 1.0]}}, cv=4)
            result = study.run(X, y, store={str(tmp_path / "s.zarr")!r}, cluster="local",
                               workers=1, progress=False)
            cube = result.cube
            assert not cube["failed"].values.any(), set(cube["error"].values.ravel())
            full = int(cube.attrs["full_split"])
            print(cube["pred"].values[:, full, 0].tolist())
    """)
    (tmp_path / "main.py").write_text(script)
    done = subprocess.run([sys.executable, "main.py"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == str([0.5 * 9.5, 9.5])


def test_grid_names_are_left_to_set_params_as_gridsearchcv_leaves_them():
    """A Pipeline step replaced by the grid, a name get_params lacks but set_params takes, and
    set_params' own refusal."""
    from sklearn.decomposition import PCA
    from sklearn.feature_selection import SelectKBest

    class Routed(BaseEstimator):             # set_params takes "inner__x" it does not list
        def __init__(self, inner=None):
            self.inner = inner

        def set_params(self, **params):
            self.routed_ = {k: v for k, v in params.items() if k.startswith("inner__")}
            return super().set_params(**{k: v for k, v in params.items()
                                         if not k.startswith("inner__")})

        def fit(self, X, y):
            return self

        def predict(self, X):
            return np.zeros(len(X))

    X, y = np.random.default_rng(0).normal(size=(30, 6)), np.arange(30.0)
    pipe = Pipeline([("reduce", PCA(2)), ("ridge", Ridge())])
    steps = {"reduce": [PCA(3), SelectKBest(k=3)], "ridge__alpha": [0.1, 1.0]}
    wf = cvflow.Study(pipe, param_grid=steps, cv=3).workflow(X, y)
    assert [type(p.build().named_steps["reduce"]).__name__ for p in wf.params] == \
        ["PCA", "PCA", "SelectKBest", "SelectKBest"]
    assert cvflow.Study(Routed(), param_grid={"inner__x": [1, 2]}, cv=3).validate(X, y)
    with pytest.raises(InputError, match=r"grid.reduce__k: Invalid parameter 'k' for "
                                         r"estimator PCA\(n_components=3\)"):
        cvflow.Study(pipe, param_grid={"reduce": [PCA(3)], "reduce__k": [2]}, cv=3).workflow(X, y)
    # a workflow file's description: only the constructor's arguments go to it
    from cvflow.workflow.params import Param

    model = Param("p", "sklearn.pipeline.Pipeline",
                  {"steps": [["reduce", {"class": "sklearn.decomposition.PCA"}],
                             ["ridge", {"class": "sklearn.linear_model.Ridge"}]]},
                  {"reduce": {"class": "sklearn.feature_selection.SelectKBest", "k": 2},
                   "ridge__alpha": 3.0}).build()
    assert isinstance(model.named_steps["reduce"], SelectKBest)
    assert model.named_steps["reduce"].k == 2 and model.named_steps["ridge"].alpha == 3.0


def test_splitters_that_do_not_partition_give_one_repeat_per_split():
    from sklearn.model_selection import GroupShuffleSplit, LeavePGroupsOut

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    groups = np.repeat(np.arange(5), 8)
    for cv, g in [(ShuffleSplit(4, test_size=0.25, random_state=0), None),
                  (LeavePGroupsOut(2), groups), (GroupShuffleSplit(3, random_state=1), groups)]:
        built = cvflow.Study(Ridge(), cv=cv).workflow(X, y, g).build()
        d = built.design
        splits = list(cv.split(X, y, g))
        assert d.fold.shape == (len(splits), 40) and d.fold_split.shape == (len(splits), 1)
        for k, (train, test) in enumerate(splits):
            np.testing.assert_array_equal(np.flatnonzero(d.fold[k] == 0), np.sort(test))
            np.testing.assert_array_equal(np.flatnonzero(d.train[d.fold_split[k, 0]]),
                                          np.sort(train))


def test_cli_run_refuses_a_bad_pipeline_before_any_store(tmp_path, capsys):
    from cvflow.cli import main

    wf = tmp_path / "bad.yaml"
    wf.write_text(textwrap.dedent("""\
        data: {source: sklearn, name: diabetes}
        learners:
          - name: pipe
            class: sklearn.pipeline.Pipeline
            params:
              steps: [[scale, {class: sklearn.linear_model.Ridge}], [ridge, {class: sklearn.linear_model.Ridge}]]
            grid: {ridge__alpha: [0.1, 1.0]}
        """))
    assert main(["run", str(wf), "--store", str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "All intermediate steps should be transformers" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_dataframe_pipeline_from_python_stdin_without_guard(tmp_path):
    """The issue's study, run as `python -` (no file, no __main__ guard) on worker processes."""
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        sys.path.insert(0, {str(REPO / "tests")!r})
        import cvflow
        from sklearn.model_selection import KFold, PredefinedSplit, cross_val_predict
        from test_study import GRID, frame, pipeline
        df, y = frame()
        study = cvflow.Study(pipeline(), param_grid=GRID, cv=KFold(5, shuffle=True, random_state=2))
        result = study.run(df, y, store={str(tmp_path / "s.zarr")!r}, cluster="local", workers=2)
        cube = result.cube
        assert not np.isnan(cube["pred"].values).any()
        fold = cube["fold"].values[0]
        est = result["kfold"]["estimate"].values
        worst = 0.0
        for h, text in enumerate(cube["param_json"].values):
            params = json.loads(str(text))["params"]
            model = pipeline().set_params(**{{k: params[k] for k in GRID}})
            oof = cross_val_predict(model, df, y, cv=PredefinedSplit(fold))
            worst = max(worst, abs(est[h] - np.mean((y - oof) ** 2)) / np.mean((y - oof) ** 2))
        print("worst", worst)
    """)
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) <= 1e-10


def test_without_a_target_the_learners_predictions_are_stored(tmp_path):
    """y=None: unstratified folds, fit(X) without y, predict stored (cluster labels here); the
    target-based estimates are NaN (a fit-time scorer is what scores such a study)."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=45, random_state=0)
    kmeans = KMeans(random_state=0, init="random", n_init=1)
    study = cvflow.Study(kmeans, param_grid={"n_clusters": [2, 3]}, cv=3)
    result = study.run(X, None, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    cube = result.cube
    assert cube.attrs["task"] == "regression" and np.isnan(cube["y"].values).all()
    assert not cube["failed"].values.any()
    for h, k in enumerate([2, 3]):
        for s in range(cube.sizes["split"]):
            train = cube["train"].values[s]
            want = KMeans(random_state=0, init="random", n_init=1, n_clusters=k).fit(X[train])
            np.testing.assert_array_equal(cube["pred"].values[h, s], want.predict(X))
    assert np.isnan(result["kfold"]["estimate"].values).all()


# --- the task from the loss's declaration (issue 39) -----------------------------------------

from cvflow.estimators import losses as _losses  # noqa: E402 - the registry the tests walk


def _spelling(decl) -> str:
    """The loss as a user writes it: with a valid value of its parameter, if it has one."""
    if decl.parameter is None:
        return decl.name
    symbol, check = decl.parameter
    assert check(0.7) == "", f"{decl.name}: pick another {symbol} for this test"
    return f"{decl.name}:0.7"


class _Given(BaseEstimator):
    """A regressor whose predictions are its one feature: scikit-learn's scorers score the
    fold predictions of cross_val_predict through it."""
    _estimator_type = "regressor"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.estimator_type = "regressor"
        return tags

    def fit(self, X, y=None):
        return self

    def predict(self, X):
        return np.asarray(X)[:, 0]


def _by_hand(decl, y, oof) -> float:
    """The loss of out-of-fold predictions ``oof`` computed without cvflow: scikit-learn's
    scorer the loss declares (its sign undone), else scipy's / scikit-learn's function."""
    from scipy.special import huber
    from sklearn.metrics import get_scorer, mean_pinball_loss

    if decl.scorers:
        scorer = decl.scorers[0]
        value = get_scorer(scorer)(_Given(), np.asarray(oof)[:, None], y)
        return -value if scorer.startswith("neg_") else value
    hand = {"pinball": lambda: mean_pinball_loss(y, oof, alpha=decl.arg),
            "huber": lambda: float(np.mean(huber(decl.arg, y - oof)))}
    assert decl.name in hand, (f"{decl.name}: declare its scikit-learn scorer (scorers=) or "
                               "add an independent computation here")
    return hand[decl.name]()


REGRESSION_LOSSES = [_spelling(d) for d in _losses.DECLARED.values() if d.task == "regression"]


@pytest.mark.parametrize("loss", REGRESSION_LOSSES)
def test_every_regression_loss_of_the_registry_runs_through_study(tmp_path, loss):
    """Study(loss=L) takes the task L declares: every regression loss runs on a regressor (not
    refused for want of predict_proba), and its K-fold estimate equals scikit-learn's metric
    on cross_val_predict's fold predictions (pooled for a pointwise loss, the mean of the
    folds' values for a per-fold metric)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    # positive targets and predictions: valid for every loss (poisson / gamma deviances,
    # squared_log, absolute_percentage)
    y = 10 + X @ np.array([1.0, 2.0, -1.5]) + rng.normal(size=40)
    cv = KFold(5, shuffle=True, random_state=0)
    alphas = [0.1, 10.0]
    result = cvflow.Study({"r": (Ridge(), {"alpha": alphas})}, cv=cv, loss=loss).run(
        X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    assert result.cube.attrs["task"] == "regression"
    decl = _losses.get_loss(loss)
    est = result["kfold"]["estimate"].values
    for h, alpha in enumerate(alphas):
        oof = cross_val_predict(Ridge(alpha=alpha), X, y, cv=cv)
        assert (oof > 0).all()
        if decl.pointwise:
            want = _by_hand(decl, y, oof)
        else:
            want = np.mean([_by_hand(decl, y[test], oof[test]) for _, test in cv.split(X)])
        np.testing.assert_allclose(est[h], want, rtol=1e-9, err_msg=loss)


@pytest.mark.parametrize("loss", [_spelling(d) for d in _losses.DECLARED.values()])
def test_the_task_is_the_one_the_loss_declares(loss):
    """Every declared loss gives its own task, whatever the target looks like (3 integer
    labels read as a regression target without a loss, floats as one with)."""
    want = _losses.get_loss(loss).task
    for y in (np.arange(30) % 3, np.linspace(0, 1, 30)):
        assert cvflow.Study(Ridge(), loss=loss)._task(y) == want


def test_a_user_declared_loss_gives_its_task_and_a_custom_function_the_targets(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    y = X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=30)
    cv = KFold(3, shuffle=True, random_state=0)
    oof = cross_val_predict(Ridge(), X, y, cv=cv)

    @_losses.declare("cubed_test39", task="regression", outputs=("predict",), doc="|y - ŷ|³")
    def cubed(y, pred, output=None, arg=None):
        return abs(y - pred) ** 3

    try:
        result = cvflow.Study(Ridge(), cv=cv, loss="cubed_test39").run(
            X, y, store=tmp_path / "declared.zarr", cluster="threads", progress=False)
        assert result.cube.attrs["task"] == "regression"
        np.testing.assert_allclose(result["kfold"]["estimate"].values[0],
                                   np.mean(np.abs(y - oof) ** 3), rtol=1e-10)
    finally:
        del _losses.DECLARED["cubed_test39"]

    def quartic(y_true, y_pred):         # declares no task: the target decides (regression)
        return (y_true - y_pred) ** 4

    result = cvflow.Study(Ridge(), cv=cv, loss=quartic).run(
        X, y, store=tmp_path / "custom.zarr", cluster="threads", progress=False)
    assert result.cube.attrs["task"] == "regression"
    np.testing.assert_allclose(result["kfold"]["estimate"].values[0], np.mean((y - oof) ** 4),
                               rtol=1e-10)
