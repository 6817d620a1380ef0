"""`cvflow status` and `cvflow validate` against `python -c "import numpy"` (issue 41 item 3).

Fresh processes, interleaved (order rotated each round), one untimed warm-up round, medians of
``--runs``: ``python -m cvflow status STORE`` (the quickstart's store, made once by ``cvflow
run workflows/quickstart.yaml``), ``python -m cvflow validate workflows/quickstart.yaml`` and
``python -c "import numpy"``; prints each median, its ratio to numpy's, what it adds over it and
the load before and after. Bytecode is cached as in a user's environment. Nothing asserts a time.

Run: ``python benchmarks/cli_doors.py [--runs 10]``
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 300


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    workflow = str(REPO / "workflows" / "quickstart.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "quickstart.zarr")
        subprocess.run([sys.executable, "-m", "cvflow", "run", workflow, "--store", store],
                       env=env, cwd=tmp, capture_output=True, check=True, timeout=DEADLINE)
        commands = {"numpy": [sys.executable, "-c", "import numpy"],
                    "status": [sys.executable, "-m", "cvflow", "status", store],
                    "validate": [sys.executable, "-m", "cvflow", "validate", workflow]}
        names = list(commands)
        times: dict[str, list[float]] = {n: [] for n in names}
        before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        for rnd in range(args.runs + 1):
            for name in names[rnd % 3:] + names[:rnd % 3]:
                start = time.perf_counter()
                subprocess.run(commands[name], env=env, cwd=tmp, capture_output=True, check=True,
                               timeout=DEADLINE)
                if rnd:                                   # round 0: warm-up
                    times[name].append(time.perf_counter() - start)
        after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    med = {n: statistics.median(v) for n, v in times.items()}
    print(f"medians of {args.runs}, load {before} -> {after}")
    for name in names:
        print(f"  {name:9s} {med[name]:.3f} s  {med[name] / med['numpy']:.2f}x import numpy "
              f"(+{med[name] - med['numpy']:.3f} s)")


if __name__ == "__main__":
    main()
