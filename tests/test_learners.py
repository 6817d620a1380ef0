"""Learners from workflow entries: grids, preprocessing pipelines, prediction outputs."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

from cvflow.errors import InputError
from cvflow.fitting.block import fit_block
from cvflow.workflow.spec import parse_workflow


def _workflow(learner: dict, tmp_path):
    config = {"data": {"source": "sklearn", "name": "diabetes"}, "learners": [learner]}
    return parse_workflow(config, tmp_path / "wf.yaml")


def test_preprocess_fits_a_pipeline_on_each_training_set(tmp_path):
    wf = _workflow({"class": "sklearn.linear_model.Ridge", "grid": {"alpha": [0.1, 10.0]},
                    "preprocess": ["sklearn.preprocessing.StandardScaler",
                                   {"sklearn.preprocessing.PolynomialFeatures": {"degree": 2}}]},
                   tmp_path)
    X, y = load_diabetes(return_X_y=True)
    train = np.zeros((1, len(y)), bool)
    train[0, :300] = True
    res = fit_block(wf.params, X, y, train, params_slice=slice(0, 2), splits_slice=slice(0, 1))
    for h, alpha in enumerate([0.1, 10.0]):
        ref = make_pipeline(StandardScaler(), PolynomialFeatures(degree=2), Ridge(alpha=alpha))
        np.testing.assert_allclose(res.pred[h, 0], ref.fit(X[:300], y[:300]).predict(X), rtol=1e-9)
    assert '"preprocess"' in wf.params[0].to_json()
    plain = _workflow({"class": "sklearn.linear_model.Ridge"}, tmp_path)
    assert wf.fit_hash() != plain.fit_hash()


@pytest.mark.parametrize("steps,fragment", [
    (["sklearn.linear_model.Ridge"], "is not a transformer"),
    (["sklearn.preprocessing.NoSuchScaler"], "does not import"),
    ("sklearn.preprocessing.StandardScaler", "give a list of transformer paths"),
])
def test_preprocess_errors(tmp_path, steps, fragment):
    with pytest.raises(InputError, match=fragment):
        _workflow({"class": "sklearn.linear_model.Ridge", "preprocess": steps}, tmp_path)


def test_grid_generators(tmp_path):
    wf = _workflow({"class": "sklearn.linear_model.Ridge",
                    "grid": {"alpha": {"logspace": [-1, 1, 3]}, "fit_intercept": [True, False]}},
                   tmp_path)
    got = [(p.hyper["alpha"], p.hyper["fit_intercept"]) for p in wf.params]
    want = [(a, b) for a in (0.1, 1.0, 10.0) for b in (True, False)]
    np.testing.assert_allclose([g[0] for g in got], [w[0] for w in want])
    assert [g[1] for g in got] == [w[1] for w in want]
    with pytest.raises(InputError, match="range needs three numbers"):
        _workflow({"class": "sklearn.linear_model.Ridge", "grid": {"alpha": {"range": [1, 2]}}},
                  tmp_path)


def test_class_key_and_the_deprecated_estimator_spelling(tmp_path):
    """`class:` names a learner's class; `estimator:` still works with one DeprecationWarning,
    and both spellings give the same fit hash (stores made with either stay valid)."""
    new = _workflow({"class": "sklearn.linear_model.Ridge", "grid": {"alpha": [1.0]}}, tmp_path)
    with pytest.warns(DeprecationWarning, match=r"learners\[0\]\.estimator is deprecated; "
                                                r"write class: sklearn.linear_model.Ridge") as rec:
        old = _workflow({"estimator": "sklearn.linear_model.Ridge", "grid": {"alpha": [1.0]}},
                        tmp_path)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert old.fit_hash() == new.fit_hash() and old.params == new.params
    with pytest.raises(InputError, match=r"learners\[0\]\.estimator: give the learner's class "
                                         "once, as class:"):
        _workflow({"class": "sklearn.linear_model.Ridge",
                   "estimator": "sklearn.linear_model.Ridge"}, tmp_path)
    with pytest.raises(InputError, match=r"learners\[0\]\.class: missing; give a dotted path"):
        _workflow({"grid": {"alpha": [1.0]}}, tmp_path)
