#!/usr/bin/env bash
# slurm/train.sbatch, unmodified, on a real two-node Slurm: two nodes made of network, UTS
# and mount namespaces on this machine (two_nodes_cluster.sh), `sbatch --nodes=2
# --ntasks-per-node=2`, OpenMPI over TCP between the nodes (srun --mpi=pmix).
#  1. HYBRID_SHARD with the default shard group, the ranks of one node: the log names rank 0's
#     shard group (world ranks 0-1 on fsdp-n1) and its replicate group (across both nodes);
#     a checkpoint directory that both nodes see draws no warning, whatever its type.
#  2. checkpoint.dir on a node-local tmpfs: the job stops at start-up naming the node that
#     does not see it (exit 1, not requeued).
#  3. Both tasks of fsdp-n2 stopped mid-run (SIGSTOP: a hung node): the ranks of fsdp-n1 each
#     log the watchdog's line naming the ranks of fsdp-n2, the job exits 76, train.sbatch
#     requeues it, and the requeued job resumes from the last checkpoint and ends with every
#     loss equal to the uninterrupted run's, bit for bit.
# (A task killed outright, kill -9, needs no watchdog here: Slurm's PMIx plugin ends the whole
# step at once, exit 137.)
SLURM_TEST_UP=two_nodes_up
SLURM_TEST_DOWN=two_nodes_down
source "$(dirname "$0")/two_nodes_cluster.sh"
if [[ $(id -u) -eq 0 ]]; then
  command -v ip >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; } ||
    { echo "[two_nodes] FAIL: iproute2 (ip) is missing and could not be installed" >&2; exit 1; }
  if ! { ip netns add "fsdp_probe$$" && ip netns del "fsdp_probe$$"; } 2>/dev/null; then
    echo "[two_nodes] SKIP: this machine does not let root make network namespaces (ip netns add)" >&2
    exit 77
  fi
fi
source "$(dirname "$0")/common.sh" "$@"

STEPS=60
ARGS="$TINY_ARGS --set train.seq_len=64 --set train.max_steps=$STEPS --set train.log_every=10 --set checkpoint.interval=20 --set fsdp.sharding_strategy=HYBRID_SHARD --set dist.timeout_s=10"
submit_two_nodes() { # submit_two_nodes NAME RUN_DIR [EXTRA fsdp_train args]: sets JOB_ID and JOB_LOG, does not wait
  local name=$1 run=$2
  shift 2
  JOB_ID=$(RUN_DIR=$run GPUS_PER_NODE=0 EXTRA_ARGS="$ARGS $*" sbatch --parsable --job-name="$name" --nodes=2 \
    --ntasks-per-node=2 --output="$WORK/logs/%x_%j.out" "$REPO/slurm/train.sbatch") || fail "sbatch refused $name"
  JOB_ID=${JOB_ID%%;*}
  JOB_LOG=$WORK/logs/${name}_$JOB_ID.out
}

say "1. reference: HYBRID_SHARD over 2 nodes x 2 ranks, $STEPS steps"
submit_two_nodes ref "$WORK/runs/ref"
wait_job_end "$JOB_ID" 180
((JOB_RC == 0)) || fail "reference job $JOB_ID exited $JOB_RC"
require_log "$JOB_LOG" "job $JOB_ID \(ref\) restart 0, Requeue=1: 2 node\(s\) fsdp-n\[1-2\], 4 rank\(s\)"
require_log "$JOB_LOG" "4 ranks on 2 nodes, launched by srun"
require_log "$JOB_LOG" "fsdp: HYBRID_SHARD over 4 ranks on 2 nodes \(shard group 2, replicate group 2\)"
require_log "$JOB_LOG" "fsdp: rank 0's shard group is world ranks 0-1 on fsdp-n1; its replicate group world ranks 0, 2 on fsdp-n1, fsdp-n2"
! log_has "$JOB_LOG" "\[(error|warning)\]" || fail "the reference job logged errors or warnings: $(grep -E '\[(error|warning)\]' "$JOB_LOG" | head -3)"
check_loss_falls "$WORK/runs/ref/metrics.jsonl" "$STEPS"
grep -E "shard group is|HYBRID_SHARD over" "$JOB_LOG" | sed 's/^.*\] /  /'

