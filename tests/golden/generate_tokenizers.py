#!/usr/bin/env python3
"""Golden fixtures for the tokenizer.json pipeline (src/data/hf/): tokenizers of the shapes real
models ship, trained small on Genesis plus multilingual text, and what Hugging Face `tokenizers`
makes of a test corpus with each of them. CI reads the committed files; it runs no Python.

Pinned (tests/golden/README.md, "Tokenizers"): tokenizers==0.21.0, transformers==4.47.1 (its
LlamaConverter writes the Llama 2 files; its apply_chat_template the chat cases),
sentencepiece==0.2.0, protobuf==5.29.3, jinja2==3.1.6.

  python3 -m venv /tmp/venv-tok
  /tmp/venv-tok/bin/pip install tokenizers==0.21.0 transformers==4.47.1 sentencepiece==0.2.0 protobuf==5.29.3 \
      jinja2==3.1.6
  /tmp/venv-tok/bin/python tests/golden/generate_tokenizers.py   # from the repository root

Each folder tests/golden/tokenizers/<name>/ holds tokenizer.json (and tokenizer_config.json,
tokenizer.model where the model ships them); cases.json holds every input (as hex: some are
not valid UTF-8) and, per tokenizer:
  ids          encode(text)                          tokenizers' default: the post-processor's
                                                     special tokens, special tokens in the text parsed
  plain        encode(text, add_special_tokens=False) with encode_special_tokens=True: what
                                                     fsdp_train's Tokenizer::encode gives (pieces only)
  parsed       encode(text, add_special_tokens=False) (special tokens in the text parsed)
  decoded      decode(ids)                           skip_special_tokens=True
  decoded_all  decode(ids, skip_special_tokens=False)
Python sees text, not bytes: an input that is not valid UTF-8 is decoded with errors="replace"
(each maximal ill-formed subpart -> U+FFFD) before tokenizers sees it, which is what the C++
side does to bytes.
"""
import json
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

assert tokenizers.__version__ == "0.21.0", tokenizers.__version__
assert transformers.__version__ == "4.47.1", transformers.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we've 1234567 items, they'll see.",
    "대한민국의 수도는 서울입니다. 한국어 문장을 토큰화합니다. 안녕하세요, 반갑습니다!",
    "北京是中华人民共和国的首都。我们正在测试分词器，包括标点符号和数字１２３。",
    "مرحبا بالعالم. هذه جملة عربية لاختبار المقسم، مع أرقام ١٢٣ وعلامات ترقيم؟",
    "Emoji: 😀👍🏽👩‍👩‍👧‍👦🏳️‍🌈 and flags 🇰🇷🇯🇵, keycap 1️⃣, ZWJ sequences.",
    "def f(x):\n\treturn x  +  1   # comment\n\n\n    if x >= 10:\n        print('ten')\r\n",
    "Ünïcödé çåsé: Straße, naïve café, ǅ, ﬁ ligature, Ａ full-width, ＡＢＣ.",
]

