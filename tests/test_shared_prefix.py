"""Shared Pipeline prefixes (cvflow.fitting.prefix, issue 34 item 1): a transformer prefix with
the same settings on the same training set is fitted once, and every stored prediction equals
scikit-learn's own ``Pipeline(...).fit(X[train], y[train])`` predicting every sample, bit for bit.

Fits are counted by transformers that count their own fits in a class-level counter (the fits
run in this process: ``fit_block`` called directly, or ``cluster="threads"``); the trial fits
cvflow makes before a run (:func:`cvflow.fitting.trial.in_trial`) are not the study's and are
not counted.
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.datasets import make_classification
from sklearn.decomposition import PCA
from sklearn.feature_selection import SelectKBest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import get_scorer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

import cvflow
from cvflow.fitting import prefix
from cvflow.fitting.block import fit_block
from cvflow.fitting.learners import fit_one
from cvflow.fitting.scoring import Scoring
from cvflow.fitting.trial import in_trial
from cvflow.workflow.params import Param

CS = list(np.logspace(-3, 2, 8))


class Counted:
    """Counts the fits of its subclasses by class (outside cvflow's trial fits)."""

    fits: dict[str, int] = {}
    seen: list[tuple[bool, bytes]] = []    # (a trial fit?, training rows) of every fit

    def count(self, X) -> None:
        Counted.seen.append((in_trial(), rows_of(X)))
        if not in_trial():
            name = type(self).__name__
            Counted.fits[name] = Counted.fits.get(name, 0) + 1


def rows_of(X) -> bytes:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(X).tobytes()).digest()


def assert_once_per_training_set(X, train) -> None:
    """The study fitted no training set's prefix twice, and every training set's prefix was
    fitted (the full split's may be cvflow's timing fit before the run, on the same data)."""
    study = [rows for trial, rows in Counted.seen if not trial]
    assert len(study) == len(set(study))
    assert {rows_of(X[t]) for t in train} <= {rows for _, rows in Counted.seen}


class CountingPCA(PCA, Counted):
    def fit(self, X, y=None):
        self.count(X)
        return super().fit(X, y)

    def fit_transform(self, X, y=None):
        self.count(X)
        return super().fit_transform(X, y)


class CountingKBest(SelectKBest, Counted):
    def fit(self, X, y=None, **params):
        self.count(X)
        return super().fit(X, y, **params)


class CountingScaler(StandardScaler, Counted):
    def fit(self, X, y=None, sample_weight=None):
        self.count(X)
        return super().fit(X, y, sample_weight=sample_weight)


class Failing(TransformerMixin, BaseEstimator):
    """A transformer whose fit always raises."""

    def fit(self, X, y=None):
        Counted.fits["Failing"] = Counted.fits.get("Failing", 0) + 1
        raise ValueError("this transformer cannot be fitted")

    def transform(self, X):
        return X


@pytest.fixture(autouse=True)
def fresh():
    Counted.fits.clear()
    Counted.seen.clear()
    prefix.CACHE.clear()
    yield
    prefix.CACHE.clear()


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=300, n_features=40, n_informative=10, random_state=0)
    folds = np.arange(300) % 5
    train = np.array([np.ones(300, bool)] + [folds != j for j in range(5)])
    return X, y, train


def params_of(pipe, grid: list[dict], output: str = "decision_function", **kwargs) -> list[Param]:
    return [Param("pipe", "sklearn.pipeline.Pipeline", hyper={k: repr(v) for k, v in g.items()},
                  output=output, source=(pipe, g), **kwargs) for g in grid]


def whole(pipe, values: dict, X, y, train, output: str = "decision_function", **fit_params):
    """scikit-learn's own fit of the whole Pipeline on the training rows, predicting every sample."""
    model = clone(pipe).set_params(**clone(values, safe=False))
    model.fit(X[train], y[train], **{k: v[train] for k, v in fit_params.items()})
    return getattr(model, output)(X), model


def block(params, X, y, train, **kwargs):
    return fit_block(params, X, y, train, params_slice=slice(0, len(params)),
                     splits_slice=slice(0, len(train)), positive=1, **kwargs)


def assert_whole(result, pipe, grid, X, y, train, output="decision_function", **fit_params):
    assert not result.failed.any(), result.error[result.failed]
    for h, values in enumerate(grid):
        for s in range(len(train)):
            want, _ = whole(pipe, values, X, y, train[s], output, **fit_params)
            assert result.pred[h, s].tobytes() == np.asarray(want, np.float64).tobytes(), (h, s)


