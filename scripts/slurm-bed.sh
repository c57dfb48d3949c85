#!/usr/bin/env bash
# The Slurm test bed: a real Slurm cluster on this host from Debian's packages (munge, slurmctld,
# two slurmd), no containers. See docs/slurm.md.
#
#   scripts/slurm-bed.sh          # start it (idempotent: a running bed is left as it is)
#   scripts/slurm-bed.sh status   # say whether it runs (exit 0) or not (exit 1)
#   scripts/slurm-bed.sh stop     # stop the Slurm daemons (node daemons first), and munged if it
#                                 # was started by this script
#
# Needs root (it writes /etc/slurm/slurm.conf and runs the daemons) and the packages
# (scripts/install-deps.sh installs them). Every daemon binds 127.0.0.1 only. The bed:
#   - cluster "rrbed", controller on localhost, nodes n1 and n2 (25 CPUs each, over-committed
#     on purpose so that 50 one-CPU allocations fit), partition "debug" (default);
#   - no slurmdbd: `sacct` says accounting is disabled; exit codes are read from `scontrol`
#     (for MinJobAge=10 s after a job ends) and from the record jobcomp/script appends to
#     /var/log/rr-slurm-bed/jobcomp.log;
#   - KillWait=3, MinJobAge=10, batch_sched_delay=0: a test suite does not wait on Slurm's
#     production defaults;
#   - each slurmd runs in a PID and mount namespace of its own with a private /tmp: a job's
#     processes, /proc and tmux sockets are not the login node's (this host's), as on a cluster
#     whose compute nodes are other hosts. The home directories stay shared, as a cluster's
#     shared file system is.
# The config is /etc/slurm/slurm.conf, the clients' default path: no SLURM_CONF needed, for root
# or any other account. A slurm.conf that this script did not write is never touched.
set -euo pipefail
# CI runs with a minimal environment: the daemons and runuser/mungekey live in sbin.
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
JOBCOMP=$CONF_DIR/rr-bed-jobcomp.sh
LIB=/var/lib/rr-slurm-bed
LOG=/var/log/rr-slurm-bed
RUN=/run/rr-slurm-bed
MARK="# remote-runner Slurm test bed (scripts/slurm-bed.sh)"
NODES=(n1 n2)

say() { echo "slurm-bed: $*" >&2; }
die() {
  say "$*"
  exit 1
}

pid_alive() { # pidfile
  local pid
  [ -r "$1" ] && read -r pid <"$1" && [ -n "$pid" ] && [ -d "/proc/$pid" ]
}

