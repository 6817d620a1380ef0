"""The HTML report: one self-contained bokeh page (BokehJS inlined, opens from disk, no server).

It leads with the answer and fits a 1400 px window. Sections, each present when the store and
the results have what it needs:

- the answer: one row per criterion (:mod:`cvflow.summary`: the chosen param, its estimate
  with its interval where there is one, the test risk of its full fit, warnings), then the
  failed fits grouped by message and the guardrail warnings of every result;
- per learner, the K-fold, the bias-corrected K-fold and (with a held-out test set) the test
  risk along the hyperparameter grid, the selections marked; and the hypothesis stability mu(h);
- the stability-regularised nested CV error m_λ against λ, λ* marked;
- the Bates nested-CV and the naive CV intervals side by side (and Wald's where computed),
  one figure per learner (and per 16 params);
- the U-statistic estimate with its interval (and Nadeau–Bengio's where computed);
- fit times per param (path-aware learners' shares explained) and progress per learner;
- the text report.

Every figure has a ``name`` (``kfold-<learner>``, ``stability-<learner>``, ``m-lambda``,
``intervals``, ``ustat``, ``fit-time``) so tests and scripts can find it in the document.
"""
from __future__ import annotations

import html
import json
import logging
import math
from pathlib import Path

import numpy as np
import xarray as xr

from .errors import InputError

log = logging.getLogger(__name__)

COLORS = {"kfold": "#1f77b4", "corrected": "#d62728", "test": "#2ca02c", "stability": "#9467bd",
          "naive": "#7f7f7f", "bates": "#d62728", "wald": "#ff7f0e", "ustat": "#1f77b4",
          "nb": "#7f7f7f"}
LEARNER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                  "#7f7f7f", "#bcbd22", "#17becf"]
# DESIGN CHOICE: the page fits a 1400 px window without horizontal scrolling: two grid figures
# of WIDTH side by side (toolbars above, legends inside the figure box), text and tables at
# PAGE_WIDTH, wrapping; long per-param axes are split by learner and into chunks.
PAGE_WIDTH = 1340
WIDTH = 660
HEIGHT = 340
MAX_INTERVAL_PARAMS = 40
PARAMS_PER_INTERVAL_FIGURE = 16
# the selection markers: different shapes and sizes, so coinciding choices stay visible as
# concentric outlines
MARK_SIZES = (24, 17, 11)
CSS = ("<style>table{border-collapse:collapse;margin:4px 0}th,td{border:1px solid #bbb;"
       "padding:3px 6px;vertical-align:top;text-align:left}td{overflow-wrap:anywhere}"
       "pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}"
       "table.summary th{background:#eef}p.note{color:#444;margin:2px 0}"
       "table.warnings td:nth-child(-n+2){white-space:nowrap}</style>")


# ---------------------------------------------------------------------------------------------
# reading the cube and the results


def _finite(values) -> np.ndarray:
    return np.where(np.isfinite(values), values, np.nan)


def _labels(cube: xr.Dataset) -> list[str]:
    out = []
    for h, text in enumerate(np.asarray(cube["param_json"].values)):
        setting = json.loads(str(text))
        hyper = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in setting["params"].items())
        out.append(f"#{h} {setting['learner']}({hyper})")
    return out


def _grid_axis(cube: xr.Dataset, rows: np.ndarray) -> tuple[np.ndarray, str, str]:
    """x values of a learner's params: its one varying numeric hyperparameter, else the index.

    Returns (x, axis label, axis type "log" | "linear").
    """
    settings = [json.loads(str(cube["param_json"].values[h]))["params"] for h in rows]
    keys = sorted({k for s in settings for k in s})
    varying = [k for k in keys if len({json.dumps(s.get(k), default=str) for s in settings}) > 1]
    if len(varying) == 1:
        values = [s.get(varying[0]) for s in settings]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            x = np.asarray(values, dtype=float)
            positive = x[np.isfinite(x)]
            log_axis = positive.size and (positive > 0).all() and positive.max() / positive.min() >= 20
            return x, varying[0], "log" if log_axis else "linear"
    return np.arange(len(rows), dtype=float), "param (grid order within the learner)", "linear"


