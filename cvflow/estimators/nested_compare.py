"""Tuned against tuned: two learners, each tuned by the inner CV of nested CV, compared on
the outer folds' paired losses.

For each repeat r and outer fold t, learner A's choice ``a_t = argmin_{h∈A} s_t(h)`` and
learner B's ``b_t = argmin_{h∈B} s_t(h)`` are the choices of classic nested CV
(docs/guide/estimators.md, :func:`cvflow.estimators._readers.inner_score`) made within each
learner's own params. Their
fold-t fits give the paired losses on the outer fold,
``d_i = ℓ_i(a_t, fold t) − ℓ_i(b_t, fold t)`` for i ∈ N_t: exactly what scikit-learn's
``GridSearchCV`` of each learner inside each outer training set, refitted and scored on the
outer fold, gives (``tests/test_nested_compare.py`` checks it to 1e-10). Two tests of
e_A − e_B (the risk of "tune A, then fit" minus that of "tune B, then fit"):

- the corrected repeated K-fold t (Nadeau & Bengio; :func:`np_roles.corrected_t_stats`)
  on the fold-level differences ``d_{r,t} = mean_{i∈N_t} d_i``: variance
  (1/(K·R) + 1/(K − 1))·s², Student t with K·R − 1 df;
- the Wald interval of Bayle et al. on the per-sample differences (as :func:`wald_cv` with
  ``compare``): pooled mean d̄ ± z·σ̂_in/√n, σ̂²_in the pooled within-fold variance
  Σ_t Σ_{i∈N_t} (d_i − d̄_t)² / (n − K), estimates and variances averaged over repeats.

DESIGN CHOICE: a registered estimator of its own, not an option of ``nested_cv``. Its result
has another schema (a paired test: scalars t, p, two intervals, and two choices per outer
fold), its options name learners where nested_cv has none, and it needs per-sample losses
(the Wald interval), so it takes pointwise losses only, where nested_cv also takes per-fold
metrics: the registry declares one schema, one option set and one ``metrics`` flag per
estimator. It reads the same inner scores and fold fits, so it costs no fit beyond the pair
splits nested_cv needs.
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import guardrails, np_roles
from ._cube import role_terms
from .cube_losses import pointwise
from .labels import param_label
from ._readers import fold_sizes, inner_score
from .registry import Option, declare, fmt, probability

SCALARS = ("estimate", "estimate_a", "estimate_b", "fold_mean", "sample_variance", "variance", "se", "t",
           "p_value", "lower", "upper", "wald_variance", "wald_se", "wald_z", "wald_p_value",
           "wald_lower", "wald_upper")


def _learner_names(value, where: str) -> list[str]:
    """Option check: two distinct learner names."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) != 2 or not all(isinstance(v, str) and v for v in items) or items[0] == items[1]:
        raise InputError(f"{where}: {value!r}; name two different learners of the workflow, "
                         "e.g. learners: [logreg, hgb]")
    return items


def learner_params(cube: xr.Dataset, learners, where: str) -> list[np.ndarray]:
    """The param indices of each named learner (InputError naming the learners there are).

    Without ``learners`` a cube with exactly two learners compares them in grid order."""
    names = [str(v) for v in np.asarray(cube["learner"].values)]
    present = list(dict.fromkeys(names))
    if learners is None:
        if len(present) != 2:
            raise InputError(f"{where}.learners: the study has {len(present)} learner(s) "
                             f"({', '.join(present)}); name the two to compare, e.g. "
                             f"learners: [{', '.join(present[:2]) or 'a, b'}]")
        learners = present
    learners = _learner_names(learners, f"{where}.learners")
    out = []
    for name in learners:
        if name not in present:
            raise InputError(f"{where}.learners: {name!r} is not a learner of the study; its "
                             f"learners are: {', '.join(present)}")
        out.append(np.flatnonzero(np.asarray(names) == name))
    return out


def _check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    learner_params(grid, options.get("learners"), where)


def paired_differences(oof: np.ndarray, fold: np.ndarray, chosen_a: np.ndarray,
                       chosen_b: np.ndarray) -> np.ndarray:
    """Per-sample paired losses ``d_i`` (R, n) on the analysis samples.

    ``oof`` (P, R, n) the out-of-fold losses ℓ_i(h, fold j(i)); ``fold`` (R, n) the fold of
    each sample; ``chosen_a``/``chosen_b`` (R, K) the param index chosen in each outer fold
    (-1: none, giving NaN).
    """
    r_idx = np.arange(fold.shape[0])[:, None]
    a = chosen_a[r_idx, fold]
    b = chosen_b[r_idx, fold]
    la = np.take_along_axis(oof, np.maximum(a, 0)[None], axis=0)[0]
    lb = np.take_along_axis(oof, np.maximum(b, 0)[None], axis=0)[0]
    return np.where((a >= 0) & (b >= 0), la - lb, np.nan)


