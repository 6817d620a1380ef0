"""A suite's live page and ``cvflow status`` while it runs and after (issue 42 item 2).

A fresh ``cvflow run`` of a four-data-set suite on one worker thread: ``a`` and ``b`` run, ``c``
is held running by its learner (its fits wait for a file, :mod:`gated_learner`), ``d`` waits for
its turn. Meanwhile the suite's page (its URL printed once, its token required) and
``cvflow status`` must agree with the cubes (their ``done`` cells counted with zarr), and the
comparison across the data sets done must equal K-fold errors computed with scikit-learn;
then the gate opens and the finished suite's status is checked the same way.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from sklearn.linear_model import Ridge

import fault_helpers as fh
from browser import chromium
from cvflow.report import suite_live

pytestmark = pytest.mark.timeout(600)

LABELS = ("a", "b", "c", "d")
PER = 4 * (3 + 1)            # 4 params x (3 folds + the full fit)
LEARNERS = {"ridge": [{"alpha": a, "fit_intercept": True} for a in (0.1, 1.0, 10.0)],
            "flat": [{"alpha": 1.0, "fit_intercept": False}]}


def _suite(tmp, gate) -> object:
    # the biggest data sets start first (fits x cells of X): a, b (60 x 4), c (40 x 5, the
    # gated one), d (30 x 4)
    path = tmp / "gated.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: gated
        data:
          - {{source: synthetic, name: linear, params: {{n: 60, p: 4}}, seed: 1, label: a}}
          - {{source: synthetic, name: linear, params: {{n: 60, p: 4}}, seed: 2, label: b}}
          - {{source: synthetic, name: linear, params: {{n: 40, p: 5}}, seed: 3, label: c}}
          - {{source: synthetic, name: linear, params: {{n: 30, p: 4}}, seed: 4, label: d}}
        task: regression
        loss: squared
        learners:
          - name: ridge
            class: gated_learner.GatedRidge
            params: {{gate: "{gate}", gated_features: 5}}
            grid: {{alpha: [0.1, 1.0, 10.0]}}
          - name: flat
            class: gated_learner.GatedRidge
            params: {{gate: "{gate}", gated_features: 5, fit_intercept: false}}
            grid: {{alpha: [1.0]}}
        design: {{folds: 3, seed: 0}}
        estimators: [kfold]
        execution: {{cluster: threads, workers: 1, fits_per_task: 1, trial_fits: false}}
        """))
    return path


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """The running suite, ``c`` held: (process, the suite page's URL, store, gate, stderr seen)."""
    tmp = tmp_path_factory.mktemp("suite_page")
    gate = tmp / "open"
    store = tmp / "s.zarr"
    proc = fh.start_run(_suite(tmp, gate), store)
    try:
        seen, url, deadline = [], None, time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise AssertionError(f"run ended (rc {proc.returncode}): {''.join(seen)[-2000:]}")
            seen.append(line)
            m = re.match(r"suite page: (http://\S+)", line)
            url = m and m.group(1)
        assert url, "no suite page URL printed"
        yield proc, url, store, gate, seen
    finally:
        gate.touch()
        fh.reap(proc)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def _data_url(url: str) -> str:
    base, query = url.split("?", 1)
    asked = dict(part.split("=", 1) for part in query.split("&"))
    return f"{base}/data/{asked['run']}.json?token={asked['token']}"


def _while_held(url: str, proc) -> dict:
    """The page's state once a and b are done and compared, c running and d waiting."""
    deadline, state = time.monotonic() + 180, None
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended while c was held"
        code, body = _get(_data_url(url))
        assert code == 200, code
        state = json.loads(body)
        states = [r["state"] for r in state["datasets"]]
        if states == ["done", "done", "running", "waiting"] and state["answer"]["of"] == ["a", "b"]:
            return state
        time.sleep(0.2)
    raise AssertionError(f"the page never showed a, b done, c running, d waiting: {state}")


def _done_cells(store) -> dict[str, int | None]:
    """Data set -> its cube's fitted cells (``done``), read with zarr; None: no cube."""
    import zarr

    out: dict[str, int | None] = {}
    for label in LABELS:
        try:
            out[label] = int(np.asarray(zarr.open_group(str(store / label), mode="r")["done"][...]).sum())
        except (FileNotFoundError, KeyError, zarr.errors.GroupNotFoundError):
            out[label] = None
    return out


