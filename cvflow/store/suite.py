"""A suite's store: a Zarr group whose child groups are cubes, one per data set.

``suite.zarr/`` holds a group (``zarr.json``) whose attribute ``cvflow_suite`` lists the data
sets; ``suite.zarr/<data set>/`` is a cube with the schema of DESIGN.md section 3, written by
the single-data-set run and opened, reduced and reported alone by every tool that reads a cube
(``cvflow.open("suite.zarr/diabetes")``, ``cvflow report suite.zarr/diabetes``).
``xarray.open_datatree(path, engine="zarr")`` reads the whole tree.
"""
from __future__ import annotations

import json
import os

import zarr

from ..errors import StoreError
from .location import exists, is_url, resolve

ATTR = "cvflow_suite"


def member(root: str | os.PathLike, dataset: str) -> str:
    """The location of one data set's cube inside the suite's store."""
    return f"{resolve(root)}/{dataset}"


def create(root: str | os.PathLike, name: str, datasets: list[str],
           fits: dict[str, int] | None = None) -> str:
    """Create (or update) the suite's root group, listing ``datasets`` and, when given, each
    one's number of fits (``fits``: what ``cvflow status`` counts for a data set not started
    yet); returns its location. A data set an earlier run listed and this one does not stays
    listed (its cube stays)."""
    location = resolve(root)
    if is_url(location):
        raise StoreError(f"store: {location}: a suite's store is a local directory for now")
    group = zarr.open_group(location, mode="a", zarr_format=3)
    old = json.loads(group.attrs[ATTR]) if ATTR in group.attrs else {}
    listed = list(dict.fromkeys([*old.get("datasets", []), *datasets]))
    counts = {**old.get("fits", {}), **(fits or {})}
    group.attrs[ATTR] = json.dumps({"name": name, "datasets": listed, "fits": counts})
    return location


def datasets(root: str | os.PathLike) -> list[str] | None:
    """The data sets of a suite's store, in the workflow's order; None when ``root`` is not a
    suite (a cube, or nothing)."""
    listed = _record(root)
    return None if listed is None else list(listed["datasets"])


def fits(root: str | os.PathLike) -> dict[str, int]:
    """Data set -> its number of fits, as the last run of the suite counted them (a store of
    an earlier cvflow: none)."""
    listed = _record(root) or {}
    return {str(k): int(v) for k, v in listed.get("fits", {}).items()}


def _record(root: str | os.PathLike) -> dict | None:
    """The suite's attribute, read from the root group's ``zarr.json`` (None: not a suite)."""
    location = resolve(root)
    if is_url(location) or not exists(os.path.join(location, "zarr.json")):
        return None
    try:
        with open(os.path.join(location, "zarr.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    raw = (meta.get("attributes") or {}).get(ATTR) if meta.get("node_type") == "group" else None
    return json.loads(raw) if raw else None


def name(root: str | os.PathLike) -> str:
    """The suite's name as its store records it."""
    with open(os.path.join(resolve(root), "zarr.json"), encoding="utf-8") as f:
        return json.loads(json.load(f)["attributes"][ATTR])["name"]
