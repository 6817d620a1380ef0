"""Heavy libraries imported when first used: ``from cvflow.lazy import xarray as xr``.

DESIGN CHOICE: the estimators, their readers and ``cvflow.cv_results`` name xarray at their top
but a search without a store runs them on its cube in memory (numpy) and builds no Dataset;
xarray imports dask.array with it (~0.3-0.4 s, more than a small search's fits). The name
stands for the module and imports it on the first attribute read (``xr.Dataset``), so a process
that never builds a Dataset never imports xarray (tests/test_startup.py counts the modules).
Unlike ``importlib.util.LazyLoader``, nothing is put in ``sys.modules`` before the import.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING


class LazyModule:
    """A module imported on the first attribute read."""

    def __init__(self, name: str):
        self.__name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self.__name), attr)

    def __repr__(self) -> str:
        return f"<module {self.__name!r}, imported when first used>"


if TYPE_CHECKING:
    import xarray
    from scipy import stats
else:
    xarray = LazyModule("xarray")
    # the estimators' intervals and tests; `cvflow report` of a K-fold needs none (~0.25 s)
    stats = LazyModule("scipy.stats")

__all__ = ["LazyModule", "stats", "xarray"]
