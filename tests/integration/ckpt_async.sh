#!/usr/bin/env bash
# checkpoint.async end to end through the binary, each save with its exit code. A background
# save once could never be reported as committed: every async run ended with "the final
# checkpoint at step N could not be saved ... the run's result is not on disk" and exit 1,
# over a complete step_N, and a preempted one exited 1 instead of 75, so Slurm never requeued it.
#   single: the final save (exit 0); interval saves every step of a LoRA run (exit 0, every
#           step_N committed); a Mixtral run preempted by SIGUSR1 (exit 75, its checkpoint
#           complete), then resumed to the end (exit 0)
#   mpi:    the same under mpiexec with 2 ranks: the final save, and SIGUSR1 to mpiexec (75)
# Usage: ckpt_async.sh path/to/fsdp_train single|mpi [path/to/mpiexec]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
mode="$2"
mpiexec="${3:-}"
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.eval_every=0 --set train.seq_len=32
        --set train.micro_batch_size=2 --set train.grad_accum_steps=1 --set train.log_every=1
        --set checkpoint.async=true)
fail() { echo "FAIL: $*"; exit 1; }
steps_logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }
wait_for_steps() {  # wait_for_steps RUN_DIR N
  for _ in $(seq 600); do [ "$(steps_logged "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  fail "no progress in $1"
}
# The run's log says each step_N was committed, and nothing was reported lost.
expect_committed() {  # LOG DIR STEP...
  local log=$1 dir=$2
  shift 2
  ! grep -q "could not be saved" "$log" || { cat "$log"; fail "$log: a save was reported lost"; }
  for s in "$@"; do
    [ -f "$dir/checkpoints/step_$s/manifest.json" ] || { ls -R "$dir"; fail "no complete step_$s in $dir"; }
    grep -q "checkpoint: saved .*step_$s (" "$log" || { cat "$log"; fail "$log: step_$s never logged as saved"; }
  done
}
run() {  # LOG EXPECTED-RC ARGS...
  local log=$1 want=$2 rc=0
  shift 2
  "$@" > "$log" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || { cat "$log"; fail "exit code $rc, expected $want: $*"; }
}

if [ "$mode" = single ]; then
  dir="$work/final"
  run "$dir.log" 0 "$bin" train "${common[@]}" --set train.max_steps=3 --set run.dir="$dir"
  expect_committed "$dir.log" "$dir" 3
  echo "ok: async final save -> exit 0, step_3 committed"

  dir="$work/lora"
  run "$dir.log" 0 "$bin" train "${common[@]}" --set train.max_steps=3 --set checkpoint.interval=1 \
    --set model.init_from=tests/golden/llama_gqa_tiny --set lora.enabled=true --set lora.rank=4 --set run.dir="$dir"
  expect_committed "$dir.log" "$dir" 1 2 3
  echo "ok: LoRA, async interval saves every step -> exit 0, step_1..3 committed"

  dir="$work/moe"
  moe=(--set model.preset=tiny_moe --set train.max_steps=400 --set run.dir="$dir")
  "$bin" train "${common[@]}" "${moe[@]}" > "$dir.log" 2>&1 &
  pid=$!
  wait_for_steps "$dir" 3
  kill -USR1 "$pid"
  rc=0; wait "$pid" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$dir.log"; fail "Mixtral preempted: exit code $rc, expected 75"; }
  stopped=$(steps_logged "$dir")
  expect_committed "$dir.log" "$dir" "$stopped"
  run "$dir.resume.log" 0 "$bin" train "${common[@]}" "${moe[@]}" --set train.max_steps=$((stopped + 2))
  grep -q "resumed from .*step_$stopped at step $stopped" "$dir.resume.log" || { cat "$dir.resume.log"; fail "no resume"; }
  expect_committed "$dir.resume.log" "$dir" $((stopped + 2))
  echo "ok: Mixtral, async, SIGUSR1 -> exit 75 with step_$stopped committed; resumed to the end -> exit 0"
elif [ "$mode" = mpi ]; then
  [ -n "$mpiexec" ] || fail "mpi mode needs the mpiexec path"
  mpi=("$mpiexec" --allow-run-as-root --oversubscribe -np 2)
  dir="$work/mpi_final"
  run "$dir.log" 0 "${mpi[@]}" "$bin" train "${common[@]}" --set train.max_steps=3 --set checkpoint.interval=2 \
    --set run.dir="$dir"
  expect_committed "$dir.log" "$dir" 2 3
  grep -q '"world_size": 2' "$dir/checkpoints/step_3/manifest.json" || fail "2 ranks: manifest world size"
  echo "ok: 2 ranks, async interval and final saves -> exit 0"

  dir="$work/mpi_preempt"
  "${mpi[@]}" "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$dir.log" 2>&1 &
  pid=$!
  wait_for_steps "$dir" 3
  kill -USR1 "$pid"  # to mpiexec, which forwards it to both ranks
  rc=0; wait "$pid" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$dir.log"; fail "2 ranks preempted: exit code $rc, expected 75"; }
  expect_committed "$dir.log" "$dir" "$(steps_logged "$dir")"
  echo "ok: 2 ranks, async, SIGUSR1 to mpiexec -> exit 75 with the checkpoint committed"
else
  fail "mode must be single or mpi, not '$mode'"
fi
echo PASS
