"""Trial fits before a study runs: each learner once on a small subsample of the data.

A learner that cannot fit the data at all (a Pipeline whose middle step is no transformer,
a ColumnTransformer naming a column the data lack, ``numpy.log`` of negative targets) is
refused with one line before any store exists, instead of failing every fit of the study;
a learner whose predictions change from run to run (an unset ``random_state``) is warned about.
"""
from __future__ import annotations

import contextlib
import logging
import warnings

import numpy as np

from ..errors import InputError, ReproducibilityWarning
from .learners import columns, fit_model, pairwise, predict_output, take
from ..workflow.params import Param
from ..workflow.scorer_specs import is_sklearn_scorer

log = logging.getLogger(__name__)

# DESIGN CHOICE: small enough to cost little next to the study (a few ms for linear models),
# large enough that a OneHotEncoder or an imputer sees most categories and missing values.
TRIAL_SAMPLES = 100
_IN_TRIAL = False


def in_trial() -> bool:
    """True while a trial fit runs (a learner that counts its fits can leave these out)."""
    return _IN_TRIAL


@contextlib.contextmanager
def trial_running():
    """Mark the fits inside as trial fits (the pre-run check, the timing of fits): not the
    study's fits, which :func:`in_trial` lets a learner tell apart."""
    global _IN_TRIAL
    _IN_TRIAL = True
    try:
        yield
    finally:
        _IN_TRIAL = False


def trial_rows(y: np.ndarray, is_test: np.ndarray, task: str, size: int = TRIAL_SAMPLES
               ) -> np.ndarray:
    """A boolean mask of at most ``size`` analysis samples, drawn with seed 0; for
    classification each class gets its share (at least two samples where it has them)."""
    rng = np.random.default_rng(0)
    analysis = np.flatnonzero(~is_test)
    if task == "classification":
        picks = []
        for label in np.unique(y[analysis]):
            rows = analysis[y[analysis] == label]
            k = max(2, round(size * rows.size / analysis.size))
            picks.append(rng.permutation(rows)[:k])
        chosen = np.concatenate(picks)
    else:
        chosen = rng.permutation(analysis)[:size]
    mask = np.zeros(y.shape[0], dtype=bool)
    mask[chosen] = True
    return mask


def _unset_random_states(model) -> list[str]:
    return sorted(k for k, v in model.get_params(deep=True).items()
                  if (k == "random_state" or k.endswith("__random_state")) and v is None)


