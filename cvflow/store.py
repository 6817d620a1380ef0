"""The prediction cube: schema, creation, opening and chunk-aligned block writes.

Layout (Zarr v3 through xarray), dims ``param, split, sample, repeat, feature`` plus the role
tables' ``outer, inner, group, member``:

========================  ===========================  ======================================
variable                  dims                         meaning
========================  ===========================  ======================================
pred                      param, split, sample         prediction of fit (h, s) on sample i
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
X                         sample, feature              features
========================  ===========================  ======================================

Coordinates: on ``split`` ``split_kind, split_repeat, split_outer, split_inner, split_group``;
on ``param`` ``learner``, ``output``, ``param_json`` and one per hyperparameter name.
Attributes: ``cvflow_version``, ``workflow`` (JSON), ``workflow_hash``, ``data_hash``, ``task``,
``loss`` (the default), ``classes`` (JSON), ``full_split``, ``chunks`` (JSON [param, split]).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from .errors import StoreError

log = logging.getLogger(__name__)

FORMAT_ATTR = "cvflow_version"
BLOCK_VARIABLES = ("pred", "failed", "error", "fit_seconds", "done")
RESERVED = {
    "pred", "done", "failed", "error", "fit_seconds", "train", "fold", "fold_split",
    "pair_split", "subset_split", "y", "is_test", "X", "learner", "output", "param_json",
    "param", "split", "sample", "repeat", "feature", "outer", "inner", "group", "member",
}


def _version() -> str:
    from . import __version__

    return __version__


def hyperparameter_coord(name: str) -> str:
    """Coordinate name of a hyperparameter (prefixed only if it collides with the schema)."""
    return f"param_{name}" if name in RESERVED or name.startswith("split_") else name


def param_coords(params) -> dict:
    """Coordinates on ``param`` from a list of :class:`cvflow.learners.Param`."""
    names = sorted({k for p in params for k in p.hyper})
    coords = {
        "learner": ("param", np.array([p.learner for p in params], dtype=object)),
        "output": ("param", np.array([p.output for p in params], dtype=object)),
        "param_json": ("param", np.array([p.to_json() for p in params], dtype=object)),
    }
    for name in names:
        values = [p.hyper.get(name) for p in params]
        present = [v for v in values if v is not None]
        numeric = all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in present)
        if numeric:
            arr = np.array([np.nan if v is None else float(v) for v in values])
        else:
            arr = np.array(["" if v is None else str(v) for v in values], dtype=object)
        coords[hyperparameter_coord(name)] = ("param", arr)
    return coords


def cube_template(data, design, params, *, attrs: dict, chunks: tuple[int, int],
                  dtype: str = "float64") -> xr.Dataset:
    """The cube as a lazy Dataset: block variables are dask arrays of fill values.

    ``data`` is a :class:`cvflow.data.Data`, ``design`` a :class:`cvflow.designs.Design`,
    ``params`` a list of :class:`cvflow.learners.Param`; ``chunks`` = (params, splits) per block.
    """
    n_params, n_splits, n = len(params), design.n_splits, data.X.shape[0]
    bp, bs = min(chunks[0], n_params), min(chunks[1], n_splits)
    block = (bp, bs)
    # DESIGN CHOICE: tasks write only their chunk of `pred`; the client, the only writer of the
    # small (param, split) status variables, writes them in batches as results come back. One
    # chunk each keeps the store at ~one file per task (not five) and needs no lock.
    status = (n_params, n_splits)
    ds = xr.Dataset(
        {
            "pred": (("param", "split", "sample"),
                     da.full((n_params, n_splits, n), np.nan, dtype=dtype, chunks=block + (n,))),
            # distinct names: identical dask graphs would otherwise load into one shared array
            "done": (("param", "split"),
                     da.zeros((n_params, n_splits), dtype=bool, chunks=status, name="cvflow-done")),
            "failed": (("param", "split"),
                       da.zeros((n_params, n_splits), dtype=bool, chunks=status, name="cvflow-failed")),
            "error": (("param", "split"), np.full((n_params, n_splits), "", dtype=object)),
            "fit_seconds": (("param", "split"),
                            da.full((n_params, n_splits), np.nan, chunks=status)),
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
            **param_coords(params),
        },
        attrs={
            FORMAT_ATTR: _version(),
            "full_split": int(design.full_split),
            "chunks": json.dumps([bp, bs]),
            **attrs,
        },
    )
    ds["error"].encoding["chunks"] = status
    return ds


def create(path: str | os.PathLike, template: xr.Dataset) -> None:
    """Create the store: metadata and small variables now, block variables left unwritten.

    Unwritten chunks read as their fill values (NaN predictions, ``done`` False).
    """
    # DESIGN CHOICE: build the store beside its final path and rename it into place (atomic on
    # POSIX), so a run killed during creation leaves either no store or a complete one, never a
    # half-written directory that a rerun would refuse as "not a cvflow store". Leftovers of
    # killed creations are removed here (callers hold the store's run lock, cvflow.lock).
    import shutil
    import uuid

    path = Path(path)
    if path.exists():
        raise StoreError(f"store: {path} already exists")
    for old in path.parent.glob(f".{path.name}.creating-*"):
        shutil.rmtree(old, ignore_errors=True)
    tmp = path.with_name(f".{path.name}.creating-{uuid.uuid4().hex[:8]}")
    template.to_zarr(tmp, mode="w-", compute=False, zarr_format=3, consolidated=False)
    # compute=False skips every dask variable; write the small eager ones explicitly.
    group = zarr.open_group(str(tmp), mode="r+")
    group["error"][...] = np.full(template["error"].shape, "", dtype=object)
    os.rename(tmp, path)


def is_store(path: str | os.PathLike) -> bool:
    try:
        return FORMAT_ATTR in zarr.open_group(str(path), mode="r").attrs
    except Exception:  # noqa: BLE001 - anything unreadable is not a cvflow store
        return False


def open_cube(path: str | os.PathLike) -> xr.Dataset:
    """Open a cube lazily (dask-backed). Raises StoreError if ``path`` is not a cvflow store."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"store: {path} does not exist")
    if not is_store(path):
        raise StoreError(f"store: {path} exists but is not a cvflow store")
    cube = xr.open_zarr(path, consolidated=False, zarr_format=3)
    # DESIGN CHOICE: everything but `pred` is small (param x split at most) and stored in one
    # chunk (the status variables are written by the client alone, see write_status): load it
    # once so reducers index role tables and masks without recomputing dask graphs; `pred`
    # stays lazy. One local compute (synchronous scheduler): never a round-trip per variable
    # through a distributed client that happens to be the default scheduler.
    return _load_small(cube, [name for name in cube.variables if name != "pred"])


