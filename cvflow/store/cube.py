"""The prediction cube: schema, creation, opening and chunk-aligned block writes.

Layout (Zarr v3 through xarray), dims ``param, split, sample, repeat, feature`` plus the role
tables' ``outer, inner, group, member``:

========================  ===========================  ======================================
variable                  dims                         meaning
========================  ===========================  ======================================
pred                      param, split, sample[, class]  prediction of fit (h, s) on sample i
                                                       (multiclass: per class, see below)
done                      param, split                 the fit's block was written
failed                    param, split                 the fit raised
error                     param, split                 its message ("" when it did not)
fit_seconds               param, split                 wall time of fit + predict
train                     split, sample                training-set membership
fold                      repeat, sample               fold label, -1 for test samples
fold_split                repeat, outer                split trained on D minus fold j
pair_split                repeat, outer, inner         split trained on D minus folds j, l
subset_split              group, member                subset learning set m of group p
y, is_test                sample                       target, held-out test flag
sample_weight             sample                       weights passed to fit (if given)
groups                    sample                       group labels (if given; absent in
                                                       stores written before they were kept)
X                         sample, feature              features
========================  ===========================  ======================================

Coordinates: on ``split`` ``split_kind, split_repeat, split_outer, split_inner, split_group``;
on ``param`` ``learner``, ``output``, ``param_json`` and one per hyperparameter name.
Multiclass cubes (more than two classes) store C values per sample along ``class`` (coordinate:
the class labels): per-class probabilities, per-class decision values, or predicted labels
one-hot. Every chunk carries a crc32c checksum; :mod:`cvflow.store.integrity` names a damaged one
(:func:`verify` lists them all). Attributes: ``cvflow_format`` (2; absent in format-1 stores), ``cvflow_version``,
``workflow`` (JSON), ``workflow_hash``, ``data_hash``, ``task``,
``loss`` (the default), ``classes`` (JSON), ``full_split``, ``chunks`` (JSON [param, split]),
``columns`` (JSON, a data frame's column names, dtypes and categories; see cvflow.workflow.data).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import struct
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Literal, Protocol

import numpy as np
import xarray as xr
import zarr
from zarr.dtype import parse_dtype

from . import attributes, integrity
from .coords import RESERVED, hyperparameter_coord, param_coords  # noqa: F401 - the schema
from ..config import VERSION
from ..errors import OTHER_STORE, StoreError
from .integrity import COMPRESSORS, WHOLE, Damage, DamagedStore
from .location import exists, get, is_file, is_url, listing, put, put_all, remove, resolve, sibling, storage_options



class BlockResult(Protocol):
    """What the store writes of a fitted block (:class:`cvflow.fitting.block.BlockResult`)."""

    params: slice
    splits: slice
    pred: np.ndarray | None      # (params, splits, sample[, class]); None once written
    failed: np.ndarray           # (params, splits) bool
    error: np.ndarray            # (params, splits) str
    fit_seconds: np.ndarray      # (params, splits)
    fitted: np.ndarray | None    # (params, splits) bool, or None: every cell


log = logging.getLogger(__name__)

FORMAT_ATTR = "cvflow_version"
# Store format: 1 (no attribute) before multiclass; 2 adds the `class` dim of multiclass `pred`.
# A store of format <= STORE_FORMAT opens and reduces; a newer one is refused with a message.
STORE_FORMAT_ATTR, STORE_FORMAT = "cvflow_format", 2
BLOCK_VARIABLES = ("pred", "failed", "error", "fit_seconds", "done")
# the encoding key where open_cube keeps the dask name of the store's own `pred`: read_pred
# knows an untouched one by it
STORED = "cvflow_pred"
CREATING = ".creating"     # the creation marker beside a store (see create)


def _version() -> str:
    return VERSION


def cube_template(data, design, params, *, attrs: dict, chunks: tuple[int, int],
                  dtype: str = "float64") -> xr.Dataset:
    """The cube as a lazy Dataset: block variables are dask arrays of fill values.

    ``data`` is a :class:`cvflow.workflow.data.Data`, ``design`` a :class:`cvflow.workflow.designs.Design`,
    ``params`` a list of :class:`cvflow.workflow.params.Param`; ``chunks`` = (params, splits) per block.
    """
    import dask.array as da

    n_params, n_splits, n = len(params), design.n_splits, data.X.shape[0]
    bp, bs = min(chunks[0], n_params), min(chunks[1], n_splits)
    block = (bp, bs)
    # DESIGN CHOICE: a multiclass fit stores C values per sample along a `class` dim; a block's
    # chunk spans all samples and classes, so one task still owns whole chunks. Binary and
    # regression cubes keep one value per sample (format 1 layout).
    classes = list(data.classes or ())
    per_class = (len(classes),) if len(classes) > 2 else ()
    class_dim = ("class",) if per_class else ()
    # DESIGN CHOICE: tasks write only their chunk of `pred`; the client, the only writer of the
    # small (param, split) status variables, writes them in batches as results come back. One
    # chunk each keeps the store at ~one file per task (not five) and needs no lock.
    status = (n_params, n_splits)
    # named by what defines them (no tokenizing, ~half the template's cost); distinct names:
    # identical dask graphs would otherwise load into one shared array
    key = f"{n_params}x{n_splits}x{n}x{len(classes)}-{bp}x{bs}-{np.dtype(dtype).name}"
    ds = xr.Dataset(
        {
            "pred": (("param", "split", "sample") + class_dim,
                     da.full((n_params, n_splits, n) + per_class, np.nan, dtype=dtype,
                             chunks=block + (n,) + per_class, name=f"cvflow-pred-{key}")),
            "done": (("param", "split"),
                     da.zeros((n_params, n_splits), dtype=bool, chunks=status, name=f"cvflow-done-{key}")),
            "failed": (("param", "split"),
                       da.zeros((n_params, n_splits), dtype=bool, chunks=status, name=f"cvflow-failed-{key}")),
            "error": (("param", "split"), np.full((n_params, n_splits), "", dtype=object)),
            "fit_seconds": (("param", "split"),
                            da.full((n_params, n_splits), np.nan, chunks=status,
                                    name=f"cvflow-fit_seconds-{key}")),
            "train": (("split", "sample"), design.train),
            "fold": (("repeat", "sample"), design.fold),
            "fold_split": (("repeat", "outer"), design.fold_split),
            "pair_split": (("repeat", "outer", "inner"), design.pair_split),
            "subset_split": (("group", "member"), design.subset_split),
            "y": (("sample",), data.y),
            "is_test": (("sample",), data.is_test),
            "X": (("sample", "feature"), data.X),
        },
        coords={
            "split_kind": ("split", design.kind.astype(object)),
            "split_repeat": ("split", design.repeat),
            "split_outer": ("split", design.outer),
            "split_inner": ("split", design.inner),
            "split_group": ("split", design.group),
            "feature": ("feature", np.asarray(data.feature_names, dtype=object)),
            **({"class": ("class", np.asarray(classes, dtype=object if isinstance(
                classes[0], str) else None))} if per_class else {}),
            **param_coords(params),
        },
        attrs={
            FORMAT_ATTR: _version(),
            STORE_FORMAT_ATTR: STORE_FORMAT,
            "full_split": int(design.full_split),
            "chunks": json.dumps([bp, bs]),
            **attrs,
        },
    )
    ds["error"].encoding["chunks"] = status
    inner = _inner_params(bp, bs * n * int(np.prod(per_class, dtype=int)) * np.dtype(dtype).itemsize)
    if inner < bp:
        # DESIGN CHOICE: a block of many params (a path task writes every param of its
        # splits) is one Zarr v3 shard, still written whole by its one task (one file), made
        # of inner chunks of `inner` params that readers decode on their own: a reducer going
        # through the params in groups then reads each byte once, not once per group.
        ds["pred"].encoding.update(chunks=(inner, bs, n) + per_class, shards=block + (n,) + per_class)
    if getattr(data, "sample_weight", None) is not None:
        ds["sample_weight"] = ("sample",), data.sample_weight
    if getattr(data, "groups", None) is not None:
        # DESIGN CHOICE: the group labels are kept (an optional variable: older stores lack it
        # and still open) so that estimators can be cluster-robust (estimators/_cube.py
        # analysis_groups); numbers as they are, anything else as text.
        labels = np.asarray(data.groups)
        ds["groups"] = ("sample",), (labels if labels.dtype.kind in "iub"
                                     else labels.astype(str).astype(object))
    # DESIGN CHOICE: every non-dimension coordinate is listed once, in the group's
    # `coordinates` attribute (CF's global form), not on each data variable: an extension
    # adds hyperparameter coordinates by rewriting the group's attributes through xarray,
    # which leaves existing arrays' attributes as they are.
    for var in ds.data_vars.values():
        var.encoding["coordinates"] = None
    return ds


SHARD_INNER_BYTES = 2**20      # at most this much of a block per inner chunk of its shard


def _inner_params(bp: int, param_bytes: int) -> int:
    """Params per inner chunk of a block of ``bp`` params (``param_bytes`` each): the largest
    divisor of ``bp`` within SHARD_INNER_BYTES, or ``bp`` when the whole block is."""
    want = max(1, SHARD_INNER_BYTES // max(param_bytes, 1))
    if want >= bp:
        return bp
    return max(d for d in range(1, want + 1) if bp % d == 0)


@contextmanager
def _quiet_consolidation():
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


def _write(ds: xr.Dataset, location: str, **kwargs) -> None:
    """``ds.to_zarr(location, ...)`` with consolidated metadata (Zarr v3), blocks left lazy;
    new arrays carry checksums and every chunk is written, as :func:`create` does."""
    existing = set(_group(location).array_keys())
    encoding = {name: {"compressors": COMPRESSORS} for name in ds.variables
                if name not in existing}
    with _quiet_consolidation():
        ds.to_zarr(location, compute=False, consolidated=True, zarr_format=3,
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
    ``to_zarr(zarr_format=3)`` encodes it, plus ``data``: its values, or None for a dask
    (block) variable, left unwritten."""
    unknown = set(variable.encoding) - _ENCODINGS
    if unknown or variable.encoding.get("coordinates", None) is not None:
        raise ValueError(f"store: variable {name!r} has encodings create does not write: "
                         f"{sorted(unknown) or variable.encoding['coordinates']!r}")
    from dask import is_dask_collection   # dask is imported where used (cvflow status)

    float_ = variable.dtype.kind == "f"
    lazy = is_dask_collection(variable.data)
    chunks = variable.encoding.get("chunks") or (
        tuple(c[0] for c in variable.chunks) if lazy else "auto")
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
        "config": None if name in integrity.STATUS_VARIABLES else WHOLE,
        "data": None if lazy else variable.values,
    }


