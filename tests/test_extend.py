"""Extending a finished study (cvflow.execution.extend): new grid values, hyperparameters, learners and
splits are appended and fitted alone; stored predictions stay byte-identical; changes that
would invalidate stored fits are refused before the store is touched."""
from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import pytest
import xarray as xr
import zarr

import cvflow
from cvflow import report
from cvflow.execution.run import run
from cvflow.errors import StoreError
from cvflow.estimators import kfold

from cvtest import tree_digest

BASE = """\
name: ext
data: {{source: synthetic, name: linear, params: {{n: 40, p: 3}}}}
task: regression
learners:
  - name: ridge
    class: counting_learner.CountingRidge
    params: {{log: {log}}}
    grid: {{alpha: {alphas}}}
{extra}design: {{folds: 4, seed: 0}}
estimators: {estimators}
execution: {{fits_per_task: {fpt}, path_aware: false}}
"""


def workflow(write_workflow, log, alphas, *, name, extra="", estimators="[kfold]", fpt=4):
    return write_workflow(BASE.format(log=log, alphas=alphas, extra=extra,
                                      estimators=estimators, fpt=fpt), name=name)


def fit_log(path) -> Counter:
    """(alpha, training size) -> number of fits, from the counting learner's log."""
    if not path.exists():
        return Counter()
    return Counter(tuple(line.split()) for line in path.read_text().splitlines())


def stored(store, name="pred"):
    return zarr.open_group(str(store), mode="r")[name][...]


def test_new_grid_values_fit_alone_and_old_bytes_stay(tmp_path, write_workflow, client):
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    first = workflow(write_workflow, log, "[0.1, 1.0, 10.0]", name="a.yaml")
    res = run(first, store=store, client=client)
    n_splits = 5                                            # full + 4 folds
    assert res.fits_executed == 3 * n_splits == sum(fit_log(log).values())
    old_pred, old_done = stored(store), stored(store, "done")
    chunks = tuple(zarr.open_group(str(store))["pred"].chunks[:2])
    opened_before = cvflow.open(store)                      # a reader holding the old cube

    # new values in the middle and at the end of the grid; the old ones keep their indices
    second = workflow(write_workflow, log, "[0.1, 0.5, 1.0, 10.0, 100.0]", name="b.yaml")
    log.unlink()
    res = run(second, store=store, client=client)
    counted = fit_log(log)
    assert res.fits_executed == 2 * n_splits == sum(counted.values())
    assert {alpha for alpha, _ in counted} == {"0.5", "100.0"}
    pred = stored(store)
    assert pred.shape[:2] == (5, n_splits)
    assert pred[:3].tobytes() == old_pred.tobytes()          # byte-equal old predictions
    assert stored(store, "done")[:3].tobytes() == old_done.tobytes()
    assert tuple(zarr.open_group(str(store))["pred"].chunks[:2]) == chunks
    cube = cvflow.open(store)
    np.testing.assert_array_equal(cube["alpha"].values, [0.1, 1.0, 10.0, 0.5, 100.0])
    assert bool(cube["done"].all()) and not np.isnan(cube["pred"].values).any()

    # the extended store reduces like a fresh run of the extended grid
    fresh = run(second, store=tmp_path / "fresh.zarr", client=client)
    ref = kfold(cvflow.open(fresh.store))
    order = [0, 2, 3, 1, 4]                                 # fresh grid order -> store order
    np.testing.assert_allclose(kfold(cube)["estimate"].values, ref["estimate"].values[order],
                               rtol=1e-12)
    # a cube opened before the extension still reduces (its 3 params, not the grown store's)
    old = report.compute(opened_before, [("kfold", {})])["kfold"]
    np.testing.assert_allclose(old["estimate"].values, ref["estimate"].values[[0, 2, 3]],
                               rtol=1e-12)
    assert run(second, store=store, client=client).fits_executed == 0


