"""The cube on disk or an object store: creation and growth, reading and writing, integrity,
attributes, the run lock, where a store lives.

See docs/developer/architecture.md for how the folders fit together. ``cvflow.store`` was one
module before the package was split into folders: its names (``open_cube``, ``write_pred``,
...) still resolve through this package, from the module that now holds each
(:mod:`cvflow.store.cube`, ``creation``, ``writes``, ``damage``, ``group``), imported on first use.
"""
from __future__ import annotations

import importlib
import importlib.util

# where the old module's names went (cvflow.store.cube split by role), searched in this order
_PARTS = ("cube", "creation", "writes", "damage", "group")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f".{name}", __name__)
    for part in _PARTS:
        module = importlib.import_module(f".{part}", __name__)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'cvflow.store' has no attribute {name!r}")
