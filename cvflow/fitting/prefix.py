"""Shared Pipeline prefixes: the transformers of a Pipeline fitted once per training set and
reused by every param that differs only downstream of them.

A Pipeline's prefix (every step but the last) with the same settings on the same training
rows is a function of (prefix settings, training set), as a cube cell is of (param, split).
In a grid over ``logisticregression__C`` behind ``PCA``, ``GridSearchCV`` refits the PCA
once per C (its answer is ``Pipeline(memory=...)``, a disk cache keyed by hashing the data).
Here, for each training set of a block, the block's Pipeline params are grouped by their
prefix's :func:`key`; the prefix is fitted once (:func:`fit_prefix`: ``Pipeline.fit_transform``
of the prefix steps on the training rows, then ``transform`` of every sample), and each
param's own last step is fitted on the transformed training rows and predicts from the
transformed samples (:meth:`Prefix.complete`). That is what ``Pipeline.fit`` and
``Pipeline.predict`` compute, step by step, so the stored predictions equal the whole fits'
bit for bit (tests/test_shared_prefix.py). The fitted Pipeline the scorers see is assembled
from the fitted prefix steps and the fitted last step, as ``Pipeline.fit`` leaves it.

Across blocks, a worker process keeps fitted prefixes in :data:`CACHE`, bounded by
:data:`CACHE_BYTES` of transformed data and keyed by the prefix, the training rows and the
identity of X and y (weak references: a finished study's data is not kept alive). Two threads
wanting the same prefix fit it once: the second waits for the first.

Only public scikit-learn APIs are used (``Pipeline``, ``Pipeline.steps``, ``get_params``);
anything a Pipeline might treat differently when fitted whole (metadata routing,
``transform_input``, a pairwise first step, fit parameters that are not ``step__name``,
invalid steps, a fit hook around the Pipeline's fit: scikit-learn's callbacks) is fitted
whole, as before.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import threading
import time
import types
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .learners import fit_kwargs, pairwise, predict_output
from .scoring import take
from ..workflow.params import Param, import_estimator

# DESIGN CHOICE: a worker keeps at most this many bytes of transformed data (the training rows'
# and every sample's, per prefix and training set) across blocks; an entry larger than the
# whole budget is used by its own block only. 256 MiB is a small part of a Dask worker's
# default memory limit (the machine's memory / workers) and holds, e.g., every fold of PCA(50)
# on 100,000 samples (5 folds x 2 x 100,000 x 50 x 8 bytes = 400 MB would not; 3 folds do).
CACHE_BYTES = 256 * 2**20


def is_pipeline(model) -> bool:
    from sklearn.pipeline import Pipeline

    return isinstance(model, Pipeline)


def _skip(step) -> bool:
    return step is None or (isinstance(step, str) and step == "passthrough")


def shareable(model, fit_params: dict) -> bool:
    """Whether ``model`` (a built, unfitted estimator) has a prefix worth sharing that fitting
    step by step reproduces exactly: a Pipeline with at least one real transformer before a
    last step that fits, valid step names, no metadata routing, no ``transform_input``, a first
    step that does not take a kernel matrix, and fit parameters all of the ``step__name``
    form for a step that exists (``fit_params``: every fit keyword the Pipeline gets)."""
    import sklearn

    if not is_pipeline(model) or len(model.steps) < 2:
        return False
    if sklearn.get_config().get("enable_metadata_routing", False):
        return False
    if getattr(model, "transform_input", None) is not None or pairwise(model):
        return False
    names = [name for name, _ in model.steps]
    if (len(set(names)) != len(names) or any("__" in n for n in names)
            or set(names) & set(model.get_params(deep=False))):
        return False
    *prefix, (_, last) = model.steps
    if _skip(last) or not hasattr(last, "fit"):
        return False
    if all(_skip(step) for _, step in prefix):
        return False
    if not all(_skip(step) or ((hasattr(step, "fit") or hasattr(step, "fit_transform"))
                               and hasattr(step, "transform")) for _, step in prefix):
        return False
    real = {name for name, step in model.steps if step is not None}
    return all("__" in k and k.split("__", 1)[0] in real for k in fit_params)


class _Pickler(pickle.Pickler):
    """Pickles settings by value, but classes and functions by identity: two lambdas (or two
    classes redefined under one name) never look alike."""

    def __init__(self, file, same: list):
        super().__init__(file, protocol=4)
        self.same = same

    def persistent_id(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType,
                            types.MethodType, types.ModuleType)):
            self.same.append(obj)
            return len(self.same) - 1
        return None


@dataclass(frozen=True, repr=False, eq=False)
class Key:
    """What a fitted prefix depends on: a digest of the prefix steps' settings (and the fit
    parameters routed to them), the classes and functions they name (by identity), and, for
    the cache across blocks, the training rows and the identity of X and y."""

    digest: bytes
    same: tuple = ()
    data: tuple = ()        # weak references to X and y (or None): see _Weak

    def __hash__(self) -> int:
        return hash((self.digest, tuple(id(o) for o in self.same), self.data))

    def __eq__(self, other) -> bool:
        return (isinstance(other, Key) and self.digest == other.digest
                and len(self.same) == len(other.same)
                and all(a is b for a, b in zip(self.same, other.same)) and self.data == other.data)


class _Weak:
    """A weak reference compared by the referent's identity; a dead one equals nothing."""

    def __init__(self, obj):
        self.ref = weakref.ref(obj, _forget)
        self.id = id(obj)

    def __hash__(self) -> int:
        return self.id

    def __eq__(self, other) -> bool:
        if not isinstance(other, _Weak):
            return False
        a, b = self.ref(), other.ref()
        return a is not None and a is b


