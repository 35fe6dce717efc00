#!/usr/bin/env bash
# A range of the King James Bible (Debian's bible-kjv) as the demo corpora hold it: one
# paragraph (one line) per chapter, a blank line between chapters, on stdout.
# `bible -f` turns pretty-printing off: one verse a line, "Ge1:1 In the beginning ...", in
# canonical order for the range; awk joins each chapter's verses (the reference dropped).
# Usage: kjv_text.sh RANGE EXPECTED_VERSES   (e.g. Gen1:1-Rev22:21 31102; fails on another count)
set -euo pipefail
range=$1
expected=$2
bible -f "$range" | LC_ALL=C awk -v expected="$expected" '
  {
    ref = $1; sub(/:[0-9]+$/, "", ref)         # "Ge1:1" -> "Ge1": book and chapter
    text = $0; sub(/^[^ ]+ /, "", text)
    if (ref != chapter) { if (NR > 1) printf "\n\n"; chapter = ref; sep = "" }
    printf "%s%s", sep, text; sep = " "; verses++
  }
  END { printf "\n"; if (verses != expected) { print "expected " expected " verses, got " verses > "/dev/stderr"; exit 1 } }
'
