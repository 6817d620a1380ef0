"""A cvflow store as a zarr group: the attributes and the marker that make one
(:func:`is_store`), opening its root group, its small variables read eagerly, consolidated
metadata rewritten quietly. The schema is :mod:`cvflow.store.cube`'s.
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Literal

import numpy as np
import zarr

from . import integrity
from .location import exists, identity, resolve, sibling, storage_options

FORMAT_ATTR = "cvflow_version"
# Store format: 1 (no attribute) before multiclass; 2 adds the `class` dim of multiclass `pred`;
# 3 adds the fit-time scores (`score`, `train_score`, `score_time` along `scorer`): only a store
# with scorers is written as 3 (an older cvflow would extend it without its scores), any other
# still as 2. A store of format <= STORE_FORMAT opens and reduces; a newer one is refused.
STORE_FORMAT_ATTR, STORE_FORMAT = "cvflow_format", 3
UNSCORED_FORMAT = 2             # the format of a store without scorers
CREATING = ".creating"     # the creation marker beside a store (see creation.create)
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


def read_mask(store: str | os.PathLike, name: str, *, consolidated: bool = False) -> np.ndarray:
    """A small (param, split) variable read eagerly (done, failed, fit_seconds, error), opened
    from its own ``zarr.json`` (or from the root's consolidated metadata, as xarray opens it)."""
    location = resolve(store)
    return integrity.read(location, name,
                          array=open_group(location)[name] if consolidated else None)
