"""Racing (cvflow.execution.race_runner): the rule's kernel by hand, the stages, the options, and raced runs
from the command line against the full study."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from cvflow.errors import InputError
from cvflow.execution.race_runner import look, paired_z, plan_stages, threshold
from cvflow.workflow.racing_options import check_options
from cvtest import run_cli

WORKFLOW = """\
name: race
data: {{source: sklearn, name: diabetes}}
task: regression
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: {{logspace: [-2, 5, 12]}}}}
design: {{folds: 5, repeats: 2, seed: 0}}
estimators: [kfold, corrected_kfold]
execution: {{cluster: threads}}
{racing}
"""


# --- the kernel, by hand -------------------------------------------------------------------------

def test_paired_z_one_repeat_is_the_per_sample_standard_error():
    d = np.array([[1.0, 2.0, 4.0, np.nan, 3.0]])
    mean, se, units = paired_z(d)
    x = np.array([1.0, 2.0, 4.0, 3.0])
    assert mean == pytest.approx(x.mean())
    assert se == pytest.approx(x.std(ddof=1) / np.sqrt(4))
    assert units == 4


def test_paired_z_pools_repeats_with_the_perfect_correlation_bound():
    """Two repeats, one seen on 4 samples and one on 2: se = Σ_r (n_r/N) sd_r/√n_r."""
    d = np.array([[1.0, 2.0, 4.0, 3.0], [0.0, 5.0, np.nan, np.nan]])
    mean, se, units = paired_z(d)
    a, b = np.array([1.0, 2.0, 4.0, 3.0]), np.array([0.0, 5.0])
    assert mean == pytest.approx(np.r_[a, b].mean())
    want = 4 / 6 * a.std(ddof=1) / 2 + 2 / 6 * b.std(ddof=1) / np.sqrt(2)
    assert se == pytest.approx(want)
    assert units == 2


def test_paired_z_groups_are_the_units():
    """Cluster-robust: the sums of centred differences per group, m/(m-1) corrected."""
    d = np.array([[1.0, 3.0, 2.0, 6.0, 5.0, 1.0]])
    groups = np.array([7, 7, 8, 8, 9, 9])
    mean, se, units = paired_z(d, groups)
    c = d[0] - d[0].mean()
    sums = np.array([c[0] + c[1], c[2] + c[3], c[4] + c[5]])
    assert se == pytest.approx(np.sqrt((sums ** 2).sum() * 3 / 2) / 6)
    assert units == 3


def test_look_drops_only_below_the_corrected_threshold():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(1, 1, 400)) ** 2
    losses = np.concatenate([base, base + 0.01 * rng.normal(size=base.shape),
                             base + 1.0 + rng.normal(size=base.shape) * 0.1])
    out = look(losses, np.ones(3, bool), alpha=0.05, k=3, looks=4)
    assert [d["param"] for d in out] == [2]
    assert out[0]["leader"] in (0, 1)
    assert out[0]["p_value"] <= threshold(0.05, 3, 4) == 0.05 / (4 * 6)
    # too few units: nothing dropped however clear
    assert look(losses[:, :, :20], np.ones(3, bool), alpha=0.05, k=3, looks=4) == []


def test_stages_auto_folds_of_first_repeat_then_repeats_then_the_rest():
    table = 1 + np.arange(6).reshape(2, 3)
    design = SimpleNamespace(fold_split=table, n_splits=9)   # 0 full, 7 and 8 pairs
    stages = plan_stages(design, "auto")
    assert [s.splits for s in stages] == [(1,), (2,), (3,), (4, 5, 6), (0, 7, 8)]
    assert [s.splits for s in plan_stages(design, "repeats")] == [(1, 2, 3), (4, 5, 6),
                                                                  (0, 7, 8)]
    assert len(plan_stages(design, "folds")) == 7


@pytest.mark.parametrize("value, match", [
    ({"alpha": 2}, r"racing\.alpha: 2; give"),
    ({"alpha": 0.05, "speed": 1}, r"racing\.speed: unknown key"),
    ({"stages": "halves"}, r"racing\.stages: 'halves'"),
    ({"min_units": 1}, r"racing\.min_units: 1"),
    ("yes", r"racing: 'yes'; give a mapping"),
])
def test_bad_options_are_refused_with_one_line(value, match):
    with pytest.raises(InputError, match=match):
        check_options(value)


def test_options_defaults():
    assert check_options(True) == {"alpha": 0.05, "stages": "auto", "min_units": 30}
    assert check_options(False) is None


# --- whole runs ----------------------------------------------------------------------------------

def _write(tmp_path, racing: str, name="wf.yaml", estimators=None):
    text = WORKFLOW.format(racing=racing)
    if estimators:
        text = text.replace("[kfold, corrected_kfold]", estimators)
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("racing, estimators, match", [
    ("racing: {alpha: 1.5}", None, r"wf\.yaml: racing\.alpha: 1\.5"),
    ("racing: {alpha: 0.05}", "[kfold, bbc_cv]",
     r"wf\.yaml: estimators\[1\]: bbc_cv needs every param on every split"),
    ("racing: {alpha: 0.05}", "[nested_cv]", r"estimators\[0\]: nested_cv needs every param"),
    ("racing: {stages: repeats}\ndesign: {folds: 5, repeats: 1}", None, None),
])
def test_cli_refuses_bad_racing_before_any_store(tmp_path, racing, estimators, match):
    wf = _write(tmp_path, racing, estimators=estimators)
    if match is None:        # a duplicate key: the YAML's own error; use a one-repeat design
        wf.write_text(WORKFLOW.format(racing="racing: {stages: repeats}")
                      .replace("repeats: 2", "repeats: 1"))
        match = r"racing\.stages: repeats needs design\.repeats >= 2"
    out = run_cli("run", wf, "--store", tmp_path / "s.zarr")
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    import re

    assert re.search(match, out.stderr), out.stderr
    assert not (tmp_path / "s.zarr").exists()


def test_raced_run_drops_the_hopeless_keeps_the_choice_and_fills_later(tmp_path):
    """The raced study drops the large alphas, fits none of their later splits, records the
    race, selects what the full study selects with the same K-fold estimates for the
    survivors; `status` counts the saved fits; `racing: false` fills the rest."""
    import cvflow

    raced, full = tmp_path / "raced.zarr", tmp_path / "full.zarr"
    out = run_cli("run", _write(tmp_path, "racing: {alpha: 0.05}"), "--store", raced)
    assert out.returncode == 0, out.stderr
    out = run_cli("run", _write(tmp_path, "", name="full.yaml"), "--store", full)
    assert out.returncode == 0, out.stderr

    cube, ref = cvflow.open(raced), cvflow.open(full)
    race = json.loads(cube.attrs["racing"])
    dropped = {d["param"]: d for d in race["dropped"]}
    assert dropped, race
    assert "skewness correction: asymptotic" in race["test"]      # squared: unbounded
    alphas = cube["alpha"].values
    # the dropped are the largest alphas (hopeless: they shrink everything)
    assert min(alphas[list(dropped)]) > 1.0
    done = cube["done"].values
    for h, d in dropped.items():
        assert d["p_value"] <= race["threshold"] and 0 <= d["stage"] < race["looks"]
        later = [s for st in race["stage_splits"][d["stage"] + 1:] for s in st]
        assert not done[h, later].any()
    alive = [h for h in range(len(alphas)) if h not in dropped]
    assert done[alive].all()

    k_raced = cvflow.estimators.kfold(cube)
    k_full = cvflow.estimators.kfold(ref)
    assert int(k_raced["selected"]) == int(k_full["selected"])
    np.testing.assert_allclose(k_raced["estimate"].values[alive], k_full["estimate"].values[alive])
    assert np.isnan(k_raced["estimate"].values[list(dropped)]).all()

    saved = int((~done).sum())
    status = run_cli("status", raced)
    assert (f"{len(dropped)} of {len(alphas)} params dropped; {len(dropped)} of them still lack "
            f"{saved} fits racing skipped") in status.stdout
    info = json.loads(run_cli("status", raced, "--json").stdout)
    assert info["racing"]["saved_fits"] == saved

    out = run_cli("run", _write(tmp_path, "racing: false"), "--store", raced)
    assert out.returncode == 0, out.stderr
    filled = cvflow.open(raced)
    assert filled["done"].values.all()
    np.testing.assert_allclose(cvflow.estimators.kfold(filled)["estimate"].values,
                               k_full["estimate"].values)
    assert (f"{len(dropped)} of {len(alphas)} params were dropped, and their skipped fits have "
            "been fitted since") in run_cli("status", raced).stdout


def test_study_racing_in_python(tmp_path):
    """Study(..., racing=...) races as the workflow key does; the report shows the race."""
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge

    import cvflow
    from cvflow import report

    X, y = load_diabetes(return_X_y=True)
    study = cvflow.Study(Ridge(), param_grid={"alpha": [0.1, 1.0, 1e3, 1e4, 1e5]}, cv=5,
                         racing={"alpha": 0.05}, execution={"cluster": "threads"})
    store = tmp_path / "s.zarr"
    study.run(X, y, store=str(store))
    cube = cvflow.open(str(store))
    race = json.loads(cube.attrs["racing"])
    assert {d["param"] for d in race["dropped"]} >= {3, 4}
    assert 0 not in {d["param"] for d in race["dropped"]}
    text = report.text(cube, {"kfold": cvflow.estimators.kfold(cube)})
    assert "racing: " in text and "beaten by ridge(alpha=" in text.replace("Ridge", "ridge")


def test_stage_reader_reads_each_stage_s_out_of_fold_losses(tmp_path):
    """StageReader, stage by stage on a stored study, gives the out-of-fold squared losses of
    the folds seen so far (by hand from pred, y and the fold labels), NaN for the rest and for
    params dropped before."""
    import cvflow
    from cvflow.execution.race_runner import Race, StageReader

    out = run_cli("run", _write(tmp_path, ""), "--store", tmp_path / "s.zarr")
    assert out.returncode == 0, out.stderr
    cube = cvflow.open(tmp_path / "s.zarr")
    pred, y, fold = cube["pred"].values, cube["y"].values, cube["fold"].values
    table = cube["fold_split"].values
    wf = cvflow.load_workflow(tmp_path / "wf.yaml")
    race = Race.start({"alpha": 0.05, "stages": "auto", "min_units": 30}, wf.build().design,
                      pred.shape[0])
    reader = StageReader(str(tmp_path / "s.zarr"), race, "squared")
    want = np.full((pred.shape[0],) + fold.shape, np.nan)
    for s, stage in enumerate(race.stages[:-1]):
        if s == 1:
            race.dropped[3] = {"param": 3, "stage": 0}       # dropped: not read any more
        for r, j in stage.folds:
            members = fold[r] == j
            rows = [h for h in range(pred.shape[0]) if h != 3 or s == 0]
            want[np.ix_(rows, [r], np.flatnonzero(members))] = \
                ((pred[rows, table[r, j]][:, members] - y[members]) ** 2)[:, None, :]
        np.testing.assert_allclose(reader.add(s), want, rtol=1e-12)


def test_study_racing_a_bounded_loss_uses_the_finite_sample_test(tmp_path):
    """zero_one (declared in [0, 1]): the race uses the betting test, warns of nothing, and drops
    the hopeless params (C so small that every prediction is the majority class); log_loss
    (unbounded, but a classification loss): the race uses the betting test on each sample's
    range over the labels with the t-test, warns of nothing, and drops the same hopeless params
    (their p-values at most the thresholds the record states)."""
    import warnings

    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    import cvflow
    from cvflow.errors import RacingWarning

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    grid = {"C": [1e-5, 1e-4, 0.1, 1.0]}
    study = cvflow.Study(LogisticRegression(), param_grid=grid, cv=5, loss="zero_one",
                         racing={"alpha": 0.05}, execution={"cluster": "threads"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RacingWarning)
        study.run(X, y, store=str(tmp_path / "z.zarr"))
    race = json.loads(cvflow.open(str(tmp_path / "z.zarr")).attrs["racing"])
    assert race["test"].startswith("one-sided betting test") and "0 to 1: finite-sample" in race["test"]
    assert {d["param"] for d in race["dropped"]} >= {0, 1}
    assert all(d["bounded"] and d["p_value"] <= race["threshold"] for d in race["dropped"])

    study = cvflow.Study(LogisticRegression(), param_grid=grid, cv=5, loss="log_loss",
                         racing={"alpha": 0.05}, execution={"cluster": "threads"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RacingWarning)
        study.run(X, y, store=str(tmp_path / "l.zarr"))
    race = json.loads(cvflow.open(str(tmp_path / "l.zarr")).attrs["racing"])
    assert "range it can take over the labels" in race["test"]
    assert {d["param"] for d in race["dropped"]} >= {0, 1}
    t_cut = 0.05 / (race["looks"] * 4 * 3)
    assert all(not d["bounded"] and d["p_value"] <= race["thresholds"][d["stage"]]
               and d["p_t"] <= t_cut for d in race["dropped"])


def test_study_racing_multiclass_log_loss_uses_the_labels_ranges(tmp_path):
    """Iris, three classes, log_loss: the race uses the labels' betting test (no warning), the
    losses it reads at every label are -log p_c of the stored probabilities (by hand), and the
    hopeless param (C so small that every probability is about 1/3) is dropped."""
    import warnings

    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    import cvflow
    from cvflow.errors import RacingWarning
    from cvflow.estimators.cube_losses import label_losses

    X, y = load_iris(return_X_y=True)
    X, y = np.tile(X, (2, 1)), np.tile(y, 2)
    study = cvflow.Study(LogisticRegression(), param_grid={"C": [1e-4, 1.0]}, cv=5,
                         loss="log_loss", racing={"alpha": 0.05},
                         execution={"cluster": "threads"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RacingWarning)
        study.run(X, y, store=str(tmp_path / "m.zarr"))
    cube = cvflow.open(str(tmp_path / "m.zarr"))
    race = json.loads(cube.attrs["racing"])
    assert "range it can take over the labels" in race["test"]
    assert [d["param"] for d in race["dropped"]] == [0]
    pred = cube["pred"].isel(split=[1]).load()
    every = label_losses(cube, "log_loss", pred)
    p = np.asarray(pred.transpose("param", "split", "sample", "class").values)
    seen = np.isfinite(p).all(axis=-1)
    np.testing.assert_allclose(every[seen], -np.log(np.clip(p[seen], 2.2e-16, 1)), rtol=1e-9)
