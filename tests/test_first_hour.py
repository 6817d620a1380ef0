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
    # a user's install (not editable: pip compiles cvflow's modules, as scikit-learn's)
    assert re.search(r"pip install \.(\s|$)", quick), quick
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
print("OUTPUTS", json.dumps(sorted({{p.output for p in wf.build().params}})))
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


# --- item 3: progress in Python, the CLI's event stream and renderer ---------------------------

# a fake Jupyter kernel: tqdm.auto and cvflow.execution.progress see IPKernelApp in get_ipython().config
FAKE_KERNEL = """
import sys, types
class _Shell:
    config = {"IPKernelApp": {}}
fake = types.ModuleType("IPython")
fake.get_ipython = lambda: _Shell()
fake.version_info = (8, 0, 0)
sys.modules["IPython"] = fake
"""

PY_STUDY = """
{prelude}
import numpy as np, cvflow
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
X, y = load_diabetes(return_X_y=True)
study = cvflow.Study({{"ridge": (Ridge(), {{"alpha": [0.1, 1.0, 10.0]}})}}, cv=5,
                     execution={{"fits_per_task": 2}})
result = study.run(X, y, store={store!r}, cluster="threads", workers=1{extra})
print("SELECTED", result.selected["kfold"]["index"])
"""


def test_study_run_reports_execution_progress_and_summary(tmp_path):
    res = python(PY_STUDY.format(prelude="", store=str(tmp_path / "s.zarr"), extra=""))
    assert res.returncode == 0, res.stderr
    err = res.stderr
    assert "execution: threads" in err, err
    assert "18 of 18 fits to do" in err
    assert "18/18 fits" in err                       # the bar's last line (no terminal: plain)
    assert f"{tmp_path / 's.zarr'}: 18 fits performed" in err
    assert "SELECTED" in res.stdout and "fits" not in res.stdout


def test_progress_false_is_silent(tmp_path):
    res = python(PY_STUDY.format(prelude="", store=str(tmp_path / "s.zarr"),
                                 extra=", progress=False"))
    assert res.returncode == 0, res.stderr
    assert "execution" not in res.stderr and "fits" not in res.stderr, res.stderr


def test_cvflow_run_reports_progress_like_the_cli(tmp_path):
    wf = tmp_path / "q.yaml"
    wf.write_text(QUICK + "execution: {cluster: threads, workers: 1, fits_per_task: 4}\n")
    script = (f"import cvflow\nr = cvflow.run({str(wf)!r}, store={str(tmp_path / 'py.zarr')!r})\n"
              "print('DONE', r.fits_executed)\n")
    py = python(script)
    assert py.returncode == 0, py.stderr
    cli = run_cli("run", wf, "--store", tmp_path / "cli.zarr")
    assert cli.returncode == 0, cli.stderr
    for err in (py.stderr, cli.stderr):
        assert "execution: threads" in err and "24 of 24 fits to do" in err and "24/24 fits" in err
    assert "24 fits performed" in py.stderr             # Python: the summary on stderr
    assert "24 fits performed" in cli.stdout            # the CLI: on stdout, as before
    # a second run: nothing to do, said so
    again = python(script)
    assert "0 of 24 fits to do" in again.stderr and "already complete" in again.stderr
    assert "execution:" not in again.stderr          # no route said where nothing runs


def test_notebook_gets_tqdm_bar_and_plain_lines_without_tqdm(tmp_path):
    pytest.importorskip("tqdm")
    nb = python(PY_STUDY.format(prelude=FAKE_KERNEL, store=str(tmp_path / "a.zarr"), extra=""))
    assert nb.returncode == 0, nb.stderr
    assert re.search(r"fits: 100%\|.*\| 18/18", nb.stderr), nb.stderr       # tqdm's bar
    without = python(PY_STUDY.format(prelude=FAKE_KERNEL + "sys.modules['tqdm'] = None\n",
                                     store=str(tmp_path / "b.zarr"), extra=""))
    assert without.returncode == 0, without.stderr
    assert "18/18 fits" in without.stderr and "fits: 100%" not in without.stderr


# --- items 1 and 2: labels and the answer table, on a 3-class study with a Pipeline ------------

WINE = """\
name: wine
data: {source: sklearn, name: wine}
task: classification
learners:
  - name: logreg
    class: sklearn.pipeline.Pipeline
    params:
      steps:
        - [scale, {class: sklearn.preprocessing.StandardScaler}]
        - [m, {class: sklearn.linear_model.LogisticRegression, max_iter: 1000}]
    grid: {m__C: [0.01, 0.1, 1.0]}
  - name: tree
    class: sklearn.tree.DecisionTreeClassifier
    params: {criterion: entropy, random_state: 0}
    grid: {max_depth: [1, 2, 3]}
design: {folds: 3, repeats: 2, seed: 0}
estimators: [kfold, bbc_cv, bates_ncv, wald_cv, cv_confidence]
execution: {cluster: threads, workers: 1}
"""


@pytest.fixture(scope="module")
def wine_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wine")
    wf = tmp / "wine.yaml"
    wf.write_text(WINE)
    res = run_cli("run", wf, "--store", tmp / "wine.zarr")
    assert res.returncode == 0, res.stderr
    return tmp / "wine.zarr"


