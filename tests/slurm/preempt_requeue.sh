#!/usr/bin/env bash
# Requeue on preemption, end to end on a real Slurm, with slurm/train.sbatch unmodified:
#  1. an uninterrupted reference job;
#  2. the same job, sent the warning signal mid-run the way `#SBATCH --signal=B:USR1@N`
#     delivers it (to the batch shell only: `scancel --batch --signal=USR1`). The script
#     forwards it to srun, fsdp_train checkpoints and exits 75, the script runs `scontrol
#     requeue`, Slurm starts the job again (SLURM_RESTART_COUNT=1) and it resumes from the
#     checkpoint: every step's loss equals the reference's bit for bit;
#     The preempted job saves asynchronously (checkpoint.async), whose preemption save once
#     exited 1, so Slurm never requeued it; the requeued run takes the run.dir's lock its
#     previous run released (no stale-lock warning) and records its restart in it.
#  3. a job cancelled mid-run (`scancel`: SIGTERM to everything) still checkpoints, but is
#     not requeued.
#  4. one run per run.dir: a second job started on a run.dir a running job holds is refused
#     (exit 1, naming the holder and its Slurm job), and the holder trains on.
source "$(dirname "$0")/common.sh" "$@"

STEPS=150
# ~40 ms a step with 2 ranks: long enough to signal mid-run, short enough for CI.
ARGS="$TINY_ARGS --set train.seq_len=64 --set train.max_steps=$STEPS --set train.log_every=10 --set checkpoint.interval=50"

say "1. reference: $STEPS steps, uninterrupted"
RUN_DIR=$WORK/runs/ref GPUS_PER_NODE=0 EXTRA_ARGS="$ARGS" submit_wait ref --ntasks=2 "$REPO/slurm/train.sbatch"
((JOB_RC == 0)) || fail "reference job $JOB_ID exited $JOB_RC"
check_loss_falls "$WORK/runs/ref/metrics.jsonl" "$STEPS"

say "2. preempted: the warning signal to the batch shell after step 20"
run=$WORK/runs/pre
JOB_ID=$(RUN_DIR=$run GPUS_PER_NODE=0 EXTRA_ARGS="$ARGS --set checkpoint.async=true" sbatch --parsable --job-name=pre \
  --ntasks=2 --output="$WORK/logs/%x_%j.out" "$REPO/slurm/train.sbatch")
JOB_LOG=$WORK/logs/pre_$JOB_ID.out
wait_for_steps "$run/metrics.jsonl" 20 "$JOB_ID"
scancel --batch --signal=USR1 "$JOB_ID"
signalled_at=$(steps_logged "$run/metrics.jsonl")
wait_job_end "$JOB_ID" 120
[[ $JOB_STATE == COMPLETED && $JOB_RC == 0 ]] || fail "job $JOB_ID ended $JOB_STATE with $JOB_RC"
[[ $(job_field "$JOB_ID" Restarts) == 1 ]] || fail "job $JOB_ID restarted $(job_field "$JOB_ID" Restarts) times, expected 1"
require_log "$JOB_LOG" "SIGUSR1 \(time limit near, or preemption\): asking fsdp_train to checkpoint and exit"
require_log "$JOB_LOG" "preemption signal"
require_log "$JOB_LOG" "fsdp_train wrote a checkpoint and stopped \(exit code 75\): requeueing job $JOB_ID"
require_log "$JOB_LOG" "job $JOB_ID \(pre\) restart 1, Requeue=1"
stopped=$(sed -n "s/.*resumed from .*step_\([0-9]*\) at step .*/\1/p" "$JOB_LOG")
[[ -n $stopped ]] || fail "the requeued run did not resume from a checkpoint"
((stopped >= 20 && stopped < STEPS)) || fail "resumed at step $stopped"
require_log "$JOB_LOG" "fsdp_train finished"
! log_has "$JOB_LOG" "could not be saved" || fail "an async save was reported lost"
! log_has "$JOB_LOG" "taking over the lock" || fail "the requeued run found its predecessor's lock stale"
require_log "$run/fsdp_train.lock" "tag: slurm job $JOB_ID restart 1"
require_log "$run/fsdp_train.lock" "state: released"
say "signal after step $signalled_at, checkpoint at step $stopped, requeued, resumed, finished"
expect_same_losses "$WORK/runs/ref/metrics.jsonl" "$run/metrics.jsonl" "$STEPS"
say "all $STEPS losses equal the uninterrupted run's, bit for bit (steps $((stopped + 1))..$STEPS after the resume)"

