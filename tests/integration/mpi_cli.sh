#!/usr/bin/env bash
# fsdp_train under mpiexec as a user runs it: 2 ranks train and only rank 0 writes
# metrics.jsonl, with the same losses as one process over the same global batch; a bad
# launch (HYBRID_SHARD group size that does not divide the world) exits 2, a config error, on
# every rank with one message naming the key and both numbers, without hanging; eval of a
# whole SFT split gives the same on 1, 2 and 3 ranks.
# Usage: mpi_cli.sh path/to/fsdp_train path/to/mpiexec
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
mpiexec="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.max_steps=6 --set train.eval_every=0
        --set model.num_layers=2 --set train.seq_len=64)
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" --set run.dir="$work/np2" \
  --set train.micro_batch_size=4 --set train.grad_accum_steps=1 > "$work/np2.log" 2>&1 || { cat "$work/np2.log"; echo "FAIL: 2-rank run"; exit 1; }
"$bin" train "${common[@]}" --set run.dir="$work/np1" --set train.micro_batch_size=4 \
  --set train.grad_accum_steps=2 > "$work/np1.log" 2>&1 || { cat "$work/np1.log"; echo "FAIL: 1-rank run"; exit 1; }
grep -q "2 ranks on 1 node, launched by mpirun" "$work/np2.log" || { cat "$work/np2.log"; echo "FAIL: launch line"; exit 1; }
# mpirun gives each rank a pseudo-terminal even when its output goes to a file: no colour codes
# there (issue 31), and rank 0's log is in run.dir/train.log too.
! grep -q $'\x1b\[' "$work/np2.log" || { echo "FAIL: ANSI colour codes in a log written to a file under mpirun"; exit 1; }
grep -q "step      6/6" "$work/np2/train.log" || { cat "$work/np2/train.log"; echo "FAIL: train.log"; exit 1; }
[ "$(grep -c 'step ' "$work/np2.log")" -ge 2 ] || { echo "FAIL: no step lines"; exit 1; }
[ "$(wc -l < "$work/np2/metrics.jsonl")" -eq 6 ] || { echo "FAIL: metrics.jsonl should hold 6 steps (rank 0 only)"; exit 1; }
loss() { sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$1"; }
paste <(loss "$work/np1/metrics.jsonl") <(loss "$work/np2/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > 1e-5) { print "FAIL: step " NR ": " $1 " vs " $2; bad = 1 } }
  END { exit bad }'
# A layout error is a config error: exit 2 on every rank count (it was 1, through MPI_Abort),
# in the one error format.
rc=0
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" \
  --set run.dir="$work/bad" --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.shard_group_size=3 \
  > "$work/bad.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/bad.log"; echo "FAIL: a shard group of 3 on 2 ranks: exit code $rc, expected 2"; exit 1; }
grep -q "fsdp_train train: error: .*key 'fsdp.shard_group_size' is 3, which does not divide the world size 2" \
  "$work/bad.log" || { cat "$work/bad.log"; echo "FAIL: message"; exit 1; }
# Resuming the 2-rank checkpoint on 1 rank halves the sequences per step: said, with both values.
"$bin" train "${common[@]}" --set run.dir="$work/np2" --set train.micro_batch_size=4 --set train.grad_accum_steps=1 \
  --set train.max_steps=7 > "$work/resume1.log" 2>&1 || { cat "$work/resume1.log"; echo "FAIL: resume on 1 rank"; exit 1; }
grep -q "the global batch differs from the checkpoint's: 4 sequences per step (micro_batch_size 4 x grad_accum_steps 1 x 1 rank), the checkpoint's 8 (micro_batch_size 4 x grad_accum_steps 1 x 2 ranks); set train.global_batch_size: 8" "$work/resume1.log" ||
  { cat "$work/resume1.log"; echo "FAIL: no global batch warning"; exit 1; }
# eval of a whole SFT split (eval.batches: 0): 5 examples, one per row, micro-batch 2, on 1, 2
# and 3 ranks (3, 2 and 1 steps; the rows past the split masked on each rank): the same
# trained-target count and loss, every example counted once.
"$bin" prepare --tokenizer tests/golden/tokenizers/llama3_chat --output "$work/sft" --val-fraction 0 \
  tests/golden/sft/messages.jsonl tests/golden/sft/alpaca.jsonl > "$work/sft.log" 2>&1 || { cat "$work/sft.log"; echo "FAIL: prepare"; exit 1; }
sft_eval=(eval --config configs/tiny.yaml --set model.init_from=tests/golden/chat_generate/llama3_chat_tiny
          --set data.path="$work/sft" --set eval.split=train --set eval.batches=0 --set train.seq_len=64
          --set train.micro_batch_size=2 --set data.packing=false --set checkpoint.resume=none)
for np in 1 2 3; do
  "$mpiexec" --allow-run-as-root --oversubscribe -np $np "$bin" "${sft_eval[@]}" --set run.dir="$work/eval$np" \
    2> "$work/eval$np.log" | grep '^eval_' > "$work/eval$np.out" || { cat "$work/eval$np.log"; echo "FAIL: eval on $np ranks"; exit 1; }
done
grep -q "^eval_trained_tokens 37$" "$work/eval1.out" || { cat "$work/eval1.out"; echo "FAIL: trained targets"; exit 1; }
cmp -s "$work/eval1.out" "$work/eval2.out" && cmp -s "$work/eval1.out" "$work/eval3.out" ||
  { head "$work"/eval?.out; echo "FAIL: eval of the whole split differs with the rank count"; exit 1; }
echo "PASS"
