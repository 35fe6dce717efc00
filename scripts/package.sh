#!/usr/bin/env bash
# Builds the relocatable GPU package on a machine with the CUDA toolkit (no GPU needed), for GPU
# nodes without a package manager: untar it anywhere (a shared filesystem) and run.
#
#   bash scripts/package.sh                        # sm_90 (H100/H200): build-package/, then dist/
#   CUDA_ARCHS="80;90" bash scripts/package.sh     # A100 too
#   bash scripts/package.sh --build-dir build      # package an existing CUDA build as configured
#                                                  # (CI: build/, sm_90)
#   bash scripts/package.sh --dist /tmp/out        # where the folder and its .tar.zst go
#
# Makes dist/fsdp_train-<version>-cuda<major>-x86_64/ and its .tar.zst (size printed):
#   bin/      fsdp_train, the GPU test binaries (fsdp_tests_cuda, fsdp_tests_cuda_mpi) and
#             gpu_step_bench, stripped, RPATH $ORIGIN/../lib
#   lib/      every shared library they need that is not glibc's, libstdc++/libgcc_s or the
#             CUDA/NVIDIA stack (yaml-cpp, spdlog, fmt, sentencepiece, OpenBLAS (OpenMP build),
#             libgomp, OpenMPI, zstd, zlib, ...), stripped, RPATH $ORIGIN; their licences in
#             share/licenses/
#   configs/ slurm/ check.sh bench/ (torch_peer_gpu.py, roofline/) README.txt MANIFEST.txt
# The CUDA runtime is linked in; cuBLASLt and NCCL are not bundled (cuBLASLt alone is 500 MB):
# fsdp_train finds them on the node at run time (include/fsdp/core/cuda_libraries.h; the
# package's README.txt and docs/gpu-cluster.md say where it looks).
# Size: the sm_90 package must compress to at most 30 MiB (the script fails above that): the
# binaries share most of their code, and zstd --long (a 128 MiB window) stores it about once.
# Needs patchelf and zstd (scripts/setup.sh installs them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archs="${CUDA_ARCHS:-90}"
build="" dist="$root/dist" level="${ZSTD_LEVEL:-19}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$(cd "${2:?--build-dir needs a directory}" && pwd)"; shift 2 ;;
    --dist) dist="${2:?--dist needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
targets=(fsdp_train fsdp_tests_cuda fsdp_tests_cuda_mpi gpu_step_bench)

# ---- the build ----
if [ -z "$build" ]; then
  build="$root/build-package"
  bash "$root/scripts/setup.sh"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFSDP_CUDA=ON -DFSDP_CUDA_EMULATION=OFF -DFSDP_ASAN=OFF \
    -DFSDP_BENCH=ON "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null
fi
cache="$build/CMakeCache.txt"
grep -q '^FSDP_CUDA:BOOL=ON' "$cache" 2>/dev/null ||
  { echo "package.sh: $build is not a CUDA build (FSDP_CUDA=ON with nvcc): nothing to package" >&2; exit 2; }
grep -q '^FSDP_ASAN:BOOL=ON' "$cache" && { echo "package.sh: $build is built with AddressSanitizer" >&2; exit 2; }
for tool in patchelf zstd; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool is missing (bash scripts/setup.sh installs it)" >&2; exit 2; }
done
echo "package.sh: building ${targets[*]} in $build ..."
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
archs="$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")"
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$cache")"
# nvcc's version, as CMake found it (CMakeFiles/<cmake version>/CMakeCUDACompiler.cmake).
cuda_version="$(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)"
[ -n "$cuda_version" ] || { echo "package.sh: no nvcc version in $build/CMakeFiles" >&2; exit 2; }
name="fsdp_train-${version}-cuda${cuda_version%%.*}-x86_64"
pkg="$dist/$name"
rm -rf "$pkg" "$pkg.tar.zst"
mkdir -p "$pkg/bin" "$pkg/lib" "$pkg/share/licenses" "$pkg/bench/roofline"

# ---- binaries ----
declare -A bin_path=([fsdp_train]="$build/fsdp_train" [fsdp_tests_cuda]="$build/tests/fsdp_tests_cuda"
                     [fsdp_tests_cuda_mpi]="$build/tests/fsdp_tests_cuda_mpi" [gpu_step_bench]="$build/bench/gpu_step_bench")
for t in "${targets[@]}"; do
  strip --strip-unneeded -o "$pkg/bin/$t" "${bin_path[$t]}"
done

# ---- libraries: every NEEDED one, transitively, but the base system's and the CUDA stack's ----
# (tests/integration/package_selfcontained.sh checks the result against the same allow-list.)
allowed='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas(Lt)?\.so|libnccl\.so|libnvidia-|libnvrtc)'
declare -A bundled=()
for t in "${targets[@]}"; do
  while read -r soname _ path _; do
    [ -n "$path" ] && [ "$path" != "not" ] || { echo "package.sh: ${bin_path[$t]} needs $soname, which is not found here" >&2; exit 1; }
    [[ "$soname" =~ $allowed ]] && continue
    bundled[$soname]="$path"
  done < <(ldd "${bin_path[$t]}" | awk '$2 == "=>" { print $1, $2, $3 }')
