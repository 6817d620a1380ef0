"""What people read: results as text and JSON, the HTML report, the live page, plots, tables.

``cvflow.report.compute`` and the other result functions live in :mod:`cvflow.report.results`;
they are reached through this package as before the package was split into folders
(docs/developer/architecture.md). They are imported on first use, so that importing
``cvflow.report.live`` or ``cvflow.report.tables`` does not pay for the estimators.
"""
from __future__ import annotations

import importlib
import importlib.util


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f".{name}", __name__)
    results = importlib.import_module(".results", __name__)
    try:
        return getattr(results, name)
    except AttributeError:
        raise AttributeError(f"module 'cvflow.report' has no attribute {name!r}") from None