def test_appended_params_sharing_a_chunk_fit_only_the_new_cells(tmp_path, write_workflow, client):
    """5 params in chunks of 3: the stored chunk of params 3-4 also receives the new param 5."""
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    first = workflow(write_workflow, log, "[0.1, 1.0, 10.0, 30.0, 60.0]", name="a.yaml", fpt=3)
    run(first, store=store, client=client)
    group = zarr.open_group(str(store))
    assert group["pred"].chunks[0] == 3 and group["pred"].shape[0] == 5
    old_pred = stored(store)
    log.unlink()
    second = workflow(write_workflow, log, "[0.1, 1.0, 10.0, 30.0, 60.0, 0.01, 0.02]",
                      name="b.yaml", fpt=3)
    res = run(second, store=store, client=client)
    counted = fit_log(log)
    assert res.fits_executed == 2 * 5 == sum(counted.values())
    assert {alpha for alpha, _ in counted} == {"0.01", "0.02"}
    assert stored(store)[:5].tobytes() == old_pred.tobytes()
    fit_seconds = stored(store, "fit_seconds")
    assert np.isfinite(fit_seconds).all() and stored(store, "done").all()


def test_new_learner_hyperparameter_and_splits(tmp_path, write_workflow, client):
    """A new learner, a new hyperparameter name (new coordinate) and the nested estimators'
    pair splits are appended together; old params fit only the new splits."""
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    run(workflow(write_workflow, log, "[0.1, 1.0]", name="a.yaml"), store=store, client=client)
    old_pred = stored(store)
    log.unlink()
    lasso = ("  - name: lasso\n    class: sklearn.linear_model.Lasso\n"
             "    grid: {alpha: [0.1], selection: [cyclic]}\n")
    second = workflow(write_workflow, log, "[0.1, 1.0]", name="b.yaml", extra=lasso,
                      estimators="[kfold, nested_cv]")
    res = run(second, store=store, client=client)
    n_pairs = 6                                              # C(4, 2)
    # old ridge params: the 6 new pair splits only; the lasso (not counted by the log): all 11
    counted = fit_log(log)
    assert sum(counted.values()) == 2 * n_pairs
    assert res.fits_executed == 2 * n_pairs + 11
    pred = stored(store)
    assert pred.shape[:2] == (3, 11)
    assert pred[:2, :5].tobytes() == old_pred.tobytes()
    cube = cvflow.open(store)
    assert list(cube["learner"].values) == ["ridge", "ridge", "lasso"]
    assert list(cube["selection"].values) == ["", "", "cyclic"]
    assert "selection" in cube.coords
    # role tables point at the store's indices: pair (j, l) trains on D minus folds j and l
    fold, train = cube["fold"].values[0], cube["train"].values
    for j in range(4):
        for l in range(4):
            s = int(cube["pair_split"].values[0, j, l])
            if j == l:
                assert s == -1
            else:
                np.testing.assert_array_equal(train[s], (fold != j) & (fold != l))
        np.testing.assert_array_equal(train[int(cube["fold_split"].values[0, j])], fold != j)
    out = cvflow.estimators.nested_cv(cube)
    assert np.isfinite(float(out["estimate"]))
    # the extended store's consolidated metadata is current: plain xarray opens it silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = xr.open_zarr(store)
    assert "selection" in plain.coords and plain.sizes["split"] == 11
    xr.testing.assert_identical(plain.load(), xr.open_zarr(store, consolidated=False).load())


def test_removed_params_are_kept(tmp_path, write_workflow, client):
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    run(workflow(write_workflow, log, "[0.1, 1.0, 10.0]", name="a.yaml"), store=store, client=client)
    res = run(workflow(write_workflow, log, "[1.0, 3.0]", name="b.yaml"), store=store, client=client)
    assert res.fits_executed == 5 and res.total_fits == 4 * 5
    cube = cvflow.open(store)
    np.testing.assert_array_equal(cube["alpha"].values, [0.1, 1.0, 10.0, 3.0])