def key(model, fit_params: dict) -> Key | None:
    """The key of ``model``'s prefix (its steps but the last, with the fit parameters routed to
    them); None when it cannot be described (a setting that does not pickle)."""
    *prefix, _ = model.steps
    names = {name for name, _ in prefix}
    routed = sorted((k, v) for k, v in fit_params.items() if k.split("__", 1)[0] in names)
    same: list = [type(model)]
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, same).dump((prefix, routed))
    except Exception:  # noqa: BLE001 - not describable: fitted whole
        return None
    return Key(hashlib.sha256(buffer.getvalue()).digest(), tuple(same))


def with_data(k: Key, X, y, train: np.ndarray) -> Key | None:
    """``k`` for the cache across blocks: with the training rows and the identity of X and y;
    None when X or y cannot be referred to weakly (a list)."""
    try:
        data = (_Weak(X), None if y is None else _Weak(y))
    except TypeError:
        return None
    h = hashlib.sha256(k.digest)
    h.update(np.packbits(np.asarray(train, dtype=bool)).tobytes())
    h.update(str(len(train)).encode())
    return Key(h.digest(), k.same, data)


def _nbytes(a) -> int | None:
    if isinstance(a, np.ndarray):
        return int(a.nbytes)
    if hasattr(a, "tocsr") and hasattr(a, "data"):        # a scipy sparse matrix
        csr = a.tocsr()
        return int(csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes)
    if hasattr(a, "memory_usage"):                        # a pandas DataFrame
        try:
            return int(np.sum(a.memory_usage(deep=True)))
        except Exception:  # noqa: BLE001 - unknown size: not kept
            return None
    return None


