"""The task bodies that run on Dask workers: fit a block, write its region of ``pred``, return a
small record; fit one cell of a block that killed its workers. Nothing here runs on the client.

Every body gets a :class:`TaskContext`: the store, the run lock's token (a task writes only while
its run still holds the lock: *fencing*), and the run's per-fit time limit. A fit past the limit
stops its worker process (the only way to stop a fit in compiled code): the worker's watch
records the fit at the scheduler first, so the retried task, or the client, records it failed
("timed out after N s") instead of fitting it again.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
import warnings

import numpy as np

from ..errors import LockLostError, StoreError
from ..fitting.block import BlockResult, fit_block
from ..fitting.scoring import Scoring
from ..store.memory import IN_MEMORY
from ..workflow.params import Param
from . import inflight
from .fit_gate import gate_here
from .sizing import estimate_seconds_per_fit, one_openmp_thread_here
from ..fitting.learners import pred_shape
from ..fitting.trial import check_learners, scorer_probe
from .threaded import event

log = logging.getLogger(__name__)

# a block task waits at most this long, once fitted, for the client to create a new store
STORE_READY_TIMEOUT = 600
READY_CHECK_SECONDS = 2.0      # how often a waiting block checks that its run still holds the lock


@dataclass(frozen=True, repr=False, eq=False)
class TaskContext:
    """What every task of one run shares (small: sent with each task)."""

    store: str
    run_id: str                      # names the run's scheduler metadata and store event
    token: str | None = None         # the run lock's token; None: no fencing (no lock held)
    fit_timeout: float | None = None  # seconds; None: no limit
    client_pid: int = 0              # a fit in the client's own process is never killed
    ready: str | None = None         # the name of the event set once the store is created
    test_only: bool = False          # fits predict their test rows alone (execution.predict_rows)

    def timeouts_key(self, task: str) -> list[str]:
        """The scheduler metadata key of the fits of ``task`` that ran out of time."""
        return ["cvflow", self.run_id, "timed-out", task]




def _value(value):
    """Task body holding the data (recomputable, unlike scattered data)."""
    return value


# --- the time limit ------------------------------------------------------------------------------

class _Watch:
    """One thread per worker process that stops the process when a fit outlives its deadline.

    DESIGN CHOICE: a Python thread cannot be interrupted inside compiled code (libsvm, a BLAS
    call), so a fit over its limit ends its worker process; the nanny starts a new one and the
    scheduler retries the task, which skips the cells recorded here. The record goes to the
    scheduler (``Client.set_metadata``) before the process ends, so it survives it.
    Tested by tests/test_fresh_process.py (a fit that sleeps forever).
    """

    def __init__(self):
        self.cond = threading.Condition()
        self.current: dict[int, tuple] = {}   # thread -> (deadline, ctx, task, cells, client)
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def fit(self, ctx: TaskContext, task: str, cells: list, client):
        seconds = ctx.fit_timeout * len(cells)       # a path group: its cells' limits together
        me = threading.get_ident()
        with self.cond:
            self.current[me] = (time.monotonic() + seconds, ctx, task, cells, client)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="cvflow-fit-timeout")
                self.thread.start()
            self.cond.notify()
        try:
            yield
        finally:
            with self.cond:
                self.current.pop(me, None)

    def _run(self) -> None:
        while True:
            with self.cond:
                now = time.monotonic()
                late = [self.current.pop(k) for k, v in list(self.current.items()) if v[0] <= now]
                if not late:
                    wait = min((v[0] for v in self.current.values()), default=now + 3600) - now
                    self.cond.wait(max(wait, 0.01))
                    continue
            for _, ctx, task, cells, client in late:
                _stop_late_fit(ctx, task, cells, client)


def _stop_late_fit(ctx: TaskContext, task: str, cells: list, client) -> None:
    """Record ``cells`` of ``task`` as timed out at the scheduler, then end this process."""
    key = ctx.timeouts_key(task)
    try:
        known = client.get_metadata(key, default=[])
        client.set_metadata(key, sorted({tuple(c) for c in known} | {tuple(c) for c in cells}))
    except Exception as exc:  # noqa: BLE001 - the process ends all the same
        log.error("could not record the timed-out fits %s of %s: %s", cells, task, exc)
    log.error("fits %s of %s ran past execution.fit_timeout (%g s); stopping this worker process",
              cells, task, ctx.fit_timeout)
    if os.getpid() == ctx.client_pid:     # never the client (the threads route refuses limits)
        return
    os.kill(os.getpid(), signal.SIGKILL)


_WATCH = _Watch()


def _worker_task() -> tuple[object, str]:
    """This worker's client (for the scheduler metadata) and the running task's key."""
    from distributed import get_client, get_worker

    return get_client(), str(get_worker().get_current_task())


def _timed_out(ctx: TaskContext):
    """(cells recorded as timed out for this task, a watch for its fits), or (set(), None)
    without a time limit."""
    if not ctx.fit_timeout:
        return set(), None
    client, task = _worker_task()
    done = {tuple(c) for c in client.get_metadata(ctx.timeouts_key(task), default=[])}
    return done, (lambda cells: _WATCH.fit(ctx, task, cells, client))


# --- fencing -------------------------------------------------------------------------------------

def check_fence(ctx: TaskContext) -> None:
    """LockLostError unless the run that sent this task still holds the store's run lock."""
    if ctx.token is None:
        return
    # DESIGN CHOICE (issue 41 item 2): here, as the isolated fits' module below: a run without
    # a store (no lock) or without isolation never loads them
    from ..store.lock import LinkedLock, read_lock

    try:
        record = read_lock(ctx.store)
    except LinkedLock:               # a link in its place: no run holds it
        record = None
    if not record or record.get("token") != ctx.token:
        raise LockLostError(f"store: {ctx.store}: this run no longer holds the run lock "
                            f"({'another run took it' if record else 'the lock is gone'}); "
                            "its blocks are not written")


