"""How a learner's grid is drawn: one value axis for a 1-D grid, a heatmap for a 2-D grid.

:func:`grid_layout` reads the settings of one learner's params (grid order) and decides:

- one hyperparameter varies, all its values numbers: x is the value, on a log axis when every
  value is > 0 and they span at least a factor of ``LOG_SPAN`` (10), else on a linear axis;
- one varies, with strings, booleans, ``None`` or lists among its values: a categorical axis
  (the values in grid order);
- two vary and every pair of values occurs at most once: a heatmap, one cell per pair (the
  hyperparameter with more values across), numeric levels sorted;
- otherwise (three or more, or repeated pairs): x is the param's position in the learner's grid.

:func:`heatmap` draws one per-param series of such a learner as a heatmap with the chosen cells
marked.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from .style import LEARNER_COLORS, figure, plain

LOG_SPAN = 10.0
# a number is written in a cell when the heatmap has at most this many cells
CELL_TEXT_MAX = 120
# the selection markers: different shapes and sizes, so coinciding choices stay visible as
# concentric outlines
MARKERS = ("circle", "diamond", "triangle", "square", "inverted_triangle", "star")
MARK_SIZES = (24, 17, 11)


@dataclass(frozen=True)
class Axis:
    """One axis of a learner's grid.

    ``kind`` is "log", "linear" (``values`` floats), "categorical" (``values`` factor strings,
    ``factors`` their order on the axis) or "index" (``values`` the positions 0, 1, ...);
    ``key`` the hyperparameter ("" for "index"). ``values`` has one entry per param row.
    """

    key: str
    kind: str
    values: list
    factors: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.key or "param (grid order within the learner)"


@dataclass(frozen=True)
class GridLayout:
    """A learner's grid: ``x`` alone (a curve), or ``x`` and ``y`` (a heatmap)."""

    x: Axis
    y: Axis | None = None

    @property
    def heatmap(self) -> bool:
        return self.y is not None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _factor(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _levels(values: list) -> tuple[list, list[str]]:
    """Distinct values (numbers sorted, else in grid order) and their distinct factor strings."""
    distinct: dict[str, object] = {}
    for v in values:
        distinct.setdefault(json.dumps(v, sort_keys=True, default=str), v)
    levels = list(distinct.values())
    if all(_number(v) for v in levels):
        levels.sort()
    factors = [_factor(v) for v in levels]
    if len(set(factors)) < len(factors):         # e.g. 1.00001 and 1.00002 at 4 digits
        factors = [repr(v) for v in levels]
    return levels, factors


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def value_axis(key: str, values: list) -> Axis:
    """The axis of one varying hyperparameter: log, linear or categorical (module doc)."""
    if all(_number(v) for v in values):
        x = np.asarray(values, dtype=float)
        log = bool((x > 0).all() and x.max() / x.min() >= LOG_SPAN)
        return Axis(key, "log" if log else "linear", x.tolist())
    levels, factors = _levels(values)
    names = {_key(v): f for v, f in zip(levels, factors)}
    return Axis(key, "categorical", [names[_key(v)] for v in values], tuple(factors))


def _level_axis(key: str, values: list) -> Axis:
    levels, factors = _levels(values)
    names = {_key(v): f for v, f in zip(levels, factors)}
    return Axis(key, "categorical", [names[_key(v)] for v in values], tuple(factors))


def grid_layout(settings: list[dict]) -> GridLayout:
    """The layout of one learner's params, ``settings`` their hyperparameters in grid order.

    Examples
    --------
    >>> grid_layout([{"alpha": 0.01}, {"alpha": 1.0}]).x.kind
    'log'
    >>> grid_layout([{"C": 1, "gamma": 0.1}, {"C": 1, "gamma": 1}, {"C": 10, "gamma": 0.1},
    ...              {"C": 10, "gamma": 1}]).heatmap
    True
    """
    keys = sorted({k for s in settings for k in s})
    varying = [k for k in keys if len({_key(s.get(k)) for s in settings}) > 1]
    if len(varying) == 1:
        return GridLayout(value_axis(varying[0], [s.get(varying[0]) for s in settings]))
    if len(varying) == 2:
        pairs = {(_key(s.get(varying[0])), _key(s.get(varying[1]))) for s in settings}
        if len(pairs) == len(settings):
            a, b = (_level_axis(k, [s.get(k) for s in settings]) for k in varying)
            return GridLayout(a, b) if len(a.factors) >= len(b.factors) else GridLayout(b, a)
    return GridLayout(Axis("", "index", list(range(len(settings)))))


def heatmap(title: str, name: str, layout: GridLayout, values, labels, *, value_label: str,
            marks=(), mark_colors=None):
    """A heatmap of one per-param series of a learner with a 2-D grid.

    Parameters
    ----------
    layout : GridLayout
        The learner's layout (``layout.heatmap`` true).
    values : array (rows,)
        The series for the learner's params in ``layout``'s row order (NaN: no value; grey).
    labels : list of str (rows,)
        Each param's label, shown on hover.
    marks : sequence of (label, row)
        Chosen params to outline (row: position in ``layout``'s rows).
    mark_colors : dict label -> colour, optional

    Returns
    -------
    bokeh figure named ``name``, its cells in a ColumnDataSource named ``name + "-cells"``
    with columns ``x``, ``y`` (factors), ``value``, ``label`` and ``text``; mark k in
    ``name + "-choice-<k>"`` (``x``, ``y``, ``choice``, ``label``).
    """
    from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, FactorRange, Legend
    from bokeh.palettes import Viridis256
    from bokeh.transform import linear_cmap

    x_axis, y_axis = layout.x, layout.y
    assert y_axis is not None, "heatmap needs a 2-D layout"
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if high <= low:
        high = low + (abs(low) or 1.0) * 1e-9
    # DESIGN CHOICE: the palette runs from yellow (smallest) to purple (largest), so the best
    # cell of a loss is the brightest; the colour bar beside says which is which.
    palette = list(reversed(Viridis256))
    cells = len(values)
    text = [f"{v:.3g}" if np.isfinite(v) and cells <= CELL_TEXT_MAX else "" for v in values]
    light = [(not np.isfinite(v)) or (v - low) / (high - low) <= 0.5 for v in values]
    src = ColumnDataSource({"x": list(x_axis.values), "y": list(y_axis.values),
                            "value": [float(v) if np.isfinite(v) else float("nan")
                                      for v in values],
                            "label": list(labels), "text": text,
                            "text_color": ["#000000" if w else "#ffffff" for w in light]},
                           name=f"{name}-cells")
    fig = figure(title, name, x_axis.label, y_axis.label,
                 x_range=FactorRange(*x_axis.factors), y_range=FactorRange(*y_axis.factors),
                 tooltips=[("param", "@label"), (value_label, "@value{0.0000g}")])
    mapper = linear_cmap("value", palette, low, high, nan_color="#dddddd")
    fig.rect("x", "y", width=1, height=1, source=src, fill_color=mapper, line_color="#ffffff")
    fig.text("x", "y", text="text", source=src, text_align="center", text_baseline="middle",
             text_font_size="8pt", text_color="text_color")
    fig.grid.grid_line_color = None
    fig.axis.axis_line_color = None
    fig.xaxis.major_label_orientation = 0.7 if sum(map(len, x_axis.factors)) > 60 else 0
    fig.add_layout(ColorBar(color_mapper=mapper.transform, ticker=BasicTicker(desired_num_ticks=6),
                            width=12, title=value_label), "right")
    items = []
    for k, (label, row) in enumerate(marks):
        color = (mark_colors or {}).get(label, LEARNER_COLORS[3])
        where = ColumnDataSource({"x": [x_axis.values[row]], "y": [y_axis.values[row]],
                                  "choice": [label], "label": [labels[row]]},
                                 name=f"{name}-choice-{k}")
        mark = fig.scatter("x", "y", source=where, marker=MARKERS[k % len(MARKERS)],
                           size=MARK_SIZES[k % len(MARK_SIZES)], fill_alpha=0.0,
                           line_color=color, line_width=3)
        items.append((label, [mark]))
    if items:
        legend = Legend(items=items, orientation="horizontal", label_text_font_size="8pt",
                        spacing=8, padding=2, margin=2, click_policy="hide")
        fig.add_layout(legend, "above")
    return fig


def value_source(axis: Axis, y, labels, *, name: str | None = None, **extra):
    """A ColumnDataSource of a curve along ``axis`` (``x`` its values, ``y`` ``None`` where NaN)."""
    from bokeh.models import ColumnDataSource

    x = list(axis.values) if axis.kind == "categorical" else [float(v) for v in axis.values]
    return ColumnDataSource({"x": x, "y": plain(y), "label": list(labels), **extra}, name=name)
