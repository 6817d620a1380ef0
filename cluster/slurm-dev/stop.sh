#!/usr/bin/env bash
# Stop the one-node development SLURM started by start.sh: cancel jobs, stop slurmd,
# slurmctld and munged (only the daemons whose pid files start.sh's config names).
set -uo pipefail
STATE=${CVFLOW_SLURM_DIR:-/var/tmp/cvflow-slurm}

command -v scancel >/dev/null && scancel --full --partition=debug 2>/dev/null || true

stop() {  # stop PIDFILE NAME: TERM, wait, then KILL
  local pidfile=$1 name=$2 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    echo "stop.sh: stopped $name ($pid)"
  fi
  rm -f "$pidfile"
}
stop "$STATE/slurmd.pid" slurmd
stop "$STATE/slurmctld.pid" slurmctld
stop /run/munge/munged.pid munged
exit 0
