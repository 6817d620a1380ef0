"""Estimators as plain data: scikit-learn objects <-> the JSON / YAML a workflow holds.

One spelling for both faces of a workflow (README "Nested estimators"):

- an estimator is ``{class: dotted.path.Class, <param>: <value>, ...}`` listing the params
  that differ from the class defaults (as scikit-learn's repr does); a bare dotted path is
  the class with its defaults where a learner's ``estimator:`` expects one;
- a function or class used as a value (``TransformedTargetRegressor(func=numpy.log)``) is
  ``{function: numpy.log}``;
- ``steps`` / ``transformers`` items are lists ``[name, estimator(, columns)]``; they and any
  param whose default is a tuple are rebuilt as tuples, so a rebuilt estimator's
  ``get_params(deep=True)`` equals the original's;
- numbers, strings, booleans, None, lists and mappings of those are themselves.

Nothing here unpickles: a description is JSON, and building one imports the classes it names.
What cannot be described (a lambda, a fitted estimator, a RandomState, an array) is refused
with an :class:`~cvflow.errors.InputError` naming the parameter, unless the caller keeps the
objects themselves (``describe(..., keep=True)``, the Python face): then it is recorded as
``{object: <text>, sha256: <fingerprint>}``, and a class or function no name imports (defined
in ``__main__`` or inside a function) by its ``module.qualname`` text. Such a description says
what was fitted but cannot be rebuilt (:func:`unbuildable` lists why).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import math
from typing import Any

import numpy as np

from .errors import InputError

CLASS = "class"
FUNCTION = "function"
# a Python object no description spells (kept in memory by the Python face, see describe)
OBJECT = "object"
# composite params whose items are (name, estimator[, columns]) tuples in scikit-learn
_TUPLE_LISTS = ("steps", "transformers", "transformer_list", "estimators")


def class_path(obj) -> str:
    """The shortest public dotted path importing ``obj`` (a class or function).

    ``sklearn.linear_model._ridge.Ridge`` -> ``sklearn.linear_model.Ridge``; a class only its
    own private module exports (``sklearn.utils._mocking.CheckingClassifier``) is named by that
    module. Raises InputError when ``obj`` cannot be imported back by name (a lambda, a local
    function, a class defined in ``__main__``).
    """
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, np.ufunc):
        module = "numpy"
    if not name or not module or "<" in name:
        raise InputError(f"{obj!r} has no importable name (a lambda or a local function)")
    if module == "__main__":
        raise InputError(f"{name} is defined in __main__ (a notebook or a script), which the "
                         "workers and a workflow file cannot import; move it to a module")
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        candidate = ".".join(parts[:i])
        # a public package first; the defining module itself, private or not, last
        if i < len(parts) and any(p.startswith("_") for p in parts[1:i]):
            continue
        try:
            target = importlib.import_module(candidate)
            for attr in name.split("."):
                target = getattr(target, attr)
        except (ImportError, AttributeError):
            continue
        if target is obj:
            return f"{candidate}.{name}"
    raise InputError(f"{module}.{name} does not import back to the same object")


def name_text(obj) -> str:
    """``module.qualname`` of a class or function, whether or not it imports back (a text for
    records and messages: ``__main__.MyModel``, ``tests.test_x.<locals>.<lambda>``)."""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    return f"{getattr(obj, '__module__', None) or '?'}.{name}"


def importable(path: str) -> bool:
    """Whether a dotted path recorded by :func:`describe` can name its object in another
    process: not one defined in ``__main__`` nor inside a function (``<locals>``)."""
    return not (str(path).startswith("__main__.") or "<" in str(path))


def fingerprint(value) -> str:
    """16 hex digits of the SHA-256 of ``value`` pickled by value (cloudpickle, as distributed
    ships objects no name imports), or of its type and id when it does not pickle: two
    different objects never share a fingerprint, and a store's fits are reused only for an
    object that pickles to the same bytes."""
    import hashlib

    import cloudpickle

    try:
        blob = cloudpickle.dumps(value)
    except Exception:  # noqa: BLE001 - a lock, a generator: unique to this object
        blob = f"{type(value).__qualname__}@{id(value)}".encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _object(value) -> dict:
    """``{object: text, sha256: fingerprint}`` of a value kept as a Python object."""
    if isinstance(value, np.ndarray):
        text = f"ndarray(shape={value.shape}, dtype={value.dtype})"
    elif isinstance(value, type) or callable(value):
        text = name_text(value)
    else:
        text = type(value).__name__
    return {OBJECT: text, "sha256": fingerprint(value)}


def unbuildable(value: Any) -> list[str]:
    """What in a description (a workflow, a learner, a value) cannot be rebuilt from it: the
    texts of its ``{object: ...}`` values and of the class and function paths that no name
    imports (see :func:`importable`); [] when :func:`build` rebuilds it all."""
    out: list[str] = []
    if isinstance(value, dict):
        if OBJECT in value:
            return [str(value[OBJECT])]
        for key in (CLASS, FUNCTION, "estimator"):
            if isinstance(value.get(key), str) and not importable(value[key]):
                out.append(value[key])
        for key, item in value.items():
            if key not in (CLASS, FUNCTION, "estimator"):
                out += unbuildable(item)
    elif isinstance(value, list):
        for item in value:
            out += unbuildable(item)
    return out


def import_path(path: str, where: str = "estimator"):
    """The object at a dotted path (``module.attr``); InputError naming ``where`` if absent."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise InputError(f"{where}: {path!r} is not a dotted path like sklearn.linear_model.Ridge")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{where}: {path!r} does not import ({exc})") from None


