"""The ``skewed_differences`` warning (cvflow.estimators.guardrails): the skewness against
scipy's, its threshold (n < 25 γ²) against a small simulation on each side, and the two-param
comparisons that say it (wald_cv, corrected_t, compare_all through them)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm, skew

from cvflow.estimators import guardrails
from cvtest import ridge_cube


def test_skewness_is_scipy_s_on_one_value_per_sample():
    rng = np.random.default_rng(0)
    d = rng.exponential(size=(2, 50))
    d[1, :10] = np.nan                                # repeat 1 did not see 10 samples
    per_sample = np.where(np.isnan(d[1]), d[0], (d[0] + d[1]) / 2)
    gamma, n = guardrails.skewness(d)
    assert n == 50 and gamma == pytest.approx(skew(per_sample))
    assert guardrails.skewness(np.ones(5)) == (0.0, 5)


@pytest.mark.parametrize("gamma, n, warns", [(4.0, 100, True), (1.0, 300, False)])
def test_threshold_by_simulation(gamma, n, warns):
    """Differences of skewness γ (a shifted gamma law): where the rule warns (n / γ² = 6), the
    normal 95% interval misses in more than 6% of 3,000 samples; where it does not (n / γ² =
    300), in at most 6%."""
    rng = np.random.default_rng(1)
    shape = 4 / gamma ** 2
    x = rng.gamma(shape, size=(3000, n)) - shape
    half = norm.isf(0.025) * x.std(1, ddof=1) / np.sqrt(n)
    miss = (np.abs(x.mean(1)) > half).mean()
    assert bool(miss > 0.06) is warns
    assert (n < guardrails.SKEWED * gamma ** 2) is warns
    said = guardrails.skewed_differences(x[0], "test")
    assert bool(said) is (n < guardrails.SKEWED * guardrails.skewness(x[0])[0] ** 2)


def _skewed_cube():
    """ridge_cube with param 1 = param 0 except two samples predicted far off in every fit:
    the paired differences are 0 but for two large values (skewness ~ 4 over 24 samples)."""
    cube = ridge_cube(5, n=30)
    pred = cube["pred"].values.copy()
    pred[1] = pred[0]
    pred[1, :, [3, 11]] += 25.0
    return cube.assign(pred=(cube["pred"].dims, pred))


def _codes(result):
    return {w["code"]: w for w in json.loads(result.attrs["warnings"])}


def test_comparisons_warn_with_the_measured_skewness_and_sample_count():
    from cvflow.estimators import compare_all, corrected_t, wald_cv

    cube = _skewed_cube()
    for result, what in ((wald_cv(cube, compare=[0, 1]), "wald_cv"),
                         (corrected_t(cube, compare=[0, 1]), "corrected_t")):
        w = _codes(result)["skewed_differences"]
        assert w["samples"] == 24 and w["skewness"] < -3
        assert w["message"].startswith(f"{what}: the per-sample loss differences have skewness")
    assert "skewed_differences" in _codes(compare_all(cube, params=[0, 1], test="wald_cv"))
    # one param (an interval, not a comparison): no such warning
    assert "skewed_differences" not in _codes(wald_cv(cube, param=0))
