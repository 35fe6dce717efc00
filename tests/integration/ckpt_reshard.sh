#!/usr/bin/env bash
# Resharding through the CLI: a checkpoint written by N ranks continues on M ranks
# (2->1, 1->4, 4->2, 4->3) and the whole loss curve stays within fp32 reduction tolerance
# (1e-5 relative) of one uninterrupted process. Every layout keeps the global batch at 12
# sequences (micro_batch_size x grad_accum_steps x ranks), so every run sees the same data,
# and a constant learning rate, so the first halves (max_steps 3) update as the full run.
# Usage: ckpt_reshard.sh path/to/fsdp_train path/to/mpiexec
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
mpiexec="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.eval_every=0 --set model.num_layers=2
        --set train.seq_len=32 --set train.max_steps=6 --set optim.warmup_steps=0 --set optim.schedule=constant)
# batch N: micro-batch size and accumulation that make 12 sequences per step on N ranks.
batch() { case "$1" in 1) echo "4 3" ;; 2) echo "3 2" ;; 3) echo "4 1" ;; 4) echo "3 1" ;; esac; }
run() {  # run NRANKS RUN_DIR MAX_STEPS
  local n="$1" dir="$2" steps="$3" b
  b=($(batch "$n"))
  local launch=()
  [ "$n" -gt 1 ] && launch=("$mpiexec" --allow-run-as-root --oversubscribe -np "$n")
  if ! "${launch[@]}" "$bin" train "${common[@]}" --set run.dir="$dir" --set train.max_steps="$steps" \
      --set train.micro_batch_size="${b[0]}" --set train.grad_accum_steps="${b[1]}" >> "$dir.log" 2>&1; then
    cat "$dir.log"; echo "FAIL: $n-rank run in $dir"; exit 1
  fi
}
loss() { sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$1"; }
# reshard PAIRS...: the reference, the first halves on each source rank count, and each
# "N M" continuation held to the reference.
reshard() {
  run 1 "$work/reference" 6
  local sources=() pair
  for pair in "$@"; do sources+=("${pair%% *}"); done
  for n in $(printf '%s\n' "${sources[@]}" | sort -u); do run "$n" "$work/first$n" 3; done
  for pair in "$@"; do
    set -- $pair
    cp -r "$work/first$1" "$work/cont$1to$2"
    run "$2" "$work/cont$1to$2" 6
    grep -q "resumed from .*step_3 at step 3 .*saved by $1 rank" "$work/cont$1to$2.log" ||
      { cat "$work/cont$1to$2.log"; echo "FAIL: $1->$2 did not resume from step_3"; exit 1; }
    [ "$(wc -l < "$work/cont$1to$2/metrics.jsonl")" -eq 6 ] || { echo "FAIL: $1->$2 metrics.jsonl"; exit 1; }
    paste <(loss "$work/reference/metrics.jsonl") <(loss "$work/cont$1to$2/metrics.jsonl") | awk -v c="$1->$2" '
      { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > 1e-5) { print "FAIL: " c " step " NR ": " $1 " vs " $2; bad = 1 } }
      END { exit bad }'
    echo "ok: $1 -> $2 ranks${label:-}"
  done
}
reshard "2 1" "1 4" "4 2" "4 3"
# A mixture of experts reshards the same way. Its load-balancing loss is a mean over
# micro-batches, and the layouts above differ in micro-batch size, so the objectives would
# differ by design: the coefficient is 0 here (routing and cross-entropy are per token).
rm -rf "$work"/reference* "$work"/first* "$work"/cont*
common+=(--set model.num_experts=4 --set model.experts_per_token=2 --set model.router_aux_loss_coef=0)
label=" (mixture of experts)" reshard "4 3" "2 1"
echo "PASS"