done
licenses=()
for soname in "${!bundled[@]}"; do
  real="$(readlink -f "${bundled[$soname]}")"
  strip --strip-unneeded -o "$pkg/lib/$soname" "$real"
  patchelf --force-rpath --set-rpath '$ORIGIN' "$pkg/lib/$soname"
  # dpkg knows a file by the path its package installed it at (/lib or /usr/lib on a merged /usr).
  if deb="$({ dpkg -S "$real" || dpkg -S "${real/#\/usr\/lib\//\/lib\/}"; } 2>/dev/null | head -1 | cut -d: -f1)" &&
     [ -n "$deb" ]; then
    [ -f "/usr/share/doc/$deb/copyright" ] && cp "/usr/share/doc/$deb/copyright" "$pkg/share/licenses/$deb.copyright"
    licenses+=("$soname: Debian $deb $(dpkg-query -W -f='${Version}' "$deb" 2>/dev/null)")
  else
    licenses+=("$soname: $real")
  fi
done
# DT_RPATH (not RUNPATH): it also serves the bundled libraries' own dependencies.
for t in "${targets[@]}"; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$pkg/bin/$t"; done

# ---- the rest ----
cp -r "$root/configs" "$pkg/configs"
mkdir -p "$pkg/slurm" && cp "$root"/slurm/*.sbatch "$root/slurm/README.md" "$pkg/slurm/"
cp "$root/bench/package_check.sh" "$pkg/check.sh"
cp "$root/bench/torch_peer_gpu.py" "$pkg/bench/"
cp "$root/bench/roofline/roofline.sh" "$pkg/bench/roofline/"
chmod +x "$pkg/check.sh" "$pkg/bench/torch_peer_gpu.py"
commit="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted"
glibc="$(for f in "$pkg"/bin/* "$pkg"/lib/*; do objdump -T "$f"; done 2>/dev/null |
         grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
glibcxx="$(for f in "$pkg"/bin/* "$pkg"/lib/*; do objdump -T "$f"; done 2>/dev/null |
           grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
{
  echo "name: $name"
  echo "version: $version"
  echo "commit: $commit"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cuda: $cuda_version (nvcc), architectures sm_${archs//;/ sm_}; CUDA runtime linked in; cuBLASLt and NCCL found on the node"
  echo "needs: x86_64 Linux with ${glibc/_/ } or newer and libstdc++ with ${glibcxx/_/ }; an NVIDIA driver for CUDA ${cuda_version%%.*} (580 or newer)"
  echo "bundled libraries:"
  printf '  %s\n' "${licenses[@]}" | sort
} >"$pkg/MANIFEST.txt"
cat >"$pkg/README.txt" <<EOF
$name: fsdp_train for GPU nodes without a package manager (docs/gpu-cluster.md in the source).

  tar -xf $name.tar.zst -C /shared/apps     # (tar --zstd -xf ... where tar is older)
  cd /shared/apps/$name
  ./check.sh                                 # on a GPU node: device, tests, sanitizer, step benchmark,
                                             # PyTorch on the same shapes, train + resume; < 8 minutes
  srun --ntasks-per-node=8 --gpus-per-node=8 bin/fsdp_train train --config configs/llama2_7b.yaml
  RANK=0 WORLD_SIZE=1 bin/fsdp_train train --config configs/llama2_7b.yaml --set data.source=synthetic

GPU runs need no MPI: srun without --mpi, or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
meet through a TCP store on rank 0's host. The CPU backend across several ranks needs mpirun (Debian
12's OpenMPI 4.1, which the bundled libmpi belongs to).

cuBLASLt (libcublasLt.so.13) and NCCL (libnccl.so.2) are not bundled; fsdp_train looks for them in
FSDP_CUDA_LIBS, LD_LIBRARY_PATH, CUDA_HOME, /usr/local/cuda, the system's library path, and the
nvidia/*/lib folders of python3's pip wheels (PyTorch's), and says in one line which it found:
  bin/fsdp_train --version
EOF

# ---- the tarball ----
echo "package.sh: compressing (zstd -$level --long=27) ..."
tar --sort=name --owner=0 --group=0 --numeric-owner -C "$dist" -cf - "$name" |
  zstd -q -T0 "-$level" --long=27 -o "$pkg.tar.zst"
bytes=$(stat -c %s "$pkg.tar.zst")
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "package.sh: $pkg.tar.zst: $mib MiB compressed ($(du -sh "$pkg" | cut -f1) unpacked; sm_${archs//;/ sm_}; ${#bundled[@]} bundled libraries)"
if [ "$archs" = 90 ] && [ "$bytes" -gt $((30 << 20)) ]; then
  echo "package.sh: the sm_90 package is over its 30 MiB budget" >&2
  exit 1
fi
