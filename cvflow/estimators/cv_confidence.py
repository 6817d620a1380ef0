"""Cross-validation with confidence (Lei, JASA 2020): the set of params not significantly
worse than the best.

For a candidate m and every other param j, ξ_i(m, j) = e_i(m) − e_i(j) is the difference of
out-of-fold losses on analysis sample i (e_i(h) = ℓ_i(h, fold j(i))). With μ̂_j the mean of
ξ over the n samples, μ̂_{j,v} its mean over fold v, and σ̂_j its pooled within-fold standard
deviation, the test of "m is no worse than every other param" uses

    T = max_j √n · μ̂_j / σ̂_j,
    T*_b = max_j n^{-1/2} Σ_i ζ_{b,i} (ξ_i(m, j) − μ̂_{j, v(i)}) / σ̂_j,   ζ_{b,i} ~ N(0, 1),

and ``p_value`` (m) = the share of the B multiplier-bootstrap T*_b above T. The confidence
set is {m : p_value > alpha}; it contains the best param with probability about 1 − alpha.

DESIGN CHOICE: ξ is centred and σ̂ pooled within folds (denominator n − K): given the training
sets, the ξ of one fold are independent with a fold-specific mean, which is what the
multiplier bootstrap must reproduce. A param j with σ̂_j = 0 (its losses differ from m's by a
constant within every fold) is handled as in Lei's reference code: if μ̂_j > 0, m is worse
for sure (p = 0); otherwise j is dropped from the max.

Grouped data (the cube stores ``groups``): the ξ of one group are correlated, so the
multipliers are drawn **per group**, not per sample: with C_{g,j} = Σ_{i∈g} (ξ_i(m, j) −
μ̂_{j,v(i)}) the group sums of the centred differences and G groups,

    σ̂²_j = G/(G − K) · Σ_g C²_{g,j} / n,   T*_b = max_j n^{-1/2} Σ_g ζ_{b,g} C_{g,j} / σ̂_j,

with ζ_{b,g} ~ N(0, 1) (a wild cluster bootstrap). With one sample per group this is the
formula above (σ̂²_j = Σ_i c²_i / (n − K)). See docs/guide/grouped.md.

Draws: ``numpy.random.default_rng(seed).standard_normal((B, n))`` (one row per bootstrap
sample, one column per analysis sample in sample order; on grouped data ``(B, G)``, one
column per group in the order of the sorted labels), shared by all candidates.
Repeats: one repeat is used (``repeat=``, default 0); the p-values of different repeats are
not independent and are not combined.
"""
from __future__ import annotations


import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import guardrails, np_roles
from ._cube import analysis_groups, more_rows, param_coords
from .cube_losses import loss_name
from .labels import param_label, param_text, result_labels
from ._readers import out_of_fold
from .registry import Option, choice, declare, integer, probability

# DESIGN CHOICE: multiplier draws are made and used in blocks of this many bootstrap rows.
DRAW_ROWS = 256


def cvc_pvalues(e: np.ndarray, fold: np.ndarray, zeta, codes: np.ndarray | None = None
                ) -> np.ndarray:
    """Lei's p-values (P,) from out-of-fold losses ``e`` (P, n), fold labels ``fold`` (n,) and
    blocks of multipliers ``zeta`` (an iterable of (b, U) arrays; U = n, or G with group
    ``codes`` (n,) in 0..G−1: multipliers per group). NaN for params with a NaN loss (they are
    left out of every comparison), and for all when there are no more units than folds."""
    n_params, n = e.shape
    units = n if codes is None else int(codes.max()) + 1
    ok = ~np.isnan(e).any(axis=1)
    labels = np.unique(fold)
    onehot = (fold[None, :] == labels[:, None]).astype(np.float64)      # (V, n)
    plans, p_value = {}, np.full(n_params, np.nan)
    for m in np.flatnonzero(ok):
        others = np.flatnonzero(ok & (np.arange(n_params) != m))
        xi = e[m] - e[others]                                             # (J, n)
        mu = xi.mean(-1)
        centred = xi - (xi @ onehot.T / onehot.sum(1)) @ onehot            # minus fold means
        if codes is not None:
            centred = np_roles.cluster_sums(centred, codes, units)         # (J, G)
        if units <= labels.size:
            return np.full(n_params, np.nan)
        sd = np.sqrt((centred ** 2).sum(-1) / n * units / (units - labels.size))
        zero = sd <= 1e-12 * np.maximum(1.0, np.abs(xi).max(-1))
        if (zero & (mu > 0)).any():
            p_value[m] = 0.0
            continue
        keep = ~zero
        if not keep.any():
            p_value[m] = 1.0
            continue
        plans[m] = (np.sqrt(n) * (mu[keep] / sd[keep]).max(), centred[keep] / sd[keep, None])
        p_value[m] = 0.0
    count = 0
    for block in zeta:
        count += len(block)
        for m, (t, scaled) in plans.items():
            t_star = (block @ scaled.T).max(axis=1) / np.sqrt(n)
            p_value[m] += (t_star > t).sum()
    for m in plans:
        p_value[m] /= count
    return p_value


