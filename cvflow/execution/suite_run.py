"""Running a suite: every data set validated, then each run into its group of one store.

DESIGN CHOICE: each data set runs as the single-data-set run it is (:func:`cvflow.execution.run.run`,
through the one loop), into ``<store>/<data set>``: the same validation, lock, resume and
extension rules per cube, its own recorder, progress and live page, and each cube the one a
one-data-set workflow writes. The suite's clusters are started once
(:func:`cvflow.execution.schedulers.shared`): every data set asking the same route (threads,
local, SLURM, an address) gets the client the first one started. The data sets overlap on it
(issue 42 item 2): each runs in a thread of its own, and the next one starts as soon as the
newest one's tail begins (its loop has no block left waiting for a worker,
:data:`cvflow.execution.loop.TAIL`), so its blocks take the workers the tail leaves idle; the
scheduler runs the tasks first come first served (Dask gives tasks submitted more than its
``fifo-timeout``, 100 ms, earlier precedence; the threaded pool is a queue), so the earlier
data set's blocks still go first. The biggest data sets start
first (fits x cells of X), so the small ones fill the big one's tail rather than the reverse.
At most ``MAX_RUNNING`` data sets run at once.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import time

import numpy as np

from .. import config
from ..errors import InputError, RunInterrupted
from ..fitting.trial import check_learners
from ..terminal import visible
from .progress import Progress, _in_notebook, _tqdm, summary_lines
from ..store import suite as suite_store
from ..workflow.spec import Workflow
from ..workflow.suite import Suite
from . import interrupts
from .loop import TAIL, WAKE_SECONDS
from .preflight import check_cluster
from .run import RunResult, interrupted, run
from .jobqueue import import_jobqueue
from .schedulers import shared

log = logging.getLogger(__name__)

# data sets running at once: a tail, and the data sets started on it (small ones are at their
# tail at once); each holds its data at the scheduler, a lock, a thread
MAX_RUNNING = 4
# seconds the suite waits for its running data sets to stop (their tasks cancelled, what
# finished written, their locks released) after one failed or a signal came
STOP_SECONDS = 120.0


def run_suite(suite: Suite, *, store: str | os.PathLike | None = None, **options
              ) -> dict[str, RunResult]:
    """Run every data set of ``suite`` into one store (``<suite name>.zarr`` by default).

    Every data set is loaded, its design built and each learner trial-fitted on it before
    anything runs (an InputError names the data set); then the suite's root group is created
    and each data set runs into ``<store>/<data set>`` with ``options`` (those of
    :func:`cvflow.execution.run.run`). Returns data set -> RunResult, in the file's order.
    """
    where = {label: f"{suite.path}: data[{i}] ({label})" for i, label in enumerate(suite.datasets)}
    return run_workflows(suite.workflows, name=suite.name, where=where,
                         store=store if store is not None else f"{suite.name}.zarr", **options)


def run_workflows(workflows: dict[str, Workflow], *, name: str, where: dict[str, str],
                  store: str | os.PathLike, **options) -> dict[str, RunResult]:
    """Validate every workflow on its data (build, trial fits; an InputError is prefixed with
    ``where[label]``), then create the suite's root group and run each into its member, the
    data sets overlapping (see the module's docstring). Returns data set -> RunResult in
    ``workflows``' order. A data set that fails stops the others (their fits done are kept) and
    its error is raised; a signal stops them all (RunInterrupted, the suite's fits kept). A
    ``progress`` callable gets every data set's events (:func:`run`'s), each with its
    ``"dataset"``, from the data sets' threads; the start event of the first data set served a
    live page has ``"suite"``, the suite's page (:mod:`cvflow.report.suite_live`) on that
    server."""
    totals: dict[str, int] = {}
    cost: dict[str, float] = {}
    for label, wf in workflows.items():
        try:
            built = wf.build()
            totals[label] = len(built.params) * built.design.n_splits
            cost[label] = totals[label] * float(np.size(built.data.fit_X))
            if wf.execution.get("trial_fits", True):
                check_learners(wf, built.data, str(wf.path))
        except InputError as exc:
            text = str(exc)
            rest = text[len(str(wf.path)) + 2:] if text.startswith(f"{wf.path}: ") else text
            raise InputError(f"{where[label]}: {rest}") from None
    root = suite_store.create(store, name, list(workflows), fits=totals)
    progress = options.pop("progress", None)
    if progress is None or progress is True or isinstance(progress, Progress):
        progress = SuiteProgress(totals, progress if isinstance(progress, Progress) else None)
    order = sorted(workflows, key=lambda label: -cost[label])       # stable: ties in file order
    suite = _Overlap(workflows, root, progress, options, page=(name, totals))
    if "slurm" in _kinds(workflows, options):
        with contextlib.suppress(ImportError):       # the run that needs it says so
            import_jobqueue()        # here, in the main thread: see import_jobqueue
    with interrupts.stoppable(), interrupts.threads_stoppable() as stop, shared():
        try:
            suite.run(order, stop)
        finally:
            if suite.page is not None:
                suite.page.close()    # its last state, while the suite's clusters still serve it
    if isinstance(progress, SuiteProgress):
        progress.finish_suite()
    return {label: suite.results[label] for label in workflows}


def _kinds(workflows: dict[str, Workflow], options: dict) -> set[str | None]:
    """The kinds of cluster profile the data sets' runs will connect to (as each run decides:
    :func:`cvflow.execution.preflight.check_cluster`); a route a run refuses is its to say."""
    kinds: set[str | None] = set()
    for wf in workflows.values():
        with contextlib.suppress(InputError):
            route = check_cluster(wf, cluster=options.get("cluster"), workers=options.get("workers"),
                                  cluster_options=options.get("cluster_options"),
                                  client=options.get("client"))
            kinds.add(route.kind if route is not None else None)
    return kinds


class _Overlap:
    """The suite's data sets, each :func:`run` in a thread of its own, the next started when
    the newest one's tail begins."""

    def __init__(self, workflows, root, progress, options, page: tuple[str, dict]):
        self.workflows, self.root, self.progress, self.options = workflows, root, progress, options
        self.named = page           # (the suite's name, data set -> its fits) for its page
        self.page = None            # the suite's live page (cvflow.report.suite_live), once served
        self.page_lock = threading.Lock()
        self.results: dict[str, RunResult] = {}
        self.errors: dict[str, BaseException] = {}
        self.tails: dict[str, threading.Event] = {}
        self.changed = threading.Event()      # a tail began or a run ended

    def _notify(self, label: str):
        p = self.progress
        if isinstance(p, SuiteProgress):
            tell = p.of(label)
        elif callable(p):
            tell = lambda event: p({**event, "dataset": label})      # noqa: E731
        else:
            tell = p
        def both(event: dict) -> None:
            # the suite page's URL rides on the event that first serves it: said once
            url = self._page_event(label, event)
            if callable(tell):
                tell({**event, "suite": url} if url else event)
        return both

    def _page_event(self, label: str, event: dict) -> str | None:
        """Tell the suite's page a data set's event; the page is made on the first data set
        served a live page (its module named by config ``cvflow.execution.suite-page``, as the
        runs' page is: the runner does not import the reports), told the data sets already
        finished. Its URL, on the event that first serves it."""
        if self.page is None and not (event["event"] == "start" and event.get("live")):
            return None                        # a block event before any page: nothing to do
        with self.page_lock:
            if self.page is None:
                name = config.get("cvflow.execution.suite-page")
                if not name:
                    return None
                suite, totals = self.named
                page = importlib.import_module(name).SuitePage(suite, totals, self.root)
                url = page.event(label, event)
                if url is None:                  # not served: no page
                    return None
                for finished, result in list(self.results.items()):
                    page.finish(finished, result)
                self.page = page
                return url
        return self.page.event(label, event)

    def _body(self, label: str) -> None:
        def tail() -> None:
            self.tails[label].set()
            self.changed.set()

        TAIL.set(tail)
        try:
            result = run(self.workflows[label], store=suite_store.member(self.root, label),
                         progress=self._notify(label), **self.options)
            self.results[label] = result
            if self.page is not None:
                self.page.finish(label, result)
            if isinstance(self.progress, SuiteProgress):
                self.progress.finish_set(label, result)
        except BaseException as exc:  # noqa: BLE001 - raised again in the suite's thread
            self.errors[label] = exc
            if self.page is not None:
                self.page.finish(label, state="stopped" if isinstance(
                    exc, (KeyboardInterrupt, RunInterrupted)) else "failed")
        finally:
            tail()

    def run(self, order: list[str], stop: threading.Event) -> None:
        threads: dict[str, threading.Thread] = {}
        pending = list(order)
        newest = None
        try:
            while pending or any(t.is_alive() for t in threads.values()):
                if self.errors:
                    break
                running = sum(t.is_alive() for t in threads.values())
                if pending and running < MAX_RUNNING and (
                        newest is None or self.tails[newest].is_set()):
                    newest = pending.pop(0)
                    self.tails[newest] = threading.Event()
                    threads[newest] = threading.Thread(
                        target=self._body, args=(newest,), name=f"cvflow-suite-{newest}",
                        daemon=True)
                    threads[newest].start()
                    continue
                self.changed.wait(WAKE_SECONDS)
                self.changed.clear()
                interrupts.check()
        except RunInterrupted:
            self._stop(threads, stop)
            raise
        except KeyboardInterrupt:
            self._stop(threads, stop)
            raise self._interrupted() from None
        except BaseException:
            self._stop(threads, stop)
            raise
        if self.errors:
            self._stop(threads, stop)
            raise self._first_error()

    def _first_error(self) -> BaseException:
        """The error of a data set that failed (not one stopped because another failed)."""
        real = [e for e in self.errors.values() if not isinstance(e, KeyboardInterrupt)]
        return real[0] if real else self._interrupted()

    def _interrupted(self) -> RunInterrupted:
        """What the suite kept: the fits done in each cube, summed."""
        kept = total = 0
        for label in self.workflows:
            got = interrupted(suite_store.member(self.root, label))
            kept, total = kept + (got.kept or 0), total + (got.total or 0)
        return RunInterrupted(os.fspath(self.root), kept, total)

    def _stop(self, threads: dict[str, threading.Thread], stop: threading.Event) -> None:
        """Stop the running data sets (their loops raise at their next wake-up) and wait for
        them, within ``STOP_SECONDS``."""
        stop.set()
        deadline = time.monotonic() + STOP_SECONDS
        with interrupts.deferred():
            for label, thread in threads.items():
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    log.warning("data set %s did not stop within %g s", label, STOP_SECONDS)
        if isinstance(self.progress, SuiteProgress):
            self.progress.close_bar()