def _group_attributes(template: xr.Dataset) -> dict:
    """The root group's attributes: the template's, plus CF's global ``coordinates`` (every
    non-dimension coordinate; cube_template lists none on the data variables)."""
    attrs = {k: _attr_value(v) for k, v in template.attrs.items()}
    coords = sorted(str(n) for n in template.coords if n not in template.dims)
    return {**attrs, "coordinates": " ".join(coords)} if coords else attrs


STAGED_BYTES = 2**20    # a variable's data up to this size is encoded in memory (see create)


def create(store: str | os.PathLike, template: xr.Dataset) -> None:
    """Create the store: metadata and small variables now, block variables left unwritten.

    Unwritten chunks read as their fill values (NaN predictions, ``done`` False). The store is
    the one ``template.to_zarr(store, compute=False, zarr_format=3, consolidated=True)``
    writes (node for node, chunk for chunk: tests/test_store.py), made through zarr's own API.
    """
    location = resolve(store)
    marker = sibling(location, CREATING)
    clear_interrupted(location)
    if exists(location):
        raise StoreError(f"store: {location} already exists")
    specs = [_array_spec(name, variable) for name, variable in template.variables.items()]
    zdtypes = {spec["dtype"]: parse_dtype(spec["dtype"], zarr_format=3) for spec in specs}
    # DESIGN CHOICE: a creation marker beside the store, written first and removed last, makes
    # creation atomic on a disk and on an object store alike (an object store cannot rename a
    # directory): a store whose marker remains was cut mid-creation, is not a store
    # (is_store) and is removed by the next run (callers hold the run lock, cvflow.store.lock).
    put(marker, _marker(location))
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
    group = zarr.open_group(zarr.storage.MemoryStore(staged), mode="w-", zarr_format=3,
                            attributes=_group_attributes(template))
    large = {}
    for spec in specs:
        data = spec.pop("data")
        array = group.create_array(**{**spec, "dtype": zdtypes[spec["dtype"]]})
        if data is not None and data.nbytes > STAGED_BYTES:
            large[spec["name"]] = data
        elif data is not None:
            array[...] = data
    with _quiet_consolidation():
        zarr.consolidate_metadata(group.store)
    put_all(location, {key: value.to_bytes() for key, value in staged.items()})

    def write(name: str) -> None:
        array = zarr.open_array(location, path=name, mode="r+",
                                storage_options=storage_options(location))
        if name not in integrity.STATUS_VARIABLES:      # as create_array's config above
            array = array.with_config(WHOLE)
        array[...] = large[name]

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, large))
    remove(marker)


