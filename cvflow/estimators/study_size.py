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

That is the plan for a z-test that knows Var(d̄) (``test="z"``). The tests a study runs
estimate a variance of their own (:func:`test_variance`): ``wald_cv`` (compare_all's, its
within-fold variance) (σ²_s + σ²_w) / n, which leaves out σ²_ρ / R; ``corrected_t``
(compare_all's default, and plan's) the corrected repeated K-fold variance
s²·(1/(K·R) + 1/(K − 1)) on K·R − 1 df, with E s² from the same components (the K·R fold
means' spread), larger than Var(d̄) (it charges for the training sets' overlap). Such a test
rejects when |d̄| > q·√V̂, so its power against Δ is

    P ≈ E[Φ((|Δ| − q·√(V_T·W)) / √Var(d̄)) + Φ((−|Δ| − q·√(V_T·W)) / √Var(d̄))],

W ~ χ²_df / df the noise of its variance (corrected_t; W = 1 for z and wald_cv), q its
quantile; n (R) is the least with P ≥ power (:func:`test_sizes`).
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import xarray as xr
from ..lazy import stats

from ..errors import InputError
from . import guardrails
from ._cube import analysis_groups
from .cube_losses import loss_name
from .labels import param_text
from ._readers import compare_attrs, compare_params, out_of_fold
from .registry import Option, choice, declare, fmt, number, param_refs, probability

SCALARS = ("estimate", "delta", "var_sample", "var_within", "var_repeat", "se", "power_now",
           "samples_needed", "repeats_needed")
# DESIGN CHOICE: the learners count as unstable, and the plan does not promise its power, when
# a sample's difference moves with the fold it lands in by more than this share of its
# variance, σ²_w / (σ²_s + σ²_w): the covariance between samples that shared training points
# (Bengio & Grandvalet 2004), which the model leaves out, grows with the same sensitivity to
# the training set. benchmarks/plan_instability.py (two learners of equal risk, n = 200,
# 5 x 2, 300 data sets): OLS 0.01 (true Var(d̄) 0.98x the model's, the z-test's level 4.7%),
# depth-2 trees 0.16 (1.26x, 7.0%), 1-NN 0.27 (1.66x, 12.3%), full trees 0.54 (1.59x, 12.7%)
UNSTABLE = 0.1
# the paired tests a study can run on the planned design; compare_all's default first
TESTS = ("corrected_t", "wald_cv", "z")
POWERS = tuple(f"power_{t}" for t in TESTS)


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


def true_variance(v: dict[str, float], n: float, r: float) -> float:
    """Var(d̄) of the model at n samples and r repeats (σ²_ρ taken 0 when not estimable)."""
    rep = 0.0 if math.isnan(v["var_repeat"]) else v["var_repeat"]
    return v["var_sample"] / n + v["var_within"] / (n * r) + rep / r


def test_variance(test: str, v: dict[str, float], n: float, r: float, k: int
                  ) -> tuple[float, int | None]:
    """E of the variance of d̄ that ``test`` estimates at n samples, r repeats, k folds, and
    its degrees of freedom (None: a normal quantile).

    ``corrected_t``: E s² of the k·r fold means under the model (each fold mean has variance
    k(σ²_s + σ²_w)/n + σ²_ρ; two folds of a repeat share ρ, of two repeats about n/k² samples,
    so the mean covariance over pairs is ((k − 1)σ²_ρ + k(r − 1)σ²_s/n) / (kr − 1)), times
    1/(kr) + 1/(k − 1)."""
    if test == "z":
        return true_variance(v, n, r), None
    if test == "wald_cv":
        return (v["var_sample"] + v["var_within"]) / n, None
    rep = 0.0 if math.isnan(v["var_repeat"]) else v["var_repeat"]
    folds = k * r
    spread = k * (v["var_sample"] + v["var_within"]) / n + rep
    shared = ((k - 1) * rep + k * (r - 1) * v["var_sample"] / n) / max(folds - 1, 1)
    return max(spread - shared, 0.0) * (1 / folds + 1 / (k - 1)), int(folds - 1)


