"""plan: variance components of the per-sample loss differences against hand values and a
loop-by-loop ANOVA, the sizes against the normal power formula worked by hand, its warnings,
and a seeded simulation with known truth: a study sized by the plan has the stated power."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from cvflow.errors import InputError
from cvflow.estimators import plan
from cvflow.estimators.study_size import describe
from cvflow.report.results import dataset_to_json
from cvflow.testing import cube_from_predictions, simple_design

from nested_cases import random_cube


def codes(result) -> set[str]:
    return {w["code"] for w in json.loads(result.attrs["warnings"])}


def hand_cube(D, fold):
    """Squared loss, y = 0: param a predicts sqrt(D[r, i] + c) on every split of repeat r,
    param b predicts sqrt(c) (c ≥ 0 makes the roots real), so the per-sample difference in
    repeat r is exactly D[r, i] (up to rounding)."""
    D = np.asarray(D, float)
    c = max(0.0, -float(D.min()))
    design = simple_design(D.shape[1], int(np.max(fold)) + 1, repeats=D.shape[0], fold=fold)
    pred = np.full((2, design.n_splits, D.shape[1]), math.sqrt(c))
    for r, splits in enumerate(design.fold_split):
        pred[0, splits] = np.sqrt(D[r] + c)
    return cube_from_predictions(pred, np.zeros(D.shape[1]), design)


# D = sample effect + repeat effect, no interaction: row means 1.5, 2.5, 3.5, 6.5 (grand 3.5),
# repeat means 3 and 4. MS_s = 2·(4 + 1 + 0 + 9)/3 = 28/3, MS_e = 0, MS_ρ = 4·(0.25 + 0.25) = 2:
# σ²_s = 14/3, σ²_w = 0, σ²_ρ = 2/4 = 0.5.
D_HAND = [[1, 2, 3, 6], [2, 3, 4, 7]]
FOLD_HAND = [[0, 0, 1, 1], [0, 1, 0, 1]]


def test_hand_components_and_sizes():
    cube = hand_cube(D_HAND, FOLD_HAND)
    out = plan(cube, compare=[0, 1], delta=4.0, test="z")
    assert float(out["estimate"]) == pytest.approx(3.5)
    assert float(out["var_sample"]) == pytest.approx(14 / 3)
    assert float(out["var_within"]) == pytest.approx(0, abs=1e-12)
    assert float(out["var_repeat"]) == pytest.approx(0.5)
    assert float(out["se"]) == pytest.approx(math.sqrt(14 / 3 / 4 + 0.5 / 2))
    np.testing.assert_allclose(out["difference_repeat"].values, [3, 4])
    # Var(d̄) target = 16 / (1.95996 + 0.84162)² = 2.0385
    target = 16 / (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2
    assert target == pytest.approx(2.0385, abs=1e-4)
    # n = (14/3) / (2.0385 − 0.5/2) = 2.61 -> 3; R = 0.5 / (2.0385 − (14/3)/4) = 0.57 -> 1
    assert float(out["samples_needed"]) == 3
    assert float(out["repeats_needed"]) == 1
    # Δ = 3: target 1.1466 < σ²_s / n = 1.1667, so no number of repeats is enough at n = 4;
    # n = (14/3) / (1.1466 − 0.25) = 5.2 -> 6
    out = plan(cube, compare=[0, 1], delta=3.0, test="z")
    assert float(out["samples_needed"]) == 6
    assert float(out["repeats_needed"]) == math.inf
    assert out.attrs["a"]["index"] == 0 and out.attrs["repeats"] == 2
    assert {"few_samples", "few_repeats", "no_finite_plan"} <= codes(out)
    [w] = [w for w in json.loads(out.attrs["warnings"]) if w["code"] == "no_finite_plan"]
    assert "no number of repeats at n = 4" in w["message"]
    assert json.loads(json.dumps(dataset_to_json(out)))["repeats_needed"] is None  # strict JSON
    lines = describe(out)
    assert "by z: n = 6 samples at R = 2; or no number of repeats at n = 4" in lines[-2]


def ref_components(cube, a, b):
    """Literal loops: d[r][i] from pred, y and the fold table, then the ANOVA mean squares."""
    pred, y, fold, table = (cube[v].values for v in ("pred", "y", "fold", "fold_split"))
    keep = [i for i in range(len(y)) if not cube["is_test"].values[i]]
    d = [[(pred[a, table[r, fold[r, i]], i] - y[i]) ** 2 - (pred[b, table[r, fold[r, i]], i] - y[i]) ** 2
          for i in keep] for r in range(len(table))]
    R, n = len(d), len(keep)
    grand = sum(map(sum, d)) / (R * n)
    row = [sum(d[r][i] for r in range(R)) / R for i in range(n)]
    col = [sum(d[r]) / n for r in range(R)]
    ms_s = R * sum((x - grand) ** 2 for x in row) / (n - 1)
    ms_r = n * sum((x - grand) ** 2 for x in col) / (R - 1)
    ms_e = sum((d[r][i] - row[i] - col[r] + grand) ** 2 for r in range(R) for i in range(n)) \
        / ((n - 1) * (R - 1))
    return {"estimate": grand, "var_within": ms_e, "var_sample": max((ms_s - ms_e) / R, 0),
            "var_repeat": max((ms_r - ms_e) / n, 0)}


@pytest.mark.parametrize("seed,k,repeats", [(0, 4, 3), (3, 5, 2)])
def test_matches_loops(seed, k, repeats):
    cube, _ = random_cube(n=41, k=k, repeats=repeats, n_params=3, seed=seed)
    out = plan(cube, compare=[2, 0])
    for key, value in ref_components(cube, 2, 0).items():
        assert float(out[key]) == pytest.approx(value, rel=1e-10, abs=1e-12), key
    assert out.attrs["samples"] == 39 and out.attrs["folds"] == k


def test_default_pair_is_best_and_runner_up():
    rng = np.random.default_rng(1)
    y = rng.normal(size=40)
    design = simple_design(40, 4, repeats=2, seed=1)
    scale = np.array([2.0, 0.5, 1.0])[:, None, None]          # best 1, runner-up 2
    pred = y + scale * rng.normal(size=(3, design.n_splits, 40))
    out = plan(cube_from_predictions(pred, y, design))
    assert (out.attrs["a"]["index"], out.attrs["b"]["index"]) == (1, 2)
    assert float(out["estimate"]) < 0 and float(out["delta"]) == float(out["estimate"])


def test_one_repeat_plans_samples_only():
    D = [[0.5, 1.0, 2.5, 4.0, 1.5, 0.0]]
    out = plan(hand_cube(D, [[0, 1, 2, 0, 1, 2]]), delta=1.0, test="z")
    v = np.var(D[0], ddof=1)
    assert float(out["var_sample"]) == pytest.approx(v)
    assert math.isnan(float(out["var_repeat"])) and math.isnan(float(out["repeats_needed"]))
    c = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2
    assert float(out["samples_needed"]) == math.ceil(c * v)
    assert "repeat_not_estimable" in codes(out)
    assert "repeats not planned (one repeat)" in describe(out)[-2]


def test_zero_difference_has_no_finite_plan():
    out = plan(hand_cube(D_HAND, FOLD_HAND), delta=0.0)
    assert float(out["samples_needed"]) == math.inf == float(out["repeats_needed"])
    assert "no_finite_plan" in codes(out)


def test_errors():
    cube, _ = random_cube(n=20, k=4, repeats=1, n_params=3)
    with pytest.raises(InputError, match=r"plan.alpha: 1.5"):
        plan(cube, compare=[0, 1], alpha=1.5)
    with pytest.raises(InputError, match=r"plan.compare: name two params"):
        plan(cube, compare=[0])
    with pytest.raises(InputError, match=r"plan.delta: 'x' is not a number"):
        plan(cube, compare=[0, 1], delta="x")


# The simulation: x ~ N(0, 1), y = x + ε, ε ~ N(0, 1); fixed predictors a(x) = x (the Bayes
# rule) and b(x) = 0.8x, squared loss. d = ε² − (0.2x + ε)² = −0.04x² − 0.4xε, so
# E d = −0.04 and Var d = 0.04²·2 + 0.16 = 0.1632: the true plan at alpha 0.05, power 0.8 is
# n* = (1.960 + 0.8416)²·0.1632 / 0.04² = 800.6 -> 801.
TRUE_N = 801


def draw_d(rng, sets: int, n: int) -> np.ndarray:
    x, eps = rng.normal(size=(2, sets, n))
    return eps ** 2 - (eps + 0.2 * x) ** 2


def test_simulation_power_at_planned_n():
    rng = np.random.default_rng(20261128)
    n0 = 10_000
    x = rng.normal(size=n0)
    y = x + rng.normal(size=n0)
    design = simple_design(n0, 5, repeats=2, seed=3)
    pred = np.broadcast_to(np.stack([x, 0.8 * x])[:, None, :], (2, design.n_splits, n0))
    out = plan(cube_from_predictions(pred, y, design), compare=[0, 1], delta=-0.04, test="z")
    assert float(out["var_repeat"]) == pytest.approx(0, abs=1e-12)   # fixed predictors
    n_plan = int(out["samples_needed"])
    assert abs(n_plan - TRUE_N) < 0.05 * TRUE_N      # the pilot's variance within 5% of truth
    sets = 2000
    d = draw_d(rng, sets, n_plan)
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n_plan))
    power = float(np.mean(np.abs(z) > stats.norm.ppf(0.975)))
    expected = stats.norm.cdf(0.04 / math.sqrt(0.1632 / n_plan) - stats.norm.ppf(0.975))
    mc_se = math.sqrt(0.8 * 0.2 / sets)              # 0.0089
    assert abs(power - expected) < 3 * mc_se
    assert abs(power - 0.8) < 3 * mc_se + 0.02       # 0.02: the pilot's n_plan off by ≤ 5%


# Repeats: d_ir = Δ + s_i + ρ_r + ε_ir drawn with known components (normal), written into a
# cube exactly (hand_cube). σ²_s = 1, σ²_w = 0.5, σ²_ρ = 0.02, n = 200, Δ = 0.25: the true plan
# at the pilot's n is R* = (0.5/200 + 0.02) / (0.25²/7.849 − 1/200) = 7.6 -> 8 repeats.
S2, W2, P2, N_REP, DELTA_REP = 1.0, 0.5, 0.02, 200, 0.25


def draw_two_way(rng, sets: int, repeats: int, n: int) -> np.ndarray:
    s = rng.normal(scale=math.sqrt(S2), size=(sets, 1, n))
    rho = rng.normal(scale=math.sqrt(P2), size=(sets, repeats, 1))
    eps = rng.normal(scale=math.sqrt(W2), size=(sets, repeats, n))
    return DELTA_REP + s + rho + eps


def test_components_unbiased_under_known_truth():
    """The ANOVA estimates (before clipping they are unbiased) average to the true components
    over 300 pilots of 200 samples x 5 repeats."""
    from cvflow.estimators.study_size import components
    rng = np.random.default_rng(7)
    est = [components(d) for d in draw_two_way(rng, 300, 5, N_REP)]
    mean = {key: np.mean([e[key] for e in est]) for key in est[0]}
    sd = {key: np.std([e[key] for e in est]) / math.sqrt(len(est)) for key in est[0]}
    assert abs(mean["var_sample"] - S2) < 4 * sd["var_sample"]
    assert abs(mean["var_within"] - W2) < 4 * sd["var_within"]
    # σ²_ρ is clipped at 0 in a share of pilots: biased up, by less than its MC sd here
    assert abs(mean["var_repeat"] - P2) < 4 * sd["var_repeat"] + 0.005


def test_simulation_power_at_planned_repeats():
    """A pilot of 40 repeats plans R; studies of R repeats at the pilot's n, z-tested with their
    true Var(d̄) (the plan's normal model), reject in 0.8 of 2,000 data sets."""
    rng = np.random.default_rng(11)
    pilot = draw_two_way(rng, 1, 40, N_REP)[0]
    fold = np.stack([rng.permutation(N_REP) % 5 for _ in range(40)])
    out = plan(hand_cube(pilot, fold), compare=[0, 1], delta=DELTA_REP, test="z")
    r_plan = int(out["repeats_needed"])
    assert 6 <= r_plan <= 11                           # R* = 8; σ²_ρ from 40 repeats is rough
    sets = 2000
    d = draw_two_way(rng, sets, r_plan, N_REP)
    se = math.sqrt(S2 / N_REP + W2 / (N_REP * r_plan) + P2 / r_plan)
    power = float(np.mean(np.abs(d.mean(axis=(1, 2)) / se) > stats.norm.ppf(0.975)))
    expected = stats.norm.cdf(DELTA_REP / se - stats.norm.ppf(0.975))
    mc_se = math.sqrt(0.8 * 0.2 / sets)
    assert abs(power - expected) < 3 * mc_se
    assert abs(power - 0.8) < 3 * mc_se + 0.06        # R is whole: 8 repeats give 0.82


def test_missing_fit_gives_nan_and_a_warning():
    cube, _ = random_cube(n=30, k=3, repeats=2, n_params=2, seed=4)
    cube["pred"][1, int(cube["fold_split"].values[0, 0])] = np.nan
    out = plan(cube, compare=[0, 1])
    assert math.isnan(float(out["samples_needed"])) and math.isnan(float(out["var_sample"]))
    assert "missing_fits" in codes(out)


def test_report_lists_the_plan():
    from cvflow.report import compute
    from cvflow.report.results import text
    cube = hand_cube(D_HAND, FOLD_HAND)
    report = text(cube, compute(cube, [("plan", {"delta": 4.0, "test": "z"})]))
    assert "plan (K = 2, R = 2, n = 4, loss squared)" in report
    assert "by z: n = 3 samples at R = 2; or R = 1 repeats at n = 4" in report
    assert "warning [few_repeats]" in report


def test_grouped_samples_warn():
    cube = hand_cube(D_HAND, FOLD_HAND)
    cube["groups"] = ("sample",), np.array([0, 0, 1, 1])
    assert "groups_ignored" in codes(plan(cube, delta=4.0))
    assert "groups_ignored" not in codes(plan(hand_cube(D_HAND, FOLD_HAND), delta=4.0))


def test_simulation_power_over_pilots():
    """The whole procedure, pilot noise included: 1,000 pilots of 200 samples (one repeat) each
    plan n against the true Δ = −0.04, and one study of that n per pilot is z-tested: the share
    rejected is 0.8 within Monte Carlo error (the planned n spreads from ~600 to ~1,000)."""
    from cvflow.estimators.study_size import components, sizes
    rng = np.random.default_rng(5)
    planned = [sizes(components(p[None, :]), 200, 1, -0.04, 0.05, 0.8)["samples_needed"]
               for p in draw_d(rng, 1000, 200)]
    rejected = []
    for n in planned:
        d = draw_d(rng, 1, int(n))[0]
        rejected.append(abs(d.mean() / (d.std(ddof=1) / math.sqrt(n))) > stats.norm.ppf(0.975))
    power = float(np.mean(rejected))
    assert abs(power - 0.8) < 3 * math.sqrt(0.8 * 0.2 / len(planned))     # 3 x 0.0126
    assert np.percentile(planned, 10) < 0.85 * TRUE_N < 1.15 * TRUE_N < np.percentile(planned, 90)


def test_plan_names_its_test_and_plans_for_it():
    """The plan is for the test the study runs (default corrected_t, compare_all's) and states
    every test's power at its n; checked by simulation of that test with known truth (fixed
    predictors a(x) = x, b(x) = 0.8x, 5 folds x 2 repeats): at the z plan's n corrected_t has
    power ~0.5 (the plan says so), at corrected_t's own plan 0.8. The corrected repeated
    K-fold t is computed here from its formula (Nadeau & Bengio 2003; Bouckaert & Frank 2004):
    (1/(K·R) + 1/(K − 1))·s² of the K·R fold means, t on K·R − 1 df."""
    rng = np.random.default_rng(43)
    n0, k, r = 10_000, 5, 2
    x = rng.normal(size=n0)
    y = x + rng.normal(size=n0)
    design = simple_design(n0, k, repeats=r, seed=3)
    pred = np.broadcast_to(np.stack([x, 0.8 * x])[:, None, :], (2, design.n_splits, n0))
    cube = cube_from_predictions(pred, y, design)
    by_z = plan(cube, compare=[0, 1], delta=-0.04, test="z")
    by_t = plan(cube, compare=[0, 1], delta=-0.04)
    assert by_t.attrs["test"] == "corrected_t" and by_z.attrs["test"] == "z"
    assert "by corrected_t" in describe(by_t)[-2] and "power at that n by each test" in describe(by_t)[-1]
    n_z, n_t = int(by_z["samples_needed"]), int(by_t["samples_needed"])
    assert float(by_z["power_z"]) == pytest.approx(0.8, abs=0.01)
    assert float(by_t["power_corrected_t"]) == pytest.approx(0.8, abs=0.01)

    def rejected(n, sets=800):
        count = 0
        for _ in range(sets):
            d = draw_d(rng, 1, n)[0]
            means = np.array([d[f == j].mean() for f in (rng.permutation(n) % k for _ in range(r))
                              for j in range(k)])
            se = math.sqrt((1 / (k * r) + 1 / (k - 1)) * means.var(ddof=1))
            count += abs(means.mean() / se) > stats.t.ppf(0.975, k * r - 1)
        return count / sets

    mc_se = math.sqrt(0.25 / 800)
    at_z = rejected(n_z)
    assert abs(at_z - float(by_z["power_corrected_t"])) < 3 * mc_se + 0.03 and at_z < 0.65
    assert abs(rejected(n_t) - 0.8) < 3 * mc_se + 0.03


def test_unstable_learners_are_flagged_stable_ones_are_not():
    """A pilot of two 1-NN regressors (their differences move with the fold: instability share
    ~0.25 in benchmarks/plan_instability.py, true Var(d̄) 1.8x the model's) warns that the power
    is not promised; two ridge regressions (share ~0.01) do not. Fitted with scikit-learn."""
    from cvflow.testing import fit_cube
    from cvflow.workflow.params import Param

    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4))
    y = X[:, 0] + X[:, 1] + rng.normal(size=200)
    design = simple_design(200, 5, repeats=2, seed=0)
    knn = [Param("knn", "sklearn.neighbors.KNeighborsRegressor", hyper={"n_neighbors": 1, "p": p})
           for p in (1, 2)]
    ridge = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 30.0)]
    unstable = plan(fit_cube(X, y, knn, design), compare=[0, 1], delta=0.1)
    stable = plan(fit_cube(X, y, ridge, design), compare=[0, 1], delta=0.1)
    [w] = [w for w in json.loads(unstable.attrs["warnings"]) if w["code"] == "unstable_learners"]
    assert w["instability"] > 0.1 and "the power is not promised" in w["message"]
    assert "unstable_learners" not in codes(stable)