@pytest.mark.parametrize("limit", [prefix.CACHE_BYTES, 0], ids=["cache", "no-cache"])
def test_pca_fitted_once_per_training_set(data, limit, monkeypatch):
    """PCA(50) + logistic over 8 C and 5 folds + the full fit: 6 PCA fits, not 48; with the
    params cut into 3 blocks, the worker's cache keeps it at 6 (without the cache: 6 per block).
    The randomized solver (random_state fixed) makes a wrong seed or a wrong sharing show."""
    X, y, train = data
    monkeypatch.setattr(prefix.CACHE, "limit", limit)
    pipe = Pipeline([("pca", CountingPCA(20, svd_solver="randomized", random_state=0)),
                     ("lr", LogisticRegression())])
    grid = [{"lr__C": c} for c in CS]
    params = params_of(pipe, grid)
    pieces = [block(params[a:b], X, y, train) for a, b in [(0, 3), (3, 6), (6, 8)]]
    assert Counted.fits["CountingPCA"] == (6 if limit else 18)
    Counted.fits.clear()
    result = block(params, X, y, train)
    assert Counted.fits.get("CountingPCA", 0) == (0 if limit else 6)
    assert_whole(result, pipe, grid, X, y, train)
    for (a, b), piece in zip([(0, 3), (3, 6), (6, 8)], pieces):
        assert piece.pred.tobytes() == result.pred[a:b].tobytes()


def test_step_grid_and_prefix_params_change_the_prefix(data):
    """A grid over the prefix step itself and over its params: one fit per distinct prefix and
    training set; two FunctionTransformers with lambdas of the same settings are not alike."""
    X, y, train = data
    pipe = Pipeline([("reduce", CountingPCA(5, random_state=0)), ("clf", LogisticRegression())])
    grid = [{"reduce": r, "clf__C": c} for r in [CountingPCA(5, random_state=0),
                                                 CountingKBest(k=5)] for c in CS[:3]]
    grid += [{"reduce__n_components": n, "clf__C": c} for n in (3, 7) for c in CS[:2]]
    result = block(params_of(pipe, grid), X, y, train)
    assert Counted.fits == {"CountingPCA": 3 * 6, "CountingKBest": 6}
    assert_whole(result, pipe, grid, X, y, train)
    lambdas = Pipeline([("f", FunctionTransformer(lambda v: v * 2.0)), ("clf", LogisticRegression())])
    grid = [{"f": FunctionTransformer(f), "clf__C": c}
            for f in (lambda v: v * 2.0, lambda v: np.tanh(v)) for c in CS[:2]]
    params = params_of(lambdas, grid)
    groups, alone = prefix.plan(params, list(range(4)), X, train[1])
    assert [[h for h, _, _ in g.members] for g in groups] == [[0, 1], [2, 3]] and not alone
    assert_whole(block(params, X, y, train), lambdas, grid, X, y, train)


def test_random_state_instances_and_fit_seed(data):
    """A RandomState instance (cloned per param, each in the same state) shares as a fixed seed
    does; with a fit_seed each (param, split) seeds its own PCA, so nothing is shared."""
    X, y, train = data
    pipe = Pipeline([("pca", CountingPCA(10, svd_solver="randomized",
                                          random_state=np.random.RandomState(3))),
                     ("lr", LogisticRegression())])
    grid = [{"lr__C": c} for c in CS[:4]]
    result = block(params_of(pipe, grid), X, y, train)
    assert Counted.fits["CountingPCA"] == 6
    assert_whole(result, pipe, grid, X, y, train)
    Counted.fits.clear()
    seeded = params_of(Pipeline([("pca", CountingPCA(10, svd_solver="randomized")),
                                 ("lr", LogisticRegression())]), grid, fit_seed=7)
    shared = block(seeded, X, y, train)
    assert Counted.fits["CountingPCA"] == 4 * 6
    for h, param in enumerate(seeded):
        for s in range(len(train)):
            want = fit_one(param, X, y, train[s], positive=1)[0]
            assert shared.pred[h, s].tobytes() == want.tobytes()


def test_fit_params_routed_to_steps_and_passthrough(data):
    """sample_weight goes to the last step, a ``scale__sample_weight`` fit parameter to the
    prefix; a passthrough step and a None step are skipped as Pipeline.fit skips them."""
    X, y, train = data
    w = np.random.default_rng(0).uniform(0.2, 2.0, len(y))
    sw = np.random.default_rng(1).uniform(0.5, 1.5, len(y))
    pipe = Pipeline([("skip", "passthrough"), ("scale", CountingScaler()), ("none", None),
                     ("lr", LogisticRegression())])
    grid = [{"lr__C": c} for c in CS[:4]]
    params = params_of(pipe, grid, fit_params={"scale__sample_weight": w})
    result = block(params, X, y, train, sample_weight=sw)
    assert Counted.fits["CountingScaler"] == 6
    assert_whole(result, pipe, grid, X, y, train, scale__sample_weight=w, lr__sample_weight=sw)
    # an unweighted scaler is another prefix (the weighted ones come from the worker's cache)
    Counted.fits.clear()
    block(params + params_of(pipe, grid), X, y, train, sample_weight=sw)
    assert Counted.fits["CountingScaler"] == 6


