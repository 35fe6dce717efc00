#!/usr/bin/env bash
# Tokenizer encoding throughput against Hugging Face `tokenizers` (Rust) on the same lines and
# threads: our tokens/s over theirs, at 1 thread and at every core, for
#   llama3_32k      a Llama 3-style tokenizer.json (Llama 3's Split regex + ByteLevel, its
#                   special tokens, ignore_merges) trained here by `tokenizers` to 32k ids on
#                   the corpus, a realistic vocabulary and merge table size
#   llama2_legacy   the Llama 2 layout of tests/golden/tokenizers (Prepend + Replace,
#                   byte fallback), and our sentencepiece path on its tokenizer.model
# Corpus: the King James Bible (scripts/kjv_text.sh; Debian's bible-kjv) plus the golden
# tokenizer corpus's Korean, Chinese, Arabic, emoji and code lines repeated to ~10% of it.
# Needs python3 with tokenizers==0.21.0 (TOKENIZERS_PYTHON, default /tmp/venv-tok/bin/python;
# tests/golden/generate_tokenizers.py says how to make it); without it only our side runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
bench="$build/bench/tokenizer_bench"
py="${TOKENIZERS_PYTHON:-/tmp/venv-tok/bin/python}"
[ -x "$bench" ] || cmake --build "$build" --target tokenizer_bench -j"$(nproc)" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v bible >/dev/null || { echo "needs Debian's bible-kjv (apt-get install bible-kjv)"; exit 2; }
bash "$root/scripts/kjv_text.sh" Gen1:1-Rev22:21 31102 | grep -v '^$' > "$work/corpus.txt"
python3 - "$root/tests/golden/tokenizers/cases.json" "$work/corpus.txt" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
extra = [bytes.fromhex(c["hex"]).decode("utf-8", "replace").replace("\n", " ").replace("\r", " ")
         for c in cases if c["name"] in ("korean", "chinese", "arabic", "emoji_zwj", "code_tabs", "unicode_forms")]
size = sum(len(l) for l in open(sys.argv[2], encoding="utf-8"))
with open(sys.argv[2], "a", encoding="utf-8") as f:
    written = 0
    while written < size // 10:
        for l in extra:
            f.write(l + "\n")
            written += len(l.encode())
PY
mb=$(awk -v b="$(stat -c %s "$work/corpus.txt")" 'BEGIN { printf "%.1f", b / 1e6 }')

have_peer=0
if "$py" -c 'import tokenizers; assert tokenizers.__version__ == "0.21.0"' 2>/dev/null; then
  have_peer=1
  "$py" - "$work/corpus.txt" "$work/llama3_32k" <<'PY'
import os, sys
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
tok = Tokenizer(models.BPE(ignore_merges=True))
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train([sys.argv[1]], trainers.BpeTrainer(vocab_size=32000, show_progress=False,
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in
                        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]])
os.makedirs(sys.argv[2], exist_ok=True)
tok.save(os.path.join(sys.argv[2], "tokenizer.json"))
PY
else
  echo "(no python3 with tokenizers==0.21.0 at $py: our side only, and no 32k tokenizer)"
fi

threads_all=$(nproc)
printf "corpus: %s MB, %s lines; %d cores\n\n" "$mb" "$(wc -l < "$work/corpus.txt")" "$threads_all"
printf "%-40s %7s %10s %14s %12s\n" tokenizer threads "MB/s" "tokens equal" "vs tokenizers"
field() { sed -E "s/.*\"$1\": ([0-9.]+).*/\1/"; }
row() {  # name file threads peer_file
  local ours theirs ratio equal="-"
  ours=$("$bench" --tokenizer "$2" --input "$work/corpus.txt" --threads "$3")
  ratio="-"
  if [ "$have_peer" = 1 ] && [ -n "$4" ]; then
    theirs=$("$py" "$root/bench/tokenizer_peer.py" "$4" "$work/corpus.txt" "$3")
    ratio=$(awk -v a="$(field mb_per_s <<<"$ours")" -v b="$(field mb_per_s <<<"$theirs")" 'BEGIN { printf "%.2fx", a / b }')
    [ "$(field tokens <<<"$ours")" = "$(field tokens <<<"$theirs")" ] && equal=yes || equal=NO
  fi
  printf "%-40s %7s %10.2f %14s %12s\n" "$1" "$3" "$(field mb_per_s <<<"$ours")" "$equal" "$ratio"
}
golden="$root/tests/golden/tokenizers"
for t in 1 "$threads_all"; do
  [ "$have_peer" = 1 ] && row "llama3_32k tokenizer.json" "$work/llama3_32k/tokenizer.json" "$t" "$work/llama3_32k/tokenizer.json"
  row "llama2_legacy tokenizer.json" "$golden/llama2_legacy/tokenizer.json" "$t" "$golden/llama2_legacy/tokenizer.json"
  row "llama2_legacy tokenizer.model (spm)" "$golden/llama2_legacy/tokenizer.model" "$t" ""
done
echo
echo "tokens equal: the same total token count on the corpus as tokenizers (ids: tests/cpu/test_hf_tokenizer.cpp)"
