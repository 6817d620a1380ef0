"""The race where users read it: ``cvflow report --json`` (a ``racing`` entry), the HTML report
(who was dropped when, every string shown as text in headless Chromium) and the live page;
checked from whole ``cvflow`` processes against the store and independent recomputations."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import norm

from cvtest import run_cli

WORKFLOW = """\
name: {name}
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: {learner}
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {{logspace: [-2, 5, 12]}}}}
design: {{folds: 5, repeats: 2, seed: 0}}
estimators: [kfold]
execution: {{cluster: threads}}
racing: {{alpha: 0.05}}
"""


def payload(where: str) -> str:
    return f"</script>\"'><img src=x onerror=pwned_{where}=1>{where}"


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    """A raced ridge study (12 alphas, 5 folds x 2 repeats) run by ``cvflow run``, its study and
    learner names hostile markup."""
    tmp = tmp_path_factory.mktemp("raced")
    wf = tmp / "wf.yaml"
    wf.write_text(WORKFLOW.format(name=json.dumps(payload("name")),
                                  learner=json.dumps(payload("learner"))))
    store = tmp / "raced.zarr"
    out = run_cli("run", wf, "--store", store)
    assert out.returncode == 0, out.stderr
    return store


def _oof_losses(cube) -> np.ndarray:
    """(param, repeat, sample) squared out-of-fold losses, NaN where not fitted: by hand from
    ``pred``, ``fold`` and ``fold_split``."""
    pred, y = cube["pred"].values, cube["y"].values
    fold, table = cube["fold"].values, cube["fold_split"].values
    out = np.full((pred.shape[0],) + fold.shape, np.nan)
    for r in range(fold.shape[0]):
        for j in range(table.shape[1]):
            members = fold[r] == j
            out[:, r, members] = (pred[:, table[r, j]][:, members] - y[members]) ** 2
    return out


def test_report_json_has_the_race(raced):
    """``report --json`` has a ``racing`` entry: per dropped param its label, stage, leader (the
    survivor of lowest mean out-of-fold loss over the folds seen by then, recomputed here), the
    loss difference, z = difference / se and p = the normal tail of z (scipy)."""
    import cvflow
    from cvflow.estimators.labels import param_label, param_text

    out = run_cli("report", raced, "--json")
    assert out.returncode == 0, out.stderr
    race = json.loads(out.stdout)["racing"]          # strict JSON: no NaN, no Infinity
    assert "kfold" in json.loads(out.stdout)
    cube = cvflow.open(raced)
    done = cube["done"].values
    assert race["saved_fits"] == int((~done).sum()) > 0
    assert race["params"] == 12 and race["survivors"] == 12 - len(race["dropped"])
    assert race["alpha"] == 0.05 and race["looks"] == len(race["stages"]) - 1 == 6   # 5 folds, a repeat, the full fit
    losses = _oof_losses(cube)
    alive = np.ones(12, bool)
    seen = np.zeros(losses.shape[1:], bool)
    fold = cube["fold"].values
    stages = {d["stage"] for d in race["dropped"]}
    assert stages
    for stage in race["stages"][:race["looks"]]:
        for r, j in stage["folds"]:
            seen[r] |= fold[r] == j
        rows = [d for d in race["dropped"] if d["stage"] == stage["stage"]]
        if rows:
            means = np.array([losses[h][seen].mean() for h in range(12)])
            leader = int(np.flatnonzero(alive)[np.argmin(means[alive])])
        for d in rows:
            h = d["param"]
            assert d["label"] == param_text(param_label(cube, h)) and payload("learner") in d["label"]
            assert d["leader_param"] == leader and d["leader"] == param_text(param_label(cube, leader))
            assert d["folds"] == ", ".join(f"r{r}f{j}" for r, j in stage["folds"])
            assert d["mean_difference"] == pytest.approx(means[h] - means[leader])
            assert d["z"] == pytest.approx(d["mean_difference"] / d["se"])
            assert d["p_value"] == pytest.approx(norm.sf(d["z"]), rel=1e-6)
            assert d["p_value"] <= race["threshold"]
            # the dropped param has none of the later stages' fits
            later = [s for st in race["stages"][stage["stage"] + 1:] for s in st["splits"]]
            assert not done[h, later].any()
        alive[[d["param"] for d in rows]] = False
    assert alive[int(cvflow.estimators.kfold(cube)["selected"])]

    # several losses: each has the race
    out = run_cli("report", raced, "--json", "--loss", "squared", "--loss", "absolute")
    assert out.returncode == 0, out.stderr
    both = json.loads(out.stdout)
    assert [v["racing"]["dropped"] for v in both.values()] == [race["dropped"]] * 2


def test_report_json_of_a_study_not_raced_has_no_racing_entry(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(name="plain", learner="ridge").replace(
        "racing: {alpha: 0.05}\n", "").replace("repeats: 2", "repeats: 1"))
    out = run_cli("run", wf, "--store", tmp_path / "s.zarr")
    assert out.returncode == 0, out.stderr
    out = run_cli("report", tmp_path / "s.zarr", "--json")
    assert out.returncode == 0, out.stderr
    assert "racing" not in json.loads(out.stdout)


@pytest.mark.browser
def test_html_report_shows_the_race_as_text(raced, tmp_path):
    """``report --html``: a section names every dropped param with the stage, its leader, z and
    p, and the params left after each stage; the hostile names are text, nothing runs."""
    from browser import Page, chromium

    if chromium() is None:
        pytest.skip("needs chromium (apt-get install -y chromium)")
    out = tmp_path / "r.html"
    res = subprocess.run([sys.executable, "-m", "cvflow", "report", str(raced), "--html",
                          str(out)], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    race = json.loads(run_cli("report", raced, "--json").stdout)["racing"]
    inspect = """(() => {
      const text = [], images = [];
      const walk = (root) => {
        const it = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
        for (let n = it.currentNode; n; n = it.nextNode()) {
          if (n.nodeType === Node.TEXT_NODE) {
            if (!['SCRIPT', 'STYLE', 'TITLE'].includes(n.parentNode.nodeName)) text.push(n.data);
          } else {
            if (n.nodeName === 'IMG' && n.getAttribute('src') === 'x') images.push(n.outerHTML);
            if (n.shadowRoot) walk(n.shadowRoot);
          }
        }
      };
      walk(document.documentElement);
      const rows = [];
      const find = (root) => {
        for (const t of root.querySelectorAll('table.racing tr'))
          rows.push(Array.from(t.children).map((c) => c.textContent));
        for (const n of root.querySelectorAll('*')) if (n.shadowRoot) find(n.shadowRoot);
      };
      find(document);
      return {text: text.join('\\n'), images, rows,
              pwned: Object.keys(window).filter((k) => k.startsWith('pwned'))};
    })()"""
    import time

    with Page(width=1400, height=3000) as page:
        page.open(out)
        deadline = time.monotonic() + 60
        seen = page.evaluate(inspect)
        while not seen["rows"] and time.monotonic() < deadline:
            time.sleep(0.3)
            seen = page.evaluate(inspect)
        time.sleep(1.0)
        seen = page.evaluate(inspect)
    assert seen["images"] == [] and seen["pwned"] == [], seen
    assert "Racing: who was dropped when" in seen["text"]
    rows = seen["rows"]
    # the params left after each look, then one row per dropped param
    left = [int(x) for x in rows[1][1:]]
    want = [12 - sum(d["stage"] <= s for d in race["dropped"]) for s in range(race["looks"])]
    assert rows[0][0] == "after the fits of" and left == want
    dropped = rows[3:]
    assert len(dropped) == len(race["dropped"])
    for cells, d in zip(dropped, race["dropped"]):
        assert cells[0] == str(d["stage"]) and cells[1] == d["folds"]
        assert cells[2] == d["label"] and cells[3] == d["leader"]    # hostile names: as text
        assert float(cells[5]) == pytest.approx(d["z"], abs=0.01)
        assert float(cells[6]) == pytest.approx(d["p_value"], rel=0.05)


# --- progress: the fits racing skipped leave the "to do" count ------------------------------------

def test_run_progress_and_closing_line_count_the_fits_racing_saved(raced, tmp_path):
    """``cvflow run`` of a raced study: each look that drops params says so on stderr, the bar's
    total shrinks by the skipped fits and reaches its end (E/E fits, S skipped by racing), and
    the closing lines say how many fits racing saved, counted against the store."""
    import re

    import cvflow

    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(name="progress", learner="ridge"))
    store = tmp_path / "s.zarr"
    out = run_cli("run", wf, "--store", store)
    assert out.returncode == 0, out.stderr
    cube = cvflow.open(store)
    done = cube["done"].values
    executed, saved = int(done.sum()), int((~done).sum())
    race = json.loads(cube.attrs["racing"])
    n_dropped = len(race["dropped"])
    assert saved > 0 and executed + saved == 12 * 11
    assert f"{12 * 11} of {12 * 11} fits to do" in out.stderr
    looks = re.findall(r"racing: (\d+) of 12 params dropped, (\d+) fits skipped", out.stderr)
    assert looks and int(looks[-1][0]) == n_dropped and int(looks[-1][1]) == saved
    assert [int(d) for d, _ in looks] == sorted(int(d) for d, _ in looks)
    bars = re.findall(r"\] (\d+)/(\d+) fits(?: \((\d+) skipped by racing\))?", out.stderr)
    assert bars[-1] == (str(executed), str(executed), str(saved))
    assert f"racing: {n_dropped} of 12 params dropped, {saved} fits saved ({executed} run)" \
        in out.stdout
    assert (f"fits executed / distinct (param, training set) pairs = {executed}/{executed} = "
            "1.000") in out.stdout


def test_live_page_state_counts_skipped_fits_not_to_do(raced):
    """The live page's state fed a raced run's blocks (each marking only the cells it fitted)
    and its looks: done, to do and skipped by racing per param equal the store's."""
    import cvflow
    from cvflow.report import live
    from cvflow.fitting.block import BlockResult
    from cvflow.store.cube import block_chunks, block_slices

    class Published:
        def set_metadata(self, keys, value):
            self.value = json.loads(json.dumps(value))

    cube = cvflow.open(raced)
    done = cube["done"].values
    race = json.loads(cube.attrs["racing"])
    wf = cvflow.load_workflow(raced.parent / "wf.yaml")
    study = wf.build()
    monitor = live.Monitor(Published(), wf, study.params, study.design, study.data,
                           store=str(raced), url="http://x/cvflow")
    chunks = block_chunks(raced)
    for s, splits in enumerate(race["stage_splits"]):
        want = np.zeros_like(done)
        want[:, splits] = done[:, splits]
        for ps, ss in block_slices(*done.shape, chunks):
            if want[ps, ss].any():
                shape = want[ps, ss].shape
                monitor.block({"status": BlockResult(ps, ss, None, np.zeros(shape, bool),
                                                     np.full(shape, "", object), np.ones(shape),
                                                     fitted=want[ps, ss])})
        monitor.raced([d for d in race["dropped"] if d["stage"] <= s])
    state = monitor.state()
    assert state["done"] == state["total"] == int(done.sum())
    assert state["skipped"] == int((~done).sum())
    rows = state["learners"][payload("learner")]
    assert rows["ok"] == done.sum(axis=1).tolist()
    assert rows["skipped"] == (~done).sum(axis=1).tolist() and sum(rows["pending"]) == 0
    progress = live.columns(state, "progress")
    assert progress["skipped"] == [int((~done).sum())] and progress["total"] == [int(done.sum())]
    # the racing table: who was dropped when, beaten by whom
    table = live.columns(state, "racing")
    assert table["stage"] == [d["stage"] for d in race["dropped"]]
    assert table["dropped"] == [monitor.labels[d["param"]] for d in race["dropped"]]
    assert table["leader"] == [monitor.labels[d["leader"]] for d in race["dropped"]]
    assert table["p"] == pytest.approx([d["p_value"] for d in race["dropped"]])


