#!/bin/sh
# plots/fake.sh: synthetic experiment databases for developing and testing
# the figures (never used by `make plots` itself).
#
#   sh plots/fake.sh DIR     writes DIR/seed000.sqlite ... DIR/seed004.sqlite,
#                            DIR/policies.sqlite, DIR/quirks.sqlite and
#                            DIR/probe-seed001.sqlite
#
# Each database has the schema of docs/sqlite.md (plots/fake-schema.sql) and
# plausible, deterministic rows (awk's rand() under a fixed srand seed) shaped
# like the seven experiments' expected results (experiments/NAME.json). The
# numbers are invented: they exercise the queries and the layout, they are
# not measurements.
# Besides the runs a figure uses, the files hold the cases render.sh must
# cope with: a superseded failed run of a variant (seed001 "raw"), a failed
# rerun after a finished run (policies pydicom/llama/none/radix), a finished
# run superseded by a later one (quirks sglang34683/extend), empty runs
# (seed001 "cold", quirks vllm40696/fixed context=4000: no requests), a run
# of an older build that stored no cache_bytes (policies
# fcsimple/llama/chunk/slot-lcp), non-numeric sweep values stored as NULL
# (policies: sweep_name "policy"), requests whose logits match cold but whose
# state does not (state_equal 0: policies */hybrid/none/block-hash), a
# NULL/JSON mix in requests.extra, and kvreplay probe's rows: a server that
# reports no reuse (reuse_reported NULL), a request it failed (error set),
# one whose warm run differs from cold, and a superseded probe run.
# Existing files in DIR with these names are replaced.
set -eu
dir=${1:?usage: sh plots/fake.sh DIR}
here=$(dirname "$0")
SQLITE3=${SQLITE3:-sqlite3}
mkdir -p "$dir"

# Shared awk functions: SQL literals and one INSERT per run / request.
lib='
function q(s) { if (s == "") return "NULL"; gsub(/\047/, "\047\047", s); return "\047" s "\047" }
function s(x) { gsub(/\047/, "\047\047", x); return "\047" x "\047" }
function n(x) { return (x == "") ? "NULL" : x }
function u() { return rand() }
# run(id, experiment, variant, sweep_name, sweep_value, model, n_params, policy,
#     quirks, normalize, align, chunk, ubatch, kernel, precision, decode_n, n_ctx, status, transcript
#     [, knobs]): knobs, optional, is an SQL SET list for the other columns of
#     the run (block_size = 64, policy_opts = ..., cap_prompt = 0, ...)
function run(id, ex, va, sn, sv, mo, np, po, qu, no, al, ch, ub, ke, pr, dn, nc, st, tr, kn,   t) {
    t = sprintf("2025-06-01T%02d:%02d:%02d.000Z", 8 + int(id / 60), id % 60, (id * 7) % 60)
    printf "INSERT INTO runs(run_id, started_at, finished_at, status, version, git_rev, argv, experiment, variant, sweep_name, sweep_value, model_path, model_sha256, model_name, n_params, transcript, policy, quirks, normalize, align, chunk, ubatch, kernel, precision, threads, decode_n, n_ctx, seed, blas, cpu, n_cpus, config_key) VALUES(%d, %s, %s, %s, \0470.1.0\047, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %d, %s, %s, %s, 2, %s, %s, 42, %s, %s, 2, %s);\n", \
        id, q(t), (st == "done" ? q(t) : "NULL"), q(st), q(st == "failed" ? "0123456789ab" : "fedcba987654"), \
        q("kvreplay experiment experiments/" ex ".exp --db results/" ex ".sqlite"), q(ex), q(va), q(sn), n(sv), \
        q("models/" mo ".gguf"), q(sprintf("%064d", id)), q(mo), n(np), q(tr), q(po), s(qu), s(no), q(al), ch, n(ub), \
        q(ke), q(pr), n(dn), n(nc), q("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"), \
        q("Intel(R) Xeon(R) CPU @ 2.20GHz"), q("{\"run\":" id "}")
    if (kn != "") printf "UPDATE runs SET %s WHERE run_id = %d;\n", kn, id
}
# req(run, i, session, turn, n_prompt, n_reused, cold_ms, reuse_ms, logits_eq, decode_eq,
#     fork, n_decode, miss_pos, miss_where, anchor_pos, anchor_ms, extra, stable_end
#     [, cache_bytes, cache_entries, state_equal]): the last three optional (NULL when left out)
function req(r, i, se, tu, np, nr, c, ru, le, de, fk, nd, mp, mw, ap, am, ex, sb, cb, ce, sq,   fd, mu, mad, kl) {
    if (nr > np) nr = np
    fd = le ? "" : int(u() * 32000); mu = le ? 0 : 1 + int(u() * 40)
    mad = le ? 0 : sprintf("%.3g", 1e-6 * mu); kl = le ? 0 : sprintf("%.3g", 1e-9 * mu)
    printf "INSERT INTO requests(run_id, req_index, transcript, session, turn, n_prompt, n_reused, n_prefilled, ttft_cold_ms, ttft_reuse_ms, logits_equal, first_diff_index, max_abs_diff, max_ulp, kl, top1_equal, fork_step, decode_equal, n_decode, miss_pos, miss_where, stable_end, anchor_pos, anchor_ms, extra, cache_bytes, cache_entries, state_equal) VALUES(%d, %d, \0470\047, %s, %d, %d, %d, %d, %.3f, %.3f, %d, %s, %s, %d, %s, %d, %s, %d, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s);\n", \
        r, i, q(se), tu, np, nr, np - nr, c, ru, le, n(fd), mad, mu, kl, (fk == "" || fk > 0) ? 1 : 0, n(fk), de, nd, \
        n(mp), q(mw), n(sb), n(ap), n(am), q(ex), n(cb), n(ce), n(sq)
}
# TTFT model: ms for prefilling n tokens after p cached ones (quadratic attention term).
function ttft(nt, p, k) { return (k + 0.0) * nt * (1 + (p + nt / 2) / 16384) * (0.97 + 0.06 * u()) + 0.3 }
'

