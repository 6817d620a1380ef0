"""What a learner's fit leaves running in a worker (cvflow.execution.processes): ended at the
run's end, the workers themselves spared. Reference: the processes' own pids, read by psutil."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from cvflow.execution.processes import ENV, end


@pytest.mark.skipif(not hasattr(os, "fork"), reason="a forking child needs os.fork")
def test_a_workers_descendants_are_ended_even_when_the_workers_are_not_named():
    """A child of this process carrying the token (as a worker does) forks a grandchild that
    would live 10 minutes. ``end`` with no worker named (the scheduler did not answer) must
    end the grandchild and spare the child: it is this process's own."""
    token = "test-" + os.urandom(4).hex()
    script = textwrap.dedent("""\
        import os, sys, time
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        print(pid, flush=True)
        time.sleep(600)
        """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, ENV: token})
    try:
        grandchild = int(child.stdout.readline())
        ended = end(token)
        assert ended == [grandchild]
        assert child.poll() is None                     # the worker lives
        deadline = time.monotonic() + 30
        while psutil.pid_exists(grandchild) and time.monotonic() < deadline:
            try:
                if psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE:
                    break                                # killed; its parent has not reaped it
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        assert (not psutil.pid_exists(grandchild)
                or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE)
    finally:
        child.kill()
        child.wait(30)