def _marker(location: str) -> bytes:
    """The creation marker's content: it names the store it was written for."""
    return json.dumps({"cvflow": "creating", "store": location}).encode()


# what a cvflow store holds: the root's and each array's zarr.json, and the arrays' chunks
_STORE_OBJECT = re.compile(r"^(?:[^/]+/)?zarr\.json$|^[^/]+/c(?:/\d+)*$")


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
    marker = sibling(location, CREATING)
    content = get(marker)
    if content is None:
        return False
    root = _cvflow_root(location) if exists(location) else None
    named = content == _marker(location) or (content == b"" and root is not False)
    if not named:
        raise StoreError(f"store: {location}: {marker} is not a creation marker cvflow wrote for "
                         "this store; nothing was removed: remove or rename it yourself")
    fix = f"remove {marker} if the directory is yours, or choose {OTHER_STORE}"
    beside = f"is beside a creation marker ({marker}) but "
    if root is False:
        raise StoreError(f"store: {location} {beside}is not a cvflow store; refusing to replace "
                         f"it (nothing was removed): {fix}")
    _check_only_ours(location, beside=beside, action="replace", fix=fix)
    log.warning("removing %s: its creation was interrupted", location)
    remove(location)
    remove(marker)
    return True


def remove_store(store: str | os.PathLike) -> None:
    """Delete a complete cvflow store (``--overwrite``); StoreError, and nothing removed, unless
    it provably is one: a cvflow store (:func:`is_store`) holding nothing else."""
    location = resolve(store)
    fix = f"move your files elsewhere, or choose {OTHER_STORE}"
    if not is_store(location):
        raise StoreError(f"store: {location} exists but is not a cvflow store; refusing to "
                         f"overwrite it (nothing was removed): {fix}")
    _check_only_ours(location, beside="", action="overwrite", fix=fix)
    remove(location)


def _group(location: str, mode: Literal["r", "r+"] = "r"):
    return zarr.open_group(location, mode=mode, storage_options=storage_options(location))


