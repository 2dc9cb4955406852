#!/bin/sh
# tests/serve_soak.sh KVREPLAY: serve's long runs, behind `make test-serve-soak`
# (docs/serve.md, section 9):
#   1. memory: 1,000 requests from 8 concurrent curl clients (every API,
#      streamed and not, with errors among them) to `serve --verify` on
#      stories260K; the server's resident set after 1,000 requests must be at
#      most 1.1x what it was after 100;
#   2. hostile bodies (docs/serve.md, "Hostile bodies"): a 30 MB chat body of
#      one character, alone, refused in under a second; then 16 concurrent
#      30 MB bodies (runs of one character and random text as chat, Anthropic
#      and /completion prompts, and raw random bytes) each refused (400, 413,
#      503) or answered, never dropped; a small request sent every 0.2 s
#      meanwhile answered within 1 s each; the server's peak RSS (VmHWM)
#      under 2 GB throughout;
#   3. leaks: the same mix as 1, 200 requests, to the ASan + UBSan build
#      (build-asan/kvreplay, made here when absent), stopped with SIGTERM:
#      exit 0 and no sanitizer report.
set -u
BIN=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$ROOT/../shared/data/models/stories260K.gguf
say() { echo "serve-soak: $*"; }
[ -r "$MODEL" ] || { say "skipped: $MODEL is absent"; exit 0; }
command -v curl >/dev/null 2>&1 || { say "skipped: curl is not installed"; exit 0; }
WORK=$(mktemp -d /tmp/kvr-soak.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT INT TERM
failed=0

start() {  # start BIN NAME
    rm -f "$WORK/$2.port"
    "$1" serve -m "$MODEL" --listen 127.0.0.1:0 --port-file "$WORK/$2.port" --verify --db "$WORK/$2.sqlite" \
        -c 512 --queue 64 2>"$WORK/$2.log" &
    PID=$!
    i=0
    while [ ! -s "$WORK/$2.port" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    PORT=$(cat "$WORK/$2.port" 2>/dev/null)
    [ -n "$PORT" ] || { say "FAIL $2: serve did not start"; cat "$WORK/$2.log"; exit 1; }
}

# The request mix: `sh one.sh PORT K` sends request K (its status on stdout).
cat > "$WORK/one.sh" <<'EOF2'
k=$2; u=http://127.0.0.1:$1
case $((k % 8)) in
0) d="{\"prompt\":\"Once upon a time $k\",\"n_predict\":4,\"n_probs\":3}"; p=/completion ;;
1) d="{\"prompt\":\"Lily had a dog. $k\",\"n_predict\":4,\"stream\":true}"; p=/completion ;;
2) d="{\"messages\":[{\"role\":\"user\",\"content\":\"hi $k\"}],\"max_tokens\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"; p=/v1/chat/completions ;;
3) d="{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi $k\"}]}"; p=/v1/messages ;;
4) d="{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}"; p=/v1/messages ;;
5) d="{\"content\":\"Once upon a time $k\",\"with_pieces\":true}"; p=/tokenize ;;
6) d="{\"prompt\":"; p=/completion ;;
7) d="{\"max_tokens\":\"3\",\"messages\":[]}"; p=/v1/messages ;;
esac
curl -s -o /dev/null -w '%{http_code}\n' --max-time 120 -d "$d" "$u$p"
EOF2

# run FROM TO: requests FROM..TO-1, 8 at a time; their statuses appended to $WORK/status
run() { seq "$1" $(($2 - 1)) | xargs -P 8 -I{} sh "$WORK/one.sh" "$PORT" {} >> "$WORK/status"; }

rss() { awk '/^VmRSS:/ {print $2}' /proc/$PID/status; }

# 1. memory
start "$BIN" mem
: > "$WORK/status"
run 0 100
r100=$(rss)
run 100 1000
r1000=$(rss)
n=$(wc -l < "$WORK/status")
bad=$(grep -cv -E '^(200|400|503)$' "$WORK/status")
kill -TERM $PID; wait $PID; rc=$?; PID=
ratio=$(awk -v a="$r1000" -v b="$r100" 'BEGIN {printf "%.3f", a / b}')
if [ "$n" = 1000 ] && [ "$bad" = 0 ] && [ $rc = 0 ] && awk -v r="$ratio" 'BEGIN {exit !(r <= 1.1)}'; then
    say "ok   1000 requests ($(grep -c '^200$' "$WORK/status") answered, $(grep -c '^400$' "$WORK/status") 400 as sent, $(grep -c '^503$' "$WORK/status") 503): RSS $r100 KiB after 100, $r1000 KiB after 1000 ($ratio x)"
else
    say "FAIL memory: $n statuses, $bad unexpected, exit $rc, RSS $r100 -> $r1000 KiB ($ratio x)"; failed=1
fi

