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


def create(root: str | os.PathLike, name: str, datasets: list[str]) -> str:
    """Create (or update) the suite's root group, listing ``datasets``; returns its location.
    A data set an earlier run listed and this one does not stays listed (its cube stays)."""
    location = resolve(root)
    if is_url(location):
        raise StoreError(f"store: {location}: a suite's store is a local directory for now")
    group = zarr.open_group(location, mode="a", zarr_format=3)
    before = json.loads(group.attrs.get(ATTR, "{}")).get("datasets", []) if ATTR in group.attrs else []
    listed = list(dict.fromkeys([*before, *datasets]))
    group.attrs[ATTR] = json.dumps({"name": name, "datasets": listed})
    return location


def datasets(root: str | os.PathLike) -> list[str] | None:
    """The data sets of a suite's store, in the workflow's order; None when ``root`` is not a
    suite (a cube, or nothing)."""
    location = resolve(root)
    if is_url(location) or not exists(os.path.join(location, "zarr.json")):
        return None
    try:
        with open(os.path.join(location, "zarr.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    raw = (meta.get("attributes") or {}).get(ATTR) if meta.get("node_type") == "group" else None
    return list(json.loads(raw)["datasets"]) if raw else None


def name(root: str | os.PathLike) -> str:
    """The suite's name as its store records it."""
    with open(os.path.join(resolve(root), "zarr.json"), encoding="utf-8") as f:
        return json.loads(json.load(f)["attributes"][ATTR])["name"]