def _extra_results(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> dict[str, xr.Dataset]:
    """Add the cheap grid reducers the workflow did not ask for, when the store allows."""
    from .estimators import REGISTRY

    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    out = dict(results)
    for name in ("kfold", "corrected_kfold", "stability"):
        if name not in out:
            try:
                out[name] = REGISTRY[name](cube, loss=loss)
            except InputError as exc:   # e.g. no full split: leave the section out
                log.info("html report: %s skipped (%s)", name, exc)
    return out


def _selected(result: xr.Dataset | None, var: str) -> int | None:
    if result is None or var not in result:
        return None
    value = int(result[var].values)
    return value if value >= 0 else None


# ---------------------------------------------------------------------------------------------
# figures


def _figure(title: str, name: str, x_label: str, y_label: str, x_axis_type: str = "linear",
            **kwargs):
    from bokeh.models import HoverTool
    from bokeh.plotting import figure

    if "x_range" in kwargs:     # categorical: let bokeh pick the factor axis
        x_axis_type = "auto"
    fig = figure(title=title, name=name, width=WIDTH, height=HEIGHT, x_axis_type=x_axis_type,
                 tools="pan,box_zoom,wheel_zoom,reset,save", toolbar_location="right", **kwargs)
    fig.xaxis.axis_label = x_label
    fig.yaxis.axis_label = y_label
    fig.add_tools(HoverTool(tooltips=[("param", "@label"), ("value", "@y{0.0000g}")]))
    return fig


def _legend_beside(fig) -> None:
    """The legend to the right of the plot, inside the figure's width (never below it)."""
    legend = fig.legend[0]
    legend.click_policy = "hide"
    legend.label_text_font_size = "8pt"
    legend.spacing, legend.padding, legend.margin = 0, 4, 4
    fig.add_layout(legend, "right")


def _source(x, y, labels, **extra):
    from bokeh.models import ColumnDataSource

    return ColumnDataSource({"x": list(map(float, x)), "y": [None if not np.isfinite(v) else float(v)
                                                            for v in y],
                             "label": list(labels), **extra})


def _grid_figures(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> list:
    """Per learner: risk curves along the grid with the selections, and mu(h)."""
    labels = np.asarray(_labels(cube), dtype=object)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    kf, corr = results.get("kfold"), results.get("corrected_kfold")
    stab, nest = results.get("stability"), results.get("stability_nested")
    curves = []
    if kf is not None:
        curves.append(("K-fold", kf["estimate"].values, COLORS["kfold"]))
    elif corr is not None:
        curves.append(("K-fold", corr["kfold"].values, COLORS["kfold"]))
    if corr is not None:
        curves.append(("corrected K-fold", corr["estimate"].values, COLORS["corrected"]))
    test = next((r["test_risk"].values for r in (corr, nest) if r is not None and "test_risk" in r
                 and np.isfinite(r["test_risk"].values).any()), None)
    if test is not None:
        curves.append(("test risk (full fit)", test, COLORS["test"]))
    marks = [("K-fold choice", _selected(kf, "selected") if kf is not None
              else _selected(corr, "selected_kfold"), COLORS["kfold"], "circle"),
             ("corrected choice", _selected(corr, "selected"), COLORS["corrected"], "diamond"),
             ("stability-regularised h*", _selected(nest, "selected"), COLORS["stability"],
              "triangle")]
    mu = next((r["stability"].values for r in (stab, nest) if r is not None and "stability" in r),
              None)
    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), "loss")
    figures = []
    for name in dict.fromkeys(learners):
        rows = np.flatnonzero(learners == name)
        x, x_label, axis = _grid_axis(cube, rows)
        order = np.argsort(x, kind="stable")
        rows, x = rows[order], x[order]
        if curves:
            fig = _figure(f"{name}: estimated risk along the grid", f"kfold-{name}",
                          x_label, f"risk ({loss})", axis)
            for label, y, color in curves:
                src = _source(x, y[rows], labels[rows])
                fig.line("x", "y", source=src, color=color, line_width=2, legend_label=label)
                fig.scatter("x", "y", source=src, color=color, size=4, legend_label=label)
            if kf is not None and "se" in kf:
                est, se = kf["estimate"].values[rows], kf["se"].values[rows]
                fig.varea(x=x, y1=_finite(est - se), y2=_finite(est + se), color=COLORS["kfold"],
                          alpha=0.12, legend_label="K-fold ± naive se")
            for k, (label, h, color, marker) in enumerate(marks):
                if h is None or h not in rows:
                    continue
                ys = [c[1][h] for c in curves if np.isfinite(c[1][h])]
                i = int(np.flatnonzero(rows == h)[0])
                src = _source([x[i]] * len(ys), ys, [labels[h]] * len(ys))
                fig.scatter("x", "y", source=src, marker=marker, size=MARK_SIZES[k % 3],
                            fill_alpha=0.0, line_color=color, line_width=2.5, legend_label=label)
            _legend_beside(fig)
            figures.append(fig)
        if mu is not None:
            fig = _figure(f"{name}: hypothesis stability mu(h)", f"stability-{name}",
                          x_label, "max_j mean_i |l(h, fold j) - l(h, full)|", axis)
            src = _source(x, mu[rows], labels[rows])
            fig.line("x", "y", source=src, color=COLORS["stability"], line_width=2,
                     legend_label="mu(h)")
            fig.scatter("x", "y", source=src, color=COLORS["stability"], size=4)
            fig.legend.location = "top_left"
            fig.legend.label_text_font_size = "8pt"
            fig.legend.background_fill_alpha = 0.7
            figures.append(fig)
    return figures


