"""Confidence intervals for the prediction error of one fixed param.

- :func:`bates_ncv`: Bates, Hastie & Tibshirani's nested-CV estimate of the MSE of CV, the
  bias-corrected point estimate and the nested CV interval, next to the naive CV interval
  (docs/guide/estimators.md);
- :func:`wald_cv`: Bayle et al.'s Wald CV interval with the within-fold and the all-pairs
  variance estimators (docs/guide/estimators.md).

Both compute every param of the grid at once (``param`` dimension) unless ``param=`` picks
one, in which case the results are scalars. Both read the cube through the numpy kernels of
:func:`cvflow.estimators._cube.role_terms` (out-of-fold losses, inner K-fold sums), then name
the results with xarray.
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import xarray as xr
from ..lazy import stats

from ..errors import InputError
from ._cube import (analysis_groups, analysis_weights, fold_membership, more_rows, param_coords, role_terms,
                    weighted_sum)
from .cube_losses import loss_name
from .labels import param_label, result_labels
from ._readers import compare_attrs, compare_params, fold_sizes, inner_score, oof_losses
from . import guardrails
from .np_roles import cluster_variance, normal_quantile
from .registry import Option, choice, declare, integer, miscoverage, param_refs

GROUPS_CHOICES = ("auto", "ignore")


# Bates et al.'s bias factor: Algorithm 1 of the paper, and the authors' R code (nestedcv).
BIAS_FACTORS = {"paper": lambda k: 1 + (k - 2) / k, "code": lambda k: 1 + ((k - 2) / k) ** 1.5}


def repeats_against_clamping(folds: int) -> int:
    """The fewest repeats R of K-fold (K = ``folds``) for which the noise of bates_ncv's MSE
    estimate is below the floor its se is clamped at.

    The floor binds when se_raw < se_naive, i.e. MSE < K/(K−1)·se_naive² (:func:`bates_ncv`).
    MSE = mean(a) − mean(b) over the R·K outer folds; where the inner error is close to the
    fold's error, a_j / b_j is about χ²₁ (b_j ≈ Var(mean e_out) ≈ K·se_naive²), so the noise of
    MSE has sd ≈ √(2/(R·K))·K·se_naive². It is below the floor when R ≥ 2(K−1)²/K:
    7 repeats for K = 5, 17 for K = 10. Measured (ridge, n = 100, K = 5, 40 data sets each): the
    se was clamped for 28 of 40 with R = 1 and 13 of 40 with R = 7 (docs/guide/reports.md).
    """
    return max(1, math.ceil(2 * (folds - 1) ** 2 / folds))


def warn_design(folds: int, repeats: int) -> list[str]:
    """The warning ``cvflow validate`` prints when bates_ncv would likely be clamped."""
    needed = repeats_against_clamping(folds)
    if repeats >= needed:
        return []
    noise = math.sqrt(2 / (repeats * folds)) * folds
    return [f"bates_ncv: with {folds} folds x {repeats} repeat{'s' * (repeats != 1)} its MSE "
            f"estimate rests on {folds * repeats} outer folds; its noise (sd ≈ {noise:.2g} "
            f"se_naive²) exceeds the floor its se is clamped at ({folds / (folds - 1):.2g} "
            "se_naive²), so its interval will likely be the naive one (width ratio 1); use "
            f"design.repeats: {needed} or more"]


def _pick(cube: xr.Dataset, param, where: str) -> xr.Dataset:
    if param is None:
        return cube
    n_params = cube.sizes["param"]
    try:
        index = int(param)
    except (TypeError, ValueError):
        raise InputError(f"{where}.param: {param!r}; give the index of a param in the grid "
                         f"(0..{n_params - 1})") from None
    if not 0 <= index < n_params or index != param:
        raise InputError(f"{where}.param: {param!r} is not a param index; the grid has "
                         f"{n_params} params, use 0..{n_params - 1}")
    return cube.isel(param=[index])


def _finish(out: xr.Dataset, cube: xr.Dataset, sub: xr.Dataset, param, attrs: dict
            ) -> xr.Dataset:
    out = out.assign_coords(param_coords(sub))
    if param is not None:
        out = out.isel(param=0)
        attrs["param"] = param_label(cube, int(param))
    out.attrs = attrs
    return out


def bates_ncv(cube: xr.Dataset, *, loss: str | None = None, param: int | None = None,
              alpha: float = 0.1, bias_factor: str = "paper") -> xr.Dataset:
    """Nested CV interval for the prediction error (Bates, Hastie & Tibshirani, Algorithm 1).

    For each repeat r and outer fold j: ``e_in`` = the pooled inner K-fold error on D \\ N_j
    (pair fits), ``e_out`` = the losses of fold j's fit on N_j, ``a = (e_in − mean e_out)²``,
    ``b = var(e_out) / |N_j|`` (n − 1 denominator). Then ``MSE = mean(a) − mean(b)``,
    ``Err_ncv = mean(e_in)``, bias ``(1 + (K−2)/K)(Err_ncv − Err_cv)``,
    ``se = sqrt((K−1)/K · MSE)`` clamped to [se_naive, √K·se_naive] and the interval
    ``Err_ncv − bias ± z_{1−α/2}·se``. The naive interval is ``Err_cv ± z·sd(e_i)/√n``.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with fold and pair splits; R repeats give R·K (a, b, e_in) triples.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    param : int, optional
        Index of the param; default every param (a ``param`` dimension).
    alpha : float
        Nominal miscoverage, default 0.1 (90% intervals, as in the paper).
    bias_factor : {"paper", "code"}
        The bias factor: ``"paper"`` 1 + (K−2)/K (Algorithm 1) or ``"code"`` the authors'
        R package's 1 + ((K−2)/K)^1.5.

    Returns
    -------
    xarray.Dataset
        ``mse``, ``err_ncv``, ``err_cv``, ``bias``, ``estimate`` (= err_ncv − bias),
        ``se_raw`` (unclamped, NaN if MSE < 0), ``se``, ``lower``, ``upper``, ``se_naive``,
        ``naive_lower``, ``naive_upper``, ``width_ratio`` (nested / naive width), ``at_floor``
        / ``at_cap`` (the se was raised to se_naive, MSE < 0 included / cut to √K·se_naive);
        per outer fold ``e_in``, ``e_out``, ``a``, ``b`` (repeat, outer). attrs
        ``floor_binds`` / ``cap_binds`` count the params clamped each way.
    """
    name = loss_name(cube, loss)
    a_level = miscoverage(alpha, "bates_ncv.alpha")
    if bias_factor not in BIAS_FACTORS:
        raise InputError(f"bates_ncv.bias_factor: {bias_factor!r}; use 'paper' (1 + (K−2)/K) "
                         "or 'code' (1 + ((K−2)/K)^1.5, the authors' R code)")
    sub = _pick(cube, param, "bates_ncv")
    terms = role_terms(sub, name, roles=("pair", "oof"), what="bates_ncv")
    e_in = xr.DataArray(inner_score(terms["inner_sum"], fold_sizes(sub)),
                        dims=("param", "repeat", "outer"))
    e = oof_losses(terms)
    member = fold_membership(sub)
    sizes = member.sum("sample")
    k = sizes.sizes["outer"]
    n = sizes.sum("outer")
    e_out = weighted_sum(e, member) / sizes
    var_out = weighted_sum((e - e_out) ** 2, member) / (sizes - 1)
    a = (e_in - e_out) ** 2
    b = var_out / sizes
    mse = a.mean(("repeat", "outer"), skipna=False) - b.mean(("repeat", "outer"), skipna=False)
    err_ncv = e_in.mean(("repeat", "outer"), skipna=False)
    analysis = analysis_weights(sub)
    err_cv_repeat = weighted_sum(e, analysis) / n
    err_cv = err_cv_repeat.mean("repeat", skipna=False)
    sd = np.sqrt(weighted_sum((e - err_cv_repeat) ** 2, analysis) / (n - 1))
    se_naive = (sd / np.sqrt(n)).mean("repeat", skipna=False)
    bias = BIAS_FACTORS[bias_factor](k) * (err_ncv - err_cv)
    se_raw = np.sqrt((k - 1) / k * mse.where(mse >= 0))
    # DESIGN CHOICE (Bates et al. Sec. 4): the nested se is at least the naive one and at most
    # √K times it; a negative MSE estimate thus gives the naive width.
    se = xr.where(se_raw.isnull() & mse.notnull(), se_naive,  # type: ignore[attr-defined]
                  np.minimum(np.maximum(se_raw, se_naive), np.sqrt(k) * se_naive))
    at_floor = mse.notnull() & (se_raw.isnull() | (se_raw < se_naive))
    at_cap = se_raw > np.sqrt(k) * se_naive
    z = normal_quantile(1 - a_level / 2)
    estimate = err_ncv - bias
    out = xr.Dataset({
        "mse": mse, "err_ncv": err_ncv, "err_cv": err_cv, "bias": bias, "estimate": estimate,
        "se_raw": se_raw, "se": se, "lower": estimate - z * se, "upper": estimate + z * se,
        "se_naive": se_naive, "naive_lower": err_cv - z * se_naive,
        "naive_upper": err_cv + z * se_naive, "width_ratio": se / se_naive,
        "at_floor": at_floor, "at_cap": at_cap, "e_in": e_in, "e_out": e_out, "a": a, "b": b,
    })
    repeats = int(sizes.sizes["repeat"])
    floor_binds, cap_binds = int(at_floor.sum()), int(at_cap.sum())
    warnings = (guardrails.missing(int(terms["missing"].sum()), "bates_ncv")
                + guardrails.fold_count(k * repeats, "bates_ncv")
                + guardrails.sample_count(int(n.min()), "bates_ncv"))
    if floor_binds or cap_binds:
        warnings.append(guardrails.warning(
            "mse_clamped", f"the nested se was clamped for {floor_binds + cap_binds} of "
            f"{at_cap.size} param(s): raised to the naive se for {floor_binds} (MSE estimate "
            f"below it or negative), cut to √K times it for {cap_binds}; a clamped interval's "
            "width comes from the bound, not from the data", floor_binds=floor_binds,
            cap_binds=cap_binds))
    out = _finish(out, cube, sub, param, {
        "estimator": "bates_ncv", "loss": name, "alpha": a_level, "folds": k, "repeats": repeats,
        "bias_factor": bias_factor, "floor_binds": floor_binds, "cap_binds": cap_binds})
    return guardrails.attach(out, warnings, "bates_ncv")


def wald_cv(cube: xr.Dataset, *, loss: str | None = None, param: int | None = None,
            compare=None, alpha: float = 0.1, groups: str = "auto") -> xr.Dataset:
    """Bayle et al.'s Wald CV interval ``R̂ ± z_{1−α/2}·σ̂/√n`` with two variance estimators.

    ``within``: the pooled within-fold variance Σ_j Σ_{i∈N_j} (e_i − ē_j)² / (n − K) (equal
    folds: the mean of the fold variances, Bayle et al. eq. for σ̂²_in); ``all``: the all-pairs
    variance Σ_i (e_i − R̂)² / n (σ̂²_out). With repeats, estimates and variances are averaged.

    With ``compare=[a, b]`` (params named as in :func:`cvflow.estimators.ustat`) e_i is the
    per-sample out-of-fold loss difference ℓ_i(a, fold j(i)) − ℓ_i(b, fold j(i)) and the result
    is Bayle et al.'s paired test of e_a = e_b: the interval for e_a − e_b plus ``z_within``,
    ``p_value_within``, ``z_all``, ``p_value_all`` (two-sided), as scalars.

    Grouped data (the cube stores ``groups``, e.g. ``splitter: group``): the e_i of one group
    are correlated, and both variances above treat them as independent (too narrow). The
    result then also has the CR1 cluster-robust variance of the mean,
    ``V = G/(G−1) · Σ_g (S_g − n_g·ē)² / n²`` over the G groups (S_g the group's sum of e_i,
    n_g its size, ē = R̂), averaged over repeats, and the interval ``R̂ ± t_{G−1, 1−α/2}·√V``
    (``*_cluster``; paired: ``t_cluster``, ``p_value_cluster`` on G − 1 df). See
    docs/guide/grouped.md.

    Parameters
    ----------
    groups : {"auto", "ignore"}, default "auto"
        ``"auto"``: cluster-robust results whenever the cube stores group labels;
        ``"ignore"``: none (samples treated as independent).

    Returns
    -------
    xarray.Dataset
        ``estimate`` (the K-fold error), ``var_within``, ``var_all``, ``se_within``,
        ``se_all``, ``lower_within``, ``upper_within``, ``lower_all``, ``upper_all``; with
        groups ``var_cluster`` (n·V, comparable to ``var_all``), ``design_effect``
        (var_cluster / var_all), ``se_cluster`` (√V), ``lower_cluster``, ``upper_cluster``.
        attrs ``inference`` ("cluster-robust (CR1)" or "independent samples"), ``groups``
        (G) and ``df`` (G − 1) when cluster-robust.
    """
    name = loss_name(cube, loss)
    a_level = miscoverage(alpha, "wald_cv.alpha")
    groups = choice(*GROUPS_CHOICES)(groups, "wald_cv.groups")
    attrs = {"estimator": "wald_cv", "loss": name, "alpha": a_level}
    if compare is None:
        sub = _pick(cube, param, "wald_cv")
        terms = role_terms(sub, name, roles=("oof",), what="wald_cv")
        e = oof_losses(terms)
    else:
        if param is not None:
            raise InputError("wald_cv: give either param or compare, not both")
        a, b = compare_params(cube, compare, "wald_cv")
        sub = cube.isel(param=[a] if b is None else [a, b])
        terms = role_terms(sub, name, roles=("oof",), what="wald_cv")
        e = oof_losses(terms)
        if b is not None:
            e = e.isel(param=[0]) - e.isel(param=[1]).values
        attrs.update(compare_attrs(cube, a, b))
    member = fold_membership(sub)
    sizes = member.sum("sample")
    k = sizes.sizes["outer"]
    n = sizes.sum("outer")
    analysis = analysis_weights(sub)
    fold_mean = weighted_sum(e, member) / sizes
    within = (weighted_sum((e - fold_mean) ** 2, member).sum("outer", skipna=False) / (n - k))
    r_hat = weighted_sum(e, analysis) / n
    everything = weighted_sum((e - r_hat) ** 2, analysis) / n
    estimate = r_hat.mean("repeat", skipna=False)
    var_within = within.mean("repeat", skipna=False)
    var_all = everything.mean("repeat", skipna=False)
    n_mean = float(n.mean())
    z = normal_quantile(1 - a_level / 2)
    se_w = np.sqrt(var_within / n_mean)
    se_a = np.sqrt(var_all / n_mean)
    flat: list[dict] = []
    if compare is not None and b is not None:
        # DESIGN CHOICE: a paired test whose differences do not vary has no sampling
        # variance to estimate: its interval is NaN (not the degenerate [d, d]) and says so,
        # as corrected_t and paired_5x2cv do; the estimate d is still given.
        scale = float(np.abs(e).max())
        for kind, var in (("within", var_within.item()), ("all", var_all.item())):
            flat += guardrails.flat_variance(var, scale, f"wald_cv ({kind})")
        se_w = se_w.where(not guardrails.flat(var_within.item(), scale))
        se_a = se_a.where(not guardrails.flat(var_all.item(), scale))
        analysed = ~np.asarray(sub["is_test"].values, dtype=bool)
        flat += guardrails.skewed_differences(e.isel(param=0).values[:, analysed], "wald_cv")
    out = xr.Dataset({
        "estimate": estimate, "var_within": var_within, "var_all": var_all,
        "se_within": se_w, "se_all": se_a,
        "lower_within": estimate - z * se_w, "upper_within": estimate + z * se_w,
        "lower_all": estimate - z * se_a, "upper_all": estimate + z * se_a,
    })
    attrs["folds"] = k
    codes, group_warnings = analysis_groups(sub, groups, what="wald_cv")
    attrs["inference"] = "independent samples" if codes is None else "cluster-robust (CR1)"
    q = None
    if codes is not None:
        q, se_c = _cluster(out, e, sub, codes, a_level, attrs)
        if compare is not None and b is not None:
            var_c = float(out["var_cluster"].item())
            flat += guardrails.flat_variance(var_c, scale, "wald_cv (cluster)")
            se_c = se_c.where(not guardrails.flat(var_c, scale))
        out["se_cluster"] = se_c
        out["lower_cluster"] = estimate - q * se_c
        out["upper_cluster"] = estimate + q * se_c
    warnings = (guardrails.missing(int(terms["missing"].sum()), "wald_cv")
                + guardrails.sample_count(int(n.min()), "wald_cv")
                + guardrails.test_set_sizes(sizes.values) + flat + group_warnings)
    if compare is None:
        return guardrails.attach(_finish(out, cube, sub, param, attrs), warnings, "wald_cv")
    out = out.isel(param=0, drop=True)
    if attrs["mode"] == "difference":
        for kind, se in (("within", se_w), ("all", se_a)):
            out[f"z_{kind}"] = (estimate / se).isel(param=0, drop=True)
            out[f"p_value_{kind}"] = xr.apply_ufunc(
                lambda v: np.vectorize(math.erfc)(np.abs(v) / math.sqrt(2)), out[f"z_{kind}"])
        if codes is not None:

            t = out["estimate"] / out["se_cluster"]
            out["t_cluster"] = t
            out["p_value_cluster"] = xr.apply_ufunc(
                lambda v: 2 * stats.t.sf(np.abs(v), attrs["df"]), t)
    out.attrs = attrs
    return guardrails.attach(out, warnings, "wald_cv")


def _cluster(out: xr.Dataset, e: xr.DataArray, sub: xr.Dataset, codes: np.ndarray,
             a_level: float, attrs: dict) -> tuple[float, xr.DataArray]:
    """Adds ``var_cluster`` and ``design_effect`` to ``out`` and ``groups``/``df`` to
    ``attrs``; returns the t quantile on G − 1 df and √V (the CR1 se of the mean, V averaged
    over repeats)."""
    analysis = ~np.asarray(sub["is_test"].values, dtype=bool)
    values = e.transpose("param", "repeat", "sample").values[..., analysis]
    v = cluster_variance(values, codes)                                      # (P, R)
    count = int(codes.max()) + 1
    n_an = int(analysis.sum())
    var_c = xr.DataArray(v.mean(axis=1) * n_an, dims="param")
    out["var_cluster"] = var_c
    out["design_effect"] = var_c / out["var_all"]
    attrs.update(groups=count, df=count - 1)
    # DESIGN CHOICE: Student t on G − 1 df, not the normal: with G equal groups whose means are
    # iid normal, the CR1 t-statistic of the mean *is* t_{G−1} exactly (CR1's G/(G−1) turns
    # Σ_g(S_g − n_g ē)²/n² into s²_groupmeans/G), and it is the usual small-G choice
    # (Cameron & Miller 2015, Stata). The normal under-covers at small G (the slow coverage
    # test measures both); for large G the two agree.
    q = float(stats.t.ppf(1 - a_level / 2, count - 1)) if count >= 2 else float("nan")
    return q, np.sqrt(var_c / n_an)


def _fmt(result: xr.Dataset, var: str) -> list[float]:
    return np.atleast_1d(result[var].values).tolist()


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`bates_ncv` (one line per param by its label, at most 10
    and then how many more)."""
    level = 100 * (1 - float(result.attrs.get("alpha", 0.1)))
    lines = [f"Bates nested-CV {level:.0f}% intervals ({result.attrs.get('loss')}; "
             "naive CV interval in brackets):"]
    cols = {v: _fmt(result, v) for v in ("estimate", "lower", "upper", "err_cv", "naive_lower",
                                        "naive_upper", "width_ratio")}
    labels = result_labels(result)
    width = max(map(len, labels[:10]))
    for h in range(min(10, len(cols["estimate"]))):
        lines.append(f"  {labels[h]:<{width}}  {cols['estimate'][h]:.5g} [{cols['lower'][h]:.5g}, "
                     f"{cols['upper'][h]:.5g}]   naive {cols['err_cv'][h]:.5g} "
                     f"[{cols['naive_lower'][h]:.5g}, {cols['naive_upper'][h]:.5g}]   "
                     f"width ratio {cols['width_ratio'][h]:.3g}")
    return lines + more_rows(len(cols["estimate"]), 10)


