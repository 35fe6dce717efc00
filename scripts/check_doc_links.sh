#!/usr/bin/env bash
# Every relative link in the repository's Markdown resolves (CTest `doc_links`, label cpu):
# `[text](path)`, `[text](path#anchor)`, `[text](#anchor)`, images and reference definitions
# (`[name]: path`) in every *.md file (git's tracked and untracked-but-not-ignored files, or
# without git every *.md outside build*/ and hidden folders). A path must exist (relative to
# the file, or to the repository root when it starts with `/`); an anchor into a Markdown file
# must be one of its headings as GitHub names them: lower case, every character but letters,
# digits, spaces, `-` and `_` dropped, each space a `-`, a repeated heading suffixed `-1`,
# `-2`, ... (or an HTML `id=`/`name=`). Links in fenced code blocks and inline code are not
# links; http(s):, mailto: and any other scheme are not checked (no network in CI).
# Prints `file:line: ...` for each broken link and exits 1 if there is one.
#   bash scripts/check_doc_links.sh [ROOT]        # default: this repository
#   bash scripts/check_doc_links.sh --self-test   # the checker against fixtures (CTest doc_links_self_test)
set -euo pipefail
export LC_ALL=C.UTF-8 2>/dev/null || true  # letters beyond ASCII count as letters in anchors

