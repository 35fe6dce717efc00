#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets' corpora (tests/fuzz/corpus/<target>/seed_*).

Each seed is a small valid input (plus a few near misses), so the fuzzer starts from the
readers' accepting paths instead of having to discover the formats' magic numbers. Inputs
that crashed a target are kept beside them as crash_* (never rewritten here). Sources: the
repository's configs and golden fixtures (written by transformers and megatron-core), and
inputs built here with the standard library. Run from anywhere, no arguments:
    python3 tests/fuzz/make_seeds.py
The checkpoint_manifest seeds come from the fuzz target itself (FSDP_FUZZ_PRINT_SEED=1), as
they must match the rank file it writes: pass --manifest-from FUZZER to refresh them.
"""

import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def config_yaml():
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        write("config_yaml", name, read(os.path.join("configs", name)))
    write("config_yaml", "full.yaml", read("tests/data/config/full.yaml"))
    write("config_yaml", "overrides.yaml",
          "model:\n  preset: llama3.1_8b\n  rope_scaling_factor: 16\n#set model.num_layers=2\n"
          "#set model.tie_word_embeddings=true\n#set eval.split=train\n")
    write("config_yaml", "anchors.yaml", "base: &b {lr: 1.0e-3}\noptim: *b\ntrain: {max_steps: [1, 2]}\n")


def hf_config_json():
    for d in ("llama_gqa_tiny", "llama3_tied_tiny", "mixtral_tiny"):
        write("hf_config_json", d + ".json", read(f"tests/golden/{d}/config.json"))
    cfg = json.loads(read("tests/golden/llama_gqa_tiny/config.json"))
    cfg["rope_scaling"] = {"type": "linear", "factor": 4.0}
    write("hf_config_json", "linear.json", json.dumps(cfg))


def safetensors_file(tensors, metadata=None):
    """safetensors bytes: u64 header length, JSON header, data (tensors back to back)."""
    header, data = {}, b""
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors():
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, float("inf"), -0.0)
    write("safetensors", "mixed.safetensors", safetensors_file({
        "w": ("F32", [2, 3], f32), "b": ("BF16", [4], struct.pack("<4H", 0x3F80, 0x7F80, 0x0001, 0x8000)),
        "h": ("F16", [2], struct.pack("<2H", 0x3C00, 0x0400)), "ids": ("I64", [2], struct.pack("<2q", 7, -1)),
        "mask": ("BOOL", [3], b"\x01\x00\x01")}, {"format": "pt"}))
    write("safetensors", "scalar_and_empty.safetensors", safetensors_file({
        "s": ("F64", [], struct.pack("<d", 2.5)), "e": ("F32", [0, 3], b""), "i": ("I32", [1], struct.pack("<i", 3))}))
    write("safetensors", "no_tensors.safetensors", safetensors_file({}))
    write("safetensors", "hf_export_expected.safetensors", read("tests/golden/hf_export/expected.safetensors"))


def megatron_idx():
    # The input is a u16 length n, n bytes of .bin, then the .idx (fuzz_megatron_idx.cpp).
    def pack(bin_bytes, idx_bytes):
        return struct.pack("<H", len(bin_bytes)) + bin_bytes + idx_bytes

    prefix = "tests/golden/megatron/sample_text_document"  # written by megatron-core
    write("megatron_idx", "megatron_core.bin_idx", pack(read(prefix + ".bin"), read(prefix + ".idx")))

    def index(code, sizes, elem):
        pointers, p = [], 0
        for s in sizes:
            pointers.append(p)
            p += s * elem
        n = len(sizes)
        return (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, n, n + 1) + struct.pack(f"<{n}i", *sizes) +
                struct.pack(f"<{n}q", *pointers) + struct.pack(f"<{n + 1}q", *range(n + 1)))

    sizes = [3, 0, 4]
    write("megatron_idx", "int32.bin_idx", pack(struct.pack("<7i", 5, 6, 7, 999, 0, 1, 2), index(4, sizes, 4)))
    write("megatron_idx", "uint16.bin_idx", pack(struct.pack("<7H", 5, 6, 7, 999, 0, 1, 2), index(8, sizes, 2)))
    write("megatron_idx", "int64_big_id.bin_idx", pack(struct.pack("<2q", 1, 1 << 40), index(5, [2], 8)))


def prepare_jsonl():
    lines = (json.dumps({"text": "a document, with words"}) + "\n\n" + json.dumps({"input_ids": [1, 2, 31999]}) +
             "\n" + json.dumps({"input_ids": []}) + "\n{not json\n" + json.dumps({"id": 3}) + "\n")
    write("prepare_jsonl", "lines.jsonl", b"\x00" + lines.encode())
    write("prepare_jsonl", "lines.jsonl.gz", b"\x01" + gzip.compress(lines.encode(), mtime=0))
    zst = subprocess.run(["zstd", "-q", "-c", "-3"], input=lines.encode(), stdout=subprocess.PIPE, check=True).stdout
    write("prepare_jsonl", "lines.jsonl.zst", b"\x02" + zst)
    write("prepare_jsonl", "paragraphs.txt", b"\x03first paragraph\nstill the first\n\n \n\nsecond\r\n")


def tokenizer_json():
    """Each golden tokenizer (tests/golden/tokenizers, written by `tokenizers`) cut to its 260
    lowest ids and the merges among them: the same pipelines, small enough to mutate fast."""
    root = os.path.join(ROOT, "tests", "golden", "tokenizers")
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "tokenizer.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        kept = sorted((i, t) for t, i in j["model"]["vocab"].items() if i < 260)
        vocab = {t: new for new, (_, t) in enumerate(kept)}
        merges = []
        for m in j["model"]["merges"]:
            a, b = m.split(" ") if isinstance(m, str) else m
            if a in vocab and b in vocab and a + b in vocab:
                merges.append(m)
        j["model"]["vocab"], j["model"]["merges"] = vocab, merges
        added = []
        for k, a in enumerate(j["added_tokens"]):
            a = dict(a, id=vocab.get(a["content"], len(vocab) + k))
            added.append(a)
        j["added_tokens"] = added
        ids = {a["content"]: a["id"] for a in added}

        def fix(p):
            if not p:
                return
            if p["type"] == "TemplateProcessing":
                for content, v in p["special_tokens"].items():
                    v["ids"] = [ids[content]]
            elif p["type"] == "Sequence":
                for q in p["processors"]:
                    fix(q)
            elif p["type"] in ("BertProcessing", "RobertaProcessing"):
                for key in ("cls", "sep"):
                    p[key][1] = ids.get(p[key][0], vocab.get(p[key][0]))
        fix(j.get("post_processor"))
        write("tokenizer_json", name + ".json", json.dumps(j, ensure_ascii=False, separators=(",", ":")))


def chat_template():
    # The published templates (tests/golden/chat_templates/sources) and every one-construct
    # case of jinja_cases.json: the interpreter's accepting paths and each error path.
    src = os.path.join(ROOT, "tests/golden/chat_templates")
    for name in sorted(os.listdir(os.path.join(src, "sources"))):
        write("chat_template", name, read(os.path.join("tests/golden/chat_templates/sources", name)))
    with open(os.path.join(src, "jinja_cases.json"), encoding="utf-8") as f:
        for i, case in enumerate(json.load(f)):
            write("chat_template", f"case_{i:03d}.jinja", case["template"].encode())


def checkpoint_manifest(fuzzer):
    out = subprocess.run([fuzzer], env=dict(os.environ, FSDP_FUZZ_PRINT_SEED="1"), stdout=subprocess.PIPE,
                         check=True).stdout
    write("checkpoint_manifest", "one_rank.json", out)
    m = json.loads(out)  # the same, the first unit cut into two pieces of one file
    u = m["units"][0]
    half = u["numel"] // 2
    u["pieces"] = [{"file": 0, "begin": 0, "extent": half}, {"file": 0, "begin": half, "extent": u["numel"] - half}]
    write("checkpoint_manifest", "two_pieces.json", json.dumps(m, indent=1))


# Dictionaries (libFuzzer -dict): the formats' keywords and the integers at the edges of
# int32/int64/uint64, which random mutation rarely composes but size arithmetic trips on
# (an extent of 2^63 - 1 overflowed the manifest check until it was found this way).
EDGE_NUMBERS = ["0", "-1", "1", "2147483647", "2147483648", "4294967296", "9223372036854775807",
                "-9223372036854775808", "9223372036854775808", "18446744073709551615", "1e308", "-0.0", "0.5"]
JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "\"", "null", "true", "false"]
DICT_WORDS = {
    "hf_config_json": ["model_type", "llama", "mixtral", "vocab_size", "hidden_size", "intermediate_size",
                       "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                       "max_position_embeddings", "rope_theta", "rms_norm_eps", "rope_scaling", "rope_type", "type",
                       "default", "linear", "llama3", "dynamic", "factor", "low_freq_factor", "high_freq_factor",
                       "original_max_position_embeddings", "tie_word_embeddings", "hidden_act", "silu",
                       "attention_bias", "mlp_bias", "num_local_experts", "num_experts_per_tok",
                       "router_aux_loss_coef", "router_jitter_noise", "sliding_window"],
    "checkpoint_manifest": ["format", "fsdp_train.checkpoint", "format_version", "state", "step", "tokens_seen",
                            "samples_seen", "train_seed", "data_seed", "loss_scale", "model", "strategy",
                            "world_size", "shard_group_size", "files", "name", "bytes", "crc32", "units", "numel",
                            "pieces", "file", "begin", "extent", "config", "rope_scaling", "tie_word_embeddings",
                            "rank_00000.safetensors", "embedding", "layers.0", "head"],
    "safetensors": ["dtype", "shape", "data_offsets", "__metadata__", "F32", "BF16", "F16", "F64", "I64", "I32",
                    "U8", "I8", "BOOL", "F8_E4M3", "U64"],
    "prepare_jsonl": ["text", "input_ids"],
    "tokenizer_json": ["type", "BPE", "Sequence", "Split", "ByteLevel", "Metaspace", "Digits", "Whitespace",
                       "WhitespaceSplit", "NFC", "NFKC", "NFD", "NFKD", "Prepend", "Replace", "Strip",
                       "TemplateProcessing", "BertProcessing", "ByteFallback", "Fuse", "BPEDecoder", "Regex", "String",
                       "pattern", "behavior", "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                       "Contiguous", "invert", "prepend_scheme", "always", "first", "never", "split", "added_tokens",
                       "content", "special", "normalized", "lstrip", "rstrip", "single_word", "byte_fallback",
                       "unk_token", "fuse_unk", "ignore_merges", "continuing_subword_prefix", "end_of_word_suffix",
                       "merges", "vocab", "single", "special_tokens", "SpecialToken", "ids", "\\p{L}", "\\p{N}",
                       "(?i:", "\\s+(?!\\S)", "[^\\s", "<0x0A>", "\u2581"],
    "chat_template": ["{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "for ", " in ", "endfor",
                      "if ", "elif ", "else", "endif", "set ", "endset", "macro ", "endmacro", "filter ",
                      "endfilter", "generation", "endgeneration", "raw", "endraw", "break", "continue",
                      "namespace(", "loop.index0", "loop.first", "loop.last", "messages", "message['role']",
                      "message.content", "add_generation_prompt", "bos_token", "raise_exception(", "tools",
                      "strftime_now(", "range(", "dict(", " is defined", " is none", " is string", " not ",
                      " and ", " or ", "|trim", "|length", "|tojson(indent=4)", "|default(", "|selectattr(",
                      "|map(attribute=", "|join(", "|items", ".strip()", ".split(", ".startswith(", ".get(",
                      ".items()", "[1:]", "[::-1]", " ~ ", " if ", "\\u00e9", "'", "\""],
}


def dictionaries():
    d = os.path.join(HERE, "dict")
    os.makedirs(d, exist_ok=True)
    schema = read("src/config/schema.cpp").decode()
    import re
    yaml_words = sorted(set(re.findall(r'\.add(?:_one_of)?\("([a-z0-9_]+)"', schema)) |
                        set(re.findall(r'SectionRows\(t, "([a-z]+)"', schema)))
    words = dict(DICT_WORDS, config_yaml=yaml_words + [": ", "\n  ", "#set ", "null", "true", "~", "&a", "*a",
                                                       "!!str", "[", "]", "{", "}", "llama3.1_8b", "llama3"])
    for target, extra in words.items():
        tokens = extra + EDGE_NUMBERS + (JSON_TOKENS if target != "config_yaml" else [])
        with open(os.path.join(d, target + ".dict"), "w") as f:
            f.write(f"# libFuzzer dictionary for fuzz_{target}: written by make_seeds.py\n")
            for t in tokens:  # libFuzzer's escapes: \\, \" and \xAB only
                f.write('"' + "".join(c if " " <= c <= "~" and c not in '"\\' else
                                      ("\\" + c if c in '"\\' else f"\\x{ord(c):02x}") for c in t) + '"\n')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest-from", metavar="FUZZER", help="build-fuzz/tests/fuzz_checkpoint_manifest")
    args = parser.parse_args()
    for target in ("config_yaml", "hf_config_json", "safetensors", "megatron_idx", "prepare_jsonl", "tokenizer_json",
                   "chat_template"):
        d = os.path.join(CORPUS, target)
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.startswith("seed_"):
                    os.remove(os.path.join(d, f))
    config_yaml()
    hf_config_json()
    safetensors()
    megatron_idx()
    prepare_jsonl()
    tokenizer_json()
    chat_template()
    dictionaries()
    if args.manifest_from:
        checkpoint_manifest(args.manifest_from)


if __name__ == "__main__":
    main()
