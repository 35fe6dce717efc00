#!/usr/bin/env bash
# CTest `readers_use_regular_file` (label cpu): every file a user names is opened for reading
# through core/regular_file.h (regular files only, refused by name: a FIFO or /dev/zero never
# blocks a run), so no reader can forget the rule. Fails, naming the file and line, on a
# std::ifstream / std::fstream, an fopen or gzopen for reading, or an open(2) with O_RDONLY
# (directories aside) anywhere in src/ but the helper itself and the kernel's own files below.
# A self-test injects such a reader into a copy and expects the refusal.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# path: why it may open files itself
declare -A exempt=(
  [src/core/regular_file.cpp]="the helper itself"
  [src/plan/host_memory.cpp]="/proc/meminfo and the cgroup's memory files: the kernel's, not a user's"
  [src/cli/startup_address_space.cpp]="/proc/self/statm, before main: the kernel's, not a user's"
)

check() {  # TREE: prints offending lines, returns 1 if any
  local tree=$1 hits rel
  hits=$(cd "$tree" && grep -rnE --include='*.cpp' --include='*.h' --exclude-dir=cuda_emu \
    'std::i?fstream|\bifstream\b|\bgzopen\(|fopen\([^;]*"r|O_RDONLY' src | grep -v 'O_DIRECTORY' || true)
  for rel in "${!exempt[@]}"; do hits=$(grep -v "^$rel:" <<<"$hits" || true); done
  [[ -z $hits ]] || { echo "$hits"; return 1; }
}

if ! out=$(check "$root"); then
  echo "FAIL: these open files for reading without core/regular_file.h (open_regular_file, read_regular_file," >&2
  echo "open_regular_file_stream):" >&2
  echo "$out" >&2
  exit 1
fi
echo "ok: every reader in src/ opens user files through core/regular_file.h"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree" && cp -r "$root/src" "$work/tree/"
sed -i '1a #include <fstream>\nstatic void planted(const char* p) { std::ifstream in(p); }' "$work/tree/src/obs/trace_merge.cpp"
if out=$(check "$work/tree"); then echo "FAIL: the self-test's planted std::ifstream was not found" >&2; exit 1; fi
grep -q "src/obs/trace_merge.cpp:3:" <<<"$out" || { echo "FAIL: the self-test's finding is not named: $out" >&2; exit 1; }
echo "ok: a planted std::ifstream is refused: $out"
echo PASS