@pytest.mark.parametrize("change, match", [
    (("seed: 0}", "seed: 3}"), r"another workflow \(folds, seeds differ: design.seed: 0 -> 3\)"),
    (("folds: 4", "folds: 5"), r"design.folds: 4 -> 5"),
    (("n: 40", "n: 41"), r"another workflow \(data differ"),
    (("params: {log:", "params: {fit_intercept: false, log:"),
     r"learner 'ridge' .*learners\[ridge\].params.fit_intercept: None -> False"),
    (("counting_learner.CountingRidge", "counting_learner.OtherCountingRidge"),
     r"learners\[ridge\].estimator"),
])
def test_invalidating_changes_are_refused_untouched(tmp_path, write_workflow, client, change, match):
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    text = BASE.format(log=log, alphas="[1.0]", extra="", estimators="[kfold]", fpt=4)
    run(write_workflow(text, "a.yaml"), store=store, client=client)
    before = tree_digest(store)
    bad = write_workflow(text.replace(*change).replace("alpha: [1.0]", "alpha: [1.0, 2.0]"),
                         "b.yaml")
    with pytest.raises(StoreError, match=match):
        run(bad, store=store, client=client)
    assert tree_digest(store) == before


def test_subset_design_added_then_fixed(tmp_path, write_workflow, client):
    """Adding ustat to a K-fold store appends its subset splits; changing the subset design
    once subset fits exist is refused."""
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    run(workflow(write_workflow, log, "[0.1, 1.0]", name="a.yaml"), store=store, client=client)
    text = BASE.format(log=log, alphas="[0.1, 1.0]", extra="", fpt=4,
                       estimators="[kfold, {ustat: {compare: [0, 1]}}]")
    with_subsets = text.replace("seed: 0}", "seed: 0, subset: {size: 8, pairs: 3}}")
    log.unlink()
    res = run(write_workflow(with_subsets, "b.yaml"), store=store, client=client)
    assert res.fits_executed == 2 * 6 == sum(fit_log(log).values())
    cube = cvflow.open(store)
    assert cube.sizes["group"] == 3 and (cube["subset_split"].values >= 5).all()
    assert np.isfinite(float(cvflow.estimators.ustat(cube, compare=[0, 1])["estimate"]))
    before = tree_digest(store)
    with pytest.raises(StoreError, match=r"subset design differ: design.subset.pairs: 3 -> 4"):
        run(write_workflow(with_subsets.replace("pairs: 3", "pairs: 4"), "c.yaml"), store=store,
            client=client)
    assert tree_digest(store) == before


def test_sharded_store_runs_reduces_and_extends_like_plain_chunks(tmp_path, write_workflow,
                                                                  client, monkeypatch):
    """A block of many params is one Zarr v3 shard of inner chunks (forced here with one param
    per inner chunk): its tasks write it, readers open it, an extension grows it, and every
    byte equals the same study stored in plain chunks."""
    import cvflow.store.creation
    import cvflow.store.schema

    log = tmp_path / "fits.log"
    first = workflow(write_workflow, log, "[0.1, 1.0, 10.0, 100.0]", name="a.yaml", fpt=20)
    second = workflow(write_workflow, log, "[0.1, 1.0, 10.0, 100.0, 0.01, 1000.0]",
                      name="b.yaml", fpt=20)
    plain = run(second, store=tmp_path / "plain.zarr", client=client).store
    monkeypatch.setattr(cvflow.store.schema, "SHARD_INNER_BYTES", 1)
    sharded = tmp_path / "sharded.zarr"
    run(first, store=sharded, client=client)
    array = zarr.open_group(str(sharded))["pred"]
    assert array.shards is not None and array.shards[0] == 4 and array.chunks[0] == 1
    run(second, store=sharded, client=client)               # grown: 2 more params, same shards
    assert stored(sharded).tobytes() == stored(plain).tobytes()
    assert zarr.open_group(str(plain))["pred"].shards is None
    assert cvflow.open(sharded)["pred"].data.chunksize[0] == 1     # readers see inner chunks
    np.testing.assert_array_equal(kfold(cvflow.open(sharded))["estimate"].values,
                                  kfold(cvflow.open(plain))["estimate"].values)


