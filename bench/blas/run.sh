#!/usr/bin/env bash
# bench/blas/run.sh — which BLAS gives the fastest fp32 GEMM on this machine?
#
# Installs Debian's OpenBLAS, BLIS and oneDNN if missing, builds sgemm_compare.cpp once per
# library (linked by full path, with an rpath to the variant's directory so the run-time
# alternatives symlinks cannot swap in another build), runs them with 2 threads and prints
# markdown tables of GFLOP/s per shape with the ratio to the best library in each row.
#
# usage: bench/blas/run.sh [--quick] [--build-dir DIR] [--passes N] [--wait-idle MIN]
#   --quick        fewer repetitions (a smoke test, not for the README)
#   --build-dir    where the binaries go (default: a fresh mktemp -d directory; never the tree)
#   --passes N     run every library N times, interleaved, and keep each case's best (default 2)
#   --wait-idle M  before each pass, wait up to M minutes (default 10, 0 = don't) until other
#                  processes use < 10% of the CPUs (and, without --quick, each case waits up to
#                  60 s more); cells still slowed by them are marked *
#
# Tables:
#   1. main: OpenBLAS (pthread), BLIS (pthread), oneDNN under the environment as it is
#   2. OpenBLAS with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, and forced to Haswell/512
#   3. variants: OpenMP builds of OpenBLAS and BLIS, BLIS with BLIS_ARCH_TYPE=skx
#   4. which environment variable sets each library's thread count
#   5. OpenMP interleave: an OpenMP row loop between GEMMs, as the CPU backend runs them
#   6. weight-gradient GEMMs (A^T B), the third GEMM form of a training step
#   7. one figure per library: GFLOP/s over a Llama step's GEMM mix (NT + NN + TN)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/sgemm_compare.cpp"
quick=0
passes=2
build_dir=""
wait_idle_min=10
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --passes) passes="$2"; shift 2 ;;
    --wait-idle) wait_idle_min="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
lib=/usr/lib/$arch
inc=/usr/include/$arch

# ---------------------------------------------------------------- 1. install (idempotent)
# libblis-dev alone would pick the OpenMP build; name both variants. libopenblas0-openmp is only
# the runtime: its cblas.h is the same as the pthread one.
packages=(libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0-openmp
          libblis-dev libblis4-pthread libblis-pthread-dev libblis4-openmp libblis-openmp-dev
          libdnnl-dev libdnnl2)
missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing: ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  blas_before=$(update-alternatives --query "libblas.so.3-$arch" 2>/dev/null | sed -n 's/^Value: //p')
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >&2
  blas_after=$(update-alternatives --query "libblas.so.3-$arch" 2>/dev/null | sed -n 's/^Value: //p')
  if [[ "$blas_before" != "$blas_after" ]]; then
    echo "warning: the libblas.so.3 alternative changed: $blas_before -> $blas_after" >&2
  fi
fi

# ---------------------------------------------------------------- 2. build
if [[ -z "$build_dir" ]]; then
  build_dir=$(mktemp -d "${TMPDIR:-/tmp}/sgemm_compare.XXXXXX")
fi
mkdir -p "$build_dir"

# name  define        include dir (- = default) library file (full path)
targets=(
  "openblas     USE_OPENBLAS $inc/openblas-pthread $lib/openblas-pthread/libopenblas.so.0"
  "openblas-omp USE_OPENBLAS $inc/openblas-pthread $lib/openblas-openmp/libopenblas.so.0"
  "blis         USE_BLIS     $inc/blis-pthread     $lib/blis-pthread/libblis.so.4"
  "blis-omp     USE_BLIS     $inc/blis-openmp      $lib/blis-openmp/libblis.so.4"
  "onednn       USE_DNNL     -                     $lib/libdnnl.so.2"
)
for t in "${targets[@]}"; do
  read -r name def incdir so <<<"$t"
  incflags=()
  [[ "$incdir" == - ]] || incflags=(-isystem "$incdir")
  g++ -std=c++20 -O3 -fopenmp -Wall -D"$def" "${incflags[@]}" "$src" "$so" \
      -Wl,-rpath,"$(dirname "$so")" -o "$build_dir/$name"
  # The binary must load exactly the file it was linked with, not whatever the alternative says.
  resolved=$(ldd "$build_dir/$name" | awk -v n="$(basename "$so")" '$1 == n {print $3}')
  if [[ "$(readlink -f "$resolved")" != "$(readlink -f "$so")" ]]; then
    echo "error: $name loads $resolved, expected $so" >&2
    exit 1
  fi
done
echo "binaries in $build_dir" >&2

# ---------------------------------------------------------------- 3. run
if [[ $quick -eq 1 ]]; then
  common=(--threads 2 --reps 2 --min-time 0.1)
  passes=1
