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
- a workflow param equal to a stored one (1 and 1.0 alike, :func:`param_key`) is the stored
  one: matched, not refitted, not listed twice;
- params or splits the store has but the workflow no longer asks for are **kept**;
- the loss and the estimators (and their options) are the last workflow's: a rerun that only
  changes them fits nothing and rewrites the store's ``workflow``, ``loss`` and ``estimators``
  attributes (estimators it no longer names stay listed after its own, as for an extension),
  so a later ``cvflow report STORE`` reduces as that run's closing report did.

DESIGN CHOICE: removed params are kept, not refused and not dropped. Their fits are valid
(same data, folds and fixed params), dropping them would destroy work, and refusing would
force the user to carry every old value in the YAML for ever. But they are not the study the
workflow describes: the store records the workflow's params (attribute ``workflow_params``)
and reports, selections and nested estimators use those only
(:func:`cvflow.report.workflow_view`), unless asked for every param (``cvflow report
--all-params``, ``StudyResult(..., all_params=True)``; ``cvflow.open`` gives every param).

Anything else (other data, folds, seeds, a learner's estimator / fixed params / output, a
different subset design when the store already holds subset fits) is refused with a
:class:`~cvflow.errors.StoreError` naming the first key that differs; ``--overwrite`` refits.

This module is the policy (what may change and the merged params and design); the store
operation is :func:`cvflow.store.creation.grow`, fed the merged :func:`cvflow.store.creation.cube_template`, so
a store is encoded by one function whether created or extended, and read by one
(:func:`cvflow.store.cube.open_cube`).

Chunks never change. After an append, the first new block may share a chunk with stored fits
(e.g. params 16-19 stored, 20-23 new, chunks of 8). The engine still submits exactly one task
per chunk-aligned block; that task fits only the (param, split) cells not ``done``
(:func:`cvflow.execution.run.fit_missing`), reads the stored cells of its own chunk and writes them
back unchanged, so one writer owns each chunk and the old predictions are byte-identical.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

import numpy as np
import xarray as xr

from ..store import creation, cube as cube_store, writes
from ..workflow.designs import Design
from ..errors import OTHER_STORE, OVERWRITE, StoreError
from ..store.attributes import LEARNERS_ATTR, WORKFLOW_PARAMS_ATTR
from ..objects import init_signature
from ..workflow.params import Param, import_estimator
from ..trust import listed, param_code, untrusted, workflow_code

log = logging.getLogger(__name__)

# what a rerun may change without a fit (the reduction: loss, estimators and their options);
# the store takes the last workflow's, so `cvflow report STORE` reduces as that run did
REDUCTION_ATTRS = ("workflow", "loss", "estimators")


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


def _refuse(path: str, what: str, diff: str) -> None:
    raise StoreError(
        f"store: {path} holds fits of another workflow ({what} differ: {diff}); its fits "
        f"would be invalid; use {OTHER_STORE}, or pass {OVERWRITE} to refit everything")


def check_compatible(path: str, workflow, study, cube: xr.Dataset) -> dict:
    """Refuse a workflow whose stored fits would be invalid; return the merged learner specs."""
    attrs = cube.attrs
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
    subset_diff = _first_difference(old_subset, new_subset, "design.subset")
    if cube["subset_split"].size and subset_diff:
        _refuse(path, "subset design", subset_diff)
    old_dtype = (old_cfg.get("execution") or {}).get("dtype", "float64")
    if old_dtype != workflow.execution.get("dtype", "float64"):
        _refuse(path, "dtype", f"execution.dtype: {old_dtype!r} -> "
                f"{workflow.execution.get('dtype', 'float64')!r}")
    old_seed = (old_cfg.get("execution") or {}).get("fit_seed")
    if old_seed != workflow.execution.get("fit_seed"):
        _refuse(path, "fit seeds", f"execution.fit_seed: {old_seed!r} -> "
                f"{workflow.execution.get('fit_seed')!r}")
    # the fit-time scores are stored per fit: other scorers would leave stored fits unscored
    for key in ("scorers", "train_scores"):
        diff = _first_difference(old_cfg.get(key), new_cfg.get(key), key)
        if diff:
            _refuse(path, "scorers", diff)
    if "scorer" in cube.coords and [str(s) for s in cube["scorer"].values] != study.scorer_names:
        _refuse(path, "scorers", f"scores {[str(s) for s in cube['scorer'].values]} -> "
                f"{study.scorer_names}")
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