# 2. hostile bodies
hwm() { awk '/^VmHWM:/ {print $2}' /proc/$PID/status; }
MB30=30000000
hostile_bodies() {  # the 30 MB bodies: runs of one character and random text in three APIs, raw random bytes
    head -c $MB30 /dev/zero | tr '\0' 'a' > "$WORK/run.txt"
    head -c $((MB30 * 3 / 4)) /dev/urandom | base64 -w 0 > "$WORK/rand.txt"
    for k in run rand; do
        { printf '{"max_tokens":4,"messages":[{"role":"user","content":"'; cat "$WORK/$k.txt"; printf '"}]}'; } \
            > "$WORK/chat-$k.json"
        { printf '{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"'; cat "$WORK/$k.txt"; printf '"}]}'; } \
            > "$WORK/anthropic-$k.json"
        { printf '{"n_predict":4,"prompt":"'; cat "$WORK/$k.txt"; printf '"}'; } > "$WORK/completion-$k.json"
    done
    head -c $MB30 /dev/urandom > "$WORK/bytes.bin"
    rm -f "$WORK/run.txt" "$WORK/rand.txt"
}
# flood K: body K of the 16 (its status and seconds on one line)
flood() {
    case $(($1 % 8)) in
    0|1) f=chat-run.json; p=/v1/chat/completions ;; 2) f=anthropic-run.json; p=/v1/messages ;;
    3) f=completion-run.json; p=/completion ;; 4) f=chat-rand.json; p=/v1/chat/completions ;;
    5) f=anthropic-rand.json; p=/v1/messages ;; 6) f=completion-rand.json; p=/completion ;;
    7) f=bytes.bin; p=/v1/chat/completions ;;
    esac
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 300 -H 'Content-Type: application/json' \
        --data-binary "@$WORK/$f" "http://127.0.0.1:$PORT$p"
}
hostile_bodies
start "$BIN" hostile
h0=$(hwm)
one=$(curl -s -o "$WORK/one.out" -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' \
      --data-binary "@$WORK/chat-run.json" "http://127.0.0.1:$PORT/v1/chat/completions")
h1=$(hwm)
: > "$WORK/flood"; : > "$WORK/small"
pids=
for k in $(seq 0 15); do flood $k >> "$WORK/flood" & pids="$pids $!"; done
sleep 0.3
while [ "$(wc -l < "$WORK/flood")" -lt 16 ]; do  # a small request every 0.2 s until every body is answered
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 30 \
        -d '{"prompt":"Once upon a time","n_predict":4}' "http://127.0.0.1:$PORT/completion" >> "$WORK/small"
    sleep 0.2
done
wait $pids
h2=$(hwm)
refused_mem=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^kvreplay_refused_memory_total / {print $2}')
kill -TERM $PID; wait $PID; rc=$?; PID=
load=$(cut -d' ' -f1-3 /proc/loadavg)
one_s=${one#* }
nf=$(wc -l < "$WORK/flood"); badf=$(grep -cv -E '^(200|400|413|503) ' "$WORK/flood")
ns=$(wc -l < "$WORK/small"); bads=$(grep -cv '^200 ' "$WORK/small")
small_max=$(awk 'BEGIN {m = 0} {if ($2 > m) m = $2} END {printf "%.3f", m}' "$WORK/small")
flood_max=$(awk 'BEGIN {m = 0} {if ($2 > m) m = $2} END {printf "%.2f", m}' "$WORK/flood")
codes=$(awk '{print $1}' "$WORK/flood" | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
if [ "${one%% *}" = 400 ] && grep -q exceed_context_size_error "$WORK/one.out" && \
   awk -v t="$one_s" 'BEGIN {exit !(t < 1.0)}'; then
    say "ok   a 30 MB prompt of one character refused (400) in $one_s s; peak RSS $h0 -> $h1 KiB (load $load)"
else
    say "FAIL a 30 MB prompt: ${one} (want 400 in under 1 s): $(head -c 300 "$WORK/one.out")"; failed=1
fi
if [ "$nf" = 16 ] && [ "$badf" = 0 ] && [ "$ns" -gt 0 ] && [ "$bads" = 0 ] && [ $rc = 0 ] && \
   [ "$h2" -lt 2097152 ] && awk -v t="$small_max" 'BEGIN {exit !(t <= 1.0)}'; then
    say "ok   16 concurrent 30 MB bodies: $codes, the last in $flood_max s ($refused_mem refused for memory); $ns small requests answered meanwhile, the slowest in $small_max s; peak RSS $h2 KiB (load $load)"
else
    say "FAIL hostile bodies: $nf statuses ($codes, $badf unexpected), $ns small ($bads not 200, slowest $small_max s), peak RSS $h2 KiB, exit $rc"
    failed=1
fi
rm -f "$WORK"/*.json "$WORK/bytes.bin"

# 3. leaks, under ASan + UBSan
ASAN_BIN=$ROOT/build-asan/kvreplay
if [ ! -x "$ASAN_BIN" ]; then
    say "building $ASAN_BIN"
    make -C "$ROOT" -s BUILD=build-asan OPT="-O1" \
        SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build-asan/kvreplay \
        >"$WORK/asan-build.log" 2>&1 || { say "FAIL building the ASan binary"; tail "$WORK/asan-build.log"; exit 1; }
fi
start "$ASAN_BIN" asan
: > "$WORK/status"
run 0 200
kill -TERM $PID; wait $PID; rc=$?; PID=
n=$(wc -l < "$WORK/status")
if [ $rc = 0 ] && [ "$n" = 200 ] && ! grep -q -E 'Sanitizer|runtime error' "$WORK/asan.log"; then
    say "ok   200 requests under ASan + UBSan: exit 0, no leak, no error"
else
    say "FAIL asan: exit $rc, $n statuses"; grep -A20 -E 'Sanitizer|runtime error' "$WORK/asan.log" | head -40; failed=1
fi
[ $failed = 0 ]
