"""BBC-CV: bootstrap bias-corrected cross-validation (Tsamardinos, Greasidou & Borboudakis,
Machine Learning 107, 2018).

The error of the param chosen by K-fold is optimistic: the minimum of noisy estimates is
biased low. BBC-CV corrects it without nested fits, from the out-of-fold matrix alone: with
e_i(h) = ℓ_i(h, fold j(i)) the out-of-fold loss of param h on analysis sample i, for each of
B bootstrap samples of D (n draws with replacement),

1. select on the in-bag samples: h_b = argmin_h mean_{in-bag} e_i(h) (draws counted with
   their multiplicity; ties to the first param, params with a missing fit never chosen);
2. score the choice on the out-of-bag samples: L_b = mean_{i out-of-bag} e_i(h_b).

``estimate`` = mean_b L_b estimates the error of the chosen configuration, and the
percentile interval is [q_{α/2}, q_{1−α/2}] of the L_b (the paper's "BBC-CV" interval).

Repeats (DESIGN CHOICE): each bootstrap sample indexes the analysis samples, so one sample
serves every repeat; L_b is averaged over the R repeats (each repeat selects on its own
out-of-fold matrix) before the mean and the percentiles. With one repeat this is the paper's
algorithm exactly.

Grouped data (the cube stores ``groups``): the losses of one group are correlated, so the
bootstrap draws **groups**, not samples (a cluster bootstrap): G draws with replacement among
the G groups; a sample counts as often as its group was drawn, in-bag means are weighted by
those counts, and the out-of-bag samples are those of the groups never drawn.

Draws: ``rng = numpy.random.default_rng(seed)``; bootstrap sample b (b = 0..B−1 in order)
is ``rng.integers(0, n, size=n)``, positions into the analysis samples in sample order (on
grouped data ``rng.integers(0, G, size=G)``, positions into the sorted group labels).
"""
from __future__ import annotations


import numpy as np
from ..lazy import xarray as xr

from . import guardrails, np_roles
from ._cube import analysis_groups
from .cube_losses import loss_name
from .labels import param_text
from ._readers import out_of_fold
from .registry import Option, choice as one_of, declare, fmt, integer, probability
from .selection import selection


