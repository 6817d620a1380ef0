"""Every pair among several params, p-values adjusted for multiplicity, and tiers.

For params h_1..h_m (ranked by their K-fold estimate, best first) every pair (h_i, h_j),
i < j, is tested by a registered paired test on the fold design: ``corrected_t`` (default) or
paired ``wald_cv`` (its within-fold variance). The m(m − 1)/2 two-sided p-values are adjusted
by Holm's step-down method (family-wise error ≤ alpha) or Benjamini–Hochberg's step-up method
(false discovery rate ≤ alpha, under independence or positive dependence), and a pair is
significantly different when its adjusted p-value is ≤ alpha.

The tiers are a compact letter display (Piepho 2004, insert-absorb): params that share a
letter are not significantly different, and any two params that are not significantly
different share a letter. Significance need not be transitive (a ~ b, b ~ c, a ≠ c gives
a: "a", b: "ab", c: "b"), which is why a param may carry several letters.

The numpy kernels (:func:`letter_display` here; :func:`holm` and :func:`benjamini_hochberg`
in :mod:`cvflow.estimators.multiplicity`) are apart from the cube reader :func:`compare_all`.
"""
from __future__ import annotations

import json
import string

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import guardrails, np_roles
from ._cube import role_terms
from .cube_losses import loss_name
from .labels import param_label, param_text, resolve_param
from .multiplicity import benjamini_hochberg, holm
from .memory import is_lazy, load_if_small
from ._readers import fold_sizes
from .split_scores import kfold_scores
from .registry import REGISTRY, Option, choice, declare, fmt, probability

TESTS = ("corrected_t", "wald_cv")
ADJUST = ("holm", "bh")
ADJUST_NAMES = {"holm": "Holm", "bh": "Benjamini–Hochberg"}
# DESIGN CHOICE: paired wald_cv reports two variances; compare_all reads the within-fold one
# (Bayle et al.'s σ̂²_in, its p_value_within), which, unlike the all-pairs σ̂²_out, does not
# count the spread of the fold means as sampling noise. On a store with groups wald_cv adds
# the cluster-robust test (t on G − 1 df), which compare_all reads instead: with correlated
# samples within a group the within-fold test is too liberal.
TEST_KEYS = {"corrected_t": ("estimate", "t", "p_value"),
             "wald_cv": ("estimate", "z_within", "p_value_within")}
CLUSTER_KEYS = ("estimate", "t_cluster", "p_value_cluster")


# ---------------------------------------------------------------------------------------------
# kernels


def _letter(k: int) -> str:
    """a, b, …, z, A, …, Z, then aa, ab, … (the k-th letter, from 0)."""
    alphabet = string.ascii_lowercase + string.ascii_uppercase
    out = ""
    k += 1
    while k:
        k, r = divmod(k - 1, len(alphabet))
        out = alphabet[r] + out
    return out


def letter_display(different: np.ndarray) -> list[str]:
    """Compact letter display of m items from ``different`` (m, m) bool, symmetric: True where
    two items differ significantly. Items are in rank order (best first).

    Piepho's insert-absorb: start with one letter shared by all; for each different pair
    (i, j), every letter held by both is split into one without i and one without j; a letter
    whose items are a subset of another letter's is absorbed. Letters are then named a, b, …
    in the order of their best-ranked item. Returns each item's letters, e.g. ["a", "ab", "b"].
    """
    different = np.asarray(different, dtype=bool)
    m = different.shape[0]
    columns: list[frozenset[int]] = [frozenset(range(m))] if m else []
    for i in range(m):
        for j in range(i + 1, m):
            if not different[i, j]:
                continue
            split: list[frozenset[int]] = []
            for col in columns:
                split += [col - {i}, col - {j}] if i in col and j in col else [col]
            unique = list(dict.fromkeys(split))
            columns = [c for c in unique if c and not any(c < other for other in unique)]
    columns.sort(key=lambda c: sorted(c))
    letters = [""] * m
    for k, col in enumerate(columns):
        for item in sorted(col):
            letters[item] += _letter(k)
    return letters


# ---------------------------------------------------------------------------------------------
# reading the cube


def _chosen(cube: xr.Dataset, params, estimate: np.ndarray, where: str) -> list[int]:
    """The params to compare: ``params`` resolved, or the first best of each learner."""
    if params is not None:
        items = list(params) if isinstance(params, (list, tuple)) else [params]
        chosen = [resolve_param(cube, spec, where=f"{where}.params") for spec in items]
        seen: dict[int, object] = {}
        for h, spec in zip(chosen, items):
            if h in seen:
                raise InputError(f"{where}.params: {spec!r} and {seen[h]!r} are the same param "
                                 f"({h}); name each param once")
            seen[h] = spec
        if len(chosen) < 2:
            raise InputError(f"{where}.params: {params!r}; give at least two params, "
                             "e.g. params: [0, 1, 2]")
        return chosen
    learners = np.asarray([str(v) for v in cube["learner"].values])
    chosen = []
    for learner in dict.fromkeys(learners):
        rows = np.flatnonzero(learners == learner)
        if not estimate.size:               # the grid before any fit: one param per learner
            chosen.append(int(rows[0]))
            continue
        finite = rows[np.isfinite(estimate[rows])]
        # a learner whose every param failed has no best: left out (missing_fits says so)
        if finite.size:
            chosen.append(int(finite[np.argmin(estimate[finite])]))    # the first best
    if len(chosen) < 2:
        names = ", ".join(dict.fromkeys(learners))
        raise InputError(f"{where}.params: the grid has one learner with a K-fold estimate "
                         f"({names}), so 'the best param of each learner' is one param; name "
                         "the params to compare, e.g. params: [0, 1, 2]")
    return chosen


