"""Bias-corrected K-fold (Burman 1989; Aghbalou, Portier & Sabourin, Section 5) and selection by it.

For folds N_1..N_K of D (n = |D|, p_j = |N_j| / n) and a loss ℓ,

    corrected(h) = kfold(h) + mean_{i∈D} ℓ_i(h, full) − Σ_j p_j · mean_{i∈D} ℓ_i(h, fold j)

(docs/guide/estimators.md). The last term evaluates each fold model on all of D, its own training samples
included, which is why the cube stores every fit's predictions on every sample. With equal
folds p_j = 1/K and this is the paper's display in Section 5.

The reducer reads only the full split and the K-fold splits of the cube (never the pair or
subset splits), in one pass (:func:`cvflow.estimators._cube.role_terms`), chunk by chunk on
big stores.
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from . import guardrails, np_roles
from ._cube import param_coords, role_terms
from .cube_losses import loss_name
from .labels import param_text
from ._readers import fold_sizes
from .split_scores import kfold_scores
from .registry import declare
from .selection import selection


def corrected_scores(terms: dict[str, np.ndarray], sizes: np.ndarray) -> xr.Dataset:
    """Per-param terms of the corrected K-fold from the role sums of :func:`role_terms`.

    ``terms`` holds ``fold_sum``, ``fold_risk`` (param, repeat, outer) and ``full_risk``
    (param); ``sizes`` (repeat, outer) = |N_j|. Returns ``kfold`` (param) the plain K-fold
    estimate, ``full_risk`` (param) the full fit's empirical risk on D, ``fold_model_risk``
    (param) = Σ_j p_j · mean_{i∈D} ℓ_i(h, fold j), ``estimate`` (param) the corrected
    estimate, each averaged over repeats, and the per-repeat ``kfold_repeat``,
    ``fold_model_risk_repeat``, ``estimate_repeat`` (param, repeat), and ``se`` (param): the
    corrected estimate is the p_j-weighted mean of the fold-level values c_{r,j} =
    fold score + full_risk − mean_{i∈D} ℓ_i(h, fold j), and ``se`` applies the corrected
    repeated K-fold variance to them (:func:`np_roles.corrected_repeated_se`; a heuristic: the
    full-fit term is shared by all folds and adds no variance to it). A failed fit gives NaN.
    """
    kfold_repeat = kfold_scores(terms["fold_sum"], sizes)["estimate_repeat"].values
    share = sizes / sizes.sum(axis=1, keepdims=True)
    fold_model = (terms["fold_risk"] * share).sum(axis=2)
    corrected = kfold_repeat + terms["full_risk"][:, None] - fold_model
    pr = ("param", "repeat")
    return xr.Dataset({
        "kfold": ("param", kfold_repeat.mean(axis=1)),
        "full_risk": ("param", terms["full_risk"]),
        "fold_model_risk": ("param", fold_model.mean(axis=1)),
        "estimate": ("param", corrected.mean(axis=1)),
        "se": ("param", np_roles.corrected_repeated_se(
            terms["fold_sum"] / sizes + terms["full_risk"][:, None, None] - terms["fold_risk"])),
        "kfold_repeat": (pr, kfold_repeat),
        "fold_model_risk_repeat": (pr, fold_model),
        "estimate_repeat": (pr, corrected),
    })


def corrected_kfold(cube: xr.Dataset, *, loss: str | None = None) -> xr.Dataset:
    """Bias-corrected K-fold per param and model selection by it and by the plain K-fold.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the schema of docs/guide/cube.md (lazy or in memory) holding the full
        split and the K-fold splits.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.

    Returns
    -------
    xarray.Dataset
        Per param: ``estimate`` (corrected), ``kfold``, ``full_risk``, ``fold_model_risk`` and
        their per-repeat versions (see :func:`corrected_scores`); ``full_test_risk`` (param),
        the full fit's risk on the held-out test set, when the workflow has one.
        Scalars: ``selected`` (argmin of the corrected estimate, ties to the first param in
        grid order, NaN params skipped, -1 if all failed) and ``kfold_selected`` (argmin of the
        plain K-fold), plus ``test_risk`` / ``kfold_test_risk`` (the test risk of each choice's
        full fit) when there is a test set. attrs: ``estimator``, ``loss``, ``folds``,
        ``repeats``, ``selected_params`` and ``kfold_selected_params`` (the chosen settings as
        dicts), ``warnings``.

    Examples
    --------
    >>> from sklearn.linear_model import Ridge  # doctest: +SKIP
    >>> res = corrected_kfold(cube, loss="absolute")  # doctest: +SKIP
    >>> int(res.selected), float(res.test_risk), res.attrs["selected_params"]  # doctest: +SKIP
    """
    name = loss_name(cube, loss)
    terms = role_terms(cube, name, roles=("full", "fold"), what="the corrected K-fold")
    out = corrected_scores(terms, fold_sizes(cube))
    test = terms.get("test_risk")
    if test is not None:
        out["full_test_risk"] = ("param", test)
    attrs = {"estimator": "corrected_kfold", "loss": name,
             "folds": int(cube.sizes.get("outer", 0)),
             "repeats": int(cube.sizes.get("repeat", 0))}
    for prefix, criterion in (("", out["estimate"]), ("kfold_", out["kfold"])):
        choice = selection(cube, criterion, loss=name, test=test)
        out[f"{prefix}selected"] = xr.DataArray(choice["index"])
        if choice["test_risk"] is not None:
            out[f"{prefix}test_risk"] = xr.DataArray(choice["test_risk"])
        attrs[f"{prefix}selected_params"] = choice["params"]
    out = out.assign_coords(param_coords(cube))
    out.attrs = attrs
    return guardrails.attach(out, guardrails.missing(int(terms["missing"].sum()),
                                                     "corrected_kfold"), "corrected_kfold")

def corrected_with_full(cube: xr.Dataset, full_losses: np.ndarray, *, loss: str) -> xr.Dataset:
    """:func:`corrected_scores` of a cube's params whose full fits are not in the cube: a
    search's, where ``best_estimator_`` is the chosen param's full fit.

    ``full_losses`` (param, sample): each param's full-fit loss of every sample (the cube's
    held-out test samples are left out here); the fold terms are read from the cube's fold
    splits, which must hold every sample's predictions (NaN terms otherwise).
    """
    terms = role_terms(cube, loss, roles=("fold",), what="the corrected K-fold", nan_rule=False)
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    terms["full_risk"] = np.asarray(full_losses, dtype=np.float64)[:, analysis].mean(axis=1)
    return corrected_scores(terms, fold_sizes(cube))


def _at(values: xr.DataArray, index: int) -> str:
    return f"{float(values.values[index]):.6g}" if index >= 0 else "nan"


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines: the K-fold and the corrected K-fold selections side by side."""
    a = result.attrs
    plain, corrected = int(result["kfold_selected"]), int(result["selected"])
    rows = [("chosen param", param_text(a["kfold_selected_params"]),
             param_text(a["selected_params"])),
            ("grid index", str(plain), str(corrected)),
            ("CV estimate", _at(result["kfold"], plain), _at(result["estimate"], corrected))]
    if "test_risk" in result:
        rows.append(("test risk (full fit)", f"{float(result['kfold_test_risk']):.6g}",
                     f"{float(result['test_risk']):.6g}"))
    width = max(len(r[0]) for r in rows)
    col = max(len("K-fold"), *(len(r[1]) for r in rows))
    lines = [f"corrected K-fold (loss {a['loss']}, K={a['folds']}, repeats={a['repeats']})",
             f"  {'':<{width}}  {'K-fold':<{col}}  corrected K-fold"]
    lines += [f"  {r[0]:<{width}}  {r[1]:<{col}}  {r[2]}" for r in rows]
    if "full_test_risk" in result and not np.isnan(result["full_test_risk"].values).all():
        best = int(np.nanargmin(result["full_test_risk"].values))
        lines.append(f"  (best test risk over the grid: "
                     f"{float(result['full_test_risk'][best]):.6g} at grid index {best})")
    return lines

def render(result: xr.Dataset, page) -> None:
    """HTML: the corrected K-fold curve along the grid, its choice, and the full fits' test risk."""
    page.grid_curve("corrected K-fold", result["estimate"], selected=result["selected"],
                    choice="corrected choice")
    if "full_test_risk" in result:
        page.grid_curve("test risk (full fit)", result["full_test_risk"])


declare(corrected_kfold, needs=("full", "fold"), terms=("full", "fold"), overview=True, text=describe, html=render,
        raced=True,
        results={"estimate": ("param",), "se": ("param",), "kfold": ("param",),
                 "full_risk": ("param",),
                 "fold_model_risk": ("param",), "estimate_repeat": ("param", "repeat"),
                 "kfold_repeat": ("param", "repeat"), "fold_model_risk_repeat": ("param", "repeat"),
                 "full_test_risk?": ("param",), "selected": (), "kfold_selected": (),
                 "test_risk?": (), "kfold_test_risk?": ()})
