"""cvflow.SearchCV on one value a sample (issue 41 item 5): a list of strings, a 1-d object
array, a pandas Series of texts, a list of dicts and 1-d numbers, each against GridSearchCV on
the same data and folds: every score of cv_results_ to 1e-12, best_params_, predictions."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction import DictVectorizer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import LinearSVC

import cvflow
from cvflow.errors import InputError

TOL = dict(rtol=1e-12, atol=1e-12)
TOPICS = ("apple banana cherry grape melon pear", "engine wheel brake motor gear clutch",
          "goal match team score player coach")
COMMON = "the a of and to in is it on was".split()


@pytest.fixture(scope="module")
def texts():
    """300 sentences in 3 topics, with words of the other topics and 15% of labels flipped, so
    that no candidate scores 1 and the grid has a best."""
    rng = np.random.RandomState(0)
    vocab = [t.split() for t in TOPICS]
    docs, y = [], []
    for i in range(300):
        c = i % 3
        words = (list(rng.choice(vocab[c], 2)) + list(rng.choice(vocab[(c + 1) % 3], 2))
                 + list(rng.choice(COMMON, 4)))
        rng.shuffle(words)
        docs.append(" ".join(words))
        y.append(c if rng.rand() > 0.15 else (c + 2) % 3)
    return docs, np.array(y)


def both(estimator, grid, X, y, **kwargs):
    """SearchCV (fits in this process) and GridSearchCV, fitted on the same X and y (a
    LinearSVC seeded: unseeded, liblinear draws from numpy's global state, so two GridSearchCV
    runs may differ on a near tie)."""
    ours = cvflow.SearchCV(estimator, grid, cluster="threads", **kwargs).fit(X, y)
    return ours, GridSearchCV(estimator, grid, **kwargs).fit(X, y)


def assert_same(ours, ref, X_new):
    for key, want in ref.cv_results_.items():
        if "_time" not in key and not key.startswith("param"):
            np.testing.assert_allclose(ours.cv_results_[key], want, err_msg=key, **TOL)
    assert ours.best_params_ == ref.best_params_
    assert ours.best_index_ == ref.best_index_
    assert ours.best_score_ == pytest.approx(ref.best_score_, abs=1e-12)
    np.testing.assert_array_equal(ours.predict(X_new), ref.predict(X_new))


GRID = {"linearsvc__C": [0.01, 0.1, 1.0], "tfidfvectorizer__ngram_range": [(1, 1), (1, 2)]}


@pytest.mark.parametrize("kind", ["list", "object array", "series"])
def test_a_text_pipeline_on_texts_as_gridsearchcv(texts, kind):
    docs, y = texts
    X = {"list": docs, "object array": np.array(docs, dtype=object),
         "series": pd.Series(docs, index=np.arange(len(docs)) * 2)}[kind]
    ours, ref = both(make_pipeline(TfidfVectorizer(), LinearSVC(random_state=0)), GRID, X, y, cv=5)
    assert 0.5 < ref.best_score_ < 1.0          # a grid with a best, not a trivial one
    assert len(set(ref.cv_results_["mean_test_score"])) > 1
    assert_same(ours, ref, docs[:20])


def test_several_scorings_and_train_scores_on_texts(texts):
    docs, y = texts
    ours, ref = both(make_pipeline(TfidfVectorizer(), LogisticRegression()),
                     {"logisticregression__C": [0.1, 1.0, 10.0]}, docs, y, cv=4,
                     scoring=["accuracy", "neg_log_loss"], refit="neg_log_loss",
                     return_train_score=True)
    assert_same(ours, ref, docs[:20])


def test_a_list_of_dicts_and_one_number_a_sample(texts):
    docs, y = texts
    dicts = [{w: 1.0 for w in d.split()} for d in docs]
    ours, ref = both(make_pipeline(DictVectorizer(), LogisticRegression()),
                     {"logisticregression__C": [0.1, 1.0]}, dicts, y, cv=3)
    assert_same(ours, ref, dicts[:10])
    rng = np.random.RandomState(1)
    x = rng.normal(size=120)
    target = 2 * x + rng.normal(size=120)
    column = FunctionTransformer(lambda v: np.asarray(v).reshape(-1, 1))
    ours, ref = both(make_pipeline(column, Ridge()), {"ridge__alpha": [0.1, 10.0, 1000.0]},
                     list(x), target, cv=3)
    assert_same(ours, ref, list(x[:5]))


def test_a_1d_X_an_estimator_cannot_fit_fails_as_gridsearchcv(texts):
    docs, y = texts
    grid = {"C": [1.0]}
    with pytest.raises(ValueError, match="All the 3 fits failed") as ref:
        GridSearchCV(LogisticRegression(), grid, cv=3).fit(docs, y)
    with pytest.raises(ValueError, match="All the 3 fits failed") as ours:
        cvflow.SearchCV(LogisticRegression(), grid, cv=3, cluster="threads").fit(docs, y)
    assert "could not convert string to float" in str(ref.value)
    assert "could not convert string to float" in str(ours.value)


def test_a_store_refuses_other_texts(texts, tmp_path):
    docs, y = texts
    store = tmp_path / "text.zarr"
    search = cvflow.SearchCV(make_pipeline(TfidfVectorizer(), LinearSVC(random_state=0)),
                             {"linearsvc__C": [0.1, 1.0]}, cv=3, cluster="threads", store=store)
    search.fit(docs, y)
    with pytest.raises(InputError, match="data hash"):
        search.fit([d.upper() for d in docs], y)


def test_the_2d_rules_stand():
    with pytest.raises(InputError, match=r"X has shape \(\); give a 2-d array"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, cluster="threads").fit(np.float64(3.0), [1.0])
    with pytest.raises(InputError, match="X: Complex data not supported"):
        cvflow.SearchCV(Ridge(), {"alpha": [1.0]}, cv=2, cluster="threads").fit(
            np.arange(6) + 1j, np.arange(6.0))


def test_refit_from_the_store_takes_the_texts_again(texts, tmp_path):
    """The store keeps no copy of the texts: refit fits them given again, as
    GridSearchCV's best_estimator_ is fitted."""
    docs, y = texts
    pipe = make_pipeline(TfidfVectorizer(), LinearSVC(random_state=0))
    ours = cvflow.SearchCV(pipe, {"linearsvc__C": [0.1, 1.0]}, cv=3, cluster="threads",
                           store=tmp_path / "s.zarr").fit(docs, y)
    ref = GridSearchCV(pipe, {"linearsvc__C": [0.1, 1.0]}, cv=3).fit(docs, y)
    model = ours.result_.refit("kfold", X=docs, y=y)
    np.testing.assert_array_equal(model.predict(docs), ref.predict(docs))
