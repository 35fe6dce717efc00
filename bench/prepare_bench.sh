#!/usr/bin/env bash
# `fsdp_train prepare` throughput (MB of raw text per second, reading, tokenizing and
# writing shards) with 1 worker and with every core, against the ceiling of the
# sentencepiece library's own encoder on one core (spm_encode, ids to /dev/null).
# Input: the demo corpus text (scripts/demo_corpus.sh), repeated 4x (~16 MB).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
[ -x "$bin" ] || bash "$root/scripts/build.sh"
bash "$root/scripts/demo_corpus.sh" "$bin" > /dev/null
demo="$root/data/demo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in 1 2 3 4; do cat "$demo/kjv.txt"; echo; done > "$work/corpus.txt"
mb=$(awk -v b="$(stat -c %s "$work/corpus.txt")" 'BEGIN { printf "%.2f", b / 1e6 }')
secs() { local t=$EPOCHREALTIME; "$@" > /dev/null 2>&1; awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
spm=$(secs spm_encode --model="$demo/tokenizer.model" --output_format=id --input="$work/corpus.txt" --output=/dev/null)
w1=$(secs "$bin" prepare --tokenizer "$demo/tokenizer.model" --output "$work/w1" --workers 1 "$work/corpus.txt")
wn=$(secs "$bin" prepare --tokenizer "$demo/tokenizer.model" --output "$work/wn" --workers "$(nproc)" "$work/corpus.txt")
cmp -s "$work/w1/train_00000.bin" "$work/wn/train_00000.bin" || { echo "outputs differ between worker counts"; exit 1; }
printf "input: %s MB of text, %d cores\n\n" "$mb" "$(nproc)"
printf "%-40s %8s %10s %12s\n" "" seconds "MB/s" "vs spm_encode"
for row in "spm_encode (1 core, ceiling per core):$spm" "fsdp_train prepare --workers 1:$w1" "fsdp_train prepare --workers $(nproc):$wn"; do
  name=${row%%:*}; t=${row##*:}
  awk -v n="$name" -v t="$t" -v mb="$mb" -v s="$spm" 'BEGIN { printf "%-40s %8.2f %10.2f %11.2fx\n", n, t, mb / t, s / t }'
done
