#!/usr/bin/env bash
# The package's check.sh (bench/package_check.sh) end to end with the CUDA emulator build
# standing in for the device, so that nothing about its flow is first tried on a GPU:
#   * a run of all six steps, the bench step made to hang (--inject-hang) under a 5 s timeout
#     and every log capped at 1 KiB (the 7 op tests alone write 1.6 KiB): the hang is reported as timed out with its log's last
#     lines, the steps after it still run and report (the PyTorch peer skips with its line where
#     there is no torch), train resumes with bit-equal losses, the summary ends with the count,
#     the exit code is 1, and the output directory holds summary.txt and at most six logs, each
#     within the cap, the capped one saying how much it dropped;
#   * a run whose budget is spent by a hanging first step: the others are "not run", listed;
#   * the tests step's summary of a gtest log with failures: counts and each failure's first lines.
# Label emulated-gpu; about two minutes.
#
#   bash tests/integration/package_check_emulated.sh SOURCE_DIR BUILD_EMU_DIR
set -euo pipefail
root="$(cd "$1" && pwd)"
build="$(cd "$2" && pwd)"
check="$root/bench/package_check.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package_check_emulated: FAILED: $*" >&2; cat "$tmp"/out/summary.txt >&2 2>/dev/null || true; exit 1; }
cap=1024

# ---- all six steps, one of them hanging ----
start=$(date +%s)
rc=0
bash "$check" --emulated "$build" --out "$tmp/out" --budget 420 --log-cap "$cap" --inject-hang bench \
  --timeout bench=5 --timeout train=300 --gtest-filter 'CudaOps.Matmul*:CudaOps.RmsNorm*' >"$tmp/stdout" 2>&1 || rc=$?
took=$(( $(date +%s) - start ))
cat "$tmp/stdout"
s="$tmp/out/summary.txt"
[ "$rc" -eq 1 ] || fail "check.sh exited $rc with a timed-out step, expected 1"
has() { grep -qE -- "$1" "$s" || fail "summary.txt has no line matching: $1"; }
has '^mode: EMULATED \(the CUDA emulator build stands in for the device'
has '^\[1/6 device\] ok \([0-9]+ s, log device\.log\)$'
has '^    CUDA libraries: none to load \(the emulation build links the emulator.s stand-ins\)$'
has '^\[2/6 tests\] ok '
has '^    fsdp_tests_cuda: [1-9][0-9]* passed, 0 failed, 0 skipped$'
has '^\[3/6 sanitizer\] ok '
has '^\[4/6 bench\] TIMED OUT after 5 s \(log bench\.log; its last lines:\)$'
has '^    check.sh: --inject-hang bench: this step hangs on purpose$'
has '^\[5/6 torch\] ok '
has '^    (skipped: no PyTorch/transformers in .*|versions: torch .*)$'
has '^\[6/6 train\] ok '
has '^    last line: step +6/6 .*\| loss [0-9.]+'
has '^    resume from step 3 to 6: equal: 3 of 3 resumed losses bit-equal to the uninterrupted run$'
has "^result: 5 of 6 steps ok in [0-9]+ s; not ok: bench \(timed out\) $"
[ "$took" -lt 420 ] || fail "the check took $took s, over its 420 s budget"
logs=$(ls "$tmp/out"/*.log | wc -l)
[ "$logs" -le 6 ] || fail "$logs log files, at most 6 allowed"
[ "$(ls -A "$tmp/out" | grep -vc '\.log$')" -eq 1 ] || fail "besides the logs, only summary.txt: $(ls -A "$tmp/out")"
for f in "$tmp"/out/*.log; do
  [ "$(stat -c %s "$f")" -le "$cap" ] || fail "$(basename "$f") holds $(stat -c %s "$f") bytes, over the $cap cap"
done
grep -q "more bytes of output not kept, and nothing after them: each log is capped at $cap bytes" "$tmp/out/tests.log" ||
  fail "tests.log was not capped (or does not say so)"
echo "package_check_emulated: six steps, a hang timed out, later steps reported, $logs logs within $cap bytes ($took s)"

# ---- a budget spent by a hanging first step ----
rc=0
bash "$check" --emulated "$build" --out "$tmp/out2" --budget 12 --inject-hang device --timeout device=5 >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "the budget run exited $rc"
s="$tmp/out2/summary.txt"
has '^\[1/6 device\] TIMED OUT after 5 s'
has '^\[2/6 tests\] not run: the budget of 12 s is spent$'
has '^\[6/6 train\] not run: the budget of 12 s is spent$'
has '^result: 0 of 6 steps ok in [0-9]+ s; not ok: device \(timed out\) tests \(not run\) '
echo "package_check_emulated: a spent budget leaves the remaining steps listed as not run"

# ---- the tests step's lines for a gtest log with failures ----
cat >"$tmp/gtest.log" <<'LOG'
[==========] Running 3 tests from 1 test suite.
[ RUN      ] CudaOps.MatmulMatchesCpu
[       OK ] CudaOps.MatmulMatchesCpu (12 ms)
[ RUN      ] CudaOps.RmsnormMatchesCpu
tests/cuda/test_cuda_rmsnorm.cpp:41: Failure
Expected: (err) <= (tol), actual: 0.5 vs 0.001
bf16, rows 7
[  FAILED  ] CudaOps.RmsnormMatchesCpu (3 ms)
[ RUN      ] CudaOps.RopeMatchesCpu
[  SKIPPED ] CudaOps.RopeMatchesCpu (0 ms)
[==========] 3 tests from 1 test suite ran. (15 ms total)
[  PASSED  ] 1 test.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] CudaOps.RopeMatchesCpu
[  FAILED  ] 1 test, listed below:
[  FAILED  ] CudaOps.RmsnormMatchesCpu
LOG
got="$(bash "$check" --gtest-summary "$tmp/gtest.log")"
want="1 passed, 1 failed, 1 skipped
    FAILED CudaOps.RmsnormMatchesCpu: tests/cuda/test_cuda_rmsnorm.cpp:41: Failure | Expected: (err) <= (tol), actual: 0.5 vs 0.001 | bf16, rows 7"
[ "$got" = "$want" ] || fail "the gtest summary reads: $got"
echo "package_check_emulated: passed"