# W's quantiles at which the power is averaged over the noise of a t-test's variance
NOISE_POINTS = 64


def test_power(test: str, v: dict[str, float], n: float, r: float, k: int, delta: float,
               alpha: float) -> float:
    """The power of the two-sided level-``alpha`` ``test`` against |delta| at n, r (module)."""
    truth = true_variance(v, n, r)
    used, df = test_variance(test, v, n, r, k)
    if not truth > 0:
        return float(delta != 0)
    if df is None:
        q, noise = stats.norm.ppf(1 - alpha / 2), np.ones(1)
    else:
        if df < 1:
            return math.nan
        q = stats.t.ppf(1 - alpha / 2, df)
        noise = stats.chi2.ppf((np.arange(NOISE_POINTS) + 0.5) / NOISE_POINTS, df) / df
    bar = q * np.sqrt(used * noise)
    sd = math.sqrt(truth)
    return float(np.mean(stats.norm.cdf((abs(delta) - bar) / sd)
                         + stats.norm.cdf((-abs(delta) - bar) / sd)))


# the largest count searched: a plan beyond it is reported as no finite plan
MOST = 10 ** 9


def least_count(reaches, start: int = 1) -> float:
    """The least integer m ≥ ``start`` with ``reaches(m)`` (doubling, then bisection; the power
    grows with the count once it passes 1/2), ``inf`` beyond :data:`MOST`."""
    high = start
    while not reaches(high):
        if high > MOST:
            return math.inf
        high *= 2
    low = max(start, high // 2)
    if reaches(low):
        return float(low)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return float(high)


def test_sizes(test: str, v: dict[str, float], n: int, r: int, k: int, delta: float,
               alpha: float, power: float) -> dict[str, float]:
    """:func:`sizes` for ``test``: samples at R = r and repeats at n = n for its power."""
    if test == "z":
        return sizes(v, n, r, delta, alpha, power)
    out = sizes(v, n, r, delta, alpha, power)            # se: the model's, as for z
    if not (math.isfinite(delta) and delta != 0):
        return out
    out["power_now"] = test_power(test, v, n, r, k, delta, alpha)
    out["samples_needed"] = least_count(
        lambda m: test_power(test, v, m, r, k, delta, alpha) >= power, start=2)
    out["repeats_needed"] = (math.nan if math.isnan(v["var_repeat"]) else least_count(
        lambda m: test_power(test, v, n, m, k, delta, alpha) >= power,
        start=2 if test == "corrected_t" and k < 3 else 1))
    return out


def plan(cube: xr.Dataset, *, loss: str | None = None, compare=None, delta: float | None = None,
         alpha: float = 0.05, power: float = 0.8, test: str = "corrected_t") -> xr.Dataset:
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
    test : {"corrected_t", "wald_cv", "z"}, default "corrected_t"
        The test the study will run (compare_all's ``test``; ``z`` knows Var(d̄)): the plan
        is for its power; ``power_<test>`` give every test's power at the planned n.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (d̄), ``delta``, ``var_sample`` (σ²_s), ``var_within`` (σ²_w),
        ``var_repeat`` (σ²_ρ, NaN with one repeat), ``se`` (√Var(d̄) at the pilot's n, R),
        ``power_now`` (the pilot's power against delta), ``samples_needed``,
        ``repeats_needed`` (NaN with one repeat; ``inf``: no finite plan), for ``test``;
        ``power_corrected_t``, ``power_wald_cv``, ``power_z``: each test's power at
        ``samples_needed`` (the pilot's R); ``difference_repeat`` (repeat) the repeats' mean
        differences. attrs ``estimator``, ``loss``, ``mode``, ``a``, ``b``, ``alpha``,
        ``power``, ``test``, ``folds``, ``repeats``, ``samples``, ``warnings``.

    Examples
    --------
    >>> plan(cube, compare=[0, 1], delta=0.02)  # doctest: +SKIP
    """
    where = "plan"
    name = loss_name(cube, loss)
    a_level = probability(alpha, f"{where}.alpha")
    target = probability(power, f"{where}.power")
    test = choice(*TESTS)(test, f"{where}.test")
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
    powers = dict.fromkeys(POWERS, math.nan)
    if warnings:
        v = {"var_sample": math.nan, "var_within": math.nan, "var_repeat": math.nan}
        out = dict.fromkeys(("se", "power_now", "samples_needed", "repeats_needed"), math.nan)
    else:
        v = components(d)
        out = test_sizes(test, v, n, r, k, dlt, a_level, target)
        if math.isfinite(out["samples_needed"]):
            powers = {f"power_{t}": test_power(t, v, out["samples_needed"], r, k, dlt, a_level)
                      for t in TESTS}
        warnings += _warnings(v, dlt, float(np.abs(d).max()), n, r, where)
        warnings += _unstable(v, r, where)
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
           {"estimate": est, "delta": dlt, **v, **out, **powers}.items()},
        "difference_repeat": ("repeat", d.mean(axis=1)),
    })
    result.attrs = {"estimator": where, "loss": name, **compare_attrs(cube, a, b),
                    "alpha": a_level, "power": target, "test": test, "folds": k, "repeats": r,
                    "samples": n}
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
            "assignment) variance is not estimable and is taken as 0, nor can the learners' "
            "stability, which the power assumes, be measured; samples are planned, repeats "
            "are not: run a pilot with repeats ≥ 2 (better 5) to plan them"))
    elif r < 5:
        out.append(guardrails.warning(
            "few_repeats", f"{where}: the between-repeat variance rests on {r} repeats "
            "(< 5): it is a rough estimate, and so is the plan", repeats=r))
    return out


def _unstable(v: dict, r: int, where: str) -> list[dict]:
    """``unstable_learners`` when a sample's difference moves with its fold by more than
    :data:`UNSTABLE` of its variance (two repeats or more)."""
    total = v["var_sample"] + v["var_within"]
    share = v["var_within"] / total if r > 1 and total > 0 else 0.0
    if share <= UNSTABLE:
        return []
    return [guardrails.warning(
        "unstable_learners", f"{where}: the power is not promised: a sample's difference moves "
        f"with the fold it lands in ({share:.0%} of its variance), so the learners are "
        "unstable and the covariance between samples that shared training points, which the "
        "plan's variance leaves out (Bengio & Grandvalet 2004), can make Var(d̄) larger than "
        "planned (1.3-1.7x for trees and 1-NN: docs/guide/comparisons.md)",
        instability=share)]


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
            f"{at.get('power'):g} (now {fmt(v['power_now'])}) by {at.get('test', 'z')}: {by_n}; "
            f"or {by_r}"] + others(result)


def others(result: xr.Dataset) -> list[str]:
    """The report's line of every test's power at the planned n (none when it is not finite)."""
    shown = [f"{t} {fmt(float(result[f'power_{t}']))}" for t in TESTS
             if f"power_{t}" in result and math.isfinite(float(result[f"power_{t}"]))]
    if not shown:
        return []
    return [f"  power at that n by each test: {', '.join(shown)}"]


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    if options.get("compare") is not None:
        compare_params(grid, options["compare"], where)


declare(plan, raced=False, needs=("fold",), text=describe, check_grid=_check_grid,
        options=[Option("compare", None, param_refs(2, 2),
                        "[a, b]; default the best and the runner-up by K-fold"),
                 Option("delta", None, number(), "difference e_a − e_b to resolve; default d̄"),
                 Option("alpha", 0.05, probability, "level of the two-sided test"),
                 Option("power", 0.8, probability, "power against delta"),
                 Option("test", "corrected_t", choice(*TESTS),
                        "the test the study will run: the plan is for its power")],
        results={**{v: () for v in SCALARS + POWERS}, "difference_repeat": ("repeat",)})