say "3. cancelled: scancel mid-run checkpoints and is not requeued"
run=$WORK/runs/cancel
JOB_ID=$(RUN_DIR=$run GPUS_PER_NODE=0 EXTRA_ARGS="$ARGS" sbatch --parsable --job-name=cancel --ntasks=2 \
  --output="$WORK/logs/%x_%j.out" "$REPO/slurm/train.sbatch")
JOB_LOG=$WORK/logs/cancel_$JOB_ID.out
wait_for_steps "$run/metrics.jsonl" 20 "$JOB_ID"
scancel "$JOB_ID"
wait_job_end "$JOB_ID" 60
[[ $JOB_STATE == CANCELLED ]] || fail "job $JOB_ID ended $JOB_STATE, expected CANCELLED"
[[ $(job_field "$JOB_ID" Restarts) == 0 ]] || fail "a cancelled job was requeued"
# The batch script's last lines reach the log after the state change.
for ((t = 0; t < 50; t++)); do log_has "$JOB_LOG" "not requeued: resubmit to resume" && break; sleep 0.2; done
require_log "$JOB_LOG" "SIGTERM: the job is being cancelled or ran out of time; it will not be requeued"
require_log "$JOB_LOG" "fsdp_train wrote a checkpoint and stopped \(exit code 75\); the job was cancelled, so it is not requeued: resubmit to resume"
! log_has "$JOB_LOG" "requeueing job" || fail "a cancelled job tried to requeue itself"
saved=$(sed -n 's/.*checkpoint: saved .*step_\([0-9]*\) .*/\1/p' "$JOB_LOG" | tail -1)
[[ -n $saved && -f $run/checkpoints/step_$saved/manifest.json ]] || fail "the cancelled job left no checkpoint"
say "cancelled: checkpoint at step $saved, not requeued"

say "4. one run per run.dir: a second job on a run.dir in use is refused"
run=$WORK/runs/held
HOLDER=$(RUN_DIR=$run GPUS_PER_NODE=0 EXTRA_ARGS="$TINY_ARGS --set train.max_steps=100000" sbatch --parsable \
  --job-name=holder --ntasks=2 --output="$WORK/logs/%x_%j.out" "$REPO/slurm/train.sbatch")
wait_for_steps "$run/metrics.jsonl" 5 "$HOLDER"
RUN_DIR=$run GPUS_PER_NODE=0 EXTRA_ARGS="$TINY_ARGS --set train.max_steps=100000" JOB_TIMEOUT=60 \
  submit_wait intruder --ntasks=1 "$REPO/slurm/train.sbatch"
((JOB_RC == 1)) || fail "the second job on $run exited $JOB_RC, expected 1"
require_log "$JOB_LOG" "run.dir $run is in use by pid [0-9]+ on host .* \(since .*\), slurm job $HOLDER restart 0"
require_log "$JOB_LOG" "fsdp_train failed \(exit code 1\): not requeueing"
! log_has "$JOB_LOG" "step +1/" || fail "the refused job trained"
[[ $(job_field "$HOLDER" JobState) == RUNNING ]] || fail "the holder stopped: $(job_field "$HOLDER" JobState)"
before=$(steps_logged "$run/metrics.jsonl")
wait_for_steps "$run/metrics.jsonl" $((before + 5)) "$HOLDER"
scancel "$HOLDER"
wait_job_end "$HOLDER" 60
say "refused: $(grep -o 'run.dir .* is in use by .*' "$JOB_LOG" | head -1); the holder trained on"
say "PASS"
