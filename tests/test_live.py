"""The live study page (cvflow.report.live): the K-fold it plots equals the estimators' on the fits
landed so far, and the URL `cvflow run` prints renders in headless Chromium while fits run."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

import cvflow
import fault_helpers as fh
from browser import chromium
from cvflow.report import live
from cvflow.execution.run import run
from cvflow.estimators import corrected_kfold, kfold
from cvflow.fitting.block import BlockResult
from cvflow.store.cube import block_chunks, block_slices
from cvtest import REPO

STUDY = """\
name: mon
data: {source: sklearn, name: diabetes}
task: regression
loss: absolute
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 1.0, -1.0, 100.0]}
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {n_neighbors: [3, 15, 400]}
design: {folds: 4, repeats: 2, seed: 1}
estimators: [kfold, corrected_kfold]
execution: {fits_per_task: 2, path_aware: false}
"""


class Published:
    """Stands in for the client: keeps what the monitor publishes."""

    def __init__(self):
        self.metadata = {}

    def set_metadata(self, keys, value):
        self.metadata[tuple(keys)] = json.loads(json.dumps(value))   # as msgpack/JSON would


# the curves are running sums of the blocks folded in (issue 40 item 4); retried: every block
# comes back twice (a retried task), and is counted once
@pytest.mark.parametrize("retried", [False, True])
def test_monitor_curves_equal_the_estimators_on_the_fits_landed_so_far(tmp_path, write_workflow,
                                                                       client, retried):
    wf_path = write_workflow(STUDY)
    result = run(wf_path, store=tmp_path / "mon.zarr", client=client)
    cube = cvflow.open(result.store)
    wf = cvflow.load_workflow(wf_path)
    study = wf.build()
    published = Published()
    monitor = live.Monitor(published, wf, study.params, study.design, study.data,
                           store=str(result.store), url="http://x/cvflow")
    pred, y, train = cube["pred"].values, study.data.y, study.design.train
    all_blocks = list(block_slices(*cube["done"].shape, block_chunks(result.store)))
    order = np.random.default_rng(0).permutation(len(all_blocks))
    landed = np.zeros(cube["done"].shape, dtype=bool)
    for step, b in enumerate(order):
        ps, ss = all_blocks[b]
        status = BlockResult(ps, ss, None, cube["failed"].values[ps, ss],
                             cube["error"].values[ps, ss], cube["fit_seconds"].values[ps, ss])
        terms = monitor.scorer(pred[ps, ss], y, train[ss], study.params[ps])
        for _ in range(1 + retried):
            monitor.block({"status": status, "terms": terms})
        landed[ps, ss] = True
        if step % 7 and step != len(order) - 1:
            continue
        # the reference: the estimators on the cube with the fits not yet landed unwritten
        partial = cube.assign(pred=cube["pred"].where(
            cube["done"].copy(data=landed)), done=cube["done"].copy(data=landed))
        curves = monitor.curves()
        np.testing.assert_allclose(curves["kfold"], kfold(partial, loss="absolute")["estimate"],
                                   rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(curves["corrected"],
                                   corrected_kfold(partial, loss="absolute")["estimate"],
                                   rtol=1e-12, equal_nan=True)
    # everything landed: ridge alpha=-1 failed everywhere, knn 400 on the 8 fold fits (331 or
    # 332 training samples) but not on the full fit (442)
    state = monitor.state()
    assert state["done"] == state["total"] == cube["done"].size
    assert np.isfinite(curves["kfold"]).sum() == 5
    assert state["learners"]["ridge"]["failed"] == [0, 0, 9, 0]
    assert state["learners"]["knn"]["failed"] == [0, 0, 8]
    assert state["learners"]["knn"]["kfold"][2] is None
    failures = state["failures"]
    assert sorted(failures["count"]) == [8, 9] and sorted(failures["learners"]) == ["knn", "ridge"]
    knn = failures["learners"].index("knn")
    assert failures["variants"][knn] == 2 and "n_samples_fit = " in failures["example"][knn]
    # the page's data sources are these columns
    assert live.columns(state, "learner-1") == state["learners"]["knn"]
    assert live.columns(state, "progress")["failed"] == [9, 8]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """``cvflow run`` of 60 half-second fits; its printed URLs; killed afterwards."""
    tmp = tmp_path_factory.mktemp("live")
    wf = fh.slow_workflow(tmp / "wf.yaml", alphas=[0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300],
                          delay=0.5)
    store = tmp / "s.zarr"
    proc = fh.start_run(wf, store, "--workers", "2")
    try:
        urls, deadline = {}, time.monotonic() + 180
        while "live" not in urls and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise AssertionError(f"run ended (rc {proc.returncode}) before printing URLs")
            m = re.match(r"(dashboard|live study page): (http://\S+)", line)
            if m:
                urls["live" if m.group(1) != "dashboard" else "dashboard"] = m.group(2)
        yield proc, urls, store
    finally:
        fh.reap(proc)


def test_run_prints_the_live_page_beside_the_dashboard(live_run):
    proc, urls, store = live_run
    dashboard = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/status\?token=([\w-]{32})",
                             urls["dashboard"])
    assert dashboard, urls
    base = dashboard.group(1)
    m = re.fullmatch(re.escape(base) + r"/cvflow\?run=(slow-[0-9a-f]{8})&token=([\w-]{32})",
                     urls["live"])
    assert m, urls
    # one secret for the server cvflow started (cvflow.execution.dashboard_gate) and its page
    assert m.group(2) == dashboard.group(2)
    with urllib.request.urlopen(urls["live"], timeout=60) as response:
        body = response.read().decode()
    assert response.status == 200 and "cvflow-learner-0" in body and "Bokeh" in body
    assert f"/cvflow/data/{m.group(1)}/progress.json?token={m.group(2)}" in body


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_the_live_page_answers_only_its_owner(live_run):
    """Anyone on the machine reaches the port; only the printed URL carries the run's secret:
    the page and its data answer 403 without it, with another, or for a run guessed."""
    proc, urls, store = live_run
    page, query = urls["live"].split("?", 1)
    asked = dict(part.split("=", 1) for part in query.split("&"))
    data = f"{page}/data/{asked['run']}/progress.json"
    assert _status(f"{data}?token={asked['token']}") == 200
    for url in (page, f"{page}?run={asked['run']}", f"{page}?run={asked['run']}&token=x",
                f"{page}?token={asked['token'][:-1]}", data, f"{data}?token=",
                f"{page}/data/slow-00000000/progress.json?token={asked['token']}"):
        assert _status(url) == 403, url


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("curl"),
                    reason="needs root, useradd and curl: a second Unix user")
def test_another_user_reads_no_live_page(live_run):
    """What another local user can do: reach the port, without the secret (only in the URL
    cvflow printed to its owner): 403."""
    proc, urls, store = live_run
    user = "cvflowother"
    if subprocess.run(["id", user], capture_output=True).returncode:
        subprocess.run(["useradd", "--no-create-home", user], check=True)
    page = urls["live"].split("?", 1)[0]
    latest = subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-o", "/dev/null", "-w",
                             "%{http_code}", page], capture_output=True, text=True, timeout=60)
    assert latest.stdout == "403", latest


# the page's sources (by name), its canvases through shadow roots, and the glyph renderers
# drawing from a source with rows
PAGE_STATE = """(() => {
  const B = window.Bokeh;
  if (!B || !B.documents.length) return null;
  const doc = B.documents[0], sources = {};
  let glyphs = 0, canvases = 0;
  for (const m of doc.all_models) {
    if (m.data_url !== undefined && m.name) sources[m.name] = m.data;
    if (m.glyph !== undefined && m.data_source && m.data_source.get_length() > 0) glyphs += 1;
  }
  const walk = (root) => root.querySelectorAll('*').forEach(el => {
    if (el.tagName === 'CANVAS' && el.width > 0 && el.height > 0) canvases += 1;
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  const value = (x) => (typeof x === 'number' && isNaN(x)) ? null : x;
  const plain = (d) => Object.fromEntries(Object.entries(d).map(
      ([k, v]) => [k, Array.from(v, value)]));
  return {glyphs, canvases, sources: Object.fromEntries(
            Object.entries(sources).map(([k, v]) => [k, plain(v)]))};
})()"""


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None, reason="needs chromium (apt-get install -y chromium)")
def test_live_page_renders_and_plots_the_kfold_of_the_fits_done_while_they_run(live_run):
    from browser import Page

    proc, urls, store = live_run
    n_params, k = 10, 5
    with Page(width=1400, height=1400) as page:
        page.send("Page.navigate", {"url": urls["live"]})
        page.wait_event("Page.loadEventFired", timeout=60)
        state, deadline = None, time.monotonic() + 120
        while time.monotonic() < deadline:
            state = page.evaluate(PAGE_STATE)
            values = state and state["sources"].get("cvflow-learner-0", {}).get("kfold", [])
            # mid-run: some params complete, some not (the run is still fitting)
            if values and any(v is not None for v in values) and None in values:
                break
            time.sleep(0.5)
        running = proc.poll() is None and fh.done_count(store) < n_params * (k + 1)
        page.screenshot(_artifact("live.png"))
        errors = page.errors()
    print(f"page state: glyphs {state['glyphs']}, canvases {state['canvases']}; "
          f"kfold {state['sources']['cvflow-learner-0']['kfold']}")
    assert running, "the run had finished: the page was not seen while fits were running"
    assert state["canvases"] >= 2 and state["glyphs"] >= 4
    assert not [e for e in errors if "cvflow/data" not in e], errors
    columns = state["sources"]["cvflow-learner-0"]
    folds_done = np.asarray(columns["folds_done"])
    assert ((folds_done == k) & np.not_equal(columns["kfold"], None)).any()
    assert (folds_done < k).any()
    rc, _, err = fh.finish(proc)
    assert rc == 0, err[-2000:]
    # the K-fold of the fits done so far: a param whose folds were all done has the K-fold of
    # the (now complete, immutable) cube, any other has none
    final = kfold(cvflow.open(store))["estimate"].values
    expected = np.where(folds_done == k, final, np.nan)
    plotted = np.asarray([np.nan if v is None else v for v in columns["kfold"]], dtype=float)
    np.testing.assert_allclose(plotted, expected, rtol=1e-12, equal_nan=True)
    assert (np.asarray(columns["ok"]) + np.asarray(columns["failed"])
            + np.asarray(columns["pending"]) == k + 1).all()


def _artifact(name: str):
    out = REPO / "artifacts"
    out.mkdir(exist_ok=True)
    return out / name


def test_in_process_threads_cluster_serves_the_page_too(tmp_path):
    wf = fh.slow_workflow(tmp_path / "wf.yaml", alphas=[0.01, 0.1], delay=0.3)
    proc = fh.start_run(wf, tmp_path / "s.zarr", "--cluster", "threads")
    try:
        url = fh.live_page_url(proc, timeout=120)
        with urllib.request.urlopen(url, timeout=60) as response:
            assert response.status == 200 and b"cvflow-learner-0" in response.read()
        rc, _, err = fh.finish(proc)
        assert rc == 0, err[-2000:]
    finally:
        fh.reap(proc)


GRIDS = """\
name: grids
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 1.0, 100.0]}
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {weights: [uniform, distance]}
  - name: tree
    class: sklearn.tree.DecisionTreeRegressor
    params: {random_state: 0}
    grid: {max_depth: [1, 3, 6], min_samples_leaf: [2, 30]}
