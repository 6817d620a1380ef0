"""Losses against scikit-learn's metrics on the same predictions, through the reducers too."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression, Ridge
from scipy.special import huber
from sklearn.metrics import (average_precision_score, brier_score_loss, hinge_loss, log_loss,
                             mean_absolute_error, mean_pinball_loss, mean_squared_error, r2_score,
                             roc_auc_score, zero_one_loss)

from cvflow.errors import InputError
from cvflow.estimators import bates_ncv, corrected_kfold, kfold, nested_cv, stability, wald_cv
from cvflow.workflow.params import Param
from cvflow.estimators.losses import apply_loss, check_loss, get_loss
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
        assert float(res["full_test_risk"][h]) == pytest.approx(metric(full, is_test), rel=1e-12)
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
        assert float(res["full_test_risk"][0]) == pytest.approx(
            metric(y[is_test], model.predict(X[is_test])), rel=1e-10)
        assert float(res["full_risk"][0]) == pytest.approx(
            metric(y[~is_test], model.predict(X[~is_test])), rel=1e-10)


def test_elementwise_losses_on_arrays():
    y = np.array([0, 1, 1, 0, 1])
    f = np.array([-2.0, 0.3, -0.1, 0.5, np.nan])
    def loss(name, pred, output="decision_function"):
        return apply_loss(name, y, pred[None], [0, 1], [output])[0]

    np.testing.assert_allclose(loss("hinge", f)[:4], [0, 0.7, 1.1, 1.5])
    np.testing.assert_allclose(loss("zero_one", f)[:4], [0, 0, 1, 1])
    p = np.array([0.1, 0.8, 0.4, 0.6, np.nan])
    np.testing.assert_allclose(loss("zero_one", p, "predict_proba")[:4], [0, 0, 1, 1])
    np.testing.assert_allclose(loss("log_loss", p, "predict_proba")[:4],
                               -np.log([0.9, 0.8, 0.4, 0.4]), rtol=1e-12)
    # a failed fit (NaN prediction) gives a NaN loss, never a silent 0 or 1
    for name in ("hinge", "zero_one", "log_loss", "brier"):
        assert np.isnan(loss(name, f if name == "hinge" else p)[4])
    assert np.isnan(loss("zero_one", f, "predict")[4])


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

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 30)
    outputs = ["decision_function", "predict_proba", "predict", "decision_function"]
    stored = np.stack([rng.normal(size=30), rng.uniform(size=30), rng.integers(0, 2, 30),
                       rng.normal(size=30)]).astype(float)
    labels = [(stored[0] > 0), (stored[1] > 0.5), stored[2], (stored[3] > 0)]
    data = da.from_array(stored, chunks=(1, 30)) if lazy else stored
    got = np.asarray(apply_loss("zero_one", y, data, [0, 1], outputs))
    for h in range(4):
        assert got[h].mean() == pytest.approx(zero_one_loss(y, labels[h].astype(int)))


def _regression_cube(folds=4):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(41, 3))
    y = X @ [1.0, -2.0, 0.5] + rng.standard_t(3, size=41)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a})
              for a in (0.1, 30.0)]
    design = simple_design(41, folds, seed=1)
    return fit_cube(X, y, params, design), y, design


def _per_fold(cube, design, metric):
    """metric(y[N_j], stored fold-j predictions on N_j) for every param and fold."""
    y = cube["y"].values
    return np.array([[metric(y[design.fold[0] == j], cube["pred"].values[h, s][design.fold[0] == j])
                      for j, s in enumerate(design.fold_split[0])]
                     for h in range(cube.sizes["param"])])


@pytest.mark.parametrize("loss,metric", [
    ("pinball:0.9", lambda y, p: mean_pinball_loss(y, p, alpha=0.9)),
    ("pinball:0.2", lambda y, p: mean_pinball_loss(y, p, alpha=0.2)),
    ("huber:1.5", lambda y, p: float(np.mean(huber(1.5, y - p)))),
    ("absolute", mean_absolute_error),
])
def test_regression_losses_per_fold_equal_reference(loss, metric):
    cube, y, design = _regression_cube()
    res = kfold(cube, loss=loss)
    want = _per_fold(cube, design, metric)
    np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)
    sizes = np.bincount(design.fold[0])
    np.testing.assert_allclose(res["estimate"].values, want @ sizes / sizes.sum(), rtol=1e-12)
    assert res.attrs["loss"] == loss


def test_r2_is_a_per_fold_metric_and_selection_maximises_it():
    cube, y, design = _regression_cube()
    res = kfold(cube, loss="r2")
    want = _per_fold(cube, design, r2_score)
    np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)
    np.testing.assert_allclose(res["estimate"].values, want.mean(axis=1), rtol=1e-12)
    assert int(res["selected"]) == int(np.argmax(want.mean(axis=1)))
    assert res.attrs["greater_is_better"] == 1


@pytest.mark.parametrize("output", ["decision_function", "predict_proba"])
@pytest.mark.parametrize("loss,metric", [("roc_auc", roc_auc_score),
                                         ("average_precision", average_precision_score)])
def test_binary_metrics_per_fold_equal_sklearn(output, loss, metric):
    X, y, is_test = classification_data(("no", "yes"))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c},
                    output=output) for c in (0.001, 1.0)]
    design = simple_design(len(y), 5, is_test=is_test, seed=3, y=y, splitter="stratified")
    cube = fit_cube(X, y, params, design, task="classification", is_test=is_test)
    res = kfold(cube, loss=loss)
    want = _per_fold(cube, design, lambda t, s: metric(t == "yes", s))
    np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)
    np.testing.assert_allclose(res["estimate"].values, want.mean(axis=1), rtol=1e-12)
    assert int(res["selected"]) == int(np.argmax(want.mean(axis=1)))


def test_binary_brier_equals_sklearn():
    X, y, is_test = classification_data((3, 7))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", output="predict_proba")]
    design = simple_design(len(y), 4, is_test=is_test, seed=3)
    cube = fit_cube(X, y, params, design, task="classification", is_test=is_test)
    res = kfold(cube, loss="brier")
    want = _per_fold(cube, design, lambda t, p: brier_score_loss(t, p, pos_label=7))
    np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)


@pytest.mark.parametrize("estimator", [corrected_kfold, stability, bates_ncv, wald_cv])
def test_pointwise_estimators_refuse_metrics(estimator):
    cube, _, _ = _regression_cube()
    with pytest.raises(InputError, match="'r2' is a per-fold metric, but .* averages per-sample"):
        estimator(cube, loss="r2")


def test_custom_loss_by_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "mylosses.py").write_text(
        "import numpy as np\n"
        "def cubic(y_true, y_pred):\n"
        "    return np.abs(y_true - y_pred) ** 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mylosses", raising=False)
    cube, y, design = _regression_cube()
    # the working directory is not searched (a store is data, cvflow.trust)
    with pytest.raises(InputError, match="'mylosses.cubic' does not import .*PYTHONPATH"):
        kfold(cube, loss="mylosses.cubic")
    monkeypatch.syspath_prepend(str(tmp_path))
    res = kfold(cube, loss="mylosses.cubic")
    want = _per_fold(cube, design, lambda t, p: np.mean(np.abs(t - p) ** 3))
    np.testing.assert_allclose(res["fold_score"].values[:, 0], want, rtol=1e-12)
    assert float(corrected_kfold(cube, loss="mylosses.cubic")["kfold"][0]) == \
        pytest.approx(float(res["estimate"][0]), rel=1e-12)
    # from Python, the function itself
    def cubic(y_true, y_pred):
        return np.abs(y_true - y_pred) ** 3
    np.testing.assert_allclose(kfold(cube, loss=cubic)["estimate"], res["estimate"], rtol=1e-12)
    np.testing.assert_allclose(corrected_kfold(cube, loss=cubic)["kfold"], res["estimate"],
                               rtol=1e-12)


def test_custom_loss_must_return_one_value_per_sample():
    cube, _, _ = _regression_cube()
    with pytest.raises(InputError, match="returned shape \\(\\); a pointwise loss returns one value"):
        kfold(cube, loss=lambda y_true, y_pred: float(np.mean(y_true - y_pred)))


@pytest.mark.parametrize("spec,fragment", [
    ("pinball", "'pinball' needs its parameter: write pinball:Q"),
    ("pinball:1.5", "Q = '1.5' must be in \\(0, 1\\)"),
    ("huber:-1", "DELTA = '-1' must be > 0"),
    ("huber:abc", "is not a number"),
    ("squared:2", "'squared' takes no parameter"),
    ("nosuch", "unknown loss 'nosuch'; use one of squared, absolute, pinball:Q"),
    ("nosuchmodule.f", "'nosuchmodule.f' does not import"),
])
def test_loss_spec_errors(spec, fragment):
    with pytest.raises(InputError, match=fragment):
        get_loss(spec)


def test_loss_class_count_errors():
    with pytest.raises(InputError, match="'hinge' is defined for two classes only"):
        check_loss("hinge", "classification", {"decision_function"}, n_classes=3)
    with pytest.raises(InputError, match="'roc_auc' with 3 classes needs predict_proba outputs"):
        check_loss("roc_auc", "classification", {"decision_function"}, n_classes=3)
    assert check_loss("pinball:0.90", "regression") == "pinball:0.9"


def test_nested_cv_with_roc_auc_equals_brute_force():
    X, y, is_test = classification_data((0, 1))
    params = [Param("logreg", "sklearn.linear_model.LogisticRegression", hyper={"C": c},
                    output="decision_function") for c in (0.0005, 0.01, 1.0)]
    design = simple_design(len(y), 4, is_test=is_test, seed=4, pairs=True)
    cube = fit_cube(X, y, params, design, task="classification", is_test=is_test)
    res = nested_cv(cube, loss="roc_auc")
    pred, fold = cube["pred"].values, design.fold[0]

    def auc(h, split, j):
        return roc_auc_score(y[fold == j], pred[h, split][fold == j])

    outer = []
    for t in range(4):
        inner = [np.mean([auc(h, design.pair_split[0, t, l], l) for l in range(4) if l != t])
                 for h in range(3)]
        h_t = int(np.argmax(inner))
        assert int(res["chosen"][0, t]) == h_t
        outer.append(auc(h_t, design.fold_split[0, t], t))
    assert float(res["estimate"]) == pytest.approx(np.mean(outer), rel=1e-12)
    np.testing.assert_allclose(res["outer_score"].values[0], outer, rtol=1e-12)


def test_pinball_and_custom_loss_from_yaml_and_cli(tmp_path, write_workflow, capsys, monkeypatch):
    """A workflow's custom loss (a module beside the file) and --loss pinball:0.9 on the CLI
    equal their definitions on the stored out-of-fold predictions."""
    import json

    import cvflow
    from cvflow.cli import main
    from cvtest import QUICK, run_cli

    (tmp_path / "mylosses.py").write_text(
        "import numpy as np\n"
        "def cubic(y_true, y_pred):\n"
        "    return np.abs(y_true - y_pred) ** 3\n")
    wf = write_workflow(QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "[0.5, 5.0]")
                        + "loss: mylosses.cubic\n")
    store = tmp_path / "r.zarr"
    assert run_cli("run", wf, "--store", store, "--workers", "1").returncode == 0
    cube = cvflow.open(store)
    y, fold = cube["y"].values, cube["fold"].values[0]
    oof = [cube["pred"].values[:, s][:, fold == j]                     # fold j: (param, n_j)
           for j, s in enumerate(cube["fold_split"].values[0])]

    def pooled(metric):
        return [sum(metric(y[fold == j], oof[j][h]) * (fold == j).sum() for j in range(5))
                / len(y) for h in range(2)]

    monkeypatch.chdir(tmp_path)
    # the store's default loss is code: refused until trusted, then imported the ordinary way
    assert main(["report", str(store), "--json"]) == 2
    assert "default loss mylosses.cubic is a user function" in capsys.readouterr().err
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["report", str(store), "--json", "--trust"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kfold"]["loss"] == "mylosses.cubic"
    np.testing.assert_allclose(out["kfold"]["estimate"]["values"],
                               pooled(lambda t, p: np.mean(np.abs(t - p) ** 3)), rtol=1e-12)
    assert main(["report", str(store), "--json", "--loss", "pinball:0.9"]) == 0
    out = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(out["kfold"]["estimate"]["values"],
                               pooled(lambda t, p: mean_pinball_loss(t, p, alpha=0.9)), rtol=1e-12)
    assert main(["report", str(store), "--json", "--loss", "r2"]) == 0
    out = json.loads(capsys.readouterr().out)
    per_fold = [[r2_score(y[fold == j], oof[j][h]) for j in range(5)] for h in range(2)]
    np.testing.assert_allclose(np.squeeze(out["kfold"]["fold_score"]["values"]), per_fold,
                               rtol=1e-12)
    np.testing.assert_allclose(out["kfold"]["estimate"]["values"], np.mean(per_fold, axis=1),
                               rtol=1e-12)
    assert main(["report", str(store), "--loss", "pinball:2"]) == 2
    assert "pinball:2" in capsys.readouterr().err


def test_validate_refuses_a_metric_default_for_pointwise_estimators(write_workflow):
    from cvtest import QUICK, run_cli

    wf = write_workflow(QUICK.replace("[kfold]", "[kfold, nested_cv, corrected_kfold]")
                        + "loss: r2\n")
    done = run_cli("validate", wf)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "estimators[2]: loss: 'r2' is a per-fold metric, but corrected_kfold averages" in \
        done.stderr
