#!/usr/bin/env bash
# NCCL bootstrapped through the TCP store gives the same losses as NCCL bootstrapped over MPI:
# fsdp_train on the CUDA emulator (train.device cuda, FULL_SHARD, a few steps of a tiny Llama
# on synthetic data) on 1, 2 and 4 ranks, once under mpiexec (NCCL's unique id broadcast over
# MPI, the host collectives on MPI) and once as plain processes with torchrun-style variables
# (no MPI at all: the id and the host collectives over the store; one process needs nothing,
# not even the variables). Both use the emulated NCCL's TCP transport
# (FSDP_EMU_NCCL_TRANSPORT=tcp), so the device collectives are the same and the runs differ
# only in how the ranks met: the losses must be equal bit for bit. Then a rank stopped in a
# launch without MPI: the watchdog's census goes over the store, and the store's abort ends the
# job (exit 76). Label emulated-gpu.
#
#   bash tests/integration/store_bootstrap_emulated.sh build-emu/fsdp_train mpiexec
set -euo pipefail
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
mpiexec="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "store_bootstrap_emulated: FAILED: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
export FSDP_EMU_DEVICE_COUNT=4 FSDP_EMU_NCCL_TRANSPORT=tcp OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0
args=(train --config "$root/configs/tiny.yaml" --set data.source=synthetic --set train.device=cuda
      --set model.num_layers=2 --set train.seq_len=32 --set train.micro_batch_size=2 --set train.grad_accum_steps=1
      --set train.max_steps=3 --set train.log_every=1 --set train.eval_every=0 --set checkpoint.resume=none
      --set fsdp.sharding_strategy=FULL_SHARD --set dist.timeout_s=120)
losses() { sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p' "$1/metrics.jsonl"; }

for np in 1 2 4; do
  "$mpiexec" --oversubscribe --allow-run-as-root -x FSDP_EMU_DEVICE_COUNT -x FSDP_EMU_NCCL_TRANSPORT \
    -x OMP_NUM_THREADS -x ASAN_OPTIONS -n "$np" "$bin" "${args[@]}" --set run.dir="$tmp/mpi$np" \
    >"$tmp/mpi$np.log" 2>&1 || { tail -20 "$tmp/mpi$np.log"; fail "$np rank(s) under mpiexec"; }
  port=$(free_port)
  pids=()
  for ((r = 0; r < np; ++r)); do
    if [ "$np" -eq 1 ]; then
      env -u RANK -u WORLD_SIZE "$bin" "${args[@]}" --set run.dir="$tmp/store$np" >"$tmp/store$np.$r.log" 2>&1 &
    else
      RANK=$r WORLD_SIZE=$np MASTER_ADDR=localhost MASTER_PORT=$port \
        "$bin" "${args[@]}" --set run.dir="$tmp/store$np" >"$tmp/store$np.$r.log" 2>&1 &
    fi
    pids+=($!)
  done
  for ((r = 0; r < np; ++r)); do
    wait "${pids[$r]}" || { tail -20 "$tmp/store$np.$r.log"; fail "rank $r of $np without MPI"; }
  done
  pids=()
  if [ "$np" -gt 1 ]; then
    grep -q "launched by torchrun (the ranks met through the TCP store at localhost:$port (MASTER_PORT))" \
      "$tmp/store$np.0.log" || fail "the $np-rank run without MPI does not say it met through the store"
    grep -q "launched by mpirun (the ranks met through MPI)" "$tmp/mpi$np.log" || fail "the mpiexec run does not say MPI"
  fi
  a="$(losses "$tmp/mpi$np")" b="$(losses "$tmp/store$np")"
  [ "$(wc -l <<<"$a")" -eq 3 ] || fail "$np rank(s): $(wc -l <<<"$a") losses under mpiexec, expected 3"
  [ "$a" = "$b" ] || fail "$np rank(s): losses differ: MPI bootstrap $(echo $a), TCP store $(echo $b)"
  echo "store_bootstrap_emulated: $np rank(s): the same losses bootstrapped by MPI and by the TCP store: $(echo $a)"
done
# The collective watchdog of a launch without MPI: rank 1 stopped mid-run, rank 0's NCCL
# collective outlives dist.timeout_s, its census over the store finds rank 1 silent, and the
# store's abort ends the job with exit 76 (rank 1 too, once it runs again).
port=$(free_port)
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=$port "$bin" "${args[@]}" --set train.max_steps=200 \
    --set dist.timeout_s=8 --set run.dir="$tmp/stopped" >"$tmp/stopped.$r.log" 2>&1 &
  pids+=($!)
done
for ((i = 0; i < 600; ++i)); do
  grep -qE 'step +2/200' "$tmp/stopped.0.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "rank 0 ended before step 2: $(tail -3 "$tmp/stopped.0.log")"
  sleep 0.5
done
kill -STOP "${pids[1]}"
stopped=$(date +%s)
code=0
wait "${pids[0]}" || code=$?
took=$(( $(date +%s) - stopped ))
[ "$code" -eq 76 ] || { tail -5 "$tmp/stopped.0.log"; fail "rank 0 exited $code after rank 1 stopped, expected 76"; }
grep -q "watchdog: .* world rank 1 (host [^)]*) did not arrive (no reply within 1 s" "$tmp/stopped.0.log" ||
  { tail -5 "$tmp/stopped.0.log"; fail "rank 0's watchdog line does not name the stopped rank"; }
[ "$took" -le 40 ] || fail "rank 0 took $took s to end the job with dist.timeout_s 8"
kill -CONT "${pids[1]}"
code=0
timeout 30 tail --pid="${pids[1]}" -f /dev/null || fail "rank 1 still runs 30 s after it was continued"
wait "${pids[1]}" || code=$?
[ "$code" -eq 76 ] || fail "rank 1 exited $code once continued, expected 76"
pids=()
echo "store_bootstrap_emulated: a stopped rank: rank 0's watchdog named it over the store and ended the job in $took s (exit 76 on both)"
echo "store_bootstrap_emulated: passed"
