"""The run lock of a store: one ``cvflow run`` at a time writes a given cube.

A lock is a small JSON file ``<store>.lock`` beside the store holding the host, pid, start
time and a heartbeat time that a background thread refreshes while the run goes on::

    with run_lock("study.zarr"):
        ...  # create or resume the store, submit the blocks

A second run on the same store is refused with :class:`cvflow.errors.StoreError`. A lock
left by a crashed run never sticks: it is taken over when its owner is provably dead (same
host, pid gone) or when its heartbeat is older than ``stale_after`` seconds (another host,
a frozen machine, or a reused pid).

On an object store (a store at a URL, :mod:`cvflow.store.location`) the lock is a *lease object*
``<store>.lock`` written with S3's conditional writes: taken with ``If-None-Match: *`` (create
only if absent: of two runs racing, exactly one succeeds), refreshed with ``If-Match: <ETag of
our last write>`` (a run that lost its lease learns it at its next heartbeat and stops
refreshing), and a stale lease is removed with ``If-Match: <the ETag judged stale>`` (a
takeover never deletes a lease renewed meanwhile). This holds on AWS S3 and on
S3-compatible servers that implement conditional writes (MinIO, moto, Ceph RGW). What it
guarantees: no two live runs hold the lease at once; a dead run's lease is taken over
``stale_after`` seconds after its last heartbeat (the owner's pid cannot be checked across
machines). Other fsspec schemes get create-if-absent where their backend supports it and
unconditional refreshes otherwise (best effort).

DESIGN CHOICE: the lock sits *beside* the store, not inside it. The store is created with
Zarr's ``mode="w-"`` (fail if anything is there), which refuses a directory that already
holds a lock file; a sibling file can be taken before the store exists, so two runs racing
to create the same fresh store are serialised too. Taking the lock is ``O_CREAT | O_EXCL``,
atomic on local file systems and on NFSv3+/Lustre/GPFS.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator


from ..errors import StoreError
from .location import filesystem, identity, is_url, link_target, resolve, sibling
from .. import config

log = logging.getLogger(__name__)


def lock_path(store: str | os.PathLike) -> Path | str:
    """The lock of ``store``: ``<store>.lock`` beside the store itself (symbolic links resolved,
    :func:`cvflow.store.location.identity`; a Path, or a URL for a store at a URL)."""
    location = sibling(identity(resolve(store)), ".lock")
    return location if is_url(location) else Path(location)


class LinkedLock(StoreError):
    """A symbolic link stands where a store's lock file goes: cvflow never follows it."""

    def __init__(self, path):
        super().__init__(f"store: the run lock {path} is a symbolic link (to "
                         f"{link_target(os.fspath(path))}); cvflow never follows a link beside "
                         "a store (nothing was written): remove it")