def _lambda_figure(result: xr.Dataset):
    """m_λ against λ (λ on a log axis when all are positive, else in grid order), λ* marked."""
    from bokeh.models import Span

    lam = np.asarray(result["lambda"].values, dtype=float)
    m = np.asarray(result["nested_error"].values, dtype=float)
    if (lam > 0).all() and lam.size > 1:
        x, axis, x_label = lam, "log", "λ"
    else:
        x, axis, x_label = np.arange(lam.size, dtype=float), "linear", "λ (grid order)"
    fig = _figure(f"stability-regularised nested CV error m_λ ({result.attrs.get('loss')})",
                  "m-lambda", x_label, "m_λ", axis)
    labels = [f"λ={v:.4g}" for v in lam]
    src = _source(x, m, labels)
    fig.line("x", "y", source=src, color=COLORS["stability"], line_width=2, legend_label="m_λ")
    fig.scatter("x", "y", source=src, color=COLORS["stability"], size=6)
    if axis == "linear":
        fig.xaxis.ticker = list(map(float, x))
        fig.xaxis.major_label_overrides = {float(v): f"{lv:.3g}" for v, lv in zip(x, lam)}
    star = float(result["lambda_star"].values)
    if math.isfinite(star):
        i = int(np.flatnonzero(lam == star)[0])
        fig.add_layout(Span(location=float(x[i]), dimension="height", line_color=COLORS["corrected"],
                            line_dash="dashed", line_width=2))
        fig.scatter([float(x[i])], [float(m[i])], marker="diamond", size=16, fill_alpha=0.0,
                    line_color=COLORS["corrected"], line_width=3, legend_label=f"λ* = {star:.4g}")
    fig.legend.location = "top_left"
    return fig


def _interval_figures(cube: xr.Dataset, bates: xr.Dataset | None,
                      wald: xr.Dataset | None) -> list:
    """Bates nested-CV and naive (and Wald) intervals per param, side by side: one figure per
    learner (and per PARAMS_PER_INTERVAL_FIGURE params), each within the page's width."""
    from bokeh.models import ColumnDataSource, FactorRange, Whisker
    from bokeh.transform import dodge

    labels = np.asarray(_short_labels(cube), dtype=object)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    base = bates if bates is not None else wald
    center = base["err_cv"].values if bates is not None else base["estimate"].values
    keep = np.flatnonzero(np.isfinite(center))
    if keep.size > MAX_INTERVAL_PARAMS:
        keep = np.sort(keep[np.argsort(center[keep], kind="stable")[:MAX_INTERVAL_PARAMS]])
    series = []
    if bates is not None:
        series.append(("naive CV", bates["err_cv"], bates["naive_lower"], bates["naive_upper"],
                       COLORS["naive"]))
        series.append(("Bates nested CV", bates["estimate"], bates["lower"], bates["upper"],
                       COLORS["bates"]))
    if wald is not None:
        series.append(("Wald (within folds)", wald["estimate"], wald["lower_within"],
                       wald["upper_within"], COLORS["wald"]))
    level = 100 * (1 - float(base.attrs.get("alpha", 0.1)))
    figures = []
    for name in dict.fromkeys(learners[keep]):
        rows = keep[learners[keep] == name]
        for start in range(0, rows.size, PARAMS_PER_INTERVAL_FIGURE):
            part = rows[start:start + PARAMS_PER_INTERVAL_FIGURE]
            factors = [str(labels[h]) for h in part]
            more = f" ({start + 1}-{start + part.size} of {rows.size})" if rows.size > part.size else ""
            fig = _figure(f"{name}: {level:.0f}% intervals{more}", "intervals", "",
                          f"error ({base.attrs.get('loss')})", x_range=FactorRange(*factors))
            fig.width = min(PAGE_WIDTH, max(WIDTH, 64 * len(factors) + 300))
            fig.xaxis.major_label_orientation = 0.6 if max(map(len, factors)) > 8 else 0
            width = 0.8 / max(len(series), 1)
            for k, (label, est, lo, hi, color) in enumerate(series):
                offset = (k - (len(series) - 1) / 2) * width
                src = ColumnDataSource({"x": factors, "label": factors,
                                        "y": [float(v) for v in est.values[part]],
                                        "lower": [float(v) for v in lo.values[part]],
                                        "upper": [float(v) for v in hi.values[part]]})
                fig.scatter(dodge("x", offset, range=fig.x_range), "y", source=src, color=color,
                            size=8, legend_label=label)
                fig.add_layout(Whisker(base=dodge("x", offset, range=fig.x_range), lower="lower",
                                       upper="upper", source=src, line_color=color, line_width=2))
            _fit_y_range(fig, [v for s_ in series for arr in s_[1:4] for v in arr.values[part]])
            _legend_beside(fig)
            figures.append(fig)
    return figures