else
  # each case waits (up to 60 s) for other processes to leave the CPUs, and is timed again
  # (up to 3 times) if its best run was still slowed by them
  common=(--threads 2 --reps 5 --min-time 1.0 --wait-idle 60)
fi
results="$build_dir/results"
mkdir -p "$results"
rm -f "$results"/*.txt "$results"/*.kernels

# run OUT_NAME LABEL BINARY [ENV ASSIGNMENTS...] -- [PROGRAM ARGS...]
run() {
  local out="$1" label="$2" bin="$3"; shift 3
  local envs=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  env "${envs[@]}" "$build_dir/$bin" --label "$label" "$@" >>"$results/$out.txt" || {
    echo "warning: $label reported a failed correctness check (see $results/$out.txt)" >&2; }
}

# wait_idle: until the CPUs were < 10% busy over 2 s (we run nothing meanwhile), or the time is up.
wait_idle() {
  local deadline=$((SECONDS + wait_idle_min * 60)) a b busy
  while true; do
    a=($(head -n 1 /proc/stat)); sleep 2; b=($(head -n 1 /proc/stat))
    # fields: cpu user nice system idle iowait irq softirq steal
    busy=$(( ( (b[1]+b[2]+b[3]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[6]+a[7]+a[8]) ) * 100 /
             ( (b[1]+b[2]+b[3]+b[4]+b[5]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[4]+a[5]+a[6]+a[7]+a[8]) + 1 ) ))
    [[ $busy -lt 10 ]] && return 0
    if [[ $SECONDS -ge $deadline ]]; then
      echo "warning: CPUs still ${busy}% busy with other work; timing anyway" >&2
      return 0
    fi
    echo "waiting for an idle machine (CPUs ${busy}% busy)..." >&2
    sleep 8
  done
}

# table FILE...: markdown table, one row per shape/op, one column per label: GFLOP/s (ratio to
# the best in the row). Duplicate (label, case) lines from several passes keep the maximum.
table() {
  cat "$@" | awk '
    $1 == "RESULT" {
      lab = $2; key = $3 " " $4; g = $8 + 0
      if (!(lab in seen)) { seen[lab] = 1; labs[++nl] = lab }
      if (!(key in kseen)) { kseen[key] = 1; keys[++nk] = key; dims[key] = $5 "x" $6 "x" $7 }
      w = 0
      for (f = 11; f <= NF; f++) if ($f ~ /^wait=/) { w = $f; gsub(/[^0-9.]/, "", w); w += 0 }
      if (!((lab, key) in v) || g > v[lab, key]) { v[lab, key] = g; wt[lab, key] = w }
      if ($10 != "OK") bad[lab, key] = 1
    }
    END {
      printf "| shape | op | M x N x K |"
      for (i = 1; i <= nl; i++) printf " %s |", labs[i]
      printf "\n|---|---|---|"
      for (i = 1; i <= nl; i++) printf "---:|"
      printf "\n"
      for (j = 1; j <= nk; j++) {
        k = keys[j]; best = 0
        for (i = 1; i <= nl; i++) if (v[labs[i], k] > best) best = v[labs[i], k]
        split(k, kk, " ")
        printf "| %s | %s | %s |", kk[1], kk[2], dims[k]
        for (i = 1; i <= nl; i++) {
          if (!((labs[i], k) in v)) { printf " - |"; continue }
          if (bad[labs[i], k]) { printf " FAIL |"; continue }
          x = v[labs[i], k]
          printf " %.1f (%.2f)%s |", x, (best > 0 ? x / best : 0), (wt[labs[i], k] > 5 ? "*" : "")
          if (wt[labs[i], k] > 5) nslow++
          if (best > 0) { lsum[i] += log(x / best); lcnt[i]++ }
        }
        printf "\n"
      }
      printf "| **geomean ratio** | | |"
      for (i = 1; i <= nl; i++) printf " %.2f |", lcnt[i] ? exp(lsum[i] / lcnt[i]) : 0
      printf "\n"
      if (nslow) printf "\n\\* %d cell(s) never got a run free of other processes (CPU wait > 5%%): rerun on an idle machine\n", nslow
    }'
}

# libinfo FILE...: one line per label: version, kernel chosen at run time, threading.
libinfo() {
  cat "$@" | awk '
    /^# library/ { cur = $NF; sub(/\)$/, "", cur); if (!(cur in info)) order[++n] = cur }
    /^# (version|kernel|parallel)/ && !((cur, $2) in got) {
      got[cur, $2] = 1; line = $0; sub(/^# [a-z]+ +/, "", line)
      info[cur] = info[cur] (info[cur] == "" ? "" : "; ") $2 ": " line }
    END { for (i = 1; i <= n; i++) printf "- %s: %s\n", order[i], info[order[i]] }'
}

# best_square FILE...: the single best square-shape GFLOP/s, with its label and case.
best_square() {
  cat "$@" | awk '$1 == "RESULT" && $3 ~ /^sq/ && $10 == "OK" && $8 + 0 > b {
                    b = $8 + 0; w = $2 " " $3 " " $4 }
                  END { printf "%.1f GFLOP/s (%s)\n", b, w }'
}

echo "## sgemm comparison, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online," \
     "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "- environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}" \
     "OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)} OMP_NUM_THREADS=${OMP_NUM_THREADS-(unset)}"
echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- 2 threads, fp32, row-major, beta=0; best of >= 5 runs and >= 1 s per case;" \
     "$passes interleaved pass(es), best kept; checked against a double reference (rel. err <= 1e-4)"
echo

for ((p = 1; p <= passes; p++)); do
  wait_idle
  run main openblas openblas -- "${common[@]}"
  run main blis blis -- "${common[@]}"
  run main onednn onednn -- "${common[@]}"
done
echo "### 1. main table (environment as it is)"
echo
libinfo "$results/main.txt"
echo
table "$results/main.txt"
echo
echo "best square-size figure in this table: $(best_square "$results/main.txt")"
echo

for ((p = 1; p <= passes; p++)); do
  wait_idle
  run coretype openblas-unset openblas -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -- "${common[@]}"
  run coretype openblas-haswell openblas OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512 -- "${common[@]}"
done
grep -h '^# kernel' "$results/coretype.txt" | sort | uniq -c | sed 's/^/    /' >"$results/coretype.kernels"
echo "### 2. OpenBLAS: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset vs. forced to Haswell / 512"
echo
sed 's/^ *[0-9]* # /    /' "$results/coretype.kernels"
echo
table <(grep -h '^RESULT openblas ' "$results/main.txt") "$results/coretype.txt" |
  sed 's/| openblas |/| openblas (env as is) |/'
echo

for ((p = 1; p <= passes; p++)); do
  wait_idle
  run variants openblas-omp openblas-omp -- "${common[@]}"
  run variants blis-omp blis-omp -- "${common[@]}"
  run variants blis-skx blis BLIS_ARCH_TYPE=skx -- "${common[@]}"
done
echo "### 3. variants: OpenMP builds, BLIS forced to its AVX-512 (skx) kernels"
echo
table "$results/main.txt" "$results/variants.txt"
echo
echo "best square-size figure per library (the largest is the machine's measured sgemm peak):"
echo
cat "$results/main.txt" "$results/variants.txt" | awk '
  $1 == "RESULT" && $3 ~ /^sq/ && $10 == "OK" {
    if (!($2 in b)) order[++n] = $2
    if ($8 + 0 > b[$2]) { b[$2] = $8 + 0; w[$2] = $3 " " $4 }
  }
  END { for (i = 1; i <= n; i++) printf "- %s: %.1f GFLOP/s (%s)\n", order[i], b[order[i]], w[order[i]] }'
echo

# 4. Thread variables: --threads 0 leaves the count to the environment. With 2 cores, a library
# that obeys VAR=1 runs at about half its default speed.
echo "### 4. thread-count variables (sq2048 NN, --threads 0; GFLOP/s and the thread count the library reports)"
echo
vars=(OMP_NUM_THREADS=1 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2
      BLIS_NUM_THREADS=1 BLIS_NUM_THREADS=2)
header="| binary | no variable |"
rule="|---|---:|"
for var in "${vars[@]}"; do header+=" $var |"; rule+="---:|"; done
echo "$header"
echo "$rule"
tcommon=(--threads 0 --shapes 2048 --ops NN)
[[ $quick -eq 1 ]] && tcommon+=(--reps 2 --min-time 0.1) || tcommon+=(--reps 5 --min-time 0.5 --wait-idle 60)
for ((p = 1; p <= passes; p++)); do
  wait_idle
  for bin in openblas openblas-omp blis blis-omp onednn; do
    for var in none "${vars[@]}"; do
      env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u BLIS_NUM_THREADS -u GOTO_NUM_THREADS \
          $([[ $var == none ]] || echo "$var") "$build_dir/$bin" "${tcommon[@]}" |
        awk -v b="$bin" -v v="$var" '/^# threads/ { n = $0; sub(/.*library reports /, "", n); sub(/,.*/, "", n) }
             $1 == "RESULT" { w = $12; gsub(/[^0-9.]/, "", w); print b, v, $8, n, w }' >>"$results/threads.txt"
    done
  done
