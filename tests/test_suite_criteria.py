"""A suite's report of selection criteria across data sets (the papers' summary rows): each data
set's test risks equal its single-data-set run reduced by corrected_kfold, and the geometric
mean of the ratios, the per-K rows and the counts equal a hand computation from them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import cvflow
from cvflow.estimators import corrected_kfold

from cvtest import run_cli

SUITE = """\
name: crit
data:
  - {source: sklearn, name: diabetes, test_fraction: 0.333, seed: 0, label: diabetes_k2}
  - {source: sklearn, name: diabetes, test_fraction: 0.333, seed: 0, label: diabetes_k3, design: {folds: 3}}
  - {source: synthetic, name: sparse_linear, params: {n: 150, p: 12}, seed: 4, test_fraction: 0.333,
     label: sparse, design: {folds: 3}}
  - source: sklearn
    name: breast_cancer
    test_fraction: 0.333
    seed: 0
    task: classification
    loss: hinge
    design: {folds: 2, splitter: stratified}
    learners:
      - name: svm
        class: sklearn.svm.SVC
        preprocess: [sklearn.preprocessing.StandardScaler]
        params: {kernel: sigmoid, gamma: auto}
        output: decision_function
        grid: {C: {logspace: [-1, 2, 13]}}
task: regression
loss: squared
learners:
  - name: svm
    class: sklearn.svm.SVR
    preprocess: [sklearn.preprocessing.StandardScaler]
    params: {kernel: sigmoid, gamma: auto}
    grid: {C: {logspace: [-1, 2, 13]}}
design: {folds: 2, repeats: 1, seed: 0}
estimators: [corrected_kfold]
execution: {cluster: threads, workers: 1}
"""


def _single(label: str) -> dict:
    """data[label] as the one-data-set workflow a user would write by hand."""
    config = yaml.safe_load(SUITE)
    entry = next(e for e in config["data"] if e.get("label", e["name"]) == label)
    for key in ("task", "loss", "learners"):
        if key in entry:
            config[key] = entry.pop(key)
    if "design" in entry:
        config["design"] = {**config["design"], **entry.pop("design")}
    entry.pop("label", None)
    config.update(name=label, data=entry)
    return config


def test_criteria_rows_equal_each_cubes_single_run_and_a_hand_computation(tmp_path):
    path = tmp_path / "crit.yaml"
    path.write_text(SUITE)
    res = run_cli("run", path, "--store", tmp_path / "crit.zarr", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "selection criteria across data sets" in res.stdout
    out = json.loads(run_cli("report", tmp_path / "crit.zarr", "--json").stdout)["suite"]
    assert out["loss"] == "mixed (squared, hinge)"
    crit = out["criteria"]
    labels = ["diabetes_k2", "diabetes_k3", "sparse", "breast_cancer"]
    assert list(crit["datasets"]) == labels
    kf, corr, ks = [], [], []
    for label in labels:
        single = tmp_path / f"{label}.yaml"
        single.write_text(yaml.safe_dump(_single(label)))
        done = run_cli("run", single, "--store", tmp_path / f"{label}.zarr", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        ref = corrected_kfold(cvflow.open(tmp_path / f"{label}.zarr"))   # its own loss
        row = crit["datasets"][label]
        assert row["kfold"] == pytest.approx(float(ref["kfold_test_risk"]), rel=1e-12)
        assert row["corrected_kfold"] == pytest.approx(float(ref["test_risk"]), rel=1e-12)
        assert row["best"] == pytest.approx(float(np.nanmin(ref["full_test_risk"].values)), rel=1e-12)
        kf.append(float(ref["kfold_test_risk"]))
        corr.append(float(ref["test_risk"]))
        ks.append(row["K"])
    assert ks == [2, 3, 3, 2]
    kf_a, corr_a, ks_a = np.array(kf), np.array(corr), np.array(ks)
    rows = {r["K"]: r for r in crit["summary"]}
    assert set(rows) == {None, 2, 3}
    assert np.any(corr_a != kf_a)              # the criteria choose differently somewhere
    for k, mask in ((None, np.ones(4, bool)), (2, ks_a == 2), (3, ks_a == 3)):
        ratios = corr_a[mask] / kf_a[mask]
        r = rows[k]
        assert r["datasets"] == mask.sum()
        assert r["ratio"] == pytest.approx(float(np.prod(ratios) ** (1 / ratios.size)), rel=1e-12)
        assert r["change"] == pytest.approx(1 - r["ratio"], rel=1e-12)
        # a percentile bootstrap of a mean of log-ratios stays within their range
        assert ratios.min() - 1e-12 <= r["ratio_lower"] <= r["ratio"] <= r["ratio_upper"] <= ratios.max() + 1e-12
        assert (r["lower"], r["same"], r["higher"]) == (int(np.sum(ratios < 1)), int(np.sum(ratios == 1)),
                                                        int(np.sum(ratios > 1)))


def test_no_criteria_section_without_a_test_set(tmp_path):
    from cvflow.report import suite as suite_report

    config = yaml.safe_load(SUITE)
    config["data"] = [{k: v for k, v in e.items() if k != "test_fraction"} for e in config["data"][:2]]
    path = tmp_path / "notest.yaml"
    path.write_text(yaml.safe_dump(config))
    res = run_cli("run", path, "--store", tmp_path / "notest.zarr", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    result = suite_report.compute(Path(tmp_path / "notest.zarr"))
    assert result["criteria"] is None
    assert "selection criteria" not in suite_report.text(result)
