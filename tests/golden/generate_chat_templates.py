#!/usr/bin/env python3
"""Writes the chat-template fixtures in tests/golden/chat_templates/ (README.md there and
tests/golden/README.md, "Chat templates", say where every template comes from).

For each published template in chat_templates/sources/<name>.jinja (verbatim copies, checked
against their sha256 below) it writes chat_templates/<name>/tokenizer_config.json (the template
and the model's special tokens, as a model folder carries them) and cases.json: conversations
and what transformers' apply_chat_template(..., tokenize=False) rendered for them, or the error
the template raised. transformers loads each folder with AutoTokenizer.from_pretrained, exactly
as a user would (a tiny tokenizer.json holding only the special tokens is added beside the config
in a temporary copy: the chat template never sees the vocabulary).

It also writes chat_templates/jinja_cases.json: small templates, one construct each, rendered by
the very Jinja environment transformers builds (utils.chat_template_utils._compile_jinja_template:
sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now,
namespace), with the output or the error class. The C++ interpreter is held to both files byte for
byte (tests/cpu/test_chat_template.cpp); CI has no Python.

    python3 -m venv /tmp/venv-chat
    /tmp/venv-chat/bin/pip install -r tests/golden/requirements-chat.txt
    /tmp/venv-chat/bin/python tests/golden/generate_chat_templates.py

strftime_now is frozen at FROZEN_NOW (the C++ test passes the same time), so the files do not
depend on the day they were written. Running the script twice gives identical files.
"""

import copy
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile

import jinja2
import tokenizers
import transformers
from transformers import AutoTokenizer
from transformers.utils import chat_template_utils

PINNED = {"transformers": "5.24.0", "jinja2": "3.1.6", "tokenizers": "0.23.3"}
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "chat_templates")
FROZEN_NOW = datetime.datetime(2024, 9, 3, 14, 5, 9)

HFJS = "huggingface/huggingface.js"
E2E = ("packages/jinja/test/e2e.test.js", "ee92cdbe6f08eddd24888204853c2510028c588e")
AUTOMAP = ("packages/ollama-utils/src/chat-template-automap.ts", "007948d5aac310316dd57b5d8e5c091e864418dc")

LLAMA2_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
LLAMA3_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

# name: (the Hub repository the template belongs to, where our verbatim copy comes from,
#        the key there, unused, the special tokens its config declares, which families of
#        cases apply)
TEMPLATES = {
    "llama2_chat": ("meta-llama/Llama-2-7b-chat-hf", AUTOMAP, "library/llama2:7b",
                    None, LLAMA2_TOKENS,
                    {"alternating"}),
    "llama3_instruct": ("meta-llama/Meta-Llama-3-8B-Instruct", AUTOMAP, "library/llama3:8b", None, LLAMA3_TOKENS,
                        set()),
    "llama3_1_instruct": ("meta-llama/Llama-3.1-8B-Instruct", E2E, "meta-llama/Llama-3.1-8B-Instruct", None,
                          LLAMA3_TOKENS, {"tools"}),
    "llama3_2_instruct": ("meta-llama/Llama-3.2-3B-Instruct", AUTOMAP, "library/llama3.2:3b", None, LLAMA3_TOKENS,
                          {"tools", "clock"}),
    "mixtral_instruct": ("mistralai/Mixtral-8x7B-Instruct-v0.1", AUTOMAP, "library/mixtral:8x7b", None,
                         LLAMA2_TOKENS, {"alternating"}),
    "mistral_instruct_v01": ("mistralai/Mixtral-8x7B-Instruct-v0.1 (earlier revision, as in Mistral-7B-Instruct-v0.1/v0.2)",
                             E2E, "mistralai/Mixtral-8x7B-Instruct-v0.1", None, LLAMA2_TOKENS,
                             {"alternating", "no_system"}),
    "mistral_nemo": ("mistralai/Mistral-Nemo-Instruct-2407", E2E, "mistralai/Mistral-Nemo-Instruct-2407", None,
                     LLAMA2_TOKENS, {"alternating", "tools"}),
    "qwen2_instruct": ("Qwen/Qwen2-0.5B-Instruct", AUTOMAP, "library/qwen2:0.5b", None, QWEN_TOKENS, set()),
    "qwen2_5_instruct": ("Qwen/Qwen2.5-7B-Instruct", E2E, "Qwen/Qwen2.5-7B-Instruct", None, QWEN_TOKENS, {"tools"}),
    "qwen3": ("Qwen/Qwen3-0.6B", E2E, "Qwen/Qwen3-0.6B", None, QWEN_TOKENS, {"tools", "reasoning"}),
    "zephyr_beta": ("HuggingFaceH4/zephyr-7b-beta", E2E, "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=true)",
                    None, dict(LLAMA2_TOKENS, pad_token="</s>"), set()),
    "gemma2_it": ("google/gemma-2-2b-it", AUTOMAP, "library/gemma2:2b", None,
                  {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
                  {"alternating", "no_system"}),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! Who are you?"}
A1 = {"role": "assistant", "content": "I am an assistant. How can I help?"}
U2 = {"role": "user", "content": "What is 2 + 2?"}
A2 = {"role": "assistant", "content": "2 + 2 = 4."}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_temperature",
        "description": "Get the current temperature at a location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The location, as \"City, Country\"."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Température unit"},
            },
            "required": ["location", "unit"],
        },
    },
}
TOOL_CALL = {"id": "abc123xyz", "type": "function", "function": {"name": "get_current_temperature",
                                              "arguments": {"location": "Paris, France", "unit": "celsius"}}}


