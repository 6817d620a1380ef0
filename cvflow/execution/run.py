"""Running a study: the entry point (:func:`run`).

The client takes the store's run lock, plans the run (:mod:`cvflow.execution.run_plan`: the store created
or checked, the blocks still to fit), picks a Dask scheduler (:mod:`cvflow.execution.schedulers`), and hands
the blocks to the one loop (:mod:`cvflow.execution.loop`), which submits them as tasks
(:mod:`cvflow.execution.tasks`: fit a block, write its chunk of ``pred``, return a small record) and
records what comes back: the client writes each block's status (failed, error, fit_seconds,
then ``done``) in batches (:class:`_Recorder`). A fit that raises is recorded, not raised; a
fit that kills its process or outlives ``execution.fit_timeout`` is recorded failed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
import threading

import numpy as np

from ..fitting.scoring import Scoring
from ..fitting.trial import check_learners, scorer_probe, wants_keys
from .. import config
from ..errors import DiskFullError, InputError, RunInterrupted
from . import interrupts
from ..store.location import exists
from . import inflight
from ..store.memory import IN_MEMORY, MemoryCube
from .schedulers import choose, connect, processes_pay_above, quiet_port
from .run_plan import new_layout, pending_blocks, prepare_store, seconds_per_fit
from ..workflow.spec import Workflow, load_workflow
from ..fitting.block import only_paths
# the store's lock and attributes: imported where a store is run (issue 41 item 2: _run, on)
from .loop import Block, Loop, check_on_workers, time_on_workers
from .preflight import check_cluster, check_run
from .progress import Progress, reporter
from .sizing import ESTIMATE_ERROR, gil_share, one_blas_thread, thread_bound_share
from .tasks import TaskContext

log = logging.getLogger(__name__)

# the client writes finished blocks' status (done, failed, ...) in batches: at least this many
# seconds apart, and at least STATUS_FLUSH_FACTOR times the last write's own duration apart
STATUS_FLUSH_SECONDS = 0.25
STATUS_FLUSH_FACTOR = 20


@dataclass
class RunResult:
    """What a run did: counts, timings and where the cube is."""

    store: str              # a local path or a URL (cvflow.store.location)
    total_fits: int
    fits_executed: int
    failed: int
    tasks: int
    wall_seconds: float
    fit_seconds: float
    distinct_pairs: int
    roles_requested: int = 0
    dashboard: str | None = None
    live: str | None = None          # the live study page (cvflow.report.live), when served
    chunks: tuple[int, int] = (0, 0)
    errors: dict = field(default_factory=dict)
    execution: str = ""                 # where the fits ran and why (cvflow.execution.schedulers.choose)
    saved_fits: int = 0                 # fits racing did not run (cvflow.execution.race_runner)
    dropped_params: int = 0             # params racing dropped
    raced_params: int = 0               # params that started the race (0: not raced)
    cube: MemoryCube | None = None      # the cube of a run without a store (in_memory)

    @property
    def fits_per_distinct(self) -> float:
        """Fits executed / distinct (param, training set) pairs this run had to fit."""
        return self.fits_executed / self.distinct_pairs if self.distinct_pairs else float("nan")


class _Recorder:
    """The client's side of finished blocks: their status written to the cube in batches
    (``status``: the store's :class:`cvflow.store.writes.StatusWriter`, or the
    :class:`cvflow.store.memory.MemoryCube` itself), their counts added to the run's result, a
    progress event each (and the live page's update, ``monitor``)."""

    def __init__(self, status, result: RunResult,
                 notify: Callable[[dict], None], n_todo: int, monitor=None):
        self.status = status
        self.result, self.notify, self.n_todo, self.monitor = result, notify, n_todo, monitor
        self.pending: list = []
        self.t0 = self.flushed = time.perf_counter()
        self.gap = STATUS_FLUSH_SECONDS
        self.skipped = 0                # fits racing dropped from the run (cvflow.execution.race_runner)
        self.said: set[str] = set()     # the scorers' messages logged so far (once each)

    def block(self, summary: dict) -> None:
        """A block's summary record (:func:`run_block`) is back."""
        # DESIGN CHOICE: tasks write only `pred`; the finished blocks' status (failed, error,
        # fit_seconds, then done) is written here in batches, spaced so that writing it costs
        # the client < 5% of its time, and whatever finished is recorded even if a later task
        # raises (the caller flushes in a `finally`).
        if self.monitor:
            self.monitor.block(summary)
        self.pending.append(summary.pop("status"))
        if time.perf_counter() - self.flushed > self.gap:
            t_write = time.perf_counter()
            self.flush()
            self.gap = max(STATUS_FLUSH_SECONDS, STATUS_FLUSH_FACTOR * (self.flushed - t_write))
        r = self.result
        r.tasks += 1
        r.fits_executed += summary["fits"]
        r.failed += summary["failed"]
        r.fit_seconds += summary["seconds"]
        for message in summary["errors"]:
            r.errors[message] = r.errors.get(message, 0) + 1
        for note in summary.get("notes", ()):
            if note not in self.said:          # a scorer's failure: its scores are NaN
                self.said.add(note)
                log.warning("%s (its scores are NaN; the fit is kept)" if note.startswith("scorer")
                            else "%s", note)
        self.notify({"event": "block", "done": r.fits_executed, "todo": self.n_todo - self.skipped,
                     "skipped": self.skipped, "failed": r.failed,
                     "elapsed": time.perf_counter() - self.t0})

    def raced(self, dropped: list[dict], params: int, skipped: int) -> None:
        """A look of the race: the ``dropped`` params (the race's records, :mod:`cvflow.execution.race_runner`)
        of ``params`` are out, and ``skipped`` fits this run was to do will not be run. The
        progress total shrinks."""
        # DESIGN CHOICE: the fits of dropped params leave the "to do" count (the bar reaches
        # its end, the ETA is of the fits that will run) and are shown beside it as skipped
        self.skipped = skipped
        if self.monitor:
            self.monitor.raced(dropped)
        r = self.result
        self.notify({"event": "racing", "dropped": len(dropped), "params": params,
                     "done": r.fits_executed, "todo": self.n_todo - skipped,
                     "skipped": skipped, "elapsed": time.perf_counter() - self.t0})

    def idle(self) -> None:
        """Nothing came back for a while: write and publish what :meth:`block` held back."""
        if self.pending:
            self.flush()
        if self.monitor:
            self.monitor.catch_up()

    def flush(self) -> None:
        """Write the status of the blocks recorded since the last flush."""
        self.status.write(self.pending)
        self.pending = []
        self.flushed = time.perf_counter()


def run(workflow: Workflow | str | os.PathLike, *, store: str | os.PathLike | None = None,
        cluster: str | None = None, workers: int | None = None, overwrite: bool = False,
        dashboard_port: int | None = None, client=None,
        progress: Callable[[dict], None] | bool | None = None, tls: bool | None = None,
        cluster_options=None, in_memory: bool = False) -> RunResult:
    """Run a workflow: fit every (param, split) not yet done and write it into the store.

    Every block of fits is a Dask task, whatever runs it.

    Parameters
    ----------
    workflow : Workflow or path
        A workflow from :func:`cvflow.load_workflow`, or the path of a workflow file.
    store : path or URL, optional
        The Zarr store: a local path or an fsspec URL such as ``s3://bucket/study.zarr``
        (:mod:`cvflow.store.location`); defaults to ``<workflow name>.zarr`` in the working directory.
    cluster : str, optional
        ``"auto"`` (the default when neither this nor the workflow's ``execution.cluster`` names
        one, see :func:`cvflow.execution.schedulers.choose`: Dask's scheduler in this process with thread
        workers when only cvflow's own path kernels fit, else a ``LocalCluster`` of worker
        processes), a profile name (``"threads"``, ``"local"``, ``"slurm"``) or YAML file, or
        ``"tcp://host:port"`` / ``"tls://host:port"`` of a running scheduler.
    workers : int, optional
        Number of local workers or threads (default: the profile's, one per CPU core).
    overwrite : bool
        Replace a store made by another workflow instead of refusing.
    client : distributed.Client, optional
        Use this client instead of connecting.
    progress : bool or callable, optional
        Default (None or True): the execution choice, a progress bar (tqdm's notebook-aware
        bar when tqdm is installed, else plain lines) and a closing summary on stderr, as
        ``cvflow run`` shows them (:class:`cvflow.execution.progress.Progress`); False: silent. A
        callable is called with the event dicts instead: ``{"event": "start", "total",
        "todo", "dashboard", "live", "execution"}`` and ``{"event": "block", "done", "todo",
        "skipped", "failed", "elapsed"}``.
    tls : bool, optional
        Dask TLS with temporary certificates (default: the cluster profile's ``tls``).
    cluster_options : list of "key=value" or dict, optional
        Overrides of the cluster profile (see :func:`cvflow.execution.profiles.load_profile`).
    in_memory : bool, default False
        Keep the cube in this process instead of a store (``store`` must be None; no run
        lock): ``RunResult.cube`` holds it (:class:`cvflow.store.memory.MemoryCube`, saved as
        a store by its ``save(path)``). A study without a store runs so (:meth:`cvflow.Study.run`,
        ``cvflow.SearchCV``); a raced workflow needs a store.

    Returns
    -------
    RunResult

    Raises
    ------
    cvflow.errors.StoreError
        Another run holds the store's run lock (see :mod:`cvflow.store.lock`).
    cvflow.errors.LockLostError
        Another run took the lock over during this one (this run stops writing).
    cvflow.errors.StallError
        No progress within the deadline (``cvflow.execution.stall-seconds``).
    """
    notify = reporter(progress)
    where: list[str] = []            # the store, once known: what an interrupt says was kept
    try:
        with interrupts.stoppable():
            return _run(workflow, store=store, cluster=cluster, workers=workers,
                        overwrite=overwrite, dashboard_port=dashboard_port, client=client,
                        notify=notify, tls=tls, cluster_options=cluster_options, where=where,
                        in_memory=in_memory)
    except RunInterrupted:
        raise
    except KeyboardInterrupt:
        raise interrupted(where[0] if where else None) from None
    except OSError as exc:
        if exc.errno not in FULL or not where:
            raise
        raise disk_full(where[0], exc) from None


FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(store: str, exc: OSError) -> DiskFullError:
    """A write on a full disk (or over a quota), in one line: which store, what to do."""
    what = f"writing {exc.filename}: " if exc.filename else ""
    return DiskFullError(f"store: {store}: {what}{exc.strerror or exc}; free space on its disk "
                         "and run the same command again: the fits done are kept, the rest "
                         "is fitted")


def interrupted(store: str | None) -> RunInterrupted:
    """What a run stopped by a signal left in ``store`` (its done fits, read back)."""
    if store is None:
        return RunInterrupted(None)
    if store == IN_MEMORY:
        return RunInterrupted(None)
    from ..store.group import read_mask       # zarr: only for a store (tests/test_startup.py)

    try:
        done = read_mask(store, "done")
    except Exception:  # noqa: BLE001 - not created (or not finished): nothing kept
        return RunInterrupted(store)
    return RunInterrupted(store, int(done.sum()), int(done.size))


def _run(workflow, *, store, cluster, workers, overwrite, dashboard_port, client, notify, tls,
         cluster_options, where: list[str], in_memory: bool = False) -> RunResult:
    if not isinstance(workflow, Workflow):
        workflow = load_workflow(os.fspath(workflow))
    if in_memory:
        if store is not None or workflow.racing:
            raise InputError("run: in_memory=True keeps the cube in this process; give no store "
                             "(and no racing, which reads a store)" if store is not None else
                             "run: racing reads the cube's store; give a store")
        route = check_cluster(workflow, cluster=cluster, workers=workers,
                              dashboard_port=dashboard_port, tls=tls,
                              cluster_options=cluster_options, client=client)
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="cvflow-create") as pool:
                result = _run_locked(workflow, IN_MEMORY, route=route, workers=workers,
                                     overwrite=False, client=client, progress=notify, pool=pool,
                                     lock=_NO_LOCK)
        except BaseException:
            if isinstance(notify, Progress) and notify.bar is not None:
                notify.bar.close()
            raise
        if isinstance(notify, Progress):
            notify.finish(result)
        return result
    # bad arguments, profiles and unwritable stores fail before the store is created, grown or
    # locked; DESIGN CHOICE: checked here once for both faces (cvflow run, Study.run), and the
    # run goes on with what was decided (the store's location, the cluster's route: its profile
    # loaded and validated once), never working it out again
    checked = check_run(workflow, store, cluster=cluster, workers=workers,
                        dashboard_port=dashboard_port, tls=tls, cluster_options=cluster_options,
                        client=client)
    path = checked.store
    where.append(path)
    # One run per store at a time; a lock left by a crashed run is taken over.
    # The pool creates a new store beside the run; leaving it waits for the creation, so the
    # lock is never released with a store half created.
    from ..store.lock import run_lock
    try:
        with run_lock(path) as lock, inflight.recording(lock.mark), \
                ThreadPoolExecutor(1, thread_name_prefix="cvflow-create") as pool:
            result = _run_locked(workflow, path, route=checked.route, workers=workers,
                                 overwrite=overwrite, client=client, progress=notify,
                                 pool=pool, lock=lock)
    except BaseException:
        if isinstance(notify, Progress) and notify.bar is not None:
            notify.bar.close()                  # the error is the next thing the user reads
        raise
    if isinstance(notify, Progress):
        notify.finish(result)
    return result


