#!/usr/bin/env python3
"""Writes tests/golden/chat_generate/: what `fsdp_train generate --chat` must compute, by transformers.

expected.json holds
  prompts   for 2-3 message conversations, the ids of
            tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            (special tokens in the rendered text parsed, none added: one BOS when the template
            writes it), with a Llama 3 template (tokenizers/llama3_chat, its own template) and the
            Llama 2 chat and Mistral instruct templates (chat_templates/sources/*.jinja passed as
            chat_template=) on the Llama 2-style tokenizer (tokenizers/llama2_legacy);
  greedy    for the Llama 3-style conversations, the ids transformers' greedy generate() appends
            to that prompt on the tiny model llama3_chat_tiny/ (its generation_config.json lists
            <|end_of_text|> and <|eot_id|> as eos_token_id, as Llama 3 Instruct's does), which
            stop at <|eot_id|>, and the reply decode(generated, skip_special_tokens=True).

llama3_chat_tiny/ is a LlamaForCausalLM in Llama 3.2's form (tied embeddings) over the llama3_chat
tokenizer's 3011 ids: hidden 32, 2 layers, 4 query / 2 KV heads of dim 8, intermediate 64, weights
N(0, 0.2^2) from torch.Generator seeded SEED, norms 1 + 0.1 N(0, 1), stored as bfloat16 (190 kB).
A random model almost never picks one id out of 3011, so <|eot_id|>'s embedding row is scaled by
EOT_SCALE (tied: its logit grows by as much): the seed is the first from 2000 whose every greedy
case stops at <|eot_id|> after 3 to 24 tokens with a top-2 logit margin above MIN_MARGIN at every
step. The reference runs in float64 (exact_float64_llama of generate_llama.py on the bf16 weights
upcast), and a float32 run must pick the same ids.

Run with the venv of tests/golden/README.md (Debian's torch 1.13 + requirements.txt) plus jinja2 3.1.6
(transformers renders chat templates with it; `pip install jinja2==3.1.6`), from anywhere:
    /work/venv-golden/bin/python tests/golden/generate_chat_generate.py
Running it twice gives identical files.
"""

import json
import os
import re
import shutil

import torch
import transformers
import transformers.generation.utils
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from generate_llama import exact_float64_llama

assert transformers.__version__ == "4.47.1", transformers.__version__
# As generate_greedy.py: generate() would import torch.distributed.fsdp, which Debian's torch 1.13
# cannot under Python 3.11; nothing here is distributed.
transformers.generation.utils.is_fsdp_managed_module = lambda module: False

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "chat_generate")
LLAMA3 = os.path.join(HERE, "tokenizers", "llama3_chat")
LLAMA2 = os.path.join(HERE, "tokenizers", "llama2_legacy")
SOURCES = os.path.join(HERE, "chat_templates", "sources")

SEED_FROM, EOT_SCALE, MIN_MARGIN, MAX_NEW = 2000, 3.0, 1e-3, 24
BEGIN, END_OF_TEXT, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"

SYSTEM_USER = [{"role": "system", "content": "You answer in one word."},
               {"role": "user", "content": "What is the first book of the Bible?"}]
MULTI_TURN = [{"role": "user", "content": "In the beginning God created"},
              {"role": "assistant", "content": "the heaven and the earth."},
              {"role": "user", "content": "And the earth was"}]
USER_ONLY = [{"role": "user", "content": "Say: let there be light."}]


def rel(path):
    return os.path.relpath(path, ROOT)


