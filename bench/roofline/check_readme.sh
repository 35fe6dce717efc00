#!/usr/bin/env bash
# CTest `roofline_table` (label cpu): the roofline table recorded in bench/README.md is
# what bench/roofline/roofline.sh prints now, so a change to the model of a kernel (or to
# the defaults) cannot leave a stale table behind. Regenerate with:
#   bash bench/roofline/roofline.sh   # and paste between the markers in bench/README.md
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
want="$(env -u VOCAB -u HIDDEN -u INTER -u LAYERS -u HEADS -u KV_HEADS -u SEQ -u MICRO_BATCH -u RANKS \
        -u PEAK_TFLOPS -u HBM_TBS -u LINK_GBS bash "$root/bench/roofline/roofline.sh")"
got="$(awk '/<!-- roofline:begin -->/{on=1; next} /<!-- roofline:end -->/{on=0} on' "$root/bench/README.md" |
       sed -e '/^```/d')"
if [ "$got" != "$want" ]; then
  echo "bench/README.md's roofline table differs from bench/roofline/roofline.sh's output:" >&2
  diff <(printf '%s\n' "$got") <(printf '%s\n' "$want") >&2 || true
  exit 1
fi
echo "roofline table in bench/README.md is current"