say "2. checkpoint.dir on a node-local tmpfs: refused at start-up"
submit_two_nodes nodelocal "$WORK/runs/nodelocal" --set checkpoint.dir="$WORK/cluster/nodelocal/ckpt"
wait_job_end "$JOB_ID" 120
((JOB_RC == 1)) || fail "job $JOB_ID exited $JOB_RC, expected 1"
require_log "$JOB_LOG" "checkpoint.dir $WORK/cluster/nodelocal/ckpt is not shared by the job's 2 nodes: fsdp-n2 does not see the file rank 0 wrote there \(tmpfs on fsdp-n1\)"
require_log "$JOB_LOG" "fsdp_train failed \(exit code 1\): not requeueing"
[[ $(job_field "$JOB_ID" Restarts) == 0 ]] || fail "job $JOB_ID was requeued"
grep "is not shared" "$JOB_LOG" | sed 's/^.*\] /  /'

say "3. fsdp-n2's tasks stopped after step 30: watchdog, requeue, resume"
run=$WORK/runs/hang
submit_two_nodes hang "$run"
wait_for_steps "$run/metrics.jsonl" 30 "$JOB_ID"
stopped=()
for p in $(two_nodes_pids 2); do
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == fsdp_train ]] && stopped+=("$p")
done
((${#stopped[@]} == 2)) || fail "expected 2 fsdp_train processes on fsdp-n2, found ${#stopped[@]}"
kill -STOP "${stopped[@]}"
t0=$SECONDS
for ((t = 0; t < 600; t++)); do
  log_has "$JOB_LOG" "requeueing job $JOB_ID" && break
  sleep 0.1
done
log_has "$JOB_LOG" "requeueing job $JOB_ID" || fail "no requeue within 60 s of the stop"
secs=$((SECONDS - t0))
wait_job_end "$JOB_ID" 180
[[ $JOB_STATE == COMPLETED && $JOB_RC == 0 ]] || fail "job $JOB_ID ended $JOB_STATE with $JOB_RC"
[[ $(job_field "$JOB_ID" Restarts) == 1 ]] || fail "job $JOB_ID restarted $(job_field "$JOB_ID" Restarts) times, expected 1"
lines=$(grep -c 'watchdog: ' "$JOB_LOG" || true)
((lines == 2)) || fail "expected one watchdog line from each rank of fsdp-n1, got $lines"
grep 'watchdog: ' "$JOB_LOG" | grep -vqE 'did not complete within 10 s at step [0-9]+: world ranks? [23] \(host fsdp-n2\)(, 3 \(host fsdp-n2\))? did not arrive \(no reply within 1 s: dead, stopped, or busy outside any collective\); aborting the job with exit code 76$' &&
  fail "unexpected watchdog line: $(grep 'watchdog: ' "$JOB_LOG")"
require_log "$JOB_LOG" "\[error\] watchdog: "
require_log "$JOB_LOG" "\[error\] \[rank 1\] watchdog: "
require_log "$JOB_LOG" "fsdp_train's watchdog aborted the job \(exit code 76: a rank died, stopped or hung; its 'watchdog:' line names the ranks\): requeueing job $JOB_ID"
require_log "$JOB_LOG" "job $JOB_ID \(hang\) restart 1, Requeue=1"
resumed=$(sed -n "s/.*resumed from .*step_\([0-9]*\) at step .*/\1/p" "$JOB_LOG")
[[ $resumed == 20 || $resumed == 40 ]] || fail "the requeued job resumed from '${resumed}', expected step 20 or 40"
require_log "$JOB_LOG" "fsdp_train finished"
expect_same_losses "$WORK/runs/ref/metrics.jsonl" "$run/metrics.jsonl" "$STEPS"
grep 'watchdog: ' "$JOB_LOG" | sed 's/^.*\] watchdog/  watchdog/'
say "stopped after step 30; the watchdog's exit and the requeue $secs s later; resumed at step $resumed; all $STEPS losses equal the reference's bit for bit"
say "PASS"
