#!/usr/bin/env bash
# The SageMaker HyperPod lab's workflow at small scale (../shared/seeds: Llama 3 QLoRA on
# Korean news summaries in chat format): a Llama 3-style Hugging Face folder (the tiny
# tests/golden/chat_generate/llama3_chat_tiny weights with the llama3_chat tokenizer and chat
# template beside them) -> `prepare` of a chat JSONL in Korean (system/user/assistant, as the
# lab's prepare_data.py writes it) with the assistants' answers masked in -> QLoRA (NF4 base,
# LoRA on every linear layer) with packing -> `export --adapter` (a PEFT folder) ->
# `generate --chat` from the run and from the base with the adapter. Requires the loss to fall
# by a third over 12 steps, the packer to put two examples in a window, and each step to work.
# Usage: hyperpod_qlora.sh path/to/fsdp_train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/model"
cp "$root"/tests/golden/chat_generate/llama3_chat_tiny/* "$root"/tests/golden/tokenizers/llama3_chat/* "$work/model/"
for epoch in 1 2 3; do cat "$root/tests/data/sft/korean_news.jsonl"; done > "$work/news.jsonl"

"$bin" prepare --tokenizer "$work/model" --output "$work/shards" --val-fraction 0 --max-seq-len 128 \
  --overlong drop "$work/news.jsonl" > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; fail "prepare"; }
grep -q '"train_on": "assistant"' "$work/shards/manifest.json" || fail "prepare did not mask the prompts"

"$bin" train --config "$root/configs/tiny_lora.yaml" --set model.init_from="$work/model" \
  --set model.quantization=nf4 --set lora.dropout=0 --set data.path="$work/shards" --set data.packing=true \
  --set run.dir="$work/run" --set train.seq_len=127 --set train.micro_batch_size=2 --set train.grad_accum_steps=2 \
  --set train.max_steps=12 --set train.eval_every=0 --set train.log_every=4 --set optim.lr=2e-2 \
  --set optim.warmup_steps=0 --set optim.schedule=constant > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "train"; }
grep -q "packed best-fit" "$work/train.log" || fail "the examples were not packed"
windows=$(sed -n 's/.* \([0-9]*\) examples packed best-fit into \([0-9]*\) windows.*/\1 \2/p' "$work/train.log" | head -1)
read -r examples packed <<< "$windows"
[ "$packed" -lt "$examples" ] || fail "no window holds two examples ($examples examples in $packed windows)"
loss() { sed -n "${1}p" "$work/run/metrics.jsonl" | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/'; }
first=$(loss 1); last=$(loss 12)
echo "QLoRA on Korean chat data: loss $first -> $last in 12 steps; $examples examples in $packed windows"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f * 2 / 3) }' || fail "the loss did not fall by a third"

"$bin" export --checkpoint "$work/run/checkpoints" --output "$work/adapter" --adapter > "$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "export --adapter"; }
grep -q '"peft_type": "LORA"' "$work/adapter/adapter_config.json" || fail "no PEFT adapter_config.json"
# tests/golden/hyperpod_peft/check_peft.py runs this script with HYPERPOD_OUT set to take the
# adapter to PEFT, which records its greedy reply below.
if [ -n "${HYPERPOD_OUT:-}" ]; then cp -r "$work/adapter" "$HYPERPOD_OUT/adapter"; fi
for from in "--checkpoint $work/run/checkpoints" "--checkpoint $work/model --adapter $work/adapter"; do
  # shellcheck disable=SC2086
  "$bin" generate $from --chat --system "뉴스를 요약하세요." --user "한은이 금리를 동결했다." --temperature 0 \
    --max-new-tokens 16 > "$work/reply" 2> "$work/generate.log" || { cat "$work/generate.log"; fail "generate --chat $from"; }
  grep -q "replies stop at .*<|eot_id|>" "$work/generate.log" || fail "generate --chat does not stop at <|eot_id|>"
  ! grep -q '<|' "$work/reply" || fail "special tokens in the reply"
done
# PEFT loads an adapter this flow exported (the recorded one, tests/golden/hyperpod_peft:
# PeftModel.from_pretrained on the float32 base, no missing or unexpected key) and its greedy
# reply to the same conversation is ours, token for token; the fresh export has its tensors.
golden="$root/tests/golden/hyperpod_peft"
"$bin" generate --checkpoint "$work/model" --adapter "$golden/adapter" --chat --system "뉴스를 요약하세요." \
  --user "한은이 금리를 동결했다." --temperature 0 --max-new-tokens 16 > "$work/reply_golden" 2> "$work/generate.log" ||
  { cat "$work/generate.log"; fail "generate --chat with the recorded adapter"; }
want=$(sed -n 's/^  "reply_text": "\(.*\)",\{0,1\}$/\1/p' "$golden/expected.json")
[ "$(cat "$work/reply_golden")" == "$want" ] || fail "PEFT replied '$want', we replied '$(cat "$work/reply_golden")'"
names() { grep -a -o '"base_model[^"]*"' "$1/adapter_model.safetensors" | sort; }
[ "$(names "$work/adapter")" == "$(names "$golden/adapter")" ] || fail "the export's tensors are not the recorded adapter's"
echo "PEFT's greedy reply with the recorded adapter, ours the same: '$want'"
echo PASS
