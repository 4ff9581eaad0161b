#!/usr/bin/env bash
# A one-node Slurm cluster for development and CI, running as root without systemd.
#
#   slurm/dev-cluster.sh up [--max-array-size N]   install if missing, configure, start, wait for idle
#   slurm/dev-cluster.sh status                    daemons, node state and the settings tests rely on
#   slurm/dev-cluster.sh down                      stop slurmd, slurmctld and munged
#
# `up` is idempotent: on a running cluster it only rewrites slurm.conf when a setting changed and then
# applies it (`scontrol reconfigure`, or a slurmctld restart for settings reconfigure does not take).
# Running jobs survive both.  Tests that need another MaxArraySize call `up --max-array-size N` and
# restore the previous value afterwards.
#
# Environment overrides (all optional):
#   DEV_SLURM_CONF       path of slurm.conf               (default /etc/slurm/slurm.conf)
#   DEV_SLURM_PARTITION  name of the only partition       (default dev)
#   DEV_SLURM_MEM_HEADROOM_MB  memory kept for the OS     (default 10% of RAM, at least 512)
#   DEV_SLURM_WAIT_S     seconds to wait for the node     (default 60)
#
# Facts behind the settings are in ../shared/NOTES.md ("A one-node Slurm").
set -euo pipefail

CONF=${DEV_SLURM_CONF:-/etc/slurm/slurm.conf}
PARTITION=${DEV_SLURM_PARTITION:-dev}
WAIT_S=${DEV_SLURM_WAIT_S:-60}
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
LOG_DIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
DEFAULT_MAX_ARRAY_SIZE=1001   # Slurm's own default

log() { echo "dev-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts system daemons)"
}

# --- installation -------------------------------------------------------------------------------

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        return
    fi
    log "installing slurm-wlm and munge with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
}

# --- configuration ------------------------------------------------------------------------------

node_name() { hostname -s; }

real_memory_mb() {
    local total headroom
    total=$(free -m | awk '/^Mem:/ {print $2}')
    headroom=${DEV_SLURM_MEM_HEADROOM_MB:-$(( total / 10 > 512 ? total / 10 : 512 ))}
    echo $(( total - headroom > 256 ? total - headroom : 256 ))
}

render_conf() {
    local max_array_size=$1 node
    node=$(node_name)
    cat <<EOF
# Written by slurm/dev-cluster.sh: a one-node development cluster. Edits are overwritten by 'up'.
ClusterName=shardprep-dev
SlurmctldHost=${node}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=${SPOOL_CTLD}
SlurmdSpoolDir=${SPOOL_D}
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
MpiDefault=none
# No cgroups in containers: track processes by parent pid and bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Accounting stays off, as on many real clusters: shardprep must work without sacct.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# A node that went down (e.g. the machine rebooted) comes back by itself.
ReturnToService=2
# Fast turnaround for tests: schedule every second, forget finished jobs after 60 s, kill 3 s after TERM.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
MinJobAge=60
KillWait=3
# A requeued job waits cred_expire+1 s before it may start again (default 120 s; 5 s here): keep tests quick.
AuthInfo=cred_expire=5
InactiveLimit=0
JobRequeue=1
MaxArraySize=${max_array_size}
NodeName=${node} CPUs=$(nproc) RealMemory=$(real_memory_mb) State=UNKNOWN
PartitionName=${PARTITION} Nodes=${node} Default=YES MaxTime=INFINITE State=UP
EOF
}

# --- daemons ------------------------------------------------------------------------------------

pid_alive() {  # pid_alive PIDFILE -> true when the file names a live process
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_ok; then return; fi
    mkdir -p /run/munge /var/log/munge
    chown munge:munge /run/munge /var/log/munge 2>/dev/null || true
    chmod 0755 /run/munge
    [[ -f /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (reinstall munge)"
    log "starting munged"
    munged --force
    for _ in $(seq 50); do munge_ok && return; sleep 0.1; done
    die "munged did not answer 'munge -n | unmunge'"
}

start_slurm_daemons() {
    mkdir -p "$SPOOL_CTLD" "$SPOOL_D" "$LOG_DIR"
    if ! pid_alive "$CTLD_PID"; then
        log "starting slurmctld (log: $LOG_DIR/slurmctld.log)"
        slurmctld -f "$CONF"
    fi
    if ! pid_alive "$SLURMD_PID"; then
        log "starting slurmd (log: $LOG_DIR/slurmd.log)"
        slurmd -f "$CONF"
    fi
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE: SIGTERM, wait up to 15 s, then SIGKILL
    local name=$1 file=$2 pid
    pid_alive "$file" || return 0
    pid=$(cat "$file")
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    log "$name did not exit after SIGTERM; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
}

node_state() { sinfo --noheader --nodes="$(node_name)" --format=%t 2>/dev/null | head -n1 | tr -d '*~#' || true; }

wait_for_node() {
    local state=""
    for _ in $(seq $(( WAIT_S * 2 ))); do
        state=$(node_state)
        case $state in
            idle|mix|alloc|comp) log "node $(node_name) is $state"; return 0 ;;
            down|drain|drng|fail) scontrol update NodeName="$(node_name)" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    log "node state after ${WAIT_S}s: '${state:-no answer}'; last slurmctld/slurmd log lines:"
    tail -n 5 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 || true
    return 1
}