config() {
  cat <<EOF
$MARK; rewritten by that script.
ClusterName=rrbed
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$LIB/ctld
SlurmdSpoolDir=$LIB/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.inner.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/script
JobCompLoc=$JOBCOMP
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
MpiDefault=none
KillWait=3
MinJobAge=10
MailProg=/bin/true
ReturnToService=2
NodeName=n[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001-17002 CPUs=25 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
}

jobcomp_script() {
  cat <<EOF
#!/bin/sh
$MARK: one line per ended job, a durable record of its state and exit code.
printf '%s %s %s %s %s\n' "\$JOBID" "\$JOBSTATE" "\$EXITCODE" "\$USERNAME" "\$END" >>$LOG/jobcomp.log
EOF
}

check_packages() {
  local missing=()
  for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged; do
    [ -x "$b" ] || missing+=("$b")
  done
  for c in sinfo salloc srun sbatch squeue scontrol scancel; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}; install with: bash scripts/install-deps.sh (or apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge)"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create >/dev/null 2>&1 || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0600 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  if ! pid_alive /run/munge/munged.pid; then
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    mkdir -p "$RUN"
    touch "$RUN/munged.started" # so that `stop` stops it too
  fi
  for _ in $(seq 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "munged does not answer (see /var/log/munge/munged.log)"
}

stop_daemons() {
  local n
  # $RUN/slurmd-N.pid: the namespace's outer process (killing it ends the node's namespace).
  for n in "${NODES[@]}"; do
    if pid_alive "$RUN/slurmd-$n.pid"; then kill "$(cat "$RUN/slurmd-$n.pid")" 2>/dev/null || true; fi
  done
  if pid_alive "$RUN/slurmctld.pid"; then kill "$(cat "$RUN/slurmctld.pid")" 2>/dev/null || true; fi
  for _ in $(seq 50); do
    local up=0
    for f in "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid"; do
      if pid_alive "$f"; then up=1; fi
    done
    [ "$up" = 0 ] && return 0
    sleep 0.1
  done
  say "a Slurm daemon did not stop within 5 s"
}

write_config() { # prints "changed" when the config was (re)written
  mkdir -p "$CONF_DIR" "$LIB/ctld" "$LOG" "$RUN"
  for n in "${NODES[@]}"; do mkdir -p "$LIB/$n"; done
  chmod 0755 "$LOG"
  touch "$LOG/jobcomp.log"
  chmod 0644 "$LOG/jobcomp.log"
  if [ -e "$CONF" ] && ! head -n1 "$CONF" | grep -qF "$MARK"; then
    die "$CONF exists and was not written by this script; move it away to use the bed"
  fi
  local want
  want=$(config)
  if [ "$(jobcomp_script)" != "$(cat "$JOBCOMP" 2>/dev/null)" ]; then
    jobcomp_script >"$JOBCOMP"
    chmod 0755 "$JOBCOMP"
  fi
  if [ "$want" != "$(cat "$CONF" 2>/dev/null)" ]; then
    printf '%s\n' "$want" >"$CONF.tmp"
    chmod 0644 "$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    echo changed
  fi
}

start_slurm() {
  # The daemons keep the caller's working directory, and slurmstepd returns to it after each
  # job step: a directory under /tmp (a checkout there) does not exist in a node's private /tmp,
  # and every job's stderr would start with "Unable to return to working directory".
  cd /
  if ! pid_alive "$RUN/slurmctld.pid"; then
    /usr/sbin/slurmctld -i
  fi
  local n
  for n in "${NODES[@]}"; do
    if ! pid_alive "$RUN/slurmd-$n.pid"; then
      start_node "$n"
    fi
  done
}

# A node as another host would be: slurmd (in the foreground, under a shell that reaps orphans
# as the namespace's init) in new PID and mount namespaces, with /proc of its own and a private
# tmpfs on /tmp. The outer unshare's pid is the node's pid file.
start_node() { # name
  local log=$LOG/slurmd-$1.console
  # shellcheck disable=SC2016 # expanded by that sh
  setsid unshare --pid --fork --kill-child --mount --propagation private --mount-proc \
    /bin/sh -c 'mount -t tmpfs -o mode=1777 rr-node-tmp /tmp && /usr/sbin/slurmd -D -N "$1"' \
    node "$1" </dev/null >"$log" 2>&1 &
  echo $! >"$RUN/slurmd-$1.pid"
}

nodes_ready() { # every node idle, mixed or allocated (not down, drained or unknown)
  local states
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  [ "$(printf '%s\n' "$states" | grep -c .)" -eq ${#NODES[@]} ] || return 1
  ! printf '%s\n' "$states" | grep -qvE ' (idle|mixed|allocated|completing)$'
}

wait_ready() {
  local i
  for i in $(seq 100); do
    if nodes_ready; then return 0; fi
    # A node that a former run left down or drained comes back.
    if [ "$i" = 20 ]; then scontrol update nodename=n[1-2] state=resume >/dev/null 2>&1 || true; fi
    sleep 0.2
  done
  sinfo -N >&2 || true
  die "the nodes are not ready after 20 s (see $LOG/slurmctld.log and $LOG/slurmd-*.log)"
}

print_access() {
  local controller
  controller=$(scontrol ping 2>/dev/null | head -n1 || true)
  cat <<EOF
slurm-bed: running. ${controller}
  SLURM_CONF=$CONF   (the default path: clients find it without the variable)
  nodes:     $(sinfo -h -N -o '%N:%T' | tr '\n' ' ')
  partition: debug (default); try: salloc --no-shell -N1 --time=5; srun --jobid=<id> --overlap hostname
  logs:      $LOG/   stop with: scripts/slurm-bed.sh stop
EOF
}

case "${1:-start}" in
status)
  if nodes_ready; then print_access; exit 0; fi
  say "not running (or a node is not ready)"
  exit 1
  ;;
stop)
  stop_daemons
  if [ -e "$RUN/munged.started" ] && pid_alive /run/munge/munged.pid; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f "$RUN/munged.started"
    say "stopped (and munged, which this script had started)"
  else
    say "stopped (munged, not started by this script, is left running)"
  fi
  exit 0
  ;;
start) ;;
*) die "usage: scripts/slurm-bed.sh [start|status|stop]" ;;
esac

[ "$(id -u)" -eq 0 ] || die "needs root (it writes $CONF and runs the Slurm daemons)"
check_packages
start_munge
if [ "$(write_config)" = changed ]; then
  stop_daemons
fi
start_slurm
wait_ready
print_access
