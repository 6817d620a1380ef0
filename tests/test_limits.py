"""Size limits (cvflow.workflow.limits): absurd grids, designs and YAML alias bombs are refused from
their sizes, with the number and how to raise the limit, before anything is allocated."""
from __future__ import annotations

import os
import subprocess
import sys

import dask.config
import pytest

from cvflow.cli import main
from cvflow.errors import InputError
from cvflow.workflow.limits import load_yaml
from cvflow.workflow.spec import load_workflow

from cvtest import QUICK

GRID = "{alpha: [0.01, 0.1, 1.0, 10.0]}"


def _validate(tmp_path, capsys, text: str) -> str:
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    code = main(["validate", str(wf)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and str(wf) in err
    return err


def _grid(text: str) -> str:
    return QUICK.replace(GRID, text)


@pytest.mark.parametrize("grid,fragment", [
    ("{alpha: {logspace: [-3, 3, 1000000000]}}",
     "learners[0].grid.alpha: logspace [-3, 3, 1000000000] gives 1,000,000,000 values, over the "
     "limit of 1,000,000 (cvflow.limits.params); raise it with "
     "DASK_CVFLOW__LIMITS__PARAMS=1000000000"),
    ("{alpha: {linspace: [0, 1, 1000000000]}}", "gives 1,000,000,000 values, over the limit"),
    ("{alpha: {range: [0, 1000000000000, 1]}}", "gives 1,000,000,000,000 values, over the limit"),
    ("{alpha: {logspace: [-3, 3, 1000]}, tol: {logspace: [-6, -1, 1000]}, "
     "max_iter: {range: [1, 1001, 1]}}",
     "learners[0].grid: the grids give 1,000,000,000 params (1000 x 1000 x 1000 here), over the "
     "limit of 1,000,000 (cvflow.limits.params); raise it with "
     "DASK_CVFLOW__LIMITS__PARAMS=1000000000 or "
     "dask.config.set({'cvflow.limits.params': 1000000000})"),
])
def test_huge_grids_are_refused_before_numpy_allocates(tmp_path, capsys, grid, fragment):
    # 2 GiB of address space: materialising any of these grids (8 GB and more) would fail
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31)); "
            "from cvflow.cli import main; sys.exit(main(sys.argv[1:]))")
    wf = tmp_path / "wf.yaml"
    wf.write_text(_grid(grid))
    proc = subprocess.run([sys.executable, "-c", code, "validate", str(wf)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and fragment in proc.stderr and "MemoryError" not in proc.stderr


def test_grid_points_of_several_learners_add_up(tmp_path, capsys):
    text = _grid("{alpha: {logspace: [-3, 3, 1000]}, tol: {logspace: [-6, -1, 1000]}}").replace(
        "design:", "  - name: lasso\n    class: sklearn.linear_model.Lasso\n"
                   "    grid: {alpha: [0.1, 1.0]}\ndesign:")
    err = _validate(tmp_path, capsys, text)
    assert "learners[1].grid: the grids give 1,000,002 params, over the limit of 1,000,000" in err


def test_the_params_limit_is_configurable(tmp_path, capsys):
    grid = _grid("{alpha: {logspace: [-3, 3, 10001]}}")
    with dask.config.set({"cvflow.limits.params": 10_000}):
        err = _validate(tmp_path, capsys, grid)
        assert ("learners[0].grid.alpha: logspace [-3, 3, 10001] gives 10,001 values, over the "
                "limit of 10,000 (cvflow.limits.params); raise it with "
                "DASK_CVFLOW__LIMITS__PARAMS=10001") in err
    with dask.config.set({"cvflow.limits.params": 10_001}):
        assert len(load_workflow(_write(tmp_path, grid)).params) == 10_001


def test_limits_have_a_floor(tmp_path):
    """Limits guard against absurd sizes, they are not quotas: one set below its floor counts
    as the floor, so small workflows are checked without reading Dask's config."""
    from cvflow.workflow.limits import FLOORS

    with dask.config.set({"cvflow.limits.params": 3, "cvflow.limits.fits": 3}):
        assert len(load_workflow(_write(tmp_path, QUICK)).params) == 4
    assert FLOORS["params"] == 10_000 and FLOORS["fits"] == 100_000


def _write(tmp_path, text):
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    return wf


def test_the_limit_named_in_the_message_lets_the_run_pass(tmp_path):
    """The environment variable the message gives is the one that works (fresh processes)."""
    text = _grid("{alpha: {logspace: [-3, 3, 100]}}").replace("folds: 5", "folds: 5, repeats: 1000")
    wf = _write(tmp_path, text)
    env = {**os.environ, "DASK_CVFLOW__LIMITS__FITS": "200000"}
    code = "import sys; from cvflow.workflow.spec import load_workflow; load_workflow(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-m", "cvflow", "validate", str(wf)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert ("design: 100 params x 5,001 splits = 500,100 fits, over the limit of 200,000 "
            "(cvflow.limits.fits); raise it with DASK_CVFLOW__LIMITS__FITS=500100") in proc.stderr
    env["DASK_CVFLOW__LIMITS__FITS"] = "500100"
    proc = subprocess.run([sys.executable, "-c", code, str(wf)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("design,fragment", [
    ("{folds: 5, repeats: 1000000000, seed: 0}",
     "design: 4 params x 5,000,000,001 splits = 20,000,000,004 fits, over the limit of "
     "10,000,000 (cvflow.limits.fits)"),
    ("{folds: 1000000000000, seed: 0}", "over the limit of 10,000,000 (cvflow.limits.fits)"),
])
def test_absurd_designs_are_refused_from_their_sizes(tmp_path, capsys, design, fragment):
    err = _validate(tmp_path, capsys, QUICK.replace("{folds: 5, seed: 0}", design))
    assert fragment in err


def test_a_design_under_the_fits_limit_that_cannot_be_built_is_refused(tmp_path):
    """Issue 32: ``folds: 2, repeats: 1000000`` (2 x 10^6 fits, under the fits limit) had
    ``cvflow validate`` building folds for minutes with over 1 GB. Refused from its sizes, in a
    fresh process that would otherwise outlive the deadline."""
    wf = _write(tmp_path, QUICK.replace("{folds: 5, seed: 0}", "{folds: 2, repeats: 1000000, "
                                        "seed: 0}").replace(GRID, "{alpha: [1.0]}"))
    proc = subprocess.run([sys.executable, "-m", "cvflow", "validate", str(wf)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert (f"{wf}: design: 2,000,001 splits (training sets), over the limit of 1,000,000 "
            "(cvflow.limits.splits); raise it with DASK_CVFLOW__LIMITS__SPLITS=2000001"
            ) in proc.stderr
    # the fold labels count even when no estimator fits a fold split
    full = QUICK.replace("{folds: 5, seed: 0}", "{folds: 2, repeats: 1000000, seed: 0}").replace(
        "[kfold]", "[{ustat: {compare: [0, 1]}}]").replace("seed: 0}", "seed: 0, subset: "
                                                          "{size: 10, pairs: 2}}")
    with pytest.raises(InputError, match=r"design.repeats: 1,000,000 repeats of 2 folds make "
                                         r"2,000,000 folds, over the limit of 1,000,000 "
                                         r"\(cvflow.limits.splits\)"):
        load_workflow(_write(tmp_path, full))


def test_the_values_a_design_holds_are_counted_once_the_data_are_known(tmp_path, capsys):
    """(splits + repeats) x samples: 4,000 repeats of 5 folds on 442 samples hold 10.6 M values;
    counted before the fold labels are drawn."""
    text = QUICK.replace("{folds: 5, seed: 0}", "{folds: 5, repeats: 4000, seed: 0}")
    with dask.config.set({"cvflow.limits.design-values": 10_000_000}):
        err = _validate(tmp_path, capsys, text)
    assert ("design: (20,001 splits + 4,000 repeats) x 442 samples = 10,608,442 training-set and "
            "fold values, over the limit of 10,000,000 (cvflow.limits.design-values); raise it "
            "with DASK_CVFLOW__LIMITS__DESIGN_VALUES=10608442") in err


def test_pairs_of_nested_estimators_count(tmp_path, capsys):
    """stability_nested adds repeats x C(K, 2) pair splits; the count is the requested one."""
    text = QUICK.replace("{folds: 5, seed: 0}", "{folds: 5, repeats: 100000, seed: 0}").replace(
        "[kfold]", "[stability_nested]")
    with dask.config.set({"cvflow.limits.fits": 6_000_003}):
        err = _validate(tmp_path, capsys, text)
    assert "design: 4 params x 1,500,001 splits = 6,000,004 fits, over the limit of 6,000,003" in err


def test_subset_pairs_and_unused_repeats_count(tmp_path, capsys):
    ustat = QUICK.replace("[kfold]", "[{ustat: {compare: [0, 1]}}]")
    err = _validate(tmp_path, capsys, ustat.replace(
        "{folds: 5, seed: 0}", "{folds: 5, seed: 0, subset: {size: 10, pairs: 1000000000000}}"))
    assert "design: 4 params x 2,000,000,000,000 splits = 8,000,000,000,000 fits" in err
    # fold labels (repeats x samples) are built and stored even when no estimator reads them
    err = _validate(tmp_path, capsys, ustat.replace(
        "{folds: 5, seed: 0}", "{folds: 5, repeats: 100000000, seed: 0, subset: {size: 10, pairs: 2}}"))
    assert ("design.repeats: 100,000,000 repeats of 5 folds make 500,000,000 folds, over the "
            "limit of 10,000,000") in err


def test_splitter_decided_folds_are_counted_from_the_data(tmp_path, capsys):
    """LeaveOneOut's folds are known once the data are: counted before the training sets exist."""
    text = _grid("{alpha: {logspace: [-3, 3, 300]}}").replace(
        "{folds: 5, seed: 0}", "{splitter: {class: sklearn.model_selection.LeaveOneOut}}")
    with dask.config.set({"cvflow.limits.fits": 100_000}):
        err = _validate(tmp_path, capsys, text)
    assert "design: 300 params x 443 splits = 132,900 fits, over the limit of 100,000" in err


# --- YAML ------------------------------------------------------------------------------------

def _laughs(levels: int = 9, width: int = 10) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "{" + ", ".join(lines) + "}"


def test_billion_laughs_is_refused_before_it_is_built(tmp_path, capsys):
    text = QUICK.replace("name: quick", f"name: quick\ndescription: {_laughs()}")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31)); "
            "from cvflow.cli import main; sys.exit(main(sys.argv[1:]))")
    wf = _write(tmp_path, text)
    for command in ("validate", "run"):
        proc = subprocess.run([sys.executable, "-c", code, command, str(wf), *(
            ["--store", str(tmp_path / "s.zarr")] if command == "run" else [])],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        # a_k expands to 1 + 10 + ... + 10^(k+1) nodes (a list of ten a_(k-1)), so the mapping
        # of a_0..a_8 to 1 + 9 keys + sum_(j=2..10) (10^j - 1)/9 = 1,234,567,909; it is written
        # with 29 (the mapping, 9 keys, a_0 and its 10 scalars, 8 lists of aliases)
        assert (f"{wf}: YAML aliases expand the file by 1,234,567,880 nodes, over the limit of "
                "100,000 (cvflow.limits.yaml-alias-nodes); raise it with "
                "DASK_CVFLOW__LIMITS__YAML_ALIAS_NODES=1234567880") in proc.stderr
    assert not (tmp_path / "s.zarr").exists()


def test_fair_anchors_still_load(tmp_path):
    """An anchor shared by two learners' grids is fine: aliases add a few nodes."""
    text = QUICK.replace("grid: " + GRID, "grid: &g " + GRID).replace(
        "design:", "  - name: r2\n    class: sklearn.linear_model.Ridge\n    grid: *g\ndesign:")
    wf = load_workflow(_write(tmp_path, text))
    assert [p.learner for p in wf.params] == ["ridge"] * 4 + ["r2"] * 4


def test_alias_budget_counts_expanded_nodes():
    # 1 + 4 keys + 11 + 111 + 1111 + 11111 nodes expanded, 19 written (the mapping, its keys,
    # a0 and its 10 scalars, 3 lists of aliases)
    assert load_yaml(_laughs(levels=4, width=10), "x.yaml")["a3"][9][9][9][9] == "lol"
    with dask.config.set({"cvflow.limits.yaml-alias-nodes": 12_329}):
        with pytest.raises(InputError, match=r"^x\.yaml: YAML aliases expand the file by 12,330 "
                                             r"nodes, over the limit of 12,329"):
            load_yaml(_laughs(levels=4, width=10), "x.yaml")


def test_recursive_and_deep_yaml(tmp_path, capsys):
    err = _validate(tmp_path, capsys, QUICK.replace("name: quick", "name: quick\ndescription: &r [*r]"))
    assert "a YAML alias refers to a node that contains it (a recursive anchor)" in err
    err = _validate(tmp_path, capsys, QUICK.replace("name: quick",
                                                    "name: quick\ndescription: " + "[" * 5000))
    assert "YAML" in err


def test_non_text_workflow_file(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_bytes(b"name: x\n\xff\xfe\x00binary")
    assert main(["validate", str(wf)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{wf}: not a text file (byte 8 is not UTF-8)" in err

