"""What several estimators read from the cube, in one module (STYLE: estimators share their
readers here and never import each other).

- the fold design: :func:`fold_sizes` (|N_j|) and :func:`fold_scores` (the fold scores of the
  params a paired test compares); the K-fold estimate from the fold sums is
  :func:`cvflow.estimators.split_scores.kfold_scores`;
- the inner K-fold of nested CV: :func:`inner_score` (the score s_t(h) on D \\ N_t) and
  :func:`nested_choice` (the per-outer choice and its pooled outer loss); nested_cv,
  stability_nested, nested_compare, bates_ncv;
- the out-of-fold losses e_i(h) = ℓ_i(h, fold j(i)): :func:`oof_losses`,
  :func:`out_of_fold_losses`, :func:`out_of_fold` (bates_ncv, wald_cv, bbc_cv, cv_confidence);
- the params a test compares: :func:`compare_pair`, :func:`compare_params`,
  :func:`compare_check`, :func:`compare_attrs` (ustat, nadeau_bengio, wald_cv, corrected_t,
  bayes_t, paired_5x2cv).

Each reads the cube through :func:`cvflow.estimators._cube.role_terms` (or takes its sums)
and returns plain arrays or a labelled Dataset; none imports an estimator.
"""
from __future__ import annotations

import numpy as np
from ..lazy import xarray as xr

from ..errors import InputError
from . import np_roles
from ._cube import role_terms
from .labels import param_label, resolve_param


# ----------------------------------------------------------------------------------------
# the fold design
# ----------------------------------------------------------------------------------------

def fold_sizes(cube: xr.Dataset) -> np.ndarray:
    """|N_j| of every fold of every repeat; shape (repeat, outer)."""
    return np_roles.fold_members(cube["fold"].values, int(cube.sizes["outer"])).sum(-1)


