"""One laziness contract for every estimator (flox's ``raise_if_dask_computes`` pattern).

On a cube whose ``pred`` is a dask array, an estimator reads it through the one reduction
route (:func:`cvflow.estimators._cube.role_terms`, or ustat's stream over groups): one dask
computation per reading when the selection fits the budget (``cvflow.reduce.in-memory-bytes``),
otherwise chunk by chunk, one computation per group of params within the budget (so at most
one per param with a zero budget), never an extra hidden ``.compute()``. A counting scheduler
raises on the first computation over the allowance.
"""
from __future__ import annotations

import dask
import numpy as np
import pytest

from cvflow.estimators import REGISTRY
from cvtest import ridge_cube

OPTIONS = {"ustat": {"compare": [0, 1]}, "nadeau_bengio": {"compare": [0, 1]},
           "corrected_t": {"compare": [0, 1]}, "paired_5x2cv": {"compare": [0, 1]},
           "stability": {"lambdas": [0, 1]}, "bbc_cv": {"B": 20}, "cv_confidence": {"B": 20},
           "bayes_t": {"compare": [0, 1]}, "compare_all": {"params": [0, 1, 2]},
           "nested_compare": {"learners": ["ridge", "other"]}}
# DESIGN CHOICE: bbc_cv reads the out-of-fold losses, then the test risk of the K-fold choice
# (a second, one-param reading of the full split); corrected_t comparing two params reads their
# per-sample out-of-fold losses after the fold scores (a second, two-param reading) for the
# skewness of their differences (guardrails.skewed_differences).
ALLOWED = {"bbc_cv": 2, "corrected_t": 2}
# compare_all runs the registered pairwise test once per pair (its numbers are exactly that
# test's): a lazy cube is read once per pair, so it is left out of the read-once tests.
READS_PER_PAIR = {"compare_all"}
# nested_compare's Wald interval reads the per-sample losses of the params each outer fold
# chose: one more reading, after the shared sums have chosen them
AFTER_SHARED = {"nested_compare"}


class CountingScheduler:
    """A dask scheduler that counts computations and raises past ``max_computes``."""

    def __init__(self, max_computes: int):
        self.total_computes = 0
        self.max_computes = max_computes

    def __call__(self, dsk, keys, **kwargs):
        self.total_computes += 1
        if self.total_computes > self.max_computes:
            raise RuntimeError(f"too many dask computations: {self.total_computes} > "
                               f"{self.max_computes}")
        return dask.get(dsk, keys, **kwargs)


def raise_if_dask_computes(max_computes: int = 0):
    return dask.config.set(scheduler=CountingScheduler(max_computes))


def _cube(folds: int, repeats: int):
    cube = ridge_cube(folds, repeats, seed=2)
    return cube.assign(pred=cube["pred"].chunk({"param": 1, "split": 2}))


@pytest.fixture(scope="module")
def cubes():
    kfold = _cube(4, 1)
    # nested_compare compares two learners: the last param is another learner's
    two = kfold.assign_coords(learner=("param", ["ridge"] * (kfold.sizes["param"] - 1) + ["other"]))
    return {"kfold": kfold, "5x2": _cube(2, 5), "two": two}


@pytest.mark.parametrize("budget", ["in-memory", "chunked"])
@pytest.mark.parametrize("name", sorted(set(REGISTRY) - READS_PER_PAIR))
def test_every_estimator_reads_a_lazy_cube_once(cubes, name, budget):
    cube = cubes[{"paired_5x2cv": "5x2", "nested_compare": "two"}.get(name, "kfold")]
    spec = REGISTRY[name]
    eager = spec(cube.assign(pred=cube["pred"].compute()), **OPTIONS.get(name, {}))
    config = {"cvflow.reduce.in-memory-bytes": 0} if budget == "chunked" else {}
    groups = cube.sizes["param"] if budget == "chunked" else 1
    with dask.config.set(config), raise_if_dask_computes(ALLOWED.get(name, 1) * groups):
        lazy = spec(cube, **OPTIONS.get(name, {}))
    assert not any(hasattr(v.data, "dask") for v in lazy.data_vars.values()), \
        f"{name} returned a lazy result"
    for var in eager.data_vars:
        np.testing.assert_allclose(np.asarray(lazy[var].values, dtype=float),
                                   np.asarray(eager[var].values, dtype=float), rtol=1e-12,
                                   equal_nan=True, err_msg=f"{name}.{var}")


