"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine.

Each estimator declares itself once, in its own module (name, split roles, options, result
schema, renderers): see :mod:`cvflow.estimators.registry`. ``REGISTRY`` maps the names a
workflow's ``estimators:`` list uses to the declarations; :func:`lookup` also resolves user
estimators given by dotted path. A new estimator's name goes in ``registry.BUILT_IN``.
"""
from __future__ import annotations

import importlib
import sys
import types

from .registry import BUILT_IN, REGISTRY, Estimator, Option, declare, lookup

# DESIGN CHOICE: the functions are imported on first use (PEP 562), as REGISTRY imports an
# estimator's module when its name is first read: `cvflow.estimators.kfold(cube)` imports the
# K-fold's module alone, not the seventeen estimators (issue 41: a search's first fit)
_LAZY = {**BUILT_IN,
         # across data sets: a table (data sets x learners), not a cube; not a registered estimator
         "compare_learners": "compare_learners", "LearnerComparison": "compare_learners",
         # the one in-memory budget rule of every reduction (dask config
         # "cvflow.reduce.in-memory-bytes")
         "fits_budget": "memory", "is_lazy": "memory", "load_if_small": "memory",
         # the estimators of one report share their loss sums (cvflow.report.compute)
         "shared_terms": "_cube"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """This package, whose function names win over its submodules' of the same name."""

    def __setattr__(self, name: str, value) -> None:
        # importing the submodule `kfold` binds the package's `kfold` to it (the import system's
        # setattr): the name stays the function's, as when this file imported them all
        if name in _LAZY and isinstance(value, types.ModuleType) \
                and value.__name__ == f"{self.__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["corrected_kfold", "kfold", "stability", "stability_nested", "nested_cv", "nested_compare", "bates_ncv",
           "wald_cv", "ustat", "nadeau_bengio", "corrected_t", "bayes_t", "compare_all",
           "compare_learners", "LearnerComparison", "paired_5x2cv", "bbc_cv",
           "cv_confidence", "plan", "REGISTRY", "Estimator", "Option", "declare", "lookup", "fits_budget",
           "is_lazy", "load_if_small", "shared_terms"]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
