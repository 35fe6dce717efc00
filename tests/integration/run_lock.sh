#!/usr/bin/env bash
# One run per run.dir (Note [Run lock] in include/fsdp/train/run_lock.h), through the binary.
# A second `train` on a run.dir in use once resumed from the first's newest checkpoint, and
# the two then overwrote and rotated away each other's step_N. Now:
#   single: the second is refused at once, naming the holder's pid and host, before any step
#           (exit 1), as is a run sharing only checkpoint.dir; the first goes on, is preempted
#           (75) with its checkpoint, and then a run resumes there without a word about the
#           lock; a holder killed with kill -9 leaves a lock that the next run takes over,
#           with a warning naming the dead pid
#   mpi:    a 2-rank job holds the lock against a single process, and a 2-rank job is refused
#           on a run.dir a single process holds (exit 1 from mpiexec)
# Usage: run_lock.sh path/to/fsdp_train single|mpi [path/to/mpiexec]
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
        --set checkpoint.interval=2 --set checkpoint.keep_last=2)
host=$(hostname)
fail() { echo "FAIL: $*"; exit 1; }
steps_logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }
wait_for_steps() {  # wait_for_steps RUN_DIR N
  for _ in $(seq 600); do [ "$(steps_logged "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  fail "no progress in $1"
}
# A refused start: the exit code, the holder named in the one error format, no step run.
expect_refused() {  # LOG RC WANT-RC TEXT
  [ "$2" -eq "$3" ] || { cat "$1"; fail "exit code $2, expected $3"; }
  grep -qF "$4" "$1" || { cat "$1"; fail "expected '$4' in $1"; }
  grep -q "^fsdp_train train: error: " "$1" || { cat "$1"; fail "$1: no 'fsdp_train train: error: ' line"; }
  ! grep -q "step      1/" "$1" || { cat "$1"; fail "$1: a refused run trained"; }
}

if [ "$mode" = single ]; then
  dir="$work/shared"
  "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$work/first.log" 2>&1 &
  first=$!
  wait_for_steps "$dir" 3
  rc=0; "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$work/second.log" 2>&1 || rc=$?
  expect_refused "$work/second.log" "$rc" 1 "run.dir $dir is in use by pid $first on host $host (since "
  echo "ok: a second train on the run.dir -> exit 1: $(grep -o 'run.dir .* is in use by .*' "$work/second.log")"
  rc=0; "$bin" train "${common[@]}" --set run.dir="$work/other" --set checkpoint.dir="$dir/checkpoints" \
    > "$work/third.log" 2>&1 || rc=$?
  expect_refused "$work/third.log" "$rc" 1 "checkpoint.dir $dir/checkpoints is in use by pid $first on host $host"
  echo "ok: another run.dir with the same checkpoint.dir -> exit 1"

  kill -0 "$first" 2>/dev/null || { cat "$work/first.log"; fail "the first run died"; }
  kill -USR1 "$first"
  rc=0; wait "$first" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$work/first.log"; fail "the first run: exit code $rc, expected 75"; }
  stopped=$(steps_logged "$dir")
  [ -f "$dir/checkpoints/step_$stopped/manifest.json" ] || fail "the first run's checkpoint at $stopped is gone"
  rc=0; "$bin" train "${common[@]}" --set train.max_steps=$((stopped + 1)) --set run.dir="$dir" \
    > "$work/resume.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { cat "$work/resume.log"; fail "resume after the first run: exit code $rc"; }
  grep -q "resumed from .*step_$stopped at step $stopped" "$work/resume.log" || { cat "$work/resume.log"; fail "no resume"; }
  ! grep -q "taking over the lock" "$work/resume.log" || fail "a lock released cleanly was reported as stale"
  echo "ok: the first run stopped at step $stopped (75) and the next one resumed there"

  "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$work/killed.log" 2>&1 &
  killed=$!
  wait_for_steps "$dir" $((stopped + 3))
  kill -9 "$killed"
  wait "$killed" 2>/dev/null || true
  rc=0; "$bin" train "${common[@]}" --set train.max_steps=$((stopped + 6)) --set run.dir="$dir" \
    > "$work/after_kill.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { cat "$work/after_kill.log"; fail "after kill -9: exit code $rc"; }
  grep -qF "taking over the lock of pid $killed on host $host" "$work/after_kill.log" ||
    { cat "$work/after_kill.log"; fail "no warning about the dead holder's lock"; }
  echo "ok: a holder killed with kill -9: $(grep -o 'taking over the lock of .*' "$work/after_kill.log" | head -1)"
elif [ "$mode" = mpi ]; then
  [ -n "$mpiexec" ] || fail "mpi mode needs the mpiexec path"
  mpi=("$mpiexec" --allow-run-as-root --oversubscribe -np 2)
  dir="$work/mpi_holds"
  "${mpi[@]}" "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$work/mpi_first.log" 2>&1 &
  first=$!
  wait_for_steps "$dir" 3
  rc=0; "$bin" train "${common[@]}" --set run.dir="$dir" > "$work/single_second.log" 2>&1 || rc=$?
  expect_refused "$work/single_second.log" "$rc" 1 "run.dir $dir is in use by pid "
  kill -USR1 "$first"
  rc=0; wait "$first" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$work/mpi_first.log"; fail "the 2-rank holder: exit code $rc, expected 75"; }
  echo "ok: a 2-rank job holds its run.dir against a single process"

  dir="$work/single_holds"
  "$bin" train "${common[@]}" --set train.max_steps=400 --set run.dir="$dir" > "$work/single_first.log" 2>&1 &
  first=$!
  wait_for_steps "$dir" 3
  rc=0; "${mpi[@]}" "$bin" train "${common[@]}" --set run.dir="$dir" > "$work/mpi_second.log" 2>&1 || rc=$?
  expect_refused "$work/mpi_second.log" "$rc" 1 "run.dir $dir is in use by pid $first on host $host"
  kill -USR1 "$first"
  wait "$first" || true
  echo "ok: a 2-rank job on a run.dir in use -> exit 1 on every rank"
else
  fail "mode must be single or mpi, not '$mode'"
fi
echo PASS
