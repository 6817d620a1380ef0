"""bayes_t: the correlated Bayesian t-test against baycomp (``two_on_single`` and its
``CorrelatedTTest`` posterior) on fold scores computed here loop by loop, a hand value, the
degenerate cases (no spread, a failed fit), bad options, and the whole CLI round trip."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.estimators import bayes_t
from cvflow.testing import cube_from_predictions, simple_design

from cvtest import run_cli
from nested_cases import random_cube

baycomp = pytest.importorskip("baycomp")


def ref_fold_scores(cube, h, loss=lambda p, y: (p - y) ** 2):
    """Mean loss of param h on each test fold, repeat by repeat (R·K values in fold order)."""
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    out = []
    for r in range(table.shape[0]):
        for j in range(table.shape[1]):
            members = [i for i in range(len(y)) if fold[r, i] == j]
            out.append(sum(loss(pred[h, table[r, j], i], y[i]) for i in members) / len(members))
    return np.asarray(out)


def baycomp_answer(loss_a, loss_b, rope, runs):
    """(P(a better), P(rope), P(b better)) and (df, location, scale) from baycomp, the fold
    scores given as scores (higher is better: the negated losses)."""
    probs = baycomp.two_on_single(-loss_a, -loss_b, rope=rope, runs=runs)
    if rope == 0:
        probs = (probs[0], 0.0, probs[1])
    post = baycomp.CorrelatedTTest(-loss_a, -loss_b, rope=rope, runs=runs)
    return probs, (post.df, post.mean, math.sqrt(post.var))


def assert_close(got, want, what):
    assert abs(got - want) <= 1e-10, f"{what}: {got} != {want}"


@pytest.mark.parametrize("seed,k,repeats", [(0, 4, 1), (3, 10, 1), (1, 5, 3), (7, 3, 10)])
@pytest.mark.parametrize("rope", [0.0, 0.05, 0.4])
def test_equals_baycomp(seed, k, repeats, rope):
    cube, _ = random_cube(n=31, k=k, repeats=repeats, n_params=3, seed=seed)
    for a, b in [(0, 2), (1, 0)]:
        la, lb = ref_fold_scores(cube, a), ref_fold_scores(cube, b)
        out = bayes_t(cube, compare=[a, b], rope=rope)
        probs, (df, location, scale) = baycomp_answer(la, lb, rope, repeats)
        for key, want in zip(("p_a_better", "p_rope", "p_b_better"), probs):
            assert_close(float(out[key]), want, key)
        assert int(out["df"]) == df == k * repeats - 1
        assert_close(float(out["location"]), location, "location")
        assert_close(float(out["scale"]), scale, "scale")
        # the same numbers from baycomp fed the losses with a and b swapped
        swapped = baycomp.two_on_single(lb, la, rope=rope, runs=repeats)
        assert_close(float(out["p_a_better"]), swapped[0], "p_a_better (losses)")
        assert out.attrs["a"]["index"] == a and out.attrs["rope"] == rope


def test_probabilities_are_a_partition_and_move_with_the_rope():
    cube, _ = random_cube(n=31, k=5, repeats=2, n_params=3, seed=4)
    previous = 0.0
    for rope in (0.0, 0.1, 0.5, 2.0, 50.0):
        out = bayes_t(cube, compare=[0, 1], rope=rope)
        total = sum(float(out[k]) for k in ("p_a_better", "p_rope", "p_b_better"))
        assert total == pytest.approx(1.0, abs=1e-12)
        assert float(out["p_rope"]) >= previous
        previous = float(out["p_rope"])
    assert previous > 0.999


def _two_fold_cube(fold_losses_a, fold_losses_b):
    """Two folds of 2 samples, one repeat, absolute loss, y = 0: each fit predicts its
    fold's loss as a constant."""
    design = simple_design(4, 2, fold=[[0, 0, 1, 1]])
    pred = np.zeros((2, design.n_splits, 4))
    for h, values in enumerate((fold_losses_a, fold_losses_b)):
        pred[h, design.fold_split[0, 0], :2] = values[0]
        pred[h, design.fold_split[0, 1], 2:] = values[1]
    return cube_from_predictions(pred, np.zeros(4), design, loss="absolute")


