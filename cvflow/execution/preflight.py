"""What a run or a report checks before it writes anything: its arguments and its paths.

A bad argument used to surface where it was first used: ``--workers -1`` when the thread
pool started, ``--dashboard-port 99999`` when the cluster started, a read-only store at its
first chunk write — each after the store had been created or grown. These checks only read
(the cluster profile, file modes), so they run first and refuse with one line naming the
argument or the path (:class:`~cvflow.errors.InputError`, exit 2).

The run's entry (:func:`cvflow.execution.run.run`, which both faces call) calls :func:`check_run`
once, before it takes the store's lock, and runs on what it decided; ``cvflow report
--html FILE`` calls :func:`check_output_file` before it reduces anything.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import config
from ..errors import OTHER_STORE, InputError

if TYPE_CHECKING:
    from .profiles import Route


def check_workers(workers, where: str = "--workers") -> None:
    """None (the profile's default) or a whole number of at least 1."""
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"{where}: {workers!r}; give a number of workers >= 1 (or leave it out: "
                         "one per CPU core)")


def check_dashboard_port(port, where: str = "--dashboard-port") -> None:
    """None (no dashboard asked) or a TCP port 0..65535 (0: any free port)."""
    if port is None:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError(f"{where}: {port!r}; give a port in 0..65535 (0: any free port)")


@dataclass(repr=False, eq=False)
class Checked:
    """What :func:`check_run` decided: the store's location and the run's cluster (a
    :class:`~cvflow.execution.profiles.Route`; None with a given client)."""

    store: str
    route: Route | None


def check_run(workflow, store: str | os.PathLike | None, *, cluster=None, workers=None,
              dashboard_port=None, tls=None, cluster_options: Sequence[str] | Mapping | None = None,
              client=None) -> Checked:
    """Refuse a run's bad arguments before its store is created, grown or locked.

    :func:`check_cluster`, then that the store can be written (:func:`check_store_writable`;
    ``store`` None: the run's default, ``<workflow name>.zarr``). Returns what it decided (the
    store's location, the run's route), which the run uses as it is: called once per run, by
    :func:`cvflow.execution.run.run`.

    Raises
    ------
    cvflow.errors.InputError
        One line naming the argument, the profile key or the path.
    """
    from ..store.location import resolve

    config.check_all()                     # every setting, whether this route reads it or not
    route = check_cluster(workflow, cluster=cluster, workers=workers,
                          dashboard_port=dashboard_port, tls=tls,
                          cluster_options=cluster_options, client=client)
    location = resolve(store if store is not None else f"{workflow.name}.zarr")
    check_store_writable(location)
    return Checked(location, route)


def check_cluster(workflow, *, cluster=None, workers=None, dashboard_port=None, tls=None,
                  cluster_options: Sequence[str] | Mapping | None = None,
                  client=None) -> Route | None:
    """``workers`` (>= 1), ``dashboard_port`` (0..65535) and the cluster profile with every
    override merged as the run merges them (``cluster`` or the workflow's
    ``execution.cluster``, ``workers`` or its ``execution.workers``; profile files,
    ``--cluster-option``, ``CVFLOW_CLUSTER__*``): the run's route
    (:func:`cvflow.execution.profiles.decide`), None with a given ``client``. ``cvflow
    validate`` checks the workflow's own choice this way."""
    from .profiles import decide

    check_workers(workers)
    check_dashboard_port(dashboard_port)
    if client is not None:
        return None
    named = cluster or workflow.execution.get("cluster")
    # the workflow's own choice: its errors name its key, not --cluster
    return decide(named, workers=workers or workflow.execution.get("workers"),
                  dashboard_port=dashboard_port, tls=tls, options=cluster_options,
                  named_by=None if cluster or named is None
                  else f"{workflow.path}: execution.cluster")


def check_store_writable(location: str) -> None:
    """InputError unless this user may write the store at ``location`` and its lock beside it.

    Local paths only: an existing store's directories (zarr writes a chunk as a new file
    renamed into place, so a directory's mode decides) and the directory that holds it (the
    run lock, ``<store>.lock``); for a new store, the nearest existing ancestor (the run
    creates the directories in between). Permissions at a URL are the object store's and
    show at the first write.
    """
    from ..store.location import identity, is_url

    if is_url(location):
        _check_bucket(location)
        return
    if os.path.islink(location) and not os.path.exists(location):
        raise InputError(f"store: {location} is a symbolic link to {os.readlink(location)}, "
                         "which does not exist; cvflow creates a store only at a path of its "
                         f"own: give --store {identity(location)} (or remove the link)")
    if os.path.lexists(location) and not os.path.isdir(location):
        return          # not a store at all: the run refuses it by name (store.is_store)
    # the lock goes beside the store itself (symbolic links resolved: cvflow.store.lock)
    parent = os.path.dirname(identity(location).rstrip(os.sep)) or os.sep
    ancestor = parent
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise InputError(f"store: {location}: {ancestor} is a file, not a directory; choose "
                         f"{OTHER_STORE}")
    _writable(ancestor, location, "the store's lock and directory go there")
    if not os.path.isdir(location):
        return
    for root, dirs, _ in os.walk(location):
        _writable(root, location, "the run writes its chunks there")
        dirs.sort()


def _check_bucket(location: str) -> None:
    """InputError when the bucket of a store at a URL does not exist (a write would fail at the
    run lock, with the object store's own error). A bucket that cannot be checked (no
    permission to list it) is left to the first write."""
    from ..store.location import filesystem

    fs, path = filesystem(location)
    parts = path.strip("/").split("/")
    if len(parts) < 2 or not parts[0]:
        return
    try:
        found = fs.exists(parts[0])
    except Exception:  # noqa: BLE001 - permissions, the network: the first write says
        return
    if not found:
        raise InputError(f"store: {location}: the bucket {parts[0]!r} does not exist (or these "
                         "credentials cannot see it); create it first (e.g. aws s3 mb "
                         f"{location.split('://')[0]}://{parts[0]}) or choose {OTHER_STORE}")


def _writable(directory: str, location: str, why: str) -> None:
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=True):
        raise InputError(f"store: {location} cannot be written by this user ({directory} is "
                         f"read-only; {why}); fix its permissions or choose {OTHER_STORE} "
                         "(cvflow report reads a store without writing it)")


def check_output_file(path: str | os.PathLike, where: str) -> None:
    """InputError unless a file can be written at ``path``: its directory exists and is
    writable, and ``path`` is no directory (``cvflow report --html FILE``)."""
    text = os.fspath(path)
    if not text:
        raise InputError(f"{where}: give a file name, e.g. {where} report.html")
    if os.path.isdir(text):
        raise InputError(f"{where}: {text} is a directory; give a file name, e.g. "
                         f"{os.path.join(text, 'report.html')}")
    directory = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(directory):
        raise InputError(f"{where}: the directory {directory} does not exist; create it or "
                         "write the file elsewhere")
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=True) or (
            os.path.exists(text) and not os.access(text, os.W_OK, effective_ids=True)):
        raise InputError(f"{where}: {text} cannot be written by this user (permission denied)")
