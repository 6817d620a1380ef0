"""The familiar flat table: a cube's K-fold scores in scikit-learn's ``cv_results_`` layout.

One row per param, a column per tuned hyperparameter (``param_*``), and per loss the split
scores, their mean, std and rank, as ``GridSearchCV.cv_results_`` holds them, plus the fit
times the store recorded. Nothing is refitted: the test scores are the fold fits' losses on
their test folds, the train scores (``train=True``) the same fits' losses on their own
training sets, both read from the stored predictions.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import xarray as xr

from ..errors import InputError
from ..estimators.losses import Loss, from_scoring

AVERAGES = ("samples", "folds")


def cv_results(source, losses: str | Sequence[str] | None = None, *, average: str = "samples",
               train: bool = False, sign: str = "natural"):
    """The K-fold scores of every param as a pandas DataFrame laid out like ``cv_results_``.

    Parameters
    ----------
    source : str, path, xarray.Dataset or cvflow.study.StudyResult
        A store (path or URL), an opened cube, or a study's results.
    losses : str or list of str, optional
        cvflow losses and metrics (``squared``, ``log_loss``, ``accuracy``, ``f1_macro``,
        ``roc_auc``, ...) or scikit-learn scoring names that equal one
        (``neg_mean_squared_error``, ``neg_log_loss``, ...). As in scikit-learn, one name
        given as a string (or the default, the store's loss) gives columns ``*_test_score``;
        a list gives ``*_test_<name>`` for each.
    average : {"samples", "folds"}, default "samples"
        ``mean_test_*`` of a pointwise loss: the mean over every analysis sample (cvflow's
        K-fold estimate) or the mean of the fold scores (``GridSearchCV``'s
        ``mean_test_score``, equal to it on the same folds). A per-fold metric (accuracy,
        ROC AUC, R², ...) is the mean of its fold values either way.
    train : bool, default False
        Add ``split<k>_train_*``, ``mean_train_*``, ``std_train_*``: each fold fit scored on
        its own training set (``return_train_score=True``), from the predictions the store
        already holds.
    sign : {"natural", "score"}, default "natural"
        "natural": each column in the sign of the name asked (see Notes); "score": every
        column "greater is better", scikit-learn's convention for scores (a loss is negated,
        as ``neg_mean_squared_error`` is; ``cvflow.SearchCV`` reports this way).

    Returns
    -------
    pandas.DataFrame
        One row per param (index ``param``, the cube's param index): ``mean_fit_time``,
        ``std_fit_time`` (seconds of each fold fit, its prediction of every sample
        included), ``learner`` (when the study has several), ``param_<name>`` for every
        tuned hyperparameter (None where a learner lacks it), ``params`` (the tuned settings,
        a dict), then per loss ``split<k>_test_*`` (k = repeat · K + fold, as scikit-learn
        numbers the splits of a repeated K-fold), ``mean_test_*``, ``std_test_*`` (over the
        splits, ``ddof=0``), ``rank_test_*`` (1 = best, ties share the smallest rank, a param
        with a missing fit ranks last) and the train columns. ``DataFrame.attrs`` holds
        ``losses`` (column suffix -> cvflow loss), ``greater_is_better`` (suffix -> bool) and
        ``average``.

    Notes
    -----
    Signs: each column keeps the sign of the name it was asked by. A cvflow loss is reported
    as itself (``squared``: the mean squared error, smaller is better, rank 1 the smallest);
    a scikit-learn ``neg_*`` name as scikit-learn reports it (``neg_mean_squared_error``:
    minus the mean squared error, larger is better). Either way ``rank_test_*`` ranks the best
    param first. There are no ``*_score_time`` columns: scoring is a reduction of stored
    predictions, timed by nobody.

    Examples
    --------
    >>> table = cvflow.cv_results("study.zarr", ["squared", "r2"], average="folds")  # doctest: +SKIP
    >>> table.sort_values("rank_test_squared").head()                              # doctest: +SKIP
    """
    import pandas as pd

    from ..estimators._cube import shared_terms

    if average not in AVERAGES:
        raise InputError(f"cv_results: average={average!r}; use 'samples' or 'folds'")
    if sign not in ("natural", "score"):
        raise InputError(f"cv_results: sign={sign!r}; use 'natural' or 'score'")
    cube, default = _cube_of(source)
    single = losses is None or isinstance(losses, str)
    names = [losses or default] if single else list(losses)
    if not names:
        raise InputError("cv_results: losses: give at least one loss, e.g. ['squared']")
    columns: dict[str, Any] = {}
    times = _fold_values(cube, cube["fit_seconds"])
    columns["mean_fit_time"] = times.mean(axis=1)
    columns["std_fit_time"] = times.std(axis=1)
    columns.update(_param_columns(cube))
    info: dict[str, str] = {}
    better: dict[str, bool] = {}
    with shared_terms(cube, ("fold",)):
        for name in names:
            decl, factor = _loss(cube, name)
            if sign == "score" and not decl.greater_is_better:
                factor = -1.0
            suffix = "score" if single else (name if name is not None else decl.label)
            if suffix in info:
                raise InputError(f"cv_results: losses: {suffix!r} is given twice")
            info[suffix], better[suffix] = decl.label, decl.greater_is_better != (factor < 0)
            test, mean, tr = _scores(cube, decl, average, train)
            _store(columns, f"test_{suffix}", factor * test, factor * mean,
                   rank=-factor * decl.sign)
            if train:
                _store(columns, f"train_{suffix}", factor * tr, factor * tr.mean(axis=1))
    table = pd.DataFrame(columns, index=pd.RangeIndex(int(cube.sizes["param"]), name="param"))
    table.attrs.update({"losses": info, "greater_is_better": better, "average": average})
    return table


def _cube_of(source) -> tuple[xr.Dataset, str | None]:
    """The cube of ``source`` and the default loss its results use (None: the store's)."""
    if isinstance(source, xr.Dataset):
        return source, None
    result = getattr(source, "result_", source)           # a fitted cvflow.SearchCV
    if hasattr(result, "cube"):                           # a StudyResult
        return result.cube, getattr(result, "loss", None)
    if isinstance(source, (str, Path)):
        from ..store.cube import open_cube

        return open_cube(source), None
    raise InputError(f"cv_results: {type(source).__name__} is not a store, a cube or a study "
                     "result; give a store path, cvflow.open(path) or Study.run's result")


def _loss(cube: xr.Dataset, name) -> tuple[Loss, float]:
    """A name's cvflow loss (checked against the cube) and the factor to scikit-learn's sign."""
    from ..estimators._cube import cube_loss

    factor = 1.0
    if isinstance(name, str) and name.startswith(("neg_", "roc_auc_")):
        decl, factor = from_scoring(name, where="cv_results: losses")
        name = decl
    return cube_loss(cube, name), factor


def _scores(cube: xr.Dataset, decl: Loss, average: str, train: bool):
    """(test scores (P, splits), their mean (P,), train scores (P, splits) or None)."""
    from ..estimators import kfold
    from ..estimators._cube import role_terms
    from ..estimators.fold_metrics import metric_terms
    from ..estimators._readers import fold_sizes

    result = kfold(cube, loss=decl, average=average)
    test = result["fold_score"].values.reshape(result.sizes["param"], -1)
    mean = result["estimate"].values
    if not train:
        return test, mean, None
    if decl.pointwise:
        terms = role_terms(cube, decl, roles=("fold",), what="cv_results")
        n_d = float((~np.asarray(cube["is_test"].values, dtype=bool)).sum())
        sizes = fold_sizes(cube)
        tr = (terms["fold_risk"] * n_d - terms["fold_sum"]) / (n_d - sizes)
    else:
        tr = metric_terms(cube, decl, roles=("fold", "train"), what="cv_results")["train_metric"]
    return test, mean, tr.reshape(len(tr), -1)


def _store(columns: dict, key: str, splits: np.ndarray, mean: np.ndarray, rank: float = 0.0):
    """scikit-learn's ``_store``: split columns, mean, std (ddof=0) and (``rank`` != 0, the
    sign that makes larger better) the rank, NaN means ranked last."""
    from scipy.stats import rankdata

    for k in range(splits.shape[1]):
        columns[f"split{k}_{key}"] = splits[:, k]
    columns[f"mean_{key}"] = mean
    columns[f"std_{key}"] = np.sqrt(((splits - splits.mean(axis=1, keepdims=True)) ** 2)
                                    .mean(axis=1))
    if rank:
        goodness = rank * mean
        if np.isnan(goodness).all():
            columns[f"rank_{key}"] = np.ones(len(mean), dtype=np.int32)
        else:
            goodness = np.where(np.isnan(goodness), np.nanmin(goodness) - 1, goodness)
            columns[f"rank_{key}"] = rankdata(-goodness, method="min").astype(np.int32)


def _fold_values(cube: xr.Dataset, values: xr.DataArray) -> np.ndarray:
    """``values`` (param, split) at the fold splits: (P, R·K), repeat-major."""
    from ..estimators._cube import at_splits, require

    picked = at_splits(values, require(cube, "fold_split", "cv_results"))
    return np.asarray(picked.values, dtype=np.float64).reshape(picked.shape[0], -1)


def _param_columns(cube: xr.Dataset) -> dict[str, Any]:
    """``learner`` (several learners), ``param_<name>`` per tuned name, ``params``."""
    workflow = json.loads(cube.attrs.get("workflow") or "{}")
    tuned: list[str] = []
    for entry in workflow.get("learners") or []:
        grid = entry.get("grid") or {}
        for one in grid if isinstance(grid, list) else [grid]:
            tuned += [str(k) for k in one if str(k) not in tuned]
    settings = [json.loads(str(t)) for t in np.asarray(cube["param_json"].values)]
    out: dict[str, Any] = {}
    learners = [str(s["learner"]) for s in settings]
    if len(set(learners)) > 1:
        out["learner"] = learners
    for name in tuned:
        out[f"param_{name}"] = [s["params"].get(name) for s in settings]
    out["params"] = [{k: s["params"][k] for k in tuned if k in s["params"]} for s in settings]
    return out
