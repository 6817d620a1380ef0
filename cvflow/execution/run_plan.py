"""The plan of a run: the store's layout (created, or checked and extended), the block chunk
shape from a timed estimate of the fits, and the blocks still to fit (not ``done``, or whose
chunk of ``pred`` is missing or damaged)."""
from __future__ import annotations

import os
from dataclasses import dataclass
import numpy as np

from .sizing import choose_chunks, estimate_seconds_per_fit
from ..workflow.designs import Design
from ..errors import StoreError
from ..workflow.params import Param
from ..store.location import exists, resolve
from ..store.schema import Schema, block_slices, cube_schema
from ..workflow.spec import BuiltWorkflow, Workflow
from ..fitting.paths import plan


def path_length(params: list[Param]) -> int:
    """The longest run of consecutive params fitted as one path (:func:`cvflow.fitting.paths.plan`)."""
    return max((len(g.index) for g in plan(params)
                if g.kernel is not None and g.index == tuple(range(g.index[0], g.index[-1] + 1))),
               default=1)


def seconds_per_fit(workflow: Workflow, study: BuiltWorkflow, *, quick: float | None = None,
                    test_only: bool = False) -> float:
    """The timed estimate of one fit's seconds as blocks fit them (:mod:`cvflow.execution.sizing`;
    ``quick``: its ``estimate_seconds_per_fit``'s). A study this process timed already (the
    same params on data of the same columns, a training set within :data:`SAME_SIZE` of the
    size timed) gets that estimate again, with no fit. ``test_only``: timed as fits that
    predict their test rows alone (a cube in memory that holds only those)."""
    # timed as blocks fit them: a path-aware ridge grid costs one SVD per split, not one per alpha
    d = study.data
    path_aware = bool(workflow.execution.get("path_aware", True))
    train = study.design.train[0]
    key = _timing_key(study.params, d, path_aware)
    key = None if key is None else (*key, test_only)
    n_train = int(np.count_nonzero(train))
    timed = _TIMED.get(key) if key is not None else None
    if timed is not None and abs(timed[0] - n_train) <= SAME_SIZE * timed[0]:
        return timed[1]
    seconds = estimate_seconds_per_fit(
        study.params, d.fit_X, d.fit_y, train, positive=d.positive, path_aware=path_aware,
        total_fits=len(study.params) * study.design.n_splits, quick=quick, test_only=test_only)
    if key is not None:
        _TIMED[key] = (n_train, seconds)
        while len(_TIMED) > _TIMED_KEPT:
            del _TIMED[next(iter(_TIMED))]
    return seconds


# DESIGN CHOICE: a process that runs the same search again (a second `fit`, the inner searches
# of a nested cross_validate: the same learners on training sets of one size) reuses its
# timing: the estimate only sizes blocks and picks the route, and its fits cost a small
# study a tenth of its own (issue 41: the second call in a process). Keyed by what a fit's time
# depends on that the process can see cheaply: the params (learner, settings), the data's type,
# columns and dtypes, the training set's size (within SAME_SIZE: the inner searches of a nested
# cross_validate train on 379 or 380 samples) and the fit parameters' names.
_TIMED: dict[tuple, tuple[int, float]] = {}
_TIMED_KEPT = 32
SAME_SIZE = 0.1


def _timing_key(params: list[Param], data, path_aware: bool) -> tuple | None:
    X, y = data.fit_X, data.fit_y
    shape = getattr(X, "shape", None)
    if shape is None:
        return None
    dtypes = getattr(X, "dtypes", None)
    return (tuple(p.to_json() for p in params), type(X).__name__, tuple(shape[1:]),
            str(getattr(X, "dtype", "")) if dtypes is None else tuple(map(str, dtypes)),
            type(y).__name__, str(getattr(y, "dtype", "")), tuple(getattr(y, "shape", ())[1:]),
            path_aware, repr(data.positive),
            data.sample_weight is None,
            tuple(sorted({k for p in params for k in (p.fit_params or {})})),
            any(p.fit_hook is not None for p in params))