def conversations(families):
    """(id, messages, add_generation_prompt, extra template variables) for one template."""
    with_system = "no_system" not in families
    cases = [
        ("user_only_prompt", [U1], True, {}),
        ("user_only_no_prompt", [U1], False, {}),
        ("multi_turn_prompt", [U1, A1, U2], True, {}),
        ("multi_turn_ends_with_assistant", [U1, A1, U2, A2], False, {}),
        ("unicode", [{"role": "user", "content": "안녕하세요 👋🏽 مرحبا 你好 — “quotes” é"},
                     {"role": "assistant", "content": "Bonjour ! 👨‍👩‍👧 ça va ?"},
                     {"role": "user", "content": "Ünïcödé\u00a0nbsp and tab\tend"}], True, {}),
        ("whitespace", [{"role": "user", "content": "  leading spaces\n\nand\nnewlines\n  "},
                        {"role": "assistant", "content": "\n\tindented answer\n   "},
                        {"role": "user", "content": "\u00a0\u3000 wide spaces \u2003"}], True, {}),
        ("extra_keys_and_none", [dict(U1, name="alice", meta=None), dict(A1, tool_calls=None)], False, {}),
        ("empty_content", [{"role": "user", "content": ""}], True, {}),
    ]
    if with_system:
        cases += [
            ("system_user_prompt", [SYSTEM, U1], True, {}),
            ("system_multi_turn", [SYSTEM, U1, A1, U2], True, {}),
            ("system_multi_turn_no_prompt", [SYSTEM, U1, A1, U2, A2], False, {}),
        ]
    else:
        cases.append(("system_refused", [SYSTEM, U1], True, {}))
    if "alternating" in families:
        cases.append(("roles_not_alternating", [U1, U2], True, {}))
        cases.append(("assistant_first", [A1, U1], True, {}))
    if "tools" in families:
        cases.append(("tools_defined", [SYSTEM, U1], True, {"tools": [WEATHER_TOOL]}))
        call = {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}
        cases.append(("tool_call_and_response",
                      [U1, call, {"role": "tool", "content": "22.5", "tool_call_id": "abc123xyz"}],
                      True, {"tools": [WEATHER_TOOL]}))
    if "clock" in families:
        cases.append(("date_from_clock", [U1], True, {}))
        cases.append(("date_given", [U1], True, {"date_string": "01 Jan 2025"}))
    if "reasoning" in families:
        cases.append(("reasoning_content", [U1, {"role": "assistant", "content": "Hi.",
                                                 "reasoning_content": "The user greets me."}, U2], True, {}))
        cases.append(("thinking_in_content", [U1, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHi."},
                                              U2], False, {}))
        cases.append(("enable_thinking_false", [U1], True, {"enable_thinking": False}))
    return cases


class FrozenDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN_NOW


def check_versions():
    found = {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
             "tokenizers": tokenizers.__version__}
    if found != PINNED:
        sys.exit(f"generate_chat_templates.py: needs {PINNED}, found {found} "
                 "(tests/golden/requirements-chat.txt)")


def tiny_tokenizer_json(path, special_tokens):
    # The chat template never sees the vocabulary: a one-word vocabulary plus the special
    # tokens is enough for AutoTokenizer to load the folder.
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    tok = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.add_special_tokens(sorted(set(special_tokens)))
    tok.save(path)


def render(folder, special_tokens, messages, add_generation_prompt, extra):
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(folder):
            if f != "cases.json":
                src = os.path.join(folder, f)
                (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(tmp, f))
        tiny_tokenizer_json(os.path.join(tmp, "tokenizer.json"), special_tokens)
        tok = AutoTokenizer.from_pretrained(tmp)
        extra = dict(extra)
        name = extra.pop("__template_name", None)
        try:
            out = tok.apply_chat_template(copy.deepcopy(messages), tokenize=False,
                                          add_generation_prompt=add_generation_prompt,
                                          chat_template=name, **extra)
            return {"expected": out}
        except jinja2.exceptions.TemplateError as e:
            return {"error": str(e)}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def tokenizer_config(special, **template):
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192}
    cfg.update(special)
    cfg.update(template)
    return cfg


def published_templates():
    index = []
    for name, (origin, (path, commit), key, _, special, families) in TEMPLATES.items():
        with open(os.path.join(OUT, "sources", name + ".jinja"), encoding="utf-8", newline="") as f:
            template = f.read()
        digest = hashlib.sha256(template.encode()).hexdigest()
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, "tokenizer_config.json"), tokenizer_config(special, chat_template=template))
        cases = []
        for case_id, messages, agp, extra in conversations(families):
            case = {"id": case_id, "messages": messages, "add_generation_prompt": agp}
            if extra:
                case["variables"] = extra
            case.update(render(folder, special.values(), messages, agp, extra))
            cases.append(case)
        write_json(os.path.join(folder, "cases.json"), cases)
        index.append({"name": name, "origin": origin, "copied_from": f"{HFJS} {path} @ {commit}", "key": key,
                      "sha256": digest, "cases": len(cases),
                      "errors": sum("error" in c for c in cases)})
    return index


def loading_variants():
    """Folders that hold the template the other ways transformers reads it."""
    base = os.path.join(OUT, "sources")
    read = lambda n: open(os.path.join(base, n + ".jinja"), encoding="utf-8", newline="").read()
    variants = []
    # chat_template.jinja beside a tokenizer_config.json without one (transformers >= 4.50 saves this way).
    d = os.path.join(OUT, "layout_jinja_file")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer_config.json"), tokenizer_config(QWEN_TOKENS))
    with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(read("qwen2_5_instruct"))
    variants.append((d, QWEN_TOKENS, None))
    # chat_template.jinja takes priority over tokenizer_config.json's chat_template.
    d = os.path.join(OUT, "layout_jinja_file_wins")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer_config.json"), tokenizer_config(LLAMA2_TOKENS, chat_template=read("zephyr_beta")))
    with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(read("llama2_chat"))
    variants.append((d, LLAMA2_TOKENS, None))
    # A list of named templates in tokenizer_config.json (as Command-R and Hermes ship): "default" unless named.
    d = os.path.join(OUT, "layout_named_list")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer_config.json"), tokenizer_config(
        LLAMA3_TOKENS, chat_template=[{"name": "tool_use", "template": read("llama3_1_instruct")},
                                      {"name": "default", "template": read("llama3_instruct")}]))
    variants.append((d, LLAMA3_TOKENS, None))
    variants.append((d, LLAMA3_TOKENS, "tool_use"))
    # AddedToken objects as special tokens, and extra named tokens (keys ending in _token).
    d = os.path.join(OUT, "layout_added_tokens")
    os.makedirs(d, exist_ok=True)
    added = lambda s: {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": False,
                       "rstrip": False, "single_word": False}
    write_json(os.path.join(d, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": added("<s>"), "eos_token": added("</s>"),
        "unk_token": added("<unk>"), "pad_token": None, "image_token": "<image>",
        "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ image_token }}|"
                         "{{ sep_token is defined }}|{{ messages | length }}{{ eos_token }}"})
    variants.append((d, ["<s>", "</s>", "<unk>", "<image>"], None))
    for d, special, name in variants:
        special_values = special.values() if isinstance(special, dict) else special
        cases = []
        for case_id, messages, agp, extra in [("user_prompt", [U1], True, {}), ("system_multi_turn", [SYSTEM, U1, A1, U2], False, {})]:
            extra = dict(extra)
            if name:
                extra["__template_name"] = name
            case = {"id": case_id + (f"_template_{name}" if name else ""), "messages": messages,
                    "add_generation_prompt": agp}
            if name:
                case["template_name"] = name
            case.update(render(d, special_values, messages, agp, extra))
            cases.append(case)
        path = os.path.join(d, "cases.json")
        old = json.load(open(path)) if name and os.path.exists(path) else []
        write_json(path, [c for c in old if c.get("template_name") != name] + cases)


