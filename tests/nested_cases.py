"""Tiny hand-made cubes and loop-by-loop reference implementations for the nested family.

The references transcribe DESIGN.md 6.3/6.4/6.6 and the papers' formulas with plain Python
loops over samples and folds; they share no code with ``cvflow.estimators``.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from cvflow.testing import cube_from_predictions, simple_design


def constant_cube(fold, full, folds, pairs, *, test_full=None):
    """A regression cube (y = 0, absolute loss) whose every fit predicts one constant.

    ``fold`` (n,) fold labels of one repeat; ``full[h]``, ``folds[h][t]``, ``pairs[h][(t, l)]``
    the constant of each param's full, fold-t and pair fits; ``test_full[h]`` adds one
    held-out test sample predicted by the full fit. The loss of a fit on any sample is then
    its constant, which makes every quantity computable by hand.
    """
    fold = np.asarray(fold)
    n = fold.size + (test_full is not None)
    labels = np.append(fold, -1) if test_full is not None else fold
    is_test = labels < 0
    design = simple_design(n, int(fold.max()) + 1, pairs=True, fold=labels[None, :], is_test=is_test)
    n_params = len(full)
    pred = np.full((n_params, design.n_splits, n), np.nan)
    for h in range(n_params):
        pred[h, design.full_split] = full[h]
        if test_full is not None:
            pred[h, design.full_split, -1] = test_full[h]
        for t, s in enumerate(design.fold_split[0]):
            pred[h, s] = folds[h][t]
        for (t, l), v in pairs[h].items():
            pred[h, design.pair_split[0, t, l]] = v
    return cube_from_predictions(pred, np.zeros(n), design, loss="absolute")


def random_cube(n=13, k=4, repeats=2, n_params=3, seed=0, test=2, classification=False,
                classes=0):
    """Random predictions on a design with unequal folds (n not divisible by k) and repeats.

    ``classes`` > 2: a multiclass cube of random per-class probabilities (Dirichlet).
    """
    rng = np.random.default_rng(seed)
    is_test = np.zeros(n, bool)
    is_test[n - test:] = True
    design = simple_design(n, k, repeats=repeats, pairs=True, is_test=is_test, seed=seed)
    if classes > 2:
        y = np.arange(n) % classes
        pred = rng.dirichlet(np.ones(classes), size=(n_params, design.n_splits, n))
        return cube_from_predictions(pred, y, design, task="classification",
                                     output="predict_proba"), design
    if classification:
        y = rng.integers(0, 2, n)
        pred = rng.normal(size=(n_params, design.n_splits, n))
        return cube_from_predictions(pred, y, design, task="classification"), design
    y = rng.normal(size=n)
    pred = y + rng.normal(scale=rng.uniform(0.5, 2, size=(n_params, 1, 1)),
                          size=(n_params, design.n_splits, n))
    return cube_from_predictions(pred, y, design), design


def losses(cube, loss="squared"):
    """Per-(param, split, sample) losses as a plain array (reference side); multiclass
    probabilities sample by sample through scikit-learn's metrics."""
    pred = cube["pred"].values
    y = cube["y"].values
    if pred.ndim == 4:
        from sklearn.metrics import brier_score_loss, log_loss, zero_one_loss

        labels = cube["class"].values.tolist()
        metric = {"log_loss": lambda t, p: log_loss(t, p, labels=labels),
                  "brier": lambda t, p: brier_score_loss(t, p, labels=labels),
                  "zero_one": lambda t, p: zero_one_loss(t, np.asarray(labels)[p.argmax(1)])}[loss]
        out = np.empty(pred.shape[:3])
        for index in np.ndindex(*out.shape):
            i = index[2]
            out[index] = metric(y[i:i + 1], pred[index][None])
        return out
    if loss == "squared":
        return (pred - y) ** 2
    if loss == "absolute":
        return np.abs(pred - y)
    if loss == "zero_one":
        return ((pred > 0) != (y == 1)).astype(float)
    raise ValueError(loss)


def argmin_first(values):
    best, arg = math.inf, -1
    for i, v in enumerate(values):
        if not math.isnan(v) and v < best:
            best, arg = v, i
    return arg


