"""The package's layout (docs/developer/architecture.md): folders by role, imports one way.

Read from the source with ``ast`` (imports inside functions and under ``TYPE_CHECKING``
count), so a cycle that only bites at run time, or a store module that reaches up into the
execution layer, fails here before it confuses the next engineer.
"""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cvflow"
ARCHITECTURE = ROOT / "docs" / "developer" / "architecture.md"

# Lowest first: a module may import its own unit or a unit of a lower layer.
LAYERS = [
    {"errors", "terminal", "config", "objects", "lazy", "stalls"},
    {"store"},
    {"estimators"},
    {"trust"},
    {"workflow"},
    {"fitting"},
    {"report"},
    {"execution"},
    {"testing", "study"},
    {"search", "cli"},
    {"__main__", "__init__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
MAX_TOP_MODULES = 12
MAX_LINES = 700


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The cvflow modules ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target or None

    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            if target.startswith("cvflow"):
                module = resolve(target)
                if module and module != name:
                    found.add(module)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_cycle_among_modules():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == "cvflow":
                continue            # the package's lazy names (PEP 562), not an import at load time
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_folders_import_only_their_own_layer_or_lower():
    against = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                     if _unit(a) != _unit(b) and b != "cvflow"
                     and RANK[_unit(b)] >= RANK[_unit(a)] and not (RANK[_unit(a)] == 0 == RANK[_unit(b)]))
    assert not against, "imports against the flow (docs/developer/architecture.md):\n" + "\n".join(against)


# Folders a layer above may still not import: the runner and the reports are siblings (each
# reads the store, neither needs the other's code; a record both read has its reader in store/,
# as racing's does: cvflow.store.attributes.race_record). The modules excepted, each with why.
# The live page the runner starts is named by the config (cvflow.execution.live-page).
APART: dict[tuple[str, str], set[tuple[str, str]]] = {("execution", "report"): set()}


def test_apart_folders_do_not_import_each_other():
    found = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                   if (_unit(a), _unit(b)) in APART and (a, b) not in APART[_unit(a), _unit(b)])
    assert not found, "imports between folders kept apart (tests/test_layout.py APART):\n" + \
        "\n".join(found)


def _private_imports() -> list[str]:
    """``a -> b`` for each module ``a`` importing a private module ``b`` (``_cube``, ``_readers``)
    from outside ``b``'s folder."""
    out = []
    for a, targets in _graph().items():
        for b in targets:
            folder, _, last = b.rpartition(".")
            if last.startswith("_") and not last.startswith("__") \
                    and a != folder and not a.startswith(folder + "."):
                out.append(f"{a} -> {b}")
    return sorted(out)


def test_no_private_module_is_imported_from_outside_its_folder():
    found = _private_imports()
    assert not found, "private modules imported from outside their folder:\n" + "\n".join(found)


# scikit-learn's private names cvflow may import, each in one adapter with a test that fails when
# scikit-learn changes it (issue 39 item 5)
SKLEARN_PRIVATE = {"cvflow.search.diagram": "the HTML diagram's _VisualBlock (tests/test_search_diagram.py)"}


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def test_no_private_scikit_learn_import_but_in_its_adapter():
    """A private scikit-learn module or name (``sklearn.metrics._scorer._BaseScorer``) breaks
    silently when scikit-learn renames it: where a public API answers, cvflow uses it."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sklearn":
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "sklearn"]
            else:
                continue
            found += [f"{name}: {n}" for n in names if _private(n) and name not in SKLEARN_PRIVATE]
    assert not found, "private scikit-learn names imported:\n" + "\n".join(found)


def test_every_unit_is_placed_in_a_layer():
    assert {_unit(m) for m in _modules()} <= set(RANK)


def test_few_modules_at_the_top_and_none_too_long():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long


def test_estimator_families_do_not_import_each_other():
    shared = {"_cube", "_readers", "np_roles", "guardrails", "registry", "selection", "fold_metrics",
              "losses", "labels", "cube_losses", "memory", "split_scores", "multiplicity", "np_across",
              "one_pass", "split_tables"}
    graph = _graph()
    crossing = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                      if a.startswith("cvflow.estimators.") and b.startswith("cvflow.estimators.")
                      and a.split(".")[2] not in shared and b.split(".")[2] not in shared)
    assert not crossing


DOCUMENTED = """
import warnings
warnings.simplefilter("error", DeprecationWarning)
import cvflow
from cvflow import Study, SearchCV, StudyResult, cv_results, estimators, load_workflow, open, run, trust
import cvflow.estimators, cvflow.report
from cvflow.estimators import kfold, corrected_kfold, nested_cv, ustat
from cvflow.report import compute
from cvflow.errors import InputError
from cvflow.testing import fit_cube
import cvflow.cli
assert callable(cvflow.report.compute) and callable(cvflow.estimators.kfold)
assert cvflow.trust.untrusted_code and cvflow.report.summary.rows and cvflow.report.racing.summary
print("ok")
"""


def test_documented_paths_import_in_a_fresh_interpreter():
    out = subprocess.run([sys.executable, "-c", DOCUMENTED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _old_names() -> list[str]:
    from cvflow import MOVED, SPLIT

    return [f"cvflow.{old}" for old in [*MOVED, *SPLIT]]


OLD_NAME = """
import importlib, sys, warnings
import cvflow
old = sys.argv[1]
short = old[len("cvflow."):]
new = [f"cvflow.{m}" for m in cvflow.SPLIT.get(short, (cvflow.MOVED.get(short),))]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = importlib.import_module(old)
said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
assert any(m.startswith(old + " moved to " + " and ".join(new)) for m in said), said
targets = [importlib.import_module(name) for name in new]
if len(new) == 1:        # the old name is the new module itself
    assert module is targets[0] and sys.modules[old] is targets[0] and module.__name__ == new[0]
    parent, _, last = old.rpartition(".")
    assert getattr(sys.modules[parent], last) is module
