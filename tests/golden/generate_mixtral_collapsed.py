#!/usr/bin/env python3
"""Generates tests/golden/mixtral_collapsed_tiny/: the mixtral_tiny model (generate_mixtral.py,
seed 1566) with both routers collapsed the way configs/tiny_moe.yaml's demo collapsed (issue
31): every token routed to experts 0 and 1 while the router's probabilities stay close to
uniform, and the load-balancing loss's value and its gradient there, from transformers.

    config.json, model.safetensors   the weights (the routers replaced, everything else as in
                                     mixtral_tiny), one file
    expected.safetensors             input_ids, labels [2, 13]
                                     router_logits.<layer> [26, 4], selected_experts.<layer>
                                     aux_loss (scalar): load_balancing_loss_func(router logits of
                                       both layers, 4, 2), transformers' value
                                     aux_grad.<layer> [4, 48]: d aux_loss / d gate.weight of each
                                       layer (the aux loss alone, coefficient 1)
                                     computed in float64 (generate_mixtral.exact_float64_mixtral),
                                     stored as float32.

Each layer's router is set, in layer order, to the minimum-norm gate weight whose logits on that
layer's inputs (the post-attention RMSNorm output of the batch) are the target logits
[0.02, 0.01, 0, 0] + N(0, 0.001^2): the softmax is uniform to 1%, and the top-2 is experts 0 and 1
for every token with a margin of ~0.007 in the logits (float32 computes them to ~1e-7).

What it shows: aux = E * sum_e f_e P_e with P_e ~ 1/E is ~ sum_e f_e = k = 2 whatever the counts
f_e, the value of a perfectly balanced router; its gradient is non-zero (E f_e / T per token and
expert, through the softmax) but small. tests/cpu/test_mixtral_golden.cpp holds our router
gradient to this one.

Run with the venv of README.md (Debian's torch 1.13 + requirements.txt):
    /work/venv-golden/bin/python tests/golden/generate_mixtral_collapsed.py
"""

import argparse
import json
import os
import shutil

import torch
import transformers
import safetensors
from safetensors.torch import save_file
from transformers.models.mixtral import modeling_mixtral

from generate_mixtral import EXPERTS, TOP_K, exact_float64_mixtral, float64_copy, make_inputs, make_model
from generate_llama import one_key_metadata

SEED = 1566  # mixtral_tiny's (its expected.safetensors metadata)
TARGET = [0.02, 0.01, 0.0, 0.0]
NOISE = 0.001


def moe_inputs(model, input_ids, layer):
    """The hidden states the layer's router sees: its post-attention RMSNorm output."""
    seen = {}
    block = model.model.layers[layer].block_sparse_moe
    def keep(mod, args, out):
        seen["x"] = args[0].detach()  # returns None: the block's output stays

    handle = block.register_forward_hook(keep)
    with torch.no_grad():
        model(input_ids=input_ids, use_cache=False, output_router_logits=True)
    handle.remove()
    return seen["x"].reshape(-1, seen["x"].shape[-1])


def collapse_routers(model, input_ids):
    gen = torch.Generator().manual_seed(SEED + 7)
    for layer in range(model.config.num_hidden_layers):
        h = moe_inputs(model, input_ids, layer)  # [T, C]
        target = torch.tensor(TARGET, dtype=h.dtype).expand(h.shape[0], -1).clone()
        target += NOISE * torch.randn(target.shape, generator=gen, dtype=torch.float32).to(h.dtype)
        # min-norm W with h W^T = target (T = 26 < C = 48: exact)
        w = torch.linalg.lstsq(h, target).solution.T  # [E, C]
        with torch.no_grad():
            model.model.layers[layer].block_sparse_moe.gate.weight.copy_(w)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "mixtral_collapsed_tiny"))
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    input_ids, labels = make_inputs(SEED)
    model64 = float64_copy(make_model(SEED))
    with exact_float64_mixtral():
        collapse_routers(model64, input_ids)
        model64.zero_grad(set_to_none=True)
        out = model64(input_ids=input_ids, use_cache=False, output_router_logits=True)
        aux = modeling_mixtral.load_balancing_loss_func(out.router_logits, EXPERTS, TOP_K)
        aux.backward()
    tensors = {"input_ids": input_ids.contiguous(), "labels": labels.contiguous(),
               "aux_loss": aux.detach().float().reshape(())}
    counts = torch.zeros(EXPERTS)
    margin = float("inf")
    for layer, r in enumerate(out.router_logits):
        r = r.detach()
        top = torch.topk(r, TOP_K + 1, dim=-1)
        margin = min(margin, (top.values[:, TOP_K - 1] - top.values[:, TOP_K]).min().item())
        experts = torch.topk(torch.softmax(r, -1), TOP_K, dim=-1).indices
        assert set(experts.flatten().tolist()) == {0, 1}, experts
        counts += torch.bincount(experts.flatten(), minlength=EXPERTS)
        tensors[f"router_logits.{layer}"] = r.float().contiguous()
        tensors[f"selected_experts.{layer}"] = experts.contiguous()
        g = model64.model.layers[layer].block_sparse_moe.gate.weight.grad
        tensors[f"aux_grad.{layer}"] = g.detach().float().contiguous()
    model = make_model(SEED)
    model.load_state_dict({k: v.float() for k, v in model64.state_dict().items()})
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    model.save_pretrained(args.out, safe_serialization=True)
    metadata = {"generator": "tests/golden/generate_mixtral_collapsed.py", "torch": torch.__version__,
                "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                "seed": str(SEED), "routing_margin": f"{margin:.6f}",
                "expert_counts": json.dumps(counts.int().tolist())}
    save_file(tensors, os.path.join(args.out, "expected.safetensors"), metadata=one_key_metadata(metadata))
    for name in ("generation_config.json",):
        path = os.path.join(args.out, name)
        if os.path.exists(path):
            os.remove(path)
    grad_norm = max(tensors[f"aux_grad.{l}"].norm().item() for l in range(model.config.num_hidden_layers))
    print(f"{args.out}: aux_loss {aux.item():.6f} (balanced = {TOP_K}); expert choices {counts.int().tolist()}; "
          f"routing margin {margin:.4f}; largest |d aux / d gate.weight| {grad_norm:.3e}")


if __name__ == "__main__":
    main()
