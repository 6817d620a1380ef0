"""scikit-learn's own GridSearchCV and RandomizedSearchCV tests, generated at collection time
from the installed copy.

Nothing of scikit-learn is kept in this repository: :func:`export` reads the installed
``sklearn/model_selection/tests/test_search.py`` (found from ``sklearn.__file__``), writes one
copy per run mode into a cache directory under the system's temporary directory, imports it, and
returns its tests that use ``GridSearchCV`` (or ``RandomizedSearchCV``: the ``random_`` modes) for
a thin test module to expose to pytest:

* ``"searchcv"``: the copy's ``GridSearchCV`` is :func:`shim.GridSearchCV` (``cvflow.SearchCV``).
  The one edit is appended to the line of the ``from sklearn.model_selection import (...)``
  statement, so every line number equals the installed file's.
* ``"gridsearchcv"``: the file unchanged (scikit-learn's GridSearchCV): the baseline, which tests
  pass at all with this scikit-learn and this pytest configuration (the denominator).
* ``"random_searchcv"`` and ``"randomizedsearchcv"``: the same for ``RandomizedSearchCV``
  (:func:`shim.RandomizedSearchCV`, ``cvflow.RandomizedSearchCV``) and its baseline.

A test "uses GridSearchCV" when its definition (decorators included) names ``GridSearchCV``, or
names a module-level helper that does (``_searchcv_callback_test_cases``), transitively. A test
parametrized over several search classes keeps only its GridSearchCV cases: conftest.py deselects
the cases whose parameters are another search (:func:`other_search`). Likewise for
``RandomizedSearchCV`` in the ``random_`` modes.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import sklearn

SOURCE = Path(sklearn.__file__).parent / "model_selection" / "tests" / "test_search.py"
#: mode -> the scikit-learn search its tests use; the modes in SHIMMED rebind it to the shim's
SEARCH = {"searchcv": "GridSearchCV", "gridsearchcv": "GridSearchCV",
          "random_searchcv": "RandomizedSearchCV", "randomizedsearchcv": "RandomizedSearchCV"}
MODES = tuple(SEARCH)
SHIMMED = ("searchcv", "random_searchcv")


def shim_name(search: str) -> str:
    return f"_cvflow_compat_{search}"


def edit(search: str) -> str:
    return (f"; {search} = {shim_name(search)}  # cvflow compat: {search} is cvflow's "
            "(tests/compat/shim.py)")


def module_name(mode: str) -> str:
    return f"cvflow_compat_test_search_{mode}"


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """name -> the top-level statement that defines it (functions, classes, assignments)."""
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs[name.id] = node
    return defs


def selected_tests(text: str, search: str = "GridSearchCV") -> list[str]:
    """The top-level ``test_*`` functions that use ``search`` (directly or through a helper)."""
    tree = ast.parse(text)
    defs = _top_level_names(tree)
    uses = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            for name, node in defs.items()}
    grid = {search}
    changed = True
    while changed:
        changed = False
        for name, used in uses.items():
            if name not in grid and used & grid:
                grid.add(name)
                changed = True
    return [name for name, node in defs.items()
            if name.startswith("test_") and isinstance(node, ast.FunctionDef) and name in grid]


def rewrite(text: str, mode: str) -> str:
    """The installed file for ``mode``: unchanged for a baseline; for a shimmed mode, the name
    of its search rebound to the shim right after scikit-learn's import of it (same line)."""
    if mode not in SHIMMED:
        return text
    search = SEARCH[mode]
    tree = ast.parse(text)
    for node in tree.body:
        if (isinstance(node, ast.ImportFrom) and node.module == "sklearn.model_selection"
                and any(a.name == search and a.asname is None for a in node.names)):
            lines = text.splitlines(keepends=True)
            end = node.end_lineno - 1
            lines[end] = lines[end].rstrip("\n") + edit(search) + "\n"
            return "".join(lines)
    raise RuntimeError(f"{SOURCE}: no 'from sklearn.model_selection import {search}' "
                       "statement; the compat generator needs updating for this scikit-learn")


def cache_dir(text: str) -> Path:
    digest = hashlib.sha256(text.encode() + Path(__file__).read_bytes()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return (Path(tempfile.gettempdir()) / f"cvflow-compat-{uid}"
            / f"sklearn-{sklearn.__version__}-{digest}")


def generate(mode: str) -> Path:
    """Write the copy for ``mode`` (atomically; reused while the installed file is the same)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    text = SOURCE.read_text(encoding="utf-8")
    path = cache_dir(text) / f"test_search_{mode}.py"
    new = rewrite(text, mode)
    if not path.exists() or path.read_text(encoding="utf-8") != new:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, path)
    return path


def load(mode: str):
    """Import the generated copy for ``mode`` (once per process) as its own module."""
    name = module_name(mode)
    if name in sys.modules:
        return sys.modules[name]
    path = generate(mode)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if mode in SHIMMED:
        import shim

        setattr(module, shim_name(SEARCH[mode]), getattr(shim, SEARCH[mode]))
    sys.modules[name] = module          # pickle finds the classes the tests define
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def export(mode: str) -> dict:
    """The generated module's tests of its search, for a test module's ``globals()`` (the
    module is skipped where scikit-learn was installed without its tests)."""
    if not SOURCE.exists():
        import pytest

        pytest.skip(f"scikit-learn {sklearn.__version__} was installed without its tests "
                    f"({SOURCE} is missing)", allow_module_level=True)
    module = load(mode)
    return {name: getattr(module, name)
            for name in selected_tests(SOURCE.read_text(encoding="utf-8"), SEARCH[mode])}


def other_search(value, mode: str = "searchcv") -> bool:
    """A parameter value that is a search other than the mode's (the class or an instance):
    for GridSearchCV, RandomizedSearchCV, HalvingGridSearchCV, HalvingRandomSearchCV. (The
    shim's search is a function, never a BaseSearchCV.)"""
    import sklearn.model_selection as ms
    from sklearn.model_selection._search import BaseSearchCV

    cls = value if isinstance(value, type) else type(value)
    return issubclass(cls, BaseSearchCV) and not issubclass(cls, getattr(ms, SEARCH[mode]))
