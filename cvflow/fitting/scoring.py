"""Scorers applied where a fit runs: a fitted model scored on the samples its split does not
train on (and, when asked, on its training rows), as ``GridSearchCV`` scores each fit.

The scorers travel with every block's task (:class:`Scoring`), by value: a ``Scoring`` pickles
its scorers with cloudpickle, as ``distributed`` pickles what it sends, so a lambda or a function
of ``__main__`` reaches a worker process or an isolated fit's child process as it reaches a thread.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable
import inspect
import pickle

import numpy as np


def take(X, rows: np.ndarray):
    """Rows of X as scikit-learn's ``_safe_indexing`` gives them (its name is private): a
    pandas object (or anything with ``iloc``) by position, a list as a list, a numpy array or
    sparse matrix by fancy indexing. ``rows`` is a boolean mask or positions; None stays None
    (no target)."""
    if X is None:
        return None
    rows = np.asarray(rows)
    index = np.flatnonzero(rows) if rows.dtype == bool else rows
    if hasattr(X, "iloc"):
        return X.iloc[index]
    if isinstance(X, list):
        return [X[i] for i in index]
    if isinstance(X, tuple):
        return tuple(X[i] for i in index)
    return X[index]


def estimator_score(estimator, X, y=None, sample_weight=None) -> float:
    """The estimator's own ``score(X, y)``: ``GridSearchCV``'s scoring when none is given
    (``score(X)`` without a target; with ``sample_weight`` when its ``score`` takes them)."""
    target = () if y is None else (y,)
    if sample_weight is None or not accepts_sample_weight(estimator.score):
        return estimator.score(X, *target)
    return estimator.score(X, *target, sample_weight=sample_weight)


def _scoring(scorers: bytes, analysis: np.ndarray, train: bool, keys: dict) -> Scoring:
    return Scoring(pickle.loads(scorers), analysis, train, keys)


@dataclass(repr=False, eq=False)
class Scoring:
    """The scorers of a study's fits: name -> ``scorer(estimator, X, y) -> float``, the analysis
    samples (bool, (n,)), whether the training rows are scored too, and ``keys``: for a scorer
    that returns a dict of scores (as ``GridSearchCV`` takes a callable scoring), the keys it
    returns, each stored as a score of its own (:func:`cvflow.fitting.trial.scorer_keys`)."""

    scorers: dict[str, Callable]
    analysis: np.ndarray
    train: bool = False
    keys: dict[str, list[str]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The stored scores' names (the ``scorer`` coordinate): each scorer's, or its keys."""
        return [k for name in self.scorers for k in self.keys.get(name, [name])]

    def __reduce__(self):
        # DESIGN CHOICE: cloudpickle, as distributed uses for what plain pickle cannot send by
        # reference: a lambda or a function of the client's __main__ is sent by value, so it
        # runs in a worker process and in an isolated fit's child process
        # (tests/test_scorers.py::test_scorers_of_main_run_on_worker_processes)
        import cloudpickle

        return _scoring, (cloudpickle.dumps(self.scorers), self.analysis, self.train, self.keys)

    def nan(self, n_cells: tuple[int, ...] = ()) -> np.ndarray:
        return np.full(n_cells + (len(self.names),), np.nan)


@dataclass(repr=False, eq=False)
class Scores:
    """One fit's scores: ``test`` (scorers,), ``train`` (scorers,) or None, the seconds the
    test scoring took, and the messages of scorers that raised (their score is NaN)."""

    test: np.ndarray
    train: np.ndarray | None
    seconds: float
    errors: list[str] = field(default_factory=list)


def none(scoring: Scoring) -> Scores:
    """The scores of a fit that failed: NaN, no time (``GridSearchCV``'s score time of a
    failed fit is 0)."""
    return Scores(scoring.nan(), scoring.nan() if scoring.train else None, 0.0)


def accepts_sample_weight(scorer) -> bool:
    """Whether a scorer takes ``sample_weight`` (as ``GridSearchCV`` decides it)."""
    if hasattr(scorer, "_accept_sample_weight"):
        return bool(scorer._accept_sample_weight())

    try:
        return "sample_weight" in inspect.signature(scorer).parameters
    except (TypeError, ValueError):
        return False


def score_fit(scoring: Scoring, model, X, y, train: np.ndarray, sample_weight=None) -> Scores:
    """Score ``model`` (fitted on the rows ``train``) with every scorer on the analysis samples
    it was not trained on, and on its training rows with ``scoring.train``. A split without
    such samples (the full fit) scores NaN; a scorer that raises or returns no number scores
    NaN and says why. With ``sample_weight`` (the study's, (n,)) a scorer that takes
    ``sample_weight`` gets the weights of the rows it scores, as ``GridSearchCV`` gives them."""
    errors: list[str] = []
    t0 = time.perf_counter()
    test = _apply(scoring, model, X, y, scoring.analysis & ~train, errors, sample_weight)
    seconds = time.perf_counter() - t0
    on_train = (_apply(scoring, model, X, y, scoring.analysis & train, errors, sample_weight)
                if scoring.train else None)
    return Scores(test, on_train, seconds, errors)


def _apply(scoring: Scoring, model, X, y, rows: np.ndarray, errors: list[str],
           sample_weight=None) -> np.ndarray:
    out = scoring.nan()
    if not rows.any():
        return out
    index = np.flatnonzero(rows)
    Xr, yr = take(X, index), take(y, index)
    weights = None if sample_weight is None else np.asarray(sample_weight)[index]
    k = 0
    for name, scorer in scoring.scorers.items():
        keys = scoring.keys.get(name)
        try:
            kwargs = ({"sample_weight": weights}
                      if weights is not None and accepts_sample_weight(scorer) else {})
            # without a target, as GridSearchCV: scorer(estimator, X)
            value = scorer(model, Xr, *(() if yr is None else (yr,)), **kwargs)
            if keys is None and isinstance(value, dict):
                raise TypeError(f"returned a dict ({', '.join(map(str, value))}) but one number "
                                "on the trial fit; give each score its own scorer")
            if keys is None:
                out[k] = float(value)
            elif not isinstance(value, dict) or set(map(str, value)) != set(keys):
                got = (sorted(map(str, value)) if isinstance(value, dict)
                       else type(value).__name__)
                raise TypeError(f"returned {got}, not a dict of {keys} as on the trial fit")
            else:
                values = {str(key): v for key, v in value.items()}
                out[k:k + len(keys)] = [float(values[key]) for key in keys]
        except Exception as exc:  # noqa: BLE001 - a failing scorer is data, as a failing fit
            errors.append(f"scorer {name!r}: {type(exc).__name__}: {exc}".splitlines()[0][:500])
        k += len(keys or [name])
    return out
