#!/usr/bin/env python3
"""The peer of bench/tokenizer_bench.cpp: Hugging Face `tokenizers` (Rust) encoding the same
lines with the same number of threads (encode_batch over every line, RAYON_NUM_THREADS threads; with
one thread TOKENIZERS_PARALLELISM=false), add_special_tokens=False and special
tokens in the text left as text, as fsdp_train's Tokenizer::encode. Prints one JSON line like
the C++ bench.  usage: tokenizer_peer.py TOKENIZER_JSON INPUT THREADS [REPEAT]"""
import json
import os
import sys
import time

threads = int(sys.argv[3])
os.environ["RAYON_NUM_THREADS"] = str(threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
import tokenizers  # noqa: E402  (after the thread count is set)

tok = tokenizers.Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
with open(sys.argv[2], "rb") as f:
    raw = f.read().split(b"\n")
if raw and raw[-1] == b"":
    raw.pop()
lines = [l.decode("utf-8", errors="replace") for l in raw]
nbytes = sum(len(l) for l in raw)
repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
best, tokens = float("inf"), 0
for _ in range(repeat):
    t0 = time.perf_counter()
    encs = tok.encode_batch(lines, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
    tokens = sum(len(e.ids) for e in encs)
print(json.dumps({"threads": threads, "lines": len(lines), "bytes": nbytes, "tokens": tokens, "seconds": round(best, 4),
                  "mb_per_s": round(nbytes / 1e6 / best, 3), "tokenizers": tokenizers.__version__}))
