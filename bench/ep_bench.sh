#!/usr/bin/env bash
# Expert parallelism on the CPU (issue 28): an 8-expert top-2 Mixtral (vocab 8000, hidden
# 256, 4 layers, 8 heads, experts of width 704: 19.6M parameters, 6.7M active per token)
# trained by fsdp_train under mpirun on 4 ranks with FSDP alone (FULL_SHARD, mesh 1x4x1) and
# with parallel.expert 2 and 4 (meshes 1x2x2x1, 1x1x4x1), printing per layout the step time,
# the throughput against FSDP alone, the bytes rank 0 sends per step (metrics.jsonl's
# comm_bytes) and how they split: FSDP's parameter traffic (all-gathers, reduce-scatters: the
# formula tests/mpi/test_expert_parallel.cpp holds the engine to, written out below) and the
# rest, which is the tokens' all-to-alls and their counts (routing-dependent: the test holds
# them to the step's routing to the byte).
#
# FSDP's part for mesh 1 x S x E over W = S E ranks, float32 on the wire, one micro-batch:
#   every unit but the experts over the shard group of W ranks: (W-1) x 4 ceil(unit / W) x 3
#   (two all-gathers and a reduce-scatter), x 2 for the head;
#   each layer's expert unit (8 / E experts) over its S ranks: (S-1) x 4 ceil(unit / S) x 3;
#   the gradient norm 2 (W-1)/W 8; the loss and votes 2 (W-1)/W 8 x 7 and the expert counts
#   2 (W-1)/W 8 x 4 layers x 8 experts over the world.
# Every rank runs 1 thread: the 4 ranks share this machine's cores, so the step times compare
# layouts on one machine, not a cluster's scaling.
#
#   bash bench/ep_bench.sh [steps]      (default 6; the mean skips the first two)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
[ -x "$bin" ] || bash "$root/scripts/build.sh"
steps="${1:-6}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

V=8000 C=256 F=704 L=4 X=8 micro=4 seq=256 np=4
model=(--set model.preset=tiny_moe --set model.vocab_size=$V --set model.hidden_size=$C
       --set model.intermediate_size=$F --set model.num_layers=$L --set model.num_heads=8
       --set model.num_kv_heads=8 --set model.num_experts=$X --set model.experts_per_token=2
       --set data.source=synthetic)

# Mean of a numeric JSON field over metrics.jsonl lines after the first two (warm-up).
field_mean() {
  awk -v key="\"$2\":" '
    NR > 2 { i = index($0, key); if (i) { v = substr($0, i + length(key)); sub(/[,}].*/, "", v); s += v; n++ } }
    END { if (n) printf "%.3f", s / n; else print "nan" }' "$1"
}

# FSDP's part above, in bytes, for expert degree E on W ranks.
fsdp_bytes() {
  awk -v W="$np" -v E="$1" -v V=$V -v C=$C -v F=$F -v L=$L -v X=$X 'BEGIN {
    S = W / E
    emb = V * C; head = C + V * C; router = X * C
    block = 4 * C * C + router + 2 * C + (E == 1 ? X * 3 * C * F : 0)
    experts = (X / E) * 3 * C * F
    total = (W - 1) * 4 * ceil(emb / W) * 3 + L * (W - 1) * 4 * ceil(block / W) * 3 + (W - 1) * 4 * ceil(head / W) * 2
    if (E > 1) total += L * (S - 1) * 4 * ceil(experts / S) * 3
    total += 2 * (W - 1) / W * 8 * (1 + 7 + L * X)
    printf "%.0f", total
  }
  function ceil(x) { return x == int(x) ? x : int(x) + 1 }'
}

printf "Expert parallelism, %d experts top-2 (hidden %d, %d layers), micro-batch %d x %d tokens, %d ranks, %d cores\n\n" \
  $X $C $L $micro $seq $np "$(nproc)"
printf "%8s %10s %10s %9s %10s %11s %13s\n" mesh ms/step tokens/s "vs FSDP" "comm MiB" "FSDP MiB" "all-to-all MiB"
for E in 1 2 4; do
  OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 \
    mpirun --allow-run-as-root --oversubscribe -np $np -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle \
    "$bin" train --config "$root/configs/tiny_moe.yaml" "${model[@]}" --set run.dir="$out/e$E" \
    --set train.max_steps="$steps" --set train.eval_every=0 --set train.grad_accum_steps=1 \
    --set train.micro_batch_size=$micro --set train.seq_len=$seq --set train.activation_checkpointing=none \
    --set fsdp.sharding_strategy=FULL_SHARD --set parallel.expert="$E" --set checkpoint.interval=0 \
    > "$out/e$E.log" 2>&1 || { cat "$out/e$E.log"; exit 1; }
  m="$out/e$E/metrics.jsonl"
  ms=$(field_mean "$m" step_ms)
  tps=$(field_mean "$m" tokens_per_sec)
  bytes=$(field_mean "$m" comm_bytes)
  [ "$E" != 1 ] || base_tps=$tps
  mesh=$([ "$E" = 1 ] && echo "1x$np""x1" || echo "1x$((np / E))x$E""x1")
  awk -v mesh="$mesh" -v ms="$ms" -v tps="$tps" -v b="$base_tps" -v bytes="$bytes" -v f="$(fsdp_bytes "$E")" \
    'BEGIN { printf "%8s %10.1f %10.0f %8.2fx %10.3f %11.3f %13.3f\n", mesh, ms, tps, tps / b, bytes / 1048576,
             f / 1048576, (bytes - f) / 1048576 }'
done
