#!/usr/bin/env bash
# The README's demo, end to end: build the King James Bible corpus (scripts/demo_corpus.sh),
# train configs/tiny.yaml on it (shortened), and require the validation loss to fall below
# the corpus's unigram entropy, i.e. the model learned something a context-free token
# frequency model cannot know. Usage: demo_below_unigram_entropy.sh path/to/fsdp_train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
run_dir=$(mktemp -d)
trap 'rm -rf "$run_dir"' EXIT
cd "$root"
corpus_log=$(bash scripts/demo_corpus.sh "$bin")
echo "$corpus_log"
entropy=$(echo "$corpus_log" | sed -n 's/.*unigram entropy \([0-9.]*\) nats.*/\1/p')
[ -n "$entropy" ] || { echo "FAIL: demo_corpus.sh printed no unigram entropy"; exit 1; }
# 150 steps of 2048 tokens reach ~4.1 nats of validation loss (300 reach ~3.6); the
# unigram entropy is ~5.7.
"$bin" train --config configs/tiny.yaml --set run.dir="$run_dir" --set train.max_steps=150 \
  --set train.eval_every=150 --set train.log_every=50
val=$(grep '"val_loss"' "$run_dir/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.eE+-]*\).*/\1/')
[ -n "$val" ] || { echo "FAIL: no val_loss in metrics.jsonl"; exit 1; }
echo "final val_loss $val vs unigram entropy $entropy nats/token"
awk -v v="$val" -v h="$entropy" 'BEGIN { exit !(v < h - 0.5) }' || { echo "FAIL: val_loss not 0.5 nats below the unigram entropy"; exit 1; }
echo "PASS"
