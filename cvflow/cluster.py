"""Connecting to a Dask cluster: the embedded LocalCluster, a profile file, or tcp://ADDR."""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def connect(cluster: str | None = None, *, workers: int | None = None,
            dashboard_port: int | None = None) -> Iterator["distributed.Client"]:  # noqa: F821
    """Yield a ``distributed.Client``; closes what it started on exit.

    ``None`` or ``"local"``: an embedded ``LocalCluster`` on 127.0.0.1 with process workers
    (one thread each) and the dashboard on; ``"tcp://host:port"``: a running scheduler.
    """
    from distributed import Client, LocalCluster

    if cluster and cluster.startswith("tcp://"):
        with Client(cluster) as client:
            yield client
        return
    n = workers or 2
    port = 8787 if dashboard_port is None else dashboard_port
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=f"127.0.0.1:{port}", silence_logs=logging.ERROR) as lc:
        with Client(lc) as client:
            yield client
