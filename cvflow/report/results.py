"""Reports from a cube: estimator results as JSON and text, and the store's status."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np
from ..lazy import xarray as xr

from .. import terminal
from ..errors import OVERWRITE, InputError, UntrustedCodeWarning
from ..store.schema import FITTED
from . import racing
from ..store.attributes import (RACING_ATTR, WORKFLOW_PARAMS_ATTR, check_newer, race_record,
                                saved_fits, unfilled)
from ..store.cube import read_attr, read_pred
from ..store.damage import metadata_damage, status_damage
from ..store.group import STORE_FORMAT_ATTR, marker, read_mask, read_where, stable
from ..store.location import exists, resolve
from .failures import group
from .racing import state_text
from ..estimators import guardrails, lookup, REGISTRY
# the loss sums (cvflow.estimators.shared_terms) import the losses, scikit-learn and scipy,
# when first read: `cvflow status` reads none
from .. import estimators as _estimators
from ..estimators.memory import fits_budget, is_lazy, load_if_small
from ..estimators.losses import names_code
from ..trust import ESTIMATOR, LOSS, how, is_user_estimator, trusted
from ..estimators.cube_losses import cube_loss
from ..workflow.spec import time_ordered

if TYPE_CHECKING:
    from ..trust import Trust


def requested_estimators(cube: xr.Dataset) -> list[tuple[str, dict]]:
    """The (name, options) list the workflow asked for."""
    raw = json.loads(cube.attrs.get("estimators") or '[["kfold", {}]]')
    return [(name, dict(options or {})) for name, options in raw]


class Results(dict):
    """Estimator name -> result Dataset, in the order asked, plus ``skipped``: name -> the
    one-line reason an estimator asked for was not computed (it does not take the loss, e.g.
    a per-fold metric such as ``roc_auc`` given to an estimator that averages per-sample
    losses). A plain dict everywhere else."""

    def __init__(self, *args, skipped: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.skipped: dict[str, str] = dict(skipped or {})


def workflow_view(cube: xr.Dataset, *, all_params: bool = False) -> xr.Dataset:
    """The cube restricted to the params its last workflow lists (every param with
    ``all_params``, or when the store records none).

    An extended store keeps the params a later workflow no longer lists
    (:mod:`cvflow.execution.extend`); they are not the study the workflow describes, so reports,
    selections and nested estimators leave them out unless asked. Param indices in the
    results then count the workflow's params.
    """
    listed = cube.attrs.get(WORKFLOW_PARAMS_ATTR)
    if listed is None:
        return cube
    index = json.loads(listed)
    out = cube.copy(deep=False) if all_params or len(index) == cube.sizes["param"] \
        else cube.isel(param=index)
    out.attrs = {k: v for k, v in cube.attrs.items() if k != WORKFLOW_PARAMS_ATTR}
    return out


def compute(cube: xr.Dataset, estimators: list | None = None, *,
            loss: str | None = None, overrides: dict | None = None,
            trust_code: Trust = False, all_params: bool = False) -> Results:
    """Run each requested estimator on the cube; ``overrides`` updates options per name.

    ``estimators`` (default: the ones the store's workflow asked for) lists names, or
    (name, options) pairs; a name alone takes the options the workflow gave it, if any, so
    ``estimators=["kfold", "corrected_kfold"]`` reports those two as the workflow set them.

    DESIGN CHOICE: an estimator that cannot reduce with ``loss`` (a per-fold metric such as
    ``roc_auc`` for one that averages per-sample losses, or time-ordered folds for one that
    assumes exchangeable samples) is skipped with its one-line reason in
    :attr:`Results.skipped`, and the others are computed: one estimator's limits do not take
    the report away. Only when every estimator is skipped is the first reason an InputError.
    On a raced store whose skipped fits are not filled (:mod:`cvflow.execution.race_runner`), an estimator a
    raced cube does not serve (its declaration's ``raced``) is skipped the same way.

    The params an extended store keeps but its workflow no longer lists are left out
    (:func:`workflow_view`) unless ``all_params``.

    Options (the stored ones and the overrides) go through each estimator's declared checks
    first, so a bad override is refused with one line before anything is read. A cube whose
    predictions fit the in-memory budget of the reducers is read once here, so the
    estimators share one read instead of each selecting its splits from disk, and the loss
    sums they declare (``terms``) are computed once for all of them
    (:func:`cvflow.estimators.shared_terms`), in one pass over ``pred`` on a big cube too.

    A store is data (:mod:`cvflow.trust`): a user estimator the store names is imported only
    when ``trust_code`` trusts it, else it is skipped with an
    :class:`~cvflow.errors.UntrustedCodeWarning` naming it; a user function as the store's
    default loss is refused (InputError) unless trusted. What the caller names himself
    (``estimators``, a name in ``overrides``, ``loss``) is his own choice and is imported.
    """
    raced = _raced_unfilled(cube)
    cube = workflow_view(cube, all_params=all_params)
    made = cube.attrs.get("workflow_dir")
    hint = f" (the store was made by a workflow in {terminal.visible(made)})" if made else ""
    stored_loss = cube.attrs.get("loss")
    if loss is None and names_code(stored_loss) and trusted(stored_loss, LOSS, trust_code):
        loss = stored_loss                  # trusted: as if the caller had named it
    try:
        decl, ordered = assumptions(cube, loss)
    except InputError as exc:
        raise InputError(f"{exc}{hint if loss == stored_loss else ''}") from None
    stored_options = dict(requested_estimators(cube))
    asked = [(e, stored_options.get(e, {})) if isinstance(e, str) else (e[0], dict(e[1] or {}))
             for e in estimators] if estimators else None
    own = set(overrides or {}) | {name for name, _ in asked or ()}
    todo, skipped = [], {}
    for name, options in asked or requested_estimators(cube):
        if is_user_estimator(name) and name not in own and not trusted(name, ESTIMATOR,
                                                                        trust_code):
            warnings.warn(f"store: estimators: {terminal.visible(name)} skipped: a user estimator the store names, "
                          f"not imported (a store is data); {how([name])}",
                          UntrustedCodeWarning, stacklevel=2)
            continue
        try:
            spec = lookup(name, where="store: estimators")
        except InputError as exc:
            raise InputError(f"{exc}{hint if name not in own else ''}") from None
        stored = spec.check_options(options, f"store: estimators.{name}")
        extra = spec.check_options((overrides or {}).get(name), f"--set {name}")
        why = spec.refusal(decl, ordered) or (
            f"{spec.name} needs every param on every split, but racing skipped the dropped "
            "params' later fits; `cvflow run` with racing: false fills them"
            if raced and not spec.raced else "")
        if why:
            skipped[spec.name] = why
            continue
        todo.append((spec, {**stored, **extra}))
    reported = [spec.name for spec, _ in todo] + list(skipped)
    unused = set(overrides or {}) - set(reported)
    if unused:
        whose = "the report's --estimators do" if asked else "the store's workflow does"
        raise InputError(f"--set {sorted(unused)[0]}: {whose} not ask for this "
                         f"estimator; it asks for {', '.join(reported)}")
    if skipped and not todo:
        raise InputError(next(iter(skipped.values())))
    cube = _pred_in_memory_if_small(cube)
    with _estimators.shared_terms(cube, {role for spec, _ in todo for role in spec.terms}):
        out = Results({spec.name: spec(cube, loss=loss, **options) for spec, options in todo},
                      skipped=skipped)
    if raced:
        for result in out.values():
            _racing_cause(result, cube)
    return out


def _racing_cause(result: xr.Dataset, cube: xr.Dataset) -> None:
    """On a raced store with skipped fits, a ``missing_fits`` warning names racing as a cause:
    "failed or not written yet" alone sent users looking for failures that never happened.

    DESIGN CHOICE: said here, where the race is known; the estimators count missing fits
    without knowing why they are missing.
    """

    warned = guardrails.read(result)
    if not any(w["code"] == "missing_fits" for w in warned):
        return
    race = race_record(cube)
    dropped = unfilled(race, np.asarray(cube["done"].values))
    for w in warned:
        if w["code"] == "missing_fits":
            w["message"] = w["message"].replace(
                "(failed or not written yet)",
                f"(racing dropped {dropped} param(s) before their later fits, see racing; or "
                "failed or not written yet)")
            w["racing_dropped"] = dropped
    result.attrs["warnings"] = json.dumps(warned)


def _raced_unfilled(cube: xr.Dataset) -> bool:
    """Whether racing skipped fits of this store that are still not done: then only the
    estimators a raced cube serves (``raced=True`` in their declaration) are computed."""
    race = race_record(cube)
    return bool(race) and saved_fits(race, np.asarray(cube["done"].values)) > 0


def compute_losses(cube: xr.Dataset, losses: list[str | None], estimators: list | None = None,
                   *, overrides: dict | None = None, trust_code: Trust = False,
                   all_params: bool = False) -> dict[str, Results]:
    """:func:`compute` for each loss of ``losses`` (several metrics at once, as
    ``cross_validate(scoring=[...])``): loss label -> :class:`Results`. The predictions are
    read once for all of them when they fit the reducers' in-memory budget.

    Examples
    --------
    >>> out = compute_losses(cvflow.open("study.zarr"), ["zero_one", "roc_auc"],
    ...                      ["kfold", "corrected_kfold"])          # doctest: +SKIP
    >>> out["roc_auc"].skipped["corrected_kfold"]                    # doctest: +SKIP
    "loss: 'roc_auc' is a per-fold metric, but corrected_kfold averages per-sample losses; ..."
    """

    cube = _pred_in_memory_if_small(workflow_view(cube, all_params=all_params))
    names = [e if isinstance(e, str) else e[0] for e in estimators] if estimators else \
        [name for name, _ in requested_estimators(cube)]
    # cvflow's own estimators' declared sums (a user estimator is imported, if trusted, by
    # compute alone, and reads its own)
    roles = {role for name in names if name in REGISTRY for role in REGISTRY[name].terms}
    out: dict[str, Results] = {}
    # every loss's sums in one pass over pred (cvflow.estimators.one_pass)
    with _estimators.shared_terms(cube, roles, losses):
        for loss in losses:
            results = compute(cube, estimators, loss=loss, overrides=overrides,
                              trust_code=trust_code)
            out[_label(results, loss, cube)] = results
    return out


def _label(results: Results, loss: str | None, cube: xr.Dataset) -> str:
    """The loss label the results carry (the store's default loss when ``loss`` is None)."""
    for result in results.values():
        if result.attrs.get("loss"):
            return str(result.attrs["loss"])
    return str(loss or cube.attrs.get("loss") or "default")


def assumptions(cube: xr.Dataset, loss: str | None = None):
    """(the loss's declaration, whether the folds are time-ordered): what
    :meth:`cvflow.estimators.Estimator.refusal` checks an estimator against."""
    design = json.loads(cube.attrs.get("workflow") or "{}").get("design") or {}
    return cube_loss(cube, loss), time_ordered(design)


def _pred_in_memory_if_small(cube: xr.Dataset) -> xr.Dataset:
    """The cube with ``pred`` read into memory when it fits the reducers' budget, else the
    cube itself (``pred`` lazy).

    An opened store's own ``pred`` is read in one concurrent round trip
    (:func:`cvflow.store.cube.read_pred`), anything else (a selection, an in-memory cube) by dask.
    """

    pred = cube["pred"]
    if not (is_lazy(pred.data) and fits_budget(pred.nbytes)):
        return cube
    values = read_pred(cube)
    out = cube.copy()           # shallow: the variables are new, their data shared
    out.variables["pred"].data = load_if_small(pred).data if values is None else values
    return out


def _plain(value):
    """JSON-ready Python values (NaN and infinity -> None: strict JSON has neither, as in
    :func:`cvflow.report.racing._finite`; ``plan``'s infinite counts say so in a warning)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biu":
            return value.tolist()
        if value.dtype.kind == "f":         # one pass of numpy's, not one call a number
            finite = np.isfinite(value)
            if finite.all():
                return value.tolist()
            return np.where(finite, value, None).tolist()
        return [_plain(v) for v in value.tolist()] if value.dtype != object else \
            [_plain(v) for v in value]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        try:
            return json.loads(value) if value[:1] in "{[" else value
        except json.JSONDecodeError:
            return value
    return value if value is None or isinstance(value, (int, bool)) else str(value)


def dataset_to_json(ds: xr.Dataset, *, arrays: bool = False) -> dict:
    """Any estimator result as JSON: {var: {dims, values}}, 0-d variables as plain values.
    ``arrays``: a float variable's values stay a numpy array (for
    :func:`cvflow.report.json_stream.write`, which writes it as its list a slab at a time)."""
    out: dict = {}
    for name, var in ds.data_vars.items():
        values = var.values
        kept = arrays and values.dtype.kind == "f"
        out[name] = _plain(values.item() if values.ndim == 0 else values) if values.ndim == 0 \
            else {"dims": list(var.dims), "values": values if kept else _plain(values)}
    coords = {name: {"dims": list(c.dims), "values": _plain(np.asarray(c.values, dtype=object)
                                                              if c.dtype.kind in "OTU" else c.values)}
              for name, c in ds.coords.items() if c.ndim == 1 and name != "param_json"}
    if coords:
        out["coords"] = coords
    out.update({k: _plain(v) for k, v in ds.attrs.items()})
    return out


def to_json(results: dict[str, xr.Dataset], cube: xr.Dataset | None = None, *,
            arrays: bool = False) -> dict:
    """Each result as JSON (:func:`dataset_to_json`, ``arrays`` as there); a skipped estimator
    as ``{"skipped": reason}``; with the ``cube`` of a raced study, its race under ``racing``
    (:func:`cvflow.report.racing.summary`: who was dropped when, by which test)."""
    out = {name: dataset_to_json(ds, arrays=arrays) for name, ds in results.items()}
    out.update({name: {"skipped": why} for name, why in getattr(results, "skipped", {}).items()})
    race = racing.summary(cube) if cube is not None else None
    if race is not None:
        out[RACING_ATTR] = race
    return out


def status(path: str | Path) -> dict:
    """Fits done / total / failed and failures grouped by message, per learner too.

    Reads only the small (param, split) variables, so it works while a run is writing; while
    a run grows the store it reads the store before or after (:func:`cvflow.store.group.stable`).
    """
    return stable(resolve(path), lambda: _status(path))


def _status(path: str | Path) -> dict:
    nothing = {"store": str(path), "total": 0, "done": 0, "failed": 0, "complete": False,
               "learners": {}, "failures": {}, "damaged": []}
    if exists(marker(resolve(path))):        # the run is still creating the store
        return nothing
    try:
        # a store of a newer format is refused as cvflow.open refuses it (a damaged format is
        # listed under `damaged`, with the other attributes)
        stored = read_attr(path, STORE_FORMAT_ATTR)
        check_newer(resolve(path), {} if stored is None else {STORE_FORMAT_ATTR: stored})
        # an array's zarr.json at odds with the consolidated metadata: listed, and the status
        # read as xarray reads the store (report and run refuse it)
        inconsistent = [str(d) for d in metadata_damage(path)]
        try:
            done, failed, learners = (read_mask(path, name, consolidated=bool(inconsistent))
                                      for name in ("done", "failed", "learner"))
            # an extension (cvflow.execution.extend) may resize arrays between these reads:
            # use the common part
            rows = min(len(learners), done.shape[0], failed.shape[0])
            cols = min(done.shape[1], failed.shape[1])
            # DESIGN CHOICE: the messages of the failed fits only, from the chunks holding one:
            # `error` whole is a (param, split) array of strings (10^7 of them at 10^7 fits)
            errors = read_where(path, "error", failed[:rows, :cols] & done[:rows, :cols],
                                consolidated=bool(inconsistent))
        except Exception:  # noqa: BLE001 - named below; the counts are not known
            if not inconsistent:
                raise
            return {**nothing, "damaged": inconsistent}
        # what is damaged, seen cheaply (one listing, the small variables, the attributes;
        # `cvflow verify` reads every chunk): the pred chunks of done fits missing (their fits
        # are not in the store though `done` says so), and any damage report and run refuse
        damaged = inconsistent or status_damage(path, done, failed, read=("learner",))
    except (KeyError, FileNotFoundError):  # the run is still creating the store: nothing done yet
        return nothing
    done, failed = done[:rows, :cols], failed[:rows, :cols]
    learners = np.asarray([str(v) for v in learners[:rows]])
    info = {"store": str(path), **summarize_fits(done, failed, errors, learners),
            "damaged": damaged}
    info["complete"] = info["complete"] and not damaged
    info.update(_racing_counts(read_attr(path, RACING_ATTR), done))
    return info


def _racing_counts(stored, done: np.ndarray) -> dict:
    """A raced store's counts for status: params dropped, fits racing saved (not run)."""
    if not stored:
        return {}
    race = json.loads(stored)
    return {"racing": {"dropped": len(race.get("dropped", [])), "params": race.get("params"),
                       "saved_fits": saved_fits(race, done), "unfilled": unfilled(race, done),
                       "alpha": race.get("alpha")}}


def summarize_fits(done: np.ndarray, failed: np.ndarray, errors: np.ndarray,
                   learners: np.ndarray) -> dict:
    """Counts of (param, split) fits done / failed, per learner, and failures grouped by
    message, from the status arrays (param, split) and the learner of each param; ``errors``
    is the (param, split) ``error``, or the messages of the failed done fits alone (1-D, in
    the order of ``np.nonzero(failed & done)``: :func:`cvflow.store.group.read_where`).

    ``failures`` maps each group's example message to its count of fits, messages that differ
    only in their numbers being one group (:func:`cvflow.report.failures.group`); ``failure_variants``
    maps the same examples to the number of distinct messages in the group.
    """
    failed = failed & done
    errors = np.asarray(errors, dtype=object)
    # the messages of the failed fits only (never a string per fit: 10^7 of them at 10^7 fits)
    groups = group(errors if errors.ndim == 1 else errors[:failed.shape[0], :failed.shape[1]][failed])
    per_learner = {}
    for name in dict.fromkeys(learners):
        rows = learners == name
        per_learner[name] = {"done": int(done[rows].sum()), "total": int(done[rows].size),
                             "failed": int(failed[rows].sum())}
    return {
        "total": int(done.size),
        "done": int(done.sum()),
        "failed": int(failed.sum()),
        "complete": bool(done.all()),
        "learners": per_learner,
        "failures": {example: g["count"] for example, g in groups.items()},
        "failure_variants": {example: g["variants"] for example, g in groups.items()},
    }


def format_status(info: dict) -> str:
    """The text of :func:`status` for a terminal: each line as :func:`cvflow.terminal.lines`
    shows it (a learner name or an error message the store holds cannot control the terminal
    nor start a line of its own)."""
    lines = [f"{info['store']}: {info['done']}/{info['total']} fits done, {info['failed']} failed"
             + (" (complete)" if info["complete"] else "")]
    if len(info["learners"]) > 1 or info["failed"]:
        for name, s in info["learners"].items():
            lines.append(f"  {name}: {s['done']}/{s['total']} done, {s['failed']} failed")
    lines += [f"  {count} fit(s) failed: {message}{_variants(info, message)}"
              for message, count in info["failures"].items()]
    race = info.get("racing")
    if race:
        lines.append(f"  racing (alpha {race['alpha']}): " + state_text(
            race["dropped"], race["params"], race.get("unfilled", 0), race["saved_fits"]))
    lines += [f"  damaged: {d}" for d in info.get("damaged", [])]
    damaged = info.get("damaged") or []
    refitted = tuple(f"{name} chunk " for name in FITTED)       # pred, and the fit-time scores
    if damaged and all(d.startswith(refitted) for d in damaged):
        lines.append("  `cvflow run` refits the damaged chunks; `cvflow verify` reads every chunk")
    elif damaged:
        lines.append(f"  the store is damaged (not only pred or score chunks `cvflow run` refits): "
                     f"restore it from a copy, or rerun with {OVERWRITE}; `cvflow verify` reads "
                     "every chunk")
    return terminal.lines(lines)


def _variants(info: dict, message: str) -> str:
    n = info.get("failure_variants", {}).get(message, 1)
    return f" (and {n - 1} similar message(s) differing only in numbers)" if n > 1 else ""


def text(cube: xr.Dataset, results: dict[str, xr.Dataset], *, status: dict | None = None
         ) -> str:
    """The text report: a section per estimator (its declared ``text`` renderer, or a generic
    one listing the scalar results and the per-param ``estimate``), its lines as
    :func:`cvflow.terminal.lines` shows them: a name, a param value or an error message the
    store holds cannot control the terminal nor start a line of its own. ``status``: the
    cube's :func:`status_from_cube` when the caller has it (else read from ``cube``)."""

    lines = []
    classes = json.loads(cube.attrs.get("classes") or "null")
    if classes:
        lines.append(f"classes: {', '.join(map(str, classes))}"
                     + (f" (positive class: {classes[-1]})" if len(classes) == 2 else ""))
    for name, result in results.items():
        spec = lookup(name)             # computed by the caller: imported already
        body = spec.text(result) if spec.text is not None else generic_text(result)
        lines += [f"{name}:"] + ["  " + line for line in body]
        lines += [f"  warning [{w['code']}]: {w['message']}" for w in guardrails.read(result)]
    lines += [f"{name}: skipped: {why}" for name, why in getattr(results, "skipped", {}).items()]

    lines += racing.text(cube)
    info = status if status is not None else status_from_cube(cube)
    if info["failed"]:
        lines.append(f"{info['failed']} of {info['total']} fits failed:")
        lines += [f"  {count} x {message}{_variants(info, message)}"
                  for message, count in info["failures"].items()]
    return terminal.lines(lines)


def generic_text(result: xr.Dataset, max_rows: int = 12) -> list[str]:
    """Text lines of any result: its scalars, and a per-param ``estimate`` (with ``se``)."""
    lines = [f"{var}: {_plain(da.values.item())}" for var, da in result.data_vars.items()
             if da.ndim == 0]
    if "estimate" in result and result["estimate"].dims == ("param",):
        est = result["estimate"].values
        se = result["se"].values if "se" in result and result["se"].dims == ("param",) else None
        for h in range(min(max_rows, est.size)):
            lines.append(f"estimate[{h}]: {est[h]:.6g}" + ("" if se is None else f"  se {se[h]:.3g}"))
    return lines


def status_from_cube(cube: xr.Dataset) -> dict:
    """:func:`summarize_fits` of an opened cube."""
    done, failed = np.asarray(cube["done"].values), np.asarray(cube["failed"].values)
    # the messages of the failed done fits only: `error` whole as Python strings was 0.08 GiB
    # of objects at 10^7 fits, on top of a report's results
    errors = np.asarray(cube["error"].values)[failed & done]
    return summarize_fits(done, failed, errors,
                          np.asarray([str(v) for v in cube["learner"].values]))