def prompt_cases():
    llama3 = AutoTokenizer.from_pretrained(LLAMA3)
    llama2 = AutoTokenizer.from_pretrained(LLAMA2)
    cases = []
    for tok, folder, template in [(llama3, LLAMA3, None),
                                  (llama2, LLAMA2, "llama2_chat.jinja"),
                                  (llama2, LLAMA2, "mistral_instruct_v01.jinja")]:
        source = None if template is None else open(os.path.join(SOURCES, template), encoding="utf-8").read()
        for messages in (SYSTEM_USER, MULTI_TURN, USER_ONLY):
            if template == "mistral_instruct_v01.jinja" and messages[0]["role"] == "system":
                continue  # that template refuses system messages (raise_exception)
            text = tok.apply_chat_template(messages, chat_template=source, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(messages, chat_template=source, add_generation_prompt=True, tokenize=True)
            assert ids == tok.encode(text, add_special_tokens=False)
            cases.append({"tokenizer": rel(folder),
                          "chat_template": None if template is None else rel(os.path.join(SOURCES, template)),
                          "messages": messages, "text": text, "ids": ids,
                          "bos_count": ids.count(tok.bos_token_id)})
    return cases


def make_model(seed, vocab, eot, bos):
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         bos_token_id=bos, eos_token_id=[END_IDS[0], END_IDS[1]],
                         attn_implementation="eager", torch_dtype="bfloat16")
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        model.model.embed_tokens.weight[eot] *= EOT_SCALE
    return model


def greedy(model, ids, new):
    ids = torch.tensor([ids])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                         pad_token_id=END_IDS[0], output_scores=True, return_dict_in_generate=True)
    margins = [(lambda t: (t[0] - t[1]).item())(torch.topk(s[0].double(), 2).values) for s in out.scores]
    return out.sequences[0, ids.shape[1]:].tolist(), min(margins)


END_IDS = []


def main():
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(LLAMA3)
    vocab = len(tok)
    END_IDS[:] = [tok.convert_tokens_to_ids(END_OF_TEXT), tok.convert_tokens_to_ids(EOT)]
    eot = END_IDS[1]
    conversations = [SYSTEM_USER, MULTI_TURN]
    prompts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in conversations]
    folder = os.path.join(OUT, "llama3_chat_tiny")
    for seed in range(SEED_FROM, SEED_FROM + 200):
        shutil.rmtree(folder, ignore_errors=True)
        model = make_model(seed, vocab, eot, tok.bos_token_id).to(torch.bfloat16)
        model.generation_config.eos_token_id = list(END_IDS)
        model.generation_config.bos_token_id = tok.bos_token_id
        model.save_pretrained(folder, safe_serialization=True)
        m32 = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        m64 = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval().double()
        cases, ok = [], True
        with torch.no_grad():
            for messages, ids in zip(conversations, prompts):
                with exact_float64_llama():
                    out64, margin = greedy(m64, ids, MAX_NEW)
                out32, _ = greedy(m32, ids, MAX_NEW)
                if out32 != out64 or margin < MIN_MARGIN or out64[-1] != eot or not 3 <= len(out64) <= MAX_NEW:
                    ok = False
                    break
                cases.append({"messages": messages, "prompt_ids": ids, "max_new_tokens": MAX_NEW,
                              "expected_ids": out64, "reply": tok.decode(out64, skip_special_tokens=True),
                              "min_top2_logit_margin": round(margin, 6)})
        if ok:
            break
    else:
        raise SystemExit("no seed found")
    print(f"seed {seed}: " + "; ".join(f"{len(c['expected_ids'])} tokens, margin {c['min_top2_logit_margin']}"
                                       for c in cases))

    fixture = {
        "generator": "tests/golden/generate_chat_generate.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "tokenizers": __import__("tokenizers").__version__,
        "model": rel(folder), "model_seed": seed, "eot_embedding_scale": EOT_SCALE,
        "model_tokenizer": rel(LLAMA3),
        "eos_token_id": END_IDS,
        "prompt_call": "tok.apply_chat_template(messages, chat_template=..., add_generation_prompt=True, "
                       "tokenize=True)",
        "greedy_call": "model.generate(input_ids, attention_mask=ones, max_new_tokens=N, do_sample=False) with the "
                       "folder's generation_config.json; reply = tok.decode(generated, skip_special_tokens=True)",
        "computation": "float64 (HF fp32 upcasts promoted) on the bf16 weights; float32 gives the same ids",
        "prompts": prompt_cases(),
        "greedy": cases,
    }
    text = json.dumps(fixture, indent=1, ensure_ascii=False)
    text = re.sub(r"\[[-0-9,\s]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)  # id lists on one line
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(f"wrote {rel(OUT)}")


if __name__ == "__main__":
    main()
