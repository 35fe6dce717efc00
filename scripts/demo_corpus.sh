#!/usr/bin/env bash
# The demo corpus: the King James Bible (public domain, Debian's bible-kjv), a
# sentencepiece tokenizer with the tiny model's vocabulary (1024) trained on it, and
# token shards made by `fsdp_train prepare`, all under data/demo/:
#   kjv.txt            one paragraph (one line) per chapter, a blank line between chapters
#   tokenizer.model    BPE, vocab 1024, unk 0 / bos 1 / eos 2, no pad, byte fallback
#   shards/            train_*.{bin,idx}, val_*.{bin,idx}, manifest.json (2% val)
# Finally prints the unigram entropy of the train shards (nats per token): the loss a
# model that ignores context reaches, so a training run must fall below it to show it
# learned something from context.
# Every step is skipped when its output exists, so a second run takes seconds.
# Usage: scripts/demo_corpus.sh [path/to/fsdp_train]   (default: $BUILD_DIR/fsdp_train)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fsdp_train="${1:-${BUILD_DIR:-$root/build}/fsdp_train}"
out="${DEMO_DIR:-$root/data/demo}"
vocab_size=1024  # configs/tiny.yaml's model.vocab_size
mkdir -p "$out"

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f s", b - a }'; }
size_of() { du -sh "$1" | cut -f1; }

# 1. Packages (idempotent: apt-get installs only what is missing).
t=$EPOCHREALTIME
missing=()
for cmd_pkg in bible:bible-kjv spm_train:sentencepiece; do
  command -v "${cmd_pkg%%:*}" > /dev/null || missing+=("${cmd_pkg#*:}")
done
dpkg -s bible-kjv-text > /dev/null 2>&1 || missing+=(bible-kjv-text)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}"
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null
fi
echo "packages ready ($(elapsed "$t"))"

# 2. The text, a chapter a line (scripts/kjv_text.sh). Written to .tmp and renamed, so an
# interrupted run never leaves a truncated kjv.txt behind.
t=$EPOCHREALTIME
if [ ! -s "$out/kjv.txt" ]; then
  bash "$root/scripts/kjv_text.sh" Gen1:1-Rev22:21 31102 > "$out/kjv.txt.tmp"
  mv "$out/kjv.txt.tmp" "$out/kjv.txt"
fi
echo "kjv.txt: $(size_of "$out/kjv.txt"), $(grep -c . "$out/kjv.txt") chapters ($(elapsed "$t"))"

# 3. The tokenizer. One thread and a fixed seed make the model the same on every machine;
# chapters are longer than sentencepiece's default 4192-byte sentence limit (Psalm 119
# is ~25 kB), hence max_sentence_length.
t=$EPOCHREALTIME
if [ ! -s "$out/tokenizer.model" ]; then
  # Relative paths: the model records its trainer's arguments, so absolute ones would make
  # the bytes depend on where the repository lives.
  (cd "$out" && spm_train --input=kjv.txt --model_prefix=tokenizer.tmp --model_type=bpe \
    --vocab_size=$vocab_size --character_coverage=1.0 --byte_fallback=true \
    --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
    --max_sentence_length=65536 --num_threads=1 --random_seed=1 --minloglevel=1 > spm_train.log 2>&1) ||
    { cat "$out/spm_train.log" >&2; exit 1; }
  mv "$out/tokenizer.tmp.vocab" "$out/tokenizer.vocab"
  mv "$out/tokenizer.tmp.model" "$out/tokenizer.model"
fi
echo "tokenizer.model: $(size_of "$out/tokenizer.model"), vocab $vocab_size ($(elapsed "$t"))"

# 4. The shards (prepare writes into a temporary directory and renames it at the end, so
# an existing manifest.json means a complete output).
t=$EPOCHREALTIME
if [ ! -s "$out/shards/manifest.json" ]; then
  [ -x "$fsdp_train" ] || { echo "no fsdp_train at $fsdp_train (build first, or pass its path)" >&2; exit 1; }
  rm -rf "$out/shards"
  fsdp_train="$(realpath "$fsdp_train")"
  # Relative paths again: the manifest records its inputs.
  (cd "$out" && "$fsdp_train" prepare --tokenizer tokenizer.model --output shards --val-fraction 0.02 kjv.txt)
fi
echo "shards: $(size_of "$out/shards") ($(elapsed "$t"))"

# 5. Unigram entropy of the train split, H = -sum_v p(v) ln p(v) over token frequencies.
# Tokens in .bin are little-endian uint16 for a vocabulary <= 65536 (indexed_dataset.h);
# od prints one per line and awk counts them (BOS/EOS included: the model predicts EOS).
t=$EPOCHREALTIME
cat "$out"/shards/train_*.bin | od -An -v -tu2 --endian=little -w2 | awk -v vocab=$vocab_size '
  { n[$1]++; total++ }
  END {
    for (v in n) { p = n[v] / total; h -= p * log(p) }
    printf "train tokens: %d (%d distinct of %d); unigram entropy %.4f nats/token (ln %d = %.4f)\n",
           total, length(n), vocab, h, vocab, log(vocab)
  }'
echo "entropy pass ($(elapsed "$t"))"
