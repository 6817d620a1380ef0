"""The ``learners`` of a workflow -> :class:`~cvflow.workflow.params.Param` objects: each entry's
class, fixed params, grids (lists or generators), stored output and preprocessing steps, checked
before any fit (:func:`cvflow.workflow.spec.parse_workflow` calls :func:`parse_learners`).
"""
from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np

from ..objects import CLASS, FUNCTION
from . import limits
from .checks import check_keys, fail
from ..errors import InputError
from .params import Param, default_output, expand_grid, import_estimator, infer_output

LEARNER_KEYS = {"name", "class", "estimator", "params", "grid", "output", "preprocess"}


def grid_values(where: str, key: str, spec: Any) -> list:
    """A grid entry: a list, a scalar, or {logspace|linspace: [a, b, num]} / {range: [a, b, step]}.

    A described estimator or function (``{class: ...}``, ``{function: ...}``) is one value.
    """
    if isinstance(spec, dict) and (CLASS in spec or FUNCTION in spec):
        spec = [spec]
    if isinstance(spec, dict):
        if len(spec) != 1:
            fail(where, key, "use one of logspace, linspace, range")
        (kind, args), = spec.items()
        if kind not in ("logspace", "linspace", "range"):
            fail(where, key, f"unknown generator {kind!r}; use logspace, linspace or range")
        if not (isinstance(args, list) and len(args) == 3
                and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)):
            fail(where, key, f"{kind} needs three numbers [start, stop, num/step], got {args!r}")
        if not all(_finite(a) for a in args):
            fail(where, key, f"{kind}: {args!r} holds a number that is not finite; give finite "
                 "[start, stop, num/step]")
        count = _generated_count(where, key, kind, args)
        limits.check("params", count, f"{where}: {key}: {kind} {args!r} gives "
                     f"{limits.count_text(count)} values")
        with np.errstate(all="ignore"):          # an overflow is refused below, by value
            values = (np.arange(*args) if kind == "range"
                      else getattr(np, kind)(args[0], args[1], int(count))).tolist()
        if not np.isfinite(values).all():
            fail(where, key, f"{kind} {args!r} gives values that are not finite; use smaller "
                 "numbers")
    elif isinstance(spec, list):
        values = spec
    else:
        values = [spec]
    if not values:
        fail(where, key, "empty grid; give at least one value")
    return values