def wald_stats(d: np.ndarray, fold: np.ndarray, k: int, alpha: float) -> dict:
    """Bayle et al.'s Wald test of the per-sample differences ``d`` (R, n) in folds ``fold``:
    pooled mean, within-fold variance Σ_t Σ_{i∈N_t} (d_i − d̄_t)² / (n − K), both averaged
    over repeats; se = sqrt(variance / n), z, two-sided p and the 1 − alpha interval."""
    member = np_roles.fold_members(fold, k)                       # (R, K, n)
    sizes = member.sum(-1)
    n = sizes.sum(-1)                                             # (R,)
    fold_mean = np.where(member, d[:, None], 0.0).sum(-1) / sizes  # (R, K)
    dev = np.where(member, (d[:, None] - fold_mean[..., None]) ** 2, 0.0).sum(axis=(1, 2))
    variance = float(np.mean(dev / (n - k)))
    estimate = float(np.mean(d.sum(-1) / n))
    se = math.sqrt(variance / float(n.mean())) if variance > 0 else np.nan
    if guardrails.flat(variance, float(np.nanmax(np.abs(d), initial=0.0))):
        se = np.nan
    z = estimate / se
    q = np_roles.normal_quantile(1 - alpha / 2)
    return {"estimate": estimate, "wald_variance": variance, "wald_se": se, "wald_z": z,
            "wald_p_value": math.erfc(abs(z) / math.sqrt(2)) if np.isfinite(z) else np.nan,
            "wald_lower": estimate - q * se, "wald_upper": estimate + q * se}


