# A real one-node Slurm cluster on this machine, for the `slurm` test label. Sourced, not run.
#
#   source tests/slurm/local_slurm.sh
#   slurm_install                 # Debian's slurmctld slurmd slurm-client munge (once; idempotent)
#   slurm_up "$dir" [cpus]        # munged + slurmctld + slurmd, all state under $dir; exports SLURM_CONF
#   ... sbatch / srun / salloc ...
#   slurm_down                    # cancel jobs, stop the daemons by PID (call it from an EXIT trap)
#
# The pieces of slurm_up also make clusters of several nodes (tests/slurm/two_nodes.sh): set
# SLURM_TEST_CTLD_ADDR and SLURM_TEST_NODES ("name:address" per node), then slurm_prepare,
# slurm_start_munge, slurm_start_ctld, slurm_start_slurmd per node (with a command that puts it
# in the node's namespaces) and slurm_wait_idle.
#
# Everything a daemon writes (keys, sockets, state, spool, logs, pid files) lives under $dir,
# the ports are private (not 6817/6818), and the clients find this cluster through
# SLURM_CONF, so a machine that already runs Slurm or munge is left alone. The settings and
# why each is needed are measured facts: see ../shared/notes/local-slurm.md and the comments
# in slurm_write_conf below.

SLURM_TEST_PACKAGES=(slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev libpmix-dev)

slurm_log() { printf '[local-slurm] %s\n' "$*" >&2; }

# Installs whatever is missing. Package maintainer scripts would start system-wide
# munged/slurmd/slurmctld; a temporary policy-rc.d that answers 101 ("action forbidden")
# keeps them from doing so. A policy-rc.d that was already there is left as it was.
slurm_install() {
  local missing=() p
  for p in "${SLURM_TEST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  [ "$(id -u)" -eq 0 ] || { slurm_log "need root to install ${missing[*]}"; return 1; }
  slurm_log "installing ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && ours=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null; } || rc=$?
  ((ours)) && rm -f "$policy"
  return $rc
}

