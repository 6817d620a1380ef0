"""bbc_cv (Tsamardinos et al. 2018) against a literal implementation with the same seeded
bootstrap draws, its errors, and (slow) its bias correction on a study with known truth."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.estimators import bbc_cv

from nested_cases import random_cube


def ref_bbc(cube, B, seed, alpha):
    """Algorithm 1 of the paper with plain loops; repeats averaged per bootstrap sample."""
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    D = [i for i in range(len(y)) if not cube["is_test"].values[i]]
    n, n_params, repeats = len(D), pred.shape[0], table.shape[0]
    oof = [[[(pred[h, table[r, fold[r, i]], i] - y[i]) ** 2 for i in D] for r in range(repeats)]
           for h in range(n_params)]
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(B):
        idx = rng.integers(0, n, size=n)
        out = [i for i in range(n) if i not in set(idx.tolist())]
        per_repeat = []
        for r in range(repeats):
            in_bag = [sum(oof[h][r][i] for i in idx) / n for h in range(n_params)]
            best = min(range(n_params), key=lambda h: (in_bag[h], h))
            per_repeat.append(sum(oof[best][r][i] for i in out) / len(out))
        scores.append(sum(per_repeat) / repeats)
    kfold = [sum(sum(oof[h][r]) / n for r in range(repeats)) / repeats for h in range(n_params)]
    return {"estimate": sum(scores) / B, "lower": np.quantile(scores, alpha / 2),
            "upper": np.quantile(scores, 1 - alpha / 2), "kfold_min": min(kfold),
            "selected": int(np.argmin(kfold))}


@pytest.mark.parametrize("seed,repeats", [(0, 1), (3, 3)])
def test_matches_reference(seed, repeats):
    cube, _ = random_cube(n=21, k=4, repeats=repeats, n_params=4, seed=seed)
    out = bbc_cv(cube, B=150, seed=seed + 1, alpha=0.1)
    ref = ref_bbc(cube, 150, seed + 1, 0.1)
    for key, value in ref.items():
        assert float(out[key]) == pytest.approx(value, rel=1e-10), key
    assert float(out["chosen_share"].sum()) == pytest.approx(1.0)
    assert out.attrs["selected_params"]["index"] == ref["selected"]


def test_failed_param_never_chosen():
    cube, design = random_cube(n=21, k=4, repeats=1, n_params=3, seed=1)
    cube["pred"][0, design.fold_split[0, 1]] = np.nan
    out = bbc_cv(cube, B=50)
    assert float(out["chosen_share"][0]) == 0.0 and np.isfinite(float(out["estimate"]))
    assert "missing_fits" in {w["code"] for w in json.loads(out.attrs["warnings"])}


def test_few_samples_speaks_of_a_bootstrap_interval():
    """BBC-CV's interval is a bootstrap percentile interval and it gives no p-value: the
    warning says so (it spoke of a normal approximation and p-values)."""
    cube, _ = random_cube(n=21, k=4, repeats=1, n_params=3, seed=2)
    (few,) = [w for w in json.loads(bbc_cv(cube, B=20).attrs["warnings"])
              if w["code"] == "few_samples"]
    assert few["message"] == ("bbc_cv uses a bootstrap percentile interval over n = 19 samples "
                              "(< 30); its coverage may be far from nominal")   # 2 test samples


@pytest.mark.parametrize("kw,match", [
    ({"B": 0}, r"bbc_cv.B: 0; give a positive integer"),
    ({"B": 2.5}, r"bbc_cv.B: 2.5; give a positive integer"),
    ({"seed": -1}, r"bbc_cv.seed: -1; give a non-negative integer"),
    ({"alpha": 0}, r"bbc_cv.alpha: 0; use a number in \(0, 1\)"),
])
def test_bad_options(kw, match):
    cube, _ = random_cube(seed=0)
    with pytest.raises(InputError, match=match):
        bbc_cv(cube, **kw)


def _simple_regressions(x, y, train):
    """Per feature h, least squares y ~ 1 + x_h on the rows of ``train``: (intercept, slope)."""
    xt, yt = x[train], y[train]
    xm, ym = xt.mean(0), yt.mean()
    slope = ((xt - xm) * (yt - ym)[:, None]).sum(0) / ((xt - xm) ** 2).sum(0)
    return ym - slope * xm, slope


@pytest.mark.slow
def test_closer_to_the_truth_than_the_kfold_minimum():
    """Known truth: y ~ N(0, 1) independent of 30 N(0, 1) features; param h regresses y on
    feature h alone. The true error of a fit (b0, b1) is 1 + b0² + b1² exactly. Over 100
    datasets (n = 50, 5 folds) the K-fold minimum is optimistic for the selected param's
    full fit and BBC-CV's estimate is closer to that truth on average."""
    from cvflow.testing import cube_from_predictions, simple_design

    rng = np.random.default_rng(0)
    n, p = 50, 30
    err_kfold, err_bbc, bias_kfold = [], [], []
    for run in range(100):
        x = rng.normal(size=(n, p))
        y = rng.normal(size=n)
        design = simple_design(n, 5, seed=run)
        pred = np.empty((p, design.n_splits, n))
        for s in range(design.n_splits):
            b0, b1 = _simple_regressions(x, y, design.train[s])
            pred[:, s] = (b0 + b1 * x).T
        out = bbc_cv(cube_from_predictions(pred, y, design), B=300, seed=run)
        b0, b1 = _simple_regressions(x, y, design.train[design.full_split])
        h = int(out["selected"])
        truth = 1 + b0[h] ** 2 + b1[h] ** 2
        err_kfold.append(abs(float(out["kfold_min"]) - truth))
        err_bbc.append(abs(float(out["estimate"]) - truth))
        bias_kfold.append(float(out["kfold_min"]) - truth)
    assert np.mean(bias_kfold) < 0                       # the winner's curse is there
    assert np.mean(err_bbc) < np.mean(err_kfold), (np.mean(err_bbc), np.mean(err_kfold))