def _run_locked(workflow: Workflow, path: str, *, route, workers, overwrite, client, progress,
                pool: ThreadPoolExecutor, lock) -> RunResult:
    """The run under its lock; ``route`` (:class:`cvflow.execution.profiles.Route`, None with a
    given ``client``) is the preflight's decision, read here as it is."""
    t_start = time.perf_counter()
    study = workflow.build()
    workers = workers or workflow.execution.get("workers")
    fit_timeout = workflow.execution.get("fit_timeout")
    path_aware = bool(workflow.execution.get("path_aware", True))
    d = study.data
    scoring = (Scoring(study.scorers, ~np.asarray(d.is_test, dtype=bool), study.train_scores)
               if study.scorers else None)
    in_process_safe = only_paths(study.params, d.fit_X, d.sample_weight, path_aware, scoring)
    # execution.trial_fits: false (cvflow.SearchCV) records a learner that cannot fit as
    # failed fits, as GridSearchCV does, instead of refusing the study before it runs
    trial = bool(workflow.execution.get("trial_fits", True))
    # a callable scorer may return a dict of scores: its keys, each a stored score, are
    # learned on a trial fit before the store is made (with the check, or alone without it)
    probing = wants_keys(study.scorers)
    auto = client is None and route.auto
    # the last run on this store ended in a fit in its process: this one isolates every fit
    crashed = getattr(lock, "inherited", None) if client is None else None
    if crashed:
        log.warning("%s", inflight.crash_line(path, crashed))
    # DESIGN CHOICE: under auto without a fit_timeout, every learner is checked and timed here,
    # in this process, as GridSearchCV fits it: the timed estimate picks the route
    # (cluster.choose), and a study too short to pay for processes never waits for them (_probe:
    # within a deadline). Asked for isolation (fit_timeout, --cluster local), a learner's own
    # fit code runs on the workers only (tasks.trial_fits, tasks.time_fits); cvflow's path
    # kernels are always checked and timed here.
    here = not crashed and (in_process_safe or (auto and not fit_timeout))
    if fit_timeout and client is None and not auto and route.in_process:
        raise InputError("execution.fit_timeout: a fit in this process's threads cannot be "
                         "stopped; use --cluster local (worker processes) or auto")
    fresh = overwrite or path == IN_MEMORY or not exists(path)
    wants_timing = fresh and workflow.execution.get("fits_per_task", "auto") == "auto"
    n_fits = len(study.params) * study.design.n_splits
    per_fit = None
    checked = False                 # here: the probe; else a task on the workers (_Run.on)
    share = gil_share(study.params, path_aware)     # of the learners' own fits, if measured

    # auto's process cluster: the workers of the local profile the preflight loaded
    n_workers = (workers or route.profile.get("workers") or os.cpu_count() or 1) if auto else workers

    def threads_worth_measuring(seconds: float) -> bool:
        # only where auto would start processes for the GIL's sake: is it held?
        return auto and not fit_timeout and share > 0 and choose(
            route.name, seconds=seconds * n_fits, workers=n_workers,
            gil_share=share)[0] == "local"

    if here:
        # under auto, a study far below where processes pay is not timed past its warm-up fit
        quick = (processes_pay_above(workers=n_workers, gil_share=share) / ESTIMATE_ERROR
                 if auto and not fit_timeout else None)
        # timed as the run fits: an in-memory cube of test rows predicts those (SVC on digits: 2.6x)
        test_only = path == IN_MEMORY and workflow.execution.get("predict_rows", "all") == "test"
        checked, per_fit, measured = _probe(workflow, study, timing=auto or wants_timing,
                                            trial=trial, probing=probing, quick=quick,
                                            threads_worth_measuring=threads_worth_measuring,
                                            test_only=test_only)
        if measured is not None:
            share *= measured
        if per_fit is None and (auto or wants_timing):
            # too long to time here (more than probe_seconds for a trial and two fits): blocks
            # of one fit each, on worker processes (an abandoned fit needs no second timing)
            per_fit = _probe_seconds()
    if client is not None:
        execution = "the given client"
    elif crashed and (route.auto or route.in_process):   # other routes fit in processes
        execution = ("local: worker processes (the last run on this store ended in a fit in "
                     "its process)")
        log.info("execution: %s", execution)
        route = route.pick("local", dashboard_port=route.profile.get("dashboard_port")
                           if route.name == "local" else None)
    else:
        picked, execution = choose(
            route.name, seconds=(per_fit or 0.0) * n_fits, workers=n_workers,
            in_process_safe=in_process_safe, fit_timeout=fit_timeout, gil_share=share)
        log.info("execution: %s", execution)
        if auto:
            # a short study: no dashboard; one long enough to watch: on a free loopback port
            # (a fit_timeout study's learners are timed on the workers, later: none), unless
            # the run was given one
            route = route.pick(picked, dashboard_port=quiet_port((per_fit or 0.0) * n_fits))
    if scoring is not None:
        scoring = dataclasses.replace(scoring, keys=study.scorer_keys)
    run = _Run(workflow, study, path, lock=lock, pool=pool, fresh=fresh, per_fit=per_fit,
               wants_timing=wants_timing, check_fits=(trial or probing) and not checked,
               trial=trial,
               overwrite=overwrite, workers=workers,
               fit_timeout=fit_timeout, path_aware=path_aware, progress=progress,
               execution=execution, t_start=t_start, scoring=scoring)
    if client is not None:
        return run.on(client, dashboard=True)
    live = live_page() if not route.in_process or route.dashboard else None
    if live is not None:
        live.enable_routes()    # the scheduler started here serves <dashboard>/cvflow
    with connect(route, store=None if path == IN_MEMORY else path, keep=True) as c:
        return run.on(c, dashboard=route.dashboard)


