"""The one loop: submit a run's blocks to a Dask scheduler, record what comes back.

Whatever runs the tasks (a scheduler in this process with thread workers, local worker
processes, SLURM jobs, a running scheduler), this loop owns the three policies:

- **a dead worker**: Dask retries a task whose worker died (``allowed-failures``), then raises
  ``KilledWorker``; the block is then fitted again with each fit in a child process
  (:mod:`cvflow.fitting.isolated`), so that only the fits that end their process are recorded failed,
  with the exit status; data lost with the workers is sent again;
- **a fit over its time limit**: the worker's watch (:mod:`cvflow.execution.tasks`) ends the process
  after recording the fit at the scheduler; the retried task skips it; in a child process the
  fit alone is stopped;
- **no progress**: when nothing comes back for ``stall_seconds`` while no worker uses CPU (a
  worker in this process: the CPU of all but its event loop and the run's thread,
  :mod:`.fit_cpu`), or no worker is connected for
  ``no_worker_seconds``, the run stops with a
  :class:`~cvflow.errors.StallError` that names the blocks it waited on and their stacks;
  and a run that lost its store's lock stops at once (:class:`~cvflow.errors.LockLostError`).

Every wait here has a deadline: the loop wakes at least once a second.
"""
from __future__ import annotations

import collections
import contextvars
import dataclasses
import logging
import queue
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable
from concurrent.futures import CancelledError

import numpy as np

from ..errors import LockLostError
from ..workflow.params import Param
from .fit_cpu import FitCPU
from .tasks import TaskContext, _value, run_block, time_fits, trial_fits
from .. import stalls
from . import interrupts
from .lost_workers import replace_lost_workers

log = logging.getLogger(__name__)


def submit_data(client, fn, *args, key: str):
    """``client.submit(fn, *args)`` of a task that carries the study's data (X, y, weights)."""
    # DESIGN CHOICE: the data travels once per run, in the task that holds it (see
    # Loop.submit_inputs); distributed's "Sending large graph" advice (scatter, dask arrays)
    # does not apply to it, and would print on every run of a large study.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        return client.submit(fn, *args, pure=False, key=key)


WAKE_SECONDS = 1.0
# times a block fitted in child processes is sent again after its workers died under it
ISOLATED_RETRIES = 3


@dataclass(repr=False, eq=False)
class Block:
    """A chunk-aligned rectangle of fits: its slices and the cells still to fit (None: all)."""

    params: slice
    splits: slice
    todo: np.ndarray | None = None
    isolated: bool = False            # its fits in child processes: it killed its workers
    deaths: int = 0                   # KilledWorker of its isolated task so far
    lost: int = 0                     # times the scheduler lost its result (fitted again)


# seconds per fit assumed when the timing task fails: blocks of a few fits each
FALLBACK_SECONDS_PER_FIT = 0.05


class _NeverRaised(Exception):
    """Stands for distributed's KilledWorker where distributed is not loaded (no worker dies)."""


def _killed_worker() -> type[Exception]:
    """distributed's KilledWorker, when distributed runs the tasks (it is imported then)."""
    module = sys.modules.get("distributed")
    return module.KilledWorker if module is not None else _NeverRaised


# times a one-off task whose result was lost at the scheduler is submitted again
LOST_RESULT_RETRIES = 2


