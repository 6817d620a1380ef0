"""Suites (data: a list): validation naming the bad entry before anything runs, one store with a
cube per data set equal to the single-data-set run's, Study.run over a dict, and the suite's
report recomputed with scipy / scikit-posthocs / baycomp."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from scipy import stats

import cvflow
from cvflow.errors import InputError
from cvflow.execution.run import run
from cvflow.execution.suite_run import run_suite
from cvflow.store import suite as suite_store
from cvflow.workflow import suite
from cvflow.workflow.spec import load_workflow

from cvtest import run_cli

SUITE = """\
name: mini
data:
  - {source: sklearn, name: diabetes}
  - {source: synthetic, name: linear, params: {n: 60, p: 4}, label: lin}
  - {source: synthetic, name: linear, params: {n: 70, p: 6}, seed: 5, label: lin5}
  - {source: synthetic, name: sparse_linear, params: {n: 60, p: 8}, seed: 7, label: sparse7,
     design: {folds: 4}}
  - {source: synthetic, name: sparse_linear, params: {n: 50, p: 5}, seed: 9, label: sparse9}
  - {source: synthetic, name: linear, params: {n: 50, p: 3}, seed: 11, label: lin11}
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
  - name: lasso
    class: sklearn.linear_model.Lasso
    grid: {alpha: [0.1]}
  - name: knn
    class: sklearn.neighbors.KNeighborsRegressor
    grid: {n_neighbors: [5]}
