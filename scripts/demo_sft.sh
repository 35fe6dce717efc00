#!/usr/bin/env bash
# The supervised fine-tuning demo on the CPU, end to end, offline: the tiny demo Llama
# pretrained on the King James Bible without four of its books (Genesis, Psalms, Matthew,
# Revelation), exported as a Hugging Face folder with a Llama 3-style tokenizer and chat
# template (tests/golden/tokenizers/llama3_chat), then fine-tuned with configs/tiny_sft.yaml
# on chat-formatted questions made from those four books' verses:
#   user: "Which book of the Bible is this verse from? The LORD is my shepherd; I shall not want."
#   assistant: "Psalms"
# `prepare` masks everything but the answers (and their <|eot_id|>), training packs the
# examples into its windows. Prints the held-out questions' validation loss over the answers'
# tokens and the exact-match accuracy of `generate --chat` on them (greedy), before (the base)
# and after, and two sample answers. About 75 s of CPU time (measured: 3 min 50 s wall on a
# busy 2-core machine, one OpenMP thread).
# BASE_STEPS (default 100) and SFT_STEPS (150) set the two runs' lengths, DEMO_SFT_RUNS
# (runs/demo_sft) moves the runs, FSDP_TRAIN names a built binary (then nothing is built);
# extra arguments go to the fine-tuning `fsdp_train train`. Every step whose output exists is
# skipped (delete the runs to start over).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_STEPS=${BASE_STEPS:-100}
SFT_STEPS=${SFT_STEPS:-150}
if [ -z "${FSDP_TRAIN:-}" ]; then
  BUILD_TARGET=fsdp_train bash "$root/scripts/build.sh"
  FSDP_TRAIN="${BUILD_DIR:-$root/build}/fsdp_train"
fi
bin=$(realpath "$FSDP_TRAIN")
cd "$root"
command -v bible > /dev/null || bash scripts/demo_corpus.sh "$bin" > /dev/null  # installs bible-kjv
tok=tests/golden/tokenizers/llama3_chat   # 3011 ids: Llama 3's pipeline and template, trained on Genesis
out=data/demo_sft
runs=${DEMO_SFT_RUNS:-runs/demo_sft}
mkdir -p "$out" "$runs"

# 1. The base's corpus: every book but the four the questions are about.
if [ ! -s "$out/base/manifest.json" ]; then
  { bash scripts/kjv_text.sh Ex1:1-Job42:17 12407; bash scripts/kjv_text.sh Pr1:1-Mal4:6 6744
    bash scripts/kjv_text.sh Mk1:1-Jude1:25 6482; } > "$out/base.txt.tmp"
  mv "$out/base.txt.tmp" "$out/base.txt"
  rm -rf "$out/base"
  "$bin" prepare --tokenizer "$tok" --output "$out/base" --val-fraction 0.02 "$out/base.txt"
fi

# 2. The questions: verses of at most 28 words; every 8th one held out (at most 40 a book),
# up to 300 of the rest a book for training. heldout.jsonl is train.jsonl's format (for the
# validation loss); prompts.jsonl has the user turn only and the answer beside it, which
# `generate --messages` prints back with the reply.
q=$out/questions
if [ ! -s "$q/heldout/manifest.json" ]; then
  mkdir -p "$q"
  : > "$q/train.jsonl.tmp"; : > "$q/heldout.jsonl"; : > "$q/prompts.jsonl"
  for book in "Gen1:1-Gen50:26 1533 Genesis" "Ps1:1-Ps150:6 2461 Psalms" "Mt1:1-Mt28:20 1071 Matthew" \
              "Rev1:1-Rev22:21 404 Revelation"; do
    read -r range verses name <<< "$book"  # (not `set --`: "$@" goes to the fine-tuning run)
    n=$(bible -f "$range" | wc -l)
    [ "$n" = "$verses" ] || { echo "demo_sft.sh: $range has $n verses, expected $verses" >&2; exit 1; }
    bible -f "$range" | LC_ALL=C awk -v book="$name" -v train="$q/train.jsonl.tmp" -v heldout="$q/heldout.jsonl" \
                                 -v prompts="$q/prompts.jsonl" '
      {
        text = $0; sub(/^[^ ]+ /, "", text)
        if (split(text, words, " ") > 28) next
        gsub(/\\/, "\\\\", text); gsub(/"/, "\\\"", text)
        user = "{\"role\":\"user\",\"content\":\"Which book of the Bible is this verse from? " text "\"}"
        answer = "{\"role\":\"assistant\",\"content\":\"" book "\"}"
        if (++kept % 8 == 0) {
          if (held++ >= 40) next
          print "{\"messages\":[" user "," answer "]}" >> heldout
          print "{\"answer\":\"" book "\",\"messages\":[" user "]}" >> prompts
        } else if (trained++ < 300) {
          print "{\"messages\":[" user "," answer "]}" >> train
        }
      }'
  done
  mv "$q/train.jsonl.tmp" "$q/train.jsonl"
  rm -rf "$q/train" "$q/heldout"
  "$bin" prepare --tokenizer "$tok" --output "$q/train" --val-fraction 0 "$q/train.jsonl"
  "$bin" prepare --tokenizer "$tok" --output "$q/heldout" --val-fraction 0 "$q/heldout.jsonl"
