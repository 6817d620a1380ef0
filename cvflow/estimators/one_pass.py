"""One pass over ``pred``: every role's loss sums for every loss, each chunk read once.

Public API (the report, every estimator through ``role_terms``, and a distributed cluster's
client all call this one function)::

    split_sums(cube_or_store, losses=None, *, roles=("fold",), weights=None, what="the pass")
        -> {loss label: {term: numpy array, params first}}

``cube_or_store``: a cube (``cvflow.open(store)``, lazy, or any Dataset with the cube's schema,
in memory) or a store path / URL. ``losses``: a loss name or declaration, or a list of them
(default: the cube's loss); every one is applied to the same read of each chunk. ``roles``:
"full", "fold", "pair", "oof", "change", "train" (see the term table of
:mod:`cvflow.estimators.np_roles`; "pair", "oof", "change", "train" imply "fold", "change"
implies "full"). ``weights`` (n,): the "fold" and "train" sums weigh sample i by w_i. The
terms are the raw sums, before the NaN rule (:func:`cvflow.estimators.np_roles.nan_rule`):
a failed or unwritten fit's NaN reaches exactly the terms whose samples it covers, as with
``np_roles``' kernels. Answers equal those kernels' to rounding (tests/test_one_pass.py
checks both against a brute-force numpy computation over the whole cube).

How it runs
-----------
The pass is a Dask graph with one task per *block*: a group of params (every param, unless
the in-memory budget says otherwise) times a run of whole split chunks of the store (a shard
of ``pred`` holds every param of a few splits; the run is a few MB). A task reads its block
itself (a store: by its location, ``cvflow.store.integrity.read``, so a worker process on
another machine opens the store and reads its own chunks; a lazy cube that is not a store's
own ``pred``: its dask slice; an in-memory cube: a numpy view), applies each loss in kernel
blocks of :data:`cvflow.estimators.pass_kernel.KERNEL_BYTES`, and returns only the sums its
splits contribute (params x roles, kilobytes). The graph is computed by
:func:`cvflow.estimators.memory.compute_here` (``parallel="cluster"``): the active
``distributed.Client`` when the caller holds one, else Dask's threads in this process, whose
tasks write each block's sums into the terms as the block ends (:class:`_Sink`: kept until the
last task ended, the blocks' sums of the pairs 10^6-fit cube were 40 MB at the pass's peak).

What each role needs, and how many reads
----------------------------------------
Per (param, split) loss sums over fixed sample sets (the split's test fold N_j, D, D \\ N_j,
the held-out test set; weighted when asked) serve ``fold`` (kfold, corrected_kfold's fold
terms, the outer sums of nested_cv and stability_nested), ``full`` (corrected_kfold,
selection's test risk), ``train`` and ``pair`` (``inner_sum``: the inner K-fold of nested_cv,
stability_nested, bates_ncv, nested_compare): all in the one pass, each chunk read once.
``oof`` (bates_ncv, wald_cv, bbc_cv, cv_confidence) copies each fold fit's test rows out in
the same pass (P x R x n floats kept, as before). Two terms are not sums of one fit's losses:
``fold_change`` (stability: |ℓ(fold j) − ℓ(full)|) needs the full fit's losses and
``inner_change`` (stability_nested: |ℓ(pair(t, l)) − ℓ(fold t)|) the fold fits' losses.
The full fit's losses are read first by one task per param group (one split: one more read
of its chunk only) and handed to the blocks that need them. A fold fit's losses are taken
from the block that holds its fold split and handed on along a *chain* of consecutive blocks
(one task, :func:`_chains`) to the blocks whose pair splits subtract them (a repeat's splits
are consecutive in a store but straddle its shards); only a chain's first block reads again
the fold splits before it that its chain needs (one or two shards a chain). The rest of the
cube is read once. Bates' inner folds are the pair
splits (``inner_sum`` and ``oof``: one pass); the U-statistic's subset pairs (ustat,
nadeau_bengio) read only the 2P subset splits of two params and keep their own reader.

Memory: a task holds its block (at most a quarter of ``cvflow.reduce.in-memory-bytes`` per
thread) and a kernel block; the reference losses of a param group stay within half the
budget (more params than that: several groups, each reading only its params' inner chunks);
the client holds the terms (P x R x K floats, P x R x n for ``oof``) whatever the cube's size.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import numpy as np
from ..lazy import xarray as xr

from .. import config
from ..errors import InputError
from . import np_roles
from .cube_losses import cube_classes, pointwise
from .losses import Loss
from .memory import (CLUSTER_TASK_BYTES, active_client, compute_here, is_lazy, on_cluster,
                     runs_here)
from .pass_kernel import block_sums, reference_losses
from .pass_reads import _pred_array, read_store_block  # noqa: F401 - tests count the reads
from .split_tables import full_split_index, require

# one task's block of `pred`: at most this many bytes (and half the budget over the threads);
# on a distributed cluster's workers memory.CLUSTER_TASK_BYTES (a quarter of the budget at most).
# DESIGN CHOICE: a few MB a task: a 10^6-fit float32 cube's shard of 1000 params x 6 splits
# (10 MB) is one task, and ~170 tasks keep two threads busy with ~1 ms of Dask each. Small
# shards are merged up to this; 32 MB (three such shards a task) raised the report's peak
# memory from 0.58 to 0.67 GB (glibc keeps the freed blocks of each thread's arena).
TASK_BYTES = 8 * 2**20
ROLES = ("full", "fold", "pair", "oof", "change", "train")


def implied_roles(roles) -> frozenset[str]:
    """``roles`` with the roles they imply ("pair", "oof", "change", "train" need "fold";
    "change" needs "full")."""
    roles = set(roles)
    unknown = roles - set(ROLES)
    if unknown:
        raise InputError(f"split_sums.roles: {sorted(unknown)[0]!r} is not a role; use some of "
                         f"{', '.join(ROLES)}")
    roles |= {"fold"} if roles & {"pair", "oof", "change", "train"} else set()
    roles |= {"full"} if "change" in roles else set()
    return frozenset(roles)


def split_sums(cube_or_store, losses=None, *, roles=("fold",), weights=None,
               what: str = "the pass") -> dict[str, dict[str, np.ndarray]]:
    """Every role's loss sums of every loss, in one pass over ``pred`` (module docstring).

    Parameters
    ----------
    cube_or_store : xarray.Dataset or str or os.PathLike
        A cube (lazy or in memory) or a store's path / URL (opened with ``cvflow.open``).
    losses : str or Loss or list of them, optional
        Pointwise losses; default the cube's own.
    roles : iterable of str, default ("fold",)
        Which terms (np_roles' table); implied roles are added.
    weights : ndarray (n,), optional
        Sample weights of the "fold" and "train" sums.
    what : str
        Who asks (named in an error when the cube lacks a role's splits).

    Returns
    -------
    dict
        loss label -> term name -> ndarray with ``param`` first (``test_risk`` only when
        samples are held out), before the NaN rule.

    Examples
    --------
    >>> sums = split_sums("study.zarr", ["squared", "absolute"], roles=("full", "fold"))  # doctest: +SKIP
    >>> sums["squared"]["fold_sum"].shape          # (param, repeat, outer)  # doctest: +SKIP
    """
    cube = _as_cube(cube_or_store)
    items = losses if isinstance(losses, (list, tuple)) else [losses]
    decls = list(dict.fromkeys(pointwise(cube, item, what) for item in items))
    terms = pass_terms(cube, decls, implied_roles(roles), what, weights)
    return {decl.label: terms[decl] for decl in decls}


def _as_cube(cube_or_store) -> xr.Dataset:
    if isinstance(cube_or_store, xr.Dataset):
        return cube_or_store
    if isinstance(cube_or_store, (str, os.PathLike)):
        from ..store.cube import open_cube

        return open_cube(cube_or_store)
    raise InputError(f"split_sums: got {type(cube_or_store).__name__}; give a cube (xarray "
                     "Dataset) or a store's path or URL")


# ----------------------------------------------------------------------------------------
# the plan: what each split contributes (small, sent once to every worker)
# ----------------------------------------------------------------------------------------

@dataclass
class Plan:
    """What a task needs besides its block: the losses, targets, sample sets and each split's
    roles (``entries``: split -> list of ("full",) / ("fold", r, j) / ("pair", r, t, l))."""

    decls: list
    y: np.ndarray
    classes: list | None
    outputs: np.ndarray
    member: np.ndarray                # (R, K, n) bool
    analysis: np.ndarray              # (n,) bool
    roles: frozenset
    weights: np.ndarray | None
    entries: dict = field(default_factory=dict)
    refs: list = field(default_factory=list)      # reference splits, in reference order
    ref_splits: list = field(default_factory=list)  # the split of each reference
    opened: str = ""                  # the store's opening this cube comes from (_pred_array)
    # each split's columns (pass_kernel._split_columns), made where the tasks run: not pickled
    columns_made: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "columns_made": {}}

    @property
    def shared(self) -> list[int]:
        """The references read by a reference task (the full fit's: every fold split of the
        cube subtracts it); a fold fit's (``("fold", r, t)``, for its repeat's pair splits) is
        taken from the losses of the block that holds them (:func:`_split_runs` keeps a pair
        split and its fold splits in one block)."""
        return [i for i, ref in enumerate(self.refs) if ref[0] != "fold"]

    @property
    def test(self) -> np.ndarray:
        return ~self.analysis


def _entries(cube: xr.Dataset, roles: frozenset, what: str) -> dict[int, list[tuple]]:
    entries: dict[int, list[tuple]] = {}
    if "full" in roles:
        entries.setdefault(full_split_index(cube, what), []).append(("full",))
    if "fold" in roles:
        table = np.asarray(require(cube, "fold_split", what).values)
        for (r, j), s in np.ndenumerate(table):
            entries.setdefault(int(s), []).append(("fold", r, j))
    if "pair" in roles:
        table = np.asarray(require(cube, "pair_split", what).values)
        for (r, t, l), s in np.ndenumerate(table):
            if t != l:
                entries.setdefault(int(s), []).append(("pair", r, t, l))
    return dict(sorted(entries.items()))


def make_plan(cube: xr.Dataset, decls: list[Loss], roles: frozenset, what: str,
              weights=None) -> Plan:
    if weights is not None and "change" in roles:
        raise ValueError("split_sums: fold_change is not weighted; give no weights")
    k = int(cube.sizes["outer"])
    plan = Plan(decls=list(decls), y=np.asarray(cube["y"].values), classes=cube_classes(cube),
                outputs=np.asarray([str(o) for o in cube["output"].values], dtype=object),
                member=np_roles.fold_members(cube["fold"].values, k),
                analysis=~np.asarray(cube["is_test"].values, dtype=bool), roles=roles,
                weights=None if weights is None else np.asarray(weights, dtype=np.float64),
                entries=_entries(cube, roles, what))
    refs = set()
    for entries in plan.entries.values():
        for entry in entries:
            if entry[0] == "fold" and "change" in roles:
                refs.add(("full",))
            if entry[0] == "pair":
                refs.add(("fold", entry[1], entry[2]))
    plan.refs = sorted(refs, key=str)
    plan.ref_splits = [_ref_split(cube, ref) for ref in plan.refs]
    return plan


def _ref_split(cube: xr.Dataset, ref: tuple) -> int:
    if ref[0] == "full":
        return int(cube.attrs["full_split"])
    return int(cube["fold_split"].values[ref[1], ref[2]])


def term_shapes(plan: Plan, n_params: int) -> dict[str, tuple]:
    r, k, n = plan.member.shape
    shapes = {}
    if "full" in plan.roles:
        shapes["full_risk"] = (n_params,)
        if plan.test.any():
            shapes["test_risk"] = (n_params,)
    if "fold" in plan.roles:
        shapes["fold_sum"] = shapes["fold_risk"] = (n_params, r, k)
    if "train" in plan.roles:
        shapes["train_sum"] = (n_params, r, k)
    if "change" in plan.roles:
        shapes["fold_change"] = (n_params, r, k)
    if "oof" in plan.roles:
        shapes["oof_loss"] = (n_params, r, n)
    if "pair" in plan.roles:
        shapes["inner_sum"] = shapes["inner_change"] = (n_params, r, k, k)
    return shapes


# ----------------------------------------------------------------------------------------
# reading a block: a store by its location, a dask slice, or a numpy view
# ----------------------------------------------------------------------------------------

def _store_block_sums(location, plan, params, s0, s1, splits, outside, keep, refs=None,
                      carry=None):
    block = read_store_block(location, params, slice(s0, s1), plan.opened)
    extra = None if not outside else \
        read_store_block(location, params, outside, plan.opened)
    return block_sums(_pick(block, s0, splits), plan, params.start, splits, refs,
                      _with_outside(carry, extra, plan, params.start, outside), keep)


def _array_block_sums(block, plan, p0, s0, splits, extra, outside, keep, refs=None, carry=None):
    return block_sums(_pick(np.asarray(block), s0, splits), plan, p0, splits, refs,
                      _with_outside(carry, extra, plan, p0, outside), keep)


def _needed(plan: Plan, splits: list[int], fold_of: dict) -> set[int]:
    """The fold splits the pair splits among ``splits`` subtract (``fold_of``: reference ->
    its split)."""
    return {fold_of[("fold", e[1], e[2])] for s in splits for e in plan.entries[s]
            if e[0] == "pair"}


def _with_outside(carry, extra, plan: Plan, p0: int, outside: list[int]) -> dict:
    """The losses handed on (fold split -> label -> (p, n)) and those of the fold splits read
    here (``extra``, the block (p, len(outside), n[, C]) of the splits ``outside``)."""
    carry = dict(carry or {})
    if outside:
        losses = reference_losses(extra, plan, p0)
        for i, split in enumerate(outside):
            carry[split] = {label: values[:, i] for label, values in losses.items()}
    return carry


def _pick(block: np.ndarray, s0: int, splits: list[int]) -> np.ndarray:
    """The block's ``splits`` (its first split is ``s0``): a view when they are consecutive."""
    first, last = splits[0] - s0, splits[-1] - s0
    if last - first + 1 == len(splits):
        return block[:, first:last + 1]
    return block[:, [s - s0 for s in splits]]


def _store_references(location, plan, params, ref_splits):
    block = read_store_block(location, params, ref_splits, plan.opened)
    return reference_losses(block, plan, params.start)


def _array_references(block, plan, p0):
    return reference_losses(block, plan, p0)


# ----------------------------------------------------------------------------------------
# the graph
# ----------------------------------------------------------------------------------------

def _store_location(cube: xr.Dataset) -> str | None:
    """The store whose own ``pred`` this cube's is (untouched lazy array), else None."""
    from ..store.cube import STORED

    data = cube["pred"].data
    if is_lazy(data) and data.name == cube.encoding.get(STORED) and "source" in cube.encoding:
        return str(cube.encoding["source"])
    return None


def _split_runs(splits: list[int], chunk: int, per_split: int, limit: int) -> list[tuple]:
    """The needed ``splits`` grouped into runs of whole split chunks within ``limit`` bytes
    (``per_split`` bytes a split): [(s0, s1, [splits])] with s0..s1 chunk-aligned."""
    by_chunk: dict[int, list[int]] = {}
    for s in splits:
        by_chunk.setdefault(s // chunk, []).append(s)
    runs: list[tuple] = []
    for c, members in sorted(by_chunk.items()):
        s0, s1 = c * chunk, c * chunk + chunk
        if runs and runs[-1][1] == s0 and (s1 - runs[-1][0]) * per_split <= limit:
            runs[-1] = (runs[-1][0], s1, runs[-1][2] + members)
        else:
            runs.append((s0, s1, members))
    return runs


def _param_groups(n_params: int, param_chunk: int, size: int) -> list[slice]:
    """Params in groups of ``size``, whole param chunks when a chunk fits (each stored chunk
    then read by one group only)."""
    if size >= param_chunk:
        size -= size % param_chunk
    return [slice(p0, min(p0 + size, n_params)) for p0 in range(0, n_params, max(size, 1))]


def pass_terms(cube: xr.Dataset, decls: list[Loss], roles: frozenset, what: str,
               weights=None) -> dict[Loss, dict[str, np.ndarray]]:
    """The terms of every loss of ``decls`` for ``roles`` (raw, before the NaN rule), one pass."""
    import dask

    plan = make_plan(cube, decls, roles, what, weights)
    pred = cube["pred"]
    data = pred.data
    n_params, n_splits = int(pred.shape[0]), int(pred.shape[1])
    out = {decl: {term: np.zeros(shape) for term, shape in term_shapes(plan, n_params).items()}
           for decl in decls}
    if n_params == 0 or not plan.entries:
        return out
    location = _store_location(cube)
    plan.opened = str(data.name) if location is not None else ""
    param_chunk, split_chunk = _chunks(pred, location)
    if location is not None:
        _refuse_missing(cube, location, split_chunk, list(plan.entries) + plan.ref_splits)
    budget = int(config.get("cvflow.reduce.in-memory-bytes"))
    threads = int(dask.config.get("num_workers", None) or os.cpu_count() or 1)
    if is_lazy(data) and on_cluster():       # a worker's memory is its own (memory.py)
        limit = max(1, min(CLUSTER_TASK_BYTES, budget // 4))
        threads = max(1, sum(active_client().nthreads().values()))
    else:
        # an in-memory cube's blocks with pair splits are views (not read): four times as big
        task = 4 * TASK_BYTES if "pair" in plan.roles and not is_lazy(data) else TASK_BYTES
        limit = max(1, min(task, budget // (2 * threads)))
    cell = int(np.prod(pred.shape[2:])) * pred.dtype.itemsize
    per_param_refs = 8 * len(plan.shared) * plan.y.shape[0] * len(decls)
    per_param = cell * min(split_chunk, n_splits)
    size = limit // max(1, per_param)
    if size < param_chunk and param_chunk * per_param <= budget // 2:
        size = param_chunk          # a whole stored chunk, within half the budget: read once
    if plan.shared:
        size = min(size, (budget // 2) // per_param_refs)
    if "pair" in plan.roles and is_lazy(data):
        # DESIGN CHOICE: with pair splits a lazy cube's param group is one stored chunk of
        # params (250 on the 10^6-fit cube, blocks of three shards): its chains hand on each
        # fold fit's float64 losses of the group's params (up to five: 17.7 MB for 1000
        # params). Measured on the pairs cube, pass alone, 2 threads (load 18-22): 1000 params
        # x 3 shards 4.4-5.3 s CPU, 0.33 GiB peak; 250 x 3 shards 4.9-5.0 s, 0.31-0.33 GiB;
        # 250 x 1 shard 6.0-6.6 s (four times the reads and kernel calls), 0.27 GiB.
        size = min(size, param_chunk)
    groups = _param_groups(n_params, param_chunk, max(1, size))
    ref_splits = [plan.ref_splits[i] for i in plan.shared]
    fold_of = dict(zip(plan.refs, plan.ref_splits))
    # the calls: one reference call per param group (if any), one chain of block calls per run
    # of consecutive chunks (:func:`_chains`)
    references: dict[int, tuple] = {}
    chains: list[tuple] = []          # (group, [(wants references, function, arguments)])
    for g, params in enumerate(groups):
        if plan.shared:
            references[g] = ((_store_references, (location, plan, params, ref_splits))
                             if location is not None else
                             (_array_references, (data[params][:, ref_splits], plan, params.start)))
        per_split = cell * (params.stop - params.start)
        runs = _split_runs(list(plan.entries), split_chunk, per_split, limit)
        for chain in _chains(plan, runs, fold_of, -(-4 * threads // len(groups))):
            calls = []
            for s0, s1, splits, outside, keep in chain:
                if location is not None:
                    call = (_store_block_sums, (location, plan, params, s0, min(s1, n_splits),
                                                splits, outside, keep))
                else:  # a contiguous view (numpy) or slice (dask) of whole chunks; the task picks
                    call = (_array_block_sums, (data[params, s0:s1], plan, params.start, s0,
                                                splits, data[params][:, outside] if outside
                                                else None, outside, keep))
                # (wants references, function, arguments): a tuple led by a callable would be
                # a task to Dask's graph traversal, called with dask arrays among its arguments
                calls.append((any(_needs_refs(plan, s) for s in splits), *call))
            chains.append((g, calls))
    by_label = {decl.label: out[decl] for decl in decls}
    # in this process, each block's sums are written into the terms as the block ends (not
    # kept, all of them, until the last task ends); from a cluster's workers they come back
    in_memory = not is_lazy(data)
    sinks = ([_Sink(by_label, groups[g]) for g, _ in chains]
             if runs_here("threads" if in_memory else "cluster") else None)
    results = _run(references, chains, plan, sinks, in_memory=in_memory,
                   small=sum(len(calls) for _, calls in chains) <= 2)
    for (g, _), chain_results in zip(chains, results):
        for contributions in chain_results:
            assemble(by_label, groups[g], contributions)
    return out


# DESIGN CHOICE: with pair splits, a chain of at least this many blocks (one task), and at most
# four chains a thread over the param groups: a chain's first block reads again the fold splits
# its repeat cut by the chain's start needs (one or two shards), so 20 blocks of one shard cost
# 5-10% more reads; four chains a thread keep the threads equally busy when one runs slower
# (another process's load).
CHAIN_BLOCKS = 20


def _chains(plan: Plan, runs: list[tuple], fold_of: dict, most: int) -> list[list[tuple]]:
    """The blocks of ``runs`` (s0, s1, splits), each with (outside, keep), in chains of
    consecutive blocks (at most ``most``), one task each: [[(s0, s1, splits, outside, keep)]].

    A block's pair splits subtract fold fits' losses (:func:`_needed`): those of its own
    splits, those the block before in its chain hands on, and ``outside``, the others, read
    by the task (a chain's first block reads those its chain needs from before it: the fold
    splits of a repeat cut by the chain's start). ``keep``: the fold splits whose losses the
    block hands on, those a later block of its chain needs. Without pair splits every block is
    a chain of its own (independent tasks).

    DESIGN CHOICE: a repeat's 5 fold and 10 pair splits straddle the store's shards (15 splits
    a repeat, 6 a shard on the 10^6-fit cube): a block that read again the fold splits before
    it decoded 66 more shards than the cube's 166 (blocks of 3 shards); handed on along a
    chain, only a chain's first block reads some again (see :data:`CHAIN_BLOCKS`).
    """
    needs = [_needed(plan, splits, fold_of) for _, _, splits in runs]
    if not any(needs):
        return [[(s0, s1, splits, [], [])] for s0, s1, splits in runs]
    count = max(1, min(most, len(runs) // CHAIN_BLOCKS))
    size = -(-len(runs) // count)
    chains = []
    for lo in range(0, len(runs), size):
        hi = min(lo + size, len(runs))
        carried: set[int] = set()
        chain = []
        for b in range(lo, hi):
            s0, s1, splits = runs[b]
            later = set().union(*needs[b + 1:hi])
            own = set(splits)
            outside = sorted((needs[b] | {f for f in later if f < s0}) - own - carried)
            keep = sorted(later & (own | carried | set(outside)))
            chain.append((s0, s1, splits, outside, keep))
            carried = set(keep)
        chains.append(chain)
    return chains


def _chain_sums(calls: list, refs=None, sink=None) -> list:
    """The contributions of a chain's block calls, in order, each handing the fold losses it
    keeps to the next; written into ``sink`` (a :class:`_Sink`) as each block ends, when
    given (then none is returned)."""
    results, carry = [], None
    for wants, function, args in calls:
        sums, carry = function(*args, refs if wants else None, carry)
        if sink is None:
            results.append(sums)
        else:
            assemble(sink.terms, sink.params, sums)
    return results


class _Sink:
    """Where a chain task of this process writes its blocks' sums: the terms (loss label ->
    term -> array) and the chain's param group. Opaque to Dask (not traversed)."""

    __slots__ = ("terms", "params")

    def __init__(self, terms: dict, params: slice):
        self.terms, self.params = terms, params


def _run(references: dict, chains: list, plan: Plan, sinks: list | None = None, *,
         in_memory: bool, small: bool) -> list:
    """Each chain's block contributions (:func:`_chain_sums`), in order: called here when the
    cube is in memory and small (a graph's few ms would be most of the work), else as one
    Dask graph, a task a chain, computed by :func:`cvflow.estimators.memory.compute_here`.

    DESIGN CHOICE: an in-memory cube is reduced by this process's threads (its numpy blocks
    would otherwise travel to a cluster); a store's blocks are read where the tasks run (the
    active Client's workers when the caller holds one), only their sums travel back.
    """
    if in_memory and small:
        refs = {g: function(*args) for g, (function, args) in references.items()}
        return [_chain_sums(calls, refs.get(g), sinks and sinks[i])
                for i, (g, calls) in enumerate(chains)]
    import dask

    tag = uuid.uuid4().hex
    # the plan once in the graph (each worker gets it once), not once per task; not searched
    # for collections (it holds none: its entries, 991 splits' roles, took ~0.1 s to search)
    plan_key = dask.delayed(plan, name=f"cvflow-pass-plan-{tag}", traverse=False)

    def arguments(args):
        return tuple(plan_key if arg is plan else arg for arg in args)

    refs = {g: dask.delayed(function)(*arguments(args), dask_key_name=f"cvflow-pass-refs-{tag}-{g}")
            for g, (function, args) in references.items()}
    tasks = []
    for i, (g, calls) in enumerate(chains):
        # DESIGN CHOICE: a chain's dependencies (the plan, a lazy cube's blocks) are the task's
        # own arguments, its calls name them by place (_Dependency): nested in the calls' list
        # of tuples, Dask 2026.8 handed one call's dask array to another's plan argument
        # (tests/test_laziness: a lazy cube with pair splits). The calls themselves go in an
        # opaque box (_Calls), not traversed by Dask: its search of every call's arguments for
        # collections took ~0.15 s before the pass's first task (224 blocks, pairs 10^6-fit cube)
        deps: list = [plan_key]
        flat = [(wants, function, tuple(_Dependency(0) if arg is plan else _Dependency.of(arg, deps)
                                        for arg in args))
                for wants, function, args in calls]
        tasks.append(dask.delayed(_chain_task)(_Calls(flat),
                                               refs[g] if any(w for w, *_ in calls) else None,
                                               sinks and sinks[i], *deps,
                                               dask_key_name=f"cvflow-pass-{tag}-{i}"))
    return compute_here(tasks, parallel="threads" if in_memory else "cluster")


class _Calls:
    """A chain's block calls (wants references, function, arguments), opaque to Dask."""

    __slots__ = ("calls",)

    def __init__(self, calls: list):
        self.calls = calls


class _Dependency:
    """A place among a chain task's dependencies (:func:`_chain_task`)."""

    __slots__ = ("place",)

    def __init__(self, place: int):
        self.place = place

    @classmethod
    def of(cls, arg, deps: list):
        """``arg``, or its place in ``deps`` (appended) when it is a Dask collection."""
        from dask import is_dask_collection

        if not is_dask_collection(arg):
            return arg
        deps.append(arg)
        return cls(len(deps) - 1)


def _chain_task(calls: _Calls, refs, sink, *deps) -> list:
    """:func:`_chain_sums` of ``calls`` whose :class:`_Dependency` arguments are ``deps``."""
    return _chain_sums([(wants, function, tuple(deps[a.place] if isinstance(a, _Dependency) else a
                                                for a in args))
                        for wants, function, args in calls.calls], refs, sink)


def _refuse_missing(cube: xr.Dataset, location: str, split_chunk: int, splits: list[int]) -> None:
    """DamagedStore for the first stored object of ``pred`` among those the pass reads that a
    done fit wrote and that is missing or empty (one listing, here, before any task: a missing
    object would read as fill values, NaN, on any worker); as the lazy cube's reader refuses it
    (:class:`cvflow.store.integrity.Checked`)."""
    from ..store import integrity

    array = integrity.open_array(location, "pred")
    must = integrity.required("pred", array, cube["done"].values, cube["failed"].values)
    read = np.zeros(must.shape[1], dtype=bool)
    read[np.unique(np.asarray(splits, dtype=int) // split_chunk)] = True
    must = must & read.reshape((1, -1) + (1,) * (must.ndim - 2))
    damage = integrity.missing_or_empty("pred", array, integrity.array_objects(location, "pred"),
                                        must)
    damage = [d for d in damage if read[d.chunk[1]]]
    if damage:
        raise integrity.DamagedStore(location, damage[0])


def _chunks(pred: xr.DataArray, location: str | None) -> tuple[int, int]:
    """(params, splits) of a read unit: the store's inner chunk's params and its shard's
    splits; a dask array's chunks; one param and one split for numpy (any view is cheap)."""
    if location is not None:
        encoding = pred.encoding
        chunks = tuple(encoding.get("chunks") or pred.data.chunksize)
        shards = tuple(encoding.get("shards") or chunks)
        return int(chunks[0]), int(shards[1])
    if is_lazy(pred.data):
        return int(pred.data.chunksize[0]), int(pred.data.chunksize[1])
    return 1, 1


def _needs_refs(plan: Plan, split: int) -> bool:       # a shared reference (Plan.shared)
    return any(e[0] == "fold" and "change" in plan.roles for e in plan.entries[split])


def assemble(out: dict[str, dict[str, np.ndarray]], params: slice, contributions) -> None:
    """Write one block's contributions (:func:`block_sums`) into the terms ``out``."""
    for label, term, index, values in contributions:
        out[label][term][(params,) + tuple(index)] = values
