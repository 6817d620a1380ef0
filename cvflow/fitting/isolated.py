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

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
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
    """One child process with the data loaded; its resident memory watched against a limit.

    DESIGN CHOICE: every wait on the child has an end. The child runs in a session (process
    group) of its own, and the parent never blocks on its pipes: it sends and receives through
    ``select`` in steps of :data:`INTERVAL`, and between steps checks the child's exit status
    (without reaping it), its memory and the fit's deadline. A fit that forks leaves a
    grandchild holding the child's stdout: waiting for end-of-file there hung a study for as
    long as the grandchild lived (issue 32; 600 s, once 3600 s). Now the child's exit ends the
    wait (what it wrote is drained for :data:`EXIT_GRACE` seconds), and its whole process group
    is killed before it is reaped: no descendant outlives its fit (tests/test_worker_death.py).
    """

    INTERVAL = 0.05
    START_TIMEOUT = 300.0        # seconds for a child to import cvflow and load the data
    EXIT_GRACE = 1.0             # seconds to read what an ended child left in its pipe

    def __init__(self, data: tuple, memory_limit: int | None):
        # the worker's import path (a spawned worker inherits its client's), one BLAS thread
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "cvflow.fitting.isolated"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.inp, self.out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.inp, False)
        os.set_blocking(self.out, False)
        self.limit, self.over = memory_limit, None
        self.timed_out = False
        self.note: str | None = None
        self._psutil = None
        answer = self._exchange(data, time.monotonic() + self.START_TIMEOUT)
        self.started = answer == "ready"
        if not self.started and self.note is None and self.timed_out:
            self.note = (f"worker died: the fit's child process did not start within "
                         f"{self.START_TIMEOUT:g} s")

    def fit(self, param: Param, train: np.ndarray, timeout: float | None):
        """(pred, seconds, error), or None when the child died (see :meth:`why`)."""
        if not self.started:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._exchange((param, train), deadline)

    def _exited(self) -> bool:
        """Whether the child has ended (it is not reaped: its process group can still be
        killed safely, its pid not reused)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid,
                             os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _kill_group(self) -> None:
        """SIGKILL the child's process group: the child and whatever it started."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _over_memory(self) -> bool:
        if not self.limit:
            return False
        import psutil

        try:
            if self._psutil is None:
                self._psutil = psutil.Process(self.proc.pid)
            rss = self._psutil.memory_info().rss
        except psutil.Error:
            return False
        if rss > self.limit:
            self.over = (rss, self.limit)
            return True
        return False

    def _exchange(self, message, deadline: float | None):
        """Send ``message``, then receive one answer; None (the child's process group
        killed) when the child ended, outgrew the memory limit or passed ``deadline``."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        outgoing = memoryview(struct.pack("<Q", len(data)) + data)
        sent, got = 0, bytearray()
        ended: float | None = None
        while True:
            if self._over_memory():
                self._kill_group()
                return None
            if deadline is not None and time.monotonic() > deadline:
                self.timed_out = True
                self._kill_group()
                return None
            if ended is None and self._exited():
                ended = time.monotonic()
            if ended is not None and time.monotonic() - ended > self.EXIT_GRACE:
                self._kill_group()                 # a descendant may hold the pipe open
                return None
            writing = [self.inp] if sent < len(outgoing) and ended is None else []
            readable, writable, _ = select.select([self.out], writing, [], self.INTERVAL)
            if writable:
                try:
                    sent += os.write(self.inp, outgoing[sent:sent + 2**16])
                except BlockingIOError:
                    pass
                except (BrokenPipeError, OSError):
                    ended = ended or time.monotonic()
            if readable:
                try:
                    chunk = os.read(self.out, 2**20)
                except BlockingIOError:
                    continue
                if not chunk:                      # end of file: every writer has gone
                    self._kill_group()
                    return None
                got += chunk
                if len(got) >= 8:
                    (size,) = struct.unpack("<Q", got[:8])
                    if len(got) >= 8 + size:
                        return pickle.loads(bytes(got[8:8 + size]))

    def why(self, timeout: float | None) -> str:
        self._kill_group()
        code = self.proc.wait()
        if self.note is not None:
            return self.note
        return timeout_message(timeout) if self.timed_out else death_message(code, self.over)

    def close(self) -> None:
        """End the child (its stdin closed: it returns), then its whole process group, so a
        process the learner's fit started does not outlive the block."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()                       # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while not self._exited() and time.monotonic() < deadline:
            time.sleep(self.INTERVAL)
        self._kill_group()
        self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()                      # type: ignore[union-attr]


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
                reason = child.why(timeout)           # its process group is killed
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
