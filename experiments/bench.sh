#!/bin/sh
# `make bench`: the benchmarks whose figures README and the issue notes quote.
# Figures, never pass/fail: medians measured side by side in one run.
#
# The targets of issue 23 are measured into results/bench/*.json and printed
# at the end as one table (`kvreplay bench --table results/bench`), with the
# machine (CPU, cores, OpenBLAS core). Options, as environment variables:
#   THREADS=T            threads of the 2-thread rows (default 2)
#   LLAMA_BENCH=PATH     llama.cpp's llama-bench: its side of every comparison, on the same
#                        F32 GGUF files (an instrument: never built or shipped by this project)
#   LLAMA_SERVER=PATH    llama.cpp's llama-server: -np 8 on the base GGUF under the same 8
#                        concurrent clients as kvreplay serve --parallel 8 (LLAMA_SERVER_PORT, 18080)
#   BENCH_FULL=1         long context at 32K and 128K (default 32K only) and the memory of the
#                        258K-token hybrid prompt measured (default: 32K measured, 258K computed)
#   BENCH_SEED003=1      seed003 at demo scale, quiet and beside two busy competitors
set -eu
KVR=${1:-build/kvreplay}
T=${THREADS:-2}
FULL=${BENCH_FULL:-0}
mkdir -p results/cache/models
OUT=results/bench
rm -rf "$OUT"
mkdir -p "$OUT"
BASE=results/cache/models/bench-base.gguf
[ -f "$BASE" ] || "$KVR" model synth --preset base --seed 1 -o "$BASE"
SMALL=results/cache/models/bench-small-140k.gguf  # the small preset, context metadata 140,000 (depths to 128K)
[ -f "$SMALL" ] || "$KVR" model synth --preset small --seed 1 --ctx 140000 -o "$SMALL"
HYB=results/cache/models/bench-hybrid.gguf
[ -f "$HYB" ] || "$KVR" model synth --arch hybrid --preset small --vocab ../shared/data/vocab/ggml-vocab-llama-spm.gguf --seed 2 -o "$HYB"
STORIES=../shared/data/models/stories260K.gguf
uptime

echo "== engine prefill vs sgemm and FMA peaks (threads $T), chunk sweep C = 16..512, blas and ref side by side"
"$KVR" bench -m "$BASE" --threads "$T" --sweep-chunks 16,32,64,128,256,512 --compare-kernels

echo "== issue 23 targets: measuring into $OUT (prefill, contention, long context, decode, memory)"
for th in 1 "$T"; do
    "$KVR" bench -m "$BASE" --threads "$th" --tokens 512 --compare-kernels --json > "$OUT/prefill-t$th.json"
done
"$KVR" bench --contention -m "$BASE" --threads "$T" --tokens 512 --reps 3 --json > "$OUT/contention.json"
DEPTHS=32768
[ "$FULL" = 1 ] && DEPTHS=32768,131072
for th in 1 "$T"; do
    "$KVR" bench --depth "$DEPTHS" -m "$SMALL" --threads "$th" --tokens 512 --compare-kernels --json > "$OUT/depth-t$th.json"
done
for th in 1 "$T"; do
    "$KVR" bench -m "$BASE" --threads "$th" --decode --compare-kernels --tokens 1 --decode-steps 128 --json > "$OUT/decode-base-t$th.json"
    "$KVR" bench -m "$STORIES" --threads "$th" --decode --compare-kernels --tokens 1 --decode-steps 128 --json > "$OUT/decode-stories-t$th.json"
done
MEMTOK=32768
[ "$FULL" = 1 ] && MEMTOK=258000
"$KVR" bench --memory -m "$HYB" --threads "$T" --kernel ref --tokens "$MEMTOK" --full 258000 --json > "$OUT/memory.json"
if [ "${BENCH_SEED003:-0}" = 1 ]; then
    DB=$(mktemp -d)/seed003.sqlite
    "$KVR" bench --contention --reps 1 --json \
        --exec "$KVR experiment experiments/seed003.json --db $DB --threads $T >/dev/null 2>&1; rm -f $DB $DB-wal $DB-shm" \
        > "$OUT/seed003-contention.json"
fi
if [ -n "${LLAMA_BENCH:-}" ]; then
    echo "== llama.cpp ($LLAMA_BENCH): pp512, tg128, p512 at depth, on the same GGUF files"
    "$LLAMA_BENCH" -m "$BASE" -p 512 -n 0 -t "1,$T" -r 3 -o json > "$OUT/llama-pp.json"
    "$LLAMA_BENCH" -m "$BASE" -m "$STORIES" -p 0 -n 128 -t "1,$T" -r 3 -o json > "$OUT/llama-tg.json"
    # $T threads first: llama-bench fills each depth once per -fa setting (its saved state
    # restores across thread counts and repetitions, not across -fa: V is transposed without
    # flash attention), in the first configuration that needs it
    "$LLAMA_BENCH" -m "$SMALL" -p 512 -n 0 -d "$DEPTHS" -fa 0,1 -t "$T,1" -r 2 -o json > "$OUT/llama-depth.json"
fi
echo "== serve under 8 concurrent clients (base, $T threads): kvreplay serve --parallel 8, and llama-server -np 8"
"$KVR" bench --serve --clients 8 -m "$BASE" --threads "$T" --requests 2 --tokens 128 --gen 32 --json > "$OUT/serve-clients.json"
if [ -n "${LLAMA_SERVER:-}" ]; then
    LPORT=${LLAMA_SERVER_PORT:-18080}
    "$LLAMA_SERVER" -m "$BASE" -np 8 -c 4096 -t "$T" -tb "$T" --port "$LPORT" > "$OUT/llama-server.log" 2>&1 &
    LPID=$!
    i=0
    until curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null 2>&1 || [ $i -ge 600 ]; do sleep 0.5; i=$((i + 1)); done
    "$KVR" bench --serve --clients 8 --url "http://127.0.0.1:$LPORT" -m "$BASE" --requests 2 --tokens 128 --gen 32 \
        --json > "$OUT/llama-serve-clients.json" || true
    kill "$LPID" 2>/dev/null || true
    wait "$LPID" 2>/dev/null || true
fi
echo "== issue 23 targets (results/bench/*.json; \"loaded\": tok/s beside two busy competitors)"
"$KVR" bench --table "$OUT"

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
"$KVR" bench --serve -m "$SMALL" --threads "$T" --align none --reps 9 --kernel ref
echo "== shared cold baseline: cold compute saved on a policy sweep (seed002: quirk and fixed per model)"
rm -f "$DB" "$DB-wal" "$DB-shm"
"$KVR" experiment experiments/seed002.json --db "$DB" --threads "$T"
rm -f "$DB" "$DB-wal" "$DB-shm"
uptime
