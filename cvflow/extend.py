"""Extending a finished study: new params (grid values, hyperparameters, learners) and new
splits (estimators that need other training sets) appended to an existing store.

Re-running a workflow on its store goes through :func:`reconcile`. Stored fits stay valid as
long as the data, the folds (design: folds, repeats, splitter, seed, shuffle), the task, the
dtype and each stored learner's estimator, fixed params and output are the same; then

- params of the workflow that the store lacks are **appended** along ``param`` (old params
  keep their indices, so every stored byte of ``pred`` keeps its meaning);
- splits the workflow's estimators need that the store lacks (pair splits for the nested
  estimators, subset splits for ``ustat``) are **appended** along ``split``; the role tables
  ``fold_split``, ``pair_split`` and ``subset_split`` are rewritten with the store's indices;
- params or splits the store has but the workflow no longer asks for are **kept**.

DESIGN CHOICE: removed params are kept, not refused and not dropped. Their fits are valid
(same data, folds and fixed params), dropping them would destroy work, and refusing would
force the user to carry every old value in the YAML for ever. Reports cover every param in
the store; select a sub-grid with ``cube.isel(param=...)`` / ``cube.where(...)`` in Python.

Anything else (other data, folds, seeds, a learner's estimator / fixed params / output, a
different subset design when the store already holds subset fits) is refused with a
:class:`~cvflow.errors.StoreError` naming the first key that differs; ``--overwrite`` refits.

Chunks never change. After an append, the first new block may share a chunk with stored fits
(e.g. params 16-19 stored, 20-23 new, chunks of 8). The engine still submits exactly one task
per chunk-aligned block; that task fits only the (param, split) cells not ``done``
(:func:`fit_missing`), reads the stored cells of its own chunk and writes them back unchanged,
so one writer owns each chunk and the old predictions are byte-identical.
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import zarr

from . import store as cube_store
from .designs import Design
from .errors import StoreError
from .learners import Param, fit_block

log = logging.getLogger(__name__)

PARAM_BLOCK = ("pred", "done", "failed", "error", "fit_seconds")
LEARNERS_ATTR = "learners"   # {name: {estimator, params, output}} of every learner ever stored


# ---------------------------------------------------------------------------------------------
# comparing a workflow with a store


def _first_difference(old, new, key: str = "") -> str | None:
    """Dotted key of the first difference between two JSON-like values (None if equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            d = _first_difference(old.get(k), new.get(k), f"{key}.{k}" if key else str(k))
            if d:
                return d
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            d = _first_difference(a, b, f"{key}[{i}]")
            if d:
                return d
        return None
    same = json.dumps(old, sort_keys=True, default=str) == json.dumps(new, sort_keys=True, default=str)
    return None if same else f"{key}: {old!r} -> {new!r}"


def _learner_specs(config: dict) -> dict:
    return {str(l.get("name") or str(l["estimator"]).rpartition(".")[2]):
            {"estimator": l["estimator"], "params": l.get("params") or {}, "output": l.get("output")}
            for l in config.get("learners", [])}


def _stored_learners(attrs) -> dict:
    if LEARNERS_ATTR in attrs:
        return json.loads(attrs[LEARNERS_ATTR])
    return _learner_specs(json.loads(attrs.get("workflow") or "{}"))


def _refuse(path: Path, what: str, diff: str) -> None:
    raise StoreError(
        f"store: {path} holds fits of another workflow ({what} differ: {diff}); its fits "
        "would be invalid; use another --store, or pass --overwrite to refit everything")


def check_compatible(path: Path, workflow, study, group) -> dict:
    """Refuse a workflow whose stored fits would be invalid; return the merged learner specs."""
    attrs = group.attrs
    if attrs.get("data_hash") != study.attrs["data_hash"]:
        _refuse(path, "data", f"data hash {attrs.get('data_hash')} -> {study.attrs['data_hash']}")
    old_cfg = json.loads(attrs.get("workflow") or "{}")
    new_cfg = workflow.config
    for key in ("data", "task"):
        diff = _first_difference(old_cfg.get(key), new_cfg.get(key), key)
        if diff:
            _refuse(path, "data" if key == "data" else "task", diff)
    old_design, new_design = dict(old_cfg.get("design") or {}), dict(new_cfg.get("design") or {})
    old_subset, new_subset = old_design.pop("subset", None), new_design.pop("subset", None)
    diff = _first_difference(old_design, new_design, "design")
    if diff:
        _refuse(path, "folds, seeds", diff)
    # the subset design matters only once subset splits are stored
    if group["subset_split"].size and _first_difference(old_subset, new_subset, "design.subset"):
        _refuse(path, "subset design", _first_difference(old_subset, new_subset, "design.subset"))
    old_dtype = (old_cfg.get("execution") or {}).get("dtype", "float64")
    if old_dtype != workflow.execution.get("dtype", "float64"):
        _refuse(path, "dtype", f"execution.dtype: {old_dtype!r} -> "
                f"{workflow.execution.get('dtype', 'float64')!r}")
    old_seed = (old_cfg.get("execution") or {}).get("fit_seed")
    if old_seed != workflow.execution.get("fit_seed"):
        _refuse(path, "fit seeds", f"execution.fit_seed: {old_seed!r} -> "
                f"{workflow.execution.get('fit_seed')!r}")
    stored = _stored_learners(attrs)
    merged = dict(stored)
    for name, spec in _learner_specs(new_cfg).items():
        if name in stored:
            diff = _first_difference(stored[name], spec, f"learners[{name}]")
            if diff:
                _refuse(path, f"learner {name!r} (estimator, fixed params or output)", diff)
        merged[name] = spec
    return merged


# ---------------------------------------------------------------------------------------------
# params


def _param_from_json(text: str, specs: dict) -> Param:
    """A stored param (one the workflow no longer lists) rebuilt from its JSON and learner."""
    d = json.loads(text)
    fixed = dict((specs.get(d["learner"]) or {}).get("params") or {})
    hyper = {k: v for k, v in d["params"].items() if k not in fixed or fixed[k] != v}
    return Param(d["learner"], d["estimator"], {k: v for k, v in fixed.items()
                                                 if k in d["params"]}, hyper, d["output"])


def store_params(group, params: list[Param], specs: dict) -> tuple[list[Param], int]:
    """The store-ordered params (stored ones first, new ones appended) and the stored count.

    Blank ``param_json`` entries at the end (an append interrupted before its coordinates
    were written) are free slots and are filled again.
    """
    stored = [str(v) for v in group["param_json"][...]]
    n_old = len(stored)
    while n_old and not stored[n_old - 1]:
        n_old -= 1
    stored = stored[:n_old]
    if "" in stored:
        raise StoreError("store: param_json has blank entries before the last param; the "
                         "store is damaged, pass --overwrite to refit")
    by_json = {p.to_json(): p for p in params}
    ordered = [by_json.get(j) or _param_from_json(j, specs) for j in stored]
    known = set(stored)
    ordered += [p for p in params if p.to_json() not in known]
    return ordered, n_old


def _write_param_coords(path: Path, group, params: list[Param]) -> None:
    """Resize every param-dim array to len(params) and write the param coordinates."""
    import xarray as xr

    n = len(params)
    coords = cube_store.param_coords(params)
    for name, (_, values) in coords.items():
        if name in group and group[name].shape != (n,):
            group[name].resize((n,))
        if name in group:
            old_kind = "f" if group[name].dtype.kind == "f" else "s"
            new_kind = "f" if np.asarray(values).dtype.kind == "f" else "s"
            if old_kind != new_kind:
                raise StoreError(
                    f"store: {path}: hyperparameter {name!r} holds "
                    f"{'numbers' if old_kind == 'f' else 'strings'} in the store but the new grid "
                    f"gives {'numbers' if new_kind == 'f' else 'strings'}; use another --store")
    for name in PARAM_BLOCK:
        arr = group[name]
        if arr.shape[0] != n:
            arr.resize((n,) + arr.shape[1:])
    # xarray writes the coordinate arrays (new hyperparameter names included) with its encoding;
    # it replaces the group's attributes with the Dataset's, so pass them through unchanged
    xr.Dataset(coords=coords, attrs=dict(group.attrs)).to_zarr(
        str(path), mode="a", zarr_format=3, consolidated=False)
    group = zarr.open_group(str(path), mode="r+")
    for name in PARAM_BLOCK:
        attrs = group[name].attrs
        listed = str(attrs.get("coordinates", "")).split()
        attrs["coordinates"] = " ".join(sorted(set(listed) | set(coords)))


# ---------------------------------------------------------------------------------------------
# splits


def _strings(values) -> np.ndarray:
    """A zarr string array (numpy StringDType) as an object array of str, same shape."""
    values = np.asarray(values)
    return np.array([str(v) for v in values.ravel()], dtype=object).reshape(values.shape)


def _row_keys(train: np.ndarray) -> list[bytes]:
    return [np.packbits(row).tobytes() for row in np.asarray(train, dtype=bool)]


def store_design(group, design: Design) -> tuple[Design, int]:
    """The store-ordered design: stored splits first, the workflow's new ones appended.

    Role tables merge the stored entries with the workflow's (mapped to store indices).
    Returns (design, number of stored splits).
    """
    old_train = group["train"][...]
    n_old = old_train.shape[0]
    index = {k: s for s, k in enumerate(_row_keys(old_train))}
    new_keys = _row_keys(design.train)
    mapping = np.empty(design.n_splits, dtype=np.int64)
    appended = []
    for s, key in enumerate(new_keys):
        if key not in index:
            index[key] = n_old + len(appended)
            appended.append(s)
        mapping[s] = index[key]

    def remap(table: np.ndarray) -> np.ndarray:
        table = np.asarray(table, dtype=np.int64)
        return np.where(table >= 0, mapping[np.maximum(table, 0)], -1).astype(np.int32)

    def merge(name: str, new: np.ndarray) -> np.ndarray:
        old = np.asarray(group[name][...], dtype=np.int32)
        new = remap(new)
        if old.size == 0:
            return new
        if new.size == 0:
            return old
        if old.shape != new.shape:
            raise StoreError(f"store: {name} has shape {old.shape} in the store but "
                             f"{new.shape} in the workflow's design; pass --overwrite to refit")
        return np.where(old >= 0, old, new)

    full_old = int(group.attrs.get("full_split", -1))
    app = np.asarray(appended, dtype=np.int64)
    merged = Design(
        train=np.concatenate([old_train, design.train[app]]),
        kind=np.concatenate([_strings(group["split_kind"][...]).astype(str), design.kind[app]]),
        repeat=np.concatenate([group["split_repeat"][...], design.repeat[app]]),
        outer=np.concatenate([group["split_outer"][...], design.outer[app]]),
        inner=np.concatenate([group["split_inner"][...], design.inner[app]]),
        group=np.concatenate([group["split_group"][...], design.group[app]]),
        fold=design.fold,
        fold_split=merge("fold_split", design.fold_split),
        pair_split=merge("pair_split", design.pair_split),
        full_split=full_old if full_old >= 0 else (int(mapping[design.full_split])
                                                   if design.full_split >= 0 else -1),
        subset_split=merge("subset_split", design.subset_split),
        roles_requested=design.roles_requested,
    )
    return merged, n_old


def _write_splits(path: Path, group, design: Design, n_old: int) -> None:
    """Resize the split-dim arrays and write the appended splits and the merged role tables."""
    n = design.n_splits
    for name in PARAM_BLOCK:
        arr = group[name]
        if arr.shape[1] != n:
            arr.resize((arr.shape[0], n) + arr.shape[2:])
    tail = slice(n_old, n)
    for name, values in (("train", design.train), ("split_kind", design.kind.astype(object)),
                         ("split_repeat", design.repeat), ("split_outer", design.outer),
                         ("split_inner", design.inner), ("split_group", design.group)):
        arr = group[name]
        arr.resize((n,) + arr.shape[1:])
        arr[tail] = values[tail]
    for name in ("fold_split", "pair_split"):
        group[name][...] = getattr(design, name)
    sub = design.subset_split
    if group["subset_split"].shape != sub.shape:
        group["subset_split"].resize(sub.shape)
    if sub.size:
        group["subset_split"][...] = sub
    group.attrs["full_split"] = int(design.full_split)


# ---------------------------------------------------------------------------------------------
# the entry point the engine calls


def reconcile(path: str | Path, workflow, study) -> tuple[list[Param], Design]:
    """Check the workflow against its existing store and append what is new.

    Returns the store-ordered params and design the engine must use (their indices are the
    store's). Raises :class:`StoreError` when the change would invalidate stored fits.
    """
    path = Path(path)
    group = zarr.open_group(str(path), mode="r")
    specs = check_compatible(path, workflow, study, group)
    params, n_old_params = store_params(group, study.params, specs)
    design, n_old_splits = store_design(group, study.design)
    new_params = len(params) - n_old_params
    new_splits = design.n_splits - n_old_splits
    shape_ok = group["done"].shape == (len(params), design.n_splits)
    if new_params or new_splits or not shape_ok:
        log.info("store %s: appending %d params and %d splits", path, new_params, new_splits)
        group = zarr.open_group(str(path), mode="r+")
        if new_splits or group["done"].shape[1] != design.n_splits:
            _write_splits(path, group, design, n_old_splits)
        _write_param_coords(path, group, params)
        group = zarr.open_group(str(path), mode="r+")
    if new_params or new_splits or group.attrs.get("workflow_hash") != study.attrs["workflow_hash"]:
        group = zarr.open_group(str(path), mode="r+")
        group.attrs.update({
            "workflow": study.attrs["workflow"], "workflow_hash": study.attrs["workflow_hash"],
            "estimators": _merged_estimators(group.attrs.get("estimators"),
                                             study.attrs["estimators"]),
            LEARNERS_ATTR: json.dumps(specs, sort_keys=True, default=str),
        })
    return params, replace(design, fold=study.design.fold)


def _merged_estimators(old: str | None, new: str) -> str:
    """The workflow's estimator list, followed by stored ones it no longer names."""
    new_list = json.loads(new)
    names = {e[0] for e in new_list}
    old_list = json.loads(old or "[]")
    return json.dumps(new_list + [e for e in old_list if e[0] not in names])


# ---------------------------------------------------------------------------------------------
# the task body for a block shared with stored fits


def fit_missing(store: str, params: list[Param], X, y, train: np.ndarray, params_slice: slice,
                splits_slice: slice, positive, path_aware: bool, todo: np.ndarray,
                sample_weight=None) -> cube_store.BlockResult:
    """Fit only the cells ``todo`` (params, splits) of a block; keep the stored ones.

    The stored cells of the block's chunk are read and returned unchanged, so the caller
    writes the whole chunk-aligned block (one writer per chunk) with the old bytes intact.
    Params needing the same splits are fitted together (path-aware groups stay intact).
    """
    group = zarr.open_group(str(store), mode="r")
    region = (params_slice, splits_slice)
    pred = np.array(group["pred"][region], dtype=np.float64)
    failed = np.array(group["failed"][region], dtype=bool)
    error = _strings(group["error"][region])
    seconds = np.array(group["fit_seconds"][region], dtype=np.float64)
    patterns: dict[tuple, list[int]] = {}
    for h in range(todo.shape[0]):
        cols = tuple(np.flatnonzero(todo[h]).tolist())
        if cols:
            patterns.setdefault(cols, []).append(h)
    for cols, rows in patterns.items():
        c, r = list(cols), list(rows)
        res = fit_block([params[h] for h in r], X, y, train[c], params_slice=slice(0, len(r)),
                        splits_slice=slice(0, len(c)), positive=positive,
                        path_aware=path_aware, sample_weight=sample_weight)
        ix = np.ix_(r, c)
        pred[ix] = res.pred
        failed[ix] = res.failed
        error[ix] = res.error
        seconds[ix] = res.fit_seconds
    dtype = group["pred"].dtype
    return cube_store.BlockResult(params_slice, splits_slice, pred.astype(dtype, copy=False),
                                  failed, error, seconds)
