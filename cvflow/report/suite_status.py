"""``cvflow status`` of a suite's store: each data set's fits done / total / failed and its
state, then the suite's total, while the suite runs and after.

A data set's state: ``running`` while a run holds its cube's lock (:func:`cvflow.store.lock.held`),
``complete`` when every fit is done, ``incomplete`` (started, stopped before its end),
``waiting`` (no cube yet while another data set of the suite runs) or ``not started``. The
total counts a data set not started yet with the fits the suite's last run counted for it
(:func:`cvflow.store.suite.fits`).
"""
from __future__ import annotations

import os

from .. import terminal
from ..store import suite as suite_store
from ..store.group import is_store
from ..store.lock import held
from . import results as report

STATES = ("running", "complete", "incomplete", "waiting", "not started")


def status(store: str | os.PathLike) -> dict:
    """``{"datasets": {data set: its cube's status (:func:`cvflow.report.results.status`) with
    its ``state``, or None when it has no cube yet}, "states": {data set: state}, "done",
    "total", "failed", "unknown": data sets whose number of fits is not known}``."""
    members = suite_store.datasets(store) or []
    counts = suite_store.fits(store)
    infos: dict[str, dict | None] = {}
    states: dict[str, str] = {}
    for label in members:
        where = suite_store.member(store, label)
        if not is_store(where):
            infos[label] = None
            continue
        info = report.status(where)
        states[label] = ("running" if held(where) else
                         "complete" if info.get("done") == info.get("total") else "incomplete")
        infos[label] = {**info, "state": states[label]}
    running = "running" in states.values()
    for label in members:
        states.setdefault(label, "waiting" if running else "not started")
    unknown = [label for label in members if infos[label] is None and label not in counts]
    return {"datasets": infos, "states": {label: states[label] for label in members},
            "done": sum(i["done"] for i in infos.values() if i),
            "failed": sum(i["failed"] for i in infos.values() if i),
            "total": sum(i["total"] if i else counts.get(label, 0) for label, i in infos.items()),
            "unknown": unknown}


def format_status(info: dict) -> str:
    """The text of :func:`status`: a block per data set (its cube's status and state), then the
    suite's total; every line as :func:`cvflow.terminal.lines` shows it."""
    blocks = []
    for label, one in info["datasets"].items():
        state = info["states"][label]
        if one is None:
            body = "not started (no cube yet)" + (", waiting for its turn" if state == "waiting"
                                                  else "")
        else:
            body = report.format_status(one) + ("\n" + terminal.lines(["  running (its run holds "
                                                                      "the cube's lock)"])
                                                if state == "running" else "")
        blocks.append(terminal.lines([f"== {label} =="]) + "\n" + body)
    states = list(info["states"].values())
    said = [f"{states.count(s)} {s}" for s in STATES[2:] if states.count(s)]
    total = (f"suite: {info['done']} of {info['total']} fits done, {info['failed']} failed; "
             f"{states.count('complete')} of {len(states)} data sets complete"
             + (f", {states.count('running')} running" if "running" in states else "")
             + "".join(f", {s}" for s in said))
    if info["unknown"]:
        total += (f" (the fits of {', '.join(info['unknown'])} are not counted: its store, of "
                  "an earlier cvflow, does not record them)")
    return "\n\n".join(blocks) + "\n\n" + terminal.lines([total])
