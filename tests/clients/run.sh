#!/bin/sh
# tests/clients/run.sh KVREPLAY [--quick]: real clients against `kvreplay serve`.
#
# Installs pinned versions of the official `openai`, `@anthropic-ai/sdk` and
# `@google/genai` packages and of the Claude Code, Qwen Code, Codex and Gemini
# CLIs from npm into a cache outside the repository ($KVR_CLIENTS_CACHE,
# default ~/.cache/kvreplay-clients), then, each against a fresh server on
# 127.0.0.1 (a tiny synthetic model with the llama-spm vocabulary of
# ../shared/data, in a temporary directory):
#   sdk    one non-streaming and one streaming call per endpoint (sdk.mjs):
#          chat and text completions, the Responses API, Messages, Gemini
#   curl   llama-server's endpoints and a stream, with curl
#   claude `claude -p` (HOME in a temporary directory), through /v1/messages
#   qwen   `qwen -p`, through /v1/chat/completions
#   codex  `codex exec`, through /v1/responses ($HOME/.codex/config.toml)
#   gemini `gemini -p`, through /v1beta/models/M:streamGenerateContent
#          each agent's requests recorded (--record --verify), the recording
#          replayed: every request bit-identical
#   current (not with --quick) the same runs with the current version of each
#          agent on npm (`npm view PKG version`), when it differs from the pin
#   script (not with --quick) a 4-turn scripted session run by the real Claude
#          Code, Codex and Gemini CLI against `serve --script --record
#          --verify`: each reads a file, lists the directory, reads another
#          and answers; each recording then replays with --policy slot-lcp
#          and radix: 100% bit-identical (align chunk), reuse above 0.9 from
#          the second turn; serve's rows equal the replay's in every column
#          that is not a timing (Claude Code); Codex's rollout and the Gemini
#          CLI's chat log import to the 4 calls.
# Skips with one message (exit 0) when node, npm or the npm registry are not
# there; once the clients are installed, a failure is a failure (exit 1).
# `make test` runs it with --quick as its last step; `make test-clients` in full.
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
QUICK=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VOCAB=$ROOT/../shared/data/vocab/ggml-vocab-llama-spm.gguf
CACHE=${KVR_CLIENTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvreplay-clients}
PKGS="openai@6.49.0 @anthropic-ai/sdk@1.14.0 @google/genai@3.3.0 @anthropic-ai/claude-code@2.1.328 \
@qwen-code/qwen-code@0.24.4 @openai/codex@0.169.0 @google/gemini-cli@0.61.0"
say() { echo "test-clients: $*"; }

