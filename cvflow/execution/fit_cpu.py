"""The CPU the fits use when distributed's worker runs in this process (``--cluster threads``
with a dashboard): what the loop's watchdog reads in place of the worker's ``metrics.cpu``.

Dask reports a worker's CPU as its process's. A worker in this process shares it with the
scheduler, the client, the dashboard and the live page, all on one event loop thread, which
alone used 4-8 % of a core while the one fit slept (sampled every second for 2 minutes): about
the watchdog's idle line (5 %), so a stuck fit was seen as a busy worker for minutes, or for
ever while someone watches the dashboard. Here the fits' CPU is this process's less what those
threads and the watchdog's own (the run's loop) used: the fits' threads, and any thread a fit
starts, still count.
"""
from __future__ import annotations

import threading
import time

# DESIGN CHOICE: the excluded threads are found by running a function on them (the scheduler's
# and the workers' event loops), not by their names (distributed's "IO loop" is no API).


class FitCPU:
    """Percent of one core this process used since the last :meth:`percent`, less the event
    loop threads of ``client``'s scheduler and in-process workers and the calling thread."""

    def __init__(self, client):
        import psutil          # comes with distributed, which this route has imported

        self._process = psutil.Process()
        loops = {client.run_on_scheduler(threading.get_native_id)}
        loops.update(client.run(threading.get_native_id).values())
        self.skipped = loops | {threading.get_native_id()}
        self._last = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        """(this process's CPU seconds, the skipped threads', monotonic time)."""
        # the process's own clock keeps the CPU of threads that ended (a fit's short-lived
        # pool); the skipped threads live as long as the client
        skipped = sum(t.user_time + t.system_time for t in self._process.threads()
                      if t.id in self.skipped)
        return time.process_time(), skipped, time.monotonic()

    def percent(self) -> float:
        now = self._sample()
        (cpu0, skipped0, wall0), self._last = self._last, now
        used = (now[0] - cpu0) - (now[1] - skipped0)
        return max(0.0, 100.0 * used / max(now[2] - wall0, 1e-9))
