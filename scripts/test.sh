#!/usr/bin/env bash
# Quick start, command 2: set up, build, and run every test (CTest; labels cpu, mpi, ...).
# Extra arguments go to ctest (e.g. -L cpu, -R Golden).
#
# Two builds: build/ (the product; its CUDA backend compiled by nvcc when the toolkit is
# there) and build-emu/ (EMU_BUILD_DIR), the CUDA backend built for the CPU emulator with
# AddressSanitizer, where the CUDA tests (label emulated-gpu) run every kernel without a
# GPU (tests/README.md). FSDP_TEST_EMULATION=0 skips the second. A third, build-fuzz/
# (FUZZ_BUILD_DIR), builds the libFuzzer targets with clang, ASan and UBSan and runs each for
# FSDP_FUZZ_SECONDS (label fuzz; tests/README.md, "Fuzzing"); FSDP_TEST_FUZZ=0 skips it.
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
  # (cuda_fsdp_np*, and under tensor and expert parallelism cuda_tp_np* and cuda_ep_np*) run
  # the kernels the op tests check in both orders: once is enough; so
  # does the bench's smoke run (gpu_step_bench_smoke), which checks its output, not kernels, and
  # so do fsdp_train's runs over the TCP store and check.sh's (store_bootstrap_emulated,
  # package_check_emulated).
  (cd "$emu" && ctest --output-on-failure -j"$(nproc)" -L emulated-gpu "$@") || status=$?
  (cd "$emu" && FSDP_EMU_SCHEDULE=reverse ctest --output-on-failure -j"$(nproc)" -L emulated-gpu \
    -E '^(cuda_fsdp_np|cuda_tp_np|cuda_ep_np|gpu_step_bench_smoke|store_bootstrap_emulated|package_check_emulated)' "$@") || status=$?
fi
if [ "${FSDP_TEST_FUZZ:-1}" != 0 ]; then
  fuzz="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
  CC=clang CXX=clang++ BUILD_DIR="$fuzz" BUILD_TARGET=fsdp_fuzzers bash "$root/scripts/build.sh" \
    -DFSDP_FUZZ=ON -DFSDP_CUDA=OFF -DFSDP_BENCH=OFF ${FSDP_FUZZ_SECONDS:+-DFSDP_FUZZ_SECONDS=$FSDP_FUZZ_SECONDS}
  (cd "$fuzz" && ctest --output-on-failure -j"$(nproc)" -L fuzz "$@") || status=$?
fi
exit "$status"
