"""Making a store: the cube's template, creating the store from it (atomically, beside a
creation marker), clearing a cut creation, removing a store, growing one (an extended study).
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import xarray as xr
import zarr
from zarr.dtype import parse_dtype

from . import integrity
from .cube import open_dataset
from ..errors import OTHER_STORE, StoreError
from .group import (FORMAT_ATTR, grow_marker,
                    grow_record, is_store, marker, open_group, quiet_consolidation)
from .integrity import COMPRESSORS, WHOLE
from .schema import (SHARD_INNER_BYTES, STATUS_CHUNK_CELLS, cube_schema,  # noqa: F401
                     is_unwritten, status_chunks, to_dataset, unwritten)
from .location import (create_new, exists, get, identity, is_file, is_link, link_target, listing,
                       put, put_all, remove, resolve, storage_options)
from .damage import _consolidated, metadata_damage

log = logging.getLogger(__name__)


def lazy_blocks(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with each fill-value variable a dask array of its fill value, chunked as stored
    (shards, else chunks): what ``to_zarr(compute=False)`` leaves unwritten."""
    import dask.array as da

    out = ds.copy(deep=False)
    for name, variable in ds.variables.items():
        if is_unwritten(variable.data):
            chunks = variable.encoding.get("shards") or variable.encoding["chunks"]
            fill = variable.data.flat[0] if variable.size else 0
            out[name] = variable.copy(data=da.full(variable.shape, fill, dtype=variable.dtype,
                                                   chunks=tuple(chunks)))
    return out


def cube_template(data, design, params, *, attrs: dict, chunks: tuple[int, int],
                  dtype: str = "float64", scorers=(), train_scores: bool = False) -> xr.Dataset:
    """The cube as a Dataset whose block variables are fill-value views (:func:`unwritten`):
    what the tasks and the client write later (:func:`cvflow.store.schema.cube_schema`, whose
    arguments these are, as a Dataset)."""
    return to_dataset(cube_schema(data, design, params, attrs=attrs, chunks=chunks, dtype=dtype,
                                  scorers=scorers, train_scores=train_scores))


def _write(ds: xr.Dataset, location: str, **kwargs) -> None:
    """``ds.to_zarr(location, ...)`` with consolidated metadata (Zarr v3), blocks left lazy;
    new arrays carry checksums and every chunk is written, as :func:`create` does."""
    existing = set(open_group(location).array_keys())
    encoding = {name: {"compressors": COMPRESSORS} for name in ds.variables
                if name not in existing}
    with quiet_consolidation():
        lazy_blocks(ds).to_zarr(location, compute=False, consolidated=True, zarr_format=3,
                   storage_options=storage_options(location), encoding=encoding,
                   write_empty_chunks=True, **kwargs)


_NAN_FILL = base64.standard_b64encode(struct.pack("<d", np.nan)).decode()   # xarray's _FillValue
_ENCODINGS = {"chunks", "shards", "coordinates"}        # the encodings cube_template sets


