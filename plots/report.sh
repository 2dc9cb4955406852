#!/bin/sh
# plots/report.sh: writes $RESULTS_DIR/REPORT.md from the experiment
# databases and the figures plots/render.sh drew (render.sh runs it last;
# it can also run alone, after render.sh).
#
# For each experiment NAME in $EXPERIMENTS whose $RESULTS_DIR/NAME.sqlite
# exists: a section with what issue report it reproduces and what its
# figures and tables show, a sentence of numbers (plots/say-NAME.sql), the
# key tables (plots/tab-*.sql, markdown from sqlite3 -markdown), every
# figure $FIG_DIR/NAME-*.png found for a plots/NAME-*.gp with its caption
# file, and the output of `$KVREPLAY report --db` when that binary exists.
# All queries read the database read-only through plots/lib.sql (the
# latest run per variant and sweep value), like the figures.
#
# The report is written to a temporary file in $RESULTS_DIR and renamed
# over REPORT.md, so a reader never sees a partial one.
#
# Environment (defaults): RESULTS_DIR (results), FIG_DIR ($RESULTS_DIR/figures),
# EXPERIMENTS (every experiments/NAME.json), SQLITE3 (sqlite3),
# KVREPLAY (build/kvreplay), FULL_DIR ($RESULTS_DIR/full; empty: no full-scale part),
# FULL_ONLY (set: keep the report's demo sections, rewrite its full-scale part).
# Without any full-scale database (a fresh clone: they are not committed) the
# report's existing full-scale part is kept as it was.
# Exit status: 0 on success; 1 with a message when a query fails or the
# report cannot be written.
set -eu

RESULTS_DIR=${RESULTS_DIR:-results}
FIG_DIR=${FIG_DIR:-$RESULTS_DIR/figures}
SQLITE3=${SQLITE3:-sqlite3}
KVREPLAY=${KVREPLAY:-build/kvreplay}
FULL_DIR=${FULL_DIR-$RESULTS_DIR/full}
PLOTS=$(cd "$(dirname "$0")" && pwd)
# every experiment spec by default, experiments/NAME.json, in name order
EXPERIMENTS=${EXPERIMENTS:-$(cd "$PLOTS/../experiments" && for s in *.json; do echo "${s%.json}"; done)}

die() { echo "plots/report.sh: $*" >&2; exit 1; }
. "$PLOTS/figures.sh"

command -v "$SQLITE3" >/dev/null 2>&1 || die "$SQLITE3: not found (install the Debian package sqlite3)"
[ -d "$RESULTS_DIR" ] || die "$RESULTS_DIR: no such directory"