design: {folds: 3, seed: 0}
estimators: [kfold, corrected_kfold]
execution: {fits_per_task: 4}
"""


def test_live_page_plots_against_grid_values_and_a_heatmap_for_two_d_grids(tmp_path,
                                                                          write_workflow, client):
    """Ridge's alpha on a log axis, knn's weights on a categorical one, the tree's
    max_depth x min_samples_leaf as a heatmap whose cells carry each param's K-fold (the
    estimator's on the finished cube); the page renders in Chromium without errors."""
    wf_path = write_workflow(GRIDS)
    result = run(wf_path, store=tmp_path / "grids.zarr", client=client)
    cube = cvflow.open(result.store)
    wf = cvflow.load_workflow(wf_path)
    study = wf.build()
    published = Published()
    monitor = live.Monitor(published, wf, study.params, study.design, study.data,
                           store=str(result.store), url="http://x/cvflow")
    pred, y, train = cube["pred"].values, study.data.y, study.design.train
    for ps, ss in block_slices(*cube["done"].shape, block_chunks(result.store)):
        status = BlockResult(ps, ss, None, cube["failed"].values[ps, ss],
                             cube["error"].values[ps, ss], cube["fit_seconds"].values[ps, ss])
        monitor.block({"status": status,
                       "terms": monitor.scorer(pred[ps, ss], y, train[ss], study.params[ps])})
    state = json.loads(json.dumps(monitor.state()))
    kinds = {name: meta["kind"] for name, meta in state["layouts"].items()}
    assert kinds == {"ridge": "log", "knn": "categorical", "tree": "heatmap"}
    assert state["learners"]["ridge"]["gx"] == [0.01, 1.0, 100.0]
    assert state["learners"]["knn"]["gx"] == ["uniform", "distance"]
    tree = state["learners"]["tree"]
    estimate = kfold(cube)["estimate"].values
    for h, gx, gy, value in zip(tree["param"], tree["gx"], tree["gy"], tree["kfold"]):
        hyper = study.params[h].hyper
        assert (gx, gy) == (str(hyper["max_depth"]), str(hyper["min_samples_leaf"]))
        assert value == pytest.approx(estimate[h], rel=1e-12)
    html = tmp_path / "live.html"
    html.write_text(live.page_html(state, base="http://127.0.0.1:9/cvflow"), encoding="utf-8")
    if chromium() is None:
        return
    from browser import RENDERED, Page

    axes = """(() => Object.fromEntries([...Bokeh.documents[0].all_models]
        .filter((m) => m.name && m.name.startsWith('kfold-') && m.x_scale)
        .map((m) => [m.name, {x: m.x_scale.type, factors: m.x_range.factors || null,
                              glyphs: m.renderers.map((r) => r.glyph.type)}])))()"""
    with Page(width=1400, height=1400) as page:
        page.open(html)
        deadline = time.monotonic() + 30
        while page.evaluate(RENDERED)["canvases"] < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        drawn = page.evaluate(axes)
        errors = [e for e in page.errors() if "cvflow/data" not in e and "127.0.0.1:9" not in e]
    assert errors == []
    assert drawn["kfold-ridge"]["x"] == "LogScale"
    assert drawn["kfold-knn"]["factors"] == ["uniform", "distance"]
    assert drawn["kfold-tree"]["factors"] == ["1", "3", "6"] and "Rect" in drawn["kfold-tree"]["glyphs"]


