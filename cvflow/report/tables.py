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
from typing import Any, Mapping, Sequence

import numpy as np
from ..lazy import xarray as xr
import pandas as pd

from ..errors import InputError
from ..estimators.losses import Loss
from ..store.memory import MemoryCube
from ..estimators.split_scores import (fold_splits, fold_values, rank as rank_of, scoring_loss,
                                       split_scores, spread, with_error_score)

AVERAGES = ("samples", "folds")


def cv_results(source, losses: str | Sequence[str] | None = None, *, average: str = "samples",
               train: bool = False, sign: str = "natural", error_score: float = np.nan,
               weighted: bool = True):
    """The K-fold scores of every param as a pandas DataFrame laid out like ``cv_results_``.

    Parameters
    ----------
    source : str, path, xarray.Dataset or cvflow.study.StudyResult
        A store (path or URL), an opened cube, or a study's results.
    losses : str, list of str or dict, optional
        cvflow losses and metrics (``squared``, ``log_loss``, ``accuracy``, ``f1_macro``,
        ``roc_auc``, ...) or scikit-learn scoring names that equal one
        (``neg_mean_squared_error``, ``neg_log_loss``, ...), read from the stored
        predictions; or the names of the store's scorers (its ``scorer`` coordinate: scores
        computed where each fit ran, :class:`cvflow.Study`'s ``scorers``), read from its
        ``score`` (a scorer's name goes first: it is what the study computed). As in
        scikit-learn, one name given as a string (or the default, the store's loss) gives
        columns ``*_test_score``; a list gives ``*_test_<name>`` for each, a dict
        ``{column name: loss or scorer}`` ``*_test_<column name>``.
    average : {"samples", "folds"}, default "samples"
        ``mean_test_*`` of a pointwise loss: the mean over every analysis sample (cvflow's
        K-fold estimate) or the mean of the fold scores (``GridSearchCV``'s
        ``mean_test_score``, equal to it on the same folds). A per-fold metric (accuracy,
        ROC AUC, R², ...) and a scorer are the mean of their fold values either way.
    train : bool, default False
        Add ``split<k>_train_*``, ``mean_train_*``, ``std_train_*``: each fold fit scored on
        its own training set (``return_train_score=True``), from the predictions the store
        already holds (a scorer's: its stored ``train_score``, when the study asked for it).
    sign : {"natural", "score"}, default "natural"
        "natural": each column in the sign of the name asked (see Notes); "score": every
        column "greater is better", scikit-learn's convention for scores (a loss is negated,
        as ``neg_mean_squared_error`` is; ``cvflow.SearchCV`` reports this way).
    error_score : float, default NaN
        The split score of a fit that failed (``GridSearchCV``'s ``error_score``), in the
        column's sign. NaN: the failed fit's split is NaN, so its param's mean is NaN and ranks
        last. A number: its param's mean is the mean of its split scores, that number included.
    weighted : bool, default True
        With a store that holds ``sample_weight``, score each split with those weights (the
        weighted mean of a pointwise loss over the fold, a metric's ``sample_weight``), as
        ``GridSearchCV`` scores when ``fit`` is given ``sample_weight``. The mean over the
        splits stays unweighted (as scikit-learn's); ``average="samples"`` is the weighted mean
        over every analysis sample.

    Returns
    -------
    pandas.DataFrame
        One row per param (index ``param``, the cube's param index): ``mean_fit_time``,
        ``std_fit_time`` (seconds of each fold fit, its prediction of every sample
        included), ``mean_score_time``, ``std_score_time`` (seconds this call spent scoring
        each fold fit's stored test predictions, every loss together, plus the store's
        ``score_time`` where it has one; 0 for a failed fit),
        ``learner`` (when the study has several), ``param_<name>`` for every tuned
        hyperparameter (None where a learner lacks it), ``params`` (the tuned settings, a
        dict), then per loss ``split<k>_test_*`` (k = repeat · K + fold, as scikit-learn
        numbers the splits of a repeated K-fold), ``mean_test_*``, ``std_test_*`` (over the
        splits, ``ddof=0``), ``rank_test_*`` (1 = best, ties share the smallest rank, a NaN
        mean ranks last) and the train columns. ``DataFrame.attrs`` holds ``losses`` (column
        suffix -> cvflow loss, or ``scorer <name>``), ``greater_is_better`` (suffix -> bool),
        ``average`` and ``weighted``.

    Notes
    -----
    Signs: each column keeps the sign of the name it was asked by. A cvflow loss is reported
    as itself (``squared``: the mean squared error, smaller is better, rank 1 the smallest);
    a scikit-learn ``neg_*`` name as scikit-learn reports it (``neg_mean_squared_error``:
    minus the mean squared error, larger is better). Either way ``rank_test_*`` ranks the best
    param first. A scorer's values are as it returned them (scikit-learn's sign, greater is
    better, whatever ``sign``); with ``sample_weight`` it was given the weights where it ran,
    if it takes them.

    Each split score is its fold fit's alone: a param whose fit failed on one split keeps its
    other splits' scores (``GridSearchCV``'s rule), unlike the cube's estimators, which make
    every term of such a param NaN.

    Examples
    --------
    >>> table = cvflow.cv_results("study.zarr", ["squared", "r2"], average="folds")  # doctest: +SKIP
    >>> table.sort_values("rank_test_squared").head()                              # doctest: +SKIP
    """
    if average not in AVERAGES:
        raise InputError(f"cv_results: average={average!r}; use 'samples' or 'folds'")
    if sign not in ("natural", "score"):
        raise InputError(f"cv_results: sign={sign!r}; use 'natural' or 'score'")
    if isinstance(error_score, bool) or not isinstance(error_score, (int, float, np.number)):
        raise InputError(f"cv_results: error_score={error_score!r}; give a number (NaN: a "
                         "failed fit's split is NaN)")
    cube, default = _cube_of(source)
    single = losses is None or isinstance(losses, (str, Loss))
    if isinstance(losses, Mapping):
        given = list(losses.items())
    else:
        given = [("score", losses or default)] if single else [(n, n) for n in losses]
    if not given:
        raise InputError("cv_results: losses: give at least one loss, e.g. ['squared']")
    columns: dict[str, Any] = {}
    times = fold_values(cube, cube["fit_seconds"])
    columns["mean_fit_time"] = times.mean(axis=1)
    columns["std_fit_time"] = times.std(axis=1)
    failed, _, _ = fit_records(cube)
    weights = (np.asarray(cube["sample_weight"].values, dtype=np.float64)
               if weighted and "sample_weight" in cube else None)
    info: dict[str, str] = {}
    better: dict[str, bool] = {}
    scored: list[tuple[str, Loss, float]] = []
    stored = [str(s) for s in cube["scorer"].values] if "scorer" in cube.coords else []
    order: list[tuple[str, str | None]] = []      # (suffix, scorer name or None: a loss)
    for key, name in given:
        if isinstance(name, str) and name in stored:      # computed where each fit ran
            suffix = str(key)
            if suffix in info:
                raise InputError(f"cv_results: losses: {suffix!r} is given twice")
            info[suffix], better[suffix] = f"scorer {name}", True
            order.append((suffix, name))
            continue
        decl, factor = scoring_loss(cube, name)
        if sign == "score" and not decl.greater_is_better:
            factor = -1.0
        suffix = str(key) if key is not None else decl.label
        if suffix in info:
            raise InputError(f"cv_results: losses: {suffix!r} is given twice")
        info[suffix], better[suffix] = decl.label, decl.greater_is_better != (factor < 0)
        scored.append((suffix, decl, factor))
        order.append((suffix, None))
    # only scorers: nothing read from the stored predictions
    scores, seconds = (split_scores(cube, [d for _, d, _ in scored], train=train, weights=weights)
                       if scored else ([], np.zeros(failed.shape)))
    if "score_time" in cube:        # a store's scorers, timed where each fit ran: theirs too
        seconds += np.nan_to_num(fold_values(cube, cube["score_time"]))
    seconds[failed] = 0.0
    columns["mean_score_time"] = seconds.mean(axis=1)
    columns["std_score_time"] = seconds.std(axis=1)
    columns.update(_param_columns(cube))
    losses_scored = {suffix: (decl, factor, values)
                     for (suffix, decl, factor), values in zip(scored, scores)}
    for suffix, scorer in order:
        if scorer is not None:
            test, mean, tr, rank = _scorer_scores(cube, scorer, train) + (1.0,)
        else:
            decl, factor, (test, pooled, tr) = losses_scored[suffix]
            test = factor * test
            mean = test.mean(axis=1) if average == "folds" or pooled is None else factor * pooled
            tr, rank = None if tr is None else factor * tr, -factor * decl.sign
        test, mean = with_error_score(test, mean, failed, error_score)
        _store(columns, f"test_{suffix}", test, mean, rank=rank)
        if train:
            tr, _ = with_error_score(tr, tr.mean(axis=1), failed, error_score)
            _store(columns, f"train_{suffix}", tr, tr.mean(axis=1))
    table = pd.DataFrame(columns, index=pd.RangeIndex(int(cube.sizes["param"]), name="param"))
    table.attrs.update({"losses": info, "greater_is_better": better, "average": average,
                        "weighted": weights is not None})
    return table


