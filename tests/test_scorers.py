"""Scorers that need the fitted model (issue 31 item 3): computed where each fit runs, stored
per (param, split) beside ``pred`` (``score``, ``train_score``, ``score_time`` along ``scorer``),
read by ``cv_results`` and ``SearchCV`` (cvflow/workflow/scorers.py, cvflow/fitting/scoring.py).

Against scikit-learn's ``GridSearchCV`` on the same folds: scorer objects, callables, dicts of
them, names with no cvflow loss and ``scoring=None`` with an estimator whose ``score`` is its
own give equal ``cv_results_`` (split, mean, std, rank, train columns: 1e-12) and choices.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import f1_score, fbeta_score, make_scorer, recall_score
from sklearn.model_selection import GridSearchCV
from sklearn.svm import LinearSVC

import cvflow
from cvflow.cli import main
from cvflow.errors import InputError, StoreError
from cvflow.store.damage import verify
from cvflow.store.integrity import DamagedStore
from cvflow.workflow.spec import parse_workflow

TOL = dict(rtol=0, atol=1e-12)
GRID = {"C": [0.01, 0.1, 1.0]}


@pytest.fixture(scope="module")
def data():
    return make_classification(90, 5, random_state=0)


def recall_of(estimator, X, y):
    """A scorer function (estimator, X, y) -> float."""
    return recall_score(y, estimator.predict(X))


class Mock(ClassifierMixin, BaseEstimator):
    """As scikit-learn's MockClassifier: ``predict`` returns no array (nothing to store), and
    ``score`` is its own."""

    def __init__(self, foo_param=0):
        self.foo_param = foo_param

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def predict(self, X):
        return X.shape[0]

    decision_function = predict

    def score(self, X=None, y=None):
        return 1.0 if self.foo_param > 1 else 0.0


def assert_same(ours, ref):
    """cv_results_ keys, split / mean / std / rank columns to 1e-12, and the choice."""
    assert ours.best_index_ == ref.best_index_
    assert ours.best_params_ == ref.best_params_
    assert ours.best_score_ == pytest.approx(ref.best_score_, **{"rel": 1e-12, "abs": 1e-12})
    assert set(ours.cv_results_) == set(ref.cv_results_)
    for key, want in ref.cv_results_.items():
        got = ours.cv_results_[key]
        if key.endswith("_time"):
            assert got.shape == want.shape and (got >= 0).all(), key
        elif key.startswith("rank_"):
            np.testing.assert_array_equal(got, want, err_msg=key)
        elif key.startswith("split") or key.startswith(("mean_", "std_")):
            np.testing.assert_allclose(got, want, err_msg=key, **TOL)


@pytest.mark.parametrize("scoring, refit", [
    (make_scorer(f1_score), True),
    (recall_of, True),
    (lambda est, X, y: f1_score(y, est.predict(X)), True),
    ({"f1": make_scorer(f1_score), "recall": recall_of, "acc": "accuracy"}, "recall"),
    ({"f1": make_scorer(f1_score), "acc": "accuracy"}, "acc"),       # a loss selects
    ("adjusted_rand_score", True),                                   # a name with no loss
], ids=["make_scorer", "function", "lambda", "dict", "dict-loss-refit", "name"])
def test_searchcv_scorers_equal_gridsearchcv(data, scoring, refit):
    X, y = data
    kw = dict(cv=3, scoring=scoring, refit=refit, return_train_score=True)
    ref = GridSearchCV(LinearSVC(random_state=0), GRID, **kw).fit(X, y)
    ours = cvflow.SearchCV(LinearSVC(random_state=0), GRID, cluster="threads", **kw).fit(X, y)
    assert_same(ours, ref)
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), abs=1e-12)
    assert "mean_score_time" in ours.cv_results_
    cube = ours.cube_
    assert cube["score"].dims == ("param", "split", "scorer")
    assert int(cube.attrs["cvflow_format"]) == 3


def test_scoring_none_uses_the_estimators_own_score(data):
    X, y = data
    ref = GridSearchCV(Mock(), {"foo_param": [1, 2, 3]}, cv=2).fit(X, y)
    ours = cvflow.SearchCV(Mock(), {"foo_param": [1, 2, 3]}, cv=2, cluster="threads").fit(X, y)
    assert_same(ours, ref)
    assert ours.best_estimator_.foo_param == 2
    cube = ours.cube_
    assert not cube["failed"].values.any()          # nothing to store, still scored
    assert np.isnan(cube["pred"].values).all()
    assert list(cube["scorer"].values) == ["score"]


def test_scoring_none_of_a_mixin_score_stays_a_loss(data):
    X, y = data
    search = cvflow.SearchCV(LogisticRegression(), GRID, cv=3, cluster="threads").fit(X, y)
    assert "score" not in search.cube_        # accuracy of the stored predictions


@pytest.mark.parametrize("kind", ["classifier", "regressor", "nested pipeline"])
def test_scoring_none_of_a_pipeline_is_its_last_steps_mixin_score(data, kind):
    """A Pipeline's score is its last step's: accuracy / R² of the stored predictions, as for
    the step alone (it was computed at fit time: Pipeline.score is a descriptor that is never
    the same function twice), with a trial fit to learn its keys; equal to GridSearchCV."""
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = data
    if kind == "classifier":
        pipe, grid = make_pipeline(StandardScaler(), LogisticRegression()), "logisticregression__C"
    elif kind == "regressor":
        pipe, grid, y = make_pipeline(StandardScaler(), Ridge()), "ridge__alpha", X[:, 0] + y
        X = X[:, 1:]
    else:
        pipe = make_pipeline(make_pipeline(StandardScaler()),
                             make_pipeline(PCA(3), LogisticRegression()))
        grid = "pipeline-2__logisticregression__C"
    values = {grid: [0.01, 0.1, 1.0]}
    ref = GridSearchCV(pipe, values, cv=3).fit(X, y)
    ours = cvflow.SearchCV(pipe, values, cv=3, cluster="threads").fit(X, y)
    assert_same(ours, ref)
    assert "score" not in ours.cube_            # a loss of the stored predictions


def test_a_scorer_that_raises_scores_nan_and_keeps_the_fit(data, tmp_path, caplog):
    X, y = data

    def broken(est, X, y):
        raise RuntimeError("no luck")

    result = cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3,
                          scorers={"broken": broken, "f1": "f1"}).run(
        X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    cube = result.cube
    assert not cube["failed"].values.any()
    assert np.isnan(cube["score"].sel(scorer="broken").values).all()
    assert np.isfinite(cube["score"].sel(scorer="f1").values[:, 1:]).all()
    assert "scorer 'broken': RuntimeError: no luck" in caplog.text


def _study(**kw):
    return cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3,
                        scorers={"f1": make_scorer(f1_score), "recall": recall_of, "acc": "accuracy",
                                 "lam": lambda est, X, y: 0.5}, **kw)


def test_store_schema_and_description(data, tmp_path):
    X, y = data
    cube = _study(train_scores=True).run(X, y, store=tmp_path / "s.zarr", cluster="threads",
                                         progress=False).cube
    assert list(cube["scorer"].values) == ["f1", "recall", "acc", "lam"]
    for name, dims in (("score", ("param", "split", "scorer")),
                       ("train_score", ("param", "split", "scorer")),
                       ("score_time", ("param", "split"))):
        assert cube[name].dims == dims and cube[name].dtype == np.float64
    full = int(cube.attrs["full_split"])
    assert np.isnan(cube["score"].values[:, full]).all()        # no test samples
    assert np.isfinite(cube["train_score"].values).all()
    assert (cube["score_time"].values >= 0).all()
    # the fold fits' scores are scikit-learn's on the samples they did not train on
    X_, y_ = np.asarray(X), np.asarray(y)
    train = cube["train"].values
    for s in range(cube.sizes["split"]):
        if s == full:
            continue
        model = LogisticRegression(C=GRID["C"][2]).fit(X_[train[s]], y_[train[s]])
        test = ~train[s]
        assert cube["score"].values[2, s, 0] == pytest.approx(
            f1_score(y_[test], model.predict(X_[test])), abs=1e-12)
    described = json.loads(cube.attrs["scorers"])
    assert described["f1"] == {"description": "make_scorer(f1_score, response_method='predict')",
                               "rebuild": True}
    assert described["acc"] == {"description": "accuracy", "rebuild": True}
    assert described["lam"]["rebuild"] is False and "<lambda>" in described["lam"]["description"]
    workflow = json.loads(cube.attrs["workflow"])
    assert workflow["scorers"]["f1"] == {"make_scorer": "sklearn.metrics.f1_score",
                                         "greater_is_better": True, "response_method": "predict"}
    assert workflow["scorers"]["recall"] == {"function": "test_scorers.recall_of"}
    # a store is data: no pickles, and the lambda cannot be rebuilt from it
    with pytest.raises(InputError, match="cannot be rebuilt from its file"):
        cvflow.Study.from_store(tmp_path / "s.zarr", trust_code=True)
    table = cvflow.cv_results(tmp_path / "s.zarr", ["f1", "lam"], train=True)
    assert table["mean_test_lam"].tolist() == [0.5] * 3
    assert {"mean_score_time", "std_score_time", "mean_train_f1"} <= set(table.columns)


def test_rebuilt_from_the_store_when_every_scorer_has_a_name(data, tmp_path):
    X, y = data
    study = cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3,
                         scorers={"f1": make_scorer(f1_score), "acc": "accuracy"})
    study.run(X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3,
                 scorers={"r": recall_of}).run(X, y, store=tmp_path / "t.zarr",
                                               cluster="threads", progress=False)
    with pytest.raises(InputError, match="scorer function test_scorers.recall_of"):
        cvflow.Study.from_store(tmp_path / "t.zarr")      # a store is data: not trusted
    assert cvflow.Study.from_store(tmp_path / "t.zarr", trust_code=True).scorers["r"] is recall_of
    again = cvflow.Study.from_store(tmp_path / "s.zarr")      # sklearn.metrics: trusted
    assert repr(again.scorers["f1"]) == repr(make_scorer(f1_score))
    assert again.scorers["acc"] == "accuracy"


def test_a_store_without_scorers_keeps_format_2(data, tmp_path):
    X, y = data
    cube = cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3).run(
        X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False).cube
    assert int(cube.attrs["cvflow_format"]) == 2
    assert "score" not in cube and "scorer" not in cube.dims
    assert cvflow.cv_results(cube, "accuracy")["mean_test_score"].notna().all()


def test_extension_scores_new_fits_and_other_scorers_are_refused(data, tmp_path):
    X, y = data
    store = tmp_path / "s.zarr"
    first = _study().run(X, y, store=store, cluster="threads", progress=False).cube
    stored = first["score"].values.copy()
    grown = cvflow.Study(LogisticRegression(), param_grid={"C": GRID["C"] + [10.0]}, cv=3,
                         estimators=["kfold", "nested_cv"],
                         scorers=_study().scorers).run(X, y, store=store, cluster="threads",
                                                       progress=False).cube
    assert grown["score"].shape == (4, grown.sizes["split"], 4)
    np.testing.assert_array_equal(grown["score"].values[:3, :stored.shape[1]], stored)
    tested = ~np.isin(np.arange(grown.sizes["split"]), [int(grown.attrs["full_split"])])
    assert np.isfinite(grown["score"].sel(scorer="f1").values[:, tested]).all()
    with pytest.raises(StoreError, match=r"scorers differ: scorers\.acc: 'accuracy' -> None"):
        cvflow.Study(LogisticRegression(), param_grid=GRID, cv=3,
                     scorers={"f1": make_scorer(f1_score)}).run(X, y, store=store,
                                                                cluster="threads", progress=False)


def test_damaged_scores_are_named_and_refitted(data, tmp_path, capsys):
    X, y = data
    store = tmp_path / "s.zarr"
    want = _study().run(X, y, store=store, cluster="threads", progress=False).cube["score"].values
    chunk = store / "score" / "c" / "0" / "0" / "0"
    chunk.unlink()
    with pytest.raises(DamagedStore, match=r"score chunk \(0, 0, 0\) is missing; run `cvflow "
                                           "run` to refit it"):
        cvflow.open(store)
    assert [str(d) for d in verify(store).damaged] == ["score chunk (0, 0, 0) is missing"]
    assert main(["status", str(store)]) == 1
    said = capsys.readouterr().out
    assert "damaged: score chunk (0, 0, 0) is missing" in said
    assert "`cvflow run` refits the damaged chunks" in said
    again = _study().run(X, y, store=store, cluster="threads", progress=False)
    assert again.run.fits_executed == want.shape[0] * want.shape[1]
    np.testing.assert_array_equal(again.cube["score"].values[..., :3], want[..., :3])
    timing = next(p for p in (store / "score_time" / "c").rglob("*") if p.is_file())
    raw = bytearray(timing.read_bytes())
    raw[5] ^= 0xFF
    timing.write_bytes(bytes(raw))
    with pytest.raises(DamagedStore, match=r"score_time chunk \(0, 0\) is corrupt \(checksum"):
        cvflow.open(store)
    assert _study().run(X, y, store=store, cluster="threads", progress=False).run.fits_executed
    assert verify(store).ok


def test_workflow_file_scorers(tmp_path):
    config = {"data": {"source": "sklearn", "name": "breast_cancer"}, "task": "classification",
              "learners": [{"name": "lr", "class": "sklearn.linear_model.LogisticRegression",
                            "grid": {"C": [0.1, 1]}}],
              "scorers": {"f1": "f1", "own": {"function": "cvflow.fitting.scoring.estimator_score"},
                          "f2": {"make_scorer": "sklearn.metrics.fbeta_score", "beta": 2}},
              "train_scores": True}
    wf = parse_workflow(config, tmp_path / "w.yaml")
    assert set(wf.scorers) == {"f1", "own", "f2"}
    assert repr(wf.scorers["f2"]) == repr(make_scorer(fbeta_score, beta=2))
    for scorers, message in (({"f": "sklearn"}, "scorers.f: 'sklearn' is not a scikit-learn "
                                                "scoring name"),
                             ({"f": {"function": "nowhere.f"}}, "scorers.f: 'nowhere.f' does "
                                                                "not import"),
                             ({"f": 3}, "scorers.f: 3; give a scikit-learn scoring name")):
        with pytest.raises(InputError, match=message):
            parse_workflow({**config, "scorers": scorers}, tmp_path / "w.yaml")
    with pytest.raises(InputError, match="train_scores: true needs scorers"):
        parse_workflow({**config, "scorers": {}}, tmp_path / "w.yaml")
    lost = parse_workflow({**config, "scorers": {"lam": {"object": "__main__.<lambda>"}}},
                          tmp_path / "w.yaml")
    with pytest.raises(InputError, match="scorers.lam: __main__.<lambda> was given in Python"):
        lost.build()


def test_searchcv_refuses_a_scorer_with_a_selector_that_needs_a_loss(data):
    X, y = data
    with pytest.raises(ValueError, match="select='corrected_kfold' reduces stored predictions "
                                         "with a loss, but scoring is a scorer computed at fit"):
        cvflow.SearchCV(LinearSVC(), GRID, scoring=recall_of, select="corrected_kfold").fit(X, y)
    with pytest.raises(TypeError, match="If no scoring is specified, the estimator passed "
                                        "should have a 'score' method"):
        cvflow.SearchCV(_NoScore(), GRID).fit([[1]])
    with pytest.raises(ValueError, match="'nope' is not a valid scoring value"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, scoring=["r2", "nope"], refit="r2").fit(X, y)


class _NoScore(LinearSVC):
    @property
    def score(self):
        raise AttributeError("no score")


SCRIPT = """
import numpy as np
import cvflow
from sklearn.datasets import make_classification
from sklearn.metrics import recall_score
from sklearn.model_selection import GridSearchCV
from sklearn.svm import LinearSVC