# One construct each, rendered by transformers' own environment. "vars" are the template's
# variables; "expected" what it printed, or "error" the exception's class.
JINJA_CASES = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("text only\n", {}),
    ("a\n{% if true %}\nb\n{% endif %}\nc", {}),
    ("  {% if true %}x{% endif %}  y", {}),
    ("line\n    {% if true %}\n    yes\n    {% endif %}\nend", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a \n {{- 'x' -}} \n b", {}),
    ("a {{ 'x' }} \n b", {}),
    ("a\n  {# comment #}\nb", {}),
    ("a {#- comment -#} b", {}),
    ("a\n  {%+ if true %}x{% endif %}", {}),
    ("{% if true +%}\nx{% endif %}", {}),
    ("x\r\ny\rz\n", {}),
    ("{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("\t  {% for i in [1,2] %}\n\t{{ i }}\n  {% endfor %}\n", {}),
    ("{%- for i in [1,2] %}\n  {{- i }},\n{%- endfor %}", {}),
    ("x\n\n", {}),
    ("a\u00a0{%- if true %}b{% endif %}", {}),
    # literals and printing
    ("{{ 'a\\n\\t\\u00e9\\x41\\\\' }}|{{ \"d'q\" }}|{{ 'x' 'y' }}", {}),
    ("{{ 1 }} {{ -3 }} {{ 1.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1_000 }} {{ 0x1F }} {{ 1e100 }} {{ 1.23456789012345678 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}", {}),
    ("{{ {'a': 1, 'b': \"it's\", 'c': 'say \"hi\"', 'd': 'both \\' \"'} }}", {}),
    ("{{ (1, 2) }} {{ (1,) }} {{ () }}", {}),
    ("{{ x }}|{{ x.y is defined }}", {}),
    ("{{ 'a\\nb' ~ [1, 'line\\nbreak\\ttab\\\\'] }}", {}),
    ("{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }} {{ 2**0.5 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ 123456789.0 }} {{ -0.0 }}", {}),
    ("{{ f }} {{ big }} {{ small }}", {"f": 3.0, "big": 1.5e300, "small": -2.5e-8}),
    # arithmetic and operators
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }}", {}),
    ("{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * 3 ** 2 }}", {}),
    ("{{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'a' + 'b' }} {{ 1 + 1.5 }} {{ 3 * 'x' }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }}", {}),
    ("{{ 'b' > 'a' }} {{ 'é' > 'z' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }}", {}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not 1 in [1] }}", {}),
    ("{{ true and 'x' }} {{ false or 'y' }} {{ 0 or [] }} {{ not none }} {{ '' and 1 }}", {}),
    ("{{ 'yes' if 1 > 0 else 'no' }} {{ 'yes' if [] else 'no' }} [{{ 'a' if false }}]", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ x + 1 }}", {}),
    # variables, attributes, subscripts, slices
    ("{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m.missing is defined }}", {"m": {"role": "user", "content": "hi"}}),
    ("{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5:] }} {{ l[10] }}|", {"l": [1, 2, 3, 4]}),
    ("{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", {"s": "héllo👋"}),
    ("{{ m.missing.deeper }}", {"m": {}}),
    ("{{ undefined_var.attr }}", {}),
    ("{{ l.0 }} {{ m.items() | list }}", {"l": ["first"], "m": {"b": 1, "a": 2}}),
    ("{{ l[1:3:1] }} {{ l[-2:] }} {{ l[:] }}", {"l": [1, 2, 3, 4]}),
    # statements
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}", {"a": 0, "b": "x"}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }}|{% endfor %}{{ x }}", {}),
    ("{% if true %}{% set z = 5 %}{% endif %}{{ z }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"l": "abc"}),
    ("{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }};{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for k in d %}{{ k }};{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }};{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("{% for x in undefined_list %}x{% endfor %}ok", {}),
    ("{% for x in none %}x{% endfor %}", {}),
    ("{% set a, b = [1, 2] %}{{ b }}{{ a }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("{% generation %}tracked{% endgeneration %} text", {}),
    ("{{ raise_exception('Bad conversation: ' ~ 3) }}", {}),
    ("{% set d = dict(a=1, b='x') %}{{ d }} {{ dict() }}", {}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }}", {}),
    ("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}", {}),
    # tests
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ x is not defined }}", {"x": None}),
    ("{{ none is none }} {{ 0 is none }} {{ 's' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }}", {}),
    ("{{ [] is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ {} is iterable }} {{ [] is sequence }}", {}),
    ("{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is true }} {{ 0 is false }}", {}),
    ("{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 'a' is in 'abc' }}", {}),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ x is sameas none }} {{ x is callable }}", {"x": None}),
    ("{{ 1 is frobnicated }}", {}),
    # filters
    ("[{{ '  a b  ' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ '\\u00a0\\u3000 wide\\u2003' | trim }}]", {}),
    ("{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ 'abc' | count }}", {}),
    ("{{ 'hELLo wORLD' | upper }} {{ 'HeLLo' | lower }} {{ 'hELLo wORLD' | capitalize }} {{ 'hELLo wORLD-x(y' | title }}", {}),
    ("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('z', boolean=true) }}", {}),
    ("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} [{{ [] | first }}]", {}),
    ("{{ [1, 'a', none] | join(', ') }} {{ ['x', 'y'] | join }} {{ l | join('|', attribute='n') }}", {"l": [{"n": 1}, {"n": 2}]}),
    ("{{ 'ab' | list }} {{ {'a': 1} | list }} {{ 42 | string }} {{ '42' | int + 1 }} {{ '1.5' | float }} {{ 'x' | int }} {{ 3.9 | int }}", {}),
    ("{{ {'b': 1, 'a': [1, 2]} | tojson }}", {}),
    ("{{ {'b': 1, 'a': [1, 2], 'e': {}, 'f': []} | tojson(indent=4) }}", {}),
    ("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ 'é\"\\n<>&\\'' | tojson }} {{ 'é' | tojson(ensure_ascii=true) }}", {}),
    ("{{ v | tojson }} {{ v | tojson(indent=2) }} {{ v | tojson(separators=(',', ':')) }}", {"v": {"a": [1, 2.5, None, True, "x\u0001\u007f\u2028"], "b": {"c": 1.0, "d": 1e20}}}),
    ("{{ none | tojson }} {{ 'x' | tojson(indent=0) }} {{ [1, [2]] | tojson(indent=0) }} {{ [1, [2]] | tojson(indent='ab') }}", {}),
    ("{{ v | tojson }}", {"v": "emoji 👋 and \U0001F600 tab\t"}),
    ("{{ x | tojson }}", {}),
    ("{{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }}", {"users": [{"role": "user", "name": "a"}, {"role": "bot", "name": "b"}, {"role": "user", "name": "c"}]}),
    ("{{ users | rejectattr('role', 'eq', 'user') | list | length }} {{ users | selectattr('admin') | list }}", {"users": [{"role": "user", "admin": True}, {"role": "bot"}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ ['a', 'B'] | map('upper') | list }}", {}),
    ("{{ {'b': 1, 'a': 2} | items | list }} {{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 2] | sum }}", {}),
    ("{{ 'a-b-a' | replace('a', 'x') }} {{ 'a-b-a' | replace('a', 'x', 1) }} {{ -3 | abs }} {{ 'x' | safe }}", {}),
    # string methods
    ("[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ 'a\\n'.rstrip('\\n') }}]", {}),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}", {}),
    ("{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' x  y '.split(' ') }} {{ 'a b c'.rsplit(' ', 1) }}", {}),
    ("{{ 'aXbXc'.replace('X', '-') }} {{ 'aXbXc'.replace('X', '', 1) }} {{ 'Abc'.upper() }} {{ 'ÀBC'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}", {}),
    ("{{ 'a<think>b</think>c'.split('</think>')[-1] }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('b') }} {{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("{{ ', '.join(['a', 'b']) }} {{ 'abc'.rfind('c') }} {{ 'ab'.index('b') }} {{ 'Hello'.lower().strip().startswith('h') }}", {}),
    ("{{ 'x'.frobnicate() }}", {}),
    # dict methods
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }}", {"d": {"a": 1, "b": 2}}),
    ("{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}", {"d": {"b": [1], "a": {"x": None}}}),
    # namespace and scoping
    ("{% set ns = namespace(found=false) %}{% for m in l %}{% if m == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}", {"l": [1, 2]}),
    ("{% set ns = namespace() %}{% set ns.a = [1] %}{{ ns.a }}", {}),
    ("{% for i in [1] %}{% set inner = 'x' %}{% endfor %}[{{ inner }}]", {}),
    ("{% set outer = 'o' %}{% for i in [1] %}{{ outer }}{% set outer = 'changed' %}{{ outer }}{% endfor %}{{ outer }}", {}),
    ("{% for m in l %}{% set outer_loop = loop %}{% for c in 'ab' %}{{ outer_loop.index }}{{ loop.index }} {% endfor %}{% endfor %}", {"l": [1, 2]}),
    # syntax errors: the error's class
    ("{% if true %}unclosed", {}),
    ("{% endif %}", {}),
    ("{{ 1 + }}", {}),
    ("{% include 'other.jinja' %}", {}),
    ("{% for %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{# never closed", {}),
    ("{{ foo(1 }}", {}),
]


