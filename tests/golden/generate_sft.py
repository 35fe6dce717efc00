#!/usr/bin/env python3
"""Golden fixtures for supervised fine-tuning data (tests/golden/sft/): what `fsdp_train prepare`
must make of each SFT dataset format, token ids and per-token loss mask, computed here by
transformers independently of the C++ method (tests/cpu/test_sft_prepare.cpp holds prepare to
expected.json exactly; CI runs no Python).

Two references, neither the C++ one (which compares token ids of rendered prefixes):
  generation   the folder sft/llama3_generation/ carries Llama 3's template with its assistant
               turns inside {% generation %} blocks: transformers'
               apply_chat_template(..., return_assistant_tokens_mask=True) gives the mask.
  char spans   for templates without generation blocks (the published ones): each assistant
               turn's characters are the text between render(messages[:i],
               add_generation_prompt=True) and render(messages[:i+1]) (both checked to be string
               prefixes of the whole), and a token is trained when its offset_mapping starts
               inside one of those spans.
The plain rendering (no template) and pre-tokenized input_ids + labels are defined by the
format itself ([BOS] prompt completion [EOS]; labels != -100); they are written out the same way
so that the C++ test reads one file.

Pinned (as generate_tokenizers.py, whose tokenizer folders this reuses):
  python3 -m venv /tmp/venv-sft
  /tmp/venv-sft/bin/pip install transformers==4.47.1 tokenizers==0.21.0 jinja2==3.1.6
  /tmp/venv-sft/bin/python tests/golden/generate_sft.py        # from the repository root
Running it twice gives identical files.
"""
import json
import os
import shutil
import tempfile

import jinja2
import tokenizers
import transformers
from transformers import AutoTokenizer

assert transformers.__version__ == "4.47.1", transformers.__version__
assert tokenizers.__version__ == "0.21.0", tokenizers.__version__
assert jinja2.__version__ == "3.1.6", jinja2.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, "tests", "golden", "tokenizers")
OUT = os.path.join(ROOT, "tests", "golden", "sft")

# Llama 3's template (as tokenizers/llama3_chat carries it) with each assistant turn's content and
# end-of-turn token inside {% generation %}: the same text, and transformers' own assistant mask.
LLAMA3_GENERATION = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}

ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
          "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
                "{instruction}\n\n### Input:\n{input}\n\n### Response:\n")

# (input file, model folder (under tests/golden/), prepare's flags, reference)
CASES = [
    ("messages.jsonl", "tokenizers/llama3_chat", [], "char spans"),
    ("messages.jsonl", "tokenizers/llama3_chat", ["--train-on", "last"], "char spans"),
    ("messages.jsonl", "tokenizers/llama3_chat", ["--train-on", "all"], "all"),
    ("messages.jsonl", "sft/llama3_generation", [], "generation"),
    ("messages.jsonl", "tokenizers/qwen2_chat", [], "char spans"),
    ("sharegpt.jsonl", "tokenizers/qwen2_chat", ["--sharegpt"], "char spans"),
    ("sharegpt.jsonl", "sft/llama3_generation", ["--sharegpt"], "generation"),
    ("prompt.jsonl", "tokenizers/qwen2_chat", [], "char spans"),
    ("alpaca.jsonl", "tokenizers/llama3_chat", [], "char spans"),
    ("prompt.jsonl", "tokenizers/llama3_style", [], "plain"),
    ("alpaca.jsonl", "tokenizers/llama3_style", [], "plain"),
    ("prompt.jsonl", "tokenizers/llama3_chat", ["--template", "plain"], "plain"),
    ("tokenized.jsonl", "tokenizers/llama3_style", [], "labels"),
]


def conversation(example, flags):
    if "messages" in example:
        return example["messages"]
    if "conversations" in example:
        assert "--sharegpt" in flags
        return [{"role": SHAREGPT_ROLES[m["from"]], "content": m["value"]} for m in example["conversations"]]
    if "prompt" in example:
        return [{"role": "user", "content": example["prompt"]}, {"role": "assistant", "content": example["completion"]}]
    user = example["instruction"] + ("\n\n" + example["input"] if example.get("input") else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": example["output"]}]


def char_span_mask(tok, messages, last_only):
    full = tok.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        through = tok.apply_chat_template(messages[:i + 1], tokenize=False)
        assert through.startswith(before) and full.startswith(through), (messages, i)
        spans.append((len(before), len(through)))
    if last_only:
        spans = spans[-1:]
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [1 if any(a <= start < b for a, b in spans) else 0 for start, _ in enc["offset_mapping"]]
    return enc["input_ids"], mask


def expected(folder, name, flags, reference):
    tok = AutoTokenizer.from_pretrained(folder)
    out = []
    with open(os.path.join(OUT, name), encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            ex = json.loads(line)
            if reference == "labels":
                ids, mask = ex["input_ids"], [0 if l == -100 else 1 for l in ex["labels"]]
            elif reference == "plain":
                prompt = ex["prompt"] if "prompt" in ex else (
                    ALPACA_INPUT if ex.get("input") else ALPACA).format(**ex)
                completion = ex["completion"] if "prompt" in ex else ex["output"]
                p = [tok.bos_token_id] + tok.encode(prompt, add_special_tokens=False)
                c = tok.encode(completion, add_special_tokens=False) + [tok.eos_token_id]
                ids, mask = p + c, [0] * len(p) + [1] * len(c)
            elif reference == "generation":
                r = tok.apply_chat_template(conversation(ex, flags), tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
                ids, mask = r["input_ids"], r["assistant_masks"]
            elif reference == "all":
                ids = tok.apply_chat_template(conversation(ex, flags), tokenize=True)
                mask = [1] * len(ids)
            else:
                ids, mask = char_span_mask(tok, conversation(ex, flags), "last" in flags)
            assert len(ids) == len(mask)
            out.append({"line": line_no, "ids": ids, "mask": mask})
    return out


def main():
    os.makedirs(os.path.join(OUT, "llama3_generation"), exist_ok=True)
    config = json.load(open(os.path.join(TOK, "llama3_chat", "tokenizer_config.json")))
    config["chat_template"] = LLAMA3_GENERATION
    with open(os.path.join(OUT, "llama3_generation", "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, flags, reference in CASES:
            folder = os.path.join(ROOT, "tests", "golden", model)
            if not os.path.exists(os.path.join(folder, "tokenizer.json")):
                # The generation folder shares llama3_chat's tokenizer.json (not committed twice;
                # the C++ test copies it the same way).
                folder = os.path.join(tmp, os.path.basename(model))
                if not os.path.exists(folder):
                    os.makedirs(folder)
                    shutil.copy(os.path.join(TOK, "llama3_chat", "tokenizer.json"), folder)
                    shutil.copy(os.path.join(OUT, "llama3_generation", "tokenizer_config.json"), folder)
            cases.append({"input": name, "model": model, "flags": flags, "reference": reference,
                          "examples": expected(folder, name, flags, reference)})
    doc = {"generator": "tests/golden/generate_sft.py",
           "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                        "jinja2": jinja2.__version__},
           "cases": cases}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