def cv_confidence(cube: xr.Dataset, *, loss: str | None = None, alpha: float = 0.05,
                  B: int = 1000, seed: int = 0, repeat: int = 0,
                  simplest: dict | None = None, groups: str = "auto") -> xr.Dataset:
    """Lei's CV with confidence: per param a p-value for "no worse than the best" and the set.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with K-fold splits; every param of the grid is a candidate.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    alpha : float, default 0.05
        The set keeps the params with ``p_value > alpha``.
    B : int, default 1000
        Gaussian multiplier bootstrap samples.
    seed : int, default 0
        Seed of ``numpy.random.default_rng`` for the multipliers (see the module docstring).
    repeat : int, default 0
        The repeat of the fold design to use.
    simplest : dict, optional
        ``{hyperparameter: "max" | "min"}``: also report the most regularised member of the
        set along that hyperparameter (e.g. ``{alpha: max}`` for ridge, ``{C: min}`` for an
        SVM), among the params that have it; ties to the first in grid order.
    groups : {"auto", "ignore"}, default "auto"
        ``"auto"``: multipliers per group whenever the cube stores group labels (see the
        module docstring); ``"ignore"``: per sample.

    Returns
    -------
    xarray.Dataset
        Per param ``estimate`` (the K-fold estimate on that repeat), ``p_value``, ``in_set``;
        scalars ``selected`` (the K-fold choice), ``set_size`` and, with ``simplest``,
        ``simplest`` (index, -1 if no member has the hyperparameter). attrs ``estimator``,
        ``loss``, ``alpha``, ``B``, ``seed``, ``repeat``, ``selected_params``,
        ``simplest_params`` (with ``simplest``), ``inference`` ("cluster-robust (multipliers
        per group)" or "independent samples"), ``groups`` (G, on grouped data), ``warnings``.
    """
    where = "cv_confidence"
    name = loss_name(cube, loss)
    # DESIGN CHOICE: the options are checked by their declaration below, as in a workflow
    options = _DECLARATION.call_options(alpha=alpha, B=B, seed=seed, repeat=repeat, groups=groups)
    a_level, b_count, seed, repeat, groups = (options[key] for key in
                                              ("alpha", "B", "seed", "repeat", "groups"))
    _check_repeat(repeat, int(cube.sizes.get("repeat", 0)), where)
    order = None if simplest is None else _order(cube, simplest, f"{where}.simplest")
    e, fold = out_of_fold(cube, name, where)
    e, fold = e[:, repeat], fold[repeat]
    n = e.shape[1]
    codes, group_warnings = analysis_groups(cube, groups, what=where)
    units = n if codes is None else int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    blocks = (rng.standard_normal((min(DRAW_ROWS, b_count - b0), units))
              for b0 in range(0, b_count, DRAW_ROWS))
    p_value = cvc_pvalues(e, fold, blocks, codes)
    estimate = e.mean(axis=1)
    selected = int(np_roles.argmin_first(estimate))
    in_set = p_value > a_level
    out = xr.Dataset({"estimate": ("param", estimate), "p_value": ("param", p_value),
                      "in_set": ("param", in_set), "selected": xr.DataArray(selected),
                      "set_size": xr.DataArray(int(in_set.sum()))})
    out = out.assign_coords(param_coords(cube))
    sizes = np.bincount(fold[fold >= 0])
    warnings = (guardrails.missing(int(np.isnan(p_value).sum()), where)
                + guardrails.sample_count(n, where) + guardrails.test_set_sizes(sizes)
                + group_warnings)
    out.attrs = {"estimator": where, "loss": name, "alpha": a_level, "B": b_count,
                 "seed": seed, "repeat": int(repeat),
                 "selected_params": param_label(cube, selected),
                 "inference": "independent samples" if codes is None
                 else "cluster-robust (multipliers per group)"}
    if codes is not None:
        out.attrs["groups"] = units
    if order is not None:
        pick = int(np_roles.argmin_first(np.where(in_set, order, np.nan)))
        out["simplest"] = xr.DataArray(pick)
        out.attrs["simplest_params"] = param_label(cube, pick)
    return guardrails.attach(out, warnings, where)


