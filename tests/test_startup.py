"""Start-up: `cvflow status` / `report` / `validate` import only what they use."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import cvflow
import fault_helpers as fh
from cvtest import QUICK

HEAVY = ("sklearn", "scipy", "distributed", "dask.array", "zarr", "xarray", "cvflow.engine")
PROBE = """\
import sys
from cvflow.cli import main
main({argv!r})
print("MODULES " + " ".join(m for m in {heavy!r} if m in sys.modules))
"""


def _imported(argv: list[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)],
                         env=fh.cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("MODULES"))
    return set(line.split()[1:])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("startup")
    (tmp / "wf.yaml").write_text(QUICK)
    cvflow.run(tmp / "wf.yaml", store=tmp / "s.zarr", cluster="threads")
    return tmp


def test_status_reads_the_store_without_engine_dask_arrays_or_sklearn(store):
    assert _imported(["status", str(store / "s.zarr")]) == {"zarr", "xarray"}


def test_report_needs_no_cluster_and_no_learner_library(store):
    got = _imported(["report", str(store / "s.zarr")])
    assert {"zarr", "xarray", "dask.array"} <= got     # the lazy cube (dask.array may bring scipy)
    assert not got & {"sklearn", "distributed", "cvflow.engine"}


def test_validate_starts_no_cluster_and_opens_no_store(store):
    got = _imported(["validate", str(store / "wf.yaml")])
    assert "distributed" not in got and "zarr" not in got and "cvflow.engine" not in got
    assert "sklearn" in got     # the learners are checked by importing them


def test_public_names_resolve_lazily():
    code = ("import sys, cvflow; assert 'cvflow.engine' not in sys.modules; "
            "from cvflow import run, open, load_workflow, estimators; "
            "print(json.dumps([run.__module__, open.__name__, estimators.__name__]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], env=fh.cli_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["cvflow.engine", "open_cube", "cvflow.estimators"]


def test_the_program_freezes_the_heap_before_teardown_and_still_runs_atexit(store):
    # `cvflow` / `python -m cvflow` end through cli.console: gc.freeze(), then sys.exit(code);
    # the exit code is main()'s and atexit handlers (logging.shutdown, Dask's) still run
    probe = ("import atexit, gc, sys\n"
             "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
             "from cvflow.cli import console\n"
             "sys.argv = ['cvflow'] + sys.argv[1:]\n"
             "console()\n")
    for argv, code in ((["status", str(store / "s.zarr")], 0), (["status", str(store)], 2)):
        out = subprocess.run([sys.executable, "-c", probe, *argv], env=fh.cli_env(),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == code, out.stderr
        assert out.stdout.splitlines()[-1] == "frozen at exit: True"


def test_main_called_in_process_leaves_the_callers_heap_unfrozen(store, capsys):
    import gc

    from cvflow.cli import main

    assert main(["status", str(store / "s.zarr")]) == 0
    assert "fits" in capsys.readouterr().out
    assert gc.get_freeze_count() == 0
