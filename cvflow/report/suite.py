"""The report of a suite: the comparison of learners across data sets first, then each data
set's own report (its cube's, as ``cvflow report`` gives it for one data set).

Each learner enters each data set with one number (``estimate``): its nested CV estimate (its
grid tuned by inner K-fold and scored on the outer folds: honest for a tuned learner), or the
K-fold or corrected K-fold estimate of the setting that criterion selects within its grid (the
first best), which for a learner with a grid is optimistic, more so for larger grids; the
report says which. ``auto`` takes nested CV when the store has the nested (pair) splits.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from dask.local import get_sync
from markupsafe import Markup

from ..errors import ComparisonWarning, InputError
from ..estimators import compare_learners, corrected_kfold, kfold, nested_cv
from ..estimators.losses import get_loss
from ..estimators.memory import fits_budget
from ..estimators.np_roles import corrected_repeated_se
from ..store import suite as suite_store
from ..store.cube import open_cube
from . import results as report
from . import suite_criteria
from .page import div, heading
from .plots.suite import critical_difference_figure, dots_figure

ESTIMATES = ("auto", "nested_cv", "kfold", "corrected_kfold")
SELECTION = {
    "nested_cv": "each learner enters a data set with its nested CV estimate (its grid tuned by "
                 "inner K-fold, scored on the outer folds): honest for a tuned learner",
    "kfold": "each learner enters a data set with the K-fold estimate of the setting K-fold "
             "selects; for a learner with a grid this minimum is optimistic (nested CV gives "
             "the honest estimate of a tuned learner)",
    "corrected_kfold": "each learner enters a data set with the corrected K-fold estimate of the "
                       "setting it selects; for a learner with a grid this minimum is optimistic "
                       "(nested CV gives the honest estimate of a tuned learner)",
}


def _learners(cube: xr.Dataset) -> dict[str, np.ndarray]:
    names = np.asarray([str(v) for v in cube["learner"].values])
    return {name: np.flatnonzero(names == name) for name in dict.fromkeys(names)}


def learner_estimates(cube: xr.Dataset, loss: str, estimate: str) -> dict[str, tuple]:
    """learner -> (estimate, se, per-fold losses (repeat, fold) or None, grid size) on one cube.

    ``nested_cv``: the learner's params alone through :func:`cvflow.estimators.nested_cv` (se:
    the corrected repeated K-fold se of its outer-fold scores); ``kfold`` / ``corrected_kfold``:
    the param that estimator selects within the learner (its se; K-fold's fold scores)."""
    sign = get_loss(loss).sign
    out = {}
    if estimate == "nested_cv":
        for name, rows in _learners(cube).items():
            res = nested_cv(cube.isel(param=rows), loss=loss)
            folds = np.asarray(res["outer_score"].values, dtype=float)
            out[name] = (float(res["estimate"]), float(corrected_repeated_se(folds)), folds, rows.size)
        return out
    res = (kfold if estimate == "kfold" else corrected_kfold)(cube, loss=loss)
    est, se = res["estimate"].values, res["se"].values
    fold_score = res["fold_score"].values if "fold_score" in res else None
    for name, rows in _learners(cube).items():
        finite = rows[np.isfinite(est[rows])]
        if not finite.size:
            out[name] = (np.nan, np.nan, None, rows.size)
            continue
        best = int(finite[np.argmin(sign * est[finite])])
        out[name] = (float(est[best]), float(se[best]),
                     None if fold_score is None else np.asarray(fold_score[best], dtype=float), rows.size)
    return out


def _has_pairs(cube: xr.Dataset, loss: str) -> bool:
    try:
        nested_cv(cube.isel(param=[0]), loss=loss)
    except InputError:
        return False
    return True


def _folds(chosen: dict[str, dict], learners: list[str]) -> xr.DataArray | None:
    """Per-fold results (dataset, learner, repeat, fold) when every data set has them in one
    shape (else None: win/tie/loss falls back to the standard errors)."""
    shapes = {v[2].shape if v[2] is not None else None for c in chosen.values() for v in c.values()}
    if len(shapes) != 1 or None in shapes:
        return None
    data = np.stack([np.stack([chosen[d][k][2] for k in learners]) for d in chosen])
    return xr.DataArray(data, dims=("dataset", "learner", "repeat", "fold"),
                        coords={"dataset": list(chosen), "learner": learners})


def compute(store, *, loss: str | None = None, estimate: str = "auto", estimators: list | None = None,
            overrides: dict | None = None, trust_code=False, all_params: bool = False) -> dict:
    """Every data set's report and the cross-data-set comparison of a suite's store.

    ``estimate``: one of ``ESTIMATES`` (see the module's docstring); ``estimators``,
    ``overrides`` and ``all_params``: each data set's report's, as
    :func:`cvflow.report.results.compute` takes them (the learners' numbers across data sets
    come from ``estimate`` whatever the estimators reported). Returns ``{"name",
    "datasets": {data set: (cube, Results)}, "estimates", "se" (pandas DataFrames, data sets x
    learners), "comparison" (LearnerComparison or None), "why" (why there is none), "loss",
    "estimate" (the one used), "tuned" (learners with a grid)}``.
    """
    if estimate not in ESTIMATES:
        raise InputError(f"--suite-estimate: {estimate!r}; use one of {', '.join(ESTIMATES)}")
    labels = suite_store.datasets(store)
    if labels is None:
        raise InputError(f"store: {store} is not a suite's store")
    per: dict[str, tuple] = {}
    chosen: dict[str, dict] = {}
    losses: dict[str, str] = {}
    for label in labels:
        cube = report.workflow_view(open_cube(suite_store.member(store, label)), all_params=all_params)
        losses[label] = loss or cube.attrs["loss"]      # without --loss, each data set's own
        per[label] = (cube, report.compute(cube, estimators, loss=losses[label], overrides=overrides,
                                           trust_code=trust_code, all_params=all_params))
    kinds = list(dict.fromkeys(losses.values()))
    if estimate == "auto":
        estimate = "nested_cv" if all(_has_pairs(cube, losses[label]) for label, (cube, _) in per.items()) \
            else "kfold"
    for label, (cube, _) in per.items():
        try:
            chosen[label] = learner_estimates(cube, losses[label], estimate)
        except InputError as exc:
            raise InputError(f"{store}/{label}: --suite-estimate {estimate}: {exc}") from None
    estimates, se, tuned, comparison, why = _compare(chosen, kinds)
    frame = suite_criteria.table(per)
    return {"name": suite_store.name(store), "datasets": per, "estimates": estimates, "se": se,
            "comparison": comparison, "why": why, "loss": _used(kinds), "estimate": estimate, "tuned": tuned,
            "criteria": frame, "criteria_summary": None if frame is None else suite_criteria.summarize(frame)}


def _used(kinds: list[str]) -> str:
    return kinds[0] if len(kinds) == 1 else "mixed (" + ", ".join(kinds) + ")"


def _compare(chosen: dict[str, dict], kinds: list[str]):
    """(estimates, se (data sets x learners), the tuned learners, the LearnerComparison or
    None, why there is none) of the learners' numbers per data set (:func:`learner_estimates`)
    under the data sets' losses ``kinds``."""
    estimates = pd.DataFrame.from_dict({d: {k: v[0] for k, v in c.items()} for d, c in chosen.items()},
                                       orient="index")
    se = pd.DataFrame.from_dict({d: {k: v[1] for k, v in c.items()} for d, c in chosen.items()},
                                orient="index")
    tuned = sorted({k for c in chosen.values() for k, v in c.items() if v[3] > 1})
    comparison, why = None, None
    signs = {get_loss(kind).sign for kind in kinds}
    better = "lower" if signs == {1.0} else "higher"
    try:
        if len(signs) > 1:
            raise InputError(f"the data sets' losses ({', '.join(kinds)}) are not all losses or all scores")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ComparisonWarning)   # kept in its warnings
            folds = _folds(chosen, [str(c) for c in estimates.columns])
            comparison = compare_learners(estimates, se=se, folds=folds, better=better)
    except InputError as exc:
        why = str(exc)
    return estimates, se, tuned, comparison, why


