"""Machine-readable warnings attached to a result when its answer is weak.

A warning is a plain dict ``{"code": str, "message": str}`` (plus optional numbers). A
reducer collects them in a list and :func:`attach` stores the list as JSON in the result's
``attrs["warnings"]`` (JSON, so the Dataset stays serialisable to netCDF/Zarr); ``report
--json`` prints it as a list, the text and HTML reports print each message. Codes are stable
names a script can test for:

=====================  ==================================================================
code                   when
=====================  ==================================================================
tiny_test_sets         a fold (or the held-out test set) scores fewer than TINY_TEST samples
few_samples            an approximation (normal, bootstrap) over < FEW_SAMPLES analysis samples
few_folds              fewer than FEW_FOLDS (fold, repeat) terms behind a variance
variance_not_positive  a variance estimate is ≤ 0 (or 0 up to rounding), so the test and
                       interval are NaN
variance_imprecise     the Monte Carlo se of ustat's v̂ is large against v̂
conservative_design    nadeau_bengio on a subset design (n_test/n_train ≥ 1)
mse_clamped            bates_ncv's se hit the naive floor (or MSE < 0) or the √K cap
missing_fits           a param lacks a needed fit (failed or not yet written): NaN results
liberal_design         paired_5x2cv's halves have < 10 samples per feature (paired_5x2cv.py)
few_groups             cluster-robust inference over fewer than FEW_GROUPS groups
groups_not_stored      the workflow has groups but the (older) store keeps no labels
groups_cross_folds     corrected_t / paired_5x2cv on groups whose samples span folds (liberal)
skewed_differences     a comparison's per-sample loss differences are too skewed for a normal
                       (or t) level at their count: n < SKEWED · skewness² (wald_cv,
                       corrected_t, nested_compare with two params; compare_all through them)
no_finite_plan         plan: the difference to resolve is 0 (up to rounding), or no number
                       of samples (repeats) reaches the power: the count is inf (JSON null)
repeat_not_estimable   plan on one repeat: the between-repeat variance is taken as 0
few_repeats            plan: the between-repeat variance rests on fewer than 5 repeats
groups_ignored         plan on grouped data: its variance treats samples as independent
=====================  ==================================================================
"""
from __future__ import annotations

import json
import logging

import numpy as np
from ..lazy import xarray as xr

log = logging.getLogger(__name__)

# DESIGN CHOICE: thresholds of the rules of thumb; the warnings say the number they saw so a
# user can judge for themselves.
TINY_TEST = 10
FEW_SAMPLES = 30
FEW_FOLDS = 10
# DESIGN CHOICE: a variance whose sd is below ROUNDING times the largest |difference| is 0 up to
# rounding (identical differences d give var ~ (1e-16·d)², not 0: with d = 0.1 everywhere
# corrected_t gave t = 1.3e16, p = 0). The tests treat it as 0: their statistic is undefined.
ROUNDING = 1e-12
# DESIGN CHOICE: a mean of n draws of skewness γ is too far from normal for a two-sided 0.05
# level when n < 25 γ² (Cochran's rule). Measured (gamma-distributed differences, 4,000 samples
# per cell, normal 95% interval): at n / γ² ≈ 19-30 the interval missed in 6.1-6.7% of samples
# and its heavier tail in 4.4-5.1% (twice its 2.5%); at n / γ² ≥ 60, 4.8-5.7% and ≤ 4.2%
# (tests/test_guardrails_skew.py reruns a cell on each side).
SKEWED = 25


def warning(code: str, message: str, **numbers) -> dict:
    """One warning: ``{"code", "message", **numbers}`` (numbers as plain floats/ints)."""
    plain = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in numbers.items()}
    return {"code": code, "message": message, **plain}


def attach(result: xr.Dataset, warnings: list[dict], where: str) -> xr.Dataset:
    """``result`` with ``attrs["warnings"]`` (JSON list) set; each warning is logged at INFO
    (the reports print them; a WARNING per call would flood simulations that loop)."""
    for w in warnings:
        log.info("%s: %s", where, w["message"])
    result.attrs["warnings"] = json.dumps(warnings)
    return result


