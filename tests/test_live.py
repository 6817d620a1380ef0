"""The live study page (cvflow.live): the K-fold it plots equals the estimators' on the fits
landed so far, and the URL `cvflow run` prints renders in headless Chromium while fits run."""
from __future__ import annotations

import json
import re
import time
import urllib.request

import numpy as np
import pytest

import cvflow
import fault_helpers as fh
from browser import chromium
from cvflow import live
from cvflow.engine import run
from cvflow.estimators import corrected_kfold, kfold
from cvflow.fit import BlockResult
from cvflow.store import block_chunks, block_slices
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


def test_monitor_curves_equal_the_estimators_on_the_fits_landed_so_far(tmp_path, write_workflow,
                                                                       client):
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
        terms = monitor.scorer(pred[ps, ss], y, train[ss], study.params[ps], study.data.positive)
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
    assert urls["dashboard"].endswith("/status")
    base = urls["dashboard"].rsplit("/", 1)[0]
    assert re.fullmatch(re.escape(base) + r"/cvflow\?run=slow-[0-9a-f]{8}", urls["live"]), urls
    with urllib.request.urlopen(urls["live"], timeout=60) as response:
        body = response.read().decode()
    assert response.status == 200 and "cvflow-learner-0" in body and "Bokeh" in body


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
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            m = re.match(r"live study page: (http://\S+)", line)
            url = m and m.group(1)
        assert url, "no live page URL printed"
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
                       "terms": monitor.scorer(pred[ps, ss], y, train[ss], study.params[ps],
                                               study.data.positive)})
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
