#!/usr/bin/env bash
# The launch variants of slurm/*.sbatch that need what this machine lacks (GPUs, Pyxis,
# nsys), checked as far as they can be without it. Each job runs on the real Slurm, but with
# a stand-in `srun` first on PATH that records its arguments and environment, so the test
# sees the exact command the script would launch:
#   - GPU mode: one task per GPU, the CPU share per rank, the EFA block per USE_EFA;
#   - the container preset: Pyxis options, mounts, the binary inside the image;
#   - NSYS=1: nsys around each rank, reports named by job, restart and rank, --kill=none;
#   - PROFILE=1: the trace schedule's keys, before the user's arguments.
source "$(dirname "$0")/common.sh" "$@"

mkdir -p fakebin
cat >fakebin/srun <<'EOS'
#!/bin/bash
# Stand-in for srun: its arguments one per line, then the network/thread environment.
{
  printf '%s\n' "$@"
  env | grep -E '^(FI_|NCCL_|OMP_NUM_THREADS=)' | sort | sed 's/^/env: /'
} >"$SRUN_RECORD.$SLURM_JOB_ID"
EOS
chmod +x fakebin/srun
export SRUN_RECORD=$WORK/srun_args

# run_variant NAME [sbatch args...]: the job must succeed; ARGS = what srun was given.
run_variant() {
  local name=$1
  shift
  PATH=$WORK/fakebin:$PATH submit_wait "$name" "$@"
  ((JOB_RC == 0)) || fail "$name: job $JOB_ID exited $JOB_RC: $(tail -3 "$JOB_LOG")"
  ARGS=$(cat "$SRUN_RECORD.$JOB_ID")
}
has() { grep -qxF -- "$1" <<<"$ARGS" || fail "$NAME: srun did not get '$1'; it got: $(tr '\n' ' ' <<<"$ARGS")"; }
lacks() { ! grep -q -- "$1" <<<"$ARGS" || fail "$NAME: srun got '$1': $(tr '\n' ' ' <<<"$ARGS")"; }

NAME="GPU mode, p4d/p5 (USE_EFA=1 default)"
say "$NAME"
GPUS_PER_NODE=4 run_variant gpu_efa --nodes=1 --ntasks-per-node=4 --cpus-per-task=2 "$REPO/slurm/train.sbatch"
has "--mpi=pmix"
has "--ntasks=4"
has "--ntasks-per-node=4"
has "--cpus-per-task=2"
has "env: OMP_NUM_THREADS=2"
has "env: FI_PROVIDER=efa"
has "env: FI_EFA_USE_DEVICE_RDMA=1"
has "env: NCCL_DEBUG=WARN"
require_log "$JOB_LOG" "4 rank\(s\) \(GPU, 2 CPU\(s\) and OMP_NUM_THREADS=2 each\), USE_EFA=1"

NAME="GPU mode, EFA without GPUDirect RDMA (USE_EFA=nordma), CPU share of an exclusive node"
say "$NAME"
GPUS_PER_NODE=2 USE_EFA=nordma run_variant gpu_nordma --nodes=1 --ntasks-per-node=2 --exclusive "$REPO/slurm/train.sbatch"
has "--cpus-per-task=4" # 8 CPUs / 2 ranks
has "env: FI_PROVIDER=efa"
lacks "FI_EFA_USE_DEVICE_RDMA"

NAME="GPU mode without EFA (USE_EFA=0)"
say "$NAME"
GPUS_PER_NODE=2 USE_EFA=0 run_variant gpu_noefa --nodes=1 --ntasks-per-node=2 "$REPO/slurm/train.sbatch"
lacks "FI_"
has "env: NCCL_DEBUG=WARN"

NAME="container preset"
say "$NAME"
# Its #SBATCH sizing (4 nodes x 8 GPUs) is overridden to fit one node; the binary defaults
# to the image's, so the test's FSDP_TRAIN is kept out of the job's environment.
(
  unset FSDP_TRAIN
  GPUS_PER_NODE=2 run_variant container --nodes=1 --ntasks-per-node=2 "$REPO/slurm/train_container.sbatch"
  echo "$JOB_ID" >"$WORK/container.job"
)
ARGS=$(cat "$SRUN_RECORD.$(cat "$WORK/container.job")")
has "--container-image=$WORK/fsdp_train.sqsh"
has "--container-mounts=$REPO:$REPO,$WORK:$WORK"
has "--container-workdir=$WORK"
has "/opt/fsdp_train/build/fsdp_train"
has "$REPO/configs/llama2_7b.yaml"
has "--ntasks-per-node=2"

NAME="a preset with CONTAINER_IMAGE and CONTAINER_MOUNTS"
say "$NAME"
CONTAINER_IMAGE=nvcr.io#example/fsdp:1 CONTAINER_MOUNTS=/fsx:/fsx GPUS_PER_NODE=2 FSDP_TRAIN=/opt/x/fsdp_train \
  run_variant preset_container --nodes=1 --ntasks-per-node=2 "$REPO/slurm/llama2_70b.sbatch" --set train.max_steps=3