mk() {  # mk NAME AWK_PROGRAM: (re)creates DIR/NAME.sqlite
    db="$dir/$1.sqlite"
    rm -f "$db" "$db-wal" "$db-shm" "$db.sql"
    awk "$lib$2" </dev/null >"$db.sql"
    # every run timed 3 times and priced at a reference calibration: bands around
    # the measured TTFT, the modeled TTFT from the work (deterministic)
    { cat "$here/fake-schema.sql"; echo "BEGIN;"; cat "$db.sql"
      echo "UPDATE runs SET n_repeat = 3, calib_gflops = 48.5, calib_restore_gbs = 9.5, price_gflops = 50,"
      echo "  price_restore_gbs = 10, price_source = 'reference results/calibration.json';"
      echo "UPDATE requests SET flops_cold = 2.5e7 * n_prompt, flops_reuse = 2.5e7 * n_prefilled,"
      echo "  bytes_restored = 65536 * n_reused,"
      echo "  ttft_cold_min_ms = 0.94 * ttft_cold_ms, ttft_cold_max_ms = 1.15 * ttft_cold_ms,"
      echo "  ttft_reuse_min_ms = 0.92 * ttft_reuse_ms, ttft_reuse_max_ms = 1.2 * ttft_reuse_ms;"
      echo "UPDATE requests SET model_cold_ms = flops_cold / 5e7,"
      echo "  model_reuse_ms = flops_reuse / 5e7 + bytes_restored / 1e7;"
      echo "COMMIT;"; } | "$SQLITE3" -bail "$db" >/dev/null
    rm -f "$db.sql"
}

