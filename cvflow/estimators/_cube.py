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
from ..lazy import xarray as xr

from ..errors import InputError
from .cube_losses import pointwise
from .losses import Loss
from .memory import load_if_small
from ..store.memory import Variable
from . import np_roles
from .split_tables import full_split_index, has_splits, require  # noqa: F401 - the estimators' lookups
from . import guardrails


def at_splits(values: xr.DataArray, index: xr.DataArray) -> xr.DataArray:
    """Select ``values`` along ``split`` by an integer table (e.g. fold_split (repeat, outer)).

    The ``split`` dim is replaced by the table's dims. Entries < 0 (roles not in the design,
    the pair diagonal) give NaN. Lazy values stay lazy (one take along ``split``) unless the
    distinct splits selected fit the in-memory budget (``IN_MEMORY_BYTES``): then they are read
    once, each distinct split once.
    """
    idx = np.asarray(index.values)
    flat = np.where(idx < 0, 0, idx).ravel()
    if isinstance(values, Variable):          # a cube in memory: numpy, no Dataset
        axis = values.dims.index("split")
        data = np.take(values.values, flat, axis=axis)
        data = data.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])
        if (idx < 0).any():
            shape = (1,) * axis + idx.shape + (1,) * (data.ndim - axis - idx.ndim)
            data = np.where((idx >= 0).reshape(shape), data, np.nan)
        dims = values.dims[:axis] + tuple(index.dims) + values.dims[axis + 1:]
        return Variable(dims, data, values.cube, values.name)
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


def role_terms(cube: xr.Dataset, loss: str | None = None, *, roles, what: str,
               weights: np.ndarray | None = None, nan_rule: bool = True
               ) -> dict[str, np.ndarray]:
    """The per-param loss sums of :mod:`np_roles` for ``roles`` ("full", "fold", "pair",
    "oof", "change", "train").

    One pass over the splits the roles need (each needed chunk of ``pred`` read once, no
    other; :func:`cvflow.estimators.one_pass.split_sums`), memory bounded by the in-memory
    budget whatever the cube's size.
    "pair" and "oof" imply "fold" (the inner study's full fit is the fold fit); "oof" adds
    the out-of-fold losses ``oof_loss`` (P, R, n); "change" (implies "full" and "fold") adds
    ``fold_change``. Returns numpy arrays with ``param`` first (see the table in
    :mod:`cvflow.estimators.np_roles`) and ``missing`` (P,) bool.

    Within :func:`shared_terms` of this very cube, the terms of all the shared roles are
    computed once (one pass for every loss the block names, and one more for a loss it did
    not name) and each call gets the part it asks for.

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
        return rule(_terms(cube, [decl], roles, what, weights)[decl])
    shared = _SHARED.get()
    if shared is None or shared.cube is not cube or not roles <= shared.roles:
        return rule(_terms(cube, [decl], roles, what)[decl])
    if decl not in shared.terms:
        # the losses the block named and not yet computed ride along: one pass for all
        todo = [decl] + [d for d in shared.losses if d not in shared.terms and d != decl]
        shared.terms.update(_terms(cube, todo, shared.roles, what))
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

    def __init__(self, cube: xr.Dataset, roles: frozenset[str], losses: list[Loss]):
        self.cube, self.roles, self.losses = cube, roles, losses
        self.terms: dict = {}


_SHARED: ContextVar[_Shared | None] = ContextVar("cvflow_shared_terms", default=None)


@contextmanager
def shared_terms(cube: xr.Dataset, roles, losses=()):
    """Within the block, :func:`role_terms` of ``cube`` (this object, not a selection of it)
    computes the terms of every role of ``roles`` the cube has splits for once per loss, in
    one pass over ``pred``, when first asked, and returns each call the part it asks for.
    ``losses`` (names or declarations; None the cube's default): the losses the block will
    ask for, computed together in the first pass (a report of several losses reads ``pred``
    once); a per-fold metric among them is left to its estimators. Within a block of the
    same cube whose roles include these, the enclosing block's sums serve.

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
    enclosing = _SHARED.get()
    if enclosing is not None and enclosing.cube is cube and usable <= enclosing.roles:
        yield                            # a report of several losses already shares its sums
        return
    decls = []
    for loss in losses:
        try:
            decls.append(pointwise(cube, loss, "the report"))
        except InputError:           # a per-fold metric, or a loss the estimators refuse
            continue
    token = _SHARED.set(_Shared(cube, usable, list(dict.fromkeys(decls))))
    try:
        yield
    finally:
        _SHARED.reset(token)


def _terms(cube: xr.Dataset, decls: list[Loss], roles: frozenset[str], what: str,
           weights: np.ndarray | None = None) -> dict[Loss, dict[str, np.ndarray]]:
    """:func:`role_terms` before the NaN rule, for every loss of ``decls`` in one pass over
    ``pred`` (:func:`cvflow.estimators.one_pass.pass_terms`: each chunk read once)."""
    # DESIGN CHOICE: the pass engine (one_pass, pass_kernel: ~2 ms of import) is imported by
    # the first estimator that reads role terms; a SearchCV's fit reads none
    # (tests/test_startup.py NOT_FOR_A_KFOLD_SEARCH)
    from .one_pass import pass_terms

    return pass_terms(cube, decls, roles, what, weights)


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


