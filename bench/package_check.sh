#!/usr/bin/env bash
# check.sh of the relocatable GPU package (scripts/package.sh copies this file there; bench/
# gpu_check.sh --package DIR runs it): the first minutes on a GPU node, in one bounded command.
# Six steps, each under its own timeout, all within a budget (8 minutes by default), writing as
# they go into one output directory a summary.txt and six logs, each capped (16 MiB), so that
# whatever is cut short leaves the steps before it reported:
#
#   1 device     the GPU, driver, the CUDA libraries fsdp_train found, the package's commit
#   2 tests      every `gpu` test binary: passed / failed / skipped, each failure's first lines
#   3 sanitizer  compute-sanitizer --tool memcheck over the op tests (CudaOps.*), errors counted
#   4 bench      gpu_step_bench, Llama 2 7B's layer (8 of 32) and Mixtral 8x7B's (2 of 32),
#                bf16: ms/step, tokens/s, MFU, peak memory; each beside its roofline bound
#   5 torch      the same shapes in PyTorch on the same GPU (bench/torch_peer_gpu.py): our
#                tokens/s over theirs per shape; skipped with a line where there is no torch
#   6 train      fsdp_train on the GPU: the 7B-shaped config (2 layers) on synthetic data, 30
#                steps uninterrupted, and 20 + a resume to 30; the last metrics line and whether
#                the resumed losses equal the uninterrupted ones bit for bit
#
#   ./check.sh                      # on a GPU node, from the unpacked package
#   ./check.sh --out /scratch/gpucheck-$(hostname)
#   bash bench/package_check.sh --emulated build-emu --out /tmp/c   # the same flow on the CUDA
#                                   # emulator build (no GPU: tiny shapes, no figure is a GPU's)
#
# Options: --out DIR (default ./gpu-check-<host>-<UTC time>), --budget SECONDS (480),
#   --emulated BUILD_DIR, --timeout STEP=SECONDS (a step's own limit), --log-cap BYTES
#   (16 MiB), --gtest-filter PATTERN (the tests step), --inject-hang STEP (tests of this
#   script: that step hangs, so its timeout is seen to end it).
# Exit status: 0 when every step passed (a skip with its reason counts as passed), 1 when a step
# failed or timed out, 2 when there is no GPU (nothing is run) or the command line is wrong.
set -uo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
steps=(device tests sanitizer bench torch train)
declare -A limit=([device]=20 [tests]=110 [sanitizer]=70 [bench]=80 [torch]=80 [train]=110)

out="" budget=480 emulated="" log_cap=$((16 << 20)) gtest_filter="" inject=""
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --emulated) emulated="${2:?--emulated needs the emulation build directory}"; shift 2 ;;
    --timeout)
      [[ "${2:-}" =~ ^([a-z]+)=([0-9]+)$ ]] && [ -n "${limit[${BASH_REMATCH[1]}]:-}" ] ||
        { echo "check.sh: --timeout takes STEP=SECONDS, STEP one of: ${steps[*]}" >&2; exit 2; }
      limit[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}; shift 2 ;;
    --log-cap) log_cap="${2:?--log-cap needs bytes}"; shift 2 ;;
    --gtest-filter) gtest_filter="${2:?--gtest-filter needs a pattern}"; shift 2 ;;
    --inject-hang) inject="${2:?--inject-hang needs a step}"; shift 2 ;;
    --run-step) step_mode="$2"; shift 2 ;;  # internal: one step, in a child under its timeout
    --gtest-summary) gtest_summary="$2"; shift 2 ;;  # internal (tests): the tests step's lines for a gtest log
    -h|--help) usage ;;
    *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ && "$log_cap" =~ ^[0-9]+$ ]] || { echo "check.sh: --budget and --log-cap take whole numbers" >&2; exit 2; }

