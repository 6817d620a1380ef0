"""Stores written before the multiclass format (format 1, tests/data/v1, made by
tests/data/make_v1_stores.sh from cvflow 5973b8d) open and reduce unchanged."""
from __future__ import annotations

import json
import re
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


def _format(store: Path, value) -> None:
    group = zarr.open_group(str(store), mode="r+")
    group.attrs["cvflow_format"] = value


@pytest.mark.parametrize("value, kind", [(None, r"a NoneType \(null\)"), (0, r"a int \(0\)"),
                                         ("2", r'a str \("2"\)'), (2.5, r"a float \(2\.5\)")],
                         ids=["null", "zero", "text", "fraction"])
def test_a_format_that_is_no_format_is_damage_everywhere(v1, capsys, value, kind):
    """Issue 32: ``cvflow_format: null`` raised a TypeError in report (exit 1); 0, "2" and 2.5
    were accepted. open and report refuse it (exit 2, one line); status and verify list it
    (exit 1)."""
    store = v1("regression")
    _format(store, value)
    problem = (rf"attribute cvflow_format is {kind}, not a store format \(a whole number from 1; "
               r"this cvflow writes 2, 3 with scorers\)")
    with pytest.raises(StoreError, match=problem + "; the store is damaged: restore it"):
        cvflow.open(store)
    assert main(["report", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(problem, err[0]), err
    for command in ("status", "verify"):
        assert main([command, str(store)]) == 1
        out = capsys.readouterr().out
        assert re.search(problem, out), out


def test_a_format_that_is_no_format_refuses_a_run_untouched(v1, tmp_path):
    from cvtest import QUICK, run_cli, tree_digest

    wf = tmp_path / "wf.yaml"
    wf.write_text(QUICK + "execution: {cluster: threads}\n")
    store = v1("regression")
    for value, message in ((None, "attribute cvflow_format is a NoneType (null), not a store "
                                  "format"),
                           ("2", 'attribute cvflow_format is a str ("2"), not a store format'),
                           (99, "has store format 99, newer than this cvflow's (3); upgrade "
                                "cvflow to read it")):
        _format(store, value)
        before = tree_digest(store)
        result = run_cli("run", wf, "--store", store, cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
        assert tree_digest(store) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["regression.zarr", "wf.yaml"]


def test_status_and_verify_refuse_a_newer_format_as_open_does(v1, capsys):
    """Issue 32: status said "complete" and verify "0 damaged" (exit 0) of a format-99 store
    that open refuses."""
    store = v1("regression")
    _format(store, 99)
    for command in ("status", "verify", "report"):
        assert main([command, str(store)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and "has store format 99, newer than this cvflow's (3); " \
            "upgrade cvflow to read it" in err[0], err
