"""Dask's own log lines: quiet while cvflow's clusters run, unless asked (issue 41 item 5).

A search fits as ``GridSearchCV`` does, which logs nothing: a notebook logging at INFO
(``logging.basicConfig(level=logging.INFO)``) would otherwise get every line of the scheduler,
nannies and connections of the cluster cvflow starts and stops (39-47 a search, measured).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from .. import config

#: the logger of Dask's scheduler, workers, nannies and comms (its children inherit its level)
DASK_LOGGER = "distributed"


def quiet_dask() -> None:
    """Dask's own lines below config ``cvflow.execution.dask-logs`` ("error" by default, as the
    CLI shows them; "info" shows its start-up and shutdown) kept from the caller's handlers, from
    the first cluster cvflow starts on.

    DESIGN CHOICE: distributed gives its logger INFO when imported and adds its own handler
    only when the root logger has none; a caller's root handler (basicConfig) then receives
    every record, which ``LocalCluster(silence_logs=...)`` (distributed's own handlers only)
    does not stop. So the ``distributed`` logger's level is raised, and left so: the cluster
    is kept for the session and its shutdown at exit is as quiet as its start. A level the
    caller set on that logger (anything but distributed's own INFO) is left as it is.
    """
    wanted = logging.getLevelName(str(config.get("cvflow.execution.dask-logs")).upper())
    logger = logging.getLogger(DASK_LOGGER)
    if isinstance(wanted, int) and logger.level == logging.INFO and wanted > logging.INFO:
        logger.setLevel(wanted)


@contextlib.contextmanager
def quiet_info(name: str, asked: bool) -> Iterator[None]:
    """While open, the INFO lines of logger ``name`` are not shown, unless ``asked`` or the
    caller set that logger's level (a level other than unset)."""
    logger = logging.getLogger(name)
    if asked or logger.level != logging.NOTSET:
        yield
        return
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        if logger.level == logging.WARNING:       # unless changed meanwhile
            logger.setLevel(logging.NOTSET)
