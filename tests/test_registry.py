"""Every estimator declares itself once (cvflow.estimators.registry): the design comes from the
declared roles, options are checked before any fit, results follow the declared schema."""
from __future__ import annotations

import pytest

from cvflow.cli import main
from cvflow.errors import InputError
from cvflow.estimators import REGISTRY, lookup
from cvflow.workflow.spec import load_workflow

from cvtest import QUICK, ridge_cube, run_cli, tree_digest

# options that make every estimator run on the cube below (two params to compare)
RUN_OPTIONS = {"ustat": {"compare": [0, 1]}, "nadeau_bengio": {"compare": [0, 1]},
               "corrected_t": {"compare": [0, 1]}, "bayes_t": {"compare": [0, 1]},
               "compare_all": {"params": [0, 1, 2]},
               "paired_5x2cv": {"compare": [0, 1]},
               "stability": {"lambdas": [0, 1]}, "bbc_cv": {"B": 50}, "cv_confidence": {"B": 50}}


@pytest.fixture(scope="module")
def every_role_cube():
    return ridge_cube(4)


@pytest.fixture(scope="module")
def five_by_two_cube():
    return ridge_cube(2, repeats=5)


def test_every_estimator_declares_roles_options_and_renderers():
    assert set(REGISTRY) >= {"kfold", "corrected_kfold", "stability", "stability_nested",
                             "nested_cv", "bates_ncv", "wald_cv", "ustat", "nadeau_bengio"}
    for name, spec in REGISTRY.items():
        assert spec.name == name and spec.func.__name__ == name
        assert spec.needs and set(spec.needs) <= {"full", "fold", "pair", "subset"}
        assert set(spec.terms) <= {"full", "fold", "pair", "oof", "change"}
        assert spec.results, f"{name} declares no result schema"
        assert all(o.doc for o in spec.options), f"{name}: every option says what it does"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_result_follows_the_declared_schema(every_role_cube, five_by_two_cube, name):
    spec = REGISTRY[name]
    cube = five_by_two_cube if name == "paired_5x2cv" else every_role_cube
    if name == "nested_compare":        # two learners: the three ridges relabelled as two
        cube = cube.assign_coords(learner=("param", ["small", "small", "large"]))
    result = spec(cube, **RUN_OPTIONS.get(name, {}))
    declared = {k.rstrip("?"): dims for k, dims in spec.results.items()}
    required = {k for k in spec.results if not k.endswith("?")}
    assert set(result.data_vars) <= set(declared), \
        f"{name}: undeclared results {sorted(set(result.data_vars) - set(declared))}"
    assert required <= set(result.data_vars), f"{name}: missing {sorted(required - set(result))}"
    for var, da in result.data_vars.items():
        assert da.dims == declared[var], f"{name}.{var}: dims {da.dims} != {declared[var]}"
    assert spec.text is None or all(isinstance(line, str) for line in spec.text(result))


def _workflow(tmp_path, estimators: str, extra: str = ""):
    wf = tmp_path / "wf.yaml"
    wf.write_text(QUICK.replace("estimators: [kfold]", f"estimators: {estimators}") + extra)
    return wf


@pytest.mark.parametrize("estimators,kinds", [
    ("[kfold]", {"fold", "full"}),
    ("[nested_cv]", {"fold", "pair", "full"}),
    ("[wald_cv, corrected_kfold]", {"fold", "full"}),
    ("[{ustat: {compare: [0, 1]}}]", {"subset"}),
    ("[bates_ncv, {nadeau_bengio: {compare: [0, 1]}}]", {"fold", "pair", "full", "subset"}),
])
def test_design_is_the_union_of_declared_roles(tmp_path, estimators, kinds):
    wf = load_workflow(_subset_workflow(tmp_path, estimators) if "subset" in kinds
                       else _workflow(tmp_path, estimators))
    assert wf.splits_needed() == kinds


def _subset_workflow(tmp_path, estimators):
    wf = tmp_path / "wf.yaml"
    wf.write_text(QUICK.replace("design: {folds: 5, seed: 0}",
                                "design: {folds: 5, seed: 0, subset: {size: 20, pairs: 4}}")
                  .replace("estimators: [kfold]", f"estimators: {estimators}"))
    return wf


