"""cvflow.search.diagram: SearchCV's HTML diagram through scikit-learn's private block class,
the one private scikit-learn name cvflow uses (issue 39 item 5). The first test fails when
scikit-learn moves, renames or changes that class; the last checks the fallback."""
from __future__ import annotations

import inspect

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.utils import estimator_html_repr

import cvflow
from cvflow.search import diagram


def test_scikit_learn_still_has_the_block_class_the_adapter_builds():
    from sklearn.utils._repr_html.estimator import _VisualBlock   # moved or renamed: fails here

    params = inspect.signature(_VisualBlock).parameters
    assert list(params)[:2] == ["kind", "estimators"]
    assert {"names", "name_details"} <= set(params)
    block = diagram.parallel_block(Ridge(alpha=2.0), "estimator: Ridge")
    assert isinstance(block, _VisualBlock)
    assert (block.kind, block.names, block.name_details) == (
        "parallel", ["estimator: Ridge"], [str(Ridge(alpha=2.0))])
    assert [str(e) for e in block.estimators] == ["Ridge(alpha=2.0)"]


def test_the_diagram_shows_the_estimator_then_the_best_estimator():
    search = cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=3,
                             scoring="neg_mean_squared_error")
    assert "estimator: Ridge" in estimator_html_repr(search)
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 3))
    search.fit(X, X @ [1.0, 2.0, 0.0] + rng.normal(size=30))
    assert "best_estimator_: Ridge" in estimator_html_repr(search)


def test_without_the_block_class_the_diagram_is_scikit_learns_fallback(monkeypatch):
    monkeypatch.setattr(diagram, "parallel_block", lambda estimator, name: None)
    html = estimator_html_repr(cvflow.SearchCV(Ridge(), {"alpha": [0.1, 1.0]}))
    assert "SearchCV" in html and "estimator: Ridge" not in html