def test_memory_set_by_the_user(data, tmp_path):
    """``Pipeline(memory=...)``: the same predictions; the user's cache still serves later runs."""
    X, y, train = data
    pipe = Pipeline([("pca", PCA(8, random_state=0)), ("scale", StandardScaler()),
                     ("lr", LogisticRegression())], memory=str(tmp_path))
    grid = [{"lr__C": c} for c in CS[:3]]
    first = block(params_of(pipe, grid), X, y, train)
    assert_whole(first, pipe, grid, X, y, train)
    prefix.CACHE.clear()
    again = block(params_of(pipe, grid), X, y, train)
    assert again.pred.tobytes() == first.pred.tobytes()


def test_a_failing_prefix_fails_every_dependent_fit(data):
    """The prefix's fit raises once per training set; every param using it is recorded failed
    with the message the whole fit gives, and the other params are fitted."""
    X, y, train = data
    pipe = Pipeline([("bad", Failing()), ("lr", LogisticRegression())])
    good = Pipeline([("pca", PCA(5, random_state=0)), ("lr", LogisticRegression())])
    grid = [{"lr__C": c} for c in CS[:3]]
    params = params_of(pipe, grid) + params_of(good, grid)
    result = block(params, X, y, train)
    assert Counted.fits["Failing"] == 6
    assert result.failed[:3].all() and not result.failed[3:].any()
    want = fit_one(params[0], X, y, train[1], positive=1)[2]
    assert want == "ValueError: this transformer cannot be fitted"
    assert set(result.error[:3].ravel()) == {want}
    assert np.isnan(result.pred[:3]).all()
    assert (result.fit_seconds > 0).all()


def test_scorers_see_the_pipeline_the_whole_fit_makes(data):
    """Scores computed at fit time come from an assembled Pipeline (fitted prefix + fitted
    last step) whose predict, predict_proba and score equal the whole fit's."""
    X, y, train = data
    pipe = Pipeline([("pca", PCA(10, svd_solver="randomized", random_state=0)),
                     ("lr", LogisticRegression())])
    grid = [{"lr__C": c} for c in CS[:3]]
    seen = []

    def keep(model, X_, y_):
        seen.append(model)
        return 0.0

    scoring = Scoring({"acc": get_scorer("accuracy"), "ll": get_scorer("neg_log_loss"),
                       "keep": keep}, np.ones(len(y), bool), train=True)
    result = block(params_of(pipe, grid), X, y, train, scoring=scoring)
    assert len(seen) == 2 * len(grid) * len(train) - len(grid)     # the full split: no test rows
    for h, values in enumerate(grid):
        for s in range(len(train)):
            _, model = whole(pipe, values, X, y, train[s])
            test, rows = ~train[s], train[s]
            for k, (name, scorer) in enumerate(list(scoring.scorers.items())[:2]):
                if test.any():
                    assert result.score[h, s, k] == scorer(model, X[test], y[test]), name
                assert result.train_score[h, s, k] == scorer(model, X[rows], y[rows]), name
    for model in seen:
        values = {"lr__C": model.named_steps["lr"].C}
        rows = next(s for s in range(len(train))
                    if model.named_steps["lr"].n_features_in_ and np.array_equal(
                        model.named_steps["pca"].mean_, X[train[s]].mean(axis=0)))
        _, ref = whole(pipe, values, X, y, train[rows])
        assert isinstance(model, Pipeline) and [n for n, _ in model.steps] == ["pca", "lr"]
        assert model.predict(X).tobytes() == ref.predict(X).tobytes()
        assert model.predict_proba(X).tobytes() == ref.predict_proba(X).tobytes()
        assert model.score(X, y) == ref.score(X, y)


def test_searchcv_threads_counts_and_equals_whole_fits(tmp_path):
    """SearchCV (threads): one PCA fit per training set (5 folds + the full fit) for 8 C
    values, the full one possibly cvflow's timing fit before the run; every stored prediction
    equals the whole Pipeline's."""
    X, y = make_classification(n_samples=300, n_features=30, random_state=1)
    pipe = Pipeline([("pca", CountingPCA(10, svd_solver="randomized", random_state=0)),
                     ("lr", LogisticRegression())])
    search = cvflow.SearchCV(pipe, {"lr__C": CS}, cv=5, cluster="threads", refit=False,
                             store=tmp_path / "s.zarr")
    search.fit(X, y)
    cube = cvflow.open(search.store_)
    train = cube["train"].values
    assert Counted.fits["CountingPCA"] <= 6 == train.shape[0]
    assert_once_per_training_set(X, train)
    pred = cube["pred"].values
    for h, c in enumerate(cube["lr__C"].values):
        for s in range(train.shape[0]):
            # accuracy (the Pipeline's score, its last step's) of the stored predict
            want, _ = whole(pipe, {"lr__C": c}, X, y, train[s], "predict")
            assert pred[h, s].tobytes() == want.astype(np.float64).tobytes(), (h, s)


