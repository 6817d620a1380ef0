"""A store is data: which code reading one may import, and how a user trusts it (docs/guide/trust.md).

A workflow file is code: its dotted paths (learner classes, user estimators, a user loss) are
imported when it is run or validated, a user estimator or loss relative to the file's
directory. A store *names* code too, in its attributes: the workflow's learner classes and the
classes and functions inside their params, user estimators (``estimators``) and a user loss
(``loss``). Reading a store (opening it, ``status``, ``report``, :meth:`cvflow.Study.from_store`)
imports none of these unless the reader trusts them:

- ``trust_code=True`` (``cvflow report --trust``): every name the store holds is imported;
- ``trust_code=["mymod.gap", ...]``: these exact dotted names, as skops.io's ``trusted=`` list;
- a name the reader gives himself (``--loss mymod.myloss``, ``--set mymod.gap.scale=2``,
  ``loss=`` or ``estimators=`` in Python) is his own choice and is imported.

Trusted by default: scikit-learn's estimator and splitter classes (``sklearn.*``) and numpy's
ufuncs (``numpy.log``), the vocabulary of every learner description. A user estimator or loss
is never trusted by default: it is someone's own code.

DESIGN CHOICE: a trusted name is imported the ordinary way, from installed packages and
``PYTHONPATH``; never from the store's ``workflow_dir`` attribute nor from the working directory,
and ``sys.path`` is never changed. Both directories are chosen by whoever wrote the store (a
relative ``workflow_dir`` can point into the store itself), and a directory put on ``sys.path``
also shadows every module imported after it. The test that fails if this breaks:
``tests/test_trust.py::test_reading_a_hostile_store_imports_nothing``.
"""
from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Union
import numpy as np

from .objects import CLASS, FUNCTION
from .errors import InputError
from .terminal import visible
from .estimators.losses import names_code

# True: everything; False / None: the defaults only; names: these exact dotted paths too
Trust = Union[bool, None, Iterable[str]]

# what a dotted name is, as the messages say it
LEARNER, CLASS_KIND, FUNCTION_KIND, ESTIMATOR, LOSS, SCORER = (
    "learner class", "class", "function", "user estimator", "user loss", "scorer function")
# scorer functions trusted by default: scikit-learn's metrics and an estimator's own score
OWN_SCORE = "cvflow.fitting.scoring.estimator_score"


def trusted_names(trust: Trust) -> frozenset[str] | None:
    """The names ``trust`` allows beyond the defaults; None when it allows everything."""
    if trust is True:
        return None
    if trust is None or trust is False:
        return frozenset()
    if isinstance(trust, str):
        return frozenset([trust])
    try:
        names = frozenset(trust)
    except TypeError:
        raise InputError(f"trust_code: {trust!r}; give True, False or a list of dotted names, "
                         "e.g. ['mymodule.my_reducer']") from None
    bad = sorted(repr(n) for n in names if not isinstance(n, str))
    if bad:
        raise InputError(f"trust_code: {bad[0]} is not a dotted name; give strings such as "
                         "'mymodule.my_reducer'")
    return names


def trusted(name: str, kind: str, trust: Trust) -> bool:
    """Whether reading a store may import ``name`` (a ``kind`` of code) under ``trust``."""
    names = trusted_names(trust)
    return names is None or name in names or by_default(name, kind)


def by_default(name: str, kind: str) -> bool:
    """Trusted without asking: a scikit-learn estimator or splitter class, a numpy ufunc.

    Deciding imports the named ``sklearn`` module (scikit-learn's own code); nothing outside
    ``sklearn`` and ``numpy`` is imported here.
    """
    module, _, attr = name.rpartition(".")
    if kind in (LEARNER, CLASS_KIND) and module.split(".")[0] == "sklearn":
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return True             # nothing to run: building it fails with its own message
        # a class, not a function spelled as one ({class: sklearn.datasets.fetch_openml} would
        # download when "built"); estimators have get_params, splitters split
        return isinstance(obj, type) and (hasattr(obj, "get_params") or hasattr(obj, "split"))
    if kind == FUNCTION_KIND and module == "numpy":
        return isinstance(getattr(np, attr, None), np.ufunc)
    if kind == SCORER:
        return name == OWN_SCORE or (module == "sklearn.metrics" and not attr.startswith("_"))
    return False


def is_user_estimator(name: Any) -> bool:
    """Whether an estimator name is a function by dotted path (code), not a built-in."""
    return isinstance(name, str) and "." in name


def described(value: Any, out: dict[str, str]) -> dict[str, str]:
    """Every ``{class: ...}`` / ``{function: ...}`` inside a description (see
    :mod:`cvflow.objects`) added to ``out`` as name -> kind; returns ``out``."""
    if isinstance(value, dict):
        if set(value) == {FUNCTION}:
            out.setdefault(str(value[FUNCTION]), FUNCTION_KIND)
            return out
        if CLASS in value:
            out.setdefault(str(value[CLASS]), CLASS_KIND)
        for key, item in value.items():
            if key != CLASS:
                described(item, out)
    elif isinstance(value, list):
        for item in value:
            described(item, out)
    return out


