#!/usr/bin/env python3
"""Writes tests/golden/llama_gqa_tiny/greedy_generate.json: transformers' greedy generate() on the
committed llama_gqa_tiny model, for the KV-cache decoder's golden test (tests/cpu/test_generate.cpp).

Each case is a prompt (BOS = 1 first, then ids drawn from a seeded generator) and the ids that
model.generate(do_sample=False, eos_token_id=2) appends to it (EOS included when it is produced,
as generate returns it). The reference runs in float64 with the float32 upcasts of transformers
4.47.1 promoted (exact_float64_llama of generate_llama.py), and must agree with a plain float32
run; each case records the smallest gap between the top two logits over its steps, so the
margin a float32 consumer has before a near-tie could flip a token is on record.

Run with the venv described in README.md (Debian's torch 1.13 + requirements.txt), after
generate_llama.py (it reads the model that script wrote):
    /work/venv-golden/bin/python tests/golden/generate_greedy.py
"""

import argparse
import json
import os
import re

import torch
import transformers
import transformers.generation.utils
from transformers import AutoConfig, AutoModelForCausalLM

from generate_llama import exact_float64_llama

# generate() asks whether the model is wrapped in torch FSDP, which imports
# torch.distributed.fsdp; Debian's torch 1.13 cannot import that under Python 3.11 (a dataclass
# with a mutable default in torch.distributed._shard). Nothing here is distributed.
transformers.generation.utils.is_fsdp_managed_module = lambda module: False

BOS, EOS = 1, 2
# (seed of the prompt's ids, prompt length including BOS, max_new_tokens); prompt + new <= 64,
# the model's max_position_embeddings. Seed 4403 is one whose greedy output ends with EOS after
# 13 tokens (found by trying seeds from 4400), so the stop-at-EOS path is checked too.
CASES = [(4321, 1, 40), (4322, 7, 48), (4323, 20, 44), (4324, 33, 31), (4403, 9, 40)]
# Below this gap between the top two logits a float32 run could pick the other token.
MIN_MARGIN = 1e-3


def make_prompts():
    prompts = []
    for seed, length, new in CASES:
        gen = torch.Generator().manual_seed(seed)
        body = torch.randint(3, 96, (length - 1,), generator=gen, dtype=torch.int64)
        prompts.append((torch.cat([torch.tensor([BOS]), body]), new))
    return prompts


def greedy(model, prompt, new):
    ids = prompt[None, :]
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                         eos_token_id=EOS, pad_token_id=EOS, output_scores=True, return_dict_in_generate=True)
    generated = out.sequences[0, ids.shape[1]:].tolist()
    margins = []
    for s in out.scores:  # one [1, V] row of logits per generated token
        top2 = torch.topk(s[0].double(), 2).values
        margins.append((top2[0] - top2[1]).item())
    return generated, min(margins)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.join(here, "llama_gqa_tiny"), help="the HF folder to run")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    # Llama or Mixtral (tests/golden/mixtral_tiny), each with its float64 context.
    if AutoConfig.from_pretrained(args.model).model_type == "mixtral":
        from generate_mixtral import exact_float64_mixtral as exact_float64
    else:
        exact_float64 = exact_float64_llama
    model32 = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    model64 = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval().double()
    # Mixtral's aux loss is a training term; with the KV cache transformers 4.47.1 cannot
    # compute it (a shape error in load_balancing_loss_func), and generation never needs it.
    for m in (model32, model64):
        if hasattr(m.config, "output_router_logits"):
            m.config.output_router_logits = False

    cases = []
    with torch.no_grad():
        for prompt, new in make_prompts():
            with exact_float64():
                ids64, margin = greedy(model64, prompt, new)
            ids32, _ = greedy(model32, prompt, new)
            assert ids32 == ids64, f"float32 and float64 greedy differ for prompt {prompt.tolist()}"
            assert margin > MIN_MARGIN, f"a near-tie (margin {margin:.2e}) makes prompt {prompt.tolist()} fragile"
            cases.append({"prompt_ids": prompt.tolist(), "max_new_tokens": new, "expected_ids": ids64,
                          "hit_eos": EOS in ids64, "min_top2_logit_margin": round(margin, 6)})
            print(f"prompt {len(prompt):2d} tokens -> {len(ids64):2d} new, eos {EOS in ids64}, "
                  f"min top-2 margin {margin:.4f}")

    fixture = {
        "generator": "tests/golden/generate_greedy.py",
        "model": os.path.relpath(os.path.abspath(args.model), os.path.dirname(os.path.dirname(here))),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "prompt_seeds": [seed for seed, _, _ in CASES],
        "call": "model.generate(input_ids, attention_mask=ones, max_new_tokens=N, do_sample=False, "
                "eos_token_id=2, pad_token_id=2)",
        "computation": "float64 (HF fp32 upcasts promoted to float64); float32 gives the same ids",
        "bos_token_id": BOS, "eos_token_id": EOS,
        "cases": cases,
    }
    path = os.path.join(args.model, "greedy_generate.json")
    text = json.dumps(fixture, indent=1)
    text = re.sub(r"\[[^\[\]{}\"]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)  # id lists on one line
    with open(path, "w") as f:
        f.write(text + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
