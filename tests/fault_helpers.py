"""Helpers of the fault tests: a slow deterministic learner, the CLI in its own session, kills.

``SlowRidge`` is imported by dotted path (``fault_helpers.SlowRidge``) in workers, so a
process that runs a study with it needs this directory on ``PYTHONPATH`` (see :func:`cli_env`).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression, Ridge

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class SlowRidge(Ridge):
    """Ridge that sleeps ``delay`` seconds per fit: long enough runs to cut, same numbers."""

    def __init__(self, alpha=1.0, delay=0.2):
        super().__init__(alpha=alpha)
        self.delay = delay

    def fit(self, X, y, sample_weight=None):
        time.sleep(self.delay)
        return super().fit(X, y, sample_weight=sample_weight)


# set by a test (a suite's next data set starting); GateRidge's fits with wait=True wait for it
GATE = threading.Event()
GATE_SEEN: list[bool] = []      # per waiting fit: whether the gate opened within its deadline


class GateRidge(Ridge):
    """Ridge whose fits with ``wait=True`` wait (at most 60 s) for :data:`GATE`, in this process
    (the threads route): a fit that runs until something else happens in the run's process."""

    def __init__(self, alpha=1.0, wait=False):
        super().__init__(alpha=alpha)
        self.wait = wait

    def fit(self, X, y, sample_weight=None):
        if self.wait:
            GATE_SEEN.append(GATE.wait(60))
        return super().fit(X, y, sample_weight=sample_weight)


def _ridge_workflow(path: Path, name: str, learner: str, params: str, alphas, folds: int,
                    execution: str) -> Path:
    """A ridge-like learner of this module on diabetes, K-fold: the fault tests' workflows."""
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        data: {{source: sklearn, name: diabetes}}
        task: regression
        learners:
          - name: {name}_ridge
            class: fault_helpers.{learner}
            params: {{{params}}}
            grid: {{alpha: {list(alphas)}}}
        design: {{folds: {folds}, seed: 0}}
        estimators: [kfold]
        execution: {{{execution}}}
        """))
    return path


def slow_workflow(path: Path, *, alphas=(0.01, 0.1, 1.0, 10.0), folds: int = 5,
                  delay: float = 0.2) -> Path:
    """A workflow of ``len(alphas) * (folds + 1)`` fits, one fit per task, on worker processes
    (the faults need processes to kill; the auto choice could run so small a study in threads)."""
    return _ridge_workflow(path, "slow", "SlowRidge", f"delay: {delay}", alphas, folds,
                           "fits_per_task: 1, cluster: local")


def cli_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    env.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    env.update(extra)
    return env


def start_run(workflow: Path, store: Path, *args: str, env: dict | None = None,
              dashboard: tuple[str, ...] = ("--dashboard-port", "0")) -> subprocess.Popen:
    """``cvflow run`` in a new session (its own process group, so every child can be reaped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cvflow", "run", str(workflow), "--store", str(store),
         *dashboard, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env(),
        start_new_session=True)


def live_page_url(proc: subprocess.Popen, timeout: float = 180) -> str:
    """The live study page URL a started ``cvflow run`` prints on stderr (AssertionError if the
    run ends first or prints none within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"run ended (rc {proc.returncode}) before the page URL: "
                                 f"{proc.stderr.read()[-2000:]}")
        m = re.match(r"live study page: (http://\S+)", line)
        if m:
            return m.group(1)
    raise AssertionError("no live page URL printed")


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        reap(proc)
    return proc.returncode, out, err


def reap(proc: subprocess.Popen) -> None:
    """SIGKILL whatever is left of the run's process group (orphaned workers included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def group_alive(pgid: int, wait: float = 0.0) -> bool:
    """Whether a process of group ``pgid`` is still alive after at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


def done_count(store: Path) -> int:
    """Fits marked done (0 while the store does not exist yet)."""
    import zarr

    try:
        return int(np.asarray(zarr.open_group(str(store), mode="r")["done"][...]).sum())
    except Exception:  # noqa: BLE001 - not created yet, or being created
        return 0


def wait_for_done(store: Path, at_least: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    """Poll the store until ``at_least`` fits are done; fail if the run ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = done_count(store)
        if n >= at_least:
            return n
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc {proc.returncode}) with {n} < {at_least} fits "
                                 f"done: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {at_least} fits done (have {done_count(store)})")


