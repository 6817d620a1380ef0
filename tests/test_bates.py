"""bates_ncv (Bates, Hastie & Tibshirani) and wald_cv (Bayle et al.): hand computations,
a loop-by-loop reference (unequal folds, repeats), errors, and the coverage claim (slow)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.estimators import bates_ncv, wald_cv
from cvflow.testing import cube_from_predictions, simple_design

from nested_cases import random_cube, ref_bates

Z90 = 1.6448536269514722


def hand_cube(pairs):
    """n=6, folds {0,1} {2,3} {4,5}; y=0, absolute loss; out-of-fold losses e = 2 2 2 2 1 3."""
    design = simple_design(6, 3, pairs=True, fold=[[0, 0, 1, 1, 2, 2]])
    pred = np.full((1, design.n_splits, 6), 7.0)
    for t, own in enumerate([[2, 2], [2, 2], [1, 3]]):
        pred[0, design.fold_split[0, t], 2 * t:2 * t + 2] = own
    for (t, l), v in pairs.items():
        pred[0, design.pair_split[0, t, l]] = v
    return cube_from_predictions(pred, np.zeros(6), design, loss="absolute")


def test_bates_by_hand_unclamped():
    out = bates_ncv(hand_cube({(0, 1): 3, (0, 2): 3, (1, 2): 2}), param=0)
    # e_in: j=0 -> 3; j=1 -> (3+3+2+2)/4 = 2.5; j=2 -> 2.5. e_out means all 2.
    np.testing.assert_allclose(out["e_in"], [[3, 2.5, 2.5]])
    np.testing.assert_allclose(out["a"], [[1, 0.25, 0.25]])
    np.testing.assert_allclose(out["b"], [[0, 0, 1]])          # var(1, 3) = 2, / |N_2| = 2
    assert float(out["mse"]) == pytest.approx(0.5 - 1 / 3)
    assert float(out["err_ncv"]) == pytest.approx(8 / 3)
    assert float(out["err_cv"]) == pytest.approx(2)
    assert float(out["bias"]) == pytest.approx(4 / 3 * 2 / 3)  # (1 + (K-2)/K)(8/3 - 2)
    assert float(out["se"]) == pytest.approx(1 / 3)           # sqrt(2/3 * 1/6), in the clamp
    assert float(out["estimate"]) == pytest.approx(16 / 9)
    assert float(out["lower"]) == pytest.approx(16 / 9 - Z90 / 3)
    assert float(out["upper"]) == pytest.approx(16 / 9 + Z90 / 3)
    se_naive = math.sqrt(0.4 / 6)                              # sd^2 = 2/5
    assert float(out["se_naive"]) == pytest.approx(se_naive)
    assert float(out["naive_lower"]) == pytest.approx(2 - Z90 * se_naive)
    assert float(out["width_ratio"]) == pytest.approx((1 / 3) / se_naive)


def test_bates_clamps_se():
    high = bates_ncv(hand_cube({(0, 1): 4, (0, 2): 4, (1, 2): 0}), param=0)
    assert float(high["mse"]) == pytest.approx(1.0)
    assert float(high["se_raw"]) == pytest.approx(math.sqrt(2 / 3))
    assert float(high["se"]) == pytest.approx(math.sqrt(3) * math.sqrt(0.4 / 6))  # √K cap
    assert float(high["width_ratio"]) == pytest.approx(math.sqrt(3))
    low = bates_ncv(hand_cube({(0, 1): 2, (0, 2): 2, (1, 2): 2}), param=0)
    assert float(low["mse"]) == pytest.approx(-1 / 3)         # negative MSE estimate
    assert np.isnan(float(low["se_raw"]))
    assert float(low["se"]) == pytest.approx(float(low["se_naive"]))
    assert float(low["bias"]) == 0 and float(low["estimate"]) == pytest.approx(2)


def test_wald_by_hand():
    out = wald_cv(hand_cube({(0, 1): 3, (0, 2): 3, (1, 2): 2}), param=0, alpha=0.05)
    assert float(out["estimate"]) == pytest.approx(2)
    assert float(out["var_within"]) == pytest.approx(2 / 3)   # SS within = 2, / (n - K)
    assert float(out["var_all"]) == pytest.approx(1 / 3)      # SS = 2, / n
    assert float(out["se_within"]) == pytest.approx(1 / 3)
    assert float(out["upper_all"]) == pytest.approx(2 + 1.959963984540054 * math.sqrt(1 / 18))


@pytest.mark.parametrize("seed", [0, 4])
def test_bates_and_wald_match_reference(seed):
    cube, _ = random_cube(n=17, k=4, repeats=3, n_params=3, seed=seed)
    bates = bates_ncv(cube, alpha=0.2)
    wald = wald_cv(cube, alpha=0.2)
    for h in range(3):
        ref = ref_bates(cube, h, alpha=0.2)
        for key in ("mse", "err_ncv", "err_cv", "bias", "se", "estimate", "lower", "upper",
                    "se_naive", "naive_lower", "naive_upper"):
            assert float(bates[key][h]) == pytest.approx(ref[key], nan_ok=True), key
        assert float(wald["var_within"][h]) == pytest.approx(ref["var_within"])
        assert float(wald["var_all"][h]) == pytest.approx(ref["var_all"])
    one = bates_ncv(cube, param=2, alpha=0.2)
    assert float(one["estimate"]) == pytest.approx(float(bates["estimate"][2]))
    assert one.attrs["param"]["index"] == 2


@pytest.mark.parametrize("kw,match", [
    ({"param": 5}, r"bates_ncv.param: 5 is not a param index; the grid has 3 params"),
    ({"param": "x"}, "give the index of a param"),
    ({"alpha": 1.5}, r"bates_ncv.alpha: 1.5; the miscoverage level must be in \(0, 1\)"),
])
def test_bates_bad_options(kw, match):
    cube, _ = random_cube(seed=0)
    with pytest.raises(InputError, match=match):
        bates_ncv(cube, **kw)


def test_wald_needs_no_pairs():
    design = simple_design(8, 4, fold=[[0, 0, 1, 1, 2, 2, 3, 3]])
    pred = np.arange(design.n_splits * 8, dtype=float).reshape(1, design.n_splits, 8)
    out = wald_cv(cube_from_predictions(pred, np.zeros(8), design))
    assert np.isfinite(float(out["var_within"][0]))
    with pytest.raises(InputError, match="bates_ncv needs the pair splits"):
        bates_ncv(cube_from_predictions(pred, np.zeros(8), design))


@pytest.mark.slow
def test_nested_interval_covers_better_than_naive():
    """Bates et al.'s low-dimensional logistic setting (p=20, n=100, Bayes error ~ 33%).

    Miscoverage of Err_XY (the full fit's error on a large fresh sample) over 60 datasets,
    5 folds, 4 repeats; nominal 10%. The naive interval is the paper's: one K-fold run.
    Tolerance: with 60 datasets the binomial sd of a rate is about 0.04, so the nested
    miscoverage must be at most 0.05 farther from 10% than the naive one, and within 0.12
    of 10%. The full study (300 datasets) is workflows/studies/bates_coverage.py.
    """
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows" / "studies"))
    from bates_coverage import simulate

    res = simulate(datasets=60, repeats=4, seed=123)
    assert abs(res["miss_ncv_xy"] - 0.10) <= abs(res["miss_naive1_xy"] - 0.10) + 0.05
    assert abs(res["miss_ncv_xy"] - 0.10) <= 0.12
