"""Plan the study you need: samples and repeats to resolve a difference Δ between two params.

From a finished pilot cube, the per-sample out-of-fold loss differences
``d_ir = ℓ_i(a, fold j_r(i)) − ℓ_i(b, fold j_r(i))`` (sample i = 1..n, repeat r = 1..R of a
K-fold design) are modelled as a two-way random-effects layout without replication,

    d_ir = μ + s_i + ρ_r + ε_ir,   Var s_i = σ²_s,  Var ρ_r = σ²_ρ,  Var ε_ir = σ²_w,

with ``s_i`` the sample's own difference (between samples), ``ρ_r`` the repeat's fold
assignment (the learners trained on it, shared by all samples of the repeat; fold effects
inside a repeat average into it) and ``ε_ir`` how one sample's difference moves with the
fold it lands in (within sample). The mean d̄ over n samples and R repeats then has

    Var(d̄) = σ²_s / n + σ²_w / (n·R) + σ²_ρ / R.

The components are the ANOVA (method of moments) estimates, clipped at 0:
``MS_s = R·Σ_i (d̄_i· − d̄)² / (n − 1)``, ``MS_ρ = n·Σ_r (d̄_·r − d̄)² / (R − 1)``, ``MS_e`` the
residual mean square on (n − 1)(R − 1) df; ``σ²_w = MS_e``, ``σ²_s = (MS_s − MS_e) / R``,
``σ²_ρ = (MS_ρ − MS_e) / n``. With one repeat σ²_ρ is not estimable and σ²_w is not
separable from σ²_s: their sum is the sample variance of d and only samples are planned.

A two-sided z-test of d̄ = 0 at level α has power ≈ 1 − β against |Δ| when
``Var(d̄) = Δ² / c``, ``c = (z_{1−α/2} + z_{1−β})²``. Solving for n at the pilot's R, and for R
at the pilot's n:

    n = (σ²_s + σ²_w / R) / (Δ²/c − σ²_ρ / R),     R = (σ²_w / n + σ²_ρ) / (Δ²/c − σ²_s / n),

rounded up; a denominator ≤ 0 means no n (no R) is enough: ``inf``. The components are those
of the pilot's learners at the pilot's n and folds: a larger n trains better learners, which
can change the difference itself (the plan is for the difference the pilot measured).
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy import stats

from ..errors import InputError
from . import guardrails
from ._cube import analysis_groups
from .cube_losses import loss_name
from .labels import param_text
from ._readers import compare_attrs, compare_params, out_of_fold
from .registry import Option, declare, fmt, number, param_refs, probability

SCALARS = ("estimate", "delta", "var_sample", "var_within", "var_repeat", "se", "power_now",
           "samples_needed", "repeats_needed")


def components(d: np.ndarray) -> dict[str, float]:
    """ANOVA estimates of σ²_s, σ²_w, σ²_ρ (clipped at 0) from ``d`` (repeat, sample).

    One repeat: ``var_sample`` is the sample variance of d (σ²_s + σ²_w), ``var_within`` 0 and
    ``var_repeat`` NaN (not estimable)."""
    r, n = d.shape
    grand = d.mean()
    row = d.mean(axis=0)                    # d̄_i· (per sample)
    col = d.mean(axis=1)                    # d̄_·r (per repeat)
    ms_s = r * np.sum((row - grand) ** 2) / (n - 1)
    if r == 1:
        return {"var_sample": float(ms_s), "var_within": 0.0, "var_repeat": float("nan")}
    ms_r = n * np.sum((col - grand) ** 2) / (r - 1)
    resid = d - row[None, :] - col[:, None] + grand
    ms_e = np.sum(resid ** 2) / ((n - 1) * (r - 1))
    return {"var_sample": float(max((ms_s - ms_e) / r, 0.0)), "var_within": float(ms_e),
            "var_repeat": float(max((ms_r - ms_e) / n, 0.0))}


def sizes(v: dict[str, float], n: int, r: int, delta: float, alpha: float,
          power: float) -> dict[str, float]:
    """Samples at R = r and repeats at n = n for power ``power`` against |delta| (see module);
    also the pilot's se and its power against |delta|."""
    z = stats.norm.ppf(1 - alpha / 2)
    target = (abs(delta) / (z + stats.norm.ppf(power))) ** 2     # Var(d̄) to reach
    rep = 0.0 if math.isnan(v["var_repeat"]) else v["var_repeat"]
    se = math.sqrt(v["var_sample"] / n + v["var_within"] / (n * r) + rep / r)
    if se > 0:
        shift = abs(delta) / se
        power_now = float(stats.norm.cdf(shift - z) + stats.norm.cdf(-shift - z))
    else:
        power_now = float(delta != 0) if math.isfinite(delta) else math.nan

    def solve(numerator: float, room: float) -> float:
        if room <= 0:
            return math.inf
        return float(max(1, math.ceil(numerator / room - 1e-9)))
    samples = solve(v["var_sample"] + v["var_within"] / r, target - rep / r)
    repeats = (math.nan if math.isnan(v["var_repeat"]) else
               solve(v["var_within"] / n + rep, target - v["var_sample"] / n))
    return {"se": se, "power_now": power_now, "samples_needed": samples,
            "repeats_needed": repeats}


