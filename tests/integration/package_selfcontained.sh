#!/usr/bin/env bash
# The relocatable GPU package (scripts/package.sh) is self-contained, proven on this CPU machine:
#   1. package.sh packages the CUDA build that is already here (CI's build/: no rebuild);
#   2. every NEEDED library of every binary and bundled library resolves inside lib/ or is on the
#      allow-list (glibc's, libstdc++/libgcc_s, the CUDA/NVIDIA stack): package_needed_check;
#   3. in a mount namespace where the Debian libraries the package bundles, OpenMPI's runtime and
#      /usr/local/cuda are hidden: `bin/fsdp_train --version`, a 5-step CPU run of
#      configs/tiny.yaml on synthetic data, two CPU ranks launched without MPI refused with the
#      line that says mpirun is needed, the CUDA libraries line pointed at a folder of stand-ins
#      (tests/cpu/fake_cuda_libs) and at none, and check.sh ending at once (exit 2) without a GPU;
#   4. the same checks fail once a bundled library is removed from a copy of the package.
# Needs root for the namespace (CI runs as root); elsewhere reports itself skipped (exit 77).
#
#   bash tests/integration/package_selfcontained.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
root="$(cd "$1" && pwd)"
build="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package_selfcontained: FAILED: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "package_selfcontained: skipped: needs root and mount namespaces (unshare -m), as on CI"
  exit 77
fi

# ---- 1. the package, from this build ----
ZSTD_LEVEL=${ZSTD_LEVEL:-10} bash "$root/scripts/package.sh" --build-dir "$build" --dist "$tmp/dist" | tee "$tmp/package.log"
pkg="$(ls -d "$tmp"/dist/fsdp_train-*-x86_64)"
[ -f "$pkg.tar.zst" ] || fail "no .tar.zst beside $pkg"
grep -q "MiB compressed" "$tmp/package.log" || fail "package.sh printed no size"
for f in bin/fsdp_train bin/fsdp_tests_cuda bin/fsdp_tests_cuda_mpi bin/gpu_step_bench check.sh configs/tiny.yaml \
         configs/llama2_7b.yaml slurm/train.sbatch bench/torch_peer_gpu.py bench/roofline/roofline.sh MANIFEST.txt README.txt; do
  [ -e "$pkg/$f" ] || fail "the package has no $f"
done

