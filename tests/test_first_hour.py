"""The first hour with cvflow (issue 27): what a new user sees, tested as they run it.

Whole processes: ``cvflow report`` / ``cvflow validate`` and ``python -`` scripts, their stdout
and stderr.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cvtest import QUICK, REPO, run_cli


@pytest.fixture(scope="module")
def quick_store(tmp_path_factory):
    """The README's kind of study, run by the CLI: a ridge over 4 alphas, 5-fold."""
    tmp = tmp_path_factory.mktemp("quick")
    wf = tmp / "quick.yaml"
    wf.write_text(QUICK + "execution: {cluster: threads, workers: 1}\n")
    res = run_cli("run", wf, "--store", tmp / "quick.zarr")
    assert res.returncode == 0, res.stderr
    return tmp / "quick.zarr"


def python(script: str, cwd=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """A script run as ``python -`` in a fresh interpreter (the user's way)."""
    return subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


# --- item 6: README's install, --html's one line, the K-fold table's heading -------------------

def test_readme_quick_start_installs_only_what_running_needs():
    text = (REPO / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert "cvflow run" in quick
    assert re.search(r"pip install -e \.(\s|$)", quick), quick
    assert "[test]" not in quick


def test_report_html_prints_one_line_saying_where(quick_store, tmp_path):
    html = tmp_path / "r.html"
    res = run_cli("report", quick_store, "--html", html)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == [f"{quick_store}: HTML report written to {html}"]
    assert html.stat().st_size > 10_000
    # without --html the text report is printed as before
    plain = run_cli("report", quick_store)
    assert "K-fold" in plain.stdout and "HTML" not in plain.stdout


def test_kfold_table_heading_reads_naturally(quick_store):
    res = run_cli("report", quick_store)
    assert res.returncode == 0, res.stderr
    assert "K-fold (squared), 4 params, best first:" in res.stdout
    assert "params, best 4" not in res.stdout