# --- which estimators a raced cube serves ----------------------------------------------------------

def _plain_workflow(tmp_path, estimators: str, racing: str = "racing: {alpha: 0.05}",
                    name: str = "wf.yaml"):
    wf = tmp_path / name
    wf.write_text(WORKFLOW.format(name="serve", learner="ridge")
                  .replace("estimators: [kfold]", f"estimators: {estimators}")
                  .replace("racing: {alpha: 0.05}", racing))
    return wf


def test_bayes_t_on_a_raced_study_is_the_full_study_s_for_two_survivors(tmp_path):
    """A raced workflow may ask for bayes_t: on two params that survived, its posterior equals
    the full study's; on a param the race dropped it is NaN with the missing-fits warning."""
    import cvflow

    estimators = "[kfold, {bayes_t: {compare: [0, 1], rope: 10.0}}]"
    raced, full = tmp_path / "raced.zarr", tmp_path / "full.zarr"
    out = run_cli("run", _plain_workflow(tmp_path, estimators), "--store", raced)
    assert out.returncode == 0, out.stderr
    out = run_cli("run", _plain_workflow(tmp_path, estimators, racing="", name="full.yaml"),
                  "--store", full)
    assert out.returncode == 0, out.stderr
    got = json.loads(run_cli("report", raced, "--json").stdout)
    want = json.loads(run_cli("report", full, "--json").stdout)
    dropped = {d["param"] for d in got["racing"]["dropped"]}
    assert dropped and not {0, 1} & dropped
    for key in ("p_a_better", "p_rope", "p_b_better", "location", "scale", "df"):
        assert got["bayes_t"][key] == pytest.approx(want["bayes_t"][key], rel=1e-12), key
    beaten = cvflow.estimators.bayes_t(cvflow.open(raced), compare=[0, max(dropped)])
    assert np.isnan(float(beaten["p_a_better"]))
    assert "missing_fits" in json.dumps(beaten.attrs["warnings"])


