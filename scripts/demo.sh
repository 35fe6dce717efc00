#!/usr/bin/env bash
# Quick start, command 1: set up, build, prepare the demo corpus (the King James Bible,
# tokenized with a 1024-piece sentencepiece model), train configs/tiny.yaml on it on the
# CPU, and print a sample from the trained model. Extra arguments are passed to
# `fsdp_train train` (e.g. --set train.max_steps=50). Running it again resumes from the
# newest checkpoint in runs/tiny/checkpoints, as an sbatch job would (add
# --set checkpoint.resume=none --set checkpoint.overwrite=true to train from scratch,
# the old checkpoints moved aside).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Only the binary it runs: the tests and benchmarks are scripts/test.sh's to build (a fresh
# machine spent most of this command compiling them).
BUILD_TARGET=fsdp_train bash "$root/scripts/build.sh"
cd "$root"
bash "$root/scripts/demo_corpus.sh" "${BUILD_DIR:-$root/build}/fsdp_train"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
"$bin" train --config configs/tiny.yaml "$@"
echo "---- a sample from the trained model (fsdp_train generate, temperature 0.8, top-k 40) ----"
"$bin" generate --checkpoint runs/tiny/checkpoints --tokenizer data/demo/tokenizer.model \
  --prompt "And God said" --max-new-tokens 60 --top-k 40 --seed 1
