"""`cvflow report STORE --loss a --loss b --estimators x,y`: several metrics in one report,
chosen estimators, and a per-fold metric given only to the estimators that take it (the
others say why in one line; the report does not fail). Checked against scikit-learn's metrics
on the stored out-of-fold predictions."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.metrics import roc_auc_score, zero_one_loss

import cvflow
from cvflow import report
from cvflow.errors import InputError

from cvtest import run_cli, tree_digest

WORKFLOW = """\
name: metrics
data: {source: npz, path: two.npz}
task: classification
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    grid: {C: [0.01, 1.0]}
design: {folds: 4, seed: 0}
estimators: [kfold, corrected_kfold, {wald_cv: {alpha: 0.2}}]
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    X, y = make_classification(n_samples=80, n_features=5, flip_y=0.2, random_state=1)
    np.savez(tmp / "two.npz", X=X, y=y)
    (tmp / "wf.yaml").write_text(WORKFLOW)
    done = run_cli("run", tmp / "wf.yaml", "--store", tmp / "s.zarr", "--cluster", "threads")
    assert done.returncode == 0, done.stderr
    return tmp / "s.zarr"


def sklearn_fold_scores(store, metric, pooled: bool):
    """Per param: the K-fold score from the stored fold fits' predictions, by sklearn."""
    cube = cvflow.open(store)
    y, fold = cube["y"].values, cube["fold"].values[0]
    out = []
    for h in range(cube.sizes["param"]):
        per_fold, sizes = [], []
        for j, s in enumerate(cube["fold_split"].values[0]):
            test = fold == j
            pred = cube["pred"].values[h, s][test]
            per_fold.append(metric(y[test], pred))
            sizes.append(test.sum())
        out.append(np.average(per_fold, weights=sizes) if pooled else np.mean(per_fold))
    return np.array(out)


def test_a_per_fold_metric_goes_to_the_estimators_that_take_it(store):
    before = tree_digest(store)
    res = run_cli("report", store, "--loss", "roc_auc")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    skipped = [line for line in lines if "skipped" in line]
    assert skipped == [
        "corrected_kfold: skipped: loss: 'roc_auc' is a per-fold metric, but corrected_kfold "
        "averages per-sample losses; use a pointwise loss or the kfold / nested_cv estimators",
        "wald_cv: skipped: loss: 'roc_auc' is a per-fold metric, but wald_cv averages per-sample "
        "losses; use a pointwise loss or the kfold / nested_cv estimators"]
    got = json.loads(run_cli("report", store, "--loss", "roc_auc", "--json").stdout)
    np.testing.assert_allclose(got["kfold"]["estimate"]["values"],
                               sklearn_fold_scores(store, roc_auc_score, pooled=False),
                               rtol=1e-12)
    assert got["corrected_kfold"] == {"skipped": skipped[0].split("skipped: ", 1)[1]}
    assert tree_digest(store) == before


def test_several_losses_and_chosen_estimators(store):
    res = run_cli("report", store, "--loss", "zero_one", "--loss", "roc_auc",
                  "--estimators", "kfold,corrected_kfold", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert list(got) == ["zero_one", "roc_auc"]
    assert list(got["zero_one"]) == ["kfold", "corrected_kfold"]      # wald_cv not asked
    sign = lambda metric: lambda t, p: metric(t, (p > 0).astype(int))   # noqa: E731
    np.testing.assert_allclose(got["zero_one"]["kfold"]["estimate"]["values"],
                               sklearn_fold_scores(store, sign(zero_one_loss), pooled=True),
                               rtol=1e-12)
    assert got["zero_one"]["corrected_kfold"]["loss"] == "zero_one"
    assert "skipped" in got["roc_auc"]["corrected_kfold"]
    text = run_cli("report", store, "--loss", "zero_one", "--loss", "roc_auc")
    assert text.returncode == 0, text.stderr
    assert "== loss zero_one ==" in text.stdout and "== loss roc_auc ==" in text.stdout
    assert text.stdout.count("wald_cv:") == 2                        # every workflow estimator
    # a workflow's options stay with its estimator when it is chosen by name
    wald = json.loads(run_cli("report", store, "--estimators", "wald_cv", "--json").stdout)
    assert list(wald) == ["wald_cv"] and wald["wald_cv"]["alpha"] == 0.2


def test_python_equivalent(store):
    cube = cvflow.open(store)
    out = report.compute_losses(cube, ["zero_one", "roc_auc"], ["kfold", "corrected_kfold"])
    assert list(out) == ["zero_one", "roc_auc"]
    assert set(out["roc_auc"]) == {"kfold"} and set(out["roc_auc"].skipped) == {"corrected_kfold"}
    one = report.compute(cube, ["kfold"], loss="roc_auc")
    np.testing.assert_array_equal(one["kfold"]["estimate"], out["roc_auc"]["kfold"]["estimate"])
    with pytest.raises(InputError, match="'roc_auc' is a per-fold metric, but corrected_kfold"):
        report.compute(cube, ["corrected_kfold"], loss="roc_auc")


@pytest.mark.parametrize("args, message", [
    (("--estimators", "kfold,nope"), "--estimators: unknown estimator 'nope'; available:"),
    (("--estimators", ","), "--estimators: ','; give comma-separated estimator names"),
    (("--loss", "roc_auc", "--estimators", "corrected_kfold"),
     "loss: 'roc_auc' is a per-fold metric, but corrected_kfold averages per-sample losses"),
    (("--estimators", "kfold", "--set", "wald_cv.alpha=0.1"),
     "--set wald_cv: the report's --estimators do not ask for this estimator; it asks for kfold"),
    (("--html", "x.html", "--loss", "zero_one", "--loss", "roc_auc"),
     "--html: the page draws one loss, got 2"),
])
def test_bad_choices_exit_2_in_one_line(store, tmp_path, args, message):
    res = run_cli("report", store, *args, cwd=tmp_path)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert res.stderr.strip().count("\n") == 0 and not (tmp_path / "x.html").exists()
