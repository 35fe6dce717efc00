# Shared set-up of the `slurm` tests: a private one-node cluster, a work directory the jobs
# run in, and checks on job logs and metrics.jsonl. Sourced by each test script as
#
#   source "$(dirname "$0")/common.sh" "$@"      # args: <fsdp_train binary> <repository root>
#
# After sourcing: $FSDP_TRAIN, $REPO (the repository), $WORK (jobs run here; logs in
# $WORK/logs), a cluster up with 8 CPUs, and an EXIT trap that stops it and deletes $WORK
# (kept, with the daemon logs printed, when the test failed). A test that needs another
# cluster names its bring-up and tear-down first: SLURM_TEST_UP / SLURM_TEST_DOWN (default
# slurm_up / slurm_down; two_nodes.sh sets two_nodes_up / two_nodes_down).
set -euo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 <fsdp_train binary> <repository root>" >&2; exit 2; }
FSDP_TRAIN=$(realpath "$1")
REPO=$(realpath "$2")
[[ -x $FSDP_TRAIN ]] || { echo "FAIL: $FSDP_TRAIN is not an executable" >&2; exit 1; }

source "$REPO/tests/slurm/local_slurm.sh"

TEST_NAME=$(basename "$0" .sh)
T0=$SECONDS
say() { printf '[%s %3ds] %s\n' "$TEST_NAME" "$((SECONDS - T0))" "$*"; }
fail() {
  printf '[%s] FAIL: %s\n' "$TEST_NAME" "$*" >&2
  exit 1
}

test_cleanup() {
  local rc=$?
  "${SLURM_TEST_DOWN:-slurm_down}"
  if ((rc != 0)); then
    slurm_dump_logs "$WORK/cluster"
    local f
    for f in "$WORK"/logs/*; do
      [[ -f $f ]] || continue
      echo "===== $f (last 60 lines)" >&2
      tail -60 "$f" >&2
    done
    echo "[$TEST_NAME] kept $WORK for inspection" >&2
  else
    rm -rf "$WORK"
  fi
  return $rc
}

if [[ $(id -u) -ne 0 ]]; then
  echo "[$TEST_NAME] SKIP: needs root (to install Slurm and munge and to run their daemons)" >&2
  exit 77
fi
slurm_install || fail "could not install Slurm and munge"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_slurm_${TEST_NAME}.XXXXXX")
chmod 755 "$WORK"
mkdir -p "$WORK/logs"
trap test_cleanup EXIT
"${SLURM_TEST_UP:-slurm_up}" "$WORK/cluster" 8 || fail "the local Slurm cluster did not come up"
cd "$WORK"

# Everything a job needs goes through the environment (sbatch exports it): the binary under
# test, and OpenMPI settings for more ranks than this machine has cores.
export FSDP_TRAIN
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# The tiny model on the synthetic source: no corpus needed, a few seconds per run.
TINY_ARGS="--set data.source=synthetic --set train.seq_len=32 --set train.micro_batch_size=4 --set train.grad_accum_steps=1 --set train.log_every=5 --set train.eval_every=0 --set data.num_workers=0"

# submit_wait NAME [sbatch options...] SCRIPT [script args...]: submits, waits for the job to
# end; sets JOB_ID, JOB_RC (the batch script's exit code) and JOB_LOG
# ($WORK/logs/NAME_<id>.out). Polls scontrol every 0.2 s rather than `sbatch --wait`, whose
# polling interval grows to 10 s: a 2-second job would cost 10.
submit_wait() {
  local name=$1
  shift
  JOB_ID=$(sbatch --parsable --job-name="$name" --output="$WORK/logs/%x_%j.out" "$@") ||
    fail "sbatch $* was refused"
  JOB_ID=${JOB_ID%%;*}
  JOB_LOG=$WORK/logs/${name}_${JOB_ID}.out
  wait_job_end "$JOB_ID" "${JOB_TIMEOUT:-120}"
}

# job_field ID KEY: one field of `scontrol show job` (JobState, ExitCode, Restarts, ...).
# scontrol is retried: under load slurmctld can miss a request.
job_field() {
  local out="" t
  for ((t = 0; t < 10; t++)); do
    out=$(scontrol show job -o "$1" 2>/dev/null) && break
    sleep 0.3
  done
  tr ' ' '\n' <<<"$out" | sed -n "s/^$2=//p"
}

# A job state after which nothing more happens (a requeued job is not in one: it runs again).
is_final_state() {
  case $1 in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;;
  esac
  return 1
}

# wait_job_end ID SECONDS: until the job is in a final state; sets JOB_STATE and JOB_RC
# (the batch script's exit code).
wait_job_end() {
  local id=$1 limit=$2 t
  for ((t = 0; t < limit * 5; t++)); do
    JOB_STATE=$(job_field "$id" JobState || true)
    is_final_state "$JOB_STATE" && break
    sleep 0.2
  done
  is_final_state "$JOB_STATE" || fail "job $id still ${JOB_STATE:-unknown} after $limit s"
  local code
  code=$(job_field "$id" ExitCode)
  JOB_RC=${code%%:*}
}

# Steps in a metrics.jsonl so far (0 before the file exists).
steps_logged() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }

# wait_for_steps METRICS N JOB: until METRICS holds N steps (at most 60 s; fails if the job ends first).
wait_for_steps() {
  local t
  for ((t = 0; t < 600; t++)); do
    (($(steps_logged "$1") >= $2)) && return 0
    ! is_final_state "$(job_field "$3" JobState || true)" || fail "job $3 ended before step $2"
    sleep 0.1
  done
  fail "job $3: no step $2 in $1 after 60 s"
}

# The loss of every step in a metrics.jsonl, as "step loss" lines (no JSON tool needed:
# the trainer writes one flat object per line).
losses() {
  sed -n 's/^{"step":\([0-9]*\).*[{,]"loss":\([^,}]*\).*/\1 \2/p' "$1"
}

# Checks that metrics.jsonl has steps 1..N, each once, and that the mean loss of the last
# five steps is below that of the first five.
check_loss_falls() {
  local metrics=$1 steps=$2
  [[ -s $metrics ]] || fail "$metrics is missing or empty"
  local got
  got=$(losses "$metrics" | awk '{print $1}' | tr '\n' ' ')
  [[ $got == "$(seq -s' ' 1 "$steps") " ]] || fail "$metrics: expected steps 1..$steps once each, got: $got"
  losses "$metrics" | awk -v n="$steps" '
    NR <= 5 { first += $2 } NR > n - 5 { last += $2 }
    END {
      printf "  loss: first five steps %.4f, last five %.4f\n", first / 5, last / 5
      exit !(last < first)
    }' || fail "$metrics: the loss did not fall"
}

# expect_same_losses REF RUN N: both metrics.jsonl hold steps 1..N with the same loss bits.
expect_same_losses() {
  losses "$1" >"$WORK/ref.losses"
  losses "$2" >"$WORK/run.losses"
  [[ $(wc -l <"$WORK/run.losses") == "$3" ]] || fail "$2 has $(wc -l <"$WORK/run.losses") steps, expected $3"
  diff "$WORK/ref.losses" "$WORK/run.losses" >"$WORK/losses.diff" ||
    fail "losses differ from the uninterrupted run's: $(head -4 "$WORK/losses.diff")"
}

# The log line (or nothing) that matches an extended regular expression.
log_has() { grep -Eq "$2" "$1"; }
require_log() { log_has "$1" "$2" || fail "$(basename "$1") lacks /$2/"; }
