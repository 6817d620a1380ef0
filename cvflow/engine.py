"""Running a study: blocks -> Dask tasks that fit and write their region of the cube.

The client builds the design, creates the store (metadata only, while the first blocks fit),
and runs one task per block not yet ``done``: on a Dask cluster (X and y sent to the workers
once, as recomputable tasks), or in this process on a pool (:mod:`cvflow.inprocess`: threads, or
worker processes forked from the client that inherit X and y; :func:`_run_here`). A task fits
its block, writes its chunk of ``pred`` and returns a small summary record with the block's
status (failed, error, fit_seconds), which the client writes, ``done`` last, in batches
(:class:`_Recorder`); a fit that raises is recorded in the store, not raised.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import store as cube_store
from .blocks import choose_chunks, estimate_seconds_per_fit, gil_share
from .designs import Design
from .errors import InputError, StoreError
from .fit import BlockResult, fit_block, fit_isolated
from .learners import Param, pred_shape
from .location import exists, remove, resolve
from .spec import Study, Workflow, load_workflow

if TYPE_CHECKING:
    import xarray as xr

log = logging.getLogger(__name__)

# the client writes finished blocks' status (done, failed, ...) in batches: at least this many
# seconds apart, and at least STATUS_FLUSH_FACTOR times the last write's own duration apart
STATUS_FLUSH_SECONDS = 0.25
STATUS_FLUSH_FACTOR = 20
# a block task waits at most this long, once fitted, for the client to create a new store
STORE_READY_TIMEOUT = 600


@dataclass
class RunResult:
    """What a run did: counts, timings and where the cube is."""

    store: str              # a local path or a URL (cvflow.location)
    total_fits: int
    fits_executed: int
    failed: int
    tasks: int
    wall_seconds: float
    fit_seconds: float
    distinct_pairs: int
    roles_requested: int = 0
    dashboard: str | None = None
    live: str | None = None          # the live study page (cvflow.live), when served
    chunks: tuple[int, int] = (0, 0)
    errors: dict = field(default_factory=dict)
    execution: str = ""                 # where the fits ran and why (cvflow.cluster.choose)

    @property
    def fits_per_distinct(self) -> float:
        """Fits executed / distinct (param, training set) pairs this run had to fit."""
        return self.fits_executed / self.distinct_pairs if self.distinct_pairs else float("nan")


def _value(value):
    """Task body holding the data (recomputable, unlike scattered data)."""
    return value


def run_block(store: str, params: list[Param], X, y, train: np.ndarray, params_slice: slice,
              splits_slice: slice, positive, path_aware: bool = True,
              todo: np.ndarray | None = None, sample_weight=None, scorer=None,
              ready: str | None = None) -> dict:
    """Task body: fit one block, write its region, return a small summary record.

    ``todo`` (params, splits) marks the cells to fit in a block shared with stored fits of an
    extended study (:func:`cvflow.extend.fit_missing`); None fits the whole block. ``scorer``
    adds two loss sums per fit (``terms``) for the live page. ``ready`` names the
    ``distributed.Event`` the client sets once it has created the store: the block is fitted
    meanwhile and written after it.
    """
    t0 = time.perf_counter()
    if todo is None:
        result = fit_block(params, X, y, train, params_slice=params_slice,
                           splits_slice=splits_slice, positive=positive,
                           path_aware=path_aware, sample_weight=sample_weight)
    else:
        result = fit_missing(store, params, X, y, train, params_slice, splits_slice, positive,
                             path_aware, todo, sample_weight)
    if ready is not None:
        _wait_ready(ready, store)
    cube_store.write_pred(store, result)
    summary = _summary(result, todo)
    if scorer is not None:
        summary["terms"] = scorer(result.pred, y, train, params, positive)
    summary["task_seconds"] = time.perf_counter() - t0
    return summary


class _StoreSignal:
    """The client's word to the block tasks of its own process, or of workers forked from it,
    that it created the store (or failed to): two events (threading, or multiprocessing ones
    that forked workers inherit), so a task needs no read of the store to know."""

    def __init__(self, processes: bool = False):
        import multiprocessing

        event = multiprocessing.get_context("fork").Event if processes else threading.Event
        self.settled, self.created = event(), event()

    def settle(self, created: bool) -> None:
        if created:
            self.created.set()
        self.settled.set()                  # waiting tasks wake: they write, or raise

    def wait(self, timeout: float) -> bool:
        return self.settled.wait(timeout) and self.created.is_set()


# the store signals of the runs whose client is in this process, by name (see _wait_ready)
_LOCAL_READY: dict[str, _StoreSignal] = {}


def _wait_ready(name: str, store: str) -> None:
    """Wait for the client's ``ready`` signal that it created the store: a :class:`_StoreSignal`
    when the task runs in the client's own process (threads: no scheduler round trip) or in a
    worker forked from it, else the ``distributed.Event`` of that name. StoreError if the
    creation failed or took more than ``STORE_READY_TIMEOUT`` seconds."""
    local = _LOCAL_READY.get(name)
    if local is not None:
        created = local.wait(STORE_READY_TIMEOUT)
    else:
        from distributed import Event

        created = (Event(name).wait(timeout=STORE_READY_TIMEOUT)
                   and cube_store.is_store(store))
    if not created:
        raise StoreError(f"store: {store} was not created (or not within "
                         f"{STORE_READY_TIMEOUT} s); this block's predictions were not written")


def _summary(result: BlockResult, todo: np.ndarray | None) -> dict:
    """The small record of a written block: its status and counts of the fits done now."""
    summary = result.summary()
    summary["status"] = result.without_pred()       # the client records it (write_status)
    fitted = np.ones(result.failed.shape, dtype=bool) if todo is None else todo
    summary.update(fits=int(fitted.sum()), failed=int(result.failed[fitted].sum()),
                   seconds=float(np.nansum(result.fit_seconds[fitted])))
    summary["errors"] = sorted({str(e) for e in result.error[fitted] if e})
    return summary


class _SplitBlock:
    """A block whose task killed its workers, refitted one fit per task (fit_isolated); the
    client assembles it and writes it once every fit is back (still one writer per chunk)."""

    def __init__(self, store: str, ps: slice, ss: slice, n_samples: int, todo: np.ndarray | None):
        shape = (ps.stop - ps.start, ss.stop - ss.start)
        self.store, self.todo = store, todo
        if todo is None:
            self.result = BlockResult(ps, ss, np.full(shape + (n_samples,), np.nan),
                                      np.zeros(shape, bool), np.full(shape, "", dtype=object),
                                      np.zeros(shape))
        else:     # stored fits of an extended study keep their bytes
            stored = cube_store.read_block(store, ps, ss)
            self.result = BlockResult(ps, ss, stored["pred"], stored["failed"], stored["error"],
                                      stored["fit_seconds"])
        self.cells = [tuple(c) for c in np.argwhere(np.ones(shape, bool) if todo is None else todo)]
        self.left = len(self.cells)

    def record(self, h: int, s: int, fitted: tuple[np.ndarray, float, str]) -> bool:
        """Keep one fit's result; True when the block is complete."""
        r = self.result
        r.pred[h, s], r.fit_seconds[h, s], r.error[h, s] = fitted
        r.failed[h, s] = bool(fitted[2])
        self.left -= 1
        return self.left == 0

    def fit_of(self, h: int, s: int, params: list[Param], design: Design) -> tuple[Param, np.ndarray]:
        """The param and the training set of the block's fit (h, s)."""
        return params[self.result.params.start + h], design.train[self.result.splits.start + s]

    def write(self) -> dict:
        """Write the complete block (one writer per chunk); its summary record."""
        cube_store.write_pred(self.store, self.result)
        return _summary(self.result, self.todo)


