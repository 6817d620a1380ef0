"""stability (eq. 5, eq. 7) and stability_nested (eq. 8, Appendix C): hand computations,
a loop-by-loop reference on random cubes (unequal folds, repeats, a test set), errors."""
from __future__ import annotations

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.estimators import REGISTRY, nested_cv, stability, stability_nested
from cvflow.testing import cube_from_predictions, simple_design

from nested_cases import constant_cube, random_cube, ref_all

# Two params, three folds of sizes 1, 2, 3 (unequal), y = 0, absolute loss = the constant.
FOLD = [0, 1, 1, 2, 2, 2]
FULL = [3.0, 2.0]
FOLDS = [[3.0, 3.0, 3.0], [4.0, 2.0, 2.0]]
PAIRS = [{(0, 1): 3.0, (0, 2): 3.0, (1, 2): 3.0}, {(0, 1): 1.0, (0, 2): 1.0, (1, 2): 4.0}]
LAMBDAS = [0, 0.5, 1, 10]


@pytest.fixture
def hand():
    return constant_cube(FOLD, FULL, FOLDS, PAIRS, test_full=[5.0, 1.0])


def test_stability_by_hand():
    # n = 4, folds {0,1} {2,3}; absolute loss with y = 0, so each loss is |prediction|.
    design = simple_design(4, 2, fold=[[0, 0, 1, 1]])
    pred = np.zeros((2, design.n_splits, 4))
    f, s0, s1 = design.full_split, design.fold_split[0, 0], design.fold_split[0, 1]
    pred[0, f], pred[0, s0], pred[0, s1] = [1, 1, 1, 1], [1, 1, 3, 1], [1, 2, 1, 1]
    pred[1, f], pred[1, s0], pred[1, s1] = [0, 0, 0, 0], [0.5, 0.5, 1, 2], [1, 0, 0.5, 0.5]
    cube = cube_from_predictions(pred, np.zeros(4), design, loss="absolute")
    out = stability(cube, lambdas=[0, 0.5, 1, 2])
    # param 0: |fold - full| means 2/4 and 1/4 -> mu 0.5; kfold (1+1+1+1)/4 = 1
    # param 1: means 4/4 and 2/4 -> mu 1.0; kfold (0.5*4)/4 = 0.5
    np.testing.assert_allclose(out["stability"], [0.5, 1.0])
    np.testing.assert_allclose(out["stability_fold"].isel(repeat=0), [[0.5, 0.25], [1.0, 0.5]])
    np.testing.assert_allclose(out["kfold"], [1.0, 0.5])
    # objectives 1 + 0.5λ vs 0.5 + λ: λ=0 -> 1, λ=0.5 -> 1, λ=1 tie -> first (0), λ=2 -> 0
    assert out["selected"].values.tolist() == [1, 1, 0, 0]
    np.testing.assert_allclose(out["objective"].sel({"lambda": 1.0}), [1.5, 1.5])


def test_stability_nested_by_hand(hand):
    out = stability_nested(hand, lambdas=LAMBDAS)
    # inner scores, pooled over D \ N_t (eq. 8): param 1 at t=1 is (1*1 + 3*4)/4 = 3.25
    np.testing.assert_allclose(out["inner_score"].isel(repeat=0), [[3, 3, 3], [1, 3.25, 3]])
    # inner stability max_l |pair(t,l) - fold t|: t=0 |1-4|; t=1 max(|1-2|,|4-2|); t=2 same
    np.testing.assert_allclose(out["inner_stability"].isel(repeat=0), [[0, 0, 0], [3, 2, 2]])
    # λ=0: t0 -> param 1 (1 < 3), m=1*4; t1 -> 0 (3 < 3.25), m=2*3; t2 tie 3 = 3 -> 0, m=3*3
    # λ=1: t0 -> 1+3 = 4 > 3 -> param 0, m=3; total 18
    np.testing.assert_allclose(out["estimate"], [19 / 6, 19 / 6, 3, 3])
    assert out["chosen"].isel(repeat=0).values.tolist() == [[1, 1, 0, 0], [0, 0, 0, 0],
                                                            [0, 0, 0, 0]]
    assert float(out["lambda_star"]) == 1.0          # tie with λ=10 goes to the smaller
    np.testing.assert_allclose(out["kfold"], [3, 14 / 6])
    np.testing.assert_allclose(out["stability"], [0, 2])  # max_j |fold j - full|: |4 - 2|
    assert out["selected_per_lambda"].values.tolist() == [1, 0, 0, 0]
    assert int(out["selected"]) == 0 and int(out["kfold_selected"]) == 1
    assert float(out["test_risk"]) == 5.0 and float(out["kfold_test_risk"]) == 1.0
    np.testing.assert_allclose(out["full_test_risk"], [5, 1])
    assert out.attrs["selected_params"]["index"] == 0