def test_repeated_values_match_stored_params(tmp_path, write_workflow, client):
    """1 and 1.0 are the same Ridge: a grid repeating stored values as ints fits nothing and
    lists nothing twice (it refitted them, bitwise-equal, as new params)."""
    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    run(workflow(write_workflow, log, "[0.1, 1.0, 10.0]", name="a.yaml"), store=store, client=client)
    before = stored(store)
    log.unlink()
    res = run(workflow(write_workflow, log, "[10, 1, 0.1]", name="b.yaml"), store=store,
              client=client)
    assert res.fits_executed == 0 and not log.exists()
    cube = cvflow.open(store)
    np.testing.assert_array_equal(cube["alpha"].values, [0.1, 1.0, 10.0])
    assert stored(store).tobytes() == before.tobytes()
    # a new value beside repeated ones: only it is fitted
    res = run(workflow(write_workflow, log, "[1, 3]", name="c.yaml"), store=store, client=client)
    assert res.fits_executed == 5 and len({a for a, _ in fit_log(log)}) == 1
    np.testing.assert_array_equal(cvflow.open(store)["alpha"].values, [0.1, 1.0, 10.0, 3.0])


def test_param_key_keeps_counts_apart_from_fractions():
    from cvflow.execution.extend import param_key

    def key(**params):
        return param_key(json.dumps({"learner": "m", "estimator": "e", "output": "predict",
                                     "params": params}))
    assert key(alpha=1) == key(alpha=1.0) and key(m__C=2) == key(m__C=2.0)
    # scikit-learn reads max_features=1 as one feature, 1.0 as all of them
    assert key(max_features=1) != key(max_features=1.0)
    assert key(rf__max_features=1) != key(rf__max_features=1.0)
    assert key(flag=True) != key(flag=1.0)


def test_removed_params_leave_selection_and_nested_cv_unless_asked(tmp_path, write_workflow,
                                                                   client):
    from cvtest import run_cli

    log = tmp_path / "fits.log"
    store = tmp_path / "s.zarr"
    estimators = "[kfold, nested_cv]"
    run(workflow(write_workflow, log, "[0.001, 1.0, 30.0]", name="a.yaml",
                 estimators=estimators), store=store, client=client)
    second = workflow(write_workflow, log, "[1.0, 30.0, 3.0]", name="b.yaml",
                      estimators=estimators)
    run(second, store=store, client=client)
    fresh = run(second, store=tmp_path / "fresh.zarr", client=client).store
    assert cvflow.open(store).sizes["param"] == 4                   # kept in the store

    res = run_cli("report", store, "--json")
    assert res.returncode == 0, res.stderr
    got, want = json.loads(res.stdout), json.loads(run_cli("report", fresh, "--json").stdout)
    assert got["kfold"]["coords"]["alpha"]["values"] == [1.0, 30.0, 3.0]
    np.testing.assert_allclose(got["kfold"]["estimate"]["values"],
                               want["kfold"]["estimate"]["values"], rtol=1e-12)
    assert got["kfold"]["selected"] == want["kfold"]["selected"]
    assert got["nested_cv"]["estimate"] == pytest.approx(want["nested_cv"]["estimate"], rel=1e-12)
    assert got["nested_cv"]["chosen_params"] == want["nested_cv"]["chosen_params"]

    every = json.loads(run_cli("report", store, "--json", "--all-params").stdout)
    assert every["kfold"]["coords"]["alpha"]["values"] == [0.001, 1.0, 30.0, 3.0]
    # Python: the same view, and every param on request
    assert cvflow.StudyResult.from_store(store).cube.sizes["param"] == 3
    assert cvflow.StudyResult.from_store(store, all_params=True).cube.sizes["param"] == 4
    # running the first workflow again lists its params again (nothing to fit)
    assert run(workflow(write_workflow, log, "[0.001, 1.0, 30.0]", name="a.yaml",
                        estimators=estimators), store=store, client=client).fits_executed == 0
    again = json.loads(run_cli("report", store, "--json").stdout)
    assert again["kfold"]["coords"]["alpha"]["values"] == [0.001, 1.0, 30.0]


RELOSS = """\
name: reloss
data: {{source: sklearn, name: diabetes}}
task: regression
loss: {loss}
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    preprocess: [sklearn.preprocessing.StandardScaler]
    grid: {{alpha: [0.1, 10.0, 1000.0]}}
design: {{folds: 4, seed: 0}}
estimators: {estimators}
execution: {{cluster: threads}}
"""


