"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine.

``REGISTRY`` maps the names a workflow's ``estimators:`` list uses to the functions;
``DESCRIBE`` maps them to optional text-report formatters ``describe(result) -> list[str]``.
"""
from __future__ import annotations

from .corrected import corrected_kfold
from .corrected import describe as _describe_corrected
from .kfold import kfold

__all__ = ["corrected_kfold", "kfold"]

REGISTRY = {
    "kfold": kfold,
    "corrected_kfold": corrected_kfold,
}

DESCRIBE: dict = {
    "corrected_kfold": _describe_corrected,
}
