#!/usr/bin/env python3
"""Generates the Llama 3 golden fixtures in tests/golden/ from Hugging Face transformers.

    llama3_tied_tiny/        a tiny random Llama in Llama 3.2's form: tied embeddings (so
                             model.safetensors holds no lm_head.weight), rope_theta 500000 with
                             rope_scaling llama3, grouped-query attention; expected.safetensors:
                             input_ids, labels, logits, loss and the gradient of every parameter
                             (the embedding's is the sum of its two uses, as autograd gives a
                             shared weight), computed in float64 (exact_float64_llama) and stored
                             as float32; and linear.logits / linear.loss, the same weights with
                             rope_scaling {"rope_type": "linear", "factor": 4.0}.
    rope_scaling/inv_freq.json  transformers' own RoPE frequencies (LlamaRotaryEmbedding.inv_freq,
                             float32) for the published Llama 3.1 and 3.2 configs, a linear one
                             and an unscaled one, beside the same computed in float64.

Same venv and versions as generate_llama.py (README.md); reuses its helpers:
    /work/venv-golden/bin/python tests/golden/generate_llama3.py [--check-export build/tests/fsdp_tests_cpu]
--check-export then loads our export of llama3_tied_tiny (written by that test binary) in
transformers: tied, the same rope_scaling, the fixture's logits.
Regenerating with the pinned versions reproduces the committed files byte for byte.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import tempfile

import torch
import transformers
import safetensors
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

import generate_llama
from generate_llama import (SEED, exact_float64_llama, float64_inv_freq, forward_backward, make_inputs, make_model,
                            max_rel_err, one_key_metadata, report)

VOCAB = 64
# Llama 3.1's rope_scaling, with the pretraining context shrunk to this model's scale: with
# head_dim 16 and theta 500000 the wavelengths are 6.3, 32.4, 167, ... positions, so with
# original 64, low 1 and high 4 the first frequency is kept (6.3 < 64/4), the second is
# blended (16 <= 32.4 <= 64) and the other six are divided by 8: every branch is taken.
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}
LINEAR_SCALING = {"rope_type": "linear", "factor": 4.0}


def make_config(rope_scaling) -> LlamaConfig:
    return generate_llama.make_config(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                                      rope_theta=500000.0, rope_scaling=rope_scaling, tie_word_embeddings=True)


def float64_copy(model, config):
    m = LlamaForCausalLM(config)
    m.load_state_dict(model.state_dict())
    return m.double()


def write_tied_fixture(model, out_dir):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied: one Parameter
    model.save_pretrained(out_dir, safe_serialization=True)
    stored = load_file(os.path.join(out_dir, "model.safetensors"))
    assert "lm_head.weight" not in stored and "model.embed_tokens.weight" in stored, sorted(stored)
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["tie_word_embeddings"] is True and cfg["rope_scaling"] == LLAMA3_SCALING, cfg

    # transformers loads the folder back tied, nothing missing, the same model.
    loaded, info = LlamaForCausalLM.from_pretrained(out_dir, output_loading_info=True)
    assert not any(info.values()), info
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight

    input_ids, labels = make_inputs(VOCAB)
    model64 = float64_copy(model, model.config)
    with exact_float64_llama():
        logits, loss, grads = forward_backward(model64, input_ids, labels)
    _, hf_loss, _ = forward_backward(model64, input_ids, labels, use_hf_loss=True)
    assert abs(hf_loss.item() - loss.item()) < 1e-5 * abs(loss.item()), (hf_loss, loss)
    assert "lm_head.weight" not in grads, sorted(grads)  # named_parameters lists the shared one once

    print("llama3 scaling, tied: error vs the float64 reference, max|a-ref|/max|ref| per tensor:")
    report("HF float64, unpatched (fp32 norm/rope/softmax)", *forward_backward(model64, input_ids, labels, True),
           logits, loss, grads)
    report("HF float32, loaded from the folder", *forward_backward(loaded.float(), input_ids, labels, True),
           logits, loss, grads)

    linear_config = copy.deepcopy(model.config)
    linear_config.rope_scaling = dict(LINEAR_SCALING)
    linear64 = float64_copy(model, linear_config)
    with exact_float64_llama():
        linear_logits, linear_loss, _ = forward_backward(linear64, input_ids, labels)
    unscaled_config = copy.deepcopy(model.config)
    unscaled_config.rope_scaling = None
    with exact_float64_llama():
        unscaled_logits, _, _ = forward_backward(float64_copy(model, unscaled_config), input_ids, labels)
    print(f"  logits moved by the scaling (max|a-b|/max|b|): llama3 vs none {max_rel_err(logits, unscaled_logits):.1e}, "
          f"linear vs none {max_rel_err(linear_logits, unscaled_logits):.1e}, "
          f"llama3 vs linear {max_rel_err(logits, linear_logits):.1e}")

    tensors = {"input_ids": input_ids.contiguous(), "labels": labels.contiguous(),
               "logits": logits.float().contiguous(), "loss": loss.float().reshape(()),
               "linear.logits": linear_logits.float().contiguous(), "linear.loss": linear_loss.float().reshape(())}
    for name, g in grads.items():
        tensors[f"grad.{name}"] = g.float().contiguous()
    metadata = {
        "generator": "tests/golden/generate_llama3.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "safetensors": safetensors.__version__, "seed": str(SEED),
        "computation": "float64 (model.double(), HF fp32 upcasts promoted to float64), stored as float32",
        "rope_scaling": json.dumps(LLAMA3_SCALING), "linear.rope_scaling": json.dumps(LINEAR_SCALING),
        "loss_tokens": str(int((labels[:, 1:] != -100).sum())),
    }
    save_file(tensors, os.path.join(out_dir, "expected.safetensors"), metadata=one_key_metadata(metadata))
    print(f"{out_dir}: model.safetensors (tied) + expected.safetensors; loss = {loss.item():.9f}, "
          f"linear loss = {linear_loss.item():.9f}")


# (name, head_dim, rope_theta, rope_scaling): the published configs' RoPE fields.
ROPE_CASES = [
    ("llama3.1_8b", 128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("llama3.2_1b", 64, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("linear_x4", 128, 10000.0, {"type": "linear", "factor": 4.0}),  # the older "type" key
    ("llama2_7b", 128, 10000.0, None),
    ("llama3_tied_tiny", 16, 500000.0, LLAMA3_SCALING),
]


def write_inv_freq_cases(path):
    cases = []
    for name, head_dim, theta, scaling in ROPE_CASES:
        config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim, rope_theta=theta,
                             rope_scaling=copy.deepcopy(scaling), max_position_embeddings=131072)
        hf = modeling_llama.LlamaRotaryEmbedding(config=config).inv_freq
        exact = float64_inv_freq(config)
        err = max_rel_err(hf, exact)
        assert hf.dtype == torch.float32 and err < 1e-6, (name, err)
        print(f"  {name:18s} {len(hf)} frequencies, transformers' float32 vs float64 {err:.1e}")
        cases.append({"name": name, "head_dim": head_dim, "rope_theta": theta, "rope_scaling": scaling,
                      "inv_freq_float32": [float(v) for v in hf], "inv_freq_float64": [float(v) for v in exact]})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"generator": "tests/golden/generate_llama3.py", "transformers": transformers.__version__,
                   "torch": torch.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


def check_export(tests_bin, fixture_dir):
    """Our export of the fixture (Llama3ExportScript.WriteExport in fsdp_tests_cpu) loads in
    transformers tied, with the fixture's rope_scaling, and gives the fixture's logits."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "export")
        env = dict(os.environ, FSDP_LLAMA3_EXPORT_OUT=out)
        subprocess.run([tests_bin, "--gtest_filter=Llama3ExportScript.WriteExport"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        model, info = LlamaForCausalLM.from_pretrained(out, output_loading_info=True)
        assert not any(info.values()), info
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert model.config.rope_scaling == LLAMA3_SCALING, model.config.rope_scaling
        expected = load_file(os.path.join(fixture_dir, "expected.safetensors"))
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"], use_cache=False).logits
        err = max_rel_err(logits, expected["logits"])
        assert err < 1e-5, err
        print(f"our export of {fixture_dir}: transformers loads it tied (no missing or unexpected key), "
              f"rope_scaling {model.config.rope_scaling['rope_type']}; float32 logits vs the reference {err:.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="folder that receives llama3_tied_tiny/ and rope_scaling/")
    parser.add_argument("--check-export", metavar="FSDP_TESTS_CPU",
                        help="after writing the fixtures, load our export of llama3_tied_tiny in transformers "
                             "(build/tests/fsdp_tests_cpu writes it)")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}")
    write_tied_fixture(make_model(make_config(dict(LLAMA3_SCALING))), os.path.join(args.out, "llama3_tied_tiny"))
    write_inv_freq_cases(os.path.join(args.out, "rope_scaling", "inv_freq.json"))
    if args.check_export:
        check_export(args.check_export, os.path.join(args.out, "llama3_tied_tiny"))


if __name__ == "__main__":
    main()
