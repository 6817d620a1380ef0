"""A cvflow store as a zarr group: the attributes and the marker that make one
(:func:`is_store`), opening its root group, its small variables read eagerly, consolidated
metadata rewritten quietly. The schema is :mod:`cvflow.store.cube`'s.
"""
from __future__ import annotations

import os
import time
import warnings
from contextlib import contextmanager
from typing import Callable, Literal, TypeVar
import json
import socket

import numpy as np
import zarr

from . import integrity
from ..errors import StoreError
from .schema import FORMAT_ATTR, STORE_FORMAT, STORE_FORMAT_ATTR, UNSCORED_FORMAT  # noqa: F401
from .location import exists, get, identity, is_link, resolve, sibling, storage_options
from .lock import _pid_alive, held

CREATING = ".creating"     # the creation marker beside a store (see creation.create)
GROWING = ".growing"       # the grow marker beside a store (see creation.grow, stable)
# a reader waits at most this long for a live run to finish growing the store it reads
GROW_WAIT = 120.0
T = TypeVar("T")
# Variables open_cube leaves lazy: `pred` (a dask array, one chunk per store chunk) and `X`
# (read from the store when its values are asked: Study.data, refit; no reducer reads it).
LAZY_VARIABLES = ("pred", "X")


@contextmanager
def quiet_consolidation():
    # DESIGN CHOICE: consolidated metadata (the whole schema in the root zarr.json) so a plain
    # `xr.open_zarr(store)` opens a store in one metadata read, silently, on a disk or an
    # object store. zarr warns on every consolidation that consolidated metadata is not yet
    # part of the v3 spec; we choose it knowingly, so that one warning is silenced here.
    # `catch_warnings` is not thread-safe: a learner's own one in a fitting thread can restore
    # the filters mid-consolidation, so the same filter is also set for the process (a caller's
    # later "error" filters still meet the local one here).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        yield


warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part",
                        category=UserWarning, module=r"zarr\.")


def marker(location: str) -> str:
    """The creation marker of the store at ``location``: ``<store>.creating`` beside the store
    itself (symbolic links resolved: one store, one marker, whatever it is called)."""
    return sibling(identity(location), CREATING)


def not_a_store(location: str) -> StoreError:
    """The error for ``location`` when it holds no cvflow store: one whose creation did not
    finish (its marker remains: the run creating it stopped, or failed, e.g. on a full disk)
    says so, and how to finish it."""
    if exists(marker(location)):
        return StoreError(f"store: {location}: its creation did not finish (the run creating it "
                          f"stopped or failed; {marker(location)} remains); run the same "
                          "command again to create it anew")
    return StoreError(f"store: {location} exists but is not a cvflow store")


def grow_marker(location: str) -> str:
    """The grow marker of the store at ``location``: ``<store>.growing`` beside the store
    itself, present while a run appends params or splits (:func:`cvflow.store.creation.grow`)."""
    return sibling(identity(location), GROWING)


def grow_record(root: bytes | None) -> bytes:
    """The grow marker's content: who grows the store (this process), and the root
    ``zarr.json`` as the grow's last whole write left it (``root``: its bytes), to put back if
    the grow is cut in the middle of a write (:func:`cvflow.store.creation.grow_was_cut`)."""
    return json.dumps({"cvflow": "growing", "host": socket.gethostname(), "pid": os.getpid(),
                       "root": None if root is None else root.decode()}).encode()


def _growing(location: str) -> bool:
    """Whether a live run grows the store: its grow marker is there, its writer (the process
    the marker names, when on this host) is alive, and a live run holds the store's lock. A
    marker left by a grow that was cut is not waited for (the next run, holding the lock,
    sees its writer dead)."""
    raw = get(grow_marker(location))
    if raw is None or is_link(grow_marker(location)):    # a grow refuses a link: not one
        return False
    try:
        writer = json.loads(raw)
    except ValueError:
        writer = None
    if not (isinstance(writer, dict) and writer.get("cvflow") == "growing"):
        # not a grow record (cvflow writes its marker whole: put): junk left in its place
        return False
    if (writer.get("host") == socket.gethostname()
            and isinstance(writer.get("pid"), int) and not _pid_alive(writer["pid"])):
        return False
    return held(location)


