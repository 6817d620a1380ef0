"""Cluster-robust inference on grouped data (issue 25): the store keeps the group labels, and
wald_cv's CR1 variance against a hand computation on a tiny cube (written with loops, without
cvflow's code). Coverage by simulation: tests/test_grouped_coverage.py (slow)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from cvflow.errors import InputError
from cvflow.estimators import wald_cv
from cvflow.testing import cube_from_predictions, simple_design

# 9 analysis samples + 1 held-out test sample; 4 groups of sizes 3, 2, 2, 2 (group folds:
# fold 0 = groups 0 and 3, fold 1 = group 1, fold 2 = group 2).
GROUPS = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 9])
FOLD = np.array([[0, 0, 0, 1, 1, 2, 2, 0, 0, -1]])
Y = np.array([1.0, 2.0, 0.5, -1.0, 3.0, 2.5, 0.0, 1.5, -0.5, 4.0])


def tiny_cube(groups=GROUPS):
    is_test = FOLD[0] < 0
    design = simple_design(10, 3, fold=FOLD, is_test=is_test)
    rng = np.random.default_rng(3)
    pred = Y + rng.normal(size=(2, design.n_splits, 10)) * np.array([1.0, 2.0])[:, None, None]
    cube = cube_from_predictions(pred, Y, design)
    if groups is not None:
        cube["groups"] = ("sample",), np.asarray(groups)
    return cube


def hand_cr1(cube, a, b, alpha):
    """e_i by loops over the analysis samples, then CR1 and Student t on G − 1 df by hand."""
    pred, y = cube["pred"].values, cube["y"].values
    table, fold, groups = cube["fold_split"].values, cube["fold"].values, cube["groups"].values
    e, g = [], []
    for i in range(len(y)):
        j = fold[0, i]
        if j < 0:
            continue
        s = table[0, j]
        d = (pred[a, s, i] - y[i]) ** 2
        if b is not None:
            d -= (pred[b, s, i] - y[i]) ** 2
        e.append(d)
        g.append(groups[i])
    n = len(e)
    mean = sum(e) / n
    labels = sorted(set(g))
    big_g = len(labels)
    total = 0.0
    for label in labels:
        s_g = sum(x for x, lab in zip(e, g) if lab == label)
        n_g = sum(1 for lab in g if lab == label)
        total += (s_g - n_g * mean) ** 2
    var = big_g / (big_g - 1) * total / n ** 2
    se = math.sqrt(var)
    q = stats.t.ppf(1 - alpha / 2, big_g - 1)
    t = mean / se
    return {"estimate": mean, "se_cluster": se, "lower_cluster": mean - q * se,
            "upper_cluster": mean + q * se, "t_cluster": t,
            "p_value_cluster": 2 * stats.t.sf(abs(t), big_g - 1), "groups": big_g}


@pytest.mark.parametrize("compare", [[0, 1], [1, 0], [1]])
def test_cr1_matches_hand_computation(compare):
    cube = tiny_cube()
    out = wald_cv(cube, compare=compare, alpha=0.2)
    ref = hand_cr1(cube, compare[0], compare[1] if len(compare) == 2 else None, 0.2)
    keys = ["estimate", "se_cluster", "lower_cluster", "upper_cluster"]
    if len(compare) == 2:
        keys += ["t_cluster", "p_value_cluster"]
    for key in keys:
        assert float(out[key]) == pytest.approx(ref[key], rel=1e-12), key
    assert out.attrs["inference"] == "cluster-robust (CR1)"
    assert out.attrs["groups"] == 4 and out.attrs["df"] == 3
    assert {w["code"] for w in json.loads(out.attrs["warnings"])} >= {"few_groups"}


def test_per_param_grid_and_string_labels():
    """Every param at once; labels are compared, not their type (strings work the same)."""
    cube = tiny_cube(np.array(["a", "a", "a", "b", "b", "c", "c", "d", "d", "z"], dtype=object))
    out = wald_cv(cube)
    for h in (0, 1):
        ref = hand_cr1(tiny_cube(), h, None, 0.1)
        assert float(out["se_cluster"][h]) == pytest.approx(ref["se_cluster"], rel=1e-12)
        assert float(out["var_cluster"][h]) == pytest.approx(9 * ref["se_cluster"] ** 2)
    assert out["design_effect"].dims == ("param",)


def test_one_sample_per_group_is_the_all_pairs_variance_times_n_over_n_minus_1():
    cube = tiny_cube(np.arange(10))
    out = wald_cv(cube, alpha=0.1)
    n = 9
    assert np.allclose(out["var_cluster"], out["var_all"] * n / (n - 1), rtol=1e-12)


def test_without_groups_nothing_changes_and_ignore_turns_it_off():
    plain = wald_cv(tiny_cube(None), compare=[0, 1])
    ignored = wald_cv(tiny_cube(), compare=[0, 1], groups="ignore")
    for out in (plain, ignored):
        assert "se_cluster" not in out and "p_value_cluster" not in out
        assert out.attrs["inference"] == "independent samples"
    assert float(plain["se_within"]) == float(ignored["se_within"])
    with pytest.raises(InputError, match=r"wald_cv.groups: 'yes'; use one of 'auto', 'ignore'"):
        wald_cv(tiny_cube(), groups="yes")


def test_old_store_with_group_workflow_but_no_labels_warns():
    cube = tiny_cube(None)
    cube.attrs["workflow"] = json.dumps({"data": {"groups": "site"}, "design": {}})
    out = wald_cv(cube, compare=[0, 1])
    codes = [w["code"] for w in json.loads(out.attrs["warnings"])]
    assert "groups_not_stored" in codes and "se_cluster" not in out


def test_few_groups_threshold():
    from cvflow.estimators import guardrails

    assert guardrails.group_count(49, "x")[0]["code"] == "few_groups"
    assert guardrails.group_count(50, "x") == []


WORKFLOW = """
name: grouped
data: {source: csv, path: sites.csv, target: y, groups: site}
task: regression
loss: squared
learners:
  - {name: ols, class: sklearn.linear_model.LinearRegression}
  - {name: mean, class: sklearn.dummy.DummyRegressor}
