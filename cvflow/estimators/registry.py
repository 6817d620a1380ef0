"""How an estimator declares itself: once, in its own module, read by everything else.

An estimator is a plain function ``f(cube, *, loss=None, **options) -> xarray.Dataset``.
Right below its definition, its module declares it::

    from .registry import Option, declare, numbers, probability

    declare(
        my_interval,                        # the function; its name is the workflow's name
        needs=("fold", "pair"),             # split roles it reads: full, fold, pair, subset
        terms=("fold", "pair"),             # role_terms roles it reads from the whole cube
        options=[Option("alpha", 0.1, probability, "miscoverage of the interval")],
        results={"estimate": ("param",),    # result variables -> dims (the schema; a
                 "se": ("param",),          # "?" suffix marks one that may be absent,
                 "test_risk?": ("param",)}, # e.g. without a held-out test set)
        text=describe,                      # result -> list of text lines (optional)
        html=render,                        # (result, page) -> None (optional)
        check_design=None,                  # (design mapping) -> None, InputError if unusable
        warn_design=None,                   # (folds, repeats) -> warnings `validate` prints
        check_grid=None,                    # (grid, design, options, where) -> None, InputError
                                            # if an option names a param the grid lacks
        metrics=False,                      # accepts per-fold metrics (roc_auc, r2, ...)
        time_ordered=False,                 # valid on time-ordered folds (splitter: timeseries)
        raced=False,                        # a raced cube (cvflow.execution.race_runner) serves it
    )

and its name goes in :data:`BUILT_IN` below (name -> module), which imports the module when the
name is first looked up. Nothing else is edited:

- :mod:`cvflow.workflow.spec` derives the design from the union of ``needs``, checks every option
  with its ``check`` and the options together against the workflow's grid with
  ``check_grid`` (a Dataset holding the cube's ``param`` coordinates) before any fit, so a
  store never keeps a bad option, and refuses an
  estimator whose ``metrics`` / ``time_ordered`` declaration does not fit the loss or the
  folds (:meth:`Estimator.refusal`);
- :mod:`cvflow.report` runs the estimators, renders ``text`` (or a generic table of the
  result) and JSON, and applies ``cvflow report --set NAME.OPTION=VALUE`` through the same
  checks; the loss sums its estimators declare in ``terms`` (the roles they pass to
  :func:`cvflow.estimators._cube.role_terms` with the whole cube: full, fold, pair, oof,
  change) are computed once for all of them (:func:`~cvflow.estimators._cube.shared_terms`).
  The declaration only decides what is shared: an estimator asking for more computes its
  own, with the same result;
- :mod:`cvflow.report.html` calls ``html(result, page)``, where ``page`` offers drawing
  primitives (``page.grid_curve``, ``page.grid_panel``, ``page.curve``,
  ``page.param_intervals``, ``page.scalar_intervals``, ``page.table``; see
  :class:`cvflow.report.html.Page`); without ``html`` a generic renderer draws the shared
  vocabulary (a per-param ``estimate`` along the grid, ``lower``/``upper`` intervals, scalars).

An option's ``check(value, where) -> value`` raises :class:`~cvflow.errors.InputError` with a
one-line message starting with ``where`` (e.g. ``"estimators[2].stability_nested.lambdas"``)
and returns the value to use; ``None`` always means "the default" and is never checked. The
helpers below (:func:`number`, :func:`integer`, :func:`numbers`, :data:`probability`,
:data:`miscoverage`, :func:`choice`, :func:`param_refs`) cover the common
cases; the function itself is still callable directly from Python and checks its options
with the same check functions, best through its declaration (:meth:`Estimator.call_options`).

User estimators: a workflow may name any importable function by dotted path in
``estimators:`` (``mymodule.my_reducer``, found beside the workflow file too; a report of a
store imports it only when trusted, see :mod:`cvflow.trust`); it needs an attribute ``needs`` (a tuple of roles)
and its keyword-only parameters (with their defaults) are its options; optional attributes
``metrics`` and ``time_ordered`` (booleans) and ``describe`` (the text renderer). See
:func:`lookup`.
"""
from __future__ import annotations