def _order(cube: xr.Dataset, simplest, where: str) -> np.ndarray:
    """Per param a key whose minimum is the most regularised (NaN: lacks the hyperparameter)."""
    hyper = sorted(str(k) for k, c in cube.coords.items() if c.dims == ("param",)
                   and k not in ("learner", "output", "param_json"))
    if not isinstance(simplest, dict) or len(simplest) != 1:
        raise InputError(f"{where}: {simplest!r}; give one hyperparameter and a direction, "
                         "e.g. {alpha: max} or {C: min}")
    (key, way), = simplest.items()
    if key not in hyper:
        raise InputError(f"{where}: no hyperparameter {key!r} in the grid; it has "
                         f"{', '.join(hyper) or 'none'}")
    if way not in ("max", "min"):
        raise InputError(f"{where}.{key}: {way!r}; use max (larger is simpler) or min")
    try:
        values = np.asarray(cube[key].values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{where}: hyperparameter {key!r} is not numeric") from None
    return -values if way == "max" else values


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`cv_confidence` (the members of the set, at most 10)."""
    at = result.attrs
    members = np.flatnonzero(result["in_set"].values)
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    grouped = f", multipliers per group (G = {at['groups']})" if "groups" in at else ""
    lines = [f"CV with confidence (Lei; {level:g}% set, B = {at.get('B')}, repeat "
             f"{at.get('repeat')}, loss {at.get('loss')}{grouped}): {len(members)} of "
             f"{result.sizes['param']} params"]
    order = members[np.argsort(result["estimate"].values[members], kind="stable")][:10]
    labels = result_labels(result)
    width = max((len(labels[h]) for h in order), default=0)
    for h in order:
        lines.append(f"  {labels[h]:<{width}}  CV {float(result['estimate'][h]):.5g}  "
                     f"p = {float(result['p_value'][h]):.3g}")
    lines += more_rows(len(members), len(order))
    if "simplest" in result:
        lines.append(f"  most regularised member: {param_text(at.get('simplest_params') or {})}")
    return lines


def _check_repeat(repeat: int, repeats: int, where: str) -> None:
    """``repeat`` (a checked non-negative integer) is one of the design's ``repeats``."""
    if not repeat < repeats:
        raise InputError(f"{where}.repeat: {repeat!r}; the design has {repeats} repeat(s), "
                         f"use 0..{repeats - 1}")


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    """``repeat`` is one of the design's, ``simplest`` names a numeric hyperparameter."""
    repeat, repeats = options.get("repeat"), design.get("repeats")
    if repeat is not None and isinstance(repeats, int):
        _check_repeat(repeat, repeats, where)
    if options.get("simplest") is not None:
        _order(grid, options["simplest"], f"{where}.simplest")


_DECLARATION = declare(cv_confidence, needs=("fold",), terms=("oof",), text=describe, check_grid=_check_grid,
                       options=[Option("alpha", 0.05, probability, "the set keeps params with p > alpha"),
                                Option("B", 1000, integer(1), "multiplier bootstrap samples"),
                                Option("seed", 0, integer(0), "seed of the multipliers"),
                                Option("repeat", 0, integer(0), "the repeat of the fold design to use"),
                                Option("simplest", None, None,
                                       "{hyper: max|min}: also the most regularised member of the set"),
                                Option("groups", "auto", choice("auto", "ignore"),
                                       "'auto': multipliers per group when the store has group labels")],
                       results={"estimate": ("param",), "p_value": ("param",), "in_set": ("param",),
                                "selected": (), "set_size": (), "simplest?": ()})