def fit_missing(store: str, params: list[Param], X, y, train: np.ndarray, params_slice: slice,
                splits_slice: slice, positive, path_aware: bool, todo: np.ndarray,
                sample_weight=None) -> BlockResult:
    """Fit only the cells ``todo`` (params, splits) of a block; keep the stored ones.

    The stored cells of the block's chunk are read and returned unchanged, so the caller
    writes the whole chunk-aligned block (one writer per chunk) with the old bytes intact.
    Params needing the same splits are fitted together (path-aware groups stay intact).
    """
    stored = cube_store.read_block(store, params_slice, splits_slice)
    patterns: dict[tuple, list[int]] = {}
    for h in range(todo.shape[0]):
        cols = tuple(np.flatnonzero(todo[h]).tolist())
        if cols:
            patterns.setdefault(cols, []).append(h)
    for cols, rows in patterns.items():
        c, r = list(cols), list(rows)
        res = fit_block([params[h] for h in r], X, y, train[c], params_slice=slice(0, len(r)),
                        splits_slice=slice(0, len(c)), positive=positive, path_aware=path_aware,
                        sample_weight=sample_weight)
        ix = np.ix_(r, c)
        for name in ("pred", "failed", "error", "fit_seconds"):
            stored[name][ix] = getattr(res, name)
    return BlockResult(params_slice, splits_slice, stored["pred"], stored["failed"],
                       stored["error"], stored["fit_seconds"])


