#!/usr/bin/env bash
# Quick start, command 1: set up, build, prepare the demo corpus (the King James Bible,
# tokenized with a 1024-piece sentencepiece model) and train configs/tiny.yaml on it on
# the CPU. Extra arguments are passed to `fsdp_train train` (e.g. --set train.max_steps=50).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$root"
bash "$root/scripts/demo_corpus.sh" "${BUILD_DIR:-$root/build}/fsdp_train"
exec "${BUILD_DIR:-$root/build}/fsdp_train" train --config configs/tiny.yaml "$@"