class SuiteProgress(Progress):
    """A suite's progress: one bar over the suite's fits, a line as each data set starts (its
    place, its execution, dashboard and live page, the suite's fits done so far) and ends
    (its summary), and the suite's total. Data sets overlap: events come from their threads.
    ``totals``: data set -> its fits; ``like``: the Progress whose stream and summary to use."""

    def __init__(self, totals: dict[str, int], like: Progress | None = None):
        super().__init__(like.stream if like else None, summary=like.summary if like else True)
        self.totals = totals
        self.stored: dict[str, int] = {}       # data set -> fits done before this run
        self.ran: dict[str, int] = {}          # data set -> fits this run did
        self.todo: dict[str, int] = {}         # data set -> fits this run is to do
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.started = 0
        self.said: dict[str, str] = {}         # the execution and dashboard lines said last

    def of(self, label: str):
        """The event callback of data set ``label``'s run."""
        return lambda event: self.event(label, event)

    def _suite(self) -> str:
        done = sum(self.stored.values()) + sum(self.ran.values())
        return f"suite: {done} of {sum(self.totals.values())} fits done"

    def event(self, label: str, event: dict) -> None:
        with self.lock:
            if event["event"] == "start":
                self._start(label, event)
                return
            self.ran[label], self.todo[label] = event["done"], event["todo"]
            if event["event"] == "racing":
                self.line(f"{label}: racing: {event['dropped']} of {event['params']} params "
                          f"dropped, {event.get('skipped', 0)} fits skipped")
            self._draw(force=event["event"] == "racing")

    def _start(self, label: str, event: dict) -> None:
        self.stored[label] = event["total"] - event["todo"]
        self.todo[label], self.ran[label] = event["todo"], 0
        self.started += 1
        if event.get("suite"):            # the suite's live page (its first data set's server)
            self.line(visible(f"suite page: {event['suite']}"))
        place = list(self.totals).index(label) + 1
        self.line(visible(f"data set {place} of {len(self.totals)}: {label}; {self._suite()}"))
        for key, name in (("execution", "execution"), ("dashboard", "dashboard"),
                          ("live", "live study page")):
            # the suite's one dashboard (its one route) is said once, each live page
            if event.get(key) and (event["todo"] or key != "execution") and (
                    key == "live" or self.said.get(key) != event[key]):
                self.said[key] = event[key]
                self.line(visible(f"  {label}: {name}: {event[key]}"))
        self.line(visible(f"  {label}: {event['todo']} of {event['total']} fits to do"))
        tqdm = _tqdm() if (self.tty or _in_notebook()) else None
        if self.bar is None and tqdm is not None and self._left():
            self.bar = tqdm(total=self._todo(), initial=sum(self.ran.values()), unit="fit",
                            desc="suite", file=self.stream, leave=True, dynamic_ncols=True)

    def _todo(self) -> int:
        """The fits this run of the suite is to do: the started data sets' and the others' all."""
        return sum(self.todo.values()) + sum(t for k, t in self.totals.items()
                                             if k not in self.todo)

    def _left(self) -> int:
        return self._todo() - sum(self.ran.values())

    def _draw(self, force: bool = False) -> None:
        done, todo = sum(self.ran.values()), self._todo()
        if self.bar is not None:
            self.bar.total = todo
        self.block(done, todo, time.perf_counter() - self.t0, force=force)

    def finish_set(self, label: str, result: RunResult) -> None:
        """Data set ``label``'s run ended: its summary (unless the caller prints its own)."""
        with self.lock:
            self.ran[label] = self.todo[label] = result.fits_executed
            self.stored[label] = result.total_fits - result.fits_executed
            if self.summary:
                for line in summary_lines(result):
                    self.line(f"{label}: {line}")

    def close_bar(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def finish_suite(self) -> None:
        """Every data set ran: the suite's total."""
        self.close_bar()
        finished = len(self.ran) == len(self.totals)
        done = sum(self.stored.values()) + sum(self.ran.values())
        self._print(f"suite: {done} of {sum(self.totals.values())} fits done"
                    + (" (every data set run)" if finished else ""))