def test_rerun_with_another_loss_and_estimators_updates_the_report(tmp_path):
    """`cvflow run WF2 --store S` where WF2 changes only the loss and the estimators fits
    nothing, and a later `cvflow report S` reduces as WF2 asks (it kept the first workflow's
    loss and estimators): the absolute loss by hand, from scikit-learn's fits on the folds."""
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import PredefinedSplit, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from cvtest import run_cli

    store = tmp_path / "s.zarr"
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(RELOSS.format(loss="squared", estimators="[kfold]"))
    second.write_text(RELOSS.format(loss="absolute", estimators="[kfold, bbc_cv]"))
    out = run_cli("run", first, "--store", store)
    assert out.returncode == 0, out.stderr
    pred = stored(store).copy()
    out = run_cli("run", second, "--store", store)
    assert out.returncode == 0, out.stderr
    assert "0 fits performed" in out.stdout, out.stdout
    np.testing.assert_array_equal(stored(store), pred)          # no fit, no byte changed
    got = json.loads(run_cli("report", store, "--json").stdout)
    assert list(got) == ["kfold", "bbc_cv"]
    X, y = load_diabetes(return_X_y=True)
    fold = cvflow.open(store)["fold"].values[0]
    want = [np.mean(np.abs(y - cross_val_predict(make_pipeline(StandardScaler(), Ridge(alpha=a)),
                                                 X, y, cv=PredefinedSplit(fold))))
            for a in (0.1, 10.0, 1000.0)]
    np.testing.assert_allclose(got["kfold"]["estimate"]["values"], want, rtol=1e-10)
    text = run_cli("report", store).stdout
    assert "K-fold (absolute)" in text and "bbc_cv:" in text
    # and back: the first workflow again makes the squared loss the store's default
    assert run_cli("run", first, "--store", store).returncode == 0
    got = json.loads(run_cli("report", store, "--json").stdout)
    assert list(got) == ["kfold", "bbc_cv"]          # kept: the store still serves bbc_cv
    assert got["kfold"]["estimate"]["values"][0] > 1000        # squared (absolute is ~45)


GROW = """\
name: grow
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: ALPHAS}
design: {folds: 3, seed: 0}
estimators: ESTIMATORS
execution: {cluster: threads, fits_per_task: 2}
"""


def grow_while_reading(tmp_path, store: str, cli) -> None:
    """A store of 2 params x 4 splits, then a run (pausing between its writes) growing it to
    4 x 7 while readers open it in a loop: every open sees the old study or the new one, never
    an error, and status reads as well. ``cli(*args)`` runs the program (a CompletedProcess)."""
    import fault_helpers as fh

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(GROW.replace("ALPHAS", "[0.1, 1.0]").replace("ESTIMATORS", "[kfold]"))
    second.write_text(GROW.replace("ALPHAS", "[0.1, 1.0, 10.0, 100.0]")
                      .replace("ESTIMATORS", "[kfold, nested_cv]"))
    assert cli("run", str(first), "--store", store).returncode == 0
    proc = fh.start_slow_grow(second, store)
    try:
        seen = fh.read_while(proc, store, shapes=((2, 4), (4, 7)))
        rc, _, err = fh.finish(proc)
    finally:
        fh.reap(proc)
    assert rc == 0, err[-2000:]
    assert not seen["errors"], seen["errors"]
    assert (2, 4) in seen["shapes"] and seen["status"] <= {8, 28}


def test_readers_during_a_grow_see_the_old_or_the_new_study(tmp_path):
    """Issue 32: ``cvflow.open`` (so report, status, the live page) in a loop while another
    run appends params and splits said "exists but is not a cvflow store" in 3 of 5 runs. A
    reader in this process, the grow in a ``cvflow run`` process made to pause between its
    writes: every open sees the old study (2 params x 4 splits) or the new one (4 x 7: nested
    CV's pair splits), and status reads as well."""
    from cvtest import run_cli

    store = tmp_path / "s.zarr"
    grow_while_reading(tmp_path, str(store), lambda *a: run_cli(*a))
    assert cvflow.open(store).sizes["param"] == 4
    assert not (tmp_path / "s.zarr.growing").exists()


@pytest.mark.parametrize("writes, mid_write", [(0, True), (1, False), (2, True)],
                         ids=["in-the-first-write", "after-the-first", "in-the-last"])
