"""The reducers' numpy kernels against literal loops over samples (and their NaN rules)."""
from __future__ import annotations

import numpy as np
import pytest

from cvflow.estimators import np_roles


def random_case(seed, n=11, k=3, repeats=2, n_params=3, test=2):
    rng = np.random.default_rng(seed)
    fold = np.stack([rng.permutation(np.arange(n - test) % k) for _ in range(repeats)])
    fold = np.concatenate([fold, np.full((repeats, test), -1)], axis=1)
    analysis = fold[0] >= 0
    n_splits = 1 + repeats * k + repeats * k * k
    losses = rng.exponential(size=(n_params, n_splits, n))
    fold_at = 1 + np.arange(repeats * k).reshape(repeats, k)
    pair_at = 1 + repeats * k + np.arange(repeats * k * k).reshape(repeats, k, k)
    return losses, fold, analysis, fold_at, pair_at, k


def reference(losses, fold, analysis, fold_at, pair_at, k):
    """Every term by loops over params, repeats, folds and samples (DESIGN.md 6.1-6.3)."""
    n_params, _, n = losses.shape
    repeats = fold.shape[0]
    d = [i for i in range(n) if analysis[i]]
    out = {key: np.zeros((n_params, repeats, k)) for key in ("fold_sum", "fold_risk", "fold_change")}
    out["inner_sum"] = np.zeros((n_params, repeats, k, k))
    out["inner_change"] = np.zeros((n_params, repeats, k, k))
    for h in range(n_params):
        for r in range(repeats):
            for j in range(k):
                f = losses[h, fold_at[r, j]]
                out["fold_sum"][h, r, j] = sum(f[i] for i in range(n) if fold[r, i] == j)
                out["fold_risk"][h, r, j] = sum(f[i] for i in d) / len(d)
                out["fold_change"][h, r, j] = sum(abs(f[i] - losses[h, 0, i]) for i in d) / len(d)
                rest = [i for i in d if fold[r, i] != j]
                for m in range(k):
                    if m == j:
                        continue
                    p = losses[h, pair_at[r, j, m]]
                    out["inner_sum"][h, r, j, m] = sum(p[i] for i in range(n) if fold[r, i] == m)
                    out["inner_change"][h, r, j, m] = sum(abs(p[i] - f[i]) for i in rest) / len(rest)
    return out


def kernels(losses, fold, analysis, fold_at, pair_at, k):
    member = np_roles.fold_members(fold, k)
    out = np_roles.fold_terms(losses[:, fold_at], member, analysis, losses[:, 0])
    out.update(np_roles.pair_terms(losses, pair_at, fold_at, member, analysis))
    out.update(np_roles.full_terms(losses[:, 0], analysis))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_terms_equal_sample_loops(seed):
    case = random_case(seed)
    got, want = kernels(*case), reference(*case)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-12, err_msg=key)
    losses, fold, analysis = case[:3]
    np.testing.assert_allclose(got["full_risk"], losses[:, 0, analysis].mean(-1))
    np.testing.assert_allclose(got["test_risk"], losses[:, 0, ~analysis].mean(-1))


def test_nan_counts_only_where_a_term_reads_it():
    losses, fold, analysis, fold_at, pair_at, k = random_case(5)
    # NaN on a held-out test sample of every fit: no D term may see it
    losses[:, :, -1] = np.nan
    # NaN of pair (0, 1) of repeat 0, on a sample of fold 0 (outside D \ N_0 and N_1)
    i0 = int(np.flatnonzero(fold[0] == 0)[0])
    losses[:, pair_at[0, 0, 1], i0] = np.nan
    got = kernels(losses, fold, analysis, fold_at, pair_at, k)
    for key in ("fold_sum", "fold_risk", "fold_change", "inner_sum", "inner_change", "full_risk"):
        assert np.isfinite(got[key]).all(), key
    assert np.isnan(got["test_risk"]).all()
    # NaN on a sample of fold 1 in pair (0, 1): inner sum and change of (0, 1) only
    i1 = int(np.flatnonzero(fold[0] == 1)[0])
    losses[:, pair_at[0, 0, 1], i1] = np.nan
    got = kernels(losses, fold, analysis, fold_at, pair_at, k)
    nan = np.isnan(got["inner_sum"]) | np.isnan(got["inner_change"])
    assert nan[:, 0, 0, 1].all() and nan.sum() == losses.shape[0]


def test_nested_choice_skips_failed_outer_fits_and_picks_first_tie():
    criterion = np.array([[[1.0, 2.0]], [[1.0, 0.5]], [[np.nan, 0.5]]])      # (P=3, R=1, K=2)
    outer = np.array([[[4.0, np.nan]], [[6.0, 2.0]], [[1.0, 3.0]]])
    picks = np_roles.nested_choice(criterion, outer, np.array([[2, 2]]))
    # t=0: tie 1.0 between params 0 and 1 -> 0; t=1: param 0's fold fit failed, tie 0.5 -> 1
    assert picks["chosen"].tolist() == [[0, 1]]
    np.testing.assert_allclose(picks["outer_sum"], [[4.0, 2.0]])
    np.testing.assert_allclose(picks["estimate_repeat"], [6.0 / 4])
    assert np_roles.argmin_first(np.array([np.nan, np.nan])) == -1