def _preprocess(steps: Any, out: dict[str, str]) -> None:
    """A learner's ``preprocess`` as a workflow spells it (paths or {path: params}) or as a
    param stores it ([{estimator: path, params: ...}])."""
    for step in steps or []:
        if isinstance(step, str):
            out.setdefault(step, CLASS_KIND)
        elif isinstance(step, dict) and "estimator" in step:
            out.setdefault(str(step["estimator"]), CLASS_KIND)
            described(step.get("params"), out)
        elif isinstance(step, dict):
            for path, params in step.items():
                out.setdefault(str(path), CLASS_KIND)
                described(params, out)


def workflow_code(config: Mapping) -> dict[str, str]:
    """Every dotted name a parsed workflow (a file's, or a store's ``workflow`` attribute)
    imports when it is built or reported: name -> kind."""
    out: dict[str, str] = {}
    for entry in config.get("learners") or []:
        if not isinstance(entry, dict):
            continue
        path = entry.get("class", entry.get("estimator"))
        if path is not None:
            out.setdefault(str(path), LEARNER)
        described(entry.get("params"), out)
        described(entry.get("grid"), out)
        _preprocess(entry.get("preprocess"), out)
    described((config.get("design") or {}).get("splitter"), out)
    if names_code(config.get("loss")):
        out.setdefault(config["loss"], LOSS)
    scorers = config.get("scorers")
    for spec in (scorers.values() if isinstance(scorers, dict) else ()):
        for key in ("function", "make_scorer"):       # cvflow.workflow.scorer_specs' spellings
            if isinstance(spec, dict) and isinstance(spec.get(key), str):
                out.setdefault(spec[key], SCORER)
    for item in config.get("estimators") or []:
        for name in ([item] if isinstance(item, str) else list(item) if isinstance(item, dict)
                     else item[:1] if isinstance(item, list) else []):
            if is_user_estimator(name):
                out.setdefault(str(name), ESTIMATOR)
    return out


def param_code(setting: Mapping) -> dict[str, str]:
    """Every dotted name one stored param (its ``param_json``) imports when it is fitted."""
    out = {str(setting["estimator"]): LEARNER}
    described(setting.get("params"), out)
    _preprocess(setting.get("preprocess"), out)
    return out


def store_code(cube) -> dict[str, str]:
    """Every dotted name an opened store names (its workflow, every stored param, its
    estimators and default loss): name -> kind. Reading it imports nothing."""
    out = workflow_code(json.loads(cube.attrs.get("workflow") or "{}"))
    if "param_json" in cube.variables:
        for text in dict.fromkeys(str(t) for t in cube["param_json"].values):
            for name, kind in param_code(json.loads(text)).items():
                out.setdefault(name, kind)
    for name, _ in json.loads(cube.attrs.get("estimators") or "[]"):
        if is_user_estimator(name):
            out.setdefault(name, ESTIMATOR)
    if names_code(cube.attrs.get("loss")):
        out.setdefault(cube.attrs["loss"], LOSS)
    return out


def untrusted(names: Mapping[str, str], trust: Trust = False) -> dict[str, str]:
    """The part of ``names`` (name -> kind) that ``trust`` does not allow, in order."""
    return {name: kind for name, kind in names.items() if not trusted(name, kind, trust)}


def untrusted_code(store, trust: Trust = False) -> dict[str, str]:
    """What reading ``store`` (a path, a URL or an opened cube) would need trust for: each
    dotted name it holds that is not trusted by default (nor by ``trust``) -> its kind.

    As skops.io's ``get_untrusted_types``: look before you pass ``trust_code``.

    >>> cvflow.trust.untrusted_code("study.zarr")        # doctest: +SKIP
    {'my_reducers.pair_gap': 'user estimator', 'mylosses.cubic': 'user loss'}
    """
    from .store.cube import open_cube

    cube = store if hasattr(store, "attrs") else open_cube(store)
    return untrusted(store_code(cube), trust)


def listed(names: Mapping[str, str]) -> str:
    """``kind name, kind name`` for a message."""
    return ", ".join(f"{kind} {visible(name)}" for name, kind in names.items())


def how(names: Iterable[str], *, cli: bool = True) -> str:
    """How to trust ``names``: from Python, and from the command line with ``cli``."""
    example = json.dumps(sorted(names)).replace('"', "'")
    python = f"trust_code=True or trust_code={example}"
    return (f"pass --trust (Python: {python}) if you trust its author" if cli
            else f"pass {python} if you trust its author")