# --- string class labels: the page's K-fold against scikit-learn's losses -------------------------

def _labelled_csv(path, dataset: str):
    """``dataset`` as a CSV whose target column holds class names: iris's species (three
    classes) or, for breast cancer, "no"/"yes" (150 rows, 4 standardised features;
    ``breast_cancer_01``: its 0/1 labels); the features and labels."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer, load_iris

    if dataset == "iris":
        X, y = load_iris(return_X_y=True)
        labels = np.asarray(load_iris().target_names, dtype=object)[y]
    else:
        X, y = load_breast_cancer(return_X_y=True)
        rows = np.random.default_rng(0).choice(len(y), 150, replace=False)
        X, y = X[rows][:, :4], y[rows]
        X = (X - X.mean(0)) / X.std(0)
        labels = y if dataset == "breast_cancer_01" else np.where(y == 1, "yes", "no").astype(object)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["label"] = labels
    frame.to_csv(path, index=False)
    return X, labels


LABELLED = """\
name: labels
data: {{source: csv, path: {csv}, target: label}}
task: classification
loss: {loss}
learners:
  - name: logreg
    class: sklearn.linear_model.LogisticRegression
    params: {{max_iter: 2000}}
    output: predict_proba
    grid: {{C: [0.05, 1.0, 20.0]}}
