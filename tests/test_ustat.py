"""U-statistic variance, two-learner test and Nadeau-Bengio test (cvflow.estimators.ustat).

References are independent of the reducer: the paper's κ_c / Θ² U-statistics enumerated
literally (symmetrised kernels over all permutations), explicit loops over groups and test
pairs, scipy's t distribution, and simulations with a known truth.
"""
from __future__ import annotations

import itertools
import json
import math

import dask.array as da
import numpy as np
import pytest
from scipy import stats

from cvflow.workflow.designs import make_design, subset_splits
from cvflow.errors import InputError
from cvflow.estimators import REGISTRY, guardrails
from cvflow.estimators.labels import resolve_param
from cvflow.estimators.ustat import describe, nadeau_bengio, ustat
from cvflow.workflow.params import Param
from cvflow.testing import cube_from_predictions, fit_cube, simple_design


# ---------------------------------------------------------------------------------------
# independent reference: the paper's formulas, enumerated literally
# ---------------------------------------------------------------------------------------

def paper_reference(pred, y, train, g, one_learner=False):
    """Δ̂ and v̂ = Σ_{c=1}^m α_c κ̂_c - (1 - α_0) Θ̂² by direct enumeration (Fuchs et al. 3.5-3.7).

    Φ(L; t) = (y_t - pred_a[L, t])² - (y_t - pred_b[L, t])² (squared loss);
    Φ_0(S) = mean over t in S of Φ(S \\ {t}; t)  (eq. 5);
    κ̂_c = U-statistic of degree 2m - c whose kernel is the symmetrisation (average over all
    orderings of the 2m - c arguments) of Φ_0(z_1..z_m) Φ_0(z_{m-c+1}..z_{2m-c})  (eq. 13);
    α_c = hypergeometric H(n, m, m) mass at c.
    """
    n = len(y)
    m = g + 1
    lookup = {frozenset(np.flatnonzero(train[s]).tolist()): s for s in range(train.shape[0])}

    def phi(learn, t):
        s = lookup[frozenset(learn)]
        la = (y[t] - pred[0, s, t]) ** 2
        return la if one_learner else la - (y[t] - pred[1, s, t]) ** 2

    phi0_cache = {}

    def phi0(S):
        key = frozenset(S)
        if key not in phi0_cache:
            phi0_cache[key] = np.mean([phi([u for u in S if u != t], t) for t in S])
        return phi0_cache[key]

    delta = np.mean([phi0(S) for S in itertools.combinations(range(n), m)])
    kappa = {}
    for c in range(0, m + 1):
        deg = 2 * m - c
        if deg > n:
            kappa[c] = np.nan
            continue
        vals = []
        for U in itertools.combinations(range(n), deg):
            tot = 0.0
            count = 0
            for perm in itertools.permutations(U):
                tot += phi0(perm[:m]) * phi0(perm[m - c:deg])
                count += 1
            vals.append(tot / count)
        kappa[c] = np.mean(vals)
    alpha = {c: stats.hypergeom(n, m, m).pmf(c) for c in range(m + 1)}
    v = sum(alpha[c] * kappa[c] for c in range(1, m + 1)) - (1 - alpha[0]) * kappa[0]
    return delta, v, kappa, alpha


def _hand_cube(n, g, seed=0, params=2, **subset):
    design = simple_design(n, 2, subset={"size": g, **subset})
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n)
    pred = rng.standard_normal((params, design.n_splits, n)) * 0.7 + 0.3
    return cube_from_predictions(pred, y, design), pred, y, design


@pytest.mark.parametrize("n,g", [(6, 2), (7, 2), (8, 3)])
def test_complete_design_equals_the_papers_kappa_formulas(n, g):
    cube, pred, y, design = _hand_cube(n, g, seed=n, complete=True)
    delta, v, kappa, alpha = paper_reference(pred, y, design.train, g)
    res = ustat(cube, compare=[0, 1])
    assert res.attrs["design"] == "complete"
    assert float(res["estimate"]) == pytest.approx(delta, rel=1e-12, abs=1e-12)
    assert float(res["variance"]) == pytest.approx(v, rel=1e-9, abs=1e-12)
    # the identity v̂ = Δ̂² - Θ̂²: Θ̂² is κ̂_0 and Δ̂² = Σ α_c κ̂_c
    assert float(res["theta_sq"]) == pytest.approx(kappa[0], rel=1e-9, abs=1e-12)
    assert sum(alpha[c] * kappa[c] for c in alpha) == pytest.approx(delta ** 2, rel=1e-9)
    assert float(res["design_variance"]) == 0.0


