"""How a ``GridSearchCV`` call becomes a cvflow study: the task, the stored output, the
splitter and the grid order; the client that runs it; a failed fit fitted again here."""
from __future__ import annotations

import sys
from typing import Any, NamedTuple
from copy import copy

import numpy as np
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.model_selection import PredefinedSplit
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import type_of_target

from ..estimators.losses import Loss
from ..execution.sizing import scan_soon
from ..fitting.learners import fit_params_of, n_rows, sample_weight_key


class Scorings(NamedTuple):
    """``SearchCV``'s scorings: ``names`` (in order; with several, the ``cv_results_`` column
    suffixes), ``key`` (the one that selects), ``losses`` (name -> cvflow loss or scikit-learn
    scoring name: scored from the stored predictions), ``scorers`` (name -> scorer computed
    where each fit runs and stored in the cube: :mod:`cvflow.search.scoring_arg`),
    ``multimetric`` (``cv_results_`` columns named after the scorings) and ``decls`` (name ->
    the cvflow loss of each of ``losses``, resolved once per ``fit``:
    :func:`cvflow.search.scoring_arg.resolved`; its sign is the loss's own ``greater_is_better``)."""

    names: list[str]
    key: str
    losses: dict[str, str]
    scorers: dict[str, Any]
    multimetric: bool = False
    decls: dict[str, Loss] = {}


def task_of(estimator, losses: list[Loss], y: np.ndarray) -> str:
    """The study's task: the estimator's type, else the scorings' task, else the target's."""
    if is_classifier(estimator):
        return "classification"
    if is_regressor(estimator):
        return "regression"
    tasks = {d.task for d in losses if d.task is not None}
    if len(tasks) == 1:
        return tasks.pop()

    return "classification" if type_of_target(y) in ("binary", "multiclass") else "regression"


def check_task(estimator, scoring: str, decl: Loss, task: str) -> None:
    """ValueError when ``scoring`` is for another task than the study's."""
    if decl.task is not None and decl.task != task:
        kind = ("a classifier" if is_classifier(estimator) else "a regressor"
                if is_regressor(estimator) else f"scored as {task}")
        raise ValueError(f"SearchCV: scoring {scoring!r} is a {decl.task} score, and "
                         f"{type(estimator).__name__} is {kind}")


def refit_failed(cube, X, y, estimator, params: dict, split: int, fit_params: dict) -> None:
    """Fit ``params`` on the training set of fold split ``split`` of the cube, in this process:
    a failure raises the learner's own exception (``error_score="raise"``)."""
    index = int(np.asarray(cube["fold_split"].values).ravel()[split])
    rows = np.flatnonzero(np.asarray(cube["train"].values[index], dtype=bool))

    model = clone(estimator).set_params(**clone(params, safe=False))
    extra = fit_params_of(fit_params, n_rows(X), rows)
    model.fit(rows_of(X, rows), None if y is None else y[rows], **weights_for(model, extra))


def weights_for(model, fit_params: dict) -> dict:
    """``fit_params`` with ``sample_weight`` under the name the fold fits gave it (a Pipeline's
    last step: :func:`cvflow.fitting.learners.sample_weight_key`)."""
    params = dict(fit_params)
    if params.get("sample_weight") is not None:
        params[sample_weight_key(model)] = params.pop("sample_weight")
    return params


def rows_of(X, rows: np.ndarray):
    """The rows of X: a DataFrame, a sparse matrix, an array or a list of rows."""
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    if hasattr(X, "tocsr"):
        return X.tocsr()[rows]
    return np.asarray(X)[rows]


def sorted_grid(param_grid):
    """The grid with its names sorted: cvflow expands a grid in its names' order (last fastest),
    ``ParameterGrid`` in sorted order; sorted, the candidates come in the same order."""
    if isinstance(param_grid, dict):
        return {k: list(param_grid[k]) for k in sorted(param_grid)}
    return [sorted_grid(g) for g in param_grid]


#: GridSearchCV's words for a search with no candidate or no split
NO_FITS = "No fits were performed. Was the CV iterator empty? Were there no candidates?"


