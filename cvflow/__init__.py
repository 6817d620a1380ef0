"""cvflow: cross-validation studies as a Dask workflow writing a Zarr prediction cube.

Python route (DESIGN.md section 8)::

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
import importlib.util

__version__ = "0.1.0"

# DESIGN CHOICE: the public names are imported on first use (PEP 562), so that `cvflow status`
# or `import cvflow.report` does not pay for the engine, the estimators and scikit-learn.
_LAZY = {"estimators": (".estimators", None), "run": (".engine", "run"),
         "load_workflow": (".spec", "load_workflow"), "open": (".store", "open_cube"),
         "Study": (".study", "Study"), "StudyResult": (".study", "StudyResult"),
         "trust": (".trust", None),
         "cv_results": (".tables", "cv_results"), "SearchCV": (".search", "SearchCV")}

__all__ = ["__version__", "SearchCV", "Study", "StudyResult", "cv_results", "estimators",
           "load_workflow", "open", "run", "trust"]


def __getattr__(name: str):
    if name not in _LAZY:
        # DESIGN CHOICE: a submodule the docs call through the package (`cvflow.racing.summary`,
        # `cvflow.summary.rows`, `cvflow.report.compute`, `cvflow.live.enable_routes`) is
        # imported on first use too, as `import cvflow.racing` would (scipy does the same);
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