design: {folds: 5, repeats: 1, seed: 0}
estimators: [kfold]
execution: {cluster: threads, workers: 1}
"""


def _write(tmp_path: Path, text: str = SUITE) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_a_list_of_data_makes_a_suite_and_a_mapping_stays_one_study(tmp_path):
    loaded = suite.load(_write(tmp_path))
    assert isinstance(loaded, suite.Suite)
    assert loaded.datasets == ["diabetes", "lin", "lin5", "sparse7", "sparse9", "lin11"]
    assert loaded.workflows["sparse7"].config["design"]["folds"] == 4        # the entry's override
    assert loaded.workflows["lin"].config["design"]["folds"] == 5
    one = tmp_path / "one.yaml"
    config = yaml.safe_load(SUITE)
    config["data"] = config["data"][0]
    one.write_text(yaml.safe_dump(config))
    assert not isinstance(suite.load(one), suite.Suite)
    with pytest.raises(InputError, match="data: a list of data sets makes a suite"):
        load_workflow(_write(tmp_path))


@pytest.mark.parametrize("entry, message", [
    ("{source: sklearn, name: diabetes, target: nope}", None),          # at build: data loading
    ("{source: sklearn, name: diabetes, colour: red}",
     r"data\[1\] \(diabetes\): data.colour: unknown key.*and in a suite label, design"),
    ("{source: csv, path: x.csv}", r"data\[1\]: has no name"),
    ("{source: synthetic, name: linear}", r"data\[1\]: the data set name 'linear' is also data\[0\]'s"),
    ("{source: sklearn, name: 'no such'}", r"data\[1\].name: 'no such' cannot name"),
])
def test_a_bad_entry_is_refused_naming_it_before_anything_runs(tmp_path, entry, message):
    text = ("name: bad\ndata:\n  - {source: synthetic, name: linear}\n  - " + entry + "\nlearners:"
            + SUITE.split("learners:")[1])
    path = _write(tmp_path, text)
    store = tmp_path / "bad.zarr"
    if message is None:                        # the file parses; loading the data set fails
        with pytest.raises(InputError, match=r"data\[1\] \(diabetes\): data.target: .*nope"):
            run_suite(suite.load(path), store=store, progress=False)
    else:
        with pytest.raises(InputError, match=message):
            suite.load(path)
    assert not store.exists()                  # nothing ran, no store made
    res = run_cli("validate", path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "data[1]" in res.stderr


def test_each_cube_equals_its_single_data_set_run_and_opens_alone(tmp_path):
    loaded = suite.load(_write(tmp_path))
    store = tmp_path / "mini.zarr"
    results = run_suite(loaded, store=store, progress=False)
    assert list(results) == loaded.datasets
    assert suite_store.datasets(store) == loaded.datasets
    for label in ("lin", "sparse7"):
        config = yaml.safe_load(SUITE)
        entry = next(e for e in config["data"] if e.get("label", e["name"]) == label)
        if "design" in entry:
            config["design"] = {**config["design"], **entry.pop("design")}
        entry.pop("label", None)
        config.update(name=label, data=entry)
        single = tmp_path / f"{label}.yaml"
        single.write_text(yaml.safe_dump(config))
        run(load_workflow(single), store=tmp_path / f"{label}.zarr", progress=False)
        alone, member = cvflow.open(tmp_path / f"{label}.zarr"), cvflow.open(store / label)
        for name in ("pred", "y", "fold"):
            np.testing.assert_array_equal(member[name].values, alone[name].values)
    tree = xr.open_datatree(store, engine="zarr", consolidated=False)
    assert set(tree.children) == set(loaded.datasets)
    # a member is a cube every tool reads: report it alone
    res = run_cli("report", store / "lin", "--json")
    assert res.returncode == 0, res.stderr
    assert "kfold" in json.loads(res.stdout)


def test_suite_report_leads_with_the_comparison_and_recomputes_with_references(tmp_path):
    sp = pytest.importorskip("scikit_posthocs")
    baycomp = pytest.importorskip("baycomp")
    path = _write(tmp_path)
    res = run_cli("run", path, "--store", tmp_path / "mini.zarr", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.index("== lin ==") < res.stdout.index("suite mini")
    text = run_cli("report", tmp_path / "mini.zarr")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "suite mini: 6 data sets, loss squared"
    assert lines[1].startswith("3 learners on 6 data sets")
    assert text.stdout.index("Friedman") < text.stdout.index("== data set diabetes ==")
    assert "optimistic" in text.stdout and "tuned here: ridge" in text.stdout
    out = json.loads(run_cli("report", tmp_path / "mini.zarr", "--json").stdout)
    assert sorted(out["datasets"]) == sorted(["diabetes", "lin", "lin5", "sparse7", "sparse9", "lin11"])
    learners = out["suite"]["learners"]
    table = np.array([[out["suite"]["estimates"][d][k] for k in learners] for d in out["suite"]["datasets"]])
    # the table: each learner's best K-fold estimate, as the data set's own kfold result says
    for d, row in zip(out["suite"]["datasets"], table):
        kfold = out["datasets"][d]["kfold"]
        est, labels = kfold["estimate"]["values"], [str(v) for v in kfold["coords"]["learner"]["values"]]
        for k, value in zip(learners, row):
            assert value == pytest.approx(min(e for e, lab in zip(est, labels) if lab == k))
    ref = stats.friedmanchisquare(*table.T)
    assert out["suite"]["friedman"]["statistic"] == pytest.approx(ref.statistic)
    assert out["suite"]["friedman"]["p_value"] == pytest.approx(ref.pvalue)
    np.testing.assert_allclose(out["suite"]["nemenyi"]["p_value"], sp.posthoc_nemenyi_friedman(table).to_numpy())
    for pair in out["suite"]["bayes_signed_rank"]["pairs"]:
        i, j = learners.index(pair["a"]), learners.index(pair["b"])
        p = baycomp.SignedRankTest.probs(-table[:, i], -table[:, j], 0, nsamples=50000, random_state=0)
        assert (pair["p_a_better"], pair["p_b_better"]) == pytest.approx(tuple(p), abs=1e-12)


def test_study_run_over_a_dict_of_data_sets(tmp_path):
    from sklearn.datasets import make_regression
    from sklearn.linear_model import Lasso, Ridge

    data = {f"d{i}": make_regression(40 + 10 * i, 4, noise=5.0, random_state=i)[:2] for i in range(3)}
    study = cvflow.Study({"ridge": (Ridge(), {"alpha": [1.0]}), "lasso": (Lasso(), {"alpha": [1.0]})},
                         cv=4, name="py")
    out = study.run(data, store=tmp_path / "py.zarr", progress=False, cluster="threads")
    assert list(out) == ["d0", "d1", "d2"]
    assert suite_store.datasets(tmp_path / "py.zarr") == ["d0", "d1", "d2"]
    alone = study.run(*data["d1"], store=tmp_path / "d1.zarr", progress=False, cluster="threads")
    np.testing.assert_array_equal(cvflow.open(tmp_path / "py.zarr" / "d1")["pred"].values,
                                  cvflow.open(alone.store)["pred"].values)
    bad = dict(data, d3=(np.ones((5, 2)), np.ones(4)))
    with pytest.raises(InputError, match="Study.run: data set 'd3': "):
        study.run(bad, store=tmp_path / "bad.zarr", progress=False, cluster="threads")
    assert not (tmp_path / "bad.zarr").exists()
    with pytest.raises(InputError, match="and no other data argument"):
        study.run(data, np.ones(3))


def test_critical_difference_bars_join_exactly_the_maximal_runs_within_cd():
    from cvflow.report.plots.suite import cliques

    rng = np.random.default_rng(0)
    for _ in range(200):
        ranks = np.sort(rng.uniform(1, 6, size=rng.integers(2, 8)))
        cd = float(rng.uniform(0.2, 3))
        # brute force: every run i..j (j > i) of the sorted ranks within cd, not inside another
        runs = [(i, j) for i in range(ranks.size) for j in range(i + 1, ranks.size) if ranks[j] - ranks[i] < cd]
        maximal = [(i, j) for i, j in runs if not any((a, b) != (i, j) and a <= i and j <= b for a, b in runs)]
        assert sorted(cliques(rng.permutation(ranks), cd)) == sorted(maximal)


def test_suite_html_draws_the_diagram_and_the_dots(tmp_path):
    loaded = suite.load(_write(tmp_path))
    store = tmp_path / "mini.zarr"
    run_suite(loaded, store=store, progress=False)
    res = run_cli("report", store, "--html", tmp_path / "page.html")
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "page.html").read_text()
    assert '"critical-difference"' in page and '"datasets-dots"' in page and "Data set sparse9" in page


def test_adding_a_data_set_fits_only_its_cells(tmp_path):
    config = yaml.safe_load(SUITE)
    config["data"] = config["data"][1:3]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(config))
    store = tmp_path / "grow.zarr"
    first = run_suite(suite.load(path), store=store, progress=False)
    assert all(r.fits_executed > 0 for r in first.values())
    config["data"] = yaml.safe_load(SUITE)["data"][1:4]
    path.write_text(yaml.safe_dump(config))
    second = run_suite(suite.load(path), store=store, progress=False)
    assert [second[k].fits_executed for k in ("lin", "lin5")] == [0, 0]
    assert second["sparse7"].fits_executed == second["sparse7"].total_fits > 0
    assert suite_store.datasets(store) == ["lin", "lin5", "sparse7"]


def _run_part(tmp_path, name: str, rows: slice, estimators=None):
    """The test suite's data sets ``rows`` (with ``estimators``) run into ``<name>.zarr``."""
    config = yaml.safe_load(SUITE)
    config["data"] = config["data"][rows]
    if estimators:
        config["estimators"] = estimators
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    store = tmp_path / f"{name}.zarr"
    run_suite(suite.load(path), store=store, progress=False)
    return store


