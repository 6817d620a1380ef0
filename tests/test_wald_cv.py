"""wald_cv's paired mode (Bayle, Bayle, Janson & Mackey 2020): per-sample out-of-fold loss
differences against a loop-by-loop implementation, the one-learner compare mode, warnings."""
from __future__ import annotations

import json
import math
from statistics import NormalDist

import pytest

from cvflow.errors import InputError
from cvflow.estimators import wald_cv

from nested_cases import random_cube


def ref_paired_wald(cube, a, b, alpha):
    """Literal loops over repeats, folds and samples (squared loss)."""
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    repeats, k = table.shape
    est, v_in, v_out = [], [], []
    for r in range(repeats):
        d, label = [], []
        for i in range(len(y)):
            j = fold[r, i]
            if j < 0:
                continue
            s = table[r, j]
            la = (pred[a, s, i] - y[i]) ** 2
            lb = 0.0 if b is None else (pred[b, s, i] - y[i]) ** 2
            d.append(la - lb)
            label.append(j)
        n = len(d)
        mean = sum(d) / n
        ss_in = 0.0
        for j in range(k):
            dj = [x for x, l in zip(d, label) if l == j]
            mj = sum(dj) / len(dj)
            ss_in += sum((x - mj) ** 2 for x in dj)
        est.append(mean)
        v_in.append(ss_in / (n - k))
        v_out.append(sum((x - mean) ** 2 for x in d) / n)
    estimate = sum(est) / repeats
    out = {"estimate": estimate}
    z = NormalDist().inv_cdf(1 - alpha / 2)
    for kind, v in (("within", v_in), ("all", v_out)):
        se = math.sqrt(sum(v) / repeats / n)
        out[f"se_{kind}"] = se
        out[f"lower_{kind}"] = estimate - z * se
        out[f"upper_{kind}"] = estimate + z * se
        if b is not None:
            out[f"z_{kind}"] = estimate / se
            out[f"p_value_{kind}"] = 2 * (1 - NormalDist().cdf(abs(estimate / se)))
    return out


@pytest.mark.parametrize("seed", [0, 5])
def test_paired_matches_reference(seed):
    cube, _ = random_cube(n=19, k=4, repeats=3, n_params=3, seed=seed)
    for a, b in [(0, 1), (2, 0)]:
        out = wald_cv(cube, compare=[a, b], alpha=0.2)
        ref = ref_paired_wald(cube, a, b, 0.2)
        for key, value in ref.items():
            assert float(out[key]) == pytest.approx(value, rel=1e-9, abs=1e-12), key
        assert out.attrs["mode"] == "difference"
        assert out.attrs["b"]["index"] == b


def test_one_learner_compare_is_the_param_interval():
    cube, _ = random_cube(n=19, k=4, repeats=2, n_params=3, seed=2)
    one = wald_cv(cube, compare=[1])
    grid = wald_cv(cube)
    ref = ref_paired_wald(cube, 1, None, 0.1)
    for key in ("estimate", "se_within", "upper_all"):
        assert float(one[key]) == pytest.approx(ref[key])
        assert float(grid[key][1]) == pytest.approx(ref[key])
    assert "z_within" not in one


def test_warnings_and_errors():
    cube, _ = random_cube(n=19, k=4, repeats=2, n_params=3, seed=2)
    codes = {w["code"] for w in json.loads(wald_cv(cube, compare=[0, 1]).attrs["warnings"])}
    assert codes == {"few_samples", "tiny_test_sets"}
    with pytest.raises(InputError, match="wald_cv: give either param or compare, not both"):
        wald_cv(cube, compare=[0, 1], param=0)
    with pytest.raises(InputError, match="wald_cv.compare: a and b are the same param"):
        wald_cv(cube, compare=[1, 1])
