"""The HTML report: self-contained, renders in headless Chromium without console errors, and
shows the expected plots (a PNG screenshot is kept in artifacts/report.png)."""
from __future__ import annotations

import os
import re
import time

import pytest

import cvflow
from cvflow.execution.run import run
from cvflow.report import compute
from cvflow.report.html import write_html

from browser import RENDERED, Page, chromium
from cvtest import REPO, run_cli

STUDY = """\
name: html
data: {source: synthetic, name: linear, params: {n: 64, p: 3}, test_fraction: 0.25}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 1.0, 100.0]}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: [0.05, 0.5]}
design: {folds: 3, seed: 0, subset: {size: 8, pairs: 3}}
estimators: [kfold, corrected_kfold, {stability_nested: {lambdas: [0, 0.5, 2]}}, bates_ncv,
             wald_cv, {ustat: {compare: [0, 3]}}, {nadeau_bengio: {compare: [0, 3]}}]
execution: {fits_per_task: 16}
"""

EXPECTED = {"kfold-ridge", "kfold-lasso", "stability-ridge", "stability-lasso", "m-lambda",
            "intervals", "ustat", "fit-time", "pred-vs-obs"}


@pytest.fixture(scope="module")
def study(tmp_path_factory, client):
    tmp = tmp_path_factory.mktemp("html")
    wf = tmp / "html.yaml"
    wf.write_text(STUDY)
    return run(wf, store=tmp / "html.zarr", client=client).store


def test_html_is_self_contained_and_names_every_plot(study, tmp_path):
    cube = cvflow.open(study)
    path = write_html(cube, compute(cube), tmp_path / "r.html")
    text = path.read_text()
    # BokehJS is inlined: no script or stylesheet is fetched from anywhere
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"<link[^>]+href=", text)
    assert "Bokeh.embed.embed_items" in text
    for name in EXPECTED:
        assert f'"name":"{name}"' in text.replace(" ", "") or f'"{name}"' in text
    assert "No fit failed." in text and "cvflow report: html" in text


def test_kfold_only_store_still_gets_grid_plots(tmp_path, write_workflow, client):
    """A store made for kfold alone: corrected K-fold and mu(h) are computed for the page."""
    wf = write_workflow(STUDY.replace("test_fraction: 0.25", "test_fraction: 0.0")
                        .split("estimators:")[0] + "estimators: [kfold]\n")
    store = run(wf, store=tmp_path / "k.zarr", client=client).store
    cube = cvflow.open(store)
    text = write_html(cube, compute(cube), tmp_path / "k.html").read_text()
    assert '"kfold-ridge"' in text and '"stability-lasso"' in text
    assert '"m-lambda"' not in text and '"ustat"' not in text


@pytest.mark.browser
def test_report_renders_in_headless_chromium(study, tmp_path):
    if chromium() is None:
        if os.environ.get("CVFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail("CVFLOW_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH")
    pytest.importorskip("websocket", reason="pip install websocket-client")
    html = tmp_path / "report.html"
    res = run_cli("report", study, "--html", html)          # the command users run
    assert res.returncode == 0, res.stderr
    with Page(width=1400, height=3000) as page:
        page.open(html)
        deadline = time.monotonic() + 20
        state = page.evaluate(RENDERED)
        while state["canvases"] < len(EXPECTED) and time.monotonic() < deadline:
            time.sleep(0.2)
            state = page.evaluate(RENDERED)
        time.sleep(0.5)                                       # let late errors surface
        state = page.evaluate(RENDERED)
        artifacts = REPO / "artifacts"
        artifacts.mkdir(exist_ok=True)
        shot = page.screenshot(artifacts / "report.png")
        errors = page.errors()
    assert errors == []
    assert state["bokeh"]
    names = {f["name"] for f in state["figures"]}
    assert names == EXPECTED
    assert all(f["renderers"] > 0 and f["title"] for f in state["figures"])
    assert state["canvases"] >= len(EXPECTED)                 # every plot drew its canvas
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