@pytest.mark.parametrize("name", [n for n in sorted(REGISTRY) if REGISTRY[n].metrics])
def test_per_fold_metrics_read_each_role_once_within_the_budget(cubes, name):
    """R² is scored fold by fold (cvflow.estimators.fold_metrics): one reading per split role.
    Over the budget it reads one block of params at a time (bounded memory, several reads)."""
    cube, spec = cubes["kfold"], REGISTRY[name]
    eager = spec(cube.assign(pred=cube["pred"].compute()), loss="r2")
    with raise_if_dask_computes(len(spec.needs)):
        lazy = spec(cube, loss="r2")
    for var in eager.data_vars:
        np.testing.assert_allclose(np.asarray(lazy[var].values, dtype=float),
                                   np.asarray(eager[var].values, dtype=float), rtol=1e-12,
                                   equal_nan=True, err_msg=f"{name}.{var}")


# every estimator whose declared loss sums (`terms`) come from the whole cube, with its options
SHARED = {name: OPTIONS.get(name, {}) for name in sorted(REGISTRY)
          if REGISTRY[name].terms and name not in READS_PER_PAIR | AFTER_SHARED}


@pytest.mark.parametrize("budget", ["in-memory", "chunked"])
def test_a_report_reads_a_lazy_cube_once_for_all_its_estimators(cubes, budget):
    """report.compute shares the declared loss sums (cvflow.estimators.shared_terms): one
    reading of pred for all the estimators (per group of params over the budget), not one per
    estimator; each result equals the estimator's alone on the cube in memory."""
    from cvflow.report import compute

    cube = cubes["two"]                  # two learners, for nested_compare
    assert {"kfold", "corrected_kfold", "stability", "nested_cv", "bates_ncv"} <= set(SHARED)
    eager = {name: REGISTRY[name](cube.assign(pred=cube["pred"].compute()), **options)
             for name, options in SHARED.items()}
    config = {"cvflow.reduce.in-memory-bytes": 0} if budget == "chunked" else {}
    groups = cube.sizes["param"] if budget == "chunked" else 1
    # bbc_cv's second reading: the test risk of its choice, one param (see ALLOWED)
    extra = groups if "bbc_cv" in SHARED else 0
    with dask.config.set(config), raise_if_dask_computes(groups + extra):
        lazy = compute(cube, list(SHARED.items()))
    for name, result in eager.items():
        for var in result.data_vars:
            np.testing.assert_allclose(np.asarray(lazy[name][var].values, dtype=float),
                                       np.asarray(result[var].values, dtype=float), rtol=1e-12,
                                       equal_nan=True, err_msg=f"{name}.{var}")


def test_shared_sums_keep_each_estimators_nan_rule():
    """A param whose pair fits are missing is NaN in nested_cv only: the shared sums of a
    report apply the NaN rule of the roles each estimator reads, as the estimator alone does."""
    from cvflow.report import compute

    cube = ridge_cube(4, seed=3)
    pair = np.unique(cube["pair_split"].values[cube["pair_split"].values >= 0])
    pred = cube["pred"].values.copy()
    pred[1, pair[0]] = np.nan                             # param 1: one pair fit failed
    cube = cube.assign(pred=(cube["pred"].dims, pred))
    names = ["kfold", "corrected_kfold", "nested_cv", "stability"]
    shared = compute(cube, [(name, {}) for name in names])
    assert np.isnan(shared["nested_cv"]["inner_score"].values[1]).all()
    for name in ("kfold", "corrected_kfold", "stability"):         # no pair fit read
        assert not np.isnan(shared[name]["estimate" if name == "kfold" else "kfold"][1])
    for name in names:
        alone = REGISTRY[name](cube)
        for var in alone.data_vars:
            np.testing.assert_array_equal(shared[name][var].values, alone[var].values,
                                          err_msg=f"{name}.{var}")
