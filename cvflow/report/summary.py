"""The answer first: one row per criterion of a study's results, read from the shared result
vocabulary (docs/guide/estimators.md), for the head of the reports.

Each scalar integer ``selected`` / ``<tag>_selected`` of a result is a criterion (corrected
K-fold's ``selected`` and ``kfold_selected`` are two). Its row holds the chosen param (readable),
the estimate at it (the per-param ``estimate``, or ``<tag>``; an ``estimate`` along another
dimension, e.g. stability_nested's m_λ, is read at ``<dim>_star``), the interval there when the
result has per-param ``lower`` / ``upper``, the test risk of its full fit (``test_risk`` /
``<tag>_test_risk``, else the per-param ``full_test_risk`` of any result: the full fits are
shared) and the result's guardrail warnings. A result without a selection but with a scalar
``estimate`` (a tune-then-fit procedure, an interval for one param, a two-learner test) is a
row of its own; one with per-param intervals and no selection (e.g. ``bates_ncv`` over the
grid) is read at the first criterion's choice.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import xarray as xr
from markupsafe import Markup
from ..estimators import guardrails
from ..estimators.labels import param_description, param_label, param_text

SELECTION = re.compile(r"^(?:([a-z]+)_)?selected$")
TAG_NAMES = {"": "", "kfold": "plain K-fold"}


def _chosen(cube: xr.Dataset, h: int) -> str:
    """The short label of param ``h`` (:func:`cvflow.estimators.labels.param_text`), "(none:
    every param failed)" for -1."""

    return param_text(param_label(cube, h))


def _description(cube: xr.Dataset, h: int | None) -> str:

    return param_description(cube, h) if h is not None and h >= 0 else ""


def _scalar(result: xr.Dataset, name: str) -> float | None:
    if name in result and result[name].ndim == 0:
        value = result[name].values.item()
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            return float(value)
    return None


def _at(result: xr.Dataset, name: str, h: int) -> float | None:
    if name in result and result[name].dims == ("param",) and 0 <= h < result.sizes["param"]:
        return float(result[name].values[h])
    return None


def _at_star(result: xr.Dataset, name: str) -> float | None:
    """``name`` along one dim other than ``param`` read at the chosen ``<dim>_star``."""
    if name in result and result[name].ndim == 1:
        (dim,) = result[name].dims
        star = _scalar(result, f"{dim}_star")
        if star is not None and dim in result.coords and star in result[dim].values:
            return float(result[name].sel({dim: star}).values)
    return None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _selections(result: xr.Dataset) -> list[tuple[str, int]]:
    out = []
    for name, var in result.data_vars.items():
        m = SELECTION.match(str(name))
        if m and var.ndim == 0 and np.issubdtype(var.dtype, np.integer):
            out.append((m.group(1) or "", int(var.values)))
    return sorted(out, key=lambda s: (s[0] != "", s[0]))


def _warnings(result: xr.Dataset) -> list[dict]:

    return [{"code": w["code"], "message": w["message"]} for w in guardrails.read(result)]