def bbc_draws(e: np.ndarray, draws, codes: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """BBC-CV on out-of-fold losses ``e`` (P, R, n) for the bootstrap samples ``draws``.

    ``draws`` yields index arrays into the samples, or with group ``codes`` (n,) in 0..G−1
    into the groups (a sample counts as often as its group is drawn). Returns the
    out-of-bag losses L (B, R) of the in-bag choices and the choices (B, R); a sample with no
    out-of-bag point gives NaN. Params with NaN losses are never chosen.
    """
    n = e.shape[-1]
    units = n if codes is None else int(codes.max()) + 1
    bad = np.isnan(e).any(axis=-1)                                     # (P, R)
    filled = np.where(np.isnan(e), 0.0, e)
    losses, chosen = [], []
    for idx in draws:
        counts = np.bincount(idx, minlength=units).astype(np.float64)
        if codes is not None:
            counts = counts[codes]
        in_bag = np.where(bad, np.nan, filled @ counts / counts.sum())  # (P, R)
        h = np_roles.argmin_first(in_bag, axis=0)                      # (R,)
        oob = counts == 0
        picked = filled[np.maximum(h, 0), np.arange(e.shape[1])]       # (R, n)
        with np.errstate(invalid="ignore"):
            score = (picked * oob).sum(-1) / oob.sum()
        losses.append(np.where(h >= 0, score, np.nan))
        chosen.append(h)
    return np.asarray(losses), np.asarray(chosen)


def bbc_cv(cube: xr.Dataset, *, loss: str | None = None, B: int = 1000, seed: int = 0,
           alpha: float = 0.05, groups: str = "auto") -> xr.Dataset:
    """BBC-CV estimate and percentile interval for the error of the param K-fold selects.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with K-fold splits (all params of the grid are candidates).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    B : int, default 1000
        Bootstrap samples.
    seed : int, default 0
        Seed of ``numpy.random.default_rng`` for the draws (see the module docstring).
    alpha : float, default 0.05
        1 − alpha is the coverage of the percentile interval.
    groups : {"auto", "ignore"}, default "auto"
        ``"auto"``: bootstrap groups whenever the cube stores group labels (see the module
        docstring); ``"ignore"``: bootstrap samples.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (mean out-of-bag loss of the in-bag choices), ``lower``,
        ``upper``, ``kfold_min`` (the K-fold estimate of the selected param, the optimistic
        number BBC-CV corrects), ``bias`` (estimate − kfold_min), ``selected`` (the K-fold
        choice) and, with a test set, ``test_risk`` (its full fit's test risk);
        ``oob_loss`` (bootstrap) = L_b averaged over repeats; ``chosen_share`` (param) how
        often each param won in-bag. attrs ``estimator``, ``loss``, ``B``, ``seed``,
        ``alpha``, ``repeats``, ``selected_params``, ``inference`` ("cluster-robust
        (bootstrap of groups)" or "independent samples"), ``groups`` (G, on grouped data),
        ``warnings``.
    """
    where = "bbc_cv"
    name = loss_name(cube, loss)
    # DESIGN CHOICE: the options are checked by their declaration below, as in a workflow
    options = _DECLARATION.call_options(alpha=alpha, B=B, seed=seed, groups=groups)
    a_level, b_count, seed, groups = (options[key] for key in ("alpha", "B", "seed", "groups"))
    e, _ = out_of_fold(cube, name, where)
    n_params, repeats, n = e.shape
    codes, group_warnings = analysis_groups(cube, groups, what=where)
    units = n if codes is None else int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    draws = (rng.integers(0, units, size=units) for _ in range(b_count))
    per_repeat, chosen = bbc_draws(e, draws, codes)
    oob = per_repeat.mean(axis=1)
    kfold = np.where(np.isnan(e).any(axis=(1, 2)), np.nan, e.mean(axis=-1).mean(axis=1))
    choice = selection(cube, xr.DataArray(kfold, dims="param"), loss=name)
    finite = oob[np.isfinite(oob)]
    lower, upper = (np.quantile(finite, [a_level / 2, 1 - a_level / 2]) if finite.size
                    else (np.nan, np.nan))
    estimate = float(finite.mean()) if finite.size else np.nan
    share = np.bincount(chosen[chosen >= 0].ravel(), minlength=n_params) / chosen.size
    out = xr.Dataset({
        "estimate": xr.DataArray(estimate), "lower": xr.DataArray(float(lower)),
        "upper": xr.DataArray(float(upper)), "kfold_min": xr.DataArray(choice["estimate"]),
        "bias": xr.DataArray(estimate - choice["estimate"]),
        "selected": xr.DataArray(choice["index"]),
        "oob_loss": ("bootstrap", oob), "chosen_share": ("param", share),
    })
    if choice["test_risk"] is not None:
        out["test_risk"] = xr.DataArray(choice["test_risk"])
    warnings = (guardrails.missing(int(np.isnan(kfold).sum()), where)
                + guardrails.sample_count(n, where, method="a bootstrap percentile interval",
                                          answers="its coverage")
                + group_warnings)
    if finite.size < oob.size:
        warnings.append(guardrails.warning(
            "empty_out_of_bag", f"{oob.size - finite.size} of {oob.size} bootstrap samples had "
            "no out-of-bag sample (or no usable param) and were skipped",
            skipped=int(oob.size - finite.size)))
    out.attrs = {"estimator": where, "loss": name, "B": b_count, "seed": seed,
                 "alpha": a_level, "repeats": repeats,
                 "selected_params": choice["params"],
                 "inference": "independent samples" if codes is None
                 else "cluster-robust (bootstrap of groups)"}
    if codes is not None:
        out.attrs["groups"] = units
    return guardrails.attach(out, warnings, where)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`bbc_cv`."""
    at = result.attrs
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    grouped = f", bootstrap of G = {at['groups']} groups" if "groups" in at else ""
    return [f"BBC-CV (B = {at.get('B')}, seed {at.get('seed')}, {at.get('repeats')} repeat(s), "
            f"loss {at.get('loss')}{grouped})",
            f"  selected by K-fold: {param_text(at.get('selected_params') or {})}",
            f"  K-fold estimate {fmt(float(result['kfold_min']))}  BBC-CV estimate "
            f"{fmt(float(result['estimate']))} ({level:g}% [{fmt(float(result['lower']))}, "
            f"{fmt(float(result['upper']))}])  bias {fmt(float(result['bias']))}"]


_DECLARATION = declare(bbc_cv, needs=("fold",), terms=("oof",), text=describe,
                       options=[Option("B", 1000, integer(1), "bootstrap samples"),
                                Option("seed", 0, integer(0), "seed of the bootstrap draws"),
                                Option("alpha", 0.05, probability, "1 - alpha the interval's coverage"),
                                Option("groups", "auto", one_of("auto", "ignore"),
                                       "'auto': bootstrap groups when the store has group labels")],
                       results={**{v: () for v in ("estimate", "lower", "upper", "kfold_min", "bias",
                                                   "selected")},
                                "test_risk?": (), "oob_loss": ("bootstrap",), "chosen_share": ("param",)})