done
for bin in openblas openblas-omp blis blis-omp onednn; do
  row="| $bin |"
  for var in none "${vars[@]}"; do
    # keep the fastest pass; * when even that one was slowed by other processes
    row+=$(awk -v b="$bin" -v v="$var" '$1 == b && $2 == v && $3 + 0 > g { g = $3 + 0; n = $4; w = $5 + 0 }
             END { printf " %.1f (%s)%s |", g, n, (w > 5 ? "*" : "") }' "$results/threads.txt")
  done
  echo "$row"
done
echo
echo "(-1 = BLIS has no count set; it then runs 1 thread. \\* = slowed by other processes in every pass)"
echo

# 5. OpenMP interleave: each timed unit is {OpenMP elementwise pass over C; sgemm}. overhead =
# pair time / (sgemm alone + pass alone) - 1: the cost of two thread pools taking turns.
echo "### 5. OpenMP interleave (Llama shapes, NT): sgemm GFLOP/s inside the pair, and overhead"
echo
echo "| shape | openblas | openblas-omp | blis | blis-omp | onednn |"
echo "|---|---:|---:|---:|---:|---:|"
for ((p = 1; p <= passes; p++)); do
  wait_idle
  for bin in openblas openblas-omp blis blis-omp onednn; do
    "$build_dir/$bin" "${common[@]}" --interleave --shapes llama --ops NT \
      >>"$results/interleave-$bin.txt" || true
  done
done
for shape in qkvo up down head; do
  row="| $shape |"
  for bin in openblas openblas-omp blis blis-omp onednn; do
    # keep the pass least disturbed by other processes (lowest CPU wait over its three timings)
    row+=$(awk -v s="$shape" '$1 == "RESULT" && $3 == s {
             w = $0; sub(/.*wait=/, "", w); sub(/%.*/, "", w); w += 0
             if (!seen || w < bw) { seen = 1; bw = w; g = $8; o = $0; sub(/.*overhead=/, "", o) } }
           END { printf " %s (%s)%s |", g, o, (bw > 5 ? "*" : "") }' \
           "$results/interleave-$bin.txt")
  done
  echo "$row"
done
echo
echo "(\\* = its threads waited for a CPU > 5% of the time in every pass: for the pthread builds"
echo "that is their own threads competing with OpenMP's, the effect measured here; otherwise rerun idle)"
echo

for ((p = 1; p <= passes; p++)); do
  wait_idle
  for bin in openblas blis onednn openblas-omp blis-omp; do
    run wgrad "$bin" "$bin" -- "${common[@]}" --shapes wgrad --ops TN
  done
done
echo "### 6. weight gradients, C = A^T B (dW = dy^T x over 4096 tokens; not part of the main table)"
echo
table "$results/wgrad.txt"
echo

# 7. One number per library for a training step: the GEMMs of a Llama step at the shapes above,
# each once forward (NT), once for dx (NN) and once for dW (TN), weighted like an 8-layer model:
# per layer 4 x qkvo (q, k, v, o), 2 x up (w1, w3), 1 x down (w2); the head once.
echo "### 7. Llama step mix: 8 x (4 qkvo + 2 up + 1 down) + 1 head, each as NT, NN and TN"
echo
echo "| library | GFLOP/s over the mix | ratio to best | time share of the head |"
echo "|---|---:|---:|---:|"
cat "$results/main.txt" "$results/variants.txt" "$results/wgrad.txt" | awk '
  BEGIN { w["qkvo"] = 32; w["up"] = 16; w["down"] = 8; w["head"] = 1 }
  $1 == "RESULT" {
    s = $3; sub(/^wg_/, "", s)
    if (!(s in w) || ($3 ~ /^wg_/) != ($4 == "TN")) next
    k = $2 SUBSEP s SUBSEP $4
    ww = $0; sub(/.*wait=/, "", ww); sub(/%.*/, "", ww)
    if (!(k in g) || $8 + 0 > g[k]) { g[k] = $8 + 0; fl[k] = 2 * $5 * $6 * $7; wt[k] = ww + 0 }
    if (!($2 in seen)) { seen[$2] = 1; labs[++n] = $2 }
  }
  END {
    split("qkvo up down head", shapes, " "); split("NT NN TN", ops, " ")
    for (i = 1; i <= n; i++) {
      t = 0; f = 0; th = 0; ok = 1
      for (a = 1; a <= 4; a++) for (b = 1; b <= 3; b++) {
        k = labs[i] SUBSEP shapes[a] SUBSEP ops[b]
        if (!(k in g) || g[k] <= 0) { ok = 0; continue }
        dt = w[shapes[a]] * fl[k] / (g[k] * 1e9); t += dt; f += w[shapes[a]] * fl[k]
        if (shapes[a] == "head") th += dt
        if (wt[k] > 5) slow[i] = 1
      }
      if (ok) { rate[i] = f / t / 1e9; share[i] = th / t; if (rate[i] > best) best = rate[i] }
    }
    for (i = 1; i <= n; i++) if (i in rate)
      printf "| %s | %.1f%s | %.2f | %.0f%% |\n", labs[i], rate[i], (slow[i] ? "*" : ""),
             rate[i] / best, 100 * share[i]
  }'
echo
echo "raw results: $results"
