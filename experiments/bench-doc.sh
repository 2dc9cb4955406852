#!/bin/sh
# experiments/bench-doc.sh KVREPLAY OUT STARTED LOAD_BEFORE LOAD_AFTER THREADS: writes
# docs/benchmarks.md from a `make bench` run (OUT/log.txt and OUT/*.json): the run's
# machine and figures above "## Method", and the method as docs/benchmarks.md has it
# (written by hand, kept). Atomic: a temporary file renamed over the old one.
set -eu
KVR=$1 OUT=$2 T0=$3 LOAD0=$4 LOAD1=$5 T=$6
DOC=docs/benchmarks.md
TMP=$DOC.tmp.$$
REV=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
CORES=$(nproc)
VEC=$(grep -o -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
{
    echo "# Benchmarks"
    echo
    echo "Written by \`make bench\` (experiments/bench.sh) from its last run; the method, below, is"
    echo "written by hand. Figures are medians measured side by side in one run; compare ratios, not"
    echo "absolute figures, across machines."
    echo
    echo "## The run"
    echo
    echo "- commit \`$REV\`$DIRTY, started $T0, \`THREADS=$T\`${LLAMA_BENCH:+, llama.cpp's llama-bench \`$LLAMA_BENCH\`}"
    echo "- machine: $CPU, $CORES cores, vector units: ${VEC:-none}"
    sed -n 's/^machine: /- kvreplay saw: /p' "$OUT/log.txt" | head -n 1
    echo "- load average (1, 5, 15 min): $LOAD0 before, $LOAD1 after"
    echo
    echo "## Targets"
    echo
    if [ -s "$OUT/log.txt" ] && "$KVR" bench --table "$OUT" > "$OUT/table.md" 2>/dev/null; then
        cat "$OUT/table.md"
    else
        echo "(no table: the run wrote no target figures)"
    fi
    echo
    echo "## Everything the run printed"
    echo
    echo '```'
    cat "$OUT/log.txt"
    echo '```'
    echo
    if [ -f "$DOC" ] && grep -q '^## Method' "$DOC"; then
        sed -n '/^## Method/,$p' "$DOC"
    else
        echo "## Method"
        echo
        echo "(to be written)"
    fi
} > "$TMP"
mv "$TMP" "$DOC"
echo "bench: wrote $DOC (commit $REV, load $LOAD0 -> $LOAD1)"
