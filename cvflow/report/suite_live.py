"""The live page of a suite: ``<dashboard>/cvflow/suite?run=<suite>&token=<secret>``.

One page for the whole suite (issue 42 item 2): every data set with its state (waiting,
running, done, failed, stopped), its fits done / total and failed, a link to its own live page
(:mod:`cvflow.report.live`), the suite's total, and, as data sets finish, the comparison of the
learners across the finished ones (:func:`cvflow.report.suite.answer_lines`: each finished
data set's learners' numbers are read once from its cube, about 0.1 s a data set).

It is served as the data sets' pages are: the client (:class:`SuitePage`, fed every data set's
progress events by :mod:`cvflow.execution.suite_run`) publishes a small state to the scheduler
with ``Client.set_metadata``; the scheduler's HTTP server answers the page from it (this
module's ``routes``, listed by :func:`cvflow.report.live.enable_routes`), only to a request
carrying the secret of the URL printed (the check of a data set's page,
:func:`cvflow.report.live.handler_base`; on a cluster cvflow started, the dashboard's own
secret). The page is plain HTML, every string escaped, reloaded
every few seconds while the suite runs; ``cvflow/suite/data/<suite>.json`` has its state.
"""
from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from typing import Any

from markupsafe import Markup

from . import live

log = logging.getLogger(__name__)

METADATA = "cvflow-suite"
REFRESH_SECONDS = 2
# seconds the suite's end waits for the comparison of its last data sets
ANSWER_SECONDS = 60.0
ENDED = ("done", "failed", "stopped")


