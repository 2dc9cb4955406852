#!/bin/sh
# `make bench`: the benchmarks whose figures README and the issue notes quote.
# Figures, never pass/fail: medians measured side by side in one run.
set -eu
KVR=${1:-build/kvreplay}
T=${THREADS:-2}
mkdir -p results/cache/models
BASE=results/cache/models/bench-base.gguf
[ -f "$BASE" ] || "$KVR" model synth --preset base --seed 1 -o "$BASE"
echo "== engine prefill vs sgemm peak (threads $T), chunk sweep C = 16..512, blas and ref side by side"
"$KVR" bench -m "$BASE" --threads "$T" --sweep-chunks 16,32,64,128,256,512 --compare-kernels
echo "== engine decode (one token at a time after a 1024-token prompt, threads $T), blas and ref"
"$KVR" bench -m "$BASE" --threads "$T" --decode --compare-kernels --tokens 1024 --decode-steps 64
RWKV=../shared/data/models/rwkv7/tiny-rwkv-7v0-834K-FP32.bin
if [ -f "$RWKV" ]; then
    RW=results/cache/models/bench-rwkv7.gguf
    [ -f "$RW" ] || "$KVR" model convert --from rwkv.cpp "$RWKV" -o "$RW"
    echo "== RWKV-7 prefill (the real tiny model converted from rwkv.cpp, 4096 tokens), both kernels"
    "$KVR" bench -m "$RW" --threads "$T" --tokens 4096 --reps 5 --compare-kernels
else
    echo "== RWKV-7 prefill: skipped, $RWKV absent"
fi
echo "== tokenizers (1 MB agent-style text)"
"$KVR" bench --tokenizer -m ../shared/data/vocab/ggml-vocab-llama-spm.gguf -m ../shared/data/vocab/ggml-vocab-gpt-2.gguf --mb 1
echo "== disk checkpoint files vs plain file I/O"
"$KVR" bench --disk-cache --mb 64
HYB=results/cache/models/bench-hybrid.gguf
[ -f "$HYB" ] || "$KVR" model synth --arch hybrid --preset small --vocab ../shared/data/vocab/ggml-vocab-llama-spm.gguf --seed 2 -o "$HYB"
echo "== checkpoint save/restore vs memcpy, hybrid prefill tok/s at 2K/8K/32K (hybrid small, 1 thread)"
"$KVR" bench --checkpoints -m "$HYB" --threads 1
echo "== replay overhead: the engine's share of replay wall time (hybrid small, 12-turn agent loop)"
TR=results/cache/bench-agent.jsonl
[ -f "$TR" ] || "$KVR" synth-transcript --scenario agent --sessions 1 --turns 12 --system-bytes 8000 --tool-result-bytes 600 --seed 2 -o "$TR"
DB=results/cache/bench-replay.sqlite
rm -f "$DB" "$DB-wal" "$DB-shm"
"$KVR" replay -m "$HYB" -t "$TR" --db "$DB" --normalize anthropic-cch --decode 8 --threads "$T"
SMALL=results/cache/models/bench-small-spm.gguf
[ -f "$SMALL" ] || "$KVR" model synth --preset small --vocab ../shared/data/vocab/ggml-vocab-llama-spm.gguf --seed 1 -o "$SMALL"
echo "== kvreplay serve: HTTP TTFT over in-process TTFT, a fully cached 1-token request and a 2K-token cold one (llama small)"
"$KVR" bench --serve -m "$SMALL" --threads "$T" --align none --reps 9
echo "== shared cold baseline: cold compute saved on a policy sweep (seed002: quirk and fixed per model)"
rm -f "$DB" "$DB-wal" "$DB-shm"
"$KVR" experiment experiments/seed002.json --db "$DB" --threads "$T"
rm -f "$DB" "$DB-wal" "$DB-shm"