class Results:
    """Where finished tasks come back: :meth:`watch` a future, :meth:`get` then gives
    ``(future, value, error)`` once its result is read (``error``: what reading it raised)."""

    # DESIGN CHOICE: a distributed future's result is gathered from the worker holding it;
    # when that worker dies first, distributed's gather waits, without a deadline, for the
    # scheduler to compute the task again, which takes a worker. Read in the loop's own
    # thread, that gather held the loop, whose watchdog is what starts workers in place of
    # lost ones and stops a run that has none: a run whose segfaulting fits killed both
    # workers at load 14 (nannies dropped by lost-worker-timeout) waited in it with no worker
    # for as long as it was left (tests/test_inflight.py, 2 of 7 runs; tests/test_run.py
    # test_a_block_whose_result_never_comes_back_stops_the_run). So results are read in a
    # daemon thread of their own, one at a time; the loop wakes every WAKE_SECONDS
    # meanwhile. The threaded route's futures hold their result: read where they finish.

    def __init__(self, client):
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.here = _threaded(client)
        self._todo: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._reading = False

    def watch(self, future) -> None:
        future.add_done_callback(self._read if self.here else self._read_later)

    def get(self, timeout: float):
        """The next ``(future, value, error)`` read; queue.Empty after ``timeout`` s."""
        return self.done.get(timeout=timeout)

    def _read(self, future) -> None:
        try:
            value, error = future.result(), None
        except BaseException as exc:  # noqa: BLE001 - given to the loop, which decides
            value, error = None, exc
        self.done.put((future, value, error))

    def _read_later(self, future) -> None:
        with self._lock:
            self._todo.append(future)
            if self._reading:
                return
            self._reading = True
        threading.Thread(target=self._drain, name="cvflow-results", daemon=True).start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._todo:
                    self._reading = False
                    return
                future = self._todo.popleft()
            self._read(future)


def lost_result(future, exc: BaseException) -> bool:
    """Whether ``exc``, raised reading ``future``'s result, says the scheduler lost the result
    (the task was fine): a CancelledError, or distributed's UnboundLocalError ('result') when a
    gather it cancelled under load is joined ("Couldn't gather keys ... forgotten"), as
    opposed to the task's own error (its status "error")."""
    if isinstance(exc, CancelledError):
        return True
    return isinstance(exc, UnboundLocalError) and getattr(future, "status", None) != "error"


def _one_task_result(client, submit: Callable[[str], Any], key: str):
    """The result of a one-off task (the timing, the check) that ``submit(key)`` submits,
    released once read; None when it killed its workers (KilledWorker). A result lost at the
    scheduler (the gather cancelled) is computed again under a new key, at most
    ``LOST_RESULT_RETRIES`` times. StallError when the workers make no progress
    (:class:`Watchdog`)."""
    KilledWorker = _killed_worker()
    watchdog = Watchdog(client)
    results = Results(client)
    for attempt in range(LOST_RESULT_RETRIES + 1):
        future = submit(key if not attempt else f"{key}-again{attempt}")
        results.watch(future)
        # DESIGN CHOICE: the result is gathered once, without a timeout, in the results'
        # thread (Results), while this one wakes each second for the watchdog. Polling
        # ``future.result(timeout=...)`` let a timeout cancel distributed's gather; a later
        # gather joined the cancelled one and distributed's ``sync`` raised UnboundLocalError
        # ('result'): seen once in 3 `cvflow run`s under load, beside the scheduler's
        # "Couldn't gather keys: {'cvflow-timing-...': 'forgotten'}".
        try:
            while True:
                try:
                    read, result, error = results.get(WAKE_SECONDS)
                except queue.Empty:
                    interrupts.check()
                    watchdog.check([future])
                    continue
                if read is future:
                    break
        except BaseException:
            future.cancel()           # its gather, if it waits, ends
            raise
        try:
            if error is not None:
                raise error
        except KilledWorker:
            future.cancel()
            return None
        except (CancelledError, UnboundLocalError) as exc:
            if not lost_result(future, exc):
                raise
            log.warning("the result of %s was lost at the scheduler; computing it again",
                        future.key)
            continue
        future.release()       # nothing to recompute if the worker holding it dies
        return result
    raise RuntimeError(f"the result of {key} was lost at the scheduler "
                       f"{LOST_RESULT_RETRIES + 1} times; is the scheduler shared or "
                       "short of memory?")


def time_on_workers(client, ctx: TaskContext, study, path_aware: bool) -> float:
    """The timed estimate of one fit's seconds, from a task on the workers
    (:func:`cvflow.execution.tasks.time_fits`); ``FALLBACK_SECONDS_PER_FIT`` when the timing killed its
    workers. StallError when the workers make no progress (:class:`Watchdog`)."""
    d = study.data
    seconds = _one_task_result(client, lambda key: submit_data(
        client, time_fits, ctx, study.params, d.fit_X, d.fit_y, study.design.train[0], d.positive,
        path_aware, key=key), f"cvflow-timing-{ctx.run_id}")
    if seconds is None:
        log.warning("timing the fits on the workers failed (KilledWorker); blocks are sized for "
                    "%g s a fit", FALLBACK_SECONDS_PER_FIT)
        return FALLBACK_SECONDS_PER_FIT
    return float(seconds)


