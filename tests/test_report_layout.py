"""The HTML report as a reader meets it: a 9-estimator study at 1400 px in headless Chromium.

It leads with the answer (the summary table precedes every plot), nothing runs off the page,
no console errors; the screenshot is kept in artifacts/report-1400.png."""
from __future__ import annotations

import os
import time

import pytest

from browser import RENDERED, Page, chromium
from cvflow.execution.run import run
from cvtest import REPO, run_cli

NINE = """\
name: nine
data: {source: synthetic, name: linear, params: {n: 96, p: 4}, test_fraction: 0.25}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: {logspace: [-3, 3, 9]}}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: [0.01, 0.1, 1.0]}
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {n_neighbors: [3, 10, 80]}
  - name: tree
    class: sklearn.tree.DecisionTreeRegressor
    params: {random_state: 0}
    grid: {max_depth: [2, 4, 8], min_samples_leaf: [1, 5]}
design: {folds: 4, repeats: 2, seed: 0, subset: {size: 12, pairs: 4}}
estimators: [kfold, corrected_kfold, {stability_nested: {lambdas: [0, 0.5, 2]}}, nested_cv,
             bates_ncv, wald_cv, {ustat: {compare: [0, 9]}}, {nadeau_bengio: {compare: [0, 9]}},
             {corrected_t: {compare: [0, 9]}}]
execution: {fits_per_task: 24}
"""

# document order through shadow roots (bokeh renders into them): the index of the first
# table and of the first canvas, the page's width, and the figures' titles against their widths
LAYOUT = """(() => {
  let i = 0, table = -1, canvas = -1;
  const walk = (root) => root.querySelectorAll('*').forEach(el => {
    i += 1;
    if (el.tagName === 'TABLE' && table < 0) table = i;
    if (el.tagName === 'CANVAS' && el.width > 0 && canvas < 0) canvas = i;
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  const ctx = document.createElement('canvas').getContext('2d');
  const doc = Bokeh.documents[0];
  const cut = [];
  for (const m of doc.all_models) {
    if (m.title && m.title.text !== undefined && m.renderers !== undefined && m.title.text) {
      ctx.font = `${m.title.text_font_style} ${m.title.text_font_size} ${m.title.text_font}`;
      if (ctx.measureText(m.title.text).width > m.width - 20) cut.push(m.title.text);
    }
  }
  return {table, canvas, scrollWidth: document.documentElement.scrollWidth, cut};
})()"""


@pytest.fixture(scope="module")
def nine(tmp_path_factory, client):
    tmp = tmp_path_factory.mktemp("nine")
    (tmp / "nine.yaml").write_text(NINE)
    return run(tmp / "nine.yaml", store=tmp / "nine.zarr", client=client).store


@pytest.mark.browser
def test_report_fits_1400_px_and_leads_with_the_answer(nine, tmp_path):
    if chromium() is None:
        if os.environ.get("CVFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail("CVFLOW_REQUIRE_BROWSER=1 but no chromium on PATH")
        pytest.skip("no chromium on PATH")
    html = tmp_path / "nine.html"
    res = run_cli("report", nine, "--html", html)
    assert res.returncode == 0, res.stderr
    with Page(width=1400, height=1000) as page:
        page.open(html)
        deadline = time.monotonic() + 30
        state = page.evaluate(RENDERED)
        while state["canvases"] < 8 and time.monotonic() < deadline:
            time.sleep(0.2)
            state = page.evaluate(RENDERED)
        time.sleep(0.5)
        layout = page.evaluate(LAYOUT)
        artifacts = REPO / "artifacts"
        artifacts.mkdir(exist_ok=True)
        shot = page.screenshot(artifacts / "report-1400.png")
        errors = page.errors()
    print(layout)
    assert errors == []
    assert layout["scrollWidth"] <= 1400, layout
    assert 0 < layout["table"] < layout["canvas"], layout          # the answer comes first
    assert layout["cut"] == [], layout                               # no title cut short
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