@dataclass(repr=False, eq=False)
class Prefix:
    """A prefix fitted on one training set: its fitted steps, the transformed training rows
    (what the last step is fitted on), every sample transformed (what it predicts from), the
    seconds it took; or the message of the exception its fit raised (``error``), or that
    transforming every sample raised (``every_error``)."""

    steps: list = field(default_factory=list)
    train: Any = None
    every: Any = None
    seconds: float = 0.0
    error: BaseException | None = None
    every_error: BaseException | None = None

    @property
    def nbytes(self) -> int | None:
        if self.error is not None:
            return 0
        sizes = [_nbytes(self.train), 0 if self.every is None else _nbytes(self.every)]
        return None if None in sizes else sum(s for s in sizes if s is not None)

    def complete(self, model, y_train, final_params: dict):
        """``model`` (the param's own unfitted Pipeline, whose prefix is this one's) with its last
        step fitted on the transformed training rows and the fitted prefix steps in place: the
        Pipeline ``model.fit`` would have made. Returns (the fitted Pipeline, its last step)."""
        if self.error is not None:
            raise self.error
        name, last = model.steps[-1]
        last.fit(self.train, y_train, **final_params)
        model.steps = [*self.steps, (name, last)]
        return model, last

    def transformed(self):
        """Every sample as the last step sees it (``Pipeline.predict`` transforms the same)."""
        if self.every_error is not None:
            raise self.every_error
        return self.every


def split_params(model, fit_params: dict) -> tuple[dict, dict]:
    """The fit parameters of the prefix (as named for the Pipeline) and those of the last step
    (without its ``name__``), as ``Pipeline.fit`` routes them without metadata routing."""
    last = model.steps[-1][0]
    prefix = {k: v for k, v in fit_params.items() if k.split("__", 1)[0] != last}
    final = {k.split("__", 1)[1]: v for k, v in fit_params.items() if k.split("__", 1)[0] == last}
    return prefix, final


def fit_prefix(model, X, y, train: np.ndarray, fit_params: dict) -> Prefix:
    """Fit ``model``'s prefix on the training rows (``Pipeline.fit_transform`` of the prefix
    steps, with the Pipeline's ``memory``) and transform every sample; a raising fit is kept
    in the result, not raised."""
    from sklearn.pipeline import Pipeline

    t0 = time.perf_counter()
    prefix_params, _ = split_params(model, fit_params)
    part = Pipeline(list(model.steps[:-1]), memory=model.memory)
    try:
        Xt = part.fit_transform(take(X, train), take(y, train), **prefix_params)
    except Exception as exc:  # noqa: BLE001 - every dependent fit records it
        # without its traceback: a kept exception would keep the fit's frames (and data) alive
        return Prefix(seconds=time.perf_counter() - t0, error=exc.with_traceback(None))
    result = Prefix(steps=list(part.steps), train=Xt)
    try:
        result.every = part.transform(X)
    except Exception as exc:  # noqa: BLE001 - as a failing predict of each dependent fit
        result.every_error = exc.with_traceback(None)
    result.seconds = time.perf_counter() - t0
    return result


def candidate(param: Param) -> bool:
    """Whether ``param`` builds a Pipeline (cheap: without building it)."""
    from sklearn.pipeline import Pipeline

    if param.preprocess:
        return True
    if param.source is not None:
        return is_pipeline(param.source[0])
    try:
        return issubclass(import_estimator(param.estimator), Pipeline)
    except Exception:  # noqa: BLE001 - the fit says what is wrong
        return False


@dataclass(repr=False, eq=False)
class Group:
    """The params of a block that share one prefix on one training set: (param index, its
    built model, its fit keywords) each; the prefix once fitted or taken from the cache."""

    key: Key
    members: list[tuple[int, Any, dict]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)      # each member's stored output
    prefix: Prefix | None = None
    fitted_here: bool = False

    def _get(self, X, y, train: np.ndarray) -> Prefix:
        if self.prefix is None:
            _, model, kwargs = self.members[0]

            def fit() -> Prefix:
                return fit_prefix(model, X, y, train, kwargs)

            k = with_data(self.key, X, y, train)
            if k is None:
                self.prefix, self.fitted_here = fit(), True
            else:
                self.prefix, self.fitted_here = CACHE.get(k, fit)
        return self.prefix

    def fitted(self, i: int, X, y, train: np.ndarray, positive) -> Callable:
        """The ``fitted`` of :func:`cvflow.fitting.learners.fit_and_score` for member ``i``:
        the prefix (fitted by the first member that needs it), then the member's last step."""
        h, model, kwargs = self.members[i]

        def fit():
            prefix = self._get(X, y, train)
            _, final_params = split_params(model, kwargs)
            pipeline, last = prefix.complete(model, take(y, train), final_params)
            output = self.outputs[i]
            return pipeline, lambda: predict_output(last, prefix.transformed(), output, positive)

        return fit

    @property
    def share(self) -> float:
        """Seconds charged to each member for the prefix: an equal share of its fit when this
        block fitted it, nothing when it came from the cache (the block that fitted it paid)."""
        if self.prefix is None or not self.fitted_here:
            return 0.0
        return self.prefix.seconds / len(self.members)


