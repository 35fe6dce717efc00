#!/usr/bin/env bash
# CTest gpu_step_bench_smoke: gpu_step_bench --smoke (tiny Llama, 2 layers, 2 timed steps
# and 1 profiled) must print its summary and the per-op table with the rows a training step
# makes, at the counts that model makes: 2 attention forwards and backwards per step (one
# per layer) and one cross-entropy. On the emulator that proves the bench's code path; on
# a GPU the same. No usable device: exit 77 (CTest's skip), as the gpu tests skip.
#
#   bash bench/gpu_step_bench_smoke.sh build/bench/gpu_step_bench
set -euo pipefail
bench="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
rc=0
"$bench" --smoke >"$out" 2>&1 || rc=$?
cat "$out"
if [ "$rc" -eq 2 ] && grep -q 'no usable CUDA device' "$out"; then
  echo "gpu_step_bench_smoke: skipped, no usable CUDA device"
  exit 77
fi
fail() { echo "gpu_step_bench_smoke: FAILED: $*" >&2; exit 1; }
[ "$rc" -eq 0 ] || fail "gpu_step_bench --smoke exited $rc"
grep -Eq '^case +ms/step +tokens/s +peak device memory +MFU$' "$out" || fail "no summary header"
grep -Eq '^smoke +[0-9.]+ +[0-9]+ +[0-9.]+ GiB \( *[0-9]+%\) +([0-9.]+%|n/a \(unknown GPU peak; set FSDP_PEAK_TFLOPS\))$' "$out" ||
  fail "no summary row for the smoke case"
grep -Eq '^op +calls/step +ms/step +% step$' "$out" || fail "no per-op table header"
# op -> expected calls per step ("" = any positive count)
declare -A want=([matmul]="" [attention_forward]=2.0 [attention_backward]=2.0 [rmsnorm_forward]=""
                 [rmsnorm_backward]="" [rope]="" [swiglu_forward]=2.0 [swiglu_backward]=2.0
                 [embedding_forward]=1.0 [embedding_backward]=1.0 [cross_entropy]=1.0 [adamw]="")
for op in "${!want[@]}"; do
  row="$(grep -E "^$op +[0-9]+\.[0-9] +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9]%$" "$out")" || fail "no per-op row for $op"
  calls="$(awk '{print $2}' <<<"$row")"
  if [ -n "${want[$op]}" ]; then
    [ "$calls" = "${want[$op]}" ] || fail "$op: $calls calls/step, expected ${want[$op]}"
  else
    awk -v c="$calls" 'BEGIN { exit !(c > 0) }' || fail "$op: $calls calls/step"
  fi
done
grep -Eq '^\(all ops\) +[0-9.]+ +[0-9.]+%$' "$out" || fail "no (all ops) row"
echo "gpu_step_bench_smoke: passed (summary and ${#want[@]} per-op rows checked)"
