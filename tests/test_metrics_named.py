"""Named metrics (accuracy, F1, MCC, ...) against scikit-learn's scorers on the same folds.

The reference is independent of cvflow's store: ``cross_validate(model, X, y, cv=<the cube's
folds>, scoring=<scikit-learn's name>)`` fits its own models and scores each test fold.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import PredefinedSplit, cross_validate
from sklearn.preprocessing import StandardScaler

from cvflow.errors import InputError
from cvflow.estimators import corrected_kfold, kfold, nested_cv
from cvflow.workflow.params import Param
from cvflow.estimators.losses import DECLARED, get_loss
from cvflow.testing import fit_cube, simple_design

BINARY = ["accuracy", "balanced_accuracy", "f1", "precision", "recall", "matthews_corrcoef",
          "f1_macro", "f1_micro", "f1_weighted", "precision_macro", "precision_weighted",
          "recall_macro", "recall_weighted"]
MULTICLASS = ["accuracy", "balanced_accuracy", "f1_macro", "f1_micro", "f1_weighted",
              "precision_macro", "precision_micro", "precision_weighted", "recall_macro",
              "recall_micro", "recall_weighted", "matthews_corrcoef"]


def _binary(labels=(0, 1)):
    X, y = load_breast_cancer(return_X_y=True)
    rows = np.random.default_rng(0).choice(len(y), 150, replace=False)
    X = StandardScaler().fit_transform(X[rows][:, :5])
    return X, np.where(y[rows] == 1, labels[1], labels[0])


def _reference(model, X, y, fold, scoring):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return cross_validate(model, X, y, cv=PredefinedSplit(fold), scoring=scoring)


def _cube(X, y, params, folds, **kw):
    design = simple_design(len(y), folds, seed=4, y=y, splitter="stratified")
    return fit_cube(X, y, params, design, task="classification", **kw), design.fold[0]


@pytest.mark.parametrize("output", ["predict", "decision_function", "predict_proba"])
@pytest.mark.parametrize("labels", [(0, 1), (-1, 1)])
def test_binary_named_metrics_equal_sklearn_scorers(output, labels):
    X, y = _binary(labels)
    cs = (0.003, 0.05, 1.0)
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c},
                    output=output) for c in cs]
    cube, fold = _cube(X, y, params, 5)
    for name in BINARY:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            res = kfold(cube, loss=name)
        want = np.array([_reference(LogisticRegression(C=c), X, y, fold, name)["test_score"]
                         for c in cs])
        np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12, atol=1e-15,
                                   err_msg=name)
        np.testing.assert_allclose(res["estimate"].values, want.mean(axis=1), rtol=1e-12,
                                   atol=1e-15, err_msg=name)
        assert int(res["selected"]) == int(np.argmax(want.mean(axis=1)))
        assert res.attrs["greater_is_better"] == 1


def test_binary_positive_class_is_the_last_label():
    """Labels 3 / 7: scikit-learn's `f1` scorer needs pos_label; cvflow scores the larger label."""
    import sklearn.metrics
    from sklearn.metrics import make_scorer

    X, y = _binary((3, 7))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": 0.05})]
    cube, fold = _cube(X, y, params, 4)
    for name, metric in (("f1", "f1_score"), ("precision", "precision_score"),
                         ("recall", "recall_score")):
        scorer = make_scorer(getattr(sklearn.metrics, metric), pos_label=7)
        want = _reference(LogisticRegression(C=0.05), X, y, fold, scorer)["test_score"]
        np.testing.assert_allclose(kfold(cube, loss=name)["fold_score"].values[0, 0], want,
                                   rtol=1e-12)