def test_complete_one_learner_mode_equals_the_paper():
    n, g = 7, 2
    cube, pred, y, design = _hand_cube(n, g, seed=3, params=1, complete=True)
    delta, v, _, _ = paper_reference(pred, y, design.train, g, one_learner=True)
    res = ustat(cube)
    assert res.attrs["mode"] == "error"
    assert float(res["estimate"]) == pytest.approx(delta, rel=1e-12)
    assert float(res["variance"]) == pytest.approx(v, rel=1e-9)
    assert np.isnan(float(res["z"])) and np.isnan(float(res["p_value"]))
    if v > 0:
        q = stats.norm.ppf(0.975)
        assert float(res["lower"]) == pytest.approx(delta - q * math.sqrt(v))
        assert float(res["upper"]) == pytest.approx(delta + q * math.sqrt(v))


def test_complete_design_with_real_learners_and_zero_one_loss():
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=8, n_features=3, n_informative=2, n_redundant=0,
                               random_state=1)
    design = simple_design(8, 2, subset={"size": 3, "complete": True})
    params = [Param("knn", "sklearn.neighbors.KNeighborsClassifier", hyper={"n_neighbors": 1},
                    output="predict"),
              Param("stump", "sklearn.tree.DecisionTreeClassifier", hyper={"max_depth": 1},
                    output="predict")]
    cube = fit_cube(X, y, params, design, task="classification")
    pred = cube["pred"].values
    # zero-one loss as a "squared" loss of 0/1 labels: (y - label)² is 1 exactly when wrong
    assert not np.isnan(pred).any()
    delta, v, _, _ = paper_reference(pred, y.astype(float), design.train, 3)
    res = ustat(cube, compare=["knn", "stump"], loss="zero_one")
    assert float(res["estimate"]) == pytest.approx(delta, abs=1e-12)
    assert float(res["variance"]) == pytest.approx(v, abs=1e-12)


# ---------------------------------------------------------------------------------------
# incomplete design: hand computation with explicit loops
# ---------------------------------------------------------------------------------------

def loop_reference(pred, y, design, analysis):
    """Δ̃, Q, T, design variance and NB by plain loops over fits, pairs and test samples."""
    table = design.subset_split
    P = table.shape[0]
    phi = (y - pred[0]) ** 2 - (y - pred[1]) ** 2  # (split, sample)
    fits = [(p, m, table[p, m]) for p in range(P) for m in (0, 1)]
    bar = {}
    for p, m, s in fits:
        test = [t for t in range(len(y)) if analysis[t] and not design.train[s, t]]
        bar[p, m] = np.mean([phi[s, t] for t in test])
    est = np.mean(list(bar.values()))
    q_terms = [bar[f1[:2]] * bar[f2[:2]] for f1 in fits for f2 in fits if f1[0] != f2[0]]
    t_terms = []
    for p in range(P):
        s0, s1 = table[p]
        rest = [t for t in range(len(y)) if analysis[t] and not design.train[s0, t]
                and not design.train[s1, t]]
        t_terms.append(np.mean([phi[s0, t1] * phi[s1, t2] for t1 in rest for t2 in rest
                                if t1 != t2]))
    means = [(bar[p, 0] + bar[p, 1]) / 2 for p in range(P)]
    return {"estimate": est, "Q": np.mean(q_terms), "T": np.mean(t_terms),
            "design_variance": np.var(means, ddof=1) / P, "d": np.array(list(bar.values()))}


