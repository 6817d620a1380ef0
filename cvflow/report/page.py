"""The page of the HTML report (:mod:`cvflow.report.html`) that estimators draw on: the
:class:`Page` their ``html`` hooks fill (:mod:`cvflow.estimators.registry`), the renderer of
an estimator that declares none (:func:`generic_html`), and the drawing primitives the
report's sections share (a figure with the report's size and tools, a legend beside it, text
as escaped markup: :func:`div`).
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import xarray as xr
from markupsafe import Markup

from .plots import grid as gridplots
from .plots.grid import MARK_SIZES, MARKERS
from .plots.style import HEIGHT, LEARNER_COLORS, PAGE_WIDTH, WIDTH
from ..objects import short
from ..estimators.labels import param_label, param_labels

MAX_INTERVAL_PARAMS = 40
PARAMS_PER_INTERVAL_FIGURE = 16
# per-param intervals, in the order the estimators draw them: naive CV, Bates, Wald
INTERVAL_COLORS = ["#7f7f7f", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"]
CSS = Markup("<style>table{border-collapse:collapse;margin:4px 0}th,td{border:1px solid #bbb;"
             "padding:3px 6px;vertical-align:top;text-align:left}td{overflow-wrap:anywhere}"
             "pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}"
             "table.summary th{background:#eef}p.note{color:#444;margin:2px 0}"
             "table.warnings td:nth-child(-n+2){white-space:nowrap}</style>")



# ---------------------------------------------------------------------------------------------
# reading the cube and the results


def _finite(values) -> np.ndarray:
    return np.where(np.isfinite(values), values, np.nan)


def _labels(cube: xr.Dataset) -> list[str]:
    """Each param's short label, ``learner(tuned=value)`` (hover text and axes)."""

    return param_labels(cube)


def _short_labels(cube: xr.Dataset) -> list[str]:
    """Each param's tuned values only (its learner is the figure's), e.g. ``alpha=0.1``; the
    learner's name when its grid has one point."""

    out = []
    for h in range(cube.sizes["param"]):
        label = param_label(cube, h)
        out.append(", ".join(f"{k}={short(v)}" for k, v in label["params"].items())
                   or label["learner"])
    return out


def _index(value) -> int | None:
    """A selection index (scalar DataArray, number or None) as an int, None when -1 / absent."""
    if value is None:
        return None
    h = int(np.asarray(getattr(value, "values", value)))
    return h if h >= 0 else None


# ---------------------------------------------------------------------------------------------
# figures