def test_by_hand():
    """d = (1, 3): location 2, scale² = (1/2 + 1/(2 − 1))·2 = 3, df 1 (Cauchy)."""
    out = bayes_t(_two_fold_cube((2.0, 3.0), (1.0, 0.0)), rope=1.0)
    assert float(out["location"]) == 2.0 and int(out["df"]) == 1
    assert float(out["scale"]) == pytest.approx(math.sqrt(3.0), rel=1e-14)

    def cauchy_cdf(x):
        return 0.5 + math.atan((x - 2.0) / math.sqrt(3.0)) / math.pi
    assert float(out["p_a_better"]) == pytest.approx(cauchy_cdf(-1.0), rel=1e-12)
    assert float(out["p_b_better"]) == pytest.approx(1 - cauchy_cdf(1.0), rel=1e-12)
    codes = {w["code"] for w in json.loads(out.attrs["warnings"])}
    assert codes == {"tiny_test_sets", "few_folds"}


@pytest.mark.parametrize("a,b", [((1.0, 1.0), (1.0, 1.0)), ((1.1, 2.1), (1.0, 2.0))])
def test_no_spread_gives_nan_and_says_why(a, b):
    """Differences that do not vary (0 everywhere, or 0.1 up to rounding): baycomp would put
    the whole posterior on d̄; the probabilities are NaN with variance_not_positive."""
    out = bayes_t(_two_fold_cube(a, b), rope=0.01)
    for key in ("p_a_better", "p_rope", "p_b_better"):
        assert np.isnan(float(out[key]))
    assert float(out["location"]) == pytest.approx(a[0] - b[0])
    assert "variance_not_positive" in {w["code"] for w in json.loads(out.attrs["warnings"])}


def test_failed_fit_gives_nan_and_warning():
    cube, design = random_cube(n=23, k=4, repeats=2, n_params=3, seed=2)
    cube["pred"][1, design.fold_split[1, 2]] = np.nan
    out = bayes_t(cube, compare=[0, 1], rope=0.1)
    assert np.isnan(float(out["location"])) and np.isnan(float(out["p_rope"]))
    assert "missing_fits" in {w["code"] for w in json.loads(out.attrs["warnings"])}


@pytest.mark.parametrize("kw,match", [
    ({"compare": [0, 1], "rope": -0.1}, r"bayes_t.rope: -0.1 is outside \[0.0, inf\]"),
    ({"compare": [0, 1], "rope": "wide"}, r"bayes_t.rope: 'wide' is not a number"),
    ({"compare": [0]}, r"bayes_t.compare: name two params to compare"),
    ({"compare": [0, 0]}, r"bayes_t.compare: a and b are the same param \(0\)"),
    ({}, r"bayes_t.compare: the cube has 3 params; name the two to compare"),
])
def test_bad_options(kw, match):
    cube, _ = random_cube(seed=0)
    with pytest.raises(InputError, match=match):
        bayes_t(cube, **kw)


WORKFLOW = """\
name: bayes
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 30.0]}
design: {folds: 5, repeats: 2, seed: 0}
estimators: [kfold, {bayes_t: {compare: ['ridge(alpha=0.1)', 'ridge(alpha=30.0)'], rope: 50}}]
"""


def test_cli_report_equals_baycomp(tmp_path):
    """`cvflow run` then `cvflow report --json` in fresh processes; the report's numbers equal
    baycomp's on the stored predictions; a bad --set is one line, exit 2."""
    import cvflow

    wf, store = tmp_path / "wf.yaml", tmp_path / "b.zarr"
    wf.write_text(WORKFLOW)
    res = run_cli("run", wf, "--store", store, "--workers", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = run_cli("report", store, "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["bayes_t"]
    cube = cvflow.open(store)
    la, lb = ref_fold_scores(cube, 0), ref_fold_scores(cube, 1)
    probs, (df, location, scale) = baycomp_answer(la, lb, 50.0, 2)
    for key, want in zip(("p_a_better", "p_rope", "p_b_better"), probs):
        assert_close(got[key], want, key)
    assert got["df"] == df
    assert_close(got["location"], location, "location")
    assert_close(got["scale"], scale, "scale")
    text = run_cli("report", store)
    assert text.returncode == 0 and "P(a better) = " in text.stdout
    bad = run_cli("report", store, "--set", "bayes_t.rope=-1")
    assert bad.returncode == 2
    assert "--set bayes_t.rope: -1 is outside [0.0, inf]" in bad.stderr