def dataset_numbers(store, label: str, *, estimate: str = "auto") -> tuple[str, str, dict]:
    """(its loss, the estimate used, :func:`learner_estimates`) of data set ``label`` of the
    suite's store, as :func:`compute` enters it (``auto``: nested CV when its cube has the
    nested splits); what a running suite's page compares as each data set finishes.

    The cube is read whole in this thread (Dask's synchronous scheduler), never through the
    suite's cluster, whose workers are busy with the other data sets' fits: an InputError when
    it is more than the reducers read into memory (``cvflow.reduce.in-memory-bytes``)."""
    cube = report.workflow_view(open_cube(suite_store.member(store, label)))
    if not fits_budget(cube.nbytes):
        raise InputError(f"its cube ({cube.nbytes / 2**20:.0f} MiB) is more than a page reads "
                         "into memory (cvflow.reduce.in-memory-bytes): `cvflow report` compares it")
    cube = cube.load(scheduler=get_sync)
    loss = cube.attrs["loss"]
    if estimate == "auto":
        estimate = "nested_cv" if _has_pairs(cube, loss) else "kfold"
    return loss, estimate, learner_estimates(cube, loss, estimate)


def answer_lines(chosen: dict[str, dict], losses: dict[str, str], estimate: str) -> list[str]:
    """The comparison across the data sets of ``chosen`` (data set -> :func:`learner_estimates`
    under ``estimate``; ``losses``: data set -> its loss) as :func:`text` leads with it: the
    tests, the note on the estimate, the learners' numbers per data set."""
    kinds = list(dict.fromkeys(losses.values()))
    estimates, _, tuned, comparison, why = _compare(chosen, kinds)
    lines = [f"{len(chosen)} data set(s), loss {_used(kinds)}"]
    lines += comparison.describe() if comparison is not None else [f"no comparison across data sets: {why}"]
    lines.append(f"note: {SELECTION[estimate]}" + (f" (tuned here: {', '.join(tuned)})" if tuned else ""))
    lines.append(f"estimates ({estimate}):")
    return lines + ["  " + row for row in estimates.to_string(float_format="{:.4g}".format).splitlines()]