# seed003: chunk-aligned prefill. Per variant 40 extending requests; align none
# diverges (bf16 most), ref kernels and align chunk stay exact, chunk-nocap
# (reusing decode-written KV) diverges. Sweep: C in 16..256 for both aligns.
mk seed003 '
BEGIN {
    srand(3); id = 0; T = "experiments/data/agent-extend.jsonl"
    split("stories small", M, " "); P["stories"] = 15196512; P["small"] = 58376448
    K["stories"] = 0.02; K["small"] = 0.07
    for (m = 1; m <= 2; m++) {
        mo = M[m]
        nv = 0
        split("chunk none", A, " "); split("fp32 bf16", PR, " "); split("blas ref", KE, " ")
        for (a = 1; a <= 2; a++) for (p = 1; p <= 2; p++) for (k = 1; k <= 2; k++) V[++nv] = A[a] "/" PR[p] "/" KE[k]
        V[++nv] = "chunk-nocap/fp32/blas"
        for (v = 1; v <= nv; v++) {
            split(V[v], f, "/"); al = (f[1] == "none") ? "none" : "chunk"
            qu = (f[1] == "chunk-nocap") ? "no-cap" : ""
            bad = 0
            if (f[1] == "none" && f[3] == "blas") bad = (f[2] == "bf16") ? 0.62 : 0.35
            if (f[1] == "chunk-nocap") bad = 0.45
            kk = K[mo] * (f[3] == "ref" ? 2.4 : 1) * (f[2] == "bf16" ? 1.3 : 1)
            run(++id, "seed003", mo "/" V[v], "", "", mo, P[mo], "slot-lcp", qu, "", al, 64, \
                (al == "none" ? 64 : ""), f[3], f[2], 32, 4096, "done", T)
            for (i = 0; i < 40; i++) {
                np = 300 + 37 * i + int(u() * 30); nr = 300 + 37 * (i - 1); if (i == 0) nr = 0
                if (al == "chunk" && qu == "") nr = int(nr / 64) * 64
                d = (i > 0 && u() < bad); fk = d && u() < (f[2] == "bf16" ? 0.95 : 0.5) ? int(u() * 32) : ""
                req(id, i, "s0", i, np, nr, ttft(np, 0, kk), ttft(np - nr, nr, kk), !d || u() < 0.3, !d, fk, 32, "", "", "", "", "", "")
            }
        }
    }
    split("16 32 48 64 96 128 256", C, " ")
    for (a = 1; a <= 2; a++) {
        al = (a == 1) ? "chunk" : "none"
        for (c = 1; c <= 7; c++) {
            cc = C[c] + 0; kk = 0.07 * (1 + 24 / cc)
            run(++id, "seed003", "sweep/" al, "chunk", cc, "small", P["small"], "slot-lcp", "", "", al, \
                (al == "chunk" ? cc : 64), (al == "none" ? cc : ""), "blas", "bf16", 32, 4096, "done", T)
            for (i = 0; i < 24; i++) {
                np = 400 + 53 * i + int(u() * 40); nr = (i == 0) ? 0 : 400 + 53 * (i - 1)
                if (al == "chunk") nr = int(nr / cc) * cc
                d = (al == "none" && i > 0 && u() < 0.35 + 0.25 * (cc < 64))
                fk = d && u() < 0.8 ? int(u() * 32) : ""
                req(id, i, "s0", i, np, nr, ttft(np, 0, kk), ttft(np - nr, nr, kk) + 0.0005 * cc * (al == "chunk"), !d, !d, fk, 32, "", "", "", "", "", "")
            }
        }
    }
}'

# seed001: volatile cch= billing checksum. raw misses at the checksum in
# system[0] every time; normalized reuses the whole previous prompt.
mk seed001 '
BEGIN {
    srand(1); T = "experiments/data/claude-code-session.jsonl"
    # run 1: an older raw run at another build that failed halfway (superseded)
    run(1, "seed001", "raw", "", "", "small", 58376448, "slot-lcp", "", "", "chunk", 64, "", "blas", "fp32", 8, 8192, "failed", T)
    for (i = 0; i < 5; i++) req(1, i, "s0", i, 2000, 0, 900, 900, 1, 1, "", 8, "", "", "", "", "", 1800)
    id = 1
    split("raw normalized", V, " ")
    for (v = 1; v <= 2; v++) {
        run(++id, "seed001", V[v], "", "", "small", 58376448, "slot-lcp", "", (v == 2 ? "anthropic-cch" : ""), "chunk", 64, "", "blas", "fp32", 8, 8192, "done", T)
        prev = 0
        for (i = 0; i < 30; i++) {
            np = 1900 + 140 * i + int(u() * 60)
            if (i == 0) { nr = 0; mp = ""; mw = "" }
            else if (v == 1) { nr = 0; mp = 23; mw = "system[0]" }
            else { nr = int(prev / 64) * 64; mp = prev; mw = "message " (2 * i) " block 0 (" (u() < 0.7 ? "tool_result" : "text") ")" }
            if (v == 1 && i > 0 && u() < 0.15) { mp = 1650 + int(u() * 40); mw = "tools[3]" }
            req(id, i, "s0", i, np, nr, ttft(np, 0, 0.07), ttft(np - nr, nr, 0.07) + 0.4, 1, 1, "", 8, mp, mw, "", "", "", 1800)
            prev = np + 60
        }
    }
    # an empty run: started, crashed before its first request
    run(++id, "seed001", "cold", "", "", "small", 58376448, "cold", "", "", "chunk", 64, "", "blas", "fp32", 8, 8192, "running", T)
}'

