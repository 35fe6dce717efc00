#!/usr/bin/env bash
# The demo corpus tokenized with a Hugging Face tokenizer.json instead of the sentencepiece
# model: tests/golden/tokenizers/llama3_style (Llama 3's Split regex + ByteLevel, its special
# tokens and tokenizer_config.json; 3011 ids), `prepare` on the King James Bible, and the tiny
# model trained on it (vocab_size set to the tokenizer's) must end 0.5 nats below the
# corpus's unigram entropy under that tokenizer, as the sentencepiece demo must
# (demo_below_unigram_entropy.sh). Usage: tokenizer_json_demo.sh path/to/fsdp_train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
bash scripts/demo_corpus.sh "$bin" > /dev/null  # data/demo/kjv.txt
tok="$root/tests/golden/tokenizers/llama3_style"
"$bin" prepare --tokenizer "$tok" --output "$work/shards" --val-fraction 0.02 data/demo/kjv.txt
grep -q '"kind": "tokenizer.json"' "$work/shards/manifest.json" || { echo "FAIL: the manifest does not record a tokenizer.json"; exit 1; }
grep -q '"bos_id": 3000' "$work/shards/manifest.json" || { echo "FAIL: BOS is not <|begin_of_text|> (3000)"; exit 1; }
grep -q '"eos_id": 3001' "$work/shards/manifest.json" || { echo "FAIL: EOS is not <|end_of_text|> (3001)"; exit 1; }
vocab=3011
entropy=$(cat "$work"/shards/train_*.bin | od -An -v -tu2 --endian=little -w2 |
          awk '{ n[$1]++; total++ } END { for (v in n) { p = n[v] / total; h -= p * log(p) } printf "%.4f", h }')
"$bin" train --config configs/tiny.yaml --set run.dir="$work/run" --set data.path="$work/shards" \
  --set model.vocab_size=$vocab --set train.max_steps=100 --set train.eval_every=100 --set train.log_every=50
first=$(grep -m1 '"loss"' "$work/run/metrics.jsonl" | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/')
val=$(grep '"val_loss"' "$work/run/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.eE+-]*\).*/\1/')
[ -n "$val" ] || { echo "FAIL: no val_loss in metrics.jsonl"; exit 1; }
echo "loss at step 1 $first (ln $vocab = $(awk -v v=$vocab 'BEGIN { printf "%.4f", log(v) }')), final val_loss $val," \
     "unigram entropy $entropy nats/token under the tokenizer.json"
awk -v v="$val" -v h="$entropy" 'BEGIN { exit !(v < h - 0.5) }' || { echo "FAIL: val_loss not 0.5 nats below the unigram entropy"; exit 1; }
echo PASS