[ "${KVR_SKIP_CLIENTS:-}" = 1 ] && { say "skipped (KVR_SKIP_CLIENTS=1)"; exit 0; }
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { say "skipped: node and npm are not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { say "skipped: curl is not installed"; exit 0; }
[ -r "$VOCAB" ] || { say "skipped: $VOCAB is absent"; exit 0; }
if [ "$(cat "$CACHE/.installed" 2>/dev/null)" != "$PKGS" ]; then
    if ! timeout 30 npm view --silent openai@6.49.0 version >/dev/null 2>&1; then
        say "skipped: the npm registry cannot be reached (npm view openai failed)"
        exit 0
    fi
    say "installing $PKGS into $CACHE"
    mkdir -p "$CACHE"
    if ! timeout 600 npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error $PKGS >"$CACHE/install.log" 2>&1; then
        say "skipped: npm install failed (see $CACHE/install.log)"
        exit 0
    fi
    echo "$PKGS" > "$CACHE/.installed"
fi
NM=$CACHE/node_modules

WORK=$(mktemp -d /tmp/kvr-clients.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; [ -n "${KVR_KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT INT TERM
passed=0; failed=0
ok() { passed=$((passed + 1)); say "ok   $*"; }
bad() { failed=$((failed + 1)); say "FAIL $*"; }

"$BIN" model synth --preset tiny --vocab "$VOCAB" --seed 1 -o "$WORK/tiny.gguf" >/dev/null 2>&1 || { bad "model synth"; exit 1; }

# start NAME ARGS...: a server on a free port; PORT set. stop: SIGTERM, must exit 0.
start() {
    name=$1; shift
    rm -f "$WORK/$name.port"
    "$BIN" serve -m "$WORK/tiny.gguf" --listen 127.0.0.1:0 --port-file "$WORK/$name.port" --threads 2 "$@" \
        2>"$WORK/$name.log" &
    PID=$!
    i=0
    while [ ! -s "$WORK/$name.port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    PORT=$(cat "$WORK/$name.port" 2>/dev/null)
    [ -n "$PORT" ] || { bad "$name: serve did not start"; cat "$WORK/$name.log" >&2; exit 1; }
}
stop() {
    kill -TERM "$PID"; wait "$PID"; rc=$?; PID=
    [ $rc -eq 0 ] && ok "$1: SIGTERM, exit 0" || bad "$1: exit $rc after SIGTERM"
}

# --- the SDKs ---------------------------------------------------------------
start sdk -c 8192
if timeout 300 node "$HERE/sdk.mjs" "$NM" "$PORT" > "$WORK/sdk.out" 2>&1; then ok "sdk: $(grep -c '^ok' "$WORK/sdk.out") calls"
else bad "sdk:"; cat "$WORK/sdk.out"; fi
grep '^FAIL' "$WORK/sdk.out" | sed 's/^/    /'

# --- curl ------------------------------------------------------------------
c() { curl -sS --max-time 120 "$@"; }
u=http://127.0.0.1:$PORT
check() { if printf '%s' "$2" | grep -q -- "$3"; then ok "curl $1"; else bad "curl $1: $2"; fi; }
check "GET /health" "$(c $u/health)" '"status":"ok"'
check "GET /props" "$(c $u/props)" '"total_slots":1'
check "POST /tokenize" "$(c -d '{"content":"Once upon a time"}' $u/tokenize)" '"tokens":\[9038,2501,263,931\]'
check "POST /completion" "$(c -d '{"prompt":"Once upon a time","n_predict":4,"n_probs":2}' $u/completion)" '"completion_probabilities"'
check "POST /completion stream" "$(c -N -d '{"prompt":"Once","n_predict":3,"stream":true}' $u/completion)" '"stop":true'
check "POST /v1/chat/completions stream" "$(c -N -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}' $u/v1/chat/completions)" 'data: \[DONE\]'
check "POST /v1/messages stream" "$(c -N -H 'anthropic-version: 2023-06-01' -d '{"model":"x","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"stream":true}' $u/v1/messages)" 'event: message_stop'
check "GET /metrics" "$(c $u/metrics)" 'kvreplay_requests_total{api="anthropic",status="2xx"}'
stop sdk

# --- the agents, -p: answered, recorded, replayed bit-identically ------------
agent_home() { mkdir -p "$WORK/home-$1" "$WORK/cwd-$1"; }
agent_said() {  # agent_said NAME EXIT: it answered, and serve recorded its requests
    n=$(grep -c '"session"' "$WORK/$1.jsonl" 2>/dev/null)
    if [ "$2" -eq 0 ] && [ -s "$WORK/$1.out" ] && [ "${n:-0}" -ge 1 ]; then
        ok "$1: exit 0, $n requests recorded, $(wc -c < "$WORK/$1.out") bytes answered"
    else bad "$1: exit $2"; tail -5 "$WORK/$1.err" "$WORK/$1.out" "$WORK/$1.log"; fi
}
replayed() {  # replayed NAME: the recording replays with every request bit-identical
    "$BIN" replay -m "$WORK/tiny.gguf" -t "$WORK/$1.jsonl" --db "$WORK/$1-replay.sqlite" --kernel ref --threads 2 \
        --quiet 2>"$WORK/$1-replay.err" || { bad "$1: replay failed: $(tail -1 "$WORK/$1-replay.err")"; return; }
    all=$(sqlite3 "$WORK/$1-replay.sqlite" "SELECT count(*) FROM requests")
    diff=$(sqlite3 "$WORK/$1-replay.sqlite" "SELECT count(*) FROM requests WHERE NOT (logits_equal = 1 AND coalesce(state_equal, 1) = 1)")
    [ "${all:-0}" -ge 1 ] && [ "$diff" = 0 ] && ok "$1: the recording replays, $all requests bit-identical" \
        || bad "$1: replay: $diff of $all requests differ"
}
codex_config() {  # codex_config HOME PORT: a provider at serve, through the Responses API
    mkdir -p "$1/.codex"
    printf 'model = "gpt-5-codex"\nmodel_provider = "kvreplay"\n[model_providers.kvreplay]\nname = "kvreplay"\nbase_url = "http://127.0.0.1:%s/v1"\nwire_api = "responses"\nenv_key = "KVR_API_KEY"\n' "$2" \
        > "$1/.codex/config.toml"
}
gemini_config() { mkdir -p "$1/.gemini"; echo '{"security":{"auth":{"selectedType":"gemini-api-key"}}}' > "$1/.gemini/settings.json"; }
# run_agent NAME NODE_MODULES: one agent's -p (codex: exec) through serve, then its recording replayed
run_agent() {
    name=$1; nm=$2
    start "$name" -c 40000 -n 32 --kernel ref --verify --record "$WORK/$name.jsonl"
    agent_home "$name"
    H=$WORK/home-$name
    case $name in
    claude*) ( cd "$WORK/cwd-$name" && HOME="$H" ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=any \
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
               timeout 300 "$nm/.bin/claude" -p "say hi" > "$WORK/$name.out" 2> "$WORK/$name.err" ) ;;
    qwen*)   ( cd "$WORK/cwd-$name" && HOME="$H" OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=any \
               OPENAI_MODEL=any timeout 300 "$nm/.bin/qwen" -p "say hi" > "$WORK/$name.out" 2> "$WORK/$name.err" ) ;;
    codex*)  codex_config "$H" "$PORT"
             ( cd "$WORK/cwd-$name" && HOME="$H" KVR_API_KEY=any \
               timeout 300 "$nm/.bin/codex" exec --skip-git-repo-check "say hi" > "$WORK/$name.out" 2> "$WORK/$name.err" ) ;;
    gemini*) gemini_config "$H"
             ( cd "$WORK/cwd-$name" && HOME="$H" GEMINI_API_KEY=any GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$PORT \
               GEMINI_CLI_TRUST_WORKSPACE=true timeout 300 "$nm/.bin/gemini" -m gemini-2.5-flash -p "say hi" \
               > "$WORK/$name.out" 2> "$WORK/$name.err" ) ;;
    esac
    agent_said "$name" $?
    stop "$name"
    replayed "$name"
}
for a in claude qwen codex gemini; do run_agent $a "$NM"; done
say "agents run (pinned): $(printf '%s\n' $PKGS | grep -E 'claude-code|qwen-code|codex|gemini-cli' | tr '\n' ' ')"