def check_grid(grid: xr.Dataset, design, options: dict, where: str) -> None:
    """``params`` names two or more distinct params of the grid; without it, the grid has at
    least two learners (the default compares the best param of each)."""
    _chosen(grid, options.get("params"), np.empty(0), where)


def _params_option(value, where: str) -> list:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) < 2:
        raise InputError(f"{where}: {value!r}; give at least two params, e.g. [0, 1, 2] or "
                         "['ridge(alpha=1)', 'lasso(alpha=0.1)', 'knn']")
    for v in items:
        if not ((isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)
                or (isinstance(v, dict) and "learner" in v)):
            raise InputError(f"{where}: {v!r} is not a param; use an index, a learner name, "
                             "'learner(key=value)' or {learner: name, key: value}")
    return items


def compare_all(cube: xr.Dataset, *, loss: str | None = None, params=None,
                test: str = "corrected_t", adjust: str = "holm", alpha: float = 0.05
                ) -> xr.Dataset:
    """Every pair among ``params`` by a paired test, adjusted p-values and tiers (letters).

    Parameters
    ----------
    cube : xarray.Dataset
        A cube with K-fold splits.
    loss : str, optional
        Loss applied to the stored predictions; defaults to the workflow's.
    params : list, optional
        Two or more params, each an index, a learner name with one param,
        ``"learner(key=value)"`` or ``{learner: name, key: value}``. Default: the best param
        of each learner by K-fold (the first best on ties; a learner whose every param
        failed is left out).
    test : {"corrected_t", "wald_cv"}, default "corrected_t"
        The paired test of each pair: exactly what that estimator returns with
        ``compare: [a, b]`` (wald_cv: its within-fold z and p, or its cluster-robust t and
        p when the store has groups).
    adjust : {"holm", "bh"}, default "holm"
        Holm (family-wise error) or Benjamini–Hochberg (false discovery rate).
    alpha : float, default 0.05
        Level: a pair differs significantly when its adjusted p-value is ≤ alpha.

    Returns
    -------
    xarray.Dataset
        Along ``rank`` (the params, best K-fold estimate first): ``param`` (index in the cube),
        ``label``, ``estimate`` (K-fold), ``se`` (the corrected repeated K-fold se of the
        estimate), ``letters`` (the tiers). Along ``pair`` (i < j in rank order): ``a``, ``b``
        (param indices), ``difference`` (the test's estimate of e_a − e_b), ``statistic`` (t
        or z), ``p_value``, ``p_adjusted``, ``significant``. attrs ``estimator``, ``loss``,
        ``test``, ``adjust``, ``alpha``, ``warnings``.

    Examples
    --------
    >>> compare_all(cube, adjust="bh")  # doctest: +SKIP
    """
    where = "compare_all"
    name = loss_name(cube, loss)
    test = choice(*TESTS)(test, f"{where}.test")
    adjust = choice(*ADJUST)(adjust, f"{where}.adjust")
    level = probability(alpha, f"{where}.alpha")
    if params is not None:
        params = _params_option(params, f"{where}.params")
    terms = role_terms(cube, name, roles=("fold",), what=where)
    scores = kfold_scores(terms["fold_sum"], fold_sizes(cube))
    estimate = scores["estimate"].values
    chosen = _chosen(cube, params, estimate, where)
    # rank: best K-fold estimate first (NaN last), grid order on ties
    chosen = [chosen[i] for i in np.argsort(np.where(np.isnan(estimate[chosen]), np.inf,
                                                     estimate[chosen]), kind="stable")]
    # DESIGN CHOICE: each pair is tested by the registered estimator itself, so its numbers
    # and warnings are exactly what `{test: {compare: [a, b]}}` reports (tested), whatever
    # that estimator does (cluster-robust variances included); the chosen params' predictions
    # are read once when they fit the in-memory budget.
    sub = cube.isel(param=chosen)
    if is_lazy(sub["pred"].data):
        sub = sub.assign(pred=load_if_small(sub["pred"]))
    run = REGISTRY[test].func
    keys = TEST_KEYS[test]
    m = len(chosen)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    stats = np.full((len(pairs), 3), np.nan)
    warnings: list[dict] = guardrails.missing(int(terms["missing"][chosen].sum()), where)
    for k, (i, j) in enumerate(pairs):
        res = run(sub, loss=name, compare=[i, j], **({"alpha": level} if test == "corrected_t"
                                                     else {}))
        used = CLUSTER_KEYS if all(key in res for key in CLUSTER_KEYS) else keys
        stats[k] = [float(res[key]) for key in used]
        # a pair's missing_fits is the params counted above: not said once per pair
        warnings += [w for w in guardrails.read(res) if w["code"] != "missing_fits"]
    p_adjusted = (holm if adjust == "holm" else benjamini_hochberg)(stats[:, 2])
    significant = np.asarray(p_adjusted <= level)       # NaN: not significant
    different = np.zeros((m, m), dtype=bool)
    for (i, j), s in zip(pairs, significant):
        different[i, j] = different[j, i] = s
    labels = [param_text(param_label(cube, h)) for h in chosen]
    se = np_roles.corrected_repeated_se(scores["fold_score"].values[chosen])
    out = xr.Dataset({
        "param": ("rank", np.asarray(chosen, dtype=np.int64)),
        "label": ("rank", np.asarray(labels, dtype=object).astype(str)),
        "estimate": ("rank", estimate[chosen]),
        "se": ("rank", se),
        "letters": ("rank", np.asarray(letter_display(different), dtype=object).astype(str)),
        "a": ("pair", np.asarray([chosen[i] for i, _ in pairs], dtype=np.int64)),
        "b": ("pair", np.asarray([chosen[j] for _, j in pairs], dtype=np.int64)),
        "difference": ("pair", stats[:, 0]),
        "statistic": ("pair", stats[:, 1]),
        "p_value": ("pair", stats[:, 2]),
        "p_adjusted": ("pair", p_adjusted),
        "significant": ("pair", significant),
    })
    out.attrs = {"estimator": where, "loss": name, "test": test, "adjust": adjust,
                 "alpha": level}
    unique = list({json.dumps(w, sort_keys=True): w for w in warnings}.values())
    return guardrails.attach(out, unique, where)


