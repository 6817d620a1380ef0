#!/usr/bin/env bash
# CI, issue 6: start a real one-node SLURM on this machine (installs slurm-wlm + munge if
# needed), run the tests marked `slurm` against it for real, then stop it again.
# CVFLOW_REQUIRE_SLURM=1 turns "SLURM not reachable" from a skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}

cluster/slurm-dev/start.sh
trap 'cluster/slurm-dev/stop.sh' EXIT
sinfo
srun -p debug -N1 -n1 hostname
CVFLOW_REQUIRE_SLURM=1 "$PYTEST" -m slurm tests/slurm