def jinja_cases():
    original = chat_template_utils.datetime
    chat_template_utils.datetime = FrozenDatetime  # strftime_now reads datetime.now()
    chat_template_utils._compile_jinja_template.cache_clear()
    try:
        out = []
        for template, variables in JINJA_CASES:
            case = {"template": template, "vars": variables}
            try:
                compiled = chat_template_utils._compile_jinja_template(template)
                case["expected"] = compiled.render(**variables)
            except Exception as e:  # the class is what the C++ side checks: it fails as well
                case["error"] = type(e).__name__
                case["message"] = str(e)
            out.append(case)
        return out
    finally:
        chat_template_utils.datetime = original
        chat_template_utils._compile_jinja_template.cache_clear()


def main():
    check_versions()
    chat_template_utils.datetime = FrozenDatetime
    index = published_templates()
    loading_variants()
    write_json(os.path.join(OUT, "index.json"), {"versions": PINNED, "frozen_now": FROZEN_NOW.isoformat(),
                                                 "templates": index})
    write_json(os.path.join(OUT, "jinja_cases.json"), jinja_cases())
    for t in index:
        print(f"{t['name']:22s} {t['cases']:2d} cases ({t['errors']} raise)  sha256 {t['sha256'][:16]}  {t['origin']}")


if __name__ == "__main__":
    main()
