#!/usr/bin/env bash
# The Slurm presets and their configs, without Slurm (label cpu): every script parses, every
# preset's CONFIG exists and loads in fsdp_train (the full config: every key, every value
# checked), and trains one step when only the model is shrunk to the tiny preset on the CPU
# backend, which catches a config the real run would refuse only after allocation.
# Usage: presets.sh <fsdp_train binary> <repository root>
set -euo pipefail
bin=$(realpath "$1")
repo=$(realpath "$2")
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for f in "$repo"/slurm/*.sbatch "$repo"/tests/slurm/*.sh; do
  bash -n "$f" || fail "$f does not parse"
done
for preset in "$repo"/slurm/llama2_*.sbatch "$repo"/slurm/mixtral_*.sbatch "$repo"/slurm/qlora.sbatch \
  "$repo"/slurm/train_container.sbatch; do
  config=$(sed -n 's/^export CONFIG=\${CONFIG:-\(.*\)}$/\1/p' "$preset")
  [[ -n $config ]] || fail "$preset sets no CONFIG"
  [[ -f $repo/$config ]] || fail "$preset: $config does not exist"
  grep -q '^#SBATCH --signal=B:USR1@' "$preset" || fail "$preset asks for no warning signal"
  grep -q '^#SBATCH --requeue' "$preset" || fail "$preset is not requeueable"
  grep -q '^#SBATCH --output=logs/%x_%j.out' "$preset" || fail "$preset: log not named by job id"
done
for config in "$repo"/configs/llama2_{7b,13b,70b}.yaml "$repo"/configs/mixtral_8x7b.yaml; do
  name=$(basename "$config" .yaml)
  grep -q "^  preset: $name " "$config" || fail "$config: model.preset is not $name"
  grep -q "^  seq_len: 4096" "$config" || fail "$config: seq_len is not 4096"
  # The real model (billions of parameters) cannot run here: shrink the model and the
  # batch, keep every other key, and train one step on synthetic data.
  tiny=tiny
  [[ $name == mixtral_* ]] && tiny=tiny_moe  # the preset's experts and router losses stay on
  (cd "$work" && OMP_NUM_THREADS=1 "$bin" train --config "$config" --set model.preset=$tiny --set train.seq_len=32 \
    --set train.dtype=float32 --set data.source=synthetic --set train.max_steps=1 --set train.eval_every=0 \
    --set run.dir="$work/$name" >"$work/$name.log" 2>&1) || { cat "$work/$name.log"; fail "$config does not run"; }
  grep -q '"step":1,' "$work/$name/metrics.jsonl" || fail "$config: no step in metrics.jsonl"
  echo "ok: $name (preset, seq_len 4096, $(sed -n 's/^  sharding_strategy: \([A-Z_]*\).*/\1/p' "$config"))"
done
# The expert-parallel preset needs 8 ranks per expert group, more than this test runs: only
# its plan here, which loads every key and must fit its job (4 nodes x 8 GPUs of 80 GB).
config=$repo/configs/mixtral_8x7b_ep.yaml
"$bin" plan --config "$config" --ranks 32 --device cuda --device-memory 80GB >"$work/ep.log" 2>&1 ||
  { cat "$work/ep.log"; fail "$config does not plan to fit 4 x 8 GPUs of 80 GB"; }
grep -q "parallel.expert 8) over the 4 rank(s) holding them" "$work/ep.log" || fail "$config: not planned at E=8"
echo "ok: mixtral_8x7b_ep (plan only: $(sed -n 's/^  peak  *\([0-9.]* GiB\).*/\1/p' "$work/ep.log") peak per GPU)"
# The QLoRA preset: its base folder is not here, so the tiny model's seeded base stands in
# (quantized to NF4 like the real one) and the adapters train one step.
config=$repo/configs/qlora_llama2_7b.yaml
grep -q "^  quantization: nf4" "$config" || fail "$config: the base is not NF4"
(cd "$work" && OMP_NUM_THREADS=1 "$bin" train --config "$config" --set model.preset=tiny --set model.init_from= \
  --set train.seq_len=32 --set train.dtype=float32 --set data.source=synthetic --set train.max_steps=1 \
  --set train.eval_every=0 --set run.dir="$work/qlora" >"$work/qlora.log" 2>&1) || { cat "$work/qlora.log"; fail "$config does not run"; }
grep -q '"step":1,' "$work/qlora/metrics.jsonl" || fail "$config: no step in metrics.jsonl"
grep -q 'the base is frozen in NF4' "$work/qlora.log" || fail "$config: the base was not quantized"
echo "ok: qlora_llama2_7b (NF4 base, LoRA r 16 all-linear, FULL_SHARD)"
echo PASS
