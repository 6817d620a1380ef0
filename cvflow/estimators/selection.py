"""Model selection helpers shared by reducers: the full fit's risks and the chosen param's test risk.

A selection criterion (K-fold, corrected K-fold, stability-regularised nested CV, ...) picks a
param ``h``; what a user then deploys is the *full fit* of ``h`` (trained on all of D). When the
workflow holds out a test set, its empirical risk on the test samples is the honest measure of
the choice (Aghbalou et al. eq. 7.1). These functions read only the full split of the cube.
"""
from __future__ import annotations


import numpy as np
import xarray as xr

from ..errors import InputError
from ._cube import (analysis_weights, argmin_first, full_split_index, param_label, pointwise_loss,
                    weighted_mean)


def full_fit_losses(cube: xr.Dataset, loss: str | None = None, *, what: str = "the full fit"
                    ) -> xr.DataArray:
    """ℓ_i(h, full) for every param and sample; dims (param, sample), lazy when the cube is."""
    index = full_split_index(cube, what)
    pred = cube["pred"].isel(split=index, drop=True)
    pred = pred.drop_vars([k for k in pred.coords if "split" in k])
    return pointwise_loss(cube, loss, pred=pred)


def heldout_weights(cube: xr.Dataset) -> xr.DataArray:
    """1.0 on held-out test samples, 0.0 on D; dims (sample,)."""
    return xr.DataArray(cube["is_test"].values.astype(np.float64), dims="sample")


def has_test_set(cube: xr.Dataset) -> bool:
    return bool(np.asarray(cube["is_test"].values).any())


def full_fit_risk(cube: xr.Dataset, loss: str | None = None, *, on: str = "analysis"
                  ) -> xr.DataArray:
    """Mean loss of each param's full fit on D (``on="analysis"``) or on the test set (``"test"``).

    Returns a lazy DataArray over ``param`` (call ``.compute()``). The empirical risk on D is
    the in-sample term of the corrected K-fold; the one on the test set is the test risk.
    """
    if on not in ("analysis", "test"):
        raise ValueError(f"on: {on!r}; use 'analysis' or 'test'")
    if on == "test" and not has_test_set(cube):
        raise InputError("cube: the workflow holds out no test set (data.test_fraction), "
                         "so there is no test risk")
    weights = analysis_weights(cube) if on == "analysis" else heldout_weights(cube)
    return weighted_mean(full_fit_losses(cube, loss), weights)


def heldout_risk(cube: xr.Dataset, param: int | None = None, *, loss: str | None = None):
    """Test risk of the full fit of param ``param`` (a float), or of every param (DataArray).

    NaN when ``param`` is -1 (a selection over only failed params); raises InputError when the
    cube has no held-out test set. Reads only the full split's predictions of that param.
    """
    if param is None:
        return full_fit_risk(cube, loss, on="test").compute()
    if int(param) < 0:
        return float("nan")
    sub = cube.isel(param=[int(param)])
    return float(full_fit_risk(sub, loss, on="test").compute().values[0])


def selection(cube: xr.Dataset, estimate: xr.DataArray, *, loss: str | None = None,
              test: xr.DataArray | None = None) -> dict:
    """The first minimiser of ``estimate`` (param) with its estimate and, if any, its test risk.

    Returns a dict ``{"index", "estimate", "test_risk", "param"}``; ``param`` is the chosen
    setting as a dict (empty when every param failed). ``test`` is an already computed
    per-param test risk (saves a read); otherwise it is read when the cube has a test set.
    """
    index = int(argmin_first(estimate))
    value = float(estimate.values[index]) if index >= 0 else float("nan")
    risk = None
    if has_test_set(cube):
        if index < 0:
            risk = float("nan")
        elif test is not None:
            risk = float(test.values[index])
        else:
            risk = heldout_risk(cube, index, loss=loss)
    return {"index": index, "estimate": value, "test_risk": risk,
            "param": param_label(cube, index)}
