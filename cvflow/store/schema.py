"""The cube's schema as plain numpy (docs/guide/cube.md, DESIGN.md section 3): every variable
with its dims and values, the coordinates, the attributes and the chunk encoding, before any
library holds them.

One builder (:func:`cube_schema`) for both homes of a cube: a Zarr store
(:func:`cvflow.store.creation.cube_template` wraps it as the xarray Dataset it creates the store
from) and the in-memory cube of a study without a store (:class:`cvflow.store.memory.MemoryCube`
fills its arrays). Nothing here imports zarr or xarray, but :func:`to_dataset`, which imports
xarray when a Dataset is asked for (tests/test_startup.py counts the modules a search without a
store imports).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import VERSION
from .coords import param_coords

FORMAT_ATTR = "cvflow_version"
# Store format: 1 (no attribute) before multiclass; 2 adds the `class` dim of multiclass `pred`;
# 3 adds the fit-time scores (`score`, `train_score`, `score_time` along `scorer`): only a store
# with scorers is written as 3 (an older cvflow would extend it without its scores), any other
# still as 2. A store of format <= STORE_FORMAT opens and reduces; a newer one is refused.
STORE_FORMAT_ATTR, STORE_FORMAT = "cvflow_format", 3
UNSCORED_FORMAT = 2             # the format of a store without scorers
STATUS_VARIABLES = ("done", "failed", "error", "fit_seconds")
# the fit-time scores (store format 3), written by the client with the status
SCORE_VARIABLES = ("score", "train_score", "score_time")
CLIENT_VARIABLES = STATUS_VARIABLES + SCORE_VARIABLES    # written by the run's client
REFITTED = "pred"         # the variable `cvflow run` rewrites when its chunk is damaged
FITTED = (REFITTED,) + SCORE_VARIABLES    # the variables whose damage `cvflow run` refits
# the variables a run writes (the tasks `pred`, the client the others): fill values until then
WRITTEN = ("pred",) + CLIENT_VARIABLES
FILLS = {"pred": np.nan, "failed": False, "error": "", "fit_seconds": np.nan, "done": False,
         "score": np.nan, "train_score": np.nan, "score_time": np.nan}

# DESIGN CHOICE: inner chunks of up to 4 MiB. A shard costs its index and a decode per inner
# chunk: a lasso block (100 params x 2000 samples, 1.6 MB) took 6.2-7.9 ms to write and 5.7 ms
# to read as a shard of two inner chunks against 4.5-5.9 and 3.1-3.4 ms as one chunk (medians
# of 40, zstd + crc32c, one thread). Inner chunks of megabytes still let a reducer going
# through the params in groups read each byte once (zarr and dask advise chunks of megabytes).
SHARD_INNER_BYTES = 4 * 2**20      # at most this much of a block per inner chunk of its shard
# at most this many (param, split) cells per chunk of a status variable (2 MiB of fit_seconds)
STATUS_CHUNK_CELLS = 2**18


# DESIGN CHOICE: the template's block variables (written later by the tasks and the client)
# were dask arrays of fill values; importing dask.array costs ~0.2 s, as much as a small
# search's fits. They are read-only views of their fill value (no memory), their chunks in
# their encoding; grow's xarray appends get dask arrays again (lazy_blocks), written as before.
def unwritten(shape: tuple, fill, dtype) -> np.ndarray:
    """A variable written later: its fill value broadcast to ``shape`` (a read-only view)."""
    return np.broadcast_to(np.asarray(fill, dtype=dtype), shape)


def is_unwritten(data) -> bool:
    """Whether a template variable's data is a fill-value view (:func:`unwritten`)."""
    return (isinstance(data, np.ndarray) and data.ndim > 0 and not any(data.strides)
            and not data.flags.writeable)


@dataclass(repr=False, eq=False)
class Schema:
    """A cube before any library holds it: ``variables`` and ``coords`` name -> (dims,
    values), in the store's order; ``attrs``; ``encoding`` name -> the chunk encoding of a data
    variable (``chunks``, ``shards``). The variables a run writes (:data:`WRITTEN`) are
    fill-value views (:func:`unwritten`) until something writes them."""

    variables: dict[str, tuple[tuple[str, ...], np.ndarray]]
    coords: dict[str, tuple[tuple[str, ...], np.ndarray]]
    attrs: dict[str, Any]
    encoding: dict[str, dict] = field(default_factory=dict)

    @property
    def sizes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dims, values in (*self.variables.values(), *self.coords.values()):
            out.update(zip(dims, np.shape(values)))
        return out


