"""``SearchCV``'s scikit-learn callbacks (``set_callbacks``, scikit-learn >= 1.9), called as
``GridSearchCV`` calls them.

scikit-learn's protocol (``sklearn.callback``; ``BaseSearchCV.fit`` and ``_fit_and_score``): the
search's root task (``fit``) has the subtasks ``search`` and, with ``refit``,
``refit-with-best-params``; ``search`` has one ``candidate-split-evaluation`` leaf per
(candidate, split), ``task_id = candidate * n_splits + split``. Each evaluation's context is
propagated to the fit's clone (``propagate_callback_context``: auto-propagated callbacks such as
``ProgressBar`` reach the sub-estimator's own tasks), ``on_fit_task_begin`` is called with the
search as ``estimator`` and the training rows (``X``, ``y``, ``metadata={"sample_weight": ...}``)
before the fit, ``on_fit_task_end`` after it, a failed fit included.

DESIGN CHOICE: cvflow fits in Dask tasks, on threads of this process or in worker processes, as
``GridSearchCV`` fits in joblib's. As there, every context is made here before the run (a
context's children are not made concurrently) and travels with the fits (``Param.fit_hook``);
in a worker process the callbacks are copies, and sending what they record back is theirs to
do (scikit-learn's own callbacks do: ``ProgressBar``, ``ScoringMonitor``). The evaluations are
``GridSearchCV``'s (the candidates on the CV splits); the fits cvflow adds (the full fit of each
candidate, the fold-pair fits of nested selectors, the timing fits before a run) call no hook
and run without the estimator's own callbacks, so every callback is called exactly as under
``GridSearchCV``.
"""
from __future__ import annotations

import contextlib
import uuid
import weakref
from typing import Any

import numpy as np
from sklearn.base import clone
from ..fitting.trial import in_trial


def _key(train) -> bytes:
    """A training set as a dictionary key (its boolean mask of the samples, packed)."""
    return np.packbits(np.asarray(train, dtype=bool)).tobytes()


