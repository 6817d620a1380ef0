"""Scorers: scores that need the fitted model, computed where each fit runs (the workflow's
``scorers`` section, :class:`cvflow.Study`'s ``scorers=``).

A loss is applied to stored predictions at reduction time; a scorer is called on the fitted
model, ``scorer(estimator, X, y) -> float``, as scikit-learn's ``GridSearchCV`` calls its
scoring, so it is computed by the task that fits (:mod:`cvflow.fitting.scoring`) and its values
are stored per (param, split) beside ``pred`` (``score``, ``train_score``, ``score_time``).

A workflow spells each scorer as plain data (a store holds no pickles):

- ``f1``: a scikit-learn scoring name (``sklearn.metrics.get_scorer``);
- ``{function: mymod.my_scorer}``: a function ``(estimator, X, y) -> float`` by dotted path;
- ``{make_scorer: sklearn.metrics.fbeta_score, beta: 2, greater_is_better: true,
  response_method: predict}``: ``sklearn.metrics.make_scorer`` of a metric by dotted path;
- ``{object: "<description>"}``: a scorer given in Python that no name imports (a lambda, a
  function of ``__main__``, another scorer class). The study runs with the object itself; its
  store records the description and says the study cannot be rebuilt from the file.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from ..errors import InputError
from ..objects import FUNCTION, build, class_path, describe, import_path

MAKE_SCORER, OBJECT = "make_scorer", "object"
_MAKE_KEYS = ("greater_is_better", "response_method")
SCORERS_KEYS = {"scorers", "train_scores"}         # the workflow's top-level keys


def scorer_names() -> set[str]:
    from sklearn.metrics import get_scorer_names

    return set(get_scorer_names())


@functools.cache
def _make_scorer_class() -> type:
    """The class of ``make_scorer``'s scorers, as ``make_scorer`` itself makes one (scikit-learn
    gives the class no public name)."""
    from sklearn.metrics import accuracy_score, make_scorer

    return type(make_scorer(accuracy_score))


def _is_make_scorer(obj) -> bool:
    return type(obj) is _make_scorer_class()


def is_sklearn_scorer(obj) -> bool:
    """Whether ``obj`` is one of scikit-learn's scorers (``get_scorer``, ``make_scorer``: one
    number per call), read from ``make_scorer``'s class, not a private scikit-learn name."""
    return isinstance(obj, _make_scorer_class())


def description(obj) -> str:
    """A scorer as one line of text, stable from run to run (no memory addresses): a scoring
    name as itself, a function as ``module.qualname``, any other object as its repr."""
    if isinstance(obj, str):
        return obj
    if callable(obj) and hasattr(obj, "__qualname__") and not _is_make_scorer(obj):
        return f"{getattr(obj, '__module__', None) or '?'}.{obj.__qualname__}"
    return repr(obj)


def describe_scorer(obj, where: str) -> Any:
    """The plain-data spelling of a scorer (see the module's docstring): a name, a function or
    a ``make_scorer`` by dotted path, else ``{object: <description>}``. InputError if ``obj``
    is not a scorer at all."""
    if isinstance(obj, str):
        check_name(obj, where)
        return obj
    if not callable(obj):
        raise InputError(f"{where}: {obj!r} is not a scorer; give a scoring name ('f1'), "
                         "make_scorer(...) or a function (estimator, X, y) -> float")
    if _is_make_scorer(obj):
        try:
            spec = {MAKE_SCORER: class_path(obj._score_func),
                    "greater_is_better": obj._sign > 0,
                    "response_method": describe(obj._response_method, where),
                    **{str(k): describe(v, f"{where}.{k}") for k, v in obj._kwargs.items()}}
            if repr(build_scorer(spec, where)) == repr(obj):
                return spec
        except InputError:
            pass
    elif not isinstance(obj, type) and hasattr(obj, "__qualname__"):
        try:
            return {FUNCTION: class_path(obj)}
        except InputError:
            pass
    return {OBJECT: description(obj)}


