#!/usr/bin/env python3
"""The peer of bench/moe_step_bench.cpp: one training step (forward, backward, AdamW) of
transformers' MixtralForCausalLM (4.47.1, Debian's torch 1.13, float32, eager attention) at
the same shape, on the same machine and thread count; prints ms/step and tokens/s (the mean
of STEPS timed steps after one warm-up step).

    /work/venv-golden/bin/python bench/moe_peer_transformers.py --threads 2 [--small]
"""

import argparse
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--small", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    hidden, inter, heads, vocab, seq = (128, 352, 4, 1024, 64) if a.small else (512, 1408, 8, 32000, 256)
    cfg = MixtralConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=4,
                        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
                        num_local_experts=8, num_experts_per_tok=2, router_aux_loss_coef=0.02,
                        output_router_logits=True, tie_word_embeddings=False, sliding_window=None,
                        attn_implementation="eager")
    torch.manual_seed(0)
    model = MixtralForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    ids = torch.randint(0, vocab, (4, seq + 1))

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids[:, :-1], labels=ids[:, :-1], use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    ms = (time.perf_counter() - t0) / a.steps * 1e3
    print(f"transformers: {ms:.1f} ms/step, {4 * seq / ms * 1e3:.0f} tokens/s")


if __name__ == "__main__":
    main()