import importlib
import inspect
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import numpy as np

from ..errors import InputError
from ..store.coords import SPLIT_KINDS
from .np_roles import TERM_ROLE

Check = Callable[[Any, str], Any]


@dataclass(frozen=True, eq=False)
class Option:
    """One option of an estimator: its name, default, check and a one-line description."""

    name: str
    default: Any = None
    check: Check | None = None
    doc: str = ""


@dataclass(frozen=True, eq=False)
class Estimator:
    """An estimator's declaration (see the module docstring)."""

    name: str
    func: Callable
    needs: tuple[str, ...]
    options: tuple[Option, ...] = ()
    # the role_terms roles it reads from the whole cube, shared within a report (see above)
    terms: tuple[str, ...] = ()
    results: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    text: Callable | None = None
    html: Callable | None = None
    # design(mapping of the workflow's design section) -> None, InputError if the estimator
    # cannot work on it (e.g. 5x2cv needs 2 folds x 5 repeats); called before any fit
    check_design: Callable | None = None
    # (folds K, repeats R) -> list of warnings (text): the design works but the estimator's
    # answer on it is likely weak; ``cvflow validate`` prints them before any fit
    warn_design: Callable | None = None
    # (grid, design, options, where) -> None, InputError if an option names what the study
    # lacks: a param (compare: [a, b]), a hyperparameter, a repeat. ``grid`` is a Dataset of
    # the cube's `param` coordinates built from the workflow's grid, so the estimator resolves
    # names with the same function it applies to the cube; called before any fit
    check_grid: Callable | None = None
    # DESIGN CHOICE: the cheap per-param reducers (K-fold, corrected K-fold, stability) are
    # drawn in every HTML report whose store has their splits, asked for or not: the risk
    # along the grid is what a reader looks at first.
    overview: bool = False
    # DESIGN CHOICE: what an estimator accepts beyond pointwise losses on exchangeable folds is
    # declared, default no: ``metrics`` (per-fold metrics such as ROC AUC: the estimator scores
    # each test fold as a whole) and ``time_ordered`` (it does not assume exchangeable samples).
    metrics: bool = False
    time_ordered: bool = False
    # user functions taking **options accept any option name
    open_options: bool = False
    # DESIGN CHOICE: whether a raced cube (cvflow.execution.race_runner: the params a sequential rule beat
    # lack their later fits) serves the estimator, declared, default no: a per-param or
    # per-pair estimate is exact for the survivors (NaN for the dropped, by the NaN rule), and
    # a selection among survivors is the full study's with probability >= 1 - alpha; one that
    # needs every param on every split (BBC-CV, CV with confidence over all params, a nested
    # selection) refuses a raced study with one line until `racing: false` fills it.
    raced: bool = False

    def check_options(self, options: Mapping | None, where: str) -> dict:
        """The options checked and normalised; InputError naming ``where.option`` if not."""
        if options is None:
            return {}
        if not isinstance(options, Mapping):
            raise InputError(f"{where}: options must be a mapping, got {type(options).__name__}")
        known = {o.name: o for o in self.options}
        out = {}
        for key, value in options.items():
            option = known.get(key)
            if option is None and not self.open_options:
                allowed = ", ".join(sorted(known)) or "none"
                raise InputError(f"{where}.{key}: unknown option of {self.name}; "
                                 f"its options are: {allowed}")
            if value is not None and option is not None and option.check is not None:
                value = option.check(value, f"{where}.{key}")
            out[key] = value
        return out

    def call_options(self, **values) -> dict:
        """The options of a direct call (``bbc_cv(cube, B=200)``) through the same checks as a
        workflow's and ``--set``'s (:meth:`check_options`), so an option is checked in one
        place, its declaration; None is the declared default. InputError names
        ``<estimator>.<option>``."""
        defaults = {o.name: o.default for o in self.options}
        return self.check_options({key: defaults.get(key) if value is None else value
                                   for key, value in values.items()}, self.name)

    def refusal(self, loss, ordered: bool) -> str:
        """Why this estimator cannot reduce with ``loss`` (a :class:`cvflow.estimators.losses.Loss`) on
        folds that are (``ordered``) or are not time-ordered; "" when it can."""
        if not loss.pointwise and not self.metrics:
            return (f"loss: {loss.label!r} is a per-fold metric, but {self.name} averages "
                    "per-sample losses; use a pointwise loss or the kfold / nested_cv estimators")
        if ordered and not self.time_ordered:
            return (f"{self.name} assumes exchangeable samples, but design.splitter is "
                    "time-ordered (timeseries); use kfold")
        return ""

    def __call__(self, cube, *, loss: str | None = None, **options):
        return self.func(cube, loss=loss, **options)


