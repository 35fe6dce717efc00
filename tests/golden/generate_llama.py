#!/usr/bin/env python3
"""Generates the golden Llama fixtures in tests/golden/ from Hugging Face transformers.

    llama_gqa_tiny/   a tiny random Llama with grouped-query attention, fp32 weights in 2+
                      safetensors shards + model.safetensors.index.json, and expected.safetensors:
                      input_ids, labels, logits, loss and the gradient of every parameter,
                      computed in float64 (see exact_float64_llama below) and stored as float32.
    llama_bf16_tiny/  the same weights rounded to bfloat16 in one model.safetensors (no index),
                      and reference/reference_f32.safetensors = those bf16 values upcast to fp32,
                      exactly (in a subfolder: beside model.safetensors it would be a second copy).

Run with the venv described in README.md (Debian's torch 1.13 + requirements.txt):
    /work/venv-golden/bin/python tests/golden/generate_llama.py
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
from transformers import LlamaConfig, LlamaForCausalLM
from transformers import modeling_rope_utils
from transformers.models.llama import modeling_llama

SEED = 1234
BATCH, SEQ = 2, 13
# (batch, position) of the labels set to -100. None is at position 0, whose label HF drops
# anyway when it shifts, so each of the three removes one term from the loss:
# 2 * (13 - 1) - 3 = 21 tokens are averaged.
IGNORED_LABELS = [(0, 4), (1, 7), (1, 12)]
WEIGHT_STD = 0.2
NORM_STD = 0.1
# 100 kB (HF counts 1 kB = 1000 bytes) splits the ~190 kB of fp32 weights into several shards,
# so the importer's multi-file (index.json) path is exercised.
MAX_SHARD_SIZE = "100KB"


def make_config(**overrides) -> LlamaConfig:
    """The fixture's config; generate_llama3.py overrides the shape, tying and RoPE."""
    fields = dict(
        vocab_size=96,
        hidden_size=48,
        intermediate_size=88,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rope_theta=10000.0,
        rope_scaling=None,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        initializer_range=WEIGHT_STD,
        pad_token_id=None,
        attn_implementation="eager",
        torch_dtype="float32",
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def make_model(config=None) -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config or make_config()).float()
    # Our own init, from one generator in parameter-registration order: std 0.2 keeps activations
    # and gradients well away from zero, and non-trivial RMSNorm weights make a norm-weight bug
    # visible (with all-ones weights, forgetting to multiply by them would pass).
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_STD * noise)
            else:
                p.copy_(WEIGHT_STD * noise)
    return model


def make_inputs(vocab=96):
    gen = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    labels = input_ids.clone()
    for b, t in IGNORED_LABELS:
        labels[b, t] = -100
    return input_ids, labels


def promoted_rmsnorm_forward(self, hidden_states):
    """HF's RMSNorm forward with its float32 upcast promoted (float64 stays float64)."""
    input_dtype = hidden_states.dtype
    h = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * h.to(input_dtype)


def promoting_softmax(orig_softmax):
    """torch's softmax whose dtype= argument is promoted with the input's, never lowered."""
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None:
            dtype = torch.promote_types(dtype, input.dtype)
        return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
    return softmax


def float64_inv_freq(config):
    """The RoPE frequencies of `config` as transformers computes them (ROPE_INIT_FUNCTIONS: the
    default, linear or llama3 rope_type), but in float64: its default frequencies, which every
    scaled type starts from, are built in float32 (`.float()`); here they are the same formula
    in float64, and the scaling is transformers' own code running on them."""
    rope = modeling_rope_utils
    orig_default = rope._compute_default_rope_parameters

    def default64(config, device=None, seq_len=None, **kwargs):
        base = config.rope_theta
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim)), 1.0

    scaling = config.rope_scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    rope._compute_default_rope_parameters = default64  # what the scaled types call by name
    try:
        init = default64 if rope_type == "default" else rope.ROPE_INIT_FUNCTIONS[rope_type]
        inv_freq, attention_factor = init(config, None)
    finally:
        rope._compute_default_rope_parameters = orig_default
    assert inv_freq.dtype == torch.float64 and attention_factor == 1.0, (inv_freq.dtype, attention_factor)
    return inv_freq


@contextlib.contextmanager
def exact_float64_llama():
    """Makes HF's Llama compute everything in the dtype of its inputs.

    transformers 4.47.1 upcasts to float32 in four places meant for bf16/fp16 models, which in a
    float64 run would *downcast* and round the reference to fp32 precision:
      RMSNorm      hidden_states.to(torch.float32) before the mean of squares;
      RoPE         inv_freq built in fp32 at init, and forward() forces .float() on inv_freq and
                   positions, so cos/sin are fp32 values even after model.double() (replaced by
                   float64_inv_freq: transformers' own rope_scaling code on float64 frequencies);
      attention    softmax(..., dtype=torch.float32);
      loss         ForCausalLMLoss does logits.float() (we compute the loss ourselves instead).
    Each replacement is the same formula with the cast promoted (never lowered), so fp32 and bf16
    behaviour is unchanged. main() checks the unpatched model agrees to fp32 round-off.
    """
    m = modeling_llama
    orig_norm, orig_rope = m.LlamaRMSNorm.forward, m.LlamaRotaryEmbedding.forward
    orig_softmax = m.nn.functional.softmax

    def rope_forward(self, x, position_ids):
        assert self.attention_scaling == 1.0
        freqs = position_ids[:, :, None].to(torch.float64) * float64_inv_freq(self.config)[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    m.LlamaRMSNorm.forward, m.LlamaRotaryEmbedding.forward = promoted_rmsnorm_forward, rope_forward
    m.nn.functional.softmax = promoting_softmax(orig_softmax)
    try:
        yield
    finally:
        m.LlamaRMSNorm.forward, m.LlamaRotaryEmbedding.forward = orig_norm, orig_rope
        m.nn.functional.softmax = orig_softmax


def causal_lm_loss(logits, labels):
    """HF's causal-LM loss in the logits' dtype: logits[:, t] predicts labels[:, t + 1]; the mean
    is over the shifted labels that are not -100."""
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1, :].reshape(-1, v), labels[:, 1:].reshape(-1),
                           ignore_index=-100, reduction="mean")


