"""Plain K-fold cross-validation from the cube (docs/guide/estimators.md)."""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from . import guardrails, np_roles
from ._cube import param_coords, role_terms
from .cube_losses import cube_loss
from .labels import param_label, param_text
from ._readers import fold_sizes
from .split_scores import kfold_scores
from .fold_metrics import metric_terms
from .registry import Option, choice, declare


AVERAGES = ("samples", "folds")
_average = choice(*AVERAGES)


def kfold(cube: xr.Dataset, *, loss: str | None = None, average: str = "samples") -> xr.Dataset:
    """K-fold estimate per param, its fold scores, naive standard error and the selection.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with the schema of docs/guide/cube.md (lazy or in memory).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's. A per-fold
        metric (``roc_auc``, ``average_precision``, ``r2``) is computed on each test fold
        and averaged over the folds; the selection then maximises it.
    average : {"samples", "folds"}, default "samples"
        How a pointwise loss's fold scores make the estimate: "samples" the mean over every
        analysis sample (each fold weighted by its size, docs/guide/estimators.md), "folds" the plain
        mean of the fold means (scikit-learn's ``GridSearchCV`` / ``cross_val_score``
        convention). The two differ only when the folds have unequal sizes. A per-fold metric
        is always the mean over the folds.

    Returns
    -------
    xarray.Dataset
        ``estimate`` (param), ``fold_score`` (param, repeat, outer), ``se`` (param) and
        ``selected`` (scalar index of the first best param); attrs ``loss``,
        ``greater_is_better``, ``selected_params`` (the chosen setting, a dict) and
        ``warnings``.
    """
    average = _average(average, "kfold.average")
    decl = cube_loss(cube, loss)
    name = decl.label
    if decl.pointwise:
        terms = role_terms(cube, decl, roles=("fold",), what="K-fold")
        out = kfold_scores(terms["fold_sum"], fold_sizes(cube), average=average)
    else:
        terms = metric_terms(cube, decl, what="K-fold")
        out = kfold_scores(terms["fold_metric"], fold_sizes(cube), pooled=False)
    selected = int(np_roles.argmin_first(decl.sign * out["estimate"].values))
    out["selected"] = xr.DataArray(selected)
    out = out.assign_coords(param_coords(cube))
    out.attrs = {"estimator": "kfold", "loss": name, "greater_is_better": int(decl.greater_is_better),
                 "average": average, "selected_params": param_label(cube, selected)}
    return guardrails.attach(out, guardrails.missing(int(terms["missing"].sum()), "kfold"),
                             "kfold")


def describe(result: xr.Dataset, max_rows: int = 12) -> list[str]:
    """Text-report lines: the per-param K-fold table, best first (largest first for a metric
    such as ROC AUC or R²; the best rows when the grid is long)."""
    est = result["estimate"].values
    se = result["se"].values
    sign = -1.0 if result.attrs.get("greater_is_better") else 1.0
    order = np.argsort(np.where(np.isnan(est), np.inf, sign * est), kind="stable")[:max_rows]
    shown = min(max_rows, len(est))
    lines = [f"K-fold ({result.attrs.get('loss')}), " + (
        f"the {shown} best of {len(est)} params:" if shown < len(est)
        else f"{len(est)} param{'s' * (len(est) != 1)}, best first:")]
    for h in order:
        lines.append(f"  {param_text(param_label(result, int(h))):<40} {est[h]:12.6g}  se {se[h]:.3g}")
    lines.append(f"  selected: {param_text(param_label(result, int(result['selected'])))}")
    return lines


def render(result: xr.Dataset, page) -> None:
    """HTML: the K-fold curve along the grid with its naive se band and its choice."""
    page.grid_curve("K-fold", result["estimate"], band=result["se"], selected=result["selected"])


# metrics: per-fold metrics accepted; time_ordered: valid on time-ordered folds (it only scores
# each fold fit on its own test fold)
declare(kfold, raced=True, needs=("fold",), terms=("fold",), overview=True, metrics=True, time_ordered=True,
        text=describe, html=render,
        options=[Option("average", "samples", _average,
                        "samples: the mean over the analysis samples; folds: the mean of the "
                        "fold means (GridSearchCV's)")],
        results={"estimate": ("param",), "estimate_repeat": ("param", "repeat"),
                 "fold_score": ("param", "repeat", "outer"), "se": ("param",), "se_mean": ("param",),
                 "fold_size": ("repeat", "outer"), "selected": ()})
