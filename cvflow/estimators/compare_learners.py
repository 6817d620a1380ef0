"""Comparing learners across data sets: ranks, Friedman, Nemenyi, Holm against a control,
Wilcoxon, the Bayesian signed-rank test, the geometric mean of ratios, win/tie/loss.

The input is a table of per-data-set estimates (data sets × learners, one number each: the
K-fold, corrected, nested or stability-nested estimate of a loss), not a cube: a suite's cubes
each give one row. The numpy kernels are in :mod:`cvflow.estimators.np_across`; this module
names the dimensions, checks the input, says what each result assumes and warns where that
fails (:class:`cvflow.errors.ComparisonWarning`).
"""
from __future__ import annotations

import json
import warnings as pywarnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from ..lazy import xarray as xr
from ..lazy import stats

from ..errors import ComparisonWarning, InputError
from . import np_across
from .guardrails import warning
from .registry import fmt

Better = Literal["lower", "higher"]

# DESIGN CHOICE: below 6 data sets no two-sided Wilcoxon signed-rank p-value can reach 0.05
# (the smallest is 2 / 2^N: 0.0625 at N = 5, 0.031 at N = 6; tests/test_compare_learners.py
# checks it with scipy), and Demšar (2006) asks for N > 10 and k > 5 before trusting
# Friedman's χ² approximation: fewer than FEW_DATASETS data sets is warned about.
FEW_DATASETS = 6

ASSUMES = {
    "mean_rank": "each data set ranks the learners (1 = best, ties averaged); every data set "
                 "weighs the same whatever its size or difficulty",
    "friedman": "data sets independent; under the null every ordering of the learners is equally "
                "likely within a data set; χ² approximation (Demšar 2006: N > 10 and k > 5), "
                "tie-corrected as scipy.stats.friedmanchisquare; Iman-Davenport's F is its less "
                "conservative form",
    "nemenyi": "all pairs, family-wise error at alpha; the mean ranks against the studentized "
               "range (infinite df), no tie correction, as scikit-posthocs' "
               "posthoc_nemenyi_friedman; conservative; read it after a significant Friedman test",
    "control": "k - 1 comparisons of mean ranks against one control learner, z = (R_i - R_c) / "
               "sqrt(k(k+1)/(6N)), two-sided normal p, Holm step-down (Demšar 2006, 3.2.2)",
    "wilcoxon": "data sets independent; the differences of the two learners symmetric about 0 "
                "under the null and commensurable across data sets; zeros split between the signs "
                "(zsplit); scipy.stats.wilcoxon's defaults; Holm over all pairs; needs at least "
                "6 data sets to reach p < 0.05",
    "bayes_signed_rank": "data sets independent draws from one population; a Dirichlet process "
                         "posterior (prior weight 0.5 at a difference 0) on the distribution of "
                         "the differences (Benavoli et al. 2014; baycomp's SignedRankTest); the "
                         "rope is in the table's units",
    "ratio": "positive values; geometric mean over data sets of a / b (Cory-Wright & Gómez: 0.96 "
             "is a 4% lower loss for a on average); percentile bootstrap over data sets, which "
             "treats the data sets as drawn from a population",
    "win_tie_loss": "counts over data sets; a tie is a difference the per-data-set interval does "
                    "not resolve",
}

HIERARCHICAL = (
    "not computed: the hierarchical model of Corani et al. (2017) needs a Markov chain Monte "
    "Carlo sampler; baycomp's HierarchicalTest runs it through pystan (httpstan, a 250 MB "
    "install that compiles the model with a C++ compiler on first use), which cvflow does not "
    "depend on. Run baycomp.HierarchicalTest on the per-fold results to get it.")