def read(result: xr.Dataset) -> list[dict]:
    """The warnings of a result (an empty list when it has none)."""
    raw = result.attrs.get("warnings")
    if not raw:
        return []
    return json.loads(raw) if isinstance(raw, str) else list(raw)


def test_set_sizes(sizes, what: str = "fold") -> list[dict]:
    """``tiny_test_sets`` when the smallest of ``sizes`` is below TINY_TEST."""
    smallest = int(np.min(sizes)) if np.size(sizes) else 0
    if smallest >= TINY_TEST:
        return []
    return [warning("tiny_test_sets", f"the smallest {what} scores only {smallest} sample(s) "
                    f"(< {TINY_TEST}); its error estimate is very noisy", smallest=smallest)]


def sample_count(n: int, what: str, *, method: str = "a normal approximation",
                 answers: str = "its coverage and p-values") -> list[dict]:
    """``few_samples`` when ``method`` (an approximation) rests on fewer than FEW_SAMPLES
    samples; ``answers`` names what may be off (an interval alone has no p-values)."""
    if n >= FEW_SAMPLES:
        return []
    return [warning("few_samples", f"{what} uses {method} over n = {n} samples "
                    f"(< {FEW_SAMPLES}); {answers} may be far from nominal", n=int(n))]


def fold_count(terms: int, what: str) -> list[dict]:
    """``few_folds`` when a variance is estimated from fewer than FEW_FOLDS (fold, repeat) terms."""
    if terms >= FEW_FOLDS:
        return []
    return [warning("few_folds", f"{what} estimates its variance from {terms} fold terms "
                    f"(< {FEW_FOLDS}); use more folds or repeats", terms=int(terms))]


# DESIGN CHOICE: FEW_GROUPS = 50. The CR1 variance rests on the G group sums: with
# equal-sized groups and normal group means the CR1 t on G − 1 df is exact, but with unequal
# groups or skewed losses (squared loss is) the CR1 interval under-covers when G is small
# (Cameron & Miller, J. Human Resources 2015: "few clusters" is G below roughly 20 to 50).
# Measured (tests/grouped_sim.py, 1,000 data sets, nominal 0.90): G = 40 covers 0.84-0.86,
# G = 100 0.88; the table is in docs/guide/grouped.md. 50 is the upper end of the
# literature's range, where our measurement starts to be within a few points of nominal.
FEW_GROUPS = 50


def group_count(groups: int, what: str) -> list[dict]:
    """``few_groups`` when cluster-robust inference rests on fewer than FEW_GROUPS groups."""
    if groups >= FEW_GROUPS:
        return []
    return [warning("few_groups", f"{what} is cluster-robust over only G = {groups} groups "
                    f"(< {FEW_GROUPS}); with few groups the CR1 variance is noisy and intervals "
                    "can under-cover even on t with G − 1 df: read the answer as rough",
                    groups=int(groups))]


def missing(count: int, what: str) -> list[dict]:
    """``missing_fits`` when ``count`` params lack a needed fit (their results are NaN)."""
    if not count:
        return []
    return [warning("missing_fits", f"{count} param(s) lack a fit {what} needs (failed or not "
                    "written yet); their results are NaN", params=int(count))]


def variance_sign(variance: float, total: float | None = None) -> list[dict]:
    """``variance_not_positive`` (one warning) when the variance used by a test is ≤ 0, or,
    for an unbiased estimate like ustat's v̂, when the estimate itself is negative."""
    negative = bool(np.isfinite(variance) and variance < 0)
    flat = total is not None and bool(np.isfinite(total) and total <= 0)
    if not (negative or flat):
        return []
    parts = [f"the variance estimate v̂ is negative ({variance:.3g})"] if negative else []
    if flat:
        parts.append(f"the total variance (v̂ + design variance) is not positive ({total:.3g}), "
                     "so z, p and the interval are NaN")
    fix = ("v̂ is unbiased but noisy, negative more often for small n − 2g or few groups: use "
           "more groups (pairs) or a larger n − 2g")
    extra = {"variance": float(variance)} | ({"total": float(total)} if flat else {})
    return [warning("variance_not_positive", f"{' and '.join(parts)}; {fix}", **extra)]