def new_figure(title: str, name: str, x_label: str, y_label: str, x_axis_type: str = "linear",
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


def legend_beside(fig) -> None:
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


def _slug(label: str) -> str:
    """A figure-name part of a curve label: "corrected K-fold" -> "corrected-kfold"."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower().replace("k-fold", "kfold")).strip("-")


def _values(values) -> np.ndarray:
    return np.asarray(getattr(values, "values", values), dtype=float)


def _fit_y_range(fig, values) -> None:
    """A y range holding every point and whisker (bokeh's auto range ignores whiskers)."""
    from bokeh.models import Range1d

    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        fig.y_range = Range1d(lo - pad, hi + pad)


# ---------------------------------------------------------------------------------------------
# text: escaped markup


def div(text: Markup, width: int = PAGE_WIDTH):
    """HTML text at the page's width (its tables and preformatted text wrap inside it).

    DESIGN CHOICE: data never becomes markup. BokehJS inserts a Div's text as HTML, so it
    takes only :class:`markupsafe.Markup`, built from templates whose ``format`` escapes every
    value (a plain str is refused: every report build checks every Div); plot titles, labels
    and tooltips are drawn as text by BokehJS. Hostile names, paths, values and messages:
    tests/test_page_escaping.py.
    """
    from bokeh.models import Div

    if not isinstance(text, Markup):
        raise TypeError(f"div takes markupsafe.Markup (values escaped), not {type(text).__name__}")
    return Div(text=str(CSS + text), width=width)


def heading(title: str) -> Markup:
    return Markup("<h2>{}</h2>").format(title)


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# ---------------------------------------------------------------------------------------------
# the page estimators draw on


class Page:
    """What an estimator's ``html(result, page)`` hook draws on (see
    :mod:`cvflow.estimators.registry`). The page owns the layout: hooks add series, the page
    groups them into figures and sections.

    Figures are named for tests and scripts: ``kfold-<learner>`` (risk along the grid),
    ``<panel>-<learner>`` (:meth:`grid_panel`), and the names given to :meth:`curve`,
    :meth:`param_intervals` and :meth:`scalar_intervals`.
    """

    def __init__(self, cube: xr.Dataset, loss: str | None):
        self.cube = cube
        self.loss = loss or "loss"
        self.labels = np.asarray(_labels(cube), dtype=object)
        self.learners = np.asarray([str(v) for v in cube["learner"].values])
        self.curves: dict[str, dict] = {}       # label -> grid curve (first one wins)
        self.marks: dict[str, int] = {}         # label -> param index
        self.panels: dict[str, dict] = {}       # panel name -> per-param values
        self.figures: dict[str, dict] = {}      # name -> section, builder, series
        self.tables: list[tuple[str, dict]] = []

    # ---- drawing primitives (what estimator hooks call) -------------------------------------

    def grid_curve(self, label: str, values, *, band=None, selected=None,
                   choice: str | None = None) -> None:
        """A per-param risk curve on each learner's "risk along the grid" figure.

        ``band`` (per-param) shades values ± band; ``selected`` (a param index) is marked and
        named ``choice`` (default "<label> choice"). A second curve with the same label is
        ignored (several estimators may offer the same test risk)."""
        values = _values(values)
        if label not in self.curves and np.isfinite(values).any():
            self.curves[label] = {"y": values, "band": None if band is None else _values(band)}
        if _index(selected) is not None:
            self.grid_mark(choice or f"{label} choice", selected)

    def grid_mark(self, label: str, selected) -> None:
        """Mark the param ``selected`` (an index) on the grid figures."""
        h = _index(selected)
        if h is not None:
            self.marks.setdefault(label, h)

    def grid_panel(self, name: str, title: str, values, *, legend: str = "",
                   y_label: str = "") -> None:
        """A per-learner figure ``<name>-<learner>`` of per-param ``values`` along the grid."""
        self.panels.setdefault(name, {"title": title, "y": _values(values), "legend": legend,
                                      "y_label": y_label})

    def curve(self, name: str, title: str, x, y, *, x_label: str, y_label: str, mark=None,
              mark_label: str = "", section: str | None = None, labels=None) -> None:
        """A figure ``name`` of y against x (a log x axis when every x > 0, else x in grid
        order); ``mark`` is an index into x to highlight, named ``mark_label``."""
        self.figures.setdefault(name, {"section": section or title, "kind": "curve",
                                       "title": title, "series": []})
        self.figures[name]["series"].append(dict(x=_values(x), y=_values(y), x_label=x_label,
                                                 y_label=y_label, mark=mark, mark_label=mark_label,
                                                 labels=labels))

    def param_intervals(self, name: str, title: str, label: str, estimate, lower, upper, *,
                        section: str = "Intervals for the prediction error") -> None:
        """Per-param intervals of one method; methods sharing ``name`` sit side by side."""
        self.figures.setdefault(name, {"section": section, "kind": "param_intervals",
                                       "title": title, "series": []})
        self.figures[name]["series"].append((label, _values(estimate), _values(lower),
                                             _values(upper)))

    def scalar_intervals(self, name: str, title: str, label: str, estimate, lower, upper, *,
                         zero_line: bool = False, section: str | None = None,
                         caption: str = "") -> None:
        """One estimate with its interval; methods sharing ``name`` sit side by side. Keep
        ``title`` short (the figure is half the page wide); ``caption`` goes above it."""
        self.figures.setdefault(name, {"section": section or title, "kind": "scalar_intervals",
                                       "title": title, "series": [], "zero": zero_line,
                                       "caption": caption})
        self.figures[name]["series"].append((label, float(_values(estimate)),
                                             float(_values(lower)), float(_values(upper))))

    def ranked_tiers(self, name: str, title: str, labels, estimate, lower, upper, tiers, *,
                     section: str = "Comparing params: ranking and tiers",
                     caption: str = "") -> None:
        """Params in rank order (best first) with intervals and a tier label each (e.g. the
        letters of a compact letter display); drawn by :func:`tiers_figure`."""
        self.figures.setdefault(name, {"section": section, "kind": "ranked_tiers",
                                       "title": title, "caption": caption,
                                       "labels": [str(v) for v in labels],
                                       "estimate": _values(estimate), "lower": _values(lower),
                                       "upper": _values(upper), "tiers": [str(t) for t in tiers]})

    def table(self, title: str, rows: dict) -> None:
        """A small table of named values (``{name: value}``)."""
        self.tables.append((title, dict(rows)))

    # ---- layout ------------------------------------------------------------------------------

    def grid_figures(self) -> list:
        """Per learner: the risk curves along its grid value (log, linear or categorical
        axis) and its panels; for a 2-D grid a heatmap per curve and per panel instead
        (:func:`cvflow.report.plots.grid.grid_layout` decides)."""
        figures = []
        colors = {label: LEARNER_COLORS[i % len(LEARNER_COLORS)]
                  for i, label in enumerate(list(self.curves) + list(self.marks))}
        for name in dict.fromkeys(self.learners):
            rows = np.flatnonzero(self.learners == name)
            layout = gridplots.grid_layout([json.loads(str(self.cube["param_json"].values[h]))
                                            ["params"] for h in rows])
            if layout.heatmap:
                figures += self._heatmaps(name, rows, layout, colors)
                continue
            axis = layout.x
            if axis.kind in ("log", "linear"):       # lines join the points in value order
                order = np.argsort(np.asarray(axis.values, dtype=float), kind="stable")
                rows = rows[order]
                axis = gridplots.Axis(axis.key, axis.kind, [axis.values[i] for i in order])
            if self.curves:
                figures.append(self._risk_figure(name, rows, axis, colors))
            for panel, spec in self.panels.items():
                fig = self._axis_figure(f"{name}: {spec['title']}", f"{panel}-{name}", axis,
                                        spec["y_label"] or panel)
                src = gridplots.value_source(axis, spec["y"][rows], self.labels[rows],
                                             name=f"{panel}-{name}-values")
                fig.line("x", "y", source=src, color=LEARNER_COLORS[4], line_width=2,
                         legend_label=spec["legend"] or panel)
                fig.scatter("x", "y", source=src, color=LEARNER_COLORS[4], size=4)
                fig.legend.location = "top_left"
                fig.legend.label_text_font_size = "8pt"
                fig.legend.background_fill_alpha = 0.7
                figures.append(fig)
        return figures

    @staticmethod
    def _axis_figure(title: str, name: str, axis, y_label: str):
        from bokeh.models import FactorRange

        if axis.kind == "categorical":
            return new_figure(title, name, axis.label, y_label, x_range=FactorRange(*axis.factors))
        return new_figure(title, name, axis.label, y_label, "log" if axis.kind == "log" else "linear")

    def _heatmaps(self, name: str, rows: np.ndarray, layout, colors: dict) -> list:
        """A learner with a 2-D grid: one heatmap per risk curve (``<curve>-<learner>``, e.g.
        ``kfold-svc``, ``corrected-kfold-svc``) and per panel, every choice outlined."""
        marks = [(label, int(np.flatnonzero(rows == h)[0])) for label, h in self.marks.items()
                 if h in rows]
        figures = []
        series = [(f"{_slug(label)}-{name}", f"{name}: {label} ({self.loss})", curve["y"],
                   f"{label}") for label, curve in self.curves.items()]
        series += [(f"{panel}-{name}", f"{name}: {spec['title']}", spec["y"],
                    spec["y_label"] or panel) for panel, spec in self.panels.items()]
        for fig_name, title, values, value_label in series:
            figures.append(gridplots.heatmap(title, fig_name, layout, values[rows],
                                             list(self.labels[rows]), value_label=value_label,
                                             marks=marks, mark_colors=colors))
        return figures

    def _risk_figure(self, name, rows, axis, colors):
        fig = self._axis_figure(f"{name}: estimated risk along the grid", f"kfold-{name}", axis,
                                f"risk ({self.loss})")
        x = list(axis.values)
        for label, curve in self.curves.items():
            src = gridplots.value_source(axis, curve["y"][rows], self.labels[rows],
                                         name=f"kfold-{name}-{_slug(label)}")
            fig.line("x", "y", source=src, color=colors[label], line_width=2, legend_label=label)
            fig.scatter("x", "y", source=src, color=colors[label], size=4, legend_label=label)
            if curve["band"] is not None:
                est, band = curve["y"][rows], curve["band"][rows]
                fig.varea(x=x, y1=_finite(est - band), y2=_finite(est + band),
                          color=colors[label], alpha=0.12, legend_label=f"{label} ± se")
        for k, (label, h) in enumerate(self.marks.items()):
            if h not in rows:
                continue
            ys = [c["y"][h] for c in self.curves.values() if np.isfinite(c["y"][h])]
            i = int(np.flatnonzero(rows == h)[0])
            src = gridplots.value_source(gridplots.Axis(axis.key, axis.kind, [x[i]] * len(ys)),
                                         ys, [self.labels[h]] * len(ys),
                                         name=f"kfold-{name}-choice-{k}", choice=[label] * len(ys))
            # concentric outlines of different sizes: choices of the same param stay visible
            fig.scatter("x", "y", source=src, marker=MARKERS[k % len(MARKERS)],
                        size=MARK_SIZES[k % len(MARK_SIZES)], fill_alpha=0.0,
                        line_color=colors[label], line_width=2.5, legend_label=label)
        legend_beside(fig)
        return fig

    def sections(self) -> list[tuple[str, list]]:
        """(section title, bokeh models) of every figure but the grid ones, in order of use."""
        build = {"curve": self._curve_figure, "param_intervals": self._interval_figures,
                 "scalar_intervals": self._scalar_figure,
                 "ranked_tiers": lambda name, spec: tiers_figure(name, spec, self.loss)}
        return [(spec["section"], build[spec["kind"]](name, spec))
                for name, spec in self.figures.items()]

    def _curve_figure(self, name: str, spec: dict) -> list:
        from bokeh.models import Span

        first = spec["series"][0]
        x_values = first["x"]
        if (x_values > 0).all() and x_values.size > 1:
            axis, x_label = "log", first["x_label"]
        else:
            axis, x_label = "linear", f"{first['x_label']} (grid order)"
        fig = new_figure(spec["title"], name, x_label, first["y_label"], axis)
        for k, s in enumerate(spec["series"]):
            x = s["x"] if axis == "log" else np.arange(s["x"].size, dtype=float)
            labels = s["labels"] or [f"{first['x_label']}={v:.4g}" for v in s["x"]]
            color = LEARNER_COLORS[(4 + k) % len(LEARNER_COLORS)]
            src = _source(x, s["y"], labels)
            fig.line("x", "y", source=src, color=color, line_width=2, legend_label=s["y_label"])
            fig.scatter("x", "y", source=src, color=color, size=6)
            if axis == "linear":
                fig.xaxis.ticker = list(map(float, x))
                fig.xaxis.major_label_overrides = {float(v): f"{lv:.3g}" for v, lv in zip(x, s["x"])}
            i = _index(s["mark"])
            if i is not None:
                fig.add_layout(Span(location=float(x[i]), dimension="height",
                                    line_color=LEARNER_COLORS[3], line_dash="dashed", line_width=2))
                fig.scatter([float(x[i])], [float(s["y"][i])], marker="diamond", size=16,
                            fill_alpha=0.0, line_color=LEARNER_COLORS[3], line_width=3,
                            legend_label=s["mark_label"] or "chosen")
        fig.legend.location = "top_left"
        return [fig]

    def _interval_figures(self, name: str, spec: dict) -> list:
        """Per-param intervals of every method side by side: one figure per learner (and per
        PARAMS_PER_INTERVAL_FIGURE params), each within the page's width."""
        from bokeh.models import ColumnDataSource, FactorRange, Whisker
        from bokeh.transform import dodge

        series = spec["series"]
        labels = np.asarray(_short_labels(self.cube), dtype=object)
        center = series[0][1]
        keep = np.flatnonzero(np.isfinite(center))
        if keep.size > MAX_INTERVAL_PARAMS:
            keep = np.sort(keep[np.argsort(center[keep], kind="stable")[:MAX_INTERVAL_PARAMS]])
        figures = []
        for learner in dict.fromkeys(self.learners[keep]):
            rows = keep[self.learners[keep] == learner]
            for start in range(0, rows.size, PARAMS_PER_INTERVAL_FIGURE):
                part = rows[start:start + PARAMS_PER_INTERVAL_FIGURE]
                factors = [str(labels[h]) for h in part]
                more = f" ({start + 1}-{start + part.size} of {rows.size})" \
                    if rows.size > part.size else ""
                fig = new_figure(f"{learner}: {spec['title']}{more}", name, "",
                              f"error ({self.loss})", x_range=FactorRange(*factors))
                fig.width = min(PAGE_WIDTH, max(WIDTH, 64 * len(factors) + 300))
                fig.xaxis.major_label_orientation = 0.6 if max(map(len, factors)) > 8 else 0
                width = 0.8 / max(len(series), 1)
                for k, (label, est, lo, hi) in enumerate(series):
                    color = INTERVAL_COLORS[k % len(INTERVAL_COLORS)]
                    offset = (k - (len(series) - 1) / 2) * width
                    src = ColumnDataSource({"x": factors, "label": factors,
                                            "y": [float(v) for v in est[part]],
                                            "lower": [float(v) for v in lo[part]],
                                            "upper": [float(v) for v in hi[part]]})
                    fig.scatter(dodge("x", offset, range=fig.x_range), "y", source=src,
                                color=color, size=8, legend_label=label)
                    fig.add_layout(Whisker(base=dodge("x", offset, range=fig.x_range),
                                           lower="lower", upper="upper", source=src,
                                           line_color=color, line_width=2))
                _fit_y_range(fig, [v for s in series for arr in s[1:] for v in arr[part]])
                legend_beside(fig)
                figures.append(fig)
        return figures

    def _scalar_figure(self, name: str, spec: dict) -> list:
        from bokeh.models import ColumnDataSource, FactorRange, Span, Whisker

        rows = spec["series"]
        fig = new_figure(spec["title"], name, "", self.loss, x_range=FactorRange(*[r[0] for r in rows]))
        src = ColumnDataSource({"x": [r[0] for r in rows], "label": [r[0] for r in rows],
                                "y": [r[1] for r in rows],
                                "lower": [r[2] if math.isfinite(r[2]) else None for r in rows],
                                "upper": [r[3] if math.isfinite(r[3]) else None for r in rows],
                                "color": [LEARNER_COLORS[k % len(LEARNER_COLORS)]
                                          for k in range(len(rows))]})
        fig.scatter("x", "y", source=src, color="color", size=12)
        _fit_y_range(fig, [v for r in rows for v in r[1:4]] + ([0.0] if spec["zero"] else []))
        fig.add_layout(Whisker(base="x", lower="lower", upper="upper", source=src, line_width=2))
        if spec["zero"]:
            fig.add_layout(Span(location=0, dimension="width", line_color="#000000",
                                line_dash="dotted"))
        caption = spec.get("caption")
        return ([div(Markup("<p class='note'>{}</p>").format(caption))] if caption else []) + [fig]

    def tables_html(self) -> Markup:
        row = Markup("<tr><td>{}</td><td>{}</td></tr>")
        return Markup("").join(
            Markup("<h3>{}</h3><table>{}</table>").format(
                title, Markup("").join(row.format(k, cell(v)) for k, v in rows.items()))
            for title, rows in self.tables)


def tiers_figure(name: str, spec: dict, loss: str) -> list:
    """The figure of :meth:`Page.ranked_tiers`: one point and whisker per param in rank order
    (left = best), its tier letters written above the whisker, a caption above the figure."""
    from bokeh.models import ColumnDataSource, FactorRange, LabelSet, Whisker

    labels = spec["labels"]
    fig = new_figure(spec["title"], name, "", f"error ({loss})", x_range=FactorRange(*labels))
    fig.width = min(PAGE_WIDTH, max(WIDTH, 64 * len(labels) + 200))
    fig.xaxis.major_label_orientation = 0.6 if max(map(len, labels)) > 8 else 0

    def plain(values):
        return [float(v) if math.isfinite(v) else None for v in values]
    top = [u if math.isfinite(u) else e for u, e in zip(spec["upper"], spec["estimate"])]
    src = ColumnDataSource({"x": labels, "label": labels, "y": plain(spec["estimate"]),
                            "lower": plain(spec["lower"]), "upper": plain(spec["upper"]),
                            "top": plain(top), "tier": spec["tiers"]})
    fig.scatter("x", "y", source=src, color=LEARNER_COLORS[0], size=10)
    fig.add_layout(Whisker(base="x", lower="lower", upper="upper", source=src, line_width=2))
    fig.add_layout(LabelSet(x="x", y="top", text="tier", source=src, y_offset=6,
                            text_align="center", text_font_style="bold"))
    values = [v for key in ("estimate", "lower", "upper") for v in spec[key]]
    # room above the highest whisker for its letters
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        from bokeh.models import Range1d

        lo, hi = min(finite), max(finite)
        pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        fig.y_range = Range1d(lo - pad, hi + 3 * pad)
    caption = spec.get("caption")
    return ([div(Markup("<p class='note'>{}</p>").format(caption))] if caption else []) + [fig]


def generic_html(name: str, result: xr.Dataset, page: Page) -> None:
    """The renderer of an estimator that declares none, driven by the shared result names:
    a per-param ``estimate`` along the grid (``selected`` marked), per-param ``lower`` /
    ``upper`` as intervals, and the scalar results as a table."""
    per_param = {v for v, da in result.data_vars.items() if da.dims == ("param",)}
    if "estimate" in per_param:
        selected = result["selected"] if "selected" in result and result["selected"].ndim == 0 \
            else None
        page.grid_curve(name, result["estimate"], selected=selected)
        if {"lower", "upper"} <= per_param:
            page.param_intervals("intervals", "intervals", name,
                                 result["estimate"], result["lower"], result["upper"])
    scalars = {v: da.values.item() for v, da in result.data_vars.items() if da.ndim == 0}
    if scalars:
        page.table(name, scalars)