# Figure paths as REPORT.md (in RESULTS_DIR) links them.
case "$FIG_DIR" in
    "$RESULTS_DIR"/*) figrel=${FIG_DIR#"$RESULTS_DIR"/} ;;
    /*) figrel=$FIG_DIR ;;
    *) figrel=$(cd "$FIG_DIR" 2>/dev/null && pwd || echo "$FIG_DIR") ;;
esac

out="$RESULTS_DIR/REPORT.md"
tmp="$RESULTS_DIR/.REPORT.md.tmp.$$"
errf="$RESULTS_DIR/.REPORT.err.$$"
trap 'rm -f "$tmp" "$errf"' EXIT
trap 'exit 130' INT TERM

# query DB FILTER SQLFILE [sqlite3 options...]: as in render.sh.
query() {
    _db=$1 _filter=$2 _sql=$3
    shift 3
    _pre=/dev/null  # an older schema gets the current columns through temp views
    _v=$("$SQLITE3" -readonly -batch "$_db" 'PRAGMA user_version')
    [ -f "$PLOTS/compat-v$_v.sql" ] && _pre=$PLOTS/compat-v$_v.sql
    "$SQLITE3" -readonly -batch -bail "$@" "$_db" \
        ".read '$_pre'" \
        ".read '$PLOTS/lib.sql'" \
        "CREATE TEMP VIEW fig_runs AS SELECT s.*, min(s.run_id) OVER (PARTITION BY s.variant) AS vorder FROM sel_runs s WHERE ($_filter);" \
        ".read '$_sql'" 2>"$errf" || die "$_sql: query failed on $_db: $(cat "$errf")"
}

# table DB FILTER SQLFILE TITLE: a bold title line and the markdown table.
table() {
    _rows=$(query "$1" "$2" "$3" -markdown -header)
    [ -n "$_rows" ] || return 0
    printf '**%s**\n\n%s\n\n' "$4" "$_rows"
}

# say DB: the sentence(s) of plots/say-NAME.sql, one paragraph.
say() {
    _say="$PLOTS/say-$2.sql"
    case "$2" in probe-*) [ -f "$_say" ] || _say="$PLOTS/say-probe-all.sql" ;; esac
    [ -f "$_say" ] || return 0
    _s=$(query "$1" 1 "$_say" -list -noheader)
    [ -n "$_s" ] && printf '%s\n\n' "$_s"
    return 0
}

# The order figures appear in (the intros name them); figures of NAME not
# listed here follow in file-name order.
figorder() {
    case "$1" in
    seed000) echo "seed000-prefilled seed000-ttft seed000-anchor" ;;
    seed001) echo "seed001-reuse seed001-prefilled" ;;
    seed002) echo "seed002-cumulative seed002-rwkv7 seed002-summary" ;;
    seed003) echo "seed003-identical seed003-sweep" ;;
    seed004) echo "seed004-reuse seed004-ttft" ;;
    policies) echo "policies-overview policies-identical" ;;
    quirks) echo "quirks-vllm40696 quirks-sglang16521 quirks-sglang34683" ;;
    traces) echo "traces-capacity traces-pool traces-route traces-ttft" ;;
    batch) echo "batch-load batch-sweep batch-cost" ;;
    probe-seed003) echo "$1-identical $1-reuse $1-ttft" ;;
    probe-*) echo "$1-reuse $1-identical $1-ttft" ;;
    esac
}

# figures NAME: every rendered figure of NAME with its caption file.
figures() {
    _order=$(figorder "$1")
    _scripts=$(fig_scripts "$1")  # paths, one a line (they may hold spaces)
    _ifs=$IFS
    IFS='
'
    for _gp in $_scripts; do
        _f=$(fig_name "$1" "$_gp")
        case " $_order " in *" $_f "*) ;; *) _order="$_order $_f" ;; esac
    done
    IFS=$_ifs
    for _fig in $_order; do
        _gp=""
        IFS='
'
        for _s in $_scripts; do [ "$(fig_name "$1" "$_s")" = "$_fig" ] && _gp=$_s; done
        IFS=$_ifs
        [ -n "$_gp" ] || continue
        [ -f "$FIG_DIR/$_fig.png" ] || continue
        _cap=$(sed -n 's/^# caption: *//p' "$_gp" | head -n 1)
        printf '#### Figure %s\n\n' "$_fig"
        printf '![%s](%s/%s.png)\n\n' "$_fig" "$figrel" "$_fig"
        printf '*%s* ([PDF](%s/%s.pdf))\n\n' "$_cap" "$figrel" "$_fig"
        if [ -f "$FIG_DIR/$_fig.txt" ]; then
            printf '```text\n'
            sed '1d' "$FIG_DIR/$_fig.txt"
            printf '```\n\n'
        fi
    done
}

# cli_report DB: `kvreplay report --db DB`, folded, headings one level down.
cli_report() {
    if [ ! -x "$KVREPLAY" ]; then
        printf '(`%s` is not built: `make` builds it, and `%s report --db %s` gives the per-run report.)\n\n' \
            "$KVREPLAY" "$KVREPLAY" "$1"
        return 0
    fi
    printf '<details><summary><code>kvreplay report --db %s</code></summary>\n\n' "$1"
    if "$KVREPLAY" report --db "$1" >"$tmp.cli" 2>"$errf"; then
        sed -e '1{/^# /d}' -e 's/^### /#### /' "$tmp.cli"
    else
        printf '(`kvreplay report` failed: %s)\n' "$(head -c 500 "$errf")"
    fi
    rm -f "$tmp.cli"
    printf '\n</details>\n\n'
}

intro() {
    case "$1" in
    traces) cat <<'EOF'
