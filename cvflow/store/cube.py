"""The prediction cube: its schema, opening and reading it.

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
score                     param, split, scorer         fit-time test score of fit (h, s)
                                                       (format 3, with scorers; NaN for a
                                                       split without test samples)
train_score               param, split, scorer         its score on its training rows (if
                                                       asked)
score_time                param, split                 seconds of its test scoring
========================  ===========================  ======================================

Coordinates: on ``split`` ``split_kind, split_repeat, split_outer, split_inner, split_group``;
on ``param`` ``learner``, ``output``, ``param_json`` and one per hyperparameter name.
Multiclass cubes (more than two classes) store C values per sample along ``class`` (coordinate:
the class labels): per-class probabilities, per-class decision values, or predicted labels
one-hot. With scorers (format 3) the ``scorer`` coordinate names them and the attribute
``scorers`` (JSON) describes each (``{name: {description, rebuild}}``; ``rebuild`` false: a
scorer given in Python that no name imports, so the study cannot be rebuilt from the store).
Every chunk carries a crc32c checksum; :mod:`cvflow.store.integrity` names a damaged one
(:func:`verify` lists them all). Attributes: ``cvflow_format`` (3 with scorers, else 2; absent
in format-1 stores), ``cvflow_version``,
``workflow`` (JSON), ``workflow_hash``, ``data_hash``, ``task``,
``loss`` (the default), ``classes`` (JSON), ``full_split``, ``chunks`` (JSON [param, split]),
``columns`` (JSON, a data frame's column names, dtypes and categories; see cvflow.workflow.data).
"""
from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ..lazy import xarray as xr

from . import attributes, integrity
from . import suite
from .coords import RESERVED, hyperparameter_coord, param_coords  # noqa: F401 - the schema
from .damage import listed_damage
from .damage import verify  # noqa: F401 - cvflow.store.cube.verify, as the docs name it
from ..errors import StoreError
from .group import (FORMAT_ATTR, LAZY_VARIABLES, marker, not_a_store, open_group, read_mask,
                    stable)
from .integrity import DamagedStore
from .location import exists, is_url, resolve, storage_options
from .schema import block_slices  # noqa: F401 - cvflow.store.cube.block_slices, as before

# the encoding key where open_cube keeps the dask name of the store's own `pred`: read_pred
# knows an untouched one by it
STORED = "cvflow_pred"


def open_dataset(location: str) -> xr.Dataset:
    """``xr.open_zarr`` on the consolidated metadata; a store written before cvflow consolidated
    it (format 1) is read without, silently (xarray's fallback warns on every open). A cube
    holds no dates or durations, so xarray does not look for them (~15% of the open)."""
    options = {"chunks": None, "decode_times": False, "decode_timedelta": False,
               "storage_options": storage_options(location)}
    try:
        return xr.open_zarr(location, consolidated=True, **options)
    except ValueError:
        return xr.open_zarr(location, consolidated=False, **options)


def open_cube(store: str | os.PathLike, *, scores: bool = True, trusted: bool = False
              ) -> xr.Dataset:
    """Open a cube: ``pred`` lazy (dask, the store's chunks), ``X`` lazy (read on access),
    everything else loaded. ``scores=False`` leaves the fit-time scores out (a run planning
    on the store: it refits the fits of a damaged score chunk, see
    :func:`cvflow.store.damage.intact_done`). ``trusted``: the run that wrote the store opens it
    (Study.run's result, ``cvflow run``'s table): its listing and attribute checks are skipped,
    a chunk read is still checked (DESIGN.md section 3: a run trusts the bytes it wrote
    itself; checks are for a store another run wrote).

    ``xr.open_zarr(store, chunks=None)`` with every variable but ``pred`` and ``X`` read into
    memory and ``pred`` chunked as stored; ``store`` is a local path or a URL
    (:mod:`cvflow.store.location`). Raises StoreError if it is not a cvflow store.
    """
    location = resolve(store)
    if not exists(location):
        raise StoreError(f"store: {location} does not exist")
    # one state of the store, before or after a grow by another run (group.stable)
    return stable(location, lambda: _open_cube(location, scores, trusted))