def cube_schema(data, design, params, *, attrs: dict, chunks: tuple[int, int],
                dtype: str = "float64", scorers=(), train_scores: bool = False) -> Schema:
    """The cube's schema, its block variables fill-value views (:func:`unwritten`): what the
    tasks and the client write later.

    ``data`` is a :class:`cvflow.workflow.data.Data`, ``design`` a
    :class:`cvflow.workflow.designs.Design`, ``params`` a list of
    :class:`cvflow.workflow.params.Param`; ``chunks`` = (params, splits) per block. ``scorers``
    (their names) adds the fit-time scores ``score`` (and with ``train_scores``
    ``train_score``) along ``scorer``, and ``score_time`` (store format 3).
    """
    n_params, n_splits, n = len(params), design.n_splits, data.X.shape[0]
    scorers = [str(name) for name in scorers]
    bp, bs = min(chunks[0], n_params), min(chunks[1], n_splits)
    block = (bp, bs)
    # DESIGN CHOICE: a multiclass fit stores C values per sample along a `class` dim; a block's
    # chunk spans all samples and classes, so one task still owns whole chunks. Binary and
    # regression cubes keep one value per sample (format 1 layout).
    classes = list(data.classes or ())
    per_class = (len(classes),) if len(classes) > 2 else ()
    class_dim = ("class",) if per_class else ()
    # DESIGN CHOICE: tasks write only their chunk of `pred`; the client, the only writer of the
    # (param, split) status variables, writes them in batches as results come back, no lock.
    # Chunks of whole blocks, at most STATUS_CHUNK_CELLS cells (one chunk for a store up to
    # that size): a store stays at ~one file per task, and a flush rewrites only the chunks of
    # the blocks that came back (cvflow.store.writes.StatusWriter), not the whole status.
    status = (n_params, n_splits)
    ps = ("param", "split")
    variables: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        "pred": (ps + ("sample",) + class_dim,
                 unwritten((n_params, n_splits, n) + per_class, np.nan, dtype)),
        "done": (ps, unwritten(status, False, bool)),
        "failed": (ps, unwritten(status, False, bool)),
        "error": (ps, np.full((n_params, n_splits), "", dtype=object)),
        "fit_seconds": (ps, unwritten(status, np.nan, np.float64)),
        "train": (("split", "sample"), design.train),
        "fold": (("repeat", "sample"), design.fold),
        "fold_split": (("repeat", "outer"), design.fold_split),
        "pair_split": (("repeat", "outer", "inner"), design.pair_split),
        "subset_split": (("group", "member"), design.subset_split),
        "y": (("sample",), data.y),
        "is_test": (("sample",), data.is_test),
        "X": (("sample", "feature"), data.X),
    }
    coords: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
        "split_kind": (("split",), design.kind.astype(object)),
        "split_repeat": (("split",), design.repeat),
        "split_outer": (("split",), design.outer),
        "split_inner": (("split",), design.inner),
        "split_group": (("split",), design.group),
        "feature": (("feature",), np.asarray(data.feature_names, dtype=object)),
    }
    if per_class:
        coords["class"] = (("class",), np.asarray(classes, dtype=object if isinstance(
            classes[0], str) else None))
    coords.update({name: ((dim,), values) for name, (dim, values) in param_coords(params).items()})
    schema_attrs = {
        FORMAT_ATTR: VERSION,
        STORE_FORMAT_ATTR: STORE_FORMAT if scorers else UNSCORED_FORMAT,
        "full_split": int(design.full_split),
        "chunks": json.dumps([bp, bs]),
        **attrs,
    }
    if scorers:
        # DESIGN CHOICE: a scorer needs the fitted model, so its values are computed by the
        # task that fits and come back in its small record; the client writes them with the
        # status (one chunk each, whole, before `done`), as it writes fit_seconds.
        k = len(scorers)
        for name in ("score",) + (("train_score",) if train_scores else ()):
            variables[name] = (ps + ("scorer",),
                               unwritten((n_params, n_splits, k), np.nan, np.float64))
        variables["score_time"] = (ps, unwritten(status, np.nan, np.float64))
        coords["scorer"] = (("scorer",), np.asarray(scorers, dtype=object))
    if getattr(data, "sample_weight", None) is not None:
        variables["sample_weight"] = ("sample",), data.sample_weight
    if getattr(data, "groups", None) is not None:
        # DESIGN CHOICE: the group labels are kept (an optional variable: older stores lack it
        # and still open) so that estimators can be cluster-robust (estimators/_cube.py
        # analysis_groups); numbers as they are, anything else as text.
        labels = np.asarray(data.groups)
        variables["groups"] = ("sample",), (labels if labels.dtype.kind in "iub"
                                            else labels.astype(str).astype(object))
    status_chunk = status_chunks(status, block)
    encoding: dict[str, dict] = {}
    for name, (_, values) in variables.items():     # a block's chunk, the status' chunks
        if name == "pred":
            encoding[name] = {"chunks": block + (n,) + per_class}
        elif name in CLIENT_VARIABLES:
            encoding[name] = {"chunks": status_chunk + values.shape[2:]}
    inner = _inner_params(bp, bs * n * int(np.prod(per_class, dtype=int)) * np.dtype(dtype).itemsize)
    if inner < bp:
        # DESIGN CHOICE: a block of many params (a path task writes every param of its
        # splits) is one Zarr v3 shard, still written whole by its one task (one file), made
        # of inner chunks of `inner` params that readers decode on their own: a reducer going
        # through the params in groups then reads each byte once, not once per group.
        encoding["pred"] = {"chunks": (inner, bs, n) + per_class,
                            "shards": block + (n,) + per_class}
    return Schema(variables, coords, schema_attrs, encoding)