def path_length(params: list[Param]) -> int:
    """The longest run of consecutive params fitted as one path (:func:`cvflow.paths.plan`)."""
    from .paths import plan

    return max((len(g.index) for g in plan(params)
                if g.kernel is not None and g.index == tuple(range(g.index[0], g.index[-1] + 1))),
               default=1)


def seconds_per_fit(workflow: Workflow, study: Study) -> float:
    """The timed estimate of one fit's seconds as blocks fit them (:mod:`cvflow.blocks`)."""
    # timed as blocks fit them: a path-aware ridge grid costs one SVD per split, not one per alpha
    d = study.data
    return estimate_seconds_per_fit(
        study.params, d.fit_X, d.y, study.design.train[0], positive=d.positive,
        path_aware=bool(workflow.execution.get("path_aware", True)))


@dataclass(frozen=True)
class Layout:
    """The store's params and design (store order: an extended store keeps its indices), the
    block chunk shape, and the template of a new store not created yet (``create=False``)."""

    params: list[Param]
    design: Design
    chunks: tuple[int, int]
    template: xr.Dataset | None = None


def prepare_store(workflow: Workflow, study: Study, store: str | os.PathLike, *,
                  overwrite: bool = False, n_workers: int = 2,
                  seconds: float | None = None, create: bool = True) -> Layout:
    """Create the store (or check and extend the existing one); the layout to run on.

    ``study`` is left as built: an existing store's order comes back in the layout.
    ``seconds`` per fit sizes the blocks of a new store (timed here when None and the
    workflow's ``fits_per_task`` is ``auto``). With ``create=False`` a new store is not
    created: its template comes back in the layout, for ``cvflow.store.create`` (a replaced
    store is removed here all the same).
    """
    from .extend import reconcile

    location = resolve(store)
    cube_store.clear_interrupted(location)
    if exists(location) and not overwrite:
        if not cube_store.is_store(location):
            raise StoreError(f"store: {location} exists but is not a cvflow store; "
                             "choose another path")
        params, design = reconcile(location, workflow, study)
        return Layout(params, design, cube_store.block_chunks(location))
    if exists(location):
        if not cube_store.is_store(location):
            raise StoreError(f"store: {location} exists but is not a cvflow store; refusing to "
                             "overwrite it")
        remove(location)
    fpt = workflow.execution.get("fits_per_task", "auto")
    d = study.data
    dtype = workflow.execution.get("dtype", "float64")
    if fpt == "auto" and seconds is None:
        seconds = seconds_per_fit(workflow, study)
    auto_path = fpt == "auto" and bool(workflow.execution.get("path_aware", True))
    chunks = choose_chunks(len(study.params), study.design.n_splits, seconds_per_fit=seconds or 0.0,
                           n_workers=n_workers, fits_per_task=None if fpt == "auto" else int(fpt),
                           n_samples=d.X.shape[0] * (len(d.positive) if isinstance(d.positive, tuple)
                                                     else 1),      # values a fit stores
                           itemsize=np.dtype(dtype).itemsize,
                           path_length=path_length(study.params) if auto_path else 1)
    template = cube_store.cube_template(study.data, study.design, study.params, attrs=study.attrs,
                                        chunks=chunks,
                                        dtype=workflow.execution.get("dtype", "float64"))
    if not create:
        return Layout(study.params, study.design, chunks, template)
    cube_store.create(location, template)
    return Layout(study.params, study.design, chunks)