def _attr_value(value):
    """An attribute as JSON takes it (numpy arrays and scalars as lists and Python scalars)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def _array_spec(name, variable: xr.Variable) -> dict:
    """``zarr.Group.create_array`` arguments for one template variable, as xarray's
    ``to_zarr(zarr_format=3)`` encodes it, plus ``data``: its values, or None for a fill-value
    (block) variable, left unwritten."""
    unknown = set(variable.encoding) - _ENCODINGS
    if unknown or variable.encoding.get("coordinates", None) is not None:
        raise ValueError(f"store: variable {name!r} has encodings create does not write: "
                         f"{sorted(unknown) or variable.encoding['coordinates']!r}")
    float_ = variable.dtype.kind == "f"
    # the client's variables start at their fill values: never written here (xarray keeps
    # `error` as a (param, split) array of "", 80 MB at 10^7 fits, not a fill-value view)
    lazy = is_unwritten(variable.data) or name in integrity.CLIENT_VARIABLES
    chunks = variable.encoding.get("chunks") or "auto"
    return {
        "name": name,
        "shape": variable.shape,
        # xarray writes object arrays (of str) as Zarr's variable-length string type
        "dtype": str if variable.dtype == object else variable.dtype,
        "chunks": tuple(chunks) if chunks != "auto" else chunks,
        "shards": variable.encoding.get("shards"),
        # xarray: NaN for floats (zarr's default would be 0), zarr's default ("", 0, False) else
        "fill_value": np.nan if float_ else None,
        "attributes": {**{k: _attr_value(v) for k, v in variable.attrs.items()},
                       **({"_FillValue": _NAN_FILL} if float_ else {})},
        "dimension_names": variable.dims,
        # every chunk carries a crc32c checksum; every chunk but the status variables' (whose
        # fill values are valid states) is written even when it holds only fill values, so
        # that a missing one is damage (cvflow.store.integrity)
        "compressors": COMPRESSORS,
        "config": None if name in integrity.CLIENT_VARIABLES else WHOLE,
        "data": None if lazy else variable.values,
    }


def _group_attributes(template: xr.Dataset) -> dict:
    """The root group's attributes: the template's, plus CF's global ``coordinates`` (every
    non-dimension coordinate; cube_template lists none on the data variables)."""
    attrs = {k: _attr_value(v) for k, v in template.attrs.items()}
    coords = sorted(str(n) for n in template.coords if n not in template.dims)
    return {**attrs, "coordinates": " ".join(coords)} if coords else attrs


STAGED_BYTES = 2**20    # a variable's data up to this size is encoded in memory (see create)


def create(store: str | os.PathLike, template: xr.Dataset, *,
           pred_ready: Callable[[], None] | None = None) -> None:
    """Create the store: metadata and small variables now, block variables left unwritten.

    Unwritten chunks read as their fill values (NaN predictions, ``done`` False). The store is
    the one ``template.to_zarr(store, compute=False, zarr_format=3, consolidated=True)``
    writes (node for node, chunk for chunk: tests/test_store.py), made through zarr's own API.
    ``pred_ready`` is called once ``pred``'s own metadata is at the location, before the rest
    is made: from then on the tasks may write their chunks of ``pred`` (the store is still not
    a store, :func:`is_store`, until the whole creation has ended).
    """
    location = resolve(store)
    creating = marker(location)
    clear_interrupted(location)
    if exists(location):
        raise StoreError(f"store: {location} already exists")
    if is_link(location):
        raise StoreError(f"store: {location} is a symbolic link to {link_target(location)}, "
                         "which does not exist; cvflow creates a store only at a path of its "
                         f"own: give --store {identity(location)} (or remove the link)")
    specs = [_array_spec(name, variable) for name, variable in template.variables.items()]
    zdtypes = {spec["dtype"]: parse_dtype(spec["dtype"], zarr_format=3) for spec in specs}
    # DESIGN CHOICE: a creation marker beside the store, written first and removed last, makes
    # creation atomic on a disk and on an object store alike (an object store cannot rename a
    # directory): a store whose marker remains was cut mid-creation, is not a store
    # (is_store) and is removed by the next run (callers hold the run lock, cvflow.store.lock).
    try:
        create_new(creating, _marker(location))
    except FileExistsError:
        raise StoreError(f"store: {location}: {creating} appeared while the store was being "
                         "created (another process writes beside it); nothing was written: "
                         f"remove it, or choose {OTHER_STORE}") from None
    # DESIGN CHOICE: the store is made in a zarr MemoryStore (every array's metadata, the
    # small variables' chunks, one consolidation), then its objects are copied to the
    # location in one batch (concurrent on an object store); larger variables (X) are then
    # written in place, so memory stays bounded. zarr's per-array work is CPU (GIL) bound:
    # creating the arrays on the store itself from 8 threads cost 118 ms wall, 89 ms CPU
    # against 66 / 62 ms this way (medians of 25, interleaved, load ~5).
    # COST: xarray's to_zarr created the ~25 arrays one by one (create, then update the
    # attributes, then write; each a few zarr round trips) and built a dask graph for the
    # block variables. The lasso study's template (100 params x 6 splits x 2000 samples, X
    # 2000 x 200), medians of 30 interleaved runs on 2 shared cores: at load ~3, to_zarr
    # 200 ms wall, 154 ms CPU, this 96 / 74 ms; at load 5-7, 240 / 184 ms against 169 / 90 ms.
    # What remains is zarr's (~1.3 ms an array, ~7 ms the consolidation, ~13 ms encoding X).
    staged: dict = {}
    memory = zarr.storage.MemoryStore(staged)
    group = zarr.open_group(memory, mode="w-", zarr_format=3,
                            attributes=_group_attributes(template))
    # DESIGN CHOICE: `pred` first, its metadata put at the location alone: the tasks, which
    # write only `pred`, start writing while the rest is made (~40 ms of GIL-bound zarr work
    # for the lasso study of benchmarks/bench_floor.py; the fits had to wait for all of it).
    # The creation stays atomic: the marker goes last, and a run cut before it leaves no store
    # (its pred chunks are removed with the rest by the next run, clear_interrupted).
    specs.sort(key=lambda spec: spec["name"] != "pred")
    put_first: set[str] = set()
    if pred_ready is not None and specs[0]["name"] == "pred":
        spec = specs.pop(0)
        spec.pop("data")                                    # never written here
        group.create_array(**{**spec, "dtype": zdtypes[spec["dtype"]]})
        put_first = {"pred/zarr.json"}
        put_all(location, {"pred/zarr.json": staged["pred/zarr.json"].to_bytes()})
        pred_ready()
    # DESIGN CHOICE: every other array is made in one pass of zarr's asynchronous API (one
    # event loop of this thread: the arrays' metadata and small chunks at once, then the
    # consolidation, then the objects copied to the location and the large variables written
    # there at once), not one synchronous zarr call after another, each a round trip to zarr's
    # own event-loop thread and its file threads that waits for the GIL behind the fits.
    # Measured on the lasso study's template (2 shared cores, load ~14, medians of 30,
    # alternating): 43-47 ms wall, 34-37 ms CPU against 47-64 / 41-45 ms one call at a time.
    _run_coroutine(_make(location, memory, staged, specs, zdtypes, put_first))
    remove(creating)


def _run_coroutine(coroutine) -> None:
    """``asyncio.run(coroutine)``; in a thread that already runs an event loop (a Jupyter
    notebook's cell: ``search.save(path)``, an ``async def`` caller), where ``asyncio.run``
    refuses, in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


async def _make(location: str, memory, staged: dict, specs: list[dict], zdtypes: dict,
                put_first: set) -> None:
    """The arrays of ``specs`` staged in ``memory`` (the store's group, made; ``staged`` its
    objects), consolidated,
    copied to ``location`` but ``put_first`` (already there); then the variables whose data is
    larger than :data:`STAGED_BYTES` written in place."""
    group = await zarr.api.asynchronous.open_group(store=memory, mode="r+")
    large: dict = {}

    async def stage(spec: dict) -> None:
        data = spec.pop("data")
        array = await group.create_array(**{**spec, "dtype": zdtypes[spec["dtype"]]})
        if data is not None and data.nbytes > STAGED_BYTES:
            large[spec["name"]] = data
        elif data is not None:
            await array.setitem(Ellipsis, data)

    await asyncio.gather(*(stage(spec) for spec in specs))
    with quiet_consolidation():
        await zarr.api.asynchronous.consolidate_metadata(memory)
    put_all(location, {key: value.to_bytes() for key, value in staged.items()
                       if key not in put_first})

    async def write(name: str) -> None:
        array = await zarr.api.asynchronous.open_array(
            store=location, path=name, mode="r+", storage_options=storage_options(location))
        if name not in integrity.CLIENT_VARIABLES:      # as create_array's config
            array = array.with_config(WHOLE)
        await array.setitem(Ellipsis, large[name])

    await asyncio.gather(*(write(name) for name in large))


def _marker(location: str) -> bytes:
    """The creation marker's content: it names the store it was written for (the store itself,
    symbolic links resolved: a run through any alias recognises it)."""
    return json.dumps({"cvflow": "creating", "store": identity(location)}).encode()


# what a cvflow store holds: the root's and each array's zarr.json, and the arrays' chunks; and
# what zarr's local store leaves of one of those whose write a process's end cut (it writes
# `<key with its suffix replaced>.<uuid4 hex>.partial`, then renames it): the tasks write pred's
# chunks while the creation goes on, and a fit that ends its process can cut one (seen: the
# next run refused to replace the cut creation, "holds files cvflow did not write")
_STORE_OBJECT = re.compile(r"^(?:[^/]+/)?zarr(?:\.json|\.[0-9a-f]{32}\.partial)$"
                           r"|^[^/]+/c(?:/\d+)*(?:\.[0-9a-f]{32}\.partial)?$")


def _foreign(location: str) -> list[str]:
    """The objects under ``location`` that cvflow does not write (a user's files), sorted."""
    return sorted(k for k in listing(location) if not _STORE_OBJECT.match(k))


def _cvflow_root(location: str) -> bool | None:
    """Whether the root zarr.json is a cvflow store's (None: there is none)."""
    text = get(location.rstrip("/") + "/zarr.json")
    if text is None:
        return None
    try:
        return FORMAT_ATTR in (json.loads(text).get("attributes") or {})
    except (ValueError, AttributeError):
        return False


def _check_only_ours(location: str, *, beside: str, action: str, fix: str) -> None:
    """StoreError unless ``location`` holds only a cvflow store's objects; ``beside`` is said
    of it first ("is beside ... but")."""
    foreign = [] if is_file(location) else _foreign(location)
    if is_file(location) or foreign:
        what = ("is a file" if not foreign else "holds files cvflow did not write ("
                + ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3
                                            else "") + ")")
        raise StoreError(f"store: {location} {beside}{what}; refusing to {action} it (nothing "
                         f"was removed): {fix}")


