#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures and builds fsdp_train and its
# tests into build/ (BUILD_DIR overrides). Extra arguments go to cmake's configure step;
# BUILD_TARGET builds one target instead of all (the CUDA emulation build in test.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
