"""Out-of-fold diagnostics at the chosen param in the HTML report: every number a plot carries
(read back from the report file) equals scikit-learn's roc_curve, precision_recall_curve,
calibration_curve, confusion_matrix and r2_score called on the stored out-of-fold predictions,
found here without cvflow's readers (tests/plot_studies.py::reference_oof)."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import (average_precision_score, confusion_matrix, mean_squared_error,
                             precision_recall_curve, r2_score, roc_auc_score, roc_curve)

import cvflow
from browser import RENDERED, Page, chromium
from cvflow.estimators import kfold
from plot_studies import document, floats, reference_oof, source, study


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.getbasetemp()


def _chosen(store) -> int:
    """The first criterion's choice (the K-fold one in these studies)."""
    return int(kfold(cvflow.open(store))["selected"])


def _pooled(y, pred):
    """Every repeat's out-of-fold predictions one after the other, as (y, pred)."""
    return np.tile(y, pred.shape[0]), pred.reshape((-1,) + pred.shape[2:])


def _same(got, expected):
    np.testing.assert_allclose(floats(got), np.asarray(expected, dtype=float), rtol=1e-12,
                               atol=0)


def test_binary_probabilities_roc_pr_calibration_confusion(root):
    store, html = study(root, "binary")
    doc = document(html)
    h = _chosen(store)
    y, pred, fold = reference_oof(store, h)
    positive = y == 1
    ys, ps = _pooled(positive, pred)
    assert np.isfinite(ps).all()
    # ROC: pooled, then one curve per fold with its AUC
    fpr, tpr, _ = roc_curve(ys, ps)
    roc = source(doc, "roc-pooled")
    _same(roc["fpr"], fpr)
    _same(roc["tpr"], tpr)
    folds = source(doc, "roc-folds")
    assert sorted(zip(folds["repeat"], folds["fold"])) == [(0, j) for j in range(5)]
    for r, j, xs, ys_, auc in zip(folds["repeat"], folds["fold"], folds["xs"], folds["ys"],
                                  folds["auc"]):
        rows = fold[r] == j
        f, t, _ = roc_curve(positive[rows], pred[r][rows])
        _same(xs, f)
        _same(ys_, t)
        assert auc == pytest.approx(roc_auc_score(positive[rows], pred[r][rows]), rel=1e-12)
    # precision-recall
    precision, recall, _ = precision_recall_curve(ys, ps)
    pr = source(doc, "pr-pooled")
    _same(pr["recall"], recall)
    _same(pr["precision"], precision)
    pr_folds = source(doc, "pr-folds")
    for r, j, xs, ys_, ap in zip(pr_folds["repeat"], pr_folds["fold"], pr_folds["xs"],
                                 pr_folds["ys"], pr_folds["average_precision"]):
        rows = fold[r] == j
        p_, r_, _ = precision_recall_curve(positive[rows], pred[r][rows])
        _same(xs, r_)
        _same(ys_, p_)
        assert ap == pytest.approx(average_precision_score(positive[rows], pred[r][rows]))
    # reliability diagram, 10 uniform bins
    prob_true, prob_pred = calibration_curve(ys, ps, n_bins=10)
    cal = source(doc, "calibration-pooled")
    _same(cal["mean_predicted"], prob_pred)
    _same(cal["fraction_positive"], prob_true)
    assert len(source(doc, "calibration-folds")["xs"]) == 5
    # confusion matrix of p > 0.5
    expected = confusion_matrix(ys, ps > 0.5, labels=[False, True])
    cells = source(doc, "confusion-cells")
    got = {(t, p): c for t, p, c in zip(cells["true"], cells["predicted"], cells["count"])}
    assert got == {(str(a), str(b)): int(expected[a, b]) for a in (0, 1) for b in (0, 1)}
    assert sum(cells["count"]) == len(y)


def test_decision_values_get_roc_and_pr_but_no_calibration(root):
    store, html = study(root, "margin")
    doc = document(html)
    h = _chosen(store)
    y, pred, _ = reference_oof(store, h)
    names = {m.name for m in doc.roots[0].references() if getattr(m, "name", None)}
    assert {"roc", "precision-recall", "confusion"} <= names
    assert "calibration" not in names
    fpr, tpr, _ = roc_curve(y == 1, pred[0])
    _same(source(doc, "roc-pooled")["fpr"], fpr)
    _same(source(doc, "roc-pooled")["tpr"], tpr)
    expected = confusion_matrix(y == 1, pred[0] > 0, labels=[False, True])      # decision > 0
    cells = source(doc, "confusion-cells")
    got = {(t, p): c for t, p, c in zip(cells["true"], cells["predicted"], cells["count"])}
    assert got == {(str(a), str(b)): int(expected[a, b]) for a in (0, 1) for b in (0, 1)}


