#!/usr/bin/env bash
# Install (if needed) and start a real one-node SLURM cluster on this machine, as root.
#
#   cluster/slurm-dev/start.sh          # install slurm-wlm + munge, write the config, start daemons
#   cluster/slurm-dev/stop.sh           # stop them again
#
# Everything listens on 127.0.0.1: munged, slurmctld (port 6817), slurmd (port 6818).
# One node "localhost" with the machine's real CPU count and memory, one partition "debug".
# No cgroups (proctrack/linuxproc, task/none), no accounting, daemons run as root.
# State, logs and pid files live under $CVFLOW_SLURM_DIR (default /var/tmp/cvflow-slurm).
# The config goes to /etc/slurm/slurm.conf so sinfo/sbatch/scancel find it without SLURM_CONF.
set -euo pipefail

STATE=${CVFLOW_SLURM_DIR:-/var/tmp/cvflow-slurm}
CONF=/etc/slurm/slurm.conf

if [ "$(id -u)" != 0 ]; then
  echo "start.sh: must run as root (it installs packages and starts daemons)" >&2
  exit 1
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "start.sh: installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

mkdir -p "$STATE"/{ctld,d,log} /etc/slurm

# --- munge -----------------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { echo "start.sh: munged does not answer" >&2; exit 1; }

# --- slurm.conf ------------------------------------------------------------------------------
# The real hardware, as slurmd sees it; memory a little below the total so the node is valid.
read -r CPUS SOCKETS CORES THREADS MEM < <(slurmd -C | head -1 | tr ' ' '\n' | awk -F= '
  $1=="CPUs"{c=$2} $1=="SocketsPerBoard"{s=$2} $1=="CoresPerSocket"{k=$2}
  $1=="ThreadsPerCore"{t=$2} $1=="RealMemory"{m=$2}
  END{print c, s, k, t, int(m*0.95)}')

cat > "$CONF" <<CONF
# Written by cvflow cluster/slurm-dev/start.sh: a one-node development cluster on 127.0.0.1.
ClusterName=cvflow-dev
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# DESIGN CHOICE: no cgroups (containers rarely delegate them) and no accounting daemon.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
# Jobs share the node core by core (one dask worker job per core).
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=60
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
# No cgroup.conf: with proctrack/linuxproc and task/none slurmd 22.05 only probes cgroup v1.

# --- daemons ---------------------------------------------------------------------------------
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if ! alive "$STATE/slurmctld.pid"; then
  /usr/sbin/slurmctld -c -f "$CONF"     # -c: clean start, no jobs from an earlier life
fi
if ! alive "$STATE/slurmd.pid"; then
  /usr/sbin/slurmd -N localhost -f "$CONF"
fi

# Wait until the node is idle (or mixed/allocated if jobs already run).
for i in $(seq 60); do
  state=$(sinfo -h -N -n localhost -o '%t' 2>/dev/null || true)
  case "$state" in
    idle*|mix*|alloc*) break ;;
    down*|drain*|inval*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
sinfo
case "$(sinfo -h -N -n localhost -o '%t')" in
  idle*|mix*|alloc*) echo "start.sh: SLURM is up (partition debug, node localhost, $CPUS CPUs, ${MEM} MB)" ;;
  *) echo "start.sh: node did not become idle; see $STATE/log/" >&2; tail -20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2; exit 1 ;;
esac