def to_dataset(schema: Schema):
    """The schema as an xarray Dataset, its chunk encoding set (what
    :func:`cvflow.store.creation.create` writes; the in-memory cube's ``to_dataset``)."""
    # DESIGN CHOICE: imported here, not at the top: a search without a store builds its cube
    # from the schema and never asks for a Dataset unless its user does (cube_, a report);
    # xarray imports dask.array with it, ~0.3-0.4 s (tests/test_startup.py counts the modules)
    import xarray as xr

    ds = xr.Dataset(dict(schema.variables), coords=dict(schema.coords), attrs=dict(schema.attrs))
    for name, variable in ds.data_vars.items():
        variable.encoding.update(schema.encoding.get(name, {}))
        # DESIGN CHOICE: every non-dimension coordinate is listed once, in the group's
        # `coordinates` attribute (CF's global form), not on each data variable: an extension
        # adds hyperparameter coordinates by rewriting the group's attributes through xarray,
        # which leaves existing arrays' attributes as they are.
        variable.encoding["coordinates"] = None
    return ds


def status_chunks(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    """The chunk of the (param, split) status variables of a ``shape`` cube of ``block`` blocks:
    the whole array up to STATUS_CHUNK_CELLS cells, else whole blocks (as many splits' blocks
    as fit, then params') within STATUS_CHUNK_CELLS, and one block at least.

    >>> status_chunks((1000, 1001), (1000, 6))
    (1000, 258)
    >>> status_chunks((5, 11), (2, 4))
    (5, 11)
    """
    if shape[0] * shape[1] <= STATUS_CHUNK_CELLS:
        return tuple(shape)           # type: ignore[return-value]
    blocks = max(1, STATUS_CHUNK_CELLS // (block[0] * block[1]))
    along_split = min(blocks, -(-shape[1] // block[1]))
    along_param = min(max(1, blocks // along_split), -(-shape[0] // block[0]))
    return min(block[0] * along_param, shape[0]), min(block[1] * along_split, shape[1])


def _inner_params(bp: int, param_bytes: int) -> int:
    """Params per inner chunk of a block of ``bp`` params (``param_bytes`` each): the largest
    divisor of ``bp`` within SHARD_INNER_BYTES, or ``bp`` when the whole block is."""
    want = max(1, SHARD_INNER_BYTES // max(param_bytes, 1))
    if want >= bp:
        return bp
    return max(d for d in range(1, want + 1) if bp % d == 0)


def block_slices(n_params: int, n_splits: int, chunks: tuple[int, int]):
    """All blocks as (param slice, split slice), chunk-aligned."""
    bp, bs = chunks
    for p0 in range(0, n_params, bp):
        for s0 in range(0, n_splits, bs):
            yield slice(p0, min(p0 + bp, n_params)), slice(s0, min(s0 + bs, n_splits))
