#!/usr/bin/env bash
# CTest `plan_seed_sizes_table` (label cpu): the seeds' sizes table in docs/memory-and-plan.md is what
# scripts/plan_seed_sizes.sh prints from `fsdp_train plan` now, so a change to the plan or to
# the configs cannot leave a stale table behind. Regenerate with:
#   bash scripts/plan_seed_sizes.sh   # and paste between the markers in docs/memory-and-plan.md
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
page="$root/docs/memory-and-plan.md"
want="$(bash "$root/scripts/plan_seed_sizes.sh" "$1")"
got="$(awk '/<!-- plan-seed-sizes:begin -->/{on=1; next} /<!-- plan-seed-sizes:end -->/{on=0} on' "$page")"
if [ "$got" != "$want" ]; then
  echo "docs/memory-and-plan.md's seeds' sizes table differs from scripts/plan_seed_sizes.sh's output:" >&2
  diff <(printf '%s\n' "$got") <(printf '%s\n' "$want") >&2 || true
  exit 1
fi
echo "the seeds' sizes table in docs/memory-and-plan.md is current"