def forward_backward(model, input_ids, labels, use_hf_loss=False):
    model.zero_grad(set_to_none=True)
    if use_hf_loss:
        out = model(input_ids=input_ids, labels=labels, use_cache=False)
        loss = out.loss
    else:
        out = model(input_ids=input_ids, use_cache=False)
        loss = causal_lm_loss(out.logits, labels)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return out.logits.detach(), loss.detach(), grads


def max_rel_err(a, ref):
    """max |a - ref| / max |ref|: error relative to the tensor's scale (elementwise relative error
    is meaningless for entries near zero)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def report(label, logits, loss, grads, ref_logits, ref_loss, ref_grads):
    g = max(max_rel_err(grads[n], ref_grads[n]) for n in ref_grads)
    print(f"  {label:44s} logits {max_rel_err(logits, ref_logits):.1e}  "
          f"loss {abs(loss.item() - ref_loss.item()) / abs(ref_loss.item()):.1e}  grads(max) {g:.1e}")


def one_key_metadata(fields):
    """safetensors (Rust) keeps __metadata__ in a HashMap and writes its keys in random order, so
    several keys would make the files differ from run to run; one key holding sorted JSON doesn't."""
    return {"fixture": json.dumps(fields, sort_keys=True)}


def write_gqa_fixture(model, out_dir):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=MAX_SHARD_SIZE)
    shards = sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    assert len(shards) >= 2 and os.path.exists(os.path.join(out_dir, "model.safetensors.index.json")), shards

    input_ids, labels = make_inputs()
    model64 = LlamaForCausalLM(model.config)
    model64.load_state_dict(model.state_dict())
    model64.double()
    with exact_float64_llama():
        logits, loss, grads = forward_backward(model64, input_ids, labels)

    # HF's own loss (computed from fp32-cast logits) must agree: proves the label shift and the
    # -100 handling above are HF's.
    _, hf_loss, _ = forward_backward(model64, input_ids, labels, use_hf_loss=True)
    assert abs(hf_loss.item() - loss.item()) < 1e-5 * abs(loss.item()), (hf_loss, loss)

    print("error vs the float64 reference, max|a-ref|/max|ref| per tensor:")
    report("HF float64, unpatched (fp32 norm/rope/softmax)", *forward_backward(model64, input_ids, labels, True),
           logits, loss, grads)
    model32 = LlamaForCausalLM(model.config).float()
    model32.load_state_dict(model.state_dict())
    report("HF float32 (what an fp32 C++ port resembles)", *forward_backward(model32, input_ids, labels, True),
           logits, loss, grads)

    tensors = {"input_ids": input_ids.contiguous(), "labels": labels.contiguous(),
               "logits": logits.float().contiguous(), "loss": loss.float().reshape(())}
    for name, g in grads.items():
        tensors[f"grad.{name}"] = g.float().contiguous()
    metadata = {
        "generator": "tests/golden/generate_llama.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "safetensors": safetensors.__version__, "seed": str(SEED),
        "computation": "float64 (model.double(), HF fp32 upcasts promoted to float64), stored as float32",
        "loss": "scalar, shape []: mean cross-entropy of logits[:, :-1] vs labels[:, 1:] over labels != -100",
        "ignored_label_positions": json.dumps(IGNORED_LABELS),
        "loss_tokens": str(int((labels[:, 1:] != -100).sum())),
    }
    save_file(tensors, os.path.join(out_dir, "expected.safetensors"), metadata=one_key_metadata(metadata))
    print(f"{out_dir}: {shards} + index + expected.safetensors; loss = {loss.item():.9f}")


def write_bf16_fixture(model, out_dir):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    bf16 = LlamaForCausalLM(model.config)
    bf16.load_state_dict(model.state_dict())
    bf16.to(torch.bfloat16)  # round-to-nearest-even, as the importer's conversion is checked against
    bf16.save_pretrained(out_dir, safe_serialization=True)  # default 5 GB shard size: one file
    assert sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors")) == ["model.safetensors"]
    with open(os.path.join(out_dir, "config.json")) as f:
        assert json.load(f)["torch_dtype"] == "bfloat16"
    reference = {n: p.detach().float().contiguous() for n, p in bf16.state_dict().items()}
    # In a subfolder: beside model.safetensors, a file holding the same tensors makes the
    # folder ambiguous, and the importer refuses it.
    os.makedirs(os.path.join(out_dir, "reference"))
    save_file(reference, os.path.join(out_dir, "reference", "reference_f32.safetensors"),
              metadata=one_key_metadata({"generator": "tests/golden/generate_llama.py",
                                         "content": "model.safetensors (bfloat16) upcast to float32 exactly"}))
    print(f"{out_dir}: model.safetensors (bf16) + reference/reference_f32.safetensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="folder that receives llama_gqa_tiny/ and llama_bf16_tiny/")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}")
    model = make_model()
    write_gqa_fixture(model, os.path.join(args.out, "llama_gqa_tiny"))
    write_bf16_fixture(model, os.path.join(args.out, "llama_bf16_tiny"))


if __name__ == "__main__":
    main()