def ref_all(cube, lambdas, loss="squared"):
    """Reference for stability, stability_nested, nested_cv (per DESIGN.md 6.3 / eq. 8)."""
    L = losses(cube, loss)
    fold = cube["fold"].values
    fs = cube["fold_split"].values
    ps = cube["pair_split"].values
    full = int(cube.attrs["full_split"])
    n_params = L.shape[0]
    R, K = fs.shape
    D = [i for i in range(fold.shape[1]) if fold[0, i] >= 0]
    n = len(D)
    kfold = np.zeros(n_params)
    mu = np.zeros(n_params)
    m = np.zeros((R, len(lambdas)))
    chosen = np.zeros((R, K, len(lambdas)), int)
    s_t = np.zeros((n_params, R, K))
    mu_t = np.zeros((n_params, R, K))
    for r in range(R):
        N = [[i for i in D if fold[r, i] == j] for j in range(K)]
        for h in range(n_params):
            kfold[h] += sum(L[h, fs[r, j], i] for j in range(K) for i in N[j]) / n / R
            mu[h] += max(sum(abs(L[h, fs[r, j], i] - L[h, full, i]) for i in D) / n
                         for j in range(K)) / R
            for t in range(K):
                rest = [i for i in D if fold[r, i] != t]
                s_t[h, r, t] = sum(L[h, ps[r, t, l], i] for l in range(K) if l != t
                                   for i in N[l]) / len(rest)
                mu_t[h, r, t] = max(sum(abs(L[h, ps[r, t, l], i] - L[h, fs[r, t], i])
                                        for i in rest) / len(rest) for l in range(K) if l != t)
        for a, lam in enumerate(lambdas):
            total = 0.0
            for t in range(K):
                h = argmin_first([s_t[g, r, t] + lam * mu_t[g, r, t] for g in range(n_params)])
                chosen[r, t, a] = h
                total += sum(L[h, fs[r, t], i] for i in N[t])
            m[r, a] = total / n
    m_mean = m.mean(axis=0)
    star = argmin_first(m_mean)
    h_star = argmin_first([kfold[h] + lambdas[star] * mu[h] for h in range(n_params)])
    return dict(kfold=kfold, mu=mu, m=m_mean, m_repeat=m, chosen=chosen, s_t=s_t, mu_t=mu_t,
                lambda_star=lambdas[star], h_star=h_star)


def ref_bates(cube, h, alpha=0.1, loss="squared"):
    """Reference for bates_ncv and wald_cv of param h (DESIGN.md 6.6 / 6.7)."""
    from statistics import NormalDist

    L = losses(cube, loss)[h]
    fold = cube["fold"].values
    fs = cube["fold_split"].values
    ps = cube["pair_split"].values
    R, K = fs.shape
    D = [i for i in range(fold.shape[1]) if fold[0, i] >= 0]
    n = len(D)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    A, B, E_in, cv, sd, within, allv = [], [], [], [], [], [], []
    for r in range(R):
        N = [[i for i in D if fold[r, i] == j] for j in range(K)]
        e = {i: L[fs[r, fold[r, i]], i] for i in D}
        cv_r = sum(e.values()) / n
        cv.append(cv_r)
        sd.append(math.sqrt(sum((v - cv_r) ** 2 for v in e.values()) / (n - 1)))
        allv.append(sum((v - cv_r) ** 2 for v in e.values()) / n)
        ss = 0.0
        for j in range(K):
            rest = [i for i in D if fold[r, i] != j]
            e_in = sum(L[ps[r, j, fold[r, i]], i] for i in rest) / len(rest)
            out = [e[i] for i in N[j]]
            mean_out = sum(out) / len(out)
            var_out = sum((v - mean_out) ** 2 for v in out) / (len(out) - 1)
            ss += sum((v - mean_out) ** 2 for v in out)
            A.append((e_in - mean_out) ** 2)
            B.append(var_out / len(out))
            E_in.append(e_in)
        within.append(ss / (n - K))
    mse = np.mean(A) - np.mean(B)
    err_ncv = np.mean(E_in)
    err_cv = np.mean(cv)
    se_naive = np.mean(sd) / math.sqrt(n)
    bias = (1 + (K - 2) / K) * (err_ncv - err_cv)
    se_raw = math.sqrt((K - 1) / K * mse) if mse >= 0 else float("nan")
    se = se_naive if mse < 0 else min(max(se_raw, se_naive), math.sqrt(K) * se_naive)
    est = err_ncv - bias
    return dict(mse=mse, err_ncv=err_ncv, err_cv=err_cv, bias=bias, se_raw=se_raw, se=se,
                estimate=est, lower=est - z * se, upper=est + z * se, se_naive=se_naive,
                naive_lower=err_cv - z * se_naive, naive_upper=err_cv + z * se_naive,
                var_within=np.mean(within), var_all=np.mean(allv))


def count_pairs(design):
    """Distinct training sets a design holds (brute force over the train matrix)."""
    return len({row.tobytes() for row in np.packbits(design.train, axis=1)})


__all__ = ["constant_cube", "random_cube", "ref_all", "ref_bates", "count_pairs", "itertools"]
