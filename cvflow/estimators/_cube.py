"""Shared reading of the cube for reducers (private to estimators/): role lookups, the role
terms of every estimator (:func:`role_terms`, :func:`shared_terms`), fold membership, groups.

Other folders read a cube through the public modules: :mod:`cvflow.estimators.labels` (param
labels), :mod:`cvflow.estimators.cube_losses` (a cube's loss), :mod:`cvflow.estimators.memory`
(the in-memory budget, dask arrays computed here).

Every function here works on a lazy (dask-backed) cube without loading ``pred`` whole:
selections are by split index, reductions over ``sample`` are weighted sums.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import xarray as xr

from ..errors import InputError
from .cube_losses import cube_classes, pointwise
from .losses import Loss, apply_loss
from .memory import active_client, compute_here, fits_budget, is_lazy, load_if_small, store_here
from . import np_roles
from .. import config


def has_splits(cube: xr.Dataset, table: str) -> bool:
    """Whether every entry of a role table (``fold_split``, ``pair_split``, ...) is present."""
    index = cube[table]
    if table == "pair_split":
        k = index.sizes["outer"]
        off_diag = ~np.eye(k, dtype=bool)
        return not bool((index.values[:, off_diag] < 0).any()) if k else False
    return not bool((index.values < 0).any()) and index.size > 0


def require(cube: xr.Dataset, table: str, what: str) -> xr.DataArray:
    """A role table with every entry present, or a clear error naming what is missing."""
    index = cube[table]
    if not has_splits(cube, table):
        raise InputError(f"cube: {what} needs the {table.replace('_split', '')} splits, which this "
                         "store does not have; add the estimator to the workflow and run it again")
    return index


def at_splits(values: xr.DataArray, index: xr.DataArray) -> xr.DataArray:
    """Select ``values`` along ``split`` by an integer table (e.g. fold_split (repeat, outer)).

    The ``split`` dim is replaced by the table's dims. Entries < 0 (roles not in the design,
    the pair diagonal) give NaN. Lazy values stay lazy (one take along ``split``) unless the
    distinct splits selected fit the in-memory budget (``IN_MEMORY_BYTES``): then they are read
    once, each distinct split once.
    """
    idx = np.asarray(index.values)
    flat = np.where(idx < 0, 0, idx).ravel()
    keep = {k: c for k, c in values.coords.items() if "split" not in c.dims}
    distinct = np.unique(flat)
    picked = load_if_small(values.drop_vars([k for k in values.coords if k not in keep])
                            .isel(split=distinct)).isel(split=np.searchsorted(distinct, flat))
    axis = picked.get_axis_num("split")
    data = picked.data.reshape(picked.shape[:axis] + idx.shape + picked.shape[axis + 1:])
    dims = picked.dims[:axis] + index.dims + picked.dims[axis + 1:]
    result = xr.DataArray(data, dims=dims, coords=keep, name=values.name)
    if (idx < 0).any():
        result = result.where(xr.DataArray(idx >= 0, dims=index.dims))
    return result


def full_split_index(cube: xr.Dataset, what: str) -> int:
    """Index of the split trained on all of D, or a clear error if the design lacks it."""
    index = int(cube.attrs.get("full_split", -1))
    if index < 0:
        raise InputError(f"cube: {what} needs the full split (trained on all of D), which this "
                         "store does not have; add the estimator to the workflow and run it again")
    return index


# DESIGN CHOICE: the kernels' temporaries (a block of params' predictions and losses on its
# splits, gathered per role, masked copies) stay near KERNEL_BLOCK_BYTES per block, whatever
# the cube's size: each temporary (< 0.5 MB) stays in cache and the allocator reuses it. With
# 16 MB blocks each multi-MB temporary was fresh memory (a page fault per 4 kB): the K-fold
# sums of a 100-param lasso cube (n = 2000) took 21-25 ms of CPU, 5-6 ms in 2 MB blocks (4 MB
# blocks were fast or slow by the roles asked). A lazy cube is read in groups of params
# within the in-memory budget (_lazy_terms), each group reduced in kernel blocks.
KERNEL_BLOCK_BYTES = 2 * 2**20


def role_terms(cube: xr.Dataset, loss: str | None = None, *, roles, what: str,
               weights: np.ndarray | None = None, nan_rule: bool = True
               ) -> dict[str, np.ndarray]:
    """The per-param loss sums of :mod:`np_roles` for ``roles`` ("full", "fold", "pair",
    "oof", "change", "train").

    One pass over the splits the roles need (each needed chunk of ``pred`` read once, no
    other): in memory when the selection fits the in-memory budget, otherwise in groups of params
    within that budget, each read chunk by chunk into one array (memory bounded by the budget
    and a kernel block).
    "pair" and "oof" imply "fold" (the inner study's full fit is the fold fit); "oof" adds
    the out-of-fold losses ``oof_loss`` (P, R, n); "change" (implies "full" and "fold") adds
    ``fold_change``. Returns numpy arrays with ``param`` first (see the table in
    :mod:`cvflow.estimators.np_roles`) and ``missing`` (P,) bool.

    Within :func:`shared_terms` of this very cube, the terms of all the shared roles are
    computed once per loss (one pass) and each call gets the part it asks for.

    The NaN rule (one for every estimator): a param missing any fit these roles need (failed,
    or not written yet) gets NaN in every term, so it is NaN in the estimator, never a partial
    sum; ``missing`` flags it so the estimator can say how many params that hit.
    ``nan_rule=False``: GridSearchCV's rule instead, a failed fit NaN in its own terms only
    (no ``missing``). ``weights`` (n,): the "fold" and "train" sums weigh sample i by w_i.
    """
    decl = pointwise(cube, loss, what)
    roles = _implied(roles)
    rule = np_roles.nan_rule if nan_rule else dict
    if weights is not None:                       # a weighted sum is its caller's alone
        return rule(_terms(cube, decl, roles, what, weights))
    shared = _SHARED.get()
    if shared is None or shared.cube is not cube or not roles <= shared.roles:
        return rule(_terms(cube, decl, roles, what))
    if decl not in shared.terms:
        shared.terms[decl] = _terms(cube, decl, shared.roles, what)
    return rule({key: value for key, value in shared.terms[decl].items()
                 if np_roles.TERM_ROLE[key] in roles})


def _implied(roles) -> frozenset[str]:
    roles = set(roles)
    roles |= {"fold"} if roles & {"pair", "oof", "change", "train"} else set()
    roles |= {"full"} if "change" in roles else set()
    return frozenset(roles)


class _Shared:
    """The role terms one :func:`shared_terms` block computes once per loss (before the NaN
    rule, which depends on the roles each caller asks for)."""

    def __init__(self, cube: xr.Dataset, roles: frozenset[str]):
        self.cube, self.roles = cube, roles
        self.terms: dict = {}


_SHARED: ContextVar[_Shared | None] = ContextVar("cvflow_shared_terms", default=None)


@contextmanager
def shared_terms(cube: xr.Dataset, roles):
    """Within the block, :func:`role_terms` of ``cube`` (this object, not a selection of it)
    computes the terms of every role of ``roles`` the cube has splits for once per loss, in
    one pass over ``pred``, when first asked, and returns each call the part it asks for.

    DESIGN CHOICE: the estimators of one report share their loss sums (K-fold, corrected
    K-fold and stability all sum the fold fits' losses): each reads ``pred`` and applies the
    loss once, not once per estimator. Each estimator stays a pure function of the cube (its
    result is the same inside or outside the block); ``report.compute`` opens the block for
    the union of its estimators' declared ``terms`` (:mod:`cvflow.estimators.registry`).
    """
    roles = _implied(roles)
    tables = {"full": int(cube.attrs.get("full_split", -1)) >= 0,
              "fold": has_splits(cube, "fold_split"), "pair": has_splits(cube, "pair_split")}
    usable = frozenset(r for r in roles if all(tables.get(t, True) for t in _implied({r})))
    token = _SHARED.set(_Shared(cube, usable))
    try:
        yield
    finally:
        _SHARED.reset(token)


def _terms(cube: xr.Dataset, decl: Loss, roles: frozenset[str], what: str,
           weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """:func:`role_terms` before the NaN rule."""
    tables = {}
    if "full" in roles:
        tables["full"] = np.asarray(full_split_index(cube, what))
    for role in ("fold", "pair"):
        if role in roles:
            tables[role] = np.asarray(require(cube, f"{role}_split", what).values)
    distinct = np.unique(np.concatenate([t.ravel() for t in tables.values()]))
    distinct = distinct[distinct >= 0]
    where = {role: np.searchsorted(distinct, np.maximum(t, 0)) for role, t in tables.items()}
    member = np_roles.fold_members(cube["fold"].values, int(cube.sizes["outer"]))
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    y = np.asarray(cube["y"].values)
    classes = cube_classes(cube)
    outputs = np.asarray([str(o) for o in cube["output"].values], dtype=object)

    def terms_of(pred: np.ndarray, p0: int) -> dict[str, np.ndarray]:
        losses = apply_loss(decl, y, pred, classes, outputs[p0:p0 + len(pred)])
        out, full = {}, None
        if "full" in where:
            full = losses[:, where["full"]]
            out.update(np_roles.full_terms(full, analysis))
        if "fold" in where:
            folds = losses[:, where["fold"]]
            out.update(np_roles.fold_terms(folds, member, analysis,
                                           full if "change" in roles else None,
                                           train="train" in roles, weights=weights))
            if "oof" in roles:
                out["oof_loss"] = np_roles.out_of_fold(folds, member)
        if "pair" in where:
            out.update(np_roles.pair_terms(losses, where["pair"], where["fold"], member, analysis))
        return out

    data = cube["pred"].data
    n = int(np.prod(data.shape[2:]))                            # n samples (x classes)
    # a block's predictions and losses, the fold gather and the pair loop's copies: < 5 per split
    per_param = 8 * n * 5 * len(distinct)
    rows = max(1, KERNEL_BLOCK_BYTES // per_param)

    def block_terms(block, p0: int = 0, splits=None) -> dict[str, np.ndarray]:
        """The terms of a block of params (numpy), in kernel blocks of ``rows`` params."""
        parts = [terms_of(np.asarray(block[q:q + rows] if splits is None
                                     else block[q:q + rows][:, splits]), p0 + q)
                 for q in range(0, len(block), rows)]
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    every_split = len(distinct) == data.shape[1]
    if is_lazy(data):
        data = data if every_split else data[:, distinct, :]
        if fits_budget(data.dtype.itemsize * data.size):
            data, every_split = compute_here(data, parallel="cluster"), True
    if not is_lazy(data):
        return block_terms(data, splits=None if every_split else distinct)
    return _lazy_terms(data, block_terms)


def _lazy_terms(data, terms_of) -> dict[str, np.ndarray]:
    """:func:`role_terms` on a lazy selection: its params in groups within the in-memory budget
    (:func:`_param_groups`), one dask computation each, reduced by ``terms_of`` (kernel blocks)."""
    # DESIGN CHOICE: a group is stored chunk by chunk into one numpy array (dask.array.store)
    # and its terms go straight into the outputs. Rechunked into param blocks (one task each),
    # a group was held twice (the chunks' pieces and the blocks they were concatenated into)
    # beside a kernel per thread, and every group's terms once more until their concatenation.
    # On a 10^7-fit float32 cube (10001 splits, 442 samples): the K-fold sums of a group of 28
    # params (0.46 GiB of predictions) took 0.73 GiB above the open cube, 0.57 GiB so
    # (tracemalloc peaks); the K-fold of all 1000 params (groups of 14) 1.03 GiB of RSS above
    # the open cube, 0.66 GiB so.
    out: dict[str, np.ndarray] = {}
    for group in _param_groups(data):
        selected = data[group]
        if _on_client():          # read by the workers: a numpy target they cannot write
            block = np.asarray(compute_here(selected, parallel="cluster"))
        else:
            block = np.empty(selected.shape, dtype=selected.dtype)
            store_here(selected, block)
        terms = terms_of(block, group.start)
        del block
        for key, value in terms.items():
            if key not in out:
                out[key] = np.empty((data.shape[0],) + value.shape[1:])   # float64, as before
            out[key][group] = value
    if not out:                                      # no params: the terms' shapes, empty
        probe = terms_of(np.full((1,) + data.shape[1:], np.nan), 0)
        out = {key: np.empty((0,) + value.shape[1:]) for key, value in probe.items()}
    return out


def _on_client() -> bool:
    """Whether compute_here(parallel="cluster") computes on the active Client's workers: there
    is one, and Dask's config names no other scheduler (a test's "processes", "sync")."""
    import dask

    return (active_client() is not None
            and dask.config.get("scheduler", None) in (None, "dask.distributed", "distributed"))


def _param_groups(data) -> list[slice]:
    """Params in groups whose selected predictions fit the in-memory budget, aligned to the
    store's param chunks where a chunk is within 4 budgets.

    DESIGN CHOICE: one dask computation per group. A store written by path tasks is chunked
    by splits (every param in one chunk), so a block of params needs every chunk: one graph
    over all params would hold the whole selection in memory at once (2.3 GiB for a 10^6-fit
    float32 cube). Per group, memory stays near the budget; each chunk is read once per group.
    """

    budget = config.get("cvflow.reduce.in-memory-bytes")
    n_params, chunk = data.shape[0], max(data.chunks[0])
    per_param = data.dtype.itemsize * int(np.prod(data.shape[1:]))
    size = max(1, budget // max(per_param, 1))
    if size >= chunk or chunk * per_param <= 4 * budget:
        size = max(size - size % chunk, chunk)       # whole chunks: each read once
    return [slice(p0, min(p0 + size, n_params)) for p0 in range(0, n_params, size)]


def fold_membership(cube: xr.Dataset) -> xr.DataArray:
    """1.0 where sample i is in fold j of repeat r, else 0.0; dims (repeat, outer, sample)."""
    fold = cube["fold"].values
    k = cube.sizes.get("outer", int(fold.max()) + 1)
    return xr.DataArray(np_roles.fold_members(fold, k).astype(np.float64),
                        dims=("repeat", "outer", "sample"))


def analysis_weights(cube: xr.Dataset) -> xr.DataArray:
    """1.0 on the analysis samples D, 0.0 on held-out test samples; dims (sample,)."""
    return xr.DataArray((~cube["is_test"].values).astype(np.float64), dims="sample")


GroupsOption = str     # "auto" (cluster-robust when the cube stores groups) or "ignore"


def analysis_groups(cube: xr.Dataset, groups: GroupsOption = "auto", *, what: str
                    ) -> tuple[np.ndarray | None, list[dict]]:
    """Cluster codes (0..G−1) of the analysis samples in sample order, and warnings.

    None (inference treats samples as independent) when ``groups="ignore"`` or the cube stores
    no ``groups`` variable; a store whose workflow names a group column or the group splitter
    but that keeps no labels (written before cvflow stored them) says so in a warning. Warns
    ``few_groups`` when G is small (:func:`guardrails.group_count`).
    """
    from . import guardrails

    if groups == "ignore":
        return None, []
    if "groups" not in cube.variables:
        try:
            wf = json.loads(cube.attrs.get("workflow") or "{}")
        except (TypeError, ValueError):
            wf = {}
        data, design = wf.get("data") or {}, wf.get("design") or {}
        if isinstance(data, dict) and data.get("groups") is not None \
                or isinstance(design, dict) and design.get("splitter") == "group":
            return None, [guardrails.warning(
                "groups_not_stored", f"{what}: the workflow has groups but this store keeps no "
                "group labels (written by an older cvflow), so samples are treated as "
                "independent and intervals may be too narrow; run the workflow again on a new "
                "store to get cluster-robust inference")]
        return None, []
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    codes, count = np_roles.group_codes(np.asarray(cube["groups"].values)[analysis])
    return codes, guardrails.group_count(count, what)


def fold_level_groups(cube: xr.Dataset, what: str) -> tuple[dict, list[dict]]:
    """For the tests on fold-level values (corrected_t, paired_5x2cv) on grouped data: attrs
    ``groups`` (G) and ``inference``, and ``groups_cross_folds`` when a group's samples sit
    in more than one fold of a repeat.

    DESIGN CHOICE: these tests are left as they are on grouped data. When every group lies
    within one fold (``splitter: group``), a fold score averages whole groups the fold model
    never saw, so the fold-level values already carry the between-group variation and their
    sample variance estimates it (measured: tests/test_grouped_coverage.py, corrected_t keeps
    its usual conservative coverage). When groups cross folds, every fold shares the group
    effects, the fold-level values vary less than their mean does, and the test is liberal
    (measured there too): that case gets the warning.
    """
    from . import guardrails

    codes, warnings = analysis_groups(cube, "auto", what=what)
    if codes is None:
        return {}, warnings
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    fold = np.asarray(cube["fold"].values)[:, analysis]
    count = int(codes.max()) + 1
    spread = _groups_split(codes, fold, count)
    if spread:
        warnings.append(guardrails.warning(
            "groups_cross_folds", f"{what}: {spread} of {count} groups have samples in more than "
            "one fold, so every fold shares their group effects and the fold-level test is too "
            "liberal; use design.splitter: group (or wald_cv, cluster-robust)",
            groups_split=spread))
        inference = "fold-level values; groups cross folds (liberal)"
    else:
        inference = "fold-level values over whole groups (group-aligned folds)"
    return {"groups": count, "inference": inference}, warnings


def _groups_split(codes: np.ndarray, fold: np.ndarray, count: int) -> int:
    """How many groups have samples in more than one fold of some repeat (fold (R, n))."""
    split = np.zeros(count, dtype=bool)
    for labels in fold:
        first = np.full(count, -1)
        first[codes] = labels
        split |= np.bincount(codes, weights=(labels != first[codes]), minlength=count) > 0
    return int(split.sum())


def weighted_sum(values: xr.DataArray, weights: xr.DataArray, dim: str = "sample") -> xr.DataArray:
    return xr.dot(values.where(weights > 0, 0.0), weights, dim=dim)


def more_rows(total: int, shown: int) -> list[str]:
    """The line a text report ends a cut table with: "... and N more", or nothing."""
    return [] if total <= shown else [f"  ... and {total - shown} more "
                                      "(cvflow report --json lists every param)"]


def param_coords(cube: xr.Dataset) -> dict:
    """The coordinates on ``param`` (learner, output, param_json, hyperparameters)."""
    return {k: c for k, c in cube.coords.items() if c.dims == ("param",)}


