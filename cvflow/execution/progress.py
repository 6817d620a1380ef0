"""What a person sees of a run: the execution line, a progress bar and the closing summary.

One implementation for ``cvflow run`` and Python (:func:`cvflow.run`, ``Study.run``): a
:class:`Progress` reads the engine's event stream (:func:`cvflow.execution.run.run`'s ``progress``
callback, events ``start`` and ``block``). The bar is tqdm's ``tqdm.auto`` (a widget in a
notebook, a text bar in a terminal) when tqdm is installed and someone is watching (a terminal
or a notebook); otherwise plain lines on stderr, at most one every 2 s, so a log or a notebook
without tqdm still shows that the run is alive.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from ..terminal import visible
from ..errors import InputError

# seconds between plain progress lines (no terminal: a log file, a notebook without tqdm)
PLAIN_EVERY = 2.0


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (as tqdm.autonotebook decides)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _tqdm():
    """tqdm's notebook-aware class, or None when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """A run's progress on ``stream`` (default stderr): the ``start`` event's lines (execution,
    dashboard, live page, fits to do), then a bar over the ``block`` events.

    Parameters
    ----------
    stream : file, optional
        Where to write (default: ``sys.stderr`` at the time of the call).
    summary : bool, default True
        Print the closing summary (:meth:`finish`); the CLI prints its own on stdout.
    width : int
        Width of the plain bar drawn without tqdm.
    """

    def __init__(self, stream=None, *, summary: bool = True, width: int = 30):
        self.stream = stream or sys.stderr
        self.summary = summary
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = 0.0
        self.bar = None

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)

    def __call__(self, event: dict) -> None:
        if event["event"] == "start":
            self.start(event)
            return
        skipped = event.get("skipped", 0)
        if event["event"] == "racing":       # a look of the race dropped params: say so
            self.line(f"racing: {event['dropped']} of {event['params']} params dropped, "
                      f"{skipped} fits skipped")
        self.block(event["done"], event["todo"], event["elapsed"], skipped,
                   force=event["event"] == "racing")

    def line(self, text: str) -> None:
        """A line of its own, above the bar."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            self._print(("\r\033[K" if self.tty else "") + text)

    def start(self, event: dict) -> None:
        for key, label in (("execution", "execution"), ("dashboard", "dashboard"),
                           ("live", "live study page")):
            # where fits would have run says nothing when none runs (a complete store)
            if event.get(key) and (event["todo"] or key != "execution"):
                self._print(f"{label}: {event[key]}")
        self._print(f"{event['todo']} of {event['total']} fits to do")
        tqdm = _tqdm() if (self.tty or _in_notebook()) and event["todo"] else None
        if tqdm is not None:
            self.bar = tqdm(total=event["todo"], unit="fit", desc="fits", file=self.stream,
                            leave=True, dynamic_ncols=True)

    def block(self, done: int, todo: int, elapsed: float, skipped: int = 0, *,
              force: bool = False) -> None:
        """``done`` of ``todo`` fits back after ``elapsed`` s (``skipped``: fits racing saved,
        counted in ``done``)."""
        if self.bar is not None:
            if skipped:
                self.bar.set_postfix_str(f"{skipped} skipped by racing", refresh=False)
            self.bar.update(min(done, todo) - self.bar.n)
            if done >= todo:
                self.bar.close()
                self.bar = None
            return
        now = time.monotonic()
        if not force and done < todo and now - self.last < (0.1 if self.tty else PLAIN_EVERY):
            return
        self.last = now
        frac = min(done / todo, 1.0) if todo else 1.0
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        bar = "#" * int(frac * self.width)
        line = (f"[{bar:<{self.width}}] {done}/{todo} fits"
                + (f" ({skipped} skipped by racing)" if skipped else "")
                + f"  {elapsed:6.1f}s  ETA "
                + (f"{eta:5.1f}s" if eta == eta else "    ?"))      # NaN: nothing done yet
        self._print(line, end="\r" if self.tty and done < todo else "\n")

    def finish(self, result) -> None:
        """The run is over (:class:`cvflow.execution.run.RunResult`): close the bar, print the summary."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.summary:
            for line in summary_lines(result):
                self._print(line)


def summary_lines(result) -> list[str]:
    """The closing lines of a run (:class:`cvflow.execution.run.RunResult`), as ``cvflow run`` prints them."""
    if result.fits_executed == 0:
        lines = [f"{result.store}: already complete, 0 fits performed"]
    else:
        lines = [f"{result.store}: {result.fits_executed} fits performed in {result.tasks} tasks "
                 f"({result.wall_seconds:.1f}s wall, {result.fit_seconds:.2f}s of fitting), "
                 f"{result.failed} failed",
                 f"fits executed / distinct (param, training set) pairs = "
                 f"{result.fits_executed}/{result.distinct_pairs} = "
                 f"{result.fits_per_distinct:.3f} "
                 f"({result.roles_requested} (param, split role) pairs requested)"]
    if getattr(result, "raced_params", 0):
        lines.append(f"racing: {result.dropped_params} of {result.raced_params} params dropped, "
                     f"{result.saved_fits} fits saved ({result.fits_executed} run)")
    return [visible(line) for line in lines]   # the store's path may hold anything


def reporter(progress) -> Callable[[dict], None] | None:
    """The event callback of a ``progress`` argument: None or True -> a :class:`Progress` on
    stderr; False -> None (silent); a callable -> itself."""
    if progress is None or progress is True:
        return Progress()
    if progress is False:
        return None
    if not callable(progress):
        raise InputError(f"progress: {progress!r}; give True, False or a function of an event "
                         "dict")
    return progress