def plan(cube: xr.Dataset, *, loss: str | None = None, compare=None, delta: float | None = None,
         alpha: float = 0.05, power: float = 0.8) -> xr.Dataset:
    """Samples n (at the pilot's folds and repeats) and repeats R (at the pilot's n) needed to
    resolve a difference ``delta`` between two params with a two-sided level-``alpha`` test of
    power ``power``, from the variance components of the pilot cube (module docstring).

    Parameters
    ----------
    cube : xarray.Dataset
        A finished pilot cube with K-fold splits (any number of repeats).
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    compare : list, optional
        ``[a, b]``, two params named as for :func:`cvflow.estimators.corrected_t`. Default:
        the best param (a) and the runner-up (b) by the K-fold estimate.
    delta : float, optional
        The difference e_a − e_b to resolve; default the pilot's mean difference d̄.
    alpha : float, default 0.05
        Level of the two-sided test.
    power : float, default 0.8
        Probability of rejecting e_a = e_b when the difference is ``delta``.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (d̄), ``delta``, ``var_sample`` (σ²_s), ``var_within`` (σ²_w),
        ``var_repeat`` (σ²_ρ, NaN with one repeat), ``se`` (√Var(d̄) at the pilot's n, R),
        ``power_now`` (the pilot's power against delta), ``samples_needed``,
        ``repeats_needed`` (NaN with one repeat; ``inf``: no finite plan);
        ``difference_repeat`` (repeat) the repeats' mean differences. attrs ``estimator``,
        ``loss``, ``mode``, ``a``, ``b``, ``alpha``, ``power``, ``folds``, ``repeats``,
        ``samples``, ``warnings``.

    Examples
    --------
    >>> plan(cube, compare=[0, 1], delta=0.02)  # doctest: +SKIP
    """
    where = "plan"
    name = loss_name(cube, loss)
    a_level = probability(alpha, f"{where}.alpha")
    target = probability(power, f"{where}.power")
    if compare is None and int(cube.sizes["param"]) > 2:
        every, fold = out_of_fold(cube, name, where)       # one reading: the pair is in it
        with np.errstate(invalid="ignore"):
            risk = np.where(np.isfinite(every).all(axis=(1, 2)), every.mean(axis=(1, 2)), np.inf)
        a, b = (int(i) for i in np.argsort(risk, kind="stable")[:2])
        e = every[[a, b]]
        incomplete = int(np.isnan(every).any(axis=(1, 2)).sum())   # left out of the choice
    else:
        a, b = compare_params(cube, compare, where)
        if b is None:
            raise InputError(f"{where}.compare: name two params to compare, e.g. compare: [0, 1]")
        e, fold = out_of_fold(cube, name, where, [a, b])
        incomplete = int(np.isnan(e).any(axis=(1, 2)).sum())
    if compare is None and np.nanmean(e[0]) > np.nanmean(e[1]):
        a, b, e = b, a, e[::-1]
    d = e[0] - e[1]
    r, n = d.shape
    k = int(fold.max()) + 1
    warnings = guardrails.missing(incomplete, where)
    est = float(d.mean())
    dlt = est if delta is None else number()(delta, f"{where}.delta")
    if warnings:
        v = {"var_sample": math.nan, "var_within": math.nan, "var_repeat": math.nan}
        out = dict.fromkeys(("se", "power_now", "samples_needed", "repeats_needed"), math.nan)
    else:
        v = components(d)
        out = sizes(v, n, r, dlt, a_level, target)
        warnings += _warnings(v, dlt, float(np.abs(d).max()), n, r, where)
        if not any(w["code"] == "no_finite_plan" for w in warnings):
            warnings += _unreachable(out, n, r, where)
        warnings += guardrails.skewed_differences(d, where)
        codes, _ = analysis_groups(cube, what=where)
        if codes is not None:
            warnings.append(guardrails.warning(
                "groups_ignored", f"{where}: the samples come in {int(codes.max()) + 1} groups "
                "but the plan treats them as independent: σ²_s / n understates Var(d̄) when a "
                "group's differences are alike; read samples_needed as too small"))
    result = xr.Dataset({
        **{key: xr.DataArray(float(x)) for key, x in
           {"estimate": est, "delta": dlt, **v, **out}.items()},
        "difference_repeat": ("repeat", d.mean(axis=1)),
    })
    result.attrs = {"estimator": where, "loss": name, **compare_attrs(cube, a, b),
                    "alpha": a_level, "power": target, "folds": k, "repeats": r, "samples": n}
    return guardrails.attach(result, warnings, where)


