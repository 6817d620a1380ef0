"""nested_cv (Varma & Simon Algorithm 1): by hand, against scikit-learn's GridSearchCV inside
an outer loop, and the count of fits a nested workflow executes (engine on a real cluster)."""
from __future__ import annotations

import numpy as np
import pytest

import cvflow
from cvflow.execution.run import run
from cvflow.workflow.designs import make_design
from cvflow.errors import InputError
from cvflow.estimators import nested_cv, stability_nested
from cvflow.workflow.params import Param
from cvflow.testing import cube_from_predictions, fit_cube, simple_design

from nested_cases import constant_cube, count_pairs, random_cube, ref_all


def test_nested_cv_by_hand():
    # folds of sizes 1, 2, 3; see test_stability.py for the same cube with λ
    cube = constant_cube([0, 1, 1, 2, 2, 2], [3.0, 2.0], [[3, 3, 3], [4, 2, 2]],
                         [{(0, 1): 3, (0, 2): 3, (1, 2): 3}, {(0, 1): 1, (0, 2): 1, (1, 2): 4}])
    out = nested_cv(cube)
    assert out["chosen"].values.tolist() == [[1, 0, 0]]        # t=2 is a tie 3 = 3 -> first
    np.testing.assert_allclose(out["outer_score"], [[4, 3, 3]])
    assert float(out["estimate"]) == pytest.approx((4 + 6 + 9) / 6)
    np.testing.assert_allclose(out["kfold"], [3, 14 / 6])
    assert float(out["kfold_min"]) == pytest.approx(14 / 6)   # optimistic, below nested
    assert any(p["index"] == 1 for row in out.attrs["chosen_params"] for p in row)


def test_nested_cv_repeats_unequal_folds_reference():
    cube, _ = random_cube(n=14, k=3, repeats=3, n_params=4, seed=7)
    ref = ref_all(cube, [0.0])
    out = nested_cv(cube)
    np.testing.assert_array_equal(out["chosen"], ref["chosen"][..., 0])
    np.testing.assert_allclose(out["estimate_repeat"], ref["m_repeat"][:, 0])
    assert float(out["estimate"]) == pytest.approx(ref["m"][0])


def test_nested_cv_matches_sklearn_gridsearch():
    """Outer loop by hand, inner loop by GridSearchCV on the same (equal) folds."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import mean_squared_error
    from sklearn.model_selection import GridSearchCV, PredefinedSplit

    rng = np.random.default_rng(0)
    n, k = 40, 4
    X = rng.normal(size=(n, 6))
    y = X @ rng.normal(size=6) + rng.normal(scale=2.0, size=n)
    fold = np.repeat(np.arange(k), n // k)
    rng.shuffle(fold)
    alphas = [0.01, 1.0, 10.0, 30.0, 100.0, 300.0]
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in alphas]
    design = simple_design(n, k, pairs=True, fold=fold[None, :])
    out = nested_cv(fit_cube(X, y, params, design))
    total = 0.0
    for t in range(k):
        rest = fold != t
        search = GridSearchCV(Ridge(), {"alpha": alphas}, scoring="neg_mean_squared_error",
                              cv=PredefinedSplit(fold[rest]), refit=True).fit(X[rest], y[rest])
        assert int(out["chosen"][0, t]) == alphas.index(search.best_params_["alpha"])
        total += mean_squared_error(y[~rest], search.predict(X[~rest])) * (~rest).sum()
    assert float(out["estimate"]) == pytest.approx(total / n)


def test_nested_cv_needs_pairs():
    design = simple_design(6, 3, fold=[[0, 0, 1, 1, 2, 2]])
    cube = cube_from_predictions(np.zeros((1, design.n_splits, 6)), np.zeros(6), design)
    with pytest.raises(InputError, match="nested_cv needs the pair splits"):
        nested_cv(cube)


@pytest.mark.parametrize("k,repeats", [(3, 1), (5, 1), (4, 3)])
def test_design_has_one_split_per_distinct_training_set(k, repeats):
    fold = np.stack([np.random.default_rng(r).permutation(np.arange(30) % k) for r in range(repeats)])
    design = make_design(fold, np.zeros(30, bool), pairs=True)
    assert design.n_splits == 1 + repeats * (k + k * (k - 1) // 2)
    assert design.n_splits == count_pairs(design)
    # a pair serves both orders: the table is symmetric and names each pair split once
    ps = design.pair_split
    assert (ps == ps.transpose(0, 2, 1)).all()
    assert design.roles_requested == 1 + repeats * (k + k * (k - 1) // 2)


NESTED = """\
name: nested_count
data: {{source: synthetic, name: linear, params: {{n: 60, p: 4}}}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: [0.1, 1.0, 10.0]}}
design: {{folds: {k}, repeats: {r}, seed: 0}}
estimators: {estimators}
execution: {{fits_per_task: 32}}
"""


def test_fit_count_and_lambdas_cost_no_fits(write_workflow, tmp_path, client):
    k, r, n_params = 4, 2, 3
    one = write_workflow(NESTED.format(k=k, r=r, estimators="[{stability_nested: {lambdas: [0]}}]"),
                         "one.yaml")
    many = write_workflow(NESTED.format(
        k=k, r=r, estimators="[{stability_nested: {lambdas: [0, 0.01, 0.1, 1, 10, 100]}}, "
                             "nested_cv, bates_ncv, wald_cv, stability]"), "many.yaml")
    expected = n_params * (1 + r * (k + k * (k - 1) // 2))
    res_one = run(one, store=tmp_path / "one.zarr", client=client)
    assert res_one.fits_executed == expected
    # the same store, re-run with a larger λ grid and more nested estimators: zero new fits
    again = run(many, store=tmp_path / "one.zarr", client=client)
    assert again.fits_executed == 0 and again.total_fits == expected
    cube = cvflow.open(tmp_path / "one.zarr")
    assert int(cube["done"].sum()) == expected
    out = stability_nested(cube, lambdas=[0, 0.01, 0.1, 1, 10, 100])
    assert np.isfinite(out["estimate"]).all()
