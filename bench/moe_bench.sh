#!/usr/bin/env bash
# A Mixtral training step on the CPU: fsdp_train (bench/moe_step_bench.cpp) against
# transformers' MixtralForCausalLM (bench/moe_peer_transformers.py) at the same shape, with 1
# and with 2 threads, printed as a ratio, and the share of fsdp_train's step spent in the
# MoE-specific ops. HF_PYTHON: a python with transformers 4.47.1 (tests/golden/README.md's
# venv); without it only fsdp_train's rows print. MOE_BENCH_SHAPE=small: a quick run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${HF_PYTHON:-/work/venv-golden/bin/python}"
[ -x "$build/bench/moe_step_bench" ] || cmake --build "$build" --target moe_step_bench -j"$(nproc)" > /dev/null
small=()
[ "${MOE_BENCH_SHAPE:-}" = small ] && small=(--small)
printf "%-8s %-60s %-40s %s\n" threads fsdp_train transformers "ratio (tokens/s)"
for threads in 1 2; do
  ours=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$build/bench/moe_step_bench" 3)
  our_line=$(grep '^fsdp_train:' <<< "$ours")
  share=$(grep '^moe ops' <<< "$ours" | sed 's/moe ops[^:]*: \([0-9.]*%\).*/\1 in MoE ops/')
  theirs="(no transformers at $python)"
  ratio="-"
  if "$python" -c "import transformers" 2> /dev/null; then
    theirs=$("$python" "$root/bench/moe_peer_transformers.py" --threads "$threads" "${small[@]}")
    a=$(sed 's/.*, \([0-9]*\) tokens\/s.*/\1/' <<< "$our_line")
    b=$(sed 's/.*, \([0-9]*\) tokens\/s.*/\1/' <<< "$theirs")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", a / b }')
  fi
  printf "%-8s %-60s %-40s %s\n" "$threads" "${our_line#fsdp_train: }, $share" "${theirs#transformers: }" "$ratio"
done
grep '^model:' <<< "$ours"
