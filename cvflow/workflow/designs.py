"""Splits: the training sets a workflow fits, deduplicated by training set.

A design is the list of distinct training sets (``train``: splits x samples, boolean) plus
index tables that say which split plays which role:

- ``full_split``: the split trained on all of D (shared by all repeats);
- ``fold_split[r, j]``: trained on D minus fold j of repeat r;
- ``pair_split[r, j, l]``: trained on D minus folds j and l (symmetric; -1 on the diagonal);
- ``subset_split[p, m]``: learning set m (0 or 1) of subset group p. Two groups that happen
  to draw the same learning set share one split, so read roles from the tables, not from the
  split coordinates (which name only the first role of a split).

Held-out test samples (``is_test``) are never in a training set and have fold label -1.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
import inspect

import numpy as np

from ..errors import InputError

# DESIGN CHOICE: refuse complete subset enumerations above this many learning sets; the
# cube would hold (params x count x n) predictions and one task per block of them.
MAX_COMPLETE_SUBSETS = 20_000


# DESIGN CHOICE: cvflow's internal records (this one, the run's plan, blocks, task contexts,
# routes, fitted prefixes, scores) are `@dataclass(repr=False, eq=False)`: nothing prints,
# compares or hashes them (most hold arrays or dicts, which their generated methods could not
# compare or hash), and Python 3.11 compiles each generated method at import, ~0.13 ms each:
# 24 dataclasses were 12 of the ~30 ms `import cvflow; cvflow.SearchCV` took (issue 41);
# 100 generated methods -> 50, the import 152 -> 127 M instructions (valgrind).
# Frozen (two methods more) only where threads or a cache share the record (TaskContext, Route,
# prefix.Key). What users see or code compares keeps its methods: RunResult, Workflow, a
# declaration's repr (Estimator, Option), Param and Loss (compared; Loss keys caches).
@dataclass(repr=False, eq=False)
class Design:
    """Distinct training sets and the roles they play. Shapes in the attribute comments."""

    train: np.ndarray            # (split, sample) bool
    kind: np.ndarray             # (split,) str: full | fold | pair | subset
    repeat: np.ndarray           # (split,) int: repeat of the first role, -1 if none
    outer: np.ndarray            # (split,) int: fold j / subset member, -1 if none
    inner: np.ndarray            # (split,) int: fold l of a pair, -1 if none
    group: np.ndarray            # (split,) int: subset group, -1 if none
    fold: np.ndarray             # (repeat, sample) int32: fold label, -1 for test samples
    fold_split: np.ndarray       # (repeat, outer) int32 split index, -1 if not in design
    pair_split: np.ndarray       # (repeat, outer, inner) int32 split index, -1 if not in design
    full_split: int              # index of the full split, -1 if not in design
    subset_split: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int32))
    # (group, member) int32 split index of subset learning sets, -1 if absent
    roles_requested: int = 0     # splits the estimators asked for before deduplication

    @property
    def n_splits(self) -> int:
        return int(self.train.shape[0])


@dataclass(repr=False, eq=False)
class _Builder:
    n: int
    masks: list = field(default_factory=list)
    roles: list = field(default_factory=list)   # (kind, repeat, outer, inner, group)
    index: dict = field(default_factory=dict)
    requested: int = 0

    def add(self, mask: np.ndarray, kind: str, repeat=-1, outer=-1, inner=-1, group=-1) -> int:
        """Index of the split training on ``mask``; a new split only for a new training set."""
        self.requested += 1
        key = np.packbits(mask).tobytes()
        if key not in self.index:
            self.index[key] = len(self.masks)
            self.masks.append(mask.copy())
            self.roles.append((kind, repeat, outer, inner, group))
        return self.index[key]


def fold_labels(
    y: np.ndarray,
    is_test: np.ndarray,
    *,
    folds: int,
    repeats: int = 1,
    splitter: str = "kfold",
    seed: int | None = 0,
    groups: np.ndarray | None = None,
    shuffle: bool = True,
) -> np.ndarray:
    """Fold label of every sample in every repeat, shape (repeats, n); -1 for test samples.

    Reuses scikit-learn's splitters (``KFold``, ``StratifiedKFold``, ``GroupKFold``); repeat r
    uses seed ``seed + r`` when shuffling.
    """
    analysis = np.flatnonzero(~is_test)
    n_analysis = analysis.size
    if folds < 2:
        raise InputError(f"design.folds: {folds} folds; use at least 2")
    if folds > n_analysis:
        raise InputError(
            f"design.folds: {folds} folds but only {n_analysis} samples; use at most {n_analysis}"
        )
    # imported here: scikit-learn's model_selection (with scipy.stats) takes ~1 s to import,
    # which every CLI command would otherwise pay
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

    labels = np.full((repeats, y.shape[0]), -1, dtype=np.int32)
    for r in range(repeats):
        rs = None if seed is None else seed + r
        if splitter == "kfold":
            cv = KFold(folds, shuffle=shuffle, random_state=rs if shuffle else None)
            it = cv.split(analysis)
        elif splitter == "stratified":
            cv = StratifiedKFold(folds, shuffle=shuffle, random_state=rs if shuffle else None)
            it = cv.split(analysis, y[analysis])
        elif splitter == "group":
            if groups is None:
                raise InputError("design.splitter: 'group' needs data.groups (a column of group labels)")
            n_groups = np.unique(groups[analysis]).size
            if folds > n_groups:
                raise InputError(
                    f"design.folds: {folds} folds but only {n_groups} groups; use at most {n_groups}"
                )
            kw = {"shuffle": True, "random_state": rs} if shuffle and _group_kfold_shuffles() else {}
            it = GroupKFold(folds, **kw).split(analysis, groups=groups[analysis])
        else:
            raise InputError(
                f"design.splitter: unknown splitter {splitter!r}; use kfold, stratified or group"
            )
        for j, (_, test) in enumerate(it):
            labels[r, analysis[test]] = j
    return labels


def splitter_folds(cv) -> tuple[int | None, int]:
    """(folds per repeat, repeats) a scikit-learn splitter declares (folds None if the data
    decide, as for LeaveOneOut)."""
    cvargs = getattr(cv, "cvargs", None) or {}
    folds = getattr(cv, "n_splits", None) or cvargs.get("n_splits")
    return folds, int(getattr(cv, "n_repeats", 1) or 1)


def splitter_fold_labels(cv, y: np.ndarray, is_test: np.ndarray, *,
                         groups: np.ndarray | None = None, name: str = "design.splitter"
                         ) -> np.ndarray:
    """Fold labels (repeats, n) from the splits of a scikit-learn splitter object, as given.

    The splitter sees the analysis samples in their order (``cv.split(X, y, groups)``); its
    test sets must partition them once per repeat (KFold, StratifiedKFold, GroupKFold,
    StratifiedGroupKFold, their Repeated forms, LeaveOneOut...), since every estimator of
    cvflow is defined on folds. Anything else is refused, and so is a splitter that raises
    on the data (a stratified splitter on a continuous target).
    """
    labels, per_split = splitter_splits(cv, y, is_test, groups=groups, name=name)
    if per_split is not None:
        raise InputError(not_a_partition(cv, labels, per_split, name))
    return labels


def splitter_splits(cv, y: np.ndarray, is_test: np.ndarray, *, groups: np.ndarray | None = None,
                    name: str = "design.splitter") -> tuple[np.ndarray, np.ndarray | None]:
    """(fold labels, None) of a splitter whose test sets partition the samples once per repeat
    (see :func:`splitter_fold_labels`); else its splits one by one: (labels (S, n), training
    masks (S, 1, n)), split k as repeat k of one fold, its test samples labelled 0, the others
    -1 (LeavePGroupsOut, ShuffleSplit, GroupShuffleSplit, StratifiedShuffleSplit: a sample
    may be tested several times or never, and a training set is not the rest of the data).

    Only estimators that score each fold fit on its own test fold read such folds (``kfold``:
    GridSearchCV's mean of the split scores); the workflow checks that (``Workflow.build``).
    """
    analysis = np.flatnonzero(~is_test)
    kind = type(cv).__name__
    g = None if groups is None else np.asarray(groups)[analysis]
    try:
        splits = [(np.asarray(train), np.asarray(test))
                  for train, test in cv.split(np.zeros((analysis.size, 1)), y[analysis], g)]
    except ValueError as exc:
        raise InputError(f"{name}: {kind} cannot split these data: "
                         f"{str(exc).splitlines()[0]}") from None
    if not splits:
        raise InputError(f"{name}: {kind} gave no splits")
    tests = [test for _, test in splits]
    folds, repeats = splitter_folds(cv)
    per = folds or (len(tests) // repeats if repeats else 0)
    labels = np.full((repeats, y.shape[0]), -1, dtype=np.int32)
    partition = bool(per) and len(tests) == per * repeats
    for r in range(repeats if partition else 0):
        count = np.zeros(analysis.size, dtype=np.int64)
        for j, (train, test) in enumerate(splits[r * per:(r + 1) * per]):
            count[test] += 1
            labels[r, analysis[test]] = j
            rest = np.setdiff1d(np.arange(analysis.size), test)
            partition = partition and np.array_equal(np.sort(train), rest)
        partition = partition and bool((count == 1).all())
    if partition:
        return labels, None
    labels = np.full((len(splits), y.shape[0]), -1, dtype=np.int32)
    train_masks = np.zeros((len(splits), 1, y.shape[0]), dtype=bool)
    for k, (train, test) in enumerate(splits):
        labels[k, analysis[test]] = 0
        train_masks[k, 0, analysis[train]] = True
    return labels, train_masks


def not_a_partition(cv, labels: np.ndarray, train: np.ndarray,
                    name: str = "design.splitter") -> str:
    """The one line refusing a splitter that does not partition the samples."""
    tested = (labels >= 0).sum(axis=0)
    how = ("some are tested several times" if (tested > 1).any() else
           "some are never tested" if (tested == 0).any() else
           "its training sets are not the rest of the samples")
    return (f"{name}: {type(cv).__name__} does not partition the samples ({how}); "
            "the estimators need every sample in exactly one test fold per repeat: use KFold, "
            "StratifiedKFold, GroupKFold, StratifiedGroupKFold or their Repeated forms (only "
            "kfold, GridSearchCV's mean of the split scores, reads other splitters)")


def timeseries_folds(is_test: np.ndarray, *, folds: int, gap: int = 0,
                     max_train_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Time-ordered folds: scikit-learn's ``TimeSeriesSplit`` over the analysis samples in order.

    Returns (fold labels (1, n), fold training masks (1, K, n)). Fold j trains on samples
    before its test block (less ``gap``, at most ``max_train_size``), never on later ones; the
    first samples, never tested, have label -1 (they are in D but in no test fold).
    """
    from sklearn.model_selection import TimeSeriesSplit

    analysis = np.flatnonzero(~np.asarray(is_test, dtype=bool))
    try:
        splits = list(TimeSeriesSplit(folds, gap=gap, max_train_size=max_train_size)
                      .split(analysis))
    except ValueError as exc:
        raise InputError(f"design.folds: {exc}") from None
    n = len(is_test)
    labels = np.full((1, n), -1, dtype=np.int32)
    train = np.zeros((1, folds, n), dtype=bool)
    for j, (tr, te) in enumerate(splits):
        labels[0, analysis[te]] = j
        train[0, j, analysis[tr]] = True
    return labels, train


def _group_kfold_shuffles() -> bool:
    from sklearn.model_selection import GroupKFold

    return "shuffle" in inspect.signature(GroupKFold).parameters


def make_design(
    fold: np.ndarray,
    is_test: np.ndarray,
    *,
    full: bool = True,
    folds: bool = True,
    pairs: bool = False,
    subsets: list[tuple[np.ndarray, int, int]] | None = None,
    fold_train: np.ndarray | None = None,
) -> Design:
    """Build the deduplicated design from fold labels (repeats, n).

    ``subsets`` is a list of (training mask, group, member) from :func:`subset_splits`.
    ``fold_train`` (repeats, K, n) gives the fold splits' training sets when they are not
    D minus the fold (time-ordered folds, :func:`timeseries_folds`).
    """
    n_repeats, n = fold.shape
    n_folds = int(fold.max()) + 1 if fold.size else 0
    analysis = ~is_test
    b = _Builder(n)
    full_split = b.add(analysis, "full") if full else -1
    fold_split = np.full((n_repeats, n_folds), -1, dtype=np.int32)
    pair_split = np.full((n_repeats, n_folds, n_folds), -1, dtype=np.int32)
    for r in range(n_repeats):
        if folds:
            for j in range(n_folds):
                mask = analysis & (fold[r] != j) if fold_train is None else fold_train[r, j]
                fold_split[r, j] = b.add(mask, "fold", r, j)
        if pairs:
            if n_folds < 3:
                raise InputError(
                    f"design.folds: nested estimators need at least 3 folds (got {n_folds}); "
                    "with 2 folds a pair split trains on nothing"
                )
            for j, l in itertools.combinations(range(n_folds), 2):
                s = b.add(analysis & (fold[r] != j) & (fold[r] != l), "pair", r, j, l)
                pair_split[r, j, l] = pair_split[r, l, j] = s
    subsets = subsets or []
    n_groups = max((g for _, g, _ in subsets), default=-1) + 1
    subset_split = np.full((n_groups, 2), -1, dtype=np.int32)
    for mask, group, member in subsets:
        subset_split[group, member] = b.add(mask, "subset", -1, member, -1, group)
    roles = np.array(b.roles, dtype=object).reshape(-1, 5)
    train = np.array(b.masks, dtype=bool).reshape(-1, n)
    return Design(
        train=train,
        kind=roles[:, 0].astype(str),
        repeat=roles[:, 1].astype(np.int32),
        outer=roles[:, 2].astype(np.int32),
        inner=roles[:, 3].astype(np.int32),
        group=roles[:, 4].astype(np.int32),
        fold=fold.astype(np.int32),
        fold_split=fold_split,
        pair_split=pair_split,
        full_split=int(full_split),
        subset_split=subset_split,
        roles_requested=b.requested,
    )


def requested_splits(kinds: set[str], *, folds: int, repeats: int, subsets: int = 0) -> int:
    """Splits the estimators ask for before deduplication (an upper bound of ``n_splits``):
    the full fit, ``repeats x folds`` fold splits, ``repeats x C(folds, 2)`` pair splits and
    ``subsets`` learning sets, each as ``kinds`` asks. Counted from sizes: nothing is built.

    >>> requested_splits({"full", "fold", "pair"}, folds=5, repeats=2)
    31
    """
    count = int("full" in kinds)
    if kinds & {"fold", "pair"}:
        count += repeats * folds
    if "pair" in kinds:
        count += repeats * math.comb(folds, 2)
    return count + (subsets if "subset" in kinds else 0)


def check_subset_size(n_analysis: int, size: int) -> None:
    """Refuse a learning-set size g unless n >= 2g + 2 (Fuchs et al., Theorem 3.9).

    The unbiased variance estimator needs two disjoint learning sets plus two distinct test
    samples outside both, so it exists iff n >= 2g + 2 analysis samples.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InputError(f"design.subset.size: {size!r}; the learning-set size g must be an "
                         "integer of at least 1")
    if n_analysis < 2 * size + 2:
        raise InputError(
            f"design.subset.size: g = {size} needs n >= 2g + 2 = {2 * size + 2} analysis samples "
            f"(the variance estimator exists iff n >= 2g + 2), but n = {n_analysis}; "
            f"use g <= {max((n_analysis - 2) // 2, 0)}"
        )


def complete_subset_count(n_analysis: int, size: int) -> int:
    """Number of learning sets of size g in the complete design: C(n, g)."""
    return math.comb(n_analysis, size)


def subset_splits(
    is_test: np.ndarray, *, size: int, pairs: int = 0, complete: bool = False, seed: int | None = 0
) -> list[tuple[np.ndarray, int, int]]:
    """Learning sets of size g drawn from D, as (training mask, group, member).

    Incomplete design (``complete=False``): ``pairs`` = P independent groups; group p draws
    2g distinct samples of D uniformly and splits them at random into two disjoint learning
    sets, members 0 and 1. Each learning set is marginally uniform over the size-g subsets
    of D and the pair is uniform over ordered disjoint pairs, which is what makes the
    reducer's Δ̃, Q and T unbiased (docs/guide/estimators.md, the U-statistic variance).

    Complete design (``complete=True``): every learning set of size g exactly once, in
    lexicographic order of its sample indices; group = its rank, member 0, and member 1 is
    absent (-1 in ``subset_split``). The reducer recognises this shape (member 1 absent,
    all C(n, g) sets present) and forms every disjoint pair itself, so the store never holds
    the C(n, g)·C(n-g, g)/2 pairs. ``pairs`` is ignored.

    n < 2g + 2 is refused before anything is built, as is a complete design with more than
    ``MAX_COMPLETE_SUBSETS`` learning sets.

    Examples
    --------
    >>> import numpy as np
    >>> out = subset_splits(np.zeros(6, bool), size=2, complete=True)
    >>> len(out), out[0][0].astype(int).tolist(), out[0][1:]
    (15, [1, 1, 0, 0, 0, 0], (0, 0))
    """
    is_test = np.asarray(is_test, dtype=bool)
    analysis = np.flatnonzero(~is_test)
    n, n_total = analysis.size, is_test.shape[0]
    check_subset_size(n, size)
    out = []
    if complete:
        count = complete_subset_count(n, size)
        if count > MAX_COMPLETE_SUBSETS:
            raise InputError(
                f"design.subset.complete: C({n}, {size}) = {count} learning sets is more than "
                f"{MAX_COMPLETE_SUBSETS}; use complete: false with subset.pairs"
            )
        for g, members in enumerate(itertools.combinations(analysis, size)):
            mask = np.zeros(n_total, dtype=bool)
            mask[list(members)] = True
            out.append((mask, g, 0))
        return out
    if isinstance(pairs, bool) or not isinstance(pairs, (int, np.integer)) or pairs < 1:
        raise InputError(f"design.subset.pairs: {pairs!r}; use an integer of at least 1 "
                         "(or complete: true)")
    rng = np.random.default_rng(seed)
    # DESIGN CHOICE: draw groups in vectorised chunks (argsort of uniform keys is a uniform
    # random permutation per row); 10^5 groups take well under a second this way.
    step = max(1, 2_000_000 // max(n, 1))
    for p0 in range(0, pairs, step):
        rows = min(step, pairs - p0)
        order = np.argsort(rng.random((rows, n)), axis=1)[:, : 2 * size]
        for r in range(rows):
            for member in (0, 1):
                mask = np.zeros(n_total, dtype=bool)
                mask[analysis[order[r, member * size:(member + 1) * size]]] = True
                out.append((mask, p0 + r, member))
    return out
