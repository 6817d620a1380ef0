"""cv_confidence (Lei 2020) against a literal implementation with the same Gaussian
multipliers, edge cases, errors, and (slow) the coverage of the best param."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.estimators import cv_confidence
from cvflow.testing import cube_from_predictions, simple_design

from nested_cases import random_cube


def ref_cvc(cube, B, seed, repeat=0):
    """The test of Lei's Section 3 with plain loops (squared loss), fold-wise centring."""
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    D = [i for i in range(len(y)) if not cube["is_test"].values[i]]
    n, n_params, k = len(D), pred.shape[0], table.shape[1]
    e = [[(pred[h, table[repeat, fold[repeat, i]], i] - y[i]) ** 2 for i in D]
         for h in range(n_params)]
    v = [fold[repeat, i] for i in D]
    zeta = np.random.default_rng(seed).standard_normal((B, n))
    p = []
    for m in range(n_params):
        stats, columns = [], []
        for j in range(n_params):
            if j == m:
                continue
            xi = [e[m][i] - e[j][i] for i in range(n)]
            mu = sum(xi) / n
            fold_mean = {f: sum(x for x, w in zip(xi, v) if w == f) / v.count(f) for f in range(k)}
            c = [x - fold_mean[w] for x, w in zip(xi, v)]
            sd = math.sqrt(sum(x * x for x in c) / (n - k))
            stats.append(math.sqrt(n) * mu / sd)
            columns.append([x / sd for x in c])
        t = max(stats)
        exceed = 0
        for b in range(B):
            t_star = max(sum(zeta[b, i] * col[i] for i in range(n)) / math.sqrt(n)
                         for col in columns)
            exceed += t_star > t
        p.append(exceed / B)
    return p


@pytest.mark.parametrize("seed,repeat", [(0, 0), (2, 1)])
def test_matches_reference(seed, repeat):
    cube, _ = random_cube(n=22, k=4, repeats=2, n_params=4, seed=seed)
    out = cv_confidence(cube, B=300, seed=seed, repeat=repeat, alpha=0.2)
    ref = ref_cvc(cube, 300, seed, repeat)
    np.testing.assert_allclose(out["p_value"].values, ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out["in_set"].values, np.asarray(ref) > 0.2)
    assert int(out["set_size"]) == sum(p > 0.2 for p in ref)


def test_constant_differences():
    """Param 1 = param 0 + 1 on every sample: 1 is surely worse (p = 0), 0 has p = 1."""
    design = simple_design(12, 3, fold=[[0, 1, 2] * 4])
    rng = np.random.default_rng(0)
    base = rng.normal(size=12)
    pred = np.stack([np.broadcast_to(base, (design.n_splits, 12)),
                     np.broadcast_to(base + 1, (design.n_splits, 12))])
    cube = cube_from_predictions(np.abs(pred), np.zeros(12), design, loss="absolute")
    out = cv_confidence(cube, B=50)
    np.testing.assert_array_equal(out["p_value"].values, [1.0, 0.0])
    codes = {w["code"] for w in json.loads(out.attrs["warnings"])}
    assert codes == {"few_samples", "tiny_test_sets"}


def test_simplest_member():
    """Params 0 and 1 predict alike (both in the set), 2 is worse everywhere (out)."""
    design = simple_design(12, 3, fold=[[0, 1, 2] * 4])
    base = np.abs(np.random.default_rng(1).normal(size=12))
    pred = np.stack([np.broadcast_to(v, (design.n_splits, 12)) for v in (base, base, base + 1)])
    cube = cube_from_predictions(pred, np.zeros(12), design, loss="absolute")
    out = cv_confidence(cube, B=50, simplest={"h": "max"})
    np.testing.assert_array_equal(out["in_set"].values, [True, True, False])
    assert int(out["simplest"]) == 1 and out.attrs["simplest_params"]["params"]["h"] == 1
    assert int(cv_confidence(cube, B=50, simplest={"h": "min"})["simplest"]) == 0
    with pytest.raises(InputError, match=r"cv_confidence.simplest: no hyperparameter 'C' in "
                                         r"the grid; it has h"):
        cv_confidence(cube, simplest={"C": "min"})
    with pytest.raises(InputError, match=r"cv_confidence.simplest.h: 'up'; use max"):
        cv_confidence(cube, simplest={"h": "up"})


@pytest.mark.parametrize("kw,match", [
    ({"repeat": 2}, r"cv_confidence.repeat: 2; the design has 2 repeat\(s\), use 0..1"),
    ({"B": -3}, r"cv_confidence.B: -3; give a positive integer"),
    ({"alpha": "x"}, r"cv_confidence.alpha: 'x'; use a number in \(0, 1\)"),
])
def test_bad_options(kw, match):
    cube, _ = random_cube(seed=0)
    with pytest.raises(InputError, match=match):
        cv_confidence(cube, **kw)


@pytest.mark.slow
def test_set_contains_the_best_param():
    """Known truth: y ~ N(0, 1); param h predicts mean(y_train) + c_h, c = 0, 0.1, 0.2, 0.3,
    0.5, so param 0 is the truly best at every training size (its error is 1 + E ȳ² and
    adding c_h adds c_h²). Over 300 datasets (n = 100, 5 folds) the 90% set contains param 0
    at least 0.9 minus 3 Monte Carlo standard errors (3·sqrt(0.09/300) ≈ 0.052)."""
    rng = np.random.default_rng(0)
    offsets = np.array([0.0, 0.1, 0.2, 0.3, 0.5])
    n, runs, hits, sizes = 100, 300, 0, []
    for run in range(runs):
        y = rng.normal(size=n)
        design = simple_design(n, 5, seed=run)
        means = np.array([y[design.train[s]].mean() for s in range(design.n_splits)])
        pred = np.broadcast_to((means[None, :] + offsets[:, None])[:, :, None],
                               (offsets.size, design.n_splits, n))
        out = cv_confidence(cube_from_predictions(pred, y, design), alpha=0.1, B=500, seed=run)
        hits += bool(out["in_set"][0])
        sizes.append(int(out["set_size"]))
    assert hits / runs >= 0.9 - 3 * math.sqrt(0.09 / runs), (hits / runs, np.mean(sizes))
    assert np.mean(sizes) < offsets.size                  # the set is not trivially everything