def check_on_workers(client, ctx: TaskContext, workflow, data, where: str, check: bool = True
                     ) -> dict[str, list[str]]:
    """The pre-run check of each learner (:func:`cvflow.execution.tasks.trial_fits`) in a task on the
    workers; its warnings are given here, the keys of the scorers that return a dict of scores
    are returned. InputError when a learner cannot fit; a check that
    kills its workers is logged and the study goes on (its fits are recorded failed, each
    with how its process ended). StallError when the workers make no progress. ``check=False``:
    the scorers' keys only (``execution.trial_fits: false``)."""
    said = _one_task_result(client, lambda key: submit_data(
        client, trial_fits, workflow, data, where, check, key=key), f"cvflow-check-{ctx.run_id}")
    if said is None:
        log.warning("%s: the trial fit before the run ended its worker process; the study runs "
                    "and records each fit that ends its process as failed", where)
        return {}
    given, logged, keys = said
    for category, message in given:
        warnings.warn(message, category, stacklevel=3)
    for message in logged:
        logging.getLogger("cvflow.fitting.trial").warning("%s", message)
    return keys


# DESIGN CHOICE: a suite (cvflow.execution.suite_run) runs each data set as the run it is, each
# in a thread of its own on the suite's one client; the loop of data set k says when its tail
# begins (no task of its left waiting for a worker: as many outstanding as the workers have
# threads), and the suite then starts data set k+1, whose blocks take the workers k's tail
# leaves idle. Set (a callable, called once) in the thread that runs the data set.
TAIL: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "cvflow_tail", default=None)


def _threaded(client) -> bool:
    """Whether ``client`` is this process's threads (a ThreadedClient: its ``workers`` a count)."""
    return isinstance(getattr(client, "workers", None), int)


def worker_threads(client) -> int:
    """The threads the client's workers have (a ThreadedClient: its pool's), at least 1."""
    if _threaded(client):
        return client.workers
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - a scheduler that does not answer: one thread assumed
        return 1