def test_nested_cv_inner_folds_share_too(tmp_path):
    """A study with nested CV: one prefix fit per distinct training set (full, folds and the
    inner pairs), and the stored predictions equal the whole fits on every split."""
    X, y = make_classification(n_samples=120, n_features=12, random_state=2)
    pipe = Pipeline([("pca", CountingPCA(4, random_state=0)), ("lr", LogisticRegression())])
    study = cvflow.Study({"pipe": (pipe, {"lr__C": CS[:4]})}, cv={"folds": 4, "seed": 0},
                         estimators=["kfold", "nested_cv"], loss="zero_one")
    study.run(X, y, store=tmp_path / "n.zarr", cluster="threads", progress=False)
    cube = cvflow.open(tmp_path / "n.zarr")
    train = cube["train"].values
    assert train.shape[0] == 1 + 4 + 6 and (cube["split_kind"].values == "pair").sum() == 6
    assert Counted.fits["CountingPCA"] <= train.shape[0]
    assert_once_per_training_set(X, train)
    pred = cube["pred"].values
    for h, c in enumerate(cube["lr__C"].values):
        for s in range(train.shape[0]):
            want, _ = whole(pipe, {"lr__C": c}, X, y, train[s])
            assert pred[h, s].tobytes() == want.tobytes(), (h, s)


def test_cache_is_bounded_fits_once_per_key_and_forgets_dead_data():
    """The worker's cache: least recently used entries out past its byte limit, one fit for
    threads asking for the same key at once, entries of collected data dropped."""
    import gc
    import threading
    import time

    cache = prefix.Cache(limit=3 * 800)
    X, y = np.zeros((10, 10)), np.zeros(10)
    rows = np.ones(10, bool)

    def entry(i):
        return prefix.with_data(prefix.Key(bytes([i]) * 32), X, y, rows)

    def fitted():
        return prefix.Prefix(steps=[], train=np.zeros(50), every=np.zeros(50))   # 800 bytes

    for i in range(4):
        assert cache.get(entry(i), fitted)[1]
    assert cache.get(entry(0), fitted)[1] and len(cache.entries) == 3   # 0 was evicted
    assert not cache.get(entry(2), fitted)[1]
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return fitted()

    threads = [threading.Thread(target=cache.get, args=(entry(9), slow)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    big = prefix.Prefix(steps=[], train=np.zeros(10_000), every=np.zeros(10_000))
    assert cache.get(entry(7), lambda: big) == (big, True) and entry(7) not in cache.entries
    other = np.ones((10, 10))
    k = prefix.with_data(prefix.Key(b"x" * 32), other, y, rows)
    assert k != prefix.with_data(prefix.Key(b"x" * 32), X, y, rows)
    cache.get(k, fitted)
    assert k in cache.entries
    del other
    gc.collect()
    cache.forget_dead()
    assert not any(e.data[0].ref() is None for e in cache.entries)
    assert prefix.with_data(prefix.Key(b"x" * 32), [[1.0]], y, rows) is None     # a list X


def test_a_fit_hook_is_fitted_whole(data):
    """A param with a fit hook (a SearchCV's scikit-learn callbacks wrap the Pipeline's own fit)
    is not shared: the hook sees every whole fit."""
    import contextlib

    X, y, train = data
    pipe = Pipeline([("pca", CountingPCA(5, random_state=0)), ("lr", LogisticRegression())])
    calls = []

    def hook(model, rows, X_train, y_train, weights):
        calls.append(type(model).__name__)
        return contextlib.nullcontext()

    grid = [{"lr__C": c} for c in CS[:3]]
    params = [Param("pipe", "sklearn.pipeline.Pipeline", hyper={"lr__C": repr(g["lr__C"])},
                    output="decision_function", source=(pipe, g), fit_hook=hook) for g in grid]
    assert prefix.plan(params, [0, 1, 2], X, train[1]) == ([], [0, 1, 2])
    result = block(params, X, y, train)
    assert calls == ["Pipeline"] * 3 * len(train) and Counted.fits["CountingPCA"] == 3 * len(train)
    assert_whole(result, pipe, grid, X, y, train)
