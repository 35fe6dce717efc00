#!/usr/bin/env python3
"""Checks our Hugging Face export against transformers and writes the fixture CI compares with.

    1. trains a 64-piece BPE sentencepiece tokenizer on a fixed text -> tokenizer.model here
       (Llama-style: identity normalisation, whitespace kept, unk/bos/eos = 0/1/2);
    2. runs the C++ exporter: the test HfExportScript.WriteExports of fsdp_tests_cpu writes the
       seeded tiny GQA model of tests/cpu/test_hf_export.cpp as an fp32 and a bf16 folder,
       each with that tokenizer;
    3. loads both with LlamaForCausalLM.from_pretrained (no missing, unexpected or mismatched
       key allowed) and the tokenizer with AutoTokenizer and LlamaTokenizer, and checks:
       the bf16 weights are torch's own rounding of the fp32 ones, transformers' fp32 logits
       agree with a float64 run of the same model, the tokenizers encode like sentencepiece;
    4. writes expected.safetensors: input_ids, transformers' fp32 logits, the tokenizer's ids
       for a fixed text, and (in __metadata__) an FNV-1a 64 checksum of every tensor's bytes
       as transformers loaded them, fp32 and bf16.

The C++ test HfExportGolden rebuilds the same export and holds it to that fixture.

Run from the repository root after building (README.md in tests/golden has the setup):
    /work/venv-golden/bin/python tests/golden/hf_export/check_transformers.py --tests-bin build/tests/fsdp_tests_cpu
Re-running with the pinned versions rewrites tokenizer.model and expected.safetensors byte for byte.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers
import safetensors
from safetensors.torch import save_file
from transformers import AutoTokenizer, LlamaForCausalLM, LlamaTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from generate_llama import exact_float64_llama  # noqa: E402  (the float64 reference of the other fixture)

INPUT_SEED, BATCH, SEQ, VOCAB = 4321, 2, 9, 64
TOKENIZER_TEXT = "the quick brown fox jumps over the lazy dog  twice"


def tokenizer_corpus():
    """A fixed pseudo-English text: sentences of words drawn by a seeded generator."""
    words = ("the quick brown fox jumps over lazy dog and a cat sat on mat while birds sing in "
             "trees near water under blue sky every morning light falls").split()
    gen = torch.Generator().manual_seed(7)
    lines = []
    for _ in range(400):
        n = int(torch.randint(4, 12, (1,), generator=gen))
        idx = torch.randint(0, len(words), (n,), generator=gen).tolist()
        lines.append(" ".join(words[i] for i in idx))
    return lines


def train_tokenizer(path):
    # model_writer instead of model_prefix: the prefix would be stored in the model, making
    # the file depend on where the repository is checked out.
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(tokenizer_corpus()), model_writer=model, vocab_size=VOCAB, model_type="bpe",
        normalization_rule_name="identity", remove_extra_whitespaces=False, character_coverage=1.0,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, shuffle_input_sentence=False, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tensor_bytes(t):
    t = t.detach().contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def load(folder, **kw):
    model, info = LlamaForCausalLM.from_pretrained(folder, output_loading_info=True, attn_implementation="eager", **kw)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"{folder}: transformers did not load every tensor as it is: {bad}"
    return model.eval()


def rel(a, ref):
    """||a - ref|| / ||ref||, the norm-wise relative error the C++ tests use."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests-bin", default="build/tests/fsdp_tests_cpu",
                        help="the built fsdp_tests_cpu (it holds the exporter run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"safetensors {safetensors.__version__}, sentencepiece {spm.__version__}")

    # The exporter run reads tokenizer.model from the source tree it was built from: this folder.
    tok_path = os.path.join(HERE, "tokenizer.model")
    train_tokenizer(tok_path)
    with tempfile.TemporaryDirectory(prefix="hf_export_check_") as tmp:
        env = dict(os.environ, FSDP_HF_EXPORT_OUT=tmp)
        subprocess.run([args.tests_bin, "--gtest_filter=HfExportScript.WriteExports"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        fp32_dir, bf16_dir = os.path.join(tmp, "fp32"), os.path.join(tmp, "bf16")

        m32 = load(fp32_dir)
        m16 = load(bf16_dir, torch_dtype=torch.bfloat16)
        assert all(p.dtype == torch.float32 for p in m32.parameters())
        assert m16.config.torch_dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in m16.parameters())
        sd32, sd16 = m32.state_dict(), m16.state_dict()
        assert sd32.keys() == sd16.keys() and len(sd32) == 21, sorted(sd32)
        for name, p in sd32.items():  # our round-to-nearest-even is torch's, bit for bit
            assert torch.equal(p.to(torch.bfloat16).view(torch.int16), sd16[name].view(torch.int16)), name

        gen = torch.Generator().manual_seed(INPUT_SEED)
        input_ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
        with torch.no_grad():
            logits = m32(input_ids=input_ids, use_cache=False).logits.float()
            logits16 = m16(input_ids=input_ids, use_cache=False).logits.float()
            m16_up = load(bf16_dir, torch_dtype=torch.float32)  # bf16 weights, fp32 compute
            logits16_up = m16_up(input_ids=input_ids, use_cache=False).logits.float()
            m64 = load(fp32_dir, torch_dtype=torch.float32).double()
            with exact_float64_llama():
                logits64 = m64(input_ids=input_ids, use_cache=False).logits
        print("norm-wise relative error of the logits:")
        print(f"  transformers fp32 vs float64 reference, fp32 export:        {rel(logits, logits64):.2e}")
        print(f"  bf16 export, bf16 compute (torch_dtype=bfloat16) vs fp32:   {rel(logits16, logits):.2e}")
        print(f"  bf16 export, fp32 compute vs fp32 export:                   {rel(logits16_up, logits):.2e}")
        assert rel(logits, logits64) < 2e-6
        assert rel(logits16, logits) < 5e-2

        fast = AutoTokenizer.from_pretrained(fp32_dir)
        slow = LlamaTokenizer.from_pretrained(fp32_dir)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(fp32_dir, "tokenizer.model"))
        ids = fast(TOKENIZER_TEXT)["input_ids"]
        assert type(fast).__name__ == "LlamaTokenizerFast", type(fast)
        assert ids == slow(TOKENIZER_TEXT)["input_ids"] == [sp.bos_id()] + sp.encode(TOKENIZER_TEXT), ids
        assert fast.decode(ids, skip_special_tokens=True) == TOKENIZER_TEXT
        print(f"  tokenizer: {type(fast).__name__} and LlamaTokenizer encode {len(ids)} ids like sentencepiece")

        checksums = {name: {n: fnv1a64(tensor_bytes(t)) for n, t in sd.items()}
                     for name, sd in (("fp32", sd32), ("bf16", sd16))}

    fixture = {
        "generator": "tests/golden/hf_export/check_transformers.py",
        "export": "tests/cpu/test_hf_export.cpp HfExportScript.WriteExports (seeded init, fp32 and bf16)",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "safetensors": safetensors.__version__, "sentencepiece": spm.__version__,
        "input_seed": INPUT_SEED,
        "logits": "LlamaForCausalLM.from_pretrained(fp32 export) in float32, [batch, seq, vocab]",
        "fnv1a64": checksums,
        "tokenizer_text": TOKENIZER_TEXT,
    }
    tensors = {"input_ids": input_ids.contiguous(), "logits": logits.contiguous(),
               "tokenizer_ids": torch.tensor(ids, dtype=torch.int64)}
    # One metadata key: the Rust writer orders several at random (see generate_llama.py).
    save_file(tensors, os.path.join(HERE, "expected.safetensors"),
              metadata={"fixture": json.dumps(fixture, sort_keys=True)})
    print(f"wrote {tok_path} and {os.path.join(HERE, 'expected.safetensors')}")


if __name__ == "__main__":
    main()