def test_incomplete_design_matches_loops():
    n, g = 11, 3
    is_test = np.zeros(n, bool)
    is_test[[2, 9]] = True  # held-out samples never enter the estimate
    design = make_design(np.zeros((1, n), np.int32), is_test, full=False, folds=False,
                         subsets=subset_splits(is_test, size=g, pairs=7, seed=5))
    rng = np.random.default_rng(1)
    y = rng.standard_normal(n)
    pred = rng.standard_normal((2, design.n_splits, n))
    pred[:, :, is_test] = np.nan  # predictions on test samples must not matter
    cube = cube_from_predictions(np.nan_to_num(pred, nan=50.0), y, design)
    cube["is_test"][:] = is_test
    ref = loop_reference(np.nan_to_num(pred, nan=50.0), y, design, ~is_test)
    res = ustat(cube, compare=[0, 1])
    assert res.attrs["design"] == "subset"
    assert float(res["estimate"]) == pytest.approx(ref["estimate"], rel=1e-12)
    assert float(res["delta_sq"]) == pytest.approx(ref["Q"], rel=1e-10)
    assert float(res["theta_sq"]) == pytest.approx(ref["T"], rel=1e-10)
    assert float(res["variance"]) == pytest.approx(ref["Q"] - ref["T"], rel=1e-10, abs=1e-14)
    assert float(res["design_variance"]) == pytest.approx(ref["design_variance"], rel=1e-10)
    total = ref["Q"] - ref["T"] + ref["design_variance"]
    assert float(res["total_variance"]) == pytest.approx(total, rel=1e-10)
    assert int(res["n"]) == 9 and int(res["size"]) == g and int(res["fits"]) == 14
    if total > 0:
        z = ref["estimate"] / math.sqrt(total)
        assert float(res["z"]) == pytest.approx(z)
        assert float(res["p_value"]) == pytest.approx(2 * stats.norm.sf(abs(z)))
    # Nadeau-Bengio from the same fits
    nb = nadeau_bengio(cube, compare=[0, 1], alpha=0.1)
    d = ref["d"]
    var = (1 / d.size + (9 - g) / g) * d.var(ddof=1)
    tt = d.mean() / math.sqrt(var)
    assert float(nb["estimate"]) == pytest.approx(d.mean())
    assert float(nb["variance"]) == pytest.approx(var)
    assert float(nb["t"]) == pytest.approx(tt)
    assert int(nb["df"]) == d.size - 1
    assert float(nb["p_value"]) == pytest.approx(2 * stats.t.sf(abs(tt), d.size - 1))
    half = stats.t.ppf(0.95, d.size - 1) * math.sqrt(var)
    assert float(nb["upper"]) == pytest.approx(d.mean() + half)


def test_chunked_reading_gives_the_same_answer():
    cube, *_ = _hand_cube(14, 3, seed=2, pairs=57)
    whole = ustat(cube, compare=[0, 1])
    for chunk in (1, 5, 56):
        part = ustat(cube, compare=[0, 1], chunk=chunk)
        for key in ("estimate", "variance", "design_variance", "theta_sq", "delta_sq"):
            assert float(part[key]) == pytest.approx(float(whole[key]), rel=1e-12)


# ---------------------------------------------------------------------------------------
# incomplete -> complete as P grows
# ---------------------------------------------------------------------------------------

