"""One NaN rule across every estimator: a param missing a fit the estimator needs gets NaN in
that estimator (never a silent partial average), and the estimator says how many params that
hit (a ``missing_fits`` warning, shown by the reports)."""
from __future__ import annotations

import numpy as np
import pytest

from cvflow.estimators import REGISTRY, guardrails
from cvflow.report import text
from cvtest import ridge_cube

BAD = 1          # the param whose fold fit (repeat 0, fold 0) and one subset fit failed
OPTIONS = {"ustat": {"compare": [0, BAD]}, "nadeau_bengio": {"compare": [0, BAD]},
           "corrected_t": {"compare": [0, BAD]}, "paired_5x2cv": {"compare": [0, BAD]},
           "wald_cv": {}, "stability": {"lambdas": [0, 1]}, "bbc_cv": {"B": 50},
           "cv_confidence": {"B": 50}, "bayes_t": {"compare": [0, BAD]},
           "compare_all": {"params": [0, BAD, 2]}, "nested_compare": {"learners": ["ridge", "other"]},
           "plan": {"compare": [0, BAD]}}


def _cube(folds: int, repeats: int):
    cube = ridge_cube(folds, repeats, n=36, seed=1)
    broken = [int(cube["fold_split"].values[0, 0]), int(cube["subset_split"].values[0, 0])]
    for s in broken:
        cube["pred"][BAD, s] = np.nan
        cube["failed"][BAD, s] = True
        cube["error"][BAD, s] = "ValueError: injected"
    return cube


@pytest.fixture(scope="module")
def cubes():
    kfold = _cube(4, 2)
    # nested_compare compares two learners: the last param is another learner's
    two = kfold.assign_coords(learner=("param", ["ridge", "ridge", "other"]))
    return {"kfold": kfold, "5x2": _cube(2, 5), "two": two}


def _per_param(result):
    """The per-param answers: float results indexed by param (and λ), not by fold or repeat."""
    return {v: da for v, da in result.data_vars.items() if "param" in da.dims
            and set(da.dims) <= {"param", "lambda"} and np.issubdtype(da.dtype, np.floating)
            and v != "chosen_share"}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_failed_fit_gives_nan_for_that_param_and_is_counted(cubes, name):
    cube = cubes[{"paired_5x2cv": "5x2", "nested_compare": "two"}.get(name, "kfold")]
    result = REGISTRY[name](cube, **OPTIONS.get(name, {}))
    missing = [w for w in guardrails.read(result) if w["code"] == "missing_fits"]
    assert len(missing) == 1 and missing[0]["params"] == 1, f"{name}: {guardrails.read(result)}"
    assert "missing_fits" in text(cube, {name: result})
    per_param = _per_param(result)
    for var, da in per_param.items():
        assert np.isnan(da.isel(param=BAD).values).all(), f"{name}.{var} is not NaN for the param"
    if "estimate" in per_param:
        assert np.isfinite(np.delete(result["estimate"].values, BAD, axis=0)).all()
    elif BAD in OPTIONS.get(name, {}).get("compare", ()):
        answers = [v for v in ("estimate", "p_a_better", "p_rope", "p_b_better") if v in result]
        assert answers and all(np.isnan(result[v].values).all() for v in answers), \
            f"{name}: a partial average"
    elif "params" in OPTIONS.get(name, {}):     # compare_all: NaN for the param and its pairs
        assert np.isnan(result["estimate"].values[list(result["param"].values).index(BAD)])
        with_bad = (result["a"].values == BAD) | (result["b"].values == BAD)
        assert np.isnan(result["p_value"].values[with_bad]).all()
        assert np.isfinite(result["p_value"].values[~with_bad]).all()
    elif "chosen_a" in result:                  # nested_compare: the inner CV never chooses it
        assert (result["chosen_a"].values != BAD).all() and np.isfinite(float(result["estimate"]))
    elif "chosen_share" in result:          # BBC-CV: the param never wins a bootstrap sample
        assert float(result["chosen_share"][BAD]) == 0.0
        assert np.isfinite(result["estimate"].values).all()
    else:
        assert per_param, f"{name}: no per-param result to check"
    for var in ("chosen", "selected", "kfold_selected", "selected_per_lambda"):
        if var in result:
            assert (result[var].values != BAD).all(), f"{name}.{var} chose the failed param"


def test_nested_cv_never_drops_a_repeat(cubes):
    """The repeat holding the failed fit still counts: no nanmean over repeats."""
    result = REGISTRY["nested_cv"](cubes["kfold"])
    assert np.isfinite(result["estimate_repeat"].values).all()
    np.testing.assert_allclose(float(result["estimate"]),
                               result["estimate_repeat"].values.mean(), rtol=1e-15)
    assert np.isnan(result["kfold"].values[BAD])


@pytest.mark.parametrize("name", [n for n in sorted(REGISTRY) if REGISTRY[n].metrics])
def test_per_fold_metric_follows_the_same_rule(cubes, name):
    """A per-fold metric (R²) on the same cube: NaN for the param, counted, never chosen."""
    result = REGISTRY[name](cubes["kfold"], loss="r2")
    missing = [w for w in guardrails.read(result) if w["code"] == "missing_fits"]
    assert len(missing) == 1 and missing[0]["params"] == 1
    kf = result["estimate"] if name == "kfold" else result["kfold"]
    assert np.isnan(kf.values[BAD]) and np.isfinite(np.delete(kf.values, BAD)).all()
    if name == "nested_cv":                 # no outer fold lost every param: no NaN, no drop
        assert np.isfinite(float(result["estimate"]))
    for var in ("chosen", "selected"):
        if var in result:
            assert (result[var].values != BAD).all(), f"{name}.{var} chose the failed param"


def test_report_counts_the_failed_fits_from_the_cube_or_from_the_status_given(cubes):
    """The report lists the failed fits by message (two injected here), read from the cube or
    from the status its caller read already (`cvflow run`'s report cube has no messages)."""
    from cvflow.report.results import status_from_cube

    cube = cubes["kfold"]
    results = {"kfold": REGISTRY["kfold"](cube)}
    report = text(cube, results)
    assert f"2 of {cube['done'].size} fits failed:\n  2 x ValueError: injected" in report
    status = status_from_cube(cube)
    assert status["failures"] == {"ValueError: injected": 2}
    assert text(cube.drop_vars(["error", "fit_seconds"]), results, status=status) == report
