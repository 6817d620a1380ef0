"""The role tables of a cube (``fold_split``, ``pair_split``, ``full_split``, ...): which split
holds each role, and a clear error when an estimator needs a role the store lacks. Read by the
estimators (through :mod:`cvflow.estimators._cube`) and by the one pass
(:mod:`cvflow.estimators.one_pass`), neither importing the other for them."""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError


def has_splits(cube: xr.Dataset, table: str) -> bool:
    """Whether every entry of a role table (``fold_split``, ``pair_split``, ...) is present."""
    index = cube[table]
    if table == "pair_split":
        k = index.sizes["outer"]
        off_diag = ~np.eye(k, dtype=bool)
        return not bool((index.values[:, off_diag] < 0).any()) if k else False
    return not bool((index.values < 0).any()) and index.size > 0


def require(cube: xr.Dataset, table: str, what: str) -> xr.DataArray:
    """A role table with every entry present, or a clear error naming what is missing."""
    index = cube[table]
    if not has_splits(cube, table):
        raise InputError(f"cube: {what} needs the {table.replace('_split', '')} splits, which this "
                         "store does not have; add the estimator to the workflow and run it again")
    return index


def full_split_index(cube: xr.Dataset, what: str) -> int:
    """Index of the split trained on all of D, or a clear error if the design lacks it."""
    index = int(cube.attrs.get("full_split", -1))
    if index < 0:
        raise InputError(f"cube: {what} needs the full split (trained on all of D), which this "
                         "store does not have; add the estimator to the workflow and run it again")
    return index
