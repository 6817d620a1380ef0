"""The one loop: submit a run's blocks to a Dask scheduler, record what comes back.

Whatever runs the tasks (a scheduler in this process with thread workers, local worker
processes, SLURM jobs, a running scheduler), this loop owns the three policies:

- **a dead worker**: Dask retries a task whose worker died (``allowed-failures``), then raises
  ``KilledWorker``; the block is then split into one task per fit (:func:`cvflow.tasks.fit_cell`)
  so that only the fits that kill their process are recorded failed;
- **a fit over its time limit**: the worker's watch (:mod:`cvflow.tasks`) ends the process
  after recording the fit at the scheduler; the retried task skips it; a split fit that ran out
  of time is recorded "timed out";
- **no progress**: when nothing comes back for ``stall_seconds`` while no worker uses CPU (or
  no worker is connected for ``no_worker_seconds``), the run stops with a
  :class:`~cvflow.errors.StallError` that names the blocks it waited on and their stacks;
  and a run that lost its store's lock stops at once (:class:`~cvflow.errors.LockLostError`).

Every wait here has a deadline: the loop wakes at least once a second.
"""
from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import LockLostError, StallError
from .fit import BlockResult
from .learners import Param, pred_shape
from .tasks import TaskContext, fit_cell, run_block, summarize, timeout_message

log = logging.getLogger(__name__)

# DESIGN CHOICE: a worker whose process used less than this share of one core (Dask's
# `metrics.cpu`, sampled every 0.5 s) is idle; a study whose running workers all stay idle for
# `stall_seconds` while nothing comes back is stuck (a deadlock, a fit waiting on a lock).
IDLE_CPU_PERCENT = 5.0
WAKE_SECONDS = 1.0


@dataclass
class Block:
    """A chunk-aligned rectangle of fits: its slices and the cells still to fit (None: all)."""

    params: slice
    splits: slice
    todo: np.ndarray | None = None


@dataclass
class _Split:
    """A block refitted one fit per task after it killed its workers; written once complete."""

    block: Block
    result: BlockResult
    left: int = 0