design: {folds: 4, splitter: group, seed: 0}
estimators: [{wald_cv: {compare: [ols, mean]}}]
execution: {cluster: threads}
"""


def test_cli_stores_groups_and_reports_cluster_robust(tmp_path):
    """A user's run: the store keeps the group column, report says cluster-robust and G."""
    rng = np.random.default_rng(0)
    sites = np.repeat([f"site{k}" for k in range(24)], 5)
    u = np.repeat(rng.normal(size=24), 5)
    x = rng.normal(size=120) + u
    y = x + 2 * u + rng.normal(size=120)
    lines = ["x,y,site"] + [f"{a},{b},{c}" for a, b, c in zip(x, y, sites)]
    (tmp_path / "sites.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    store = tmp_path / "s.zarr"
    run = subprocess.run([sys.executable, "-m", "cvflow", "run", str(tmp_path / "wf.yaml"),
                          "--store", str(store)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    stored = xr.open_zarr(store)
    assert stored["groups"].dims == ("sample",)
    assert list(stored["groups"].values[:6]) == ["site0"] * 5 + ["site1"]
    rep = subprocess.run([sys.executable, "-m", "cvflow", "report", str(store), "--json"],
                         capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    wald = json.loads(rep.stdout)["wald_cv"]
    assert wald["inference"] == "cluster-robust (CR1)" and wald["groups"] == 24
    assert wald["df"] == 23 and wald["se_cluster"] > 0
    text = subprocess.run([sys.executable, "-m", "cvflow", "report", str(store)],
                          capture_output=True, text=True)
    assert "cluster-robust (CR1) over G = 24 groups, t on 23 df" in text.stdout
    assert "assume independent samples" in text.stdout
    page = tmp_path / "r.html"
    html = subprocess.run([sys.executable, "-m", "cvflow", "report", str(store), "--html",
                           str(page)], capture_output=True, text=True)
    assert html.returncode == 0, html.stderr
    assert "Wald (cluster-robust, G = 24)" in page.read_text()


def oof_by_hand(cube):
    """e_i(h) (P, n_analysis) by loops, the analysis samples' folds and group labels."""
    pred, y = cube["pred"].values, cube["y"].values
    table, fold, groups = cube["fold_split"].values, cube["fold"].values, cube["groups"].values
    rows, folds, labels = [], [], []
    for i in range(len(y)):
        j = fold[0, i]
        if j < 0:
            continue
        rows.append([(pred[h, table[0, j], i] - y[i]) ** 2 for h in range(pred.shape[0])])
        folds.append(j)
        labels.append(groups[i])
    return np.array(rows).T, np.array(folds), np.array(labels)


def test_cv_confidence_draws_one_multiplier_per_group():
    """Lei's statistic with Gaussian multipliers per group, by loops, same draws."""
    from cvflow.estimators import cv_confidence

    cube = tiny_cube()
    rng = np.random.default_rng(7)
    pred = cube["pred"].values.copy()
    pred = np.concatenate([pred, pred[:1] + rng.normal(scale=0.7, size=pred[:1].shape)])
    cube = cube_from_predictions(pred, Y, simple_design(10, 3, fold=FOLD, is_test=FOLD[0] < 0))
    cube["groups"] = ("sample",), GROUPS
    e, fold, labels = oof_by_hand(cube)
    n, units = e.shape[1], sorted(set(labels))
    B = 300
    zeta = np.random.default_rng(11).standard_normal((B, len(units)))
    ref = []
    for m in range(e.shape[0]):
        t_obs, scaled = -np.inf, []
        for j in range(e.shape[0]):
            if j == m:
                continue
            xi = e[m] - e[j]
            c = np.array([xi[i] - xi[fold == fold[i]].mean() for i in range(n)])
            sums = np.array([c[labels == u].sum() for u in units])
            sd = math.sqrt((sums ** 2).sum() / n * len(units) / (len(units) - 3))
            t_obs = max(t_obs, math.sqrt(n) * xi.mean() / sd)
            scaled.append(sums / sd)
        t_star = [max(float(z @ s) for s in scaled) / math.sqrt(n) for z in zeta]
        ref.append(sum(t > t_obs for t in t_star) / B)
    out = cv_confidence(cube, B=B, seed=11)
    assert out["p_value"].values.tolist() == pytest.approx(ref, abs=1e-12)
    assert out.attrs["groups"] == 4 and "per group" in out.attrs["inference"]
    # one sample per group: exactly the per-sample multiplier bootstrap
    cube["groups"] = ("sample",), np.arange(10)
    assert np.array_equal(cv_confidence(cube, B=B, seed=11)["p_value"],
                          cv_confidence(cube, B=B, seed=11, groups="ignore")["p_value"])


def test_bbc_cv_bootstraps_groups():
    """BBC-CV's cluster bootstrap by loops: G groups drawn with replacement, samples weighted by
    their group's count, out-of-bag = the samples of groups never drawn."""
    from cvflow.estimators import bbc_cv

    cube = tiny_cube()
    e, _, labels = oof_by_hand(cube)
    units = sorted(set(labels))
    rng = np.random.default_rng(5)
    oob = []
    for _ in range(200):
        drawn = rng.integers(0, len(units), size=len(units))
        w = np.array([np.sum(drawn == units.index(g)) for g in labels], dtype=float)
        if (w == 0).sum() == 0:
            oob.append(np.nan)
            continue
        h = int(np.argmin([(e[p] * w).sum() / w.sum() for p in range(e.shape[0])]))
        oob.append(e[h][w == 0].mean())
    oob = np.array(oob)
    out = bbc_cv(cube, B=200, seed=5, alpha=0.2)
    assert np.allclose(out["oob_loss"].values, oob, equal_nan=True, rtol=1e-12)
    finite = oob[np.isfinite(oob)]
    assert float(out["estimate"]) == pytest.approx(finite.mean(), rel=1e-12)
    assert float(out["lower"]) == pytest.approx(np.quantile(finite, 0.1), rel=1e-12)
    assert out.attrs["groups"] == 4
    assert "bootstrap of groups" in out.attrs["inference"]


def test_fold_level_tests_on_group_folds_and_on_groups_crossing_folds():
    """corrected_t is unchanged on grouped data (its fold scores average whole groups on group
    folds) and says so; groups split across folds get the groups_cross_folds warning."""
    from cvflow.estimators import corrected_t

    out = corrected_t(tiny_cube(), compare=[0, 1])
    plain = corrected_t(tiny_cube(None), compare=[0, 1])
    assert float(out["t"]) == float(plain["t"])
    assert out.attrs["groups"] == 4 and "whole groups" in out.attrs["inference"]
    assert "groups_cross_folds" not in {w["code"] for w in json.loads(out.attrs["warnings"])}
    crossing = GROUPS.copy()
    crossing[[2, 4]] = [1, 0]            # group 0 now has a sample in fold 1, group 1 in fold 0
    warned = json.loads(corrected_t(tiny_cube(crossing), compare=[0, 1]).attrs["warnings"])
    hit = [w for w in warned if w["code"] == "groups_cross_folds"]
    assert hit and hit[0]["groups_split"] == 2
    assert "2 of 4 groups have samples in more than one fold" in hit[0]["message"]