@pytest.mark.parametrize("output", ["predict", "predict_proba", "decision_function"])
def test_multiclass_named_metrics_equal_sklearn_scorers(output):
    X, y = load_wine(return_X_y=True)
    y = np.asarray(["a", "b", "c"])[y]                      # string labels
    cs = (0.001, 0.1, 10.0)
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c},
                    output=output) for c in cs]
    X = StandardScaler().fit_transform(X)
    cube, fold = _cube(X, y, params, 5)
    for name in MULTICLASS:
        res = kfold(cube, loss=name)
        want = np.array([_reference(LogisticRegression(C=c), X, y, fold, name)["test_score"]
                         for c in cs])
        np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12, atol=1e-15,
                                   err_msg=name)


def test_regression_named_metrics_equal_sklearn_scorers():
    X, y = load_diabetes(return_X_y=True)
    alphas = (0.01, 1.0, 100.0)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in alphas]
    design = simple_design(len(y), 6, seed=1)              # 442 = 6 unequal folds
    cube = fit_cube(X, y, params, design)
    for name in ("r2", "explained_variance"):
        res = kfold(cube, loss=name)
        want = np.array([_reference(Ridge(alpha=a), X, y, design.fold[0], name)["test_score"]
                         for a in alphas])
        np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)
        assert int(res["selected"]) == int(np.argmax(want.mean(axis=1)))


def test_named_metrics_declared_with_sklearn_names():
    for name in BINARY + MULTICLASS + ["r2", "explained_variance"]:
        decl = get_loss(name)
        assert not decl.pointwise and decl.greater_is_better, name
    assert not DECLARED["f1"].multiclass and DECLARED["f1_macro"].multiclass


def test_binary_only_metrics_refused_on_multiclass_and_pointwise_estimators_refuse():
    X, y = load_wine(return_X_y=True)
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": 1.0})]
    cube, _ = _cube(StandardScaler().fit_transform(X), y, params, 3)
    with pytest.raises(InputError, match="'f1' is defined for two classes only, and the data have 3"):
        kfold(cube, loss="f1")
    with pytest.raises(InputError, match="'accuracy' is a per-fold metric, but .* averages per-sample"):
        corrected_kfold(cube, loss="accuracy")
    with pytest.raises(InputError, match="'accuracy' is not a regression loss"):
        kfold(fit_cube(X[:, :2], X[:, 3], [Param("ridge", "sklearn.linear_model.Ridge")],
                       simple_design(len(y), 3)), loss="accuracy")


def test_nested_cv_takes_named_metrics():
    """nested_cv's per-fold metric path works with a named metric (each outer fold's choice
    maximises the inner mean of the fold accuracies)."""
    X, y = _binary()
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c})
              for c in (0.003, 1.0)]
    design = simple_design(len(y), 4, seed=4, y=y, splitter="stratified", pairs=True)
    cube = fit_cube(X, y, params, design, task="classification")
    res = nested_cv(cube, loss="balanced_accuracy")
    assert 0.5 < float(res["estimate"]) <= 1.0


def test_named_metric_as_workflow_default_and_report_loss(tmp_path):
    """`loss: balanced_accuracy` in a workflow; `cvflow report --loss f1_macro` on its store."""
    import json

    from cvtest import run_cli

    (tmp_path / "wf.yaml").write_text(
        "data: {source: sklearn, name: breast_cancer}\n"
        "task: classification\n"
        "loss: balanced_accuracy\n"
        "learners:\n"
        "  - name: tree\n"
        "    class: sklearn.tree.DecisionTreeClassifier\n"
        "    params: {random_state: 0}\n"
        "    grid: {max_depth: [1, 3]}\n"
        "design: {folds: 3, seed: 0}\n"
        "estimators: [kfold]\n")
    store = tmp_path / "s.zarr"
    done = run_cli("run", tmp_path / "wf.yaml", "--store", store, "--workers", "1")
    assert done.returncode == 0, done.stderr
    for loss in (None, "f1_macro"):
        args = ["report", store, "--json"] + (["--loss", loss] if loss else [])
        out = run_cli(*args)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)["kfold"]
        assert result["loss"] == (loss or "balanced_accuracy")
        assert 0.8 < max(result["estimate"]["values"]) <= 1.0