def clear_interrupted(store: str | os.PathLike) -> bool:
    """Remove a store whose creation was cut (its marker remains); True if there was one.

    Only what is provably cvflow's goes: the marker must name this very store (or be empty, as
    cvflow wrote it before markers named their store, with a cvflow store or nothing beside
    it), and the store must hold nothing but a cvflow store's objects; else StoreError, and
    nothing is removed.
    """
    # DESIGN CHOICE: nothing that is not ours is ever removed. A stray `<store>.creating` (a
    # copy, a name clash) beside a user's directory once made this delete the directory.
    location = resolve(store)
    creating = marker(location)
    if is_link(creating):
        raise StoreError(f"store: {location}: {creating} is a symbolic link (to "
                         f"{link_target(creating)}), not a creation marker cvflow wrote; cvflow "
                         "never writes through a link beside a store (nothing was written): "
                         "remove it yourself")
    content = get(creating)
    if content is None:
        return False
    root = _cvflow_root(location) if exists(location) else None
    # the store itself, or (written before markers named it) the path as given
    named = (content in (_marker(location), json.dumps({"cvflow": "creating", "store": location}
                                                       ).encode())
             or (content == b"" and root is not False))
    if not named:
        raise StoreError(f"store: {location}: {creating} is not a creation marker cvflow wrote "
                         "for this store; nothing was removed: remove or rename it yourself")
    fix = f"remove {creating} if the directory is yours, or choose {OTHER_STORE}"
    beside = f"is beside a creation marker ({creating}) but "
    _refuse_link(location, "replace its interrupted creation")
    if root is False:
        raise StoreError(f"store: {location} {beside}is not a cvflow store; refusing to replace "
                         f"it (nothing was removed): {fix}")
    _check_only_ours(location, beside=beside, action="replace", fix=fix)
    log.warning("removing %s: its creation was interrupted", location)
    remove(location)
    remove(creating)
    return True


