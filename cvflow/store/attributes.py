"""A store's root attributes: each of the type cvflow writes, and those that index into the
store consistent with the data they point at.

Metadata carries no checksum (Zarr keeps it in ``zarr.json``), so a changed attribute cannot
be seen by its bytes; what can be seen is an attribute of the wrong type (``estimators`` a
JSON list instead of the JSON text of one) and an index that points at the wrong data
(``full_split`` naming a split that is not the full one: ``corrected_kfold`` then silently
chose another model). :func:`problems` lists both; :func:`cvflow.store.cube.open_cube` refuses a
store with any (:class:`DamagedAttribute`, exit 2) and ``cvflow status`` lists them.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from ..errors import RESTORE, StoreError
from .schema import STORE_FORMAT, STORE_FORMAT_ATTR, UNSCORED_FORMAT

# DESIGN CHOICE: each attribute's type as cvflow writes it (cvflow.workflow.spec, cvflow.store.creation,
# cvflow.execution.extend, cvflow.execution.race_runner): plain text, or JSON text of a list or an object. Absent is
# fine (older stores lack some); None only where cvflow writes None.
TEXT = ("cvflow_version", "workflow_hash", "data_hash", "task", "workflow_dir", "coordinates")
OPTIONAL_TEXT = ("loss",)
JSON_OF: dict[str, tuple[type, ...]] = {
    "workflow": (dict,), "estimators": (list,), "chunks": (list,), "classes": (list, type(None)),
    "columns": (list, dict), "learners": (dict,), "workflow_params": (list,), "racing": (dict,),
    "scorers": (dict,)}
KINDS = {dict: "a JSON object", list: "a JSON list", type(None): "null"}

LEARNERS_ATTR = "learners"   # {name: {estimator, params, output}} of every learner ever stored
# the store indices of the params the last workflow lists (absent: every param); the others
# are kept, and reports leave them out unless asked (cvflow.report.workflow_view)
WORKFLOW_PARAMS_ATTR = "workflow_params"
RACING_ATTR = "racing"       # a raced study's race (written by cvflow.execution.race_runner; race_record)


class DamagedAttribute(StoreError):
    """A root attribute of a store is not what cvflow wrote (its type, or what it indexes)."""

    def __init__(self, location: str, problem: str):
        super().__init__(f"store: {location}: {problem}; the store is damaged: {RESTORE}")
        self.location, self.problem = location, problem

    def __reduce__(self):
        return type(self), (self.location, self.problem)


def _kind(value) -> str:
    text = json.dumps(value, default=str)
    return f"a {type(value).__name__} ({text if len(text) <= 40 else text[:37] + '...'})"


def _type_problems(attrs: dict) -> tuple[list[str], dict]:
    """The attributes of the wrong type, and the JSON ones decoded."""
    out, decoded = [], {}
    for name in TEXT + OPTIONAL_TEXT:
        value = attrs.get(name)
        if name in attrs and not isinstance(value, str) and not (
                value is None and name in OPTIONAL_TEXT):
            out.append(f"attribute {name} is {_kind(value)}, not text")
    for name, types in JSON_OF.items():
        if name not in attrs:
            continue
        value = attrs[name]
        if not isinstance(value, str):
            out.append(f"attribute {name} is {_kind(value)}, not the JSON text cvflow writes")
            continue
        try:
            decoded[name] = json.loads(value)
        except ValueError:
            out.append(f"attribute {name} is not valid JSON")
            continue
        if not isinstance(decoded[name], types):
            out.append(f"attribute {name} is JSON of {_kind(decoded[name])}, not "
                       + " or ".join(KINDS[t] for t in types))
            del decoded[name]
    estimators = decoded.get("estimators")
    if estimators is not None and not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
            and isinstance(e[1], dict) for e in estimators):
        out.append("attribute estimators is not a JSON list of [name, options] pairs")
    return out, decoded


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def format_problem(attrs) -> str | None:
    """What is wrong with a store's ``cvflow_format`` (absent: format 1), or None."""
    if STORE_FORMAT_ATTR not in attrs:
        return None
    value = attrs[STORE_FORMAT_ATTR]
    if _is_int(value) and value >= 1:
        return None
    return (f"attribute {STORE_FORMAT_ATTR} is {_kind(value)}, not a store format (a whole "
            f"number from 1; this cvflow writes {UNSCORED_FORMAT}, {STORE_FORMAT} with scorers)")


class NewerFormat(StoreError):
    """A store written by a newer cvflow, in a format this one does not read."""

    def __init__(self, location: str, value: int):
        super().__init__(f"store: {location} has store format {value}, newer than this "
                         f"cvflow's ({STORE_FORMAT}); upgrade cvflow to read it")