# seed002: recurrent/hybrid full re-processing: quirk re-prefills everything.
mk seed002 '
BEGIN {
    srand(2); id = 0; T = "experiments/data/agent-loop-24.jsonl"
    split("recurrent/quirk recurrent/fixed hybrid/quirk hybrid/fixed rwkv7/quirk rwkv7/fixed", V, " ")
    for (v = 1; v <= 6; v++) {
        split(V[v], f, "/"); fixed = (f[2] == "fixed"); kk = (f[1] == "hybrid") ? 0.09 : (f[1] == "rwkv7") ? 0.02 : 0.06
        run(++id, "seed002", V[v], "", "", f[1] "-small", (f[1] == "hybrid" ? 61210624 : 49807360), "slot-lcp", \
            (fixed ? "" : "full-reprocess"), "", "chunk", 64, "", "blas", "fp32", 2, 16384, "done", T)
        for (i = 0; i < 24; i++) {
            np = 1200 + 230 * i + int(u() * 50); nr = (i == 0 || !fixed) ? 0 : int((1200 + 230 * (i - 1)) / 64) * 64
            req(id, i, "agent", i, np, nr, ttft(np, 0, kk), ttft(np - nr, nr, kk) + (nr ? 1.5 : 0), 1, 1, "", 2, "", "", "", "", "", "")
        }
    }
}'

# seed004: long-context reuse of hybrid models: the swa-threshold quirk
# breaks reuse at the longest context only.
mk seed004 '
BEGIN {
    srand(4); id = 0; T = "experiments/data/static-context-queries.jsonl"
    split("quirk fixed", V, " "); split("2048 8192 32768", L, " ")
    for (v = 1; v <= 2; v++) for (l = 1; l <= 3; l++) {
        ctx = L[l] + 0
        run(++id, "seed004", V[v], "context", ctx, "hybrid-small", 61210624, "slot-lcp", (v == 1 ? "swa-threshold" : ""), "", "chunk", 64, "", "blas", "fp32", 2, 2 * ctx, "done", T)
        for (i = 0; i < 9; i++) {
            np = ctx + 40 + int(u() * 30); nr = (i == 0) ? 0 : int(ctx / 64) * 64
            if (v == 1 && ctx >= 32768) nr = 0
            req(id, i, "s0", i, np, nr, ttft(np, 0, 0.09), ttft(np - nr, nr, 0.09) + (nr ? 2 + ctx / 4096 : 0), 1, 1, "", 2, "", "", "", "", "", ctx)
        }
    }
}'

# seed000: disk anchor never refreshed: 12 fresh sessions of two turns after
# the stable prefix changed; quirk keeps hitting the 2048 waypoint, fixed
# rewrites the anchor (2688) once and hits it from then on. The second turn
# records anchor_pos 0 and anchor_ms 0 (no anchor), as the real store does.
mk seed000 '
BEGIN {
    srand(0); id = 0; T = "experiments/data/fresh-sessions-12.jsonl"
    split("quirk fixed", V, " ")
    for (v = 1; v <= 2; v++) {
        run(++id, "seed000", V[v], "", "", "small", 58376448, "disk-anchor", (v == 1 ? "anchor-cold-only" : ""), "", "chunk", 64, "", "blas", "fp32", 2, 8192, "done", T)
        for (i = 0; i < 12; i++) {
            np = 3000 + int(u() * 40); nr = (v == 2 && i > 0) ? 2688 : 2048
            am = (v == 2 && i == 0) ? sprintf("%.2f", 11 + u()) : 0; ap = (v == 2 && i == 0) ? 2688 : ""
            ex = (i % 2) ? "{\"anchor_ms\":" am ",\"anchor_pos\":" (ap == "" ? "null" : ap) "}" : ""
            req(id, 2 * i, "fresh-" (i + 1), 0, np, nr, ttft(np, 0, 0.07), ttft(np - nr, nr, 0.07) + am + 3, 1, 1, "", 2, "", "", ap, (i % 2) ? "" : am, ex, 2688)
            # the second turn of the session extends the first: mostly reused, anchor_pos 0 = none
            np2 = np + 150 + int(u() * 100)
            req(id, 2 * i + 1, "fresh-" (i + 1), 1, np2, int(np / 64) * 64, ttft(np2, 0, 0.07), ttft(np2 - int(np / 64) * 64, np, 0.07) + 2, 1, 1, "", 2, "", "", 0, 0, "", 2688)
        }
    }
}'