def main_recall(est, X, y):                  # a function of __main__: no worker imports it
    return recall_score(y, est.predict(X))


if __name__ == "__main__":
    X, y = make_classification(60, 4, random_state=0)
    kw = dict(cv=3, scoring={"recall": main_recall, "half": lambda e, X, y: 0.5 * e.score(X, y)},
              refit="recall", return_train_score=True)
    ref = GridSearchCV(LinearSVC(random_state=0), {"C": [0.01, 1.0]}, **kw).fit(X, y)
    ours = cvflow.SearchCV(LinearSVC(random_state=0), {"C": [0.01, 1.0]}, cluster="local",
                           workers=1, **kw).fit(X, y)
    keys = [k for k in ref.cv_results_ if k.startswith(("split", "mean_t", "std_t", "rank"))]
    worst = max(float(np.max(np.abs(ref.cv_results_[k] - ours.cv_results_[k]))) for k in keys)
    print("SAME" if worst <= 1e-12 and ours.best_params_ == ref.best_params_ else f"DIFF {worst}")
"""


def test_scorers_of_main_run_on_worker_processes(tmp_path):
    """A lambda and a function of ``__main__`` reach worker processes by value (cloudpickle,
    as distributed sends them): the same scores as GridSearchCV's in this process."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(cvflow.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "SAME", done.stdout + done.stderr[-2000:]



