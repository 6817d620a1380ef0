"""The K-fold reducer against hand computations and scikit-learn."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import PredefinedSplit, cross_val_score

from cvflow.estimators import kfold
from cvflow.workflow.params import Param
from cvflow.testing import cube_from_predictions, fit_cube, simple_design


def test_hand_computed_unequal_folds_and_repeats():
    """n = 5, K = 2 (folds of 3 and 2), two repeats; every number written out by hand."""
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    fold = np.array([[0, 0, 0, 1, 1], [1, 0, 1, 0, 1]])
    design = simple_design(5, 2, fold=fold)
    pred = np.zeros((2, design.n_splits, 5))
    pred[0] = y + 1.0                      # param 0: every prediction off by 1 -> squared loss 1
    pred[1] = y                            # param 1: perfect, except below
    fs = design.fold_split
    pred[1, fs[0, 0], 0] = 1.0 + 3.0       # repeat 0 fold 0 (samples 0,1,2): loss 9 on sample 0
    pred[1, fs[1, 1], 4] = 5.0 + 2.0       # repeat 1 fold 1 (samples 0,2,4): loss 4 on sample 4
    cube = cube_from_predictions(pred, y, design)
    out = kfold(cube)
    np.testing.assert_allclose(out["estimate"].values, [1.0, (9 / 5 + 4 / 5) / 2])
    np.testing.assert_allclose(out["fold_score"].values[1], [[3.0, 0.0], [0.0, 4 / 3]])
    se_r0 = np.std([3.0, 0.0], ddof=1) / np.sqrt(2)
    se_r1 = np.std([0.0, 4 / 3], ddof=1) / np.sqrt(2)
    np.testing.assert_allclose(out["se"].values[1], (se_r0 + se_r1) / 2)
    assert int(out["selected"]) == 0       # 1.0 < 1.3


def test_ties_go_to_first_param_and_failed_params_are_skipped():
    y = np.arange(6.0)
    design = simple_design(6, 3, fold=np.array([[0, 1, 2, 0, 1, 2]]))
    pred = np.stack([y + 2.0, y + 1.0, y - 1.0])
    pred = np.repeat(pred[:, None, :], design.n_splits, axis=1)
    pred[0] = np.nan                       # a failed param
    out = kfold(cube_from_predictions(pred, y, design))
    assert np.isnan(out["estimate"].values[0])
    assert int(out["selected"]) == 1       # params 1 and 2 tie at 1.0: first wins


def test_equals_cross_val_score_with_predefined_split():
    X, y = load_diabetes(return_X_y=True)
    alphas = [0.01, 0.3, 3.0]
    design = simple_design(len(y), 5, seed=3)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in alphas]
    out = kfold(fit_cube(X, y, params, design))
    sizes = np.bincount(design.fold[0])
    for h, a in enumerate(alphas):
        ref = -cross_val_score(Ridge(alpha=a), X, y, cv=PredefinedSplit(design.fold[0]),
                               scoring="neg_mean_squared_error")
        np.testing.assert_allclose(out["fold_score"].values[h, 0], ref, rtol=1e-10)
        np.testing.assert_allclose(out["estimate"].values[h], np.sum(ref * sizes) / sizes.sum(),
                                   rtol=1e-10)


def test_lazy_cube_gives_the_same_numbers():
    X, y = load_diabetes(return_X_y=True)
    design = simple_design(len(y), 4)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 1.0)]
    cube = fit_cube(X, y, params, design)
    lazy = cube.chunk({"param": 1, "split": 2})
    np.testing.assert_allclose(kfold(lazy)["estimate"].values, kfold(cube)["estimate"].values,
                               rtol=1e-12)


def test_missing_fold_splits_are_reported():
    from cvflow.errors import InputError

    y = np.arange(6.0)
    design = simple_design(6, 3)
    cube = cube_from_predictions(np.zeros((1, design.n_splits, 6)), y, design)
    cube["fold_split"][:] = -1
    with pytest.raises(InputError, match="needs the fold splits"):
        kfold(cube)
