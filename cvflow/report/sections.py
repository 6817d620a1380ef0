"""The report's own sections (:mod:`cvflow.report.html` places them): the header, the failed
fits, the guardrail warnings, the race, the out-of-fold diagnostics, fit times and fits per
learner.
"""
from __future__ import annotations

import json

import numpy as np
import xarray as xr
from markupsafe import Markup

from . import racing
from .page import cell, div, heading, legend_beside, new_figure
from .plots.style import LEARNER_COLORS
from ..fitting.paths import kernel_of
from ..workflow.params import Param
from .failures import group, normalise
from ..estimators.labels import param_labels
from .plots import oof
from ..estimators import guardrails
from ..trust import LEARNER, by_default


def header_html(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> Markup:
    wf = json.loads(cube.attrs.get("workflow") or "{}")
    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    n_test = int(np.asarray(cube["is_test"].values).sum())
    out = Markup("<h1>cvflow report: {}</h1><p>task <b>{}</b>, loss <b>{}</b> (workflow default "
                 "{}), {} params × {} splits, {} samples ({} held out for testing); estimators: "
                 "{}.</p>").format(wf.get("name", "study"), cube.attrs.get("task"), loss,
                                   cube.attrs.get("loss"), cube.sizes["param"],
                                   cube.sizes["split"], cube.sizes["sample"], n_test,
                                   ", ".join(results))
    classes = json.loads(cube.attrs.get("classes") or "null")
    if classes and len(classes) == 2:
        out += Markup("<p>classes: {} (positive class: <b>{}</b>)</p>").format(
            ", ".join(map(str, classes)), classes[-1])
    elif classes:                    # multiclass: every class is scored, none is "positive"
        out += Markup("<p>classes: {} ({} classes)</p>").format(", ".join(map(str, classes)),
                                                                len(classes))
    return out


def failures_html(cube: xr.Dataset) -> Markup:
    """Failed fits grouped by message up to its numbers (:mod:`cvflow.report.failures`), or a line
    saying none failed."""
    done = np.asarray(cube["done"].values, dtype=bool)
    failed = np.asarray(cube["failed"].values, dtype=bool) & done
    if not failed.any():
        return Markup("<p>No fit failed.</p>")
    errors = np.asarray([str(e) for e in np.asarray(cube["error"].values).ravel()]).reshape(done.shape)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    rows_, cols = np.nonzero(failed)
    by_group: dict[str, set] = {}
    for h, s_ in zip(rows_, cols):
        by_group.setdefault(normalise(errors[h, s_]), set()).add(learners[h])
    similar = Markup(" <i>(and {} similar message(s) differing only in numbers)</i>")
    body = Markup("").join(
        Markup("<tr><td>{}</td><td>{}</td><td><code>{}</code>{}</td></tr>").format(
            g["count"], ", ".join(sorted(by_group[normalise(m)])), m,
            similar.format(g["variants"] - 1) if g["variants"] > 1 else "")
        for m, g in group(errors[failed]).items())
    return Markup("<h2>Failed fits: {} of {}</h2><p class='note'>A failed fit leaves NaN: the "
                  "params missing a fit an estimator needs get NaN there.</p><table><tr>"
                  "<th>fits</th><th>learner</th><th>message (one example)</th></tr>{}"
                  "</table>").format(int(failed.sum()), failed.size, body)


def warnings_html(results: dict[str, xr.Dataset]) -> Markup:
    """A table of every result's guardrail warnings (empty string when there are none)."""

    rows = [(name, w) for name, result in results.items() for w in guardrails.read(result)]
    if not rows:
        return Markup("")
    row = Markup("<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>")
    body = Markup("").join(row.format(name, w["code"], w["message"]) for name, w in rows)
    return heading("Warnings: answers that are weak") + Markup(
        "<table class='warnings'><tr><th>estimator</th><th>code</th><th>message</th></tr>{}"
        "</table>").format(body)


def racing_html(cube: xr.Dataset) -> Markup:
    """A raced study's race (:func:`cvflow.report.racing.summary`): the params left after each stage,
    and one row per dropped param (when, beaten by whom, by how much, z and p); empty markup
    for a study not raced."""
    race = racing.summary(cube)
    if race is None:
        return Markup("")
    left, alive = [], int(race["params"])
    for stage in race["stages"][:race["looks"]]:
        alive -= sum(d["stage"] == stage["stage"] for d in race["dropped"])
        left.append(Markup("<td>{}</td>").format(alive))
    heads = Markup("").join(Markup("<th>{}</th>").format(racing.where(st["folds"]))
                            for st in race["stages"][:race["looks"]])
    row = Markup("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                 "<td>{}</td><td>{}</td></tr>")
    body = Markup("").join(
        row.format(d["stage"], d["folds"], d["label"], d["leader"],
                   cell(d["mean_difference"]), "inf" if d["z"] is None else f"{d['z']:.2f}",
                   f"{d['p_value']:.2g}", f"{d['threshold']:.3g}")
        for d in race["dropped"])
    dropped = (Markup("<table class='racing'><tr><th>stage</th><th>after</th><th>dropped</th>"
                      "<th>beaten by</th><th>loss difference</th><th>z</th><th>p</th>"
                      "<th>dropped at p &le;</th></tr>{}"
                      "</table>").format(body) if race["dropped"]
               else Markup("<p>No param was dropped.</p>"))
    return heading("Racing: who was dropped when") + Markup(
        "<p class='note'>Racing: {}. After each stage (the (repeat, "
        "fold) fits named: r0f1 is repeat 0, fold 1) every surviving param was compared with the "
        "leader (lowest mean out-of-fold loss so far) by a {} and dropped at {} "
        "(alpha {}, {}).</p>"
        "<table class='racing'><tr><th>after the fits of</th>{}</tr><tr><th>params left</th>{}"
        "</tr></table>{}").format(
            racing.state_text(len(race["dropped"]), race["params"], race["unfilled"],
                       race["saved_fits"]), race["test"],
            racing.cuts_text(race["thresholds"], "\u2264"), race["alpha"],
            race["correction"], heads,
            Markup("").join(left), dropped)


def oof_section(cube: xr.Dataset, answer: list[dict]) -> list:
    """The out-of-fold diagnostics (:mod:`cvflow.report.plots.oof`) at the answer's first choice."""

    h = next((r["param"] for r in answer if r.get("param") is not None and r["param"] >= 0), None)
    if h is None:
        return []
    figures = oof.figures(cube, h)
    if not figures:
        return []
    from bokeh.layouts import gridplot

    repeats = int(cube.sizes.get("repeat", 1))
    what = ("ROC and precision-recall curves (thick: all folds pooled, or one per class against "
            "the rest; thin grey: one per fold), the reliability diagram of probabilities and the "
            "confusion matrix"
            if cube.attrs.get("task") == "classification" else "predicted against observed")
    note = Markup("<p class='note'>{} of the out-of-fold predictions of <b>{}</b> (the first "
                  "criterion's choice): each sample predicted by the fit of the fold that left it "
                  "out{}; read from the store, nothing refitted.</p>").format(
        what, param_labels(cube)[h], f", {repeats} repeats pooled" if repeats > 1 else "")
    return [div(heading("Out-of-fold predictions at the chosen param") + note),
            gridplot(figures, ncols=2, toolbar_location="above")]


def fit_time_figure(cube: xr.Dataset):
    from bokeh.models import ColumnDataSource


    done = np.asarray(cube["done"].values, dtype=bool)
    seconds = np.where(done, np.asarray(cube["fit_seconds"].values, dtype=float), np.nan)
    finite = np.isfinite(seconds)
    with np.errstate(invalid="ignore"):              # a param with no finished fit: NaN, no warning
        mean = np.where(finite, seconds, 0.0).sum(axis=1) / finite.sum(axis=1)
    learners = [str(v) for v in cube["learner"].values]
    palette = {n: LEARNER_COLORS[i % len(LEARNER_COLORS)] for i, n in enumerate(dict.fromkeys(learners))}
    fig = new_figure("mean fit + predict seconds per param", "fit-time", "param index", "seconds")
    src = ColumnDataSource({"x": list(range(len(learners))),
                            "y": [None if not np.isfinite(v) else float(v) for v in mean],
                            "label": param_labels(cube), "color": [palette[n] for n in learners],
                            "learner": learners})
    fig.vbar(x="x", top="y", width=0.8, source=src, color="color", legend_group="learner")
    legend_beside(fig)
    return fig


def _path_aware_learners(cube: xr.Dataset) -> list[str]:
    """Learners whose grid was fitted as regularisation paths (one fit per training set)."""
    workflow = json.loads(cube.attrs.get("workflow") or "{}")
    if not (workflow.get("execution") or {}).get("path_aware", True):
        return []
    counts: dict[str, int] = {}
    for text in np.asarray(cube["param_json"].values):
        setting = json.loads(str(text))
        # path kernels exist for scikit-learn classes only: nothing else the store names is
        # imported (a store is data, cvflow.trust)
        if not by_default(str(setting["estimator"]), LEARNER):
            continue
        param = Param(setting["learner"], setting["estimator"], fixed=setting["params"],
                      output=setting.get("output", "predict"))
        if not setting.get("preprocess") and kernel_of(param) is not None:
            counts[param.learner] = counts.get(param.learner, 0) + 1
    return [name for name, n in counts.items() if n > 1]


def fit_time_note(cube: xr.Dataset) -> Markup:
    names = _path_aware_learners(cube)
    note = Markup("<p class='note'>Wall time of each fit and its predictions, averaged over the "
                  "splits.")
    if names:
        note += Markup(
            " <b>{}</b>: the whole grid is fitted as one regularisation path per training set, "
            "and each param is charged an equal share of the path's time; their bars are small "
            "because the path is cheap, not because a fit was skipped (compare learners by "
            "their total in the table below).").format(", ".join(names))
    return note + Markup("</p>")


def status_html(cube: xr.Dataset) -> Markup:
    done = np.asarray(cube["done"].values, dtype=bool)
    failed = np.asarray(cube["failed"].values, dtype=bool) & done
    seconds = np.where(done, np.asarray(cube["fit_seconds"].values, dtype=float), np.nan)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    row = Markup("<tr><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{:.3g}</td></tr>")
    rows = []
    for name in dict.fromkeys(learners):
        sel = learners == name
        rows.append(row.format(name, int(sel.sum()), int(done[sel].sum()), done[sel].size,
                               int(failed[sel].sum()), float(np.nansum(seconds[sel]))))
    return Markup("<h2>Fits per learner</h2><table><tr><th>learner</th><th>params</th>"
                  "<th>fits done</th><th>failed</th><th>fit seconds (total)</th></tr>{}"
                  "</table>").format(Markup("").join(rows))
