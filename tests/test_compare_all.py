"""compare_all: Holm and Benjamini–Hochberg against statsmodels (when installed) and hand
computations, the compact letter display on hand-made significance patterns and on every
pattern hypothesis draws, the pairwise statistics against corrected_t's and wald_cv's own,
the default choice (best param of each learner), errors, and the CLI (text, JSON, HTML)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvflow.errors import InputError
from cvflow.estimators import compare_all, corrected_t, wald_cv
from cvflow.estimators.compare_all import benjamini_hochberg, holm, letter_display
from cvflow.workflow.params import Param
from cvflow.testing import cube_from_predictions, simple_design

from cvtest import run_cli


# ---------------------------------------------------------------------------------------------
# adjusted p-values


def hand_holm(p):
    """Holm (1979) from its definition: the k-th smallest p times (m − k + 1), running max, ≤ 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out


def hand_bh(p):
    """Benjamini & Hochberg (1995): p_(k)·m/k, running min from the largest, ≤ 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 1.0
    for k in range(m - 1, -1, -1):
        i = order[k]
        running = min(running, p[i] * m / (k + 1))
        out[i] = running
    return out


PVALUES = [[0.01, 0.04, 0.03, 0.005], [0.5], [0.2, 0.2, 0.2], [1e-8, 0.9, 0.049, 0.051, 0.3, 0.01],
           list(np.random.default_rng(0).uniform(size=15)),
           list(np.random.default_rng(1).uniform(0, 0.05, size=10))]


def test_adjustments_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02], abs=1e-15)
    for p in PVALUES:
        assert holm(p) == pytest.approx(hand_holm(p), abs=1e-15)
        assert benjamini_hochberg(p) == pytest.approx(hand_bh(p), abs=1e-15)


def test_adjustments_equal_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for p in PVALUES:
        for method, ours in (("holm", holm), ("fdr_bh", benjamini_hochberg)):
            _, want, _, _ = multitest.multipletests(p, alpha=0.05, method=method)
            assert ours(p) == pytest.approx(want, abs=1e-15), method


def test_nan_p_values_stay_nan_and_do_not_count():
    p = [0.01, np.nan, 0.04]
    assert np.isnan(holm(p)[1]) and np.isnan(benjamini_hochberg(p)[1])
    assert holm(p)[[0, 2]] == pytest.approx(hand_holm([0.01, 0.04]))
    assert benjamini_hochberg(p)[[0, 2]] == pytest.approx(hand_bh([0.01, 0.04]))


# ---------------------------------------------------------------------------------------------
# letters


def different(m, pairs):
    out = np.zeros((m, m), bool)
    for i, j in pairs:
        out[i, j] = out[j, i] = True
    return out


@pytest.mark.parametrize("m,pairs,want", [
    (3, [], ["a", "a", "a"]),
    (3, [(0, 1), (0, 2), (1, 2)], ["a", "b", "c"]),
    (3, [(0, 2)], ["a", "ab", "b"]),                    # A~B, B~C, A≠C
    (3, [(0, 1)], ["a", "b", "ab"]),                    # C like both, A≠B
    (4, [(0, 2), (0, 3), (1, 3)], ["a", "ab", "bc", "c"]),
    (4, [(0, 3)], ["a", "ab", "ab", "b"]),
    (2, [(0, 1)], ["a", "b"]),
    (1, [], ["a"]),
])
def test_letters_on_hand_patterns(m, pairs, want):
    assert letter_display(different(m, pairs)) == want


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8).flatmap(lambda m: st.tuples(
    st.just(m), st.lists(st.booleans(), min_size=m * (m - 1) // 2, max_size=m * (m - 1) // 2))))
def test_letters_share_exactly_when_not_different(case):
    """The defining property on any pattern: two items share a letter iff they do not differ."""
    m, flags = case
    pairs = [pair for pair, f in zip(itertools.combinations(range(m), 2), flags) if f]
    diff = different(m, pairs)
    letters = letter_display(diff)
    assert all(letters)
    for i, j in itertools.combinations(range(m), 2):
        assert bool(set(letters[i]) & set(letters[j])) == (not diff[i, j]), (i, j, letters)


# ---------------------------------------------------------------------------------------------
# on cubes


def three_learner_cube(seed=0, n=40, k=5, repeats=2):
    """Predictions y + noise of three learners (2, 3 and 1 params) of different noise levels."""
    rng = np.random.default_rng(seed)
    design = simple_design(n, k, repeats=repeats, seed=seed)
    params = ([Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 1.0)]
              + [Param("lasso", "sklearn.linear_model.Lasso", hyper={"alpha": a})
                 for a in (0.01, 0.1, 1.0)]
              + [Param("knn", "sklearn.neighbors.KNeighborsRegressor", hyper={"n_neighbors": 5})])
    scale = np.array([0.5, 0.45, 1.5, 0.44, 2.0, 0.9])
    y = rng.normal(size=n)
    pred = y + rng.normal(size=(len(params), design.n_splits, n)) * scale[:, None, None]
    return cube_from_predictions(pred, y, design, params=params)


def test_default_is_the_best_param_of_each_learner_ranked():
    cube = three_learner_cube()
    kfold_estimate = {}
    for h in range(6):
        kfold_estimate[h] = float(corrected_t(cube, compare=[h])["estimate"])
    best = {}
    for h, learner in enumerate(str(v) for v in cube["learner"].values):
        if learner not in best or kfold_estimate[h] < kfold_estimate[best[learner]]:
            best[learner] = h
    out = compare_all(cube)
    want = sorted(best.values(), key=lambda h: kfold_estimate[h])
    assert out["param"].values.tolist() == want
    assert out["estimate"].values == pytest.approx([kfold_estimate[h] for h in want], rel=1e-12)
    assert out["se"].values == pytest.approx(
        [float(corrected_t(cube, compare=[h])["se"]) for h in want], rel=1e-12)


@pytest.mark.parametrize("adjust", ["holm", "bh"])
def test_pairs_equal_corrected_t_and_adjusted(adjust):
    cube = three_learner_cube(seed=3)
    chosen = [0, 2, 3, 4, 5]
    out = compare_all(cube, params=chosen, adjust=adjust, alpha=0.05)
    ranked = out["param"].values.tolist()
    assert sorted(ranked) == chosen
    pairs = list(zip(out["a"].values.tolist(), out["b"].values.tolist()))
    assert pairs == [(ranked[i], ranked[j]) for i, j in itertools.combinations(range(5), 2)]
    p = []
    for k, (a, b) in enumerate(pairs):
        ref = corrected_t(cube, compare=[a, b])
        assert float(out["difference"][k]) == float(ref["estimate"])
        assert float(out["statistic"][k]) == float(ref["t"])
        assert float(out["p_value"][k]) == float(ref["p_value"])
        p.append(float(ref["p_value"]))
    want = hand_holm(p) if adjust == "holm" else hand_bh(p)
    assert out["p_adjusted"].values == pytest.approx(want, abs=1e-15)
    assert out["significant"].values.tolist() == [q <= 0.05 for q in want]
    letters = out["letters"].values.tolist()
    for k, (a, b) in enumerate(pairs):
        shared = set(letters[ranked.index(a)]) & set(letters[ranked.index(b)])
        assert bool(shared) == (not want[k] <= 0.05)
    assert out.attrs["adjust"] == adjust and out.attrs["test"] == "corrected_t"
    # this cube has both kinds of pair, so the letters are not all one tier
    assert 0 < sum(q <= 0.05 for q in want) < len(want)


def test_pairs_equal_paired_wald_cv():
    cube = three_learner_cube(seed=5)
    out = compare_all(cube, params=[1, 3, 5, 2], test="wald_cv")
    for k, (a, b) in enumerate(zip(out["a"].values.tolist(), out["b"].values.tolist())):
        ref = wald_cv(cube, compare=[a, b])
        assert float(out["difference"][k]) == float(ref["estimate"])
        assert float(out["statistic"][k]) == float(ref["z_within"])
        assert float(out["p_value"][k]) == float(ref["p_value_within"])
    assert out["p_adjusted"].values == pytest.approx(hand_holm(out["p_value"].values.tolist()),
                                                     abs=1e-15)


def test_wald_cv_on_groups_uses_the_cluster_robust_test():
    """A store with group labels: each pair's statistic and p-value are paired wald_cv's
    cluster-robust t and p (G − 1 df), not its iid within-fold z."""
    cube = three_learner_cube(seed=6, n=40, k=5, repeats=1)
    cube["groups"] = ("sample",), np.arange(40) // 4                 # 10 groups of 4
    out = compare_all(cube, params=[0, 3, 5], test="wald_cv")
    for k, (a, b) in enumerate(zip(out["a"].values.tolist(), out["b"].values.tolist())):
        ref = wald_cv(cube, compare=[a, b])
        assert float(out["statistic"][k]) == float(ref["t_cluster"])
        assert float(out["p_value"][k]) == float(ref["p_value_cluster"])
        assert float(out["p_value"][k]) != float(ref["p_value_within"])


def test_no_difference_is_one_tier_and_warns():
    """Identical predictions: every corrected_t is NaN (variance_not_positive), no pair is
    significant, one letter for all."""
    cube = three_learner_cube()
    cube["pred"][1] = cube["pred"][0].values
    cube["pred"][3] = cube["pred"][0].values
    out = compare_all(cube, params=[0, 1, 3])
    assert np.isnan(out["p_value"].values).all()
    assert out["letters"].values.tolist() == ["a", "a", "a"]
    codes = [w["code"] for w in json.loads(out.attrs["warnings"])]
    assert codes.count("variance_not_positive") == 1        # the same message, once


@pytest.mark.parametrize("kw,match", [
    ({"params": [0]}, r"compare_all.params: \[0\]; give at least two params"),
    ({"params": [0, "ridge(alpha=0.1)"]}, r"compare_all.params: 'ridge\(alpha=0.1\)' and 0 are "
                                          r"the same param \(0\)"),
    ({"params": [0, 9]}, r"compare_all.params: param index 9 is out of range"),
    ({"params": [0, "svm"]}, r"compare_all.params: no learner named 'svm'"),
    ({"test": "t"}, r"compare_all.test: 't'; use one of 'corrected_t', 'wald_cv'"),
    ({"adjust": "bonferroni"}, r"compare_all.adjust: 'bonferroni'; use one of 'holm', 'bh'"),
    ({"alpha": 1.5}, r"compare_all.alpha: 1.5; use a number in \(0, 1\)"),
])
def test_bad_options(kw, match):
    with pytest.raises(InputError, match=match):
        compare_all(three_learner_cube(), **kw)


def test_one_learner_needs_params():
    design = simple_design(20, 4)
    cube = cube_from_predictions(np.random.default_rng(0).normal(size=(3, design.n_splits, 20)),
                                 np.zeros(20), design)
    with pytest.raises(InputError, match=r"compare_all.params: the grid has one learner .*hand.*"
                                         r"name the params to compare"):
        compare_all(cube)
    assert compare_all(cube, params=[0, 1, 2]).sizes["pair"] == 3


# ---------------------------------------------------------------------------------------------
# the CLI


WORKFLOW = """\
name: many
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: [0.1, 3.0]}
  - name: tree
    class: sklearn.tree.DecisionTreeRegressor
    grid: {max_depth: [2], random_state: [0]}
