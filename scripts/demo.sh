#!/usr/bin/env bash
# Quick start, command 1: set up, build, and train configs/tiny.yaml on the CPU.
# Extra arguments are passed to `fsdp_train train` (e.g. --set train.max_steps=50).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$root"
exec "${BUILD_DIR:-$root/build}/fsdp_train" train --config configs/tiny.yaml "$@"