design: {{folds: 3, seed: 0}}
estimators: [kfold]
execution: {{fits_per_task: 2}}
"""


def _sklearn_kfold(cube, labels, design, loss: str) -> np.ndarray:
    """Per param, scikit-learn's ``zero_one_loss`` / ``log_loss`` of the out-of-fold
    predictions read from the store: each sample's stored probabilities from the fold fit that
    did not train on it (one repeat: the K-fold estimate), its predicted label the most
    probable class."""
    from sklearn.metrics import log_loss, zero_one_loss

    classes = np.unique(labels)                                  # scikit-learn's classes_
    train = np.asarray(design.train)
    pred = cube["pred"].values
    out = []
    for h in range(pred.shape[0]):
        proba = np.full((len(labels), len(classes)), np.nan)
        for s in np.asarray(design.fold_split)[0]:
            held = ~train[s]
            p = pred[h, s, held]
            proba[held] = p if p.ndim == 2 else np.column_stack([1 - p, p])   # binary: P(yes)
        assert not np.isnan(proba).any()
        if loss == "zero_one":
            out.append(zero_one_loss(labels, classes[proba.argmax(axis=1)]))
        else:
            out.append(log_loss(labels, proba, labels=list(classes)))
    return np.asarray(out)


@pytest.fixture(scope="module")
def page_client():
    """A scheduler serving the live page (the route enabled before it starts), two worker
    processes: the run's scorer is pickled to them as in ``cvflow run``."""
    from distributed import Client, LocalCluster

    live.enable_routes()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


