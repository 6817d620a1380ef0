"""paired_5x2cv against mlxtend's paired_ttest_5x2cv and combined_ftest_5x2cv on the same
splits and fits, against the formulas by hand, and its refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mlxtend.evaluate import combined_ftest_5x2cv, paired_ttest_5x2cv
from sklearn.model_selection import train_test_split

from cvflow.errors import InputError
from cvflow.estimators import paired_5x2cv
from cvflow.workflow.params import Param
from cvflow.workflow.spec import parse_workflow
from cvflow.testing import cube_from_predictions, fit_cube, simple_design


def mlxtend_folds(n: int, seed: int) -> np.ndarray:
    """Fold labels (5, n) of mlxtend's splits: repeat i draws train_test_split's random_state
    from RandomState(seed) as mlxtend does; its first score trains on X_1 and tests on X_2,
    so X_2 is fold 0 (the numerator fold)."""
    rng = np.random.RandomState(seed)
    fold = np.empty((5, n), dtype=np.int32)
    for i in range(5):
        first, second = train_test_split(np.arange(n), test_size=0.5,
                                         random_state=rng.randint(low=0, high=32767))
        fold[i, second], fold[i, first] = 0, 1
    return fold


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_matches_mlxtend(task):
    rng = np.random.default_rng(1)
    n, seed = 60, 11
    X = rng.normal(size=(n, 4))
    if task == "regression":
        y = X @ [1.0, -0.5, 0.0, 0.2] + rng.normal(size=n)
        params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": 0.1}),
                  Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": 50.0})]
        loss = "squared"

        def scorer(est, X_, y_):      # the loss, so that mlxtend's difference is e_a − e_b
            return float(np.mean((est.predict(X_) - y_) ** 2))
    else:
        y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
        params = [Param("logit", "sklearn.linear_model.LogisticRegression", hyper={"C": 1.0},
                        output="decision_function"),
                  Param("tree", "sklearn.tree.DecisionTreeClassifier",
                        hyper={"max_depth": 2, "random_state": 0}, output="predict_proba")]
        loss = "zero_one"

        def scorer(est, X_, y_):
            return float(np.mean(est.predict(X_) != y_))
    design = simple_design(n, 2, fold=mlxtend_folds(n, seed))
    cube = fit_cube(X, y, params, design, task=task, loss=loss)
    out = paired_5x2cv(cube, compare=[0, 1])
    a, b = (p.build() for p in params)
    t, p_t = paired_ttest_5x2cv(a, b, X, y, scoring=scorer, random_seed=seed)
    f, p_f = combined_ftest_5x2cv(a, b, X, y, scoring=scorer, random_seed=seed)
    assert float(out["t"]) == pytest.approx(t, rel=1e-9)
    assert float(out["p_value"]) == pytest.approx(p_t, rel=1e-9)
    assert float(out["f"]) == pytest.approx(f, rel=1e-9)
    assert float(out["f_p_value"]) == pytest.approx(p_f, rel=1e-9)


def test_mlxtend_with_a_score_flips_t():
    """README: equality holds with a loss as mlxtend's scoring; with accuracy (its default for
    classifiers, = 1 − zero_one) t changes sign and F is the same."""
    rng = np.random.default_rng(2)
    n, seed = 60, 5
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    params = [Param("logit", "sklearn.linear_model.LogisticRegression", hyper={"C": 1.0},
                    output="decision_function"),
              Param("tree", "sklearn.tree.DecisionTreeClassifier",
                    hyper={"max_depth": 1, "random_state": 0}, output="predict_proba")]
    design = simple_design(n, 2, fold=mlxtend_folds(n, seed))
    out = paired_5x2cv(fit_cube(X, y, params, design, task="classification", loss="zero_one"))
    a, b = (p.build() for p in params)
    t, p_t = paired_ttest_5x2cv(a, b, X, y, scoring="accuracy", random_seed=seed)
    f, _ = combined_ftest_5x2cv(a, b, X, y, scoring="accuracy", random_seed=seed)
    assert float(out["t"]) != 0
    assert float(out["t"]) == pytest.approx(-t, rel=1e-9)
    assert float(out["p_value"]) == pytest.approx(p_t, rel=1e-9)
    assert float(out["f"]) == pytest.approx(f, rel=1e-9)


def test_by_hand():
    """Absolute loss, y = 0, constant predictions: p_i^(j) chosen directly."""
    p = np.array([[1.0, 3.0], [0.0, 2.0], [2.0, 2.0], [1.0, 1.0], [4.0, 0.0]])
    fold = np.array([np.random.default_rng(i).permutation(np.repeat([0, 1], 5)) for i in (0, 1, 2, 4, 5)],
                    dtype=np.int32)                      # five different 2-fold splits
    design = simple_design(10, 2, repeats=5, fold=fold)
    pred = np.zeros((2, design.n_splits, 10))
    for i in range(5):
        for j in range(2):
            pred[0, design.fold_split[i, j]] = p[i, j]
    out = paired_5x2cv(cube_from_predictions(pred, np.zeros(10), design, loss="absolute"))
    s2 = [2.0, 2.0, 0.0, 0.0, 8.0]                       # (p1 − p̄)² + (p2 − p̄)²
    assert float(out["t"]) == pytest.approx(1.0 / np.sqrt(sum(s2) / 5))
    assert float(out["f"]) == pytest.approx(40.0 / (2 * 12.0))
    assert float(out["estimate"]) == pytest.approx(1.6)
    np.testing.assert_allclose(out["difference"], p)
    assert "tiny_test_sets" in {w["code"] for w in json.loads(out.attrs["warnings"])}


@pytest.mark.parametrize("n,warned", [(150, True), (200, False)])
def test_liberal_design_warning(n, warned):
    """Halves of n/2 samples with 10 features: warned below 10 per feature (75 < 100)."""
    rng = np.random.default_rng(0)
    design = simple_design(n, 2, repeats=5)
    y = rng.normal(size=n)
    pred = y + rng.normal(size=(2, design.n_splits, n))
    cube = cube_from_predictions(pred, y, design, X=rng.normal(size=(n, 10)))
    found = [w for w in json.loads(paired_5x2cv(cube).attrs["warnings"])
             if w["code"] == "liberal_design"]
    assert bool(found) == warned
    if warned:
        assert found[0]["message"].startswith("paired_5x2cv trains on halves of 75 samples "
                                              "with 10 features (< 10 per feature)")


def test_refused_unless_5x2():
    design = simple_design(12, 3, repeats=5)
    cube = cube_from_predictions(np.zeros((2, design.n_splits, 12)), np.zeros(12), design)
    with pytest.raises(InputError, match=r"paired_5x2cv: needs design \{folds: 2, repeats: 5\}"
                       r".*3 folds × 5 repeats"):
        paired_5x2cv(cube)
    design = simple_design(12, 2, repeats=5)
    cube = cube_from_predictions(np.zeros((3, design.n_splits, 12)), np.zeros(12), design)
    with pytest.raises(InputError, match=r"paired_5x2cv.compare: the cube has 3 params"):
        paired_5x2cv(cube)
    with pytest.raises(InputError, match=r"paired_5x2cv.compare: name two params"):
        paired_5x2cv(cube, compare=[1])


def test_workflow_refused_before_any_fit(tmp_path):
    config = {"name": "x", "data": {"source": "sklearn", "name": "diabetes"},
              "learners": [{"name": "ridge", "class": "sklearn.linear_model.Ridge",
                            "grid": {"alpha": [0.1, 1.0]}}],
              "design": {"folds": 5}, "estimators": [{"paired_5x2cv": {"compare": [0, 1]}}]}
    with pytest.raises(InputError, match=r"design: paired_5x2cv needs \{folds: 2, repeats: 5\}"):
        parse_workflow(config, tmp_path / "wf.yaml")
    config["design"] = {"folds": 2, "repeats": 5}
    parse_workflow(config, tmp_path / "wf.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("n,low,high", [(80, 0.07, 0.12), (200, 0.035, 0.075)])
def test_size_under_the_null(n, low, high):
    """README's liberal_design numbers: two 5-feature least-squares learners of equal true
    error (corrected_t's null setting, 10 features), 2,000 datasets (binomial se 0.5%): the
    t test rejects 8.2% at nominal 5% with n = 80 (halves of 40 < 10 per feature; warned) and
    5.6% with n = 200 (not warned)."""
    from test_corrected_t import _ols_predictions

    rng = np.random.default_rng(n)
    rejections, runs = 0, 2000
    for run in range(runs):
        x = rng.normal(size=(n, 10))
        y = x[:, :5].sum(1) * 0.5 + x[:, 5:].sum(1) * 0.5 + rng.normal(size=n)
        design = simple_design(n, 2, repeats=5, seed=run)
        out = paired_5x2cv(cube_from_predictions(_ols_predictions(x, y, design), y, design, X=x))
        rejections += float(out["p_value"]) < 0.05
        warned = "liberal_design" in {w["code"] for w in json.loads(out.attrs["warnings"])}
        assert warned == (n < 200)
    assert low <= rejections / runs <= high, rejections / runs
