"""Reanalysis without refitting: `cvflow report --loss/--lambdas/--compare` give the numbers of
a fresh run whose workflow has those settings as defaults, and no fit is run."""
from __future__ import annotations

import json
import math

import pytest

import cvflow
from cvflow.execution.run import run
from cvflow.report import compute, to_json

from cvtest import run_cli, tree_digest

STUDY = """\
name: re
data: {{source: synthetic, name: linear, params: {{n: 48, p: 3}}, test_fraction: 0.25}}
task: regression
loss: {loss}
learners:
  - name: ridge
    class: sklearn.linear_model.Ridge
    grid: {{alpha: [0.1, 1.0, 10.0]}}
design: {{folds: 3, seed: 0, subset: {{size: 6, pairs: 3}}}}
estimators: [kfold, corrected_kfold, {{stability_nested: {{lambdas: {lambdas}}}}}, bates_ncv,
             {{ustat: {{compare: {compare}}}}}, {{nadeau_bengio: {{compare: {compare}}}}}]
execution: {{fits_per_task: 16}}
"""


def assert_same(a, b, where="report"):
    """Equal JSON trees, numbers to 1e-12 relative (NaN/None equal to itself)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a) ^ set(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, str) and b is not None:
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def stores(tmp_path_factory, client):
    """The same fits twice: one store with squared defaults, one with absolute/other options."""
    tmp = tmp_path_factory.mktemp("re")
    old = tmp / "old.yaml"
    old.write_text(STUDY.format(loss="squared", lambdas="[0, 1]", compare="[0, 1]"))
    new = tmp / "new.yaml"
    new.write_text(STUDY.format(loss="absolute", lambdas="[0, 0.5, 2]", compare="[0, 2]"))
    return run(old, store=tmp / "old.zarr", client=client).store, \
        run(new, store=tmp / "new.zarr", client=client).store


def test_loss_lambdas_and_pair_equal_a_fresh_run(stores):
    old, new = stores
    before = tree_digest(old)
    res = run_cli("report", old, "--loss", "absolute", "--lambdas", "0,0.5,2",
                  "--compare", "ridge(alpha=0.1),2", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    fresh = to_json(compute(cvflow.open(new)))
    assert set(got) == {"kfold", "corrected_kfold", "stability_nested", "bates_ncv", "ustat",
                        "nadeau_bengio"}
    assert_same(got, fresh)
    assert got["kfold"]["loss"] == "absolute" and got["stability_nested"]["coords"]["lambda"][
        "values"] == [0.0, 0.5, 2.0]
    assert got["ustat"]["b"]["params"]["alpha"] == 10.0
    assert tree_digest(old) == before                       # reanalysis writes nothing


def test_loss_alone_changes_only_the_loss(stores):
    old, new = stores
    cube_old, cube_new = cvflow.open(old), cvflow.open(new)
    for name in ("kfold", "corrected_kfold", "bates_ncv"):
        a = to_json(compute(cube_old, [(name, {})], loss="absolute"))
        b = to_json(compute(cube_new, [(name, {})]))
        assert_same(a, b)
    squared = compute(cube_old, [("kfold", {})])["kfold"]
    absolute = compute(cube_old, [("kfold", {})], loss="absolute")["kfold"]
    assert squared.attrs["loss"] == "squared" and absolute.attrs["loss"] == "absolute"
    assert not (squared["estimate"] == absolute["estimate"]).any()


def test_python_route(stores):
    """cvflow.open + cvflow.estimators.* on a finished store (the README example)."""
    old, new = stores
    cube = cvflow.open(old)
    out = cvflow.estimators.stability_nested(cube, loss="absolute", lambdas=[0, 0.5, 2])
    ref = compute(cvflow.open(new))["stability_nested"]          # the workflow's λ grid
    assert_same(to_json({"s": out}), to_json({"s": ref}))
    u = cvflow.estimators.ustat(cube, loss="absolute", compare=["ridge(alpha=0.1)", 2])
    assert float(u["estimate"]) == pytest.approx(float(compute(cvflow.open(new), [(
        "ustat", {"compare": [0, 2]})])["ustat"]["estimate"]), rel=1e-12)


@pytest.mark.parametrize("args, message", [
    (("--loss", "zero_one"), "zero_one"),
    (("--lambdas", "0,x"), "--lambdas: '0,x' is not a comma-separated list"),
    (("--compare", "ridge(alpha=3)"), "ustat.compare"),
])
def test_bad_reanalysis_options_exit_2(stores, args, message):
    old, _ = stores
    res = run_cli("report", old, *args)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
