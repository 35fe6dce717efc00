#!/usr/bin/env python3
"""Checks our LoRA exports against PEFT and transformers and records what CI compares with.

    1. runs the C++ test LoraCli.MergedExportComputesTheLoraModel with FSDP_LORA_EXPORT_OUT set:
       it trains 3 steps of LoRA with fsdp_train (continuing tests/golden/lora_tiny/r4_alpha8 on
       tests/golden/llama_gqa_tiny, synthetic data), exports the checkpoint with --adapter and with
       --merge --dtype float32, and copies both folders out with our logits on the golden batch
       (the LoRA model on base + adapter, and the plain model on the merged folder);
    2. loads the adapter with PeftModel.from_pretrained on the base (no missing or unexpected
       adapter key allowed) and the merged folder with AutoModelForCausalLM.from_pretrained, both
       in float32, and compares their logits with ours;
    3. writes expected.safetensors: PEFT's and transformers' logits, and the adapter tensors as
       PEFT loaded them (the C++ test then holds a fresh export to them, bit for bit).

Run from the repository root after building fsdp_tests_cpu (tests/golden/README.md, "LoRA and QLoRA"):
    PYTHONHASHSEED=0 /work/venv-lora/bin/python tests/golden/lora_export/check_peft.py --tests-bin build/tests/fsdp_tests_cpu
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import peft
import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import generate_peft as g  # noqa: E402  (the batch, the versions, the metadata rule)


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests-bin", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, FSDP_LORA_EXPORT_OUT=out)
        subprocess.run([args.tests_bin, "--gtest_filter=LoraCli.MergedExportComputesTheLoraModel"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        ours = load_file(f"{out}/ours.safetensors")
        ids, labels = g.golden_batch()

        base = transformers.AutoModelForCausalLM.from_pretrained(g.BASE, dtype=torch.float32, attn_implementation="eager")
        model = peft.PeftModel.from_pretrained(base, f"{out}/adapter")
        loaded = {g.peft_name(k): v for k, v in model.state_dict().items() if "lora_" in k}
        exported = load_file(f"{out}/adapter/adapter_model.safetensors")
        assert set(exported) == set(loaded), (set(exported) ^ set(loaded))
        for k in exported:
            assert torch.equal(exported[k], loaded[k]), k
        with torch.no_grad():
            peft_logits = model(input_ids=ids).logits.float()
        merged = transformers.AutoModelForCausalLM.from_pretrained(f"{out}/merged", dtype=torch.float32,
                                                                   attn_implementation="eager")
        with torch.no_grad():
            merged_logits = merged(input_ids=ids).logits.float()
        report = {
            "peft_vs_our_lora": rel(ours["lora_logits"], peft_logits.reshape(-1)),
            "transformers_merged_vs_our_merged": rel(ours["merged_logits"], merged_logits.reshape(-1)),
            "transformers_merged_vs_peft": rel(merged_logits, peft_logits),
        }
        tensors = {"peft_logits": peft_logits.contiguous(), "merged_logits": merged_logits.contiguous()}
        tensors.update({"peft." + k: v.contiguous() for k, v in loaded.items()})
        save_file(tensors, f"{HERE}/expected.safetensors", metadata=g.metadata(report=report))
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