class Loop:
    """Runs ``blocks`` on ``client``: :meth:`run` returns once every block is recorded.

    ``record(summary)`` is called in this thread for every written block; ``idle()`` when
    nothing came back for ``WAKE_SECONDS`` (what ``record`` held back is written then);
    ``lock_lost()`` says whether the run lost its store's lock (checked at every wake-up).
    """

    def __init__(self, client, ctx: TaskContext, *, params: list[Param], train: np.ndarray,
                 data, path_aware: bool, record: Callable[[dict], None],
                 idle: Callable[[], None] = lambda: None,
                 lock_lost: Callable[[], bool] = lambda: False, scorer=None, scoring=None):
        self.client, self.ctx, self.params, self.train = client, ctx, params, train
        self.scoring = scoring         # the study's scorers (cvflow.fitting.scoring.Scoring)
        self.data, self.path_aware, self.record, self.scorer = data, path_aware, record, scorer
        self.idle, self.lock_lost = idle, lock_lost
        self.watchdog = Watchdog(client)
        self.results = Results(client)
        self.futures: dict[str, object] = {}        # key -> future still running
        self.blocks: dict[str, Block] = {}           # block task key -> its block
        self.inputs: dict = {}
        self.tail = TAIL.get()            # the suite's: called once when this run's tail begins
        self.threads = (0, -1.0)          # the workers' threads, when last asked

    # --- submitting ---------------------------------------------------------------------------

    def _watch(self, future) -> None:
        self.futures[future.key] = future
        self.results.watch(future)

    def submit_inputs(self) -> None:
        # DESIGN CHOICE: X and y travel as two tasks holding them, not scattered: the scheduler
        # keeps a task's inputs, so when every worker holding them dies (a SLURM job cancelled,
        # an adaptive scale-down) it recomputes them; lost scattered data would cancel every block.
        # The params travel the same way, once: sent with every task (1000 params, ~57 kB
        # pickled) they held 0.4 GiB of the client at 1,667 tasks and peaked it at 1.1 GiB
        # against 0.12 GiB (a LocalCluster of 2 processes, 1,667 no-op tasks; 10^7 ridge fits:
        # 2.95 GiB), the in-process scheduler keeping each task's arguments.
        d, stamp = self.data, time.time_ns()
        c = self.client
        self.inputs = {
            "params": submit_data(c, _value, self.params, key=f"cvflow-params-{stamp}"),
            "X": submit_data(c, _value, d.fit_X, key=f"cvflow-X-{stamp}"),
            "y": submit_data(c, _value, d.fit_y, key=f"cvflow-y-{stamp}"),
            "w": None if d.sample_weight is None else submit_data(c, _value, d.sample_weight,
                                                                  key=f"cvflow-w-{stamp}")}

    def submit(self, blocks: list[Block]) -> None:
        if not self.inputs:
            self.submit_inputs()
        i, stamp = self.inputs, time.time_ns()
        for b in blocks:
            kind = "isolated" if b.isolated else "block"
            key = f"cvflow-{kind}-{b.params.start}-{b.splits.start}-{stamp}"
            self.blocks[key] = b
            self._watch(self.client.submit(
                run_block, self.ctx, i["params"], i["X"], i["y"], self.train[b.splits],
                b.params, b.splits, self.data.positive, self.path_aware, b.todo, i["w"],
                self.scorer, b.isolated, scoring=self.scoring, pure=False, key=key))

    def _lost_input(self, future, exc) -> bool:
        """Whether ``future`` failed because an input task (X, y, weights) lost too many workers
        (the dead workers held it, or ran it): then the inputs are submitted anew and the task
        again, and True."""
        if str(exc.task) == str(future.key):
            return False
        log.warning("the workers holding the data died (%s); sending it again", exc.task)
        lost = [name for name, f in self.inputs.items() if f is not None and f.status == "error"]
        stamp = time.time_ns()
        for name in lost:
            value = {"params": self.params, "X": self.data.fit_X, "y": self.data.fit_y,
                     "w": self.data.sample_weight}[name]
            self.inputs[name] = submit_data(self.client, _value, value,
                                            key=f"cvflow-{name}-{stamp}")
        self.submit([self.blocks.pop(future.key)])
        return True

    def cancel(self) -> None:
        """Cancel every task not back yet (running ones end with their fit; fenced writes)."""
        if self.futures:
            try:
                self.client.cancel(list(self.futures.values()))
            except Exception as exc:  # noqa: BLE001 - the client may be closing
                log.debug("cancelling the run's tasks: %s", exc)
        self.futures.clear()

    # --- the loop -----------------------------------------------------------------------------

    def _at_tail(self) -> None:
        """Tell the suite (:data:`TAIL`) once no block of this run waits for a worker."""
        if self.tail is None:
            return
        now = time.monotonic()
        if now - self.threads[1] > 5 * WAKE_SECONDS:        # workers come and go (SLURM)
            self.threads = (worker_threads(self.client), now)
        if len(self.futures) <= self.threads[0]:
            tail, self.tail = self.tail, None
            tail()

    def run(self) -> None:
        try:
            self._at_tail()
            while self.futures:
                try:
                    read = self.results.get(WAKE_SECONDS)
                except queue.Empty:
                    read = None
                interrupts.check()        # a Ctrl-C Python could not raise where it came
                if self.lock_lost():
                    raise LockLostError(f"store: {self.ctx.store}: another run took over the run "
                                        "lock; this run stopped and cancelled its tasks")
                if read is None:
                    self.idle()
                    # a future being read stays in self.futures: watched, and cancelled
                    self.watchdog.check(list(self.futures.values()))
                    continue
                future, value, error = read
                if self.futures.pop(future.key, None) is None:
                    continue                              # cancelled, or seen already
                self._at_tail()
                self.watchdog.progressed()
                summary = self._take(future, value, error)
                if summary is not None:
                    self.record(summary)
        finally:
            self.cancel()

    def _take(self, future, value, error: BaseException | None) -> dict | None:
        """A finished task's block summary (``value``, or ``error``: what reading it raised,
        :class:`Results`), or None (the block was sent again)."""
        KilledWorker = _killed_worker()
        try:
            if error is not None:
                raise error
            return value
        except (CancelledError, UnboundLocalError) as exc:
            # DESIGN CHOICE: a block whose result the scheduler lost is a block whose worker
            # died: fitted again (it rewrites the same chunk of pred), at most
            # LOST_RESULT_RETRIES times
            if not lost_result(future, exc):
                raise
            block = self.blocks.pop(future.key)
            if block.lost >= LOST_RESULT_RETRIES:
                raise RuntimeError(
                    f"the result of the block of params {block.params.start}-"
                    f"{block.params.stop - 1} x splits {block.splits.start}-"
                    f"{block.splits.stop - 1} was lost at the scheduler "
                    f"{block.lost + 1} times; is the scheduler shared or short of memory?"
                ) from exc
            log.warning("the result of %s was lost at the scheduler; fitting its block again",
                        future.key)
            self.submit([dataclasses.replace(block, lost=block.lost + 1)])
            return None
        except KilledWorker as exc:
            if self._lost_input(future, exc):
                return None
            block = self.blocks.pop(future.key)
            if block.isolated and block.deaths < ISOLATED_RETRIES:
                # a task queued on a worker dies with it, though its own fits are safe in child
                # processes: another block killed that worker; send it again
                self.submit([dataclasses.replace(block, deaths=block.deaths + 1)])
                return None
            if block.isolated:
                raise RuntimeError(
                    f"the workers running the block of params {block.params.start}-"
                    f"{block.params.stop - 1} x splits {block.splits.start}-{block.splits.stop - 1} "
                    f"died {ISOLATED_RETRIES + 1} times although its fits ran in child "
                    "processes: something else ends the workers (memory, an external kill)") from None
            # DESIGN CHOICE: a block whose task killed its workers (Dask retried it once,
            # allowed-failures) is fitted again in child processes, one fit at a time
            # (cvflow.fitting.isolated): only the fits that end their process are recorded failed,
            # with the exit status, and the workers live.
            log.warning("the block of params %d-%d x splits %d-%d killed %d workers; refitting its "
                        "fits one at a time in child processes", block.params.start,
                        block.params.stop - 1, block.splits.start, block.splits.stop - 1,
                        exc.allowed_failures + 1)
            self.submit([dataclasses.replace(block, isolated=True)])
            return None