class _FileSlot:
    """The lock file on a local (or shared POSIX) file system; versions are unused."""

    def __init__(self, path: Path):
        self.path = path

    def create(self, data: bytes) -> object:
        """Write the lock if none exists (FileExistsError otherwise), whole or not at all.

        DESIGN CHOICE: the record is written to a temporary file first, then hard-linked to
        the lock's name: ``link`` fails if the name exists (the ``O_EXCL`` guarantee, atomic on
        local file systems and NFS) and publishes a complete file, so a write cut by a full
        disk or a kill leaves no empty lock behind (tests/test_lock.py, the full-disk test).
        A file system without hard links gets ``O_EXCL`` and one write, and a failed write
        removes the file it created.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._temporary(data)
        try:
            os.link(tmp, self.path)                 # FileExistsError if held
            return None
        except FileExistsError:
            raise
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)  # FileExistsError
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        return None

    def _temporary(self, data: bytes) -> Path:
        """``data`` in a new file beside the lock (removed again if the write fails)."""
        tmp = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return tmp

    def read(self) -> tuple[bytes | None, object, float | None]:
        """(content or None if absent, version, modification time); a symbolic link at the
        lock's name is never followed (:class:`LinkedLock`)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except (FileNotFoundError, NotADirectoryError):
            return None, None, None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise LinkedLock(self.path) from None
            raise
        with os.fdopen(fd, "rb") as f:
            return f.read(), None, os.fstat(f.fileno()).st_mtime

    def replace(self, data: bytes, version: object) -> object:
        tmp = self._temporary(data)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return None

    def delete(self, version: object) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class _ObjectSlot:
    """The lease object on an object store (conditional writes on S3, see the module doc)."""

    def __init__(self, url: str):
        self.url = url
        self.fs, self.path = filesystem(url)
        self.s3 = hasattr(self.fs, "call_s3")

    def create(self, data: bytes) -> object:
        out = self.fs.pipe_file(self.path, data, mode="create")   # FileExistsError if present
        return (out or {}).get("ETag") if isinstance(out, dict) else None

    def read(self) -> tuple[bytes | None, object, float | None]:
        # the version first, then the content: a content newer than the version can only
        # make a conditional delete fail, never remove a renewed lease
        try:
            info = self.fs.info(self.path, refresh=True) if self.s3 else self.fs.info(self.path)
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None, None, None
        mtime = info.get("LastModified") or info.get("mtime")
        stamp = mtime.timestamp() if hasattr(mtime, "timestamp") else mtime
        return data, info.get("ETag"), stamp

    def replace(self, data: bytes, version: object) -> object:
        if self.s3 and version:
            out = self.fs.pipe_file(self.path, data, IfMatch=version)   # OSError if not ours
            return out.get("ETag") if isinstance(out, dict) else None
        self.fs.pipe_file(self.path, data)
        return None

    def delete(self, version: object) -> None:
        try:
            if self.s3 and version:
                bucket, key, _ = self.fs.split_path(self.path)
                self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=version)
                self.fs.invalidate_cache(self.path)
            else:
                self.fs.rm_file(self.path)
        except FileNotFoundError:
            pass


def _slot(store: str | os.PathLike):
    path = lock_path(store)
    return _ObjectSlot(path) if isinstance(path, str) else _FileSlot(path)


def _parse(data: bytes | None) -> dict | None:
    if data is None:
        return None
    try:
        record = json.loads(data)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {}  # being written, or garbage: judged by its age


def read_lock(store: str | os.PathLike) -> dict | None:
    """The lock record of ``store`` (host, pid, started, heartbeat, token), or None if free."""
    return _parse(_slot(store).read()[0])


def held(store: str | os.PathLike) -> bool:
    """Whether a run holds ``store``'s lock now (a lock that is not stale, config
    ``cvflow.lock.stale-after``: its owner may still be running, or one being written: a run is
    taking it); False when there is none."""
    try:
        data, _, mtime = _slot(store).read()
    except StoreError:          # a link in the lock's place: no run holds it
        return False
    record = _parse(data)
    if not record:
        return record == {}
    return is_stale(record, mtime, stale_after=float(config.get("cvflow.lock.stale-after"))) is None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# seconds a heartbeat may be ahead of this machine's clock (another host's clock, NTP steps)
CLOCK_SKEW = 60.0


def bad_heartbeat(record: dict) -> str | None:
    """What is wrong with a lock's heartbeat (``"heartbeat nan is not a time"``, ``"heartbeat
    3600 s in the future"``), or None when it is a time up to :data:`CLOCK_SKEW` ahead (or
    absent: the lock file's age stands for it)."""
    beat = record.get("heartbeat")
    if beat is None:
        return None
    if isinstance(beat, bool) or not isinstance(beat, (int, float)) or not math.isfinite(beat):
        return f"heartbeat {beat!r} is not a time"
    ahead = beat - time.time()
    if ahead > CLOCK_SKEW:
        return f"heartbeat {ahead:.0f} s in the future"
    return None


def _age(record: dict, mtime: float | None) -> float:
    """Seconds since the owner last showed life (heartbeat, else the lock's mtime)."""
    beat = record.get("heartbeat")
    if bad_heartbeat(record) is not None or not isinstance(beat, (int, float)):
        if mtime is None:
            return float("inf")
        beat = mtime
    return time.time() - float(beat)