# Writes slurm.conf and cgroup.conf for the nodes of SLURM_TEST_NODES ("name:address" each;
# default this host at 127.0.0.1) with $2 CPUs each, the controller on SLURM_TEST_CTLD_ADDR
# (default 127.0.0.1). Each slurmd gets its own spool, pid file and log (%n: its node name);
# SLURM_TEST_TMPFS must then name a directory each node has to itself.
slurm_write_conf() {
  local d=$1 cpus=$2 host node names=()
  host=$(hostname -s)
  local -a nodes=("${SLURM_TEST_NODES[@]:-${host}:127.0.0.1}")
  cat >"$d/etc/slurm.conf" <<EOF
ClusterName=fsdptest
SlurmctldHost=${host}(${SLURM_TEST_CTLD_ADDR:-127.0.0.1})
SlurmctldPort=${SLURM_TEST_CTLD_PORT}
SlurmdPort=${SLURM_TEST_SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job otherwise waits ~120 s before it may start again.
AuthInfo=socket=${d}/munge/munge.socket,cred_expire=10
StateSaveLocation=${d}/state
SlurmdSpoolDir=${d}/spool/%n
SlurmctldPidFile=${d}/run/slurmctld.pid
SlurmdPidFile=${d}/run/slurmd-%n.pid
SlurmctldLogFile=${d}/log/slurmctld.log
SlurmdLogFile=${d}/log/slurmd-%n.log
# Each node's own: slurmstepd's PMIx server makes its directories here.
TmpFS=${SLURM_TEST_TMPFS:-${d}/tmp}
# No cgroups, no systemd: track processes by parent, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node may declare more CPUs than the machine has (4 ranks on 2 cores); without this it
# would be marked INVAL and drained.
SlurmdParameters=config_overrides
# A job asking for more than the node has is refused at submission instead of pending forever.
EnforcePartLimits=ALL
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_interval=2
ReturnToService=2
KillWait=5
MinJobAge=600
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
  for node in "${nodes[@]}"; do
    echo "NodeName=${node%%:*} NodeAddr=${node#*:} CPUs=${cpus} State=UNKNOWN" >>"$d/etc/slurm.conf"
    names+=("${node%%:*}")
  done
  local IFS=,
  echo "PartitionName=debug Nodes=${names[*]} Default=YES MaxTime=INFINITE State=UP" >>"$d/etc/slurm.conf"
  # slurmd 22.05 always loads a cgroup plugin; pointed at an empty directory it initialises
  # without touching the machine's cgroups.
  cat >"$d/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=${d}/cgroup
EOF
}

# Waits until $1 (a command) succeeds, at most $2 seconds.
slurm_wait_for() {
  local cmd=$1 limit=$2 t=0
  until eval "$cmd" >/dev/null 2>&1; do
    sleep 0.2
    t=$((t + 1))
    ((t > limit * 5)) && return 1
  done
  return 0
}

# True when nothing listens on TCP port $1 (read from /proc: no ss/netstat on a bare image).
slurm_port_free() {
  local hex
  hex=$(printf '%04X' "$1")
  ! grep -qsE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6
}

# Picks the ports, makes the state directories and writes the configuration; exports
# SLURM_CONF.
slurm_prepare() {
  local d=$1 cpus=$2 try
  SLURM_TEST_DIR=$d
  # Two adjacent free ports in 16817..20816 (never Slurm's own 6817/6818).
  for ((try = 0; try < 50 && ${SLURM_TEST_CTLD_PORT:-0} == 0; try++)); do
    local p=$((16817 + RANDOM % 2000 * 2))
    if slurm_port_free "$p" && slurm_port_free "$((p + 1))"; then SLURM_TEST_CTLD_PORT=$p; fi
  done
  : "${SLURM_TEST_CTLD_PORT:?no free port pair found}"
  : "${SLURM_TEST_SLURMD_PORT:=$((SLURM_TEST_CTLD_PORT + 1))}"
  # munged runs as the munge user and refuses a socket or key directory it does not trust,
  # so the tree is world-traversable and munge's own directories are munge's.
  mkdir -p "$d"/{etc,munge,state,spool,run,log,tmp,cgroup}
  chmod 755 "$d"
  runuser -u munge -- test -x "$d/munge" ||
    { slurm_log "the munge user cannot reach $d: make it and its parents traversable (chmod 755)"; return 1; }
  chown munge:munge "$d/munge"
  chmod 755 "$d/munge"   # munged wants the socket directory executable by all
  slurm_write_conf "$d" "$cpus"
  export SLURM_CONF=$d/etc/slurm.conf
}

# munged on a socket under $SLURM_TEST_DIR (a file: every network namespace reaches it).
slurm_start_munge() {
  local d=$SLURM_TEST_DIR
  runuser -u munge -- mungekey --create --keyfile="$d/munge/munge.key" >/dev/null
  runuser -u munge -- munged --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed"
  slurm_wait_for "munge -n -S '$d/munge/munge.socket' | unmunge -S '$d/munge/munge.socket'" 10 ||
    { slurm_log "munged did not come up:"; cat "$d/munge/munged.log" >&2; return 1; }
}

slurm_start_ctld() {
  slurmctld -c -f "$SLURM_CONF"
  slurm_wait_for "scontrol ping | grep -q UP" 20 ||
    { slurm_log "slurmctld did not come up:"; tail -20 "$SLURM_TEST_DIR/log/slurmctld.log" >&2; return 1; }
}

# slurm_start_slurmd NODE [COMMAND...]: the slurmd of node NODE, started through COMMAND
# when given (one that enters the node's namespaces and execs its arguments); it
# daemonizes and writes its pid file.
slurm_start_slurmd() {
  local node=$1
  shift
  mkdir -p "$SLURM_TEST_DIR/spool/$node"
  "$@" slurmd -f "$SLURM_CONF" -N "$node"
}

# Until $1 nodes are idle (at most 30 s).
slurm_wait_idle() {
  slurm_wait_for "[ \$(sinfo -h -N -o %T | grep -cx idle) -ge $1 ]" 30 ||
    { slurm_log "nodes not idle:"; sinfo -N >&2; tail -20 "$SLURM_TEST_DIR"/log/slurmd-*.log >&2; return 1; }
}

slurm_up() {
  local d=$1 cpus=${2:-8}
  slurm_prepare "$d" "$cpus" || return 1
  slurm_start_munge || return 1
  slurm_start_ctld || return 1
  slurm_start_slurmd "$(hostname -s)" || return 1
  slurm_wait_idle 1 || return 1
  slurm_log "up in $d (ports $SLURM_TEST_CTLD_PORT/$SLURM_TEST_SLURMD_PORT, $cpus CPUs)"
}

# Stops daemons by their pid files: SIGTERM to all at once (each takes ~2 s to shut down),
# then SIGKILL to any still alive after 10 s.
slurm_stop_pids() {
  local f pid pids=() t
  for f in "$@"; do
    [[ -s $f ]] || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  for ((t = 0; t < 100; t++)); do
    local alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    ((${#alive[@]} == 0)) && return 0
    pids=("${alive[@]}")
    sleep 0.1
  done
  slurm_log "pid(s) ${pids[*]} still alive after 10 s: SIGKILL"
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

slurm_down() {
  local d=${SLURM_TEST_DIR:-}
  [[ -n $d ]] || return 0
  SLURM_TEST_DIR=
  if [[ -s $d/run/slurmctld.pid ]] && kill -0 "$(cat "$d/run/slurmctld.pid")" 2>/dev/null; then
    scancel --quiet --user="$(id -un)" 2>/dev/null || true
    slurm_wait_for "[ -z \"\$(squeue -h -o %i)\" ]" 15 || slurm_log "jobs still listed at shutdown"
  fi
  slurm_stop_pids "$d"/run/slurmd-*.pid "$d/run/slurmctld.pid" "$d/munge/munged.pid"
}

# Prints the daemons' logs (for a failing test).
slurm_dump_logs() {
  local d=${1:-$SLURM_TEST_DIR} f
  for f in "$d"/log/*.log "$d"/munge/munged.log; do
    [ -f "$f" ] || continue
    echo "===== $f (last 40 lines)"
    tail -40 "$f"
  done >&2
}
