"""Run a module (``-m NAME ARGS``) or a script as ``__main__`` and, at exit, write this
process's *own* CPU seconds and peak RSS, without its children's, as JSON to the file named by
``$OWN_CPU_FILE``.

``os.wait4`` on a process gives its own usage *plus* that of every descendant it reaped: the
worker processes of a LocalCluster it started and closed are counted in it. ``reduce_floor.py``
runs the ``--cluster`` reports through this to tell the client's CPU from its workers'::

    OWN_CPU_FILE=/tmp/own.json python benchmarks/own_cpu.py -m cvflow report STORE --cluster local
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import runpy
import sys


def _write() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["OWN_CPU_FILE"], "w") as f:
        json.dump({"cpu": usage.ru_utime + usage.ru_stime, "peak_rss": usage.ru_maxrss * 1024}, f)


if __name__ == "__main__":
    atexit.register(_write)        # first registered, so the last to run (after cvflow's own)
    if sys.argv[1] == "-m":
        sys.argv = sys.argv[2:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