def _scorer_scores(cube: xr.Dataset, name: str, train: bool):
    """(test (P, S), their mean, train (P, S) or None) of a scorer, from the stored
    ``score`` (``train_score``): computed where each fit ran."""
    test = fold_values(cube, cube["score"].sel(scorer=name))
    if not train:
        return test, test.mean(axis=1), None
    if "train_score" not in cube:
        raise InputError(f"cv_results: train=True, but the store holds no train scores of "
                         f"scorer {name!r}; run the study with train_scores=True "
                         "(SearchCV: return_train_score=True)")
    return test, test.mean(axis=1), fold_values(cube, cube["train_score"].sel(scorer=name))


def fit_records(source) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the store recorded of each fold fit: ``failed`` (P, splits) bool, ``error`` (P,
    splits) str ("" where the fit did not fail) and ``seconds`` (P, splits, its fit and
    predictions), splits numbered as :func:`cv_results` numbers them."""
    cube, _ = _cube_of(source)
    index = fold_splits(cube)
    failed = np.asarray(cube["failed"].values, dtype=bool)[:, index]
    error = (np.asarray(cube["error"].values, dtype=object)[:, index] if "error" in cube
             else np.full(failed.shape, "", dtype=object))
    seconds = np.asarray(cube["fit_seconds"].values, dtype=np.float64)[:, index]
    return failed, np.where(failed, error.astype(str), ""), seconds


def _cube_of(source) -> tuple[xr.Dataset, str | None]:
    """The cube of ``source`` and the default loss its results use (None: the store's)."""
    if isinstance(source, (str, Path)):
        from ..store.cube import open_cube

        return open_cube(source), None
    result = getattr(source, "result_", source)           # a fitted cvflow.SearchCV
    readable = getattr(result, "readable", None)   # a StudyResult: a cube in memory is read
    if readable is not None:                       # as it is (no Dataset, no xarray)
        return readable, getattr(result, "loss", None)
    if hasattr(result, "cube"):
        return result.cube, getattr(result, "loss", None)
    if isinstance(source, MemoryCube) or isinstance(source, xr.Dataset):
        return source, None
    raise InputError(f"cv_results: {type(source).__name__} is not a store, a cube or a study "
                     "result; give a store path, cvflow.open(path) or Study.run's result")


def _store(columns: dict, key: str, splits: np.ndarray, mean: np.ndarray, rank: float = 0.0):
    """scikit-learn's ``_store``: split columns, mean, std (ddof=0) and (``rank`` != 0, the
    sign that makes larger better) the rank, NaN means ranked last."""
    for k in range(splits.shape[1]):
        columns[f"split{k}_{key}"] = splits[:, k]
    columns[f"mean_{key}"] = mean
    columns[f"std_{key}"] = spread(splits)
    if rank:
        columns[f"rank_{key}"] = rank_of(rank * mean)


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


# -- scikit-learn's presentation of a search (cvflow.SearchCV) -----------------------------------

def param_arrays(candidates: list[dict]) -> dict[str, np.ma.MaskedArray]:
    """``param_<name>`` masked arrays of ``GridSearchCV.cv_results_``, in the order the names
    first appear, with its dtype rule: numpy's dtype of the values when that is 1-d and not a
    string, else object; masked where a candidate lacks the name."""
    values: dict[str, dict[int, Any]] = {}
    for i, params in enumerate(candidates):
        for name, value in params.items():
            values.setdefault(f"param_{name}", {})[i] = value
    out = {}
    for key, given in values.items():
        try:
            arr = np.array(list(given.values()))
            dtype = arr.dtype if arr.dtype.kind != "U" and arr.ndim == 1 else np.dtype(object)
        except ValueError:                           # sequences of several lengths
            dtype = np.dtype(object)
        column = np.ma.MaskedArray(np.empty(len(candidates), dtype=dtype), mask=True)
        for i, value in given.items():
            column[i] = value                        # unmasks it
        out[key] = column
    return out


def failure_message(failed: np.ndarray, errors: np.ndarray, error_score) -> str:
    """scikit-learn's report of failed fits (``_warn_or_raise_about_fit_failures``): "All the N
    fits failed" or "k fits failed out of a total of N", then each group of messages (grouped
    up to the numbers they embed, :func:`cvflow.report.failures.group`)."""
    from .failures import group     # a search whose fits all ran never loads it (issue 41)

    summary = "\n".join(f"{'-' * 80}\n{g['count']} fits failed with the following error:\n"
                        f"{message}" for message, g in group(errors[failed]).items())
    details = f"\n\nBelow are more details about the failures:\n{summary}"
    if failed.all():
        return (f"\nAll the {failed.size} fits failed.\nIt is very likely that your model is "
                "misconfigured.\nYou can try to debug the error by setting error_score='raise'."
                + details)
    return (f"\n{int(failed.sum())} fits failed out of a total of {failed.size}.\nThe score on "
            f"these train-test partitions for these parameters will be set to {error_score}.\n"
            "If these failures are not expected, you can try to debug them by setting "
            "error_score='raise'." + details)


def fit_lines(results: dict, candidates: list[dict], seconds: np.ndarray, scorings: list[str], *,
              verbose: int, multimetric: bool, train: bool) -> list[str]:
    """``GridSearchCV``'s ``[CV] END`` line of each fit (its ``verbose`` > 1 levels) from a
    ``cv_results_`` dict and the fits' seconds (P, splits); the total time adds the candidate's
    mean score time."""
    lines = []
    n_splits = seconds.shape[1]
    for h, params in enumerate(candidates):
        for s in range(n_splits):
            where = f" {s + 1}/{n_splits}" if verbose > 2 else ""
            where += f"; {h + 1}/{len(candidates)}" if verbose > 9 else ""
            head = f"[CV{where}] END "
            text = ", ".join(f"{k}={params[k]}" for k in sorted(params))
            text += ";" if text else ""
            if verbose > 2:
                scores = {n: (results[f"split{s}_train_{n}"][h] if train else None,
                              results[f"split{s}_test_{n}"][h]) for n in scorings}
                text += _scores_text(scores, multimetric)
            spent = seconds[h, s] + results["mean_score_time"][h]
            text += f" total time={_short_time(spent)}"
            lines.append(head + "." * (80 - len(head) - len(text)) + text)
    return lines


def _scores_text(scores: dict[str, tuple], multimetric: bool) -> str:
    if multimetric:
        return "".join(f" {name}: (" + (f"train={tr:.3f}, " if tr is not None else "")
                       + f"test={te:.3f})" for name, (tr, te) in scores.items())
    (tr, te), = scores.values()
    return ", score=" + (f"(train={tr:.3f}, test={te:.3f})" if tr is not None else f"{te:.3f}")


def _short_time(seconds: float) -> str:
    """joblib's short time format, as GridSearchCV's lines show it."""
    return f"{seconds / 60:4.1f}min" if seconds > 60 else f" {seconds:5.1f}s"
