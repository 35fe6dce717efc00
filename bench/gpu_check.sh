#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: build fsdp_train for sm_80 and sm_90 with
# the real CUDA backend (FSDP_CUDA=ON: nvcc, cuBLASLt, NCCL), run the whole test suite on the
# device (ctest: every label; the `gpu` tests are the emulated suite's CUDA tests, unchanged,
# on real hardware), and print a short table: tests passed / failed / skipped per label, and
# the device. Then the training-step benchmark on the GPU (gpu_step_bench: ms/step,
# tokens/s, MFU, peak memory per case; its per-op tables go to the log), activation
# checkpointing's step time and memory per mode (ac_bench --device cuda), fsdp_train with
# FULL_SHARD over every GPU here when there are several (NCCL inside the step; its last
# metrics line; GPU_FSDP_STEP=0 skips it), and the roofline bound those numbers are to be
# read against.
#
#   bash bench/gpu_check.sh                  # build into build-gpu/, run everything
#   GPU_BUILD_DIR=/tmp/b bash bench/gpu_check.sh -R Nccl   # extra arguments go to ctest
#   GPU_STEP_BENCH_ARGS="--case llama-1.1b --steps 20" bash bench/gpu_check.sh
#   GPU_STEP_BENCH=0 GPU_AC_BENCH=0 bash bench/gpu_check.sh   # tests only
#
#   bash bench/gpu_check.sh --package DIR [--out OUT]   # an unpacked package's check.sh instead:
#                                            # nothing built, no package manager needed
#                                            # (docs/gpu-cluster.md; its options and exit codes)
#
# Exit status: 0 when every test ran and passed, the `gpu` tests really ran on the device
# (not skipped) and gpu_step_bench ran every case; 1 when any failed or were skipped on the
# GPU; 2 when there is no GPU or no
# CUDA toolkit here: then nothing is built or run, and the script says so (CI machines have
# no GPU: CI runs the emulated suite instead, scripts/test.sh). Not run by CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GPU_BUILD_DIR:-$root/build-gpu}"

if [ "${1:-}" = "--package" ]; then
  pkg="${2:?--package needs the unpacked package directory (dist/fsdp_train-<version>-cuda13-x86_64)}"
  shift 2
  [ -x "$pkg/check.sh" ] ||
    { echo "gpu_check: $pkg/check.sh not found: give the directory of an unpacked package (scripts/package.sh)" >&2; exit 2; }
  exec "$pkg/check.sh" "$@"
fi

# ---- is there a GPU? (never pretend) ----
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no GPU on this machine (no nvidia-smi, so no NVIDIA driver); nothing was built or run." >&2
  echo "gpu_check: without a GPU, the CUDA backend runs on the emulator: bash scripts/test.sh (labels emulated-gpu)." >&2
  exit 2
fi
if ! gpus="$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1)" ||
   [ -z "$gpus" ]; then
  echo "gpu_check: nvidia-smi finds no usable GPU: ${gpus:-no devices}; nothing was built or run." >&2
  exit 2
fi
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [ ! -x "$nvcc" ]; then
  echo "gpu_check: a GPU is here but no CUDA toolkit (nvcc not found; set CUDACXX); nothing was built or run." >&2
  exit 2
fi

# ---- build: sm_80 (A100) and sm_90 (H100/H200) in one fat binary ----
echo "gpu_check: building into $build (FSDP_CUDA=ON, CMAKE_CUDA_ARCHITECTURES=80;90) ..."
BUILD_DIR="$build" bash "$root/scripts/build.sh" -DFSDP_CUDA=ON -DFSDP_CUDA_EMULATION=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" "-DCMAKE_CUDA_ARCHITECTURES=80;90"
grep -q '^FSDP_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "gpu_check: the build has no CUDA backend" >&2; exit 1; }

# ---- run every label on the device ----
logs="$build/gpu_check"
mkdir -p "$logs"
labels=(cpu mpi gpu slurm)
declare -A passed failed skipped total
status=0
# The NCCL tests under mpiexec need a GPU per rank: those with more ranks than GPUs here are
# left out (and said so), so that any other skip on the GPU counts as a failure.
ngpus=$(wc -l <<<"$gpus")
exclude=()
not_run=""
for np in 2 4; do
  if [ "$np" -gt "$ngpus" ]; then not_run+=" cuda_mpi_np$np"; fi
done
[ -n "$not_run" ] && exclude=(-E "^($(echo $not_run | tr ' ' '|'))\$")
for label in "${labels[@]}"; do
  echo "gpu_check: ctest -L $label ..."
  out="$logs/$label.txt"
  (cd "$build" && ctest -L "^$label\$" "${exclude[@]}" --output-on-failure --output-log "$logs/$label.log" \
     -j"$(nproc)" "$@") >"$out" 2>&1 || status=1
  # "93% tests passed, 1 tests failed out of 14"; "No tests were found" for an empty label.
  read -r pct nfail ntotal < <(sed -n 's/^\([0-9]*\)% tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\1 \2 \3/p' "$out" | tail -1) ||
    { pct=0 nfail=0 ntotal=0; }
  # Skipped: ctest's (a script's exit 77) plus gtest's GTEST_SKIP inside a passing test.
  nskip=$(( $(grep -c '\*\*\*Skipped' "$out" || true) + $(grep -c '^\[  SKIPPED \]' "$logs/$label.log" 2>/dev/null || true) ))
  total[$label]=${ntotal:-0}; failed[$label]=${nfail:-0}; skipped[$label]=$nskip
  passed[$label]=$(( ${ntotal:-0} - ${nfail:-0} ))