def _sklearn_kfold(store, label: str) -> dict[str, float]:
    """Per learner, the lowest over its grid of the pooled out-of-fold squared error of
    scikit-learn's Ridge on the cube's data and folds (the K-fold estimate of the setting
    K-fold selects)."""
    import zarr

    g = zarr.open_group(str(store / label), mode="r")
    X, y, fold = (np.asarray(g[name][...]) for name in ("X", "y", "fold"))
    out = {}
    for learner, grid in LEARNERS.items():
        errors = []
        for params in grid:
            losses = np.empty_like(y)
            for j in np.unique(fold[0]):
                held_out = fold[0] == j
                model = Ridge(**params).fit(X[~held_out], y[~held_out])
                losses[held_out] = (model.predict(X[held_out]) - y[held_out]) ** 2
            errors.append(losses.mean())
        out[learner] = min(errors)
    return out


def _status(store, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cvflow", "status", str(store), *args],
                          capture_output=True, text=True, env=fh.cli_env(), timeout=120)


def test_the_suite_page_counts_each_data_set_as_its_cube_does(held):
    proc, url, store, gate, seen = held
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/cvflow/suite\?run=gated-[0-9a-f]{8}"
                        r"&token=[\w-]{32}", url), url
    state = _while_held(url, proc)
    cells = _done_cells(store)
    rows = {r["name"]: r for r in state["datasets"]}
    assert list(rows) == list(LABELS)
    # done: the cube's count; running: its cells so far (none: c's fits wait); waiting: no cube
    assert cells["a"] == cells["b"] == PER and cells["c"] == 0 and cells["d"] is None, cells
    for label in ("a", "b", "c"):
        assert rows[label]["done"] == cells[label] and rows[label]["total"] == PER, rows[label]
    assert rows["d"]["done"] == 0 and rows["d"]["total"] == PER
    assert (state["done"], state["total"], state["failed"]) == (2 * PER, 4 * PER, 0)
    assert "token" not in state
    # the comparison across the data sets done: scikit-learn's K-fold errors
    assert state["answer"]["estimate"] == "kfold"
    for label in ("a", "b"):
        expected = _sklearn_kfold(store, label)
        got = state["answer"]["estimates"][label]
        np.testing.assert_allclose([got[k] for k in LEARNERS], [expected[k] for k in LEARNERS],
                                   rtol=1e-9)
    # the page: each data set's row and a link to its own page, which answers
    code, body = _get(url)
    assert code == 200
    assert re.findall(r"data-dataset='(\w)' data-state='(\w+)'", body) == [
        ("a", "done"), ("b", "done"), ("c", "running"), ("d", "waiting")]
    links = [html.unescape(h) for h in re.findall(r"<a href='([^']+)'>its live page</a>", body)]
    assert len(links) == 3 and all(_get(link)[0] == 200 for link in links), links
    assert "Across the data sets done (a, b)" in body
    # its URL said once
    assert sum("suite page:" in line for line in seen) == 1


def test_the_suite_page_answers_only_its_owner(held):
    proc, url, store, gate, seen = held
    base, query = url.split("?", 1)
    run = re.search(r"run=([\w.-]+)", query).group(1)
    token = re.search(r"token=([\w-]+)", query).group(1)
    data = f"{base}/data/{run}.json"
    assert _get(f"{data}?token={token}")[0] == 200
    for asked in (base, f"{base}?run={run}", f"{base}?run={run}&token=x",
                  f"{base}?run={run}&token={token[:-1]}", data, f"{data}?token=",
                  f"{base}/data/gated-00000000.json?token={token}"):
        assert _get(asked)[0] == 403, asked


def test_status_of_a_running_suite_per_data_set_and_in_total(held):
    proc, url, store, gate, seen = held
    _while_held(url, proc)
    out = _status(store)
    assert out.returncode == 0, out.stderr
    cells = _done_cells(store)
    for label in ("a", "b"):
        assert f"== {label} ==\n{store / label}: {PER}/{PER} fits done, 0 failed (complete)" in out.stdout
    # c's block: its cube's counts (per learner too), then its state
    assert re.search(re.escape(f"== c ==\n{store / 'c'}: 0/{PER} fits done, 0 failed\n")
                     + r"(  \w+: \d+/\d+ done, 0 failed\n)*  running \(its run holds", out.stdout), out.stdout
    assert "== d ==\nnot started (no cube yet), waiting for its turn" in out.stdout
    assert out.stdout.rstrip().endswith(
        f"suite: {sum(v or 0 for v in cells.values())} of {4 * PER} fits done, 0 failed; "
        "2 of 4 data sets complete, 1 running, 1 waiting")
    info = json.loads(_status(store, "--json").stdout)
    assert [info[label] and info[label]["state"] for label in LABELS] == [
        "complete", "complete", "running", None]


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None, reason="needs chromium (apt-get install -y chromium)")
def test_the_suite_page_renders_in_chromium(held):
    from browser import Page

    proc, url, store, gate, seen = held
    state = _while_held(url, proc)
    read = """(() => Array.from(document.querySelectorAll('#datasets tr[data-dataset]'), r =>
        [r.dataset.dataset, r.dataset.state, r.cells[2].textContent, r.cells[3].textContent,
         r.querySelector('a') ? r.querySelector('a').href : null]))()"""
    with Page(width=1200, height=900) as page:
        page.send("Page.navigate", {"url": url})
        page.wait_event("Page.loadEventFired", timeout=60)
        shown = page.evaluate(read)
        answer = page.evaluate("document.getElementById('answer').textContent")
        errors = page.errors()
    assert [row[:4] for row in shown] == [[r["name"], r["state"], str(r["done"]), str(r["total"])]
                                          for r in state["datasets"]]
    assert [row[4] for row in shown] == [r["live"] for r in state["datasets"]]
    assert "estimates (kfold)" in answer
    assert not errors, errors