class _NoLock:
    """The run lock of a cube in memory: no store, nothing to fence (TaskContext.token None)."""

    token = None
    lost = False


_NO_LOCK = _NoLock()


# DESIGN CHOICE: the store's writers (zarr) are imported where a store is written: a run that
# keeps its cube in memory never imports zarr (tests/test_startup.py counts the modules)
def _create(path: str, template, *, pred_ready) -> None:
    """Create the store at ``path`` from ``template`` (a :class:`cvflow.store.schema.Schema`)."""
    from ..store import creation

    creation.create(path, creation.to_dataset(template), pred_ready=pred_ready)


def _intact_done(path: str, chunks: tuple[int, int]) -> np.ndarray:
    from ..store import damage

    return damage.intact_done(path, chunks)


def _status_writer(path: str, fresh: bool):
    from ..store import writes

    return writes.StatusWriter(path, fresh=fresh)


def live_page():
    """The live page's module (config ``cvflow.execution.live-page``, :mod:`cvflow.report.live`
    by default), or None: the runner starts and feeds the page without importing the reports."""
    # DESIGN CHOICE: a dotted name in the config, as distributed names its preloads and
    # plugins, rather than an import of cvflow.report from cvflow.execution (the runner and the
    # reports are siblings, tests/test_layout.py APART) or an argument every face and
    # cvflow.run would have to pass
    name = config.get("cvflow.execution.live-page")
    return importlib.import_module(name) if name else None


