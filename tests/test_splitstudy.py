"""The many-split reproduction runner (workflows/studies/splitstudy.py): its paired statistics
against a bootstrap and hand computations, and its per-split cache against a direct reduction."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows" / "studies"))
import splitstudy  # noqa: E402


def test_ratio_of_means_se_matches_the_bootstrap():
    rng = np.random.default_rng(0)
    b = rng.gamma(4.0, 5.0, 400)
    a = b * rng.lognormal(0.05, 0.2, 400)
    r, se = splitstudy.ratio_of_means(a, b)
    assert r == pytest.approx(a.mean() / b.mean())
    idx = rng.integers(0, 400, (4000, 400))
    boot = a[idx].mean(axis=1) / b[idx].mean(axis=1)
    assert se == pytest.approx(boot.std(), rel=0.1)


def test_geometric_mean_shares_and_mean_se_by_hand():
    g, se = splitstudy.geometric_mean([0.9, 1.2], [0.09, 0.06])
    assert g == pytest.approx(np.sqrt(0.9 * 1.2))
    assert se == pytest.approx(g * np.sqrt(0.1 ** 2 + 0.05 ** 2) / 2)
    assert splitstudy.shares([1, 2, 3, 4], [2, 2, 1, 1]) == (0.25, 0.25, 0.5)
    m, s = splitstudy.mean_se([1.0, 2.0, 3.0])
    assert (m, s) == pytest.approx((2.0, 1.0 / np.sqrt(3)))


def _kfold_record(cube) -> dict:
    from cvflow.estimators import kfold

    return {"estimate": kfold(cube)["estimate"].values.tolist()}


def test_run_all_caches_records_and_removes_stores(tmp_path):
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import KFold, cross_val_score

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    config = {"name": "tiny", "data": {"source": "npz", "path": str(tmp_path / "d.npz")},
              "task": "regression", "loss": "squared",
              "learners": [{"name": "ridge", "class": "sklearn.linear_model.Ridge",
                            "grid": {"alpha": [0.1, 10.0]}}],
              "design": {"splitter": {"class": "sklearn.model_selection.KFold", "n_splits": 4}},
              "estimators": ["kfold"]}
    job = splitstudy.Job(tmp_path / "res", "s000", config, _kfold_record)
    [record] = splitstudy.run_all([job], workers=1)
    for alpha, est in zip([0.1, 10.0], record["estimate"]):
        ref = -cross_val_score(Ridge(alpha=alpha), X, y, cv=KFold(4),
                               scoring="neg_mean_squared_error").mean()
        assert est == pytest.approx(ref)
    assert record["fits"] == 2 * 5 and record["failed"] == 0
    assert job.record.is_file() and not (tmp_path / "res" / "s000.zarr").exists()
    # a cached record is read back, nothing runs (the workflow's data is gone)
    (tmp_path / "d.npz").unlink()
    assert splitstudy.run_all([job], workers=1) == [record]
    assert splitstudy.run_all([job._replace(key="s001")], run=False) == [None]