def worker_pids(proc: subprocess.Popen) -> list[int]:
    """PIDs of the LocalCluster worker processes started by the run (children of the CLI)."""
    import psutil

    pids = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "multiprocessing" in cmd and "resource_tracker" not in cmd and "forkserver" not in cmd:
            pids.append(child.pid)
    return pids


def cube_arrays(store: Path) -> dict:
    """The variables a run writes, as numpy arrays (``error`` as str)."""
    import zarr

    g = zarr.open_group(str(store), mode="r")
    out = {name: np.asarray(g[name][...]) for name in ("pred", "done", "failed")}
    error = np.asarray(g["error"][...])
    out["error"] = np.array([str(e) for e in error.ravel()]).reshape(error.shape)
    return out


def assert_same_cube(store: Path, reference: Path) -> None:
    """Bit-for-bit equal predictions and identical masks."""
    a, b = cube_arrays(store), cube_arrays(reference)
    assert a["done"].all(), f"{(~a['done']).sum()} fits not done"
    assert a["pred"].tobytes() == b["pred"].tobytes(), "predictions differ from the clean run"
    for name in ("done", "failed", "error"):
        np.testing.assert_array_equal(a[name], b[name])


def read_lock_pid(store: Path):
    from cvflow.store.lock import read_lock

    record = read_lock(store)
    return None if record is None else record.get("pid")


class DyingRidge(Ridge):
    """Ridge whose fit ends its process (``os._exit(3)``) when ``alpha == die_at``: a learner
    that kills its worker (as an out-of-memory kill or a segfault would) for one grid value."""

    def __init__(self, alpha=1.0, die_at=None):
        super().__init__(alpha=alpha)
        self.die_at = die_at

    def fit(self, X, y, sample_weight=None):
        if self.die_at is not None and self.alpha == self.die_at:
            os._exit(3)
        return super().fit(X, y, sample_weight=sample_weight)


class BlockDyingRidge(DyingRidge):
    """DyingRidge that ends its process only in the study's own fits, not in the run's trial
    and timing fits (which fit 1 to all of a grid's values, by the machine's speed): a learner
    that dies on some training set, found in a block (tests/test_inflight.py)."""

    def fit(self, X, y, sample_weight=None):
        from cvflow.fitting.trial import in_trial

        if in_trial():
            return Ridge.fit(self, X, y, sample_weight=sample_weight)
        return super().fit(X, y, sample_weight=sample_weight)


class SegfaultRidge(Ridge):
    """Ridge whose fit ends its process with a segmentation fault (SIGSEGV) when
    ``alpha == crash_at``, as a crash in compiled code would: the signal goes to the fitting
    thread, which never runs another line (see :func:`segfault_here`)."""

    def __init__(self, alpha=1.0, crash_at=None):
        super().__init__(alpha=alpha)
        self.crash_at = crash_at

    def fit(self, X, y, sample_weight=None):
        if self.crash_at is not None and self.alpha == self.crash_at:
            segfault_here()
        return super().fit(X, y, sample_weight=sample_weight)


def segfault_here() -> None:
    """End this process with SIGSEGV raised in the calling thread, as a fault in compiled code
    is; never returns."""
    # DESIGN CHOICE: a real fault is delivered to the faulting thread, which dies there.
    # os.kill(os.getpid(), SIGSEGV) is sent to the process instead: the kernel hands it to the
    # main thread, and the fitting thread runs on until that thread is scheduled to die. Under
    # load it ran on past the fit (measured: a thread wrote up to 1171 lines after os.kill in
    # 14 of 20 processes at load 13; none after pthread_kill), so the run's lock no longer
    # named the block (its record was rewritten as the fit ended) and the next run stayed on
    # the threads route and segfaulted again (tests/test_inflight.py, 3 of 6 runs at load 11-14).
    kill = getattr(signal, "pthread_kill", None)
    if kill is not None:
        kill(threading.get_ident(), signal.SIGSEGV)
    else:                                   # no pthread_kill (Windows): the process
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:                             # the signal ends the process before this wakes
        time.sleep(1)


