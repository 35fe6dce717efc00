#!/usr/bin/env bash
# Preemption as Slurm does it: SIGUSR1 (or SIGTERM) mid-run makes fsdp_train finish its
# step, write a checkpoint and exit 75; running the same command again resumes there and
# the loss curve in metrics.jsonl equals an uninterrupted run's bit for bit. Ctrl-C (SIGINT)
# and a closed terminal (SIGHUP) do the same, unless the launcher ignores them (nohup). A
# second signal exits at once (128 + signal). Also under mpiexec with 2 ranks, signalled one
# rank at a time, as a staggered delivery would be, and SIGUSR1 to mpiexec itself, which
# forwards it: its exit code is then the ranks' 75.
# Usage: ckpt_preempt.sh path/to/fsdp_train path/to/mpiexec
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
mpiexec="$2"
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
common=(--config configs/tiny.yaml --set data.source=synthetic --set train.eval_every=0 --set train.seq_len=64
        --set train.max_steps=40 --set train.micro_batch_size=4 --set train.grad_accum_steps=1 --set train.log_every=1)
fail() { echo "FAIL: $*"; exit 1; }
steps_logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }
wait_for_steps() {  # wait_for_steps RUN_DIR N
  for _ in $(seq 600); do [ "$(steps_logged "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  fail "no progress in $1"
}
"$bin" train "${common[@]}" --set run.dir="$work/ref" > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }

# env --default-signal: a script's background job starts with SIGINT ignored (a terminal's
# Ctrl-C reaches a foreground process, which is what this stands for).
for sig in USR1 TERM INT HUP; do
  dir="$work/pre_$sig"
  env --default-signal=INT,HUP "$bin" train "${common[@]}" --set run.dir="$dir" > "$dir.log" 2>&1 &
  pid=$!
  wait_for_steps "$dir" 5
  kill -"$sig" "$pid"
  rc=0; wait "$pid" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$dir.log"; fail "SIG$sig: exit code $rc, expected 75"; }
  grep -q "preemption signal received (SIG$sig)" "$dir.log" || fail "SIG$sig: no preemption line"
  stopped=$(steps_logged "$dir")
  [ "$stopped" -lt 40 ] || fail "SIG$sig arrived too late to test anything"
  [ -f "$dir/checkpoints/step_$stopped/manifest.json" ] || { ls -R "$dir"; fail "SIG$sig: no checkpoint at step $stopped"; }
  "$bin" train "${common[@]}" --set run.dir="$dir" >> "$dir.log" 2>&1 || { cat "$dir.log"; fail "resume after SIG$sig"; }
  grep -q "resumed from .*step_$stopped at step $stopped" "$dir.log" || { cat "$dir.log"; fail "no resume line"; }
  cmp <(sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$work/ref/metrics.jsonl") \
      <(sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/' "$dir/metrics.jsonl") || fail "SIG$sig: losses after resume differ"
  echo "ok: SIG$sig -> exit 75 at step $stopped, resumed bit-exact"
done

# nohup: SIGHUP stays ignored, the run goes on (and is stopped with SIGUSR1 to end the test).
dir="$work/nohup"
nohup "$bin" train "${common[@]}" --set run.dir="$dir" > "$dir.log" 2>&1 &
pid=$!
wait_for_steps "$dir" 3
kill -HUP "$pid"
wait_for_steps "$dir" 6
kill -0 "$pid" 2>/dev/null || { cat "$dir.log"; fail "nohup: SIGHUP stopped the run"; }
kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 75 ] || { cat "$dir.log"; fail "nohup: exit code $rc after SIGUSR1, expected 75"; }
echo "ok: under nohup SIGHUP is ignored"

# A second signal: out at once, with 128 + SIGUSR1 (138), no checkpoint. Slow steps (about
# a second), so the second signal lands before the first one's step ends; the pause between
# the two keeps the kernel from merging them into one pending signal.
dir="$work/twice"
"$bin" train "${common[@]}" --set run.dir="$dir" --set train.max_steps=400 --set train.seq_len=512 \
  --set train.micro_batch_size=16 > "$dir.log" 2>&1 &
pid=$!
wait_for_steps "$dir" 1
kill -USR1 "$pid"; sleep 0.2; kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 138 ] || { cat "$dir.log"; fail "second signal: exit code $rc, expected 138"; }
grep -q "second signal" "$dir.log" || fail "second signal: no message"
# (The directory holds the run's lock file, fsdp_train.lock, whatever happened.)
[ -z "$(ls "$dir/checkpoints" 2>/dev/null | grep '^step_')" ] || fail "second signal: a checkpoint was written"
echo "ok: second signal exits at once"

# Two ranks, the signal reaching only one of them: both stop at the same step.
dir="$work/mpi"
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" --set run.dir="$dir" \
  --set train.micro_batch_size=2 > "$dir.log" 2>&1 &
pid=$!
wait_for_steps "$dir" 4
rank1=$(pgrep -f -n "fsdp_train train .*$dir") || fail "rank process not found"
kill -USR1 "$rank1"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 75 ] || { cat "$dir.log"; fail "2 ranks: exit code $rc, expected 75"; }
stopped=$(steps_logged "$dir")
[ -f "$dir/checkpoints/step_$stopped/manifest.json" ] || { cat "$dir.log"; fail "2 ranks: no checkpoint at $stopped"; }
grep -q '"world_size": 2' "$dir/checkpoints/step_$stopped/manifest.json" || fail "2 ranks: manifest world size"
echo "ok: 2 ranks stop together at step $stopped"

# SIGUSR1 to mpiexec: OpenMPI forwards it to every rank, and its exit code is the ranks' 75.
# (SIGTERM or Ctrl-C to mpiexec is not forwarded: OpenMPI signals the ranks itself one
# odls_base_sigkill_timeout later and SIGKILLs them one more later, and exits 1;
# docs/checkpoints-and-resume.md, "Preemption".)
dir="$work/mpi_launcher"
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train "${common[@]}" --set run.dir="$dir" \
  --set train.micro_batch_size=2 > "$dir.log" 2>&1 &
pid=$!
wait_for_steps "$dir" 4
kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 75 ] || { cat "$dir.log"; fail "SIGUSR1 to mpiexec: exit code $rc, expected 75"; }
stopped=$(steps_logged "$dir")
[ -f "$dir/checkpoints/step_$stopped/manifest.json" ] || { cat "$dir.log"; fail "mpiexec: no checkpoint at $stopped"; }
echo "ok: SIGUSR1 to mpiexec -> exit 75 with a checkpoint at step $stopped"
echo "PASS"