def is_store(store: str | os.PathLike) -> bool:
    """A complete cvflow store is at ``store`` (not a half-created one, not something else)."""
    location = resolve(store)
    try:
        complete = FORMAT_ATTR in _group(location).attrs
    except Exception:  # noqa: BLE001 - anything unreadable is not a cvflow store
        return False
    return complete and not exists(sibling(location, CREATING))


def _open_dataset(location: str) -> xr.Dataset:
    """``xr.open_zarr`` on the consolidated metadata; a store written before cvflow consolidated
    it (format 1) is read without, silently (xarray's fallback warns on every open). A cube
    holds no dates or durations, so xarray does not look for them (~15% of the open)."""
    options = {"chunks": None, "decode_times": False, "decode_timedelta": False,
               "storage_options": storage_options(location)}
    try:
        return xr.open_zarr(location, consolidated=True, **options)
    except ValueError:
        return xr.open_zarr(location, consolidated=False, **options)


# Variables open_cube leaves lazy: `pred` (a dask array, one chunk per store chunk) and `X`
# (read from the store when its values are asked: Study.data, refit; no reducer reads it).
LAZY_VARIABLES = ("pred", "X")


def open_cube(store: str | os.PathLike) -> xr.Dataset:
    """Open a cube: ``pred`` lazy (dask, the store's chunks), ``X`` lazy (read on access),
    everything else loaded.

    ``xr.open_zarr(store, chunks=None)`` with every variable but ``pred`` and ``X`` read into
    memory and ``pred`` chunked as stored; ``store`` is a local path or a URL
    (:mod:`cvflow.store.location`). Raises StoreError if it is not a cvflow store.
    """
    location = resolve(store)
    if not exists(location):
        raise StoreError(f"store: {location} does not exist")
    cube = None
    if not exists(sibling(location, CREATING)):          # else a creation was cut: no store
        try:
            cube = _open_dataset(location)
        except Exception as exc:  # noqa: BLE001 - anything unreadable is not a cvflow store
            if integrity.problem(exc) is not None:      # unless a damaged index coordinate
                _raise_first_damage(location, exclude=LAZY_VARIABLES)
            cube = None
    if cube is None or FORMAT_ATTR not in cube.attrs:
        raise StoreError(f"store: {location} exists but is not a cvflow store")
    if int(cube.attrs.get(STORE_FORMAT_ATTR, 1)) > STORE_FORMAT:
        raise StoreError(f"store: {location} has store format {cube.attrs[STORE_FORMAT_ATTR]}, "
                         f"newer than this cvflow's ({STORE_FORMAT}); upgrade cvflow to read it")
    # DESIGN CHOICE: a chunk written when the store was created or grown that is gone reads as
    # fill values (a deleted `fold` chunk made every estimate silently wrong): one listing of
    # the store (cheap, whatever it holds) refuses it before anything is read or reduced
    damage = listed_damage(location)
    if damage:
        raise DamagedStore(location, damage[0])
    # DESIGN CHOICE: the small variables (param x split at most) are read now so reducers
    # index role tables and masks as numpy. Each read is one zarr call (~1 ms of Python
    # here, GIL-bound): a thread pool only pays for an object store's latency; on a local
    # disk it is ~2x slower than reading them one after the other.
    small = [(str(name), v) for name, v in cube.variables.items() if name not in LAZY_VARIABLES]

    def load(item) -> None:
        name, variable = item
        try:
            variable.load()
        except Exception as exc:
            if integrity.problem(exc) is None:
                raise
            _raise_first_damage(location, only=(name,))
            raise

    if is_url(location):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(load, small))
    else:
        for item in small:
            load(item)
    pred = cube.variables["pred"].encoding
    attributes.check(location, cube.attrs, dict(cube.sizes), lambda name: cube[name].values,
                     tuple((pred.get("shards") or pred["chunks"])[:2]))
    # `pred` and `X` are dask arrays of the store's chunks, each read through
    # cvflow.store.integrity.Checked (a damaged chunk is named), named without tokenizing the zarr
    # array; pred's name also tells read_pred an untouched `pred`
    for name in LAZY_VARIABLES:
        variable = cube.variables[name]
        variable.data = _checked_dask(location, name, variable, cube)
    cube.encoding.update({"source": location, STORED: cube.variables["pred"].data.name})
    return cube


def _checked_dask(location: str, name: str, variable: xr.Variable, cube: xr.Dataset):
    import dask.array as da

    chunks = tuple(variable.encoding["chunks"])
    objects = tuple(variable.encoding.get("shards") or chunks)
    fitted = ((cube["done"].values, cube["failed"].values) if name == "pred" else (None, None))
    # a shallow copy keeps xarray's lazy reader of the store (the variable gets the dask array)
    source = integrity.Checked(variable.copy(deep=False), name, location, objects, *fitted)
    return da.from_array(source, chunks=chunks, name=f"cvflow-{name}-{uuid.uuid4().hex}",
                         meta=np.empty((0,) * variable.ndim, dtype=variable.dtype))


