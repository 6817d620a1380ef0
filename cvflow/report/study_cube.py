"""The cube a study's results read (:class:`cvflow.study.StudyResult`'s base): a store's, or the
cube in memory of a study run without a store (DESIGN.md section 3), as a Dataset when asked.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..store.memory import IN_MEMORY, MemoryCube


class StudyCube:
    """``cube`` (an xarray Dataset restricted to the workflow's params unless ``all_params``),
    ``store`` (its path; None for a cube in memory, held in ``memory``), ``readable`` (what the
    K-fold readers read by name) and ``save(path)``. A store is opened at once, trusted when the
    run that wrote it returns it (``run``: DESIGN.md section 3, a run trusts the bytes it wrote
    itself); a cube in memory becomes a Dataset when first read (xarray is imported then)."""

    def __init__(self, store, *, run=None, all_params: bool = False):
        self.memory = store if isinstance(store, MemoryCube) else None
        self.store = None if self.memory is not None else Path(store)
        self.run, self.all_params, self._cube = run, all_params, None
        if self.store is not None:
            self.cube                      # noqa: B018 - a store is opened now, as before

    @property
    def cube(self):
        if self._cube is None:
            # DESIGN CHOICE: imported here: xarray and zarr only once a Dataset is asked for
            # (tests/test_startup.py counts a search's modules)
            from .results import workflow_view
            from ..store.cube import open_cube

            cube = (self.memory.to_dataset() if self.memory is not None
                    else open_cube(self.store, trusted=self.run is not None))
            # an extended store's params the workflow no longer lists are left out unless asked
            self._cube = workflow_view(cube, all_params=self.all_params)
        return self._cube

    @property
    def readable(self):
        """The cube as the K-fold readers read it by name (``cvflow.cv_results``, ``SearchCV``):
        the cube in memory itself (no Dataset, no xarray), else :attr:`cube`."""
        return self.memory if self.memory is not None else self.cube

    @property
    def where(self) -> str:
        """The store's path, or "(in memory)" (for messages)."""
        return IN_MEMORY if self.store is None else str(self.store)

    def save(self, path) -> Path:
        """Write a cube kept in memory as a new store at ``path``, which ``cvflow.open`` reads
        back value for value; returns the path (InputError for a result over a store)."""
        if self.memory is None:
            raise InputError(f"save: the cube is the store {self.store}; copy that store")
        self.memory.save(path)
        return Path(path)