# ---- where things are: the package, or the emulation build and its source tree ----
if [ -n "$emulated" ]; then
  emulated="$(cd "$emulated" 2>/dev/null && pwd)" || { echo "check.sh: --emulated: no directory $emulated" >&2; exit 2; }
  src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$emulated/CMakeCache.txt" 2>/dev/null)"
  grep -q '^FSDP_CUDA_EMULATION:BOOL=ON' "$emulated/CMakeCache.txt" 2>/dev/null && [ -d "$src" ] ||
    { echo "check.sh: --emulated $emulated is not a CUDA emulation build (FSDP_CUDA_EMULATION=ON)" >&2; exit 2; }
  bin_train="$emulated/fsdp_train" bin_tests="$emulated/tests/fsdp_tests_cuda"
  bin_tests_mpi="$emulated/tests/fsdp_tests_cuda_mpi" bin_bench="$emulated/bench/gpu_step_bench"
  configs="$src/configs" peer="$src/bench/torch_peer_gpu.py" roofline="$src/bench/roofline/roofline.sh"
  package="emulation build $emulated (source $src, commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  export FSDP_EMU_DEVICE_COUNT="${FSDP_EMU_DEVICE_COUNT:-1}" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
else
  bin_train="$here/bin/fsdp_train" bin_tests="$here/bin/fsdp_tests_cuda"
  bin_tests_mpi="$here/bin/fsdp_tests_cuda_mpi" bin_bench="$here/bin/gpu_step_bench"
  configs="$here/configs" peer="$here/bench/torch_peer_gpu.py" roofline="$here/bench/roofline/roofline.sh"
  package="$(basename "$here") ($(sed -n 's/^commit: //p' "$here/MANIFEST.txt" 2>/dev/null | head -1 || true))"
fi

# ---- one step, run as a child of this script (--run-step NAME) ----
# Writes its log (capped) and, last, its summary text to $out/.NAME.result.
cap_append() {  # appends stdin to log $1, keeping the whole log within the cap (one note when it fills)
  local log="$1" have room rest
  have=$(stat -c %s "$log" 2>/dev/null || echo 0)
  room=$(( log_cap - 256 - have ))
  if [ "$room" -le 0 ]; then cat >/dev/null; return 0; fi  # full, and said so already
  { head -c "$room" >>"$log"; rest=$(wc -c); [ "$rest" -gt 0 ] &&
      printf '\n[check.sh: %s more bytes of output not kept, and nothing after them: each log is capped at %s bytes]\n' \
        "$rest" "$log_cap" >>"$log"; } || true
}
note() { echo "$*" >>"$result"; }
run() {  # run cmd...: its output into the step's log (capped) and, whole, into $full for the
         # step to read (a capped log may have lost the lines it counts); returns its status
  echo "\$ $*" | cap_append "$log"
  "$@" 2>&1 | tee -a "$full" | cap_append "$log"
  return "${PIPESTATUS[0]}"
}
first_failure_lines() {  # gtest: each failed test's name and the first lines of its message
  awk '/^\[ RUN      \]/ { name=$4; n=0; buf=""; next }
       /^\[       OK \]|^\[  SKIPPED \]|^\[==========\]|^\[----------\]/ { name=""; next }
       /^\[  FAILED  \]/ && name != "" { printf "    FAILED %s: %s\n", name, buf; name=""; next }
       name != "" && n < 3 && NF { gsub(/^ +/, ""); buf = buf (n ? " | " : "") substr($0, 1, 160); n++ }' "$1" | head -20
}
gtest_counts() {  # "N passed, N failed, N skipped" from a gtest log
  local p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$1" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -1)
  echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
}
roofline_bound() {  # the roofline's step and MFU bound for a bench case on this device
  local env=(RANKS=1 SEQ=4096 MICRO_BATCH=1)
  case "$1" in
    llama2-7b-8L) env+=(LAYERS=8) ;;
    mixtral-8x7b-2L) env+=(LAYERS=2 EXPERTS=8 TOPK=2 INTER=14336 KV_HEADS=8) ;;
    *) echo "no roofline for case $1"; return ;;
  esac
  case "${device_name:-}" in *H200*) env+=(HBM_TBS=4.8) ;; esac
  env "${env[@]}" bash "$roofline" 2>/dev/null |
    awk '/^step bound:/ { sub(/ with communication.*/, ""); sub(/^step bound: /, ""); b=$0 }
         /^MFU bound:/ { m=$3 } END { printf "roofline: %s/step, MFU <= %s", b, m }'
}