def _short_labels(cube: xr.Dataset) -> list[str]:
    """Each param's hyperparameters only (its learner is the figure's), e.g. ``alpha=0.1``."""
    out = []
    for text in np.asarray(cube["param_json"].values):
        setting = json.loads(str(text))
        out.append(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in setting["params"].items()
                             if k not in ("random_state",)) or setting["learner"])
    return out


def _fit_y_range(fig, values) -> None:
    """A y range holding every point and whisker (bokeh's auto range ignores whiskers)."""
    from bokeh.models import Range1d

    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        fig.y_range = Range1d(lo - pad, hi + pad)


def _ustat_figure(ustat: xr.Dataset | None, nb: xr.Dataset | None):
    from bokeh.models import ColumnDataSource, FactorRange, Whisker

    rows = []
    for label, r, color in (("U-statistic (Fuchs et al.)", ustat, COLORS["ustat"]),
                            ("Nadeau-Bengio corrected t", nb, COLORS["nb"])):
        if r is not None:
            rows.append((label, float(r["estimate"].values), float(r["lower"].values),
                         float(r["upper"].values), color))
    base = ustat if ustat is not None else nb
    a = json.loads(base.attrs.get("a") or "{}")
    b = json.loads(base.attrs.get("b") or "null")
    what = (f"Δ = e({_short(a)}) − e({_short(b)})" if b else f"error of {_short(a)}")
    level = 100 * (1 - float(base.attrs.get("alpha", 0.05)))
    fig = _figure(f"{'Δ' if b else 'error'}: estimate and {level:.0f}% interval", "ustat", "",
                  f"{base.attrs.get('loss')}", x_range=FactorRange(*[r[0] for r in rows]))
    caption = (f"<p class='note'>{html.escape(what)} at learning-set size g = "
               f"{int(base['size'].values)}</p>")
    src = ColumnDataSource({"x": [r[0] for r in rows], "label": [r[0] for r in rows],
                            "y": [r[1] for r in rows],
                            "lower": [r[2] if math.isfinite(r[2]) else None for r in rows],
                            "upper": [r[3] if math.isfinite(r[3]) else None for r in rows],
                            "color": [r[4] for r in rows]})
    fig.scatter("x", "y", source=src, color="color", size=12)
    _fit_y_range(fig, [v for r in rows for v in r[1:4]] + ([0.0] if b else []))
    fig.add_layout(Whisker(base="x", lower="lower", upper="upper", source=src, line_width=2))
    if b:
        from bokeh.models import Span
        fig.add_layout(Span(location=0, dimension="width", line_color="#000000", line_dash="dotted"))
    return _div(caption), fig


def _short(label: dict | None) -> str:
    if not label:
        return "-"
    rest = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in label.items() if k not in ("index", "learner"))
    return f"{label.get('learner')}({rest})"