def _store_event(c, name: str):
    """The event the blocks wait on for the store's creation: this process's on Dask's threaded
    scheduler (cvflow.execution.threaded), else the scheduler's ``distributed.Event``."""
    if hasattr(c, "event"):
        return c.event(name)
    from distributed import Event

    return Event(name, client=c)


def _probe_seconds() -> float:
    return float(config.get("cvflow.cluster.auto.probe_seconds"))


def _probe(workflow: Workflow, study, *, timing: bool, trial: bool = True,
           probing: bool = False, threads_worth_measuring: Callable[[float], bool] | None = None,
           quick: float | None = None, test_only: bool = False
           ) -> tuple[bool, float | None, float | None]:
    """The pre-run check of the learners (:func:`cvflow.fitting.trial.check_learners`; not
    with ``trial=False``) and, with ``timing``, the timed seconds per fit
    (:func:`cvflow.execution.run_plan.seconds_per_fit`, with its ``quick``; ``test_only``: of
    fits that predict their test rows alone, as the run's), in this process within config
    ``cvflow.cluster.auto.probe_seconds``: ``(checked, seconds or None, share or None)``, the
    check done and the timing finished in time. ``threads_worth_measuring(seconds)`` true: the
    share of the fits that threads cannot run side by side is measured too
    (:func:`cvflow.execution.sizing.thread_bound_share`). Raises what the check raises."""
    # DESIGN CHOICE: the probe runs a learner's own fit code here, which may run for minutes
    # or never return; every wait has a deadline (docs/guide/execution.md). Past it, the fits are
    # long enough for worker processes to pay: the run goes there, and checks the learners on
    # the workers if the probe had not (their watchdog, fit_timeout). A thread cannot be
    # stopped: the probe's is a daemon thread left to end its fit (or to end with the
    # interpreter); its result is dropped.
    out: dict = {}

    def body() -> None:
        try:
            # one BLAS/OpenMP thread, as the study's fits get on every route: a learner's
            # OpenMP threads contending with another process cost it up to 10x (measured:
            # HistGradientBoosting, GridSearchCV at load 6)
            with one_blas_thread(), inflight.fitting(
                    {"block": "the learners' trial and timing fits",
                     "params": sorted({p.learner for p in study.params})}):
                if trial:
                    out["keys"] = check_learners(workflow, study.data, str(workflow.path))
                elif probing:
                    out["keys"] = scorer_probe(workflow, study.data)
                out["checked"] = True
                out["seconds"] = (seconds_per_fit(workflow, study, quick=quick, test_only=test_only)
                                  if timing else None)
            if out["seconds"] and threads_worth_measuring and threads_worth_measuring(out["seconds"]):
                d = study.data
                out["share"] = thread_bound_share(
                    study.params, d.fit_X, d.fit_y, study.design.train[0], positive=d.positive,
                    path_aware=bool(workflow.execution.get("path_aware", True)),
                    test_only=test_only)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=body, name="cvflow-probe", daemon=True)
    thread.start()
    thread.join(_probe_seconds())
    measuring = thread.is_alive() and bool(out.get("seconds"))
    if measuring:
        # timed in time, measuring the threads: that gets a deadline of its own; past it the
        # share stays unmeasured (the learners' fits are taken to hold the GIL)
        thread.join(_probe_seconds())
        if thread.is_alive():
            log.info("measuring whether threads fit side by side took more than %g s; the "
                     "learners' fits are taken to hold the GIL", _probe_seconds())
    elif thread.is_alive():
        log.info("the learners' trial and timing fits took more than %g s here (%s); "
                 "fitting on worker processes", _probe_seconds(),
                 "checked" if out.get("checked") else "to be checked there")
        return bool(out.get("checked")), None, None
    if "error" in out:
        raise out["error"]
    study.set_scorer_keys(out.get("keys") or {})
    return True, out["seconds"], None if thread.is_alive() else out.get("share")


