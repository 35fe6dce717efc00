#!/usr/bin/env bash
# The module graph at link level (cmake/module_graph.cmake): fails when a module's library
# uses a symbol that only a module it may not depend on defines, e.g. a function declared
# by hand instead of included, which the include check cannot see:
#   libfsdp_obs_lib.a(metrics.cpp.o): error: uses fsdp::train::install_preemption_handlers(), defined in module train: module obs may not depend on module train
# Run by the build once every module library is built (target fsdp_module_link_check) as
#   check_module_links.sh NM STAMP MODULE=LIBRARY:REACH,REACH,... ...
# with REACH every module MODULE may use (itself included), computed from the graph.
set -euo pipefail
export LC_ALL=C  # one collation for sort and join
nm=$1 stamp=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

declare -A reach lib_of
modules=()
for spec in "$@"; do
  m=${spec%%=*} rest=${spec#*=}
  lib=${rest%%:*}
  lib_of[$m]=$(basename "$lib")
  reach[$m]=",${rest#*:},"
  modules+=("$m")
  # Symbols of namespace fsdp: every one the library defines (weak ones too), the strong
  # ones (a weak definition is an inline function or template any user may emit), and
  # the undefined ones with the object that uses them.
  "$nm" -g --defined-only "$lib" 2>/dev/null | awk 'NF == 3 && $3 ~ /4fsdp/ { print $3 }' | sort -u >"$tmp/$m.all"
  "$nm" -g --defined-only "$lib" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBRGS]$/ && $3 ~ /4fsdp/ { print $3 }' |
    sort -u >"$tmp/$m.strong"
  "$nm" -A -u "$lib" 2>/dev/null | awk '$NF ~ /4fsdp/ { n = split($1, p, ":"); print $NF, p[n - 1] }' |
    sort -u >"$tmp/$m.uses"
done

demangle() { if command -v c++filt >/dev/null; then c++filt "$1"; else echo "$1"; fi; }
violations=0
for m in "${modules[@]}"; do
  # What m uses but does not define itself.
  join -v 1 "$tmp/$m.uses" "$tmp/$m.all" >"$tmp/$m.needs" || true
  for x in "${modules[@]}"; do
    [[ ${reach[$m]} == *",$x,"* ]] && continue
    while read -r sym obj; do
      echo "${lib_of[$m]}($obj): error: uses $(demangle "$sym"), defined in module $x: module $m may not depend on module $x" >&2
      violations=$((violations + 1))
    done < <(join "$tmp/$m.needs" "$tmp/$x.strong")
  done
done
if ((violations > 0)); then
  echo "$violations symbol use(s) run against the module graph (cmake/module_graph.cmake, docs/layout.md)." >&2
  exit 1
fi
echo "module links ok" >"$stamp"