def _load_small(cube: xr.Dataset, names: list[str]) -> xr.Dataset:
    import dask

    lazy = [n for n in names if isinstance(cube[n].variable.data, da.Array)]
    values = dask.compute(*[cube[n].variable.data for n in lazy], scheduler="sync")
    data = {n: cube[n].copy(data=v) for n, v in zip(lazy, values)}
    coords = {n: data.pop(n) for n in list(data) if n in cube.coords}
    return cube.assign(data).assign_coords(coords)


def block_chunks(store: str | os.PathLike) -> tuple[int, int]:
    bp, bs = json.loads(zarr.open_group(str(store), mode="r").attrs["chunks"])
    return int(bp), int(bs)


def blocks(n_params: int, n_splits: int, chunks: tuple[int, int]):
    """All blocks as (param slice, split slice), chunk-aligned."""
    bp, bs = chunks
    for p0 in range(0, n_params, bp):
        for s0 in range(0, n_splits, bs):
            yield slice(p0, min(p0 + bp, n_params)), slice(s0, min(s0 + bs, n_splits))


@dataclass
class BlockResult:
    """What a fitted block holds; the task writes it and returns only :meth:`summary`."""

    params: slice
    splits: slice
    pred: np.ndarray        # (params, splits, sample)
    failed: np.ndarray      # (params, splits) bool
    error: np.ndarray       # (params, splits) object (str)
    fit_seconds: np.ndarray  # (params, splits)

    def without_pred(self) -> "BlockResult":
        """The status part only (small: what a task sends back to the client)."""
        return BlockResult(self.params, self.splits, None, self.failed, self.error, self.fit_seconds)

    def summary(self) -> dict:
        return {
            "params": (self.params.start, self.params.stop),
            "splits": (self.splits.start, self.splits.stop),
            "fits": int(self.failed.size),
            "failed": int(self.failed.sum()),
            "seconds": float(np.nansum(self.fit_seconds)),
        }


def _check_aligned(shape, chunks, params: slice, splits: slice) -> None:
    for sl, size, chunk, dim in ((params, shape[0], chunks[0], "param"),
                                 (splits, shape[1], chunks[1], "split")):
        if sl.start % chunk or (sl.stop != size and sl.stop % chunk):
            raise ValueError(
                f"block {dim} region {sl.start}:{sl.stop} is not aligned with chunks of {chunk}; "
                "two writers could share a chunk"
            )


def write_pred(path: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions (the task side). Idempotent; chunk-aligned or ValueError."""
    group = zarr.open_group(str(path), mode="r+")
    region = (result.params, result.splits)
    pred = group["pred"]
    _check_aligned(pred.shape[:2], pred.chunks[:2], *region)
    pred[region] = result.pred.astype(pred.dtype, copy=False)


def write_status(path: str | os.PathLike, results) -> None:
    """Record finished blocks (the client side): failed, error, fit_seconds, then ``done``.

    ``results`` are :class:`BlockResult` (``pred`` may be None) whose predictions are already
    written. One read-modify-write per variable for the whole batch; only one process (the
    run's client) may call this on a store at a time.
    """
    results = list(results)
    if not results:
        return
    group = zarr.open_group(str(path), mode="r+")
    for name in ("failed", "error", "fit_seconds", "done"):
        array = group[name]
        values = array[...]
        for r in results:
            values[r.params, r.splits] = True if name == "done" else getattr(r, name)
        array[...] = values


def write_block(path: str | os.PathLike, result: BlockResult) -> None:
    """Write one block's predictions and status; ``done`` last, so done implies written.

    Idempotent: rewriting a block writes the same bytes. For a single writer (in-process use);
    the engine's tasks call :func:`write_pred` and the client :func:`write_status`.
    """
    write_pred(path, result)
    write_status(path, [result])


def read_mask(path: str | os.PathLike, name: str) -> np.ndarray:
    """A small (param, split) variable read eagerly (done, failed, fit_seconds, error)."""
    return zarr.open_group(str(path), mode="r")[name][...]