def _trial(param: Param, X, y, rows: np.ndarray, sample_weight, positive,
           scored: bool = False, model_out: list | None = None) -> np.ndarray | None:
    """The trial's predictions; with ``scored`` (the study has scorers) None when they cannot
    be stored: the fits are then scored, not predicted (cvflow.fitting.learners.fit_and_score).
    The fitted model is appended to ``model_out`` when given."""
    with trial_running():
        model = fit_model(param, X, y, rows, sample_weight)
        if model_out is not None:
            model_out.append(model)
        try:
            X_rows = take(X, rows)
            return predict_output(model, columns(X_rows, rows) if pairwise(model) else X_rows,
                                  param.output, positive)
        except Exception as exc:  # noqa: BLE001 - with scorers, the fit is what matters
            if not scored:
                raise
            log.warning("learner %r: its predictions cannot be stored (%s: %s); its fits are "
                        "scored by the study's scorers only", param.learner,
                        type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
            return None


def scorer_keys(scorers: dict, model, X, y, rows: np.ndarray) -> dict[str, list[str]]:
    """The scores each scorer that returns a dict of them names, from one call on a trial
    model: ``{scorer name: [its keys]}`` (a scorer that returns one number, or raises, is
    left out). scikit-learn's scorers and scoring names return one number: not called."""
    index = np.flatnonzero(rows)
    # a pairwise learner is scored from its columns of the trial rows, as its fits are
    Xr = take(columns(X, rows) if pairwise(model) else X, index)
    out = {}
    for name, scorer in scorers.items():
        if isinstance(scorer, str) or is_sklearn_scorer(scorer):
            continue
        try:
            with trial_running():
                value = scorer(model, Xr, *(() if y is None else (take(y, index),)))
        except Exception as exc:  # noqa: BLE001 - a scorer failing here scores NaN in the fits
            log.debug("scorer %r on a trial fit: %s", name, exc)
            continue
        if isinstance(value, dict) and value:
            out[name] = [str(k) for k in value]
    return out


def wants_keys(scorers: dict) -> bool:
    """Whether a scorer may return a dict of scores (a callable that is no scikit-learn scorer):
    its keys are learned on a trial fit before the run (:func:`scorer_keys`)."""
    return any(not (isinstance(s, str) or is_sklearn_scorer(s)) for s in scorers.values())


def scorer_probe(workflow, data) -> dict[str, list[str]]:
    """:func:`scorer_keys` on the first trial model that fits (each learner's first grid point
    in turn), without the check (``execution.trial_fits: false``): a learner that does not
    fit is left to its fits; no fit at all, no keys."""
    if not wants_keys(workflow.scorers):
        return {}
    rows = trial_rows(data.y, data.is_test, workflow.task)
    seen: set[str] = set()
    for param in workflow.params:
        if param.learner in seen:
            continue
        seen.add(param.learner)
        try:
            with trial_running():
                model = fit_model(param, data.fit_X, data.fit_y, rows, data.sample_weight)
        except Exception as exc:  # noqa: BLE001 - its fits say why
            log.debug("scorer probe: learner %r does not fit (%s)", param.learner, exc)
            continue
        return scorer_keys(workflow.scorers, model, data.fit_X, data.fit_y, rows)
    return {}


def check_learners(workflow, data, where: str) -> dict[str, list[str]]:
    """Fit each learner's first grid point on :func:`trial_rows` (InputError if it cannot).

    A first grid point that fails is retried at the learner's middle and last grid points:
    one bad hyperparameter value is a failed fit recorded in the store, not a refused study.
    A learner with an unset ``random_state`` is fitted twice; if the predictions differ, a
    :class:`~cvflow.errors.ReproducibilityWarning` names it (set random_state, or
    ``execution.fit_seed`` to derive one per fit).

    Returns the keys of the scorers that return a dict of scores (:func:`scorer_keys`, on
    the first learner's trial model): the store holds one score per key.
    """
    rows = trial_rows(data.y, data.is_test, workflow.task)
    X, y = data.fit_X, data.fit_y
    scored = bool(workflow.config.get("scorers"))
    keys: dict[str, list[str]] | None = None
    by_learner: dict[str, list[Param]] = {}
    for p in workflow.params:
        by_learner.setdefault(p.learner, []).append(p)
    for i, (name, params) in enumerate(by_learner.items()):
        first_error = None
        for param in dict.fromkeys([0, len(params) // 2, len(params) - 1]):
            try:
                models: list = []
                pred = _trial(params[param], X, y, rows, data.sample_weight, data.positive,
                              scored, models)
            except Exception as exc:  # noqa: BLE001 - any failure of the trial is reported
                first_error = first_error or exc
                continue
            if first_error is not None:
                log.warning("learner %r: its first grid point failed a trial fit (%s); other "
                            "points fit", name, first_error)
            _check_reproducible(params[param], X, data, rows, pred, name, scored)
            if scored and keys is None:
                keys = scorer_keys(workflow.scorers, models[0], X, y, rows)
            break
        else:
            message = f"{type(first_error).__name__}: {first_error}".splitlines()[0][:300]
            raise InputError(f"{where}: learners[{i}] ({name}): a trial fit on "
                             f"{int(rows.sum())} samples failed: {message}")
    return keys or {}


def _check_reproducible(param: Param, X, data, rows, pred: np.ndarray | None, name: str,
                        scored: bool = False) -> None:
    if param.fit_seed is not None or pred is None:
        return
    unset = _unset_random_states(param.build())
    if not unset:
        return
    again = _trial(param, X, data.fit_y, rows, data.sample_weight, data.positive, scored)
    if not np.array_equal(pred, again, equal_nan=True):
        warnings.warn(f"learner {name!r}: two fits on the same rows predict differently "
                      f"({', '.join(unset)} unset), so reruns and resumed runs will differ; set "
                      "random_state, or execution.fit_seed (Study(fit_seed=...)) to derive "
                      "one per (param, split)", ReproducibilityWarning, stacklevel=2)
