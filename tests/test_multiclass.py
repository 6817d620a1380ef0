"""Multiclass classification: per-class predictions along `class`, losses against scikit-learn."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score, zero_one_loss

from cvflow.errors import InputError
from cvflow.estimators import kfold, nested_cv, stability_nested
from cvtest import run_cli
from nested_cases import random_cube, ref_all

LOSSES = {
    "zero_one": lambda y, p, labels: zero_one_loss(y, np.asarray(labels)[p.argmax(axis=1)]),
    "log_loss": lambda y, p, labels: log_loss(y, p, labels=labels),
    "brier": lambda y, p, labels: brier_score_loss(y, p, labels=labels),
}


@pytest.fixture(scope="module")
def four_class_store(tmp_path_factory):
    """A real run: 4 classes, 5 unequal stratified folds, LogisticRegression predict_proba."""
    tmp = tmp_path_factory.mktemp("multi")
    X, y = make_classification(n_samples=103, n_features=6, n_informative=4, n_classes=4,
                               random_state=0)
    np.savez(tmp / "four.npz", X=X, y=y * 10 + 5)                 # labels 5, 15, 25, 35
    (tmp / "wf.yaml").write_text(
        "data: {source: npz, path: four.npz}\n"
        "task: classification\n"
        "loss: log_loss\n"
        "learners:\n"
        "  - name: logreg\n"
        "    class: sklearn.linear_model.LogisticRegression\n"
        "    output: predict_proba\n"
        "    grid: {C: [0.01, 1.0]}\n"
        "design: {folds: 5, seed: 0}\n"
        "estimators: [kfold, nested_cv]\n")
    store = tmp / "four.zarr"
    done = run_cli("run", tmp / "wf.yaml", "--store", store, "--workers", "1")
    assert done.returncode == 0, done.stderr
    return store, X, y * 10 + 5


def test_store_keeps_per_class_probabilities(four_class_store):
    import cvflow

    store, X, y = four_class_store
    cube = cvflow.open(store)
    assert cube["pred"].dims == ("param", "split", "sample", "class")
    assert cube["class"].values.tolist() == [5, 15, 25, 35]
    assert int(cube.attrs["cvflow_format"]) == 2
    # the full fit's stored probabilities are an independent scikit-learn fit's
    model = LogisticRegression(C=1.0).fit(X, y)
    full = cube["pred"].values[1, int(cube.attrs["full_split"])]
    np.testing.assert_allclose(full, model.predict_proba(X), atol=1e-3)   # lbfgs tolerance


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_kfold_equals_sklearn_on_the_stored_folds(four_class_store, loss):
    import cvflow

    store, _, y = four_class_store
    cube = cvflow.open(store)
    res = kfold(cube, loss=loss)
    fold = cube["fold"].values[0]
    sizes = np.bincount(fold)
    assert len(set(sizes)) > 1                                    # unequal folds
    labels = cube["class"].values.tolist()
    pred = cube["pred"].values
    for h in range(2):
        per_fold = [LOSSES[loss](y[fold == j], pred[h, s][fold == j], labels)
                    for j, s in enumerate(cube["fold_split"].values[0])]
        np.testing.assert_allclose(res["fold_score"].values[h, 0], per_fold, rtol=0, atol=1e-7)
        assert float(res["estimate"][h]) == pytest.approx(per_fold @ sizes / sizes.sum(), abs=1e-7)


def test_multiclass_roc_auc_is_one_vs_rest_per_fold(four_class_store, capsys):
    import cvflow
    from cvflow.cli import main

    store, _, y = four_class_store
    cube = cvflow.open(store)
    fold = cube["fold"].values[0]
    labels = cube["class"].values.tolist()
    assert main(["report", str(store), "--json", "--loss", "roc_auc"]) == 0
    out = json.loads(capsys.readouterr().out)["kfold"]
    for h in range(2):
        want = [roc_auc_score(y[fold == j], cube["pred"].values[h, s][fold == j],
                              multi_class="ovr", labels=labels)
                for j, s in enumerate(cube["fold_split"].values[0])]
        np.testing.assert_allclose(out["fold_score"]["values"][h][0], want, rtol=1e-12)
        assert out["estimate"]["values"][h] == pytest.approx(np.mean(want), rel=1e-12)
    assert main(["report", str(store), "--loss", "hinge"]) == 2
    assert "two classes only" in capsys.readouterr().err


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_nested_family_equals_brute_force(loss):
    cube, _ = random_cube(n=14, k=4, repeats=2, n_params=3, seed=1, classes=4)
    lambdas = [0.0, 0.3, 2.0]
    ref = ref_all(cube, lambdas, loss=loss)
    out = stability_nested(cube, lambdas=lambdas, loss=loss)
    np.testing.assert_allclose(out["estimate"], ref["m"], rtol=1e-10)
    np.testing.assert_array_equal(out["chosen"], ref["chosen"])
    np.testing.assert_allclose(out["inner_stability"], ref["mu_t"], rtol=1e-10)
    assert int(out["selected"]) == ref["h_star"]
    nested = nested_cv(cube, loss=loss)
    np.testing.assert_array_equal(nested["chosen"], ref["chosen"][..., 0])
    assert float(nested["estimate"]) == pytest.approx(ref["m"][0], rel=1e-10)


def test_multiclass_cube_reduces_lazily_like_in_memory(four_class_store):
    """A lazy cube reduced chunk by chunk (budget 0) gives the in-memory numbers."""
    import dask

    import cvflow

    store, _, _ = four_class_store
    cube = cvflow.open(store)
    want = kfold(cube.load(), loss="brier")["estimate"].values
    with dask.config.set({"cvflow.reduce.in-memory-bytes": 0}):
        got = kfold(cvflow.open(store), loss="brier")["estimate"].values
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_binary_only_losses_refused_at_validate(tmp_path):
    X, y = make_classification(n_samples=40, n_classes=3, n_informative=3, random_state=0)
    np.savez(tmp_path / "three.npz", X=X, y=y)
    (tmp_path / "wf.yaml").write_text(
        "data: {source: npz, path: three.npz}\ntask: classification\nloss: hinge\n"
        "learners: [{class: sklearn.svm.LinearSVC}]\n")
    done = run_cli("validate", tmp_path / "wf.yaml")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "'hinge' is defined for two classes only" in done.stderr


def test_get_loss_unknown_class_label_is_input_error():
    with pytest.raises(InputError):
        kfold(random_cube(classes=4)[0], loss="hinge")
