#!/usr/bin/env bash
# Bad input given to slurm/train.sbatch on a real Slurm: each must end the job with one clear
# message in its log, a non-zero exit code, and no requeue (the job ends once, Restarts=0).
source "$(dirname "$0")/common.sh" "$@"

# The error messages of a job log, one per line, as train.sbatch and fsdp_train print them
# (`[train.sbatch] error: ...`, `[error] ...`, `fsdp_train train: error: ...`), with timestamps and the
# `[rank N]` / `rank N: ` prefix and colours (mpirun gives ranks a terminal) removed, so the same message
# from several ranks is one. What srun,
# slurmstepd and MPI_Abort add around a failure is not counted.
error_messages() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | sed -n -e 's/^[0-9-]* [0-9:]* \[train.sbatch\] error: /script: /p' \
    -e 's/^\[[0-9-]* [0-9:.]*\] \[error\] \(\[rank [0-9]*\] \)\{0,1\}/fsdp_train: /p' \
    -e 's/^fsdp_train[a-z -]*: error: \(rank [0-9]*: \)\{0,1\}/fsdp_train: /p' -e 's/^error: /fsdp_train: /p' | sort -u
}

# expect_refusal NAME PATTERN [sbatch args...]: the job fails, is not requeued, and its log
# holds one error message, matching PATTERN.
expect_refusal() {
  local name=$1 pattern=$2
  shift 2
  submit_wait "$name" "$@"
  ((JOB_RC != 0)) || fail "$name: job $JOB_ID exited 0"
  [[ $JOB_STATE == FAILED ]] || fail "$name: job $JOB_ID ended $JOB_STATE, expected FAILED"
  [[ $(job_field "$JOB_ID" Restarts) == 0 ]] || fail "$name: job $JOB_ID was requeued"
  local errors
  errors=$(error_messages "$JOB_LOG" | wc -l)
  ((errors == 1)) || fail "$name: expected one error message in $(basename "$JOB_LOG"), found $errors: $(error_messages "$JOB_LOG")"
  require_log "$JOB_LOG" "$pattern"
  say "$name: job $JOB_ID exit $JOB_RC: $(error_messages "$JOB_LOG")"
}

say "a config file that does not exist, passed through the environment"
CONFIG=configs/no_such.yaml GPUS_PER_NODE=0 \
  expect_refusal missing_config "error: CONFIG=configs/no_such.yaml: no such file" \
  --ntasks=2 "$REPO/slurm/train.sbatch"

say "GPUS_PER_NODE that disagrees with the allocation's tasks"
GPUS_PER_NODE=4 \
  expect_refusal gpus_vs_tasks "error: GPUS_PER_NODE=4 on 1 node\(s\) needs 4 tasks \(one per GPU\) but the job has 2" \
  --ntasks=2 "$REPO/slurm/train.sbatch"

say "GPUS_PER_NODE that disagrees with --ntasks-per-node"
GPUS_PER_NODE=8 \
  expect_refusal gpus_vs_ntasks_per_node "error: GPUS_PER_NODE=8 but the job was submitted with --ntasks-per-node=2" \
  --ntasks-per-node=2 "$REPO/slurm/train.sbatch"

say "a bad config key reaches fsdp_train: its own one-line error, exit 2, no requeue"
GPUS_PER_NODE=0 EXTRA_ARGS="$TINY_ARGS --set train.max_step=5" \
  expect_refusal bad_key "error: .*unknown key 'train.max_step' \(did you mean 'train.max_steps'\?\)" \
  --ntasks=2 "$REPO/slurm/train.sbatch"
((JOB_RC == 2)) || fail "bad_key: exit code $JOB_RC, expected 2 (fsdp_train's usage error)"
require_log "$JOB_LOG" "fsdp_train failed \(exit code 2\): not requeueing"

say "a run directory holding a checkpoint of a different model"
RUN_DIR=$WORK/runs/other GPUS_PER_NODE=0 EXTRA_ARGS="$TINY_ARGS --set train.max_steps=5" \
  submit_wait first_model --ntasks=2 "$REPO/slurm/train.sbatch"
((JOB_RC == 0)) || fail "first_model: job $JOB_ID exited $JOB_RC"
[[ -d $WORK/runs/other/checkpoints/step_5 ]] || fail "first_model: no checkpoint step_5"
RUN_DIR=$WORK/runs/other GPUS_PER_NODE=0 EXTRA_ARGS="$TINY_ARGS --set train.max_steps=10 --set model.num_layers=2" \
  expect_refusal other_model "checkpoint .*step_5 holds a model with num_layers = 4, but the config asks for 2" \
  --ntasks=2 "$REPO/slurm/train.sbatch"
require_log "$JOB_LOG" "fsdp_train failed \(exit code 1\): not requeueing"

say "mpirun inside a 4-task allocation with -np 2 (fsdp_train's own launch check)"
expect_refusal mpirun_np "mpirun started 2 ranks but Slurm job [0-9]+ has 4 tasks \(SLURM_NTASKS=4\)" \
  --ntasks=4 --wrap "mpirun --allow-run-as-root -np 2 $FSDP_TRAIN train --config $REPO/configs/tiny.yaml $TINY_ARGS"
say "PASS"