@pytest.mark.parametrize("dataset", ["breast_cancer", "iris", "breast_cancer_01"])
@pytest.mark.parametrize("loss", ["zero_one", "log_loss"])
def test_live_kfold_of_a_string_labelled_study_equals_sklearn_losses(tmp_path, page_client,
                                                                     dataset, loss, caplog):
    """The page's K-fold per param (its JSON, from the scores the block tasks computed on the
    workers) after the run is scikit-learn's zero_one_loss / log_loss of the
    out-of-fold predictions in the store, for "no"/"yes", iris's species names and 0/1 labels
    (a binary study's page had no K-fold, whatever its labels); no scoring failure is reported."""
    _, labels = _labelled_csv(tmp_path / "data.csv", dataset)
    wf = tmp_path / "wf.yaml"
    wf.write_text(LABELLED.format(csv="data.csv", loss=loss))
    with caplog.at_level("WARNING", logger="cvflow.report.live"):
        result = run(wf, store=tmp_path / "s.zarr", client=page_client)
    assert result.live, "the scheduler did not serve the live page"
    asked = urllib.parse.parse_qs(urllib.parse.urlsplit(result.live).query)
    run_id, token = asked["run"][0], asked["token"][0]       # the page's data: its owner's only
    base = result.live.split("?")[0]
    with urllib.request.urlopen(f"{base}/data/{run_id}/learner-0.json?token={token}",
                                timeout=60) as response:
        columns = json.loads(response.read())
    study = cvflow.load_workflow(wf).build()
    expected = _sklearn_kfold(cvflow.open(result.store), labels, study.design, loss)
    assert columns["folds_done"] == [3, 3, 3]
    assert None not in columns["kfold"], columns
    np.testing.assert_allclose(columns["kfold"], expected, rtol=1e-12)
    assert [r.getMessage() for r in caplog.records if "live page" in r.getMessage()] == []
    with urllib.request.urlopen(result.live, timeout=60) as response:
        assert "scoring the fits failed" not in response.read().decode()