def test_multiclass_one_vs_rest_curves_and_confusion_summed_over_repeats(root):
    store, html = study(root, "multiclass")
    doc = document(html)
    h = _chosen(store)
    y, pred, _ = reference_oof(store, h)
    assert pred.shape == (2, len(y), 3)
    classes = [5, 15, 25]
    ys, ps = _pooled(y, pred)
    for k, label in enumerate(classes):
        fpr, tpr, _ = roc_curve(ys == label, ps[:, k])
        roc = source(doc, f"roc-class-{k}")
        assert set(roc["class"]) == {str(label)}
        _same(roc["fpr"], fpr)
        _same(roc["tpr"], tpr)
        precision, recall, _ = precision_recall_curve(ys == label, ps[:, k])
        _same(source(doc, f"pr-class-{k}")["precision"], precision)
        prob_true, prob_pred = calibration_curve(ys == label, ps[:, k], n_bins=10)
        _same(source(doc, f"calibration-class-{k}")["fraction_positive"], prob_true)
    expected = confusion_matrix(ys, np.asarray(classes)[ps.argmax(axis=1)], labels=classes)
    cells = source(doc, "confusion-cells")
    got = {(t, p): c for t, p, c in zip(cells["true"], cells["predicted"], cells["count"])}
    assert got == {(str(a), str(b)): int(expected[i, j]) for i, a in enumerate(classes)
                   for j, b in enumerate(classes)}
    assert sum(cells["count"]) == 2 * len(y)                       # two repeats summed
    fig = doc.select_one({"name": "confusion"})
    assert "2 repeats summed" in fig.title.text


def test_regression_predicted_against_observed(root):
    store, html = study(root, "regression")
    doc = document(html)
    h = _chosen(store)
    y, pred, fold = reference_oof(store, h)
    points = source(doc, "pred-obs-points")
    got = sorted(zip(points["repeat"], points["fold"], points["observed"], points["predicted"]))
    expected = sorted((r, int(fold[r, i]), float(y[i]), float(pred[r, i]))
                      for r in range(pred.shape[0]) for i in range(len(y)))
    assert len(got) == len(expected) == 2 * len(y)
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(expected, dtype=float),
                               rtol=1e-12)
    ys, ps = _pooled(y, pred)
    title = doc.select_one({"name": "pred-vs-obs"}).title.text
    assert f"R² {r2_score(ys, ps):.3f}" in title and f"MSE {mean_squared_error(ys, ps):.4g}" in title


@pytest.mark.browser
@pytest.mark.parametrize("name, figures", [
    ("binary", {"roc", "precision-recall", "calibration", "confusion", "kfold-logreg",
                "corrected-kfold-logreg"}),
    ("multiclass", {"roc", "precision-recall", "calibration", "confusion"}),
    ("regression", {"pred-vs-obs", "kfold-tree", "corrected-kfold-tree", "kfold-ridge"})])
def test_plots_render_in_headless_chromium(root, name, figures):
    """The report opens in Chromium without a console error, draws every new figure, and the
    rendered document holds the numbers the file does."""
    if chromium() is None:
        if os.environ.get("CVFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail("CVFLOW_REQUIRE_BROWSER=1 but no chromium on PATH")
        pytest.skip("no chromium on PATH")
    store, html = study(root, name)
    doc = document(html)
    probe = "roc-pooled" if name == "binary" else "roc-class-0" if name == "multiclass" \
        else "pred-obs-points"
    read = f"""(() => {{
      const m = [...Bokeh.documents[0].all_models].find((m) => m.name === {probe!r});
      return Object.fromEntries(Object.entries(m.data).map(([k, v]) => [k, Array.from(v)]));
    }})()"""
    with Page(width=1400, height=3000) as page:
        page.open(html)
        deadline = time.monotonic() + 30
        state = page.evaluate(RENDERED)
        while not figures <= {f["name"] for f in state["figures"]} and time.monotonic() < deadline:
            time.sleep(0.2)
            state = page.evaluate(RENDERED)
        time.sleep(0.5)
        state = page.evaluate(RENDERED)
        rendered = page.evaluate(read)
        errors = page.errors()
    assert errors == []
    drawn = {f["name"]: f for f in state["figures"]}
    assert figures <= set(drawn), sorted(drawn)
    assert all(drawn[n]["renderers"] > 0 for n in figures)
    expected = source(doc, probe)
    for key, values in expected.items():
        if key in ("class", "color"):
            assert rendered[key] == values
        else:
            np.testing.assert_allclose(floats(rendered[key]), floats(values), rtol=1e-12)