BAD_OPTIONS = [
    ("[{stability_nested: {lambda: [0, 1]}}]",
     "estimators[0].stability_nested.lambda: unknown option of stability_nested; its options are: lambdas"),
    ("[{stability_nested: {lambdas: [0, -1]}}]", "estimators[0].stability_nested.lambdas: -1.0 is not a weight"),
    ("[{stability: {lambdas: []}}]", "estimators[0].stability.lambdas: [] is not a weight"),
    ("[kfold, {bates_ncv: {alpha: 1.5}}]",
     "estimators[1].bates_ncv.alpha: 1.5; the miscoverage level must be in (0, 1)"),
    ("[{wald_cv: {param: -1}}]", "estimators[0].wald_cv.param: -1; give a non-negative integer"),
    ("[{ustat: {compare: [0, 1, 2]}}]", "estimators[0].ustat.compare: [0, 1, 2]; give 1 to 2 params"),
    ("[{kfold: {alpha: 0.1}}]", "estimators[0].kfold.alpha: unknown option of kfold; its options are: average"),
    ("[{kfold: 3}]", "estimators[0].kfold: options must be a mapping"),
    ("[nosuch]", "estimators[0]: unknown estimator 'nosuch'"),
    ("[nosuch_module.f]", "estimators[0]: 'nosuch_module.f' does not import"),
    ("[numpy.sum]", "estimators[0]: numpy.sum has no `needs` attribute"),
    # options that name params, hyperparameters or repeats, checked against the grid (issue 27)
    ("[kfold, {corrected_t: {compare: ['ridge(alpha=1.0)', 'lasso(alpha=0.1)']}}]",
     "estimators[1].corrected_t.compare: no learner named 'lasso'; learners are ridge"),
    ("[{corrected_t: {compare: ['ridge(alpha=2.0)']}}]",
     "estimators[0].corrected_t.compare: no param of 'ridge' matches 'ridge(alpha=2.0)'; its "
     "params are 0: ridge(alpha=0.01); 1: ridge(alpha=0.1)"),
    ("[corrected_t]", "estimators[0].corrected_t.compare: the cube has 4 params; name the two"),
    ("[{bates_ncv: {param: 7}}]",
     "estimators[0].bates_ncv.param: 7 is not a param index; the grid has 4 params, use 0..3"),
    ("[{wald_cv: {compare: [0, 9]}}]",
     "estimators[0].wald_cv.compare: param index 9 is out of range; the cube has 4 params"),
    ("[{wald_cv: {param: 0, compare: [0, 1]}}]",
     "estimators[0].wald_cv: give either param or compare, not both"),
    ("[{cv_confidence: {repeat: 1}}]",
     "estimators[0].cv_confidence.repeat: 1; the design has 1 repeat(s), use 0..0"),
    ("[{cv_confidence: {simplest: {beta: max}}}]",
     "estimators[0].cv_confidence.simplest: no hyperparameter 'beta' in the grid; it has alpha"),
]


