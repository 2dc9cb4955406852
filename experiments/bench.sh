#!/bin/sh
# `make bench`: the benchmarks whose figures README and the issue notes quote.
# Figures, never pass/fail: medians measured side by side in one run.
set -eu
KVR=${1:-build/kvreplay}
T=${THREADS:-2}
mkdir -p results/cache/models
BASE=results/cache/models/bench-base.gguf
[ -f "$BASE" ] || "$KVR" model synth --preset base --seed 1 -o "$BASE"
echo "== engine prefill vs sgemm peak (threads $T), chunk sweep and kernels"
"$KVR" bench -m "$BASE" --threads "$T" --sweep-chunks 16,32,64,128,256 --compare-kernels
echo "== tokenizers (1 MB agent-style text)"
"$KVR" bench --tokenizer -m ../shared/data/vocab/ggml-vocab-llama-spm.gguf -m ../shared/data/vocab/ggml-vocab-gpt-2.gguf --mb 1
echo "== disk checkpoint files vs plain file I/O"
"$KVR" bench --disk-cache --mb 64
if "$KVR" bench --help 2>/dev/null | grep -q -- --checkpoints; then
    echo "== checkpoint save/restore vs memcpy"
    "$KVR" bench --checkpoints --threads "$T"
fi