# --- the current version of each agent, where npm has a newer one ------------
if [ "$QUICK" != --quick ]; then
    for spec in claude:@anthropic-ai/claude-code qwen:@qwen-code/qwen-code codex:@openai/codex gemini:@google/gemini-cli; do
        a=${spec%%:*}; pkg=${spec#*:}
        cur=$(timeout 30 npm view "$pkg" version 2>/dev/null)
        pin=$(printf '%s\n' $PKGS | sed -n "s|^$pkg@||p")
        if [ -z "$cur" ]; then say "current $pkg: npm view failed, not run"; continue; fi
        if [ "$cur" = "$pin" ]; then say "current $pkg is the pinned $pin: run above"; continue; fi
        dir=$CACHE/current-$a
        if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$pkg@$cur" ]; then
            mkdir -p "$dir"
            if timeout 600 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$pkg@$cur" >"$dir/install.log" 2>&1
            then echo "$pkg@$cur" > "$dir/.installed"
            else bad "current $pkg@$cur: npm install failed (see $dir/install.log)"; continue; fi
        fi
        say "current $pkg@$cur (pinned $pin):"
        run_agent "$a-current" "$dir/node_modules"
    done
fi

# --- a scripted Claude Code session, recorded, verified, replayed -----------
if [ "$QUICK" != --quick ]; then
    D=$WORK/cwd-script
    mkdir -p "$D"
    printf 'hello from notes\n' > "$D/notes.txt"
    printf 'buy milk\n' > "$D/todo.txt"
    TASK="Read notes.txt, list the files here, read todo.txt, then tell me what they say."
    cat > "$WORK/script.jsonl" <<EOF
{"v":2,"session":"cc","turn":0,"messages":[{"role":"user","content":[{"type":"text","text":"$TASK"}]}],"response":{"content":[{"type":"thinking","thinking":"Start with notes.txt."},{"type":"text","text":"I will read notes.txt first."},{"type":"tool_use","id":"toolu_01","name":"Read","input":{"file_path":"$D/notes.txt"}}]}}
{"v":2,"session":"cc","turn":1,"prev":0,"append":[],"response":{"content":[{"type":"tool_use","id":"toolu_02","name":"Bash","input":{"command":"ls $D","description":"List the files"}}]}}
{"v":2,"session":"cc","turn":2,"prev":1,"append":[],"response":{"content":[{"type":"tool_use","id":"toolu_03","name":"Read","input":{"file_path":"$D/todo.txt"}}]}}
{"v":2,"session":"cc","turn":3,"prev":2,"append":[],"response":{"content":[{"type":"text","text":"notes.txt says hello from notes; todo.txt says buy milk; the directory holds both."}]}}
EOF
    t0=$(date +%s)
    start script -c 40000 -n 32 --kernel ref --decode 4 --verify --script "$WORK/script.jsonl" \
        --record "$WORK/session.jsonl" --db "$WORK/session.sqlite"
    ( cd "$D" && HOME="$WORK/home-script" ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=any \
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
      timeout 900 "$NM/.bin/claude" -p "$TASK" --allowedTools "Read" "Bash(ls:*)" > "$WORK/script.out" 2> "$WORK/script.err" )
    rc=$?
    stop script
    t1=$(date +%s)
    q() { sqlite3 "$1" "$2"; }
    n=$(q "$WORK/session.sqlite" "SELECT count(*) FROM requests WHERE session = (SELECT session FROM requests WHERE turn = 3)")
    if [ $rc -eq 0 ] && grep -q "buy milk" "$WORK/script.out" && [ "$n" = 4 ]; then
        ok "script: Claude Code ran the 4 scripted turns (read, ls, read, answer) in $((t1 - t0)) s"
    else bad "script: exit $rc, $n turns"; tail -5 "$WORK/script.err" "$WORK/script.out"; grep -E 'departs|side' "$WORK/script.log"; fi
    grep -q 'departs from the script' "$WORK/script.log" && say "     (departures said: $(grep -c 'departs from the script' "$WORK/script.log"))"
    for pol in slot-lcp radix; do
        "$BIN" replay -m "$WORK/tiny.gguf" -t "$WORK/session.jsonl" --db "$WORK/replay-$pol.sqlite" --policy $pol \
            --decode 4 --kernel ref --threads 2 --quiet 2>"$WORK/replay-$pol.err" || bad "replay --policy $pol failed"
        db=$WORK/replay-$pol.sqlite
        ident=$(q "$db" "SELECT count(*) FROM requests WHERE NOT (logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)")
        low=$(q "$db" "SELECT count(*) FROM requests WHERE turn >= 1 AND session = (SELECT session FROM requests WHERE turn = 3) AND 1.0 * n_reused / n_prompt <= 0.9")
        min=$(q "$db" "SELECT printf('%.3f', min(1.0 * n_reused / n_prompt)) FROM requests WHERE turn >= 1 AND session = (SELECT session FROM requests WHERE turn = 3)")
        [ "$ident" = 0 ] && [ "$low" = 0 ] && ok "replay --policy $pol: 100% bit-identical, reuse from the second turn >= $min" \
            || bad "replay --policy $pol: $ident not identical, $low turns reuse <= 0.9 (min $min)"
    done
    cols="req_index, session, turn, n_prompt, n_reused, n_prefilled, logits_equal, first_diff_index, top1_equal, fork_step, decode_equal, n_decode, flops_cold, flops_reuse, bytes_restored, sim, f_keep, slot, lcp, miss_pos, miss_byte, miss_text, miss_where, stable_end, note, extra, state_equal, state_hash_cold, state_hash_reuse, cache_bytes, cache_entries, verified"
    diff=$(q "$WORK/session.sqlite" "ATTACH '$WORK/replay-slot-lcp.sqlite' AS b; SELECT count(*) FROM (SELECT $cols FROM main.requests EXCEPT SELECT $cols FROM b.requests); ")
    nb=$(q "$WORK/replay-slot-lcp.sqlite" "SELECT count(*) FROM requests")
    ns=$(q "$WORK/session.sqlite" "SELECT count(*) FROM requests")
    [ "$diff" = 0 ] && [ "$nb" = "$ns" ] && ok "serve's $ns rows equal the replay's (slot-lcp) in every column but the timings" \
        || bad "serve's rows and the replay's differ: $diff of $ns (replay has $nb)"
fi

# --- scripted Codex and Gemini CLI sessions, recorded, verified, replayed ------
# agent_script AGENT: the 4-turn task through serve --script; the agent runs the tools itself
agent_script() {
    ag=$1  # not $name: start and stop set it
    D=$WORK/cwd-$ag-script; H=$WORK/home-$ag-script
    mkdir -p "$D" "$H"
    printf 'hello from notes\n' > "$D/notes.txt"
    printf 'buy milk\n' > "$D/todo.txt"
    TASK="Read notes.txt, list the files here, read todo.txt, then tell me what they say."
    case $ag in
    codex)  t0='{"type":"tool_use","id":"call_01","name":"exec_command","input":{"cmd":"cat notes.txt","workdir":"'$D'"}}'
            t1='{"type":"tool_use","id":"call_02","name":"exec_command","input":{"cmd":"ls","workdir":"'$D'"}}'
            t2='{"type":"tool_use","id":"call_03","name":"exec_command","input":{"cmd":"cat todo.txt","workdir":"'$D'"}}' ;;
    gemini) t0='{"type":"tool_use","id":"call_01","name":"read_file","input":{"file_path":"'$D'/notes.txt"}}'
            t1='{"type":"tool_use","id":"call_02","name":"list_directory","input":{"dir_path":"'$D'"}}'
            t2='{"type":"tool_use","id":"call_03","name":"read_file","input":{"file_path":"'$D'/todo.txt"}}' ;;
    esac
    cat > "$WORK/$ag-script.jsonl" <<EOF
{"v":2,"session":"$ag","turn":0,"messages":[{"role":"user","content":[{"type":"text","text":"$TASK"}]}],"response":{"content":[{"type":"text","text":"I will read notes.txt first."},$t0]}}
{"v":2,"session":"$ag","turn":1,"prev":0,"append":[],"response":{"content":[$t1]}}
{"v":2,"session":"$ag","turn":2,"prev":1,"append":[],"response":{"content":[$t2]}}
{"v":2,"session":"$ag","turn":3,"prev":2,"append":[],"response":{"content":[{"type":"text","text":"notes.txt says hello from notes; todo.txt says buy milk; the directory holds both."}]}}
EOF
    s0=$(date +%s)
    start "$ag-script" -c 40000 -n 32 --kernel ref --decode 4 --verify --script "$WORK/$ag-script.jsonl" \
        --record "$WORK/$ag-session.jsonl" --db "$WORK/$ag-session.sqlite"
    case $ag in
    codex)  codex_config "$H" "$PORT"
            ( cd "$D" && HOME="$H" KVR_API_KEY=any timeout 900 "$NM/.bin/codex" exec --skip-git-repo-check \
              --dangerously-bypass-approvals-and-sandbox "$TASK" > "$WORK/$ag-script.out" 2> "$WORK/$ag-script.err" ) ;;
    gemini) gemini_config "$H"
            ( cd "$D" && HOME="$H" GEMINI_API_KEY=any GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$PORT \
              GEMINI_CLI_TRUST_WORKSPACE=true timeout 900 "$NM/.bin/gemini" -m gemini-2.5-flash -p "$TASK" \
              > "$WORK/$ag-script.out" 2> "$WORK/$ag-script.err" ) ;;
    esac
    rc=$?
    stop "$ag-script"
    s1=$(date +%s)
    n=$(sqlite3 "$WORK/$ag-session.sqlite" "SELECT count(*) FROM requests WHERE session = (SELECT session FROM requests WHERE turn = 3)")
    dep=$(grep -c 'departs from the script' "$WORK/$ag-script.log")
    if [ $rc -eq 0 ] && grep -q "buy milk" "$WORK/$ag-script.out" && [ "$n" = 4 ] && [ "$dep" = 0 ]; then
        ok "script: $ag ran the 4 scripted turns (read, ls, read, answer) in $((s1 - s0)) s, no departure"
    else bad "script: $ag: exit $rc, $n turns, $dep departures"; tail -5 "$WORK/$ag-script.err"; grep -E 'departs' "$WORK/$ag-script.log"; fi
    for pol in slot-lcp radix; do
        db=$WORK/$ag-replay-$pol.sqlite
        "$BIN" replay -m "$WORK/tiny.gguf" -t "$WORK/$ag-session.jsonl" --db "$db" --policy $pol \
            --decode 4 --kernel ref --threads 2 --quiet 2>"$db.err" || bad "$ag: replay --policy $pol failed"
        ident=$(sqlite3 "$db" "SELECT count(*) FROM requests WHERE NOT (logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)")
        low=$(sqlite3 "$db" "SELECT count(*) FROM requests WHERE turn >= 1 AND 1.0 * n_reused / n_prompt <= 0.9")
        min=$(sqlite3 "$db" "SELECT printf('%.3f', min(1.0 * n_reused / n_prompt)) FROM requests WHERE turn >= 1")
        [ "$ident" = 0 ] && [ "$low" = 0 ] && ok "$ag: replay --policy $pol: 100% bit-identical, reuse from the second turn >= $min" \
            || bad "$ag: replay --policy $pol: $ident not identical, $low turns reuse <= 0.9 (min $min)"
    done
    case $ag in  # the agent's own log of the session
    codex)  log=$(find "$H/.codex/sessions" -name 'rollout-*.jsonl' | head -1); from=codex ;;
    gemini) log=$(find "$H/.gemini/tmp" -path '*/chats/session-*' | head -1); from=gemini-cli ;;
    esac
    if [ -n "$log" ] && "$BIN" import --from $from "$log" -o "$WORK/$ag-imported.jsonl" 2>"$WORK/$ag-import.err"; then
        k=$(grep -c '"turn"' "$WORK/$ag-imported.jsonl")
        tu=$(grep -c '"tool_use"' "$WORK/$ag-imported.jsonl")
        [ "$k" = 4 ] && [ "$tu" -ge 3 ] && ok "$ag: its own log imports (--from $from) to 4 calls with their tool calls" \
            || bad "$ag: its log imports to $k calls, $tu with tool calls"
    else bad "$ag: import --from $from ${log:-(no log found)}: $(tail -1 "$WORK/$ag-import.err" 2>/dev/null)"; fi
}
if [ "$QUICK" != --quick ]; then
    agent_script codex
    agent_script gemini
fi

say "$passed passed, $failed failed"
[ $failed -eq 0 ]