def describe(result: xr.Dataset) -> list[str]:
    """Text-report lines: the ranked table with tiers, then every pair."""
    at = result.attrs
    stat = "t" if at.get("test") == "corrected_t" else "z"
    lines = [f"{result.sizes['rank']} params, every pair by {at.get('test')}, "
             f"p-values adjusted by {ADJUST_NAMES.get(str(at.get('adjust')), at.get('adjust'))}, "
             f"alpha {fmt(float(at.get('alpha', 0.05)))} (loss {at.get('loss')})",
             "  params sharing a letter are not significantly different",
             f"  {'rank':>4}  {'tier':<6} {'K-fold':>12}  {'se':>9}  param"]
    for r in range(result.sizes["rank"]):
        lines.append(f"  {r + 1:>4}  {str(result['letters'].values[r]):<6} "
                     f"{fmt(float(result['estimate'][r])):>12}  {fmt(float(result['se'][r])):>9}  "
                     f"{result['label'].values[r]}")
    label = dict(zip(result["param"].values.tolist(), result["label"].values.tolist()))
    lines.append(f"  pairs (a − b, {stat}, p, adjusted p):")
    for k in range(result.sizes["pair"]):
        mark = "  *" if bool(result["significant"][k]) else ""
        lines.append(f"    {label[int(result['a'][k])]} − {label[int(result['b'][k])]}: "
                     f"{fmt(float(result['difference'][k]))}  {stat} = "
                     f"{fmt(float(result['statistic'][k]))}  p = {fmt(float(result['p_value'][k]))}"
                     f"  adjusted {fmt(float(result['p_adjusted'][k]))}{mark}")
    return lines


def render(result: xr.Dataset, page) -> None:
    """HTML: the params ranked by K-fold estimate with ± se bars and their tier letters."""
    at = result.attrs
    est, se = result["estimate"].values, result["se"].values
    page.ranked_tiers(
        "compare-all", "params ranked by K-fold, with tiers",
        [str(v) for v in result["label"].values], est, est - se, est + se,
        [str(v) for v in result["letters"].values],
        caption=(f"Every pair tested by {at.get('test')}, p-values adjusted by "
                 f"{ADJUST_NAMES.get(str(at.get('adjust')), at.get('adjust'))} at alpha "
                 f"{at.get('alpha')}: params sharing a letter are not significantly different. "
                 "Bars: K-fold estimate ± its corrected repeated K-fold se; the tests are "
                 "paired (the same folds), so bars may overlap for params that differ."))


declare(compare_all, needs=("fold",), terms=("fold",), text=describe, html=render,
        check_grid=check_grid,
        options=[Option("params", None, _params_option,
                        "two or more params to compare (default: the best of each learner)"),
                 Option("test", "corrected_t", choice(*TESTS), "the paired test of each pair"),
                 Option("adjust", "holm", choice(*ADJUST),
                        "holm (family-wise error) or bh (Benjamini-Hochberg, false discovery rate)"),
                 Option("alpha", 0.05, probability, "level of the adjusted tests")],
        results={"param": ("rank",), "label": ("rank",), "estimate": ("rank",), "se": ("rank",),
                 "letters": ("rank",), "a": ("pair",), "b": ("pair",), "difference": ("pair",),
                 "statistic": ("pair",), "p_value": ("pair",), "p_adjusted": ("pair",),
                 "significant": ("pair",)})
