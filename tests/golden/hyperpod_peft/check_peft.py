#!/usr/bin/env python3
"""Records PEFT loading an adapter of the HyperPod-style flow (issue 30 item 6).

    1. runs tests/integration/hyperpod_qlora.sh with HYPERPOD_OUT set: the Llama 3-style tiny
       folder, `prepare` of Korean chat JSONL, QLoRA (NF4 base, LoRA on every linear layer) with
       packing, `export --adapter`; the script copies the PEFT folder out;
    2. loads it with PeftModel.from_pretrained on the same folder's float32 weights (every adapter
       tensor must load: no missing or unexpected key, each equal to the file's);
    3. renders the test's conversation with apply_chat_template(add_generation_prompt=True) and
       generates greedily, 16 new tokens at most, stopping at <|eot_id|> or EOS;
    4. writes adapter/ (the folder PEFT loaded) and expected.json (versions, prompt ids, reply ids
       and text), which the script then holds `generate --chat --adapter` to, token for token.

Run from the repository root after building fsdp_train, in the golden venv (tests/golden/README.md)
with peft 0.13.2 added:
    /work/venv-golden/bin/python tests/golden/hyperpod_peft/check_peft.py --bin build/fsdp_train
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile

import peft
import torch
import transformers
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SYSTEM = "뉴스를 요약하세요."
USER = "한은이 금리를 동결했다."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        # The script fails at its last check until expected.json exists; the adapter is out by then.
        subprocess.run(["bash", os.path.join(ROOT, "tests/integration/hyperpod_qlora.sh"), args.bin],
                       env=dict(os.environ, HYPERPOD_OUT=out), stdout=subprocess.DEVNULL, check=False)
        adapter = os.path.join(out, "adapter")
        assert os.path.isfile(os.path.join(adapter, "adapter_model.safetensors")), "the flow exported no adapter"
        model_dir = os.path.join(out, "model")
        os.makedirs(model_dir)
        for src in ("tests/golden/chat_generate/llama3_chat_tiny", "tests/golden/tokenizers/llama3_chat"):
            for f in os.listdir(os.path.join(ROOT, src)):
                shutil.copy(os.path.join(ROOT, src, f), model_dir)

        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                                 attn_implementation="eager")
        model = peft.PeftModel.from_pretrained(base, adapter)
        model.eval()
        exported = load_file(os.path.join(adapter, "adapter_model.safetensors"))
        loaded = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
        assert set(exported) == set(loaded), sorted(set(exported) ^ set(loaded))
        for k, v in exported.items():
            assert torch.equal(v.float(), loaded[k].float()), k

        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        stop = [tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id]
        with torch.no_grad():
            ids = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=16, do_sample=False,
                                 eos_token_id=stop, pad_token_id=tok.eos_token_id)[0].tolist()
        reply = ids[len(prompt):]
        # Every greedy choice, the stop included, must win by a margin far above a float32
        # implementation's logit error (~1e-5), or the comparison could flip on another CPU.
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, len(prompt) - 1:len(ids) - 1].double()
        top2 = logits.topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        assert margin > 1e-3, f"a greedy step wins by only {margin:.2e}"
        if reply and reply[-1] in stop:
            reply = reply[:-1]
        text = tok.decode(reply, skip_special_tokens=True)

        shutil.rmtree(os.path.join(HERE, "adapter"), ignore_errors=True)
        shutil.copytree(adapter, os.path.join(HERE, "adapter"))
        with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"versions": {"transformers": transformers.__version__, "peft": peft.__version__,
                                    "torch": torch.__version__},
                       "adapter_tensors": len(exported), "prompt_ids": prompt, "reply_ids": reply,
                       "smallest_top2_margin": round(margin, 6), "reply_text": text}, f, ensure_ascii=False,
                      indent=2)
            f.write("\n")
        print(f"PEFT loaded {len(exported)} adapter tensors; greedy reply {reply} = {text!r}, "
              f"smallest top-2 margin {margin:.3e}")


if __name__ == "__main__":
    main()
