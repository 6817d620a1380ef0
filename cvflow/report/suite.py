"""The report of a suite: the comparison of learners across data sets first, then each data
set's own report (its cube's, as ``cvflow report`` gives it for one data set).

Each learner enters each data set with one number: the K-fold estimate of its setting that
K-fold selects (the first best of its grid). For a learner with a grid that minimum is
optimistic, more so for larger grids; the report says so (nested CV gives the honest estimate
of a tuned learner).
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from markupsafe import Markup

from ..errors import ComparisonWarning, InputError
from ..estimators import compare_learners
from ..estimators.losses import get_loss
from ..store import suite as suite_store
from ..store.cube import open_cube
from . import results as report
from .page import div, heading
from .plots.suite import critical_difference_figure, dots_figure

SELECTION = ("each learner enters a data set with the K-fold estimate of the setting K-fold "
             "selects; for a learner with a grid this minimum is optimistic (nested CV gives "
             "the honest estimate of a tuned learner)")


def _learner_rows(kfold: xr.Dataset, cube: xr.Dataset, sign: float) -> dict[str, tuple]:
    """learner -> (estimate, se, grid size) of the param K-fold selects within that learner."""
    learners = np.asarray([str(v) for v in cube["learner"].values])
    est, se = kfold["estimate"].values, kfold["se"].values
    out = {}
    for name in dict.fromkeys(learners):
        rows = np.flatnonzero(learners == name)
        finite = rows[np.isfinite(est[rows])]
        if finite.size:
            best = int(finite[np.argmin(sign * est[finite])])
            out[name] = (float(est[best]), float(se[best]), rows.size)
        else:
            out[name] = (np.nan, np.nan, rows.size)
    return out


def compute(store, *, loss: str | None = None, trust_code=False) -> dict:
    """Every data set's report and the cross-data-set comparison of a suite's store.

    Returns ``{"name", "datasets": {data set: (cube, Results)}, "estimates", "se" (pandas
    DataFrames, data sets x learners), "comparison" (LearnerComparison or None), "why"
    (why there is none), "loss", "tuned" (learners with a grid)}``.
    """
    labels = suite_store.datasets(store)
    if labels is None:
        raise InputError(f"store: {store} is not a suite's store")
    per: dict[str, tuple] = {}
    rows, ses = {}, {}
    tuned: set[str] = set()
    used = loss
    for label in labels:
        cube = report.workflow_view(open_cube(suite_store.member(store, label)))
        used = used or cube.attrs["loss"]
        per[label] = (cube, report.compute(cube, loss=used, trust_code=trust_code))
        kfold = report.compute(cube, ["kfold"], loss=used)["kfold"]
        sign = get_loss(used).sign
        chosen = _learner_rows(kfold, cube, sign)
        rows[label] = {k: v[0] for k, v in chosen.items()}
        ses[label] = {k: v[1] for k, v in chosen.items()}
        tuned |= {k for k, v in chosen.items() if v[2] > 1}
    estimates = pd.DataFrame.from_dict(rows, orient="index")
    se = pd.DataFrame.from_dict(ses, orient="index")
    comparison, why = None, None
    better = "lower" if get_loss(used).sign > 0 else "higher"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ComparisonWarning)   # kept in its warnings
            comparison = compare_learners(estimates, se=se, better=better)
    except InputError as exc:
        why = str(exc)
    return {"name": suite_store.name(store), "datasets": per, "estimates": estimates, "se": se,
            "comparison": comparison, "why": why, "loss": used, "tuned": sorted(tuned)}


def text(suite: dict) -> str:
    """The text report: the comparison across data sets, then a section per data set."""
    lines = [f"suite {suite['name']}: {len(suite['datasets'])} data sets, loss {suite['loss']}"]
    if suite["comparison"] is not None:
        lines += suite["comparison"].describe()
    else:
        lines.append(f"no comparison across data sets: {suite['why']}")
    if suite["tuned"]:
        lines.append(f"note: {SELECTION} (tuned here: {', '.join(suite['tuned'])})")
    lines.append("estimates (K-fold, selected setting per learner):")
    lines += ["  " + row for row in suite["estimates"].to_string(float_format="{:.4g}".format).splitlines()]
    for label, (cube, results) in suite["datasets"].items():
        lines += ["", f"== data set {label} ==", report.text(cube, results)]
    return "\n".join(lines)


def to_json(suite: dict) -> dict:
    """``{"suite": {...}, "datasets": {data set: its one-data-set report's JSON}}``."""
    comparison = suite["comparison"]
    est = suite["estimates"]
    return {
        "suite": {"name": suite["name"], "loss": suite["loss"], "selection": SELECTION,
                  "tuned": suite["tuned"],
                  "estimates": {d: {k: (None if not np.isfinite(v) else float(v))
                                    for k, v in est.loc[d].items()} for d in est.index},
                  **(comparison.to_dict() if comparison is not None else {"why": suite["why"]})},
        "datasets": {label: report.to_json(results, cube)
                     for label, (cube, results) in suite["datasets"].items()},
    }


def write_html(suite: dict, path: str | Path) -> Path:
    """The suite's self-contained HTML page: the comparison across data sets (its text, the
    critical-difference diagram named ``critical-difference``), each data set's estimates with
    ± 1.96 se as dots (``datasets-dots``), then each data set's text report (``cvflow report
    <store>/<data set> --html`` draws one data set's page)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    path = Path(path)
    path.write_text(file_html(build_layout(suite), INLINE, title=f"cvflow suite report: {suite['name']}"),
                    encoding="utf-8")
    return path


def build_layout(suite: dict):
    """The suite's page as a bokeh column (:func:`write_html`)."""
    from bokeh.layouts import column

    comparison = suite["comparison"]
    est, se = suite["estimates"], suite["se"]
    answer = comparison.describe() if comparison is not None else [f"no comparison: {suite['why']}"]
    if suite["tuned"]:
        answer.append(f"note: {SELECTION} (tuned here: {', '.join(suite['tuned'])})")
    items = [div(heading(f"Suite {suite['name']}: {len(suite['datasets'])} data sets, loss {suite['loss']}")
                 + heading("The answer across data sets")
                 + Markup("<pre>{}</pre>").format("\n".join(answer)))]
    if comparison is not None:
        items.append(critical_difference_figure(
            {str(k): float(v) for k, v in zip(comparison.mean_rank["learner"].values,
                                              comparison.mean_rank.values)},
            float(comparison.nemenyi["critical_difference"]), float(comparison.friedman.attrs["alpha"])))
    items.append(dots_figure(est.to_numpy(), (est - 1.96 * se).to_numpy(), (est + 1.96 * se).to_numpy(),
                             [str(c) for c in est.columns], [str(i) for i in est.index], loss=suite["loss"]))
    for label, (cube, results) in suite["datasets"].items():
        items.append(div(heading(f"Data set {label}") + Markup("<pre>{}</pre>").format(report.text(cube, results))))
    return column(*items)