def test_a_grow_cut_anywhere_is_finished_by_the_next_run(tmp_path, writes, mid_write):
    """A ``cvflow run`` killed (SIGKILL) inside its grow: after ``writes`` whole writes of it,
    and ``mid_write`` with the root zarr.json as an xarray write leaves it before it
    consolidates again (no consolidated metadata). The same command again finishes the grow:
    the cube equals an uncut run's, verify finds nothing (the grow used to be left with the
    old role tables and attributes: "nested_cv needs the pair splits", or a damaged
    workflow_params attribute)."""
    import os
    import signal
    import time

    import fault_helpers as fh
    from cvtest import run_cli

    first = tmp_path / "a.yaml"
    first.write_text(GROW.replace("ALPHAS", "[0.1, 1.0]").replace("ESTIMATORS", "[kfold]"))
    second = tmp_path / "b.yaml"
    second.write_text(GROW.replace("ALPHAS", "[0.1, 1.0, 10.0, 100.0]")
                      .replace("ESTIMATORS", "[kfold, nested_cv]"))
    reference, store = tmp_path / "ref.zarr", tmp_path / "s.zarr"
    for path in (reference, store):
        assert run_cli("run", first, "--store", path).returncode == 0
    assert run_cli("run", second, "--store", reference).returncode == 0
    marker = tmp_path / "s.zarr.growing"
    proc = fh.start_slow_grow(second, store)
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 240
        while len(seen) < writes + 1 and time.monotonic() < deadline and proc.poll() is None:
            try:
                content = marker.read_bytes()
            except FileNotFoundError:
                content = None
            if content and content not in seen:
                seen.append(content)
            time.sleep(0.005)
        assert len(seen) == writes + 1, (seen, proc.poll())
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        fh.reap(proc)
    assert marker.exists()
    if mid_write:
        root = json.loads((store / "zarr.json").read_text())
        root.pop("consolidated_metadata", None)      # (the cut may have left it so already)
        (store / "zarr.json").write_text(json.dumps(root))
    result = run_cli("run", second, "--store", store)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "its last extension was cut; finishing it" in result.stderr
    fh.assert_same_cube(store, reference)
    assert run_cli("verify", store).returncode == 0 and not marker.exists()


def test_a_default_spelled_out_matches_the_stored_param(tmp_path, write_workflow, client):
    """Ridge(solver="auto") is Ridge() (scikit-learn builds them alike: equal get_params), so a
    grid that spells the default out fits only its new values (it refitted all of them)."""
    from sklearn.linear_model import Ridge

    assert Ridge(solver="auto").get_params() == Ridge().get_params()
    store = tmp_path / "s.zarr"
    base = ("name: d\ndata: {source: sklearn, name: diabetes}\ntask: regression\n"
            "design: {folds: 4, seed: 0}\nestimators: [kfold]\nlearners:\n"
            "  - {name: ridge, class: sklearn.linear_model.Ridge, grid: {alpha: [0.1, 1.0]%s}}\n")
    first = run(write_workflow(base % "", name="a.yaml"), store=store, client=client)
    before = stored(store)
    second = run(write_workflow(base % ", solver: [auto, svd]", name="b.yaml"), store=store,
                 client=client)
    # 5 splits (4 folds and the full fit): only the 2 svd params are new
    assert first.fits_executed == 2 * 5 and second.fits_executed == 2 * 5
    assert stored(store)[:2].tobytes() == before.tobytes()
    third = run(write_workflow(base % ", solver: [auto]", name="c.yaml"), store=store,
                client=client)
    assert third.fits_executed == 0
    assert cvflow.open(store).sizes["param"] == 4


def test_param_key_leaves_out_constructor_defaults():
    from cvflow.execution.extend import param_key
    from cvflow.workflow.params import Param

    ridge = "sklearn.linear_model.Ridge"
    defaults = {ridge: {"alpha": 1.0, "solver": "auto", "fit_intercept": True}}

    def key(**params):
        return param_key(Param("r", ridge, {}, params).to_json(), defaults)
    assert key(solver="auto") == key() == key(alpha=1) == key(fit_intercept=True)
    assert key(solver="svd") != key() and key(fit_intercept=False) != key()
    assert key(fit_intercept=1) != key()         # True is not 1.0 here: JSON tells them apart