# DESIGN CHOICE: cvflow writes a lock whole (taken: a hard link to a complete file; refreshed:
# a rename), so an empty or unparseable lock belongs to no live run: its writer stopped
# mid-write (a full disk, a kill, a crash of the machine, an older cvflow that opened the
# lock, then wrote it). It is taken over once this old: time for such an older writer to
# finish its one write, not the two minutes of a silent owner.
UNREADABLE_GRACE = 2.0


def is_stale(record: dict, mtime: float | None, *, stale_after: float) -> str | None:
    """Why the lock is stale (a short reason), or None if its owner may still be running.

    ``record`` is the parsed lock; ``{}`` for an empty or unparseable one (see
    :data:`UNREADABLE_GRACE`).
    """
    if not record:
        age = math.inf if mtime is None else time.time() - mtime
        if age >= min(UNREADABLE_GRACE, stale_after):
            return (f"the lock file is empty or unreadable, {age:.0f} s old (a run stopped "
                    "while writing it, e.g. on a full disk)")
        return None
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        if not _pid_alive(record["pid"]):
            return f"pid {record['pid']} on {record['host']} is gone"
    age = _age(record, mtime)
    bad = bad_heartbeat(record)
    if bad is not None:
        # DESIGN CHOICE: a heartbeat that is no time, or far ahead of ours, says nothing of its
        # owner's life (it once kept every run out for ever: "heartbeat -998204179311 s ago").
        # The lock file's own age stands for it when that is a time of ours; otherwise
        # RunLock.acquire watches the record for stale_after seconds of this machine's clock.
        if mtime is not None and -CLOCK_SKEW <= age and age > stale_after:
            return f"its {bad}, and the lock file has not changed for {age:.0f} s"
        return None
    if age > stale_after:
        return f"no heartbeat for {age:.0f} s (stale after {stale_after:.0f} s)"
    return None


def describe(record: dict) -> str:
    """One line about who holds a lock: ``pid 123 on host, started 2024-.. (heartbeat 3 s ago)``."""
    started = record.get("started")
    try:
        when = _dt.datetime.fromtimestamp(started).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError, OSError):      # not a time
        when = "?"
    beat = record.get("heartbeat")
    bad = bad_heartbeat(record)
    ago = (f", {bad}" if bad is not None else f", heartbeat {time.time() - beat:.0f} s ago"
           if isinstance(beat, (int, float)) and not isinstance(beat, bool) else "")
    return f"pid {record.get('pid', '?')} on {record.get('host', '?')}, started {when}{ago}"