# DESIGN CHOICE: the built-in estimators by name -> the module (of this package) that declares
# them, imported when the name is first read: a search or a workflow using the K-fold alone
# does not import the other sixteen (~25 modules; issue 41). The order is the order of listings
# (`cvflow report --estimators`, the reference). tests/test_registry.py checks that every
# declaring module of the package is here.
BUILT_IN = {"kfold": "kfold", "corrected_kfold": "corrected", "stability": "stability",
            "stability_nested": "stability", "nested_cv": "nested",
            "nested_compare": "nested_compare", "bates_ncv": "bates", "wald_cv": "bates",
            "ustat": "ustat", "nadeau_bengio": "ustat", "corrected_t": "corrected_t",
            "bayes_t": "bayes_t", "compare_all": "compare_all", "paired_5x2cv": "paired_5x2cv",
            "bbc_cv": "bbc_cv", "cv_confidence": "cv_confidence", "plan": "study_size"}


class Registry(Mapping[str, Estimator]):
    """The estimators by name: the built-in ones (:data:`BUILT_IN`, each module imported on the
    first read of one of its names) and any declared since. ``name in REGISTRY``, listing the
    names and ``len`` import nothing; reading a declaration imports its module."""

    def __init__(self, built_in: Mapping[str, str]):
        self._modules = dict(built_in)
        self._declared: dict[str, Estimator] = {}

    def __getitem__(self, name: str) -> Estimator:
        if name not in self._declared and name in self._modules:
            importlib.import_module(f"{__package__}.{self._modules[name]}")
        return self._declared[name]

    def __contains__(self, name: object) -> bool:
        return name in self._declared or name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._modules, *self._declared]))

    def __len__(self) -> int:
        return len(self._modules.keys() | self._declared.keys())

    def __repr__(self) -> str:
        return f"Registry({', '.join(self)})"

    def add(self, spec: Estimator) -> None:
        """Record ``spec``; ValueError if another function holds its name."""
        held = self._declared.get(spec.name)
        if held is not None and held.func is not spec.func:
            raise ValueError(f"estimator {spec.name!r} is declared twice")
        self._declared[spec.name] = spec


REGISTRY = Registry(BUILT_IN)


def declare(func: Callable, *, needs, terms=(), options=(), results=None, text=None,
            html=None, check_design=None, check_grid=None, warn_design=None,
            overview: bool = False,
            metrics: bool = False, time_ordered: bool = False, name: str | None = None,
            raced: bool = False) -> Estimator:
    """Register ``func`` as the estimator ``name`` (default: its ``__name__``); see the module
    docstring. Returns the declaration; ``func`` keeps working as a plain function."""
    spec = Estimator(name=name or func.__name__, func=func, needs=_roles(needs, func.__name__),
                     terms=_terms(terms, func.__name__),
                     options=tuple(options), results=dict(results or {}), text=text, html=html,
                     check_design=check_design, check_grid=check_grid,
                     warn_design=warn_design, overview=overview,
                     metrics=metrics,
                     time_ordered=time_ordered, raced=raced)
    REGISTRY.add(spec)
    return spec