def flat(variance: float, scale: float) -> bool:
    """True when ``variance`` is ≤ 0 or 0 up to rounding: sd ≤ ROUNDING · ``scale`` (the largest
    |value| whose spread it measures). False for NaN (a missing fit says so itself)."""
    return bool(np.isfinite(variance) and variance <= (ROUNDING * scale) ** 2)


def flat_variance(variance: float, scale: float, what: str) -> list[dict]:
    """``variance_not_positive`` when :func:`flat` says the variance behind a test is 0."""
    if not flat(variance, scale):
        return []
    return [warning("variance_not_positive", f"{what}: the variance behind the test is "
                    f"{variance:.3g}, 0 up to rounding (the values do not vary; identical "
                    "predictions give differences of 0): the statistic, p-value and interval "
                    "are NaN", variance=float(variance))]


def variance_precision(variance: float, variance_se: float, groups: int,
                       target: float = 0.1, tolerance: float = 0.25) -> list[dict]:
    """``variance_imprecise`` when the Monte Carlo se of a variance estimate from ``groups``
    random groups exceeds ``tolerance``·|variance|; says how many groups would bring it to
    ``target``·|variance| (the se falls as 1/sqrt(groups))."""
    if not (np.isfinite(variance) and np.isfinite(variance_se)) or variance_se <= 0:
        return []
    if variance != 0 and variance_se <= tolerance * abs(variance):
        return []
    if variance == 0:
        needed = None
        advice = "use many more groups"
    else:
        needed = int(np.ceil(groups * (variance_se / (target * abs(variance))) ** 2))
        advice = (f"about {needed} groups (pairs) would make it {target:.0%} of the estimate "
                  f"(now {groups})")
    share = variance_se / abs(variance) if variance else float("inf")
    return [warning("variance_imprecise", f"the design standard error of the variance "
                    f"estimate is {variance_se:.3g}, {share:.0%} of the estimate "
                    f"{variance:.3g}: the test rests on a noisy variance; {advice}",
                    variance_se=float(variance_se), groups_needed=needed)]


def skewness(d) -> tuple[float, int]:
    """Sample skewness and count of per-sample differences ``d`` ((repeat, sample) or
    (sample,)): one value per sample (its mean over the repeats, NaN where never seen)."""
    d = np.asarray(d, float)
    if d.ndim == 2:
        seen = np.isfinite(d)
        with np.errstate(invalid="ignore"):
            d = np.where(seen.any(0), np.nansum(d, 0) / np.maximum(seen.sum(0), 1), np.nan)
    x = d[np.isfinite(d)]
    sd = float(x.std()) if len(x) else 0.0
    if len(x) < 3 or not sd > 0:
        return 0.0, len(x)
    return float(np.mean((x - x.mean()) ** 3)) / sd ** 3, len(x)


def skewed_differences(d, what: str) -> list[dict]:
    """``skewed_differences`` when the per-sample differences ``d`` are too skewed for their
    count (n < SKEWED · skewness²): the stated level of a normal or t interval is doubtful."""
    gamma, n = skewness(d)
    need = SKEWED * gamma ** 2
    if n >= need:
        return []
    return [warning("skewed_differences", f"{what}: the per-sample loss differences have "
                    f"skewness {gamma:.2g} over {n} samples; a normal level needs about "
                    f"{SKEWED}·skewness² = {need:.0f}: the stated level of the test and "
                    "interval is doubtful (one side's miss measured at 2-8 times its share: "
                    "log loss, n = 50-500, docs/guide/comparisons.md)",
                    skewness=gamma, samples=n, needed=need)]
