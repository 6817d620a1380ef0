"""The answer-first summary (cvflow.report.summary): each criterion's choice, estimate, interval and test
risk, checked against scikit-learn's GridSearchCV on the same folds and a refit by hand."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import GridSearchCV, PredefinedSplit

import cvflow
from cvflow.report import summary
from cvflow.execution.run import run
from cvflow.report import compute

ALPHAS = [0.01, 1.0, 30.0, 1000.0]
STUDY = f"""\
name: summary
data: {{source: synthetic, name: linear, params: {{n: 80, p: 5}}, test_fraction: 0.25}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {ALPHAS}}}
design: {{folds: 4, seed: 3, subset: {{size: 10, pairs: 3}}}}
estimators: [kfold, corrected_kfold, bates_ncv, {{ustat: {{compare: [0, 3]}}}}]
execution: {{fits_per_task: 8}}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory, client):
    path = tmp_path_factory.mktemp("summary") / "s.yaml"
    path.write_text(STUDY)
    store = run(path, store=path.with_suffix(".zarr"), client=client).store
    cube = cvflow.open(store)
    return cube, compute(cube)


def test_kfold_row_is_gridsearchcv_on_the_same_folds(study):
    cube, results = study
    X, y = cube["X"].values, cube["y"].values
    test = cube["is_test"].values
    fold = cube["fold"].values[0]
    assert np.bincount(fold[~test]).tolist() == [15] * 4       # equal folds: pooled = mean
    search = GridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=PredefinedSplit(fold[~test]),
                          scoring="neg_mean_squared_error").fit(X[~test], y[~test])
    rows = {r["criterion"]: r for r in summary.rows(cube, results)}
    kf = rows["kfold"]
    assert kf["chosen"] == f"ridge(alpha={search.best_params_['alpha']:.4g})"
    assert kf["estimate"] == pytest.approx(-search.best_score_, rel=1e-10)
    # the test risk of the chosen param's full fit, refitted here on the analysis samples
    refit = Ridge(alpha=search.best_params_["alpha"]).fit(X[~test], y[~test])
    assert kf["test_risk"] == pytest.approx(mean_squared_error(y[test], refit.predict(X[test])),
                                            rel=1e-10)
    assert kf["se"] > 0 and kf["lower"] is None


def test_every_criterion_has_a_row_and_the_html_table_leads_with_them(study):
    cube, results = study
    rows = summary.rows(cube, results)
    names = [r["criterion"] for r in rows]
    # corrected_kfold's plain K-fold choice is kfold's row; bates_ncv is read at kfold's choice
    assert names == ["kfold", "corrected_kfold", "bates_ncv: interval at the first choice", "ustat"]
    bates = rows[2]
    assert bates["param"] == rows[0]["param"] and bates["lower"] < bates["estimate"] < bates["upper"]
    assert rows[3]["chosen"] == "ridge(alpha=0.01) − ridge(alpha=1000)"
    assert rows[3]["p_value"] is not None and rows[3]["test_risk"] is None
    html = summary.to_html(rows, loss="squared")
    assert html.startswith("<table class='summary'>") and html.count("<tr>") == 5
    assert "<code>ridge(alpha=1000)</code>" not in html or rows[0]["param"] == 3


def test_a_criterion_that_could_choose_nothing_says_so(study):
    cube, results = study
    failed = results["kfold"].copy()
    failed["selected"] = failed["selected"] * 0 - 1          # what kfold returns if all failed
    (row,) = summary.rows(cube, {"kfold": failed})
    assert row["chosen"] == "(none: every param failed)" and row["estimate"] is None