def splitter_of(cv, X, y, groups):
    """A splitter cvflow can store: scikit-learn's own splitter classes as they are; anything
    else (an iterable of splits, a custom class) as the ``PredefinedSplit`` of its test folds,
    which must partition the samples (one repeat)."""
    module = type(cv).__module__
    if module.startswith("sklearn.") and not type(cv).__name__.startswith("_"):
        return seeded(cv)
    labels = np.full(len(y) if y is not None else len(X), -1)
    count = 0
    for j, (_, test) in enumerate(cv.split(X, y, groups)):
        if (labels[test] >= 0).any():
            raise ValueError("SearchCV: cv tests some samples twice; cvflow needs test folds "
                             "that partition the samples (KFold, StratifiedKFold, GroupKFold, ...)")
        labels[test] = j
        count += 1
    if count == 0:
        raise ValueError(NO_FITS)
    expected = cv.get_n_splits(X, y, groups)
    if count != expected:            # GridSearchCV's check and words
        raise ValueError(f"cv.split and cv.get_n_splits return inconsistent results. Expected "
                         f"{expected} splits, got {count}")
    if (labels < 0).any():
        raise ValueError("SearchCV: cv never tests some samples; cvflow needs test folds that "
                         "partition the samples (KFold, StratifiedKFold, GroupKFold, ...)")
    return PredefinedSplit(labels)


def seeded(cv):
    """``cv``, or a copy seeded from numpy's global random state when it shuffles without a
    ``random_state`` (``KFold(shuffle=True)``, ``ShuffleSplit()``, the Repeated splitters).

    DESIGN CHOICE: GridSearchCV draws such folds once per ``fit`` from numpy's global random
    state; a study needs its folds named in its store, so SearchCV draws a seed from that same
    state once per ``fit`` (``numpy.random.seed`` before it makes it reproducible, as for
    GridSearchCV) and the store records the seeded splitter.
    """
    if getattr(cv, "random_state", 0) is not None or not getattr(cv, "shuffle", True):
        return cv

    out = copy(cv)
    out.random_state = int(check_random_state(None).randint(np.iinfo(np.int32).max))
    return out


def output_of(estimator, candidates: list[dict], losses: list[Loss], n_classes: int,
            task: str, numeric_labels: bool = True) -> str | None:
    """The stored output that serves every loss and that every candidate has, as scikit-learn's
    scorers call it: predict where every loss reads labels (accuracy, f1: scikit-learn's label
    scorers call predict, which an SVC's argmax of decision_function does not always equal),
    else decision_function, else predict_proba; predict first for an estimator that is no
    classifier. None for regression. Labels that are no numbers (``numeric_labels`` false)
    cannot be stored as predict's output: decision_function or predict_proba then."""
    if task != "classification":
        return None
    order = ("decision_function", "predict_proba", "predict")
    # only scorers computed at fit time: any output serves (they score the model itself)
    allowed = set.intersection(*[set(d.multiclass_outputs or d.outputs if n_classes > 2
                                     else d.outputs) for d in losses]) if losses else set(order)
    # DESIGN CHOICE: GridSearchCV's answer over a richer cube: labels are what its scorer
    # scores (measured: SVC on digits, 8 Cs: best_score_ 0.97163 from the argmax of the stored
    # decision_function against GridSearchCV's 0.97219 from predict); a study that wants
    # probabilities or scores kept for reanalysis asks for a loss that reads them
    if not is_classifier(estimator) or (losses and "predict" in allowed and numeric_labels):
        order = ("predict",) + order[:2]
    # every candidate, not the estimator given: a Pipeline whose None step the grid fills, an
    # SVC whose grid sets probability=True
    try:
        models = [clone(estimator).set_params(**clone(c, safe=False)) for c in candidates]
    except (ValueError, TypeError):          # a grid set_params refuses: its fits will say so
        models = [estimator]
    for output in order:
        if output in allowed and all(hasattr(m, output) for m in models or [estimator]):
            return output
    if not losses:            # the scorers need none: predict, stored where it is one array
        return "predict"
    names = ", ".join(d.label for d in losses)
    raise ValueError(f"SearchCV: no output of {type(estimator).__name__} serves every scoring "
                     f"({names}); score them in separate searches")


def fitting_here(cluster) -> None:
    """Starts the scan of the BLAS libraries (:func:`cvflow.execution.sizing.scan_soon`) when
    ``cluster`` fits in this process: ``auto`` (timed here first), ``threads``, or None
    without a distributed client to find (:func:`default_client`)."""
    if cluster in ("auto", "threads") or (cluster is None and "distributed" not in sys.modules):
        scan_soon()


def default_client(cluster):
    """The default ``distributed.Client`` of this process when ``cluster`` is None, else None.

    DESIGN CHOICE: a search inside ``cross_validate`` is cloned and fitted once per outer fold;
    with ``auto`` each fit would start (and stop) its own worker processes. A Client the user
    opened around the nested CV is used by every one of them instead (as dask-ml's searches
    use the default client). Only looked for when distributed is already imported.
    """
    if cluster is not None or "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:                    # no client
        return None
