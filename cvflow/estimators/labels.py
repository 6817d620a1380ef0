"""The names people read for a cube's params: a param's label (:func:`param_label`, its tuned
settings :func:`tuned_settings`), its short text (:func:`param_text`, :func:`param_labels`,
:func:`result_labels`), its full setting (:func:`param_description`), and the param a user
names (:func:`resolve_param`).

Public: the estimators, the reports and the faces label params through these, so a param reads
the same in a result, a text report, a page and ``StudyResult.selected``.
"""
from __future__ import annotations

import functools
import json

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from ..objects import short
from ..store.coords import hyperparameter_coord


@functools.lru_cache(maxsize=32)
def _fixed_params(workflow: str) -> dict[str, dict]:
    """Each learner's fixed params (its ``params:``) from a store's workflow JSON."""
    out = {}
    for entry in json.loads(workflow or "{}").get("learners") or []:
        path = str(entry.get("class") or entry.get("estimator") or "")
        out[str(entry.get("name") or path.rpartition(".")[2])] = dict(entry.get("params") or {})
    return out


def tuned_settings(cube: xr.Dataset, index: int) -> dict:
    """The settings of param ``index`` that its grid sets: those with a hyperparameter
    coordinate on ``param`` (the cube has one per grid name), less a learner's fixed params
    (the store's workflow, when the cube carries it). Plain data (:mod:`cvflow.objects`), so
    ``clone(estimator).set_params(**tuned_settings(cube, h))`` rebuilds the param from its
    learner's estimator."""
    setting = json.loads(str(cube["param_json"].values[int(index)]))
    fixed = _fixed_params(str(cube.attrs.get("workflow") or "")).get(setting["learner"], {})
    return {k: v for k, v in setting["params"].items()
            if hyperparameter_coord(k) in cube.coords
            and cube.coords[hyperparameter_coord(k)].dims == ("param",)
            and not (k in fixed and fixed[k] == v)}


def param_label(cube: xr.Dataset, index: int) -> dict:
    """Param ``index`` as ``{"index", "learner", "params"}``, ``params`` its tuned settings
    only (:func:`tuned_settings`): the vocabulary of ``StudyResult.selected``. ``{}`` for no
    param (index -1: every param failed)."""
    if index is None or int(index) < 0:
        return {}
    setting = json.loads(str(cube["param_json"].values[int(index)]))
    return {"index": int(index), "learner": setting["learner"],
            "params": tuned_settings(cube, int(index))}


def param_text(label: dict) -> str:
    """The short label of a :func:`param_label` dict: ``learner(key=value, ...)`` with the tuned
    values only (``hgb(max_depth=2)``), the learner alone when its grid has one point;
    "(none)" when empty."""
    if not label:
        return "(none: every param failed)"

    settings = label.get("params")
    if not isinstance(settings, dict):          # a label of the older flat form
        settings = {k: v for k, v in label.items() if k not in ("index", "learner")}
    # DESIGN CHOICE: a label is short everywhere (text, JSON keys, plot axes): fixed params and
    # a Pipeline's steps are the learner's, not the param's; param_description has them all
    inner = ", ".join(f"{k}={short(v)}" for k, v in settings.items())
    return f"{label['learner']}({inner})" if inner else str(label["learner"])


def param_description(cube: xr.Dataset, index: int) -> str:
    """The full setting of param ``index`` (fixed params and nested estimators included), for a
    page's hover text: ``#index learner`` then its settings as JSON."""
    setting = json.loads(str(cube["param_json"].values[int(index)]))
    return (f"#{int(index)} {setting['learner']}: "
            f"{json.dumps(setting['params'], sort_keys=True, default=str)}")


def result_labels(result: xr.Dataset) -> list[str]:
    """Short labels of a result's params: its ``param`` coordinates when it has a ``param``
    dimension, else the one param its attrs name (``param``, e.g. ``bates_ncv(param=3)``)."""
    if "param_json" in result.coords and result["param_json"].dims == ("param",):
        return param_labels(result)
    label = result.attrs.get("param")
    return [param_text(label)] if isinstance(label, dict) and label else ["param"]


def param_labels(cube: xr.Dataset) -> list[str]:
    """The short label (:func:`param_text`) of every param, in grid order."""
    return [param_text(param_label(cube, h)) for h in range(cube.sizes["param"])]