# slug TEXT: GitHub's anchor for a heading whose text is TEXT (without the duplicate suffix).
slug() {
  local s="$1"
  s=$(sed -E 's/!?\[([^]]*)\]\([^)]*\)/\1/g; s/<[^>]*>//g' <<<"$s")  # links -> their text; no tags
  s="${s#"${s%%[![:space:]]*}"}"; s="${s%"${s##*[![:space:]]}"}"        # trim
  s="${s,,}"
  s=$(sed -E 's/[^[:alnum:] _-]//g; s/ /-/g' <<<"$s")
  printf '%s' "$s"
}

declare -A anchors_of=()  # file -> newline-separated anchors, computed once per file

# anchors FILE: set anchors_of[FILE] to its headings' anchors.
anchors() {
  local file="$1"
  [[ -n ${anchors_of[$file]+x} ]] && return
  local -A seen=()
  local out=$'\n' line prev="" fence="" text a n
  while IFS= read -r line || [[ -n $line ]]; do
    line="${line%$'\r'}"
    if [[ -n $fence ]]; then
      [[ $line =~ ^\ {0,3}(\`{3,}|~{3,})[[:space:]]*$ && ${BASH_REMATCH[1]} == "$fence"* ]] && fence=""
      prev=""; continue
    fi
    if [[ $line =~ ^\ {0,3}(\`{3,}|~{3,}) ]]; then fence="${BASH_REMATCH[1]}"; prev=""; continue; fi
    text=""
    if [[ $line =~ ^\ {0,3}#{1,6}([[:space:]]+(.*))?$ ]]; then
      text="${BASH_REMATCH[2]}"
      text=$(sed -E 's/[[:space:]]+#+[[:space:]]*$//; s/^#+[[:space:]]*$//' <<<"$text")
      [[ -z $text ]] && text=" "
    elif [[ $line =~ ^\ {0,3}(=+|-+)[[:space:]]*$ && -n $prev && ! $prev =~ ^[[:space:]]*([-*+|>]|[0-9]+\.|#) ]]; then
      text="$prev"  # a setext heading: the paragraph line above the underline
    fi
    if [[ -n $text ]]; then
      a=$(slug "$text")
      if [[ -n ${seen[$a]+x} ]]; then
        n=${seen[$a]}; seen[$a]=$((n + 1)); out+="$a-$((n + 1))"$'\n'
      else
        seen[$a]=0; out+="$a"$'\n'
      fi
      prev=""; continue
    fi
    while [[ $line =~ \<[a-zA-Z][^\>]*[[:space:]](id|name)=\"([^\"]+)\" ]]; do
      out+="${BASH_REMATCH[2]}"$'\n'; line="${line#*"${BASH_REMATCH[0]}"}"
    done
    if [[ $line =~ ^[[:space:]]*$ ]]; then prev=""; else prev="$line"; fi
  done <"$file"
  anchors_of[$file]="$out"
}

broken=0
report() { echo "$1:$2: broken link '$3': $4"; broken=$((broken + 1)); }

# check ROOT FILE LINENO TARGET
check() {
  local root="$1" file="$2" lineno="$3" target="$4" path anchor dest
  target="${target#<}"; target="${target%>}"
  [[ -z $target || $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && return  # http:, https:, mailto:, ...
  path="${target%%#*}"; anchor=""
  [[ $target == *"#"* ]] && anchor="${target#*#}"
  path="${path%%\?*}"
  path=$(printf '%b' "${path//%/\\x}")  # %20 and the like
  if [[ -z $path ]]; then dest="$root/$file"
  elif [[ $path == /* ]]; then dest="$root$path"
  else dest="$root/$(dirname "$file")/$path"
  fi
  if [[ ! -e $dest ]]; then report "$file" "$lineno" "$target" "no file ${dest#"$root/"}"; return; fi
  [[ -z $anchor ]] && return
  [[ -d $dest ]] && dest="$dest/README.md"
  [[ $dest == *.md && -f $dest ]] || return  # anchors into code files are GitHub's line numbers
  anchors "$dest"
  [[ ${anchors_of[$dest]} == *$'\n'"$anchor"$'\n'* ]] ||
    report "$file" "$lineno" "$target" "no heading with anchor #$anchor in $(realpath --relative-to="$root" "$dest")"
}

# check_file ROOT FILE: every link of FILE (relative to ROOT).
check_file() {
  local root="$1" file="$2" line lineno=0 fence="" rest t ticks incode=0
  while IFS= read -r line || [[ -n $line ]]; do
    lineno=$((lineno + 1)); line="${line%$'\r'}"
    if [[ -n $fence ]]; then
      [[ $line =~ ^\ {0,3}(\`{3,}|~{3,})[[:space:]]*$ && ${BASH_REMATCH[1]} == "$fence"* ]] && fence=""
      continue
    fi
    if [[ $line =~ ^\ {0,3}(\`{3,}|~{3,}) ]]; then fence="${BASH_REMATCH[1]}"; incode=0; continue; fi
    if [[ $line =~ ^[[:space:]]*$ ]]; then incode=0; continue; fi  # a code span ends with its paragraph
    # Inline code is not a link, and a code span may run on to the next line: close it at the
    # end of this one and reopen it at the start of the next.
    rest="$line"
    ((incode)) && rest="\`$rest"
    ticks="${rest//[!\`]/}"
    if ((${#ticks} % 2)); then rest+="\`"; incode=1; else incode=0; fi
    [[ $rest == *"]"* ]] || continue
    # shellcheck disable=SC2016  # backquotes, not an expansion
    rest=$(sed -E 's/``[^`]*``//g; s/`[^`]*`//g' <<<"$rest")
    if [[ $rest =~ ^\ {0,3}\[[^]]+\]:[[:space:]]+([^[:space:]]+) ]]; then
      check "$root" "$file" "$lineno" "${BASH_REMATCH[1]}"
    fi
    while [[ $rest =~ \]\((\<[^\>]*\>|[^[:space:]\)]*)([[:space:]]+\"[^\"]*\")?\) ]]; do
      t="${BASH_REMATCH[1]}"; rest="${rest#*"${BASH_REMATCH[0]}"}"
      check "$root" "$file" "$lineno" "$t"
    done
  done <"$root/$file"
}

# markdown_files ROOT: the *.md files to check, relative to ROOT.
markdown_files() {
  local root="$1"
  if [[ $(git -C "$root" rev-parse --show-toplevel 2>/dev/null) == "$(cd "$root" && pwd -P)" ]]; then
    git -C "$root" ls-files --cached --others --exclude-standard -- '*.md' |
      while IFS= read -r f; do [[ -f $root/$f ]] && printf '%s\n' "$f"; done
  else
    (cd "$root" && find . \( -name 'build*' -o -name '.?*' -o -name '_deps' -o -name '*venv*' \
      -o -name node_modules \) -prune -o -name '*.md' -type f -print | sed 's|^\./||' | sort)
  fi
}

run() {
  local root files n=0
  root=$(cd "$1" && pwd -P)
  files=$(markdown_files "$root")
  while IFS= read -r f; do
    [[ -n $f ]] || continue
    check_file "$root" "$f"; n=$((n + 1))
  done <<<"$files"
  if ((broken > 0)); then
    echo "$broken broken link(s) in $n Markdown file(s) under $root" >&2
    return 1
  fi
  echo "every relative link and anchor in $n Markdown file(s) resolves"
}

# The checker against a tree whose broken links are known: it must name exactly those.
self_test() {
  local tmp got want
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # the path now: tmp is local
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/sub"
  cat >"$tmp/a.md" <<'EOF'
# Title

## Same
## Same
## Memory: x, `y_z` (w) ##
Sub *heading*
---
## [Linked](sub/b.md) heading

[ok](sub/b.md) [ok](sub/b.md#target-heading) [ok](#same-1) [ok](#memory-x-y_z-w) [ok](#sub-heading)
[ok](#linked-heading) [ok](sub/) [ok](</sub/b.md> "title") [ok](#anchor-by-id)
[web](https://example.com/x#y) [mail](mailto:a@b.c) `[code](nope.md)`
[bad](missing.md)
[bad](sub/b.md#nope) [bad](#same-2)
![bad image](img.png)
[ref]: missing2.md

```
[in a fence](nope.md)
```
<a id="anchor-by-id"></a>
~~~~
## Not a heading (fenced)
~~~~
[bad](#not-a-heading-fenced)
A code span that runs `over [a](nope3.md) line
break [b](nope4.md) and ends` here, then [bad](missing3.md)
EOF
  cat >"$tmp/sub/b.md" <<'EOF'
## Target heading
[ok](../a.md#title) [bad](../a.md#Title)
EOF
  mkdir -p "$tmp/build/x"; echo '[ignored](nowhere.md)' >"$tmp/build/x/c.md"  # build trees are not docs
  got=$(run "$tmp" 2>&1 | cut -d' ' -f1-4) || true
  want="a.md:13: broken link 'missing.md':
a.md:14: broken link 'sub/b.md#nope':
a.md:14: broken link '#same-2':
a.md:15: broken link 'img.png':
a.md:16: broken link 'missing2.md':
a.md:25: broken link '#not-a-heading-fenced':
a.md:27: broken link 'missing3.md':
sub/b.md:2: broken link '../a.md#Title':
8 broken link(s) in"
  if [[ $got != "$want" ]]; then
    echo "self-test failed; expected:"; echo "$want"; echo "got:"; echo "$got"
    exit 1
  fi
  echo "self-test passed: the 8 broken links named, the 13 good ones and the skipped ones not"
}

if [[ ${1:-} == --self-test ]]; then
  self_test
else
  run "${1:-$(dirname "${BASH_SOURCE[0]}")/..}"
fi