def test_weighted_scorers_equal_gridsearchcv(data):
    """A scorer that takes sample_weight is given the weights of the rows it scores."""
    X, y = data
    weights = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    def unweighted(y_true, y_pred):
        return recall_score(y_true, y_pred)

    kw = dict(cv=3, scoring={"f1": make_scorer(f1_score), "rec": make_scorer(unweighted)},
              refit="f1")
    with pytest.warns(UserWarning, match="The scoring rec=.* does not support sample_weight"):
        ref = GridSearchCV(LogisticRegression(), GRID, **kw).fit(X, y, sample_weight=weights)
    with pytest.warns(UserWarning, match="The scoring rec=.* does not support sample_weight"):
        ours = cvflow.SearchCV(LogisticRegression(), GRID, cluster="threads", **kw).fit(
            X, y, sample_weight=weights)
    assert_same(ours, ref)


def confusion(estimator, X, y):
    """A callable returning a dict of scores (GridSearchCV's multi-metric callable)."""
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(y, estimator.predict(X))
    return {"tn": cm[0, 0], "fp": cm[0, 1], "fn": cm[1, 0], "tp": cm[1, 1]}


def test_a_callable_returning_a_dict_is_multimetric(data, tmp_path):
    """Its keys are learned on the trial fit, before the store is made: one stored score each."""
    X, y = data
    kw = dict(cv=3, scoring=confusion, refit="fp", return_train_score=True)
    ref = GridSearchCV(LinearSVC(random_state=0), GRID, **kw).fit(X, y)
    ours = cvflow.SearchCV(LinearSVC(random_state=0), GRID, cluster="threads", **kw).fit(X, y)
    assert_same(ours, ref)
    assert ours.multimetric_ and ours.scorer_ is confusion
    assert ours.score(X, y) == ref.score(X, y)
    with pytest.raises(ValueError, match="For multi-metric scoring, the parameter refit must be "
                                         "set to a scorer key"):
        cvflow.SearchCV(LinearSVC(random_state=0), GRID, cv=3, scoring=confusion,
                        cluster="threads").fit(X, y)
    cube = cvflow.Study(LinearSVC(random_state=0), param_grid=GRID, cv=3,
                        scorers={"cm": confusion, "f1": "f1"}).run(
        X, y, store=tmp_path / "s.zarr", cluster="threads", progress=False).cube
    assert list(cube["scorer"].values) == ["tn", "fp", "fn", "tp", "f1"]
    assert json.loads(cube.attrs["scorers"])["cm"]["keys"] == ["tn", "fp", "fn", "tp"]
    counts = cube["score"].sel(scorer=["tn", "fp", "fn", "tp"]).values.sum(axis=-1)
    tested = (~cube["train"].values).sum(axis=1)
    full = int(cube.attrs["full_split"])
    np.testing.assert_array_equal(np.delete(counts, full, axis=1),
                                  np.broadcast_to(np.delete(tested, full), (3, 3)))


def test_without_a_target_the_estimators_own_score_selects():
    """KMeans with scoring=None and no y: GridSearchCV scores each fit with score(X)."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=60, random_state=0)
    grid = {"n_clusters": [2, 3, 4]}
    est = KMeans(random_state=0, init="random", n_init=1)
    ref = GridSearchCV(est, grid, cv=3).fit(X)
    ours = cvflow.SearchCV(est, grid, cv=3, cluster="threads").fit(X)
    assert_same(ours, ref)
    with pytest.raises(ValueError, match="y is required to score with a loss"):
        cvflow.SearchCV(est, grid, cv=3, scoring="r2", cluster="threads").fit(X)
