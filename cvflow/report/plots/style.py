"""Sizes, colours and the base figure shared by the report's plots."""
from __future__ import annotations
import math

LEARNER_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                  "#7f7f7f", "#bcbd22", "#17becf"]
# DESIGN CHOICE: the page fits a 1400 px window without horizontal scrolling: two grid figures
# of WIDTH side by side (toolbars above, legends inside the figure box), text and tables at
# PAGE_WIDTH, wrapping; long per-param axes are split by learner and into chunks.
PAGE_WIDTH = 1340
WIDTH = 660
HEIGHT = 340
TOOLS = "pan,box_zoom,wheel_zoom,reset,save"


def figure(title: str, name: str, x_label: str, y_label: str, *, x_axis_type: str = "linear",
           tooltips=None, **kwargs):
    """A WIDTH × HEIGHT bokeh figure named ``name`` (tests and scripts find it by name).

    Titles, axis labels and tooltips are drawn as text by BokehJS (never parsed as HTML)."""
    from bokeh.models import HoverTool
    from bokeh.plotting import figure as bokeh_figure

    if "x_range" in kwargs and not isinstance(kwargs["x_range"], (tuple, list)):
        x_axis_type = "auto"                    # a FactorRange: bokeh picks the factor axis
    kwargs.setdefault("width", WIDTH)
    kwargs.setdefault("height", HEIGHT)
    fig = bokeh_figure(title=title, name=name, x_axis_type=x_axis_type, tools=TOOLS,
                       toolbar_location="right", **kwargs)
    fig.xaxis.axis_label = x_label
    fig.yaxis.axis_label = y_label
    if tooltips:
        fig.add_tools(HoverTool(tooltips=tooltips))
    return fig


def plain(values) -> list:
    """Floats for a data source: NaN and inf -> None (JSON has neither)."""
    return [None if v is None or not math.isfinite(float(v)) else float(v) for v in values]