# The test corpus: (name, bytes).
CASES = [
    ("empty", b""),
    ("space", b" "),
    ("spaces", b"     "),
    ("newline", b"\n"),
    ("hello", b"Hello world"),
    ("leading_spaces", b"   Hello   world  "),
    ("contractions", b"I'm here, you're there, it's HIS, they'LL, we'Ve, she'D"),
    ("english", "In the beginning God created the heaven and the earth.".encode()),
    ("digits", b"12 123 1234 12345 3.14159 1,000,000 007"),
    ("korean", MULTILINGUAL[1].encode()),
    ("chinese", MULTILINGUAL[2].encode()),
    ("arabic", MULTILINGUAL[3].encode()),
    ("emoji_zwj", MULTILINGUAL[4].encode()),
    ("code_tabs", MULTILINGUAL[5].encode()),
    ("long_whitespace", b"a" + b" " * 40 + b"b\t\t\t\tc\n\n\n\n\nd" + b" " * 7 + b"\n"),
    ("crlf", b"line one\r\nline two\r\n\r\nline four\r"),
    ("nul", b"before\x00after \x00\x00 end"),
    ("unicode_forms", MULTILINGUAL[6].encode()),
    ("combining", "e\u0301 a\u0308 \u1100\u1161\u11a8 Ω Å".encode()),
    ("spaces_unicode", "a\u00a0b\u2003c\u3000d\u180ee\u200bf\u2028g\u0085h".encode()),
    ("invalid_lone_continuation", b"abc\x80def"),
    ("invalid_truncated", b"caf\xc3 and \xe2\x82 and \xf0\x9f\x98"),
    ("invalid_overlong", b"\xc0\xaf \xe0\x80\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xff\xfe"),
    ("special_text", b"<|begin_of_text|>Hi<|eot_id|> <s>Hello</s> <|endoftext|>x <|im_start|>"),
    ("special_partial", b"<|begin_of_tex <|eot_id| <|<|eot_id|>|>"),
    ("added_words", b"Say [ANSWER] and foo [ANSWER]bar  [ANSWER]  <mark> x<mark>y"),
    ("long_word", ("supercalifragilisticexpialidocious" * 4).encode()),
    ("repeated", b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa abababababababab"),
    ("punct_runs", b"!!!??? ... --- *** ;;; ::: \"quoted\" 'single' (paren) [brack] {brace}"),
    ("bible", None),  # filled with a Genesis paragraph below
]


def genesis():
    text = subprocess.run(["bash", os.path.join(ROOT, "scripts", "kjv_text.sh"), "Gen1:1-Gen50:26", "1533"],
                          check=True, capture_output=True, text=True).stdout
    return text


def train_bytelevel(corpus, vocab_size, pattern, specials_after, nfc=False, ignore_merges=True):
    """A byte-level BPE with a Split(pattern) + ByteLevel pre-tokenizer (Llama 3, Qwen2)."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials_after])
    return tok


def llama3_style(corpus):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    tok = train_bytelevel(corpus, 3000, LLAMA3_PATTERN, specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def qwen2_style(corpus):
    tok = train_bytelevel(corpus, 2500, QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], nfc=True,
                          ignore_merges=False)
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    return tok, config


def gpt2_style(corpus):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    return tok, config


def misc_style(corpus):
    """Everything else the C++ side implements: Metaspace with split and prepend always,
    individual digits, an unk token with fuse_unk (no byte fallback), NFKC, Strip, added
    normal tokens with single_word / lstrip / rstrip, BERT-style post-processing."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(left=False, right=True),
                                           normalizers.Replace(Regex(r"\s{3,}"), "   ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                                          split=True)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "[CLS]", "[SEP]"], show_progress=False,
                                  limit_alphabet=120)
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken("[ANSWER]", single_word=True, lstrip=True, rstrip=True),
                    AddedToken("<mark>", normalized=False)])
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok, None


def llama2_models(corpus, workdir):
    """A Llama 2 style sentencepiece model (BPE, byte fallback, split digits, identity
    normalization) and its tokenizer.json as transformers converts it, legacy (Prepend + Replace
    normalizer, the files meta-llama ships) and not (Metaspace pre-tokenizer)."""
    with open(os.path.join(workdir, "corpus.txt"), "w", encoding="utf-8") as f:
        for line in corpus:
            f.write(line.replace("\r", " ") + "\n")
    # Relative names from inside the work folder: the model records its trainer's arguments,
    # and a temporary folder's name would make its bytes differ on every run.
    cwd = os.getcwd()
    os.chdir(workdir)
    spm.SentencePieceTrainer.train(
        input="corpus.txt", model_prefix="llama2", model_type="bpe", vocab_size=2000, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, character_coverage=0.9995, num_threads=1, seed_sentencepiece_size=100000,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    os.chdir(cwd)
    prefix = os.path.join(workdir, "llama2")
    out = {}
    for name, legacy in [("llama2_legacy", True), ("llama2_metaspace", False)]:
        # add_prefix_space=True as Llama 2's sentencepiece model does (add_dummy_prefix); left
        # unset, transformers 4.47.1 converts without any prefix space.
        slow = transformers.LlamaTokenizer(vocab_file=prefix + ".model", legacy=legacy, add_prefix_space=True)
        fast = transformers.LlamaTokenizerFast(vocab_file=prefix + ".model", legacy=legacy, from_slow=True,
                                               add_prefix_space=True)
        assert slow.legacy == legacy
        out[name] = (fast.backend_tokenizer, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                              "legacy": legacy, "tokenizer_class": "LlamaTokenizer"})
    with open(prefix + ".model", "rb") as f:
        model_bytes = f.read()
    return out, model_bytes