Production traces through the cache policies, in token-only mode (`kvreplay
simulate`, docs/traces.md): the Mooncake FAST'25 conversation trace (12,031
requests, block ids of 512 tokens, arrival times) through block-hash, radix,
slot-lcp and disk-anchor under lru, lfu, fifo and s3fifo. `traces-capacity` is
the analogue of the Mooncake paper's Figure 9 (hit rate against capacity),
`traces-pool` of its Figure 10 (local caches against a global pool on 10
instances), `traces-route` of Dynamo's KV-router result (routing on 8
instances), `traces-ttft` the modeled TTFT distributions of those cluster runs.
Hits are counted by the policies' own structures over block ids and checked
against a brute-force reference in the tests; times are modeled (the
llama3-70b-a800x8 profile), not measured. The table puts the published figures
beside ours: the trace, the model and the cluster differ from the paper's and
Dynamo's, so they agree in shape, not in value.
EOF
    ;;
    seed000) cat <<'EOF'
Reproduces issue report `seeds/000` (ds4-server #393, "Cold anchor never
refreshed after partial prefix hits"). The disk-anchor policy keeps a cold
anchor checkpoint at the end of the stable prefix and continued waypoints
every N tokens. With the quirk `anchor-cold-only` (variant *quirk*) the anchor
is written only by a prefill that starts from zero; the issue report describes
how, once the stable prefix changes, every fresh session then resumes from an
older waypoint and the anchor is never refreshed. Variant *fixed* writes the
anchor when a partial hit lands below the anchor position. Every transcript
session is a fresh agent session; the per-session figures take its first
request (the one that starts from the disk cache), numbering sessions in
replay order. Figure `seed000-prefilled` plots the tokens that request
prefills (with the prompt length for reference), `seed000-ttft` its time to
first token, `seed000-anchor` the time spent writing anchors; the first table
shows, per variant, the prefill of the first and of the later sessions and
the anchor write cost (over all requests).
EOF
        ;;
    seed001) cat <<'EOF'
Reproduces issue report `seeds/001` (llama.cpp PR #21793, "anthropic: fix
prefix caching"). Claude Code sends a per-request checksum (`cch=` and five hex
digits) in the `x-anthropic-billing-header` system text, so consecutive
prompts differ a few tokens in and a prefix cache can reuse only what precedes
it. Variant *raw* replays the prompts as sent; *normalized* runs
`--normalize anthropic-cch`, which replaces the checksum before tokenization.
Figures `seed001-reuse` and `seed001-prefilled` plot, for each request in
replay order, the reuse fraction and the tokens prefilled; the first table
shows the per-run totals, the second where the prompt first left the best cached prefix (`miss_where`, `miss_pos`),
i.e. why the cache missed.
EOF
        ;;
    seed002) cat <<'EOF'
Reproduces issue report `seeds/002` (llama.cpp server, "forcing full prompt
re-processing due to lack of cache data"): for memory that supports only full
sequence removal (recurrent and hybrid models) the server discards the cached
state and re-prefills the whole prompt on every turn instead of restoring a
context checkpoint. Variants *MODEL/quirk* run `--quirk full-reprocess`,
*MODEL/fixed* restore the checkpoint taken on the prefill grid; MODEL is a
synthetic recurrent (Mamba-2) and hybrid model, and a real trained recurrent
model: the tiny RWKV-7 of rwkv.cpp's test suite, converted from its file, on a
shorter loop (its vocabulary is bytes). Figure `seed002-cumulative` plots the
cumulative time to first token of the reused path over the agent loop, with
the cold path of each model family for reference, `seed002-rwkv7` the same on
the real model; `seed002-summary` the median TTFT and the prefilled tokens per
variant; the table shows the per-run figures.
EOF
        ;;
    seed003) cat <<'EOF'
Reproduces issue report `seeds/003` (squish PR #188, "bit-exact partial
prefix-KV reuse via chunk-aligned prefill"). When the suffix after a reused
prefix is prefilled in differently shaped chunks than in the cold run, the
matmuls round differently and greedy generations can fork; prefilling in
chunks aligned to absolute multiples of C, with the reuse boundary floored to
that grid and capped at the previous prompt, computes every token in the same
shape as cold. Variants *MODEL/ALIGN/PRECISION/KERNEL* cross `--align chunk`
(the grid) with `--align none` (llama.cpp-style ubatches counted from the
reuse point), fp32 with bf16, and OpenBLAS with the fixed-order reference
kernels; *MODEL/chunk-nocap/fp32/blas* also reuses KV written by decode, off
the grid. Figure `seed003-identical` shows per variant the share of
bit-identical requests and of forked generations, `seed003-sweep` the
chunk-size sweep (TTFT and divergence against C); the first table covers the variants, the second the
sweep.
EOF
        ;;
    seed004) cat <<'EOF'
