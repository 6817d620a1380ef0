"""Stores written before the multiclass format (format 1, tests/data/v1, made by
tests/data/make_v1_stores.sh from cvflow 5973b8d) open and reduce unchanged."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import zarr
from sklearn.metrics import hinge_loss, log_loss, mean_squared_error, zero_one_loss

import cvflow
from cvflow.cli import main
from cvflow.errors import StoreError
from cvflow.estimators import corrected_kfold, kfold, nested_cv

V1 = Path(__file__).parent / "data" / "v1"


@pytest.fixture
def v1(tmp_path):
    """A copy of a format-1 store (reading must not need to write, but never risk the fixture)."""
    def copy(name: str) -> Path:
        target = tmp_path / f"{name}.zarr"
        shutil.copytree(V1 / f"{name}.zarr", target)
        return target
    return copy


def _raw(store: Path):
    """pred, y, fold, fold_split as zarr stores them (no cvflow code involved)."""
    group = zarr.open_group(str(store), mode="r")
    return (group["pred"][...], group["y"][...], group["fold"][...][0],
            group["fold_split"][...][0])


def _oof_mean(metric, pred_h, y, fold, fold_split):
    n = (fold >= 0).sum()
    return sum(metric(y[fold == j], pred_h[s][fold == j]) * (fold == j).sum()
               for j, s in enumerate(fold_split)) / n


def test_v1_binary_store_opens_and_reduces(v1):
    store = v1("binary")
    cube = cvflow.open(store)
    assert "cvflow_format" not in cube.attrs and "class" not in cube["pred"].dims
    pred, y, fold, fold_split = _raw(store)
    zo = kfold(cube, loss="zero_one")["estimate"].values
    for h, threshold in ((0, 0.5), (1, 0.5), (2, 0.0)):        # logreg proba x2, svc decision
        want = _oof_mean(lambda t, p: zero_one_loss(t, (p > threshold).astype(int)),
                         pred[h], y, fold, fold_split)
        assert zo[h] == pytest.approx(want, rel=1e-12)
    sub = cube.isel(param=[0, 1])
    got = kfold(sub, loss="log_loss")["estimate"].values
    for h in range(2):
        assert got[h] == pytest.approx(_oof_mean(lambda t, p: log_loss(t, p, labels=[0, 1]),
                                                 pred[h], y, fold, fold_split), rel=1e-12)
    hinge = kfold(cube.isel(param=[2]), loss="hinge")["estimate"].values[0]
    assert hinge == pytest.approx(_oof_mean(hinge_loss, pred[2], y, fold, fold_split), rel=1e-12)
    assert nested_cv(cube)["chosen"].shape == (1, 4)


def test_v1_regression_store_reports(v1, capsys):
    store = v1("regression")
    pred, y, fold, fold_split = _raw(store)
    assert main(["report", str(store), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"kfold", "corrected_kfold", "nested_cv"}
    for h in range(2):
        want = _oof_mean(mean_squared_error, pred[h], y, fold, fold_split)
        assert out["kfold"]["estimate"]["values"][h] == pytest.approx(want, rel=1e-12)
    assert corrected_kfold(cvflow.open(store), loss="pinball:0.5")["estimate"].shape == (2,)


def test_newer_store_format_is_refused(v1):
    store = v1("regression")
    group = zarr.open_group(str(store), mode="r+")
    group.attrs["cvflow_format"] = 99
    with pytest.raises(StoreError, match="store format 99, newer than this cvflow's"):
        cvflow.open(store)
