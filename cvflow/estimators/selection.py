"""Model selection shared by reducers: the first minimiser, its settings and its test risk.

A selection criterion (K-fold, corrected K-fold, stability-regularised nested CV, ...) picks a
param ``h``; what a user then deploys is the *full fit* of ``h`` (trained on all of D). When the
workflow holds out a test set, its empirical risk on the test samples is the honest measure of
the choice (Aghbalou et al. eq. 7.1). The risks come from the full split's role terms
(:func:`cvflow.estimators._cube.role_terms`), so they follow the same laziness, budget and NaN
rules as every other reducer.
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import np_roles
from ._cube import role_terms
from .labels import param_label


def has_test_set(cube: xr.Dataset) -> bool:
    return bool(np.asarray(cube["is_test"].values).any())


def full_fit_risk(cube: xr.Dataset, loss: str | None = None, *, on: str = "analysis"
                  ) -> np.ndarray:
    """Mean loss of each param's full fit on D (``on="analysis"``) or on the test set (``"test"``),
    shape (param,). The risk on D is the in-sample term of the corrected K-fold; the one on the
    test set is the test risk. InputError when asked for a test risk without a test set."""
    if on not in ("analysis", "test"):
        raise ValueError(f"on: {on!r}; use 'analysis' or 'test'")
    if on == "test" and not has_test_set(cube):
        raise InputError("cube: the workflow holds out no test set (data.test_fraction), "
                         "so there is no test risk")
    terms = role_terms(cube, loss, roles=("full",), what="the full fit's risk")
    return terms["full_risk" if on == "analysis" else "test_risk"]


def heldout_risk(cube: xr.Dataset, param: int | None = None, *, loss: str | None = None):
    """Test risk of the full fit of param ``param`` (a float), or of every param (array).

    NaN when ``param`` is -1 (a selection over only failed params); raises InputError when the
    cube has no held-out test set. Reads only the full split's predictions of that param.
    """
    if param is not None and int(param) < 0:
        return float("nan")
    sub = cube if param is None else cube.isel(param=[int(param)])
    risk = full_fit_risk(sub, loss, on="test")
    return risk if param is None else float(risk[0])


def selection(cube: xr.Dataset, estimate, *, loss: str | None = None, test=None) -> dict:
    """The first minimiser of ``estimate`` (param) with its estimate and, if any, its test risk.

    Returns ``{"index", "estimate", "test_risk", "params"}``: ``params`` is the chosen setting
    as a plain dict (empty when every param failed); ``test_risk`` is None without a test
    set. ``test`` is an already computed per-param test risk (saves a read).
    """
    values = np.asarray(getattr(estimate, "values", estimate), dtype=np.float64)
    index = int(np_roles.argmin_first(values))
    value = float(values[index]) if index >= 0 else float("nan")
    risk = None
    if has_test_set(cube):
        if index < 0:
            risk = float("nan")
        elif test is not None:
            risk = float(np.asarray(getattr(test, "values", test))[index])
        else:
            risk = heldout_risk(cube, index, loss=loss)
    return {"index": index, "estimate": value, "test_risk": risk,
            "params": param_label(cube, index)}
