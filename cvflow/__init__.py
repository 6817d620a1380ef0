"""cvflow: cross-validation studies as a Dask workflow writing a Zarr prediction cube.

Python route (DESIGN.md section 8)::

    wf = cvflow.load_workflow("workflows/quickstart.yaml")
    result = cvflow.run(wf, store="quickstart.zarr")
    cube = cvflow.open("quickstart.zarr")
    cvflow.estimators.kfold(cube, loss="absolute")
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import estimators  # noqa: E402
from .engine import run  # noqa: E402
from .spec import load_workflow  # noqa: E402
from .store import open_cube as open  # noqa: E402,A001

__all__ = ["__version__", "estimators", "load_workflow", "open", "run"]