def pending_blocks(store: str, chunks: tuple[int, int],
                   done: np.ndarray | None = None) -> list[tuple[slice, slice]]:
    """The blocks with a fit not yet ``done`` (``done``: the store's mask, read if None)."""
    done = cube_store.read_mask(store, "done") if done is None else done
    n_params, n_splits = done.shape
    return [(ps, ss) for ps, ss in cube_store.block_slices(n_params, n_splits, chunks)
            if not done[ps, ss].all()]


class _Recorder:
    """The client's side of finished blocks: their status written to the store in batches,
    their counts added to the run's result, a progress event each (and the live page's
    update, ``monitor``)."""

    def __init__(self, path: str, fresh: bool, result: RunResult,
                 notify: Callable[[dict], None], n_todo: int, monitor=None):
        self.status = cube_store.StatusWriter(path, fresh=fresh)
        self.result, self.notify, self.n_todo, self.monitor = result, notify, n_todo, monitor
        self.pending: list = []
        self.t0 = self.flushed = time.perf_counter()
        self.gap = STATUS_FLUSH_SECONDS

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
        self.notify({"event": "block", "done": r.fits_executed, "todo": self.n_todo,
                     "elapsed": time.perf_counter() - self.t0})

    def flush(self) -> None:
        """Write the status of the blocks recorded since the last flush."""
        self.status.write(self.pending)
        self.pending = []
        self.flushed = time.perf_counter()


def _run_inherited_block(token: str, store: str, params: list[Param], train: np.ndarray,
                         params_slice: slice, splits_slice: slice, positive, path_aware: bool,
                         todo: np.ndarray | None, ready: str | None) -> dict:
    """:func:`run_block` on the run's X, y and weights inherited from the client
    (:func:`cvflow.inprocess.inherited`)."""
    from .inprocess import inheritance

    X, y, sample_weight = inheritance(token)
    return run_block(store, params, X, y, train, params_slice, splits_slice, positive,
                     path_aware, todo, sample_weight, None, ready)