def _refuse_link(location: str, action: str) -> None:
    """StoreError when ``location`` is a symbolic link: a store is removed or replaced only at
    its own path (removing through a link would leave the link dangling, or remove the link
    and not the store)."""
    if is_link(location):
        raise StoreError(f"store: {location} is a symbolic link (to {link_target(location)}); "
                         f"refusing to {action} through it (nothing was removed): give --store "
                         f"{identity(location)}")


def remove_store(store: str | os.PathLike) -> None:
    """Delete a complete cvflow store (``--overwrite``); StoreError, and nothing removed, unless
    it provably is one: a cvflow store (:func:`is_store`) holding nothing else."""
    location = resolve(store)
    fix = f"move your files elsewhere, or choose {OTHER_STORE}"
    _refuse_link(location, "overwrite it")
    if not is_store(location):
        raise StoreError(f"store: {location} exists but is not a cvflow store; refusing to "
                         f"overwrite it (nothing was removed): {fix}")
    _check_only_ours(location, beside="", action="overwrite", fix=fix)
    remove(location)


# ---------------------------------------------------------------------------------------------
# growing a store (an extended study, cvflow.execution.extend decides what may change)


def grow_was_cut(store: str | os.PathLike) -> bool:
    """Whether a grow of the store was cut (its marker remains); if so, each array's own
    ``zarr.json`` that a cut write left ahead of the consolidated metadata is put back to the
    consolidated copy (the store as its last whole write of the grow left it), so that the
    grow can be done again. Only for the holder of the store's run lock: no other run can be
    growing it."""
    location = resolve(store)
    raw = get(grow_marker(location))
    if raw is None:
        return False

    try:
        saved = json.loads(raw).get("root")
    except (ValueError, AttributeError):
        saved = None
    if _consolidated(location) is None and isinstance(saved, str):
        log.warning("store %s: putting back its root zarr.json as the cut extension's last "
                    "whole write left it", location)
        put(location.rstrip("/") + "/zarr.json", saved.encode())
    nodes = _consolidated(location) or {}
    behind = {d.variable for d in metadata_damage(location, nodes)}
    if behind:
        log.warning("store %s: putting back the metadata of %s as the consolidated metadata "
                    "has it", location, ", ".join(sorted(behind)))
        put_all(location, {f"{name}/zarr.json": json.dumps(nodes[name], indent=2).encode()
                           for name in behind})
    return True


