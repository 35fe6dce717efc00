#!/usr/bin/env bash
# The CPU-partition one-liner of slurm/README.md, as printed there: its `salloc` line opens an
# allocation and its `srun` line trains inside it. The block is read from the README (after
# the marker `<!-- tested by tests/slurm/srun_oneliner.sh -->`), so the documentation cannot
# drift from what runs. The test runs it in a directory where build/ and configs/ are the
# binary under test and the repository's configs, adds a step limit, and checks the metrics.
source "$(dirname "$0")/common.sh" "$@"

readme=$REPO/slurm/README.md
block=$(awk '/<!-- tested by tests\/slurm\/srun_oneliner.sh -->/ { found = 1; next }
             found && /^```/ { if (inside) exit; inside = 1; next }
             inside { print }' "$readme")
salloc_line=$(grep -E '^salloc ' <<<"$block" | sed 's/ *#.*//') || fail "no salloc line in the README block"
srun_line=$(grep -E '^srun ' <<<"$block" | sed 's/ *#.*//') || fail "no srun line in the README block"
[[ $(grep -c . <<<"$block") == 2 ]] || fail "the README block should be the salloc line and the srun line: $block"
run_dir=$(sed -n 's/.*--set run.dir=\([^ ]*\).*/\1/p' <<<"$srun_line")
[[ -n $run_dir ]] || fail "the srun line sets no run.dir"
say "README: $salloc_line"
say "README: $srun_line"

mkdir -p build
ln -s "$FSDP_TRAIN" build/fsdp_train
ln -s "$REPO/configs" configs
STEPS=20
# `salloc CMD` runs CMD in the new allocation as the interactive shell would.
# shellcheck disable=SC2086  # the README's words, split as a shell would
timeout 120 $salloc_line bash -c "$srun_line --set train.max_steps=$STEPS --set train.log_every=5" \
  >"$WORK/logs/oneliner.out" 2>&1 || fail "the one-liner failed: $(tail -5 "$WORK/logs/oneliner.out")"
require_log "$WORK/logs/oneliner.out" "salloc: Granted job allocation"
require_log "$WORK/logs/oneliner.out" "launched by srun"
require_log "$WORK/logs/oneliner.out" "step +$STEPS/$STEPS .*\| loss"
check_loss_falls "$run_dir/metrics.jsonl" "$STEPS"
ntasks=$(sed -n 's/.*--ntasks=\([0-9]*\).*/\1/p' <<<"$salloc_line")
grep -q "\"world_size\":$ntasks[,}]" "$run_dir/metrics.jsonl" || fail "world_size is not the salloc line's $ntasks"
say "PASS"