done

# ---- the training step on the GPU (bench/README.md, "GPU training step") ----
bench_out="$logs/gpu_step_bench.txt"
bench_rc=skipped
if [ "${GPU_STEP_BENCH:-1}" != 0 ]; then
  echo "gpu_check: gpu_step_bench ${GPU_STEP_BENCH_ARGS:-} ..."
  bench_rc=0
  # shellcheck disable=SC2086  # the arguments are words on purpose
  "$build/bench/gpu_step_bench" ${GPU_STEP_BENCH_ARGS:-} >"$bench_out" 2>&1 || bench_rc=$?
  [ "$bench_rc" -eq 0 ] || status=1
fi

# ---- activation checkpointing on the GPU: step time and memory per mode (ac_bench) ----
ac_out="$logs/ac_bench.txt"
ac_rc=skipped
if [ "${GPU_AC_BENCH:-1}" != 0 ]; then
  echo "gpu_check: ac_bench --device cuda ..."
  ac_rc=0
  "$build/bench/ac_bench" --device cuda >"$ac_out" 2>&1 || ac_rc=$?
  [ "$ac_rc" -eq 0 ] || status=1
fi

# ---- FSDP across every GPU here: NCCL inside the step (the tests use tiny models) ----
fsdp_out="$logs/fsdp_train.txt"
fsdp_rc=skipped
if [ "${GPU_FSDP_STEP:-1}" != 0 ] && [ "$ngpus" -gt 1 ]; then
  echo "gpu_check: fsdp_train FULL_SHARD over $ngpus GPUs (Llama 2 7B shape, 8 layers, synthetic data) ..."
  fsdp_rc=0
  rm -rf "$logs/fsdp_run"
  mpiexec --allow-run-as-root -n "$ngpus" "$build/fsdp_train" train --config "$root/configs/llama2_7b.yaml" \
    --set data.source=synthetic --set model.num_layers=8 --set train.max_steps=12 --set train.log_every=1 \
    --set train.eval_every=0 --set train.device=cuda --set checkpoint.resume=none --set checkpoint.keep_last=1 \
    --set run.dir="$logs/fsdp_run" >"$fsdp_out" 2>&1 || fsdp_rc=$?
  [ "$fsdp_rc" -eq 0 ] || status=1
fi

# ---- the table ----
echo
echo "gpu_check on $(hostname) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "device(s): index, name, memory, driver"
sed 's/^/  /' <<<"$gpus"
echo "toolkit: $("$nvcc" --version | tail -1)"
printf '\n%-8s %8s %8s %10s %8s\n' label passed failed "skipped*" total
for label in "${labels[@]}"; do
  printf '%-8s %8s %8s %10s %8s\n' "$label" "${passed[$label]}" "${failed[$label]}" "${skipped[$label]}" "${total[$label]}"
done
echo "* skipped: a test (or gtest case) that skipped itself, e.g. Slurm tests without root; logs in $logs/"
[ -n "$not_run" ] && echo "not run:$not_run (a GPU per rank: $ngpus GPU(s) here)"
if [ "${total[gpu]}" -eq 0 ]; then
  echo "gpu_check: no test of the gpu label ran (is the CUDA backend built? see $logs/gpu.txt)"
  status=1
elif [ "${skipped[gpu]}" -gt 0 ]; then
  echo "gpu_check: ${skipped[gpu]} of the gpu tests skipped themselves on this device; see $logs/gpu.log"
  status=1
fi
echo
if [ "$bench_rc" = skipped ]; then
  echo "gpu_step_bench: not run (GPU_STEP_BENCH=0)"
else
  echo "gpu_step_bench (exit $bench_rc; per-op tables in $bench_out):"
  # Each case's title and its summary row (the line under the "case ms/step ..." header).
  awk '/^== / { print "  " $0 } /^case +ms\/step/ { getline; print "  " $0 } /failed:/ { print "  " $0 }' "$bench_out"
  [ "$bench_rc" -eq 0 ] || echo "gpu_check: gpu_step_bench failed (see $bench_out)"
fi
echo
if [ "$ac_rc" = skipped ]; then
  echo "ac_bench: not run (GPU_AC_BENCH=0)"
else
  echo "ac_bench, activation checkpointing per mode against none (exit $ac_rc; $ac_out):"
  sed 's/^/  /' "$ac_out"
fi
echo
if [ "$fsdp_rc" = skipped ]; then
  echo "fsdp_train over all GPUs: not run (one GPU here, or GPU_FSDP_STEP=0)"
else
  echo "fsdp_train FULL_SHARD over $ngpus GPUs (exit $fsdp_rc; log $fsdp_out), the last step (the first ones warm up):"
  tail -1 "$logs/fsdp_run/metrics.jsonl" 2>/dev/null | sed 's/^/  /' || echo "  (no metrics.jsonl)"
  [ "$fsdp_rc" -eq 0 ] || echo "gpu_check: fsdp_train over $ngpus GPUs failed (see $fsdp_out)"
fi
echo
echo "roofline for comparison (bench/README.md): $(bash "$root/bench/roofline/roofline.sh" | grep -E '^(step bound|MFU bound)' | tr '\n' ' ')"
[ "$status" -eq 0 ] && echo "gpu_check: all tests passed on the GPU" || echo "gpu_check: FAILED (see above)"
exit "$status"
