"""Guardrail warnings: each weak-answer case is flagged in the result's attrs, in the JSON of
`cvflow report --json` (report.to_json) and in the HTML report, with a stable code."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cvflow import report
from cvflow.estimators import (bates_ncv, corrected_t, cv_confidence, guardrails, nadeau_bengio,
                               paired_5x2cv, ustat, wald_cv)
from cvflow.report.html import write_html
from cvflow.testing import cube_from_predictions, simple_design

from cvtest import run_cli
from nested_cases import random_cube
from test_bates import hand_cube


def codes(result) -> set[str]:
    return {w["code"] for w in guardrails.read(result)}


def subset_cube(seed: int, n: int = 16, g: int = 4, pairs: int = 3):
    rng = np.random.default_rng(seed)
    design = simple_design(n, 2, seed=seed, subset={"size": g, "pairs": pairs})
    y = rng.normal(size=n)
    pred = y + rng.normal(size=(2, design.n_splits, n)) * np.array([1.0, 1.3])[:, None, None]
    return cube_from_predictions(pred, y, design)


def test_ustat_noisy_and_negative_variance():
    out = ustat(subset_cube(0), compare=[0, 1])
    noisy = [w for w in guardrails.read(out) if w["code"] == "variance_imprecise"]
    assert noisy and noisy[0]["groups_needed"] > 3
    assert f"about {noisy[0]['groups_needed']} groups" in noisy[0]["message"]
    expected = int(np.ceil(3 * (float(out["variance_se"]) / (0.1 * abs(float(out["variance"]))))
                           ** 2))
    assert noisy[0]["groups_needed"] == expected
    negative = next(ustat(c, compare=[0, 1]) for c in map(subset_cube, range(60))
                    if float(ustat(c, compare=[0, 1])["variance"]) < 0)
    assert "variance_not_positive" in codes(negative)


def test_nadeau_bengio_on_subset_design():
    out = nadeau_bengio(subset_cube(1), compare=[0, 1])
    (w,) = [w for w in guardrails.read(out) if w["code"] == "conservative_design"]
    assert w["ratio"] == pytest.approx((16 - 4) / 4)


def test_bates_clamps_are_counted():
    cap = bates_ncv(hand_cube({(0, 1): 4, (0, 2): 4, (1, 2): 0}), param=0)
    assert bool(cap["at_cap"]) and cap.attrs["cap_binds"] == 1
    floor = bates_ncv(hand_cube({(0, 1): 2, (0, 2): 2, (1, 2): 2}), param=0)
    assert bool(floor["at_floor"]) and floor.attrs["floor_binds"] == 1
    (w,) = [w for w in guardrails.read(floor) if w["code"] == "mse_clamped"]
    assert w["floor_binds"] == 1 and w["cap_binds"] == 0
    free = bates_ncv(hand_cube({(0, 1): 3, (0, 2): 3, (1, 2): 2}), param=0)
    assert "mse_clamped" not in codes(free)
    assert {"few_folds", "few_samples"} <= codes(free)


def test_bates_bias_factor_of_the_authors_code():
    cube, _ = random_cube(n=17, k=4, repeats=2, n_params=2, seed=3)
    paper = bates_ncv(cube)
    code = bates_ncv(cube, bias_factor="code")
    diff = (paper["err_ncv"] - paper["err_cv"]).values
    np.testing.assert_allclose(paper["bias"], (1 + 2 / 4) * diff)
    np.testing.assert_allclose(code["bias"], (1 + (2 / 4) ** 1.5) * diff)
    with pytest.raises(Exception, match=r"bates_ncv.bias_factor: 'x'; use 'paper'"):
        bates_ncv(cube, bias_factor="x")


def test_kfold_and_corrected_standard_errors():
    """se_mean and corrected se: the corrected repeated K-fold formula by hand."""
    from cvflow.estimators import corrected_kfold, kfold

    cube, _ = random_cube(n=21, k=3, repeats=2, n_params=2, seed=4)
    res = kfold(cube)
    scores = res["fold_score"].values[1].ravel()
    by_hand = np.sqrt((1 / 6 + 1 / 2) * scores.var(ddof=1))
    assert float(res["se_mean"][1]) == pytest.approx(by_hand)
    assert float(corrected_t(cube, compare=[1])["se"]) == pytest.approx(by_hand)
    cor = corrected_kfold(cube)
    pred, y, table = cube["pred"].values, cube["y"].values, cube["fold_split"].values
    D = ~cube["is_test"].values
    values = [scores[2 * 0 + 0]]
    values = []
    for r in range(2):
        for j in range(3):
            s = table[r, j]
            fold_risk = np.mean((pred[1, s, D] - y[D]) ** 2)
            full_risk = np.mean((pred[1, cube.attrs["full_split"], D] - y[D]) ** 2)
            values.append(res["fold_score"].values[1, r, j] + full_risk - fold_risk)
    assert float(cor["se"][1]) == pytest.approx(np.sqrt((1 / 6 + 1 / 2) * np.var(values, ddof=1)))


def test_warnings_reach_json_and_html(tmp_path):
    cube, _ = random_cube(n=19, k=4, repeats=2, n_params=3, seed=0)
    results = {"corrected_t": corrected_t(cube, compare=[0, 1]),
               "wald_cv": wald_cv(cube, compare=[0, 1]),
               "cv_confidence": cv_confidence(cube, B=50),
               "bates_ncv": bates_ncv(hand_cube({(0, 1): 4, (0, 2): 4, (1, 2): 0}), param=0),
               "nadeau_bengio": nadeau_bengio(subset_cube(1), compare=[0, 1]),
               "ustat": next(r for r in (ustat(subset_cube(s), compare=[0, 1]) for s in range(60))
                             if float(r["variance"]) < 0)}
    doc = json.loads(json.dumps(report.to_json(results)))
    seen = {name: {w["code"] for w in doc[name]["warnings"]} for name in results}
    assert {"tiny_test_sets", "few_folds"} <= seen["corrected_t"]
    assert "few_samples" in seen["wald_cv"]
    assert {"variance_not_positive", "variance_imprecise"} <= seen["ustat"]
    assert "mse_clamped" in seen["bates_ncv"]
    assert "conservative_design" in seen["nadeau_bengio"]
    text = report.text(cube, results)
    assert "warning [conservative_design]" in text and "warning [mse_clamped]" in text
    page = write_html(cube, results, tmp_path / "r.html").read_text()
    assert "Warnings: answers that are weak" in page
    for code in ("tiny_test_sets", "few_samples", "few_folds", "mse_clamped",
                 "conservative_design", "variance_imprecise", "variance_not_positive"):
        assert code in page


def test_report_json_from_a_store(tmp_path, write_workflow):
    """End to end: a small study's `cvflow report --json` carries the new estimators and
    their warnings (24 samples in 4 folds: tiny test sets, few samples)."""
    wf = write_workflow("""\
