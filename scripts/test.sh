#!/usr/bin/env bash
# Quick start, command 2: set up, build, and run every test (CTest; labels cpu, mpi, ...).
# Extra arguments go to ctest (e.g. -L cpu, -R Golden).
#
# Two builds: build/ (the product; its CUDA backend compiled by nvcc when the toolkit is
# there) and build-emu/ (EMU_BUILD_DIR), the CUDA backend built for the CPU emulator with
# AddressSanitizer, where the CUDA tests (label emulated-gpu) run every kernel without a
# GPU (tests/README.md). FSDP_TEST_EMULATION=0 skips the second.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
status=0

bash "$root/scripts/build.sh"
(cd "${BUILD_DIR:-$root/build}" && ctest --output-on-failure -j"$(nproc)" "$@") || status=$?

if [ "${FSDP_TEST_EMULATION:-1}" != 0 ]; then
  emu="${EMU_BUILD_DIR:-$root/build-emu}"
  # FSDP_BENCH=ON only for gpu_step_bench, which fsdp_tests_cuda depends on here (its smoke
  # test, gpu_step_bench_smoke); the target build leaves the other benchmarks unbuilt.
  BUILD_DIR="$emu" BUILD_TARGET=fsdp_tests_cuda bash "$root/scripts/build.sh" \
    -DFSDP_CUDA_EMULATION=ON -DFSDP_CUDA=OFF -DFSDP_ASAN=ON -DFSDP_BENCH=ON
  # Twice: threads resumed in increasing, then decreasing index order, so a missing
  # barrier shows up whichever neighbour it reads (tests/README.md). The trainer tests
  # (cuda_fsdp_np*) run the kernels the op tests check in both orders: once is enough; so
  # does the bench's smoke run (gpu_step_bench_smoke), which checks its output, not kernels.
  (cd "$emu" && ctest --output-on-failure -j"$(nproc)" -L emulated-gpu "$@") || status=$?
  (cd "$emu" && FSDP_EMU_SCHEDULE=reverse ctest --output-on-failure -j"$(nproc)" -L emulated-gpu \
    -E '^(cuda_fsdp_np|gpu_step_bench_smoke)' "$@") || status=$?
fi
exit "$status"
