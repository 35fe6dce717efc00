#!/usr/bin/env python3
"""Generates the LoRA / QLoRA golden fixtures in tests/golden/ from PEFT, bitsandbytes and
transformers (pinned in requirements-peft.txt; README.md, "LoRA and QLoRA", says how to run it).

    nf4/expected.safetensors   bitsandbytes' NF4 quantization (quantize_4bit, blocksize 64,
                               double quantization) of a few tensors on the CPU: inputs, packed
                               codes, quantized absmax, nested absmax, offset, the code tables,
                               each block's dequantized absmax and the dequantized weights.
    llama_nf4_bnb/             tests/golden/llama_gqa_tiny loaded in 4 bits by transformers +
                               bitsandbytes (nf4, double quant, float32 compute) and saved with
                               save_pretrained: what a bitsandbytes user's folder looks like, and
                               expected.safetensors with that 4-bit model's logits and loss.
    lora_tiny/<case>/          PEFT adapters (r=4, lora_alpha=8, all-linear, dropout 0) on
                               llama_gqa_tiny, with and without rslora, saved by save_pretrained,
                               and expected.safetensors: logits, loss and every lora_A/lora_B
                               gradient for the golden batch.
    qlora_tiny/                the same adapter on the 4-bit base (llama_nf4_bnb), with its
                               logits, loss and every adapter gradient computed by PEFT on top of
                               bitsandbytes' Linear4bit.

Run from the repository root (the adapters record base_model_name_or_path relative to it),
with a fixed string hash seed (PEFT writes an expanded all-linear target_modules from a set):
    PYTHONHASHSEED=0 /work/venv-lora/bin/python tests/golden/generate_peft.py
"""

import json
import os
import shutil

import bitsandbytes
import bitsandbytes.functional as bnbf
import peft
import safetensors
import torch
import transformers
from safetensors.torch import save_file

GOLDEN = "tests/golden"
BASE = f"{GOLDEN}/llama_gqa_tiny"
SEED = 4242
# The adapters' scale: large enough that every gradient is far from zero, small enough that
# the adapted model stays as well conditioned as the base (at 0.3 PEFT's own float32 run
# is 1.4e-5 off its float64 one on one gradient; at 0.1 1.8e-6, as for the base model).
ADAPTER_STD = 0.1


def versions():
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "bitsandbytes": bitsandbytes.__version__,
        "safetensors": safetensors.__version__,
    }


def metadata(**extra):
    # One key: the Rust writer orders several metadata keys at random (see README.md).
    return {"fixture": json.dumps({"versions": versions(), **extra}, sort_keys=True)}


# ---- NF4 ------------------------------------------------------------------------------


def nf4_inputs():
    gen = torch.Generator().manual_seed(SEED)
    t = {}
    # More than 256 blocks: two nested-absmax groups, the second partial (264 = 256 + 8).
    t["bf16_big"] = (0.02 * torch.randn(132, 128, generator=gen)).to(torch.bfloat16)
    t["f32"] = 0.05 * torch.randn(24, 64, generator=gen)
    t["f16"] = (0.1 * torch.randn(16, 64, generator=gen)).to(torch.float16)
    # Awkward blocks: zeros, values exactly between two NF4 codes (ties), negative zero and
    # tiny and huge magnitudes, all equal, one outlier.
    code = bnbf.get_4bit_type("nf4", device="cpu")
    mids = ((code[:-1] + code[1:]) / 2).tolist()
    edge = torch.zeros(8, 64)
    edge[1, : len(mids)] = torch.tensor(mids)
    edge[1, 63] = 1.0
    edge[2, :] = -torch.linspace(0.0, 3.0, 64)
    edge[2, 5] = -0.0
    edge[3, :] = torch.linspace(-1e-38, 1e-38, 64)
    edge[4, :] = 1e30 * torch.randn(64, generator=gen)
    edge[5, :] = 0.125
    edge[6, :] = 1e-3 * torch.randn(64, generator=gen)
    edge[6, 17] = 7.0
    edge[7, :] = torch.randn(64, generator=gen)
    t["edge"] = edge
    return t


def nf4_fixture():
    out = {}
    offsets = {}
    for name, a in nf4_inputs().items():
        packed, state = bnbf.quantize_4bit(a, blocksize=64, compress_statistics=True, quant_type="nf4")
        # Each block's absmax as bitsandbytes dequantizes it (dequantize_blockwise + offset).
        absmax = bnbf.dequantize_blockwise(state.absmax, state.state2) + state.offset
        # The weights in float32 (no 16-bit rounding anywhere), then rounded once to the
        # weight's dtype: what bitsandbytes' CUDA kernel returns (see README.md).
        state32 = bnbf.QuantState.from_dict(state.as_dict(packed=True), device="cpu")
        state32.dtype = torch.float32
        deq32 = bnbf.dequantize_4bit(packed, state32)
        out[f"{name}.input"] = a.contiguous()
        out[f"{name}.packed"] = packed.reshape(-1).contiguous()
        out[f"{name}.absmax"] = state.absmax.contiguous()
        out[f"{name}.nested_absmax"] = state.state2.absmax.contiguous()
        out[f"{name}.nested_quant_map"] = state.state2.code.contiguous()
        out[f"{name}.quant_map"] = state.code.contiguous()
        out[f"{name}.offset"] = state.offset.reshape(1).contiguous()
        out[f"{name}.block_absmax"] = absmax.contiguous()
        out[f"{name}.dequantized"] = deq32.reshape(-1).to(a.dtype).contiguous()
        # bitsandbytes' own 16-bit CPU dequantization rounds the code first: count how often
        # that differs from rounding once (README.md records it).
        deq_native = bnbf.dequantize_4bit(packed, state).reshape(-1)
        differ = int((deq_native != deq32.reshape(-1).to(a.dtype)).sum())
        exact_mean = float(torch.tensor(bnbf_absmax_f32(a).tolist(), dtype=torch.float64).mean())
        offsets[name] = {
            "offset": float(state.offset),
            "float64_mean_rounded": float(torch.tensor(exact_mean, dtype=torch.float32)),
            "cpu_16bit_dequant_differs": differ,
        }
    out["dynamic_map"] = bnbf.create_dynamic_map(signed=True).contiguous()
    os.makedirs(f"{GOLDEN}/nf4", exist_ok=True)
    save_file(out, f"{GOLDEN}/nf4/expected.safetensors", metadata=metadata(offsets=offsets))
    return offsets


