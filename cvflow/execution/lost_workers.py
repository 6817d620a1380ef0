"""Workers of a cluster this process started that are lost for good, replaced.

A nanny restarts a worker that died, but gives up when the new one fails to start (under heavy
load its start can time out), and distributed's ``SpecCluster`` closes and forgets a nanny
whose worker stays away from the scheduler longer than ``distributed.deploy.lost-worker-timeout``
(15 s), its restart included, keeping its spec and never opening it again. A run would then
wait for workers that never come; :func:`replace_lost_workers` starts new ones.
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref

# name -> when, of the workers this module asked a cluster to open: SpecCluster adds a nanny to
# ``cluster.workers`` only once it started, a minute under load, and may drop it again before
# the next look. Spared for START_MARGIN times the cluster's measured start (:func:`started`),
# at least SPARE_SECONDS.
_OPENING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_START: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # cluster -> its start's seconds
_LOCK = threading.Lock()
_FRESH = itertools.count(1)
START_MARGIN, SPARE_SECONDS = 3.0, 30.0


def started(cluster, seconds: float) -> None:
    """Note that ``cluster`` took ``seconds`` to start with its workers (a measure of how long
    a worker's start takes on this machine now)."""
    try:
        _START[cluster] = seconds
    except TypeError:            # not weakly referable: the default margin
        pass


def replace_lost_workers(client, connected: dict | None = None) -> int:
    """Start new workers in place of those of a cluster this process started (a
    ``SpecCluster``: local, SLURM) that are lost for good; their number.

    A worker still starting is waited for: the caller's deadline (``no-worker-seconds``) bounds
    that wait.
    """
    from distributed.core import Status

    cluster = getattr(client, "cluster", None)
    spec = getattr(cluster, "worker_spec", None)
    if cluster is None or not isinstance(spec, dict):
        return 0
    if connected is None:             # the scheduler's workers, unless the caller just read them
        connected = client.scheduler_info().get("workers", {})
    names = {w.get("name") for w in connected.values()}
    # DESIGN CHOICE: lost are a nanny the cluster dropped, one that closed, and one whose worker
    # is not connected and not starting. At load 18 on 2 cores a worker's restart took 25-50 s:
    # both nannies of a run whose fits kill their worker were dropped (lost-worker-timeout),
    # none was replaced (only ``cluster.workers`` was looked at) and the run stopped after
    # no-worker-seconds, "StallError: no worker is connected". A worker still starting (one
    # being opened, or restarted by its nanny, its process alive) is spared: replacing it every
    # 30 s, as a start under load may take longer, would never let one connect. A worker that
    # died while its nanny was starting it is not alive, and replaced.
    with _LOCK:
        opening = _OPENING.setdefault(cluster, {})
        spare = max(SPARE_SECONDS, START_MARGIN * _START.get(cluster, 0.0))
        now = time.monotonic()
        for name in [n for n, t in opening.items() if n in names or now - t > spare]:
            del opening[name]                         # connected, or given its time
        lost = [name for name in spec if name not in opening and (
            name not in cluster.workers or name not in names)]
        lost = [name for name in lost if not _starting(cluster.workers.get(name))]
        for name in lost:
            template = spec.pop(name)
            old = cluster.workers.pop(name, None)
            if old is not None and getattr(old, "status", None) not in (Status.closed,
                                                                         Status.failed):
                cluster.loop.add_callback(old.close)       # in the background: it may be stuck
            # under a name never used: the old nanny may still be closing, its worker restarting
            # under the old name (reused, no new worker connected in 150 s at load 18)
            fresh = f"{str(name).split('-again')[0]}-again{next(_FRESH)}"
            spec[fresh] = template
            opening[fresh] = now
        if lost:
            cluster.scale(len(spec))                 # opens what the spec has, the cluster lacks
    return len(lost)


def _starting(nanny) -> bool:
    """Whether ``nanny`` (None: none) is open and starting its worker, whose process is alive."""
    from distributed.core import Status

    if nanny is None or getattr(nanny, "status", None) in (Status.closed, Status.failed,
                                                             Status.closing):
        return False
    process = getattr(nanny, "process", None)        # a nanny's WorkerProcess; a SLURM job: none
    try:
        return process.status == Status.starting and process.is_alive()
    except AttributeError:
        return False