fi

# 3. The base: configs/tiny.yaml with the tokenizer's vocabulary, exported in float32 with the
# tokenizer and its chat template (a chat model's folder, as a user downloads one).
if [ ! -s "$runs/base_hf/config.json" ]; then
  "$bin" train --config configs/tiny.yaml --set model.vocab_size=3011 --set data.path="$out/base" \
    --set run.dir="$runs/base" --set train.max_steps="$BASE_STEPS" --set train.log_every=50 \
    --set train.eval_every="$BASE_STEPS"
  "$bin" export --checkpoint "$runs/base/checkpoints" --output "$runs/base_hf" --dtype float32 --tokenizer "$tok"
fi
sft=(--config configs/tiny_sft.yaml --set model.init_from="$runs/base_hf" --set data.path="$q/train"
     --set data.val_path="$q/heldout")

# Exact-match accuracy of the replies `generate --chat` printed back: "right total".
score() {
  sed -n 's/^{"answer":"\([^"]*\)".*"role":"assistant","content":"\(.*\)"}\]}$/\1\t\2/p' "$1" |
    awk -F'\t' '{ total++; if ($1 == $2) right++ } END { printf "%d %d\n", right, total }'
}
ask() {  # checkpoint, output file
  "$bin" generate --checkpoint "$1" --chat --messages "$q/prompts.jsonl" --temperature 0 --max-new-tokens 6 \
    > "$2" 2> "$2.log" || { cat "$2.log" >&2; exit 1; }
}

# 4. Before: the base on the held-out questions.
before_loss=$("$bin" eval "${sft[@]}" --set checkpoint.resume=none --set run.dir="$runs/eval_before" |
              sed -n 's/^eval_loss //p')
ask "$runs/base_hf" "$runs/replies_before.jsonl"
read -r before_right total < <(score "$runs/replies_before.jsonl")

# 5. Fine-tuning, then the same questions.
"$bin" train "${sft[@]}" --set run.dir="$runs/sft" --set train.max_steps="$SFT_STEPS" \
  --set train.eval_every="$SFT_STEPS" "$@"
after_loss=$(grep '"val_loss"' "$runs/sft/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.eE+-]*\).*/\1/')
ask "$runs/sft/checkpoints" "$runs/replies_after.jsonl"
read -r after_right total < <(score "$runs/replies_after.jsonl")

pct() { awk -v r="$1" -v t="$2" 'BEGIN { printf "%.1f%% (%d/%d)", 100 * r / t, r, t }'; }
echo "---- held-out questions: validation loss over the answers' tokens $(printf '%.4f' "$before_loss") -> $(printf '%.4f' "$after_loss") (nats/token) ----"
echo "---- exact-match accuracy of generate --chat: before $(pct "$before_right" "$total"), after $(pct "$after_right" "$total") ----"
echo "---- two sample answers after fine-tuning ----"
for book in Psalms Revelation; do
  grep -m1 "^{\"answer\":\"$book\"" "$runs/replies_after.jsonl" |
    sed 's/.*this verse from? \(.*\)"},{"role":"assistant","content":"\(.*\)"}\]}$/  Q: \1\n  A: \2/'
  echo "     (the answer: $book)"
done
