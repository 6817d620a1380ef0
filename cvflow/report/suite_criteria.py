"""Selection criteria across data sets: the papers' summary rows.

Cory-Wright & Gómez and Aghbalou et al. compare ways of choosing a param, not learners: on each
data set with a held-out test set, the test risk of the full fit of the param each criterion
selects (a report's summary rows, :mod:`cvflow.report.summary`), against the plain K-fold's
choice. Across data sets: the geometric mean of (criterion's test risk) / (K-fold's test risk)
with a percentile bootstrap interval over data sets (Cory-Wright & Gómez's summary: 0.96 is a
4% lower test MSE on average, a "change" of +4%), and on how many data sets the criterion's
choice tests lower / the same / higher. When the data sets' fold counts differ, also per K
(Aghbalou et al. tabulate by K). Like every cross-data-set statistic this treats the data sets
as independent draws: the same data set at two K, or two splits of one data set, are not.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ..estimators.np_across import geometric_mean_ratio
from . import summary

BASELINES = ("kfold", "corrected_kfold: plain K-fold")
LEVEL = 0.95
RESAMPLES = 10_000


def folds_of(cube: xr.Dataset) -> int:
    """K: the number of folds of the cube's first repeat (test samples are fold -1)."""
    return int(np.asarray(cube["fold"].values)[0].max()) + 1


def _best(results: dict) -> float:
    """The lowest test risk over the grid (an oracle no criterion can beat), NaN if none."""
    for result in results.values():
        if "full_test_risk" in result and result["full_test_risk"].dims == ("param",):
            values = np.asarray(result["full_test_risk"].values, dtype=float)
            return float(np.nanmin(values)) if np.isfinite(values).any() else np.nan
    return np.nan


def table(per: dict[str, tuple]) -> pd.DataFrame | None:
    """One row per data set (``per``: label -> (cube, Results)): ``K``, ``best`` and, per
    criterion with a test risk, ``<criterion>`` (its choice's test risk) and ``<criterion>
    chosen``; the baseline column is named ``kfold``. None unless every data set has a held-out
    test risk for the plain K-fold's choice and for one other criterion."""
    records = {}
    for label, (cube, results) in per.items():
        row: dict = {"K": folds_of(cube), "best": _best(results)}
        for r in summary.rows(cube, results):
            if r.get("test_risk") is None or r.get("param") is None:
                continue
            name = "kfold" if r["criterion"] in BASELINES else r["criterion"]
            row.setdefault(name, r["test_risk"])
            row.setdefault(f"{name} chosen", r["chosen"])
        records[label] = row
    frame = pd.DataFrame.from_dict(records, orient="index")
    criteria = names(frame)
    if "kfold" not in frame or frame["kfold"].isna().any() or not criteria:
        return None
    first = ["K", "best", "kfold", "kfold chosen"]
    return frame[first + [c for c in frame.columns if c not in first]]


def names(frame: pd.DataFrame) -> list[str]:
    """The criteria compared with the K-fold choice: the frame's test risk columns but kfold."""
    return [str(c) for c in frame.columns
            if c not in ("K", "best", "kfold") and not str(c).endswith(" chosen")]


def summarize(frame: pd.DataFrame, *, seed: int = 0) -> list[dict]:
    """Per criterion against the K-fold choice, over all data sets and, when K varies, per K:
    ``{"criterion", "K" (None: all), "datasets", "ratio", "ratio_lower", "ratio_upper",
    "change" (1 - ratio), "lower", "same", "higher"}`` (data sets where the criterion's choice
    tests lower / equal / higher than the K-fold's)."""
    groups: list[tuple[int | None, pd.DataFrame]] = [(None, frame)]
    if frame["K"].nunique() > 1:
        groups += [(int(k), frame[frame["K"] == k]) for k in sorted(frame["K"].unique())]
    out = []
    for name in names(frame):
        for k, part in groups:
            part = part[part[name].notna()]
            a, b = part[name].to_numpy(float), part["kfold"].to_numpy(float)
            ratio, low, high = (geometric_mean_ratio(a, b, level=LEVEL, resamples=RESAMPLES, seed=seed)
                                if a.size else (np.nan,) * 3)
            out.append({"criterion": name, "K": k, "datasets": int(a.size), "ratio": ratio,
                        "ratio_lower": low, "ratio_upper": high, "change": 1.0 - ratio,
                        "lower": int(np.sum(a < b)), "same": int(np.sum(a == b)),
                        "higher": int(np.sum(a > b))})
    return out


def text(frame: pd.DataFrame, rows: list[dict], loss: str) -> list[str]:
    """The section of the suite's text report."""
    lines = [f"selection criteria across data sets: the held-out test risk ({loss}) of each "
             "criterion's choice against the plain K-fold's (geometric mean of the ratios over data sets, "
             f"{LEVEL:.0%} bootstrap interval; change = 1 - ratio, + is better than K-fold):"]
    for r in rows:
        scope = "all data sets" if r["K"] is None else f"K = {r['K']}"
        lines.append(f"  {r['criterion']} vs kfold, {scope} ({r['datasets']}): ratio {r['ratio']:.4f} "
                     f"[{r['ratio_lower']:.4f}, {r['ratio_upper']:.4f}], change {100 * r['change']:+.1f}%; "
                     f"lower / same / higher test risk on {r['lower']} / {r['same']} / {r['higher']}")
    if frame["K"].nunique() > 1:
        lines.append("  (a data set at several K, or several splits of one, is one data set: over such cubes "
                     "the interval, which treats them as independent, is too narrow)")
    lines.append("  test risk of each choice per data set (best: the grid's lowest, an oracle):")
    lines += ["    " + row for row in frame.to_string(float_format="{:.5g}".format).splitlines()]
    return lines


def to_json(frame: pd.DataFrame, rows: list[dict]) -> dict:
    def plain(v):
        if isinstance(v, (float, np.floating)):
            return float(v) if np.isfinite(v) else None
        return v.item() if isinstance(v, np.generic) else v

    return {"baseline": "kfold", "level": LEVEL, "summary": [{k: plain(v) for k, v in r.items()} for r in rows],
            "datasets": {str(d): {str(k): plain(v) for k, v in frame.loc[d].items()} for d in frame.index}}
