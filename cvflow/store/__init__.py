"""The cube on disk or an object store: creation and growth, reading and writing, integrity,
attributes, the run lock, where a store lives.

See docs/developer/architecture.md for how the folders fit together. ``cvflow.store`` was one
module before the package was split into folders: its names (``open_cube``, ``write_pred``,
...) still resolve through this package, from :mod:`cvflow.store.cube`, imported on first use.
"""
from __future__ import annotations

import importlib
import importlib.util


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f".{name}", __name__)
    cube = importlib.import_module(".cube", __name__)
    try:
        return getattr(cube, name)
    except AttributeError:
        raise AttributeError(f"module 'cvflow.store' has no attribute {name!r}") from None