def _param_settings(cube: xr.Dataset) -> list[tuple[str, dict]]:
    """(learner, hyper/fixed settings) of every param, from ``param_json``."""
    out = []
    for text in np.asarray(cube["param_json"].values):
        setting = json.loads(str(text))
        out.append((str(setting["learner"]), dict(setting.get("params", {}))))
    return out


def _same_value(wanted, have) -> bool:
    if isinstance(wanted, bool) or isinstance(have, bool):
        return wanted is have or wanted == have
    if isinstance(wanted, (int, float, np.number)) and isinstance(have, (int, float, np.number)):
        return bool(np.isclose(float(wanted), float(have), rtol=1e-9, atol=0.0))
    return str(wanted) == str(have)


def _parse_param_string(spec: str, where: str) -> tuple[str, dict]:
    """``"learner(key=value, ...)"`` -> (learner, {key: value}); values parsed as YAML scalars."""
    import yaml

    text = spec.strip()
    if "(" not in text:
        return text, {}
    if not text.endswith(")"):
        raise InputError(f"{where}: {spec!r} is not of the form learner(key=value, ...)")
    name, _, inner = text[:-1].partition("(")
    settings = {}
    for part in filter(None, (p.strip() for p in inner.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise InputError(f"{where}: {spec!r}: {part!r} is not key=value")
        try:
            settings[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            settings[key.strip()] = value.strip()
    return name.strip(), settings


def resolve_param(cube: xr.Dataset, spec, *, where: str = "param") -> int:
    """The index of the param named by ``spec``; InputError naming the choices if none fits.

    ``spec`` is one of: an integer index into ``param`` (negative counts from the end); a
    learner name, when that learner has exactly one param; a string
    ``"learner(key=value, ...)"``; or a dict ``{"learner": name, key: value, ...}``. The
    keys must match the param's settings (numbers compared with a relative tolerance of
    1e-9; keys not given are free), and exactly one param must match.

    Examples
    --------
    ``resolve_param(cube, 1)``, ``resolve_param(cube, "lasso(C=0.5)")``,
    ``resolve_param(cube, {"learner": "lasso", "C": 0.5})``.
    """
    n_params = int(cube.sizes["param"])
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        index = int(spec)
        if not -n_params <= index < n_params:
            raise InputError(f"{where}: param index {index} is out of range; the cube has "
                             f"{n_params} params (0..{n_params - 1})")
        return index % n_params
    if isinstance(spec, str):
        stripped = spec.strip()
        if stripped.lstrip("-").isdigit():
            return resolve_param(cube, int(stripped), where=where)
        learner, wanted = _parse_param_string(stripped, where)
    elif isinstance(spec, dict):
        wanted = dict(spec)
        if isinstance(wanted.get("params"), dict):      # a param_label: {index, learner, params}
            wanted = {"learner": wanted.get("learner"), **wanted["params"]}
        learner = wanted.pop("learner", None)
        if learner is None:
            raise InputError(f"{where}: {spec!r} has no 'learner' key; "
                             "use {learner: name, key: value}")
        learner = str(learner)
    else:
        raise InputError(f"{where}: {spec!r} is not a param; use an index, a learner name, "
                         "'learner(key=value)' or {learner: name, key: value}")
    settings = _param_settings(cube)
    names = sorted({name for name, _ in settings})
    of_learner = [h for h, (name, _) in enumerate(settings) if name == learner]
    if not of_learner:
        raise InputError(f"{where}: no learner named {learner!r}; learners are {', '.join(names)}")
    matches = [h for h in of_learner
               if all(k in settings[h][1] and _same_value(v, settings[h][1][k])
                      for k, v in wanted.items())]

    def show(h):
        return f"{h}: {param_text(param_label(cube, h))}"

    if len(matches) == 1:
        return matches[0]
    listing = "; ".join(show(h) for h in of_learner[:8]) + ("; ..." if len(of_learner) > 8 else "")
    if not matches:
        raise InputError(f"{where}: no param of {learner!r} matches {spec!r}; its params are "
                         f"{listing}")
    raise InputError(f"{where}: {spec!r} matches {len(matches)} params of {learner!r}; name one "
                     f"as learner(key=value, ...) or by index: {listing}")
