"""Running a suite: every data set validated, then each run into its group of one store.

DESIGN CHOICE: each data set runs as the single-data-set run it is (:func:`cvflow.execution.run.run`,
one after another, through the one loop), into ``<store>/<data set>``: the same validation,
resume and extension rules per cube, and each cube the one a one-data-set workflow writes. The
suite's clusters are started once (:func:`cvflow.execution.schedulers.shared`): every data set
asking the same route (threads, local, SLURM, an address) gets the client an earlier one started,
so a data set pays no cluster start-up, queues no new SLURM jobs, and finds the workers warm.
Not done (issue 42, item 2): one Dask graph interleaving every data set's blocks, or data set
k+1's blocks submitted while data set k's last ones run.
"""
from __future__ import annotations

import os

from ..errors import InputError
from ..fitting.trial import check_learners
from .progress import Progress
from ..store import suite as suite_store
from ..workflow.spec import Workflow
from ..workflow.suite import Suite
from .run import RunResult, run
from .schedulers import shared


def run_suite(suite: Suite, *, store: str | os.PathLike | None = None, **options
              ) -> dict[str, RunResult]:
    """Run every data set of ``suite`` into one store (``<suite name>.zarr`` by default).

    Every data set is loaded, its design built and each learner trial-fitted on it before
    anything runs (an InputError names the data set); then the suite's root group is created
    and each data set runs into ``<store>/<data set>`` with ``options`` (those of
    :func:`cvflow.execution.run.run`). Returns data set -> RunResult, in the file's order.
    """
    where = {label: f"{suite.path}: data[{i}] ({label})" for i, label in enumerate(suite.datasets)}
    return run_workflows(suite.workflows, name=suite.name, where=where,
                         store=store if store is not None else f"{suite.name}.zarr", **options)


def run_workflows(workflows: dict[str, Workflow], *, name: str, where: dict[str, str],
                  store: str | os.PathLike, **options) -> dict[str, RunResult]:
    """Validate every workflow on its data (build, trial fits; an InputError is prefixed with
    ``where[label]``), then create the suite's root group and run each into its member."""
    totals: dict[str, int] = {}
    for label, wf in workflows.items():
        try:
            built = wf.build()
            totals[label] = len(built.params) * built.design.n_splits
            if wf.execution.get("trial_fits", True):
                check_learners(wf, built.data, str(wf.path))
        except InputError as exc:
            text = str(exc)
            rest = text[len(str(wf.path)) + 2:] if text.startswith(f"{wf.path}: ") else text
            raise InputError(f"{where[label]}: {rest}") from None
    root = suite_store.create(store, name, list(workflows))
    progress = options.pop("progress", None)
    if progress is None or progress is True or isinstance(progress, Progress):
        progress = SuiteProgress(totals, progress if isinstance(progress, Progress) else None)
    out = {}
    with shared():
        for label, wf in workflows.items():
            if isinstance(progress, SuiteProgress):
                progress.label = label
            out[label] = run(wf, store=suite_store.member(root, label), progress=progress,
                             **options)
    return out


class SuiteProgress(Progress):
    """A suite's progress: each data set's run as :class:`Progress` shows it, headed by the data
    set's place in the suite and the suite's fits done so far, and closed by the suite's total.
    ``totals``: data set -> its fits; ``like``: the Progress whose stream and summary to use."""

    def __init__(self, totals: dict[str, int], like: Progress | None = None):
        super().__init__(like.stream if like else None, summary=like.summary if like else True)
        self.totals = totals
        self.label = next(iter(totals))
        self.done: dict[str, int] = {}

    def _suite(self) -> str:
        return f"suite: {sum(self.done.values())} of {sum(self.totals.values())} fits done"

    def start(self, event: dict) -> None:
        self.done[self.label] = event["total"] - event["todo"]
        place = list(self.totals).index(self.label) + 1
        self._print(f"data set {place} of {len(self.totals)}: {self.label}; {self._suite()}")
        super().start(event)

    def finish(self, result) -> None:
        super().finish(result)
        self.done[self.label] = result.total_fits
        finished = len(self.done) == len(self.totals)
        self._print(f"{self._suite()}" + (" (every data set run)" if finished else ""))
