#!/usr/bin/env python3
"""Generates the golden Mixtral fixtures in tests/golden/ from Hugging Face transformers 4.x.

    mixtral_tiny/        a tiny random MixtralForCausalLM (GQA 6:2, 4 experts, top-2, the
                         load-balancing loss on with coefficient 0.02), fp32 weights in the
                         per-expert layout of transformers 4.x, in 3 shards +
                         model.safetensors.index.json, and expected.safetensors:
                           input_ids, labels [2, 13]
                           logits [2, 13, 96]
                           loss, ce_loss, aux_loss (scalars; loss = ce_loss + 0.02 aux_loss, as
                             MixtralForCausalLM returns it with output_router_logits=True)
                           router_logits.<layer> [26, 4], selected_experts.<layer> [26, 2] (int64,
                             largest first), routing_weights.<layer> [26, 2] (renormalised)
                           grad.<name> for every parameter (of the loss above)
                         computed in float64 (see exact_float64_mixtral) and stored as float32.
    mixtral_tiny_fused/  the same weights in transformers 5's fused layout (one file):
                           model.layers.N.mlp.gate.weight          [E, C]
                           model.layers.N.mlp.experts.gate_up_proj [E, 2F, C]  (w1 rows, then w3)
                           model.layers.N.mlp.experts.down_proj    [E, C, F]   (w2)
                         no reference of its own: a loader must produce the same tensors from both.

The seed is the one, among SEED_CANDIDATES, whose routing is farthest from a tie: the smallest
gap between any token's k-th and (k+1)-th router logit (over both layers, in the float64
reference) is printed and stored, so a float32 consumer makes the same top-k choices.

Run with the venv described in README.md (Debian's torch 1.13 + requirements.txt):
    /work/venv-golden/bin/python tests/golden/generate_mixtral.py
    /work/venv-golden/bin/python tests/golden/generate_greedy.py --model tests/golden/mixtral_tiny
Regenerating with the pinned versions reproduces the committed files byte for byte.
"""

import argparse
import contextlib
import json
import os
import shutil

import torch
import torch.nn.functional as F
import transformers
import safetensors
from safetensors.torch import save_file
from transformers import MixtralConfig, MixtralForCausalLM
from transformers.models.mixtral import modeling_mixtral

from generate_llama import causal_lm_loss, max_rel_err, one_key_metadata, promoted_rmsnorm_forward, promoting_softmax

SEED_CANDIDATES = range(1300, 1800)
WEIGHT_STD = 0.2
NORM_STD = 0.1
BATCH, SEQ = 2, 13
IGNORED_LABELS = [(0, 4), (1, 0), (1, 9)]  # (row, position) of labels set to -100
MAX_SHARD_SIZE = "60KB"
EXPERTS, TOP_K, AUX_COEF = 4, 2, 0.02


def make_config() -> MixtralConfig:
    return MixtralConfig(
        vocab_size=96,
        hidden_size=48,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rope_theta=50000.0,
        rms_norm_eps=1e-5,
        sliding_window=None,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        router_aux_loss_coef=AUX_COEF,
        output_router_logits=True,
        router_jitter_noise=0.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        initializer_range=WEIGHT_STD,
        pad_token_id=None,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
        torch_dtype="float32",
    )


def make_model(seed) -> MixtralForCausalLM:
    torch.manual_seed(seed)
    model = MixtralForCausalLM(make_config()).float()
    # One generator in parameter-registration order, as generate_llama.py: std 0.2 keeps
    # activations and gradients away from zero; norm weights around 1 make a norm bug visible.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.copy_(1.0 + NORM_STD * noise if name.endswith("norm.weight") else WEIGHT_STD * noise)
    return model