class RunLock:
    """A held run lock; refreshes its heartbeat from a daemon thread until :meth:`release`.

    Use :func:`run_lock` rather than this class directly.
    """

    def __init__(self, store: str | os.PathLike, *, heartbeat: float, stale_after: float):
        self.store = resolve(store)
        self.path = lock_path(store)
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.token = uuid.uuid4().hex
        self.lost = False
        self._slot = _slot(store)
        self._version: object = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write = threading.Lock()
        # what this run fits in its own process (mark), and the record of a dead run taken
        # over that was fitting in its process when it died (cvflow.execution.inflight)
        self.running: list | None = None
        self.inherited: dict | None = None

    def _record(self, started: float) -> bytes:
        record = {"host": socket.gethostname(), "pid": os.getpid(), "started": started,
                  "heartbeat": time.time(), "token": self.token, "store": self.store}
        if self.running:
            record["running"] = self.running
        return json.dumps(record).encode()

    def mark(self, running: list | None) -> None:
        """Record what this process fits now (None: nothing), written at once: a fit that
        ends the process leaves it in the lock for the next run (``inherited``)."""
        with self._write:
            self.running = running
            try:
                self._version = self._slot.replace(self._record(self.started), self._version)
            except OSError as err:        # as a heartbeat: never a reason to stop the run
                log.warning("could not write the run lock %s: %s", self.path, err)

    def acquire(self) -> None:
        self.started = time.time()
        for _ in range(5):
            try:
                self._version = self._slot.create(self._record(self.started))
                break
            except FileExistsError:
                pass
            except OSError as err:       # a full disk, a read-only directory: nothing written
                raise OSError(err.errno, f"cannot write the run lock {self.path}: "
                              f"{err.strerror or err}") from err
            data, version, mtime = self._slot.read()
            record = _parse(data)
            if record is None:
                continue  # released in between: try again
            reason = is_stale(record, mtime, stale_after=self.stale_after)
            if reason is None and not record:    # unreadable and young: wait, then judge
                time.sleep(min(UNREADABLE_GRACE, self.stale_after))
                continue
            if reason is None and bad_heartbeat(record) is not None:
                reason = self._unchanged(data, record)
                if reason == "":
                    continue                     # released meanwhile: try again
            if reason is None:
                raise StoreError(
                    f"store: {self.store} is being written by another cvflow run "
                    f"({describe(record)}); wait for it to finish, or remove {self.path} "
                    "if that run is gone") from None
            # DESIGN CHOICE: remove only the very record judged stale, so two runs taking
            # over at once cannot remove each other's fresh lock (a new record differs;
            # on S3 the delete is conditional on the stale record's ETag).
            if _parse(self._slot.read()[0]) == record:
                if record.get("running"):       # the run says which fits it died in
                    self.inherited = record
                else:
                    log.warning("taking over the stale lock of %s: %s", self.store, reason)
                with contextlib.suppress(OSError):
                    self._slot.delete(version)
        else:
            raise StoreError(f"store: could not take the lock {self.path}; "
                             "another run keeps taking it")
        self._thread = threading.Thread(target=self._beat, name="cvflow-lock-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _unchanged(self, data: bytes | None, record: dict) -> str | None:
        """Watch a lock whose heartbeat is no time of ours for ``stale_after`` seconds of this
        machine's clock: the reason it is stale if it never changed, None if its owner
        rewrote it (alive), "" if it was released."""
        bad = bad_heartbeat(record)
        log.warning("the run lock %s has a %s (%s); it is taken over if it does not change for "
                    "%.0f s (cvflow.lock.stale-after)", self.path, bad, describe(record),
                    self.stale_after)
        first = time.monotonic()
        while (left := self.stale_after - (time.monotonic() - first)) > 0:
            time.sleep(min(self.heartbeat, left))
            now = self._slot.read()[0]
            if now is None:
                return ""
            if now != data:
                return None
        return f"its {bad}, and it did not change for {self.stale_after:.0f} s"

    def _owned(self) -> bool:
        try:
            record = read_lock(self.store)
        except LinkedLock:          # replaced by a link: not ours any more
            return False
        return bool(record) and record.get("token") == self.token

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if not self._owned():
                self.lost = True
                log.error("lost the run lock %s to another run", self.path)
                return
            try:
                with self._write:
                    self._version = self._slot.replace(self._record(self.started),
                                                       self._version)
            except OSError as err:  # a full disk must not kill the run; the lock may go stale
                log.warning("could not refresh the run lock %s: %s", self.path, err)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._owned():
            with contextlib.suppress(OSError):
                self._slot.delete(self._version)


@contextlib.contextmanager
def run_lock(store: str | os.PathLike, *, heartbeat: float | None = None,
             stale_after: float | None = None) -> Iterator[RunLock]:
    """Hold the run lock of ``store`` for the duration of the block.

    Parameters
    ----------
    store
        The store path or URL (it need not exist yet).
    heartbeat, stale_after
        Seconds between heartbeats, and age after which a lock whose owner cannot be
        checked (another host) counts as abandoned. Default: config ``cvflow.lock.heartbeat``
        (10) and ``cvflow.lock.stale-after`` (120).

    Raises
    ------
    cvflow.errors.StoreError
        The store is being written by a live run (the message names its pid and host).
    """

    heartbeat = float(config.get("cvflow.lock.heartbeat") if heartbeat is None else heartbeat)
    stale_after = float(config.get("cvflow.lock.stale-after")
                        if stale_after is None else stale_after)
    config.check_lock_times(heartbeat, stale_after)
    lock = RunLock(store, heartbeat=heartbeat, stale_after=stale_after)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