class Watchdog(stalls.Watchdog):
    """The run's :class:`cvflow.stalls.Watchdog` (config ``cvflow.execution.stall-seconds``
    and ``no-worker-seconds``): a worker in this process (``inproc://``) is busy by the fits'
    own CPU (:class:`.fit_cpu.FitCPU`), and workers lost for 30 s are started again."""

    def __init__(self, client) -> None:
        super().__init__(client, "execution", "the run")
        self.last_revived = 0.0
        self.here: FitCPU | None = None       # the fits' CPU, for a worker in this process

    def busy(self, workers: dict) -> bool:
        """Whether a worker uses CPU: Dask's ``metrics.cpu`` (its process's), or for workers in
        this process (``inproc://``) the fits' own (:class:`.fit_cpu.FitCPU`)."""
        here = [a for a in workers if str(a).startswith("inproc://")]
        cpus = [w.get("metrics", {}).get("cpu", 0.0) for a, w in workers.items() if a not in here]
        if here and self.here is None:
            # measures from now on; no measurement yet is not idleness (a first check coming
            # late under load would otherwise call a computing fit stalled)
            self.here = FitCPU(self.client)
            return True
        if here:
            cpus.append(self.here.percent())
        return any(cpu > stalls.IDLE_CPU_PERCENT for cpu in cpus)

    def still_quiet(self, workers: dict, quiet: float) -> None:
        now = time.monotonic()
        if not workers and quiet > 30 and now - self.last_revived > 30:
            self.last_revived = now
            if replaced := replace_lost_workers(self.client, connected=workers):
                log.warning("%d workers of this run's cluster were lost for good (their nanny "
                            "closed or never brought them back); starting new ones", replaced)