def make_inputs(seed):
    gen = torch.Generator().manual_seed(seed + 1)
    input_ids = torch.randint(0, 96, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    labels = input_ids.clone()
    for b, t in IGNORED_LABELS:
        labels[b, t] = -100
    return input_ids, labels


@contextlib.contextmanager
def exact_float64_mixtral():
    """Makes HF's Mixtral compute everything in the dtype of its inputs.

    transformers 4.47.1 rounds to float32 in places meant for bf16/fp16 models, which in a
    float64 run would round the reference to fp32 precision:
      RMSNorm   hidden_states.to(torch.float32) before the mean of squares;
      RoPE      cos/sin cached in the default dtype (float32) at init;
      softmax   attention's softmax(..., dtype=torch.float32) and the router's
                softmax(router_logits, dtype=torch.float).
    Each replacement is the same formula with the cast promoted (never lowered), so fp32
    behaviour is unchanged. main() checks the unpatched model agrees to fp32 round-off.
    """
    m = modeling_mixtral
    orig_norm, orig_rope, orig_softmax = m.MixtralRMSNorm.forward, m.MixtralRotaryEmbedding.forward, F.softmax

    def rope_forward(self, x, seq_len=None):
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))
        t = torch.arange(seq_len, dtype=torch.float64)
        emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    m.MixtralRMSNorm.forward, m.MixtralRotaryEmbedding.forward = promoted_rmsnorm_forward, rope_forward
    torch.nn.functional.softmax = promoting_softmax(orig_softmax)
    try:
        yield
    finally:
        m.MixtralRMSNorm.forward, m.MixtralRotaryEmbedding.forward = orig_norm, orig_rope
        torch.nn.functional.softmax = orig_softmax


def forward_backward(model, input_ids, labels, use_hf_loss=False):
    """(logits, loss, ce, aux, router_logits, grads) of MixtralForCausalLM's objective."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, labels=labels if use_hf_loss else None, use_cache=False,
                output_router_logits=True)
    aux = modeling_mixtral.load_balancing_loss_func(out.router_logits, EXPERTS, TOP_K)
    ce = causal_lm_loss(out.logits, labels)
    loss = out.loss if use_hf_loss else ce + AUX_COEF * aux
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return out.logits.detach(), loss.detach(), ce.detach(), aux.detach(), [r.detach() for r in out.router_logits], grads


def routing_margin(router_logits):
    """Smallest gap between a token's k-th and (k+1)-th router logit, over every layer."""
    gaps = []
    for r in router_logits:
        top = torch.topk(r.double(), TOP_K + 1, dim=-1).values
        gaps.append((top[:, TOP_K - 1] - top[:, TOP_K]).min().item())
    return min(gaps)


def float64_copy(model):
    m64 = MixtralForCausalLM(model.config)
    m64.load_state_dict(model.state_dict())
    return m64.double()


def pick_seed():
    best = None
    for seed in SEED_CANDIDATES:
        model = float64_copy(make_model(seed))
        input_ids, _ = make_inputs(seed)
        with torch.no_grad(), exact_float64_mixtral():
            out = model(input_ids=input_ids, use_cache=False, output_router_logits=True)
        margin = routing_margin(out.router_logits)
        if best is None or margin > best[1]:
            best = (seed, margin)
    return best


