"""The subset design of the U-statistic estimators (Fuchs et al.; DESIGN.md 6.5)."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from cvflow.workflow.designs import MAX_COMPLETE_SUBSETS, check_subset_size, make_design, subset_splits
from cvflow.errors import InputError


def _design(n, is_test=None, **subset):
    is_test = np.zeros(n, bool) if is_test is None else is_test
    fold = np.zeros((1, n), np.int32)
    return make_design(fold, is_test, full=False, folds=False,
                       subsets=subset_splits(is_test, **subset))


@pytest.mark.parametrize("n,g", [(5, 2), (10, 5), (3, 1), (61, 30)])
def test_n_below_2g_plus_2_is_refused_with_the_condition(n, g):
    with pytest.raises(InputError, match=r"n >= 2g \+ 2 = %d .*n = %d" % (2 * g + 2, n)):
        subset_splits(np.zeros(n, bool), size=g, pairs=3)
    with pytest.raises(InputError, match=r"g = %d needs n >= 2g \+ 2" % g):
        subset_splits(np.zeros(n, bool), size=g, complete=True)


def test_boundary_n_equals_2g_plus_2_is_accepted():
    check_subset_size(62, 30)
    out = subset_splits(np.zeros(62, bool), size=30, pairs=2)
    assert len(out) == 4


def test_size_and_pairs_are_checked():
    with pytest.raises(InputError, match="design.subset.size: 0; the learning-set size g"):
        subset_splits(np.zeros(10, bool), size=0, pairs=2)
    with pytest.raises(InputError, match="design.subset.pairs: 0; use an integer of at least 1"):
        subset_splits(np.zeros(10, bool), size=2, pairs=0)


def test_test_samples_do_not_count_towards_n():
    is_test = np.zeros(12, bool)
    is_test[:5] = True  # 7 analysis samples: g = 3 needs 8
    with pytest.raises(InputError, match="n = 7"):
        subset_splits(is_test, size=3, pairs=2)


def test_incomplete_pairs_are_disjoint_of_size_g_and_never_train_on_test_samples():
    n, g = 20, 4
    is_test = np.zeros(n, bool)
    is_test[[0, 7, 13]] = True
    out = subset_splits(is_test, size=g, pairs=200, seed=3)
    assert len(out) == 400
    by_group = {}
    for mask, group, member in out:
        assert mask.sum() == g
        assert not (mask & is_test).any()
        by_group.setdefault(group, {})[member] = mask
    assert sorted(by_group) == list(range(200))
    for members in by_group.values():
        assert set(members) == {0, 1}
        assert not (members[0] & members[1]).any()


def test_incomplete_draws_are_uniform():
    """Each sample is in a learning set with probability g/n; pairs of samples equally."""
    n, g, pairs = 9, 2, 6000
    out = subset_splits(np.zeros(n, bool), size=g, pairs=pairs, seed=0)
    counts = np.sum([mask for mask, _, member in out if member == 0], axis=0)
    expected = pairs * g / n
    sd = math.sqrt(pairs * g / n * (1 - g / n))
    assert np.all(np.abs(counts - expected) < 4.5 * sd)
    # member 0 and member 1 of the same group: each ordered disjoint pair equally likely
    first = Counter()
    for p in range(0, len(out), 2):
        first[(tuple(np.flatnonzero(out[p][0])), tuple(np.flatnonzero(out[p + 1][0])))] += 1
    n_kinds = math.comb(n, g) * math.comb(n - g, g)
    assert len(first) == n_kinds  # 36 * 21 = 756 kinds, 6000 draws: all seen
    freq = np.array(list(first.values()))
    # chi-square goodness of fit to the uniform distribution
    chi2 = ((freq - pairs / n_kinds) ** 2 / (pairs / n_kinds)).sum()
    assert chi2 < n_kinds + 5 * math.sqrt(2 * n_kinds)


def test_seed_reproduces_and_changes_the_draw():
    a = subset_splits(np.zeros(15, bool), size=3, pairs=5, seed=1)
    b = subset_splits(np.zeros(15, bool), size=3, pairs=5, seed=1)
    c = subset_splits(np.zeros(15, bool), size=3, pairs=5, seed=2)
    assert all((x[0] == y[0]).all() for x, y in zip(a, b))
    assert not all((x[0] == y[0]).all() for x, y in zip(a, c))


def test_complete_design_enumerates_every_learning_set_once():
    n, g = 8, 3
    d = _design(n, size=g, complete=True)
    assert d.subset_split.shape == (math.comb(n, g), 2)
    assert (d.subset_split[:, 1] == -1).all()
    sets = {tuple(np.flatnonzero(d.train[s])) for s in d.subset_split[:, 0]}
    assert len(sets) == math.comb(n, g)
    assert all(len(s) == g for s in sets)


def test_complete_design_skips_test_samples():
    is_test = np.zeros(9, bool)
    is_test[4] = True
    d = _design(9, is_test=is_test, size=2, complete=True)
    assert d.subset_split.shape[0] == math.comb(8, 2)
    assert not d.train[:, 4].any()


def test_complete_design_above_the_limit_is_refused():
    with pytest.raises(InputError, match=r"design.subset.complete: C\(40, 6\) = 3838380 learning "
                       r"sets is more than %d; use complete: false" % MAX_COMPLETE_SUBSETS):
        subset_splits(np.zeros(40, bool), size=6, complete=True)


def test_groups_that_draw_the_same_learning_set_share_one_split():
    n, g = 6, 1  # only 6 learning sets: many repeats among 50 groups
    d = _design(n, size=g, pairs=50, seed=0)
    assert d.n_splits == 6
    assert d.subset_split.shape == (50, 2)
    for p in range(50):
        s0, s1 = d.subset_split[p]
        assert s0 != s1
        assert d.train[s0].sum() == 1 and not (d.train[s0] & d.train[s1]).any()


def test_hundred_thousand_groups_build():
    """Linear in the groups (the per-test timeout catches a quadratic build, no clock here)."""
    d = _design(62, size=26, pairs=100_000, seed=0)
    assert d.subset_split.shape == (100_000, 2)
    assert d.n_splits == len(np.unique(np.packbits(d.train, axis=1), axis=0))