class SuitePage:
    """The client's view of a running suite, published for its page. ``totals``: data set ->
    its fits, in the workflow's order; ``store``: the suite's store."""

    def __init__(self, name: str, totals: dict[str, int], store: str):
        self.run = live.run_id(name)
        self.name, self.store = name, str(store)
        self.rows = {label: {"name": label, "state": "waiting", "done": 0, "total": int(total),
                             "failed": 0, "live": None} for label, total in totals.items()}
        self.stored: dict[str, int] = {}       # data set -> fits done before this run
        self.lock = threading.Lock()
        self.client = None
        self.url: str | None = None
        self.token: str | None = None
        self.started = time.time()
        self.published = 0.0
        self.answer: dict[str, Any] = {"of": [], "lines": None, "error": None}
        self.numbers: dict[str, tuple] = {}    # data set -> (loss, estimate, learner numbers)
        self.finished: queue.Queue = queue.Queue()
        self.worker: threading.Thread | None = None
        self.ended = False
        self.dropping = False          # the suite ended on a cluster that closes: compare no more

    # events, from the data sets' threads

    def event(self, label: str, event: dict) -> str | None:
        """Data set ``label``'s progress event (:func:`cvflow.execution.run.run`'s); returns the
        page's URL on the event that first serves it (to be said once), else None."""
        with self.lock:
            row = self.rows[label]
            first = None
            if event["event"] == "start":
                self.stored[label] = event["total"] - event["todo"]
                row.update(state="running", total=event["total"], done=self.stored[label],
                           live=event.get("live"))
                first = self._attach(event.get("live"))
            else:
                row["done"] = self.stored.get(label, 0) + event["done"]
                row["total"] = self.stored.get(label, 0) + event["todo"]
                row["failed"] = event.get("failed", row["failed"])
            due = first or event["event"] != "block" or (
                time.monotonic() - self.published > live.PUBLISH_SECONDS)
        if due:
            self.publish()
        return first

    def _attach(self, url: str | None) -> str | None:
        """The first data set with a page: the suite's goes on the same server."""
        monitor = live.STARTED.get(url) if url else None
        if self.client is not None or monitor is None:
            return None
        # on a cluster cvflow started, the server's secret (the page must pass its gate);
        # else one of the suite's own, as a data set's page has
        served = live.page_address(monitor.client)
        if served is None:
            return None
        self.client, self.token = monitor.client, served[1] or secrets.token_urlsafe(24)
        self.url = f"{served[0]}/suite?run={self.run}&token={self.token}"
        return self.url

    def finish(self, label: str, result=None, state: str = "done") -> None:
        """Data set ``label``'s run ended (``result`` its RunResult; ``state`` "failed" or
        "stopped" when it raised); a data set done is compared with the others done."""
        with self.lock:
            row = self.rows[label]
            row["state"] = state
            if result is not None:
                row["done"] = self.stored.get(label, 0) + result.fits_executed
                row["total"] = result.total_fits - result.saved_fits
                row["failed"] = result.failed
            if state == "done" and self.client is not None:
                if self.worker is None:
                    self.worker = threading.Thread(target=self._compare, daemon=True,
                                                   name="cvflow-suite-page")
                    self.worker.start()
                self.finished.put(label)
        self.publish()

    def close(self) -> None:
        """The suite ended: its final state. A scheduler that outlives the suite (one given by
        address) keeps the page: it gets the comparison of every data set done (within
        ``ANSWER_SECONDS``); a cluster the suite started closes now, and the data sets not
        compared yet are not (``cvflow run`` prints the suite's report; its page would vanish
        before it shows): only the comparison under way is waited for."""
        with self.lock:
            self.ended = True
            for row in self.rows.values():
                if row["state"] == "running":
                    row["state"] = "stopped"
        if self.worker is not None:
            # a client of a cluster this process started holds it (Client.cluster)
            self.dropping = getattr(self.client, "cluster", None) is not None
            self.finished.put(None)
            self.worker.join(ANSWER_SECONDS)
        self.publish()

    def _compare(self) -> None:
        """The page's thread: the data sets done since it last looked, each one's learners'
        numbers read from its cube, then the comparison across those done so far."""
        # DESIGN CHOICE: imported here: the report of a suite brings pandas and xarray, which
        # a suite's run needs only once a data set is done
        from . import suite as suite_report

        while True:
            batch = [self.finished.get()]
            while not self.finished.empty():          # those done meanwhile: one comparison
                batch.append(self.finished.get_nowait())
            labels = [label for label in batch if label is not None]
            if self.dropping:
                return
            if labels:
                self._answer(suite_report, labels)
            if None in batch:
                return

    def _answer(self, suite_report, done: list[str]) -> None:
        """The comparison across the data sets compared so far and ``done``, published."""
        label = done[0]
        try:
            for label in done:
                self.numbers[label] = suite_report.dataset_numbers(self.store, label)
            # one estimate across data sets: nested CV only when every one done has it
            estimate = ("nested_cv" if all(n[1] == "nested_cv" for n in self.numbers.values())
                        else "kfold")
            for other, (_, used, _) in list(self.numbers.items()):
                if used != estimate:
                    self.numbers[other] = suite_report.dataset_numbers(
                        self.store, other, estimate=estimate)
            labels = [d for d in self.rows if d in self.numbers]
            lines = suite_report.answer_lines({d: self.numbers[d][2] for d in labels},
                                              {d: self.numbers[d][0] for d in labels}, estimate)
            answer: dict[str, Any] = {
                "of": labels, "lines": lines, "error": None, "estimate": estimate,
                "estimates": {d: dict(zip(self.numbers[d][2],
                                          live.finite([v[0] for v in self.numbers[d][2].values()])))
                              for d in labels}}
        except Exception as exc:  # noqa: BLE001 - the page says it; the suite runs on
            log.warning("suite page: could not compare the data sets done: %s", exc)
            answer = {**self.answer, "error": f"{label}: {exc}"}
        with self.lock:
            self.answer = answer
        self.publish()

    # publication

    def state(self) -> dict:
        """What the page shows (small, msgpack- and JSON-ready)."""
        with self.lock:
            rows = [dict(row) for row in self.rows.values()]
            states = [row["state"] for row in rows]
            return {"run": self.run, "token": self.token, "name": self.name, "store": self.store,
                    "started": self.started, "updated": time.time(), "datasets": rows,
                    "done": sum(r["done"] for r in rows), "total": sum(r["total"] for r in rows),
                    "failed": sum(r["failed"] for r in rows),
                    "counts": {s: states.count(s) for s in ("waiting", "running", *ENDED)},
                    "ended": self.ended, "answer": dict(self.answer)}

    def publish(self) -> None:
        if self.client is None:
            return
        try:
            self.client.set_metadata([METADATA, self.run], self.state())
            self.published = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - a lost page must never stop a suite
            log.warning("suite page: could not publish progress: %s", exc)