def test_a_failing_live_scorer_is_said_once_and_shown_on_the_page(tmp_path, write_workflow,
                                                                  caplog):
    """A block whose scoring raised (the task recorded it all the same) leaves the page
    without a K-fold: the client logs the error once, however many blocks carry it, and the
    page says so (as text)."""
    wf_path = write_workflow(STUDY)
    wf = cvflow.load_workflow(wf_path)
    study = wf.build()
    monitor = live.Monitor(Published(), wf, study.params, study.design, study.data,
                           store="s.zarr", url="http://x/cvflow")
    n_params, n_splits = monitor.done.shape
    error = "KeyError: '<b>no</b>'"
    with caplog.at_level("WARNING", logger="cvflow.report.live"):
        for s in range(2):
            ps, ss = slice(0, n_params), slice(s, s + 1)
            status = BlockResult(ps, ss, None, np.zeros((n_params, 1), bool),
                                 np.full((n_params, 1), "", dtype=object), np.zeros((n_params, 1)))
            monitor.block({"status": status, "terms_error": error})
    said = [r.getMessage() for r in caplog.records if "live page" in r.getMessage()]
    assert said == ["live page: the K-fold curve is not shown: scoring the fits (loss absolute) "
                    f"failed: {error}"]
    state = json.loads(json.dumps(monitor.state()))
    assert state["scoring_error"] == error and state["done"] == 2 * n_params
    # the header Div's markup, as the page's document JSON holds it (escaped once in its
    # <script>): the message is escaped text in it
    page = html.unescape(live.page_html(state, base="http://127.0.0.1:9/cvflow"))
    assert ("no K-fold: scoring the fits failed: <code>KeyError: &#39;&lt;b&gt;no&lt;/b&gt;"
            "&#39;</code>") in page


def _json(url: str):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def test_cvflow_run_of_a_string_labelled_study_shows_the_kfold_on_the_page(tmp_path):
    """``cvflow run`` of a "no"/"yes" study (log_loss on predict_proba) on worker processes:
    while it runs (one fit held open), the page's data carry the K-fold of every param whose
    folds are done, equal to scikit-learn's log_loss of the finished store's out-of-fold
    predictions; the page renders, says no scoring failed, and the run warns of none."""
    _, labels = _labelled_csv(tmp_path / "data.csv", "breast_cancer")
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({
        "name": "yesno", "task": "classification", "loss": "log_loss",
        "data": {"source": "csv", "path": "data.csv", "target": "label"},
        "learners": [{"name": "logreg", "class": "fault_helpers.GatedLogistic",
                      "params": {"gate": str(tmp_path / "gate"), "claim": str(tmp_path / "claim")},
                      "output": "predict_proba", "grid": {"C": [0.05, 1.0, 20.0]}}],
        "design": {"folds": 3, "seed": 0}, "estimators": ["kfold"],
        "execution": {"fits_per_task": 1}}))
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--cluster", "local", "--workers", "2")
    try:
        url = fh.live_page_url(proc, timeout=180)
        asked = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        data = f"{url.split('?')[0]}/data/{asked['run'][0]}"
        token = f"?token={asked['token'][0]}"                 # the page's data: its owner's only
        # every fit but the one held at the gate lands (12 fits: 3 params x (3 folds + full))
        deadline = time.monotonic() + 150
        while (_json(f"{data}/progress.json{token}")["done"] != [11]
               and time.monotonic() < deadline):
            time.sleep(0.3)
        columns = _json(f"{data}/learner-0.json{token}")
        with urllib.request.urlopen(url, timeout=60) as response:
            page = response.read().decode()
        (tmp_path / "gate").touch()
        rc, _, err = fh.finish(proc)
    finally:
        fh.reap(proc)
    assert rc == 0, err[-3000:]
    assert sum(columns["ok"]) == 11, columns
    complete = np.asarray(columns["folds_done"]) == 3
    assert complete.sum() >= 2, columns
    shown = np.asarray([np.nan if v is None else v for v in columns["kfold"]], dtype=float)
    assert np.isfinite(shown[complete]).all(), columns
    study = cvflow.load_workflow(wf).build()
    expected = _sklearn_kfold(cvflow.open(store), labels, study.design, "log_loss")
    np.testing.assert_allclose(shown[complete], expected[complete], rtol=1e-12)
    assert "cvflow-learner-0" in page and "scoring the fits failed" not in page
    assert "live page:" not in err, err[-3000:]
