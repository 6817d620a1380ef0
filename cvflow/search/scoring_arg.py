"""``SearchCV``'s scorings that need the fitted model (issue 31 item 3): scorer objects,
callables, dicts and lists of them, scikit-learn scoring names without a cvflow loss, and
``scoring=None`` with an estimator whose ``score`` is its own. They become the study's
``scorers`` (:class:`cvflow.Study`), computed where each fit runs and stored in the cube; a
scoring name with a cvflow loss stays a loss, scored from the stored predictions.
"""
from __future__ import annotations

import warnings
from typing import Any

from sklearn.base import ClassifierMixin, RegressorMixin, is_classifier
from sklearn.metrics import get_scorer, get_scorer_names

from ..estimators.losses import DECLARED, from_scoring
from .inputs import Scorings
from ..fitting.scoring import accepts_sample_weight, estimator_score


def has_loss(name: str) -> bool:
    """Whether a scoring name is a cvflow loss or a scikit-learn name that equals one."""
    return name.partition(":")[0] in DECLARED or any(name in d.scorers for d in DECLARED.values())


def split(named: dict) -> tuple[dict[str, str], dict[str, Any]]:
    """(name -> loss name, name -> fit-time scorer) of ``named`` (name -> scoring); a string
    that is neither is refused as scikit-learn refuses it."""
    losses, scorers = {}, {}
    for name, value in named.items():
        if isinstance(value, str) and has_loss(value):
            losses[name] = value
        elif isinstance(value, str) and value in get_scorer_names():
            scorers[name] = value                   # a scikit-learn name without a cvflow loss
        elif isinstance(value, str):
            raise ValueError(f"{value!r} is not a valid scoring value. Use "
                             "sklearn.metrics.get_scorer_names() to get valid options (SearchCV "
                             "also takes cvflow loss names, docs/guide/metrics.md)")
        elif callable(value):
            scorers[name] = value
        else:
            raise ValueError(f"SearchCV: scoring {name!r}: {value!r} is not a scoring name, a "
                             "scorer object or a callable (estimator, X, y) -> float")
    return losses, scorers


def resolved(sc: Scorings) -> Scorings:
    """``sc`` with the cvflow loss of each scoring it scores from the stored predictions
    (``decls``): the one place a ``fit`` turns a scoring name into a loss."""
    return sc._replace(decls={name: from_scoring(s, where=f"SearchCV: scoring {s!r}")[0]
                              for name, s in sc.losses.items()})


def scorer_name(scorer, taken: dict) -> str:
    """The name of a scorer object in a list of scorings: its metric's or function's name."""
    func = getattr(scorer, "_score_func", scorer)
    base = getattr(func, "__name__", type(scorer).__name__)
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


# DESIGN CHOICE: scikit-learn classes that override score only to document it (or to take
# X=None) are still the mixins' accuracy / R²: scored from the stored predictions as a loss
_MIXIN_SCORES = ("KNeighborsClassifier", "RadiusNeighborsClassifier", "KNeighborsRegressor",
                 "RadiusNeighborsRegressor", "DummyClassifier", "DummyRegressor")


def _score_owner(cls: type) -> type | None:
    """The class whose ``score`` method ``cls`` has: the first in its MRO to define one."""
    # DESIGN CHOICE: compared by the class that defines it, not by the method: Pipeline.score
    # is an available_if descriptor, which makes a new function on every class attribute
    # access (Pipeline.score is not Pipeline.score), so every Pipeline read as having a score
    # of its own: scored at fit time, with a trial fit to learn its keys, and refused by the
    # selectors and racing that reduce stored predictions.
    return next((k for k in cls.__mro__ if "score" in vars(k)), None)


def own_score(estimator) -> str | None:
    """scoring=None: the cvflow loss the estimator's ``score`` equals (scikit-learn's
    ``ClassifierMixin.score`` is accuracy, ``RegressorMixin.score`` R²; a Pipeline's is its
    last step's), or None when its ``score`` is its own (computed at fit time). TypeError, as
    ``GridSearchCV``'s, when it has none."""
    from sklearn.pipeline import Pipeline

    if not hasattr(estimator, "score"):
        raise TypeError("If no scoring is specified, the estimator passed should have a 'score' "
                        f"method. The estimator {estimator!r} does not.")
    last = estimator
    while isinstance(last, Pipeline) and _score_owner(type(last)) is Pipeline:
        last = last.steps[-1][1]
    same = _score_owner(type(last)) in (ClassifierMixin, RegressorMixin) or (
        type(last).__module__.startswith(("sklearn.neighbors.", "sklearn.dummy"))
        and type(last).__name__ in _MIXIN_SCORES)
    if same and is_classifier(estimator) and is_classifier(last):
        return "accuracy"
    if same and not is_classifier(estimator) and not is_classifier(last):
        return "r2"
    return None