def text(suite: dict) -> str:
    """The text report: the comparison across data sets, then a section per data set."""
    lines = [f"suite {suite['name']}: {len(suite['datasets'])} data sets, loss {suite['loss']}"]
    if suite["comparison"] is not None:
        lines += suite["comparison"].describe()
    else:
        lines.append(f"no comparison across data sets: {suite['why']}")
    if suite["criteria"] is not None:
        lines += suite_criteria.text(suite["criteria"], suite["criteria_summary"], suite["loss"])
    lines.append(f"note: {SELECTION[suite['estimate']]}"
                 + (f" (tuned here: {', '.join(suite['tuned'])})" if suite["tuned"] else ""))
    lines.append(f"estimates ({suite['estimate']}):")
    lines += ["  " + row for row in suite["estimates"].to_string(float_format="{:.4g}".format).splitlines()]
    for label, (cube, results) in suite["datasets"].items():
        lines += ["", f"== data set {label} ==", report.text(cube, results)]
    return "\n".join(lines)


def to_json(suite: dict) -> dict:
    """``{"suite": {...}, "datasets": {data set: its one-data-set report's JSON}}``."""
    comparison = suite["comparison"]
    est = suite["estimates"]
    return {
        "suite": {"name": suite["name"], "loss": suite["loss"], "estimate": suite["estimate"],
                  "selection": SELECTION[suite["estimate"]],
                  "tuned": suite["tuned"],
                  "estimates": {d: {k: (None if not np.isfinite(v) else float(v))
                                    for k, v in est.loc[d].items()} for d in est.index},
                  **(comparison.to_dict() if comparison is not None else {"why": suite["why"]}),
                  **({} if suite["criteria"] is None else
                     {"criteria": suite_criteria.to_json(suite["criteria"], suite["criteria_summary"])})},
        "datasets": {label: report.to_json(results, cube)
                     for label, (cube, results) in suite["datasets"].items()},
    }


def write_html(suite: dict, path: str | Path) -> Path:
    """The suite's self-contained HTML page: the comparison across data sets (its text, the
    critical-difference diagram named ``critical-difference``), each data set's estimates with
    ± 1.96 se as dots (``datasets-dots``), then each data set's text report (``cvflow report
    <store>/<data set> --html`` draws one data set's page)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    path = Path(path)
    path.write_text(file_html(build_layout(suite), INLINE, title=f"cvflow suite report: {suite['name']}"),
                    encoding="utf-8")
    return path


def build_layout(suite: dict):
    """The suite's page as a bokeh column (:func:`write_html`)."""
    from bokeh.layouts import column

    comparison = suite["comparison"]
    est, se = suite["estimates"], suite["se"]
    answer = comparison.describe() if comparison is not None else [f"no comparison: {suite['why']}"]
    if suite["criteria"] is not None:
        answer += suite_criteria.text(suite["criteria"], suite["criteria_summary"], suite["loss"])
    answer.append(f"note: {SELECTION[suite['estimate']]}"
                  + (f" (tuned here: {', '.join(suite['tuned'])})" if suite["tuned"] else ""))
    items = [div(heading(f"Suite {suite['name']}: {len(suite['datasets'])} data sets, loss {suite['loss']}")
                 + heading("The answer across data sets")
                 + Markup("<pre>{}</pre>").format("\n".join(answer)))]
    if comparison is not None:
        items.append(critical_difference_figure(
            {str(k): float(v) for k, v in zip(comparison.mean_rank["learner"].values,
                                              comparison.mean_rank.values)},
            float(comparison.nemenyi["critical_difference"]), float(comparison.friedman.attrs["alpha"])))
    items.append(dots_figure(est.to_numpy(), (est - 1.96 * se).to_numpy(), (est + 1.96 * se).to_numpy(),
                             [str(c) for c in est.columns], [str(i) for i in est.index], loss=suite["loss"]))
    for label, (cube, results) in suite["datasets"].items():
        items.append(div(heading(f"Data set {label}") + Markup("<pre>{}</pre>").format(report.text(cube, results))))
    return column(*items)