# DESIGN CHOICE: scikit-learn reads an int and a float of the same value alike (alpha=1 is
# alpha=1.0: the fits are bitwise equal), so a grid repeating a stored value as 1 where the
# store has 1.0 (a YAML list after a logspace, a Python range after a numpy array) matches the
# stored param instead of refitting it. Except where scikit-learn reads them differently: a
# count or a fraction (max_features=1 is one feature, 1.0 all of them). Those names keep
# their type; a new one of that kind costs a refit, never a wrong match.
COUNT_OR_FRACTION = frozenset({
    "max_features", "max_samples", "min_samples_split", "min_samples_leaf", "max_df", "min_df",
    "n_components", "train_size", "test_size", "max_leaf_nodes", "min_weight_fraction_leaf",
    "n_nonzero_coefs", "subsample", "n_neighbors", "max_bins", "n_quantiles"})


def _canonical(value, name: str = ""):
    """``value`` with every int that scikit-learn reads as a float written as a float."""
    if isinstance(value, dict):
        return {k: _canonical(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v, name) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) \
            and name.rpartition("__")[2] not in COUNT_OR_FRACTION:
        return float(value)
    return value


JSON_SCALARS = (str, int, float, bool, type(None))


def defaults_of(params: list[Param]) -> dict[str, dict]:
    """The constructor defaults (plain values only) of the estimator classes ``params`` name,
    by dotted path: the workflow's own classes (imported by the workflow anyway; a store's
    other classes are never imported to match them, :mod:`cvflow.trust`)."""
    out: dict[str, dict] = {}
    for p in params:
        if p.estimator in out:
            continue
        try:
            cls = type(p.source[0]) if p.source is not None else import_estimator(p.estimator)
        except Exception:  # noqa: BLE001 - unimportable: matched by its spelling only
            out[p.estimator] = {}
            continue
        signature = init_signature(cls)
        out[p.estimator] = {} if signature is None else {
            k: v.default for k, v in signature.parameters.items()
            if isinstance(v.default, JSON_SCALARS)}
    return out


def _is_default(name: str, value, defaults: dict) -> bool:
    return name in defaults and json.dumps(_canonical(value, name)) == json.dumps(
        _canonical(defaults[name], name))


def param_key(text: str, defaults: dict[str, dict] | None = None) -> str:
    """The matching key of a param's JSON: equal keys are the same fits (see above). With
    ``defaults`` (:func:`defaults_of`), a setting equal to its estimator's constructor default
    is left out: ``Ridge(solver="auto")`` is ``Ridge()``, as scikit-learn builds them alike."""
    setting = json.loads(text)
    own = (defaults or {}).get(setting["estimator"]) or {}
    setting["params"] = _canonical({k: v for k, v in setting["params"].items()
                                    if not _is_default(k, v, own)})
    return json.dumps(setting, sort_keys=True)


def _as_stored(param: Param, text: str) -> Param:
    """The workflow's ``param`` with the stored param's spelling of its values (``text``), so
    its JSON, fit seeds and coordinates stay the store's: a default the workflow spells out
    and the store does not is left out, one the store spells out is kept (as fixed)."""
    settings = json.loads(text)["params"]
    given = param.settings()
    return replace(param, fixed={**{k: v for k, v in settings.items() if k not in given},
                                 **{k: settings[k] for k in param.fixed if k in settings}},
                   hyper={k: settings[k] for k in param.hyper if k in settings})


def store_params(cube: xr.Dataset, params: list[Param], specs: dict) -> tuple[list[Param], int]:
    """The store-ordered params (stored ones first, new ones appended) and the stored count.

    A workflow param equal to a stored one (:func:`param_key`) is that stored param: not
    appended, not refitted. Blank ``param_json`` entries at the end (an append interrupted
    before its coordinates were written) are free slots and are filled again.
    """
    stored = [str(v) for v in cube["param_json"].values]
    n_old = len(stored)
    while n_old and not stored[n_old - 1]:
        n_old -= 1
    stored = stored[:n_old]
    if "" in stored:
        raise StoreError("store: param_json has blank entries before the last param; the "
                         f"store is damaged, pass {OVERWRITE} to refit")
    defaults = defaults_of(params)
    by_key = {param_key(p.to_json(), defaults): p for p in params}
    keys = [param_key(j, defaults) for j in stored]
    ordered = [_as_stored(by_key[k], j) if k in by_key else _param_from_json(j, specs)
               for k, j in zip(keys, stored)]
    known = set(keys)
    ordered += [p for p in params if param_key(p.to_json(), defaults) not in known]
    return ordered, n_old


