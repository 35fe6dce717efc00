#!/usr/bin/env bash
# Quick start, command 2: set up, build, and run every test (CTest; labels cpu, ...).
# Extra arguments go to ctest (e.g. -L cpu, -R Golden).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j"$(nproc)" "$@"
