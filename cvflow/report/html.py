"""The HTML report: one self-contained bokeh page (BokehJS inlined, opens from disk, no server).

It leads with the answer and fits a 1400 px window. Each estimator draws its own figures through
the ``html`` hook it declares (:mod:`cvflow.estimators.registry`) on a :class:`Page`, which owns
the layout; an estimator without one gets :func:`generic_html`, driven by the shared result
vocabulary. Sections, each present when the store and the results have what it needs:

- the answer: one row per criterion (:mod:`cvflow.report.summary`: the chosen param, its estimate
  with its interval where there is one, the test risk of its full fit, warnings), then the
  failed fits grouped by message and the guardrail warnings of every result;
- "risk along the hyperparameter grid": per learner, every declared per-param curve (K-fold,
  corrected K-fold, the test risk of the full fits...) with the selections marked, and the
  per-learner panels (the hypothesis stability mu(h)), against the grid value (log, linear or
  categorical axis) or, for a 2-D grid, as heatmaps (:mod:`cvflow.report.plots.grid`);
- out-of-fold diagnostics at the first criterion's choice: ROC, precision-recall, calibration
  and the confusion matrix, or predicted against observed (:mod:`cvflow.report.plots.oof`);
- the estimators' own figures (m_λ against λ, intervals per param one figure per learner and
  per 16 params, the U-statistic test...);
- a table of the scalar results of estimators that declare no renderer (user estimators);
- fit times per param (path-aware learners' shares explained) and progress per learner;
- the text report.

Every figure has a ``name`` (``kfold-<learner>``, ``stability-<learner>``, for a 2-D grid also
``corrected-kfold-<learner>``, ``m-lambda``, ``intervals``, ``ustat``, ``roc``,
``precision-recall``, ``calibration``, ``confusion``, ``pred-vs-obs``, ``fit-time``) so tests and
scripts can find it in the document (docs/guide/plots.md lists them with their data sources).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import xarray as xr
from markupsafe import Markup

from ..errors import InputError
from .page import Page, div, generic_html, heading
from .sections import (failures_html, fit_time_figure, fit_time_note, header_html, oof_section,
                       racing_html, status_html, warnings_html)
from ..estimators import lookup, REGISTRY
# the loss sums (cvflow.estimators.shared_terms) import the losses, scikit-learn and scipy,
# when first read: `cvflow status` reads none
from .. import estimators as _estimators

log = logging.getLogger(__name__)


def _overview(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> dict[str, xr.Dataset]:
    """Add the declared overview reducers the workflow did not ask for, when the store allows
    and their declarations accept the loss and the folds (no corrected K-fold curve on
    time-ordered folds, none with a per-fold metric)."""
    from .results import assumptions

    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    decl, ordered = assumptions(cube, loss)
    out = dict(results)
    todo = [spec for name, spec in REGISTRY.items() if spec.overview and name not in out]
    with _estimators.shared_terms(cube, {role for spec in todo for role in spec.terms}):   # one pass
        for spec in todo:
            why = spec.refusal(decl, ordered)
            if why:
                log.info("html report: %s skipped (%s)", spec.name, why)
                continue
            try:
                out[spec.name] = spec(cube, loss=loss)
            except InputError as exc:   # e.g. no full split: leave the section out
                log.info("html report: %s skipped (%s)", spec.name, exc)
    return out


def build_layout(cube: xr.Dataset, results: dict[str, xr.Dataset]):
    """The report as a bokeh layout (a column of sections): the answer first, then what each
    estimator's declared ``html`` hook (or :func:`generic_html`) drew on one :class:`Page`."""
    from bokeh.layouts import column, gridplot

    from . import results as report, summary

    results = _overview(cube, results)
    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    page = Page(cube, loss)
    for name, result in results.items():
        spec = lookup(name)             # computed by the caller: imported already
        if spec.html is not None:
            spec.html(result, page)
        else:
            generic_html(name, result, page)
    # the answer first: what each criterion chose and how sure it is, then what went wrong
    answer = summary.rows(cube, results)
    items = [div(header_html(cube, results) + heading("The answer")
                  + summary.to_html(answer, loss=loss)
                  + Markup("<p class='note'>Estimates are at the chosen param; warnings by code "
                           "(explained below, and on hover).</p>")
                  + failures_html(cube) + warnings_html(results))]
    grid = page.grid_figures()
    if grid:
        items += [div(heading("Risk along the hyperparameter grid")
                       + Markup("<p class='note'>Selections are outlined (shapes of "
                                "different sizes, so choices of the same param stay visible); "
                                "hover a point for its param.</p>")),
                  gridplot(grid, ncols=2, toolbar_location="above")]
    items += oof_section(cube, answer)
    for title, models in page.sections():
        items += [div(heading(title)), *models]
    if page.tables:
        items.append(div(heading("Results") + page.tables_html()))
    race = racing_html(cube)
    if race:
        items.append(div(race))
    items += [div(heading("Fit time") + fit_time_note(cube)), fit_time_figure(cube),
              div(status_html(cube))]
    text = report.text(cube, results)
    items.append(div(heading("Text report") + Markup("<pre>{}</pre>").format(text)))
    return column(*items)


def write_html(cube: xr.Dataset, results: dict[str, xr.Dataset], path: str | Path) -> Path:
    """Write the self-contained HTML report of ``results`` (from :func:`cvflow.report.compute`).

    Parameters
    ----------
    cube : xarray.Dataset
        The opened store (:func:`cvflow.open`).
    results : dict
        Estimator name -> result Dataset. K-fold, corrected K-fold and stability curves are
        computed here (with the results' loss) when missing and the store has their splits.
    path : path
        The HTML file to write; BokehJS is inlined, so it opens from disk without a server.

    Returns
    -------
    pathlib.Path
    """
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    path = Path(path)
    layout = build_layout(cube, results)
    name = json.loads(cube.attrs.get("workflow") or "{}").get("name", "study")
    path.write_text(file_html(layout, INLINE, title=f"cvflow report: {name}"), encoding="utf-8")
    return path