def _learner_cube(n, g, subset, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = X @ np.array([1.0, -0.5]) + 0.5 * rng.standard_normal(n)
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": 0.1}),
              Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": 10.0})]
    subset = dict(subset)
    design = simple_design(n, 2, seed=subset.pop("seed", 0), subset={"size": g, **subset})
    return fit_cube(X, y, params, design)


def test_incomplete_converges_to_complete_as_pairs_grow():
    n, g = 10, 3  # 120 learning sets: the dedup keeps every incomplete cube small
    exact = ustat(_learner_cube(n, g, {"complete": True}), compare=[0, 1])
    errors = {}
    for pairs in (30, 300, 3000, 30000):
        res = [ustat(_learner_cube(n, g, {"pairs": pairs, "seed": s}), compare=[0, 1])
               for s in range(3)]
        err_d = [abs(float(r["estimate"]) - float(exact["estimate"])) for r in res]
        err_v = [abs(float(r["variance"]) - float(exact["variance"])) for r in res]
        errors[pairs] = (np.mean(err_d), np.mean(err_v))
        for r in res:  # Δ̃ within 4.5 design standard errors of Δ̂
            assert abs(float(r["estimate"]) - float(exact["estimate"])) <= \
                4.5 * math.sqrt(float(r["design_variance"]))
    assert errors[30000][0] < errors[30][0] / 5
    assert errors[30000][1] < errors[30][1] / 5
    assert errors[30000][0] < 0.02 * abs(float(exact["estimate"])) + 1e-3
    assert errors[30000][1] < 0.05 * abs(float(exact["variance"]))


# ---------------------------------------------------------------------------------------
# edge cases and messages
# ---------------------------------------------------------------------------------------

def test_non_positive_variance_is_reported_not_raised():
    n, g = 8, 3
    design = simple_design(n, 2, subset={"size": g, "pairs": 6})
    y = np.zeros(n)
    pred = np.ones((2, design.n_splits, n))
    pred[1] = 0.0  # Φ ≡ 1 everywhere: Q = T = 1, v̂ = 0, design variance 0
    cube = cube_from_predictions(pred, y, design)
    res = ustat(cube, compare=[0, 1])
    assert float(res["estimate"]) == pytest.approx(1.0)
    assert float(res["variance"]) == pytest.approx(0.0, abs=1e-12)
    for key in ("z", "p_value", "lower", "upper", "se"):
        assert np.isnan(float(res[key]))
    # said once: one variance_not_positive warning, not also a note
    (warned,) = [w for w in guardrails.read(res) if w["code"] == "variance_not_positive"]
    assert warned["code"] == "variance_not_positive" and "not positive (0)" in warned["message"]
    assert res.attrs["message"] == "" and not any("note" in line for line in describe(res))


def test_failed_fits_give_nan_and_a_message():
    cube, pred, y, design = _hand_cube(10, 3, pairs=5)
    cube["pred"][1, int(design.subset_split[2, 1]), :] = np.nan
    res = ustat(cube, compare=[0, 1])
    assert np.isnan(float(res["estimate"])) and np.isnan(float(res["variance"]))
    assert [w for w in guardrails.read(res) if w["code"] == "missing_fits"]
    assert res.attrs["message"] == ""
    # the other learner alone is fine
    alone = ustat(cube, compare=[0])
    assert np.isfinite(float(alone["estimate"])) and alone.attrs["message"] == ""
    assert not [w for w in guardrails.read(alone) if w["code"] == "missing_fits"]


def test_one_group_is_reported():
    cube, *_ = _hand_cube(10, 3, pairs=1)
    res = ustat(cube, compare=[0, 1])
    assert np.isnan(float(res["variance"]))
    assert "one group" in res.attrs["message"]


def test_missing_subset_design_is_an_input_error():
    design = simple_design(10, 5)
    cube = cube_from_predictions(np.zeros((2, design.n_splits, 10)), np.zeros(10), design)
    with pytest.raises(InputError, match="ustat needs the subset splits"):
        ustat(cube, compare=[0, 1])
    with pytest.raises(InputError, match="nadeau_bengio needs the subset splits"):
        nadeau_bengio(cube, compare=[0, 1])


def test_incomplete_complete_table_is_refused():
    cube, *_ = _hand_cube(8, 3, complete=True)
    table = cube["subset_split"].values[:-1]
    broken = cube.drop_vars("subset_split").assign(subset_split=(("group", "member"), table))
    with pytest.raises(InputError, match=r"needs all C\(8, 3\) = 56 learning sets of D, found 55"):
        ustat(broken, compare=[0, 1])


def test_compare_options_are_checked():
    cube, *_ = _hand_cube(8, 3, pairs=4, params=3)
    with pytest.raises(InputError, match="ustat.compare: the cube has 3 params; name the two"):
        ustat(cube)
    with pytest.raises(InputError, match="same param"):
        ustat(cube, compare=[1, 1])
    with pytest.raises(InputError, match=r"give \[a, b\]"):
        ustat(cube, compare=[0, 1, 2])
    with pytest.raises(InputError, match="either compare or a/b"):
        ustat(cube, compare=[0, 1], a=0)
    with pytest.raises(InputError, match="ustat.alpha"):
        ustat(cube, compare=[0, 1], alpha=1.5)
    same = ustat(cube, a=2, b=0)
    other = ustat(cube, compare=["hand(h=2)", {"learner": "hand", "h": 0}])
    assert float(same["estimate"]) == float(other["estimate"])
    assert same.attrs["a"]["params"]["h"] == 2


def test_registered_and_json_friendly():
    assert REGISTRY["ustat"].func is ustat and REGISTRY["nadeau_bengio"].func is nadeau_bengio
    cube, *_ = _hand_cube(10, 3, pairs=20)
    res = ustat(cube, compare=[0, 1])
    for name, var in res.data_vars.items():
        assert var.dtype.kind in "fiu", name
    json.dumps(res.attrs)                   # plain data: settings are dicts, not JSON strings
    assert res.attrs["a"]["index"] == 0 and res.attrs["b"]["index"] == 1


# ---------------------------------------------------------------------------------------
# resolve_param (shared helper in _cube.py)
# ---------------------------------------------------------------------------------------

def _named_cube():
    design = simple_design(8, 2, subset={"size": 2, "pairs": 2})
    params = [Param("lasso", "sklearn.linear_model.Lasso", hyper={"alpha": 0.08}),
              Param("lasso", "sklearn.linear_model.Lasso", hyper={"alpha": 0.5}),
              Param("ols", "sklearn.linear_model.LinearRegression"),
              Param("svm", "sklearn.svm.SVR", hyper={"C": 1.0, "kernel": "rbf"}),
              Param("svm", "sklearn.svm.SVR", hyper={"C": 1.0, "kernel": "linear"})]
    return cube_from_predictions(np.zeros((5, design.n_splits, 8)), np.zeros(8), design,
                                 params=params)


def test_resolve_param_forms():
    cube = _named_cube()
    assert resolve_param(cube, 3) == 3
    assert resolve_param(cube, -1) == 4
    assert resolve_param(cube, "2") == 2
    assert resolve_param(cube, "ols") == 2
    assert resolve_param(cube, "lasso(alpha=0.5)") == 1
    assert resolve_param(cube, "lasso(alpha=0.08000000000001)") == 0
    assert resolve_param(cube, {"learner": "lasso", "alpha": 0.08}) == 0
    assert resolve_param(cube, "svm(kernel=linear)") == 4
    assert resolve_param(cube, "svm(C=1, kernel=rbf)") == 3


def test_resolve_param_errors():
    cube = _named_cube()
    with pytest.raises(InputError, match=r"param index 5 is out of range; the cube has 5 params"):
        resolve_param(cube, 5)
    with pytest.raises(InputError, match="no learner named 'ridge'; learners are lasso, ols, svm"):
        resolve_param(cube, "ridge")
    with pytest.raises(InputError, match=r"'lasso' matches 2 params of 'lasso'; name one .*"
                       r"0: lasso\(alpha=0.08\); 1: lasso\(alpha=0.5\)"):
        resolve_param(cube, "lasso")
    with pytest.raises(InputError, match=r"no param of 'lasso' matches 'lasso\(alpha=0.3\)'"):
        resolve_param(cube, "lasso(alpha=0.3)")
    with pytest.raises(InputError, match="has no 'learner' key"):
        resolve_param(cube, {"alpha": 0.5})
    with pytest.raises(InputError, match="is not key=value"):
        resolve_param(cube, "lasso(0.5)")
    with pytest.raises(InputError, match="is not a param"):
        resolve_param(cube, 0.5)


# ---------------------------------------------------------------------------------------
# laziness and scale
# ---------------------------------------------------------------------------------------

def _lazy_cube(n, g, pairs, chunk_splits, seed=0):
    design = make_design(np.zeros((1, n), np.int32), np.zeros(n, bool), full=False, folds=False,
                         subsets=subset_splits(np.zeros(n, bool), size=g, pairs=pairs, seed=seed))
    y = np.random.default_rng(seed).standard_normal(n)
    shape = (2, design.n_splits, n)
    cube = cube_from_predictions(np.zeros((2, 1, n)), y, make_design(
        np.zeros((1, n), np.int32), np.zeros(n, bool), full=False, folds=False,
        subsets=subset_splits(np.zeros(n, bool), size=g, pairs=1, seed=seed)))
    pred = da.random.RandomState(seed).standard_normal(shape, chunks=(2, chunk_splits, n))
    base = cube.drop_dims(["split", "group"]).drop_vars(["pred", "done", "failed", "error",
                                                          "fit_seconds"], errors="ignore")
    lazy = base.assign(
        pred=(("param", "split", "sample"), pred),
        train=(("split", "sample"), design.train),
        subset_split=(("group", "member"), design.subset_split),
    )
    return lazy, design


def test_reducer_streams_over_chunks_of_a_lazy_cube():
    import dask

    lazy, design = _lazy_cube(30, 6, 4000, 500)
    biggest = []

    def scheduler(dsk, keys, **kw):
        out = dask.get(dsk, keys, **kw)
        biggest.append(max((np.asarray(x).nbytes for x in _flatten(out)), default=0))
        return out

    with dask.config.set(scheduler=scheduler):
        res = ustat(lazy, compare=[0, 1], chunk=500)
    assert len(biggest) >= 8  # one compute per chunk of 500 groups
    assert max(biggest) <= 2 * 2 * 1000 * 30 * 8  # never more than a chunk of losses
    eager = ustat(lazy.compute(), compare=[0, 1])
    assert float(res["variance"]) == pytest.approx(float(eager["variance"]), rel=1e-10)


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _flatten(item)
    else:
        yield x


@pytest.mark.slow
def test_hundred_thousand_fits_in_bounded_memory():
    """10^5 subset fits (50 000 groups x 2 params) with n = 62: peak memory stays small."""
    import tracemalloc

    lazy, design = _lazy_cube(62, 26, 50_000, 5_000)
    tracemalloc.start()
    res = ustat(lazy, compare=[0, 1])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert int(res["fits"]) == 100_000
    full_pred = 2 * design.n_splits * 62 * 8
    assert peak < 0.6 * full_pred
    assert np.isfinite(float(res["variance"]))


# ---------------------------------------------------------------------------------------
# Monte Carlo (slow): unbiasedness of v̂ and coverage, with known truth
# ---------------------------------------------------------------------------------------

def _simulate(rng, n, beta=1.0, sigma=1.0):
    x = rng.standard_normal(n)
    return x, beta * x + sigma * rng.standard_normal(n)


def _predict(x, y, train, lam=1.0):
    """Two deterministic symmetric learners, vectorised over learning sets (rows of train).

    a: the mean of y_L; b: ridge slope through the origin, Σxy / (Σx² + lam).
    """
    t = train.astype(float)
    g = t.sum(1, keepdims=True)
    mean = (t @ y)[:, None] / g
    slope = (t @ (x * y)) / (t @ (x * x) + lam)
    return np.stack([np.broadcast_to(mean, train.shape), slope[:, None] * x[None, :]])


@pytest.mark.slow
def test_monte_carlo_variance_is_unbiased_complete_and_incomplete():
    n, g, reps, pairs = 10, 3, 1500, 8
    design = simple_design(n, 2, subset={"size": g, "complete": True})
    index = {np.packbits(design.train[s]).tobytes(): s for s in range(design.n_splits)}
    rng = np.random.default_rng(2024)
    cube = cube_from_predictions(np.zeros((2, design.n_splits, n)), np.zeros(n), design)
    out = {"d": [], "v": [], "dt": [], "vt": [], "v_inc": []}
    for _ in range(reps):
        x, y = _simulate(rng, n)
        cube["pred"].values[:] = _predict(x, y, design.train)
        cube["y"].values[:] = y
        res = ustat(cube, compare=[0, 1])
        out["d"].append(float(res["estimate"]))
        out["v"].append(float(res["variance"]))
        # a fresh random incomplete design on the same fits
        draws = subset_splits(np.zeros(n, bool), size=g, pairs=pairs,
                              seed=int(rng.integers(2**31)))
        table = np.array([index[np.packbits(m).tobytes()] for m, _, _ in draws]).reshape(-1, 2)
        inc = ustat(cube.drop_vars("subset_split").assign(
            subset_split=(("group", "member"), table)), compare=[0, 1])
        out["dt"].append(float(inc["estimate"]))
        out["vt"].append(float(inc["total_variance"]))
        out["v_inc"].append(float(inc["variance"]))
    d, v, dt, vt, vi = (np.array(out[k]) for k in ("d", "v", "dt", "vt", "v_inc"))

    def check(estimates, variance_estimates):
        emp = estimates.var(ddof=1)
        c = estimates - estimates.mean()
        se_emp = math.sqrt(max(np.mean(c ** 4) - emp ** 2, 0) / reps)
        se_mean = variance_estimates.std(ddof=1) / math.sqrt(reps)
        zscore = (variance_estimates.mean() - emp) / math.hypot(se_emp, se_mean)
        assert abs(zscore) < 3.5, (variance_estimates.mean(), emp, zscore)
        return emp, variance_estimates.mean()

    check(d, v)               # complete: E v̂ = Var Δ̂
    check(dt, vt)             # incomplete: E (v̂ + design variance) = Var Δ̃
    check(d, vi)              # incomplete v̂ alone is unbiased for Var Δ̂ too


def _centroid_labels(x, y, train):
    """1-D nearest-centroid classifier per learning set (rows of train): the label of each
    sample by the midpoint of the two class means; one class in L predicts that class."""
    t = train.astype(float)
    pos = (y == 1).astype(float)
    n1 = t @ pos
    n0 = t.sum(1) - n1
    m1 = (t @ (x * pos)) / np.maximum(n1, 1)
    m0 = (t @ (x * (1 - pos))) / np.maximum(n0, 1)
    lab = (x[None, :] > ((m1 + m0) / 2)[:, None]).astype(float)
    lab = np.where((n1 == 0)[:, None], 0.0, lab)
    return np.where((n0 == 0)[:, None], 1.0, lab)


@pytest.mark.slow
def test_monte_carlo_one_learner_interval_covers_the_true_error():
    """Zero-one loss of a nearest-centroid rule, x | y ~ N(±0.6, 1): the one-learner interval
    covers e(g), taken from a large independent simulation, at close to 95%."""
    n, g, pairs, reps, mu = 60, 4, 1500, 400, 0.6
    rng = np.random.default_rng(11)
    big = 400_000  # truth: fresh learning sets of size g and a fresh test point each
    xs = rng.standard_normal((big, g + 1))
    ys = rng.integers(0, 2, (big, g + 1))
    xs += mu * (2 * ys - 1)
    pos = ys[:, :g] == 1
    n1 = pos.sum(1)
    m1 = (xs[:, :g] * pos).sum(1) / np.maximum(n1, 1)
    m0 = (xs[:, :g] * ~pos).sum(1) / np.maximum(g - n1, 1)
    lab = (xs[:, g] > (m1 + m0) / 2).astype(int)
    lab = np.where(n1 == 0, 0, np.where(n1 == g, 1, lab))
    truth = float(np.mean(lab != ys[:, g]))
    covered = negative = 0
    for rep in range(reps):
        y = rng.integers(0, 2, n)
        x = rng.standard_normal(n) + mu * (2 * y - 1)
        design = make_design(np.zeros((1, n), np.int32), np.zeros(n, bool), full=False,
                             folds=False, subsets=subset_splits(np.zeros(n, bool), size=g,
                                                                pairs=pairs, seed=rep))
        cube = cube_from_predictions(_centroid_labels(x, y, design.train)[None], y, design,
                                     task="classification", output="predict")
        res = ustat(cube, compare=[0], loss="zero_one")
        if not np.isfinite(float(res["lower"])):
            negative += 1
            continue
        covered += float(res["lower"]) <= truth <= float(res["upper"])
    rate = covered / reps
    assert negative <= 0.02 * reps
    assert 0.91 <= rate <= 0.985, rate


def test_variance_se_matches_the_spread_of_v_over_designs():
    """On fixed data, the reported design standard error of v̂ matches its spread over
    independent random designs (the fits of all 120 learning sets are reused)."""
    n, g, pairs = 10, 3, 60
    cube = _learner_cube(n, g, {"complete": True})
    train = cube["train"].values
    index = {np.packbits(train[s]).tobytes(): s for s in range(train.shape[0])}
    values, ses = [], []
    for seed in range(150):
        draws = subset_splits(np.zeros(n, bool), size=g, pairs=pairs, seed=seed)
        table = np.array([index[np.packbits(m).tobytes()] for m, _, _ in draws]).reshape(-1, 2)
        res = ustat(cube.drop_vars("subset_split").assign(
            subset_split=(("group", "member"), table)), compare=[0, 1])
        values.append(float(res["variance"]))
        ses.append(float(res["variance_se"]))
    spread = np.std(values, ddof=1)
    assert np.mean(ses) == pytest.approx(spread, rel=0.25)


# ---------------------------------------------------------------------------------------
# through the engine: workflow keys, the store, report --json
# ---------------------------------------------------------------------------------------

def test_small_workflow_runs_and_reports_the_exact_ustat(tmp_path, client):
    from pathlib import Path

    import cvflow
    from cvflow import report
    from cvflow.execution.run import run

    path = Path(__file__).resolve().parents[1] / "workflows" / "fuchs_small.yaml"
    result = run(path, store=tmp_path / "small.zarr", client=client)
    cube = cvflow.open(result.store)
    out = report.to_json(report.compute(cube))
    assert set(out) == {"ustat", "nadeau_bengio"}
    assert out["ustat"]["design"] == "complete" and out["ustat"]["fits"] == math.comb(12, 4)
    # Δ̂ = mean of Φ over all (L, t); Θ̂² = mean of Φ_L1(t1) Φ_L2(t2) over all disjoint
    # (L1 + t1, L2 + t2), by a loop over ordered pairs of disjoint learning sets
    sub = cube["subset_split"].values[:, 0]
    train = cube["train"].values[sub]
    wrong = (cube["pred"].values[:, sub] != cube["y"].values[None, None, :]).astype(float)
    phi = np.where(train, np.nan, wrong[0] - wrong[1])
    delta = np.nanmean(phi)
    total, count = 0.0, 0
    filled = np.nan_to_num(phi)
    for i in range(len(sub)):
        js = np.flatnonzero(~(train & train[i]).any(1))  # learning sets disjoint from L_i
        rest = (~train[i] & ~train[js]).astype(float)    # (J, n): R_ij
        a, b = rest * filled[i], rest * filled[js]
        total += float((a.sum(1) * b.sum(1) - (a * b).sum(1)).sum())
        count += int((rest.sum(1) * (rest.sum(1) - 1)).sum())
    assert out["ustat"]["estimate"] == pytest.approx(delta, abs=1e-12)
    assert out["ustat"]["variance"] == pytest.approx(delta ** 2 - total / count, abs=1e-12)
    assert json.loads(json.dumps(out))  # JSON-clean


SMALL_SUBSETS = """
name: fuchs_pairs
data: {source: synthetic, name: logistic, params: {n: 12, p: 3, signal: 1.5}, seed: 0}
task: classification
loss: zero_one
learners:
  - {name: knn, class: sklearn.neighbors.KNeighborsClassifier, params: {n_neighbors: 1}, output: predict}
  - {name: stump, class: sklearn.tree.DecisionTreeClassifier, params: {max_depth: 1, random_state: 0}, output: predict}
design: {seed: 0, subset: {size: 4, pairs: PAIRS}}
estimators: [{ustat: {compare: [knn, stump]}}]
execution: {cluster: threads}
"""


def _v_hat(store) -> float:
    """v̂ = Q − T of DESIGN.md 6.5 by explicit loops over the groups (zero_one loss)."""
    import cvflow

    cube = cvflow.open(store)
    table, y = cube["subset_split"].values, cube["y"].values
    wrong = (cube["pred"].values != y[None, None, :]).astype(float)
    phi = wrong[0] - wrong[1]                                  # (split, sample)
    train = cube["train"].values
    phibar = {(p, m): phi[table[p, m]][~train[table[p, m]]].mean()
              for p in range(table.shape[0]) for m in (0, 1)}
    q = [phibar[f1] * phibar[f2] for f1 in phibar for f2 in phibar if f1[0] != f2[0]]
    ts = []
    for p in range(table.shape[0]):
        rest = ~train[table[p, 0]] & ~train[table[p, 1]]
        a, b = phi[table[p, 0]][rest], phi[table[p, 1]][rest]
        ts.append((a.sum() * b.sum() - (a * b).sum()) / (rest.sum() * (rest.sum() - 1)))
    return float(np.mean(q) - np.mean(ts))


def test_each_ustat_warning_is_printed_once(tmp_path):
    # two groups of this design give v̂ < 0 and v̂ + design variance = 0; one group gives the
    # one-group note. Each is said once by `cvflow run` and once by `cvflow report` (it was said
    # as a WARNING log on stderr, a note and two variance_not_positive warnings)
    from cvtest import run_cli

    for pairs, fact in ((2, "negative"), (1, "one group")):
        wf = tmp_path / f"p{pairs}.yaml"
        wf.write_text(SMALL_SUBSETS.replace("PAIRS", str(pairs)))
        store = tmp_path / f"p{pairs}.zarr"
        outs = [run_cli("run", wf, "--store", store), run_cli("report", store)]
        if pairs == 2:
            assert _v_hat(store) < 0
        for out in outs:
            assert out.returncode == 0, out.stderr
            said = [line for line in (out.stdout + out.stderr).splitlines() if fact in line]
            assert len(said) == 1, out.stdout + out.stderr
            assert "WARNING" not in out.stderr, out.stderr
            if pairs == 2:
                assert said[0].lstrip().startswith("warning [variance_not_positive]: ")
                assert (out.stdout + out.stderr).count("variance_not_positive") == 1


def test_workflow_with_n_below_2g_plus_2_is_refused_before_any_fit(tmp_path, write_workflow):
    from cvflow.execution.run import run

    wf = write_workflow("""
        name: too_big_g
        data: {source: synthetic, name: logistic, params: {n: 12, p: 3}}
        task: classification
        learners:
          - {name: knn, class: sklearn.neighbors.KNeighborsClassifier, output: predict}
        design: {subset: {size: 6, pairs: 10}}
        estimators: [ustat]
        """)
    with pytest.raises(InputError, match=r"g = 6 needs n >= 2g \+ 2 = 14 .*n = 12"):
        run(wf, store=tmp_path / "never.zarr", cluster="tcp://127.0.0.1:1")
    assert not (tmp_path / "never.zarr").exists()