def sleeping_workflow(path: Path, sleep_at, execution: str = "fits_per_task: 16") -> Path:
    """4 alphas x (3 folds + full fit) of a learner that never ends at ``alpha == sleep_at``."""
    return faulty_workflow(path, "StuckRidge", "stuck_at", sleep_at, execution)


class HungryRidge(Ridge):
    """Ridge whose fit holds ``hunger_mb`` MB of touched memory for ``hold`` seconds when
    ``alpha == hungry_at``: a learner too big for its worker's memory limit for one grid value."""

    def __init__(self, alpha=1.0, hungry_at=None, hunger_mb=1000, hold=2.0):
        super().__init__(alpha=alpha)
        self.hungry_at, self.hunger_mb, self.hold = hungry_at, hunger_mb, hold

    def fit(self, X, y, sample_weight=None):
        if self.hungry_at is not None and self.alpha == self.hungry_at:
            ballast = np.ones(self.hunger_mb * 2**20 // 8)     # written, so resident
            time.sleep(self.hold)
            del ballast
        return super().fit(X, y, sample_weight=sample_weight)


class StuckRidge(Ridge):
    """Ridge whose fit never returns (it sleeps) when ``alpha == stuck_at``: one pathological
    grid value that would hold a study forever without a per-fit time limit."""

    def __init__(self, alpha=1.0, stuck_at=None):
        super().__init__(alpha=alpha)
        self.stuck_at = stuck_at

    def fit(self, X, y, sample_weight=None):
        while self.stuck_at is not None and self.alpha == self.stuck_at:
            time.sleep(3600)
        return super().fit(X, y, sample_weight=sample_weight)


class BlockStuckRidge(StuckRidge):
    """StuckRidge stuck only in the study's own fits, not in the run's trial and timing fits
    (which reach 1 to all of a grid's values by the machine's speed: stuck there, the timing
    deadline makes the study look long and the run serves a dashboard, another route)."""

    def fit(self, X, y, sample_weight=None):
        from cvflow.fitting.trial import in_trial

        if in_trial():
            return Ridge.fit(self, X, y, sample_weight=sample_weight)
        return super().fit(X, y, sample_weight=sample_weight)


class BlockBusyRidge(Ridge):
    """Ridge whose fit computes (a Python loop, one core) for ``busy_seconds`` before it returns
    when ``alpha == busy_at``, only in the study's own fits: a long fit, no stall."""

    def __init__(self, alpha=1.0, busy_at=None, busy_seconds=1.5):
        super().__init__(alpha=alpha)
        self.busy_at, self.busy_seconds = busy_at, busy_seconds

    def fit(self, X, y, sample_weight=None):
        from cvflow.fitting.trial import in_trial

        if self.busy_at is not None and self.alpha == self.busy_at and not in_trial():
            end, spins = time.thread_time() + self.busy_seconds, 0
            while time.thread_time() < end:           # this thread's CPU, not the clock's
                spins += 1
        return super().fit(X, y, sample_weight=sample_weight)


def dying_workflow(path: Path, die_at, learner: str = "DyingRidge", option: str = "die_at",
                   fits_per_task: int = 16) -> Path:
    """4 alphas x (3 folds + full fit) of a learner of this module that dies (or eats memory)
    at ``alpha == die_at`` (``"null"``: never)."""
    return _ridge_workflow(path, "dying", learner, f"{option}: {die_at}", (0.1, 1.0, 10.0, 100.0),
                           3, f"fits_per_task: {fits_per_task}")


def faulty_workflow(path: Path, learner: str, option: str, culprit, execution: str = "") -> Path:
    """4 alphas x (3 folds + full fit) of a learner of this module that misbehaves at
    ``alpha == culprit`` (10.0 is param 2), with the workflow's ``execution`` mapping as
    written (``""``: the defaults, the route a user gets)."""
    return _ridge_workflow(path, "faulty", learner, f"{option}: {culprit}", (0.1, 1.0, 10.0, 100.0),
                           3, execution)


def assert_only_culprits_failed(dying: Path, clean: Path, message: str) -> None:
    """The fits of alpha = 10 (param 2, every split) of ``dying`` failed with an error
    containing ``message``; every other fit is done and byte-equal to ``clean``'s."""
    a, b = cube_arrays(dying), cube_arrays(clean)
    assert a["done"].all()
    culprit = np.zeros(a["done"].shape, bool)
    culprit[2] = True
    np.testing.assert_array_equal(a["failed"], culprit)
    assert all(message in e for e in a["error"][culprit]), a["error"][culprit]
    assert np.isnan(a["pred"][culprit]).all()
    assert a["pred"][~culprit].tobytes() == b["pred"][~culprit].tobytes()


class EnvRidge(Ridge):
    """Ridge whose fit raises unless the environment variable ``needs`` is set in the process
    that fits: a learner that sees which environment its worker inherited."""

    def __init__(self, alpha=1.0, needs="CVFLOW_TEST_MARK"):
        super().__init__(alpha=alpha)
        self.needs = needs

    def fit(self, X, y, sample_weight=None):
        if self.needs not in os.environ:
            raise RuntimeError(f"{self.needs} is not set in this worker's environment")
        return super().fit(X, y, sample_weight=sample_weight)


class TaggedRidge(Ridge):
    """Ridge with a string hyperparameter ``tag`` it ignores, raising ``ValueError(error)``
    when ``tag == fail_tag``: a learner whose grid labels and failure messages are whatever
    strings a test chooses (the page tests)."""

    def __init__(self, alpha=0.01, tag="", fail_tag=None, error=""):
        super().__init__(alpha=alpha)
        self.tag, self.fail_tag, self.error = tag, fail_tag, error

    def fit(self, X, y, sample_weight=None):
        if self.fail_tag is not None and self.tag == self.fail_tag:
            raise ValueError(self.error)
        return super().fit(X, y, sample_weight=sample_weight)


class GatedRidge(Ridge):
    """Ridge whose first fit in the study on at least ``min_rows`` rows (the one that creates
    the file ``claim``) waits until the file ``gate`` exists, at most ``limit`` seconds: a run
    that keeps running until its test lets it end, in whatever order its fits run (one worker
    thread waits, the others fit)."""

    def __init__(self, alpha=1.0, gate=None, claim=None, min_rows=0, limit=600.0):
        super().__init__(alpha=alpha)
        self.gate, self.claim, self.min_rows, self.limit = gate, claim, min_rows, limit

    def fit(self, X, y, sample_weight=None):
        _wait_at_gate(self, X)
        return super().fit(X, y, sample_weight=sample_weight)


def _wait_at_gate(model, X) -> None:
    """A gated learner's wait (see GatedRidge): only in the fit that creates ``claim``."""
    from cvflow.fitting.trial import in_trial

    if model.gate and len(X) >= model.min_rows and not in_trial():
        try:
            os.close(os.open(model.claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        deadline = time.monotonic() + model.limit
        while not os.path.exists(model.gate) and time.monotonic() < deadline:
            time.sleep(0.05)


class GatedLogistic(LogisticRegression):
    """LogisticRegression held open like GatedRidge: a classification run (string labels
    too) that lasts until its test lets it end."""

    def __init__(self, C=1.0, max_iter=2000, gate=None, claim=None, min_rows=0, limit=600.0):
        super().__init__(C=C, max_iter=max_iter)
        self.gate, self.claim, self.min_rows, self.limit = gate, claim, min_rows, limit

    def fit(self, X, y, sample_weight=None):
        _wait_at_gate(self, X)
        return super().fit(X, y, sample_weight=sample_weight)


class FullFitGatedRidge(GatedRidge):
    """GatedRidge for a raced study held open at its full fit: ``min_rows`` above the folds'
    training size, so only the full fit (the last stage, after every look) waits."""




def slow_grow(pause: float = 0.5) -> None:
    """Make this process's grows (cvflow.store.creation.grow) pause after each of their writes:
    a reader in another process then meets every state between them. For a CLI process:
    ``python -c "import fault_helpers; fault_helpers.slow_grow(); from cvflow.cli import
    console; console()" run ...`` (see :func:`start_slow_grow`)."""
    from cvflow.store import creation

    write = creation._write

    def slow(*args, **kwargs):
        write(*args, **kwargs)
        time.sleep(pause)

    creation._write = slow


def start_slow_grow(workflow: Path, store, *args: str) -> subprocess.Popen:
    """``cvflow run`` whose grow pauses between its writes (:func:`slow_grow`), in its own
    session."""
    code = ("import sys, fault_helpers; fault_helpers.slow_grow(); sys.argv[0] = 'cvflow'; "
            "from cvflow.cli import console; console()")
    return subprocess.Popen([sys.executable, "-c", code, "run", str(workflow), "--store",
                             str(store), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env(), start_new_session=True)


def read_while(proc: subprocess.Popen, store, *, shapes: tuple) -> dict:
    """Open the store (``cvflow.open``) and read its status in a loop while ``proc`` runs:
    ``{"shapes": set of (params, splits) opened, "status": set of totals, "errors": Counter}``.
    ``shapes`` are those a whole study may have (before and after a grow)."""
    from collections import Counter

    import cvflow
    from cvflow.report.results import status

    seen: dict = {"shapes": set(), "status": set(), "errors": Counter()}
    while proc.poll() is None:
        try:
            cube = cvflow.open(store)
            shape = (cube.sizes["param"], cube.sizes["split"])
            seen["shapes"].add(shape)
            if shape not in shapes:
                seen["errors"][f"a mixed store {shape}"] += 1
        except Exception as exc:  # noqa: BLE001 - counted: the test asserts there are none
            seen["errors"][f"open: {type(exc).__name__}: {exc}"] += 1
        try:
            seen["status"].add(status(store)["total"])
        except Exception as exc:  # noqa: BLE001 - counted
            seen["errors"][f"status: {type(exc).__name__}: {exc}"] += 1
    return seen


class ForkingRidge(Ridge):
    """Ridge whose fit forks a grandchild that lives ``linger`` seconds (its pid written to a
    new file in ``pids``) when ``alpha == fork_at``, then: ``then="return"`` fits as usual,
    ``"exit"`` ends its process (``os._exit(3)``), ``"hang"`` never returns. The grandchild
    inherits every descriptor of the fitting process (a child's pipes, a worker's sockets)."""

    def __init__(self, alpha=1.0, fork_at=None, then="return", pids=None, linger=600.0):
        super().__init__(alpha=alpha)
        self.fork_at, self.then, self.pids, self.linger = fork_at, then, pids, linger

    def fit(self, X, y, sample_weight=None):
        from cvflow.fitting.trial import in_trial

        if self.fork_at is not None and self.alpha == self.fork_at and not in_trial():
            pid = os.fork()
            if pid == 0:                                    # the grandchild: it only lingers
                try:
                    Path(self.pids, f"{os.getpid()}").touch()
                    time.sleep(self.linger)
                finally:
                    os._exit(0)
            while not Path(self.pids, f"{pid}").exists():
                time.sleep(0.01)
            if self.then == "exit":
                os._exit(3)
            while self.then == "hang":
                time.sleep(3600)
        return super().fit(X, y, sample_weight=sample_weight)


def pids_alive(directory, wait: float = 30.0) -> list[int]:
    """The pids named by the files in ``directory`` still alive (zombies count as ended)
    after at most ``wait`` seconds."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    pids = [int(p.name) for p in Path(directory).iterdir()]
    deadline = time.monotonic() + wait
    while True:
        living = [pid for pid in pids if alive(pid)]
        if not living or time.monotonic() > deadline:
            return living
        time.sleep(0.1)
