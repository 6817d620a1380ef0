"""Running a suite: every data set validated, then each run into its group of one store.

DESIGN CHOICE: each data set runs as the single-data-set run it is (:func:`cvflow.execution.run.run`,
one after another, on the cluster each run connects to), into ``<store>/<data set>``: the same
validation, resume and extension rules per cube, and each cube the one a one-data-set workflow
writes. One Dask graph interleaving every data set's blocks (issue 42, item 2) is not done yet.
"""
from __future__ import annotations

import os

from ..fitting.trial import check_learners
from ..store import suite as suite_store
from ..workflow.suite import Suite, build_all
from .run import RunResult, run


def run_suite(suite: Suite, *, store: str | os.PathLike | None = None, **options
              ) -> dict[str, RunResult]:
    """Run every data set of ``suite`` into one store (``<suite name>.zarr`` by default).

    Every data set is loaded, its design built and each learner trial-fitted on it before
    anything runs (an InputError names the data set); then the suite's root group is created
    and each data set runs into ``<store>/<data set>`` with ``options`` (those of
    :func:`cvflow.execution.run.run`). Returns data set -> RunResult, in the file's order.
    """
    built = build_all(suite)
    for i, (label, wf) in enumerate(suite.workflows.items()):
        if wf.execution.get("trial_fits", True):
            check_learners(wf, built[label].data, f"{suite.path}: data[{i}] ({label})")
    root = suite_store.create(store if store is not None else f"{suite.name}.zarr", suite.name,
                              suite.datasets)
    return {label: run(wf, store=suite_store.member(root, label), **options)
            for label, wf in suite.workflows.items()}