current_max_array_size() {
    scontrol show config 2>/dev/null | awk -F= '/^MaxArraySize/ {gsub(/ /, "", $2); print $2}'
}

# Apply a changed slurm.conf to running daemons (running jobs survive both paths).  A change of
# MaxArraySize alone takes effect with `scontrol reconfigure`; anything else (AuthInfo, node lines) is
# only read at daemon start, so both daemons are restarted; slurmctld recovers its saved state.
apply_changed_conf() {
    local old=$1 new=$2 want=$3
    if [[ "$(grep -v '^MaxArraySize=' <<<"$old")" == "$(grep -v '^MaxArraySize=' <<<"$new")" ]]; then
        log "MaxArraySize changed; running scontrol reconfigure"
        scontrol reconfigure >/dev/null || true
        for _ in $(seq 20); do [[ $(current_max_array_size) == "$want" ]] && return 0; sleep 0.25; done
        log "reconfigure did not apply MaxArraySize=$want; restarting the daemons"
    else
        log "slurm.conf changed; restarting the daemons"
    fi
    stop_pidfile slurmd "$SLURMD_PID"
    stop_pidfile slurmctld "$CTLD_PID"
}

# --- commands -----------------------------------------------------------------------------------

cmd_up() {
    local max_array_size=$DEFAULT_MAX_ARRAY_SIZE
    while [[ $# -gt 0 ]]; do
        case $1 in
            --max-array-size) max_array_size=${2:?--max-array-size needs a number}; shift 2 ;;
            --max-array-size=*) max_array_size=${1#*=}; shift ;;
            *) die "unknown option for up: $1" ;;
        esac
    done
    [[ $max_array_size =~ ^[0-9]+$ && $max_array_size -ge 1 ]] \
        || die "--max-array-size must be a positive integer, got '$max_array_size'"
    require_root
    install_if_missing
    mkdir -p "$(dirname "$CONF")"
    local old="" new
    new=$(render_conf "$max_array_size")
    [[ -f $CONF ]] && old=$(cat "$CONF")
    if [[ "$old" != "$new" ]]; then
        printf '%s\n' "$new" >"$CONF"
        if pid_alive "$CTLD_PID"; then start_munge; apply_changed_conf "$old" "$new" "$max_array_size"; fi
    fi
    start_munge
    start_slurm_daemons
    wait_for_node || die "the node did not become ready"
    local got
    got=$(current_max_array_size)
    [[ $got == "$max_array_size" ]] || die "MaxArraySize is '$got', expected $max_array_size"
    log "ready: partition $PARTITION, $(nproc) CPUs, MaxArraySize=$got"
}

cmd_down() {
    require_root
    stop_pidfile slurmd "$SLURMD_PID"
    stop_pidfile slurmctld "$CTLD_PID"
    stop_pidfile munged "$MUNGE_PID"
    log "stopped"
}

cmd_status() {
    local rc=0
    for pair in "munged:$MUNGE_PID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
        if pid_alive "${pair#*:}"; then echo "${pair%%:*}: running (pid $(cat "${pair#*:}"))"
        else echo "${pair%%:*}: stopped"; rc=1; fi
    done
    if (( rc == 0 )); then
        echo "node $(node_name): $(node_state)"
        echo "MaxArraySize=$(current_max_array_size)"
        sinfo || rc=1
    fi
    return $rc
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    status) shift; cmd_status "$@" ;;
    -h|--help|help|"") usage ;;
    *) die "unknown command '$1' (use up, down or status)" ;;
esac