Reproduces issue report `seeds/004` (llama.cpp PR #21099, "fix prompt cache
reuse for hybrid/recurrent models"): with a large static context and short
follow-up queries, the checkpoint search for hybrid models applies a sliding-
window position threshold that matches no checkpoint, so the server erases
them and re-processes the whole prompt. The bug stays hidden while the host
prompt cache (`--cache-ram`) can hold the prompt's state, and appears once the
context outgrows it: reuse works at short context and fails at long context.
Variant *quirk* runs `--quirk swa-threshold`, *fixed* searches checkpoints by
position; both use the same `--cache-ram` budget (see the caption). Each run
replays one context length (`sweep_value`, tokens). Figures `seed004-reuse`
and `seed004-ttft` plot the reuse fraction and the median TTFT of the
follow-up requests (turn > 0) against the context length; the first table
shows them per run, the second the per-run totals over all requests.
EOF
        ;;
    policies) cat <<'EOF2'
Issue #16: the five cache policies replay the same transcripts: cold (the
baseline), slot-lcp (llama.cpp's server slots, one slot by default),
disk-anchor (ds4-server's disk checkpoints), block-hash (vLLM's automatic
prefix caching: chained block hashes, an LRU pool of blocks) and radix
(SGLang's RadixAttention tree). The workloads are two real SWE-agent
trajectories (`pydicom`, `fcsimple`, imported with `kvreplay import --from
swe-agent`) and a synthetic agent loop of interleaved sessions (`agent`), each
on a llama and a hybrid (Mamba-2 + attention) model; each variant is
WORKLOAD/MODEL/ALIGN/POLICY. Figure `policies-overview` shows, with the
prefill grid (`--align chunk`), the reuse fraction, the median TTFT speedup
over cold, the most bytes each cache held after a request and the tokens
prefilled; `policies-identical` the share of requests bit-identical to cold
under `--align chunk` and `--align none`. The table has every run.
EOF2
        ;;
    quirks) cat <<'EOF2'
The paged policies' bugs from their users' reports, each as bug and fix.
*vllm40696/\** (vLLM #40696): for a hybrid model vLLM raises the attention
block until one block's KV covers a Mamba state page, and only full blocks are
cached, so prompts shorter than a block never hit (`--quirk
hybrid-block-size`; *fixed* keeps the 64-token block); each run replays one
static context length (`sweep_value`, bytes of context). *sglang16521/\**
(SGLang #16521): the finished request entered the radix tree under its prompt
only (`--quirk prompt-key`), so the next turn recomputes the previous answer;
*fixed* inserts the answer too, both with `--cap-prompt off` (SGLang reuses
decode-written KV), *fixed-cap* under the harness's rule. *sglang34683/\**
(SGLang #34683): a radix hit whose suffix is computed as one extend pass
(`--align none`, 8192-token passes) against cold run twice, and the same hit on
the grid. Figures `quirks-vllm40696`, `quirks-sglang16521` and
`quirks-sglang34683` show them in turn.
EOF2
        ;;
    probe-seed001) cat <<'EOF'
### seed 001 against llama-server

Issue report `seeds/001` (llama.cpp PR #21793) reproduced black-box, with
`kvreplay probe` (docs/probe.md), on the servers themselves: the same
Claude-Code-shaped transcript (a fresh `cch=` checksum in the
`x-anthropic-billing-header` system text of every request, nothing else
volatile) sent through `/v1/messages` to `kvreplay serve` without and with
`--normalize anthropic-cch`, and to a real llama-server built from
llama.cpp at **0949beb5a3fc** (upstream just before the PR) and at
**c807c6e3b0c7** (the PR, an incremental rebuild of
`tools/server/server-chat.cpp`), both started as `llama-server -m MODEL -np 1
-c 16384 --cache-ram 0 --cache-reuse 0` on the synthetic tiny model of the
spec (`model synth --preset tiny --vocab ggml-vocab-llama-spm.gguf --seed 1`).
Every run declares `--normalize anthropic-cch` to probe, so the *expected*
reuse is what a server that normalizes the checksum reuses: counted on the
server's own tokens (llama-server: `/apply-template` of the body its Anthropic
route renders, then `/tokenize`, checked against the prompt count it reported;
serve: its own rendering, read back the same way), from the longest common
prefix with what its one slot held, capped at the prompt's length - 1
(llama-server) or floored to the 64-token grid (serve). Figure
`probe-seed001-reuse` plots, per server, the reuse each request reported
(`cache_read_input_tokens`) against that expectation: without the
normalization it stays at the billing header (47 tokens at 0949beb5a3fc;
serve's 64-token grid floors those to 0), with it (serve --normalize, and
llama.cpp at c807c6e3b0c7) it is the whole previous prompt.
`probe-seed001-identical` shows the share of requests whose warm run was
bit-identical to the forced cold run (`POST /slots/0?action=erase` before it)
and the share whose reuse was as expected; `probe-seed001-ttft` the time to
first token of both runs. Without `KVREPLAY_LLAMA_0949` and
`KVREPLAY_LLAMA_C807` set to the two servers' URLs (`make demo`) only the
serve variants run.
EOF
        ;;
    probe-seed003) cat <<'EOF'
Issue report `seeds/003` (squish PR #188) black-box, with `kvreplay probe` (docs/probe.md):
the same prompts, a static context of about 1250 tokens of stories260K's vocabulary and a
different short question per request, sent as token ids through llama-server's `/completion`
to `kvreplay serve --align none` (the suffix after a reuse prefilled in 512-token ubatches
counted from the reuse point, as llama.cpp does) and `--align chunk` (the 64-token grid), and
to a real llama-server built at 0949beb5a3fc, started as `llama-server -m stories260K.gguf
-np 1 --cache-ram 0 --cache-reuse 0` at its default batch sizes (`-b 2048 -ub 512`). Each
request runs warm (through the server's cache: it reuses the context) and cold (`cache_prompt:
false`); the whole vocabulary's log-probabilities (`--n-probs all`, 512 candidates) are compared
at each of the 40 generated positions, as float bits and as the JSON text the server wrote.
`probe-seed003-identical` shows the share of bit-identical requests per server, `probe-seed003-reuse`
the reuse (floored to the grid under align chunk, the whole context otherwise), `probe-seed003-ttft`
the time to first token. Without `KVREPLAY_LLAMA_STORIES` set to the server's URL (`make demo`)
only the serve variants run.
EOF
        ;;
    batch) cat <<'EOF2'
Batch invariance (issue 36): vLLM #40896 (the first of several identical requests at
temperature 0 differs from the later ones) and Thinking Machines' "Defeating Nondeterminism in
LLM Inference" (1,000 identical completions at temperature 0 gave 80 distinct texts): a
request's output depends on what it was batched with, because the batch's size and composition
change the kernels' reductions. Variants *load/KERNEL* send one request to `kvreplay serve
--parallel 8 --kernel KERNEL` alone, then N more times, each beside a seeded random number (0
to 7) of other generations (`kvreplay probe --concurrency 8 --load-repeat N`), and count the
distinct greedy outputs and logit byte strings (figure `batch-load`). Variants *sweep/KERNEL*
replay a transcript with `--batch-check B - 1`: each request computed again inside engine steps
shared with B - 1 seeded other sequences off its grid, compared with its cold run alone; figure
`batch-sweep` shows the share bit-identical and the engine's tokens/s against B,
`batch-cost` ref's tokens/s over blas's at each B: the cost of batch invariance, which vLLM
reports as 34-62% for its batch-invariant mode.
EOF2
        ;;
    probe-*) printf 'Experiment `%s`: `kvreplay probe` of live servers (docs/probe.md).\n' "$1" ;;
    *) printf 'Experiment `%s`.\n' "$1" ;;
    esac
    echo
}

# tables NAME DB: the key tables of one experiment, then its modeled TTFT.
tables() {
    case "$1" in traces)  # simulate runs (docs/traces.md): the published figures beside ours
        table "$2" 1 "$PLOTS/tab-traces-compare.sql" \
            'Table: the Mooncake paper'"'"'s and Dynamo'"'"'s published figures beside this run'"'"'s'
        return 0 ;;
    esac
    case "$1" in probe-*)  # live servers: no modeled TTFT
        table "$2" 1 "$PLOTS/tab-probe-all.sql" 'Table: per live server (latest run each)'
        return 0 ;;
    esac
    tables_measured "$@"
    table "$2" 1 "$PLOTS/tab-modeled.sql" \
        'Table: modeled TTFT per run (deterministic: each request'"'"'s work priced at the calibration in the price column)'
}

tables_measured() {
    case "$1" in
    seed003)
        table "$2" "coalesce(variant, '') NOT LIKE 'sweep/%'" "$PLOTS/tab-summary.sql" \
            'Table: per variant (latest run each)'
        table "$2" "coalesce(variant, '') LIKE 'sweep/%'" "$PLOTS/tab-summary.sql" \
            'Table: chunk-size sweep (per variant and C)'
        ;;
    seed001)
        table "$2" 1 "$PLOTS/tab-summary.sql" 'Table: per variant (latest run each)'
        table "$2" 1 "$PLOTS/tab-seed001-miss.sql" \
            'Table: where the prompt first left the cached prefix (at most 5 per variant)'
        ;;
    seed004)
        table "$2" "sweep_value IS NOT NULL" "$PLOTS/tab-seed004-followup.sql" \
            'Table: follow-up requests (turn > 0) per variant and context length'
        table "$2" 1 "$PLOTS/tab-summary.sql" 'Table: all requests per run'
        ;;
    seed000)
        table "$2" 1 "$PLOTS/tab-seed000-anchor.sql" 'Table: fresh sessions and anchor writes per variant'
        table "$2" 1 "$PLOTS/tab-summary.sql" 'Table: per variant (latest run each)'
        ;;
    policies)
        table "$2" 1 "$PLOTS/tab-policies.sql" 'Table: every run (workload, alignment, policy)'
        ;;
    *)
        table "$2" 1 "$PLOTS/tab-summary.sql" 'Table: per run'
        ;;
    esac
}

# full_present: the experiments with a full-scale database, one line ("" when none).
full_present() {
    [ -n "$FULL_DIR" ] || return 0
    for _n in $EXPERIMENTS; do
        [ -f "$FULL_DIR/$_n.sqlite" ] && printf ' %s' "$_n"
    done
    return 0
}

# The full-scale part: every $FULL_DIR/NAME.sqlite (default $RESULTS_DIR/full),
# its figures in $FULL_DIR/figures (render.sh draws them), what $FULL_DIR/notes.md
# says about how the runs were made and $FULL_DIR/costs.tsv (a tab-separated table:
# what each run cost) when they exist. Each experiment: the status of its runs
# (a run short of its requests is marked PARTIAL), seed004's report table, then
# the tables and figures of the demo sections.
full_part() {
    _present=$(full_present)
    [ -n "$_present" ] || return 0
    printf '# Full scale: the issue reports'"'"' own sizes\n\n'
    printf 'Every `--scale full` database under `%s` (docs/scale.md).\n\n' "$FULL_DIR"
    [ -f "$FULL_DIR/notes.md" ] && { cat "$FULL_DIR/notes.md"; echo; }
    if [ -f "$FULL_DIR/costs.tsv" ]; then
        printf '**Table: what each full-scale run cost**\n\n'
        awk -F '\t' 'NR == 1 { h = "|"; s = "|"; for (i = 1; i <= NF; i++) { h = h " " $i " |"; s = s "---|" }
                              print h; print s; next }
                    { r = "|"; for (i = 1; i <= NF; i++) r = r " " $i " |"; print r }' "$FULL_DIR/costs.tsv"
        echo
    fi
    _fig=$FIG_DIR _rel=$figrel
    FIG_DIR=$FULL_DIR/figures
    case "$FULL_DIR" in
        "$RESULTS_DIR"/*) figrel=${FULL_DIR#"$RESULTS_DIR"/}/figures ;;
        *) figrel=$(cd "$FULL_DIR" 2>/dev/null && pwd || echo "$FULL_DIR")/figures ;;
    esac
    for _n in $_present; do
        _db="$FULL_DIR/$_n.sqlite"
        printf '## %s at full scale\n\n' "$_n"
        if [ "$(query "$_db" 1 "$tmp.count" -list -noheader)" -eq 0 ]; then
            printf '`%s` holds no run with requests yet.\n\n' "$_db"
            continue
        fi
        table "$_db" 1 "$PLOTS/tab-full-status.sql" 'Table: the runs of this database (the latest per variant and sweep value)'
        [ "$_n" = seed004 ] && table "$_db" 1 "$PLOTS/tab-seed004-report.sql" \
            'Table: the issue report'"'"'s own table, reproduced (Q1 the first request, Q2 the second; the report'"'"'s seconds; here measured / modeled on the run'"'"'s model; the report'"'"'s model on an L4, modeled: docs/experiments.md)'
        say "$_db" "$_n"
        tables "$_n" "$_db"
        figures "$_n"
    done
    FIG_DIR=$_fig figrel=$_rel
}

printf 'SELECT count(*) + (SELECT count(*) FROM pragma_table_info('"'"'sim_runs'"'"')) FROM req;\n' >"$tmp.count"
if [ -n "${FULL_ONLY:-}" ]; then
    # Only the full-scale part is rewritten: the existing REPORT.md up to its
    # "# Full scale" heading (the demo sections, as the demo run wrote them) is kept.
    [ -f "$out" ] || die "$out: absent: FULL_ONLY rewrites the full-scale part of an existing report"
    {
        awk '/^# Full scale/ { exit } { print }' "$out"
        printf '%s\n\n' "$(full_part)"
        printf 'Full-scale part generated %s by `FULL_ONLY=1 make plots` at git revision `%s`.\n' \
            "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(git -C "$PLOTS/.." rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    } >"$tmp"
    rm -f "$tmp.count"
    mv -f "$tmp" "$out" || die "$out: cannot write"
    echo "plots/report.sh: rewrote the full-scale part of $out" >&2
    exit 0
fi
{
    rev=$(git -C "$PLOTS/.." rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    echo '# kvreplay results'
    echo
    printf 'Generated %s by `make plots` (plots/render.sh, plots/report.sh) at git revision `%s`.\n' \
        "$(date -u '+%Y-%m-%d %H:%M UTC')" "$rev"
    echo 'Each section reads one database, `results/NAME.sqlite`. Per variant and sweep value it'
    echo 'uses the latest run that has requests (a finished run before an unfinished one);'
    echo 'medians (p50) are the middle value, or the mean of the two middle values. The text'
    echo 'under each figure is its caption file: the configuration of the runs it plots, taken'
    echo 'from the `runs` table (including the build each run used).'
    echo
    echo 'Two kinds of TTFT appear. *Measured* TTFT (the "TTFT" columns, and every TTFT axis'
    echo 'not labelled "modeled") is wall-clock time on the machine that ran the experiment: per'
    echo 'request the median of its `--repeat` timings (the caption gives `repeat`; figures that'
    echo 'draw a band draw the fastest to the slowest timing), so it moves with the machine and'
    echo 'its load. *Modeled* TTFT (the "modeled" columns, the "Table: modeled TTFT" of every'
    echo 'section and the middle panel of `seed003-sweep`) is the request'"'"'s work, the FLOPs of'
    echo 'the engine'"'"'s cost model and the bytes its cache restored, priced at a calibration (GFLOP/s'
    echo 'at the run'"'"'s chunk shape, restore GB/s). `make demo` prices at the reference calibrations'
    echo 'of `results/calibration.json` (the caption'"'"'s "modeled TTFT priced at" line), so the'
    echo 'modeled tables are identical from run to run; each run'"'"'s own measured calibration is'
    echo 'stored beside it (`runs.calib_*`, the caption'"'"'s "calibration measured" line).'
    echo
    present=""
    for name in $EXPERIMENTS; do
        [ -f "$RESULTS_DIR/$name.sqlite" ] && present="$present $name"
    done
    if [ -z "$present" ]; then
        printf 'No experiment database under `%s` yet: `make demo` runs the experiments.\n' "$RESULTS_DIR"
    fi
    for name in $present; do
        db="$RESULTS_DIR/$name.sqlite"
        printf '## %s\n\n' "$name"
        intro "$name"
        n=$(query "$db" 1 "$tmp.count" -list -noheader)
        if [ "${n:-0}" -eq 0 ]; then
            printf '`%s` holds no run with requests yet.\n\n' "$db"
            continue
        fi
        say "$db" "$name"
        tables "$name" "$db"
        figures "$name"
        cli_report "$db"
    done
    if [ -n "$(full_present)" ]; then
        full_part
    elif [ -f "$out" ] && grep -q '^# Full scale' "$out"; then
        # no full-scale database here (a fresh clone: they are not committed): the
        # full-scale part the report already has is kept as it was written
        awk '/^# Full scale/ { keep = 1 } keep { print }' "$out"
    fi
} >"$tmp"
rm -f "$tmp.count"
mv -f "$tmp" "$out" || die "$out: cannot write"
echo "plots/report.sh: wrote $out" >&2
