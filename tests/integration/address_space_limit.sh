#!/usr/bin/env bash
# Start-up under a small address-space limit (`ulimit -v`, RLIMIT_AS) ends with the RLIMIT_AS
# refusal, exit 2, or runs; it never hangs (issue 26). Before: under `ulimit -v 1000000` the
# process hung before main in OpenBLAS's start-up (its buffer's mmap failing, retried forever),
# and under `ulimit -v 350000` the loader failed on libcublasLt.so.13 (exit 127) even for a CPU
# run. Now cuBLASLt is loaded only by a GPU run (include/fsdp/core/cuda_libraries.h), a limit
# below OpenBLAS's start-up is refused before the libraries initialise
# (src/cli/startup_address_space.cpp), and the start-up memory check counts what RLIMIT_AS
# counts (plan/host_memory.h). OMP_NUM_THREADS=2 fixes the thread count the limits depend on.
# About 20 s.
#
#   bash tests/integration/address_space_limit.sh build/fsdp_train
set -euo pipefail
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "address_space_limit: FAILED: $*" >&2; cat "$tmp/out" >&2 2>/dev/null || true; exit 1; }
export OMP_NUM_THREADS=2
# limited KIB CMD...: the command under `ulimit -v KIB`, killed after 60 s; its exit code in $code
limited() {
  local kib=$1
  shift
  code=0
  (ulimit -v "$kib" && exec timeout -k 5 60 "$@") >"$tmp/out" 2>&1 || code=$?
  [ "$code" -ne 124 ] && [ "$code" -ne 137 ] || fail "ulimit -v $kib: $* still ran after 60 s (hung)"
}
train=(train --config "$root/configs/tiny.yaml" --set data.source=synthetic --set train.max_steps=2
       --set train.eval_every=0 --set checkpoint.resume=none)

# Below what OpenBLAS's start-up reserves: refused before main, at once, in one line.
limited 350000 "$bin" --version
[ "$code" -eq 2 ] || fail "ulimit -v 350000: fsdp_train --version exited $code, expected 2"
grep -qE '^error: rank memory: fsdp_train needs about [0-9]+ MiB of address space to start but RLIMIT_AS \(ulimit -v\) allows 342 MiB' \
  "$tmp/out" || fail "ulimit -v 350000: no RLIMIT_AS refusal"
[ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "ulimit -v 350000: more than one line"
limited 350000 "$bin" "${train[@]}" --set run.dir="$tmp/a"
[ "$code" -eq 2 ] || fail "ulimit -v 350000: train exited $code, expected 2"
echo "address_space_limit: ulimit -v 350000: refused before main (exit 2)"

# Enough to start, not for the run: the start-up memory check refuses it, naming RLIMIT_AS.
limited 700000 "$bin" "${train[@]}" --set run.dir="$tmp/b"
[ "$code" -eq 2 ] || fail "ulimit -v 700000: train exited $code, expected 2"
grep -qE 'rank memory: the plan needs [0-9.]+ MiB per rank but RLIMIT_AS \(ulimit -v\) allows 683.59 MiB' "$tmp/out" ||
  fail "ulimit -v 700000: no plan refusal naming RLIMIT_AS"
grep -q 'address space outside tensors (RLIMIT_AS)' "$tmp/out" || fail "ulimit -v 700000: the plan has no address-space row"
echo "address_space_limit: ulimit -v 700000: refused by the start-up memory check (exit 2)"

# Enough: --version (which maps cuBLASLt only to read its version) and the run both work.
limited 1000000 "$bin" --version
[ "$code" -eq 0 ] || fail "ulimit -v 1000000: --version exited $code"
limited 1500000 "$bin" "${train[@]}" --set run.dir="$tmp/c"
[ "$code" -eq 0 ] || fail "ulimit -v 1500000: train exited $code"
grep -q 'done: 2 steps' "$tmp/out" || fail "ulimit -v 1500000: the run did not finish"
echo "address_space_limit: ulimit -v 1000000: --version works; ulimit -v 1500000: the run finishes"
echo "address_space_limit: passed"