# --- the scheduler side ------------------------------------------------------------------------

def page_html(state: dict) -> str:
    """The suite's page: a table of its data sets (each linking to its own live page), the
    total, the comparison across the data sets done so far. Every string is escaped."""
    counts = state["counts"]
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    rows = Markup("").join(
        Markup("<tr data-dataset='{}' data-state='{}'><td>{}</td><td>{}</td><td>{}</td>"
               "<td>{}</td><td>{}</td><td>{}</td></tr>").format(
            r["name"], r["state"], r["name"], r["state"], r["done"], r["total"], r["failed"],
            Markup("<a href='{}'>its live page</a>").format(r["live"])
            if str(r["live"] or "").startswith(("http://", "https://")) else "")
        for r in state["datasets"])
    answer = state["answer"]
    if answer.get("lines"):
        compared = Markup("<h3>Across the data sets done ({})</h3><pre id='answer'>{}</pre>").format(
            ", ".join(answer["of"]), "\n".join(answer["lines"]))
    else:
        compared = Markup("<h3>Across data sets</h3><p id='answer'>shown once a data set is "
                          "done</p>")
    if answer.get("error"):
        compared += Markup("<p style='color:#d62728'>comparison failed: <code>{}</code></p>").format(
            answer["error"])
    refresh = "" if state["ended"] else Markup(
        "<meta http-equiv='refresh' content='{}'>").format(REFRESH_SECONDS)
    return str(Markup(
        "<!doctype html><html><head><meta charset='utf-8'>{}<title>cvflow suite: {}</title>"
        "<style>body{{font-family:sans-serif;margin:12px}}td,th{{padding:2px 10px;"
        "text-align:left}}tr.total td{{font-weight:bold;border-top:1px solid #888}}</style>"
        "</head><body><h2>cvflow suite: {}</h2><p>store <code>{}</code>; {} data sets: {}"
        "{}</p><table id='datasets'><tr><th>data set</th><th>state</th><th>fits done</th>"
        "<th>of</th><th>failed (this run)</th><th></th></tr>{}<tr class='total'><td>total</td>"
        "<td></td><td>{}</td><td>{}</td><td>{}</td><td></td></tr></table>{}</body></html>").format(
        refresh, state["name"], state["name"], state["store"], len(state["datasets"]), said,
        "" if state["ended"] else Markup("; reloads every {} s").format(REFRESH_SECONDS),
        rows, state["done"], state["total"], state["failed"], compared))


def public(state: dict) -> dict:
    """The state without its secret (what ``cvflow/suite/data/<suite>.json`` answers)."""
    return {k: v for k, v in state.items() if k != "token"}


def _routes() -> list:
    """The suite page's handlers on the scheduler, built on the data sets' pages' handler
    (:func:`cvflow.report.live.handler_base`: its 403 for a request without the secret)."""

    base: Any = live.handler_base()

    class _Suite(base):
        key = METADATA

    class PageHandler(_Suite):
        """``cvflow/suite?run=<suite>&token=<secret>`` (without ``run``, the latest suite)."""

        def get(self):
            self.set_header("Cache-Control", "no-store")
            self.write(page_html(self.owned(self.get_argument("run", None))))

    class DataHandler(_Suite):
        """``cvflow/suite/data/<suite>.json?token=<secret>``: the page's state."""

        def get(self, run: str):
            state = self.owned(run)
            self.set_header("Content-Type", "application/json")
            self.set_header("X-Content-Type-Options", "nosniff")
            self.set_header("Cache-Control", "no-store")
            self.write(json.dumps(public(state)))

    return [(r"cvflow/suite/?", PageHandler, {}),
            (r"cvflow/suite/data/([\w.-]+)\.json", DataHandler, {})]


def __getattr__(name: str):
    # `routes`, what a scheduler reads from each module of distributed.scheduler.http.routes
    # (cvflow.report.live.enable_routes lists this one), built on first access (tornado)
    if name == "routes":
        globals()["routes"] = value = _routes()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
