#!/usr/bin/env bash
# The NCCL watchdog's failure path end to end (emulation build): 2 ranks, the second late to an
# NCCL all_reduce by a minute; the first must report it, abort its NCCL communicators and the
# job with exit code 76 within a few seconds of its 1 s timeout (NcclWatchdog.DISABLED_Aborts...
# in test_nccl_watchdog.cpp). Usage: watchdog_abort.sh path/to/fsdp_tests_cuda_mpi path/to/mpiexec
set -uo pipefail
bin=$1
mpiexec=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
t0=$SECONDS
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" --gtest_also_run_disabled_tests \
  --gtest_filter='NcclWatchdog.DISABLED_AbortsTheJobWithItsExitCode' >"$log" 2>&1
rc=$?
secs=$((SECONDS - t0))
fail() { cat "$log"; echo "FAIL: $*"; exit 1; }
((rc == 76)) || fail "exit code $rc, expected 76"
grep -q "watchdog: all_reduce #[0-9]* on group 'world' (world ranks 0-1) did not complete within 1 s at step 3: world rank 1 (host [^)]*) did not arrive (no reply within 1 s: dead, stopped, or busy outside any collective); aborting the job with exit code 76" "$log" ||
  fail "no watchdog line"
((secs < 30)) || fail "took $secs s"
echo "PASS: exit 76 after $secs s (the late rank would have slept 60 s)"
