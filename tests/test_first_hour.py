"""The first hour with cvflow (issue 27): what a new user sees, tested as they run it.

Whole processes: ``cvflow report`` / ``cvflow validate`` and ``python -`` scripts, their stdout
and stderr.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cvtest import QUICK, REPO, run_cli


@pytest.fixture(scope="module")
def quick_store(tmp_path_factory):
    """The README's kind of study, run by the CLI: a ridge over 4 alphas, 5-fold."""
    tmp = tmp_path_factory.mktemp("quick")
    wf = tmp / "quick.yaml"
    wf.write_text(QUICK + "execution: {cluster: threads, workers: 1}\n")
    res = run_cli("run", wf, "--store", tmp / "quick.zarr")
    assert res.returncode == 0, res.stderr
    return tmp / "quick.zarr"


def python(script: str, cwd=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """A script run as ``python -`` in a fresh interpreter (the user's way)."""
    return subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


# --- item 6: README's install, --html's one line, the K-fold table's heading -------------------

def test_readme_quick_start_installs_only_what_running_needs():
    text = (REPO / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert "cvflow run" in quick
    assert re.search(r"pip install -e \.(\s|$)", quick), quick
    assert "[test]" not in quick


def test_report_html_prints_one_line_saying_where(quick_store, tmp_path):
    html = tmp_path / "r.html"
    res = run_cli("report", quick_store, "--html", html)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == [f"{quick_store}: HTML report written to {html}"]
    assert html.stat().st_size > 10_000
    # without --html the text report is printed as before
    plain = run_cli("report", quick_store)
    assert "K-fold" in plain.stdout and "HTML" not in plain.stdout


def test_kfold_table_heading_reads_naturally(quick_store):
    res = run_cli("report", quick_store)
    assert res.returncode == 0, res.stderr
    assert "K-fold (squared), 4 params, best first:" in res.stdout
    assert "params, best 4" not in res.stdout


# --- item 4: the stored output inferred from the loss, the same way in Python and YAML ---------

LOGREG = """\
name: proba
data: {{source: sklearn, name: {data}}}
task: classification
loss: {loss}
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    params: {{max_iter: 2000}}
    grid: {{C: [0.1, 1.0]}}
design: {{folds: 3, seed: 0}}
estimators: [kfold]
execution: {{cluster: threads, workers: 1}}
"""

PY_LOGREG = """
import warnings; warnings.simplefilter("ignore")
import json, cvflow
from sklearn.datasets import load_{data}
from sklearn.linear_model import LogisticRegression
X, y = load_{data}(return_X_y=True)
study = cvflow.Study({{"logreg": (LogisticRegression(max_iter=2000), {{"C": [0.1, 1.0]}})}},
                     cv=3, loss={loss!r}, estimators=["kfold"])
print("VALID", study.validate(X, y))
wf = study.workflow(X, y)
print("OUTPUTS", json.dumps(sorted({{p.output for p in wf.build(check_fits=False).params}})))
"""


@pytest.mark.parametrize("data,loss", [("breast_cancer", "brier"), ("breast_cancer", "log_loss"),
                                       ("iris", "roc_auc"), ("iris", "brier")])
def test_output_follows_the_loss_in_yaml_and_python(data, loss, tmp_path):
    """LogisticRegression has decision_function (the default); these losses read probabilities:
    both faces store predict_proba without being told."""
    wf = tmp_path / "p.yaml"
    wf.write_text(LOGREG.format(data=data, loss=loss))
    res = run_cli("validate", wf)
    assert res.returncode == 0, res.stderr
    assert "valid" in res.stdout
    py = python(PY_LOGREG.format(data=data, loss=loss))
    assert py.returncode == 0, py.stderr
    assert '"predict_proba"' in py.stdout.split("OUTPUTS", 1)[1]


def test_yaml_multiclass_roc_auc_stores_probabilities_and_matches_sklearn(tmp_path):
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    import cvflow

    wf = tmp_path / "p.yaml"
    wf.write_text(LOGREG.format(data="iris", loss="roc_auc"))
    store = tmp_path / "p.zarr"
    res = run_cli("run", wf, "--store", store)
    assert res.returncode == 0, res.stderr
    cube = cvflow.open(store)
    assert set(cube["output"].values.tolist()) == {"predict_proba"}
    # fold 0's AUC of C=0.1 against scikit-learn on the same split
    X, y = load_iris(return_X_y=True)
    fold = cube["fold"].values[0]
    test = fold == 0
    model = LogisticRegression(max_iter=2000, C=0.1).fit(X[~test], y[~test])
    want = roc_auc_score(y[test], model.predict_proba(X[test]), multi_class="ovr")
    got = cvflow.estimators.kfold(cube, loss="roc_auc")["fold_score"]
    np.testing.assert_allclose(float(np.ravel(got.isel(param=0).values)[0]), want, rtol=1e-6)


def test_python_output_messages_name_study_arguments_not_yaml_keys():
    script = """
import cvflow
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC
X, y = load_breast_cancer(return_X_y=True)
for learner, kw in [(LogisticRegression(), {"output": "decision_function", "loss": "brier"}),
                    (LinearSVC(), {"output": "predict_proba"}),
                    (LinearSVC(), {"loss": "log_loss"})]:
    try:
        cvflow.Study(learner, cv=3, **kw).validate(X, y)
    except cvflow.errors.InputError as exc:
        print("ERR", exc)
"""
    res = python(script)
    errors = [line for line in res.stdout.splitlines() if line.startswith("ERR")]
    assert len(errors) == 3, res.stdout + res.stderr
    for line in errors:
        assert "`output`" not in line and "learners[" not in line and ".output" not in line, line
    assert "brier" in errors[0] and "Study(output=...)" in errors[0]
    assert "output='predict_proba'" in errors[1] and "LinearSVC" in errors[1]
    assert "LinearSVC has no predict_proba, which the loss 'log_loss' needs" in errors[2]


# --- item 5: validate warns when bates_ncv would be clamped on this design ---------------------

@pytest.mark.parametrize("design,needed", [("{folds: 5, seed: 0}", 7),
                                           ("{folds: 10, seed: 0, repeats: 3}", 17),
                                           ("{folds: 5, seed: 0, repeats: 7}", None)])
def test_validate_warns_when_bates_ncv_would_be_clamped(design, needed, tmp_path):
    wf = tmp_path / "b.yaml"
    wf.write_text(QUICK.replace("design: {folds: 5, seed: 0}", f"design: {design}")
                  .replace("estimators: [kfold]", "estimators: [kfold, bates_ncv]"))
    res = run_cli("validate", wf)
    assert res.returncode == 0, res.stderr
    assert "valid" in res.stdout
    if needed is None:
        assert "bates_ncv" not in res.stderr
    else:
        # the floor binds when MSE < K/(K-1) se_naive²; the MSE estimate's noise is
        # sqrt(2/(RK))·K se_naive²: below the floor from R >= 2(K-1)²/K
        assert res.stderr.count("\n") == 1, res.stderr
        assert f"cvflow: warning: {wf}: bates_ncv:" in res.stderr
        assert f"use design.repeats: {needed} or more" in res.stderr
    # a workflow without bates_ncv: no warning
    wf.write_text(QUICK)
    assert run_cli("validate", wf).stderr == ""
