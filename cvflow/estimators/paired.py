"""What the tests on the fold design read from the cube: which params to compare, their fold
scores and their out-of-fold losses, as plain numpy arrays (the kernels' inputs).

Used by :mod:`corrected_t`, :mod:`paired_5x2cv`, :mod:`bbc_cv` and :mod:`cv_confidence`.
"""
from __future__ import annotations


import numpy as np
import xarray as xr

from ..errors import InputError
from ._cube import param_label, role_terms
from .kfold import fold_sizes
from .ustat import compare_pair


def compare_params(cube: xr.Dataset, compare, where: str) -> tuple[int, int | None]:
    """(a, b) from ``compare=[a, b]`` or ``[a]`` (b None: one-learner mode); a cube with one or
    two params needs no ``compare``. Params are named as in :func:`_cube.resolve_param`."""
    return compare_pair(cube, compare, None, None, where)


def compare_check(*, two: bool = False):
    """A declaration's ``check_grid``: ``compare`` resolves to params of the grid (two of them
    with ``two``), as :func:`compare_params` resolves it on the cube."""
    def check(grid: xr.Dataset, design, options: dict, where: str) -> None:
        _, b = compare_params(grid, options.get("compare"), where)
        if two and b is None:
            raise InputError(f"{where}.compare: name two params to compare, e.g. compare: [0, 1]")
    return check


def compare_attrs(cube: xr.Dataset, a: int, b: int | None) -> dict:
    """attrs ``mode``, ``a`` and ``b`` (JSON settings) of a two-learner (or one-learner) result."""
    return {"mode": "error" if b is None else "difference",
            "a": param_label(cube, a),
            "b": param_label(cube, b) if b is not None else {}}


def fold_scores(cube: xr.Dataset, loss: str, params: list[int], what: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Fold scores mean_{i∈N_j} ℓ_i(h, fold j) of ``params`` (P, R, K) and |N_j| (R, K).

    Reads only the fold splits of those params; a failed fit gives NaN.
    """
    sizes = fold_sizes(cube)
    terms = role_terms(cube.isel(param=list(params)), loss, roles=("fold",), what=what)
    return terms["fold_sum"] / sizes, sizes


def out_of_fold(cube: xr.Dataset, loss: str, what: str, params: list[int] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold losses e_i(h) = ℓ_i(h, fold j(i)) on the analysis samples, (P, R, n), and
    their fold labels (R, n). NaN where the fold fit failed."""
    from .bates import out_of_fold_losses

    sub = cube if params is None else cube.isel(param=list(params))
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    e = out_of_fold_losses(sub, loss, what=what).transpose("param", "repeat", "sample").values
    return np.asarray(e)[:, :, analysis], np.asarray(cube["fold"].values)[:, analysis]
