"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine.

Each estimator declares itself once, in its own module (name, split roles, options, result
schema, renderers): see :mod:`cvflow.estimators.registry`. ``REGISTRY`` maps the names a
workflow's ``estimators:`` list uses to the declarations; :func:`lookup` also resolves user
estimators given by dotted path. A new estimator module is imported here, nothing more.
"""
from __future__ import annotations

# importing a module declares its estimators
from .kfold import kfold
from .corrected import corrected_kfold
from .stability import stability, stability_nested
from .nested import nested_cv
from .nested_compare import nested_compare
from .bates import bates_ncv, wald_cv
from .ustat import nadeau_bengio, ustat
from .corrected_t import corrected_t
from .bayes_t import bayes_t
from .compare_all import compare_all
# across data sets: a table (data sets x learners), not a cube; not a registered estimator
from .compare_learners import LearnerComparison, compare_learners
from .paired_5x2cv import paired_5x2cv
from .bbc_cv import bbc_cv
from .cv_confidence import cv_confidence
from .study_size import plan
from .registry import REGISTRY, Estimator, Option, declare, lookup
# the one in-memory budget rule of every reduction (dask config "cvflow.reduce.in-memory-bytes")
from .memory import fits_budget, is_lazy, load_if_small
# the estimators of one report share their loss sums (cvflow.report.compute)
from ._cube import shared_terms

__all__ = ["corrected_kfold", "kfold", "stability", "stability_nested", "nested_cv", "nested_compare", "bates_ncv",
           "wald_cv", "ustat", "nadeau_bengio", "corrected_t", "bayes_t", "compare_all",
           "compare_learners", "LearnerComparison", "paired_5x2cv", "bbc_cv",
           "cv_confidence", "plan", "REGISTRY", "Estimator", "Option", "declare", "lookup", "fits_budget",
           "is_lazy", "load_if_small", "shared_terms"]