@dataclass(frozen=True)
class LearnerComparison:
    """What :func:`compare_learners` returns. Each result is an ``xarray`` object whose
    ``attrs["assumes"]`` says what it assumes.

    Attributes
    ----------
    table : xarray.DataArray (dataset, learner)
        The estimates compared (data sets with a missing learner dropped), as given.
    ranks : xarray.DataArray (dataset, learner)
        Ranks within each data set, 1 = best, ties averaged.
    mean_rank : xarray.DataArray (learner)
    friedman : xarray.Dataset
        Scalars ``statistic`` (χ²), ``p_value``, ``df``, ``f`` (Iman-Davenport), ``f_p_value``,
        ``f_df1``, ``f_df2``.
    nemenyi : xarray.Dataset
        ``p_value`` (learner, other), ``critical_difference``, ``q_alpha``.
    control : xarray.Dataset
        Along learner: ``z``, ``p_value``, ``p_adjusted`` (Holm); attrs ``control``.
    wilcoxon, bayes_signed_rank, ratio, win_tie_loss : xarray.Dataset
        Along ``pair`` (a, b every pair in the table's learner order): Wilcoxon's
        ``statistic``, ``p_value``, ``p_adjusted`` (Holm); ``p_a_better``, ``p_rope``,
        ``p_b_better``; the geometric mean of a / b ``ratio`` with ``ratio_lower``,
        ``ratio_upper``; ``wins``, ``ties``, ``losses`` of a against b.
    hierarchical : str
        Why the hierarchical model of Corani et al. 2017 is not computed.
    warnings : list of dict
        ``{"code", "message", ...}``; each was also issued as a ComparisonWarning.
    """

    table: xr.DataArray
    ranks: xr.DataArray
    mean_rank: xr.DataArray
    friedman: xr.Dataset
    nemenyi: xr.Dataset
    control: xr.Dataset
    wilcoxon: xr.Dataset
    bayes_signed_rank: xr.Dataset
    ratio: xr.Dataset
    win_tie_loss: xr.Dataset
    hierarchical: str = HIERARCHICAL
    warnings: list = field(default_factory=list)

    def assumptions(self) -> dict[str, str]:
        """What each result assumes, by the attribute's name."""
        return {**ASSUMES, "hierarchical": self.hierarchical}

    def to_dict(self) -> dict:
        """Plain JSON-able numbers (NaN as None), with the assumptions and warnings."""
        def plain(v):
            if isinstance(v, np.ndarray):
                return [plain(x) for x in v.tolist()]
            if isinstance(v, list):
                return [plain(x) for x in v]
            if isinstance(v, (float, np.floating)):
                return float(v) if np.isfinite(v) else None
            if isinstance(v, np.integer):
                return int(v)
            return v

        def pairwise(ds: xr.Dataset) -> list[dict]:
            return [{k: plain(ds[k].values[i]) for k in ds.data_vars} | {"a": str(ds["a"].values[i]),
                                                                        "b": str(ds["b"].values[i])}
                    for i in range(ds.sizes["pair"])]
        learners = [str(v) for v in self.table["learner"].values]
        return {
            "datasets": [str(v) for v in self.table["dataset"].values],
            "learners": learners,
            "better": self.table.attrs.get("better", "lower"),
            "mean_rank": dict(zip(learners, plain(self.mean_rank.values))),
            "friedman": {k: plain(self.friedman[k].values.item()) for k in self.friedman.data_vars},
            "nemenyi": {"critical_difference": plain(float(self.nemenyi["critical_difference"])),
                        "q_alpha": plain(float(self.nemenyi["q_alpha"])),
                        "p_value": plain(self.nemenyi["p_value"].values)},
            "control": {"learner": self.control.attrs["control"],
                        **{k: dict(zip(learners, plain(self.control[k].values)))
                           for k in self.control.data_vars}},
            "wilcoxon": pairwise(self.wilcoxon),
            "bayes_signed_rank": {"rope": self.bayes_signed_rank.attrs["rope"],
                                  "pairs": pairwise(self.bayes_signed_rank)},
            "ratio": pairwise(self.ratio),
            "win_tie_loss": {"rule": self.win_tie_loss.attrs["rule"],
                             "pairs": pairwise(self.win_tie_loss)},
            "hierarchical": self.hierarchical,
            "alpha": self.friedman.attrs["alpha"],
            "assumes": self.assumptions(),
            "warnings": self.warnings,
        }

    def describe(self) -> list[str]:
        """Text-report lines: learners by mean rank, the omnibus tests, every pair."""
        learners = [str(v) for v in self.table["learner"].values]
        n = self.table.sizes["dataset"]
        order = np.argsort(self.mean_rank.values, kind="stable")
        fr, nem = self.friedman, self.nemenyi
        alpha = fr.attrs["alpha"]
        lines = [f"{len(learners)} learners on {n} data sets ({self.table.attrs.get('better', 'lower')} "
                 f"is better), ranked by mean rank (1 = best):"]
        for j in order:
            lines.append(f"  {fmt(float(self.mean_rank[j])):>6}  {learners[j]}")
        lines += [f"Friedman χ² = {fmt(float(fr['statistic']))} (df {int(fr['df'])}), p = "
                  f"{fmt(float(fr['p_value']))}; Iman-Davenport F = {_number(float(fr['f']))} "
                  f"({int(fr['f_df1'])}, {int(fr['f_df2'])}), p = {fmt(float(fr['f_p_value']))}",
                  f"Nemenyi critical difference of mean ranks at alpha {fmt(alpha)}: "
                  f"{fmt(float(nem['critical_difference']))}",
                  f"against the control {self.control.attrs['control']} (Holm-adjusted p):"]
        for j in order:
            if learners[j] != self.control.attrs["control"]:
                lines.append(f"  {learners[j]}: z = {fmt(float(self.control['z'][j]))}, "
                             f"p = {fmt(float(self.control['p_adjusted'][j]))}")
        rope = self.bayes_signed_rank.attrs["rope"]
        lines.append(f"pairs (a vs b): Wilcoxon Holm-adjusted p; P(a better) / P(rope {fmt(rope)}) / "
                     "P(b better); geometric mean of a/b [interval]; a's wins/ties/losses")
        w, b, r, t = self.wilcoxon, self.bayes_signed_rank, self.ratio, self.win_tie_loss
        for i in range(w.sizes["pair"]):
            lines.append(f"  {w['a'].values[i]} vs {w['b'].values[i]}: p = {fmt(float(w['p_adjusted'][i]))}; "
                         f"{fmt(float(b['p_a_better'][i]))} / {fmt(float(b['p_rope'][i]))} / "
                         f"{fmt(float(b['p_b_better'][i]))}; {fmt(float(r['ratio'][i]))} "
                         f"[{fmt(float(r['ratio_lower'][i]))}, {fmt(float(r['ratio_upper'][i]))}]; "
                         f"{int(t['wins'][i])}/{int(t['ties'][i])}/{int(t['losses'][i])}")
        lines.append(f"ties (win/tie/loss): {t.attrs['rule']}")
        lines.append(f"hierarchical model: {self.hierarchical}")
        lines += [f"warning: {w['message']}" for w in self.warnings]
        return lines