def stable(location: str, read: Callable[[], T], *, wait: float | None = None) -> T:
    """``read()`` of the store at ``location`` as one state of it: the state before a grow or
    after it, never a mix (nor an error of a mix: "not a cvflow store", a damaged attribute).

    DESIGN CHOICE: a grow (an extended study, :func:`cvflow.store.creation.grow`) rewrites many
    objects: each grown array's metadata and tail chunks, the role tables, the root's
    attributes and consolidated metadata, in four xarray writes. Zarr has no commit over
    several objects and an object store cannot rename a prefix, so the writer cannot switch
    them at once (copying the store first would cost its size). It marks the grow instead
    (``<store>.growing``, written before the first write and removed after the last), and a
    reader checks, as a sequence lock: the marker absent and the root ``zarr.json`` (every
    array's shape, the attributes) the same bytes before and after its read, else it reads
    again; while a live run grows the store it waits, at most ``wait`` seconds
    (:data:`GROW_WAIT`), then raises StoreError saying so. A marker left by a run that was cut
    (its process is gone, or no live run holds the lock) is not waited for: a store a grow
    left half grown is read as it is (the next run grows it again). Readers in a loop during grows:
    tests/test_extend.py (local) and tests/test_s3.py.
    """
    wait = GROW_WAIT if wait is None else wait
    deadline = time.monotonic() + wait
    pause = 0.02

    def version() -> tuple[bool, bytes | None]:
        return _growing(location), get(location.rstrip("/") + "/zarr.json")

    while True:
        before = version()
        if not before[0]:
            try:
                out, error = read(), None
            except Exception as exc:  # noqa: BLE001 - raised below unless the store changed
                out, error = None, exc
            if version() == before:
                if error is not None:
                    raise error
                return out                                   # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise StoreError(f"store: {location} is being extended by another cvflow run "
                             f"(params or splits appended; waited {wait:.0f} s); read it again "
                             "when that run has grown it")
        time.sleep(pause)
        pause = min(2 * pause, 0.5)


def open_group(location: str, mode: Literal["r", "r+"] = "r"):
    return zarr.open_group(location, mode=mode, storage_options=storage_options(location))


def is_store(store: str | os.PathLike) -> bool:
    """A complete cvflow store is at ``store`` (not a half-created one, not something else)."""
    location = resolve(store)
    try:
        complete = FORMAT_ATTR in open_group(location).attrs
    except Exception:  # noqa: BLE001 - anything unreadable is not a cvflow store
        return False
    return complete and not exists(marker(location))


def writable(store: str | os.PathLike) -> bool:
    """Whether the tasks may write ``pred``: the store is complete (:func:`is_store`), or being
    created by the run that holds its lock and past ``pred``'s metadata
    (:func:`cvflow.store.creation.create` puts it first)."""
    # DESIGN CHOICE: checked in the order a creation goes (pred's metadata, then the marker
    # gone): a creation ending between two checks is seen as ended, never as "not created"
    # (checking is_store first then the marker lost that race under load: the marker removed
    # between the two reads)
    location = resolve(store)
    if get(location.rstrip("/") + "/pred/zarr.json") is None:
        return False
    return exists(marker(location)) or is_store(location)


def read_mask(store: str | os.PathLike, name: str, *, consolidated: bool = False) -> np.ndarray:
    """A small (param, split) variable read eagerly (done, failed, fit_seconds, error), opened
    from its own ``zarr.json`` (or from the root's consolidated metadata, as xarray opens it)."""
    location = resolve(store)
    return integrity.read(location, name,
                          array=open_group(location)[name] if consolidated else None)


def read_where(store: str | os.PathLike, name: str, mask: np.ndarray, *,
               consolidated: bool = False) -> np.ndarray:
    """The values of a (param, split) variable at the cells where ``mask`` is True (1-D, in
    the order of ``np.nonzero(mask)``), reading only the chunks that hold such a cell: the
    messages of the failed fits, without the (param, split) array of every fit's ``error``.

    ``mask`` may be smaller than the variable (its leading part is read); opened as
    :func:`read_mask` opens it.
    """
    location = resolve(store)
    array = open_group(location)[name] if consolidated else integrity.open_array(location, name)
    mask = np.asarray(mask, dtype=bool)
    found: list[tuple[np.ndarray, np.ndarray]] = []      # (flat index in mask, values) a chunk
    for chunk in np.ndindex(*integrity.grid(array)[:2]):
        where = tuple(slice(sl.start, min(sl.stop, n)) for sl, n in
                      zip(integrity.region(array, chunk), mask.shape))
        if any(sl.start >= sl.stop for sl in where) or not mask[where].any():
            continue
        values = np.asarray(integrity.read(location, name, where, array=array), dtype=object)
        rows, cols = np.nonzero(mask[where])
        found.append((np.ravel_multi_index((rows + where[0].start, cols + where[1].start),
                                           mask.shape), values[rows, cols]))
    if not found:
        return np.empty(0, dtype=object)
    index = np.concatenate([f[0] for f in found])
    return np.concatenate([f[1] for f in found])[np.argsort(index, kind="stable")]