def test_nested_compare_is_refused_in_a_raced_workflow(tmp_path):
    """nested_compare's inner choice would be made among params kept by looking at the outer
    folds: a raced workflow asking for it is refused with one line, before any store."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(name="nc", learner="ridge").replace(
        "estimators: [kfold]", "estimators: [kfold, nested_compare]").replace(
        "    grid: {alpha: {logspace: [-2, 5, 12]}}",
        "    grid: {alpha: {logspace: [-2, 5, 6]}}\n"
        "  - name: lasso\n    class: sklearn.linear_model.Lasso\n"
        "    grid: {alpha: {logspace: [-2, 1, 4]}}"))
    out = run_cli("run", wf, "--store", tmp_path / "s.zarr")
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "estimators[1]: nested_compare needs every param on every split" in out.stderr
    assert not (tmp_path / "s.zarr").exists()
    # without racing the same workflow is valid
    wf.write_text(wf.read_text().replace("racing: {alpha: 0.05}", ""))
    assert run_cli("validate", wf).returncode == 0


def test_report_skips_what_a_raced_cube_does_not_serve_until_it_is_filled(tmp_path):
    """``report --estimators kfold,bbc_cv`` on a raced store: kfold is reported, bbc_cv (needs
    every param on every split) is skipped with one line saying how to fill the store; after
    ``racing: false`` fills it, bbc_cv is computed."""
    store = tmp_path / "s.zarr"
    out = run_cli("run", _plain_workflow(tmp_path, "[kfold]"), "--store", store)
    assert out.returncode == 0, out.stderr
    out = run_cli("report", store, "--estimators", "kfold,bbc_cv", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert "estimate" in got["kfold"]
    assert got["bbc_cv"]["skipped"].startswith("bbc_cv needs every param on every split, but "
                                               "racing skipped")
    text = run_cli("report", store, "--estimators", "kfold,bbc_cv").stdout
    assert "bbc_cv: skipped: bbc_cv needs every param on every split" in text
    out = run_cli("run", _plain_workflow(tmp_path, "[kfold]", racing="racing: false"),
                  "--store", store)
    assert out.returncode == 0, out.stderr
    got = json.loads(run_cli("report", store, "--estimators", "kfold,bbc_cv", "--json").stdout)
    assert "skipped" not in got["bbc_cv"] and got["racing"]["saved_fits"] == 0


@pytest.mark.browser
def test_live_page_lists_who_racing_dropped_while_the_run_goes_on(tmp_path):
    """``cvflow run`` of a raced study on a local cluster: while its last stage runs (a full
    fit waits for a file), the live page's racing table lists every dropped param with its
    stage and z as the store records them, the progress table counts the skipped fits apart,
    and the hostile learner name is text."""
    import time
    import urllib.request

    import fault_helpers as fh
    from browser import Page, chromium

    if chromium() is None:
        pytest.skip("needs chromium (apt-get install -y chromium)")
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(name="live-race", learner=json.dumps(payload("learner")))
                  .replace("class: sklearn.linear_model.Ridge",
                           "class: fault_helpers.FullFitGatedRidge\n"
                           f"    params: {{gate: {json.dumps(str(tmp_path / 'gate'))}, "
                           f"claim: {json.dumps(str(tmp_path / 'claim'))}, min_rows: 400}}")
                  .replace("execution: {cluster: threads}", "execution: {fits_per_task: 12}"))
    store = tmp_path / "s.zarr"
    proc = fh.start_run(wf, store, "--cluster", "local", "--workers", "2")
    try:
        url, deadline = fh.live_page_url(proc, timeout=180), time.monotonic() + 180
        while not (tmp_path / "claim").exists() and time.monotonic() < deadline:
            time.sleep(0.2)                   # the last stage has begun: every look is done
        assert (tmp_path / "claim").exists()
        base, query = url.split("?", 1)
        asked = dict(part.split("=", 1) for part in query.split("&"))
        data = f"{base.rsplit('/', 1)[0]}/cvflow/data/{asked['run']}"
        token = f"?token={asked['token']}"              # the page's data are its owner's only
        racing, progress, deadline = {}, {}, time.monotonic() + 60
        while time.monotonic() < deadline:     # the monitor publishes at most every second
            with urllib.request.urlopen(f"{data}/racing.json{token}", timeout=30) as r:
                racing = json.loads(r.read())          # strict JSON (no Infinity)
            with urllib.request.urlopen(f"{data}/progress.json{token}", timeout=30) as r:
                progress = json.loads(r.read())
            if racing["stage"] and progress["skipped"][0]:
                break
            time.sleep(0.5)
        with Page(width=1400, height=2400) as page:
            page.send("Page.navigate", {"url": url})
            page.wait_event("Page.loadEventFired", timeout=60)
            seen, deadline = {}, time.monotonic() + 60
            while time.monotonic() < deadline:
                seen = page.evaluate("""(() => {
                  const text = [], images = [];
                  const walk = (root) => {
                    for (const n of root.querySelectorAll('*')) {
                      if (n.nodeName === 'IMG' && n.getAttribute('src') === 'x') images.push(n.outerHTML);
                      if (n.shadowRoot) walk(n.shadowRoot);
                    }
                    text.push(root.textContent || '');
                  };
                  walk(document);
                  return {text: text.join('\\n'), images,
                          pwned: Object.keys(window).filter((k) => k.startsWith('pwned'))};
                })()""")
                if "Racing: who was dropped when" in seen["text"] \
                        and payload("learner") in seen["text"]:
                    break
                time.sleep(0.5)
        running = proc.poll() is None
    finally:
        (tmp_path / "gate").touch()
        rc, out, err = fh.finish(proc)
    assert running, "the run had finished: the page was not seen while fits were running"
    assert rc == 0, err[-3000:]
    assert seen["images"] == [] and seen["pwned"] == [], seen
    assert "Racing: who was dropped when" in seen["text"]
    import cvflow

    cube = cvflow.open(store)
    race = json.loads(cube.attrs["racing"])
    assert racing["stage"] == [d["stage"] for d in race["dropped"]]
    assert racing["z"] == pytest.approx([d["z"] for d in race["dropped"]])
    assert set(racing["learner"]) == {payload("learner")}
    assert progress["skipped"] == [int((~cube["done"].values).sum())]


def test_status_after_filling_says_so(tmp_path):
    """``cvflow status`` and ``report`` say what racing leaves missing now: before the fill,
    how many dropped params still lack how many fits (counted by hand from ``done``) and a
    missing-fits warning that names racing; after ``racing: false`` filled them, that every
    param has its results (not "dropped" as if they still lacked them), and no warning."""
    import cvflow

    store = tmp_path / "s.zarr"
    out = run_cli("run", _plain_workflow(tmp_path, "[kfold]"), "--store", store)
    assert out.returncode == 0, out.stderr
    cube = cvflow.open(store)
    done = cube["done"].values
    lacking = [h for h in range(done.shape[0]) if not done[h].all()]
    saved = int((~done).sum())
    dropped = len(json.loads(cube.attrs["racing"])["dropped"])
    assert lacking and saved and dropped == len(lacking)
    status = run_cli("status", store).stdout
    assert (f"racing (alpha 0.05): {dropped} of 12 params dropped; {len(lacking)} of them still "
            f"lack {saved} fits racing skipped (their results are NaN; `cvflow run` with racing: "
            "false fits them)") in status, status
    assert json.loads(run_cli("status", store, "--json").stdout)["racing"]["unfilled"] \
        == len(lacking)
    report = run_cli("report", store)
    assert report.returncode == 0, report.stderr
    assert (f"warning [missing_fits]: {len(lacking)} param(s) lack a fit kfold needs (racing "
            f"dropped {len(lacking)} param(s) before their later fits, see racing; or failed or "
            "not written yet); their results are NaN") in report.stdout, report.stdout
    got = json.loads(run_cli("report", store, "--json").stdout)
    estimate = np.array([np.nan if v is None else v for v in got["kfold"]["estimate"]["values"]])
    assert np.isnan(estimate[lacking]).all() and np.isfinite(np.delete(estimate, lacking)).all()

    out = run_cli("run", _plain_workflow(tmp_path, "[kfold]", racing="racing: false"),
                  "--store", store)
    assert out.returncode == 0, out.stderr
    assert cvflow.open(store)["done"].values.all()
    status = run_cli("status", store).stdout
    assert (f"racing (alpha 0.05): {dropped} of 12 params were dropped, and their skipped fits "
            "have been fitted since (a run without racing): every param has its results") \
        in status, status
    assert "still lack" not in status
    info = json.loads(run_cli("status", store, "--json").stdout)["racing"]
    assert info["unfilled"] == 0 and info["saved_fits"] == 0
    report = run_cli("report", store).stdout
    assert "missing_fits" not in report and "still lack" not in report
    assert f"racing: {dropped} of 12 params were dropped, and their skipped fits" in report
    # the filled results are the out-of-fold means, by hand
    filled = cvflow.open(store)
    got = json.loads(run_cli("report", store, "--json").stdout)
    np.testing.assert_allclose(got["kfold"]["estimate"]["values"],
                               _oof_losses(filled).mean(axis=(1, 2)),
                               rtol=1e-10)


BOUNDED = """\
name: bounded
data: {source: sklearn, name: breast_cancer}
task: classification
loss: zero_one
learners:
  - name: logit
    class: sklearn.linear_model.LogisticRegression
    params: {max_iter: 2000}
    grid: {C: {logspace: [-5, 2, 8]}}
    preprocess: [sklearn.preprocessing.StandardScaler]