def test_inner_score_is_pooled_not_mean_of_fold_means(hand):
    # mean of fold means at t=1 would be (1 + 4)/2 = 2.5 < 3 and choose param 1 (m_0 = 17/6)
    out = stability_nested(hand, lambdas=[0])
    assert float(out["estimate"][0]) == pytest.approx(19 / 6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stability_nested_matches_reference(seed):
    cube, _ = random_cube(seed=seed)
    lambdas = [0.0, 0.05, 0.2, 1.0, 5.0]
    ref = ref_all(cube, lambdas)
    out = stability_nested(cube, lambdas=lambdas)
    np.testing.assert_allclose(out["estimate"], ref["m"])
    np.testing.assert_allclose(out["estimate_repeat"], ref["m_repeat"])
    np.testing.assert_array_equal(out["chosen"], ref["chosen"])
    np.testing.assert_allclose(out["inner_score"], ref["s_t"])
    np.testing.assert_allclose(out["inner_stability"], ref["mu_t"])
    np.testing.assert_allclose(out["kfold"], ref["kfold"])
    np.testing.assert_allclose(out["stability"], ref["mu"])
    assert float(out["lambda_star"]) == ref["lambda_star"]
    assert int(out["selected"]) == ref["h_star"]
    st = stability(cube)
    np.testing.assert_allclose(st["stability"], ref["mu"])


def test_zero_one_loss_classification():
    cube, _ = random_cube(seed=5, classification=True, n_params=4)
    ref = ref_all(cube, [0.0, 1.0], loss="zero_one")
    out = stability_nested(cube, lambdas=[1.0, 0.0])  # unsorted input is sorted
    assert out["lambda"].values.tolist() == [0.0, 1.0]
    np.testing.assert_allclose(out["estimate"], ref["m"])


@pytest.mark.parametrize("seed", [0, 3])
def test_lambda_zero_equals_nested_cv_exactly(seed):
    cube, _ = random_cube(seed=seed, n_params=5)
    sn = stability_nested(cube, lambdas=[0, 0.3, 2])
    nc = nested_cv(cube)
    assert float(sn["estimate"][0]) == float(nc["estimate"])        # bit for bit
    np.testing.assert_array_equal(sn["chosen"].isel({"lambda": 0}), nc["chosen"])
    np.testing.assert_array_equal(sn["outer_score"].isel({"lambda": 0}), nc["outer_score"])


def test_failed_param_is_skipped():
    cube, design = random_cube(seed=1)
    cube["pred"][1, design.pair_split[0, 0, 1]] = np.nan   # one failed pair fit of param 1
    out = stability_nested(cube, lambdas=[0, 1])
    assert np.isnan(out["inner_score"][1, 0, 0]) and np.isnan(out["inner_score"][1, 0, 1])
    assert not (out["chosen"].isel(repeat=0, outer=[0, 1]) == 1).any()
    assert np.isfinite(out["estimate"]).all()


def test_lazy_store_gives_same_result(tmp_path, hand):
    import xarray as xr

    path = tmp_path / "c.zarr"
    hand.to_zarr(path, zarr_format=3, consolidated=False)
    lazy = xr.open_zarr(path, consolidated=False, zarr_format=3)
    assert lazy["pred"].chunks is not None
    a = stability_nested(lazy, lambdas=LAMBDAS)
    b = stability_nested(hand, lambdas=LAMBDAS)
    np.testing.assert_allclose(a["estimate"], b["estimate"])


@pytest.mark.parametrize("bad,match", [
    ([-1], "stability_nested.lambdas: -1.0 is not a weight"),
    ([float("nan")], "is not a weight"),
    ([], r"stability_nested.lambdas: \[\] is not a weight"),
    (["a"], "give a list of numbers"),
])
def test_bad_lambdas(hand, bad, match):
    with pytest.raises(InputError, match=match):
        stability_nested(hand, lambdas=bad)


def test_missing_pairs_refused():
    design = simple_design(6, 3, fold=[[0, 0, 1, 1, 2, 2]])
    cube = cube_from_predictions(np.zeros((1, design.n_splits, 6)), np.zeros(6), design)
    with pytest.raises(InputError, match="stability_nested needs the pair splits"):
        stability_nested(cube)
    assert "stability_nested" in REGISTRY and "stability" in REGISTRY
