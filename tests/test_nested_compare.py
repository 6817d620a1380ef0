"""nested_compare: two learners each tuned by the inner CV, compared on the outer folds'
paired losses, against an independent brute force: scikit-learn's GridSearchCV inside every
outer training set (same folds), the t statistic and both intervals computed by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone
from sklearn.datasets import make_regression
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.neighbors import KNeighborsRegressor

import cvflow
from cvflow.errors import InputError

from cvtest import run_cli

GRIDS = {"ridge": (Ridge(), {"alpha": [0.01, 3.0, 300.0]}),
         "knn": (KNeighborsRegressor(), {"n_neighbors": [2, 5, 12]})}


def data():
    X, y = make_regression(60, 5, n_informative=3, noise=20.0, random_state=3)
    return X, y + 0.02 * X[:, 0] ** 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("nc") / "s.zarr"
    X, y = data()
    study = cvflow.Study(GRIDS, cv={"folds": 5, "repeats": 2, "seed": 0},
                         estimators=["kfold", {"nested_compare": {"learners": ["ridge", "knn"]}}],
                         loss="squared")
    study.run(X, y, store=path, cluster="threads", progress=False)
    return path


def brute_force(fold: np.ndarray, alpha: float = 0.05) -> dict:
    """GridSearchCV of each learner on every outer training set, refitted, scored on the
    outer fold; the paired differences' corrected t and Wald interval by hand."""
    X, y = data()
    n_rep, k = fold.shape[0], int(fold.max()) + 1
    d = np.zeros((n_rep, len(y)))
    chosen = {name: np.zeros((n_rep, k), dtype=object) for name in GRIDS}
    for r in range(n_rep):
        for t in range(k):
            train, test = fold[r] != t, fold[r] == t
            losses = {}
            for name, (est, grid) in GRIDS.items():
                search = GridSearchCV(clone(est), grid, cv=PredefinedSplit(fold[r][train]),
                                      scoring="neg_mean_squared_error").fit(X[train], y[train])
                losses[name] = (y[test] - search.best_estimator_.predict(X[test])) ** 2
                chosen[name][r, t] = search.best_params_
            d[r, test] = losses["ridge"] - losses["knn"]
    fold_diff = np.array([[d[r, fold[r] == t].mean() for t in range(k)] for r in range(n_rep)])
    m = fold_diff.size
    mean, s2 = fold_diff.mean(), fold_diff.var(ddof=1)
    se = np.sqrt((1 / m + 1 / (k - 1)) * s2)
    q = stats.t.ppf(1 - alpha / 2, m - 1)
    within = np.mean([sum(((d[r, fold[r] == t] - d[r, fold[r] == t].mean()) ** 2).sum()
                          for t in range(k)) / (len(y) - k) for r in range(n_rep)])
    wald_se = np.sqrt(within / len(y))
    z = stats.norm.ppf(1 - alpha / 2)
    return {"fold_mean": mean, "t": mean / se, "p_value": 2 * stats.t.sf(abs(mean / se), m - 1),
            "lower": mean - q * se, "upper": mean + q * se, "estimate": d.mean(),
            "wald_z": d.mean() / wald_se, "wald_lower": d.mean() - z * wald_se,
            "wald_upper": d.mean() + z * wald_se,
            "wald_p_value": 2 * stats.norm.sf(abs(d.mean() / wald_se)),
            "difference": fold_diff, "chosen": chosen}


def test_equals_gridsearchcv_in_every_outer_training_set(store):
    cube = cvflow.open(store)
    got = cvflow.estimators.nested_compare(cube, learners=["ridge", "knn"])
    ref = brute_force(np.asarray(cube["fold"].values))
    for key in ("fold_mean", "t", "p_value", "lower", "upper", "estimate", "wald_z",
                "wald_lower", "wald_upper", "wald_p_value"):
        assert float(got[key]) == pytest.approx(ref[key], rel=1e-10, abs=1e-10), key
    np.testing.assert_allclose(got["difference"].values, ref["difference"], rtol=1e-10)
    for name, key in (("ridge", "chosen_params_a"), ("knn", "chosen_params_b")):
        picks = [[{k: v for k, v in p["params"].items() if k in ref["chosen"][name][0, 0]}
                  for p in row]
                 for row in got.attrs[key]]
        assert picks == ref["chosen"][name].tolist()
    # the comparison is not degenerate: the learners' choices vary and the test has signal
    assert int(got["df"]) == 9 and np.isfinite(float(got["t"]))
    # swapping the learners flips the sign, nothing else
    swapped = cvflow.estimators.nested_compare(cube, learners=["knn", "ridge"])
    assert float(swapped["t"]) == pytest.approx(-float(got["t"]), rel=1e-12)


def test_report_cli_shows_the_comparison(store):
    res = run_cli("report", store, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["nested_compare"]
    assert out["learners"] == ["ridge", "knn"] and out["df"] == 9
    text = run_cli("report", store)
    assert text.returncode == 0, text.stderr
    assert "ridge tuned vs knn tuned by nested CV" in text.stdout
    assert "corrected t (Nadeau–Bengio, df 9)" in text.stdout and "Wald" in text.stdout
    swapped = run_cli("report", store, "--set", "nested_compare.learners=[knn, ridge]", "--json")
    assert json.loads(swapped.stdout)["nested_compare"]["t"] == pytest.approx(-out["t"])


def test_bad_learners_refused(store, tmp_path):
    res = run_cli("report", store, "--set", "nested_compare.learners=[ridge, svm]")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nested_compare.learners: 'svm' is not a learner of the study; its learners are: " \
           "ridge, knn" in res.stderr
    X, y = data()
    for learners, match in ((["ridge", "svm"], "'svm' is not a learner"),
                            (["ridge", "ridge"], "name two different learners")):
        study = cvflow.Study(GRIDS, cv=5, estimators=[{"nested_compare": {"learners": learners}}])
        with pytest.raises(InputError, match=match):
            study.run(X, y, store=tmp_path / "bad.zarr", cluster="threads", progress=False)
        assert not (tmp_path / "bad.zarr").exists()
    with pytest.raises(InputError, match="the study has 1 learner"):
        cvflow.Study({"ridge": GRIDS["ridge"]}, cv=5, estimators=["nested_compare"]).validate(X, y)
