"""Helpers shared by the test modules (importable by name; conftest.py is not, because
tests/slurm/ has a conftest.py of its own)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

def run_cli(*args: str, cwd=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real entry point, in a subprocess (``python -m cvflow`` == the ``cvflow`` script)."""
    return subprocess.run([sys.executable, "-m", "cvflow", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def tree_digest(path: Path) -> str:
    """Hash of every file (name + bytes) under a path: proves a store was not touched."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


QUICK = """\
name: quick
data: {source: sklearn, name: diabetes}
task: regression
learners:
  - name: ridge
    estimator: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 0.1, 1.0, 10.0]}
design: {folds: 5, seed: 0}
estimators: [kfold]
"""