def plan(params: list[Param], index: list[int], X, train: np.ndarray,
         sample_weight=None) -> tuple[list[Group], list[int]]:
    """The params ``index`` of a block on one training set, grouped by shared prefix: (the
    groups, in order of first appearance; the params fitted whole, in their order)."""
    groups: dict[Key, Group] = {}
    alone: list[int] = []
    for h in index:
        param = params[h]
        k = None
        # DESIGN CHOICE: a param with a fit hook (a SearchCV's scikit-learn callbacks) is fitted
        # whole: its hook wraps the Pipeline's own fit, which sharing would not call
        if param.fit_hook is None and candidate(param):
            try:
                model = param.build(train)
                kwargs = fit_kwargs(param, model, X, train, sample_weight)
                k = key(model, kwargs) if shareable(model, kwargs) else None
            except Exception:  # noqa: BLE001 - fitted whole, which records what raised
                k = None
        if k is None:
            alone.append(h)
            continue
        group = groups.setdefault(k, Group(k))
        group.members.append((h, model, kwargs))
        group.outputs.append(param.output)
    return list(groups.values()), alone


class Cache:
    """Fitted prefixes of one worker process, least recently used first out, at most
    ``limit`` bytes of transformed data; :meth:`get` fits a missing one once however many
    threads ask for it."""

    def __init__(self, limit: int = CACHE_BYTES):
        self.limit = limit
        self.lock = threading.Lock()
        self.entries: OrderedDict[Key, tuple[Prefix, int]] = OrderedDict()   # (prefix, bytes)
        self.pending: dict[Key, threading.Event] = {}
        self.fits = 0            # prefixes fitted through the cache (tests read it)

    def get(self, k: Key, fit) -> tuple[Prefix, bool]:
        """(the prefix of ``k``, whether it was fitted now); ``fit()`` fits it when missing."""
        while True:
            with self.lock:
                if k in self.entries:
                    self.entries.move_to_end(k)
                    return self.entries[k][0], False
                event = self.pending.get(k)
                if event is None:
                    self.pending[k] = event = threading.Event()
                    break
            event.wait()
        try:
            prefix = fit()
            with self.lock:
                self.fits += 1
                size = prefix.nbytes
                if size is not None and size <= self.limit:
                    self.entries[k] = (prefix, size)
                    self._shrink()
            return prefix, True
        finally:
            with self.lock:
                self.pending.pop(k, None)
            event.set()

    def _shrink(self) -> None:
        dead = [k for k in self.entries if not all(w is None or w.ref() is not None for w in k.data)]
        for k in dead:
            del self.entries[k]
        total = sum(size for _, size in self.entries.values())
        while total > self.limit and self.entries:
            _, (_, size) = self.entries.popitem(last=False)
            total -= size

    def forget_dead(self) -> None:
        """Drop the entries of data no longer alive (called when X or y is collected)."""
        if self.lock.acquire(blocking=False):      # never blocks a collection
            try:
                self._shrink()
            finally:
                self.lock.release()

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.fits = 0


CACHE = Cache()


def _forget(_ref) -> None:
    CACHE.forget_dead()