# Conversations for the chat fixtures: a tokenizer folder with a published chat template
# (tests/golden/chat_templates/sources), rendered and tokenized by transformers'
# apply_chat_template(tokenize=True), which is what `fsdp_train tokenize --chat` must print.
CONVERSATIONS = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}], True),
    ([{"role": "user", "content": "  leading spaces\nand a newline <|eot_id|> in text"},
      {"role": "assistant", "content": "한국어 답변 😀"}], False),
]
CHAT_FOLDERS = [("llama3_chat", "llama3_style", "llama3_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
                ("qwen2_chat", "qwen2_style", "qwen2_instruct.jinja", None, "<|im_end|>")]


def chat_fixtures():
    out = []
    for folder, tok_name, template, bos, eos in CHAT_FOLDERS:
        d = os.path.join(OUT, folder)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(OUT, tok_name, "tokenizer.json"), encoding="utf-8") as f:
            tok_json = f.read()
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tok_json)
        with open(os.path.join(ROOT, "tests/golden/chat_templates/sources", template), encoding="utf-8") as f:
            source = f.read()
        config = {"bos_token": bos, "eos_token": eos, "chat_template": source,
                  "tokenizer_class": "PreTrainedTokenizerFast"}
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
        fast = transformers.PreTrainedTokenizerFast.from_pretrained(d)
        for messages, gen in CONVERSATIONS:
            out.append({"folder": folder, "messages": messages, "add_generation_prompt": gen,
                        "text": fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen),
                        "ids": fast.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen)})
    return out


def expectations(tok, data):
    text = data.decode("utf-8", errors="replace")
    tok.encode_special_tokens = False
    ids = tok.encode(text).ids
    parsed = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = True
    plain = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return {"ids": ids, "plain": plain, "parsed": parsed, "decoded": tok.decode(ids),
            "decoded_all": tok.decode(ids, skip_special_tokens=False)}


def main():
    bible = genesis()
    paragraphs = [p for p in bible.split("\n") if p.strip()]
    corpus = paragraphs + MULTILINGUAL * 20
    cases = [(n, d if d is not None else paragraphs[20].encode()) for n, d in CASES]

    built = {}
    built["llama3_style"] = llama3_style(corpus)
    built["qwen2_style"] = qwen2_style(corpus)
    built["gpt2_style"] = gpt2_style(corpus)
    built["misc_style"] = misc_style(corpus)
    with tempfile.TemporaryDirectory() as work:
        llama2, model_bytes = llama2_models(corpus, work)
    built.update(llama2)

    os.makedirs(OUT, exist_ok=True)
    result = {"generator": "tests/golden/generate_tokenizers.py",
              "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                           "sentencepiece": spm.__version__},
              "tokenizers": sorted(built), "cases": []}
    for name, (tok, config) in sorted(built.items()):
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"), pretty=True)
        if config is not None:
            with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2, ensure_ascii=False)
                f.write("\n")
        if name.startswith("llama2"):
            with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
                f.write(model_bytes)
        # Reload from the saved file: the fixture is what the file says, not the object in memory.
        built[name] = (Tokenizer.from_file(os.path.join(folder, "tokenizer.json")), config)
    result["chat"] = chat_fixtures()
    for case_name, data in cases:
        entry = {"name": case_name, "hex": data.hex()}
        for name, (tok, _) in sorted(built.items()):
            entry[name] = expectations(tok, data)
        result["cases"].append(entry)
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(built)} tokenizers and {len(cases)} cases to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