# the stores this process saw created (their events' names): a block checks its store once per
# process, not once per block (opening it parses every array's metadata, ~15 ms)
_SEEN_READY: set[str] = set()


_SEEN_WHOLE: set[str] = set()

# the `pred` array of the last runs whose blocks this process wrote, by (run, store): opened
# once a run, not once a block (~0.8 ms of zarr's metadata parsing each, GIL held, beside the
# other thread's fits); a run's store does not change shape while it holds the lock
_PRED: dict[tuple[str, str], object] = {}
_PRED_RUNS = 4
_PRED_LOCK = threading.Lock()


def _pred(ctx: TaskContext, open_pred):
    """The run's ``pred`` array in this process (``open_pred(store)`` the first time)."""
    key = (ctx.run_id, ctx.store)
    with _PRED_LOCK:
        pred = _PRED.get(key)
    if pred is None:
        pred = open_pred(ctx.store)
        with _PRED_LOCK:
            _PRED[key] = pred
            while len(_PRED) > _PRED_RUNS:
                del _PRED[next(iter(_PRED))]
    return pred


def _wait_ready(ctx: TaskContext, *, whole: bool = False) -> None:
    """Wait for the client's word that the store's ``pred`` can be written (the rest of the store
    is made meanwhile, :func:`cvflow.store.creation.create`), and with ``whole`` for the whole
    store (:func:`_wait_whole`); StoreError if its creation failed before that or took more
    than ``STORE_READY_TIMEOUT`` seconds."""
    if ctx.ready not in _SEEN_READY:
        _wait_pred(ctx)
        _SEEN_READY.add(ctx.ready)
    if whole and ctx.ready not in _SEEN_WHOLE:
        _wait_whole(ctx)


def _wait_pred(ctx: TaskContext) -> None:
    """Wait for the run's store event (:func:`_wait_ready`)."""
    ready = event(ctx.ready)              # this process's (threaded route), or distributed's
    if ready is None:
        from distributed import Event

        ready = Event(ctx.ready)
    # DESIGN CHOICE: waited for in slices, the run's lock checked between them: a task that
    # outlived its run (a block the scheduler retried after the loop had moved on) would wait
    # the whole deadline for an event its run cleared, holding its worker's only thread (seen:
    # a later run on the same warm cluster stalled behind it for 10 minutes)
    deadline = time.monotonic() + STORE_READY_TIMEOUT
    woken = False
    while not woken and time.monotonic() < deadline:
        woken = ready.wait(timeout=min(READY_CHECK_SECONDS, deadline - time.monotonic()))
        if not woken:
            check_fence(ctx)
    from ..store.group import writable

    if not (woken and writable(ctx.store)):
        raise StoreError(f"store: {ctx.store} was not created (or not within "
                         f"{STORE_READY_TIMEOUT} s); this block's predictions were not written")