def fold_scores(cube: xr.Dataset, loss: str, params: list[int], what: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Fold scores mean_{i∈N_j} ℓ_i(h, fold j) of ``params`` (P, R, K) and |N_j| (R, K).

    Reads only the fold splits of those params; a failed fit gives NaN.
    """
    sizes = fold_sizes(cube)
    terms = role_terms(cube.isel(param=list(params)), loss, roles=("fold",), what=what)
    return terms["fold_sum"] / sizes, sizes


# ----------------------------------------------------------------------------------------
# the inner K-fold of nested CV
# ----------------------------------------------------------------------------------------

def inner_score(inner_sum: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``s_t(h) = Σ_{l≠t} Σ_{i∈N_l} ℓ_i(h, pair(t, l)) / (n − |N_t|)`` (eq. 8 of Cory-Wright & Gómez).

    The pooled K-fold estimate on D \\ N_t, the same estimator (docs/guide/estimators.md) the final
    selection uses on D. ``inner_sum`` (param, repeat, outer, inner) from :func:`role_terms`
    (0 on the diagonal), ``sizes`` (repeat, outer); returns (param, repeat, outer). A failed
    pair fit makes the param's score NaN (never skipped).
    """
    rest = sizes.sum(axis=1, keepdims=True) - sizes
    return inner_sum.sum(axis=3) / rest


def nested_choice(criterion: np.ndarray, fold_sum: np.ndarray, sizes: np.ndarray,
                  extra_dims: tuple[str, ...] = ()) -> xr.Dataset:
    """Per-outer choice ``h_t = argmin_h criterion`` and its outer loss, pooled.

    Parameters
    ----------
    criterion : ndarray (param, repeat, outer, *extra_dims)
        The inner criterion of each outer fold (e.g. with a trailing ``lambda`` axis).
    fold_sum : ndarray (param, repeat, outer)
        Σ_{i∈N_t} ℓ_i(h, fold t).
    sizes : ndarray (repeat, outer)
        |N_t|.

    Returns
    -------
    Dataset with ``chosen`` (repeat, outer, ...) param index (ties to the first, NaN params
    skipped, -1 if all NaN), ``outer_sum`` = m_t = Σ_{i∈N_t} ℓ_i(h_t, fold t), ``outer_score``
    = m_t / |N_t|, ``estimate_repeat`` (repeat, ...) = Σ_t m_t / n and ``estimate`` (...) its
    mean over repeats: the nested CV error.
    """
    picks = np_roles.nested_choice(criterion, fold_sum, sizes)
    dims = ("repeat", "outer") + tuple(extra_dims)
    extra = (None,) * len(extra_dims)
    return xr.Dataset({
        "chosen": (dims, picks["chosen"]),
        "outer_sum": (dims, picks["outer_sum"]),
        "outer_score": (dims, picks["outer_sum"] / sizes[(...,) + extra]),
        "estimate_repeat": (("repeat",) + tuple(extra_dims), picks["estimate_repeat"]),
        "estimate": (tuple(extra_dims), picks["estimate_repeat"].mean(axis=0)),
    })


# ----------------------------------------------------------------------------------------
# out-of-fold losses
# ----------------------------------------------------------------------------------------

def oof_losses(terms: dict) -> xr.DataArray:
    """The ``oof_loss`` term of :func:`role_terms` (role "oof"), dims (param, repeat, sample)."""
    return xr.DataArray(terms["oof_loss"], dims=("param", "repeat", "sample"))


def out_of_fold_losses(cube: xr.Dataset, loss: str | None = None, *, what: str = "intervals"
                       ) -> xr.DataArray:
    """e_i = ℓ_i(h, fold j(i)) of each analysis sample in each repeat; dims (param, repeat, sample).

    Held-out test samples get 0 (use :func:`cvflow.estimators._cube.analysis_weights` to
    exclude them). In memory, from the numpy kernels (:func:`role_terms` role "oof"), so a
    param missing a fold fit is NaN on every sample (the NaN rule).
    """
    return oof_losses(role_terms(cube, loss, roles=("oof",), what=what))


def out_of_fold(cube: xr.Dataset, loss: str, what: str, params: list[int] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold losses e_i(h) = ℓ_i(h, fold j(i)) on the analysis samples, (P, R, n), and
    their fold labels (R, n). NaN where the fold fit failed."""
    sub = cube if params is None else cube.isel(param=list(params))
    analysis = ~np.asarray(cube["is_test"].values, dtype=bool)
    e = out_of_fold_losses(sub, loss, what=what).transpose("param", "repeat", "sample").values
    return np.asarray(e)[:, :, analysis], np.asarray(cube["fold"].values)[:, analysis]


# ----------------------------------------------------------------------------------------
# the params a test compares
# ----------------------------------------------------------------------------------------

def compare_pair(cube: xr.Dataset, compare, a, b, where: str) -> tuple[int, int | None]:
    """Resolve (a, b) from ``compare: [a, b]`` / ``[a]`` or the ``a``/``b`` options."""
    if compare is not None:
        if a is not None or b is not None:
            raise InputError(f"{where}: give either compare or a/b, not both")
        items = list(compare) if isinstance(compare, (list, tuple)) else [compare]
        if not 1 <= len(items) <= 2:
            raise InputError(f"{where}.compare: {compare!r}; give [a, b] (two params) or [a] "
                             "(the error of one param)")
        a, b = items[0], (items[1] if len(items) == 2 else None)
    if a is None:
        n_params = int(cube.sizes["param"])
        if n_params == 1:
            return 0, None
        if n_params == 2:
            return 0, 1
        raise InputError(f"{where}.compare: the cube has {n_params} params; name the two to "
                         "compare, e.g. compare: [0, 1] or ['lasso(C=0.5)', 'lasso(C=0.08)']")
    ia = resolve_param(cube, a, where=f"{where}.compare")
    ib = None if b is None else resolve_param(cube, b, where=f"{where}.compare")
    if ib is not None and ib == ia:
        raise InputError(f"{where}.compare: a and b are the same param ({ia}); compare two "
                         "different params")
    return ia, ib


def compare_params(cube: xr.Dataset, compare, where: str) -> tuple[int, int | None]:
    """(a, b) from ``compare=[a, b]`` or ``[a]`` (b None: one-learner mode); a cube with one or
    two params needs no ``compare``. Params are named as in :func:`cvflow.estimators.labels.resolve_param`."""
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