# policies (issue #16): the five policies on three workloads (two SWE-agent
# trajectories, one session each, and an agent loop of three interleaved
# sessions sharing a system prefix), each on a llama and a hybrid model, with
# --align chunk and none (disk-anchor needs the grid: four policies under
# none). Every prompt extends its session's previous prompt and answer.
# slot-lcp keeps one slot (interleaved sessions share only the system prefix;
# the hybrid restores no state off the grid), disk-anchor resumes at its
# 2048-token waypoints or the stable prefix, block-hash at full 64-token
# blocks, radix at any token (the hybrid at its 64-token state unit); --align
# chunk floors every reuse to the grid. Under none, a llama request that
# reuses anything is not bit-identical, and a hybrid one of block-hash leaves
# a different state behind (state_equal 0) with logits and decode identical.
mk policies '
function knobs(po, mo) {
    if (po == "slot-lcp") return "ctx_checkpoints = 8, checkpoint_every = 0"
    if (po == "disk-anchor") return "waypoint_every = 2048"
    if (po == "block-hash") return "block_size = 64, policy_opts = " q("{\"block_size\":64,\"block_size_arg\":64,\"cache_blocks\":0,\"mamba_cache_mode\":\"align\",\"max_num_batched_tokens\":8192,\"cache_salt\":null}")
    if (po == "radix") return "block_size = 1, policy_opts = " q("{\"page_size\":1,\"max_total_tokens\":0,\"state_unit\":" (mo == "hybrid" ? 64 : 0) "}")
    return "block_size = NULL"
}
function max(a, b) { return a > b ? a : b }
BEGIN {
    srand(16); id = 0; dn = 16
    split("pydicom fcsimple agent", W, " "); split("llama hybrid", M, " ")
    MN["llama"] = "kvreplay-synth-small"; NP["llama"] = 58376448; KV["llama"] = 8192; K["llama"] = 0.07
    MN["hybrid"] = "kvreplay-synth-hybrid-small"; NP["hybrid"] = 61210624; KV["hybrid"] = 4096; K["hybrid"] = 0.09
    for (w = 1; w <= 3; w++) {
        wk = W[w]; tr = "results/cache/transcripts/" wk ".jsonl"
        # the requests in replay order (turn by turn, session by session):
        # session S, turn TU, prompt tokens PL; the same for every run of the workload
        nq = 0; ns = (wk == "agent") ? 3 : 1; nt = (wk == "fcsimple") ? 5 : 6
        sys = (wk == "agent") ? 1536 : 0
        for (t = 0; t < nt; t++) for (k = 0; k < ns; k++) {
            S[++nq] = k; TU[nq] = t
            PL[nq] = (t == 0) ? (wk == "pydicom" ? 5200 : wk == "fcsimple" ? 1100 : sys + 300) + int(u() * 200) \
                              : PL[nq - ns] + dn + (wk == "pydicom" ? 1800 : wk == "fcsimple" ? 380 : 650) + int(u() * 100)
        }
        for (m = 1; m <= 2; m++) for (a = 1; a <= 2; a++) {
            mo = M[m]; al = (a == 1) ? "chunk" : "none"
            npo = split(al == "chunk" ? "cold slot-lcp disk-anchor block-hash radix" : "cold slot-lcp block-hash radix", PO, " ")
            for (p = 1; p <= npo; p++) {
                po = PO[p]; kn = knobs(po, mo) ", cap_prompt = 1" (wk == "agent" ? ", seed = 16" : ", seed = NULL")
                # a run of an older build, which stored no cache_bytes
                old = (wk == "fcsimple" && mo == "llama" && al == "chunk" && po == "slot-lcp")
                if (old) kn = kn ", git_rev = " q("89abcdef0123")
                run(++id, "policies", wk "/" mo "/" al "/" po, "policy", "", MN[mo], NP[mo], po, "", "anthropic-cch", \
                    al, 64, 512, "blas", "fp32", dn, 32768, "done", tr, kn)
                held = 0
                for (i = 1; i <= nq; i++) {
                    P = (TU[i] > 0) ? PL[i - ns] : 0
                    if (po == "cold" || i == 1) nr = 0
                    else if (po == "slot-lcp") nr = (ns == 1) ? P : sys
                    else if (po == "disk-anchor") nr = max(int(P / 2048) * 2048, sys)
                    else nr = max(P, sys)
                    if (al == "chunk" || po == "block-hash" || mo == "hybrid") nr = int(nr / 64) * 64
                    if (mo == "hybrid" && al == "none" && po == "slot-lcp") nr = 0
                    ok = !(al == "none" && mo == "llama" && nr > 0)
                    sq = !(al == "none" && mo == "hybrid" && po == "block-hash" && nr > 0)
                    if (po == "cold") { cb = 0; ce = 0 }
                    else if (po == "slot-lcp") { cb = (PL[i] + dn) * KV[mo] + (mo == "hybrid" ? 8 * 262144 : 0); ce = 1 }
                    else {
                        held += PL[i] + dn - nr
                        if (po == "block-hash") { cb = int(held / 64) * 64 * KV[mo]; ce = int(held / 64) }
                        else if (po == "radix") { cb = held * KV[mo]; ce = i + 1 }
                        else { cb = int(held * 1.5) * KV[mo]; ce = int(held / 2048) + ns }
                        if (mo == "hybrid") cb += 262144 * i
                    }
                    if (old) { cb = ""; ce = "" }
                    req(id, i - 1, "s" S[i], TU[i], PL[i], nr, ttft(PL[i], 0, K[mo]), \
                        ttft(PL[i] - nr, nr, K[mo]) + (nr ? 1 + nr / (po == "disk-anchor" ? 1024 : 4096) : 0), \
                        ok, ok, (ok || u() < 0.5) ? "" : int(u() * dn), dn, "", "", "", "", "", "", cb, ce, sq)
                }
            }
        }
    }
    # a rerun that failed after its second request: the finished run above stays plotted
    run(++id, "policies", "pydicom/llama/none/radix", "policy", "", MN["llama"], NP["llama"], "radix", "", "anthropic-cch", \
        "none", 64, 512, "blas", "fp32", dn, 32768, "failed", "results/cache/transcripts/pydicom.jsonl", knobs("radix", "llama"))
    for (i = 0; i < 2; i++) req(id, i, "s0", i, 5200 + 1900 * i, 0, 400, 400, 1, 1, "", dn, "", "", "", "", "", "", 0, 0)
}'