has "--container-image=nvcr.io#example/fsdp:1"
has "--container-mounts=/fsx:/fsx"
has "/opt/x/fsdp_train"
has "$REPO/configs/llama2_70b.yaml"
has "train.max_steps=3"
require_log "$JOB_LOG" "job $JOB_ID \(preset_container\)"

NAME="the tensor-parallel preset"
say "$NAME"
GPUS_PER_NODE=2 run_variant preset_tp --nodes=1 --ntasks-per-node=2 "$REPO/slurm/llama2_70b_tp.sbatch"
has "$REPO/configs/llama2_70b_tp.yaml"
NAME="the Mixtral tensor-parallel preset"
say "$NAME"
GPUS_PER_NODE=4 run_variant preset_moe_tp --nodes=1 --ntasks-per-node=4 "$REPO/slurm/mixtral_8x7b_tp.sbatch"
has "$REPO/configs/mixtral_8x7b_tp.yaml"
# The expert-parallel preset is checked down to its srun line only: it needs GPUs, 8 per
# expert group (its plan: tests/cpu/test_memory_plan_expert.cpp).
NAME="the Mixtral expert-parallel preset"
say "$NAME"
GPUS_PER_NODE=8 run_variant preset_moe_ep --nodes=1 --ntasks-per-node=8 "$REPO/slurm/mixtral_8x7b_ep.sbatch"
has "$REPO/configs/mixtral_8x7b_ep.yaml"
has "--ntasks-per-node=8"

NAME="a preset submitted by a relative path, as the README does"
say "$NAME"
# Slurm runs a spool copy of the script: the preset finds train.sbatch, and the repository
# (configs, build), through the job record's Command.
ln -s "$REPO" repo
GPUS_PER_NODE=2 run_variant relative --nodes=1 --ntasks-per-node=2 repo/slurm/llama2_7b.sbatch
has "$WORK/repo/configs/llama2_7b.yaml"

NAME="NSYS=1"
say "$NAME"
NSYS=1 NSYS_DELAY=30 NSYS_DURATION=90 NSYS_DIR=$WORK/prof GPUS_PER_NODE=2 \
  run_variant nsys --nodes=1 --ntasks-per-node=2 "$REPO/slurm/llama2_13b.sbatch"
has "nsys"
has "profile"
has "--delay=30"
has "--duration=90"
has "--kill=none"
has "--trace=cuda,nvtx,osrt,cublas,mpi"
has "--output=$WORK/prof/nsys_${JOB_ID}_r0_rank%q{SLURM_PROCID}"
has "$FSDP_TRAIN"
[[ -d $WORK/prof ]] || fail "NSYS_DIR was not created"

NAME="PROFILE=1"
say "$NAME"
PROFILE=1 PROFILE_WAIT=20 PROFILE_ACTIVE=4 PROFILE_DIR=$WORK/traces GPUS_PER_NODE=2 \
  run_variant profile --nodes=1 --ntasks-per-node=2 "$REPO/slurm/llama2_7b.sbatch" --set logging.profile_warmup=2
has "logging.profile_wait=20"
has "logging.profile_warmup=1"
has "logging.profile_active=4"
has "logging.profile_dir=$WORK/traces"
# The user's own --set comes after the script's, so it wins.
[[ $(grep -nxF -- "logging.profile_warmup=2" <<<"$ARGS" | cut -d: -f1) -gt \
   $(grep -nxF -- "logging.profile_warmup=1" <<<"$ARGS" | cut -d: -f1) ]] || fail "$NAME: the user's --set is not last"

NAME="bad switches"
say "$NAME: each refused with one line, exit 2"
for bad in "USE_EFA=yes:expected 1 \\(EFA with GPUDirect RDMA" "NSYS=2:expected 1 \\(profile" \
  "PROFILE=yes:expected 1 \\(trace a window of steps\\)" \
  "GPUS_PER_NODE=x:expected a number of GPUs per node" "NNODES=3:this job has 1 node\\(s\\)"; do
  setting=${bad%%:*}
  (
    export GPUS_PER_NODE=2 "${setting?}"
    PATH=$WORK/fakebin:$PATH submit_wait "bad_${setting%%=*}" --nodes=1 --ntasks-per-node=2 "$REPO/slurm/train.sbatch"
    ((JOB_RC == 2)) || fail "$setting: job $JOB_ID exited $JOB_RC, expected 2"
    require_log "$JOB_LOG" "error: $setting: ${bad#*:}"
    [[ ! -e $SRUN_RECORD.$JOB_ID ]] || fail "$setting: srun was run"
  )
done
(
  export GPUS_PER_NODE=2 PROFILE=1 PROFILE_ACTIVE=x
  PATH=$WORK/fakebin:$PATH submit_wait bad_PROFILE_ACTIVE --nodes=1 --ntasks-per-node=2 "$REPO/slurm/train.sbatch"
  ((JOB_RC == 2)) || fail "PROFILE_ACTIVE=x: job $JOB_ID exited $JOB_RC, expected 2"
  require_log "$JOB_LOG" "error: PROFILE_ACTIVE=x: expected a number of steps"
)
say "PASS"
