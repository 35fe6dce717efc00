#!/usr/bin/env bash
# Crash safety: kill -9 a run that checkpoints every step, at random moments (many land
# inside a save: the checkpoint of this model takes longer to write than a step takes to
# compute), six times over; after every kill no step_N directory may be incomplete or fail
# verification, and the run restarted each time from the newest checkpoint finally
# produces exactly the uninterrupted run's loss curve, bit for bit.
# Usage: ckpt_kill9.sh path/to/fsdp_train [seed]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
RANDOM=${2:-$$}
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$root"
fail() { echo "FAIL: $*"; exit 1; }
# ~4.7M parameters: a 57 MB checkpoint per step, written with fsync.
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.eval_every=0 --set model.hidden_size=256
        --set model.intermediate_size=688 --set train.seq_len=32 --set train.micro_batch_size=2
        --set train.grad_accum_steps=1 --set train.max_steps=16 --set checkpoint.interval=1
        --set checkpoint.keep_last=2 --set train.log_every=1)
"$bin" train "${common[@]}" --set run.dir="$work/ref" --set checkpoint.interval=0 > "$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "reference run"; }
dir="$work/killed"
for round in 1 2 3 4 5 6; do
  "$bin" train "${common[@]}" --set run.dir="$dir" >> "$dir.log" 2>&1 &
  pid=$!
  # 0.3 .. 2.3 s: start-up, resume, a few steps and saves.
  sleep "$(printf '0.%03d' $((RANDOM % 1000)))"; sleep "$((RANDOM % 2))"; sleep 0.3
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for d in "$dir"/checkpoints/step_*; do
    [ -d "$d" ] || continue
    case "$d" in *.tmp|*.deleting) continue ;; esac
    [ -f "$d/manifest.json" ] || fail "round $round: $d has no manifest"
  done
  echo "round $round: killed; on disk: $(ls "$dir/checkpoints" 2>/dev/null | tr '\n' ' ')"
done
"$bin" train "${common[@]}" --set run.dir="$dir" >> "$dir.log" 2>&1 || { cat "$dir.log"; fail "final resume"; }
grep -c "resumed from" "$dir.log" | { read -r n; echo "resumed $n times"; }
cmp <(sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$work/ref/metrics.jsonl") \
    <(sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$dir/metrics.jsonl") || {
  paste "$work/ref/metrics.jsonl" "$dir/metrics.jsonl" | cut -c1-60; fail "losses differ from the uninterrupted run"; }
echo "PASS"