def rows(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> list[dict]:
    """The summary rows: ``criterion``, ``estimator``, ``param`` (index or None), ``chosen``,
    ``estimate``, ``lower``, ``upper``, ``se``, ``test_risk``, ``p_value`` (floats or None)
    and ``warnings`` (list of ``{"code", "message"}``)."""
    out: list[dict] = []
    first_choice = None
    shared_test = next((r["full_test_risk"] for r in results.values()
                        if "full_test_risk" in r and r["full_test_risk"].dims == ("param",)), None)
    for name, result in results.items():
        selections = _selections(result)
        for tag, h in selections:
            if tag and tag in results:            # e.g. corrected_kfold's plain K-fold choice
                continue
            what = TAG_NAMES.get(tag, tag)
            estimate = _at(result, tag or "estimate", h)
            if estimate is None and not tag:
                estimate = _at_star(result, "estimate")
            test = _scalar(result, f"{tag}_test_risk" if tag else "test_risk")
            if test is None:
                test = _at(result, "full_test_risk", h)
            if test is None and shared_test is not None and h >= 0:
                test = float(shared_test.values[h])
            row = _row(f"{name}: {what}" if what else name, name, cube, h, estimate, test,
                       _warnings(result) if tag == selections[0][0] else [])
            if estimate is None and not tag:      # one answer for the choice (bbc_cv)
                row["estimate"] = _finite(_scalar(result, "estimate"))
            if not tag:
                lower, upper = _interval(result, h)
                row.update(lower=lower, upper=upper, se=_finite(_per_param_or_scalar(
                    result, "se", h)))
            first_choice = h if first_choice is None and h >= 0 else first_choice
            out.append(row)
        if selections:
            continue
        estimate = _scalar(result, "estimate")
        if estimate is not None:
            row = _row(name, name, cube, None, estimate, _scalar(result, "test_risk"),
                       _warnings(result))
            row.update(chosen=_compared(cube, result) or "(the tune-then-fit procedure)",
                       lower=_finite(_scalar(result, "lower")),
                       upper=_finite(_scalar(result, "upper")),
                       p_value=_finite(_scalar(result, "p_value")))
            out.append(row)
        elif _interval_names(result) and result["estimate"].dims == ("param",):
            out.append({"pending_choice": True, "estimator": name, "result": result})
        elif _warnings(result):
            out.append(_row(name, name, cube, None, None, None, _warnings(result)))
    return [_at_choice(cube, r, first_choice) if r.get("pending_choice") else r for r in out]


def _row(criterion, estimator, cube, h, estimate, test, warnings) -> dict:
    return {"criterion": criterion, "estimator": estimator, "param": h,
            "chosen": _chosen(cube, h) if h is not None else "",
            "description": _description(cube, h), "estimate": _finite(estimate),
            "lower": None, "upper": None, "se": None, "test_risk": _finite(test), "p_value": None,
            "warnings": list(warnings)}


def _at_choice(cube: xr.Dataset, pending: dict, h: int | None) -> dict:
    """A per-param interval result read at the first criterion's choice."""
    name, result = pending["estimator"], pending["result"]
    if h is None:
        return _row(name, name, cube, None, None, None, _warnings(result))
    row = _row(f"{name}: interval at the first choice", name, cube, h, _at(result, "estimate", h),
               _at(result, "test_risk", h), _warnings(result))
    lower, upper = _interval(result, h)
    row.update(lower=lower, upper=upper)
    return row


def _interval_names(result: xr.Dataset) -> tuple[str, str] | None:
    """The result's interval: ``lower`` / ``upper``, else the first ``lower_<kind>`` /
    ``upper_<kind>`` pair in result order (wald_cv: the within-fold variance's)."""
    names = set(result.data_vars)
    if {"lower", "upper"} <= names:
        return "lower", "upper"
    for name in result.data_vars:
        kind = str(name).removeprefix("lower_")
        if str(name).startswith("lower_") and f"upper_{kind}" in names:
            return str(name), f"upper_{kind}"
    return None


def _per_param_or_scalar(result: xr.Dataset, name: str, h: int) -> float | None:
    value = _at(result, name, h)
    return value if value is not None else _scalar(result, name)


def _interval(result: xr.Dataset, h: int) -> tuple[float | None, float | None]:
    """(lower, upper) of the result at param ``h`` (or its scalar interval), None if none."""
    names = _interval_names(result)
    if names is None:
        return None, None
    return (_finite(_per_param_or_scalar(result, names[0], h)),
            _finite(_per_param_or_scalar(result, names[1], h)))


def _compared(cube: xr.Dataset, result: xr.Dataset) -> str:
    """What a scalar result is about: its param, or "a − b" for a two-param comparison."""
    texts = []
    for key in ("param", "a", "b"):
        raw = result.attrs.get(key)
        if raw in (None, "", "null"):
            continue
        label = json.loads(raw) if isinstance(raw, str) else raw
        if isinstance(label, dict) and "index" in label:
            texts.append(_chosen(cube, int(label["index"])))
    return " − ".join(texts)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def to_html(rows_: list[dict], *, loss: str | None) -> Markup:
    """The rows as an HTML table (class ``summary``); warnings by code (message on hover).
    Every value is escaped (a :class:`markupsafe.Markup` template; see
    :func:`cvflow.report.page.div`)."""
    head = Markup("<tr><th>criterion</th><th>chosen</th><th>estimate{}</th><th>interval</th>"
                  "<th>test risk (full fit)</th><th>warnings</th></tr>").format(
                      f" ({loss})" if loss else "")
    # the chosen param by its short label; its full setting (fixed params, a Pipeline's steps)
    # on hover
    row = Markup("<tr><td>{}</td><td><code title='{}'>{}</code></td><td>{}</td><td>{}</td>"
                 "<td>{}</td><td>{}</td></tr>")
    body = []
    for r in rows_:
        estimate = Markup(_number(r["estimate"]))
        if r.get("se") is not None:
            estimate += Markup(" <span class='se'>(se {})</span>").format(_number(r["se"]))
        if r.get("p_value") is not None:
            estimate += Markup(" <span class='p'>p = {:.3g}</span>").format(r["p_value"])
        interval = (f"[{_number(r['lower'])}, {_number(r['upper'])}]"
                    if r["lower"] is not None and r["upper"] is not None else "")
        warnings = Markup(", ").join(Markup("<span title='{}'>{}</span>").format(w["message"],
                                                                                w["code"])
                                     for w in r["warnings"])
        body.append(row.format(r["criterion"], r.get("description", ""), r["chosen"], estimate,
                               interval,
                               _number(r["test_risk"]), warnings))
    return Markup("<table class='summary'>{}{}</table>").format(head, Markup("").join(body))