def nested_compare(cube: xr.Dataset, *, loss: str | None = None, learners=None,
                   alpha: float = 0.05) -> xr.Dataset:
    """Compare two learners, each tuned by the inner CV, on the outer folds' paired losses.

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with fold and pair splits (lazy or in memory), holding at least two learners.
    loss : str, optional
        A pointwise loss applied to the stored predictions; defaults to the workflow's.
    learners : list of two str, optional
        ``[A, B]``: the learner names (``learners[].name``); the test is of e_A − e_B. A study
        with exactly two learners needs none.
    alpha : float, default 0.05
        Level of the two-sided tests; 1 − alpha the coverage of both intervals.

    Returns
    -------
    xarray.Dataset
        Scalars ``estimate`` (e_A − e_B: the difference of the two nested CV errors, pooled
        over outer folds, mean over repeats), ``estimate_a``, ``estimate_b``; the corrected
        t: ``fold_mean`` (the mean of the fold-level differences, its centre; equal to
        ``estimate`` on equal folds), ``sample_variance``, ``variance``, ``se``, ``t``, ``df``, ``p_value``, ``lower``,
        ``upper``; the Wald test: ``wald_variance``, ``wald_se``, ``wald_z``,
        ``wald_p_value``, ``wald_lower``, ``wald_upper``. ``difference`` (repeat, outer) the
        fold-level differences; ``chosen_a``/``chosen_b`` (repeat, outer) each learner's
        choice (a param index, -1 when all its params failed). attrs ``learners``,
        ``chosen_params_a``/``_b`` (settings per repeat and outer fold), ``loss``, ``alpha``,
        ``folds``, ``repeats``, ``warnings``.

    Examples
    --------
    >>> nested_compare(cube, learners=["logreg", "hgb"])  # doctest: +SKIP
    """
    where = "nested_compare"
    decl = pointwise(cube, loss, where)
    a_level = probability(alpha, f"{where}.alpha")
    idx_a, idx_b = learner_params(cube, learners, where)
    names = [str(cube["learner"].values[idx_a[0]]), str(cube["learner"].values[idx_b[0]])]
    both = np.concatenate([idx_a, idx_b])
    sub = cube.isel(param=both)
    terms = role_terms(sub, decl, roles=("pair", "oof"), what=where)
    sizes = fold_sizes(cube)
    score = inner_score(terms["inner_sum"], sizes)                 # (P, R, K)
    fold = np.asarray(cube["fold"].values)
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    k = sizes.shape[1]
    part = {"a": np.arange(len(idx_a)), "b": len(idx_a) + np.arange(len(idx_b))}
    chosen, est = {}, {}
    for key, rows in part.items():
        picks = np_roles.nested_choice(score[rows], terms["fold_sum"][rows], sizes)
        # local index within `both` (-1 stays -1), as nested_cv picks within its params
        chosen[key] = np.where(picks["chosen"] >= 0, rows[np.maximum(picks["chosen"], 0)], -1)
        est[key] = float(picks["estimate_repeat"].mean())
    fold_a = fold[:, analysis]
    d = paired_differences(terms["oof_loss"][:, :, analysis], fold_a, chosen["a"], chosen["b"])
    member = np_roles.fold_members(fold_a, k)
    fold_diff = np.where(member, d[:, None], 0.0).sum(-1) / sizes  # (R, K)
    res = np_roles.corrected_t_stats(fold_diff, a_level)
    res["fold_mean"] = res["estimate"]          # the corrected t's centre: mean of fold means
    res.update(wald_stats(d, fold_a, k, a_level))
    res.update(estimate_a=est["a"], estimate_b=est["b"])
    r = sizes.shape[0]
    store_index = {key: np.where(c >= 0, both[np.maximum(c, 0)], -1) for key, c in chosen.items()}
    out = xr.Dataset({
        **{key: xr.DataArray(float(res[key])) for key in SCALARS},
        "df": xr.DataArray(int(res["df"])),
        "difference": (("repeat", "outer"), fold_diff),
        "chosen_a": (("repeat", "outer"), store_index["a"]),
        "chosen_b": (("repeat", "outer"), store_index["b"]),
    })
    out.attrs = {"estimator": where, "loss": decl.label, "learners": names,
                 "alpha": a_level, "folds": k, "repeats": r,
                 "chosen_params_a": [[param_label(cube, h) for h in row]
                                     for row in store_index["a"]],
                 "chosen_params_b": [[param_label(cube, h) for h in row]
                                     for row in store_index["b"]]}
    warnings = (guardrails.missing(int(terms["missing"].sum()), where)
                + guardrails.test_set_sizes(sizes) + guardrails.fold_count(r * k, where)
                + guardrails.flat_variance(float(res["sample_variance"]),
                                           float(np.nanmax(np.abs(fold_diff), initial=0.0)),
                                           where)
                + guardrails.skewed_differences(d, where))
    return guardrails.attach(out, warnings, where)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines for :func:`nested_compare`."""
    at = result.attrs
    a, b = at.get("learners", ["a", "b"])
    level = 100 * (1 - float(at.get("alpha", 0.05)))
    v = {key: float(result[key]) for key in SCALARS}
    return [
        f"{a} tuned vs {b} tuned by nested CV (K = {at.get('folds')}, R = {at.get('repeats')}, "
        f"loss {at.get('loss')})",
        f"  nested CV error: {a} {fmt(v['estimate_a'])}, {b} {fmt(v['estimate_b'])}; "
        f"e_{a} − e_{b} = {fmt(v['estimate'])}",
        f"  corrected t (Nadeau–Bengio, df {int(result['df'])}): t = {fmt(v['t'])}  "
        f"p = {fmt(v['p_value'])}  {level:g}% CI [{fmt(v['lower'])}, {fmt(v['upper'])}]",
        f"  Wald (Bayle et al., within-fold variance): z = {fmt(v['wald_z'])}  "
        f"p = {fmt(v['wald_p_value'])}  {level:g}% CI [{fmt(v['wald_lower'])}, "
        f"{fmt(v['wald_upper'])}]",
    ]


# DESIGN CHOICE: a raced cube does not serve nested_compare (raced=False: a raced workflow
# asking for it is refused with one line). Racing drops params on the fold splits' out-of-fold
# losses, which include every outer fold's samples: the inner choice of each learner would be
# made among params kept by looking at the outer fold it is then scored on, so the outer
# estimate of "tune, then fit" is no longer honest (optimistically biased), and the dropped
# params lack the pair splits its inner scores need. Run it on a filled store
# (`racing: false`). tests/test_racing_report.py checks the refusal.
declare(nested_compare, needs=("fold", "pair"), terms=("pair", "oof"), text=describe,
        check_grid=_check_grid,
        options=[Option("learners", None, _learner_names,
                        "[A, B]: the two learners, each tuned by the inner CV"),
                 Option("alpha", 0.05, probability, "level of the tests; 1 - alpha the coverage")],
        results={**{v: () for v in SCALARS + ("df",)},
                 **{v: ("repeat", "outer") for v in ("difference", "chosen_a", "chosen_b")}})