def write_fixture(seed, out_dir):
    model = make_model(seed)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=MAX_SHARD_SIZE)
    shards = sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    assert len(shards) >= 2 and os.path.exists(os.path.join(out_dir, "model.safetensors.index.json")), shards

    input_ids, labels = make_inputs(seed)
    model64 = float64_copy(model)
    with exact_float64_mixtral():
        logits, loss, ce, aux, router_logits, grads = forward_backward(model64, input_ids, labels)
        # HF's own objective (its loss function and aux term) must agree with ours.
        _, hf_loss, *_ = forward_backward(model64, input_ids, labels, use_hf_loss=True)
    assert abs(hf_loss.item() - loss.item()) < 1e-5 * abs(loss.item()), (hf_loss, loss)
    margin = routing_margin(router_logits)

    print("error vs the float64 reference, max|a-ref|/max|ref| per tensor:")
    for label, m in (("HF float64, unpatched", model64), ("HF float32", model.float())):
        l2, loss2, _, aux2, _, g2 = forward_backward(m, input_ids, labels, True)
        g = max(max_rel_err(g2[n], grads[n]) for n in grads)
        print(f"  {label:24s} logits {max_rel_err(l2, logits):.1e}  loss {abs(loss2.item() / loss.item() - 1):.1e}  "
              f"aux {abs(aux2.item() / aux.item() - 1):.1e}  grads(max) {g:.1e}")

    tensors = {"input_ids": input_ids.contiguous(), "labels": labels.contiguous(),
               "logits": logits.float().contiguous(), "loss": loss.float().reshape(()),
               "ce_loss": ce.float().reshape(()), "aux_loss": aux.float().reshape(())}
    for layer, r in enumerate(router_logits):
        probs = F.softmax(r, dim=-1)
        weights, experts = torch.topk(probs, TOP_K, dim=-1)
        tensors[f"router_logits.{layer}"] = r.float().contiguous()
        tensors[f"selected_experts.{layer}"] = experts.contiguous()
        tensors[f"routing_weights.{layer}"] = (weights / weights.sum(-1, keepdim=True)).float().contiguous()
    for name, g in grads.items():
        tensors[f"grad.{name}"] = g.float().contiguous()
    metadata = {
        "generator": "tests/golden/generate_mixtral.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "safetensors": safetensors.__version__, "seed": str(seed),
        "computation": "float64 (model.double(), HF fp32 upcasts promoted to float64), stored as float32",
        "loss": "ce_loss + router_aux_loss_coef * aux_loss; ce over labels[:, 1:] != -100; aux = "
                "load_balancing_loss_func(router logits of both layers, 4, 2)",
        "routing_margin": f"{margin:.6f}",
        "ignored_label_positions": json.dumps(IGNORED_LABELS),
    }
    save_file(tensors, os.path.join(out_dir, "expected.safetensors"), metadata=one_key_metadata(metadata))
    print(f"{out_dir}: {shards} + index + expected.safetensors")
    print(f"  seed {seed}: loss {loss.item():.9f} = ce {ce.item():.9f} + {AUX_COEF} x aux {aux.item():.9f}; "
          f"routing margin {margin:.4f} (logits)")
    return model


def write_fused(model, out_dir):
    """The same weights as transformers 5 names and stacks them."""
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    tensors = {}
    for name, p in model.state_dict().items():
        if ".block_sparse_moe." not in name:
            tensors[name] = p.float().contiguous()
    cfg = model.config
    for layer in range(cfg.num_hidden_layers):
        pre = f"model.layers.{layer}.block_sparse_moe."
        sd = model.state_dict()
        experts = range(cfg.num_local_experts)
        tensors[f"model.layers.{layer}.mlp.gate.weight"] = sd[pre + "gate.weight"].float().contiguous()
        tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([sd[f"{pre}experts.{e}.w1.weight"], sd[f"{pre}experts.{e}.w3.weight"]]) for e in experts]
        ).float().contiguous()
        tensors[f"model.layers.{layer}.mlp.experts.down_proj"] = torch.stack(
            [sd[f"{pre}experts.{e}.w2.weight"] for e in experts]).float().contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = json.loads(cfg.to_json_string())
    config["transformers_version"] = "5.0.0 layout, written by tests/golden/generate_mixtral.py"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"{out_dir}: model.safetensors (fused experts) + config.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="folder that receives mixtral_tiny/ and mixtral_tiny_fused/")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}")
    seed, margin = pick_seed()
    print(f"seed {seed}: smallest k-th vs (k+1)-th router logit gap {margin:.4f}")
    model = write_fixture(seed, os.path.join(args.out, "mixtral_tiny"))
    write_fused(model, os.path.join(args.out, "mixtral_tiny_fused"))


if __name__ == "__main__":
    main()