def is_estimator(obj) -> bool:
    return not isinstance(obj, type) and hasattr(obj, "get_params") and hasattr(obj, "fit")


def init_signature(cls) -> inspect.Signature | None:
    """The signature of ``cls``'s constructor (None when unknown), read once per class: every
    fit builds its estimator from descriptions (``Param.build``), and ``inspect.signature``
    cost ~0.05 ms a call, a tenth of a small tree's fit."""
    try:
        return _init_signature(cls)
    except TypeError:                           # an unhashable class: read every time
        return _init_signature.__wrapped__(cls)


@functools.lru_cache(maxsize=1024)
def _init_signature(cls) -> inspect.Signature | None:
    try:
        return inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None


def _defaults(cls) -> dict:
    sig = init_signature(cls)
    if sig is None:
        return {}
    return {k: p.default for k, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty}


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and other odd values: not the default
        return False


def _fitted(est) -> list[str]:
    """scikit-learn's rule for fitted state: public attributes ending in an underscore."""
    return [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]


def describe(value: Any, where: str = "estimator", *, keep: bool = False) -> Any:
    """Plain data (JSON / YAML) for an estimator or a parameter value; InputError if impossible.

    ``keep``: the caller keeps the objects themselves and fits them (:class:`cvflow.Study`), so
    what has no description is recorded instead of refused: an estimator whose class no name
    imports as ``{class: module.qualname, ...its params}``, any other value (a lambda, an
    array, a RandomState) as ``{object: text, sha256: fingerprint}`` (:func:`unbuildable`
    lists them).

    >>> from sklearn.linear_model import Ridge
    >>> describe(Ridge(alpha=0.5))
    {'class': 'sklearn.linear_model.Ridge', 'alpha': 0.5}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if is_estimator(value):
        fitted = _fitted(value)
        if fitted:
            raise InputError(f"{where}: a fitted {type(value).__name__} (it has {fitted[0]}); "
                             "give an unfitted estimator (sklearn.base.clone gives one)")
        try:
            out = {CLASS: class_path(type(value))}
        except InputError as exc:
            if not keep:
                raise InputError(f"{where}: {exc}") from None
            out = {CLASS: name_text(type(value))}
        defaults = _defaults(type(value))
        for key, v in value.get_params(deep=False).items():
            if key in defaults and _same(v, defaults[key]):
                continue
            out[key] = describe(v, f"{where}.{key}", keep=keep)
        return out
    if isinstance(value, (list, tuple)):
        return [describe(v, f"{where}[{i}]", keep=keep) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) for k in value):
            raise InputError(f"{where}: mapping keys must be strings or integers")
        return {k: describe(v, f"{where}.{k}", keep=keep) for k, v in value.items()}
    if isinstance(value, range):
        return list(value)
    if callable(value) and not isinstance(value, np.random.RandomState):
        try:
            return {FUNCTION: class_path(value)}
        except InputError as exc:
            if keep:
                return _object(value)
            raise InputError(f"{where}: {exc}; use a module-level function") from None
    if keep:
        return _object(value)
    if isinstance(value, np.random.RandomState):
        raise InputError(f"{where}: a RandomState object cannot be stored; give an integer seed")
    raise InputError(f"{where}: a {type(value).__name__} cannot be described as plain data "
                     "(numbers, strings, lists, mappings, estimators, importable functions)")


def build(value: Any, where: str = "estimator", default: Any = None) -> Any:
    """The object a description stands for (new objects on every call).

    ``default`` is the class default of the parameter being rebuilt: a list becomes a tuple
    where the default is a tuple.
    """
    if isinstance(value, dict):
        if OBJECT in value:
            raise InputError(f"{where}: {value[OBJECT]} was a Python object, which its "
                             "description records but cannot rebuild")
        if set(value) == {FUNCTION}:
            return import_path(value[FUNCTION], where)
        if CLASS in value:
            cls = import_path(value[CLASS], where)
            kwargs = build_params({k: v for k, v in value.items() if k != CLASS}, cls, where)
            try:
                return cls(**kwargs)
            except Exception as exc:  # noqa: BLE001 - a constructor refusing its arguments
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError(f"{where}: {value[CLASS]}: {message}") from None
        return {k: build(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        items = [build(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if isinstance(default, tuple) else items
    return value


def _tuples(key: str, value):
    """``steps`` / ``transformers`` items as tuples, as scikit-learn users write them."""
    if key in _TUPLE_LISTS and isinstance(value, list):
        return [tuple(v) if isinstance(v, list) else v for v in value]
    return value


def build_params(params: dict, cls, where: str) -> dict:
    """Constructor / set_params keyword values of ``cls`` from their descriptions."""
    defaults = _defaults(cls)
    return {k: _tuples(k, build(v, f"{where}.{k}", defaults.get(k))) for k, v in params.items()}


def describe_splitter(cv, where: str = "cv") -> dict:
    """``{class: ..., <param>: <value>}`` of a scikit-learn splitter object (KFold, ...).

    Splitters have no ``get_params``; their parameters are read as their repr reads them
    (attributes named like the constructor arguments, ``cvargs`` for the Repeated ones).
    """
    if isinstance(cv, type) or not hasattr(cv, "split"):
        raise InputError(f"{where}: {cv!r} is not a splitter object; give an int or e.g. KFold(5)")
    try:
        out = {CLASS: class_path(type(cv))}
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    cvargs = getattr(cv, "cvargs", None) or {}
    for key, default in _defaults(type(cv)).items():
        value = getattr(cv, key, cvargs.get(key, default))
        if not _same(value, default):
            out[key] = describe(value, f"{where}.{key}")
    # a required argument (PredefinedSplit's test_fold) is kept whatever its value
    for key in _required(type(cv)):
        value = getattr(cv, key, cvargs.get(key))
        value = value.tolist() if isinstance(value, np.ndarray) else value
        out[key] = describe(value, f"{where}.{key}")
    return out


def _required(cls) -> list[str]:
    """The constructor's arguments without a default (``self`` and ``*args`` aside)."""
    sig = init_signature(cls)
    if sig is None:
        return []
    return [k for k, p in list(sig.parameters.items())[1:]
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def short(value) -> str:
    """A description as a short text for reports: ``Ridge(alpha=1)``, ``log``, ``[...]``."""
    if isinstance(value, dict) and CLASS in value:
        inner = ", ".join(f"{k}={short(v)}" for k, v in value.items()
                          if k != CLASS and not isinstance(v, list))
        return f"{str(value[CLASS]).rpartition('.')[2]}({inner})"
    if isinstance(value, dict) and set(value) == {FUNCTION}:
        return str(value[FUNCTION]).rpartition(".")[2]
    if isinstance(value, dict) and OBJECT in value:
        return str(value[OBJECT]).rpartition(".")[2]
    if isinstance(value, list):
        return "[...]" if any(isinstance(v, (list, dict)) for v in value) else str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)