def _open_cube(location: str, scores: bool, trusted: bool = False) -> xr.Dataset:
    cube = None
    if not exists(marker(location)):          # else a creation was cut: no store
        try:
            cube = open_dataset(location)
        except Exception as exc:  # noqa: BLE001 - anything unreadable is not a cvflow store
            if integrity.problem(exc) is not None:      # unless a damaged index coordinate
                _raise_first_damage(location, exclude=LAZY_VARIABLES)
            cube = None
    if cube is None or FORMAT_ATTR not in cube.attrs:
        members = suite.datasets(location)
        if members:
            raise StoreError(f"store: {location} is a suite's store; open one data set's cube, "
                             f"e.g. {suite.member(location, members[0])}")
        raise not_a_store(location)
    if not scores:
        cube = cube.drop_vars([n for n in integrity.SCORE_VARIABLES if n in cube.variables])
    attributes.check_format(location, cube.attrs)
    # DESIGN CHOICE: a chunk written when the store was created or grown that is gone reads as
    # fill values (a deleted `fold` chunk made every estimate silently wrong): one listing of
    # the store (cheap, whatever it holds) refuses it before anything is read or reduced
    damage = [] if trusted else listed_damage(location)
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
    scored = [n for n in integrity.SCORE_VARIABLES if n in cube.variables]
    if scored and not trusted:   # the scores' chunks of done fits must exist (one listing each)
        damage = score_listed_damage(location, scored, cube["done"].values)
        if damage:
            raise DamagedStore(location, damage[0])
    pred = cube.variables["pred"].encoding
    if not trusted:
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
        group = open_group(location)
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


def score_listed_damage(location: str, names, done: np.ndarray) -> list:
    """The missing or empty chunks of the score variables ``names`` that hold done fits."""
    group = open_group(location)
    out = []
    for name in names:
        array = group[name]
        out += integrity.missing_or_empty(name, array, integrity.array_objects(location, name),
                                       integrity.required(name, array, done))
    return out


def read_attr(store: str | os.PathLike, name: str):
    """One root attribute of a store (None when absent), without opening the cube."""
    return open_group(resolve(store)).attrs.get(name)


def read_block(store: str | os.PathLike, params: slice, splits: slice) -> dict[str, np.ndarray]:
    """The stored cells of one block: pred (float64), failed, error (str objects), fit_seconds,
    and the fit-time scores the store has (score, train_score, score_time)."""
    location = resolve(store)
    group = open_group(location)
    region = (params, splits)

    def read(name: str) -> np.ndarray:
        return integrity.read(location, name, region, array=group[name])

    error = np.asarray(read("error"))
    out = {"pred": np.array(read("pred"), dtype=np.float64),
           "failed": np.array(read("failed"), dtype=bool),
           "error": np.array([str(e) for e in error.ravel()], dtype=object).reshape(error.shape),
           "fit_seconds": np.array(read("fit_seconds"), dtype=np.float64)}
    for name in integrity.SCORE_VARIABLES:           # the fit-time scores (format 3)
        if name in group:
            out[name] = np.array(read(name), dtype=np.float64)
    return out


def read_pred(cube_or_store) -> np.ndarray | None:
    """The whole ``pred`` in memory (zarr reads its chunks concurrently).

    ``cube_or_store``: a store path or URL, or a cube from :func:`open_cube` whose ``pred`` is
    still the store's own lazy array (else None: a selection, an in-memory cube, or a store
    extended since the cube was opened). ~2x faster than computing the lazy ``pred`` chunk
    by chunk; for cubes that fit in memory (see ``cvflow.estimators.memory.load_if_small``).
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


def block_chunks(store: str | os.PathLike) -> tuple[int, int]:
    bp, bs = json.loads(open_group(resolve(store)).attrs["chunks"])
    return int(bp), int(bs)