def workflow_params(params: list[Param], workflow_params: list[Param]) -> list[int]:
    """The store indices of the workflow's params (``params`` in store order)."""
    defaults = defaults_of(workflow_params)
    keys = {param_key(p.to_json(), defaults) for p in workflow_params}
    return [h for h, p in enumerate(params) if param_key(p.to_json(), defaults) in keys]


def check_kept_code(path: str, cube: xr.Dataset, stored: list[Param], workflow) -> None:
    """Refuse to fit the params of a learner the workflow does not list (kept from an earlier
    workflow, or another author's) when fitting them would import code the workflow does not
    name and that is not trusted by default: a store is data (:mod:`cvflow.trust`).

    Their finished fits stay and are reported; only fits not done would run their code.
    """
    listed_learners = {p.learner for p in workflow.params}
    named = list(workflow_code(workflow.config))
    done = np.asarray(cube["done"].values, dtype=bool)
    for h, param in enumerate(stored):
        if param.learner in listed_learners or done[h].all():
            continue
        refused = untrusted(param_code(json.loads(param.to_json())), named)
        if refused:
            raise StoreError(
                f"store: {path} holds fits not done of learner {param.learner!r}, which this "
                f"workflow does not list; fitting them would import code the store names "
                f"({listed(refused)}), and a store is data: add the learner to the workflow "
                f"(a workflow file is code) or use {OTHER_STORE}")


def check_param_coords(path: str, cube: xr.Dataset, params: list[Param]) -> None:
    """Refuse a hyperparameter stored as numbers that the new grid gives as strings (or back)."""
    for name, (_, values) in cube_store.param_coords(params).items():
        if name in cube.coords:
            old_kind = "f" if cube[name].dtype.kind == "f" else "s"
            new_kind = "f" if np.asarray(values).dtype.kind == "f" else "s"
            if old_kind != new_kind:
                raise StoreError(
                    f"store: {path}: hyperparameter {name!r} holds "
                    f"{'numbers' if old_kind == 'f' else 'strings'} in the store but the new grid "
                    f"gives {'numbers' if new_kind == 'f' else 'strings'}; use {OTHER_STORE}")


# ---------------------------------------------------------------------------------------------
# splits


def _strings(values) -> np.ndarray:
    """A zarr string array (numpy StringDType) as an object array of str, same shape."""
    values = np.asarray(values)
    return np.array([str(v) for v in values.ravel()], dtype=object).reshape(values.shape)


def _row_keys(train: np.ndarray) -> list[bytes]:
    return [np.packbits(row).tobytes() for row in np.asarray(train, dtype=bool)]


def store_design(cube: xr.Dataset, design: Design) -> tuple[Design, int]:
    """The store-ordered design: stored splits first, the workflow's new ones appended.

    Role tables merge the stored entries with the workflow's (mapped to store indices).
    Returns (design, number of stored splits).
    """
    old_train = cube["train"].values
    n_old = old_train.shape[0]
    index = {k: s for s, k in enumerate(_row_keys(old_train))}
    new_keys = _row_keys(design.train)
    mapping = np.empty(design.n_splits, dtype=np.int64)
    appended: list[int] = []
    for s, key in enumerate(new_keys):
        if key not in index:
            index[key] = n_old + len(appended)
            appended.append(s)
        mapping[s] = index[key]

    def remap(table: np.ndarray) -> np.ndarray:
        table = np.asarray(table, dtype=np.int64)
        return np.where(table >= 0, mapping[np.maximum(table, 0)], -1).astype(np.int32)

    def merge(name: str, new: np.ndarray) -> np.ndarray:
        old = np.asarray(cube[name].values, dtype=np.int32)
        new = remap(new)
        if old.size == 0:
            return new
        if new.size == 0:
            return old
        if old.shape != new.shape:
            raise StoreError(f"store: {name} has shape {old.shape} in the store but "
                             f"{new.shape} in the workflow's design; pass {OVERWRITE} to refit")
        return np.where(old >= 0, old, new)

    full_old = int(cube.attrs.get("full_split", -1))
    app = np.asarray(appended, dtype=np.int64)
    merged = Design(
        train=np.concatenate([old_train, design.train[app]]),
        kind=np.concatenate([_strings(cube["split_kind"].values).astype(str), design.kind[app]]),
        repeat=np.concatenate([cube["split_repeat"].values, design.repeat[app]]),
        outer=np.concatenate([cube["split_outer"].values, design.outer[app]]),
        inner=np.concatenate([cube["split_inner"].values, design.inner[app]]),
        group=np.concatenate([cube["split_group"].values, design.group[app]]),
        fold=design.fold,
        fold_split=merge("fold_split", design.fold_split),
        pair_split=merge("pair_split", design.pair_split),
        full_split=full_old if full_old >= 0 else (int(mapping[design.full_split])
                                                   if design.full_split >= 0 else -1),
        subset_split=merge("subset_split", design.subset_split),
        roles_requested=design.roles_requested,
    )
    return merged, n_old


