"""Time-ordered folds (splitter: timeseries) against scikit-learn's TimeSeriesSplit."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import TimeSeriesSplit, cross_val_score

from cvflow.workflow.designs import make_design, timeseries_folds
from cvflow.estimators import kfold
from cvflow.workflow.params import Param
from cvflow.testing import fit_cube
from cvtest import run_cli


def _series(n=61, seed=0):
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(n, 3)), axis=0)
    return X, X @ [0.5, -1.0, 0.2] + rng.normal(size=n)


@pytest.mark.parametrize("options", [{}, {"gap": 3}, {"max_train_size": 20},
                                     {"gap": 2, "max_train_size": 15}])
def test_timeseries_design_is_sklearns(options):
    X, y = _series()
    fold, train = timeseries_folds(np.zeros(len(y), bool), folds=4, **options)
    design = make_design(fold, np.zeros(len(y), bool), full=False, fold_train=train)
    splits = list(TimeSeriesSplit(4, **options).split(X))
    for j, (tr, te) in enumerate(splits):
        np.testing.assert_array_equal(np.flatnonzero(design.train[design.fold_split[0, j]]), tr)
        np.testing.assert_array_equal(np.flatnonzero(design.fold[0] == j), te)
    never = np.setdiff1d(np.arange(len(y)), np.concatenate([te for _, te in splits]))
    assert (design.fold[0, never] == -1).all()
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a}) for a in (0.1, 10.0)]
    cube = fit_cube(X, y, params, design)
    got = kfold(cube)["estimate"].values
    for h, a in enumerate((0.1, 10.0)):
        want = -cross_val_score(Ridge(alpha=a), X, y, cv=TimeSeriesSplit(4, **options),
                                scoring="neg_mean_squared_error").mean()
        assert got[h] == pytest.approx(want, rel=1e-10)


WORKFLOW = """\
data: {{source: npz, path: series.npz}}
task: regression
learners: [{{name: ridge, class: sklearn.linear_model.Ridge, grid: {{alpha: [1.0]}}}}]
design: {{folds: 4, splitter: timeseries{extra}}}
estimators: [{estimators}]
"""


def test_timeseries_from_yaml_equals_cross_val_score(tmp_path, capsys):
    from cvflow.cli import main

    X, y = _series()
    np.savez(tmp_path / "series.npz", X=X, y=y)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(extra="", estimators="kfold"))
    store = tmp_path / "ts.zarr"
    done = run_cli("run", wf, "--store", store, "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert main(["report", str(store), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = -cross_val_score(Ridge(alpha=1.0), X, y, cv=TimeSeriesSplit(4),
                            scoring="neg_mean_squared_error")
    np.testing.assert_allclose(out["kfold"]["estimate"]["values"][0], want.mean(), rtol=1e-10)
    np.testing.assert_allclose(np.squeeze(out["kfold"]["fold_score"]["values"]), want, rtol=1e-10)
    # the HTML page adds no exchangeability-assuming curve (corrected K-fold, mu(h)) of its own
    html = tmp_path / "ts.html"
    assert main(["report", str(store), "--html", str(html)]) == 0
    text = html.read_text()
    assert '"kfold-ridge"' in text
    assert "corrected K-fold" not in text and '"stability-ridge"' not in text


@pytest.mark.parametrize("extra,estimators,fragment", [
    ("", "kfold, corrected_kfold", "estimators[1]: corrected_kfold assumes exchangeable samples"),
    ("", "nested_cv", "nested_cv assumes exchangeable samples"),
    ("", "bbc_cv", "bbc_cv assumes exchangeable samples"),
    (", repeats: 2", "kfold", "design.repeats: 2; time-ordered folds are fixed"),
    (", gap: -1", "kfold", "design.gap: -1; use at least 0"),
    (", max_train_size: 0", "kfold", "design.max_train_size: 0; use at least 1"),
])
def test_timeseries_refusals_at_validate(tmp_path, extra, estimators, fragment):
    X, y = _series()
    np.savez(tmp_path / "series.npz", X=X, y=y)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(extra=extra, estimators=estimators))
    done = run_cli("validate", wf)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert fragment in done.stderr


def test_gap_needs_timeseries(tmp_path):
    from cvflow.errors import InputError
    from cvflow.workflow.spec import parse_workflow

    with pytest.raises(InputError, match="design.gap: applies to splitter: timeseries only"):
        parse_workflow({"data": {"source": "sklearn", "name": "diabetes"},
                        "learners": [{"class": "sklearn.linear_model.Ridge"}],
                        "design": {"gap": 2}}, tmp_path / "wf.yaml")


def test_timeseries_split_object_in_yaml(tmp_path):
    """A TimeSeriesSplit object (as cvflow.Study writes cv=TimeSeriesSplit(...)) builds the
    same time-ordered design."""
    from cvflow.workflow.spec import load_workflow

    X, y = _series()
    np.savez(tmp_path / "series.npz", X=X, y=y)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.format(extra="", estimators="kfold").replace(
        "{folds: 4, splitter: timeseries}",
        "{splitter: {class: sklearn.model_selection.TimeSeriesSplit, n_splits: 4, gap: 2}}"))
    design = load_workflow(wf).build().design
    for j, (tr, te) in enumerate(TimeSeriesSplit(4, gap=2).split(X)):
        np.testing.assert_array_equal(np.flatnonzero(design.train[design.fold_split[0, j]]), tr)
        np.testing.assert_array_equal(np.flatnonzero(design.fold[0] == j), te)