step_device() {
  if [ -n "$emulated" ]; then
    note "emulated: the CUDA emulator build stands in for the device (kernels run on the CPU; no figure here is a GPU's)"
  else
    run nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader
    run nvidia-smi
    note "$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -1 |
            awk -F', ' '{printf "GPU %s, %s, driver %s, compute capability %s", $1, $2, $3, $4}')$(
            n=$(nvidia-smi -L | wc -l); [ "$n" -gt 1 ] && echo " (and $((n - 1)) more)")"
  fi
  run "$bin_train" --version || { note "fsdp_train --version failed (see device.log)"; return 1; }
  note "$("$bin_train" --version 2>&1 | sed -n 2p)"
  note "package: $package"
  [ -f "$here/MANIFEST.txt" ] && [ -z "$emulated" ] && run cat "$here/MANIFEST.txt"
  local py; py=$(command -v python3 || true)
  note "python3: ${py:-none}$( [ -n "$py" ] && "$py" -c 'import torch, transformers; print(f"; torch {torch.__version__}, transformers {transformers.__version__}")' 2>/dev/null)"
  if [ -z "$emulated" ] && "$bin_train" --version 2>&1 | grep -q 'not found'; then
    note "a CUDA library is missing: point FSDP_CUDA_LIBS at its folder (the line above says where it looked)"
    return 1
  fi
}

step_tests() {
  local status=0 filter=()
  [ -n "$gtest_filter" ] && filter=(--gtest_filter="$gtest_filter")
  run "$bin_tests" "${filter[@]}" || status=1
  note "fsdp_tests_cuda: $(gtest_counts "$full")"
  first_failure_lines "$full" >>"$result"
  # The NCCL and trainer tests need MPI (their main initialises it): Debian's OpenMPI, which the
  # package's libmpi was built with, or the emulation build's mpiexec.
  local mpi=()
  if [ -n "$emulated" ] && command -v mpiexec >/dev/null; then
    mpi=(mpiexec --allow-run-as-root --oversubscribe -n 1)
  elif [ ! -d /usr/lib/x86_64-linux-gnu/openmpi/lib ] || [ ! -x "$bin_tests_mpi" ]; then
    mpi=(none)
  fi
  if [ "${mpi[0]:-}" != none ]; then
    : >"$full"
    run "${mpi[@]}" "$bin_tests_mpi" "${filter[@]}" || status=1
    note "fsdp_tests_cuda_mpi (1 rank): $(gtest_counts "$full")"
    first_failure_lines "$full" >>"$result"
  else
    note "fsdp_tests_cuda_mpi: not run (it needs OpenMPI 4.1's runtime, not on this node; step 6 trains on the GPU without MPI)"
  fi
  return "$status"
}

step_sanitizer() {
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$emulated" ]; then
    note "not run in --emulated mode: the emulation build runs every kernel under AddressSanitizer instead (scripts/test.sh)"
    return 0
  fi
  [ -n "$cs" ] || { note "not run: compute-sanitizer not found (it ships with the CUDA toolkit: /usr/local/cuda/bin)"; return 0; }
  run "$cs" --tool memcheck --print-limit 20 "$bin_tests" --gtest_filter="${gtest_filter:-CudaOps.*}"
  local rc=$? errors
  errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$full" | tail -1)
  note "compute-sanitizer memcheck over $(gtest_counts "$full" | cut -d, -f1) op test(s): ${errors:-?} error(s)"
  grep -m 5 '^========= [A-Z]' "$full" | grep -v 'ERROR SUMMARY' | sed 's/^/    /' >>"$result"
  [ "${errors:-1}" = 0 ] && [ "$rc" -eq 0 ]
}

step_bench() {
  local args=(--case llama2-7b-8L --case mixtral-8x7b-2L --steps 10)
  [ -n "$emulated" ] && args=(--smoke)
  run "$bin_bench" "${args[@]}"
  local rc=$?
  # Each case's summary row: case, ms/step, tokens/s, peak memory, MFU.
  awk '/^case +ms\/step/ { getline; print }' "$full" | while read -r name ms tps rest; do
    echo "$name $ms $tps" >>"$out/.bench_rows"
    note "$name: $ms ms/step, $tps tokens/s, peak ${rest%%)*}), MFU ${rest##*) }; $(roofline_bound "$name")"
  done
  grep -m 3 'failed:' "$full" | sed 's/^/    /' >>"$result"
  [ "$rc" -eq 0 ]
}