def check(sc: Scorings, select: str, racing, search=None, sample_weight=None) -> None:
    """A scorer computed at fit time selects only as GridSearchCV does (kfold: the best mean
    fold score); the other selectors and racing reduce stored predictions with a loss. With
    ``sample_weight``, GridSearchCV's warning for each scorer that does not take them."""
    for name, scorer in sc.scorers.items() if sample_weight is not None else ():
        scorer = as_scorer(scorer)
        if not accepts_sample_weight(scorer):
            what = f"{name}={scorer}" if len(sc.names) > 1 else f"{scorer}"
            warnings.warn(f"The scoring {what} does not support sample_weight, which may lead "
                          f"to statistically incorrect results when fitting {search} with "
                          "sample_weight. ", UserWarning, stacklevel=3)
    if sc.key not in sc.scorers:
        return
    what = "scoring" if sc.key == "score" else f"scoring {sc.key!r}"
    if select != "kfold":
        raise ValueError(f"SearchCV: select={select!r} reduces stored predictions with a loss, "
                         f"but {what} is a scorer computed at fit time; use select='kfold' (the "
                         "best mean fold score, as GridSearchCV) or a scoring with a cvflow loss "
                         "(docs/guide/searchcv.md)")
    if racing not in (None, False):
        raise ValueError(f"SearchCV: racing compares per-sample losses, but {what} is a scorer "
                         "computed at fit time; give a pointwise scoring such as "
                         "neg_mean_squared_error, neg_log_loss or accuracy")


def as_scorer(scoring):
    """A scoring as a callable (estimator, X, y): a scikit-learn name through get_scorer."""
    return get_scorer(scoring) if isinstance(scoring, str) else scoring


def returned(sc: Scorings, cube, refit) -> Scorings:
    """The scorings as the fits returned them: a callable scoring that returned a dict of
    scores (on the trial fit, then every fit: the cube's scorer coordinate holds its keys) is
    multi-metric, as GridSearchCV's, with ``refit`` naming the key that selects."""
    stored = [str(s) for s in cube["scorer"].values] if "scorer" in cube.coords else []
    if sc.multimetric or sc.names != ["score"] or "score" not in sc.scorers \
            or stored in ([], ["score"]):
        return sc
    if not (isinstance(refit, str) and refit in stored) and refit is not False \
            and not callable(refit):
        raise ValueError("For multi-metric scoring, the parameter refit must be set to a "
                         "scorer key or a callable to refit an estimator with the best "
                         "parameter setting on the whole data and make the best_* attributes "
                         "available for that metric. If this is not needed, refit should be "
                         f"set to False explicitly. {refit!r} was passed (SearchCV: the "
                         f"scoring returned {stored})")
    return Scorings(stored, refit if isinstance(refit, str) else stored[0], {}, sc.scorers, True)


def dict_callable(sc: Scorings) -> bool:
    """A callable scoring whose dict of scores is the scorings (:func:`returned`)."""
    return not sc.losses and list(sc.scorers) == ["score"] and sc.names != ["score"]


def several_targets(sc: Scorings, scoring) -> Scorings:
    """The scorings of a target with several columns (multioutput, multilabel): the cube stores
    no prediction of such a model, so each scoring is computed at fit time as GridSearchCV
    computes it (``scoring=None``: the estimator's own ``score``; a scikit-learn name: its
    scorer). A cvflow loss without a scikit-learn scorer is refused with one line."""
    scorers = dict(sc.scorers)
    for name, loss in sc.losses.items():
        if scoring is None:
            scorers[name] = estimator_score
        elif loss in get_scorer_names():
            scorers[name] = loss
        else:
            raise ValueError(f"SearchCV: scoring {loss!r} is a cvflow loss of one target per "
                             "sample, and y has several (multioutput or multilabel); give a "
                             "scikit-learn scoring name or scorer")
    return sc._replace(losses={}, decls={}, scorers=scorers)
