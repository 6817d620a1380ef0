"""A user estimator named by dotted path in `estimators:` (a module beside the workflow, a plain
function with a `needs` attribute): its splits are fitted and it appears in every report."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import cvflow
from cvflow.cli import main
from cvflow.execution.run import run
from cvflow.errors import UntrustedCodeWarning

MODULE = '''\
import numpy as np
import xarray as xr


def pair_gap(cube, *, loss=None, scale=1.0):
    """scale * (mean squared loss of the pair fits on D - that of the full fit on D), per param."""
    analysis = ~cube["is_test"].values
    y = cube["y"].values[analysis]
    pred = cube["pred"].values[:, :, analysis]
    pairs = np.unique(cube["pair_split"].values[cube["pair_split"].values >= 0])
    full = int(cube.attrs["full_split"])
    pair_loss = ((pred[:, pairs] - y) ** 2).mean(axis=(1, 2))
    full_loss = ((pred[:, full] - y) ** 2).mean(axis=1)
    gap = scale * (pair_loss - full_loss)
    return xr.Dataset({"estimate": ("param", gap), "pairs": xr.DataArray(len(pairs))})


pair_gap.needs = ("full", "pair")
'''

WORKFLOW = """\
name: user
data: {source: synthetic, name: linear, params: {n: 40, p: 3}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.1, 10.0]}
design: {folds: 4, seed: 0}
estimators: [kfold, {user_reducers.pair_gap: {scale: 2.0}}]
execution: {fits_per_task: 8}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory, client):
    tmp = tmp_path_factory.mktemp("user")
    (tmp / "user_reducers.py").write_text(MODULE)
    wf = tmp / "user.yaml"
    wf.write_text(WORKFLOW)
    return wf, run(wf, store=tmp / "user.zarr", client=client).store


def _hand_gap(cube) -> np.ndarray:
    """The same quantity written out loop by loop from the stored predictions."""
    pair = cube["pair_split"].values
    full = int(cube.attrs["full_split"])
    y, pred = cube["y"].values, cube["pred"].values
    pairs = sorted({int(s) for s in pair.ravel() if s >= 0})
    out = []
    for h in range(pred.shape[0]):
        on_pairs = np.mean([np.mean((pred[h, s] - y) ** 2) for s in pairs])
        out.append(2.0 * (on_pairs - np.mean((pred[h, full] - y) ** 2)))
    return np.asarray(out)


def test_user_estimator_gets_its_pair_splits_fitted(study):
    _, store = study
    cube = cvflow.open(store)
    k = 4
    pair = cube["pair_split"].values
    assert (pair[:, ~np.eye(k, dtype=bool)] >= 0).all()
    assert int(cube.attrs["full_split"]) >= 0
    assert cube["done"].values.all() and not cube["failed"].values.any()
    assert cube.sizes["split"] == 1 + k + k * (k - 1) // 2


def test_user_estimator_in_json_and_html(study, tmp_path, capsys, monkeypatch):
    wf, store = study
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_reducers", raising=False)
    # a store is data: its user estimator is skipped with a warning until trusted
    with pytest.warns(UntrustedCodeWarning, match="user_reducers.pair_gap skipped: a user "
                      "estimator the store names, not imported .* pass --trust"):
        assert main(["report", str(store), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"kfold"}
    assert "user_reducers" not in sys.modules
    # trusted, it imports the ordinary way: its directory on the path (PYTHONPATH)
    monkeypatch.syspath_prepend(str(wf.parent))
    html = tmp_path / "r.html"
    assert main(["report", str(store), "--trust", "--json", "--html", str(html)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"kfold", "user_reducers.pair_gap"}
    mine = out["user_reducers.pair_gap"]
    np.testing.assert_allclose(mine["estimate"]["values"], _hand_gap(cvflow.open(store)),
                               rtol=1e-12)
    assert mine["pairs"] == 6
    text = html.read_text()
    assert "user_reducers.pair_gap" in text and "pairs: 6" in text
    # naming it on the command line (--set) is the user's own choice: no --trust needed
    assert main(["report", str(store), "--json", "--set", "user_reducers.pair_gap.scale=4"]) == 0
    out = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(out["user_reducers.pair_gap"]["estimate"]["values"],
                               2 * _hand_gap(cvflow.open(store)), rtol=1e-12)


def test_user_estimator_options_checked_before_any_fit(study, tmp_path, capsys):
    wf, _ = study
    bad = wf.with_name("bad.yaml")
    bad.write_text(WORKFLOW.replace("scale: 2.0", "scael: 2.0"))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "estimators[1].user_reducers.pair_gap.scael: unknown option of " \
           "user_reducers.pair_gap; its options are: scale" in err
    assert main(["validate", str(wf)]) == 0
    assert "estimators: kfold, user_reducers.pair_gap" in capsys.readouterr().out


STATUS_MODULE = '''\
import numpy as np
import xarray as xr


def slow_share(cube, *, loss=None):
    """Per param: the fits' total seconds and how many of them hold a message."""
    seconds = np.nansum(cube["fit_seconds"].values, axis=1)
    messages = (cube["error"].values != "").sum(axis=1)
    return xr.Dataset({"estimate": ("param", seconds), "messages": ("param", messages)})


slow_share.needs = ("fold",)
'''


def test_cvflow_run_gives_a_user_estimator_the_status_variables(tmp_path, capsys, monkeypatch):
    """`cvflow run` leaves `error` and `fit_seconds` out of its report's cube only when every
    estimator is cvflow's own: a user estimator of the workflow reads them (compared with the
    store's own arrays)."""
    (tmp_path / "status_reducers.py").write_text(STATUS_MODULE)
    monkeypatch.delitem(sys.modules, "status_reducers", raising=False)
    wf = tmp_path / "status.yaml"
    wf.write_text(WORKFLOW.replace("{user_reducers.pair_gap: {scale: 2.0}}",
                                   "status_reducers.slow_share")
                  .replace("execution: {fits_per_task: 8}",
                           "execution: {fits_per_task: 8, cluster: threads}"))
    store = tmp_path / "status.zarr"
    assert main(["run", str(wf), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "status_reducers.slow_share" in out and "Traceback" not in out
    cube = cvflow.open(store)
    assert np.isfinite(cube["fit_seconds"].values).all()
    assert main(["report", str(store), "--trust", "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)["status_reducers.slow_share"]
    np.testing.assert_allclose(mine["estimate"]["values"],
                               np.nansum(cube["fit_seconds"].values, axis=1), rtol=1e-12)