# quirks: the paged policies' reported bugs, each as bug and fix.
# vllm40696: block-hash on the hybrid, one static context per run (sweep
# "context", bytes of context); only full blocks are cached, so with the
# raised 1088-token block (quirk) the contexts shorter than a block never hit.
# sglang16521: radix keyed on the prompt only (quirk) reuses the previous
# prompt; fixed (--cap-prompt off) also its answer, whose decode-written rows
# are not bit-identical; fixed-cap reuses what quirk does. sglang34683: cold
# against cold is identical, a radix hit extended in one pass from the match
# (--align none) is not, the same hit on the grid is. Also an older finished
# run of sglang34683/extend (at another build, superseded by the later one)
# and an empty rerun of vllm40696/fixed at context 4000 (no requests).
mk quirks '
function bhopts(bs) {
    return "block_size = " bs ", policy_opts = " q("{\"block_size\":" bs ",\"block_size_arg\":0,\"cache_blocks\":0,\"mamba_cache_mode\":\"all\",\"max_num_batched_tokens\":8192,\"cache_salt\":null}")
}
BEGIN {
    srand(40696); id = 0
    RADIX = "block_size = 1, policy_opts = " q("{\"page_size\":1,\"max_total_tokens\":0,\"state_unit\":0}")
    QT = "results/cache/transcripts/questions.jsonl"
    run(++id, "quirks", "sglang34683/extend", "", "", "llama", 292800, "radix", "", "", "none", 64, 8192, "blas", "fp32", \
        40, 4096, "done", QT, RADIX ", seed = 34683, git_rev = " q("0123456789ab"))
    for (i = 0; i < 4; i++) req(id, i, "s0", i, 1500 + 55 * i, 0, 150, 150, 1, 1, "", 40, "", "", "", "", "", "", 0, 0)

    split("600 1000 1500 2000 2600 4000", X, " ")
    for (v = 1; v <= 2; v++) for (x = 1; x <= 6; x++) {
        bs = (v == 1) ? 1088 : 64; ctx = X[x] + 0; ct = int(ctx * 0.55) + 300
        run(++id, "quirks", "vllm40696/" (v == 1 ? "quirk" : "fixed"), "context", ctx, "kvreplay-synth-hybrid-tiny+custom", \
            4374104, "block-hash", (v == 1 ? "hybrid-block-size" : ""), "", "chunk", 64, 512, "blas", "fp32", 4, 8192, "done", \
            "results/cache/transcripts/static-" ctx ".jsonl", bhopts(bs) ", cap_prompt = 1, seed = 7")
        held = 0
        for (i = 0; i < 6; i++) {
            np = ct + 40 + 15 * i + int(u() * 10); nr = i ? int(ct / bs) * bs : 0
            held += np + 4 - nr
            req(id, i, "s0", i, np, nr, ttft(np, 0, 0.03), ttft(np - nr, nr, 0.03) + (nr ? 0.4 : 0), 1, 1, "", 4, \
                "", "", "", "", "", ct, int(held / bs) * bs * 1536 + 1048576 * (i + 1), int(held / bs))
        }
    }
    run(++id, "quirks", "vllm40696/fixed", "context", 4000, "kvreplay-synth-hybrid-tiny+custom", 4374104, "block-hash", "", "", \
        "chunk", 64, 512, "blas", "fp32", 4, 8192, "running", "results/cache/transcripts/static-4000.jsonl", bhopts(64))

    split("fcsimple pydicom", TT, " "); split("quirk fixed fixed-cap", KD, " ")
    for (t = 1; t <= 2; t++) {
        nt = (t == 1) ? 5 : 6
        for (i = 0; i < nt; i++)
            L[i] = (i == 0) ? (t == 1 ? 1100 : 5200) + int(u() * 100) : L[i - 1] + 40 + (t == 1 ? 380 : 1800) + int(u() * 100)
        for (k = 1; k <= 3; k++) {
            kd = KD[k]
            run(++id, "quirks", "sglang16521/" kd "/" TT[t], "", "", "kvreplay-synth-tiny", 4188480, "radix", \
                (kd == "quirk" ? "prompt-key" : ""), "", "chunk", 64, 512, "blas", "fp32", 40, 32768, "done", \
                "results/cache/transcripts/" TT[t] ".jsonl", RADIX ", seed = NULL, cap_prompt = " (kd == "fixed-cap"))
            held = 0
            for (i = 0; i < nt; i++) {
                nr = i ? (kd == "fixed" ? L[i - 1] + 40 : int(L[i - 1] / 64) * 64) : 0
                ok = (kd != "fixed" || i == 0)
                held += L[i] + (kd == "quirk" ? 0 : 40) - nr
                req(id, i, "s0", i, L[i], nr, ttft(L[i], 0, 0.02), ttft(L[i] - nr, nr, 0.02) + (nr ? 0.3 : 0), ok, ok, \
                    (ok || u() < 0.5) ? "" : int(u() * 40), 40, "", "", "", "", "", "", held * 2048, i + 1)
            }
        }
    }

    split("cold-vs-cold extend grid", V3, " ")
    for (v = 1; v <= 3; v++) {
        po = (v == 1) ? "cold" : "radix"; al = (v == 3) ? "chunk" : "none"
        run(++id, "quirks", "sglang34683/" V3[v], "", "", "llama", 292800, po, "", "", al, 64, (al == "none" ? 8192 : 512), \
            "blas", "fp32", 40, 4096, "done", QT, (po == "radix" ? RADIX ", " : "") "seed = 34683")
        held = 0
        for (i = 0; i < 12; i++) {
            np = 1500 + 55 * i; pv = 1500 + 55 * (i - 1)
            nr = (i == 0 || v == 1) ? 0 : (v == 2 ? pv : int(pv / 64) * 64)
            ok = (v != 2 || nr == 0)
            held += (v == 1) ? 0 : np + 40 - nr
            req(id, i, "s0", i, np, nr, ttft(np, 0, 0.1), ttft(np - nr, nr, 0.1) + (nr ? 0.2 : 0), ok, ok, \
                (ok || u() < 0.7) ? "" : int(u() * 40), 40, "", "", "", "", "", "", held * 768, (v == 1) ? 0 : i + 1)
        }
    }
}'

