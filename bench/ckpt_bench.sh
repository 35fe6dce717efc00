#!/usr/bin/env bash
# Checkpoint save / load throughput against the disk's own sequential speed, on the
# filesystem holding DIR (default /tmp/fsdp_ckpt_bench), measured right after:
#   ceiling (write): dd copying the checkpoint's own rank file (the same bytes; dd from
#                    /dev/zero is not a fair ceiling on a thin-provisioned VM disk, which can
#                    skip zero blocks) to a new file with conv=fsync
#   ceiling (read):  dd reading that copy back, after dropping the page cache where permitted
# Usage: bench/ckpt_bench.sh [build dir] [dir] [hidden layers]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
dir="${2:-/tmp/fsdp_ckpt_bench}"
shift 2 2>/dev/null || true
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || echo "(page cache NOT dropped: reads may be cached)"; }
out=$("$build/bench/ckpt_bench" "$dir" "$@")
echo "$out"
src="$dir/step_4/rank_00000.safetensors"
cat "$src" > /dev/null   # the source in the page cache: dd then measures the write side
dd_w=$(dd if="$src" of="$dir/dd.bin" bs=1M conv=fsync 2>&1 | tail -1)
echo "dd write: $dd_w"
drop
dd_r=$(dd if="$dir/dd.bin" of=/dev/null bs=1M 2>&1 | tail -1)
echo "dd read:  $dd_r"
rm -rf "$dir"
gbps() { echo "$1" | sed -E 's/.*, ([0-9.]+) ([GM])B\/s.*/\1 \2/' | awk '{ print ($2 == "M") ? $1 / 1000 : $1 }'; }
w=$(gbps "$dd_w"); r=$(gbps "$dd_r")
save=$(echo "$out" | awk '/^save_sync_GBps/ { print $2 }')
load=$(echo "$out" | awk '/^resume_GBps/ { print $2 }')
awk -v s="$save" -v l="$load" -v w="$w" -v r="$r" 'BEGIN {
  printf "save / dd write+fsync = %.3f / %.3f GB/s = %.2f\n", s, w, s / w;
  printf "resume (verify + load) / dd read = %.3f / %.3f GB/s = %.2f\n", l, r, l / r }'