class Loop:
    """Runs ``blocks`` on ``client``: :meth:`run` returns once every block is recorded.

    ``record(summary)`` is called in this thread for every written block; ``lock_lost()``
    says whether the run lost its store's lock (checked at every wake-up).
    """

    def __init__(self, client, ctx: TaskContext, *, params: list[Param], train: np.ndarray,
                 data, path_aware: bool, record: Callable[[dict], None],
                 lock_lost: Callable[[], bool] = lambda: False, scorer=None,
                 stall_seconds: float = 300.0, no_worker_seconds: float = 300.0):
        self.client, self.ctx, self.params, self.train = client, ctx, params, train
        self.data, self.path_aware, self.record, self.scorer = data, path_aware, record, scorer
        self.lock_lost = lock_lost
        self.stall_seconds, self.no_worker_seconds = stall_seconds, no_worker_seconds
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self.futures: dict[str, object] = {}        # key -> future still running
        self.blocks: dict[str, Block] = {}           # block task key -> its block
        self.cells: dict[str, tuple[str, int, int]] = {}   # fit task key -> (block key, h, s)
        self.splits: dict[str, _Split] = {}
        self.inputs: dict = {}

    # --- submitting ---------------------------------------------------------------------------

    def _watch(self, future) -> None:
        self.futures[future.key] = future
        future.add_done_callback(self.finished.put)

    def submit_inputs(self) -> None:
        # DESIGN CHOICE: X and y travel as two tasks holding them, not scattered: the scheduler
        # keeps a task's inputs, so when every worker holding them dies (a SLURM job cancelled,
        # an adaptive scale-down) it recomputes them; lost scattered data would cancel every block.
        from .tasks import _value

        d, stamp = self.data, time.time_ns()
        c = self.client
        self.inputs = {
            "X": c.submit(_value, d.fit_X, pure=False, key=f"cvflow-X-{stamp}"),
            "y": c.submit(_value, d.y, pure=False, key=f"cvflow-y-{stamp}"),
            "w": None if d.sample_weight is None else c.submit(_value, d.sample_weight, pure=False,
                                                                key=f"cvflow-w-{stamp}")}

    def submit(self, blocks: list[Block]) -> None:
        if not self.inputs:
            self.submit_inputs()
        i, stamp = self.inputs, time.time_ns()
        for b in blocks:
            key = f"cvflow-block-{b.params.start}-{b.splits.start}-{stamp}"
            self.blocks[key] = b
            self._watch(self.client.submit(
                run_block, self.ctx, self.params[b.params], i["X"], i["y"], self.train[b.splits],
                b.params, b.splits, self.data.positive, self.path_aware, b.todo, i["w"],
                self.scorer, pure=False, key=key))

    def cancel(self) -> None:
        """Cancel every task not back yet (running ones end with their fit; fenced writes)."""
        if self.futures:
            try:
                self.client.cancel(list(self.futures.values()))
            except Exception as exc:  # noqa: BLE001 - the client may be closing
                log.debug("cancelling the run's tasks: %s", exc)
        self.futures.clear()

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        last_progress = time.monotonic()
        last_said = 0.0
        try:
            while self.futures:
                try:
                    future = self.finished.get(timeout=WAKE_SECONDS)
                except queue.Empty:
                    future = None
                if self.lock_lost():
                    raise LockLostError(f"store: {self.ctx.store}: another run took over the run "
                                        "lock; this run stopped and cancelled its tasks")
                if future is None:
                    last_progress, last_said = self._check_progress(last_progress, last_said)
                    continue
                if self.futures.pop(future.key, None) is None:
                    continue                              # cancelled, or seen already
                last_progress = time.monotonic()
                summary = self._take(future)
                if summary is not None:
                    self.record(summary)
        finally:
            self.cancel()

    def _take(self, future) -> dict | None:
        """A finished task's block summary, or None (a fit of a split block not complete yet)."""
        from distributed import KilledWorker

        if future.key in self.cells:
            return self._take_cell(future)
        try:
            return future.result()
        except KilledWorker as exc:
            return self._split(future.key, exc)

    def _timed_out(self, key: str) -> set:
        return {tuple(c) for c in self.client.get_metadata(self.ctx.timeouts_key(key), default=[])}

    def _split(self, key: str, exc) -> dict | None:
        """Refit a block that killed its workers one fit per task; its summary at once when
        no fit is left to refit (all of them ran out of time)."""
        from . import store as cube_store

        b = self.blocks[key]
        shape = (b.params.stop - b.params.start, b.splits.stop - b.splits.start)
        if b.todo is None:
            per_fit = pred_shape(self.data.fit_X, self.data.positive)
            result = BlockResult(b.params, b.splits, np.full(shape + per_fit, np.nan),
                                 np.zeros(shape, bool), np.full(shape, "", dtype=object),
                                 np.zeros(shape))
        else:     # stored fits of an extended study keep their bytes
            stored = cube_store.read_block(self.ctx.store, b.params, b.splits)
            result = BlockResult(b.params, b.splits, stored["pred"], stored["failed"],
                                 stored["error"], stored["fit_seconds"])
        todo = np.ones(shape, bool) if b.todo is None else b.todo
        late = self._timed_out(key) if self.ctx.fit_timeout else set()
        for h, s in late:
            result.pred[h, s] = np.nan
            result.failed[h, s], result.error[h, s] = True, timeout_message(self.ctx.fit_timeout)
            result.fit_seconds[h, s] = self.ctx.fit_timeout
        cells = [(int(h), int(s)) for h, s in np.argwhere(todo) if (h, s) not in late]
        self.splits[key] = _Split(b, result, left=len(cells))
        log.warning("the block of params %d-%d x splits %d-%d killed %d workers (%s); refitting "
                    "its %d fits one per task", b.params.start, b.params.stop - 1, b.splits.start,
                    b.splits.stop - 1, exc.allowed_failures + 1, type(exc).__name__, len(cells))
        i, stamp = self.inputs, time.time_ns()
        for h, s in cells:
            fkey = f"cvflow-fit-{b.params.start + h}-{b.splits.start + s}-{stamp}"
            self.cells[fkey] = (key, h, s)
            self._watch(self.client.submit(
                fit_cell, self.ctx, self.params[b.params.start + h], i["X"], i["y"],
                self.train[b.splits.start + s], self.data.positive, i["w"], pure=False, key=fkey))
        return None if cells else self._write_split(key)

    def _take_cell(self, future) -> dict | None:
        from distributed import KilledWorker

        key, h, s = self.cells.pop(future.key)
        try:
            fitted = future.result()
        except KilledWorker as exc:
            late = self.ctx.fit_timeout and self._timed_out(future.key)
            fitted = (np.full(pred_shape(self.data.fit_X, self.data.positive), np.nan),
                      self.ctx.fit_timeout if late else 0.0,
                      timeout_message(self.ctx.fit_timeout) if late else
                      f"worker died: the worker process fitting this alone died "
                      f"{exc.allowed_failures + 1} times (the fit ended its process: os._exit, a "
                      "crash in compiled code, or out of memory)")
        split = self.splits[key]
        r = split.result
        r.pred[h, s], r.fit_seconds[h, s], r.error[h, s] = fitted
        r.failed[h, s] = bool(fitted[2])
        split.left -= 1
        return self._write_split(key) if split.left == 0 else None

    def _write_split(self, key: str) -> dict:
        """Write a complete split block (one writer per chunk, fenced); its summary record."""
        from . import store as cube_store
        from .tasks import check_fence

        split = self.splits.pop(key)
        check_fence(self.ctx)
        cube_store.write_pred(self.ctx.store, split.result)
        summary = summarize(split.result, split.block.todo)
        if self.scorer is not None:
            b = split.block
            summary["terms"] = self.scorer(split.result.pred, self.data.y, self.train[b.splits],
                                           self.params[b.params], self.data.positive)
        return summary

    # --- the watchdog -------------------------------------------------------------------------

    def _check_progress(self, last_progress: float, last_said: float) -> tuple[float, float]:
        """Nothing came back for a second: are the workers working? StallError if not for long."""
        now = time.monotonic()
        try:
            workers = self.client.scheduler_info().get("workers", {})
        except Exception as exc:  # noqa: BLE001 - a scheduler that does not answer is no progress
            workers, why = {}, f"the scheduler did not answer ({exc})"
        else:
            why = None
        busy = any(w.get("metrics", {}).get("cpu", 0.0) > IDLE_CPU_PERCENT
                   for w in workers.values())
        if busy:
            return now, last_said
        quiet = now - last_progress
        limit = self.no_worker_seconds if not workers else self.stall_seconds
        waiting = why or ("no worker is connected" if not workers else
                          f"{len(self.futures)} tasks not back, {len(workers)} workers idle")
        if quiet > limit:
            raise StallError(f"no progress for {quiet:.0f} s: {waiting}; {self._stacks()}"
                             .rstrip("; "))
        if quiet > 30 and now - last_said > 30:
            log.warning("waiting for %s: no progress for %.0f s (the run stops after %.0f s)",
                        waiting, quiet, limit)
            last_said = now
        return last_progress, last_said

    def _stacks(self) -> str:
        """Where the running tasks are (Dask's call stacks), in one line."""
        try:
            stacks = self.client.call_stack(list(self.futures.values()))
        except Exception:  # noqa: BLE001
            return ""
        parts = []
        for worker, tasks in (stacks or {}).items():
            for key, frames in tasks.items():
                top = [f.strip() for f in frames][-3:] if frames else []
                parts.append(f"{key} on {worker}: " + " <- ".join(reversed(top)))
        return ("running: " + " | ".join(parts[:4])) if parts else "no task is running"