# ---- 2. every NEEDED library resolves inside lib/ or to the allow-list ----
allowed='^(ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas(Lt)?\.so|libnccl\.so|libnvidia-|libnvrtc)'
package_needed_check() {  # prints one line per unresolved NEEDED entry; fails if any
  local p="$1" bad=0 f lib
  for f in "$p"/bin/* "$p"/lib/*; do
    while read -r lib; do
      [[ "$lib" =~ $allowed ]] && continue
      [ -e "$p/lib/$lib" ] && continue
      echo "  ${f#"$p"/} needs $lib: neither in lib/ nor on the allow-list"
      bad=1
    done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    readelf -d "$f" | grep -q "(RPATH).*\\\$ORIGIN" || { echo "  ${f#"$p"/} has no \$ORIGIN RPATH"; bad=1; }
  done
  return $bad
}
package_needed_check "$pkg" || fail "the package is not self-contained (above)"
echo "package_selfcontained: every NEEDED library of $(ls "$pkg/bin" "$pkg/lib" | wc -l) files resolves in lib/ or the allow-list"

# ---- 3. run it where the bundled Debian libraries, OpenMPI and the CUDA toolkit are hidden ----
# The namespace's own tools (mount, and the grep, sed and awk check.sh runs) keep the system
# libraries they load (libpcre2-8 is one, bundled since tokenizer.json): those copies stay,
# and the package's loader must be seen taking its own from lib/ instead.
tool_libs=$(for t in mount grep sed awk date cat bash; do ldd "$(command -v "$t")"; done |
            sed -n 's/^[[:space:]]*\([^ ]*\) => .*/\1/p' | sort -u)
hidden=()
for lib in "$pkg"/lib/*; do
  name=$(basename "$lib")
  if grep -qxF "$name" <<<"$tool_libs"; then
    resolved=$(ldd "$pkg/bin/fsdp_train" | awk -v n="$name" '$1 == n && $2 == "=>" { print $3 }')
    [ -n "$resolved" ] && [ "$(readlink -f "$resolved")" = "$(readlink -f "$pkg/lib/$name")" ] ||
      fail "bin/fsdp_train does not load lib/$name (the system's copy stays for mount and grep): $(ldd "$pkg/bin/fsdp_train" | grep -F "$name")"
    echo "package_selfcontained: lib/$name is the one bin/fsdp_train loads (the system's copy stays for the namespace's tools)"
    continue
  fi
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp; do
    [ -e "$dir/$name" ] && hidden+=("$(readlink -f "$dir/$name")")
  done
done
[ "${#hidden[@]}" -gt 5 ] || fail "found only ${#hidden[@]} system copies of the bundled libraries to hide"
fake="$build/fake_cuda_libs"
[ -f "$fake/libcublasLt.so.13" ] || cmake --build "$build" --target fsdp_fake_cublaslt fsdp_fake_nccl >/dev/null
cat >"$tmp/inside.sh" <<'EOF'
set -euo pipefail
pkg="$1" tmp="$2" fake="$3"; shift 3
for f in "$@"; do mount --bind /dev/null "$f"; done
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
for f in "$@"; do [ -s "$f" ] && { echo "not hidden: $f"; exit 1; }; done
cd "$tmp"
unset LD_LIBRARY_PATH CUDA_HOME CUDA_PATH NCCL_HOME FSDP_CUDA_LIBS
export FSDP_PYTHON=/nonexistent/python3 OMP_NUM_THREADS=1
echo "== version"; "$pkg/bin/fsdp_train" --version
echo "== train"; "$pkg/bin/fsdp_train" train --config "$pkg/configs/tiny.yaml" --set data.source=synthetic \
  --set train.max_steps=5 --set train.log_every=1 --set train.eval_every=0 --set run.dir="$tmp/run" --set train.device=cpu
echo "== ranks without MPI"
port=$(( 20000 + RANDOM % 20000 ))
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=$port "$pkg/bin/fsdp_train" train \
    --config "$pkg/configs/tiny.yaml" --set data.source=synthetic --set run.dir="$tmp/ranks" --set dist.timeout_s=30 \
    >"$tmp/rank$r.log" 2>&1 &
done
wait -n || echo "exit $?"; wait -n || echo "exit $?"
cat "$tmp/rank0.log" "$tmp/rank1.log"  # the rank that refuses first says why; the store ends the other
echo "== fake CUDA libraries"; FSDP_CUDA_LIBS="$fake" "$pkg/bin/fsdp_train" --version
echo "== no CUDA libraries"; "$pkg/bin/fsdp_train" --version
echo "== check.sh"; start=$(date +%s); rc=0; "$pkg/check.sh" 2>&1 || rc=$?; echo "check.sh exit $rc after $(( $(date +%s) - start )) s"
EOF
unshare -m bash "$tmp/inside.sh" "$pkg" "$tmp" "$fake" "${hidden[@]}" >"$tmp/inside.log" 2>&1 ||
  { cat "$tmp/inside.log"; fail "the package did not run with its Debian libraries hidden"; }
cat "$tmp/inside.log"
out="$tmp/inside.log"
expect() { grep -qE -- "$1" "$out" || fail "with the system's copies hidden, no line matches: $1"; }
expect '^fsdp_train [0-9]+\.[0-9]+\.[0-9]+$'
expect '\[info\] step +5/5 .*\| loss [0-9.]+'
expect 'the CPU backend across 2 ranks needs MPI: launch with `mpirun -np 2` or `srun --mpi=pmix`'
expect "^CUDA libraries: cuBLASLt 99\.1\.2 \($fake/libcublasLt\.so\.13, from FSDP_CUDA_LIBS\); NCCL 2\.99\.7 \($fake/libnccl\.so\.2, from FSDP_CUDA_LIBS\)$"
expect '^CUDA libraries: cuBLASLt \(libcublasLt\.so\.13\) not found; looked in FSDP_CUDA_LIBS \(unset\), LD_LIBRARY_PATH \(unset\), CUDA_HOME \(unset\), /usr/local/cuda/lib64 \(/usr/local/cuda/lib64: no libcublasLt\.so\.13\)'
expect 'no NVIDIA driver / no GPU'
expect '^check.sh exit 2 after [0-5] s$'
echo "package_selfcontained: the package runs with the bundled Debian libraries, OpenMPI and CUDA hidden"

# ---- 4. a bundled library removed: both checks see it ----
cp -a "$pkg" "$tmp/broken"
victim="$(basename "$(ls "$tmp"/broken/lib/libyaml-cpp.so.* | head -1)")"
rm "$tmp/broken/lib/$victim"
package_needed_check "$tmp/broken" >"$tmp/broken.txt" && fail "the NEEDED check passes with lib/$victim removed"
grep -q "bin/fsdp_train needs $victim: neither in lib/ nor on the allow-list" "$tmp/broken.txt" ||
  fail "the NEEDED check does not name $victim: $(cat "$tmp/broken.txt")"
if unshare -m bash "$tmp/inside.sh" "$tmp/broken" "$tmp" "$fake" "${hidden[@]}" >"$tmp/broken.log" 2>&1; then
  cat "$tmp/broken.log"; fail "the package still runs with lib/$victim removed and the system's copy hidden"
fi
grep -qE "error while loading shared libraries: ([^ ]*/)?$victim" "$tmp/broken.log" || { tail -5 "$tmp/broken.log"; fail "no loader error naming $victim"; }
echo "package_selfcontained: with lib/$victim removed, the NEEDED check and the run both fail, naming it"
echo "package_selfcontained: passed"
