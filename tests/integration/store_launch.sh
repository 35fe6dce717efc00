#!/usr/bin/env bash
# fsdp_train's ranks launched without MPI (torchrun-style RANK / WORLD_SIZE / MASTER_ADDR /
# MASTER_PORT), as separate processes on this machine: they meet through the TCP store
# (include/fsdp/dist/tcp_store.h), and every way such a launch goes wrong ends every rank with
# one line naming the rank at fault and the documented exit code, within dist.timeout_s:
#   * the CPU backend across ranks needs MPI: exit 2 on both ranks, saying so;
#   * a rank that never arrives (WORLD_SIZE=3, two started): exit 76, naming world rank 2;
#   * rank 0 killed while the others wait: exit 76, "world rank 0 ... is gone";
#   * MASTER_PORT taken on rank 0's host: rank 0 exits 2 naming the port;
#   * two ranks told different WORLD_SIZEs: exit 2 on both, naming both sizes.
# About 20 s. The store's own failure modes, in-process: tests/cpu/test_tcp_store.cpp.
#
#   bash tests/integration/store_launch.sh build/fsdp_train
set -euo pipefail
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "store_launch: FAILED: $*" >&2; for f in "$tmp"/*.log; do echo "--- $f"; tail -5 "$f"; done >&2; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

# rank RANK WORLD_SIZE PORT LOG [extra --set ...]: one rank in the background; its pid in $last
rank() {
  local r=$1 n=$2 port=$3 log=$4; shift 4
  env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK -u SLURM_JOB_ID RANK="$r" WORLD_SIZE="$n" \
    MASTER_ADDR=localhost MASTER_PORT="$port" OMP_NUM_THREADS=1 \
    "$bin" train --config "$root/configs/tiny.yaml" --set data.source=synthetic --set train.max_steps=2 \
    --set run.dir="$tmp/run_$port" "$@" >"$log" 2>&1 &
  last=$!
  pids+=("$last")
}
# waits for pid $1 at most $2 seconds; its exit code in $code
wait_for() {
  local waited=0
  while kill -0 "$1" 2>/dev/null; do
    sleep 0.2
    waited=$((waited + 1))
    [ "$waited" -le $(($2 * 5)) ] || fail "a rank still runs after $2 s (pid $1)"
  done
  code=0
  wait "$1" || code=$?
}
expect() {  # expect LOG CODE TEXT: the rank's exit code and a line of its log
  [ "$code" -eq "$2" ] || fail "$1: exit code $code, expected $2"
  grep -qF -- "$3" "$1" || fail "$1 does not say: $3"
}

# 1. Two CPU ranks started as srun without --mpi starts them (Slurm's variables, rank 0 on the
#    step's first node): they meet through the store, and the CPU backend refuses.
port=$(free_port)
for r in 0 1; do
  env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK -u RANK -u WORLD_SIZE SLURM_JOB_ID=777 SLURM_STEP_ID=0 \
    SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_PROCID=$r SLURM_LOCALID=$r SLURM_STEP_NODELIST=localhost \
    MASTER_PORT="$port" OMP_NUM_THREADS=1 "$bin" train --config "$root/configs/tiny.yaml" --set data.source=synthetic \
    --set run.dir="$tmp/run_cpu" >"$tmp/cpu$r.log" 2>&1 &
  pids+=($!)
done
a=${pids[-2]} b=${pids[-1]}
# Each rank refuses; whichever does first ends the job for the other (the store's abort, as
# MPI_Abort would), whose log then names it.
wait_for "$a" 30; [ "$code" -eq 2 ] || fail "rank 0 of the CPU launch exited $code, expected 2"
wait_for "$b" 30; [ "$code" -eq 2 ] || fail "rank 1 of the CPU launch exited $code, expected 2"
cat "$tmp/cpu0.log" "$tmp/cpu1.log" >"$tmp/cpu.log"
code=2 expect "$tmp/cpu.log" 2 "the CPU backend across 2 ranks needs MPI: launch with \`mpirun -np 2\` or \`srun --mpi=pmix\`"
grep -qF "(srun started these ranks without MPI, which only GPU runs support)" "$tmp/cpu.log" || fail "no launcher named"
grep -qE "needs MPI|world rank 1 \(host [^)]*\) ended the job with exit code 2" "$tmp/cpu0.log" || fail "rank 0 says nothing"
echo "store_launch: srun without --mpi on the CPU: the ranks met through the store; refused (exit 2 on both ranks)"

# 2. WORLD_SIZE=3 with two ranks started: world rank 2 never arrives.
port=$(free_port)
start=$(date +%s)
rank 0 3 "$port" "$tmp/absent0.log" --set dist.timeout_s=3; a=$last
rank 1 3 "$port" "$tmp/absent1.log" --set dist.timeout_s=3; b=$last
wait_for "$a" 20; expect "$tmp/absent0.log" 76 "world rank 2 never joined the TCP store on host"
wait_for "$b" 20; expect "$tmp/absent1.log" 76 "world rank 2 never joined the TCP store on host"
grep -qF "within 3 s (dist.timeout_s); 2 of 3 did" "$tmp/absent1.log" || fail "the line does not give the timeout"
took=$(( $(date +%s) - start ))
[ "$took" -le 12 ] || fail "the absent rank took $took s to report with dist.timeout_s 3"
echo "store_launch: a rank that never arrives is named by every rank in $took s (exit 76)"

# 3. Rank 0 killed while rank 1 waits for the third: rank 1 reports it at once.
port=$(free_port)
rank 0 3 "$port" "$tmp/dead0.log" --set dist.timeout_s=120; a=$last
rank 1 3 "$port" "$tmp/dead1.log" --set dist.timeout_s=120; b=$last
sleep 2
kill -9 "$a"
wait "$a" 2>/dev/null || true
start=$(date +%s)
wait_for "$b" 15; expect "$tmp/dead1.log" 76 "world rank 0 (host "
grep -qF "which hosts the TCP store at localhost:$port, is gone" "$tmp/dead1.log" || fail "rank 1 does not say rank 0 is gone"
echo "store_launch: rank 0 killed: rank 1 ended in $(( $(date +%s) - start )) s (exit 76)"

# 4. MASTER_PORT taken on rank 0's host.
port=$(free_port)
python3 -c "import socket, time; s = socket.socket(); s.bind(('', $port)); s.listen(); print('listening', flush=True); time.sleep(30)" \
  >"$tmp/holder.log" 2>&1 &
holder=$!
pids+=("$holder")
for ((i = 0; i < 100; ++i)); do grep -qs listening "$tmp/holder.log" && break; sleep 0.1; done
grep -q listening "$tmp/holder.log" || fail "could not hold port $port: $(cat "$tmp/holder.log")"
rank 0 2 "$port" "$tmp/port0.log" --set dist.timeout_s=3; a=$last
rank 1 2 "$port" "$tmp/port1.log" --set dist.timeout_s=3; b=$last
wait_for "$a" 20; expect "$tmp/port0.log" 2 "world rank 0 cannot host the TCP store on port $port of host"
grep -qF "the port is in use" "$tmp/port0.log" || fail "rank 0 does not say the port is in use"
wait_for "$b" 20; [ "$code" -ne 0 ] || fail "rank 1 of the port-in-use launch exited 0"
kill "$holder" 2>/dev/null || true
echo "store_launch: MASTER_PORT in use: rank 0 names it (exit 2), rank 1 ends (exit $code)"

# 5. Ranks told different WORLD_SIZEs.
port=$(free_port)
rank 0 2 "$port" "$tmp/size0.log" --set dist.timeout_s=20; a=$last
sleep 0.5
rank 1 3 "$port" "$tmp/size1.log" --set dist.timeout_s=20; b=$last
wait_for "$a" 20; expect "$tmp/size0.log" 2 "was started with WORLD_SIZE=3 but world rank 0 (host"
wait_for "$b" 20; expect "$tmp/size1.log" 2 "with WORLD_SIZE=2: every rank must be told the same number of ranks"
echo "store_launch: different WORLD_SIZEs refused on both ranks (exit 2)"
echo "store_launch: passed"