def _run_here(kind: str, workers: int, *, study: Study, path: str, params: list[Param],
              design: Design, todo: list, done: np.ndarray, path_aware: bool, creating,
              recorder: _Recorder) -> None:
    """Run the blocks ``todo`` on a pool of this process (:mod:`cvflow.inprocess`), no scheduler:
    on ``workers`` threads, or on worker processes forked from this one (``kind`` ``forked``).
    A forked worker that dies (a fit's segfault, ``os._exit``, the kernel's OOM killer) breaks
    the pool: the blocks not back yet are then refitted one fit per forked child
    (:func:`cvflow.fit.fit_isolated`), so only the culprits are recorded failed."""
    from concurrent.futures.process import BrokenProcessPool

    from . import inprocess
    from .blocks import one_blas_thread

    processes = kind == "forked"
    d = study.data
    with contextlib.ExitStack() as stack:
        stack.enter_context(one_blas_thread())       # inherited by forked workers
        token = stack.enter_context(inprocess.inherited((d.fit_X, d.y, d.sample_weight)))
        ready = None
        if creating is not None:
            ready = f"cvflow-store-{time.time_ns()}"
            signal = _LOCAL_READY[ready] = _StoreSignal(processes)
            stack.callback(_LOCAL_READY.pop, ready, None)
            creating.add_done_callback(lambda future: signal.settle(future.exception() is None))
        executor = stack.enter_context(inprocess.pool(workers, processes=processes))
        tasks, slices, finished = {}, {}, set()
        for ps, ss in todo:
            # a block sharing its chunk with stored fits (extended study) fits only the rest
            cells = None if not done[ps, ss].any() else ~done[ps, ss]
            key = f"cvflow-block-{ps.start}-{ss.start}"
            slices[key] = (ps, ss, cells)
            tasks[key] = (_run_inherited_block, token, path, params[ps], design.train[ss], ps, ss,
                          d.positive, path_aware, cells, ready)

        def on_done(key: str, summary: dict) -> None:
            finished.add(key)
            recorder.block(summary)

        try:
            inprocess.execute(tasks, executor, on_done=on_done)
        except BrokenProcessPool:
            if creating is not None:
                creating.result()              # the refits write into the store
            left = [block for key, block in slices.items() if key not in finished]
            log.warning("a forked worker died; refitting the %d blocks not back yet one fit at a "
                        "time, each in a child process", len(left))
            _refit_alone(left, workers, study=study, path=path, params=params, design=design,
                         recorder=recorder)
        except BaseException:
            if creating is not None:
                creating.result()      # a failed creation raises its own error, not the tasks'
            raise
    if creating is not None:
        creating.result()


def _refit_alone(blocks: list, workers: int, *, study: Study, path: str, params: list[Param],
                 design: Design, recorder: _Recorder) -> None:
    """Refit ``blocks`` (params slice, splits slice, cells) one fit per forked child, on
    ``workers`` threads; each block written whole once its fits are back."""
    d = study.data
    with ThreadPoolExecutor(workers, thread_name_prefix="cvflow-alone") as threads:
        for ps, ss, cells in blocks:
            block = _SplitBlock(path, ps, ss, len(d.y), cells)

            def fit_alone(cell: tuple[int, int]) -> tuple[np.ndarray, float, str]:
                param, train = block.fit_of(*cell, params, design)
                return fit_isolated(param, d.fit_X, d.y, train, d.positive, d.sample_weight)

            fitted = threads.map(fit_alone, block.cells)
            for (h, s), fit in zip(block.cells, fitted):
                block.record(h, s, fit)
            recorder.block(block.write())


