"""Start-up: each command of the `cvflow` program imports only what it uses, and the program
ends without the interpreter's garbage-collected teardown (cli.console)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import cvflow
import fault_helpers as fh
from cvtest import QUICK

HEAVY = ("numpy", "sklearn", "scipy", "dask", "dask.array", "distributed", "zarr", "xarray",
         "bokeh", "tornado", "cvflow.execution.run", "cvflow.estimators")
# the program as `python -m cvflow ARGS` runs it (cvflow/__main__.py); what it imported and
# whether the heap was frozen are printed by an atexit handler, after the command
PROBE = """\
import atexit, gc, runpy, sys
atexit.register(lambda: print("MODULES", *[m for m in {heavy!r} if m in sys.modules],
                              "FROZEN" if gc.get_freeze_count() else "", flush=True))
runpy.run_module("cvflow", run_name="__main__", alter_sys=True)
"""


def _program(*argv: str, code: int = 0) -> set[str]:
    """The heavy modules `python -m cvflow ARGV` imported; checks its exit code and that it
    ended through cli.console (the heap frozen, atexit handlers still run)."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv],
                         env=fh.cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == code, out.stderr
    words = out.stdout.splitlines()[-1].split()
    assert words[0] == "MODULES" and words[-1] == "FROZEN", out.stdout
    return set(words[1:-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("startup")
    (tmp / "wf.yaml").write_text(QUICK)
    cvflow.run(tmp / "wf.yaml", store=tmp / "s.zarr", cluster="threads")
    return tmp


def test_import_cvflow_imports_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", f"import sys, cvflow; print(*[m for m in "
                          f"{HEAVY!r} if m in sys.modules])"], env=fh.cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


def test_status_reads_the_store_without_dask_or_sklearn(store):
    # issue 41 item 3: no xarray where no Dataset is built (the store read through zarr); the
    # estimators' registry is imported by the reports' module, not an estimator (it imports each
    # estimator's module when its name is read)
    assert _program("status", str(store / "s.zarr")) == {"numpy", "zarr", "cvflow.estimators"}


def test_report_needs_no_cluster_no_learner_library_and_no_plotting(store):
    got = _program("report", str(store / "s.zarr"))
    # xarray imports dask.array itself once it wraps a numpy array and dask is installed
    assert {"zarr", "xarray", "dask.array", "cvflow.estimators"} <= got
    assert not got & {"sklearn", "distributed", "cvflow.execution.run", "bokeh", "tornado"}


def test_report_html_adds_bokeh_but_no_cluster(store, tmp_path):
    # its figures reduce the lazy cube on dask's synchronous scheduler, named so that dask does
    # not look for (import) a distributed Client; the fit-time note still imports the learner
    # classes to tell path-fitted grids (cvflow.fitting.paths.kernel_of)
    got = _program("report", str(store / "s.zarr"), "--html", str(tmp_path / "r.html"))
    assert "bokeh" in got
    assert not got & {"distributed", "cvflow.execution.run"}


def test_validate_imports_the_learners_but_no_dask_and_no_store(store):
    got = _program("validate", str(store / "wf.yaml"))
    assert "sklearn" in got     # the learners are checked by importing them
    assert not got & {"dask", "dask.array", "distributed", "zarr", "cvflow.execution.run", "bokeh",
                      "tornado"}


def test_a_small_run_in_this_process_starts_no_web_server(store, tmp_path):
    got = _program("run", str(store / "wf.yaml"), "--store", str(tmp_path / "s.zarr"),
                   "--cluster", "threads")
    # without a dashboard, the threads route's own pool, not distributed's scheduler
    assert {"sklearn", "zarr", "cvflow.execution.run"} <= got
    assert not {"bokeh", "distributed", "tornado"} & got      # no web server, nothing to start


def test_a_run_asking_for_a_dashboard_in_this_process_starts_distributed(store, tmp_path):
    got = _program("run", str(store / "wf.yaml"), "--store", str(tmp_path / "s.zarr"),
                   "--cluster", "threads", "--dashboard-port", "0")
    assert {"distributed", "bokeh"} <= got


def test_a_refused_command_exits_2_through_the_same_ending(store):
    assert "sklearn" not in _program("status", str(store), code=2)     # not a store


def test_public_names_resolve_lazily():
    code = ("import sys, cvflow; assert 'cvflow.execution.run' not in sys.modules; "
            "from cvflow import run, open, load_workflow, estimators; "
            "print(json.dumps([run.__module__, open.__name__, estimators.__name__]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], env=fh.cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["cvflow.execution.run", "open_cube", "cvflow.estimators"]


def test_submodules_resolve_through_the_package(store):
    """`import cvflow` then `cvflow.report.racing.summary(...)`, `cvflow.report.summary.rows`, ... as the docs
    write them, in a fresh interpreter where nothing imported those modules before; a name
    that is neither a public name nor a module is still an AttributeError naming it."""
    code = ("import json, sys, cvflow; assert 'cvflow.execution.race_runner' not in sys.modules; "
            "cube = cvflow.open(sys.argv[1]); "
            "names = [cvflow.report.racing.summary(cube), cvflow.report.summary.rows.__name__, "
            "cvflow.report.compute.__name__, cvflow.report.live.enable_routes.__name__, "
            "cvflow.store.cube.verify.__name__, cvflow.errors.ReproducibilityWarning.__name__]\n"
            "try:\n    cvflow.no_such_thing\nexcept AttributeError as err:\n"
            "    names.append(str(err))\n"
            "print(json.dumps(names))")
    out = subprocess.run([sys.executable, "-c", code, str(store / "s.zarr")], env=fh.cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [None, "rows", "compute", "enable_routes", "verify",
                                      "ReproducibilityWarning",
                                      "module 'cvflow' has no attribute 'no_such_thing'"]


def test_main_called_in_process_leaves_the_callers_heap_unfrozen(store, capsys):
    import gc

    from cvflow.cli import main

    assert main(["status", str(store / "s.zarr")]) == 0
    assert "fits" in capsys.readouterr().out
    assert gc.get_freeze_count() == 0
    # the program's report pauses the collector while it imports (cli._report); in-process the
    # caller's collector is left as it was, on and unfrozen
    assert main(["report", str(store / "s.zarr"), "--estimators", "kfold"]) == 0
    assert "selected" in capsys.readouterr().out
    assert gc.isenabled() and gc.get_freeze_count() == 0


def _is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module's, found by its file without importing anything."""
    import importlib.util
    from pathlib import Path

    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not rest:
        return spec is not None
    for where in spec.submodule_search_locations or ():
        path = Path(where, *rest)
        if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
            return True
    return False


def _function_imports() -> list[tuple[str, int, list[str]]]:
    """``(module, line, modules it loads)`` for each import statement inside a function of
    cvflow, but those in a ``try`` (an optional dependency, found or not at run time)."""
    import ast
    from pathlib import Path

    root = Path(cvflow.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = path.name == "__init__.py"
        module = ".".join(parts[:-1] if package else parts)
        tree = ast.parse(path.read_text())

        def visit(node, in_function=False, in_try=False):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function and not in_try:
                    if isinstance(child, ast.Import):
                        targets = [a.name for a in child.names]
                    else:
                        base = module if package else module.rpartition(".")[0]
                        for _ in range(child.level - 1):
                            base = base.rpartition(".")[0]
                        target = (f"{base}.{child.module}" if child.module else base) if child.level \
                            else child.module
                        # `from a import b`: b is a module of a, or a name a defines
                        targets = [target] + [f"{target}.{a.name}" for a in child.names
                                              if _is_module(f"{target}.{a.name}")]
                    out.append((module, child.lineno, targets))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                      in_try or (in_function and isinstance(child, ast.Try)))
        visit(tree)
    return out


@pytest.mark.slow
def test_an_import_inside_a_function_is_there_for_start_up():
    """Issue 39 item 6: an import statement inside a function is there because its module must
    not pay for it at import (it loads a module, outside cvflow, that its module does not load
    already, or a module of cvflow that a SearchCV's fit does not use: NOT_FOR_A_KFOLD_SEARCH)
    or because at the top it would close an import cycle; any other goes to the top.
    Each module's imports measured in a fresh interpreter."""
    from concurrent.futures import ThreadPoolExecutor

    found = _function_imports()
    names = sorted({m for module, _, targets in found for m in [module, *targets]})
    probe = ("import importlib, json, sys\ntry:\n    importlib.import_module(sys.argv[1])\n"
             "except ImportError:\n    print('null')\nelse:\n    print(json.dumps(sorted(sys.modules)))")

    def loads(name):
        out = subprocess.run([sys.executable, "-c", probe, name], env=fh.cli_env(),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.splitlines()[-1])
        return name, None if got is None else set(got)

    with ThreadPoolExecutor(2) as pool:        # threads that wait on child processes
        closure = dict(pool.map(loads, names))
    movable = []
    for module, line, targets in found:
        mods = [t for t in targets if closure[t] is not None and t in closure[t]]
        extra = set().union(*(closure[t] - closure[module] for t in mods))
        cycle = any(module in closure[t] for t in mods)
        # or a module a SearchCV's fit must not import (issue 41 item 2: import only what is used)
        off_search = all(t in NOT_FOR_A_KFOLD_SEARCH for t in mods) and mods
        if not cycle and not off_search and not {m for m in extra if not m.startswith("cvflow")}:
            movable.append(f"{module}:{line} ({', '.join(mods)})")
    assert not movable, "imports inside functions that cost their module nothing at the top:\n" \
        + "\n".join(movable)
# DESIGN.md section 3: a study without a store keeps its cube in memory and imports neither
# zarr nor xarray (which imports dask.array) until someone asks for the cube as a Dataset;
# issue 41 item 2: nor jinja2, which `import dask` imports (dask.widgets): the threads route
# runs its tasks on its own pool and reads the config's defaults without dask.config
# (cvflow.execution.threaded, cvflow.config._defaults_alone)
NOT_WITHOUT_A_STORE = ("zarr", "numcodecs", "xarray", "dask", "dask.array", "distributed",
                       "bokeh", "tornado", "jinja2")
# nor the estimators it does not use: the registry imports an estimator's module when its name
# is first read (cvflow.estimators.registry.BUILT_IN; issue 41 item 2)
NOT_FOR_A_KFOLD_SEARCH = tuple(f"cvflow.estimators.{m}" for m in (
    "bates", "bayes_t", "bbc_cv", "compare_all", "compare_learners", "corrected_t",
    "cv_confidence", "nested", "nested_compare", "paired_5x2cv", "stability", "study_size",
    "ustat",
    # nor what only search.report() and the estimators that read role terms use: the pass
    # engine and the corrected K-fold (the registry imports kfold for its declaration)
    "corrected", "one_pass", "pass_kernel", "pass_reads", "selection")) + (
    "cvflow.search.estimates", "cvflow.workflow.suite",
    # nor a store's run lock and attributes, the isolated fits, the notebook diagram, the
    # grouping of failed fits' messages
    "cvflow.store.lock", "cvflow.store.attributes", "cvflow.fitting.isolated", "cvflow.search.diagram",
    "cvflow.report.failures")
SEARCH = """\
import json, sys
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.tree import DecisionTreeClassifier
import cvflow
X, y = load_breast_cancer(return_X_y=True)
search = cvflow.SearchCV(DecisionTreeClassifier(random_state=0), {{"max_depth": [2, 4, 8]}}, cv=5)
search.fit(X, y{weights})
loaded = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps([loaded, search.best_index_.item(), search.best_score_,
                  search.cv_results_["mean_test_score"].tolist()]))
"""


@pytest.mark.parametrize("weights", ["", ", sample_weight=np.linspace(0.5, 2, len(y))"])
def test_a_search_without_a_store_imports_no_store_and_no_dataset_library(weights):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier

    out = subprocess.run([sys.executable, "-c", SEARCH.format(
        heavy=NOT_WITHOUT_A_STORE + NOT_FOR_A_KFOLD_SEARCH, weights=weights)],
                         env=fh.cli_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded, best, score, means = json.loads(out.stdout.splitlines()[-1])
    assert loaded == []
    # and the answers are GridSearchCV's (the in-memory cube scores what a store would)
    X, y = load_breast_cancer(return_X_y=True)
    params = {"sample_weight": np.linspace(0.5, 2, len(y))} if weights else {}
    reference = GridSearchCV(DecisionTreeClassifier(random_state=0), {"max_depth": [2, 4, 8]},
                             cv=5).fit(X, y, **params)
    assert best == reference.best_index_
    np.testing.assert_allclose(means, reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12)
    assert abs(score - reference.best_score_) <= 1e-12


def test_a_study_without_a_store_reads_its_dataset_only_when_asked(tmp_path):
    code = (
        "import json, sys, numpy as np, cvflow\n"
        "from sklearn.linear_model import Ridge\n"
        "rng = np.random.default_rng(0); X = rng.normal(size=(60, 3)); y = X @ [1., 2., 0.]\n"
        "result = cvflow.Study(Ridge(), param_grid={'alpha': [0.1, 1.0]}, cv=3).run(\n"
        "    X, y, cluster='threads', progress=False)\n"
        f"before = [m for m in {NOT_WITHOUT_A_STORE!r} if m in sys.modules]\n"
        "shape = list(result.cube['pred'].shape)\n"
        "print(json.dumps([before, 'xarray' in sys.modules, shape, result.store is None]))\n")
    out = subprocess.run([sys.executable, "-c", code], env=fh.cli_env(), capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [[], True, [2, 4, 60], True]
    assert list(tmp_path.iterdir()) == []            # no store written


# the modules `import cvflow` added to a process that had imported numpy, on main at 65c43fd
# and cb6d4a3 (issue 41 item 2: at most these)
IMPORT_CVFLOW_MODULES = 22


def test_import_cvflow_adds_no_more_modules_than_before():
    code = ("import sys, numpy; before = set(sys.modules); import cvflow; "
            "print(len(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], env=fh.cli_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) <= IMPORT_CVFLOW_MODULES


def test_a_search_in_a_process_writing_bytecode_reads_no_yaml():
    """Issue 41 item 2: where Python keeps bytecode, the config's defaults are kept beside it
    (cvflow.config.CACHE), so a search given as Python objects imports no yaml (~10 ms)."""
    env = {k: v for k, v in fh.cli_env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = SEARCH.format(heavy=("yaml",), weights="")
    for _ in range(2):                 # the first may write the cache
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])[0] == []
