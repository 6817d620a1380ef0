"""Exceptions that the CLI maps to exit codes."""
from __future__ import annotations


class InputError(ValueError):
    """Bad user input: the CLI prints the one-line message and exits 2."""


class StoreError(InputError):
    """A store path that cannot be used as asked (not a cvflow store, other workflow)."""


class ReproducibilityWarning(UserWarning):
    """A learner gives other predictions on every run (an unset random_state)."""


class UntrustedCodeWarning(UserWarning):
    """Code a store names (a user estimator) was not imported: a store is data
    (:mod:`cvflow.trust`); the rest of the report goes on without it."""


class RacingWarning(UserWarning):
    """A race whose promise holds only asymptotically (an unbounded loss, no declared range)."""


class ComparisonWarning(UserWarning):
    """A comparison of learners across data sets whose assumptions are weak here (few data sets,
    ties, no per-data-set intervals): :func:`cvflow.estimators.compare_learners`."""


class LockLostError(RuntimeError):
    """A run no longer holds its store's run lock: it stops writing (exit 1)."""


class StallError(RuntimeError):
    """A run made no progress within its deadline; the message says what it waited on (exit 1)."""


# the options a fix names, for users of the CLI and of Python alike
OVERWRITE = "--overwrite (overwrite=True in Python)"
OTHER_STORE = "another --store (another store= in Python)"
# what to do about damage cvflow cannot refit (every such message ends with it)
RESTORE = f"restore it from a copy, or rerun with {OVERWRITE} to refit everything"


class DiskFullError(RuntimeError):
    """The disk (or the quota) holding a run's store is full: the run stopped, its fits done
    are kept; the message names the store and says to free space and rerun (exit 1)."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C, SIGTERM or SIGHUP: its lock released, the fits done kept.

    A KeyboardInterrupt (code that stops on Ctrl-C stops on it), whose message says what the
    store kept and how to resume; the CLI prints it in one line, with the command, and exits 130.
    ``store`` is None when the run stopped before it knew its store, ``kept`` None when the
    store was not created."""

    def __init__(self, store: str | None, kept: int | None = None, total: int | None = None,
                 *, why: str = ""):
        self.store, self.kept, self.total, self.why = store, kept, total, why
        super().__init__(str(self))

    def what_was_kept(self) -> str:
        if self.store is None:
            return f"nothing kept{f' ({self.why})' if self.why else ''}"
        if self.kept is None:
            return f"nothing kept ({self.store} not created yet)"
        return f"{self.kept} of {self.total} fits kept in {self.store}"

    def __str__(self) -> str:
        if self.store is None and self.why:
            return f"interrupted: {self.what_was_kept()}"
        if self.kept is not None and self.kept == self.total:
            return f"interrupted: {self.what_was_kept()}, all of them; run it again for the results"
        return f"interrupted: {self.what_was_kept()}; run it again to resume"