# ---------------------------------------------------------------------------------------------
# the entry point the engine calls


@dataclass(frozen=True)
class Extension:
    """The store's view of a workflow: params and design in store order (stored ones first)."""

    params: list[Param]
    design: Design
    n_stored_params: int
    n_stored_splits: int
    attrs: dict             # the workflow's attributes, merged with the store's
    changes: bool           # the store must change (new params, splits or attributes)


def plan(path: str, workflow, study) -> Extension:
    """Check the workflow against its existing store; what the store becomes (nothing written).

    Raises :class:`StoreError` when the change would invalidate stored fits.
    """
    cube = cube_store.open_cube(path, scores=False)     # a damaged score chunk is refitted
    specs = check_compatible(path, workflow, study, cube)
    params, n_params = store_params(cube, study.params, specs)
    check_kept_code(path, cube, params[:n_params], workflow)
    check_param_coords(path, cube, params)
    design, n_splits = store_design(cube, study.design)
    attrs = {**study.attrs,
             "estimators": _merged_estimators(cube.attrs.get("estimators"),
                                              study.attrs["estimators"]),
             LEARNERS_ATTR: json.dumps(specs, sort_keys=True, default=str),
             WORKFLOW_PARAMS_ATTR: json.dumps(workflow_params(params, study.params))}
    listed = json.loads(cube.attrs.get(WORKFLOW_PARAMS_ATTR) or json.dumps(list(range(n_params))))
    changes = (len(params) > n_params or design.n_splits > n_splits
               or cube.attrs.get("workflow_hash") != study.attrs["workflow_hash"]
               or listed != json.loads(attrs[WORKFLOW_PARAMS_ATTR]))
    return Extension(params, replace(design, fold=study.design.fold), n_params, n_splits, attrs,
                     changes)


def reconcile(path: str, workflow, study) -> tuple[list[Param], Design]:
    """Check the workflow against its existing store and append what is new.

    Returns the store-ordered params and design the engine must use (their indices are the
    store's). Raises :class:`StoreError` when the change would invalidate stored fits.
    """
    cut = creation.grow_was_cut(path)      # before the store is read: its metadata put back
    ext = plan(path, workflow, study)
    if cut:
        # DESIGN CHOICE: a grow cut after it appended params or splits leaves a store whose
        # role tables and attributes are the old ones: grown again from the template, it is
        # finished (tests/test_extend.py, the cut-grow test), whatever else changed or not
        log.warning("store %s: its last extension was cut; finishing it", path)
    if ext.changes or cut:
        log.info("store %s: appending %d params and %d splits", path,
                 len(ext.params) - ext.n_stored_params, ext.design.n_splits - ext.n_stored_splits)
        chunks = cube_store.block_chunks(path)
        dtype = (workflow.execution or {}).get("dtype", "float64")
        template = creation.cube_template(study.data, ext.design, ext.params, attrs=ext.attrs,
                                            chunks=chunks, dtype=dtype, scorers=study.scorer_names,
                                            train_scores=study.train_scores)
        creation.grow(path, template, n_params=ext.n_stored_params,
                        n_splits=ext.n_stored_splits)
    else:
        # DESIGN CHOICE: a rerun that changes only the reduction (loss, estimators) updates the
        # store's record of it: the store then answers `cvflow report` as the last run's closing
        # report did (before, the attributes were rewritten only when params or splits were
        # appended, so a new loss stuck or not depending on the estimators' splits;
        # tests/test_extend.py::test_rerun_with_another_loss_and_estimators_updates_the_report)
        new = {k: ext.attrs[k] for k in REDUCTION_ATTRS}
        if any(cube_store.read_attr(path, k) != v for k, v in new.items()):
            writes.write_attrs(path, new)
    return ext.params, ext.design


def _merged_estimators(old: str | None, new: str) -> str:
    """The workflow's estimator list, followed by stored ones it no longer names."""
    new_list = json.loads(new)
    names = {e[0] for e in new_list}
    old_list = json.loads(old or "[]")
    return json.dumps(new_list + [e for e in old_list if e[0] not in names])