name: tiny
data: {source: synthetic, name: linear, params: {n: 24, p: 3}, seed: 0}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
design: {folds: 4, repeats: 2, seed: 0}
estimators: [{corrected_t: {compare: [0, 1]}}, {wald_cv: {compare: [0, 1]}},
             {bbc_cv: {B: 50}}, {cv_confidence: {B: 50}}]
""")
    store = tmp_path / "t.zarr"
    ran = run_cli("run", wf, "--store", store, "--workers", "1")
    assert ran.returncode == 0, ran.stderr
    res = run_cli("report", store, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {"corrected_t", "wald_cv", "bbc_cv", "cv_confidence"}
    assert "tiny_test_sets" in {w["code"] for w in doc["corrected_t"]["warnings"]}
    assert "few_samples" in {w["code"] for w in doc["bbc_cv"]["warnings"]}
    assert 0 <= doc["corrected_t"]["p_value"] <= 1
    assert len(doc["cv_confidence"]["in_set"]["values"]) == 2


@pytest.mark.parametrize("shift", [0.0, 1.0, 0.1])
@pytest.mark.parametrize("estimator", [corrected_t, wald_cv, paired_5x2cv])
def test_differences_that_do_not_vary(estimator, shift):
    """a predicts y + shift, b predicts y (absolute loss): every difference is shift (0 for
    identical predictions; 0.1 leaves a rounding-level variance ~1e-34, which gave t ~ 1e16,
    p = 0 before). The test is undefined: NaN statistic, p and interval, and the warning."""
    n = 40
    design = simple_design(n, 2, repeats=5, seed=3)
    y = np.linspace(0.0, 1.0, n)
    pred = np.empty((2, design.n_splits, n))
    pred[0], pred[1] = y + shift, y
    out = estimator(cube_from_predictions(pred, y, design, loss="absolute"), compare=[0, 1])
    assert float(out["estimate"]) == pytest.approx(shift, abs=1e-15)
    for name in out.data_vars:
        if name.split("_")[0] in ("t", "z", "f", "p", "se", "lower", "upper"):
            assert np.isnan(float(out[name])), name
    flagged = [w for w in guardrails.read(out) if w["code"] == "variance_not_positive"]
    assert flagged and "0 up to rounding" in flagged[0]["message"]
