"""The cube of a study without a store, in memory (DESIGN.md section 3): the schema's arrays
(:func:`cvflow.store.schema.cube_schema`), written by the run as a store would be, saved as a
Zarr store only when asked.

The run's client fills it: each block's record brings its predictions back with its status
(:func:`cvflow.execution.tasks.run_block`), and :meth:`MemoryCube.write` puts both in, ``done``
last, as :class:`cvflow.store.writes.StatusWriter` writes a store. Nothing here imports zarr or
xarray: :meth:`MemoryCube.to_dataset` imports xarray, :meth:`MemoryCube.save` zarr, when called
(tests/test_startup.py counts the modules a search without a store imports).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from .schema import (FILLS, SCORE_VARIABLES, WRITTEN, Schema, is_unwritten, to_dataset,
                     unwritten)

# what a store location names when the cube is in memory (RunResult.store, TaskContext.store)
IN_MEMORY = "(in memory)"


class MemoryCube:
    """A cube held in this process: ``variables`` name -> numpy array, ``dims`` name -> its
    dims, ``coords`` (name -> (dims, values)) and ``attrs`` as a store holds them.

    Every variable a run writes starts at its fill value (NaN predictions, ``done`` False),
    as an unwritten chunk of a store reads. ``to_dataset()`` is the xarray Dataset
    ``cvflow.open`` gives of the store ``save(path)`` writes.
    """

    def __init__(self, schema: Schema):
        variables = {}
        for name, (dims, values) in schema.variables.items():
            if name in WRITTEN and is_unwritten(values):
                values = np.full(values.shape, FILLS[name], dtype=values.dtype)
            variables[name] = (dims, values)
        self.schema = replace(schema, variables=variables)

    # -- reading ---------------------------------------------------------------------------

    @property
    def attrs(self) -> dict:
        return self.schema.attrs

    @property
    def sizes(self) -> dict[str, int]:
        return self.schema.sizes

    def __contains__(self, name: str) -> bool:
        return name in self.schema.variables or name in self.schema.coords

    def values(self, name: str) -> np.ndarray:
        """The values of variable or coordinate ``name`` (the array itself, not a copy)."""
        found = self.schema.variables.get(name) or self.schema.coords.get(name)
        if found is None:
            raise KeyError(name)
        return found[1]

    def dims(self, name: str) -> tuple[str, ...]:
        found = self.schema.variables.get(name) or self.schema.coords.get(name)
        if found is None:
            raise KeyError(name)
        return found[0]

    # -- the read side of an xarray Dataset that the K-fold readers use ---------------------
    # DESIGN CHOICE: cvflow.cv_results and the K-fold kernel (estimators/split_scores.py,
    # _cube.role_terms) read a cube by name: ``cube["pred"].values``, ``cube.sizes``,
    # ``"score" in cube``, ``cube.attrs``. The cube in memory answers those reads itself, so a
    # search without a store scores its fits, as GridSearchCV does, without building a
    # Dataset (xarray and dask.array: ~0.3-0.4 s); anything else reads ``to_dataset()``.

    def __getitem__(self, name: str) -> Variable:
        return Variable(self.dims(name), self.values(name), self, name)

    @property
    def encoding(self) -> dict:
        return {}                 # no store behind it

    @property
    def coords(self) -> dict[str, Variable]:
        return {name: self[name] for name in self.schema.coords}

    @property
    def variables(self) -> dict[str, Variable]:
        return {name: self[name] for name in (*self.schema.variables, *self.schema.coords)}

    def to_dataset(self):
        """The cube as an xarray Dataset (numpy-backed; imports xarray)."""
        return to_dataset(self.schema)

    # -- writing ---------------------------------------------------------------------------

    def write(self, results) -> None:
        """Record finished blocks (:class:`cvflow.fitting.block.BlockResult`, their ``pred``
        included): predictions, failed, error, fit_seconds and the scores, then ``done``."""
        v = self.schema.variables
        for r in results:
            region = (r.params, r.splits)
            cells = (np.ones(r.failed.shape, dtype=bool) if getattr(r, "fitted", None) is None
                     else np.asarray(r.fitted, dtype=bool))
            if r.pred is not None:
                pred = v["pred"][1]
                pred[region] = np.where(cells.reshape(cells.shape + (1,) * (pred.ndim - 2)),
                                        r.pred, pred[region])
            for name in ("failed", "error", "fit_seconds") + SCORE_VARIABLES:
                new = getattr(r, name, None)
                if new is None or name not in v:
                    continue
                target = v[name][1]
                mask = cells.reshape(cells.shape + (1,) * (target.ndim - 2))
                target[region] = np.where(mask, new, target[region])
            v["done"][1][region] |= cells

    def save(self, store: str | os.PathLike) -> None:
        """Write the cube as a Zarr store at ``store`` (a new path or URL): what a run with
        ``store=`` would have written; ``cvflow.open(store)`` reads it back value for value."""
        from .creation import create
        from .writes import StatusWriter, write_pred

        schema = self.schema
        create(store, self.template())
        n_params, n_splits = self.values("done").shape
        done = self.values("done")
        status = _Written(slice(0, n_params), slice(0, n_splits), self.values("pred"),
                          self.values("failed"), self.values("error"),
                          self.values("fit_seconds"), done.copy(),
                          *(schema.variables[n][1] if n in schema.variables else None
                            for n in SCORE_VARIABLES))
        if n_params and n_splits:
            write_pred(store, status)
            StatusWriter(store, fresh=True).write([status])

    def template(self):
        """The Dataset a store of this cube is created from: its written variables at their
        fill values (:func:`cvflow.store.creation.create` leaves them unwritten)."""
        variables = {name: (dims, unwritten(values.shape, FILLS[name], values.dtype)
                            if name in WRITTEN and name != "error" else values)
                     for name, (dims, values) in self.schema.variables.items()}
        variables["error"] = (self.dims("error"), np.full(self.values("error").shape, "",
                                                          dtype=object))
        return to_dataset(replace(self.schema, variables=variables))


class Variable:
    """One variable of a :class:`MemoryCube`, read as an xarray DataArray is read: ``values``
    (``data``, the same numpy array), ``dims``, ``shape``, ``sizes``, and ``sel`` of labels
    along a dimension that has a coordinate (``cube["score"].sel(scorer="f1")``)."""

    def __init__(self, dims: tuple[str, ...], values: np.ndarray, cube: MemoryCube, name: str):
        self.dims, self.values, self.cube, self.name = tuple(dims), values, cube, name

    @property
    def data(self) -> np.ndarray:
        return self.values

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def size(self) -> int:
        return int(self.values.size)

    @property
    def ndim(self) -> int:
        return self.values.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def encoding(self) -> dict:
        return {}                 # no store: no chunks (numpy, any view is cheap)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(zip(self.dims, self.values.shape))

    def sel(self, **labels) -> Variable:
        values, dims = self.values, list(self.dims)
        for dim, label in labels.items():
            axis = dims.index(dim)
            where = [str(v) for v in self.cube.values(dim)].index(str(label))
            values = np.take(values, where, axis=axis)
            dims.pop(axis)
        return Variable(tuple(dims), values, self.cube, self.name)


class _Written:
    """The whole cube as one block (:class:`cvflow.store.writes.BlockResult`), for save."""

    def __init__(self, params, splits, pred, failed, error, fit_seconds, fitted, score=None,
                 train_score=None, score_time=None):
        self.params, self.splits, self.pred = params, splits, pred
        self.failed, self.error, self.fit_seconds, self.fitted = failed, error, fit_seconds, fitted
        self.score, self.train_score, self.score_time = score, train_score, score_time