def _warnings(v: dict, delta: float, scale: float, n: int, r: int, where: str) -> list[dict]:
    out = guardrails.sample_count(n, where, method="variance components and a normal test",
                                  answers="its plan")
    if guardrails.flat(abs(delta) ** 2, scale) or delta == 0:
        out.append(guardrails.warning(
            "no_finite_plan", f"{where}: the difference to resolve is {delta:.3g}, 0 (up to "
            "rounding): no finite study resolves it; give delta, the smallest difference that "
            "matters", delta=delta))
    if r == 1:
        out.append(guardrails.warning(
            "repeat_not_estimable", f"{where}: one repeat, so the between-repeat (fold "
            "assignment) variance is not estimable and is taken as 0; samples are planned, "
            "repeats are not: run a pilot with repeats ≥ 2 (better 5) to plan them"))
    elif r < 5:
        out.append(guardrails.warning(
            "few_repeats", f"{where}: the between-repeat variance rests on {r} repeats "
            "(< 5): it is a rough estimate, and so is the plan", repeats=r))
    return out


def _unreachable(out: dict, n: int, r: int, where: str) -> list[dict]:
    """``no_finite_plan`` when Δ ≠ 0 but a count is infinite (JSON shows it as null)."""
    parts = ([f"no number of samples at R = {r} (the between-repeat variance alone exceeds "
              "the target)"] if out["samples_needed"] == math.inf else []) + \
        ([f"no number of repeats at n = {n} (the between-sample variance alone exceeds the "
          "target): plan samples"] if out["repeats_needed"] == math.inf else [])
    if not parts:
        return []
    return [guardrails.warning("no_finite_plan", f"{where}: {'; '.join(parts)}")]


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`plan`."""
    at = result.attrs
    v = {key: float(result[key]) for key in SCALARS}

    n, r = at.get("samples"), at.get("repeats")
    ns, rs = v["samples_needed"], v["repeats_needed"]
    by_n = (f"n = {ns:.0f} samples" if math.isfinite(ns) else
            "no finite n" if math.isinf(ns) else "n not planned") + f" at R = {r}"
    by_r = (f"R = {rs:.0f} repeats at n = {n}" if math.isfinite(rs) else
            f"no number of repeats at n = {n}" if math.isinf(rs) else
            "repeats not planned (one repeat)")
    return [f"plan (K = {at.get('folds')}, R = {r}, n = {n}, loss {at.get('loss')})",
            f"  a = {param_text(at.get('a') or {})}", f"  b = {param_text(at.get('b') or {})}",
            f"  e_a − e_b: {fmt(v['estimate'])}  se {fmt(v['se'])}  variance: between samples "
            f"{fmt(v['var_sample'])}, within {fmt(v['var_within'])}, between repeats "
            f"{fmt(v['var_repeat'])}",
            f"  to resolve Δ = {fmt(v['delta'])} at alpha {at.get('alpha'):g} with power "
            f"{at.get('power'):g} (now {fmt(v['power_now'])}): {by_n}; or {by_r}"]


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    if options.get("compare") is not None:
        compare_params(grid, options["compare"], where)


declare(plan, raced=False, needs=("fold",), text=describe, check_grid=_check_grid,
        options=[Option("compare", None, param_refs(2, 2),
                        "[a, b]; default the best and the runner-up by K-fold"),
                 Option("delta", None, number(), "difference e_a − e_b to resolve; default d̄"),
                 Option("alpha", 0.05, probability, "level of the two-sided test"),
                 Option("power", 0.8, probability, "power against delta")],
        results={**{v: () for v in SCALARS}, "difference_repeat": ("repeat",)})
