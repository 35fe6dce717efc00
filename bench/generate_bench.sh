#!/usr/bin/env bash
# `fsdp_train generate` decode speed: tokens/s after the prompt (one token per forward pass
# through the KV cache) for the tiny preset, with 1 and with every OpenMP thread, against
# the peer Hugging Face transformers generate() on the same weights and thread count
# (`fsdp_train export` of the same checkpoint; skipped when HF_PYTHON has no transformers).
# Both sample at temperature 0.8 for NEW tokens after the same prompt; the median of REPS runs.
# The model is trained for one step only: speed does not depend on the weights, and a
# near-uniform next-token distribution rarely stops at EOS before NEW tokens.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BUILD_DIR:-$root/build}/fsdp_train"
python="${HF_PYTHON:-/work/venv-golden/bin/python}"
new="${NEW:-400}"
reps="${REPS:-5}"
wait_idle_min="${WAIT_IDLE:-10}"  # minutes to wait for other work to finish before each row
prompt="In the beginning God created the heaven and the earth."
[ -x "$bin" ] || bash "$root/scripts/build.sh"
bash "$root/scripts/demo_corpus.sh" "$bin" > /dev/null  # the 1024-piece demo tokenizer
tok="$root/data/demo/tokenizer.model"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
"$bin" train --config configs/tiny.yaml --set data.source=synthetic --set train.max_steps=1 \
  --set train.eval_every=0 --set run.dir="$work/run" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
"$bin" export --checkpoint "$work/run/checkpoints" --output "$work/hf" --dtype float32 --tokenizer "$tok" \
  > "$work/export.log" 2>&1 || { cat "$work/export.log"; exit 1; }

# Until the CPUs were < 10% busy over 2 s, or WAIT_IDLE minutes passed (as bench/blas/run.sh).
wait_idle() {
  local deadline=$((SECONDS + wait_idle_min * 60)) a b busy
  while true; do
    a=($(head -n 1 /proc/stat)); sleep 2; b=($(head -n 1 /proc/stat))
    busy=$(( ( (b[1]+b[2]+b[3]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[6]+a[7]+a[8]) ) * 100 /
             ( (b[1]+b[2]+b[3]+b[4]+b[5]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[4]+a[5]+a[6]+a[7]+a[8]) + 1 ) ))
    [[ $busy -lt 10 ]] && return 0
    if [[ $SECONDS -ge $deadline ]]; then echo "warning: CPUs still ${busy}% busy with other work; timing anyway" >&2; return 0; fi
    sleep 8
  done
}

# fsdp_train: the decode rate its last log line reports ("then N decode steps in X ms (R tokens/s)").
ours() {  # ours THREADS -> "tokens/s steps"
  local threads="$1" i
  for i in $(seq "$reps"); do
    OMP_NUM_THREADS="$threads" "$bin" generate --checkpoint "$work/run/checkpoints" --tokenizer "$tok" \
      --prompt "$prompt" --max-new-tokens "$new" --seed 1 2>&1 >/dev/null | tail -1 |
      sed -n 's/.*then \([0-9]*\) decode steps in .* (\([0-9.]*\) tokens\/s).*/\2 \1/p'
  done | sort -g | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'
}

# transformers: (NEW - 1) / (time of NEW tokens - time of 1 token), min_new_tokens forcing NEW.
theirs() {  # theirs THREADS -> tokens/s
  "$python" - "$work/hf" "$1" "$new" "$reps" "$(echo "$prompt" | spm_encode --model="$tok" --output_format=id)" <<'EOF' 2>"$work/peer.err"
import sys, time, torch, transformers.generation.utils
from transformers import LlamaForCausalLM
transformers.generation.utils.is_fsdp_managed_module = lambda m: False  # see tests/golden/README.md
path, threads, new, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
model = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
ids = torch.tensor([[model.config.bos_token_id] + [int(i) for i in sys.argv[5].split()]])  # as generate encodes it
def run(n):
    t = time.perf_counter()
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=0.8, top_k=0,
                       max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
    return time.perf_counter() - t
run(new)  # warm-up
rates = sorted((new - 1) / (run(new) - run(1)) for _ in range(reps))
print(f"{rates[len(rates) // 2]:.1f}")
EOF
}

printf "tiny preset (%s), prompt %s, %s new tokens, median of %s runs, %d cores\n\n" \
  "$(grep -o '[0-9.]*M parameters' "$work/train.log" | head -1)" "\"$prompt\"" "$new" "$reps" "$(nproc)"
printf "%-8s %22s %22s %10s\n" threads "fsdp_train tokens/s" "transformers tokens/s" ratio
for threads in 1 "$(nproc)"; do
  wait_idle
  read -r rate steps <<< "$(ours "$threads")"
  wait_idle
  peer=$(theirs "$threads" || true)
  [ -n "$peer" ] || echo "transformers run failed: $(tail -n 1 "$work/peer.err")" >&2
  if [ -n "$peer" ]; then
    awk -v t="$threads" -v r="$rate" -v p="$peer" -v s="$steps" \
      'BEGIN { printf "%-8s %15.0f (%3d) %22.0f %9.1fx\n", t, r, s, p, r / p }'
  else
    awk -v t="$threads" -v r="$rate" -v s="$steps" 'BEGIN { printf "%-8s %15.0f (%3d) %22s %10s\n", t, r, s, "-", "-" }'
  fi
done
