#!/usr/bin/env bash
# The README's LoRA demo, shortened (scripts/demo_lora.sh): a base pretrained on the King
# James Bible without Revelation, then LoRA adapters on Revelation. Requires Revelation's
# validation loss to fall by at least 0.1 nats under the adapters, and the exported adapter
# folder to be a PEFT one.
# Usage: demo_lora.sh path/to/fsdp_train
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
log=$(FSDP_TRAIN="$1" DEMO_LORA_RUNS="$runs" BASE_STEPS=150 LORA_STEPS=100 bash "$root/scripts/demo_lora.sh" 2>&1) ||
  { echo "$log"; echo "FAIL: demo_lora.sh"; exit 1; }
line=$(echo "$log" | grep "Revelation's validation loss")
echo "$line"
before=$(echo "$line" | sed -n 's/.*base alone \([0-9.]*\),.*/\1/p')
after=$(echo "$line" | sed -n 's/.*adapters \([0-9.]*\) (nats.*/\1/p')
[ -n "$before" ] && [ -n "$after" ] || { echo "$log"; echo "FAIL: no losses printed"; exit 1; }
awk -v b="$before" -v a="$after" 'BEGIN { exit !(a < b - 0.1) }' || { echo "FAIL: the adapters did not lower the loss by 0.1"; exit 1; }
grep -q '"peft_type": "LORA"' "$runs/adapter/adapter_config.json" || { echo "FAIL: no PEFT adapter_config.json"; exit 1; }
[ -s "$runs/adapter/adapter_model.safetensors" ] || { echo "FAIL: no adapter_model.safetensors"; exit 1; }
echo PASS
