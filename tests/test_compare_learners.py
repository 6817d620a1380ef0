"""compare_learners against its references: scipy.stats (friedmanchisquare, wilcoxon, gmean,
bootstrap), scikit-posthocs (Nemenyi), statsmodels (Holm), baycomp (Bayesian signed-rank),
Demšar 2006's critical-difference numbers, and hand counts."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import stats

from cvflow.errors import ComparisonWarning, InputError
from cvflow.estimators import compare_learners
from cvflow.estimators.np_across import nemenyi

baycomp = pytest.importorskip("baycomp")
sp = pytest.importorskip("scikit_posthocs")
multitest = pytest.importorskip("statsmodels.stats.multitest")


def _table(n=None, k=4, seed=0, ties=False) -> pd.DataFrame:
    # with ties scipy's wilcoxon runs a permutation test up to 13 data sets (2^n statistics):
    # 16 data sets keep the tied tables on its normal approximation unless a test asks
    n = n if n is not None else (16 if ties else 12)
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.6, size=(n, 1))
    values = base * (1 + rng.normal(0, 0.08, size=(n, k)) + np.linspace(0, 0.06, k))
    if ties:
        values = np.round(values, 2)
        values[1, 1] = values[1, 0]
        values[2, k - 1] = values[2, k - 2]
    return pd.DataFrame(values, index=[f"data{i}" for i in range(n)],
                        columns=[f"learner{j}" for j in range(k)])


def _quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ComparisonWarning)
        return compare_learners(*args, **kwargs)


@pytest.mark.parametrize("ties", [False, True])
def test_friedman_and_ranks_equal_scipy(ties):
    table = _table(ties=ties)
    res = _quiet(table)
    ranks = stats.rankdata(table.to_numpy(), axis=1)
    np.testing.assert_allclose(res.mean_rank.values, ranks.mean(axis=0))
    ref = stats.friedmanchisquare(*table.to_numpy().T)
    assert float(res.friedman["statistic"]) == pytest.approx(ref.statistic, rel=1e-12)
    assert float(res.friedman["p_value"]) == pytest.approx(ref.pvalue, rel=1e-10)
    n, k = table.shape
    f = (n - 1) * ref.statistic / (n * (k - 1) - ref.statistic)       # Iman & Davenport 1980
    assert float(res.friedman["f"]) == pytest.approx(f, rel=1e-12)
    assert float(res.friedman["f_p_value"]) == pytest.approx(stats.f.sf(f, k - 1, (k - 1) * (n - 1)))


def test_higher_is_better_ranks_the_largest_first():
    table = _table()
    res = _quiet(-table, better="higher")
    np.testing.assert_allclose(res.mean_rank.values, stats.rankdata(table.to_numpy(), axis=1).mean(axis=0))


@pytest.mark.parametrize("ties", [False, True])
def test_nemenyi_equals_scikit_posthocs(ties):
    table = _table(ties=ties)
    res = _quiet(table)
    ref = sp.posthoc_nemenyi_friedman(table.to_numpy())
    np.testing.assert_allclose(res.nemenyi["p_value"].values, ref.to_numpy(), rtol=1e-9)


def test_critical_difference_equals_demsar_2006():
    # Demšar 2006, Table 5(a): q_0.05 for k = 2..10, and section 3.2.4's example: four
    # classifiers on 14 data sets, CD = 2.569 · sqrt(4·5 / (6·14)) = 1.25
    table5a = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), table5a):
        assert nemenyi(np.arange(1.0, k + 1), 14, 0.05)["q_alpha"] == pytest.approx(q, abs=1e-3)   # the table truncates
    cd = nemenyi(np.array([3.143, 2.000, 2.893, 1.964]), 14, 0.05)["critical_difference"]
    assert cd == pytest.approx(1.25, abs=5e-3)


def test_control_holm_equals_statsmodels():
    table = _table(n=15, k=5, seed=3)
    res = _quiet(table, control="learner4")
    n, k = table.shape
    ranks = stats.rankdata(table.to_numpy(), axis=1).mean(axis=0)
    z = (ranks[:4] - ranks[4]) / np.sqrt(k * (k + 1) / (6 * n))
    p = 2 * stats.norm.sf(np.abs(z))
    adjusted = multitest.multipletests(p, method="holm")[1]
    np.testing.assert_allclose(res.control["z"].values[:4], z)
    np.testing.assert_allclose(res.control["p_adjusted"].values[:4], adjusted)
    assert np.isnan(res.control["p_value"].values[4])
    assert res.control.attrs["control"] == "learner4"
    # default control: the best mean rank
    assert _quiet(table).control.attrs["control"] == table.columns[int(np.argmin(ranks))]


@pytest.mark.parametrize("ties, n, k", [(False, 12, 4), (True, 16, 4), (True, 9, 3)])
def test_wilcoxon_every_pair_equals_scipy_with_holm(ties, n, k):
    table = _table(n=n, k=k, ties=ties)
    res = _quiet(table)
    cols = list(table.columns)
    p = []
    for a, b, stat, mine in zip(res.wilcoxon["a"].values, res.wilcoxon["b"].values,
                                res.wilcoxon["statistic"].values, res.wilcoxon["p_value"].values):
        ref = stats.wilcoxon(table[a], table[b], zero_method="zsplit")
        assert stat == pytest.approx(ref.statistic) and mine == pytest.approx(ref.pvalue)
        p.append(ref.pvalue)
    assert len(p) == len(cols) * (len(cols) - 1) // 2
    np.testing.assert_allclose(res.wilcoxon["p_adjusted"].values, multitest.multipletests(p, method="holm")[1])


@pytest.mark.parametrize("rope", [0.0, 0.01, 0.05])
@pytest.mark.parametrize("better", ["lower", "higher"])
def test_bayes_signed_rank_equals_baycomp(rope, better):
    table = _table(n=10, k=3, seed=5)
    if better == "higher":
        table = 1 - table
    res = _quiet(table, better=better, rope=rope, samples=5000, seed=11)
    for i in range(res.bayes_signed_rank.sizes["pair"]):
        a, b = res.bayes_signed_rank["a"].values[i], res.bayes_signed_rank["b"].values[i]
        x, y = (-table[a], -table[b]) if better == "lower" else (table[a], table[b])
        ref = baycomp.SignedRankTest.probs(x.to_numpy(), y.to_numpy(), rope, nsamples=5000, random_state=11)
        mine = res.bayes_signed_rank.isel(pair=i)
        if rope > 0:
            assert (float(mine["p_a_better"]), float(mine["p_rope"]), float(mine["p_b_better"])) == tuple(ref)
        else:
            assert (float(mine["p_a_better"]), float(mine["p_b_better"])) == tuple(ref)
            assert float(mine["p_rope"]) == 0.0


def test_geometric_mean_ratio_and_bootstrap_interval_against_scipy():
    table = _table(n=13, k=2, seed=2)
    res = _quiet(table, resamples=20000, seed=1)
    ratio = table["learner0"] / table["learner1"]
    assert float(res.ratio["ratio"][0]) == pytest.approx(stats.gmean(ratio), rel=1e-12)
    ref = stats.bootstrap((np.log(ratio.to_numpy()),), np.mean, n_resamples=20000, method="percentile",
                          confidence_level=0.95, rng=np.random.default_rng(7)).confidence_interval
    # two Monte Carlo percentiles of 20,000 resamples: equal to about 1% of the interval's width
    width = np.exp(ref.high) - np.exp(ref.low)
    assert float(res.ratio["ratio_lower"][0]) == pytest.approx(np.exp(ref.low), abs=0.03 * width)
    assert float(res.ratio["ratio_upper"][0]) == pytest.approx(np.exp(ref.high), abs=0.03 * width)


def test_win_tie_loss_by_hand():
    table = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "b": [1.5, 1.0, 3.05, 4.0, 6.0, 5.0]},
                         index=list("uvwxyz"))
    d = table["a"] - table["b"]
    # no intervals: every nonzero difference counts (x ties at 0)
    res = _quiet(table)
    assert [int(res.win_tie_loss[k][0]) for k in ("wins", "ties", "losses")] == [3, 1, 2]
    # se: resolved when |d| > 1.96 sqrt(se_a² + se_b²)
    se = pd.DataFrame(0.2, index=table.index, columns=table.columns)
    res = _quiet(table, se=se)
    resolved = np.abs(d) > stats.norm.ppf(0.975) * np.sqrt(0.08)
    assert int(res.win_tie_loss["wins"][0]) == int(((d < 0) & resolved).sum()) == 1
    assert int(res.win_tie_loss["losses"][0]) == int(((d > 0) & resolved).sum()) == 2
    assert int(res.win_tie_loss["ties"][0]) == 3
    # intervals: a tie when they overlap (|d| ≤ 0.6 here)
    lower, upper = table - 0.3, table + 0.3
    res = _quiet(table, lower=lower, upper=upper)
    assert [int(res.win_tie_loss[k][0]) for k in ("wins", "ties", "losses")] == [1, 3, 2]
    lower, upper = table - 0.2, table + 0.2           # |d| ≤ 0.4
    res = _quiet(-table, lower=-upper, upper=-lower, better="higher")
    assert [int(res.win_tie_loss[k][0]) for k in ("wins", "ties", "losses")] == [2, 2, 2]


def test_win_tie_loss_from_folds_by_the_corrected_t_interval():
    rng = np.random.default_rng(4)
    n, r, k = 8, 2, 5
    folds = rng.normal(0.3, 0.02, size=(n, 2, r, k))
    folds[:4, 0] -= 0.05                                   # a clearly better on four data sets
    da = xr.DataArray(folds, dims=("dataset", "learner", "repeat", "fold"),
                      coords={"dataset": [f"d{i}" for i in range(n)], "learner": ["a", "b"]})
    table = da.mean(("repeat", "fold"))
    res = _quiet(table, folds=da)
    wins = ties = losses = 0
    for i in range(n):
        d = (folds[i, 0] - folds[i, 1]).ravel()
        se = np.sqrt((1 / (r * k) + 1 / (k - 1)) * d.var(ddof=1))     # Nadeau & Bengio
        resolved = abs(d.mean()) > stats.t.ppf(0.975, r * k - 1) * se
        wins += resolved and d.mean() < 0
        losses += resolved and d.mean() > 0
        ties += not resolved
    assert (int(res.win_tie_loss["wins"][0]), int(res.win_tie_loss["ties"][0]),
            int(res.win_tie_loss["losses"][0])) == (wins, ties, losses)
    assert wins >= 4 and "corrected" in res.win_tie_loss.attrs["rule"]


def test_dataframe_and_dataarray_give_the_same_answer():
    table = _table()
    da = xr.DataArray(table.to_numpy().T, dims=("learner", "dataset"),
                      coords={"learner": list(table.columns), "dataset": list(table.index)})
    a, b = _quiet(table, seed=2, samples=2000), _quiet(da, seed=2, samples=2000)
    assert a.to_dict() == b.to_dict()


def test_few_datasets_warns_and_wilcoxon_cannot_reach_005():
    # the reason for the threshold: with 5 data sets the smallest two-sided p is 2/2^5
    assert stats.wilcoxon(np.arange(1.0, 6.0)).pvalue == pytest.approx(0.0625)
    assert stats.wilcoxon(np.arange(1.0, 7.0)).pvalue < 0.05
    with pytest.warns(ComparisonWarning, match="5 data sets: below 6"):
        res = compare_learners(_table(n=5), se=_table(n=5) * 0.01)
    assert "few_datasets" in [w["code"] for w in res.warnings]


def test_ties_and_missing_intervals_warn():
    with pytest.warns(ComparisonWarning) as record:
        res = compare_learners(_table(ties=True))
    codes = {w["code"] for w in res.warnings}
    assert {"tied_ranks", "no_intervals", "zero_differences"} <= codes
    assert len(record) == len(res.warnings)


def test_incomplete_dataset_is_dropped_with_a_warning():
    table = _table()
    table.iloc[3, 1] = np.nan
    with pytest.warns(ComparisonWarning, match="left out: data3"):
        res = compare_learners(table, se=table.fillna(1.0) * 0.01)
    assert res.table.sizes["dataset"] == len(table) - 1


def test_each_result_says_what_it_assumes():
    res = _quiet(_table())
    for name in ("friedman", "nemenyi", "control", "wilcoxon", "bayes_signed_rank", "ratio", "win_tie_loss",
                 "mean_rank"):
        assert getattr(res, name).attrs["assumes"] == res.assumptions()[name]
    assert "pystan" in res.hierarchical
    assert "Friedman" in "\n".join(res.describe())


def test_bad_input_names_the_argument():
    table = _table()
    with pytest.raises(InputError, match="compare_learners.better: 'best'"):
        compare_learners(table, better="best")
    with pytest.raises(InputError, match="compare_learners.control: 'svm' is not a learner"):
        compare_learners(table, control="svm")
    with pytest.raises(InputError, match="compare_learners.table: 1 learner"):
        compare_learners(table[["learner0"]])
    with pytest.raises(InputError, match="compare_learners.table: list"):
        compare_learners([[1, 2], [3, 4]])
    with pytest.raises(InputError, match="give both lower= and upper="):
        compare_learners(table, lower=table)
    with pytest.raises(InputError, match="compare_learners.se: its learners"):
        compare_learners(table, se=table.rename(columns={"learner0": "x"}))
    with pytest.raises(InputError, match="compare_learners.alpha"):
        compare_learners(table, alpha=5)