def _raise_first_damage(location: str, *, only=None, exclude=()) -> None:
    """DamagedStore for the first damaged chunk of the arrays ``only`` (default: all but
    ``exclude``); nothing if none is found or the arrays do not open (not a cvflow store)."""
    try:
        group = _group(location)
        names = only if only is not None else sorted(n for n in group.array_keys()
                                                     if n not in exclude)
    except Exception:  # noqa: BLE001 - the caller says what is wrong
        return
    for name in names:
        try:
            array = group[name]
        except Exception:  # noqa: BLE001 - metadata zarr cannot read: no chunk to blame
            continue
        damage = integrity.first_damage(location, name, array)
        if damage is not None:
            raise DamagedStore(location, damage)


def _objects(location: str, names) -> dict[str, dict[str, int]]:
    """One listing of the store, by array: ``name -> {key within the array: size}``."""
    objects: dict[str, dict[str, int]] = {name: {} for name in names}
    for key, size in listing(location).items():
        name, _, rest = key.partition("/")
        if name in objects and rest:
            objects[name][rest] = size
    return objects


def listed_damage(store: str | os.PathLike, *, done: np.ndarray | None = None,
                  failed: np.ndarray | None = None) -> list[Damage]:
    """The damage one listing of the store shows, without reading a chunk: every missing
    chunk of the variables written when the store was created or grown (all but ``pred`` and
    the status variables, :func:`cvflow.store.integrity.required`), every empty object but
    ``pred``'s, and with ``done`` and ``failed`` the missing or empty ``pred`` chunks of done
    fits (without them ``pred`` is left to the readers: ``cvflow run`` refits its damage).
    Sorted by variable and chunk; a variable whose metadata zarr cannot read is skipped
    (its readers name it)."""
    # DESIGN CHOICE: the layouts come from the root zarr.json's consolidated metadata (one
    # read, no array opened: opening the ~25 arrays through zarr cost ~6 ms of the ~9 a
    # listing check took on the lasso store); a store without it opens its arrays
    location = resolve(store)
    arrays: dict = {}
    raw = get(location.rstrip("/") + "/zarr.json")
    try:
        nodes = json.loads(raw or b"{}")["consolidated_metadata"]["metadata"]
        arrays = {name: integrity.ArrayLayout.from_json(node) for name, node in sorted(nodes.items())
                  if node.get("node_type") == "array" and "/" not in name}
    except (ValueError, KeyError, TypeError, AttributeError):
        _, arrays, _ = _listed(location, listing=False)
    return _listed_damage(arrays, _objects(location, arrays), done, failed)


def _listed(location: str, *, listing: bool = True
            ) -> tuple[zarr.Group, dict, dict[str, dict[str, int]]]:
    """The store's group, its arrays (those zarr can open; the readers name the others) and
    one listing of their objects (:func:`_objects`; empty without ``listing``)."""
    group = _group(location)
    arrays = {}
    for name in sorted(group.array_keys()):
        try:
            arrays[name] = group[name]
        except Exception:  # noqa: BLE001 - metadata zarr cannot read: no chunk to blame
            continue
    return group, arrays, _objects(location, arrays) if listing else {}


def _listed_damage(arrays: dict, objects: dict, done, failed) -> list[Damage]:
    damage: list[Damage] = []
    for name, array in arrays.items():
        if name == integrity.REFITTED and (done is None or failed is None):
            continue
        damage += integrity.listed_damage(name, array, objects[name],
                                          integrity.required(name, array, done, failed))
    return damage


def status_damage(store: str | os.PathLike, done: np.ndarray, failed: np.ndarray,
                  *, read: tuple[str, ...] = ()) -> list[str]:
    """What ``cvflow status`` sees damaged, cheaply: what one listing shows
    (:func:`listed_damage`, ``pred``'s chunks of done fits included), the corrupt chunks of
    the small variables (all but ``pred``, ``X`` and the status variables, each read whole:
    a run never writes them) but those in ``read`` (already read by the caller), and the root
    attributes that are not as cvflow wrote them (:func:`cvflow.store.attributes.problems`)."""
    location = resolve(store)
    group, arrays, objects = _listed(location)
    # pred opened from its own zarr.json, as its readers open it: metadata that does not
    # decode raises DamagedMetadata (the other variables' are read by report and verify)
    arrays[integrity.REFITTED] = integrity.open_array(location, integrity.REFITTED)
    damage = _listed_damage(arrays, objects, done, failed)
    seen = {(d.variable, d.chunk) for d in damage}
    skip = set(LAZY_VARIABLES) | set(integrity.STATUS_VARIABLES) | set(read)
    reads = [(name, chunk) for name in arrays if name not in skip
             for chunk, size in sorted(integrity.stored(arrays[name], objects[name]).items())
             if size and (name, chunk) not in seen]
    with ThreadPoolExecutor(4 if is_url(location) else 1) as pool:
        damage += [d for d in pool.map(lambda r: integrity.read_damage(r[0], arrays[r[0]], r[1]),
                                       reads) if d is not None]
    out = [str(d) for d in sorted(damage, key=lambda d: (d.variable, d.chunk))]
    if not out and "pred" in arrays:        # attributes are checked against intact variables
        sizes = {"param": int(done.shape[0]), "split": int(done.shape[1])}
        out += attributes.problems(group.attrs.asdict(), sizes,
                                   lambda name: arrays[name][...],
                                   integrity.object_shape(arrays["pred"])[:2])
    return out