def grow(store: str | os.PathLike, template: xr.Dataset, *, n_params: int, n_splits: int) -> None:
    """Grow the store to ``template``'s shape; its first ``n_params`` params and ``n_splits``
    splits are the stored ones, whose fits keep their bytes.

    ``template`` is :func:`cube_template` of the merged params and design (the one encoder):
    new splits are appended along ``split``, then new params along ``param`` (xarray's
    ``append_dim``; the block variables stay unwritten, i.e. fill values, as at creation),
    then every other variable, coordinate and attribute is rewritten from the template.
    Consolidated metadata is rewritten at each step.
    """
    location = resolve(store)
    stored = open_dataset(location)
    # DESIGN CHOICE: readers see the store before the grow or after it (group.stable): the
    # marker is there from before the first write to after the last (a grow that fails or is
    # cut leaves it; it is not waited for once no live run holds the lock, and the next grow
    # removes it). xarray's appends replace the root's attributes with the appended part's:
    # they carry the stored ones, so that a plain `xr.open_zarr` meanwhile still sees a
    # cvflow store (it saw none: "not a cvflow store", issue 32); the last write sets the new.
    growing = grow_marker(location)
    if is_link(growing):
        raise StoreError(f"store: {location}: {growing} is a symbolic link (to "
                         f"{link_target(growing)}); cvflow never writes through a link beside a "
                         "store (nothing was written): remove it yourself")
    root = location.rstrip("/") + "/zarr.json"
    put(growing, grow_record(get(root)))
    before = dict(stored.attrs)

    def write(ds: xr.Dataset, **kwargs) -> None:
        ds = ds.copy(deep=False)
        ds.attrs = dict(before)             # the stored attributes, not the template's
        _write(ds, location, **kwargs)
        # xarray rewrites the root without its consolidated metadata before it consolidates
        # again: a write cut there is put back to the root as this whole write left it
        put(growing, grow_record(get(root)))

    # a hyperparameter the store lacks: created at the stored length first (append needs it)
    new = [n for n in template.coords if n not in stored.variables]
    if new:
        write(xr.Dataset(coords={n: template[n].isel(param=slice(0, n_params)) for n in new}),
              mode="a")

    def tail(dim: str, **index) -> xr.Dataset:
        names = [n for n in template.variables if dim in template[n].dims]
        return template[names].isel(index).drop_vars(
            [n for n in template.coords if dim not in template[n].dims], errors="ignore")

    if template.sizes["split"] > n_splits:
        write(tail("split", param=slice(0, n_params), split=slice(n_splits, None)),
              append_dim="split", safe_chunks=False)
    if template.sizes["param"] > n_params:
        write(tail("param", param=slice(n_params, None)), append_dim="param", safe_chunks=False)
    grown = {"param", "split"}
    rest = template.drop_vars([n for n in template.data_vars
                               if grown & set(template[n].dims)])
    if template.sizes["group"] != stored.sizes["group"]:
        # the subset design added to a store without one: its role table grows from (0, 2)
        write(rest[["subset_split"]].isel(group=slice(stored.sizes["group"], None)),
              append_dim="group")
        rest = rest.drop_vars("subset_split")
    _write(rest, location, mode="a")
    remove(growing)
