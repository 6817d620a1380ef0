"""The run lock of a store: one ``cvflow run`` at a time writes a given cube.

A lock is a small JSON file ``<store>.lock`` beside the store holding the host, pid, start
time and a heartbeat time that a background thread refreshes while the run goes on::

    with run_lock("study.zarr"):
        ...  # create or resume the store, submit the blocks

A second run on the same store is refused with :class:`cvflow.errors.StoreError`. A lock
left by a crashed run never sticks: it is taken over when its owner is provably dead (same
host, pid gone) or when its heartbeat is older than ``stale_after`` seconds (another host,
a frozen machine, or a reused pid).

DESIGN CHOICE: the lock sits *beside* the store, not inside it. The store is created with
Zarr's ``mode="w-"`` (fail if anything is there), which refuses a directory that already
holds a lock file; a sibling file can be taken before the store exists, so two runs racing
to create the same fresh store are serialised too. Taking the lock is ``O_CREAT | O_EXCL``,
atomic on local file systems and on NFSv3+/Lustre/GPFS.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import dask.config

from .errors import StoreError

log = logging.getLogger(__name__)


def lock_path(store: str | os.PathLike) -> Path:
    """The lock file of ``store``: ``<store>.lock`` (trailing slashes ignored)."""
    store = Path(os.path.abspath(os.fspath(store)))
    return store.with_name(store.name + ".lock")


def read_lock(store: str | os.PathLike) -> dict | None:
    """The lock record of ``store`` (host, pid, started, heartbeat, token), or None if free."""
    try:
        text = lock_path(store).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        record = json.loads(text)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {}  # being written, or garbage: judged by the file's age


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _age(record: dict, path: Path) -> float:
    """Seconds since the owner last showed life (heartbeat, else the file's mtime)."""
    beat = record.get("heartbeat")
    if not isinstance(beat, (int, float)):
        try:
            beat = path.stat().st_mtime
        except FileNotFoundError:
            return float("inf")
    return time.time() - float(beat)


def is_stale(record: dict, path: Path, *, stale_after: float) -> str | None:
    """Why the lock is stale (a short reason), or None if its owner may still be running."""
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        if not _pid_alive(record["pid"]):
            return f"pid {record['pid']} on {record['host']} is gone"
    age = _age(record, path)
    if age > stale_after:
        return f"no heartbeat for {age:.0f} s (stale after {stale_after:.0f} s)"
    return None


def describe(record: dict) -> str:
    """One line about who holds a lock: ``pid 123 on host, started 2024-.. (heartbeat 3 s ago)``."""
    started = record.get("started")
    when = (_dt.datetime.fromtimestamp(started).isoformat(timespec="seconds")
            if isinstance(started, (int, float)) else "?")
    beat = record.get("heartbeat")
    ago = f", heartbeat {time.time() - beat:.0f} s ago" if isinstance(beat, (int, float)) else ""
    return f"pid {record.get('pid', '?')} on {record.get('host', '?')}, started {when}{ago}"


class RunLock:
    """A held run lock; refreshes its heartbeat from a daemon thread until :meth:`release`.

    Use :func:`run_lock` rather than this class directly.
    """

    def __init__(self, store: str | os.PathLike, *, heartbeat: float, stale_after: float):
        self.store = os.fspath(store)
        self.path = lock_path(store)
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.token = uuid.uuid4().hex
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self, started: float) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "started": started,
                "heartbeat": time.time(), "token": self.token, "store": os.path.abspath(self.store)}

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                record = read_lock(self.store)
                if record is None:
                    continue  # released in between: try again
                reason = is_stale(record, self.path, stale_after=self.stale_after)
                if reason is None:
                    raise StoreError(
                        f"store: {self.store} is being written by another cvflow run "
                        f"({describe(record)}); wait for it to finish, or remove {self.path} "
                        "if that run is gone") from None
                # DESIGN CHOICE: remove only the very record judged stale, so two runs taking
                # over at once cannot remove each other's fresh lock (a new record differs).
                if read_lock(self.store) == record:
                    log.warning("taking over the stale lock of %s: %s", self.store, reason)
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(self._record(self.started), f)
            break
        else:
            raise StoreError(f"store: could not take the lock {self.path}; "
                             "another run keeps taking it")
        self._thread = threading.Thread(target=self._beat, name="cvflow-lock-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _owned(self) -> bool:
        record = read_lock(self.store)
        return bool(record) and record.get("token") == self.token

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if not self._owned():
                self.lost = True
                log.error("lost the run lock %s to another run", self.path)
                return
            tmp = self.path.with_name(f"{self.path.name}.{self.token}.tmp")
            try:
                tmp.write_text(json.dumps(self._record(self.started)))
                os.replace(tmp, self.path)
            except OSError as err:  # a full disk must not kill the run; the lock may go stale
                log.warning("could not refresh the run lock %s: %s", self.path, err)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._owned():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


@contextlib.contextmanager
def run_lock(store: str | os.PathLike, *, heartbeat: float | None = None,
             stale_after: float | None = None) -> Iterator[RunLock]:
    """Hold the run lock of ``store`` for the duration of the block.

    Parameters
    ----------
    store
        The store path (it need not exist yet).
    heartbeat, stale_after
        Seconds between heartbeats, and age after which a lock whose owner cannot be
        checked (another host) counts as abandoned. Default: config ``cvflow.lock.heartbeat``
        (10) and ``cvflow.lock.stale-after`` (120).

    Raises
    ------
    cvflow.errors.StoreError
        The store is being written by a live run (the message names its pid and host).
    """
    from . import cluster  # noqa: F401 - loads the packaged config defaults

    heartbeat = float(dask.config.get("cvflow.lock.heartbeat") if heartbeat is None else heartbeat)
    stale_after = float(dask.config.get("cvflow.lock.stale-after")
                        if stale_after is None else stale_after)
    if stale_after <= heartbeat:
        raise ValueError(f"stale_after ({stale_after}) must exceed heartbeat ({heartbeat})")
    lock = RunLock(store, heartbeat=heartbeat, stale_after=stale_after)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