def _mask(rows, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[np.asarray(rows)] = True
    return mask


def wanted(search) -> bool:
    """Whether a fit of ``search`` has callbacks to call: its own, a meta-estimator's above it
    (``_parent_callback_ctx``), or those set on an estimator it fits (the estimator, its steps,
    an estimator of the grid). Without any, the fits run without hooks (and cvflow's path
    kernels stay on).

    DESIGN CHOICE: scikit-learn has no public accessor of an estimator's callbacks; the
    protocol's own attribute names are read (never written): ``_skl_callbacks``, which
    ``set_callbacks`` sets and ``clone`` passes on, and ``_parent_callback_ctx``, which
    ``CallbackContext.propagate_callback_context`` sets. Without them every search would give up
    the path kernels for callbacks that are not there.
    """
    if hasattr(search, "_skl_callbacks") or hasattr(search, "_parent_callback_ctx"):
        return True
    grid = getattr(search, "param_grid", None) or getattr(search, "param_distributions", {})
    grids = grid if isinstance(grid, (list, tuple)) else [grid]
    values = [v for g in grids if isinstance(g, dict) for vs in g.values()   # not yet checked
              if isinstance(vs, (list, tuple, np.ndarray)) for v in vs]
    objects = [search.estimator, *_params(search.estimator).values(), *values]
    return any(hasattr(o, "_skl_callbacks") for o in objects)


def _params(estimator) -> dict:
    get = getattr(estimator, "get_params", None)
    return get(deep=True) if callable(get) and not isinstance(estimator, type) else {}


def _silence(model) -> None:
    """``model`` (a fresh clone) and the estimators in it without the callbacks set on them:
    the fits cvflow makes beside GridSearchCV's (timing fits before a run, the full fit of each
    candidate its selectors read) are not the search's evaluations, so the estimator's own
    callbacks see exactly the fits they see under GridSearchCV."""
    for obj in [model, *_params(model).values()]:
        if hasattr(obj, "_skl_callbacks"):
            obj.set_callbacks()


def _adopt(model, original) -> None:
    """``model``'s estimators (itself, its steps, ...) get the callbacks of their counterparts
    in ``original``, the search's estimator as this hook holds it: the user's own instances in
    this process, copies pickled from them in a worker process.

    DESIGN CHOICE: the study's params may reach the fits as copies unpickled in this process
    (distributed's in-process workers), and a callback unpickled in the process that made it is
    a new instance by scikit-learn's design (``ScoringMonitor`` opens a listener of its own):
    without this, the rows a ScoringMonitor on the estimator recorded in the fits were lost, on
    threads and on worker processes alike (tests/test_search_callbacks.py). GridSearchCV's fits
    share the instances.
    """
    mine, theirs = {"": model, **_params(model)}, {"": original, **_params(original)}
    for key, obj in mine.items():
        src = theirs.get(key)
        callbacks = getattr(src, "_skl_callbacks", None)
        if callbacks and type(obj) is type(src) and hasattr(obj, "set_callbacks"):
            obj.set_callbacks(*callbacks)


# the hooks of the searches running in this process, by token: a hook unpickled in the process
# that made it (an in-process distributed worker) is the original, its search and contexts too
_LIVE: weakref.WeakValueDictionary[str, Evaluations] = weakref.WeakValueDictionary()


class Evaluations:
    """One candidate's hook around its fits (``Param.fit_hook``): the evaluation context of each
    CV training set, entered when a fit trains on one of them."""

    def __init__(self, search, contexts: dict[bytes, Any]):
        self.search = search
        self.contexts = contexts
        self.token = uuid.uuid4().hex
        _LIVE[self.token] = self

    def __getstate__(self):
        # DESIGN CHOICE: a worker process gets the search's parameters (and callbacks), not its
        # fitted attributes of an earlier fit (a cube read lazily from a store it may not see)
        return {**self.__dict__, "search": clone(self.search)}

    def __setstate__(self, state):
        live = _LIVE.get(state["token"])
        self.__dict__.update(state if live is None else live.__dict__)

    @contextlib.contextmanager
    def __call__(self, model, train, X, y, sample_weight):
        # a fit before the run (timing) or one GridSearchCV does not make (cvflow's full fit)
        ctx = None if in_trial() else self.contexts.get(_key(train))
        if ctx is None:
            _silence(model)
            yield
            return
        _adopt(model, self.search.estimator)
        metadata = None if sample_weight is None else {"sample_weight": sample_weight}
        try:
            with ctx.propagate_callback_context(model):
                ctx.call_on_fit_task_begin(estimator=self.search, X=X, y=y, metadata=metadata)
                yield
        finally:
            ctx.call_on_fit_task_end(estimator=self.search, X=X, y=y, metadata=metadata)


class SearchTasks:
    """The task tree of one ``SearchCV.fit``, made in ``fit`` before the run; does nothing when
    there is no callback to call (:func:`wanted`).

    DESIGN CHOICE: ``_init_callback_context`` is the method scikit-learn's callback protocol
    documents for an estimator's root task (``CallbackSupportMixin``), the one its third-party
    example calls; everything else is ``sklearn.callback``'s public ``CallbackContext``.
    """

    def __init__(self, search, X, y, sample_weight=None):
        self.search, self.X, self.y = search, X, y
        self.metadata = None if sample_weight is None else {"sample_weight": sample_weight}
        self.active = wanted(search)
        if self.active:
            self.root = search._init_callback_context(
                max_subtasks=1 + (search.refit is not False))
            self.root.call_on_fit_task_begin(estimator=search, X=X, y=y, metadata=self.metadata)

    def hooks(self, n_candidates: int, splitter, X, y, groups) -> list[Evaluations] | None:
        """Start the ``search`` task; each candidate's hook over the training sets of
        ``splitter``'s splits (in split order), None without callbacks."""
        if not self.active:
            return None
        trains = [train for train, _ in splitter.split(X, y, groups)]
        n_samples = X.shape[0] if hasattr(X, "shape") else len(np.asarray(X))
        n_splits = len(trains)
        self.grid = self.root.subcontext(task_name="search", max_subtasks=n_candidates * n_splits,
                                         sequential_subtasks=False)
        self.grid.call_on_fit_task_begin(estimator=self.search)
        keys = [_key(_mask(rows, n_samples)) for rows in trains]
        hooks = []
        for h in range(n_candidates):
            contexts: dict[bytes, Any] = {}
            for s, key in enumerate(keys):
                ctx = self.grid.subcontext(task_name="candidate-split-evaluation",
                                           task_id=h * n_splits + s)
                contexts.setdefault(key, ctx)   # splits with one training set: one cube fit
            hooks.append(Evaluations(self.search, contexts))
        return hooks

    def searched(self) -> None:
        if self.active:
            self.grid.call_on_fit_task_end(estimator=self.search)

    @contextlib.contextmanager
    def refit(self, best):
        """Around the refit of ``best`` on all the data (``refit-with-best-params``)."""
        if not self.active:
            yield
            return
        ctx = self.root.subcontext(task_name="refit-with-best-params")
        with ctx.propagate_callback_context(best):
            ctx.call_on_fit_task_begin(estimator=self.search, X=self.X, y=self.y,
                                       metadata=self.metadata)
            yield
        ctx.call_on_fit_task_end(estimator=self.search, X=self.X, y=self.y,
                                 metadata=self.metadata)

    def done(self) -> None:
        if self.active:
            self.root.call_on_fit_task_end(estimator=self.search, X=self.X, y=self.y,
                                           metadata=self.metadata)