def _fit_time_figure(cube: xr.Dataset):
    from bokeh.models import ColumnDataSource

    done = np.asarray(cube["done"].values, dtype=bool)
    seconds = np.where(done, np.asarray(cube["fit_seconds"].values, dtype=float), np.nan)
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(np.where(np.isfinite(seconds), seconds, np.nan), axis=1) \
            if done.any() else np.full(done.shape[0], np.nan)
    learners = [str(v) for v in cube["learner"].values]
    palette = {n: LEARNER_COLORS[i % len(LEARNER_COLORS)] for i, n in enumerate(dict.fromkeys(learners))}
    fig = _figure("mean fit + predict seconds per param", "fit-time", "param index", "seconds")
    src = ColumnDataSource({"x": list(range(len(learners))),
                            "y": [None if not np.isfinite(v) else float(v) for v in mean],
                            "label": _labels(cube), "color": [palette[n] for n in learners],
                            "learner": learners})
    fig.vbar(x="x", top="y", width=0.8, source=src, color="color", legend_group="learner")
    _legend_beside(fig)
    return fig


def _path_aware_learners(cube: xr.Dataset) -> list[str]:
    """Learners whose grid was fitted as regularisation paths (one fit per training set)."""
    from .learners import Param
    from .paths import kernel_of

    workflow = json.loads(cube.attrs.get("workflow") or "{}")
    if not (workflow.get("execution") or {}).get("path_aware", True):
        return []
    counts: dict[str, int] = {}
    for text in np.asarray(cube["param_json"].values):
        setting = json.loads(str(text))
        param = Param(setting["learner"], setting["estimator"], fixed=setting["params"],
                      output=setting.get("output", "predict"))
        if not setting.get("preprocess") and kernel_of(param) is not None:
            counts[param.learner] = counts.get(param.learner, 0) + 1
    return [name for name, n in counts.items() if n > 1]


def _fit_time_note(cube: xr.Dataset) -> str:
    names = _path_aware_learners(cube)
    if not names:
        return "<p class='note'>Wall time of each fit and its predictions, averaged over the splits.</p>"
    return (f"<p class='note'>Wall time of each fit and its predictions, averaged over the splits. "
            f"<b>{html.escape(', '.join(names))}</b>: the whole grid is fitted as one "
            "regularisation path per training set, and each param is charged an equal share of "
            "the path's time; their bars are small because the path is cheap, not because a "
            "fit was skipped (compare learners by their total in the table below).</p>")


# ---------------------------------------------------------------------------------------------
# text blocks


def _div(text: str, width: int = PAGE_WIDTH):
    """HTML text at the page's width (its tables and preformatted text wrap inside it)."""
    from bokeh.models import Div

    return Div(text=CSS + text, width=width)


def _status_html(cube: xr.Dataset) -> str:
    done = np.asarray(cube["done"].values, dtype=bool)
    failed = np.asarray(cube["failed"].values, dtype=bool) & done
    seconds = np.where(done, np.asarray(cube["fit_seconds"].values, dtype=float), np.nan)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    rows = []
    for name in dict.fromkeys(learners):
        sel = learners == name
        total = float(np.nansum(seconds[sel]))
        rows.append(f"<tr><td>{html.escape(name)}</td><td>{int(sel.sum())}</td>"
                    f"<td>{int(done[sel].sum())}/{done[sel].size}</td><td>{int(failed[sel].sum())}</td>"
                    f"<td>{total:.3g}</td></tr>")
    return ("<h2>Fits per learner</h2><table><tr><th>learner</th><th>params</th>"
            "<th>fits done</th><th>failed</th><th>fit seconds (total)</th></tr>"
            + "".join(rows) + "</table>")


def _failures_html(cube: xr.Dataset) -> str:
    """Failed fits grouped by message up to its numbers (:mod:`cvflow.failures`), or a line
    saying none failed."""
    from .failures import group, normalise

    done = np.asarray(cube["done"].values, dtype=bool)
    failed = np.asarray(cube["failed"].values, dtype=bool) & done
    if not failed.any():
        return "<p>No fit failed.</p>"
    errors = np.asarray([str(e) for e in np.asarray(cube["error"].values).ravel()]).reshape(done.shape)
    learners = np.asarray([str(v) for v in cube["learner"].values])
    rows_, cols = np.nonzero(failed)
    by_group: dict[str, set] = {}
    for h, s_ in zip(rows_, cols):
        by_group.setdefault(normalise(errors[h, s_]), set()).add(learners[h])
    body = "".join(
        f"<tr><td>{g['count']}</td><td>{html.escape(', '.join(sorted(by_group[normalise(m)])))}"
        f"</td><td><code>{html.escape(m)}</code>"
        + (f" <i>(and {g['variants'] - 1} similar message(s) differing only in numbers)</i>"
           if g["variants"] > 1 else "") + "</td></tr>"
        for m, g in group(errors[failed]).items())
    return (f"<h2>Failed fits: {int(failed.sum())} of {failed.size}</h2><p class='note'>A failed "
            "fit leaves NaN: the params missing a fit an estimator needs get NaN there.</p>"
            f"<table><tr><th>fits</th><th>learner</th><th>message (one example)</th></tr>{body}"
            "</table>")