design: {folds: 5, repeats: 2, seed: 0}
estimators: [kfold, compare_all]
"""


def test_cli_text_json_html_and_refusals(tmp_path):
    import cvflow

    wf, store = tmp_path / "wf.yaml", tmp_path / "m.zarr"
    wf.write_text(WORKFLOW)
    res = run_cli("run", wf, "--store", store, "--workers", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = run_cli("report", store, "--json", "--set", "compare_all.adjust=bh")
    assert res.returncode == 0, res.stderr
    got = {key: value["values"] if isinstance(value, dict) else value
           for key, value in json.loads(res.stdout)["compare_all"].items()}
    cube = cvflow.open(store)
    assert sorted(got["param"]) == [0, 2, 4]                # the best of each learner
    for k, (a, b) in enumerate(zip(got["a"], got["b"])):
        ref = corrected_t(cube, compare=[a, b])
        assert got["p_value"][k] == pytest.approx(float(ref["p_value"]), rel=1e-12)
    assert got["p_adjusted"] == pytest.approx(hand_bh(got["p_value"]), abs=1e-15)
    text = run_cli("report", store)
    assert text.returncode == 0
    assert "params sharing a letter are not significantly different" in text.stdout
    html = tmp_path / "r.html"
    res = run_cli("report", store, "--html", html)
    assert res.returncode == 0, res.stderr
    page = html.read_text()
    assert '"compare-all"' in page and "ranking and tiers" in page
    bad = run_cli("report", store, "--set", "compare_all.adjust=bonferroni")
    assert bad.returncode == 2
    assert "--set compare_all.adjust: 'bonferroni'; use one of 'holm', 'bh'" in bad.stderr
    one = tmp_path / "one.yaml"
    one.write_text(WORKFLOW.split("  - name: lasso")[0] + "design: {folds: 5, seed: 0}\n"
                   "estimators: [compare_all]\n")
    res = run_cli("validate", one)
    assert res.returncode == 2
    assert "estimators[0].compare_all.params: the grid has one learner" in res.stderr