step_torch() {
  local py; py=$(command -v python3 || true)
  [ -n "$py" ] || { note "skipped: no python3 on this node"; return 0; }
  local args=(--case llama2-7b-8L --case mixtral-8x7b-2L --steps 10)
  [ -n "$emulated" ] && args=(--case tiny --steps 2 --device cpu)
  run "$py" "$peer" "${args[@]}"
  local rc=$?
  if grep -q '^torch_peer_gpu: skipped' "$full"; then
    note "$(grep -m1 '^torch_peer_gpu: skipped' "$full" | sed 's/^torch_peer_gpu: //')"
    return 0
  fi
  note "$(grep -m1 '^versions:' "$full")"
  grep '^peer ' "$full" | while read -r _ name ms tps _; do
    local ours; ours=$(awk -v n="$name" '$1 == n { print $3 }' "$out/.bench_rows" 2>/dev/null)
    note "$name: PyTorch $tps tokens/s ($ms ms/step)$( [ -n "$ours" ] && awk -v a="$ours" -v b="$tps" 'BEGIN { if (b > 0) printf "; ours/theirs %.2fx", a / b }')"
  done
  grep '^peer-failed' "$full" | sed 's/^peer-failed /    failed: /' >>"$result"
  [ "$rc" -eq 0 ]
}

