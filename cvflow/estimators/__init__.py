"""Reducers: pure functions cube -> xarray.Dataset. None of them imports the engine.

``REGISTRY`` maps the names a workflow's ``estimators:`` list uses to the functions;
``DESCRIBE`` maps them to optional text-report formatters ``describe(result) -> list[str]``.
"""
from __future__ import annotations

from .bbc_cv import bbc_cv
from .bbc_cv import describe as _describe_bbc
from .corrected import corrected_kfold
from .corrected_t import corrected_t
from .corrected_t import describe as _describe_corrected_t
from .corrected import describe as _describe_corrected
from .cv_confidence import cv_confidence
from .cv_confidence import describe as _describe_cvc
from .kfold import kfold
from .bates import bates_ncv, wald_cv
from .bates import describe as _describe_bates
from .bates import describe_wald as _describe_wald
from .nested import describe as _describe_nested
from .nested import nested_cv
from .paired_5x2cv import describe as _describe_5x2cv
from .paired_5x2cv import paired_5x2cv
from .stability import describe as _describe_stability_nested
from .stability import describe_stability as _describe_stability
from .stability import stability, stability_nested
from .ustat import describe as _describe_ustat
from .ustat import describe_nadeau_bengio as _describe_nadeau_bengio
from .ustat import nadeau_bengio, ustat

__all__ = ["corrected_kfold", "kfold", "stability", "stability_nested", "nested_cv", "bates_ncv", "wald_cv",
           "ustat", "nadeau_bengio", "corrected_t", "paired_5x2cv", "bbc_cv", "cv_confidence"]

REGISTRY = {
    "stability": stability,
    "stability_nested": stability_nested,
    "nested_cv": nested_cv,
    "bates_ncv": bates_ncv,
    "wald_cv": wald_cv,
    "kfold": kfold,
    "corrected_kfold": corrected_kfold,
    "ustat": ustat,
    "nadeau_bengio": nadeau_bengio,
    "corrected_t": corrected_t,
    "paired_5x2cv": paired_5x2cv,
    "bbc_cv": bbc_cv,
    "cv_confidence": cv_confidence,
}

DESCRIBE: dict = {
    "stability": _describe_stability,
    "stability_nested": _describe_stability_nested,
    "nested_cv": _describe_nested,
    "bates_ncv": _describe_bates,
    "wald_cv": _describe_wald,
    "corrected_kfold": _describe_corrected,
    "ustat": _describe_ustat,
    "nadeau_bengio": _describe_nadeau_bengio,
    "corrected_t": _describe_corrected_t,
    "paired_5x2cv": _describe_5x2cv,
    "bbc_cv": _describe_bbc,
    "cv_confidence": _describe_cvc,
}