def _finite(x: int | float) -> bool:
    """A finite number that a float holds (a YAML integer of 400 digits is not one)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _generated_count(where: str, key: str, kind: str, args: list) -> int | float:
    """How many values ``{kind: args}`` gives, from its arguments (nothing allocated; inf when
    the span overflows a float)."""
    start, stop, third = args
    if kind == "range":
        if third == 0:
            fail(where, key, f"range {args!r}: the step is 0; give a non-zero step")
        span = (stop - start) / third         # numpy.arange's length is ceil(span)
        return max(0, math.ceil(span)) if math.isfinite(span) else math.inf
    if third != int(third) or third < 0:
        fail(where, key, f"{kind}: the count must be a whole number, got {third}")
    return int(third)


def parse_learners(where: str, raw: Any, task: str, fit_seed: int | None = None, *, loss=None,
                   python: bool = False, objects: dict | None = None) -> list[Param]:
    """The params of every learner entry (normalised in place). ``loss`` (a declared
    :class:`cvflow.estimators.losses.Loss` or None) decides the output of a learner that names none
    (:func:`cvflow.workflow.params.infer_output`); ``python``: the workflow of a
    :class:`cvflow.Study`, whose messages name its arguments, not the file's keys.

    ``objects`` (the Python face): learner name -> (estimator, list of grids of objects), the
    objects the entries describe, value for value. Their params fit the objects
    (``Param.source``), and their classes need not import by name.

    DESIGN CHOICE: a grid name is checked against ``get_params(deep=True)``; one it lacks (a
    Pipeline step replaced by the grid, an estimator whose ``set_params`` takes more) is left
    to ``set_params``, as ``GridSearchCV`` leaves it: every grid point is built once, and the
    first refusal is the error (``set_params``' own message on the Python face).
    """
    if not isinstance(raw, list) or not raw:
        fail(where, "learners", "give a non-empty list of learners")
    params: list[Param] = []
    names = set()
    for i, entry in enumerate(raw):
        key = f"learners[{i}]"
        entry = _learner_class(where, key, check_keys(where, key, entry, LEARNER_KEYS))
        raw[i] = entry
        name = learner_name(entry)
        if name in names:
            fail(where, f"{key}.name", f"duplicate learner name {name!r}")
        names.add(name)
        source = (objects or {}).get(name)
        try:
            cls = type(source[0]) if source is not None else import_estimator(str(entry["estimator"]))
        except InputError as exc:
            raise InputError(f"{where}: {key}.class: {str(exc).removeprefix('estimator: ')}") \
                from None
        fixed = entry.get("params") or {}
        if not isinstance(fixed, dict):
            fail(where, f"{key}.params", f"expected a mapping, got {type(fixed).__name__}")
        grid = entry.get("grid") or {}
        # a list of mappings is read as scikit-learn's ParameterGrid reads it: one grid each
        grids = grid if isinstance(grid, list) else [grid]
        if not grids or not all(isinstance(g, dict) for g in grids):
            fail(where, f"{key}.grid", "expected a mapping or a list of mappings")
        output = entry.get("output") or infer_output(cls, task, loss)
        okey = f"output={output!r}" if python else f"{key}.output"
        if output not in ("predict", "decision_function", "predict_proba"):
            fail(where, okey, f"{output!r}; use predict, decision_function or predict_proba")
        if output != "predict" and not hasattr(cls, output):
            fail(where, okey, f"{cls.__name__} ({name}) has no {output}")
        if task == "regression" and output != "predict":
            fail(where, okey, "a regression learner stores predict")
        if (loss is not None and loss.task == task == "classification" and not entry.get("output")
                and output not in loss.outputs):
            fail(where, f"learner {name!r}" if python else key,
                 f"{cls.__name__} has no {' or '.join(loss.outputs)}, which the loss "
                 f"{loss.label!r} needs; choose another loss or learner")
        if not entry.get("output") and output != default_output(cls, task):
            # the loss chose it: kept in the workflow (and so in the store's fit hash)
            entry["output"] = output
        steps = _preprocess(where, f"{key}.preprocess", entry.get("preprocess"))
        valid = (set(source[0].get_params(deep=True)) if source is not None
                 else _valid_names(where, key, str(entry["estimator"]), cls, fixed))
        for pname in fixed:
            if valid is not None and pname not in valid:
                fail(where, f"{key}.params.{pname}", f"{cls.__name__} has no parameter {pname!r}")
        for g_index, one in enumerate(grids):
            gkey = f"{key}.grid" + (f"[{g_index}]" if isinstance(grid, list) else "")
            values = {p: grid_values(where, f"{gkey}.{p}", v) for p, v in one.items()}
            # counted from the axis lengths before the product is built
            total = len(params) + math.prod(len(v) for v in values.values())
            limits.check("params", total, f"{where}: {gkey}: the grids give "
                         f"{limits.count_text(total)} params" + (
                             f" ({' x '.join(str(len(v)) for v in values.values())} here)"
                             if len(values) > 1 else ""))
            hypers = expand_grid(values)
            # the Python face: the same grid point as objects, fitted (Param.source)
            points = (expand_grid(source[1][g_index]) if source is not None
                      else [None] * len(hypers))
            new = [Param(name, str(entry["estimator"]), dict(fixed), hyper, output, steps,
                         fit_seed, None if point is None else (source[0], point))
                   for hyper, point in zip(hypers, points)]
            unknown = [p for p in values if valid is not None and p not in valid]
            # an estimator (or None) as a value replaces a part whose names the others set
            replaces = source is not None and any(
                v is None or hasattr(v, "get_params") for vs in source[1][g_index].values()
                for v in vs)
            if unknown or replaces:
                _set_params_decides(where, gkey, unknown or list(values), new, cls, python)
            params += new
    return params


def _set_params_decides(where: str, gkey: str, unknown: list[str], params: list[Param], cls,
                        python: bool) -> None:
    """Build every grid point of a grid naming parameters ``get_params`` lacks: the first
    that ``set_params`` refuses is the error (see :func:`parse_learners`)."""
    for param in params:
        try:
            param.build()
        except Exception as exc:  # noqa: BLE001 - set_params' own refusal, or a constructor's
            pname = next((p for p in unknown if repr(p) in str(exc)), unknown[0])
            if python:
                fail(where, f"{gkey}.{pname}", str(exc).splitlines()[0] if str(exc)
                     else type(exc).__name__)
            fail(where, f"{gkey}.{pname}", f"{cls.__name__} has no parameter {pname!r}"
                 + ("; nested parameters are written step__param" if "__" not in pname else ""))


def learner_name(entry: dict) -> str:
    """A learner entry's name: its ``name``, else its class's."""
    return str(entry.get("name") or str(entry["estimator"]).rpartition(".")[2])


def _valid_names(where: str, key: str, path: str, cls, fixed: dict) -> set[str] | None:
    """Parameter names of the learner with its fixed params, nested ones included
    (``ridge__alpha``); None when the class cannot be built without arguments."""
    try:
        model = Param("", path, dict(fixed)).build()
    except InputError as exc:
        raise InputError(f"{where}: {key}.params.{exc}") from None
    except Exception as exc:  # noqa: BLE001 - a required argument missing, a bad value
        if not fixed:
            try:
                cls()
            except Exception:  # noqa: BLE001 - estimators with required args: skip the name check
                return None
        fail(where, f"{key}.params", f"{cls.__name__} cannot be built from these params: "
             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return set(model.get_params(deep=True))


def _learner_class(where: str, key: str, entry: dict) -> dict:
    """The learner's class from ``class:`` (or the deprecated ``estimator:``).

    DESIGN CHOICE: the YAML says ``class:`` (``estimator:`` beside the reducers' ``estimators:``
    was a trap); the parsed workflow keeps it under the key "estimator", as stores always
    have, so the fit hash and stored workflows do not change with the spelling.
    """
    if "class" in entry and "estimator" in entry:
        fail(where, f"{key}.estimator", "give the learner's class once, as class:")
    if "estimator" in entry:
        warnings.warn(f"{where}: {key}.estimator is deprecated; write class: "
                      f"{entry['estimator']}", DeprecationWarning, stacklevel=4)
        return dict(entry)
    if "class" not in entry:
        fail(where, f"{key}.class", "missing; give a dotted path like sklearn.linear_model.Ridge")
    out = {k: v for k, v in entry.items() if k != "class"}
    return {"estimator": entry["class"], **out}


def _preprocess(where: str, key: str, raw: Any) -> tuple[tuple[str, str], ...]:
    """``[sklearn.preprocessing.StandardScaler, {sklearn.preprocessing.PolynomialFeatures:
    {degree: 2}}]`` -> ((path, JSON params), ...), each step checked to import."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        fail(where, key, "give a list of transformer paths, e.g. [sklearn.preprocessing.StandardScaler]")
    steps = []
    for i, item in enumerate(raw):
        path, params = (item, {}) if isinstance(item, str) else (
            next(iter(item.items())) if isinstance(item, dict) and len(item) == 1 else (None, None))
        if path is None or not isinstance(params or {}, dict):
            fail(where, f"{key}[{i}]", "give a dotted path or {path: {params}}")
        try:
            cls = import_estimator(str(path))
        except InputError as exc:
            raise InputError(f"{where}: {key}[{i}].{exc}") from None
        if not hasattr(cls, "transform"):
            fail(where, f"{key}[{i}]", f"{path} is not a transformer (no transform)")
        steps.append((str(path), json.dumps(params or {}, sort_keys=True)))
    return tuple(steps)