step_train() {
  local runs="$out/.train" cfg sets
  rm -rf "$runs"; mkdir -p "$runs"
  if [ -n "$emulated" ]; then
    cfg="$configs/tiny.yaml"
    sets=(--set model.num_layers=2 --set train.seq_len=32 --set train.micro_batch_size=2 --set train.grad_accum_steps=1)
  else
    cfg="$configs/llama2_7b.yaml"
    sets=(--set model.num_layers=2 --set train.seq_len=4096 --set train.micro_batch_size=1
          --set train.grad_accum_steps=1)
  fi
  sets+=(--set data.source=synthetic --set train.device=cuda --set train.log_every=1 --set train.eval_every=0
         --set checkpoint.keep_last=1 --set checkpoint.resume=auto)
  local total=30 cut=20
  [ -n "$emulated" ] && total=6 cut=3
  run "$bin_train" train --config "$cfg" "${sets[@]}" --set run.dir="$runs/whole" --set train.max_steps=$total \
    --set checkpoint.interval=0 || { note "the uninterrupted run failed (see train.log)"; return 1; }
  run "$bin_train" train --config "$cfg" "${sets[@]}" --set run.dir="$runs/resumed" --set train.max_steps=$cut \
    --set checkpoint.interval=0 || { note "the run to step $cut failed (see train.log)"; return 1; }
  run "$bin_train" train --config "$cfg" "${sets[@]}" --set run.dir="$runs/resumed" --set train.max_steps=$total \
    --set checkpoint.interval=0 || { note "the resume from step $cut failed (see train.log)"; return 1; }
  note "last line: $(grep -E '^\[.*\] \[info\] step +[0-9]+/' "$full" | tail -1 | sed 's/^\[[^]]*\] \[info\] //')"
  # Losses of steps cut+1..total, uninterrupted against resumed: the same bits or not.
  local cmp
  cmp=$(awk -v cut="$cut" '
    FNR == 1 { file++ }
    { if (match($0, /"step": *[0-9]+/)) { s = substr($0, RSTART, RLENGTH); sub(/.*: */, "", s) } else next
      if (!match($0, /"loss": *[-0-9.eE+]+/)) next
      l = substr($0, RSTART, RLENGTH); sub(/.*: */, "", l)
      if (s > cut) { if (file == 1) a[s] = l; else b[s] = l } }
    END { n = 0; eq = 0; first = ""
          for (s in a) { n++; if (a[s] == b[s]) eq++; else if (first == "" || s < first) first = s }
          if (n == 0) { print "none"; exit }
          if (eq == n) printf "equal: %d of %d resumed losses bit-equal to the uninterrupted run", eq, n
          else printf "DIFFER: %d of %d equal; first at step %d: %s uninterrupted, %s resumed", eq, n, first, a[first], b[first] }' \
    "$runs/whole/metrics.jsonl" "$runs/resumed/metrics.jsonl")
  note "resume from step $cut to $total: $cmp"
  rm -rf "$runs"
  [[ "$cmp" == equal:* ]]
}

if [ -n "${gtest_summary:-}" ]; then
  echo "$(gtest_counts "$gtest_summary")"
  first_failure_lines "$gtest_summary"
  exit 0
fi
if [ -n "${step_mode:-}" ]; then
  log="$out/$step_mode.log" result="$out/.$step_mode.result" full="$out/.$step_mode.full"
  : >"$result"
  : >"$full"
  if [ "$inject" = "$step_mode" ]; then
    echo "check.sh: --inject-hang $step_mode: this step hangs on purpose" | cap_append "$log"
    exec sleep 100000
  fi
  "step_$step_mode"
  exit $?
fi

# ---- the check ----
if [ -z "$emulated" ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "check.sh: no NVIDIA driver / no GPU on this machine (nvidia-smi not found): nothing was run (without a GPU, --emulated BUILD_DIR runs this flow on the CUDA emulator build)" >&2
    exit 2
  fi
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "check.sh: no NVIDIA driver / no GPU usable here (nvidia-smi lists none: $(nvidia-smi -L 2>&1 | head -1)): nothing was run" >&2
    exit 2
  fi
  device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  export device_name
fi
for b in "$bin_train" "$bin_tests" "$bin_bench"; do
  [ -x "$b" ] || { echo "check.sh: $b is missing: is this an unpacked package (or a complete emulation build)?" >&2; exit 2; }
done
out="${out:-$PWD/gpu-check-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out" || { echo "check.sh: cannot create --out $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
rm -f "$out"/summary.txt "$out"/*.log "$out"/.*.result "$out"/.*.full "$out/.bench_rows"
summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }

t0=$(date +%s)
say "fsdp_train GPU check, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname): $package"
say "mode: $([ -n "$emulated" ] && echo "EMULATED (the CUDA emulator build stands in for the device; no figure below is a GPU's)" || echo GPU)"
say "budget: $budget s; steps: ${steps[*]}, each under its own timeout; logs beside this file, each capped at $log_cap bytes"
declare -A outcome
n=0
for s in "${steps[@]}"; do
  n=$((n + 1))
  left=$(( budget - ($(date +%s) - t0) - 5 ))
  if [ "$left" -lt 5 ]; then
    outcome[$s]="not run"
    say "[$n/${#steps[@]} $s] not run: the budget of $budget s is spent"
    continue
  fi
  lim=${limit[$s]}; [ "$lim" -gt "$left" ] && lim=$left
  started=$(date +%s)
  timeout --kill-after=5 "$lim" bash "${BASH_SOURCE[0]}" --run-step "$s" --out "$out" --log-cap "$log_cap" \
    ${emulated:+--emulated "$emulated"} ${gtest_filter:+--gtest-filter "$gtest_filter"} ${inject:+--inject-hang "$inject"} \
    </dev/null >/dev/null 2>>"$out/$s.log"
  rc=$?
  took=$(( $(date +%s) - started ))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    outcome[$s]="timed out"
    say "[$n/${#steps[@]} $s] TIMED OUT after $lim s (log $s.log; its last lines:)"
    tail -n 3 "$out/$s.log" 2>/dev/null | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"
  else
    outcome[$s]=$([ "$rc" -eq 0 ] && echo ok || echo failed)
    say "[$n/${#steps[@]} $s] ${outcome[$s]} ($took s, log $s.log)"
  fi
  [ -s "$out/.$s.result" ] && sed 's/^/    /' "$out/.$s.result" | tee -a "$summary"
  rm -rf "$out/.$s.result" "$out/.$s.full" "$out/.train"  # a step cut short leaves its scratch behind
done
rm -f "$out/.bench_rows"
ok=0 bad=0
for s in "${steps[@]}"; do [ "${outcome[$s]}" = ok ] && ok=$((ok + 1)) || bad=$((bad + 1)); done
say "result: $ok of ${#steps[@]} steps ok in $(( $(date +%s) - t0 )) s$([ "$bad" -gt 0 ] && echo "; not ok: $(for s in "${steps[@]}"; do [ "${outcome[$s]}" = ok ] || printf '%s (%s) ' "$s" "${outcome[$s]}"; done)")"
[ "$bad" -eq 0 ]
