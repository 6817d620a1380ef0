"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine.

``REGISTRY`` maps the names a workflow's ``estimators:`` list uses to the functions;
``DESCRIBE`` maps them to optional text-report formatters ``describe(result) -> list[str]``.
"""
from __future__ import annotations

from .kfold import kfold

__all__ = ["kfold"]

REGISTRY = {
    "kfold": kfold,
}

DESCRIBE: dict = {}