def test_status_of_the_finished_suite_equals_its_cubes(held):
    proc, url, store, gate, seen = held
    gate.touch()
    rc, _, err = fh.finish(proc)
    assert rc == 0, err[-2000:]
    cells = _done_cells(store)
    assert cells == dict.fromkeys(LABELS, PER)
    out = _status(store)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith(
        f"suite: {4 * PER} of {4 * PER} fits done, 0 failed; 4 of 4 data sets complete")
    info = json.loads(_status(store, "--json").stdout)
    assert {label: (info[label]["done"], info[label]["total"], info[label]["state"])
            for label in LABELS} == {label: (cells[label], PER, "complete") for label in LABELS}
    assert sum("suite page:" in line for line in seen + err.splitlines()) == 1


def test_the_page_escapes_every_string():
    hostile = "<script>alert(1)</script>'\"&"
    state = {"name": hostile, "store": hostile, "ended": False, "done": 1, "total": 2,
             "failed": 0, "counts": {"running": 1},
             "datasets": [{"name": hostile, "state": "running", "done": 1, "total": 2,
                           "failed": 0, "live": "javascript:alert(1)"}],
             "answer": {"of": [hostile], "lines": [hostile], "error": hostile}}
    page = suite_live.page_html(state)
    assert "<script" not in page and "javascript:" not in page
    # the name, the store, the data set (cell and attribute), the answer and its error: as text
    assert html.unescape(page).count(hostile) >= 6


class _Published:
    """Stands in for the client: keeps what the page publishes (as msgpack/JSON would)."""

    def __init__(self):
        self.metadata = {}

    def set_metadata(self, keys, value):
        self.metadata[tuple(keys)] = json.loads(json.dumps(value))


def test_the_page_state_follows_the_events_by_hand(monkeypatch, tmp_path):
    """Events of three data sets, counted by hand: a resumed one (4 of 10 stored), one that
    fails, one never started; the comparison of a data set without a cube says why."""
    from types import SimpleNamespace

    from cvflow.report import live

    class Monitor:               # a data set's live page (held weakly by live.STARTED)
        client = _Published()

    monitor, client = Monitor(), Monitor.client
    url = "http://127.0.0.1:1/cvflow?run=x-00000000&token=t"
    monkeypatch.setitem(live.STARTED, url, monitor)
    monkeypatch.setattr(live, "page_address", lambda c: ("http://127.0.0.1:1/cvflow", "t"))
    page = suite_live.SuitePage("s", {"a": 10, "b": 6, "c": 8}, str(tmp_path / "none.zarr"))
    said = page.event("a", {"event": "start", "total": 10, "todo": 6, "live": url})
    assert said == f"http://127.0.0.1:1/cvflow/suite?run={page.run}&token=t"
    assert page.event("a", {"event": "block", "done": 3, "todo": 6, "failed": 1}) is None
    page.event("b", {"event": "start", "total": 6, "todo": 6, "live": None})
    page.event("b", {"event": "racing", "done": 2, "todo": 4, "failed": 0, "dropped": 1,
                     "params": 3})
    page.finish("b", state="failed")
    page.finish("a", SimpleNamespace(total_fits=10, fits_executed=6, failed=1, saved_fits=0))
    page.close()
    state = client.metadata[(suite_live.METADATA, page.run)]
    rows = {r["name"]: (r["state"], r["done"], r["total"], r["failed"]) for r in state["datasets"]}
    assert rows == {"a": ("done", 10, 10, 1), "b": ("failed", 2, 4, 0), "c": ("waiting", 0, 8, 0)}
    assert (state["done"], state["total"], state["failed"], state["ended"]) == (12, 22, 1, True)
    assert state["counts"] == {"waiting": 1, "running": 0, "done": 1, "failed": 1, "stopped": 0}
    assert state["answer"]["error"].startswith("a: ") and state["answer"]["lines"] is None
    body = suite_live.page_html(state)
    assert "comparison failed" in body and "http-equiv='refresh'" not in body