def run(workflow: Workflow | str | os.PathLike, *, store: str | os.PathLike | None = None,
        cluster: str | None = None, workers: int | None = None, overwrite: bool = False,
        dashboard_port: int | None = None, client=None,
        progress: Callable[[dict], None] | None = None, tls: bool | None = None,
        cluster_options=None) -> RunResult:
    """Run a workflow: fit every (param, split) not yet done and write it into the store.

    Parameters
    ----------
    workflow : Workflow or path
        A workflow from :func:`cvflow.load_workflow`, or the path of a workflow file.
    store : path or URL, optional
        The Zarr store: a local path or an fsspec URL such as ``s3://bucket/study.zarr``
        (:mod:`cvflow.location`); defaults to ``<workflow name>.zarr`` in the working directory.
    cluster : str, optional
        ``"auto"`` (the default when neither this nor the workflow's ``execution.cluster`` names
        one: this process for a tiny study, worker processes forked from it for a small one,
        else ``"local"``, see :func:`cvflow.cluster.choose`), a profile name (``"threads"``,
        ``"forked"``, ``"local"``, ``"slurm"``) or YAML file, or ``"tcp://host:port"`` of a
        running scheduler.
    workers : int, optional
        Number of local workers or threads (default: the profile's, one per CPU core).
    overwrite : bool
        Replace a store made by another workflow instead of refusing.
    client : distributed.Client, optional
        Use this client instead of connecting.
    progress : callable, optional
        Called with event dicts: ``{"event": "start", "total", "todo", "dashboard"}`` and
        ``{"event": "block", "done", "todo", "elapsed"}``.
    tls : bool, optional
        Dask TLS with temporary certificates (default: the cluster profile's ``tls``).
    cluster_options : list of "key=value" or dict, optional
        Overrides of the cluster profile (see :func:`cvflow.cluster.load_profile`).

    Returns
    -------
    RunResult

    Raises
    ------
    cvflow.errors.StoreError
        Another run holds the store's run lock (see :mod:`cvflow.lock`).
    """
    from .cluster import ADDRESS, load_profile
    from .lock import run_lock

    if not isinstance(workflow, Workflow):
        workflow = load_workflow(os.fspath(workflow))
    path = resolve(store if store is not None else f"{workflow.name}.zarr")
    cluster = cluster or workflow.execution.get("cluster")
    if client is None and not (cluster and ADDRESS.match(str(cluster))):
        # a bad profile fails before any store work
        if load_profile(cluster, options=cluster_options)["kind"] == "forked":
            _check_forked(dashboard_port)
    # One run per store at a time; a lock left by a crashed run is taken over.
    # The pool creates a new store beside the run; leaving it waits for the creation, so the
    # lock is never released with a store half created.
    with run_lock(path), ThreadPoolExecutor(1, thread_name_prefix="cvflow-create") as pool:
        return _run_locked(workflow, path, cluster=cluster, workers=workers, overwrite=overwrite,
                           dashboard_port=dashboard_port, client=client, progress=progress,
                           tls=tls, cluster_options=cluster_options, pool=pool)


def _check_forked(dashboard_port: int | None) -> None:
    """InputError when forked workers cannot run here or a dashboard is asked of them."""
    from .inprocess import can_fork

    if dashboard_port is not None:
        raise InputError("--dashboard-port: forked workers run on a pool of this process, with no "
                         "scheduler and no dashboard; use --cluster local (or threads) for one")
    if not can_fork():
        raise InputError("--cluster forked: worker processes cannot be forked here (Linux only, "
                         "and not from a daemonic worker process); use --cluster local or threads")


