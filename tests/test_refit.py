"""cvflow.StudyResult.from_store(path).refit(criterion, loss=..., X=..., y=...): a reopened
store refits its choice (under another loss too) as scikit-learn fits the chosen params on the
same data; a store of a DataFrame with categorical and string columns refits from the user's
original DataFrame."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

import cvflow
from cvflow.errors import InputError

ALPHAS = np.round(np.logspace(-1, 2.5, 15), 6).tolist()


def regression_data():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(60, 8))
    y = X[:, :3] @ [2.0, -1.0, 0.5] + rng.standard_t(1.5, size=60) * 2   # heavy tails
    return X, y


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("refit") / "s.zarr"
    X, y = regression_data()
    cvflow.Study({"ridge": (Ridge(), {"alpha": ALPHAS})}, cv={"folds": 5, "seed": 0},
                 estimators=["kfold", "corrected_kfold"], loss="squared").run(
        X, y, store=path, cluster="threads", progress=False)
    return path


def sklearn_choice(fold, scoring):
    X, y = regression_data()
    search = GridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=PredefinedSplit(fold),
                          scoring=scoring).fit(X, y)
    return search.best_params_["alpha"], search.best_estimator_


def test_refit_of_a_reopened_store_in_a_fresh_process(store, tmp_path):
    """The user's route: a new interpreter reopens the store and refits under two losses."""
    script = (
        "import json, sys, numpy as np, cvflow\n"
        "r = cvflow.StudyResult.from_store(sys.argv[1])\n"
        "out = {}\n"
        "for loss in ('squared', 'absolute'):\n"
        "    m = r.refit('kfold', loss=loss)\n"
        "    out[loss] = {'alpha': m.alpha, 'coef': m.coef_.tolist(), 'b': m.intercept_,\n"
        "                 'chosen': r.chosen('kfold', loss=loss)['params']}\n"
        "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    fold = np.asarray(cvflow.open(store)["fold"].values[0])     # equal folds: 12 samples each
    for loss, scoring in (("squared", "neg_mean_squared_error"),
                          ("absolute", "neg_mean_absolute_error")):
        alpha, model = sklearn_choice(fold, scoring)
        assert got[loss]["alpha"] == alpha and got[loss]["chosen"] == {"alpha": alpha}
        np.testing.assert_allclose(got[loss]["coef"], model.coef_, rtol=1e-12, atol=1e-14)
        assert got[loss]["b"] == pytest.approx(model.intercept_, rel=1e-12)
    assert got["squared"]["alpha"] != got["absolute"]["alpha"]      # the loss decides


def test_refit_by_a_criterion_the_workflow_did_not_ask_for_and_bad_calls(store):
    r = cvflow.StudyResult.from_store(store)
    assert r.refit("corrected_kfold").alpha == ALPHAS[r.selected["corrected_kfold"]["index"]]
    with pytest.raises(InputError, match="refit: 'wald_cv' selects no param; name an estimator"):
        r.refit("wald_cv")
    with pytest.raises(InputError, match="unknown estimator 'kfolds'"):
        r.refit("kfolds")
    X, y = regression_data()
    with pytest.raises(InputError, match="refit: give both X and y"):
        r.refit("kfold", X=X)
    with pytest.raises(InputError, match="refit: X has 59 rows and y 59, but the store holds 60"):
        r.refit("kfold", X=X[1:], y=y[1:])
    with pytest.raises(InputError, match="refit: X is not the data the store was made from"):
        r.refit("kfold", X=X[::-1], y=y)
    with pytest.raises(InputError, match="refit: y is not the target"):
        r.refit("kfold", X=X, y=y + 1)


def frame_data():
    rng = np.random.default_rng(0)
    n = 80
    df = pd.DataFrame({
        "x1": rng.normal(size=n),
        "x2": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
        "color": pd.Categorical(rng.choice(["red", "green", "blue"], n)),
        "city": rng.choice(["north", "south"], n).astype(object)})
    y = 2 * df["x1"].to_numpy() + 1.5 * (df["color"] == "red").to_numpy() + rng.normal(size=n)
    return df, y


def pipeline():
    prep = ColumnTransformer([("num", SimpleImputer(), ["x1", "x2"]),
                              ("cat", OneHotEncoder(handle_unknown="ignore"), ["color", "city"])])
    return Pipeline([("prep", prep), ("m", Ridge())])


def test_a_store_of_categorical_columns_refits_from_the_original_frame(tmp_path):
    df, y = frame_data()
    path = tmp_path / "frame.zarr"
    cvflow.Study({"ridge": (pipeline(), {"m__alpha": [0.1, 3.0, 100.0]})}, cv=4,
                 estimators=["kfold"]).run(df, y, store=path, cluster="threads", progress=False)
    stored_X = cvflow.open(path)["X"].values
    assert set(np.unique(stored_X[:, 2])) == {0.0, 1.0, 2.0}        # the store holds codes
    r = cvflow.StudyResult.from_store(path)
    chosen = r.chosen("kfold")["params"]
    model = r.refit("kfold", X=df, y=y)
    want = pipeline().set_params(**chosen).fit(df, y)
    np.testing.assert_allclose(model.predict(df), want.predict(df), rtol=1e-12)
    # the store's own copy is rebuilt as the learners saw it: the same model
    np.testing.assert_allclose(r.refit("kfold").predict(df), want.predict(df), rtol=1e-12)
    other = df.copy()
    other.loc[5, "color"] = "blue" if other.loc[5, "color"] != "blue" else "red"
    with pytest.raises(InputError, match="refit: X is not the data the store was made from"):
        r.refit("kfold", X=other, y=y)