def _roles(needs, where: str) -> tuple[str, ...]:
    if isinstance(needs, str) or not isinstance(needs, (tuple, list, set, frozenset)):
        raise InputError(f"{where}.needs: {needs!r}; give a tuple of split roles, "
                         f"e.g. ('full', 'fold') (roles: {', '.join(SPLIT_KINDS)})")
    bad = [r for r in needs if r not in SPLIT_KINDS]
    if bad or not needs:
        raise InputError(f"{where}.needs: {bad[0] if bad else '()'} is not a split role; "
                         f"use some of {', '.join(SPLIT_KINDS)}")
    return tuple(dict.fromkeys(needs))


# the roles of role_terms, as its kernels declare them (np_roles.TERM_ROLE)
TERM_ROLES = tuple(dict.fromkeys(TERM_ROLE.values()))


def _terms(terms, where: str) -> tuple[str, ...]:
    bad = [r for r in terms if r not in TERM_ROLES]
    if isinstance(terms, str) or bad:
        raise ValueError(f"{where}.terms: {terms!r}; give a tuple of {', '.join(TERM_ROLES)}")
    return tuple(dict.fromkeys(terms))


def lookup(name: str, *, where: str = "estimators", search: str | Path | None = None
           ) -> Estimator:
    """The declaration of ``name``: a built-in estimator or a user function by dotted path.

    A dotted path is imported as a module attribute; ``search`` (a workflow file's directory)
    is tried first, so a module beside the workflow file is found. Without it the import is
    the ordinary one (installed packages, ``PYTHONPATH``): a name read from a store is looked
    up only once trusted, never from the store's directory (:mod:`cvflow.trust`). The function needs an
    attribute ``needs`` (a tuple of split roles); its keyword-only parameters other than
    ``loss`` are its options (``**options`` accepts any).
    """
    if name in REGISTRY:
        return REGISTRY[name]
    if not isinstance(name, str) or "." not in name:
        raise InputError(f"{where}: unknown estimator {name!r}; available: "
                         f"{', '.join(sorted(REGISTRY))}, or a function by dotted path "
                         "(module.function) with a `needs` attribute")
    func = _import(name, where, search)
    if not callable(func):
        raise InputError(f"{where}: {name} is not a function")
    if not hasattr(func, "needs"):
        raise InputError(f"{where}: {name} has no `needs` attribute; set e.g. "
                         f"{name.rpartition('.')[2]}.needs = ('fold',) to the split roles it reads")
    needs = _roles(func.needs, f"{where}: {name}")
    params = inspect.signature(func).parameters.values()
    if not any(p.name == "loss" or p.kind is p.VAR_KEYWORD for p in params):
        raise InputError(f"{where}: {name} takes no `loss` keyword; write it as "
                         "f(cube, *, loss=None, **options)")
    options = tuple(Option(p.name, None if p.default is p.empty else p.default)
                    for p in params if p.kind is p.KEYWORD_ONLY and p.name != "loss")
    return Estimator(name=name, func=func, needs=needs, options=options,
                     text=getattr(func, "describe", None),
                     metrics=bool(getattr(func, "metrics", False)),
                     time_ordered=bool(getattr(func, "time_ordered", False)),
                     raced=bool(getattr(func, "raced", False)),
                     open_options=any(p.kind is p.VAR_KEYWORD for p in params))


def _import(path: str, where: str, search) -> Any:
    module_name, _, attr = path.rpartition(".")
    added = search is not None and str(search) not in sys.path
    if added:
        sys.path.insert(0, str(search))
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{where}: {path!r} does not import ({exc}); install its module or put "
                         "its directory on PYTHONPATH") from None
    finally:
        if added:
            sys.path.remove(str(search))


