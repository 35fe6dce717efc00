#!/usr/bin/env bash
# FSDP on the CPU: one training configuration on 1, 2 and 4 ranks (mpirun), printing per
# rank count the step time, the bytes each rank sends per step, the share of the step
# spent waiting on communication, and throughput, as ratios against the 1-rank run.
# Weak scaling: every rank keeps the same micro-batch, so the global batch grows with N.
# On a 2-core machine ranks share cores (OMP_NUM_THREADS = 2 / ranks, at least 1).
#
#   bash bench/fsdp_bench.sh [STRATEGY] [extra --set overrides...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
[ -x "$bin" ] || bash "$root/scripts/build.sh"
strategy="${1:-FULL_SHARD}"
shift || true
cores=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Mean of a numeric JSON field over metrics.jsonl lines after the first two (warm-up).
field_mean() {
  awk -v key="\"$2\":" '
    NR > 2 { i = index($0, key); if (i) { v = substr($0, i + length(key)); sub(/[,}].*/, "", v); s += v; n++ } }
    END { if (n) printf "%.3f", s / n; else print "nan" }' "$1"
}

printf "FSDP %s, tiny model (1.0M params), micro-batch 8 x 128 tokens per rank, %d cores\n\n" "$strategy" "$cores"
printf "%6s %10s %12s %14s %12s %14s %10s\n" ranks ms/step tokens/s "vs 1 rank" "comm MiB" "wait share" "threads"
base_tps=""
for np in 1 2 4; do
  threads=$(( cores / np )); [ "$threads" -ge 1 ] || threads=1
  OMP_NUM_THREADS=$threads OMPI_MCA_mpi_yield_when_idle=1 \
    mpirun --allow-run-as-root --oversubscribe -np "$np" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle \
    "$bin" train --config "$root/configs/tiny.yaml" --set run.dir="$out/np$np" --set train.max_steps=12 \
    --set train.eval_every=0 --set train.grad_accum_steps=1 --set train.micro_batch_size=8 \
    --set fsdp.sharding_strategy="$strategy" "$@" > "$out/np$np.log" 2>&1 || { cat "$out/np$np.log"; exit 1; }
  m="$out/np$np/metrics.jsonl"
  ms=$(field_mean "$m" step_ms)
  tps=$(field_mean "$m" tokens_per_sec)
  bytes=$(field_mean "$m" comm_bytes)
  wait=$(field_mean "$m" comm_wait_ms)
  [ -n "$base_tps" ] || base_tps=$tps
  awk -v np="$np" -v ms="$ms" -v tps="$tps" -v b="$base_tps" -v bytes="$bytes" -v w="$wait" -v t="$threads" \
    'BEGIN { printf "%6d %10.1f %12.0f %13.2fx %12.2f %13.1f%% %10d\n", np, ms, tps, tps / b, bytes / 1048576, 100 * w / ms, t }'
done
