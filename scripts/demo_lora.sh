#!/usr/bin/env bash
# The LoRA demo on the CPU, end to end: the tiny demo Llama pretrained on the King James
# Bible without its last book (Genesis to Jude), exported as a Hugging Face folder, then
# LoRA adapters fine-tuned on the held-out book (Revelation) with configs/tiny_lora.yaml.
# Prints Revelation's validation loss before (the base alone) and after (base + adapters),
# exports the adapters as a PEFT folder (runs/demo_lora/adapter), and samples from the base
# with and without them. A few minutes on two cores. Extra arguments go to the LoRA
# `fsdp_train train`; BASE_STEPS (default 300) and LORA_STEPS (200) shorten the two runs,
# DEMO_LORA_RUNS (runs/demo_lora) moves the runs, FSDP_TRAIN names a built binary (then
# nothing is built). Every step whose output exists is skipped (delete the runs to start over).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_STEPS=${BASE_STEPS:-300}
LORA_STEPS=${LORA_STEPS:-200}
if [ -z "${FSDP_TRAIN:-}" ]; then
  BUILD_TARGET=fsdp_train bash "$root/scripts/build.sh"
  FSDP_TRAIN="${BUILD_DIR:-$root/build}/fsdp_train"
fi
bin=$(realpath "$FSDP_TRAIN")
cd "$root"
bash scripts/demo_corpus.sh "$bin" > /dev/null   # the packages and the 1024-piece tokenizer
out=data/demo_lora
runs=${DEMO_LORA_RUNS:-runs/demo_lora}
lora=(--set model.init_from=$runs/base_hf --set run.dir=$runs/lora)

# 1. The two corpora, tokenized with the demo tokenizer (prepare renames a complete output
# into place, so an existing manifest.json means a complete one).
corpus() {  # name, range, verses, validation fraction
  local dir=$out/$1
  [ -s "$dir/shards/manifest.json" ] && return
  mkdir -p "$dir"
  bash scripts/kjv_text.sh "$2" "$3" > "$dir/text.tmp" && mv "$dir/text.tmp" "$dir/text.txt"
  rm -rf "$dir/shards"
  "$bin" prepare --tokenizer data/demo/tokenizer.model --output "$dir/shards" --val-fraction "$4" "$dir/text.txt"
}
corpus base Gen1:1-Jude1:25 30698 0.02
corpus book Rev1:1-Rev22:21 404 0.1

# 2. The base: configs/tiny.yaml on Genesis to Jude, exported in float32 (exact).
if [ ! -s $runs/base_hf/config.json ]; then
  "$bin" train --config configs/tiny.yaml --set data.path=$out/base/shards --set run.dir=$runs/base \
    --set train.max_steps="$BASE_STEPS" --set train.log_every=50 --set train.eval_every="$BASE_STEPS"
  "$bin" export --checkpoint $runs/base/checkpoints --output $runs/base_hf --dtype float32 \
    --tokenizer data/demo/tokenizer.model
fi

# 3. Revelation's validation loss under the base alone (fresh adapters: B = 0, the base's output).
before=$("$bin" eval --config configs/tiny_lora.yaml "${lora[@]}" --set checkpoint.resume=none \
  --set run.dir=$runs/eval | sed -n 's/^eval_loss //p')

# 4. The adapters on Revelation, then exported as a PEFT folder.
"$bin" train --config configs/tiny_lora.yaml "${lora[@]}" --set train.max_steps="$LORA_STEPS" \
  --set train.eval_every="$LORA_STEPS" "$@"
after=$(grep '"val_loss"' $runs/lora/metrics.jsonl | tail -1 | sed 's/.*"val_loss":\([0-9.eE+-]*\).*/\1/')
after=$(printf '%.4f' "$after")
before=$(printf '%.4f' "$before")
rm -rf $runs/adapter
"$bin" export --checkpoint $runs/lora/checkpoints --output $runs/adapter --adapter
echo "---- Revelation's validation loss: base alone $before, base + LoRA adapters $after (nats/token) ----"
echo "---- the base (fsdp_train generate, temperature 0.8, top-k 40) ----"
"$bin" generate --checkpoint $runs/base_hf --tokenizer data/demo/tokenizer.model \
  --prompt "And I saw" --max-new-tokens 50 --top-k 40 --seed 1 2> /dev/null
echo "---- the base with the adapters (--adapter $runs/adapter) ----"
"$bin" generate --checkpoint $runs/base_hf --adapter $runs/adapter --tokenizer data/demo/tokenizer.model \
  --prompt "And I saw" --max-new-tokens 50 --top-k 40 --seed 1 2> /dev/null