def _number(x: float) -> str:
    """fmt, with an infinite F (every data set ranks the learners alike) shown as inf."""
    return "inf" if x == float("inf") else fmt(x)


# ---------------------------------------------------------------------------------------------
# input


def _labelled(value, where: str, dims: tuple[str, ...]) -> xr.DataArray:
    """A DataFrame (index: data sets, columns: learners) or a DataArray as a float DataArray
    with ``dims`` (renamed from the first dims when they are not named so), labels as strings."""
    if isinstance(value, pd.DataFrame):
        if len(dims) != 2:
            raise InputError(f"{where}: a DataFrame holds two dimensions; give an xarray.DataArray "
                             f"with dims {dims}")
        value = xr.DataArray(value.to_numpy(), dims=dims,
                             coords={dims[0]: list(value.index), dims[1]: list(value.columns)})
    if not isinstance(value, xr.DataArray):
        raise InputError(f"{where}: {type(value).__name__}; give a pandas DataFrame (index: data "
                         "sets, columns: learners) or an xarray.DataArray with dims "
                         f"{dims}")
    if set(dims) - set(value.dims):
        if value.ndim != len(dims) or set(value.dims) & set(dims):
            raise InputError(f"{where}: dims {value.dims}; give dims {dims}")
        value = value.rename(dict(zip(value.dims, dims)))
    if set(value.dims) - set(dims):
        raise InputError(f"{where}: dims {value.dims}; give dims {dims}")
    value = value.transpose(*dims)
    coords = {d: [str(v) for v in (value[d].values if d in value.coords else range(value.sizes[d]))]
              for d in dims}
    for d, labels in coords.items():
        if len(set(labels)) != len(labels):
            raise InputError(f"{where}: the {d} labels {labels} repeat; name each {d} once")
    try:
        data = np.asarray(value.values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{where}: values that are not numbers; give one number per cell") from None
    return xr.DataArray(data, dims=dims, coords=coords)


def _aligned(value, table: xr.DataArray, kept: xr.DataArray, where: str,
             dims=("dataset", "learner")) -> xr.DataArray:
    """``value`` labelled as ``table`` (every data set and learner of it), restricted and ordered
    as ``kept`` (the table's complete data sets)."""
    out = _labelled(value, where, dims)
    for d in ("dataset", "learner"):
        if set(out[d].values.tolist()) != set(table[d].values.tolist()):
            raise InputError(f"{where}: its {d}s {out[d].values.tolist()} are not the table's "
                             f"{table[d].values.tolist()}; give one value per data set and learner")
    return out.sel(dataset=kept["dataset"], learner=kept["learner"])


def _positive_int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{where}: {value!r}; give a positive integer")
    return int(value)


# ---------------------------------------------------------------------------------------------
# the comparison


def _resolution(d: np.ndarray, i: int, j: int, se, lower, upper, folds, level: float):
    """Per data set, whether a − b is resolved by the per-data-set interval, and the rule."""
    if folds is not None:
        return (np_across.paired_resolved(folds[:, i] - folds[:, j], level),
                f"the paired corrected repeated K-fold t interval ({fmt(100 * level)}%) of the "
                "per-fold differences contains 0 (Nadeau & Bengio)")
    if lower is not None:
        overlap = np.maximum(lower[:, i], lower[:, j]) <= np.minimum(upper[:, i], upper[:, j])
        return ~overlap, "the two learners' intervals overlap (a conservative rule for paired estimates)"
    if se is not None:
        z = stats.norm.ppf((1 + level) / 2)
        return (np.abs(d) > z * np.hypot(se[:, i], se[:, j]),
                f"|a - b| ≤ {fmt(float(z))} · sqrt(se_a² + se_b²) (treats the two estimates as "
                "independent, conservative for paired ones)")
    return np.ones(d.size, dtype=bool), "equal estimates only (no per-data-set intervals given)"


def compare_learners(table, *, better: Better = "lower", control: str | None = None, se=None,
                     lower=None, upper=None, folds=None, alpha: float = 0.05, rope: float = 0.0,
                     samples: int = 50000, resamples: int = 10000, seed: int | None = 0
                     ) -> LearnerComparison:
    """Compare learners across data sets from one estimate per data set and learner.

    Parameters
    ----------
    table : pandas.DataFrame or xarray.DataArray
        (data sets, learners): a DataFrame's index names the data sets and its columns the
        learners; a DataArray has dims ``("dataset", "learner")`` (or any two dims, taken in
        that order). A data set with a missing (NaN) learner is dropped, with a warning.
    better : {"lower", "higher"}, default "lower"
        "lower" for a loss, "higher" for a score (accuracy, AUC).
    control : str, optional
        The learner the others are tested against (Holm); default the best mean rank.
    se : same shape as ``table``, optional
        Per-data-set standard errors; a win or loss needs abs(a − b) > z · sqrt(se_a² + se_b²).
    lower, upper : same shape as ``table``, optional
        Per-data-set intervals; a win or loss needs the two intervals not to overlap.
    folds : xarray.DataArray, optional
        Per-fold results with dims ``("dataset", "learner", "fold")`` and optionally
        ``"repeat"``; a win or loss needs the paired corrected repeated K-fold t interval of
        the difference to exclude 0 (preferred over ``se`` or intervals when given).
    alpha : float, default 0.05
        Level of Nemenyi's critical difference and of the intervals (1 − alpha).
    rope : float, default 0
        Half-width of the region of practical equivalence of the Bayesian signed-rank test, in
        the table's units.
    samples : int, default 50000
        Posterior draws of the Bayesian signed-rank test (baycomp's ``nsamples``).
    resamples : int, default 10000
        Bootstrap resamples of data sets behind the interval of the geometric mean ratio.
    seed : int or None, default 0
        Seeds the Bayesian test (``numpy.random.RandomState(seed)``, as baycomp's
        ``random_state``) and the bootstrap.

    Returns
    -------
    LearnerComparison

    Examples
    --------
    >>> import pandas as pd
    >>> table = pd.DataFrame({"ridge": [0.30, 0.21, 0.52, 0.44, 0.12, 0.33],
    ...                       "lasso": [0.31, 0.25, 0.50, 0.47, 0.15, 0.36]},
    ...                      index=["a", "b", "c", "d", "e", "f"])
    >>> result = compare_learners(table)
    >>> float(result.mean_rank.sel(learner="ridge"))
    1.1666666666666667
    """
    where = "compare_learners"
    if better not in ("lower", "higher"):
        raise InputError(f"{where}.better: {better!r}; use 'lower' (a loss) or 'higher' (a score)")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"{where}.alpha: {alpha!r}; give a level between 0 and 1, e.g. 0.05")
    if isinstance(rope, bool) or not isinstance(rope, (int, float)) or not rope >= 0:
        raise InputError(f"{where}.rope: {rope!r}; give a half-width ≥ 0 in the table's units")
    samples = _positive_int(samples, f"{where}.samples")
    resamples = _positive_int(resamples, f"{where}.resamples")
    if (lower is None) != (upper is None):
        raise InputError(f"{where}: give both lower= and upper= (the per-data-set intervals), or neither")
    full = _labelled(table, f"{where}.table", ("dataset", "learner"))
    notes: list[dict] = []
    complete = np.isfinite(full.values).all(axis=1)
    if not complete.all():
        dropped = full["dataset"].values[~complete].tolist()
        notes.append(warning("incomplete_datasets", f"{len(dropped)} data sets lack a learner's "
                             f"estimate and are left out: {', '.join(dropped)}", count=len(dropped)))
    tab = full.isel(dataset=np.flatnonzero(complete))
    n, k = tab.shape
    if k < 2:
        raise InputError(f"{where}.table: {k} learner; compare at least two")
    if n < 2:
        raise InputError(f"{where}.table: {n} data set with every learner's estimate; give at least two")
    learners = [str(v) for v in tab["learner"].values]
    if control is not None and control not in learners:
        raise InputError(f"{where}.control: {control!r} is not a learner of the table ({', '.join(learners)})")
    sign = 1.0 if better == "lower" else -1.0
    losses = sign * tab.values
    se_v = _aligned(se, full, tab, f"{where}.se").values if se is not None else None
    low_v = sign * _aligned(lower, full, tab, f"{where}.lower").values if lower is not None else None
    high_v = sign * _aligned(upper, full, tab, f"{where}.upper").values if upper is not None else None
    if low_v is not None and better == "higher":
        low_v, high_v = high_v, low_v
    folds_v = None
    if folds is not None:
        dims = ("dataset", "learner", "repeat", "fold")
        if isinstance(folds, xr.DataArray) and "repeat" not in folds.dims:
            folds = folds.expand_dims("repeat")
        folds_v = sign * _aligned(folds, full, tab, f"{where}.folds", dims).values
    level = 1.0 - alpha

    if n < FEW_DATASETS:
        notes.append(warning("few_datasets", f"{n} data sets: below {FEW_DATASETS} no two-sided "
                             "Wilcoxon p-value reaches 0.05, and Friedman's χ² wants N > 10; read the "
                             "mean ranks and the Bayesian probabilities rather than the p-values",
                             datasets=n))
    ranks = np_across.average_ranks(losses)
    tied = int(sum(np.unique(row).size < k for row in losses))
    if tied:
        notes.append(warning("tied_ranks", f"{tied} of {n} data sets tie learners: their ranks are "
                             "averaged; Friedman's χ² is corrected for ties, Nemenyi's and the "
                             "control's z are not", datasets=tied))
    mean_rank = ranks.mean(axis=0)
    best = int(np.argmin(mean_rank)) if control is None else learners.index(control)

    fr = np_across.friedman(ranks)
    nem = np_across.nemenyi(mean_rank, n, alpha)
    ctl = np_across.against_control(mean_rank, n, best)
    wil = np_across.wilcoxon(losses)
    pairs = np_across.pairs(k)
    zeros = [f"{learners[i]} vs {learners[j]}" for i, j in pairs
             if np.any(losses[:, i] == losses[:, j])]
    if zeros:
        notes.append(warning("zero_differences", f"{len(zeros)} pairs have data sets with equal "
                             f"estimates ({', '.join(zeros)}): Wilcoxon splits those zeros between "
                             "the signs (zsplit)", pairs=len(zeros)))
    bayes = np.asarray([np_across.bayes_signed_rank(losses[:, i] - losses[:, j], float(rope),
                                                    samples=samples, seed=seed) for i, j in pairs])
    ratio = np.asarray([np_across.geometric_mean_ratio(tab.values[:, i], tab.values[:, j],
                                                       level=level, resamples=resamples, seed=seed)
                        for i, j in pairs])
    if np.isnan(ratio[:, 0]).any():
        notes.append(warning("not_positive", "the table has values ≤ 0: the geometric mean of "
                             "ratios is NaN (it needs positive losses)"))
    counts, rule = [], ""
    for i, j in pairs:
        d = losses[:, i] - losses[:, j]
        resolved, rule = _resolution(d, i, j, se_v, low_v, high_v, folds_v, level)
        counts.append(np_across.win_tie_loss(d, resolved))
    if se is None and lower is None and folds is None:
        notes.append(warning("no_intervals", "no per-data-set intervals (se=, lower=/upper= or "
                             "folds=): win/tie/loss counts every difference, however small, as a win "
                             "or a loss"))
    for w in notes:
        pywarnings.warn(f"{where}: {w['message']}", ComparisonWarning, stacklevel=2)

    def with_assumption(obj, key: str, **attrs):
        obj.attrs.update({"assumes": ASSUMES[key], **attrs})
        return obj

    pair_coords = {"a": ("pair", [learners[i] for i, _ in pairs]),
                   "b": ("pair", [learners[j] for _, j in pairs])}
    kept = xr.DataArray(tab.values, dims=("dataset", "learner"), coords=tab.coords,
                        attrs={"better": better})
    return LearnerComparison(
        table=kept,
        ranks=with_assumption(xr.DataArray(ranks, dims=("dataset", "learner"), coords=tab.coords),
                              "mean_rank"),
        mean_rank=with_assumption(xr.DataArray(mean_rank, dims="learner",
                                               coords={"learner": learners}), "mean_rank"),
        friedman=with_assumption(xr.Dataset({key: xr.DataArray(v) for key, v in fr.items()}),
                                 "friedman", alpha=float(alpha)),
        nemenyi=with_assumption(xr.Dataset(
            {"p_value": (("learner", "other"), nem["p_value"]),
             "critical_difference": xr.DataArray(nem["critical_difference"]),
             "q_alpha": xr.DataArray(nem["q_alpha"])},
            coords={"learner": learners, "other": learners}), "nemenyi", alpha=float(alpha)),
        control=with_assumption(xr.Dataset({key: ("learner", v) for key, v in ctl.items()},
                                           coords={"learner": learners}),
                                "control", control=learners[best]),
        wilcoxon=with_assumption(xr.Dataset({key: ("pair", v) for key, v in wil.items()},
                                            coords=pair_coords), "wilcoxon"),
        bayes_signed_rank=with_assumption(xr.Dataset(
            {key: ("pair", bayes[:, c]) for c, key in enumerate(("p_a_better", "p_rope", "p_b_better"))},
            coords=pair_coords), "bayes_signed_rank", rope=float(rope), samples=samples,
            seed=json.dumps(seed)),
        ratio=with_assumption(xr.Dataset(
            {key: ("pair", ratio[:, c]) for c, key in enumerate(("ratio", "ratio_lower", "ratio_upper"))},
            coords=pair_coords), "ratio", level=level, resamples=resamples),
        win_tie_loss=with_assumption(xr.Dataset(
            {key: ("pair", np.asarray([c[m] for c in counts], dtype=np.int64))
             for m, key in enumerate(("wins", "ties", "losses"))}, coords=pair_coords),
            "win_tie_loss", rule=rule),
        warnings=notes,
    )
