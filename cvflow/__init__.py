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

__version__ = "0.1.0"

from . import estimators  # noqa: E402
from .engine import run  # noqa: E402
from .spec import load_workflow  # noqa: E402
from .store import open_cube as open  # noqa: E402,A001
from .study import Study  # noqa: E402

__all__ = ["__version__", "Study", "estimators", "load_workflow", "open", "run"]