# ---------------------------------------------------------------------------------------------
# option checks: (value, where) -> value, InputError on a bad value


def _real(value, where: str, hint: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not a number; {hint}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not a number; {hint}") from None
    if not math.isfinite(x):
        raise InputError(f"{where}: {value!r} is not finite; {hint}")
    return x


def number(low: float | None = None, high: float | None = None, *, open_low: bool = False,
           open_high: bool = False) -> Check:
    """A finite number in [low, high] (open ends on request)."""
    lo_b, hi_b = "(" if open_low else "[", ")" if open_high else "]"
    span = f"{lo_b}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi_b}"

    def check(value, where: str) -> float:
        x = _real(value, where, f"give a number in {span}")
        if (low is not None and (x < low or (open_low and x == low))) or \
                (high is not None and (x > high or (open_high and x == high))):
            raise InputError(f"{where}: {value!r} is outside {span}")
        return x
    return check


def integer(low: int | None = None) -> Check:
    """A whole number, at least ``low`` (numpy integers accepted, returned as int)."""
    want = {0: "a non-negative integer", 1: "a positive integer, e.g. 1000"}.get(
        low, "an integer" if low is None else f"an integer >= {low}")

    def check(value, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or (low is not None and value < low):
            raise InputError(f"{where}: {value!r}; give {want}")
        return int(value)
    return check


def numbers(low: float | None = None) -> Check:
    """A non-empty list of finite numbers >= ``low`` (a scalar is a list of one)."""
    def check(value, where: str) -> list[float]:
        items = value if isinstance(value, (list, tuple)) else [value]
        hint = f"give a non-empty list of finite numbers{'' if low is None else f' >= {low:g}'}"
        if not items:
            raise InputError(f"{where}: []; {hint}")
        out = [_real(v, where, hint) for v in items]
        bad = [v for v in out if low is not None and v < low]
        if bad:
            raise InputError(f"{where}: {bad[0]:g} is below {low:g}; {hint}")
        return out
    return check


def level(hint: str) -> Check:
    """A number in (0, 1), the level of a test or the miscoverage of an interval; ``hint``
    ends the message of a refused value."""
    def check(value, where: str) -> float:
        try:
            x = float("nan") if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            x = float("nan")
        if not 0 < x < 1:
            raise InputError(f"{where}: {value!r}; {hint}")
        return x
    return check


probability: Check = level("use a number in (0, 1), e.g. 0.05 for a test or 0.1 for a 90% "
                           "interval")
miscoverage: Check = level("the miscoverage level must be in (0, 1), e.g. 0.1 for a 90% interval")


def choice(*values: str) -> Check:
    """One of ``values`` (strings)."""
    def check(value, where: str) -> str:
        if value not in values:
            raise InputError(f"{where}: {value!r}; use one of {', '.join(map(repr, values))}")
        return value
    return check


def _param_ref(value, where: str):
    ok = (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str) \
        or (isinstance(value, dict) and "learner" in value)
    if not ok:
        raise InputError(f"{where}: {value!r} is not a param; use an index, a learner name, "
                         "'learner(key=value)' or {learner: name, key: value}")
    return value


def param_refs(low: int = 1, high: int = 1) -> Check:
    """``low``..``high`` params, each an index, a learner name, ``"learner(key=value)"`` or a
    dict ``{learner: name, key: value}`` (resolved against the cube by the estimator). With
    ``high == 1`` a single param (not a list)."""
    if high == 1:
        return _param_ref

    def check(value, where: str) -> list:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not low <= len(items) <= high:
            raise InputError(f"{where}: {value!r}; give {low} to {high} params, e.g. [0, 1] or "
                             "['ridge(alpha=1)', 'lasso(alpha=0.1)']")
        return [_param_ref(v, where) for v in items]
    return check


def fmt(x: float) -> str:
    """A number for the text renderers: 4 significant digits, "nan" when not finite."""
    return f"{x:.4g}" if math.isfinite(x) else "nan"