@dataclass(repr=False, eq=False)
class _Run:
    """One run on a connected client: plan, create the store, loop, record."""

    workflow: Workflow
    study: object
    path: str
    lock: object
    pool: ThreadPoolExecutor
    fresh: bool
    per_fit: float | None
    wants_timing: bool
    check_fits: bool                  # the pre-run check still to do, on the workers
    overwrite: bool
    workers: int | None
    fit_timeout: float | None
    path_aware: bool
    progress: Callable[[dict], None] | None
    execution: str
    t_start: float
    scoring: Scoring | None = None        # the study's scorers, applied where each fit runs
    trial: bool = True                    # check_fits: the learners' check (else the probe)

    def on(self, c, *, dashboard: bool) -> RunResult:
        study, path, d = self.study, self.path, self.study.data
        run_id = f"{time.time_ns()}-{os.getpid()}"
        # DESIGN.md section 3: a cube in memory may hold only the cells its estimators read
        test_only = (path == IN_MEMORY
                     and self.workflow.execution.get("predict_rows", "all") == "test")
        ctx = TaskContext(store=path, run_id=run_id, token=self.lock.token,
                          fit_timeout=float(self.fit_timeout) if self.fit_timeout else None,
                          client_pid=os.getpid(), test_only=test_only)
        if self.check_fits:               # before the store is created or changed
            keys = check_on_workers(c, ctx, self.workflow, d, str(self.workflow.path),
                                    check=self.trial)
            study.set_scorer_keys(keys)   # a scorer returning a dict: one stored score a key
            if self.scoring is not None:
                self.scoring = dataclasses.replace(self.scoring, keys=study.scorer_keys)
        per_fit = self.per_fit
        if per_fit is None and self.wants_timing:
            per_fit = time_on_workers(c, ctx, study, self.path_aware)
        # DESIGN CHOICE: a new store is created in a thread of the client while the first blocks
        # fit (their tasks wait only for `pred`'s metadata before writing, tasks._wait_ready):
        # its ~25 arrays cost ~40-60 ms (store.create), about as much as a small study's fits.
        # The client writes the status only once the whole store is made. No process is ever
        # forked meanwhile (workers are spawned by distributed's nannies).
        memory = path == IN_MEMORY
        if memory:                        # DESIGN.md section 3: a study without a store
            layout = new_layout(self.workflow, study, n_workers=self.workers or 2,
                                seconds=per_fit or 0.0)
        else:
            layout = prepare_store(self.workflow, study, path, overwrite=self.overwrite,
                                   n_workers=self.workers or 2, seconds=per_fit or 0.0,
                                   create=False)
        params, design, chunks = layout.params, layout.design, layout.chunks
        fresh = layout.template is not None
        cube = MemoryCube(layout.template) if memory else None
        # the event the blocks wait on to write: set as soon as `pred` can be written (the rest
        # of the store is made meanwhile: creation.create), and again (harmless) when the
        # creation ended or failed
        ready = None if not fresh or memory else _store_event(c, f"cvflow-store-{run_id}")
        creating = (None if ready is None
                    else self.pool.submit(_create, path, layout.template, pred_ready=ready.set))
        del layout           # the template (its `error` array of "" per fit) goes with creation
        n_total = len(params) * design.n_splits
        # a store created just now has nothing done: no need to read it back; else the blocks
        # whose pred chunk is missing or corrupt are not done (refitted)
        done = (np.zeros((len(params), design.n_splits), dtype=bool) if fresh
                else _intact_done(path, chunks))
        todo = pending_blocks(path, chunks, done)
        n_todo = int(n_total - done.sum())
        result = RunResult(store=path, total_fits=n_total, fits_executed=0, failed=0, tasks=0,
                           wall_seconds=0.0, fit_seconds=0.0, distinct_pairs=n_todo, chunks=chunks,
                           roles_requested=len(params) * design.roles_requested,
                           execution=self.execution, cube=cube)
        notify = self.progress or (lambda event: None)
        if not todo:
            if creating is not None:           # an empty grid or design: the store all the same
                creating.result()
            if ready is not None:
                ready.clear()
            notify({"event": "start", "total": n_total, "todo": 0, "dashboard": None,
                    "execution": result.execution})
            result.wall_seconds = time.perf_counter() - self.t_start
            return result
        # a block sharing its chunk with stored fits (extended study) fits only the rest
        blocks = [Block(ps, ss, None if not done[ps, ss].any() else ~done[ps, ss])
                  for ps, ss in todo]
        race = None
        if self.workflow.racing:            # racing: the first stage's blocks first
            # DESIGN CHOICE: imported here: racing reads its store (zarr), which a run that keeps
            # its cube in memory never imports (tests/test_startup.py)
            from .race_runner import Race, labels, stage_blocks

            race = Race.start(self.workflow.racing, design, len(params), labels=labels(params))
            first = stage_blocks(race, 0, done, chunks)
            blocks = [Block(ps, ss, cells) for ps, ss, cells in first]
        if dashboard:
            result.dashboard = getattr(c, "dashboard_link", None) or None   # "" when none
        # the live page reads the store: a cube in memory has none to read
        live = live_page() if result.dashboard and not memory else None
        monitor = live.start(c, self.workflow, params, design, d, path) if live is not None else None
        result.live = monitor and monitor.url
        notify({"event": "start", "total": n_total, "todo": n_todo, "dashboard": result.dashboard,
                "live": result.live, "execution": result.execution})
        recorder = _Recorder(cube if cube is not None else _status_writer(path, fresh), result,
                             notify, n_todo, monitor)
        gate = getattr(getattr(c, "pool", None), "gate", None)     # the threads route's
        if gate is not None and per_fit and len({p.learner for p in params}) == 1:
            gate.expect((0,), per_fit)      # the probe timed the first param's (one learner's) fit
        ctx = dataclasses.replace(ctx, ready=ready and ready.name)
        loop = Loop(c, ctx, params=params, train=design.train, data=d, path_aware=self.path_aware,
                    record=recorder.block, idle=recorder.idle, lock_lost=lambda: self.lock.lost,
                    scorer=monitor and monitor.scorer, scoring=self.scoring)
        try:
            loop.submit(blocks)
            if creating is not None and ready is not None:
                try:
                    creating.result()
                except BaseException:
                    loop.cancel()
                    raise
                finally:       # waiting tasks wake: they write, or raise if `pred` was not made
                    ready.set()
            loop.run()
            if race is not None:          # the other stages, each after a look (cvflow.execution.race_runner)
                self._race(race, loop, recorder, first, done, chunks)
            if ready is not None:
                # every block is back: the scheduler forgets the event (after a failure it
                # stays set, so a cancelled block still running finds it and raises)
                ready.clear()
        finally:
            recorder.flush()
            if monitor:
                monitor.publish()            # the final state, for a scheduler that outlives us
            with contextlib.suppress(Exception):
                c.set_metadata(["cvflow", run_id], None)   # the run's timeouts: forgotten
        result.wall_seconds = time.perf_counter() - self.t_start
        if race is not None:
            from ..store.attributes import saved_fits
            result.saved_fits = saved_fits(json.loads(race.to_json()), done)
            result.dropped_params = len(race.dropped)
            result.raced_params = race.n_params
            # the pairs this run had to fit: the dropped params' skipped fits are not among them
            result.distinct_pairs -= recorder.skipped
        return result

    def _race(self, race, loop, recorder, first, done, chunks) -> None:
        """The stages after the first (:func:`cvflow.execution.race_runner.run_stages`) on the run's loop."""
        from .race_runner import mark_done, run_stages     # a raced run has a store (zarr)

        def fit(blocks) -> None:
            loop.submit([Block(ps, ss, cells) for ps, ss, cells in blocks])
            loop.run()

        def looked(race) -> None:
            # the dropped params' fits not done now were not done when the run started
            # either: they were in its "to do"
            rows = sorted(race.dropped.values(), key=lambda d: (d["stage"], d["param"]))
            dropped = [d["param"] for d in rows]
            recorder.raced(rows, race.n_params, int((~done[dropped]).sum()))

        recorder.flush()
        mark_done(done, first)
        d = self.study.data
        run_stages(race, path=self.path, done=done, chunks=chunks, fit=fit, flush=recorder.flush,
                   loss=self.workflow.loss, units=d.groups, looked=looked)
