"""SearchCV.report (issue 41 item 5): the K-fold estimate of the chosen candidate with its
standard error and the bias-corrected K-fold estimate, against a hand computation with
scikit-learn's fits on the same folds (fold models predicting every sample, the full fit):

    K-fold     = Σ_j Σ_{i∈N_j} ℓ_i(fold j) / n,        se = sd_j(fold score_j) / sqrt(K)
    corrected  = K-fold + mean_D ℓ(full) − Σ_j p_j mean_D ℓ(fold j)
    its se     = sqrt((1/K + 1/(K−1)) s²), s² the variance of c_j = score_j + mean_D ℓ(full)
                 − mean_D ℓ(fold j)   (Nadeau & Bengio's corrected variance)
"""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import FitFailedWarning
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

import cvflow

TREE = DecisionTreeClassifier(random_state=0)
GRID = {"max_depth": [2, 4, 8]}


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


def printed(search) -> str:
    out = io.StringIO()
    search.report(file=out)
    return out.getvalue()


def numbers(text: str, label: str) -> tuple[float, float]:
    """(estimate, se) of the line ``label``: 6 and 3 significant digits printed."""
    match = re.search(rf"{label} \([^)]*\):\s+(\S+)\s+se (\S+)", text)
    assert match, text
    return float(match.group(1)), float(match.group(2))


def close(got: tuple[float, float], estimate: float, se: float) -> bool:
    return got[0] == pytest.approx(estimate, rel=1e-5) and got[1] == pytest.approx(se, rel=5e-3)


def by_hand(X, y, params: dict, loss) -> dict:
    """K-fold and corrected K-fold of ``loss(y, model, X) -> per-sample values``."""
    folds = list(StratifiedKFold(5).split(X, y))
    full = clone(TREE).set_params(**params).fit(X, y)
    full_risk = loss(y, full, X).mean()
    scores, risks, sizes = [], [], []
    for train, test in folds:
        model = clone(TREE).set_params(**params).fit(X[train], y[train])
        values = loss(y, model, X)
        scores.append(values[test].mean())
        risks.append(values.mean())
        sizes.append(len(test))
    scores, risks, sizes = map(np.asarray, (scores, risks, sizes))
    kfold = float((scores * sizes).sum() / sizes.sum())
    c = scores + full_risk - risks
    return {"kfold": kfold, "kfold_se": scores.std(ddof=1) / np.sqrt(5),
            "corrected": kfold + full_risk - float((sizes / sizes.sum() * risks).sum()),
            "corrected_se": np.sqrt((1 / 5 + 1 / 4) * c.var(ddof=1)), "scores": scores}


def brier(y, model, X):
    return (model.predict_proba(X)[:, 1] - y) ** 2


def wrong(y, model, X):
    return (model.predict(X) != y).astype(float)


def test_report_of_a_pointwise_scoring_equals_the_hand_computation(cancer):
    X, y = cancer
    search = cvflow.SearchCV(TREE, GRID, cv=5, scoring="neg_brier_score",
                             cluster="threads").fit(X, y)
    want = by_hand(X, y, search.best_params_, brier)
    text = printed(search)
    assert close(numbers(text, "K-fold estimate"), want["kfold"], want["kfold_se"])
    assert close(numbers(text, "corrected K-fold estimate"), want["corrected"],
                 want["corrected_se"])
    assert want["corrected"] != pytest.approx(want["kfold"], rel=1e-3)   # a correction at all
    assert "warnings: none" in text


def test_report_of_accuracy_on_the_metrics_scale(cancer):
    X, y = cancer
    search = cvflow.SearchCV(TREE, GRID, cv=5, cluster="threads").fit(X, y)
    want = by_hand(X, y, search.best_params_, wrong)
    text = printed(search)
    # accuracy is the mean of the fold accuracies (GridSearchCV's best_score_), se of them
    assert close(numbers(text, "K-fold estimate"), 1 - want["scores"].mean(), want["kfold_se"])
    assert close(numbers(text, "corrected K-fold estimate"), 1 - want["corrected"],
                 want["corrected_se"])


def test_report_says_what_it_cannot_compute_and_the_warnings(cancer):
    X, y = cancer
    search = cvflow.SearchCV(TREE, GRID, cv=5, scoring="roc_auc", cluster="threads").fit(X, y)
    assert "not computed: roc_auc is a per-fold metric" in printed(search)
    search = cvflow.SearchCV(TREE, GRID, cv=5, refit=False, scoring="neg_brier_score",
                             cluster="threads").fit(X, y)
    assert "not computed: refit=False" in printed(search)
    # tiny test folds (cvflow's guardrail) and failed fits reach the report
    with pytest.warns(FitFailedWarning):
        search = cvflow.SearchCV(TREE, {"max_depth": [2, -1]}, cv=5, scoring="neg_brier_score",
                                 cluster="threads").fit(X[:40], y[:40])
    text = printed(search)
    assert "warning: the smallest test fold scores only 8 sample(s)" in text
    assert "warning: 5 of 10 fits failed (0 of the chosen candidate's)" in text


def test_the_guides_first_example_shows_its_real_output():
    """docs/guide/searchcv.md: its first example, run, prints the report its text block shows."""
    import contextlib
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs/guide/searchcv.md").read_text()
    code = re.search(r"```python\n(.*?)```", guide, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", guide, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("cv=5,", "cv=5, cluster='threads',"), "searchcv.md", "exec"),
             {})
    assert out.getvalue() == shown
