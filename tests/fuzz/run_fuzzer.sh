#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time over its committed corpus (and with its
# dictionary, tests/fuzz/dict/<what>.dict), as CTest's `fuzz` label does:
#   run_fuzzer.sh FUZZER CORPUS_DIR SECONDS [EXTRA_LIBFUZZER_FLAGS...]
#
# The committed corpus is read, never written: new inputs go to a temporary folder that is
# removed afterwards. Any crash, leak, sanitizer report, timeout (10 s per input) or
# allocation over 2 GB fails the run (libFuzzer's exit status), and the input is kept in
# fuzz-artifacts/ under the current directory for a regression test (tests/README.md,
# "Fuzzing"). Prints the executions run.
#
# The mutations follow a fixed seed (FSDP_FUZZ_SEED, default 1), so CI explores the same
# inputs on every run, as far as its time allows, and a finding does not appear at random
# in somebody else's change; FSDP_FUZZ_SEED=0 lets libFuzzer pick one (longer hunts by hand).
set -euo pipefail
fuzzer=$1 corpus=$2 seconds=$3
shift 3
name=$(basename "$fuzzer")
dict="$(dirname "$corpus")/../dict/$(basename "$corpus").dict"  # tests/fuzz/dict/<what>.dict, if any
[ -f "$dict" ] && set -- -dict="$dict" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new" fuzz-artifacts
status=0
"$fuzzer" -seed="${FSDP_FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$PWD/fuzz-artifacts/$name-" "$@" "$work/new" "$corpus" > "$work/log" 2>&1 || status=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
if [ "$status" -ne 0 ]; then
  tail -n 60 "$work/log"
  echo "$name: FAILED (libFuzzer exit $status) after ${execs:-?} executions; the input is in $PWD/fuzz-artifacts/"
  echo "  reproduce: $fuzzer $PWD/fuzz-artifacts/$name-<crash file>"
  exit 1
fi
grep -E '^#[0-9]+ +(INITED|DONE)' "$work/log" | tail -2 || true
echo "$name: ${execs:-?} executions in ${seconds} s over $(ls "$corpus" | wc -l) corpus inputs, no crash"
