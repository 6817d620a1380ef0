"""The cube's coordinates on ``param`` from a list of params (the schema of docs/guide/cube.md).

Apart from :mod:`cvflow.store.cube` so that reading them needs no zarr: ``cvflow validate`` builds
them from the workflow's grid to resolve estimator options (``compare: [ridge(alpha=1)]``) as
the estimators resolve them on the cube.
"""
from __future__ import annotations

import numpy as np

RESERVED = {
    "pred", "done", "failed", "error", "fit_seconds", "train", "fold", "fold_split",
    "pair_split", "subset_split", "y", "is_test", "X", "sample_weight", "learner", "output",
    "param_json",
    "param", "split", "sample", "repeat", "feature", "outer", "inner", "group", "member",
    "class",
}


def hyperparameter_coord(name: str) -> str:
    """Coordinate name of a hyperparameter (prefixed only if it collides with the schema)."""
    return f"param_{name}" if name in RESERVED or name.startswith("split_") else name


def param_coords(params) -> dict:
    """Coordinates on ``param`` from a list of :class:`cvflow.workflow.params.Param`."""
    names = sorted({k for p in params for k in p.hyper})
    coords = {
        "learner": ("param", np.array([p.learner for p in params], dtype=object)),
        "output": ("param", np.array([p.output for p in params], dtype=object)),
        "param_json": ("param", np.array([p.to_json() for p in params], dtype=object)),
    }
    for name in names:
        values = [p.hyper.get(name) for p in params]
        present = [v for v in values if v is not None]
        numeric = all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in present)
        if numeric:
            arr = np.array([np.nan if v is None else float(v) for v in values])
        else:
            arr = np.array(["" if v is None else str(v) for v in values], dtype=object)
        coords[hyperparameter_coord(name)] = ("param", arr)
    return coords

# The values of the cube's `split_kind` coordinate: the roles a split can play (docs/guide/cube.md).
SPLIT_KINDS: tuple[str, ...] = ("full", "fold", "pair", "subset")