def _header_html(cube: xr.Dataset, results: dict[str, xr.Dataset]) -> str:
    wf = json.loads(cube.attrs.get("workflow") or "{}")
    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    n_test = int(np.asarray(cube["is_test"].values).sum())
    parts = [f"<h1>cvflow report: {html.escape(str(wf.get('name', 'study')))}</h1>",
             "<p>", f"task <b>{html.escape(str(cube.attrs.get('task')))}</b>, loss <b>"
             f"{html.escape(str(loss))}</b> (workflow default {html.escape(str(cube.attrs.get('loss')))}), "
             f"{cube.sizes['param']} params × {cube.sizes['split']} splits, "
             f"{cube.sizes['sample']} samples ({n_test} held out for testing); "
             f"estimators: {html.escape(', '.join(results))}.</p>"]
    classes = json.loads(cube.attrs.get("classes") or "null")
    if classes:
        parts.append(f"<p>classes: {html.escape(', '.join(map(str, classes)))} (positive class: "
                     f"<b>{html.escape(str(classes[-1]))}</b>)</p>")
    return "".join(parts)


def _warnings_html(results: dict[str, xr.Dataset]) -> str:
    """A table of every result's guardrail warnings (empty string when there are none)."""
    from .estimators import guardrails

    rows = [(name, w) for name, result in results.items() for w in guardrails.read(result)]
    if not rows:
        return ""
    body = "".join(f"<tr><td>{html.escape(name)}</td><td><code>{html.escape(w['code'])}</code>"
                   f"</td><td>{html.escape(w['message'])}</td></tr>" for name, w in rows)
    return (f"{_section('Warnings: answers that are weak')}<table class='warnings'><tr>"
            f"<th>estimator</th><th>code</th><th>message</th></tr>{body}</table>")


def _section(title: str) -> str:
    return f"<h2>{html.escape(title)}</h2>"


# ---------------------------------------------------------------------------------------------
# the entry point


def build_layout(cube: xr.Dataset, results: dict[str, xr.Dataset]):
    """The report as a bokeh layout (a column of sections)."""
    from bokeh.layouts import column, gridplot

    from . import report

    from . import summary

    results = _extra_results(cube, results)
    loss = next((r.attrs.get("loss") for r in results.values() if r.attrs.get("loss")), None)
    # the answer first: what each criterion chose and how sure it is, then what went wrong
    items = [_div(_header_html(cube, results) + _section("The answer")
                  + summary.to_html(summary.rows(cube, results), loss=loss)
                  + "<p class='note'>Estimates are at the chosen param; warnings by code "
                    "(explained below, and on hover).</p>"
                  + _failures_html(cube) + _warnings_html(results))]
    grid = _grid_figures(cube, results)
    if grid:
        items += [_div(_section("Risk along the hyperparameter grid")
                       + "<p class='note'>Selections are outlined (shapes of different sizes, "
                         "so choices of the same param stay visible); hover a point for its "
                         "param.</p>"),
                  gridplot(grid, ncols=2, toolbar_location="above")]
    if "stability_nested" in results:
        items += [_div(_section("Choosing λ: nested CV error m_λ")),
                  _lambda_figure(results["stability_nested"])]
    # per-param intervals only: `param:` (one param) and `compare:` (a difference) are scalars
    per_param = {k: r for k, r in results.items()
                 if k in ("bates_ncv", "wald_cv") and "param" in r["estimate"].dims}
    if per_param:
        items += [_div(_section("Intervals for the prediction error")),
                  *_interval_figures(cube, per_param.get("bates_ncv"), per_param.get("wald_cv"))]
    if "ustat" in results or "nadeau_bengio" in results:
        items += [_div(_section("U-statistic comparison")),
                  *_ustat_figure(results.get("ustat"), results.get("nadeau_bengio"))]
    items += [_div(_section("Fit time") + _fit_time_note(cube)), _fit_time_figure(cube),
              _div(_status_html(cube))]
    text = report.text(cube, {k: v for k, v in results.items()})
    items.append(_div(_section("Text report") + f"<pre>{html.escape(text)}</pre>"))
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