# probe-seed001: kvreplay probe of four live servers with the volatile cch=
# checksum: serve/raw and llama.cpp 0949beb5a3fc report reuse cut at the
# header (less than expected), serve/normalize and llama.cpp c807c6e3b0c7 the
# whole previous prompt (as expected); serve/raw's last request failed (HTTP
# 400), llama.cpp c807c6e3b0c7's request 3 differs warm against cold; a fifth
# server reports no reuse at all; an older serve/raw run is superseded.
mk probe-seed001 '
function preq(r, i, np, ex, re, le, er,   c, w) {
    c = ttft(np, 0, 0.08); w = (re == "" ? c : ttft(np - re, re, 0.08))
    printf "INSERT INTO requests(run_id, req_index, transcript, session, turn, n_prompt, n_reused, n_prefilled, ttft_cold_ms, ttft_reuse_ms, logits_equal, first_diff_index, max_ulp, top1_equal, fork_step, decode_equal, n_decode, verified, reuse_expected, reuse_reported, reuse_basis, json_equal, n_probs, error, error_message, http_status) VALUES(%d, %d, \047t\047, \047s0\047, %d, %d, %d, %d, %.3f, %.3f, %d, %s, %d, 1, NULL, %d, 8, %d, %s, %s, %s, %s, 20, %s, %s, %s);\n", \
        r, i, i, np, (re == "" ? 0 : re), np - (re == "" ? 0 : re), c, w, (er == "" ? le : 0), (le || er != "" ? "NULL" : 3), (le ? 0 : 7), \
        (er == "" ? le : 0), (er == "" ? 1 : 0), n(ex), n(re), (er == "" ? q("server tokenization") : "NULL"), \
        (er == "" ? le : "NULL"), q(er), (er == "" ? "NULL" : q("warm run: HTTP 400: prompt is too long")), (er == "" ? "NULL" : 400)
}
BEGIN {
    srand(11); T = "results/cache/transcripts/agent.jsonl"
    PR = "server_api = \047anthropic\047, server_url = \047http://127.0.0.1:8080\047, probe_opts = \047{\"cold\":\"erase\"}\047"
    run(1, "probe-seed001", "serve/raw", "", "", "tiny", 4188480, "probe", "", "anthropic-cch", "server", 64, "", "server", "server", 8, 16384, "done", T, PR ", server_engine = \047kvreplay\047")
    for (i = 0; i < 3; i++) preq(1, i, 2300 + 300 * i, 0, 0, 1, "")
    split("serve/raw serve/normalize llama.cpp_0949beb5a3fc llama.cpp_c807c6e3b0c7 other", V, " ")
    id = 1
    for (v = 1; v <= 5; v++) {
        va = V[v]; gsub(/_/, " ", va)
        run(++id, "probe-seed001", va, "", "", "tiny", 4188480, "probe", "", "anthropic-cch", "server", (v <= 2 ? 64 : 1), "", "server", "server", 8, 16384, "done", T, \
            PR ", server_engine = " (v <= 2 ? "\047kvreplay\047" : v <= 4 ? "\047llama.cpp\047" : "\047unknown\047"))
        prev = 0
        for (i = 0; i < 6; i++) {
            np = 2300 + 320 * i + int(u() * 30)
            ex = (v <= 2) ? int(prev / 64) * 64 : prev
            re = (v == 1) ? 0 : (v == 3) ? (i ? 47 : 0) : (v == 5) ? "" : ex
            preq(id, i, np, ex, re, !(v == 4 && i == 3), (v == 1 && i == 5) ? "http" : "")
            prev = np - 1
        }
    }
}'
