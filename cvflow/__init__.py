"""cvflow: cross-validation studies as a Dask workflow writing a Zarr prediction cube.

Python route (docs/guide/python.md; the layout: docs/developer/architecture.md)::

    wf = cvflow.load_workflow("workflows/quickstart.yaml")
    result = cvflow.run(wf, store="quickstart.zarr")
    cube = cvflow.open("quickstart.zarr")
    cvflow.estimators.kfold(cube, loss="absolute")

    study = cvflow.Study(make_pipeline(StandardScaler(), Ridge()),
                         param_grid={"ridge__alpha": [0.1, 1, 10]}, cv=5)
    result = study.run(X, y, store="study.zarr")      # X: numpy array or pandas DataFrame
    result.selected, result.refit()
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from .config import VERSION as __version__

# DESIGN CHOICE: the public names are imported on first use (PEP 562), so that `cvflow status`
# or `import cvflow.report` does not pay for the engine, the estimators and scikit-learn.
_LAZY = {"estimators": (".estimators", None), "run": (".execution.run", "run"),
         "load_workflow": (".workflow.spec", "load_workflow"), "open": (".store.cube", "open_cube"),
         "Study": (".study", "Study"), "StudyResult": (".study", "StudyResult"),
         "trust": (".trust", None),
         "cv_results": (".report.tables", "cv_results"), "SearchCV": (".search", "SearchCV"),
         "RandomizedSearchCV": (".search.randomized", "RandomizedSearchCV")}

# The modules that moved when the package was split into folders by role (issue 30,
# docs/developer/architecture.md): their old names still import, with a DeprecationWarning,
# for one release. Removed in 0.3.
MOVED = {
    "attributes": "store.attributes", "blocks": "execution.sizing", "checks": "fitting.trial",
    "coords": "store.coords", "data": "workflow.data",
    "describe": "objects", "designs": "workflow.designs", "engine": "execution.run",
    "extend": "execution.extend", "failures": "report.failures", "fit": "fitting.block",
    "integrity": "store.integrity", "isolated": "fitting.isolated",
    "limits": "workflow.limits", "live": "report.live", "location": "store.location",
    "lock": "store.lock", "loop": "execution.loop", "losses": "estimators.losses",
    "paths": "fitting.paths", "plan": "execution.run_plan", "preflight": "execution.preflight",
    "progress": "execution.progress", "report_html": "report.html",
    "spec": "workflow.spec", "summary": "report.summary", "tables": "report.tables",
    "tasks": "execution.tasks", "plots": "report.plots", "plots.grid": "report.plots.grid",
    "plots.oof": "report.plots.oof", "plots.style": "report.plots.style",
    # renamed to say what differs from a near-twin (issue 39 item 4)
    "execution.plan": "execution.run_plan", "estimators.plan": "estimators.study_size",
    "execution.racing": "execution.race_runner", "workflow.racing": "workflow.racing_options",
    "workflow.scorers": "workflow.scorer_specs", "search.scorings": "search.scoring_arg",
}
# modules whose names went to several new ones: the old name answers each of their names
SPLIT = {"racing": ("execution.race_runner", "report.racing", "workflow.racing_options"),
         "learners": ("fitting.learners", "workflow.params"),
         "cluster": ("execution.schedulers", "execution.profiles")}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import cvflow.engine`` -> the module now at ``cvflow.execution.run``, with a DeprecationWarning."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
        if old not in MOVED and old not in SPLIT:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None                         # a placeholder module: exec_module decides what the name holds

    def exec_module(self, module):
        name = module.__spec__.name
        old = name[len(__name__) + 1:]
        new = [f"{__name__}.{m}" for m in SPLIT.get(old, (MOVED.get(old),))]
        warnings.warn(f"{name} moved to {' and '.join(new)}; the old name goes in cvflow 0.3",
                      DeprecationWarning, stacklevel=2)
        if len(new) == 1:
            # DESIGN CHOICE: the old name is bound to the new module in sys.modules, which the
            # import system reads back after exec_module; the new module's own attributes are
            # left alone. Returning it from create_module made importlib set its __spec__ to the
            # old name's (`cvflow.execution.run_plan.__spec__.name == "cvflow.plan"`, issue 39;
            # tests/test_layout.py::test_every_old_name_imports_the_new_module).
            sys.modules[name] = importlib.import_module(new[0])
            return
        module.__doc__ = f"Moved to {', '.join(new)}."

        def __getattr__(attr):
            for target in new:
                found = importlib.import_module(target)
                if hasattr(found, attr):
                    return getattr(found, attr)
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")

        module.__getattr__ = __getattr__    # type: ignore[method-assign]


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())

__all__ = ["__version__", "RandomizedSearchCV", "SearchCV", "Study", "StudyResult", "cv_results",
           "estimators", "load_workflow", "open", "run", "trust"]


def __getattr__(name: str):
    if name not in _LAZY:
        # DESIGN CHOICE: a submodule the docs call through the package (`cvflow.report.racing.summary`,
        # `cvflow.report.summary.rows`, `cvflow.report.compute`, `cvflow.report.live.enable_routes`) is
        # imported on first use too, as `import cvflow.execution.race_runner` would (scipy does the same);
        # before, it was an AttributeError unless something had imported it already
        # (tests/test_startup.py::test_submodules_resolve_through_the_package).
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module 'cvflow' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module, __name__)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
