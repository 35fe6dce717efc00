#!/usr/bin/env bash
# CTest `module_graph_refuses` (label cpu): the include check of cmake/check_module_graph.cmake
# passes on the tree as it is, and fails, naming the file, the line and the edge, on a copy
# where a module includes one the graph (cmake/module_graph.cmake) does not let it use:
# obs → train and plan → train (the run uses them, never the reverse), and core → cli.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake -DSOURCE_DIR="$root" -DSTAMP="$work/ok" -P "$root/cmake/check_module_graph.cmake" >/dev/null
[[ -f "$work/ok" ]] || { echo "FAIL: the tree itself does not pass the module graph check" >&2; exit 1; }

refused() {  # FILE INCLUDE EXPECTED-LINE
  local file=$1 include=$2 expected=$3
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  cp -r "$root/src" "$root/include" "$root/cmake" "$work/tree/"
  # After the file's first line, so the reported line number is 2.
  sed -i "1a #include \"$include\"" "$work/tree/$file"
  local out status=0
  out="$(cmake -DSOURCE_DIR="$work/tree" -DSTAMP="$work/stamp" -P "$work/tree/cmake/check_module_graph.cmake" 2>&1)" || status=$?
  if ((status == 0)); then echo "FAIL: $file including $include passed the check" >&2; exit 1; fi
  grep -qF "$expected" <<<"$out" || { echo "FAIL: expected '$expected' in:" >&2; echo "$out" >&2; exit 1; }
  echo "refused: $expected"
}

refused src/obs/metrics.cpp fsdp/train/trainer.h \
  'src/obs/metrics.cpp:2: error: #include "fsdp/train/trainer.h": module obs may not include module train'
refused src/plan/memory_plan.cpp fsdp/train/setup.h \
  'src/plan/memory_plan.cpp:2: error: #include "fsdp/train/setup.h": module plan may not include module train'
refused src/core/tensor.cpp fsdp/cli/commands.h \
  'src/core/tensor.cpp:2: error: #include "fsdp/cli/commands.h": module core may not include module cli'
echo "the module graph check refuses each forbidden include"