def block_chunks(store: str | os.PathLike) -> tuple[int, int]:
    bp, bs = json.loads(_group(resolve(store)).attrs["chunks"])
    return int(bp), int(bs)


def block_slices(n_params: int, n_splits: int, chunks: tuple[int, int]):
    """All blocks as (param slice, split slice), chunk-aligned."""
    bp, bs = chunks
    for p0 in range(0, n_params, bp):
        for s0 in range(0, n_splits, bs):
            yield slice(p0, min(p0 + bp, n_params)), slice(s0, min(s0 + bs, n_splits))


def _check_aligned(shape, chunks, params: slice, splits: slice) -> None:
    for sl, size, chunk, dim in ((params, shape[0], chunks[0], "param"),
                                 (splits, shape[1], chunks[1], "split")):
        if sl.start % chunk or (sl.stop != size and sl.stop % chunk):
            raise ValueError(
                f"block {dim} region {sl.start}:{sl.stop} is not aligned with chunks of {chunk}; "
                "two writers could share a chunk"
            )


def write_pred(store: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions (the task side). Idempotent; chunk-aligned or ValueError."""
    # COST: a lasso block (100 params x 2000 samples, 1.6 MB; one shard of two inner chunks)
    # takes ~6 ms CPU alone here: opening the array 0.8 ms, zarr's write 5.7 ms, of which the
    # zstd default ~1.1 ms (it halves the bytes: 0.75 MB; no compressor: 4.5 ms, 1.6 MB) and
    # the shard ~1.5 ms (unsharded: 4.0 ms; the inner chunks are for the reducers). Kept as is.
    location = resolve(store)
    # written even when every value is NaN (every fit failed): a done block has its chunk
    pred = zarr.open_array(location, path="pred", mode="r+",
                           storage_options=storage_options(location)).with_config(WHOLE)
    region = (result.params, result.splits)
    _check_aligned(pred.shape[:2], (pred.shards or pred.chunks)[:2], *region)   # one writer a shard
    pred[region] = result.pred.astype(pred.dtype, copy=False)


STATUS_VARIABLES = ("failed", "error", "fit_seconds", "done")     # the order they are written


class StatusWriter:
    """The client's copy of a store's status variables (failed, error, fit_seconds, done),
    each written whole at a :meth:`write` that changed it: ``done`` last, the others
    concurrently.

    The copy is read from the store at the first write, or starts at the fill values for a
    store created by this run (``fresh``), so a run reads the status at most once. Only one
    process (the run's client) may write a store's status at a time.
    """

    def __init__(self, store: str | os.PathLike, *, fresh: bool = False):
        self.location = resolve(store)
        self.fresh = fresh
        self.arrays: dict | None = None
        self.values: dict[str, np.ndarray] = {}
        self.unwritten: set[str] = set()      # variables whose copy differs from the store's

    def write(self, results) -> None:
        """Record finished blocks: :class:`cvflow.fitting.block.BlockResult` (``pred`` may be None)
        whose predictions are already written."""
        results = list(results)
        if not results:
            return
        if self.arrays is None:
            group = _group(self.location, "r+")
            self.arrays = {name: group[name] for name in STATUS_VARIABLES}
            shape = self.arrays["done"].shape
            fills = {"failed": False, "error": "", "fit_seconds": np.nan, "done": False}
            self.values = {name: (np.full(shape, fills[name], dtype=object if name == "error"
                                          else type(fills[name]))
                                  if self.fresh else integrity.read(self.location, name,
                                                                    array=array))
                           for name, array in self.arrays.items()}
        for name, values in self.values.items():
            for r in results:
                new = (getattr(r, name) if name != "done" else True if r.fitted is None
                       else values[r.params, r.splits] | r.fitted)
                if not np.array_equal(values[r.params, r.splits], new,
                                      equal_nan=values.dtype.kind == "f"):
                    values[r.params, r.splits] = new
                    self.unwritten.add(name)
        arrays = self.arrays

        def put(name: str) -> None:
            arrays[name][...] = self.values[name]
            self.unwritten.discard(name)

        # DESIGN CHOICE: one zarr round trip per variable that changed (failed and error
        # rarely do: a batch of good fits writes two arrays, not four); the ones `done`
        # vouches for go together, before it
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(put, [n for n in STATUS_VARIABLES[:-1] if n in self.unwritten]))
        if "done" in self.unwritten:
            put("done")


def write_status(store: str | os.PathLike, results) -> None:
    """Record finished blocks (the client side): failed, error, fit_seconds, then ``done``.

    ``results`` are :class:`cvflow.fitting.block.BlockResult` (``pred`` may be None) whose
    predictions are already written; one read and one write per variable for the batch
    (:class:`StatusWriter` keeps the values between batches of a run).
    """
    StatusWriter(store).write(results)


def write_block(store: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions and status; ``done`` last, so done implies written.

    Idempotent: rewriting a block writes the same bytes. For a single writer (in-process use);
    the engine's tasks call :func:`write_pred` and the client :func:`write_status`.
    """
    write_pred(store, result)
    write_status(store, [result])


def write_attrs(store: str | os.PathLike, attrs: dict) -> None:
    """Set root attributes of a store (JSON values) and rewrite its consolidated metadata."""
    location = resolve(store)
    group = _group(location, "r+")
    group.attrs.update(attrs)
    with _quiet_consolidation():
        zarr.consolidate_metadata(group.store)


def read_attr(store: str | os.PathLike, name: str):
    """One root attribute of a store (None when absent), without opening the cube."""
    return _group(resolve(store)).attrs.get(name)


def read_mask(store: str | os.PathLike, name: str) -> np.ndarray:
    """A small (param, split) variable read eagerly (done, failed, fit_seconds, error)."""
    return integrity.read(resolve(store), name)


def read_block(store: str | os.PathLike, params: slice, splits: slice) -> dict[str, np.ndarray]:
    """The stored cells of one block: pred (float64), failed, error (str objects), fit_seconds."""
    location = resolve(store)
    group = _group(location)
    region = (params, splits)

    def read(name: str) -> np.ndarray:
        return integrity.read(location, name, region, array=group[name])

    error = np.asarray(read("error"))
    return {"pred": np.array(read("pred"), dtype=np.float64),
            "failed": np.array(read("failed"), dtype=bool),
            "error": np.array([str(e) for e in error.ravel()], dtype=object).reshape(error.shape),
            "fit_seconds": np.array(read("fit_seconds"), dtype=np.float64)}


def read_pred(cube_or_store) -> np.ndarray | None:
    """The whole ``pred`` in memory (zarr reads its chunks concurrently).

    ``cube_or_store``: a store path or URL, or a cube from :func:`open_cube` whose ``pred`` is
    still the store's own lazy array (else None: a selection, an in-memory cube, or a store
    extended since the cube was opened). ~2x faster than computing the lazy ``pred`` chunk
    by chunk; for cubes that fit in memory (see ``cvflow.estimators._cube.load_if_small``).
    """
    if isinstance(cube_or_store, xr.Dataset):
        from dask import is_dask_collection

        cube = cube_or_store
        pred = cube["pred"]
        if not (is_dask_collection(pred.data) and pred.data.name == cube.encoding.get(STORED)):
            return None
        values = _read_pred(cube.encoding["source"], cube["done"].values, cube["failed"].values)
        return values if values.shape == pred.shape else None
    location = resolve(cube_or_store)
    return _read_pred(location, read_mask(location, "done"), read_mask(location, "failed"))


def _read_pred(location: str, done: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """The whole ``pred``; DamagedStore if a chunk a done fit wrote is missing or corrupt."""
    return integrity.read(location, "pred", done=done, failed=failed)


# ---------------------------------------------------------------------------------------------
# integrity: what is damaged (cvflow.store.integrity), and what `cvflow run` refits


def pred_damage(store: str | os.PathLike, done: np.ndarray | None = None,
                failed: np.ndarray | None = None, *, read: bool = True) -> list[Damage]:
    """The damaged chunks of ``pred`` that hold fits: missing or empty (one listing), and with
    ``read`` those of every block with a done fit that fail to decode (each read whole).

    ``done`` and ``failed`` are the store's masks (read if None). Sorted by chunk.
    """
    location = resolve(store)
    done = read_mask(location, "done") if done is None else done
    failed = read_mask(location, "failed") if failed is None else failed
    array = integrity.open_array(location, "pred")
    objects = integrity.array_objects(location, "pred")
    damage = integrity.listed_damage("pred", array, objects,
                                     integrity.required("pred", array, done, failed))
    if read:
        seen = {d.chunk for d in damage}
        any_done = integrity.required("pred", array, done, np.zeros_like(done, dtype=bool))
        chunks = [c for c, size in integrity.stored(array, objects).items()
                  if size and any_done[c] and c not in seen]
        with ThreadPoolExecutor(4) as pool:
            damage += [d for d in pool.map(lambda c: integrity.read_damage("pred", array, c),
                                           chunks) if d is not None]
    return sorted(damage, key=lambda d: d.chunk)


def _block(chunk: tuple[int, ...], chunks: tuple[int, int], shape: tuple[int, int]
           ) -> tuple[slice, slice]:
    """The block (param slice, split slice) a pred chunk holds."""
    (i, j), (bp, bs) = chunk[:2], chunks
    return slice(i * bp, min((i + 1) * bp, shape[0])), slice(j * bs, min((j + 1) * bs, shape[1]))


def damaged_blocks(store: str | os.PathLike, chunks: tuple[int, int], *,
                   done: np.ndarray | None = None, failed: np.ndarray | None = None
                   ) -> list[tuple[slice, slice]]:
    """The blocks (param slice, split slice) holding a done fit whose ``pred`` chunk is missing
    or corrupt: their fits must be refitted (``chunks``: the store's block shape; ``done``,
    ``failed``: the store's masks, read if None)."""
    location = resolve(store)
    done = read_mask(location, "done") if done is None else done
    return [_block(d.chunk, chunks, done.shape) for d in pred_damage(location, done, failed)]


def intact_done(store: str | os.PathLike, chunks: tuple[int, int]) -> np.ndarray:
    """The ``done`` mask less the blocks whose ``pred`` chunk is missing or corrupt (logged,
    one line each): what a run may skip. DamagedStore if ``done`` or ``failed`` is damaged."""
    # DESIGN CHOICE: a run reads every done block's chunk (checking its checksum) before it
    # plans, so a damaged block is refitted rather than called complete; it costs one read of
    # the stored predictions (README, "Integrity").
    location = resolve(store)
    done = read_mask(location, "done")
    for damage in pred_damage(location, done, read_mask(location, "failed")):
        ps, ss = _block(damage.chunk, chunks, done.shape)
        log.warning("store %s: %s; refitting its fits (params %d-%d x splits %d-%d)", location,
                    damage, ps.start, ps.stop - 1, ss.start, ss.stop - 1)
        done[ps, ss] = False
    return done


def verify(store: str | os.PathLike) -> integrity.Report:
    """Read every chunk of every variable of a store; what is damaged (missing or corrupt).

    Returns a :class:`cvflow.store.integrity.Report` (``report.ok``, ``report.damaged``: a list of
    :class:`cvflow.store.integrity.Damage`, each ``variable``, ``chunk``, ``problem``). Raises
    StoreError if ``store`` is not a cvflow store. ``cvflow verify STORE`` prints it.
    """
    location = resolve(store)
    if not exists(location):
        raise StoreError(f"store: {location} does not exist")
    if not is_store(location):
        raise StoreError(f"store: {location} exists but is not a cvflow store")
    group = _group(location)
    arrays = {name: group[name] for name in sorted(group.array_keys())}
    objects = _objects(location, arrays)
    damage: list[Damage] = []

    def mask(name: str) -> np.ndarray | None:
        found = [d for d in damage if d.variable == name]
        return None if found else integrity.read(location, name, array=arrays[name])

    # DESIGN CHOICE: `arrays` come from the consolidated metadata, but readers open each
    # variable from its own zarr.json (no checksum): a damaged one is listed, not skipped
    # (test_integrity.py::test_verify_lists_a_corrupt_variable_metadata_object).
    for name in arrays:
        try:
            integrity.open_array(location, name)
        except integrity.DamagedMetadata as exc:
            damage.append(exc.damage)
    reads = []
    for name, array in arrays.items():
        present = integrity.stored(array, objects[name])
        reads += [(name, chunk) for chunk, size in sorted(present.items()) if size]
        damage += [d for d in integrity.listed_damage(name, array, objects[name],
                                                      integrity.required(name, array))]
    with ThreadPoolExecutor(4) as pool:
        damage += [d for d in pool.map(lambda r: integrity.read_damage(r[0], arrays[r[0]], r[1]),
                                       reads) if d is not None]
    done, failed = mask("done"), mask("failed")
    if done is not None and failed is not None:       # pred's missing chunks need both
        must = integrity.required("pred", arrays["pred"], done, failed)
        damage += [d for d in integrity.listed_damage("pred", arrays["pred"], objects["pred"], must)
                   if d.problem == "missing"]
    problems: list[str] = []
    if done is not None and not damage:        # attributes are checked against intact data
        problems = attributes.problems(
            group.attrs.asdict(), {"param": int(done.shape[0]), "split": int(done.shape[1])},
            lambda name: arrays[name][...], integrity.object_shape(arrays["pred"])[:2])
    return integrity.Report(location, sorted(damage, key=lambda d: (d.variable, d.chunk)),
                            variables=len(arrays), chunks=len(reads),
                            checksums=all(integrity.checksummed(a) for a in arrays.values()),
                            attributes=problems)


# ---------------------------------------------------------------------------------------------
# growing a store (an extended study, cvflow.execution.extend decides what may change)


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
    stored = _open_dataset(location)
    # a hyperparameter the store lacks: created at the stored length first (append needs it)
    new = [n for n in template.coords if n not in stored.variables]
    if new:
        _write(xr.Dataset(coords={n: template[n].isel(param=slice(0, n_params)) for n in new}),
               location, mode="a")

    def tail(dim: str, **index) -> xr.Dataset:
        names = [n for n in template.variables if dim in template[n].dims]
        return template[names].isel(index).drop_vars(
            [n for n in template.coords if dim not in template[n].dims], errors="ignore")

    if template.sizes["split"] > n_splits:
        _write(tail("split", param=slice(0, n_params), split=slice(n_splits, None)), location,
               append_dim="split", safe_chunks=False)
    if template.sizes["param"] > n_params:
        _write(tail("param", param=slice(n_params, None)), location, append_dim="param",
               safe_chunks=False)
    grown = {"param", "split"}
    rest = template.drop_vars([n for n in template.data_vars
                               if grown & set(template[n].dims)])
    if template.sizes["group"] != stored.sizes["group"]:
        # the subset design added to a store without one: its role table grows from (0, 2)
        _write(rest[["subset_split"]].isel(group=slice(stored.sizes["group"], None)),
               location, append_dim="group")
        rest = rest.drop_vars("subset_split")
    _write(rest, location, mode="a")
