#!/usr/bin/env bash
# The seeds' sizes table of docs/memory-and-plan.md from `fsdp_train plan`: Llama 2 7B, 13B, 70B, CodeLlama-7B
# and Mixtral 8x7B at sequence length 4096 on 80 GB GPUs (--device-memory 80GB = 8e10 bytes,
# below the ~85e9 an H100 80GB reports), every model FULL_SHARD over all GPUs with its
# config's bf16 compute, collectives and prefetch: the fewest GPUs per activation
# checkpointing mode at micro-batch 1, and the largest micro-batch per GPU on 8 and on 32
# GPUs. CTest `plan_seed_sizes_table` checks docs/memory-and-plan.md holds what this prints.
#   bash scripts/plan_seed_sizes.sh [path/to/fsdp_train]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/fsdp_train}"

# plan CONFIG RANKS [--set ...]: the per-mode rows of the plan's answer, "mode fewest largest".
plan() {
  local config="$1" ranks="$2"
  shift 2
  "$bin" plan --config "$root/configs/$config" --ranks "$ranks" --device-memory 80GB \
    --set fsdp.sharding_strategy=FULL_SHARD --set train.seq_len=4096 "$@" |
    awk '/^per activation checkpointing mode/{on=1; getline; next}
         on && ($1 == "none" || $1 == "selective" || $1 == "full") {print $1, $(NF-1), $NF}' || true
}

echo "| model (config) | fewest GPUs at micro-batch 1: none / selective / full / full+offload | largest micro-batch per GPU on 8 GPUs | on 32 GPUs |"
echo "| --- | --- | --- | --- |"
while IFS='|' read -r name config sets; do
  # shellcheck disable=SC2086
  on8="$(plan "$config" 8 $sets)"
  # shellcheck disable=SC2086
  on32="$(plan "$config" 32 $sets)"
  fewest="$(awk '{printf "%s%s", sep, $2; sep=" / "}' <<<"$on8")"
  largest8="$(awk '{printf "%s%s", sep, $3; sep=" / "}' <<<"$on8")"
  largest32="$(awk '{printf "%s%s", sep, $3; sep=" / "}' <<<"$on32")"
  echo "| $name | $fewest | $largest8 | $largest32 |"
done <<'MODELS'
Llama 2 7B (llama2_7b.yaml)|llama2_7b.yaml|
Llama 2 13B (llama2_13b.yaml)|llama2_13b.yaml|
Llama 2 70B (llama2_70b.yaml)|llama2_70b.yaml|
CodeLlama-7B (llama2_7b.yaml, preset codellama_7b)|llama2_7b.yaml|--set model.preset=codellama_7b
Mixtral 8x7B (mixtral_8x7b.yaml)|mixtral_8x7b.yaml|
MODELS
