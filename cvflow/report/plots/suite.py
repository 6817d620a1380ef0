"""The suite report's figures: the critical-difference diagram (Demšar 2006, Fig. 1) and a
per-data-set dot plot of each learner's estimate with its interval."""
from __future__ import annotations

import numpy as np

from .style import LEARNER_COLORS, WIDTH, figure


def cliques(mean_ranks: np.ndarray, cd: float) -> list[tuple[int, int]]:
    """The groups a critical-difference diagram joins by a bar: with the mean ranks sorted,
    every maximal run i..j (as positions in sorted order, j > i) whose range is below ``cd``
    (no two of its learners differ by Nemenyi's test). A learner alone draws no bar."""
    r = np.sort(np.asarray(mean_ranks, dtype=float))
    runs = []
    for i in range(r.size):
        j = int(np.searchsorted(r, r[i] + cd, side="left")) - 1   # last within cd of r[i]
        if j > i and not any(a <= i and j <= b for a, b in runs):
            runs.append((i, j))
    return runs


def critical_difference_figure(mean_rank: dict[str, float], cd: float, alpha: float):
    """Learners on the mean-rank axis (1 = best, left), the critical difference as a bar above,
    learners not significantly different (Nemenyi) joined by thick bars below the axis."""
    from bokeh.models import ColumnDataSource, LabelSet

    names = sorted(mean_rank, key=lambda n: mean_rank[n])
    ranks = np.asarray([mean_rank[n] for n in names], dtype=float)
    k = len(names)
    fig = figure(f"critical difference (Nemenyi, alpha {alpha:g}): {cd:.3g}", "critical-difference",
                 "mean rank (1 = best)", "", width=WIDTH * 2,
                 height=140 + 24 * k, x_range=(0.8, max(k, 2) + 0.2),
                 y_range=(-(k + 3), 3), tooltips=[("learner", "@name"), ("mean rank", "@x{0.000}")])
    fig.yaxis.visible = False
    fig.ygrid.visible = False
    fig.segment(x0=[1.0], y0=[2.0], x1=[1.0 + cd], y1=[2.0], line_width=3, color="black")
    fig.text(x=[1.0], y=[2.3], text=[f"CD = {cd:.3g}"], text_font_size="9pt")
    level = -1.0 * np.arange(1, k + 1)
    source = ColumnDataSource({"x": ranks, "y": level, "name": names,
                               "text": [f"{n} ({r:.2f})" for n, r in zip(names, ranks)],
                               "color": [LEARNER_COLORS[i % len(LEARNER_COLORS)] for i in range(k)]})
    fig.segment(x0="x", y0=0.0, x1="x", y1="y", source=source, color="#888")
    fig.scatter("x", 0.0, size=9, color="color", source=source)
    fig.add_layout(LabelSet(x="x", y="y", text="text", source=source, x_offset=4, y_offset=-6,
                            text_font_size="9pt"))
    for n, (i, j) in enumerate(cliques(ranks, cd)):
        y = -(k + 1) - 0.5 * (n % 3)
        fig.segment(x0=[ranks[i] - 0.03], y0=[y], x1=[ranks[j] + 0.03], y1=[y], line_width=5,
                    color="#444")
    return fig


def dots_figure(estimates, lower, upper, learners: list[str], datasets: list[str], *, loss: str):
    """Per data set (rows), each learner's estimate and interval divided by that data set's
    best estimate (losses differ in scale across data sets): 1 is the data set's best."""
    from bokeh.models import ColumnDataSource, Whisker

    est = np.asarray(estimates, dtype=float)
    best = np.nanmin(np.where(est > 0, est, np.nan), axis=1, keepdims=True)
    scale = np.where(np.isfinite(best), best, 1.0)
    fig = figure(f"each data set: {loss} relative to its best learner, with ± 1.96 se",
                 "datasets-dots", f"{loss} / the data set's best", "data set", width=WIDTH * 2,
                 height=120 + 28 * len(datasets), y_range=list(reversed(datasets)),
                 tooltips=[("learner", "@learner"), ("data set", "@dataset"), ("estimate", "@raw{0.0000g}")])
    for j, name in enumerate(learners):
        offset = (j - (len(learners) - 1) / 2) * 0.12
        y = [(d, offset) for d in datasets]
        source = ColumnDataSource({"x": est[:, j] / scale[:, 0], "y": y, "learner": [name] * len(datasets),
                                   "dataset": datasets, "raw": est[:, j],
                                   "lo": np.asarray(lower, dtype=float)[:, j] / scale[:, 0],
                                   "hi": np.asarray(upper, dtype=float)[:, j] / scale[:, 0]})
        color = LEARNER_COLORS[j % len(LEARNER_COLORS)]
        fig.scatter("x", "y", source=source, size=8, color=color, legend_label=name)
        fig.add_layout(Whisker(base="y", lower="lo", upper="hi", source=source, dimension="width",
                               line_color=color))
    fig.legend.click_policy = "hide"
    return fig