design: {folds: 5, repeats: 2, seed: 0}
estimators: [kfold]
execution: {cluster: threads}
racing: {alpha: 0.05}
"""


def test_a_bounded_race_reports_each_looks_threshold(tmp_path):
    """A bounded loss (zero_one) spends 0.8 alpha over the first repeat's looks and the rest
    over the later ones (docs/guide/racing.md's table): ``report --json`` gives each look's
    threshold, equal to that formula computed here from the stages, each drop its own look's,
    and the text names them (not only the first look's)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(BOUNDED)
    store = tmp_path / "b.zarr"
    out = run_cli("run", wf, "--store", store)
    assert out.returncode == 0, out.stderr
    out = run_cli("report", store, "--json")
    assert out.returncode == 0, out.stderr
    race = json.loads(out.stdout)["racing"]
    k, looks, alpha = race["params"], race["looks"], 0.05
    first = 0
    while first < looks and all(r == 0 for r, _ in race["stages"][first]["folds"]):
        first += 1
    assert 0 < first < looks                       # the case the table's two rows cover
    pairs = k * (k - 1)
    want = [0.8 * alpha / pairs if s < first else 0.2 * alpha / ((looks - first) * pairs)
            for s in range(looks)]
    assert race["thresholds"] == pytest.approx(want, rel=1e-12)
    assert race["threshold"] == pytest.approx(want[0], rel=1e-12)
    assert race["dropped"], "the tiny Cs predict one class: some must be dropped"
    for d in race["dropped"]:
        assert d["threshold"] == pytest.approx(want[d["stage"]], rel=1e-12)
        assert d["p_value"] <= d["threshold"]
    text = run_cli("report", store).stdout
    assert (f"drop at p <= {want[0]:.3g} at looks 1-{first}, {want[-1]:.3g} at "
            f"look{'s' if looks - first > 1 else ''} ") in text, text
    assert all(f"<= {d['threshold']:.3g})" in text for d in race["dropped"])
