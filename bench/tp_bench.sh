#!/usr/bin/env bash
# Tensor parallelism on the CPU: the ~58M model of step_bench (vocab 32000, hidden 512,
# 8 layers, 8 heads, MLP 1408, untied) trained by fsdp_train under mpirun with FSDP alone and
# with parallel.tensor, printing per layout the step time, the throughput against FSDP alone
# on as many ranks (a tensor group reads one micro-batch where FSDP's ranks read one each, so
# tokens per second, not the step time, is the fair comparison), and the bytes rank 0 sends
# per step against the theory (issue 27).
#
# The theory is the formula tests/mpi/test_tensor_parallel.cpp holds the engine to, to the
# byte, written out for this model (one micro-batch of N = micro x seq tokens, no recompute,
# float32 on the wire, mesh 1 x S x T over W ranks; C hidden, F MLP width, V vocabulary):
#   FSDP over the shard group, S_u = 4 ceil(unit u's elements on this tensor rank / S):
#     (S-1) S_u x 3 for the embedding and each block (2 all-gathers and 1 reduce-scatter),
#     x 2 for the head (1 all-gather, no re-gather for its backward)
#   the replicated norm weights' gradients over the tensor group: 2 (T-1)/T x 4 x their elements
#   sequence parallelism: (2 + 10 L + 3) x (T-1) x N/T x C x 4
#   the vocabulary-parallel cross-entropy: (T-1) x N x 24
#   the gradient norm and the loss and votes: 2 (S-1)/S 8 + 2 (T-1)/T 8 + 2 (W-1)/W 8 x 7
# Every rank runs 2 / ranks threads on this 2-core machine (at least 1), so the ranks share
# the cores: the step times compare layouts on one machine, not a cluster's scaling.
#
#   bash bench/tp_bench.sh [steps]      (default 8; the mean skips the first two)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
[ -x "$bin" ] || bash "$root/scripts/build.sh"
steps="${1:-8}"
cores=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

V=32000 C=512 F=1408 L=8 micro=4 seq=512
model=(--set model.preset=tiny --set model.vocab_size=$V --set model.hidden_size=$C
       --set model.intermediate_size=$F --set model.num_layers=$L --set model.num_heads=8
       --set model.num_kv_heads=8 --set model.tie_word_embeddings=false --set data.source=synthetic)

# Mean of a numeric JSON field over metrics.jsonl lines after the first two (warm-up).
field_mean() {
  awk -v key="\"$2\":" '
    NR > 2 { i = index($0, key); if (i) { v = substr($0, i + length(key)); sub(/[,}].*/, "", v); s += v; n++ } }
    END { if (n) printf "%.3f", s / n; else print "nan" }' "$1"
}

# The theory above, in bytes, for W ranks as S x T.
theory() {
  awk -v W="$1" -v T="$2" -v V=$V -v C=$C -v F=$F -v L=$L -v N=$((micro * seq)) 'BEGIN {
    S = W / T
    emb = V * C / T; block = 2 * C + (4 * C * C + 3 * C * F) / T; head = C + V * C / T
    total = 0
    total += (S - 1) * 4 * ceil(emb / S) * 3
    total += L * (S - 1) * 4 * ceil(block / S) * 3
    total += (S - 1) * 4 * ceil(head / S) * 2
    total += 2 * (T - 1) / T * 4 * (2 * C * L + C)
    total += (2 + 10 * L + 3) * (T - 1) * N / T * C * 4 + (T - 1) * N * 24
    total += 2 * (S - 1) / S * 8 + 2 * (T - 1) / T * 8 + 2 * (W - 1) / W * 8 * 7
    printf "%.0f", total
  }
  function ceil(x) { return x == int(x) ? x : int(x) + 1 }'
}

printf "Tensor parallelism, llama-50M (58M params), micro-batch %d x %d tokens, FULL_SHARD, %d cores\n\n" \
  $micro $seq "$cores"
printf "%6s %8s %10s %10s %12s %12s %14s %12s\n" ranks mesh ms/step tokens/s "vs FSDP" "comm MiB" "theory MiB" \
  "vs theory"
for layout in "2 1" "2 2" "4 1" "4 2" "4 4"; do
  read -r np T <<< "$layout"
  threads=$(( cores / np )); [ "$threads" -ge 1 ] || threads=1
  OMP_NUM_THREADS=$threads OMPI_MCA_mpi_yield_when_idle=1 \
    mpirun --allow-run-as-root --oversubscribe -np "$np" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle \
    "$bin" train --config "$root/configs/tiny.yaml" "${model[@]}" --set run.dir="$out/np${np}_t$T" \
    --set train.max_steps="$steps" --set train.eval_every=0 --set train.grad_accum_steps=1 \
    --set train.micro_batch_size=$micro --set train.seq_len=$seq --set train.activation_checkpointing=none \
    --set fsdp.sharding_strategy=FULL_SHARD --set parallel.tensor="$T" > "$out/np${np}_t$T.log" 2>&1 \
    || { cat "$out/np${np}_t$T.log"; exit 1; }
  m="$out/np${np}_t$T/metrics.jsonl"
  ms=$(field_mean "$m" step_ms)
  tps=$(field_mean "$m" tokens_per_sec)
  bytes=$(field_mean "$m" comm_bytes)
  [ "$T" != 1 ] || base_tps=$tps
  awk -v np="$np" -v mesh="1x$((np / T))x$T" -v ms="$ms" -v tps="$tps" -v b="$base_tps" -v bytes="$bytes" \
    -v th="$(theory "$np" "$T")" 'BEGIN { printf "%6d %8s %10.1f %10.0f %11.2fx %12.3f %14.3f %11.4fx\n", np, mesh,
             ms, tps, tps / b, bytes / 1048576, th / 1048576, bytes / th }'
done
