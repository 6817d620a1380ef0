"""Whether work sent to a Dask cluster still makes progress: the one watchdog of the run loop
(:mod:`cvflow.execution.loop`, config ``cvflow.execution.*``) and of a reduction waiting on a
Client (:func:`cvflow.estimators.memory.on_client`, config ``cvflow.reduce.*``).

Progress is a task coming back (:meth:`Watchdog.progressed`) or a worker using CPU. Nothing for
``stall-seconds`` while workers are connected and idle, or for ``no-worker-seconds`` while none
is connected, ends in a StallError of one line: what was waited on and where the running tasks
are (Dask's call stacks). After 30 quiet seconds it says so in the log, every 30 s.
"""
from __future__ import annotations

import logging
import time

from . import config
from .errors import StallError

log = logging.getLogger(__name__)

# DESIGN CHOICE: a worker whose process used less than this share of one core (Dask's
# `metrics.cpu`, sampled every 0.5 s) is idle; work whose workers all stay idle for
# `stall-seconds` while nothing comes back is stuck (a deadlock, a fit waiting on a lock).
IDLE_CPU_PERCENT = 5.0
SAY_AFTER_SECONDS = 30.0


class Watchdog:
    """Says whether work on ``client`` still makes progress; :meth:`check` raises StallError
    when not. ``section``: the config section of the two deadlines ("execution", "reduce");
    ``who``: what stops, in the log ("the run")."""

    def __init__(self, client, section: str = "execution", who: str = "the run") -> None:
        self.client, self.section, self.who = client, section, who
        self.stall_seconds = float(config.get(f"cvflow.{section}.stall-seconds"))
        self.no_worker_seconds = float(config.get(f"cvflow.{section}.no-worker-seconds"))
        self.last_progress = time.monotonic()
        self.last_said = 0.0

    def busy(self, workers: dict) -> bool:
        """Whether a worker uses CPU (Dask's ``metrics.cpu``)."""
        return any(w.get("metrics", {}).get("cpu", 0.0) > IDLE_CPU_PERCENT
                   for w in workers.values())

    def waiting(self, pending: list, workers: dict) -> str:
        """What is waited on, for the error and the log."""
        if not workers:
            return "no worker is connected"
        return f"{len(pending)} tasks not back, {len(workers)} workers idle"

    def stopping(self, quiet: float, waiting: str, pending: list, key: str) -> str:
        """The StallError's text (``key``: the config key whose deadline passed)."""
        return f"no progress for {quiet:.0f} s: {waiting}; {self.stacks(pending)}".rstrip("; ")

    def still_quiet(self, workers: dict, quiet: float) -> None:
        """Called at each quiet :meth:`check` under the deadline (a run revives lost workers)."""

    def progressed(self) -> None:
        self.last_progress = time.monotonic()

    def check(self, pending: list) -> None:
        """Nothing came back for a while: are the workers working? StallError if not for long."""
        now = time.monotonic()
        try:
            workers = self.client.scheduler_info().get("workers", {})
        except Exception as exc:  # noqa: BLE001 - a scheduler that does not answer is no progress
            workers, why = {}, f"the scheduler did not answer ({exc})"
        else:
            why = None
        if self.busy(workers):
            self.last_progress = now
            return
        quiet = now - self.last_progress
        key, limit = (("stall-seconds", self.stall_seconds) if workers else
                      ("no-worker-seconds", self.no_worker_seconds))
        waiting = why or self.waiting(pending, workers)
        if quiet > limit:
            raise StallError(self.stopping(quiet, waiting, pending, key))
        self.still_quiet(workers, quiet)
        if quiet > SAY_AFTER_SECONDS and now - self.last_said > SAY_AFTER_SECONDS:
            log.warning("waiting for %s: no progress for %.0f s (%s stops after %.0f s)",
                        waiting, quiet, self.who, limit)
            self.last_said = now

    def stacks(self, pending: list) -> str:
        """Where the running tasks are (Dask's call stacks), in one line."""
        try:
            stacks = self.client.call_stack(pending)
        except Exception:  # noqa: BLE001
            return ""
        parts = []
        for worker, tasks in (stacks or {}).items():
            for key, frames in tasks.items():
                top = [" ".join(str(f).split()) for f in frames][-3:] if frames else []
                parts.append(f"{key} on {worker}: " + " <- ".join(reversed(top)))
        return ("running: " + " | ".join(parts[:4])) if parts else "no task is running"
