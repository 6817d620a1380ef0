"""Racing options: the ``racing`` key of a workflow (or ``Study(racing=...)``), declared and checked once.

The rule and the runner are :mod:`cvflow.execution.race_runner`; the record a raced store keeps is
read by :func:`cvflow.store.attributes.race_record` and laid out as data and text by
:mod:`cvflow.report.racing`; docs/guide/racing.md says what racing promises.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError

RACING_KEYS = {"alpha", "stages", "min_units", "loss_range"}
STAGINGS = ("auto", "folds", "repeats")
# DESIGN CHOICE: no param is dropped on fewer than this many independent units (samples, or
# groups in a grouped design) seen: the test rests on a central limit theorem.
MIN_UNITS = 30


def check_options(value: Any, where: str = "racing") -> dict | None:
    """The ``racing`` key checked: None (no racing) or ``{alpha, stages, min_units}``, with
    ``loss_range`` (``[low, high]``) when given: the range every loss lies in, which buys
    racing's finite-sample test for a loss not declared bounded (docs/guide/racing.md).

    ``true`` means the defaults, ``false`` / null no racing. InputError (one line naming
    ``where``) otherwise.
    """
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {value!r}; give a mapping such as {{alpha: 0.05}}, true "
                         "or false")
    unknown = sorted(set(value) - RACING_KEYS)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}: unknown key; allowed keys are "
                         f"{', '.join(sorted(RACING_KEYS))}")
    alpha = value.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"{where}.alpha: {alpha!r}; give the chance of dropping the best param, "
                         "a number in (0, 1) such as 0.05")
    stages = value.get("stages", "auto")
    if stages not in STAGINGS:
        raise InputError(f"{where}.stages: {stages!r}; use auto (each fold of the first repeat, "
                         "then each repeat), folds or repeats")
    units = value.get("min_units", MIN_UNITS)
    if isinstance(units, bool) or not isinstance(units, int) or units < 2:
        raise InputError(f"{where}.min_units: {units!r}; give an integer >= 2 (default "
                         f"{MIN_UNITS})")
    out = {"alpha": float(alpha), "stages": stages, "min_units": units}
    bounds = value.get("loss_range")
    if bounds is not None:
        if (not isinstance(bounds, (list, tuple)) or len(bounds) != 2
                or any(isinstance(b, bool) or not isinstance(b, (int, float)) for b in bounds)
                or not bounds[0] < bounds[1]):
            raise InputError(f"{where}.loss_range: {bounds!r}; give [low, high], two numbers "
                             "with low < high that every loss lies between (e.g. [0, 1])")
        out["loss_range"] = [float(bounds[0]), float(bounds[1])]
    return out
