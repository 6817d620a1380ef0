"""Splitters and designs: reusable checkers, deduplication by training set, input errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cvflow.workflow.designs import fold_labels, make_design
from cvflow.errors import InputError


def check_folds(fold: np.ndarray, is_test: np.ndarray, k: int) -> None:
    """Every analysis sample tested exactly once per repeat; test samples never in a fold."""
    assert (fold[:, is_test] == -1).all()
    for r in range(fold.shape[0]):
        labels = fold[r, ~is_test]
        assert set(labels.tolist()) == set(range(k))
        assert labels.min() >= 0


def check_design(design, is_test) -> None:
    """Train and test sets disjoint and covering; test samples never trained; no duplicates."""
    assert not design.train[:, is_test].any()
    keys = {row.tobytes() for row in design.train}
    assert len(keys) == design.n_splits
    for r, j in np.ndindex(design.fold_split.shape):
        s = design.fold_split[r, j]
        held = design.fold[r] == j
        assert not (design.train[s] & held).any()                 # disjoint
        assert ((design.train[s] | held) == ~is_test).all()        # covering D
    k = design.fold_split.shape[1]
    for r in range(design.fold.shape[0]):
        for j, l in itertools.permutations(range(k), 2):
            s = design.pair_split[r, j, l]
            if s < 0:
                continue
            out = np.isin(design.fold[r], [j, l])
            assert ((design.train[s] | out) == ~is_test).all() and not (design.train[s] & out).any()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(6, 60), k=st.integers(3, 6), repeats=st.integers(1, 3),
       n_test=st.integers(0, 5), seed=st.integers(0, 1000))
def test_kfold_design_properties(n, k, repeats, n_test, seed):
    is_test = np.zeros(n, bool)
    is_test[:n_test] = True
    if n - n_test < k:
        with pytest.raises(InputError, match="folds but only"):
            fold_labels(np.zeros(n), is_test, folds=k, repeats=repeats, seed=seed)
        return
    fold = fold_labels(np.zeros(n), is_test, folds=k, repeats=repeats, seed=seed)
    check_folds(fold, is_test, k)
    design = make_design(fold, is_test, pairs=True)
    check_design(design, is_test)
    # counted splits: the distinct training sets among 1 full + K folds + K(K-1)/2 pairs per
    # repeat, enumerated independently as frozensets of sample indices
    analysis = frozenset(np.flatnonzero(~is_test))
    wanted = {analysis}
    for r in range(repeats):
        folds = [frozenset(np.flatnonzero(fold[r] == j)) for j in range(k)]
        wanted |= {analysis - f for f in folds}
        wanted |= {analysis - a - b for a, b in itertools.combinations(folds, 2)}
    assert design.n_splits == len(wanted)
    assert {frozenset(np.flatnonzero(t)) for t in design.train} == wanted
    assert design.roles_requested == 1 + repeats * (k + k * (k - 1) // 2)


def test_identical_repeats_are_fitted_once():
    """Unshuffled repeats give the same folds: every training set appears once."""
    y = np.arange(20.0)
    is_test = np.zeros(20, bool)
    fold = fold_labels(y, is_test, folds=4, repeats=3, shuffle=False)
    design = make_design(fold, is_test, pairs=True)
    assert design.n_splits == 1 + 4 + 6
    assert (design.fold_split[0] == design.fold_split[2]).all()
    assert (design.pair_split[1] == design.pair_split[2]).all()


def test_stratified_and_group_splitters():
    y = np.array([0] * 12 + [1] * 6)
    is_test = np.zeros(18, bool)
    fold = fold_labels(y, is_test, folds=3, splitter="stratified", seed=1)
    for j in range(3):
        assert (y[fold[0] == j] == 1).sum() == 2
    groups = np.repeat(np.arange(6), 3)
    fold = fold_labels(y, is_test, folds=3, splitter="group", groups=groups)
    for g in range(6):
        assert len(set(fold[0, groups == g])) == 1   # a group never straddles folds
    with pytest.raises(InputError, match="folds but only 6 groups"):
        fold_labels(y, is_test, folds=7, splitter="group", groups=groups)


def test_fold_count_errors():
    y = np.zeros(10)
    with pytest.raises(InputError, match=r"design.folds: 1 folds; use at least 2"):
        fold_labels(y, np.zeros(10, bool), folds=1)
    with pytest.raises(InputError, match=r"design.folds: 12 folds but only 10 samples; use at most 10"):
        fold_labels(y, np.zeros(10, bool), folds=12)
    with pytest.raises(InputError, match="nested estimators need at least 3 folds"):
        make_design(fold_labels(y, np.zeros(10, bool), folds=2), np.zeros(10, bool), pairs=True)


def test_sklearn_kfold_is_reused():
    """Fold labels equal scikit-learn's KFold test sets for the same seed."""
    from sklearn.model_selection import KFold

    n = 23
    fold = fold_labels(np.zeros(n), np.zeros(n, bool), folds=4, seed=7)
    for j, (_, test) in enumerate(KFold(4, shuffle=True, random_state=7).split(np.zeros(n))):
        assert set(np.flatnonzero(fold[0] == j)) == set(test)
