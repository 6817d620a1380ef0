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
    class: sklearn.linear_model.Ridge
    grid: {alpha: [0.01, 0.1, 1.0, 10.0]}
design: {folds: 5, seed: 0}
estimators: [kfold]
"""


def ridge_cube(folds: int, repeats: int = 1, *, n: int = 30, seed: int = 0):
    """An in-memory cube of three ridges (alpha 0.1, 1, 10) on a linear signal, with the full,
    fold, pair (when folds > 2) and subset (g = 6, 4 pairs) fits and 6 held-out test samples:
    every estimator has what it needs."""
    import numpy as np

    from cvflow.workflow.params import Param
    from cvflow.testing import fit_cube, simple_design

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ [1.0, -0.5, 0.2] + rng.normal(size=n)
    is_test = np.zeros(n, bool)
    is_test[-6:] = True
    design = simple_design(n, folds, repeats=repeats, pairs=folds > 2, is_test=is_test,
                           subset={"size": 6, "pairs": 4})
    params = [Param("ridge", "sklearn.linear_model.Ridge", hyper={"alpha": a})
              for a in (0.1, 1.0, 10.0)]
    return fit_cube(X, y, params, design, is_test=is_test)
