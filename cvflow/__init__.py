"""cvflow: cross-validation studies as a Dask workflow writing a Zarr prediction cube."""
from __future__ import annotations

__version__ = "0.1.0"

from .store import open_cube as open  # noqa: E402,A001

__all__ = ["__version__", "open"]