def check_name(name: str, where: str) -> None:
    if name not in scorer_names():
        raise InputError(f"{where}: {name!r} is not a scikit-learn scoring name; "
                         "sklearn.metrics.get_scorer_names() lists them")


def build_scorer(spec: Any, where: str) -> Callable:
    """The scorer a spelling stands for (imports what it names); InputError if it cannot."""
    from sklearn.metrics import get_scorer, make_scorer

    if isinstance(spec, str):
        check_name(spec, where)
        return get_scorer(spec)
    if isinstance(spec, dict) and set(spec) == {FUNCTION}:
        func = import_path(spec[FUNCTION], where)
        if not callable(func):
            raise InputError(f"{where}: {spec[FUNCTION]} is not callable")
        return func
    if isinstance(spec, dict) and MAKE_SCORER in spec:
        metric = import_path(spec[MAKE_SCORER], where)
        kwargs = {k: build(v, f"{where}.{k}") for k, v in spec.items()
                  if k not in (MAKE_SCORER, *_MAKE_KEYS)}
        method = spec.get("response_method", "predict")
        try:
            return make_scorer(metric, greater_is_better=bool(spec.get("greater_is_better", True)),
                               response_method=tuple(method) if isinstance(method, list)
                               else method, **kwargs)
        except Exception as exc:  # noqa: BLE001 - make_scorer refusing its arguments
            raise InputError(f"{where}: make_scorer: {exc}".splitlines()[0]) from None
    if isinstance(spec, dict) and set(spec) == {OBJECT}:
        raise InputError(f"{where}: {spec[OBJECT]} was given in Python as an object no name "
                         "imports, so the study cannot be rebuilt from its file: give the "
                         "scorer again (Study(scorers=...)), or a scoring name, "
                         "{function: module.f} or {make_scorer: module.metric}")
    raise InputError(f"{where}: {spec!r}; give a scikit-learn scoring name, {{function: "
                     "module.f}, or {make_scorer: module.metric, <its keyword arguments>}")


def rebuildable(spec: Any) -> bool:
    """Whether a spelling names what rebuilds the scorer (not a bare description)."""
    return not (isinstance(spec, dict) and set(spec) == {OBJECT})


def parse_scorers(where: str, raw: Any, train: Any) -> tuple[dict, bool]:
    """The workflow's ``scorers`` (name -> spelling, checked; a dotted path is imported) and
    ``train_scores`` (bool)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{where}: scorers: give a mapping name -> scorer, e.g. "
                         "{f1: f1, mine: {function: mymod.my_scorer}}")
    out = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{where}: scorers: {name!r} is not a name; give non-empty text")
        key = f"scorers.{name}"
        if isinstance(spec, dict) and set(spec) == {OBJECT}:
            if not isinstance(spec[OBJECT], str):
                raise InputError(f"{where}: {key}.object: give the scorer's description (text)")
        else:
            build_scorer(spec, f"{where}: {key}")
        out[name] = spec
    if not isinstance(train, bool):
        raise InputError(f"{where}: train_scores: {train!r}; use true or false")
    if train and not out:
        raise InputError(f"{where}: train_scores: true needs scorers (the train scores of "
                         "losses are read from the stored predictions)")
    return out, train


def record(specs: dict, scorers: dict[str, Callable]) -> dict:
    """The store's ``scorers`` attribute: name -> {description, rebuild}: what each scorer is
    (a scoring name as itself, else :func:`description` of the object) and whether the
    workflow's spelling rebuilds it (see :mod:`cvflow.store.cube`)."""
    return {name: {"description": spec if isinstance(spec, str)
                   else spec[OBJECT] if not rebuildable(spec) else description(scorers[name]),
                   "rebuild": rebuildable(spec)}
            for name, spec in specs.items()}