@dataclass(repr=False, eq=False)
class StoreLayout:
    """The store's params and design (store order: an extended store keeps its indices), the
    block chunk shape, and the schema of a new store not created yet (``create=False``) or of
    an in-memory cube."""

    params: list[Param]
    design: Design
    chunks: tuple[int, int]
    template: Schema | None = None


def prepare_store(workflow: Workflow, study: BuiltWorkflow, store: str | os.PathLike, *,
                  overwrite: bool = False, n_workers: int = 2,
                  seconds: float | None = None, create: bool = True) -> StoreLayout:
    """Create the store (or check and extend the existing one); the layout to run on.

    ``study`` is left as built: an existing store's order comes back in the layout.
    ``seconds`` per fit sizes the blocks of a new store (timed here when None and the
    workflow's ``fits_per_task`` is ``auto``). With ``create=False`` a new store is not
    created: its schema comes back in the layout, for ``cvflow.store.creation.create`` (a replaced
    store is removed here all the same).
    """
    # DESIGN CHOICE: the store's modules (zarr, xarray) are imported where a store is planned:
    # a study without a store plans with new_layout alone (tests/test_startup.py)
    from ..store import creation, cube as cube_store
    from ..store.group import is_store
    from .extend import reconcile

    location = resolve(store)
    creation.clear_interrupted(location)
    if exists(location) and not overwrite:
        if not is_store(location):
            raise StoreError(f"store: {location} exists but is not a cvflow store; "
                             "choose another path")
        params, design = reconcile(location, workflow, study)
        return StoreLayout(params, design, cube_store.block_chunks(location))
    if exists(location):
        creation.remove_store(location)       # refuses anything not provably a cvflow store
    layout = new_layout(workflow, study, n_workers=n_workers, seconds=seconds)
    if not create:
        return layout
    creation.create(location, creation.to_dataset(layout.template))
    return StoreLayout(study.params, study.design, layout.chunks)


def new_layout(workflow: Workflow, study: BuiltWorkflow, *, n_workers: int = 2,
               seconds: float | None = None) -> StoreLayout:
    """The layout of a new cube (a store's, or one kept in memory): the block chunk shape from
    ``seconds`` per fit (timed here when None and ``fits_per_task`` is ``auto``) and the
    cube's schema (:func:`cvflow.store.schema.cube_schema`)."""
    fpt = workflow.execution.get("fits_per_task", "auto")
    d = study.data
    dtype = workflow.execution.get("dtype", "float64")
    if fpt == "auto" and seconds is None:
        seconds = seconds_per_fit(workflow, study)
    auto_path = fpt == "auto" and bool(workflow.execution.get("path_aware", True))
    chunks = choose_chunks(len(study.params), study.design.n_splits, seconds_per_fit=seconds or 0.0,
                           n_workers=n_workers, fits_per_task=None if fpt == "auto" else int(fpt),
                           n_samples=d.X.shape[0] * (len(d.positive) if isinstance(d.positive, tuple)
                                                     else 1),      # values a fit stores
                           itemsize=np.dtype(dtype).itemsize,
                           path_length=path_length(study.params) if auto_path else 1)
    schema = cube_schema(study.data, study.design, study.params, attrs=study.attrs,
                         chunks=chunks, dtype=dtype, scorers=study.scorer_names,
                         train_scores=study.train_scores)
    return StoreLayout(study.params, study.design, chunks, schema)




def pending_blocks(store: str, chunks: tuple[int, int],
                   done: np.ndarray | None = None) -> list[tuple[slice, slice]]:
    """The blocks with a fit not yet ``done`` (``done``: the store's mask, read if None)."""
    if done is None:
        from ..store.group import read_mask

        done = read_mask(store, "done")
    n_params, n_splits = done.shape
    return [(ps, ss) for ps, ss in block_slices(n_params, n_splits, chunks)
            if not done[ps, ss].all()]
