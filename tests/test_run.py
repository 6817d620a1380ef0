"""The engine on a real LocalCluster (process workers): cube contents, resume, failures."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from sklearn.linear_model import Ridge
from sklearn.model_selection import PredefinedSplit, cross_val_score

import cvflow
from cvflow.execution.run import run
from cvflow.errors import StoreError
from cvflow.estimators import kfold
from cvflow.report import status
from cvflow.workflow.spec import load_workflow

from cvtest import QUICK

DESIGN_VARIABLES = {"pred", "done", "failed", "fit_seconds", "train", "fold", "y", "is_test", "X"}
SPLIT_COORDS = {"split_kind", "split_repeat", "split_outer", "split_inner", "split_group"}


@pytest.fixture
def quick_store(tmp_path, write_workflow, client):
    wf = write_workflow(QUICK)
    result = run(wf, store=tmp_path / "quick.zarr", client=client)
    return wf, result


def test_store_schema_and_kfold_equals_sklearn(quick_store):
    wf, result = quick_store
    assert result.fits_executed == result.total_fits == 4 * 6
    with warnings.catch_warnings():             # consolidated metadata: plain open is silent
        warnings.simplefilter("error")
        cube = xr.open_zarr(result.store)
    assert DESIGN_VARIABLES <= set(cube.data_vars)
    assert SPLIT_COORDS | {"learner", "alpha"} <= set(cube.coords)
    assert cube["pred"].dims == ("param", "split", "sample")
    assert cube.attrs["workflow_hash"] and cube.attrs["data_hash"] and cube.attrs["task"] == "regression"
    assert bool(cube["done"].all()) and not bool(cube["failed"].any())

    cube = cvflow.open(result.store)
    out = kfold(cube)
    X, y, fold = cube["X"].values, cube["y"].values, cube["fold"].values[0]
    sizes = np.bincount(fold)
    for h, alpha in enumerate(cube["alpha"].values):
        ref = -cross_val_score(Ridge(alpha=alpha), X, y, cv=PredefinedSplit(fold),
                               scoring="neg_mean_squared_error")
        np.testing.assert_allclose(out["fold_score"].values[h, 0], ref, rtol=1e-10)
        np.testing.assert_allclose(float(out["estimate"][h]), ref @ sizes / sizes.sum(), rtol=1e-10)


def test_every_fit_predicts_every_sample(quick_store):
    _, result = quick_store
    cube = cvflow.open(result.store)
    X, y = cube["X"].values, cube["y"].values
    assert not np.isnan(cube["pred"].values).any()
    for s in range(cube.sizes["split"]):
        train = cube["train"].values[s]
        model = Ridge(alpha=float(cube["alpha"][2])).fit(X[train], y[train])
        # predictions on the fold model's own training samples are stored too
        np.testing.assert_allclose(cube["pred"].values[2, s, train], model.predict(X[train]),
                                   rtol=1e-10)
        np.testing.assert_allclose(cube["pred"].values[2, s], model.predict(X), rtol=1e-10)


def test_second_run_fits_nothing(quick_store, client):
    wf, result = quick_store
    again = run(wf, store=result.store, client=client)
    assert again.fits_executed == 0 and again.tasks == 0


def test_failing_fits_are_recorded_not_fatal(tmp_path, write_workflow, client):
    wf = write_workflow(QUICK.replace("[0.01, 0.1, 1.0, 10.0]", "[-1.0, 1.0, -2.0]"))
    result = run(wf, store=tmp_path / "bad.zarr", client=client)
    n_splits = 6
    assert result.failed == 2 * n_splits and result.fits_executed == 3 * n_splits
    info = status(result.store)
    assert info["failed"] == 2 * n_splits and info["done"] == info["total"]
    # "Got -1.0" and "Got -2.0": one cause, grouped up to the number (an example kept)
    assert list(info["failures"].values()) == [2 * n_splits]
    assert info["failure_variants"] == {m: 2 for m in info["failures"]}
    assert all("'alpha' parameter of Ridge" in m and "Got -" in m for m in info["failures"])
    cube = cvflow.open(result.store)
    assert cube["failed"].values[[0, 2]].all() and not cube["failed"].values[1].any()
    assert np.isnan(cube["pred"].values[0]).all()
    assert int(kfold(cube)["selected"]) == 1


def test_changed_workflow_is_refused_unless_overwrite(quick_store, write_workflow, client, tmp_path):
    from cvtest import tree_digest

    _, result = quick_store
    before = tree_digest(result.store)
    other = write_workflow(QUICK.replace("seed: 0", "seed: 1"), name="other.yaml")
    with pytest.raises(StoreError, match="another workflow") as refused:
        run(other, store=result.store, client=client)
    # the fix is named for Python callers too, not only as the CLI's flags
    assert "overwrite=True in Python" in str(refused.value)
    assert "store= in Python" in str(refused.value)
    # (a grid change is an extension, not a refusal: tests/test_extend.py)
    assert tree_digest(result.store) == before
    redo = run(load_workflow(other), store=result.store, client=client, overwrite=True)
    assert redo.fits_executed == redo.total_fits


def test_store_files_bounded_by_tasks(quick_store):
    _, result = quick_store
    n_files = sum(1 for p in Path(result.store).rglob("*") if p.is_file())
    assert n_files <= result.tasks * len(("pred", "done", "failed", "error", "fit_seconds")) + 50


@pytest.mark.parametrize("cluster", ["threads", "local", "given client"])
def test_failed_store_creation_cancels_the_run_and_a_rerun_completes(tmp_path, write_workflow,
                                                                     client, monkeypatch, cluster):
    """The store is created while the blocks fit; when creating it fails the run raises that
    error (no block waits forever), leaves no half store behind, and the same run then works."""
    from cvflow.store import creation
    from cvflow.store.group import CREATING, is_store
    from cvflow.store.location import put, sibling

    wf, path = write_workflow(QUICK), tmp_path / "s.zarr"
    real = creation.create

    def broken(location, template, **kwargs):
        put(sibling(str(location), CREATING), b"")
        raise OSError("disk full")

    monkeypatch.setattr(creation, "create", broken)
    kwargs = {"client": client} if cluster == "given client" else {"cluster": cluster}
    with pytest.raises(OSError, match="disk full"):
        run(wf, store=path, **kwargs)
    assert not is_store(path)
    monkeypatch.setattr(creation, "create", real)
    result = run(wf, store=path, **kwargs)
    assert result.fits_executed == result.total_fits == 4 * 6
    assert bool(cvflow.open(path)["done"].all())


@pytest.mark.parametrize("cluster", ["threads", "local"])
def test_a_creation_failing_after_pred_leaves_no_store_and_a_rerun_completes(
        tmp_path, write_workflow, monkeypatch, cluster):
    """The blocks start writing `pred` once its metadata is made (creation.create's
    ``pred_ready``); a creation that fails after that raises its error, leaves no store (the
    blocks' chunks are beside a creation marker), and the same run then works."""
    from cvflow.store import creation
    from cvflow.store.group import is_store

    wf, path = write_workflow(QUICK), tmp_path / "s.zarr"
    real = creation.create

    def broken_late(location, template, pred_ready=None):
        def ready_then_fail():
            pred_ready()
            raise OSError("disk full after pred")

        real(location, template, pred_ready=ready_then_fail)

    monkeypatch.setattr(creation, "create", broken_late)
    with pytest.raises(OSError, match="disk full after pred"):
        run(wf, store=path, cluster=cluster)
    assert not is_store(path)
    monkeypatch.setattr(creation, "create", real)
    result = run(wf, store=path, cluster=cluster)
    assert result.fits_executed == result.total_fits == 4 * 6
    assert bool(cvflow.open(path)["done"].all())


def test_a_block_waiting_for_a_store_whose_creation_failed_raises(tmp_path, client):
    """The client sets the store event whether or not it created the store: a waiting task
    then finds no store and raises instead of writing (or waiting forever)."""
    from distributed import Event

    from cvflow.execution.tasks import TaskContext, _wait_ready

    ready = Event(f"cvflow-store-test-{tmp_path.name}", client=client)
    ready.set()                      # the client woke the blocks without creating the store
    ctx = TaskContext(store=str(tmp_path / "s.zarr"), run_id="t", ready=ready.name)
    with pytest.raises(StoreError, match="was not created"):
        client.submit(_wait_ready, ctx, pure=False).result()


def test_a_block_that_outlived_its_run_stops_waiting_for_its_store(tmp_path, monkeypatch):
    """A task still waiting for its store's event after its run ended (a block the scheduler
    retried once its run had moved on) stops when it finds its run's lock gone, instead of
    holding its worker's thread until the 10-minute deadline: the event is never set here,
    and the lock was never this task's."""
    from cvflow.errors import LockLostError
    from cvflow.execution import tasks
    from cvflow.execution.threaded import LocalEvent

    monkeypatch.setattr(tasks, "READY_CHECK_SECONDS", 0.05)
    ready = LocalEvent(f"cvflow-store-outlived-{tmp_path.name}")      # never set
    ctx = tasks.TaskContext(store=str(tmp_path / "s.zarr"), run_id="gone", token="a-past-run",
                            ready=ready.name)
    try:
        with pytest.raises(LockLostError, match="no longer holds the run lock"):
            tasks._wait_ready(ctx)
    finally:
        ready.clear()


def _slow_double(x):
    import time

    time.sleep(0.3)
    return 2 * x


def test_a_one_off_task_whose_result_is_lost_is_computed_again(client, caplog):
    """The timing and check tasks' results are read once they are done, and a result the
    scheduler lost (its gather cancelled: distributed once raised UnboundLocalError from it)
    is computed again under a new key; a real LocalCluster cancels the first future."""
    from cvflow.execution import loop

    keys = []

    def submit(key):
        keys.append(key)
        future = client.submit(_slow_double, 21, key=key, pure=False)
        if len(keys) == 1:
            future.cancel()                     # what a lost result reads as: CancelledError
        return future

    name = f"cvflow-timing-lost-{np.random.default_rng().integers(1 << 30)}"
    with caplog.at_level("WARNING", logger="cvflow.execution.loop"):
        assert loop._one_task_result(client, submit, name) == 42
    assert keys == [name, f"{name}-again1"]
    assert "was lost at the scheduler; computing it again" in caplog.text


def test_a_one_off_task_lost_every_time_is_a_one_line_error():
    """Lost on every try: an error that says so, not a hang (the threaded route's futures)."""
    from cvflow.execution import loop
    from cvflow.execution.threaded import ThreadedClient

    import threading

    threaded = ThreadedClient(1)
    busy = threading.Event()
    threaded.submit(busy.wait, 60, key="cvflow-busy")   # the next tasks stay queued behind it

    def submit(key):
        future = threaded.submit(_slow_double, 1, key=key)
        future.cancel()
        return future

    try:
        with pytest.raises(RuntimeError, match="lost at the scheduler 3 times"):
            loop._one_task_result(threaded, submit, "cvflow-check-lost")
    finally:
        busy.set()


def _double_noting_pid(x, notes):
    import os

    with open(notes, "a") as f:
        f.write(f"{os.getpid()}\n")
    return 2 * x


def test_a_one_off_task_whose_worker_dies_before_the_gather_is_computed_again(tmp_path):
    """The worker holding a one-off task's finished result is killed (SIGKILL) before the
    client gathers it: the result comes back, computed again elsewhere, no hang, no error
    (issue 44 item 6; its own 2-worker LocalCluster, so the shared one keeps its workers)."""
    import os
    import signal
    import threading

    from distributed import Client, LocalCluster

    from cvflow.execution import loop

    killed, notes = [], tmp_path / "pids"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as c:
        def submit(key):
            future = c.submit(_double_noting_pid, 21, notes, key=key, pure=False)
            if not killed:
                finished = threading.Event()
                future.add_done_callback(lambda _: finished.set())
                assert finished.wait(60), "the first try did not finish in 60 s"
                (holder,) = c.who_has([future])[key]
                pid = c.run(os.getpid, workers=[holder])[holder]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return future

        assert loop._one_task_result(c, submit, "cvflow-timing-killed-holder") == 42
    ran_in = [int(line) for line in notes.read_text().split()]
    assert len(ran_in) == 2 and ran_in[0] == killed[0] != ran_in[1]   # computed again elsewhere


class _LostFuture:
    """A finished task whose result the scheduler lost, as distributed reports it under load:
    reading it raises UnboundLocalError ('result'), beside "Couldn't gather keys ... forgotten"."""

    status = "finished"

    def __init__(self, key):
        self.key = key

    def add_done_callback(self, callback):
        callback(self)

    def result(self):
        raise UnboundLocalError("cannot access local variable 'result' where it is not "
                                "associated with a value")

    def cancel(self):
        pass

    def release(self):
        pass


def test_a_one_off_task_whose_gather_raises_unbound_local_is_computed_again(caplog):
    from cvflow.execution import loop
    from cvflow.execution.threaded import ThreadedClient

    keys = []

    def submit(key):
        keys.append(key)
        return _LostFuture(key) if len(keys) == 1 else threaded.submit(_slow_double, 21, key=key)

    with ThreadedClient(1) as threaded, caplog.at_level("WARNING", logger="cvflow.execution.loop"):
        assert loop._one_task_result(threaded, submit, "cvflow-timing-unbound") == 42
    assert keys == ["cvflow-timing-unbound", "cvflow-timing-unbound-again1"]
    assert "was lost at the scheduler; computing it again" in caplog.text


class _Regathering:
    """A finished task whose worker died before the client read its result, no worker left:
    distributed's gather waits for the scheduler to compute it again, which takes a worker
    (here: until ``back`` is set, at most 30 s, so a failing test ends; or it is cancelled)."""

    status = "finished"

    def __init__(self, key, back):
        import threading

        self.key, self.back, self.cancelled = key, back, threading.Event()

    def add_done_callback(self, callback):
        callback(self)

    def result(self):
        import time
        from concurrent.futures import CancelledError

        deadline = time.monotonic() + 30
        while not self.back.is_set() and time.monotonic() < deadline:
            if self.cancelled.wait(0.05):
                raise CancelledError(self.key)
        return {"fits": 0}

    def cancel(self):
        self.cancelled.set()

    def release(self):
        pass


class _NoWorkerLeft:
    """A distributed client whose workers are all gone for good: every task it runs is a
    :class:`_Regathering` (the run's watchdog would start new workers after 30 s quiet)."""

    def __init__(self):
        import threading

        self.back = threading.Event()
        self.futures: list[_Regathering] = []

    def submit(self, fn, *args, key=None, pure=True, **kwargs):
        self.futures.append(_Regathering(key, self.back))
        return self.futures[-1]

    def scheduler_info(self):
        return {"workers": {}}

    def call_stack(self, futures):
        return {}

    def cancel(self, futures):
        for future in futures:
            future.cancel()


@pytest.fixture
def no_worker_left():
    import dask.config

    client = _NoWorkerLeft()
    with dask.config.set({"cvflow.execution.no-worker-seconds": 2}):
        yield client
    client.back.set()                     # a read still waiting (without the fix) ends


def test_a_one_off_task_whose_result_never_comes_back_stops_the_run(no_worker_left):
    """The timing task's result waits for a worker that never comes: the run stops after
    no-worker-seconds with the StallError that says so, and the read is cancelled (the run
    waited in the read for as long as it was left: tests/test_inflight.py at load 14)."""
    from cvflow.errors import StallError
    from cvflow.execution import loop

    with pytest.raises(StallError, match="no worker is connected"):
        loop._one_task_result(no_worker_left, lambda key: no_worker_left.submit(None, key=key),
                              "cvflow-timing-regathering")
    assert all(f.cancelled.is_set() for f in no_worker_left.futures)


def test_a_block_whose_result_never_comes_back_stops_the_run(no_worker_left):
    """The loop's own wait, as above: a block's result read while its worker is gone stops the
    run after no-worker-seconds, not never; the block's task is cancelled."""
    from types import SimpleNamespace

    from cvflow.errors import StallError
    from cvflow.execution.loop import Block, Loop
    from cvflow.execution.tasks import TaskContext

    data = SimpleNamespace(fit_X=np.zeros((4, 1)), fit_y=np.zeros(4), sample_weight=None,
                           positive=None)
    recorded = []
    loop = Loop(no_worker_left, TaskContext(store="unused.zarr", run_id="r"), params=[],
                train=np.ones((1, 4), bool), data=data, path_aware=True, record=recorded.append)
    loop.submit([Block(slice(0, 1), slice(0, 1))])
    with pytest.raises(StallError, match="no worker is connected"):
        loop.run()
    assert not recorded
    assert all(f.cancelled.is_set() for f in no_worker_left.futures if "block" in f.key)


def test_a_block_whose_result_is_lost_is_fitted_again(tmp_path, write_workflow, client,
                                                      monkeypatch, caplog):
    """Handled as a block whose worker died: fitted again, the cube the same bit for bit as a
    run that lost nothing (simulated on the threads route: the first block's result lost)."""
    from cvflow.execution.threaded import ThreadedClient

    wf = write_workflow(QUICK)
    reference = run(wf, store=tmp_path / "reference.zarr", client=client, progress=False)
    real, lost = ThreadedClient.submit, []

    def submit(self, fn, *args, key=None, **kwargs):
        if key and key.startswith("cvflow-block-") and not lost:
            lost.append(key)
            return _LostFuture(key)
        return real(self, fn, *args, key=key, **kwargs)

    monkeypatch.setattr(ThreadedClient, "submit", submit)
    with caplog.at_level("WARNING", logger="cvflow.execution.loop"):
        result = run(wf, store=tmp_path / "s.zarr", cluster="threads", progress=False)
    assert lost and f"the result of {lost[0]} was lost at the scheduler; fitting its block " \
        "again" in caplog.text
    assert result.fits_executed == reference.fits_executed == result.total_fits
    a, b = (xr.open_zarr(tmp_path / name) for name in ("s.zarr", "reference.zarr"))
    assert a["pred"].values.tobytes() == b["pred"].values.tobytes()
    np.testing.assert_array_equal(a["done"].values, b["done"].values)
