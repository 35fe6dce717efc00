#!/usr/bin/env bash
# slurm/train.sbatch, unmodified, on a real Slurm: CPU mode (GPUS_PER_NODE=0) with 2 and 4
# tasks, each launched by `srun --mpi=pmix`. Checks the job's exit code, what its log says
# (job id, restart count, requeue flag, ranks, launcher), that every step reached
# metrics.jsonl with a falling loss and the right world size, and that checkpoints were
# written where the trainer writes them; with PROFILE=1, every rank's trace of the window,
# which trace-merge reads.
source "$(dirname "$0")/common.sh" "$@"

STEPS=30
for ntasks in 2 4; do
  say "sbatch --ntasks=$ntasks slurm/train.sbatch (CPU mode)"
  # With 2 tasks also PROFILE=1: every rank writes its trace of steps 12-13.
  profile=$((ntasks == 2 ? 1 : 0))
  PROFILE=$profile PROFILE_WAIT=10 PROFILE_ACTIVE=2 RUN_DIR=$WORK/runs/n$ntasks GPUS_PER_NODE=0 \
    EXTRA_ARGS="$TINY_ARGS --set train.max_steps=$STEPS --set checkpoint.interval=10" \
    submit_wait "train_n$ntasks" --ntasks="$ntasks" "$REPO/slurm/train.sbatch" --set train.seed=7
  ((JOB_RC == 0)) || fail "job $JOB_ID exited with $JOB_RC"
  require_log "$JOB_LOG" "job $JOB_ID \(train_n$ntasks\) restart 0, Requeue=1: 1 node\(s\)"
  require_log "$JOB_LOG" "$ntasks rank\(s\) \(CPU, 1 CPU\(s\) and OMP_NUM_THREADS=1 each\)"
  require_log "$JOB_LOG" "srun --mpi=pmix --nodes=1 --ntasks=$ntasks "
  require_log "$JOB_LOG" "$ntasks ranks? on 1 node, launched by srun"
  require_log "$JOB_LOG" "step +$STEPS/$STEPS .*\| loss"
  require_log "$JOB_LOG" "fsdp_train finished"
  ! log_has "$JOB_LOG" "\[(error|warning)\]" || fail "$(basename "$JOB_LOG") has errors or warnings"
  # Script arguments reach fsdp_train: the run's effective config holds the --set.
  grep -q "^  seed: 7$" "$WORK/runs/n$ntasks/config.yaml" || fail "runs/n$ntasks/config.yaml lacks train.seed 7"
  metrics=$WORK/runs/n$ntasks/metrics.jsonl
  check_loss_falls "$metrics" "$STEPS"
  grep -q "\"world_size\":$ntasks[,}]" "$metrics" || fail "$metrics: world_size is not $ntasks"
  for s in 10 20 30; do
    [[ -f $WORK/runs/n$ntasks/checkpoints/step_$s/manifest.json ]] ||
      fail "no checkpoint $WORK/runs/n$ntasks/checkpoints/step_$s"
  done
  if ((profile)); then
    for r in 0 1; do
      [[ -f $WORK/runs/n$ntasks/traces/rank_$r.trace.json ]] || fail "PROFILE=1: no trace from rank $r"
    done
    require_log "$JOB_LOG" "trace: steps 12-13 written to"
    "$FSDP_TRAIN" trace-merge "$WORK/runs/n$ntasks/traces" >"$WORK/merge.log" 2>&1 ||
      fail "trace-merge of the job's traces: $(cat "$WORK/merge.log")"
    grep -q "trace-merge: 2 rank(s) into" "$WORK/merge.log" || fail "trace-merge: $(cat "$WORK/merge.log")"
  fi
  say "job $JOB_ID: $ntasks ranks, $STEPS steps, exit 0"
done
say "PASS"