@pytest.mark.parametrize("estimators,fragment", BAD_OPTIONS, ids=[b[0] for b in BAD_OPTIONS])
def test_bad_option_refused_by_validate_with_one_line(tmp_path, capsys, estimators, fragment):
    wf = _workflow(tmp_path, estimators)
    code = main(["validate", str(wf)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{wf}: {fragment}" in err


def test_bad_option_refused_by_run_before_any_store(tmp_path, capsys):
    wf = _workflow(tmp_path, "[{stability_nested: {lambda: [0, 1]}}]")
    store = tmp_path / "s.zarr"
    assert main(["run", str(wf), "--store", str(store)]) == 2
    assert "stability_nested.lambda: unknown option" in capsys.readouterr().err
    assert not store.exists()


@pytest.mark.parametrize("estimators,fragment", [
    ("[{ustat: {a: 'ridge(alpha=5)', b: 0}}]",
     "estimators[0].ustat.compare: no param of 'ridge' matches 'ridge(alpha=5)'"),
    ("[{nadeau_bengio: {compare: [0, 0]}}]",
     "estimators[0].nadeau_bengio.compare: a and b are the same param (0)"),
    ("[ustat]", "estimators[0].ustat.compare: the cube has 4 params; name the two"),
])
def test_subset_options_refused_against_the_grid(tmp_path, capsys, estimators, fragment):
    wf = _subset_workflow(tmp_path, estimators)
    assert main(["validate", str(wf)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{wf}: {fragment}" in err


def test_options_naming_params_are_checked_against_the_grid():
    """Every option that names a param, a hyperparameter or a repeat has a declared check_grid,
    so validate (and run, before any fit) resolves it as the estimator will on the cube."""
    naming = {"compare", "a", "b", "param", "simplest", "repeat"}
    for name, spec in REGISTRY.items():
        if naming & {o.name for o in spec.options}:
            assert spec.check_grid is not None, name


def test_issue_27_bad_compare_never_reaches_a_store(tmp_path):
    """`{corrected_t: {compare: [ridge(alpha=1.0), lasso(alpha=0.1)]}}` naming no param of the
    grid: validate refuses it, run refuses it before any fit, an existing store is untouched."""
    base = ("data: {source: sklearn, name: diabetes}\nlearners:\n"
            "  - {name: ridge, class: sklearn.linear_model.Ridge, grid: {alpha: [0.5, 2.0]}}\n"
            "  - {name: lasso, class: sklearn.linear_model.Lasso, grid: {alpha: [0.5, 2.0]}}\n"
            "design: {folds: 3}\nexecution: {cluster: threads, workers: 1}\n")
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(base + "estimators: [kfold]\n")
    bad.write_text(base + "estimators: [kfold, {corrected_t: {compare: "
                          "[ridge(alpha=1.0), lasso(alpha=0.1)]}}]\n")
    fragment = (f"{bad}: estimators[1].corrected_t.compare: no param of 'ridge' matches "
                "'ridge(alpha=1.0)'; its params are 0: ridge(alpha=0.5); 1: ridge(alpha=2)")
    proc = run_cli("validate", bad)
    assert proc.returncode == 2 and proc.stderr == f"cvflow: error: {fragment}\n"
    store = tmp_path / "s.zarr"
    proc = run_cli("run", bad, "--store", store)
    assert proc.returncode == 2 and proc.stderr == f"cvflow: error: {fragment}\n"
    assert "fits to do" not in proc.stdout + proc.stderr and not store.exists()
    assert run_cli("run", good, "--store", store).returncode == 0
    before = tree_digest(store)
    proc = run_cli("run", bad, "--store", store)
    assert proc.returncode == 2 and proc.stderr == f"cvflow: error: {fragment}\n"
    assert tree_digest(store) == before
    proc = run_cli("report", store)           # the store kept no bad option
    assert proc.returncode == 0 and "corrected" not in proc.stdout


def test_options_are_normalised_before_they_reach_the_store(tmp_path):
    wf = load_workflow(_workflow(tmp_path, "[{stability_nested: {lambdas: [10, 0, 1]}}]"))
    assert wf.estimators == [("stability_nested", {"lambdas": [0.0, 1.0, 10.0]})]


def test_declared_terms_are_role_terms_roles():
    from cvflow.estimators import declare

    def mine(cube, *, loss=None):
        return cube

    with pytest.raises(ValueError, match=r"mine.terms: \('folds',\); give a tuple of full, "
                                         r"fold, train, change, pair, oof"):
        declare(mine, needs=("fold",), terms=("folds",))
    assert "mine" not in REGISTRY


def test_lookup_messages():
    with pytest.raises(InputError, match=r"estimators: unknown estimator 'kfolds'; available: .*kfold"):
        lookup("kfolds")
    assert lookup("kfold") is REGISTRY["kfold"]


def test_report_set_overrides_through_the_declared_checks(tmp_path, capsys, client):
    """--set is checked like the workflow's options: a bad value exits 2 and the store is kept."""
    from cvflow.execution.run import run

    wf = _workflow(tmp_path, "[kfold, {stability_nested: {lambdas: [0, 1]}}]")
    store = run(wf, store=tmp_path / "s.zarr", client=client).store
    before = tree_digest(store)
    assert main(["report", str(store), "--set", "stability_nested.lambda=[0, 1]"]) == 2
    err = capsys.readouterr().err
    assert "--set stability_nested.lambda: unknown option of stability_nested" in err
    assert main(["report", str(store), "--set", "stability_nested.lambdas=-2"]) == 2
    assert "--set stability_nested.lambdas: -2.0 is not a weight" in capsys.readouterr().err
    assert main(["report", str(store), "--set", "bates_ncv.alpha=0.2"]) == 2
    assert "--set bates_ncv: the store's workflow does not ask for this estimator" in \
        capsys.readouterr().err
    assert main(["report", str(store), "--set", "nolambda"]) == 2
    assert "is not ESTIMATOR.OPTION=VALUE" in capsys.readouterr().err
    assert main(["report", str(store), "--json", "--set", "stability_nested.lambdas=[0, 2, 30]"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["stability_nested"]["coords"]["lambda"]["values"] == [0.0, 2.0, 30.0]
    assert main(["report", str(store), "--json", "--lambdas", "0,5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stability_nested"]["coords"]["lambda"]["values"] == [0.0, 5.0]
    assert tree_digest(store) == before


def test_every_declaring_module_is_listed_and_imported_only_when_read():
    """registry.BUILT_IN names every estimator a module of the package declares, with that
    module (a name missing there would be unknown to every workflow); in a fresh process, the
    names are listed without importing any estimator's module, and reading one imports its own
    (issue 41 item 2)."""
    import importlib
    import json
    import pkgutil
    import subprocess
    import sys

    import cvflow.estimators as package
    import fault_helpers as fh
    from cvflow.estimators.registry import BUILT_IN

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"cvflow.estimators.{info.name}")
    declared = {name: spec.func.__module__.rpartition(".")[2] for name, spec in REGISTRY.items()
                if spec.func.__module__.startswith("cvflow.estimators.")}
    assert declared == BUILT_IN
    code = ("import json, sys\nfrom cvflow.estimators.registry import BUILT_IN, REGISTRY\n"
            "def modules():\n"
            "    return sorted(m.rpartition('.')[2] for m in sys.modules\n"
            "                  if m.rpartition('.')[2] in BUILT_IN.values())\n"
            "names, before = list(REGISTRY), modules()\n"
            "func = REGISTRY['bbc_cv'].func.__name__\n"
            "print(json.dumps([names, 'ustat' in REGISTRY, before, modules(), func]))\n")
    out = subprocess.run([sys.executable, "-c", code], env=fh.cli_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names, known, before, after, func = json.loads(out.stdout)
    assert names == list(BUILT_IN) and known and func == "bbc_cv"
    assert before == []
    assert "bbc_cv" in after and "ustat" not in after
