#!/bin/sh
# Regenerate the stores written by cvflow before the `class` dimension (store format 1),
# from the pinned commit below, into tests/data/v1/. test_store_formats.py opens and reduces them.
# Usage (from the repository root): sh tests/data/make_v1_stores.sh [PYTHON]
set -e
COMMIT=5973b8d
PY=${1:-/work/venv/bin/python}
ROOT=$(git rev-parse --show-toplevel)
OUT="$ROOT/tests/data/v1"
TMP=$(mktemp -d)
git -C "$ROOT" worktree add --detach "$TMP/src" "$COMMIT" >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$TMP/src"; rm -rf "$TMP"' EXIT
for wf in "$OUT"/*.yaml; do
  name=$(basename "$wf" .yaml)
  rm -rf "$OUT/$name.zarr"
  (cd "$TMP" && PYTHONPATH="$TMP/src" "$PY" -m cvflow run "$wf" --store "$OUT/$name.zarr" \
      --workers 1 >/dev/null)
done