def check_newer(location: str, attrs) -> None:
    """:class:`NewerFormat` when the store's format is newer than this cvflow reads: every
    reader refuses it alike (``open``, ``report``, ``run``, ``status``, ``verify``; exit 2)."""
    value = attrs.get(STORE_FORMAT_ATTR, 1)
    if format_problem(attrs) is None and value > STORE_FORMAT:
        raise NewerFormat(location, int(value))


def check_format(location: str, attrs) -> None:
    """:func:`check_newer`, and :class:`DamagedAttribute` for a ``cvflow_format`` that is no
    store format (null, 0, "2", 2.5): what ``cvflow.open`` refuses before it reads anything."""
    problem = format_problem(attrs)
    if problem is not None:
        raise DamagedAttribute(location, problem)
    check_newer(location, attrs)


def problems(attrs: dict, sizes: dict[str, int], read: Callable[[str], np.ndarray],
             block: tuple[int, ...] | None) -> list[str]:
    """What is wrong with a store's root attributes (empty if nothing).

    ``sizes``: the store's dimension sizes (``param``, ``split``); ``read(name)``: a small
    variable's values (``split_kind``, whose "full" split ``full_split`` must name: the
    only split of that kind, which cvflow.workflow.designs trains on all of D); ``block``: the (param, split)
    shape of one stored ``pred`` object (its shard, or chunk), None if unknown.
    """
    out, decoded = _type_problems(attrs)
    problem = format_problem(attrs)
    if problem is not None:
        out.insert(0, problem)
    n_params, n_splits = sizes.get("param", 0), sizes.get("split", 0)
    if "full_split" in attrs:
        full = attrs["full_split"]
        if not _is_int(full) or not -1 <= full < n_splits:
            out.append(f"attribute full_split is {_kind(full)}, not -1 or a split index "
                       f"(0 to {n_splits - 1})")
        else:
            kinds = np.asarray([str(k) for k in np.asarray(read("split_kind")).ravel()])
            fulls = [int(i) for i in np.flatnonzero(kinds == "full")]
            if full == -1 and fulls:
                out.append(f"attribute full_split is -1 but split {fulls[0]} is the full split")
            elif full >= 0 and full not in fulls:
                out.append(f"attribute full_split is {full}, a split of kind "
                           f"{str(kinds[full])!r}, not the full split")
    chunks = decoded.get("chunks")
    if chunks is not None:
        if not (len(chunks) == 2 and all(_is_int(c) and c >= min(n, 1) for c, n in
                                         zip(chunks, (n_params, n_splits)))):
            out.append(f"attribute chunks is {attrs['chunks']!r}, not [params, splits] of a "
                       "block (two positive integers)")
        elif block is not None and tuple(chunks) != tuple(block):
            out.append(f"attribute chunks is {attrs['chunks']!r}, but pred is stored in blocks "
                       f"of {list(block)}")
    listed = decoded.get("workflow_params")
    if listed is not None and not (all(_is_int(h) and 0 <= h < n_params for h in listed)
                                   and len(set(listed)) == len(listed)):
        out.append(f"attribute workflow_params is not a list of distinct param indices "
                   f"(0 to {n_params - 1})")
    return out


def check(location: str, attrs: dict, sizes: dict[str, int], read: Callable[[str], np.ndarray],
          block: tuple[int, ...] | None) -> None:
    """:func:`problems`, the first raised as :class:`DamagedAttribute`."""
    found = problems(attrs, sizes, read, block)
    if found:
        raise DamagedAttribute(location, found[0])


# --- a raced store's record (written by cvflow.execution.race_runner.Race.to_json) -------------------
# DESIGN CHOICE: its readers live beside its name, below both the runner that writes it and the
# reports that lay it out (cvflow.report.racing), so neither imports the other for them.

def race_record(cube) -> dict | None:
    """The race stored in a cube (its ``racing`` attribute), or None for a study not raced."""
    text = cube.attrs.get(RACING_ATTR) if hasattr(cube, "attrs") else None
    return json.loads(text) if text else None


def saved_fits(race: dict | None, done: np.ndarray) -> int:
    """Fits racing did not run: the not-done cells of dropped params."""
    if not race:
        return 0
    rows = [int(d["param"]) for d in race.get("dropped", []) if int(d["param"]) < done.shape[0]]
    return int((~done[rows]).sum()) if rows else 0


def unfilled(race: dict | None, done: np.ndarray) -> int:
    """Dropped params that still lack a fit racing skipped (0 once a run without racing, or a
    race continued to the end, has fitted them)."""
    if not race:
        return 0
    rows = [int(d["param"]) for d in race.get("dropped", []) if int(d["param"]) < done.shape[0]]
    return int((~done[rows].all(axis=1)).sum()) if rows else 0