def _wait_whole(ctx: TaskContext) -> None:
    """Wait until the store's creation has ended (the event says only that ``pred`` can be
    written): a block that reads its stored cells (a chunk shared with a raced or extended
    study's other fits) opens the whole store. The run's lock is checked as in _wait_ready;
    StoreError past ``STORE_READY_TIMEOUT``."""
    from ..store.group import is_store

    deadline = time.monotonic() + STORE_READY_TIMEOUT
    fenced, pause = time.monotonic(), 0.01
    while not is_store(ctx.store):
        if time.monotonic() > deadline:
            raise StoreError(f"store: {ctx.store} was not created within {STORE_READY_TIMEOUT} "
                             "s; this block's predictions were not written")
        if time.monotonic() - fenced > READY_CHECK_SECONDS:
            check_fence(ctx)              # a creation that failed: the run let its lock go
            fenced = time.monotonic()
        time.sleep(pause)
        pause = min(2 * pause, 0.1)
    _SEEN_WHOLE.add(ctx.ready)


# --- the bodies ----------------------------------------------------------------------------------

def run_block(ctx: TaskContext, params: list[Param], X, y, train: np.ndarray,
              params_slice: slice, splits_slice: slice, positive, path_aware: bool = True,
              todo: np.ndarray | None = None, sample_weight=None, scorer=None,
              isolated: bool = False, scoring: Scoring | None = None) -> dict:
    """Fit one block, write its region, return a small summary record.

    ``params`` are the study's params (a task input sent once, as X and y); the block fits
    ``params[params_slice]``.

    ``todo`` (params, splits) marks the cells to fit in a block shared with stored fits of an
    extended study; None fits the whole block. ``scorer`` adds two loss sums per fit
    (``terms``) for the live page, or the error it raised (``terms_error``: the block is
    recorded all the same). Cells recorded as timed out by an earlier attempt of this task are
    recorded failed, not fitted again. ``isolated``: every fit in a child process
    (:mod:`cvflow.fitting.isolated`), for a block that killed its workers. ``scoring``: the
    study's scorers, applied to every model where it is fitted; their values return in the
    record's status, which the client writes beside ``done`` (``score``, ``train_score``,
    ``score_time``).
    """
    t0 = time.perf_counter()
    params = params[params_slice]
    late, watch = _timed_out(ctx)
    # the threads route's fits: side by side where that pays (cvflow.execution.fit_gate)
    gate = gate_here()
    if gate is not None and watch is None:
        first = params_slice.start          # the gate knows a param by its place in the study
        watch = lambda cells: gate.fit([(first + h, s) for h, s in cells])  # noqa: E731
    attempted = todo                 # the cells this run fits, the timed-out ones included
    if late:
        todo = np.ones((len(params), train.shape[0]), bool) if todo is None else todo.copy()
        for h, s in late:
            todo[h, s] = False
    if isolated:
        result = _fit_isolated(ctx, params, X, y, train, params_slice, splits_slice, positive,
                               todo, sample_weight, scoring)
    elif todo is None:
        with one_openmp_thread_here(), \
                inflight.fitting(inflight.block_record(params, params_slice, splits_slice)):
            result = fit_block(params, X, y, train, params_slice=params_slice,
                               splits_slice=splits_slice, positive=positive,
                               path_aware=path_aware, sample_weight=sample_weight, watch=watch,
                               scoring=scoring, test_only=ctx.test_only)
    else:                 # the stored cells are read: the whole store must exist
        if ctx.ready is not None:
            _wait_ready(ctx, whole=True)
        with one_openmp_thread_here(), \
                inflight.fitting(inflight.block_record(params, params_slice, splits_slice)):
            result = fit_missing(ctx.store, params, X, y, train, params_slice, splits_slice,
                                 positive, path_aware, todo, sample_weight, watch, scoring)
    for h, s in late:
        from ..fitting.isolated import timeout_message     # a fit timed out: rare

        result.pred[h, s] = np.nan
        result.failed[h, s], result.error[h, s] = True, timeout_message(ctx.fit_timeout)
        result.fit_seconds[h, s] = ctx.fit_timeout
        _unscored(result, h, s)
    if ctx.ready is not None:
        _wait_ready(ctx)
    check_fence(ctx)
    # DESIGN CHOICE: a cube kept in memory (a study without a store) gets its predictions with
    # the block's record, which the client puts in (cvflow.store.memory.MemoryCube.write); on
    # the threaded route that is the array itself, no copy. A store's are written here, by the
    # block's one task, and never travel.
    memory = ctx.store == IN_MEMORY
    if not memory:
        from ..store import writes      # zarr: only where a store is written (test_startup)

        writes.write_pred(ctx.store, result, pred=_pred(ctx, writes.open_pred))
    result.fitted = attempted
    summary = summarize(result, attempted, keep_pred=memory)
    if scorer is not None:              # the live page's numbers: never a reason to fail a block
        try:
            summary["terms"] = scorer(result.pred, y, train, params)
        except Exception as exc:  # noqa: BLE001 - the block is written; the client warns once
            summary["terms_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    summary["task_seconds"] = time.perf_counter() - t0
    return summary


def _fit_isolated(ctx: TaskContext, params: list[Param], X, y, train: np.ndarray,
                  params_slice: slice, splits_slice: slice, positive, todo: np.ndarray | None,
                  sample_weight, scoring: Scoring | None = None) -> BlockResult:
    """The block's cells ``todo`` fitted one by one in child processes; stored cells kept."""
    shape = (len(params), train.shape[0])
    if todo is None:
        result = _with_scores(BlockResult(params_slice, splits_slice,
                                          np.full(shape + pred_shape(X, positive), np.nan),
                                          np.zeros(shape, bool), np.full(shape, "", dtype=object),
                                          np.zeros(shape)), scoring)
    else:                 # the stored cells are read: the whole store must exist
        if ctx.ready is not None:
            _wait_ready(ctx, whole=True)
        result = _stored(ctx.store, params_slice, splits_slice, scoring)
    cells = [(int(h), int(s)) for h, s in np.argwhere(np.ones(shape, bool) if todo is None else todo)]
    from ..fitting.isolated import fit_cells

    fitted = fit_cells(params, X, y, train, cells, positive=positive, sample_weight=sample_weight,
                       timeout=ctx.fit_timeout, memory_limit=_worker_memory_limit(),
                       scoring=scoring)
    for (h, s), (pred, seconds, error, *scores) in fitted.items():
        result.pred[h, s], result.fit_seconds[h, s], result.error[h, s] = pred, seconds, error
        result.failed[h, s] = bool(error)
        if scoring is not None:
            _put_scores(result, h, s, scores[0] if scores else None)
    return result


def _with_scores(result: BlockResult, scoring: Scoring | None) -> BlockResult:
    """``result`` with NaN scores (no time) for every cell, when the study has scorers."""
    if scoring is not None and scoring.scorers:
        shape = result.failed.shape
        result.score = scoring.nan(shape)
        result.train_score = scoring.nan(shape) if scoring.train else None
        result.score_time, result.notes = np.zeros(shape), []
    return result


def _put_scores(result: BlockResult, h: int, s: int, scores) -> None:
    """One fit's scores (:class:`cvflow.fitting.scoring.Scores`; None: it was not scored)."""
    if scores is None:
        _unscored(result, h, s)
        return
    result.score[h, s], result.score_time[h, s] = scores.test, scores.seconds
    if result.train_score is not None:
        result.train_score[h, s] = scores.train
    result.notes += [n for n in scores.errors if n not in result.notes]


def _unscored(result: BlockResult, h: int, s: int) -> None:
    """A cell whose fit was not scored (it failed, or ran out of time): NaN scores, no time."""
    if result.score is not None:
        result.score[h, s] = np.nan
        result.score_time[h, s] = 0.0
        if result.train_score is not None:
            result.train_score[h, s] = np.nan


def _stored(store: str, params_slice: slice, splits_slice: slice,
            scoring: Scoring | None) -> BlockResult:
    """A block's stored cells as a BlockResult (scores too, with scorers)."""
    from ..store import cube as cube_store

    stored = cube_store.read_block(store, params_slice, splits_slice)
    result = _with_scores(BlockResult(params_slice, splits_slice, stored["pred"], stored["failed"],
                                      stored["error"], stored["fit_seconds"]), scoring)
    for name in ("score", "train_score", "score_time"):
        if getattr(result, name) is not None and name in stored:
            setattr(result, name, stored[name])
    return result


def _worker_memory_limit() -> int | None:
    """The memory limit in bytes of the Dask worker running this task, or None."""
    distributed = sys.modules.get("distributed")     # not loaded: no Dask worker runs this
    try:
        return distributed.get_worker().memory_manager.memory_limit or None
    except (ValueError, AttributeError):
        return None


def time_fits(ctx: TaskContext, params: list[Param], X, y, train: np.ndarray, positive,
              path_aware: bool) -> float:
    """Seconds per fit as blocks fit them (:func:`cvflow.execution.sizing.estimate_seconds_per_fit`),
    timed on a worker: a learner's own fit code never runs on the client. Under the run's
    time limit (all of it for the whole timing)."""
    _, watch = _timed_out(ctx)
    with (watch or (lambda cells: contextlib.nullcontext()))([(0, 0)]):
        return estimate_seconds_per_fit(params, X, y, train, positive=positive,
                                        path_aware=path_aware)


def trial_fits(workflow, data, where: str, check: bool = True
               ) -> tuple[list[tuple[type, str]], list[str], dict[str, list[str]]]:
    """The pre-run check (:func:`cvflow.fitting.trial.check_learners`) on a worker: a learner's own fit
    code never runs on the client. Raises its InputError; returns the warnings it gave, as
    (category, message), the warnings it logged, and the keys of scorers returning dicts.
    ``check=False``: the keys only (:func:`cvflow.fitting.trial.scorer_probe`, which never
    raises)."""
    said: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = said.append                            # type: ignore[method-assign]
    checks_log = logging.getLogger("cvflow.fitting.trial")
    checks_log.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keys = (check_learners(workflow, data, where) if check
                    else scorer_probe(workflow, data))
    finally:
        checks_log.removeHandler(handler)
    return [(w.category, str(w.message)) for w in caught], [r.getMessage() for r in said], keys


def summarize(result: BlockResult, todo: np.ndarray | None, *, keep_pred: bool = False) -> dict:
    """The small record of a written block: its status and counts of the fits done now
    (``keep_pred``: its predictions too, for a cube in memory)."""
    summary = result.summary()
    # the client records it (write_status, or MemoryCube.write with the predictions)
    summary["status"] = result if keep_pred else result.without_pred()
    fitted = np.ones(result.failed.shape, dtype=bool) if todo is None else todo
    summary.update(fits=int(fitted.sum()), failed=int(result.failed[fitted].sum()),
                   seconds=float(np.nansum(result.fit_seconds[fitted])))
    summary["errors"] = sorted({str(e) for e in result.error[fitted] if e})
    summary["notes"] = list(result.notes or [])
    return summary


def fit_missing(store: str, params: list[Param], X, y, train: np.ndarray, params_slice: slice,
                splits_slice: slice, positive, path_aware: bool, todo: np.ndarray,
                sample_weight=None, watch=None, scoring: Scoring | None = None) -> BlockResult:
    """Fit only the cells ``todo`` (params, splits) of a block; keep the stored ones.

    The stored cells of the block's chunk are read and returned unchanged, so the caller
    writes the whole chunk-aligned block (one writer per chunk) with the old bytes intact.
    Params needing the same splits are fitted together (path-aware groups stay intact).
    """
    stored = _stored(store, params_slice, splits_slice, scoring)
    patterns: dict[tuple, list[int]] = {}
    for h in range(todo.shape[0]):
        cols = tuple(np.flatnonzero(todo[h]).tolist())
        if cols:
            patterns.setdefault(cols, []).append(h)
    for cols, rows in patterns.items():
        c, r = list(cols), list(rows)
        inner = None if watch is None else (lambda cells: watch([(r[h], c[s]) for h, s in cells]))
        res = fit_block([params[h] for h in r], X, y, train[c], params_slice=slice(0, len(r)),
                        splits_slice=slice(0, len(c)), positive=positive, path_aware=path_aware,
                        sample_weight=sample_weight, watch=inner, scoring=scoring)
        ix = np.ix_(r, c)
        for name in ("pred", "failed", "error", "fit_seconds", "score", "train_score",
                     "score_time"):
            if getattr(stored, name) is not None:
                getattr(stored, name)[ix] = getattr(res, name)
        if stored.notes is not None:
            stored.notes += [n for n in res.notes or [] if n not in stored.notes]
    return stored
