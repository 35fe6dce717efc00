#!/usr/bin/env bash
# Tensor parallelism through fsdp_train as a user runs it (docs/tensor-parallelism.md): under
# mpiexec, 2 ranks with parallel.tensor 2 are one tensor group (mesh 1x1x2) reading one
# micro-batch, so they train the same global batch as one process: the same losses within
# 1e-5, the mesh in the start-up log, the step line and metrics.jsonl, and a checkpoint that
# one process resumes. A tensor degree the world cannot hold exits 2 on every rank with one
# message naming the key, without hanging.
# Usage: tp_cli.sh path/to/fsdp_train path/to/mpiexec
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
mpiexec="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.max_steps=4 --set train.eval_every=0
        --set model.num_layers=2 --set train.seq_len=64 --set train.micro_batch_size=2 --set checkpoint.interval=4)
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" --set run.dir="$work/tp" \
  --set parallel.tensor=2 > "$work/tp.log" 2>&1 || { cat "$work/tp.log"; echo "FAIL: T=2 run"; exit 1; }
timeout 300 "$bin" train "${common[@]}" --set run.dir="$work/one" > "$work/one.log" 2>&1 ||
  { cat "$work/one.log"; echo "FAIL: one-process run"; exit 1; }
grep -q "mesh 1x1x2 (replicate x shard x tensor): tensor parallelism over 2 ranks" "$work/tp.log" ||
  { cat "$work/tp.log"; echo "FAIL: the start-up line naming the mesh"; exit 1; }
grep -q "step      4/4 .*| mesh 1x1x2 | comm" "$work/tp.log" || { cat "$work/tp.log"; echo "FAIL: step line"; exit 1; }
[ "$(grep -c '"mesh":"1x1x2"' "$work/tp/metrics.jsonl")" -eq 4 ] || { echo "FAIL: mesh in metrics.jsonl"; exit 1; }
loss() { sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$1"; }
paste <(loss "$work/one/metrics.jsonl") <(loss "$work/tp/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > 1e-5) { print "FAIL: step " NR ": " $1 " vs " $2; bad = 1 } }
  END { exit bad || NR != 4 }'
# The T=2 checkpoint resumed by one process (every slice read back into the whole
# parameters) continues as the one-process run does from its own checkpoint.
for run in tp one; do
  timeout 300 "$bin" train "${common[@]}" --set run.dir="$work/$run" --set train.max_steps=6 > "$work/$run.resume.log" 2>&1 ||
    { cat "$work/$run.resume.log"; echo "FAIL: resume of $run on one process"; exit 1; }
done
grep -q "tensor parallel 2" "$work/tp.resume.log" || { cat "$work/tp.resume.log"; echo "FAIL: resume line"; exit 1; }
# One data-parallel rank then and now: the same global batch, nothing to warn about.
! grep -q "global batch differs" "$work/tp.resume.log" || { cat "$work/tp.resume.log"; echo "FAIL: batch warning"; exit 1; }
paste <(loss "$work/one/metrics.jsonl") <(loss "$work/tp/metrics.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > 1e-5) { print "FAIL: step " NR ": " $1 " vs " $2; bad = 1 } }
  END { exit bad || NR != 6 }'
# A degree the world cannot hold: a config error on every rank, in the one error format.
rc=0
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" \
  --set run.dir="$work/bad" --set parallel.tensor=4 --set model.num_kv_heads=4 > "$work/bad.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/bad.log"; echo "FAIL: parallel.tensor 4 on 2 ranks: exit code $rc, expected 2"; exit 1; }
grep -q "fsdp_train train: error: .*key 'parallel.tensor' 4 must divide the world size (2 ranks)" "$work/bad.log" ||
  { cat "$work/bad.log"; echo "FAIL: message"; exit 1; }
[ ! -e "$work/bad/metrics.jsonl" ] || { echo "FAIL: a refused run wrote metrics"; exit 1; }
echo "PASS"