def _summary_rows(html: str) -> dict[str, list[str]]:
    """The answer table's rows: criterion -> its cells (text, tags dropped); the page holds
    it escaped once, as the text of a bokeh Div."""
    import html as html_lib

    table = html_lib.unescape(html).split("<table class='summary'>", 1)[1].split("</table>")[0]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c).strip()
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)]
        rows[cells[0]] = cells
    return rows


def test_answer_table_fills_every_estimate_and_interval(wine_store, tmp_path):
    import json

    html = tmp_path / "w.html"
    assert run_cli("report", wine_store, "--html", html).returncode == 0
    rows = _summary_rows(html.read_text())
    res = json.loads(run_cli("report", wine_store, "--json").stdout)
    bbc = rows["bbc_cv"]
    assert bbc[2] == f"{res['bbc_cv']['estimate']:.4g}", bbc
    assert bbc[3] == (f"[{res['bbc_cv']['lower']:.4g}, "
                      f"{res['bbc_cv']['upper']:.4g}]"), bbc
    for criterion, cells in rows.items():
        assert cells[2], (criterion, cells)                 # every row has its estimate
    for name in ("bates_ncv", "wald_cv"):                    # and the intervals they compute
        (cells,) = [c for k, c in rows.items() if k.startswith(name)]
        assert re.fullmatch(r"\[\S+, \S+\]", cells[3]), cells


def test_multiclass_report_says_no_positive_class(wine_store, tmp_path):
    html = tmp_path / "w.html"
    assert run_cli("report", wine_store, "--html", html).returncode == 0
    text = run_cli("report", wine_store).stdout
    assert "positive class" not in html.read_text() and "positive class" not in text
    assert "classes: 0, 1, 2" in text


def test_labels_name_learner_and_tuned_values_only(wine_store, tmp_path):
    import json

    text = run_cli("report", wine_store)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    for label in ("logreg(m__C=1)", "logreg(m__C=0.01)", "tree(max_depth=3)"):
        assert label in out, out
    # fixed params and a Pipeline's steps are the learner's, never in a label
    for fixed in ("steps", "random_state", "criterion", "max_iter", "StandardScaler"):
        assert fixed not in out, (fixed, out)
    # bates_ncv, wald_cv and cv_confidence list params by their labels, not "param 0:"
    assert not re.search(r"param \d+:", out), out
    bates = out.split("bates_ncv:", 1)[1].split("wald_cv:", 1)[0]
    assert sum(label in bates for label in ("logreg(m__C=0.01)", "logreg(m__C=0.1)",
                                            "logreg(m__C=1)", "tree(max_depth=1)",
                                            "tree(max_depth=2)", "tree(max_depth=3)")) == 6
    res = json.loads(run_cli("report", wine_store, "--json").stdout)
    for name in ("kfold", "bbc_cv"):
        assert res[name]["selected_params"] == {"index": 2, "learner": "logreg",
                                                "params": {"m__C": 1.0}}, res[name]
    html = tmp_path / "w.html"
    assert run_cli("report", wine_store, "--html", html).returncode == 0
    page = html.read_text()
    assert "steps=" not in page and "random_state=" not in page     # no long label anywhere
    rows = _summary_rows(page)
    assert rows["kfold"][1] == "logreg(m__C=1)", rows["kfold"]
    # the full description is on hover (the chosen cell's title)
    import html as html_lib

    assert re.search(r"<code title='#2 logreg: \{[^']*StandardScaler[^']*'>logreg\(m__C=1\)</code>",
                     html_lib.unescape(page))


def test_long_grids_say_how_many_more(tmp_path):
    wf = tmp_path / "long.yaml"
    wf.write_text(QUICK.replace("grid: {alpha: [0.01, 0.1, 1.0, 10.0]}",
                                "grid: {alpha: {logspace: [-3, 3, 13]}}")
                  .replace("design: {folds: 5, seed: 0}", "design: {folds: 3, seed: 0}")
                  .replace("estimators: [kfold]", "estimators: [kfold, bates_ncv, wald_cv]")
                  + "execution: {cluster: threads, workers: 1}\n")
    res = run_cli("run", wf, "--store", tmp_path / "long.zarr")
    assert res.returncode == 0, res.stderr
    bates = res.stdout.split("bates_ncv:", 1)[1].split("wald_cv:", 1)[0]
    assert bates.count("ridge(alpha=") == 10 and "... and 3 more" in bates, bates
    assert "K-fold (squared), the 12 best of 13 params:" in res.stdout


PY_PIPELINE = """
import warnings; warnings.simplefilter("ignore")
import numpy as np, cvflow
from sklearn.base import clone
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
X, y = load_diabetes(return_X_y=True)
pipe = make_pipeline(StandardScaler(), Ridge())
study = cvflow.Study({"ridge": (pipe, {"ridge__alpha": [0.1, 10.0, 100.0]})}, cv=5,
                     estimators=["kfold", "corrected_kfold"])
result = study.run(X, y, store=%r, cluster="threads", workers=1, progress=False)
for name in ("kfold", "corrected_kfold"):
    selected = result[name].attrs["selected_params"]
    assert selected == result.selected[name], (selected, result.selected[name])
    model = clone(pipe).set_params(**selected["params"]).fit(X, y)
    ref = result.refit(name)
    assert np.array_equal(model.predict(X), ref.predict(X))
    print("OK", name, selected["params"])
"""


def test_selected_params_rebuild_a_pipeline_with_set_params(tmp_path):
    res = python(PY_PIPELINE % str(tmp_path / "p.zarr"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("OK ") == 2, res.stdout
    assert "steps" not in res.stdout
