# Two Slurm nodes on this one machine, for tests/slurm/two_nodes.sh. Sourced after
# local_slurm.sh, whose pieces it uses:
#
#   two_nodes_up "$dir" [cpus]    # two "nodes" and a controller, all state under $dir
#   two_nodes_down                # the daemons (slurm_down), then the namespaces and the bridge
#
# Each node is a network namespace with a veth pair to a bridge in the root namespace
# (10.X.Y.1 and 10.X.Y.2; the controller and the clients, sbatch and scontrol, sit on the
# bridge at 10.X.Y.254), and its slurmd runs in a UTS namespace of its own (hostname
# fsdp-n1 / fsdp-n2, so `hostname` in a task names its node) and a mount namespace of its
# own, where a tmpfs is mounted on $dir/nodelocal: a directory each node has to itself, as
# /tmp or a local NVMe is on a real cluster. Everything else (the repository, $dir, munge's
# socket) is one filesystem that both nodes see, as a cluster's shared filesystem. Tasks
# inherit all three namespaces from slurmd, so two ranks on fsdp-n1 share memory and reach
# the ranks on fsdp-n2 only over TCP through the bridge.
#
# Names carry this shell's pid, so two tests on one machine do not collide.

two_nodes_log() { printf '[two-nodes] %s\n' "$*" >&2; }

# A /24 under 10.0.0.0/8 that no interface of the machine uses.
two_nodes_subnet() {
  local try a b
  for ((try = 0; try < 50; try++)); do
    a=$((100 + RANDOM % 100))
    b=$((RANDOM % 250))
    ip -4 addr show | grep -q "inet 10\.$a\.$b\." || { echo "10.$a.$b"; return 0; }
  done
  return 1
}

two_nodes_up() {
  local d=$1 cpus=${2:-8} net i ns
  command -v ip >/dev/null || { two_nodes_log "iproute2's ip is missing (apt-get install iproute2)"; return 1; }
  net=$(two_nodes_subnet) || { two_nodes_log "no free 10.x.y.0/24"; return 1; }
  TWO_NODES_BRIDGE=fb$$
  TWO_NODES_NS=(fsdp$$n1 fsdp$$n2)
  ip link add "$TWO_NODES_BRIDGE" type bridge || return 1
  ip addr add "$net.254/24" dev "$TWO_NODES_BRIDGE"
  ip link set "$TWO_NODES_BRIDGE" up
  for i in 1 2; do
    ns=${TWO_NODES_NS[i - 1]}
    ip netns add "$ns" || return 1
    ip link add "fv$$n$i" type veth peer name "fv$$b$i" || return 1
    ip link set "fv$$b$i" master "$TWO_NODES_BRIDGE"
    ip link set "fv$$b$i" up
    ip link set "fv$$n$i" netns "$ns"
    ip -n "$ns" addr add "$net.$i/24" dev "fv$$n$i"
    ip -n "$ns" link set "fv$$n$i" up
    ip -n "$ns" link set lo up
  done
  SLURM_TEST_CTLD_ADDR=$net.254
  SLURM_TEST_NODES=("fsdp-n1:$net.1" "fsdp-n2:$net.2")
  SLURM_TEST_TMPFS=$d/nodelocal
  slurm_prepare "$d" "$cpus" || return 1
  mkdir -p "$d/nodelocal"
  slurm_start_munge || return 1
  slurm_start_ctld || return 1
  for i in 1 2; do
    # ip netns exec: the node's network; unshare: its hostname and its own mounts (private
    # propagation: the tmpfs is invisible outside), then exec slurmd.
    slurm_start_slurmd "fsdp-n$i" ip netns exec "${TWO_NODES_NS[i - 1]}" unshare --uts --mount --propagation private \
      sh -c 'hostname "$0" && mount -t tmpfs -o size=256m "fsdp-$0-local" "$1" && shift && exec "$@"' \
      "fsdp-n$i" "$d/nodelocal" || return 1
  done
  slurm_wait_idle 2 || return 1
  two_nodes_log "up in $d: fsdp-n1 at $net.1, fsdp-n2 at $net.2, controller at $net.254 (ports $SLURM_TEST_CTLD_PORT/$SLURM_TEST_SLURMD_PORT, $cpus CPUs each)"
}

# Processes of node $1 (1 or 2): everything running in its network namespace.
two_nodes_pids() { ip netns pids "${TWO_NODES_NS[$1 - 1]}" 2>/dev/null || true; }

two_nodes_down() {
  slurm_down
  local ns pids
  for ns in "${TWO_NODES_NS[@]:-}"; do
    [[ -n $ns ]] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # Whatever a test left there (a stopped task): continued, then killed.
    [[ -z $pids ]] || { kill -CONT $pids 2>/dev/null; kill -KILL $pids 2>/dev/null; } || true
    ip netns del "$ns" 2>/dev/null || true
  done
  [[ -z ${TWO_NODES_BRIDGE:-} ]] || ip link del "$TWO_NODES_BRIDGE" 2>/dev/null || true
  TWO_NODES_NS=()
  TWO_NODES_BRIDGE=
}