def describe_wald(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`wald_cv`; on grouped data the cluster-robust interval
    comes first and the others are marked as assuming independent samples."""
    at = result.attrs
    level = 100 * (1 - float(at.get("alpha", 0.1)))
    clustered = "lower_cluster" in result
    head = f"Wald CV {level:.0f}% intervals (Bayle et al.; {at.get('loss')})"
    if clustered:
        head += (f", cluster-robust (CR1) over G = {at.get('groups')} groups, t on "
                 f"{at.get('df')} df")
    lines = [head + ":"]
    kinds = ("cluster", "within", "all") if clustered else ("within", "all")
    names = {"cluster": "cluster-robust", "within": "within-fold", "all": "all-pairs"}
    cols = {v: _fmt(result, v) for v in ["estimate"] + [f"{e}_{k}" for k in kinds
                                                         for e in ("lower", "upper")]}
    labels = (["e_a − e_b"] if at.get("mode") == "difference" else result_labels(result))
    width = max(map(len, labels[:10]))
    for h in range(min(10, len(cols["estimate"]))):
        parts = [f"{names[k]} [{cols[f'lower_{k}'][h]:.5g}, {cols[f'upper_{k}'][h]:.5g}]"
                 for k in kinds]
        lines.append(f"  {labels[h]:<{width}}  {cols['estimate'][h]:.5g}  " + "  ".join(parts))
    lines += more_rows(len(cols["estimate"]), 10)
    if clustered:
        effect = _fmt(result, "design_effect")
        lines.append(f"  within-fold and all-pairs assume independent samples; the groups "
                     f"inflate the variance by {', '.join(f'{x:.3g}' for x in effect[:10])}x "
                     "(design effect)")
    if at.get("mode") == "difference":
        test = f"  paired test: p = {float(result['p_value_within']):.4g} (within-fold), " \
               f"{float(result['p_value_all']):.4g} (all-pairs)"
        if clustered:
            test = (f"  paired test: p = {float(result['p_value_cluster']):.4g} (cluster-robust, "
                    f"t = {float(result['t_cluster']):.4g}); assuming independent samples "
                    f"{float(result['p_value_within']):.4g} (within-fold), "
                    f"{float(result['p_value_all']):.4g} (all-pairs)")
        lines.append(test)
    return lines


def render(result: xr.Dataset, page) -> None:
    """HTML: the naive and the Bates nested-CV intervals per param (or of the one param)."""
    title = _interval_title(result)
    per_param = result["estimate"].dims == ("param",)
    draw = page.param_intervals if per_param else page.scalar_intervals
    name = "intervals" if per_param else "bates-param"
    draw(name, title, "naive CV", result["err_cv"], result["naive_lower"], result["naive_upper"])
    draw(name, title, "Bates nested CV", result["estimate"], result["lower"], result["upper"])


def render_wald(result: xr.Dataset, page) -> None:
    """HTML: the Wald interval (cluster-robust on grouped data, else within-fold variance)
    per param, or the paired comparison."""
    clustered = "lower_cluster" in result
    if result["estimate"].dims == ("param",):
        kind = "cluster" if clustered else "within"
        label = (f"Wald (cluster-robust, G = {result.attrs.get('groups')})" if clustered
                 else "Wald (within folds)")
        page.param_intervals("intervals", _interval_title(result), label,
                             result["estimate"], result[f"lower_{kind}"], result[f"upper_{kind}"])
        return
    level = 100 * (1 - float(result.attrs.get("alpha", 0.1)))
    for kind in (("cluster",) if clustered else ()) + ("within", "all"):
        label = (f"Wald (cluster-robust, G = {result.attrs.get('groups')})" if kind == "cluster"
                 else f"Wald ({kind}{', iid' if clustered else ''})")
        page.scalar_intervals("wald-paired", f"Wald CV: estimate and {level:.0f}% interval",
                              label, result["estimate"], result[f"lower_{kind}"],
                              result[f"upper_{kind}"],
                              zero_line=result.attrs.get("mode") == "difference")


def _interval_title(result: xr.Dataset) -> str:
    """Short: the page prefixes the learner and the axis names the loss."""
    return f"{100 * (1 - float(result.attrs.get('alpha', 0.1))):.0f}% intervals"


def _options() -> list[Option]:
    return [Option("param", None, integer(0), "index of one param (default: every param)"),
            Option("alpha", 0.1, miscoverage, "miscoverage; 0.1 gives 90% intervals")]


BIAS_FACTOR = Option("bias_factor", "paper", choice(*BIAS_FACTORS),
                     "'paper' 1 + (K-2)/K (Algorithm 1) or 'code' (the authors' R code)")


WALD_COMPARE = Option("compare", None, param_refs(1, 2),
                      "[a, b]: Bayle et al.'s paired test of e_a = e_b (or [a])")
GROUPS = Option("groups", "auto", choice(*GROUPS_CHOICES),
                "'auto': cluster-robust when the store has group labels; 'ignore': never")


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    """``param`` indexes the grid; ``compare`` (wald_cv) names its params, not beside param."""
    _pick(grid, options.get("param"), where)
    if options.get("compare") is not None:
        if options.get("param") is not None:
            raise InputError(f"{where}: give either param or compare, not both")
        compare_params(grid, options["compare"], where)


declare(bates_ncv, needs=("fold", "pair"), terms=("pair", "oof"), options=_options() + [BIAS_FACTOR], text=describe,
        raced=True,
        html=render, check_grid=_check_grid, warn_design=warn_design,
        results={v: ("param",) for v in ("mse", "err_ncv", "err_cv", "bias", "estimate",
                                         "se_raw", "se", "lower", "upper", "se_naive",
                                         "naive_lower", "naive_upper", "width_ratio",
                                         "at_floor", "at_cap")}
        | {v: ("param", "repeat", "outer") for v in ("e_in", "e_out", "a", "b")})
# with compare the results are scalars (no param dim) and the z / p values are added
declare(wald_cv, raced=True, needs=("fold",), terms=("oof",),
        options=_options() + [WALD_COMPARE, GROUPS],
        text=describe_wald, html=render_wald, check_grid=_check_grid,
        results={**{v: ("param",) for v in ("estimate", "var_within", "var_all", "se_within",
                                            "se_all", "lower_within", "upper_within",
                                            "lower_all", "upper_all")},
                 **{f"{v}?": ("param",) for v in ("var_cluster", "design_effect", "se_cluster",
                                                  "lower_cluster", "upper_cluster")},
                 **{f"{v}?": () for v in ("z_within", "p_value_within", "z_all", "p_value_all",
                                          "t_cluster", "p_value_cluster")}})