def _run_locked(workflow: Workflow, path: str, *, cluster, workers, overwrite, dashboard_port,
                client, progress, tls, cluster_options, pool: ThreadPoolExecutor) -> RunResult:
    from . import live
    from .cluster import AUTO, IN_PROCESS, choose, connect, load_profile, serves_dashboard
    from .cluster import resolve as resolve_cluster

    t_start = time.perf_counter()
    study = workflow.build()
    workers = workers or workflow.execution.get("workers")
    fresh = overwrite or not exists(path)
    auto = client is None and resolve_cluster(cluster) == AUTO
    per_fit = None
    if auto or (fresh and workflow.execution.get("fits_per_task", "auto") == "auto"):
        per_fit = seconds_per_fit(workflow, study)
    # DESIGN CHOICE: a new store is created in a thread of the client while the workers start
    # and the first blocks fit (their tasks wait for it before writing, see run_block): its ~25
    # arrays cost ~70-100 ms (store.create), about as much as a small study's fits.
    layout = prepare_store(workflow, study, path, overwrite=overwrite, n_workers=workers or 2,
                           seconds=per_fit, create=False)
    creating = (None if layout.template is None
                else pool.submit(cube_store.create, path, layout.template))
    params, design, chunks = layout.params, layout.design, layout.chunks
    fresh = layout.template is not None
    n_total = len(params) * design.n_splits
    # a store created just now has nothing done: no need to read it back
    done = (np.zeros((len(params), design.n_splits), dtype=bool) if fresh
            else cube_store.read_mask(path, "done"))
    todo = pending_blocks(path, chunks, done)
    n_todo = int(n_total - done.sum())
    result = RunResult(store=path, total_fits=n_total, fits_executed=0, failed=0, tasks=0,
                       wall_seconds=0.0, fit_seconds=0.0, distinct_pairs=n_todo, chunks=chunks,
                       roles_requested=len(params) * design.roles_requested)
    notify = progress or (lambda event: None)
    if not todo:
        if creating is not None:               # an empty grid or design: the store all the same
            creating.result()
        notify({"event": "start", "total": n_total, "todo": 0, "dashboard": None})
        result.wall_seconds = time.perf_counter() - t_start
        return result
    path_aware = bool(workflow.execution.get("path_aware", True))
    if client is None:
        cluster, result.execution = choose(
            cluster, seconds=(per_fit or 0.0) * n_todo, workers=workers,
            dashboard=dashboard_port is not None, gil_share=gil_share(params, path_aware))
        log.info("execution: %s", result.execution)
    else:
        result.execution = "the given client"
    if client is None and not serves_dashboard(cluster, dashboard_port):
        prof = load_profile(cluster, options=cluster_options)
        if prof["kind"] in IN_PROCESS:
            notify({"event": "start", "total": n_total, "todo": n_todo, "dashboard": None,
                    "live": None, "execution": result.execution})
            recorder = _Recorder(path, fresh, result, notify, n_todo)
            try:
                _run_here(prof["kind"], workers or prof.get("workers") or os.cpu_count() or 1,
                          study=study, path=path, params=params, design=design, todo=todo,
                          done=done, path_aware=path_aware, creating=creating, recorder=recorder)
            finally:
                recorder.flush()
            result.wall_seconds = time.perf_counter() - t_start
            return result

    def submit_all(c, scorer, ready):
        # DESIGN CHOICE: X and y travel as two tasks holding them, not scattered: the scheduler
        # keeps a task's inputs, so when every worker holding them dies (a SLURM job cancelled, an
        # adaptive scale-down) it recomputes them; lost scattered data would cancel every block.
        X = c.submit(_value, study.data.fit_X, pure=False, key=f"cvflow-X-{time.time_ns()}")
        y = c.submit(_value, study.data.y, pure=False, key=f"cvflow-y-{time.time_ns()}")
        w = None if study.data.sample_weight is None else c.submit(
            _value, study.data.sample_weight, pure=False, key=f"cvflow-w-{time.time_ns()}")
        inputs.update(X=X, y=y, w=w)
        futures = []
        for ps, ss in todo:
            # a block sharing its chunk with stored fits (extended study) fits only the rest
            cells = None if not done[ps, ss].any() else ~done[ps, ss]
            futures.append(c.submit(
                run_block, path, params[ps], X, y, design.train[ss], ps, ss,
                study.data.positive, path_aware, cells, w, scorer, ready, pure=False,
                key=f"cvflow-block-{ps.start}-{ss.start}-{time.time_ns()}"))
            blocks_of[futures[-1].key] = (ps, ss, cells)
        return futures

    def split(c, key, exc) -> list:
        """Refit a block that killed its workers one fit per task, each in a child process."""
        ps, ss, cells = blocks_of[key]
        block = _SplitBlock(path, ps, ss, len(study.data.y), cells)
        log.warning("the block of params %d-%d x splits %d-%d killed %d workers (%s); "
                    "refitting its %d fits one by one, each in a child process",
                    ps.start, ps.stop - 1, ss.start, ss.stop - 1, exc.allowed_failures + 1,
                    type(exc).__name__, len(block.cells))
        split_blocks[key] = block
        futures = []
        for h, s in block.cells:
            param, train = block.fit_of(h, s, params, design)
            f = c.submit(fit_isolated, param, inputs["X"], inputs["y"], train, study.data.positive,
                         inputs["w"], pure=False,
                         key=f"cvflow-fit-{ps.start + h}-{ss.start + s}-{time.time_ns()}")
            cell_of[f.key] = (key, h, s)
            futures.append(f)
        return futures

    def finish_cell(future) -> dict | None:
        """A split block's fit is back: the block's summary once all are (None before)."""
        from distributed import KilledWorker

        key, h, s = cell_of.pop(future.key)
        try:
            fitted = future.result()
        except KilledWorker as exc:   # the child's death took the worker with it
            fitted = (np.full(pred_shape(study.data.fit_X, study.data.positive), np.nan), 0.0,
                      f"worker died while fitting this alone ({exc.allowed_failures + 1} workers)")
        block = split_blocks[key]
        if not block.record(h, s, fitted):
            return None
        del split_blocks[key]
        return block.write()

    inputs: dict = {}
    blocks_of: dict = {}          # block task key -> (params slice, splits slice, cells)
    split_blocks: dict = {}       # block task key -> _SplitBlock being refitted
    cell_of: dict = {}            # fit task key -> (block task key, param, split in the block)

    def collect(c):
        from distributed import Event, KilledWorker, as_completed

        if client is not None or serves_dashboard(cluster, dashboard_port):
            result.dashboard = getattr(c, "dashboard_link", None) or None   # "" when none
        monitor = (live.start(c, workflow, params, design, study.data, path)
                   if result.dashboard else None)
        result.live = monitor and monitor.url
        notify({"event": "start", "total": n_total, "todo": n_todo, "dashboard": result.dashboard,
                "live": result.live, "execution": result.execution})
        recorder = _Recorder(path, fresh, result, notify, n_todo, monitor)
        ready = None if creating is None else Event(f"cvflow-store-{time.time_ns()}", client=c)
        if ready is not None:
            _LOCAL_READY[ready.name] = _StoreSignal()
        try:
            futures = submit_all(c, monitor and monitor.scorer, ready and ready.name)
            if creating is not None and ready is not None:
                created = False
                try:
                    creating.result()
                    created = True
                except BaseException:
                    c.cancel(futures)
                    raise
                finally:       # waiting tasks wake: they write, or raise if it failed
                    _LOCAL_READY[ready.name].settle(created)
                    ready.set()
            # the client's own loop: a client passed in need not be the default one
            queue = as_completed(futures, loop=c.loop)
            for future in queue:
                # DESIGN CHOICE: a fit that kills its worker (out of memory, a segfault,
                # os._exit) is retried by Dask (distributed.scheduler.allowed-failures, on other
                # workers) and then raises KilledWorker here; its block is then split into
                # single fits, each in a child process, so only the culprit fits are recorded
                # failed (with the exit status) and every other fit of the block completes.
                if future.key in cell_of:
                    summary = finish_cell(future)
                    if summary is None:
                        continue
                else:
                    try:
                        summary = future.result()
                    except KilledWorker as exc:
                        for f in split(c, future.key, exc):
                            queue.add(f)
                        continue
                recorder.block(summary)
            if ready is not None:
                # every block is back: the scheduler forgets the event (after a failure it
                # stays set, so a cancelled block still running finds it and raises)
                ready.clear()
        finally:
            if ready is not None:
                _LOCAL_READY.pop(ready.name, None)
            recorder.flush()
            if monitor:
                monitor.publish()            # the final state, for a scheduler that outlives us

    if client is not None:
        collect(client)
    else:
        live.enable_routes()        # the scheduler started here serves <dashboard>/cvflow
        with connect(cluster, workers=workers, dashboard_port=dashboard_port, tls=tls,
                     options=cluster_options, store=path) as c:
            collect(c)
    result.wall_seconds = time.perf_counter() - t_start
    return result
