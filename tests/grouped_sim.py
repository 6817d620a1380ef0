"""A grouped-data simulation with a known target, for the coverage tests of cluster-robust
inference (tests/test_grouped_coverage.py) and the numbers in docs/guide/grouped.md.

Model: G groups of m samples; x_ig = w_g + v_ig (p features), y_ig = x_ig·β + u_g + ε_ig with
w_g ~ N(0, s_w² I), v ~ N(0, s_v² I), u_g ~ N(0, τ²), ε ~ N(0, σ²). Learners fitted here in
numpy: ``ols`` (least squares with intercept) and ``mean`` (the training mean). A fit
f(x) = b0 + x·b on a new group's sample has the conditional squared-loss error

    Err(f) = (β − b)ᵀ Σx (β − b) + b0² + τ² + σ²,   Σx = (s_w² + s_v²) I,

so the target of the Wald CV interval (Bayle et al.: Σ_j p_j Err(f_j), the K-fold fits'
average error) is known exactly in every simulated data set.

Run as a script for the coverage table: ``python tests/grouped_sim.py``.
"""
from __future__ import annotations

import numpy as np

from cvflow.testing import cube_from_predictions, simple_design

BETA = np.array([1.0, -0.5])
S_W, S_V, TAU, SIGMA = 1.0, 1.0, 1.5, 1.0


_CUBES: dict = {}


def _cube(pred, y, design):
    """cube_from_predictions, reusing a cube of the same shape (its design variables and
    predictions overwritten): building one costs more than the reduction."""
    key = pred.shape
    if key not in _CUBES:
        _CUBES[key] = cube_from_predictions(pred, y, design)
        return _CUBES[key].copy(deep=True)
    cube = _CUBES[key].copy(deep=True)
    assert list(design.kind) == list(cube["split_kind"].values)
    cube["pred"].values[:] = pred
    cube["y"].values[:] = y
    cube["train"].values[:] = design.train
    cube["fold"].values[:] = design.fold
    cube["fold_split"].values[:] = design.fold_split
    return cube


def group_folds(codes: np.ndarray, k: int, rng, *, by_group: bool = True) -> np.ndarray:
    """(1, n) fold labels: whole groups dealt to k folds at random (``by_group``), or samples
    dealt at random ignoring the groups (plain K-fold on grouped data)."""
    if by_group:
        order = rng.permutation(codes.max() + 1)
        return (np.argsort(order)[codes] % k)[None, :]
    return (rng.permutation(codes.size) % k)[None, :]


def simulate(seed: int, groups: int = 40, size: int = 8, k: int = 5, *, by_group: bool = True,
             unequal: bool = False):
    """(cube, target) for one data set: the cube holds ols and mean fits on its fold design
    (groups stored), target maps ``ols``, ``mean``, ``difference`` to Σ_j p_j Err(f_j)."""
    rng = np.random.default_rng(seed)
    sizes = (rng.integers(2, 2 * size - 1, groups) if unequal
             else np.full(groups, size))
    codes = np.repeat(np.arange(groups), sizes)
    n = codes.size
    w = rng.normal(scale=S_W, size=(groups, BETA.size))[codes]
    x = w + rng.normal(scale=S_V, size=(n, BETA.size))
    y = x @ BETA + rng.normal(scale=TAU, size=groups)[codes] + rng.normal(scale=SIGMA, size=n)
    fold = group_folds(codes, k, rng, by_group=by_group)
    design = simple_design(n, k, fold=fold)
    design1 = np.column_stack([np.ones(n), x])
    pred = np.empty((2, design.n_splits, n))
    var_x = S_W ** 2 + S_V ** 2
    err = np.zeros((2, design.n_splits))
    for s in range(design.n_splits):
        tr = design.train[s]
        coef, *_ = np.linalg.lstsq(design1[tr], y[tr], rcond=None)
        pred[0, s] = design1 @ coef
        mu = y[tr].mean()
        pred[1, s] = mu
        err[0, s] = var_x * np.sum((BETA - coef[1:]) ** 2) + coef[0] ** 2 + TAU ** 2 + SIGMA ** 2
        err[1, s] = var_x * np.sum(BETA ** 2) + mu ** 2 + TAU ** 2 + SIGMA ** 2
    cube = _cube(pred, y, design)
    cube["groups"] = ("sample",), codes
    table = cube["fold_split"].values[0]
    p = np.bincount(fold[0], minlength=k) / n
    target = {"ols": float(p @ err[0, table]), "mean": float(p @ err[1, table])}
    target["difference"] = target["ols"] - target["mean"]
    return cube, target


def wald_coverage(seeds, alpha: float = 0.1, **kw) -> dict[str, float]:
    """Share of seeds whose Wald interval (``within``, ``all``, ``cluster``; and ``normal``:
    the CR1 se with the normal quantile) covers the target, for ols's error and the paired
    difference ols − mean."""
    from statistics import NormalDist

    from cvflow.estimators import wald_cv

    z = NormalDist().inv_cdf(1 - alpha / 2)
    hits: dict[str, int] = {}
    for seed in seeds:
        cube, target = simulate(seed, **kw)
        for what, compare in (("ols", [0]), ("difference", [0, 1])):
            out = wald_cv(cube, compare=compare, alpha=alpha)
            t = target[what]
            est = float(out["estimate"])
            se_c = float(out["se_cluster"])
            for kind in ("within", "all", "cluster"):
                key = f"{what}/{kind}"
                hits[key] = hits.get(key, 0) + (float(out[f"lower_{kind}"]) <= t
                                                <= float(out[f"upper_{kind}"]))
            key = f"{what}/normal"
            hits[key] = hits.get(key, 0) + (abs(est - t) <= z * se_c)
    count = len(list(seeds))
    return {key: v / count for key, v in hits.items()}


CONFIGS = {"G100": {"groups": 100, "size": 4}, "G40": {"groups": 40},
           "G40-unequal": {"groups": 40, "unequal": True}, "G20": {"groups": 20},
           "G10": {"groups": 10}, "G40-plain-kfold": {"groups": 40, "by_group": False}}

if __name__ == "__main__":
    import sys
    import time

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for name in sys.argv[2:] or CONFIGS:
        t0 = time.perf_counter()
        cov = wald_coverage(range(1000, 1000 + runs), **CONFIGS[name])
        print(name, runs, {k: round(v, 3) for k, v in cov.items()},
              f"({time.perf_counter() - t0:.0f}s)", flush=True)