def test_status_verify_and_open_on_a_suite_store(tmp_path):
    store = _run_part(tmp_path, "two", slice(1, 3))
    status = run_cli("status", store, "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert list(info) == ["lin", "lin5"] and all(v["done"] == v["total"] for v in info.values())
    verify = run_cli("verify", store, "--json")
    assert verify.returncode == 0 and set(json.loads(verify.stdout)) == {"lin", "lin5"}
    with pytest.raises(cvflow.errors.StoreError, match="is a suite's store; open one data set's cube"):
        cvflow.open(store)


def test_suite_report_takes_nested_cv_when_the_store_has_its_splits(tmp_path):
    from cvflow.report import suite as suite_report

    store = _run_part(tmp_path, "nested", slice(1, 3), ["kfold", "nested_cv"])
    auto = suite_report.compute(store)
    plain = suite_report.compute(store, estimate="kfold")
    assert auto["estimate"] == "nested_cv" and plain["estimate"] == "kfold"
    # a learner with one setting has nothing to tune: its nested CV estimate is its K-fold one
    for learner in ("lasso", "knn"):
        np.testing.assert_allclose(auto["estimates"][learner], plain["estimates"][learner], rtol=1e-12)
    assert "honest for a tuned learner" in suite_report.text(auto)
    with pytest.raises(InputError, match="--suite-estimate: 'best'"):
        suite_report.compute(store, estimate="best")


def test_suite_report_takes_estimators_and_several_losses_as_each_cube_alone(tmp_path):
    store = _run_part(tmp_path, "three", slice(1, 4), ["kfold", "corrected_kfold"])
    args = ("--estimators", "corrected_kfold", "--loss", "squared", "--loss", "absolute", "--json")
    res = run_cli("report", store, *args)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert list(out) == ["squared", "absolute"]
    for label in ("lin", "lin5", "sparse7"):
        alone = run_cli("report", store / label, *args)
        assert alone.returncode == 0, alone.stderr
        single = json.loads(alone.stdout)
        for loss in ("squared", "absolute"):
            assert out[loss]["datasets"][label] == single[loss]
            assert list(single[loss]) == ["corrected_kfold"]
            # the learners' numbers across data sets: each learner's best K-fold estimate
            # under that loss, as the cube's own corrected_kfold result gives its K-fold column
            kf = single[loss]["corrected_kfold"]
            est, learners = kf["kfold"]["values"], [str(v) for v in kf["coords"]["learner"]["values"]]
            for k, value in out[loss]["suite"]["estimates"][label].items():
                assert value == pytest.approx(min(e for e, lab in zip(est, learners) if lab == k))
    text = run_cli("report", store, "--loss", "squared", "--loss", "absolute")
    assert text.returncode == 0 and "== loss absolute ==\nsuite mini: 3 data sets, loss absolute" in text.stdout
    refused = run_cli("report", store, "--loss", "squared", "--loss", "absolute", "--html", tmp_path / "p.html")
    assert refused.returncode == 2 and "give one --loss with --html" in refused.stderr


def test_entry_config_is_the_data_set_as_a_one_data_set_file(tmp_path):
    """A study script's view of one suite entry: written out as a plain workflow file, it runs
    as the suite's member does (task, loss, learners and the merged design overridden)."""
    from cvflow.workflow.suite import entry_config

    repo = Path(__file__).resolve().parents[1]
    config = entry_config(repo / "workflows" / "aghbalou.yaml", "breast_cancer_k3")
    assert config["name"] == "breast_cancer_k3" and config["data"]["name"] == "breast_cancer"
    assert (config["task"], config["loss"]) == ("classification", "hinge")
    assert config["design"] == {"folds": 3, "repeats": 1, "splitter": "stratified", "seed": 0}
    assert config["learners"][0]["class"] == "sklearn.svm.SVC"
    single = tmp_path / "one.yaml"
    single.write_text(yaml.safe_dump(config))
    alone = load_workflow(single).build()
    member = suite.load(repo / "workflows" / "aghbalou.yaml").workflows["breast_cancer_k3"].build()
    assert [p.fixed for p in alone.params] == [p.fixed for p in member.params]
    np.testing.assert_array_equal(alone.data.X, member.data.X)
    np.testing.assert_array_equal(alone.data.is_test, member.data.is_test)
    with pytest.raises(InputError, match="no data set 'wine'"):
        entry_config(repo / "workflows" / "aghbalou.yaml", "wine")
    with pytest.raises(InputError, match="not a list"):
        entry_config(single, "breast_cancer_k3")


def test_a_suite_starts_its_cluster_once(tmp_path):
    # every data set on the same route gets the cluster the first one started: one scheduler,
    # so one dashboard (a cluster started a data set would listen on a free port of its own)
    config = yaml.safe_load(SUITE)
    config["data"] = config["data"][1:4]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(config))
    results = run_suite(suite.load(path), store=tmp_path / "one.zarr", progress=False,
                        cluster="threads", dashboard_port=0)
    links = {r.dashboard for r in results.values()}
    assert len(links) == 1 and None not in links, links
    assert all(r.fits_executed == r.total_fits > 0 for r in results.values())
