"""corrected_t: the corrected repeated K-fold t-test against a loop-by-loop implementation
written from Nadeau & Bengio (2003) / Bouckaert & Frank (2004), hand values, errors, warnings,
and its size under the null (slow)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from cvflow.errors import InputError
from cvflow.estimators import corrected_t
from cvflow.testing import cube_from_predictions, simple_design

from nested_cases import random_cube


def ref_corrected_t(cube, a, b, alpha):
    """Literal loops: fold scores from pred and y, then the corrected variance and Student t."""
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    analysis = ~cube["is_test"].values
    n = int(analysis.sum())
    repeats, k = table.shape
    d = []
    for r in range(repeats):
        for j in range(k):
            s = table[r, j]
            members = [i for i in range(len(y)) if fold[r, i] == j]
            la = sum((pred[a, s, i] - y[i]) ** 2 for i in members) / len(members)
            lb = 0.0 if b is None else sum((pred[b, s, i] - y[i]) ** 2 for i in members) / len(members)
            d.append(la - lb)
    m = len(d)
    mean = sum(d) / m
    s2 = sum((x - mean) ** 2 for x in d) / (m - 1)
    n_test = n / k
    variance = (1 / m + n_test / (n - n_test)) * s2
    se = math.sqrt(variance)
    t = mean / se
    q = stats.t.ppf(1 - alpha / 2, m - 1)
    return {"estimate": mean, "sample_variance": s2, "variance": variance, "se": se, "t": t,
            "p_value": 2 * stats.t.sf(abs(t), m - 1), "lower": mean - q * se,
            "upper": mean + q * se, "df": m - 1}


@pytest.mark.parametrize("seed,k,repeats", [(0, 4, 3), (3, 5, 1), (7, 3, 5)])
def test_matches_reference(seed, k, repeats):
    cube, _ = random_cube(n=23, k=k, repeats=repeats, n_params=3, seed=seed)
    for a, b in [(0, 2), (1, 0)]:
        out = corrected_t(cube, compare=[a, b], alpha=0.1)
        ref = ref_corrected_t(cube, a, b, 0.1)
        for key, value in ref.items():
            assert float(out[key]) == pytest.approx(value, rel=1e-10), key
        assert out.attrs["mode"] == "difference"
        assert out.attrs["a"]["index"] == a


def test_one_learner_interval():
    cube, _ = random_cube(n=23, k=4, repeats=2, n_params=3, seed=1)
    out = corrected_t(cube, compare=[1], alpha=0.1)
    ref = ref_corrected_t(cube, 1, None, 0.1)
    for key in ("estimate", "se", "lower", "upper"):
        assert float(out[key]) == pytest.approx(ref[key], rel=1e-10)
    assert np.isnan(float(out["t"])) and np.isnan(float(out["p_value"]))
    assert out.attrs["mode"] == "error"


def test_by_hand():
    """Two folds of 2, one repeat: fold differences 1 and 3 (absolute loss, y = 0)."""
    design = simple_design(4, 2, fold=[[0, 0, 1, 1]])
    pred = np.zeros((2, design.n_splits, 4))
    pred[0, design.fold_split[0, 0], :2] = 2.0       # a: fold 0 loss 2, fold 1 loss 3
    pred[0, design.fold_split[0, 1], 2:] = 3.0
    pred[1, design.fold_split[0, 0], :2] = 1.0       # b: fold 0 loss 1, fold 1 loss 0
    out = corrected_t(cube_from_predictions(pred, np.zeros(4), design, loss="absolute"))
    # d = (1, 3): mean 2, s² = 2, variance (1/2 + 1) · 2 = 3, t = 2/√3, df 1
    assert float(out["estimate"]) == 2.0
    assert float(out["variance"]) == pytest.approx(3.0)
    assert float(out["t"]) == pytest.approx(2 / math.sqrt(3))
    assert float(out["p_value"]) == pytest.approx(1 - 2 * math.atan(2 / math.sqrt(3)) / math.pi)
    codes = {w["code"] for w in json.loads(out.attrs["warnings"])}
    assert codes == {"tiny_test_sets", "few_folds"}


def test_failed_fit_gives_nan_and_warning():
    cube, design = random_cube(n=23, k=4, repeats=2, n_params=3, seed=2)
    cube["pred"][1, design.fold_split[1, 2]] = np.nan
    out = corrected_t(cube, compare=[0, 1])
    assert np.isnan(float(out["estimate"])) and np.isnan(float(out["p_value"]))
    assert "missing_fits" in {w["code"] for w in json.loads(out.attrs["warnings"])}


@pytest.mark.parametrize("kw,match", [
    ({"compare": [0, 0]}, r"corrected_t.compare: a and b are the same param \(0\)"),
    ({"compare": [0, 9]}, r"corrected_t.compare: param index 9 is out of range"),
    ({}, r"corrected_t.compare: the cube has 3 params; name the two to compare"),
    ({"compare": [0, 1], "alpha": 2}, r"corrected_t.alpha: 2; use a number in \(0, 1\)"),
])
def test_bad_options(kw, match):
    cube, _ = random_cube(seed=0)
    with pytest.raises(InputError, match=match):
        corrected_t(cube, **kw)


@pytest.mark.slow
def test_size_under_the_null():
    """Two learners with the same true error: rejection rate at 5% within [3.5%, 7%].

    Data: y = x·β + noise, n = 80; learners least squares on features 0..4 and on
    features 5..9; both feature blocks carry the same signal strength, so the two
    learners have the same expected error at every training size (least squares on each
    block, computed here). 10-fold × 10 repeats, 1,000
    datasets (binomial sd of the rate ≈ 0.7%; README: 5.3%, the first 300 alone 7.3%).
    """
    rng = np.random.default_rng(0)
    rejections, runs = 0, 1000
    for run in range(runs):
        n = 80
        x = rng.normal(size=(n, 10))
        y = x[:, :5].sum(1) * 0.5 + x[:, 5:].sum(1) * 0.5 + rng.normal(size=n)
        design = simple_design(n, 10, repeats=10, seed=run)
        pred = _ols_predictions(x, y, design)
        out = corrected_t(cube_from_predictions(pred, y, design), compare=[0, 1])
        rejections += float(out["p_value"]) < 0.05
    rate = rejections / runs
    assert 0.035 <= rate <= 0.07, rate


def _ols_predictions(x, y, design):
    """Least squares on columns 0..4 (param 0) and 5..9 (param 1), every split."""
    pred = np.empty((2, design.n_splits, len(y)))
    for s in range(design.n_splits):
        train = design.train[s]
        for h, cols in enumerate((slice(0, 5), slice(5, 10))):
            coef, *_ = np.linalg.lstsq(x[train][:, cols], y[train], rcond=None)
            pred[h, s] = x[:, cols] @ coef
    return pred
