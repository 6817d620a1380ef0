"""The live study page on the Dask dashboard: ``<dashboard>/cvflow`` while a study runs.

Per learner it shows the fits done and failed along the grid and the K-fold curve (and the
bias-corrected one once the full fit is in) computed from the blocks finished so far, and the
failures grouped by message (:mod:`cvflow.report.failures`); it updates as blocks land.

How it stays cheap:

- each block task also returns two numbers per fit, computed from the predictions it already
  holds (:class:`Scorer`): the loss summed over the analysis samples the fit did not train on,
  and its mean over all analysis samples. The K-fold and corrected K-fold estimates are exact
  functions of these (:func:`cvflow.estimators.split_scores.kfold_scores`,
  :func:`cvflow.estimators.corrected.corrected_scores`), so the client never reads ``pred``;
- the client (:class:`Monitor`) folds them in and publishes a small per-param summary to the
  scheduler with ``Client.set_metadata``, at most a few times a second;
- the page is served by the scheduler's own HTTP server: this module is one of its
  ``distributed.scheduler.http.routes`` modules (Dask's extension point for scheduler pages;
  importing cvflow's engine adds it to the defaults). The page is BokehJS with an
  ``AjaxDataSource`` per plot polling ``cvflow/data/...json``, answered from that metadata.

A scheduler cvflow did not start (``--cluster tcp://...``) serves the page when its own
configuration lists ``cvflow.report.live`` among ``distributed.scheduler.http.routes``.
"""
from __future__ import annotations

import functools
import hmac
import json
import logging
import math
import re
import secrets
import time
import urllib.parse
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import dask.config
import numpy as np
from markupsafe import Markup, escape
from .. import config
from .failures import group, normalise
from .plots.grid import grid_layout
from ..estimators.np_roles import fold_members, masked_sum
from ..estimators.losses import DECLARED, apply_loss

log = logging.getLogger(__name__)

ROUTES_KEY = "distributed.scheduler.http.routes"
METADATA = "cvflow-live"
# the columns of the page's racing table (who was dropped when; cvflow.execution.race_runner)
RACE_COLUMNS = ("stage", "dropped", "learner", "leader", "difference", "z", "p")
# the client publishes its summary at most this often (seconds); the page polls at this period
PUBLISH_SECONDS = 0.5
POLL_MS = 1000


def enable_routes() -> None:
    """Add this module to the scheduler HTTP route modules (Dask config defaults), so the
    schedulers started afterwards in this process serve the page.

    Distributed's own defaults are loaded first (importing it), and ``update_defaults`` leaves
    a user's own setting of the key alone (Dask's config rule): a customised route list must
    name ``cvflow.report.live`` (and ``cvflow.report.suite_live``, a suite's page) itself.
    """
    import distributed  # noqa: F401 - registers distributed's config defaults first

    routes = list(dask.config.get(ROUTES_KEY, default=[]) or [])
    # a suite's page (config cvflow.execution.suite-page) is served beside the runs' pages
    ours = [m for m in (__name__, config.get("cvflow.execution.suite-page")) if m]
    if any(m not in routes for m in ours):
        dask.config.update_defaults({"distributed": {"scheduler": {"http": {
            "routes": routes + [m for m in ours if m not in routes]}}}})


# --- the worker side: two numbers per fit ------------------------------------------------------

@dataclass(frozen=True)
class Scorer:
    """Per-fit loss sums a block task returns with its summary (picklable, small).

    ``analysis`` (n,) bool marks D (not held out); ``classes`` are the cube's class labels
    (the study's ``Data.classes``, sorted, numbers or strings; None for regression). For fit
    (h, s): ``oof_sum`` = Σ_{i∈D, i∉train_s} ℓ_i(h, s) (for fold j's split: the sum over N_j)
    and ``risk`` = mean_{i∈D} ℓ_i(h, s). NaN for a failed fit.
    """

    loss: str
    analysis: np.ndarray
    # DESIGN CHOICE: the scorer carries the cube's classes, what the losses read. The block's
    # ``positive`` is what predict_output reads (a binary task's one positive label), not the
    # class list: taken for it, every binary study's page had no K-fold
    classes: tuple | None = None

    def __call__(self, pred: np.ndarray, y, train: np.ndarray, params) -> dict:
        losses = apply_loss(self.loss, np.asarray(y), pred, self.classes,
                            [p.output for p in params])
        held_out = self.analysis[None, :] & ~np.asarray(train, dtype=bool)
        return {"oof_sum": masked_sum(losses, held_out[None]),
                "risk": masked_sum(losses, self.analysis) / self.analysis.sum()}


