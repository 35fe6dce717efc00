#!/usr/bin/env bash
# The README's SFT demo, shortened (scripts/demo_sft.sh): the tiny base pretrained on most of
# the King James Bible, fine-tuned on chat-formatted "which book is this verse from?"
# questions about four books it never saw. Requires the held-out questions' validation loss
# over the answers to fall below MAX_AFTER_LOSS and the exact-match accuracy of `generate
# --chat` to rise from the base's to at least MIN_AFTER_ACCURACY percent (a guess among four
# books is 25%; the base, which never saw the format, answers none).
# Usage: demo_sft.sh path/to/fsdp_train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
MAX_AFTER_LOSS=${MAX_AFTER_LOSS:-0.5}
MIN_AFTER_ACCURACY=${MIN_AFTER_ACCURACY:-50}
log=$(FSDP_TRAIN="$1" DEMO_SFT_RUNS="$runs" BASE_STEPS=${BASE_STEPS:-60} SFT_STEPS=${SFT_STEPS:-80} \
      bash "$root/scripts/demo_sft.sh" 2>&1) || { echo "$log"; echo "FAIL: demo_sft.sh"; exit 1; }
echo "$log" | grep -A20 -- "---- held-out questions"
loss=$(echo "$log" | sed -n 's/.*over the answers. tokens \([0-9.]*\) -> \([0-9.]*\) .*/\1 \2/p')
acc=$(echo "$log" | sed -n 's/.*before \([0-9.]*\)% .*after \([0-9.]*\)% .*/\1 \2/p')
[ -n "$loss" ] && [ -n "$acc" ] || { echo "$log"; echo "FAIL: no figures printed"; exit 1; }
read -r loss_before loss_after <<< "$loss"
read -r acc_before acc_after <<< "$acc"
awk -v b="$loss_before" -v a="$loss_after" -v m="$MAX_AFTER_LOSS" 'BEGIN { exit !(a < b && a < m) }' ||
  { echo "FAIL: the validation loss over the answers went $loss_before -> $loss_after (needs < $MAX_AFTER_LOSS)"; exit 1; }
awk -v b="$acc_before" -v a="$acc_after" -v m="$MIN_AFTER_ACCURACY" 'BEGIN { exit !(a > b && a >= m) }' ||
  { echo "FAIL: exact-match accuracy went $acc_before% -> $acc_after% (needs >= $MIN_AFTER_ACCURACY%)"; exit 1; }
# The replies are the answers alone: no template tokens, no end-of-turn token printed.
grep -q '<|' "$runs/replies_after.jsonl" && { echo "FAIL: special tokens in the replies"; exit 1; }
echo PASS
