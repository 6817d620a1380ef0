"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine."""
from __future__ import annotations

from .kfold import kfold

__all__ = ["kfold"]