def bnbf_absmax_f32(a):
    return a.float().reshape(-1, 64).abs().max(dim=1).values


# ---- the golden batch and models ----------------------------------------------------------


def golden_batch():
    from safetensors.torch import load_file

    e = load_file(f"{BASE}/expected.safetensors")
    return e["input_ids"], e["labels"]


def bnb_config():
    return transformers.BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
        bnb_4bit_quant_storage=torch.uint8,
    )


BASES = {
    "llama": BASE,
    "nf4": f"{GOLDEN}/llama_nf4_bnb",
    "mixtral": f"{GOLDEN}/mixtral_tiny",
}


def load_base(kind):
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    if kind == "nf4":
        kwargs["device_map"] = "cpu"
    return transformers.AutoModelForCausalLM.from_pretrained(BASES[kind], **kwargs)


def bnb_model_fixture():
    """llama_gqa_tiny quantized by transformers + bitsandbytes on the CPU, saved, with its logits."""
    out = f"{GOLDEN}/llama_nf4_bnb"
    shutil.rmtree(out, ignore_errors=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        BASE, quantization_config=bnb_config(), dtype=torch.float32, attn_implementation="eager", device_map="cpu"
    )
    model.save_pretrained(out)
    ids, labels = golden_batch()
    with torch.no_grad():
        r = model(input_ids=ids, labels=labels)
    save_file(
        {"input_ids": ids, "labels": labels, "logits": r.logits.float().contiguous(), "loss": r.loss.float().reshape(())},
        f"{out}/expected.safetensors",
        metadata=metadata(base=BASE, quantization="nf4, double quant, float32 compute, uint8 storage"),
    )
    return float(r.loss)


LORA_CASES = {
    # name: (use_rslora, base)
    "lora_tiny/r4_alpha8": (False, "llama"),
    "lora_tiny/r4_alpha8_rslora": (True, "llama"),
    "qlora_tiny/r4_alpha8": (False, "nf4"),
    # Mixtral: all-linear adapts the router (block_sparse_moe.gate) and every expert's w1, w2, w3.
    "mixtral_lora_tiny/r4_alpha8": (False, "mixtral"),
}


def randomize_adapters(model, seed):
    # PEFT initialises B to zeros, which would make every A gradient zero: draw both from
    # one seeded generator instead, so every adapter gradient is a real check.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(ADAPTER_STD * torch.randn(p.shape, generator=gen, dtype=torch.float32))


def peft_name(param_name):
    # PEFT's in-memory names carry the adapter ("default"); save_pretrained drops it.
    return param_name.replace(".default", "")


def lora_fixture(case, rslora, kind):
    out = f"{GOLDEN}/{case}"
    shutil.rmtree(out, ignore_errors=True)
    base = load_base(kind)
    cfg = peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", use_rslora=rslora, task_type="CAUSAL_LM"
    )
    model = peft.get_peft_model(base, cfg)
    randomize_adapters(model, SEED + 7)
    model.save_pretrained(out)
    os.remove(f"{out}/README.md")  # PEFT's model-card template, not part of the adapter
    # The reference: float64 for the dense Llama (transformers' own float32 casts in RMSNorm
    # and RoPE stay in), float32 for the 4-bit base (bitsandbytes computes in float32) and for
    # Mixtral (its router's softmax is float32 whatever the model's dtype).
    if kind == "llama":
        model = model.double()
    ids, labels = golden_batch()
    r = model(input_ids=ids, labels=labels)
    r.loss.backward()
    tensors = {
        "input_ids": ids,
        "labels": labels,
        "logits": r.logits.detach().float().contiguous(),
        "loss": r.loss.detach().float().reshape(()),
    }
    for name, p in model.named_parameters():
        if "lora_" in name:
            tensors["grad." + peft_name(name)] = p.grad.detach().float().contiguous()
    save_file(
        tensors,
        f"{out}/expected.safetensors",
        metadata=metadata(
            base=BASES[kind],
            lora="r=4, lora_alpha=8, all-linear, dropout 0, use_rslora=%s, A and B ~ %g N(0,1)" % (rslora, ADAPTER_STD),
            precision="float64" if kind == "llama" else "float32",
        ),
    )
    return float(r.loss)


def main():
    assert os.environ.get("PYTHONHASHSEED") == "0", "run with PYTHONHASHSEED=0 (see the docstring)"
    torch.set_num_threads(1)  # reductions in one fixed order
    report = {"nf4": nf4_fixture(), "bnb_loss": bnb_model_fixture()}
    for case, (rslora, kind) in LORA_CASES.items():
        report[case] = lora_fixture(case, rslora, kind)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
