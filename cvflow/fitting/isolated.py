"""Fits in a child process: a fit that ends its process (a segfault, ``os._exit``, the OOM
killer), outgrows the worker's memory or outlives ``fit_timeout`` is recorded failed with what
happened, and the caller lives.

The run loop (:mod:`cvflow.execution.loop`) refits a block this way once it killed its workers. The
child is a fresh interpreter (``python -m cvflow.fitting.isolated``) started with :mod:`subprocess`
(fork and exec in one step: safe from a process that runs threads, unlike a bare fork). It
reads the data once, then one (param, training set) at a time from its stdin and answers each
with the pickled (pred, seconds, error) on its stdout; when it dies, the fit it was on is the
culprit and a new child takes the rest.
"""
from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from .learners import fit_and_score, pred_shape
from ..objects import importable
from ..workflow.params import Param, import_estimator


def death_message(code: int, memory: tuple[int, int] | None = None) -> str:
    """What a fit's process exit ``code`` (negative: the signal) says, and its likely cause;
    ``memory`` = (resident bytes, limit) when the watch stopped the fit over the limit."""
    if memory is not None:
        used, limit = memory
        return (f"worker died: the fit used {used / 2**30:.2f} GiB, over the worker's memory "
                f"limit of {limit / 2**30:.2f} GiB; it was stopped alone in a child process")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        cause = {"SIGKILL": "out of memory (the kernel's OOM killer, or the worker's memory "
                            "limit) or an external kill",
                 "SIGSEGV": "a crash in compiled code (segmentation fault)",
                 "SIGABRT": "an abort in compiled code",
                 "SIGBUS": "a crash in compiled code (bus error)"}.get(name, "an external signal")
        return f"worker died: the fit was killed by signal {-code} ({name}); likely cause: {cause}"
    return (f"worker died: the fit ended its process with exit status {code}; likely cause: "
            "exit() or os._exit() in the learner's code, or a library that exits on error")


def timeout_message(seconds: float) -> str:
    return f"timed out after {seconds:g} s (execution.fit_timeout); the fit was stopped"


# --- the wire: length-prefixed pickles (our own child: nothing untrusted crosses it) -----------

def _send(stream, obj) -> None:
    import cloudpickle

    # by value what no name imports in the child (a __main__ class, a lambda: Param.source),
    # as distributed ships them to its workers; pickle.loads reads it back
    data = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def main() -> None:
    """The child: the data, then fits until stdin closes."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr                      # a learner's prints never reach the wire
    X, y, positive, sample_weight, estimators, scoring = _receive(inp)
    for path in estimators:                      # imports are not the fits' time
        import_estimator(path)
    _send(out, "ready")                          # started: the fits' time limits begin now
    while True:
        try:
            param, train = _receive(inp)
        except EOFError:
            return
        _send(out, fit_and_score(param, X, y, train, positive, sample_weight, scoring))


# --- the parent ---------------------------------------------------------------------------------

class _Child:
    """One child process with the data loaded; its resident memory watched against a limit."""

    INTERVAL = 0.05

    def __init__(self, data: tuple, memory_limit: int | None):
        # the worker's import path (a spawned worker inherits its client's), one BLAS thread
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "cvflow.fitting.isolated"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.limit, self.over = memory_limit, None
        self.timed_out = False
        try:
            _send(self.proc.stdin, data)
            self.started = _receive(self.proc.stdout) == "ready"
        except (EOFError, BrokenPipeError, OSError):
            self.started = False                     # it died at start: fit() says so

    def fit(self, param: Param, train: np.ndarray, timeout: float | None):
        """(pred, seconds, error), or None when the child died (see :meth:`why`)."""
        if not self.started:
            return None
        done = threading.Event()
        watch = threading.Thread(target=self._watch, args=(done, timeout), daemon=True)
        watch.start()
        try:
            _send(self.proc.stdin, (param, train))
            return _receive(self.proc.stdout)
        except (EOFError, BrokenPipeError, OSError):
            return None
        finally:
            done.set()
            watch.join()

    def _watch(self, done: threading.Event, timeout: float | None) -> None:
        import psutil

        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            proc = psutil.Process(self.proc.pid)
            while not done.wait(self.INTERVAL):
                if self.limit:
                    rss = proc.memory_info().rss
                    if rss > self.limit:
                        self.over = (rss, self.limit)
                        self.proc.kill()
                        return
                if deadline is not None and time.monotonic() > deadline:
                    self.timed_out = True
                    self.proc.kill()
                    return
        except (psutil.Error, ProcessLookupError):
            return                                   # the child has ended

    def why(self, timeout: float | None) -> str:
        code = self.proc.wait()
        return timeout_message(timeout) if self.timed_out else death_message(code, self.over)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fit_cells(params: list[Param], X, y, train: np.ndarray, cells: list[tuple[int, int]], *,
              positive=None, sample_weight=None, timeout: float | None = None,
              memory_limit: int | None = None, scoring=None) -> dict[tuple[int, int], tuple]:
    """Fit ``cells`` (index into ``params``, row of ``train``) in child processes, in order:
    ``{cell: (pred, seconds, error)}``; a fit whose child died, outgrew ``memory_limit`` bytes
    or ran past ``timeout`` seconds gets NaN predictions and the reason as its error. With
    ``scoring`` (:class:`cvflow.fitting.scoring.Scoring`, sent by value: it pickles its
    scorers with cloudpickle) each value has a fourth item, the fit's scores (None when its
    child died)."""
    data = (X, y, positive, sample_weight,
            sorted({params[h].estimator for h, _ in cells if importable(params[h].estimator)}), scoring)
    out: dict = {}
    child = None
    try:
        for h, s in cells:
            if child is None:
                child = _Child(data, memory_limit)
            fitted = child.fit(params[h], train[s], timeout)
            if fitted is None:
                reason = child.why(timeout)
                child = None
                fitted = (np.full(pred_shape(X, positive), np.nan),
                          timeout or 0.0 if reason.startswith("timed out") else 0.0, reason, None)
            out[(h, s)] = tuple(fitted) if scoring is not None else tuple(fitted)[:3]
    finally:
        if child is not None:
            child.close()
    return out


if __name__ == "__main__":
    main()