# --- the client side: what has landed, summarised per param ------------------------------------

def _labels(params) -> list[str]:
    """Each param's setting, only the hyperparameters its learner varies (``alpha=0.1``)."""
    varying: dict[str, set] = {}
    for p in params:
        for key, value in p.hyper.items():
            varying.setdefault(p.learner, {}).setdefault(key, set()).add(json.dumps(value))
    out = []
    for p in params:
        keys = [k for k, v in varying.get(p.learner, {}).items() if len(v) > 1]
        out.append(", ".join(f"{k}={p.hyper[k]:.4g}" if isinstance(p.hyper.get(k), float)
                             else f"{k}={p.hyper.get(k)}" for k in keys) or p.learner)
    return out


def run_id(name: str) -> str:
    """A run's id: its workflow's name reduced to ASCII letters, digits, ``_ . -`` (so the URL
    needs no quoting and the data route ``[\\w.-]+`` matches it), then 8 random hex digits."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.")[:40] or "study"
    return f"{slug}-{uuid.uuid4().hex[:8]}"


def _plain(values) -> list:
    """Floats for JSON and msgpack: NaN -> None."""
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v
            for v in np.asarray(values, dtype=object).tolist()]


def finite(values) -> list:
    """Floats for JSON: NaN and infinity (a z of identical differences) -> None."""
    return [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]


class Monitor:
    """The client's view of a running study, published to the scheduler for the live page.

    Built by :func:`start`; the engine calls :meth:`block` with every finished block's summary.
    """

    def __init__(self, client, workflow, params, design, data, *, store: str, url: str,
                 token: str | None = None):

        self.client = client
        self.run = run_id(workflow.name)
        # DESIGN CHOICE: the page and its data answer only requests carrying this run's secret,
        # as Jupyter's token: the scheduler's HTTP port is open to every local user (on a
        # shared login node, every user of the cluster), the URL cvflow prints only to its
        # owner. The secret travels in the metadata, which only this run's client (TLS) reads
        # and writes; docs/guide/execution.md says who can read what. On a cluster cvflow
        # started, the whole server asks for a secret, given in the dashboard's URL
        # (cvflow.execution.dashboard_gate): the page's is that one, so its URL passes both.
        self.token = token or secrets.token_urlsafe(24)
        self.url = f"{url}?run={self.run}&token={self.token}"
        n_params, n_splits = len(params), design.n_splits
        self.learner = np.asarray([p.learner for p in params])
        self.labels = _labels(params)
        self.fold_split = np.asarray(design.fold_split)
        self.full_split = int(design.full_split)
        self.has_folds = self.fold_split.size > 0 and bool((self.fold_split >= 0).all())
        # |N_j| (repeat, outer), as cvflow.estimators.kfold.fold_sizes reads it from a cube
        self.sizes = (fold_members(design.fold, self.fold_split.shape[1]).sum(-1)
                      if self.has_folds else None)
        self.loss = workflow.loss                     # checked against the learners by spec

        # DESIGN CHOICE: the page sums per-sample losses as fits land; a per-fold metric (r2,
        # accuracy, roc_auc, ...) is no such sum, so the page shows the task's default
        # pointwise loss instead (its name is on the page); the report uses the metric
        declared = DECLARED.get(str(self.loss).partition(":")[0])
        if declared is not None and not declared.pointwise:
            self.loss = "squared" if workflow.task == "regression" else "zero_one"
        self.scorer = Scorer(self.loss, ~np.asarray(data.is_test, dtype=bool),
                             None if data.classes is None else tuple(data.classes))
        self.done = np.zeros((n_params, n_splits), dtype=bool)
        self.failed = np.zeros((n_params, n_splits), dtype=bool)
        self.dropped = np.zeros(n_params, dtype=bool)       # by racing
        self.race: dict[str, list] = {k: [] for k in RACE_COLUMNS}
        # DESIGN CHOICE: the curves are running sums, folded in as blocks land (issue 40 item
        # 4): each publication reads P numbers, not the (param, repeat, outer) cells of every
        # fit (about 5 s of CPU a publication at 10^7 fits, beside the workers). Fold cell
        # (r, j) adds ℓ-sum / (n_r R) to the K-fold estimate (kfold_scores: the pooled mean of
        # each repeat, averaged over repeats) and |N_j|/n_r · risk / R to the fold models'
        # risk (corrected_scores); a failed fit adds NaN, so its param stays NaN (the NaN rule)
        self.kfold_sum = np.zeros(n_params)
        self.fold_model_sum = np.zeros(n_params)
        self.folds_done = np.zeros(n_params, dtype=int)
        self.full_risk = np.full(n_params, np.nan)
        self.cells: dict[int, list[tuple[float, float]]] = {}     # fold split -> its cells' weights
        if self.has_folds:
            n_r = self.sizes.sum(axis=1, keepdims=True)
            repeats = self.fold_split.shape[0]
            to_kfold = np.broadcast_to(1.0 / (n_r * repeats), self.sizes.shape)
            weights = zip(self.fold_split.ravel(), to_kfold.ravel(),
                          (self.sizes / n_r / repeats).ravel())
            for split, to_kfold, to_model in weights:
                self.cells.setdefault(int(split), []).append((float(to_kfold), float(to_model)))
        self.errors: list[tuple[str, str]] = []          # (learner, message) of failed fits
        self.scoring_error: str | None = None          # the scorer's first error
        self.meta = {"run": self.run, "token": self.token, "name": workflow.name,
                     "store": store, "loss": self.loss,
                     "raced": bool(workflow.racing),
                     "started": time.time(), "learners": list(dict.fromkeys(self.learner)),
                     "scoring_error": None,
                     "corrected": self.full_split >= 0 and self.has_folds}
        self.layouts = {name: grid_layout([params[h].hyper
                                           for h in np.flatnonzero(self.learner == name)])
                        for name in self.meta["learners"]}
        self.meta["layouts"] = {name: _layout_meta(layout) for name, layout in self.layouts.items()}
        self.published = 0.0
        self.behind = False                 # blocks folded in, not yet published

    # updates

    def block(self, summary: dict) -> None:
        """Fold in one finished block (a task summary with ``status`` and ``terms``)."""
        status = summary["status"]
        ps, ss = status.params, status.splits
        # a block fitting part of its chunk (a raced stage, an extended study) marks only
        # the cells it fitted
        fitted = (np.ones(self.done[ps, ss].shape, bool) if status.fitted is None
                  else np.asarray(status.fitted, bool))
        new = fitted & ~self.done[ps, ss]          # a retried block is folded in once
        self.done[ps, ss] |= fitted
        self.failed[ps, ss] = np.where(fitted, status.failed, self.failed[ps, ss])
        terms = summary.get("terms")
        if summary.get("terms_error") and self.scoring_error is None:
            # said once (every block would raise it again): the page shows no K-fold from now
            self.scoring_error = self.meta["scoring_error"] = summary["terms_error"]
            log.warning("live page: the K-fold curve is not shown: scoring the fits (loss %s) "
                        "failed: %s", self.loss, self.scoring_error)
        self._fold_in(ps, ss, new, terms)
        rows = self.learner[ps]
        for (i, j), message in np.ndenumerate(status.error):
            if status.failed[i, j] and new[i, j]:      # a retried block: once
                self.errors.append((str(rows[i]), str(message)))
        self.behind = True
        if time.monotonic() - self.published > PUBLISH_SECONDS:
            self.publish()

    def _fold_in(self, ps: slice, ss: slice, new: np.ndarray, terms: dict | None) -> None:
        """Add the newly fitted cells of a block to the running sums (NaN sums: no terms)."""
        shape = new.shape
        oof = np.full(shape, np.nan) if terms is None else np.asarray(terms["oof_sum"], float)
        risk = np.full(shape, np.nan) if terms is None else np.asarray(terms["risk"], float)
        for col, split in enumerate(range(*ss.indices(self.done.shape[1]))):
            fresh = new[:, col]
            if not fresh.any():
                continue
            if split == self.full_split:
                self.full_risk[ps] = np.where(fresh, risk[:, col], self.full_risk[ps])
            for to_kfold, to_model in self.cells.get(split, ()):
                self.kfold_sum[ps] += np.where(fresh, oof[:, col] * to_kfold, 0.0)
                self.fold_model_sum[ps] += np.where(fresh, risk[:, col] * to_model, 0.0)
                self.folds_done[ps] += fresh

    def raced(self, rows: list[dict]) -> None:
        """Racing (:mod:`cvflow.execution.race_runner`) dropped these params (the race's records, each with
        ``param``, ``stage``, ``leader``, ``mean_difference``, ``z``, ``p_value``): their fits
        not done are skipped, not to do, and the page lists who was dropped when."""
        self.dropped[[int(d["param"]) for d in rows]] = True
        self.race = {"stage": [int(d["stage"]) for d in rows],
                     "dropped": [self.labels[int(d["param"])] for d in rows],
                     "learner": [str(self.learner[int(d["param"])]) for d in rows],
                     "leader": [self.labels[int(d["leader"])] for d in rows],
                     "difference": finite([d["mean_difference"] for d in rows]),
                     "z": finite([d["z"] for d in rows]),
                     "p": finite([d["p_value"] for d in rows])}
        self.behind = True

    def catch_up(self) -> None:
        """Publish the blocks folded in since the last publication (the run waits on slow
        fits: what came back in the last burst must show)."""
        if self.behind:
            self.publish()

    def publish(self) -> None:
        try:
            self.client.set_metadata([METADATA, self.run], self.state())
            self.published = time.monotonic()
            self.behind = False
        except Exception as exc:  # noqa: BLE001 - a lost page must never stop a run
            log.warning("live page: could not publish progress: %s", exc)

    # the summary

    def curves(self) -> dict[str, np.ndarray]:
        """K-fold and corrected K-fold per param from the fits done so far (NaN where a fit
        the estimator needs is missing or failed), as :mod:`cvflow.estimators` computes them
        (:func:`cvflow.estimators.split_scores.kfold_scores`,
        :func:`cvflow.estimators.corrected.corrected_scores`), from the running sums."""
        n = len(self.learner)
        out = {"kfold": np.full(n, np.nan), "corrected": np.full(n, np.nan),
               "folds_done": self.folds_done.copy()}
        if not self.has_folds:
            return out
        complete = self.folds_done == self.fold_split.size
        out["kfold"] = np.where(complete, self.kfold_sum, np.nan)
        if self.meta["corrected"]:
            out["corrected"] = out["kfold"] + self.full_risk - self.fold_model_sum
        return out

    def state(self) -> dict:
        """The summary the page shows: small (a few numbers per param), msgpack- and JSON-ready."""
        curves = self.curves()
        learners = {}
        for name in self.meta["learners"]:
            rows = np.flatnonzero(self.learner == name)
            done = self.done[rows].sum(axis=1)
            failed = (self.failed[rows] & self.done[rows]).sum(axis=1)
            learners[name] = {
                "x": list(range(len(rows))), "param": rows.tolist(),
                # the grid value (1-D) or the two values (heatmap) of each param, as the page
                # plots them (cvflow.report.plots.grid.grid_layout)
                "gx": list(self.layouts[name].x.values),
                "gy": list(self.layouts[name].y.values) if self.layouts[name].heatmap
                else [""] * len(rows),
                "label": [self.labels[h] for h in rows],
                "ok": (done - failed).tolist(), "failed": failed.tolist(),
                "pending": np.where(self.dropped[rows], 0, self.done.shape[1] - done).tolist(),
                "skipped": np.where(self.dropped[rows], self.done.shape[1] - done, 0).tolist(),
                "folds_done": curves["folds_done"][rows].tolist(),
                "kfold": _plain(curves["kfold"][rows]),
                "corrected": _plain(curves["corrected"][rows]),
            }
        skipped = int((~self.done[self.dropped]).sum())      # fits racing will not run
        groups = group(m for _, m in self.errors)
        learners_of: dict[str, set] = {}           # a group's learners: those of its messages
        for learner, message in self.errors:
            learners_of.setdefault(normalise(message), set()).add(learner)
        failures = {"count": [g["count"] for g in groups.values()],
                    "variants": [g["variants"] for g in groups.values()],
                    "example": list(groups),
                    "learners": [", ".join(sorted(learners_of[normalise(m)])) for m in groups]}
        return {**self.meta, "updated": time.time(), "done": int(self.done.sum()),
                "total": int(self.done.size - skipped), "skipped": skipped,
                "failed": int((self.failed & self.done).sum()),
                "learners": learners, "failures": failures, "racing": self.race}


def _layout_meta(layout) -> dict:
    """How the page draws a learner's K-fold curve: ``kind`` "heatmap", "log", "linear",
    "categorical" or "index", the hyperparameter names, the factors of categorical axes, and
    whether the values come in increasing order (a line joins the points only then)."""
    if layout.heatmap:
        return {"kind": "heatmap", "x_key": layout.x.key, "y_key": layout.y.key,
                "x_factors": list(layout.x.factors), "y_factors": list(layout.y.factors)}
    values = layout.x.values
    ordered = layout.x.kind not in ("log", "linear") or all(
        a <= b for a, b in zip(values, values[1:]))
    return {"kind": layout.x.kind, "x_key": layout.x.key, "x_factors": list(layout.x.factors),
            "ordered": ordered}


# the monitors of the runs started in this process, by their page's URL: a suite's page finds
# its data sets' client there (cvflow.report.suite_live)
STARTED: "weakref.WeakValueDictionary[str, Monitor]" = weakref.WeakValueDictionary()


def page_address(client) -> tuple[str, str | None] | None:
    """(``<dashboard>/cvflow``, the server's secret or None) of the client's scheduler, when
    it serves the live page; else None."""
    link = getattr(client, "dashboard_link", None)
    if not link:
        return None
    address, _, query = link.partition("?")
    token = dict(urllib.parse.parse_qsl(query)).get("token")      # the server's secret, if any
    url = address.rsplit("/", 1)[0] + "/cvflow"
    if not _serves_page(url + (f"?token={token}" if token else "")):
        return None
    return url, token


def start(client, workflow, params, design, data, store) -> Monitor | None:
    """A :class:`Monitor` for this run (``params`` and ``design`` in the store's order, ``data``
    the study's) when the client's scheduler serves the live page, else None (no dashboard,
    or a scheduler without the ``cvflow.report.live`` route module)."""
    served = page_address(client)
    if served is None:
        return None
    monitor = Monitor(client, workflow, params, design, data, store=str(store),
                      url=served[0], token=served[1])
    monitor.publish()
    STARTED[monitor.url] = monitor
    return monitor


def _serves_page(url: str) -> bool:
    """Whether the dashboard answers ``HEAD url`` (the page's route is installed)."""
    import urllib.request

    try:
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status == 200
    except Exception as exc:  # noqa: BLE001 - no such route, unreachable: no live page
        log.info("live page: %s not served (%s)", url, exc)
        return False


# --- the scheduler side: the page and its data -------------------------------------------------

def columns(state: dict, source: str) -> dict:
    """The columns of data source ``source`` (``progress``, ``failures``, or ``learner-<i>``)."""
    if source == "failures":
        return state["failures"]
    if source == "racing":
        return state.get("racing") or {k: [] for k in RACE_COLUMNS}
    if source == "progress":
        names = list(state["learners"])
        rows = [state["learners"][n] for n in names]
        best = [_best(r) for r in rows]
        # the fits racing skipped leave the total (they will not be run)
        return {"learner": names, "done": [sum(r["ok"]) + sum(r["failed"]) for r in rows],
                "total": [sum(r["ok"]) + sum(r["failed"]) + sum(r["pending"]) for r in rows],
                "skipped": [sum(r.get("skipped", ())) for r in rows],
                "failed": [sum(r["failed"]) for r in rows],
                "best": [b[0] for b in best], "best_kfold": [b[1] for b in best]}
    index = int(source.split("-", 1)[1])
    return state["learners"][list(state["learners"])[index]]


def _best(rows: dict) -> tuple[str, float | None]:
    """The learner's best K-fold so far (label, value); ties to the first in grid order."""
    values = [(v, i) for i, v in enumerate(rows["kfold"]) if v is not None]
    if not values:
        return "", None
    value, i = min(values)
    return rows["label"][i], value


def page_html(state: dict, *, base: str) -> str:
    """The page for one run: BokehJS inlined, every plot an AjaxDataSource polling ``base``."""
    from bokeh.embed import file_html
    from bokeh.layouts import column, row
    from bokeh.models import (AjaxDataSource, CustomJS, DataTable, Div, FixedTicker,
                              HoverTool, NumberFormatter, TableColumn)
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    def source(name: str, data: dict):
        # JSON has no NaN: missing estimates travel as null and are NaN again here, so lines
        # break at them instead of dropping to 0
        data = {k: [np.nan if v is None else v for v in values] for k, values in data.items()}
        return AjaxDataSource(data_url=f"{base}/data/{state['run']}/{name}.json"
                                       f"?token={state.get('token', '')}",
                              polling_interval=POLL_MS, mode="replace", method="GET",
                              data=data, name=f"cvflow-{name}", adapter=NULL_TO_NAN)

    NULL_TO_NAN = CustomJS(code="""
        const data = cb_data.response;
        for (const key in data)
            data[key] = data[key].map((v) => v === null ? NaN : v);
        return data;""")
    # DESIGN CHOICE: data never becomes markup. A Div's text is HTML to BokehJS, so every
    # Div is a markupsafe template whose values are escaped; a DataTable column title is HTML
    # too (SlickGrid), so one made from data is escaped; table cells (StringFormatter), tooltips
    # and plot text are set as text by BokehJS, and the JSON the page polls only replaces data
    # source columns. Hostile names, paths, grid values and messages: tests/test_page_escaping.py
    html_title = f"cvflow: {state['name']}"           # file_html escapes the <title>
    header = Div(text=str(Markup("<h2 style='margin:4px 0'>{}</h2><p style='margin:0'>store "
                             "<code>{}</code>, loss <b>{}</b>; updates every second as blocks "
                             "land</p>").format(html_title, state["store"], state["loss"])
                     + (Markup("<p style='margin:0;color:#d62728'>no K-fold: scoring the fits "
                               "failed: <code>{}</code></p>").format(state["scoring_error"])
                        if state.get("scoring_error") else "")),
                 sizing_mode="stretch_width")
    progress = source("progress", columns(state, "progress"))
    summary = DataTable(source=progress, height=28 + 25 * len(state["learners"]), width=900,
                        index_position=None, name="progress", columns=[
                            TableColumn(field="learner", title="learner"),
                            TableColumn(field="done", title="fits done"),
                            TableColumn(field="total", title="of"),
                            TableColumn(field="skipped", title="skipped by racing"),
                            TableColumn(field="failed", title="failed"),
                            TableColumn(field="best", title="best K-fold so far at"),
                            TableColumn(field="best_kfold", title=str(escape(f"K-fold ({state['loss']})")),
                                        formatter=NumberFormatter(format="0.[0000]"))])
    rows = []
    for i, (name, data) in enumerate(state["learners"].items()):
        src = source(f"learner-{i}", data)
        n = len(data["x"])
        ticks = sorted(set(np.linspace(0, n - 1, min(n, 12)).round().astype(int).tolist()))
        overrides = {t: data["label"][t] for t in ticks}
        fits = figure(height=260, width=620, title=f"{name}: fits done / failed along the grid",
                      name=f"fits-{name}", toolbar_location=None, x_range=(-0.6, n - 0.4))
        fits.vbar_stack(["ok", "failed", "pending", "skipped"], x="x", width=0.8, source=src,
                        color=["#2ca02c", "#d62728", "#dddddd", "#9ecae1"],
                        legend_label=["done", "failed", "to do", "skipped by racing"])
        fits.yaxis.axis_label = "fits (splits)"
        layout = state.get("layouts", {}).get(name) or {"kind": "index"}
        title = f"{name}: K-fold {state['loss']} from the fits done so far"
        curve = _kfold_figure(name, title, layout, src, fits.x_range, state["corrected"])
        curve.add_tools(HoverTool(tooltips=[("param", "@label"), ("K-fold", "@kfold"),
                                            ("corrected", "@corrected"),
                                            ("folds done", "@folds_done")]))
        along_index = [fits] + ([curve] if layout["kind"] == "index" else [])
        for fig in along_index:
            fig.xaxis.ticker = FixedTicker(ticks=ticks)
            fig.xaxis.major_label_overrides = overrides
            fig.xaxis.major_label_orientation = 0.6 if max(map(len, overrides.values())) > 6 else 0
        for fig in (fits, curve):
            if fig.legend:
                legend = fig.legend[0]
                legend.orientation, legend.location = "horizontal", "top_left"
                fig.add_layout(legend, "above")         # never over the bars or the curve
        rows.append(row(fits, curve))
    failures = DataTable(
        source=source("failures", state["failures"]), width=1240, height=200,
        index_position=None, name="failures", columns=[
            TableColumn(field="count", title="fits", width=60),
            TableColumn(field="learners", title="learner", width=120),
            TableColumn(field="variants", title="wordings", width=70),
            TableColumn(field="example", title="failure (one example message)", width=990)])
    tables = [summary, failures]
    race = []
    if state.get("raced"):
        racing = DataTable(
            source=source("racing", columns(state, "racing")), width=1240, height=160,
            index_position=None, name="racing", columns=[
                TableColumn(field="stage", title="stage", width=50),
                TableColumn(field="learner", title="learner", width=120),
                TableColumn(field="dropped", title="dropped", width=330),
                TableColumn(field="leader", title="beaten by", width=330),
                TableColumn(field="difference", title="loss difference", width=140,
                            formatter=NumberFormatter(format="0.[0000]")),
                TableColumn(field="z", title="z", width=80,
                            formatter=NumberFormatter(format="0.00")),
                TableColumn(field="p", title="p", width=100,
                            formatter=NumberFormatter(format="0.[00]e+0"))])
        tables.append(racing)
        race = [Div(text="<h3 style='margin:4px 0'>Racing: who was dropped when (their fits "
                         "not run are skipped, not to do)</h3>"), racing]
    for table in tables:
        # a DataTable redraws when its view's rows change; new values in as many rows do not
        # change them, so say so on every poll
        table.source.js_on_change("data", CustomJS(args={"view": table.view},
                                                   code="view.change.emit()"))
    layout = column(header, summary, *rows, *race,
                    Div(text="<h3 style='margin:4px 0'>Failed fits, grouped by message "
                             "(numbers masked)</h3>"), failures)
    return file_html(layout, INLINE, title=html_title)


def _kfold_figure(name: str, title: str, layout: dict, src, index_range, corrected: bool):
    """A learner's K-fold so far: a heatmap over its two hyperparameters (grey: not yet
    computed), or the curves against its grid value (log, linear or categorical axis; joined by
    a line when the grid's values increase) or, otherwise, against the param's position."""
    from bokeh.models import FactorRange, LinearColorMapper
    from bokeh.palettes import Viridis256
    from bokeh.plotting import figure

    kind = layout["kind"]
    common = dict(height=260, width=620, name=f"kfold-{name}", toolbar_location=None, title=title)
    if kind == "heatmap":
        fig = figure(x_range=FactorRange(*layout["x_factors"]),
                     y_range=FactorRange(*layout["y_factors"]), **common)
        # low/high unset: BokehJS scales the colours to the K-fold values landed so far
        mapper = LinearColorMapper(palette=list(reversed(Viridis256)), nan_color="#dddddd")
        fig.rect("gx", "gy", width=1, height=1, source=src, line_color="#ffffff",
                 fill_color={"field": "kfold", "transform": mapper})
        fig.xaxis.axis_label, fig.yaxis.axis_label = layout["x_key"], layout["y_key"]
        fig.grid.grid_line_color = None
        return fig
    if kind == "categorical":
        fig = figure(x_range=FactorRange(*layout["x_factors"]), **common)
    elif kind in ("log", "linear"):
        fig = figure(x_axis_type=kind, **common)
    else:
        fig = figure(x_range=index_range, **common)
    x = "x" if kind == "index" else "gx"
    if kind != "index":
        fig.xaxis.axis_label = layout["x_key"]
    join = layout.get("ordered", True)
    series = [("kfold", "K-fold", "#1f77b4", "circle", "solid")]
    if corrected:
        series.append(("corrected", "corrected K-fold", "#d62728", "square", "dashed"))
    for column, label, color, marker, dash in series:
        if join:
            fig.line(x, column, source=src, color=color, line_dash=dash, legend_label=label)
        fig.scatter(x, column, source=src, color=color, size=6, marker=marker, legend_label=label)
    return fig


@functools.cache
def handler_base() -> Any:
    """The pages' tornado handler base: :meth:`owned` answers 403 to a request without the
    secret of the page asked (also the suite's page's, :mod:`cvflow.report.suite_live`)."""
    from tornado import web

    class _Handler(web.RequestHandler):
        key = METADATA            # the scheduler metadata holding the pages' states

        def initialize(self, dask_server=None):
            self.server = dask_server

        def runs(self) -> dict:
            return self.server.get_metadata(keys=[self.key], default=None) or {}

        def state(self, run: str | None) -> dict | None:
            runs = self.runs()
            if run:
                return runs.get(run)
            return max(runs.values(), key=lambda s: s["started"]) if runs else None

        def owned(self, run: str | None) -> dict:
            """The run's state when the request carries its secret; else 403, the same for a
            run that does not exist (a guess learns nothing)."""
            state = self.state(run)
            given = self.get_argument("token", "")
            if state is None or not hmac.compare_digest(str(state.get("token", "")), given):
                raise web.HTTPError(403, "this page needs the URL cvflow printed (its token)")
            return state

    return _Handler


def _routes() -> list:
    """The page's tornado handlers, as distributed's scheduler reads them (``routes``)."""
    _Handler: Any = handler_base()

    class DataHandler(_Handler):
        """``cvflow/data/<run>/<source>.json?token=<secret>``: one AjaxDataSource's columns."""

        def get(self, run: str, source: str):
            state = self.owned(run)
            self.set_header("Content-Type", "application/json")
            self.set_header("X-Content-Type-Options", "nosniff")
            self.set_header("Cache-Control", "no-store")
            self.write(json.dumps(columns(state, source)))

        post = get

    class PageHandler(_Handler):
        """``cvflow?run=<id>&token=<secret>``: the page (without ``run``, the latest run on
        this scheduler; 403 without the run's secret)."""

        def head(self):
            """200 when this route is installed (see :func:`start`)."""

        def get(self):
            self.set_header("Cache-Control", "no-store")
            state = self.owned(self.get_argument("run", None))
            self.write(page_html(state, base=self.request.path.rstrip("/")))

    return [
        (r"cvflow/?", PageHandler, {}),
        (r"cvflow/data/([\w.-]+)/([\w-]+)\.json", DataHandler, {}),
    ]


def __getattr__(name: str):
    # DESIGN CHOICE: `routes`, what a scheduler reads from each module listed in
    # distributed.scheduler.http.routes, is built on first access: tornado (~25 ms) is the
    # scheduler's web framework, and a run in the process imports this module without one.
    if name == "routes":
        globals()["routes"] = value = _routes()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