else:                    # the old name answers each name of the new modules, the first one's first
    assert module.__spec__.name == old
    for target in targets:
        for attr in [a for a in vars(target) if not a.startswith("_")]:
            first = next(t for t in targets if hasattr(t, attr))
            assert getattr(module, attr) is getattr(first, attr), (old, attr)
for name, target in zip(new, targets):
    assert target.__name__ == name and target.__spec__.name == name, (name, target.__spec__.name)
print("ok")
"""


@pytest.mark.parametrize("old", _old_names())
def test_every_old_name_imports_the_new_module(old):
    """Each name in MOVED and SPLIT (cvflow/__init__.py), in a fresh interpreter: a
    DeprecationWarning naming the new place, the new module's names, and the new module's own
    ``__spec__`` left alone (it said ``cvflow.plan`` for ``cvflow.execution.run_plan``, issue 39)."""
    out = subprocess.run([sys.executable, "-c", OLD_NAME, old], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


EVERY_OLD_NAME_AFTER_THE_NEW = """
import importlib, sys, warnings
import cvflow
new = sorted({f"cvflow.{m}" for m in [*cvflow.MOVED.values(), *sum(cvflow.SPLIT.values(), ())]})
with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    specs = {name: importlib.import_module(name).__spec__ for name in new}
    importlib.import_module("cvflow.store")        # a folder now: the package itself, no warning
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for old in sys.argv[1:]:
        importlib.import_module(old)
changed = [name for name in new if sys.modules[name].__spec__ is not specs[name]
           or specs[name].name != name]
assert not changed, changed
print("ok")
"""


def test_old_names_imported_after_the_new_modules_leave_them_alone():
    out = subprocess.run([sys.executable, "-c", EVERY_OLD_NAME_AFTER_THE_NEW, *_old_names()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
FILE = re.compile(r"[\w./-]+(?:\.(?:py|md|yaml|rst|toml)|/)")


def _top_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _walk(parts: list[str], old: set[str]) -> bool:
    """Whether ``parts`` is a module, or a module and attributes below it; not through an old
    module name (the page cites the new ones)."""
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        if any(name == o or name.startswith(o + ".") for o in old):
            return False
        try:
            found = importlib.import_module(name)
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def _resolves(dotted: str, modules: dict[str, Path], old: set[str],
              defined: dict[str, set[str]]) -> bool:
    """A name as the page writes it: from the package (``store.cube.open_cube``), from a library
    (``distributed.Client``), or from a module's last name (``_cube.role_terms``) or a name a
    module defines (``Study.run``, ``Workflow.build``)."""
    parts = dotted.split(".")
    tries = [parts] if parts[0] == "cvflow" else [["cvflow", *parts], parts]
    tries += [m.split(".") + parts[1:] for m in modules if m.rsplit(".", 1)[-1] == parts[0]]
    tries += [m.split(".") + parts for m in modules if parts[0] in defined[m]]
    return any(_walk(t, old) for t in tries)


def test_every_name_the_architecture_page_cites_resolves():
    """Each `dotted.name` of docs/developer/architecture.md is a module or a module's attribute,
    each `file.py` or `folder/` exists, each `cvflow.*` config key is declared: the map says
    where things are now (it cited `store.cube.write_pred` after it moved, issue 39). The old
    module names the page lists as old are accepted as such."""
    from cvflow import MOVED, SPLIT
    from cvflow.config import SCHEMA

    old = {f"cvflow.{name}" for name in [*MOVED, *SPLIT]}
    modules = _modules()
    defined = {m: _top_names(path) for m, path in modules.items()}
    wrong = []
    for span in re.findall(r"`([^`\n]+)`", ARCHITECTURE.read_text()):
        name = span.split("(")[0].strip()
        if name in SCHEMA or name in old:
            continue
        if FILE.fullmatch(name):
            bare = name.rstrip("/")
            if not any((base / bare).exists() for base in (ROOT, PACKAGE, ARCHITECTURE.parent)) \
                    and not any(PACKAGE.rglob(bare)):
                wrong.append(span)
        elif DOTTED.fullmatch(name) and not _resolves(name, modules, old, defined):
            wrong.append(span)
    assert not wrong, "docs/developer/architecture.md cites names that do not resolve: " + \
        ", ".join(sorted(set(wrong)))
