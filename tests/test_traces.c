/*
 * tests/test_traces.c: production traces as input (traces/trace.h), the
 * simulate and trace info commands end to end, and simulated hits checked
 * bit for bit on the engine (traces/verify.h).
 *
 * The Mooncake reader runs on the real conversation trace of ../shared/data
 * (skipped with a message when absent). The Bailian files are Git LFS objects
 * that cannot be fetched here, so the Bailian reader runs on rows written to
 * its documented schema (tests/data/trace_bailian.jsonl and rows below).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#include "model.h"
#include "proc.h"
#include "sim.h"
#include "sqlq.h"
#include "status.h"
#include "trace.h"
#include "verify.h"

#define MOONCAKE "../shared/data/traces/mooncake_conversation_trace.jsonl"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    return fx_dir(g_dir, "kvr_traces");
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static const char *write_file(const char *name, const char *text) {
    static char path[8][200];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 200, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

/* Reads every record; returns the last status and the count. */
static int read_all(const char *path, const hx_trace_opts *o, int64_t *n, char *err, size_t errlen) {
    hx_trace *t = NULL;
    int rc = hx_trace_open(path, o, &t, err, errlen);
    if (rc != ENG_OK) return rc;
    hx_trace_rec r;
    *n = 0;
    while ((rc = hx_trace_next(t, &r, err, errlen)) == 1) (*n)++;
    hx_trace_close(t);
    return rc;
}

// ----------------------------------------------------------------------------
// Reading

static void the_real_conversation_trace_reads_with_the_papers_figures(void **state) {
    (void)state;
    FILE *f = fopen(MOONCAKE, "r");
    if (!f) { fprintf(stderr, "skipped: %s absent\n", MOONCAKE); skip(); return; }
    fclose(f);
    hx_trace_opts o = {0};
    hx_trace_info in;
    char err[512] = "";
    assert_int_equal(hx_trace_info_read(MOONCAKE, &o, &in, err, sizeof err), ENG_OK);
    assert_int_equal(in.format, HX_TRACE_MOONCAKE);
    assert_int_equal(in.block_tokens, 512);
    assert_int_equal(in.requests, 12031);           /* Table 2: 12,031 requests */
    assert_true(fabs(in.mean_input - 12035) < 0.5);  /* mean input 12,035 */
    assert_true(fabs(in.mean_output - 343) < 0.5);   /* mean output 343 */
    assert_int_equal(in.blocks, 288500);
    assert_int_equal(in.unique_ids, 182790);
    assert_int_equal(in.unique_ids, in.unique_prefixes);  /* prefix hashes: one id, one prefix */
    assert_int_equal(in.ideal_hit_blocks, 105710);   /* Dynamo's recipe counts 105,710 repeated blocks */
    assert_int_equal(in.ideal_hit_tokens, 54098411);
}

typedef struct bad_case {
    const char *what, *line, *want;  /* the third line of a file; what the message must name */
    hx_trace_format format;
} bad_case;

static const char k_good_m[] =
    "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
    "{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 2]}\n";
static const char k_good_b[] =
    "{\"chat_id\": 4, \"parent_chat_id\": -1, \"timestamp\": 1.5, \"input_length\": 20, \"output_length\": 5, "
    "\"type\": \"text\", \"turn\": 1, \"hash_ids\": [7, 8]}\n"
    "{\"chat_id\": 9, \"parent_chat_id\": 4, \"timestamp\": 2.0, \"input_length\": 40, \"output_length\": 5, "
    "\"type\": \"search\", \"turn\": 2, \"hash_ids\": [7, 8, 3]}\n";

static const bad_case k_bad[] = {
    {"a truncated line", "{\"timestamp\": 20, \"input_length\": 700, \"outp", ":3: not a JSON object",
     HX_TRACE_MOONCAKE},
    {"not an object", "[1, 2, 3]", ":3: expected a JSON object", HX_TRACE_MOONCAKE},
    {"a string length", "{\"timestamp\": 20, \"input_length\": \"700\", \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: input_length: expected an integer, got a string", HX_TRACE_MOONCAKE},
    {"a real length", "{\"timestamp\": 20, \"input_length\": 700.5, \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: input_length: expected an integer, got a real", HX_TRACE_MOONCAKE},
    {"a missing field", "{\"timestamp\": 20, \"input_length\": 700, \"hash_ids\": [0, 1]}",
     ":3: output_length: missing", HX_TRACE_MOONCAKE},
    {"ids that are not integers", "{\"timestamp\": 20, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, \"x\"]}",
     ":3: hash_ids[1]: expected an integer", HX_TRACE_MOONCAKE},
    {"a negative id", "{\"timestamp\": 20, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, -4]}",
     ":3: hash_ids[1]", HX_TRACE_MOONCAKE},
    {"no blocks", "{\"timestamp\": 20, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": []}",
     ":3: hash_ids: expected a non-empty array", HX_TRACE_MOONCAKE},
    {"too many blocks for the length", "{\"timestamp\": 20, \"input_length\": 500, \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: input_length: 500 tokens contradicts 2 blocks of 512 tokens (needs 513..1024)", HX_TRACE_MOONCAKE},
    {"too few blocks for the length", "{\"timestamp\": 20, \"input_length\": 1025, \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: input_length: 1025 tokens contradicts 2 blocks", HX_TRACE_MOONCAKE},
    {"a timestamp back in time", "{\"timestamp\": 9, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: timestamp: 9 is before the previous line's 10", HX_TRACE_MOONCAKE},
    {"a negative timestamp", "{\"timestamp\": -1, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}",
     ":3: timestamp: expected a number >= 0", HX_TRACE_MOONCAKE},
    {"a Bailian parent that never appeared",
     "{\"chat_id\": 11, \"parent_chat_id\": 10, \"timestamp\": 3.0, \"input_length\": 20, \"output_length\": 5, "
     "\"type\": \"text\", \"turn\": 2, \"hash_ids\": [7, 8]}", ":3: parent_chat_id: 10 never appeared", HX_TRACE_BAILIAN},
    {"a Bailian type that is no string",
     "{\"chat_id\": 11, \"parent_chat_id\": -1, \"timestamp\": 3.0, \"input_length\": 20, \"output_length\": 5, "
     "\"type\": 3, \"turn\": 1, \"hash_ids\": [7, 8]}", ":3: type:", HX_TRACE_BAILIAN},
    {"a Bailian record without its chat",
     "{\"parent_chat_id\": -1, \"timestamp\": 3.0, \"input_length\": 20, \"output_length\": 5, "
     "\"type\": \"text\", \"turn\": 1, \"hash_ids\": [7, 8]}", ":3: chat_id: missing", HX_TRACE_BAILIAN},
    {"Bailian lengths of 16-token blocks",
     "{\"chat_id\": 11, \"parent_chat_id\": -1, \"timestamp\": 3.0, \"input_length\": 33, \"output_length\": 5, "
     "\"type\": \"text\", \"turn\": 1, \"hash_ids\": [7, 8]}", ":3: input_length: 33 tokens contradicts 2 blocks of 16",
     HX_TRACE_BAILIAN},
};

static void each_bad_record_is_an_error_naming_its_line_and_field(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s\n{\"later\": \"lines are never read\"}\n",
                 k_bad[i].format == HX_TRACE_BAILIAN ? k_good_b : k_good_m, k_bad[i].line);
        const char *p = write_file("bad.jsonl", text);
        hx_trace_opts o = {0};
        int64_t n = 0;
        char err[512] = "";
        int rc = read_all(p, &o, &n, err, sizeof err);
        if (rc != ENG_ERR_FORMAT || !strstr(err, k_bad[i].want) || !strstr(err, p))
            fail_msg("%s: status %d after %lld records, message '%s' (wanted '%s')", k_bad[i].what, rc, (long long)n,
                     err, k_bad[i].want);
        assert_int_equal(n, 2);  /* the good lines before it */
    }
}

static void blank_lines_are_skipped_and_lines_keep_their_numbers(void **state) {
    (void)state;
    char text[1024];
    snprintf(text, sizeof text, "\n%s\n   \n%s", k_good_m,
             "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}\n");
    const char *p = write_file("blank.jsonl", text);
    hx_trace_opts o = {0};
    hx_trace *t;
    char err[512] = "";
    assert_int_equal(hx_trace_open(p, &o, &t, err, sizeof err), ENG_OK);
    hx_trace_rec r;
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), 1);
    assert_int_equal(r.line, 2);
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), 1);
    assert_int_equal(r.line, 3);
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), ENG_ERR_FORMAT);  /* 5 < 10 at line 6 */
    assert_non_null(strstr(err, ":6: timestamp"));
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), ENG_ERR_FORMAT);  /* sticky */
    hx_trace_close(t);
}

static void the_bailian_schema_reads_in_seconds_with_16_token_blocks(void **state) {
    (void)state;
    const char *p = write_file("b.jsonl", k_good_b);
    hx_trace_opts o = {0};
    hx_trace *t;
    char err[512] = "";
    assert_int_equal(hx_trace_open(p, &o, &t, err, sizeof err), ENG_OK);
    hx_trace_rec r;
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), 1);
    assert_int_equal(hx_trace_format_of(t), HX_TRACE_BAILIAN);
    assert_int_equal(hx_trace_block_tokens(t), 16);
    assert_true(r.t_ms == 1500.0);
    assert_int_equal(r.chat_id, 4);
    assert_int_equal(r.parent_chat_id, -1);
    assert_string_equal(r.type, "text");
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), 1);
    assert_int_equal(r.parent_chat_id, 4);
    assert_int_equal(r.turn, 2);
    assert_int_equal(r.n_blocks, 3);
    assert_int_equal(r.ids[2], 3);
    assert_int_equal(r.words[4], 3);
    assert_int_equal(r.words[5], 0);
    assert_int_equal(hx_trace_next(t, &r, err, sizeof err), 0);
    hx_trace_close(t);
    /* the committed sample reads whole */
    int64_t n;
    assert_int_equal(read_all("tests/data/trace_bailian.jsonl", &o, &n, err, sizeof err), 0);
    assert_int_equal(n, 30);
}

/* Per-request hits of a run, for the tests below. */
typedef struct hits {
    int32_t v[64];
    int     n;
} hits;

static void collect(void *ud, const hx_sim_row *row) {
    hits *h = ud;
    if (h->n < 64) h->v[h->n++] = row->hit_blocks;
}

static void a_bailian_block_counts_only_while_every_earlier_block_matched(void **state) {
    (void)state;
    /* block 8 follows block 7 in the first request; after block 5 it is another block's
     * content in another context: no hit; after 7 again it is */
    const char *p = write_file("chain.jsonl",
        "{\"chat_id\": 0, \"parent_chat_id\": -1, \"timestamp\": 0, \"input_length\": 32, \"output_length\": 1, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [7, 8]}\n"
        "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 1, \"input_length\": 32, \"output_length\": 1, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [5, 8]}\n"
        "{\"chat_id\": 2, \"parent_chat_id\": 0, \"timestamp\": 2, \"input_length\": 48, \"output_length\": 1, \"type\": \"text\", \"turn\": 2, \"hash_ids\": [7, 8, 9]}\n"
        "{\"chat_id\": 3, \"parent_chat_id\": 2, \"timestamp\": 3, \"input_length\": 40, \"output_length\": 1, \"type\": \"text\", \"turn\": 3, \"hash_ids\": [7, 6, 9]}\n");
    const char *pols[] = {"block-hash", "radix", "slot-lcp"};
    for (int i = 0; i < 3; i++) {
        hits h = {0};
        hx_sim_opts o;
        hx_sim_opts_default(&o);
        o.trace_path = p;
        o.policy = pols[i];
        o.on_request = collect;
        o.ud = &h;
        hx_sim_summary sum;
        char err[256];
        assert_int_equal(hx_sim_run(&o, &sum, err, sizeof err), ENG_OK);
        assert_int_equal(h.n, 4);
        assert_int_equal(h.v[0], 0);
        assert_int_equal(h.v[1], 0);  /* 8 after 5: not the 8 that followed 7 */
        assert_int_equal(h.v[2], 2);
        assert_int_equal(h.v[3], 1);  /* 9 after 6: no */
        assert_int_equal(sum.hit_tokens, 32 + 16);  /* min(k x 16, input_length) */
    }
}

static void repeat_makes_shifted_copies_that_share_nothing(void **state) {
    (void)state;
    hx_trace_opts o1 = {0}, o3 = {.repeat = 3};
    hx_trace_info a, b;
    char err[512] = "";
    assert_int_equal(hx_trace_info_read("tests/data/trace_mooncake.jsonl", &o1, &a, err, sizeof err), ENG_OK);
    assert_int_equal(hx_trace_info_read("tests/data/trace_mooncake.jsonl", &o3, &b, err, sizeof err), ENG_OK);
    assert_int_equal(b.requests, 3 * a.requests);
    assert_int_equal(b.unique_ids, 3 * a.unique_ids);
    assert_int_equal(b.ideal_hit_tokens, 3 * a.ideal_hit_tokens);  /* each copy hits what it hit alone */
    assert_true(b.span_s > 3 * a.span_s);
    hx_trace *t;
    assert_int_equal(hx_trace_open("tests/data/trace_mooncake.jsonl", &o3, &t, err, sizeof err), ENG_OK);
    hx_trace_rec r;
    double last = -1;
    int64_t n = 0;
    while (hx_trace_next(t, &r, err, sizeof err) == 1) {
        assert_true(r.t_ms >= last);
        assert_int_equal(r.copy, n / a.requests);
        assert_int_equal(r.index, n);
        last = r.t_ms;
        n++;
    }
    assert_int_equal(n, b.requests);
    hx_trace_close(t);
    hx_trace_opts lim = {.limit = 7};
    assert_int_equal(read_all("tests/data/trace_mooncake.jsonl", &lim, &n, err, sizeof err), 0);
    assert_int_equal(n, 7);
}

// ----------------------------------------------------------------------------
// The commands

static void simulate_prints_the_contracts_json_fields(void **state) {
    (void)state;
    static char out[65536];
    const char *args[] = {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "--policy", "radix", "--capacity", "4K",
                          "--evict", "s3fifo", "--instances", "2", "--route", "cache-aware", "--json", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, args), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    assert_non_null(j);
    const char *keys[] = {"requests", "hit_rate_tokens", "hit_rate_blocks", "evictions", "seconds"};
    for (int i = 0; i < 5; i++) assert_non_null(json_object_get(j, keys[i]));
    assert_int_equal(json_integer_value(json_object_get(j, "requests")), 40);
    assert_int_equal(json_integer_value(json_object_get(j, "capacity_tokens")), 4000);
    assert_true(json_integer_value(json_object_get(j, "evictions")) > 0);
    json_decref(j);
    /* trace info's ideal, and the unbounded simulate reaching it */
    const char *info[] = {"trace", "info", "tests/data/trace_mooncake.jsonl", "--json", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, info), 0);
    j = json_loads(out, 0, &je);
    assert_non_null(j);
    double ideal = json_real_value(json_object_get(j, "ideal_hit_rate_tokens"));
    json_decref(j);
    const char *unb[] = {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "--json", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, unb), 0);
    j = json_loads(out, 0, &je);
    assert_true(fabs(json_real_value(json_object_get(j, "hit_rate_tokens")) - ideal) < 1e-9);
    json_decref(j);
}

static void a_bad_trace_exits_2_naming_line_and_field_and_writes_nothing(void **state) {
    (void)state;
    char db[200];
    snprintf(db, sizeof db, "%s/sim.sqlite", g_dir);
    const char *good[] = {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "--capacity", "20000", "--db", db,
                          "--window", "10", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, good), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs"), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sim_requests"), 40);
    assert_int_equal(q_int(db, "SELECT sum(requests) FROM sim_windows"), 40);
    assert_int_equal(q_int(db, "SELECT requests FROM sim_runs"), 40);
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs WHERE status = 'done'"), 1);
    assert_int_equal(q_int(db, "SELECT sum(hit_tokens) = (SELECT hit_tokens FROM sim_runs) FROM sim_requests"), 1);
    /* a trace whose line 39 contradicts its block count, after 38 good ones */
    char text[1 << 16] = "";
    FILE *f = fopen("tests/data/trace_mooncake.jsonl", "r");
    assert_non_null(f);
    char line[8192];
    for (int i = 0; i < 38 && fgets(line, sizeof line, f); i++) strcat(text, line);
    fclose(f);
    strcat(text, "{\"timestamp\": 999999, \"input_length\": 5000, \"output_length\": 1, \"hash_ids\": [0, 1]}\n");
    const char *bad = write_file("bad-len.jsonl", text);
    static char err[4096];
    const char *args[] = {"simulate", "-t", bad, "--db", db, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, args), 2);
    assert_non_null(strstr(err, ":39: input_length"));
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs"), 1);  /* nothing of the failed run */
    assert_int_equal(q_int(db, "SELECT count(*) FROM sim_requests"), 40);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sim_windows WHERE run_id <> 1"), 0);
    /* report reads the database with the simulate run in it */
    static char rout[1 << 16];
    const char *rep[] = {"report", "--db", db, NULL};
    assert_int_equal(proc_run(NULL, rout, sizeof rout, NULL, 0, rep), 0);
    assert_non_null(strstr(rout, "| simulate: requests |"));
    assert_non_null(strstr(rout, "| 40 |"));
}

/* experiments/traces.json's pool runs: sharded in two and merged, the same figures as unsharded. */
static void a_sharded_experiment_merges_to_the_unsharded_runs_figures(void **state) {
    (void)state;
    FILE *f = fopen(MOONCAKE, "r");
    if (!f) { fprintf(stderr, "skipped: %s absent\n", MOONCAKE); skip(); return; }
    fclose(f);
    char one[200], s1[200], s2[200], merged[200];
    snprintf(one, sizeof one, "%s/one.sqlite", g_dir);
    snprintf(s1, sizeof s1, "%s/s1.sqlite", g_dir);
    snprintf(s2, sizeof s2, "%s/s2.sqlite", g_dir);
    snprintf(merged, sizeof merged, "%s/merged.sqlite", g_dir);
    const char *a[] = {"experiment", "experiments/traces.json", "--db", one, "--only", "pool", NULL};
    const char *b[] = {"experiment", "experiments/traces.json", "--db", s1, "--only", "pool", "--shard", "1/2", NULL};
    const char *c[] = {"experiment", "experiments/traces.json", "--db", s2, "--only", "pool", "--shard", "2/2", NULL};
    const char *m[] = {"merge", merged, s1, s2, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, a), 0);
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, b), 0);
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, c), 0);
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, m), 0);
    const char *q = "SELECT sum(hit_tokens) * 1000003 + sum(evictions) + sum(requests) FROM sim_runs";
    assert_int_equal(q_int(merged, "SELECT count(*) FROM sim_runs"), 2);
    assert_int_equal(q_int(merged, q), q_int(one, q));
    assert_int_equal(q_int(merged, "SELECT count(*) FROM sim_requests"), q_int(one, "SELECT count(*) FROM sim_requests"));
    assert_int_equal(q_int(merged, "SELECT sum(ttft_ms * 1000) FROM sim_requests"),
                     q_int(one, "SELECT sum(ttft_ms * 1000) FROM sim_requests"));
    /* --resume: nothing left to run */
    const char *r[] = {"experiment", "experiments/traces.json", "--db", one, "--only", "pool", "--resume", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, r), 0);
    assert_int_equal(q_int(one, "SELECT count(*) FROM runs"), 2);
}

// ----------------------------------------------------------------------------
// Materialized blocks and the bit-exact check

static void equal_ids_are_equal_tokens_and_a_partial_block_is_a_prefix(void **state) {
    (void)state;
    int32_t a[64], b[64], c[64];
    hx_materialize_block(7, 64, 259, a);
    hx_materialize_block(7, 64, 259, b);
    hx_materialize_block(8, 64, 259, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    for (int i = 0; i < 64; i++) assert_true(a[i] >= 3 && a[i] < 259);
    int64_t ids[3] = {7, 8, 9};
    int32_t p[150];
    hx_materialize_prompt(ids, 3, 150, 64, 259, p);
    assert_memory_equal(p, a, sizeof a);
    assert_memory_equal(p + 64, c, sizeof c);
    int32_t d[64];
    hx_materialize_block(9, 64, 259, d);
    assert_memory_equal(p + 128, d, sizeof(int32_t) * 22);
}

/* A trace of 64-token blocks (the grid), conversations that extend. */
static const char *small_trace(void) {
    char *text = malloc(1 << 16);
    assert_non_null(text);
    text[0] = '\0';
    int64_t next = 2;
    int64_t ctx[3][32];
    int n_ctx[3] = {0};
    for (int s = 0; s < 3; s++) { ctx[s][0] = 0; ctx[s][1] = 1; n_ctx[s] = 2; }
    for (int i = 0; i < 24; i++) {
        int s = i % 3;
        ctx[s][n_ctx[s]++] = next++;
        int n = n_ctx[s] + 1;
        int len = (n - 1) * 64 + 1 + (i * 37) % 64;
        char line[1024];
        int off = snprintf(line, sizeof line, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": 3, \"hash_ids\": [",
                           i * 100, len);
        for (int k = 0; k < n_ctx[s]; k++) off += snprintf(line + off, sizeof line - (size_t)off, "%lld, ", (long long)ctx[s][k]);
        snprintf(line + off, sizeof line - (size_t)off, "%lld]}\n", (long long)next++);
        strcat(text, line);
        ctx[s][n_ctx[s]++] = next++;
    }
    const char *p = write_file("grid.jsonl", text);
    free(text);
    return p;
}

static void verified_hits_are_identical_to_cold_on_the_grid_and_not_off_it(void **state) {
    (void)state;
    char llama[200], hybrid[200];
    snprintf(llama, sizeof llama, "%s/tiny.gguf", g_dir);
    snprintf(hybrid, sizeof hybrid, "%s/hybrid.gguf", g_dir);
    assert_int_equal(fx_tiny_model(llama, 1), 0);
    const char *mk[] = {"model", "synth", "--arch", "hybrid", "--preset", "tiny", "--seed", "2", "-o", hybrid, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, mk), 0);
    const char *trace = small_trace();
    static char out[1 << 16];
    const char *models[] = {llama, hybrid};
    for (int mi = 0; mi < 2; mi++)
        for (int kern = 0; kern < 2; kern++) {
            const char *args[] = {"simulate", "-t", trace, "--block-tokens", "64", "--policy", "radix", "-m", models[mi],
                                  "--profile", "llama3-8b-h100", "--verify-sample", "12", "--kernel", kern ? "ref" : "blas",
                                  "--align", "chunk", "--json", NULL};
            int code = proc_run(NULL, out, sizeof out, NULL, 0, args);
            json_error_t je;
            json_t *j = json_loads(out, 0, &je);
            if (!j) fail_msg("exit %d: %s", code, out);
            assert_int_equal(json_integer_value(json_object_get(j, "verified")), 12);
            assert_int_equal(json_integer_value(json_object_get(j, "verified_identical")), 12);
            assert_int_equal(code, 0);
            json_decref(j);
        }
    /* --align none: the suffixes run in --ubatch chunks from each reuse point, cold from 0: blas differs */
    const char *none[] = {"simulate", "-t", trace, "--block-tokens", "64", "--policy", "block-hash", "-m", llama,
                          "--profile", "llama3-8b-h100", "--verify-sample", "12", "--kernel", "blas", "--align", "none",
                          "--ubatch", "48", "--json", NULL};
    int code = proc_run(NULL, out, sizeof out, NULL, 0, none);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    assert_non_null(j);
    int64_t same = json_integer_value(json_object_get(j, "verified_identical"));
    assert_int_equal(json_integer_value(json_object_get(j, "verified")), 12);
    assert_true(same < 12);
    assert_int_equal(code, 1);  /* a divergence found */
    json_t *v = json_object_get(j, "verify");
    int64_t listed = 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        listed += !json_is_true(json_object_get(json_array_get(v, i), "identical"));
    assert_int_equal(listed, 12 - same);  /* the report names each that differs */
    json_decref(j);
}

/* The check itself catches a reuse that is not what cold computes. */
static void the_verify_check_catches_a_state_built_from_other_tokens(void **state) {
    (void)state;
    char llama[200];
    snprintf(llama, sizeof llama, "%s/tiny2.gguf", g_dir);
    assert_int_equal(fx_tiny_model(llama, 3), 0);
    eng_numerics num = eng_numerics_default();
    eng_model *m;
    char err[256];
    assert_int_equal(eng_model_load(llama, &num, &m, err, sizeof err), ENG_OK);
    eng_prefill_params pp = eng_prefill_params_default();
    int32_t tok[300];
    int64_t ids[5] = {1, 2, 3, 4, 5};
    hx_materialize_prompt(ids, 5, 300, 64, 259, tok);
    int64_t b[2] = {64, 192};
    hx_verify_result r;
    assert_int_equal(hx_verify_one(m, &pp, tok, 300, b, 2, &r, err, sizeof err), ENG_OK);
    assert_true(r.equal);
    /* a segment boundary off the grid under blas: the bits move (the check sees it) */
    eng_prefill_params none = pp;
    none.align = ENG_ALIGN_NONE;
    none.ubatch = 48;
    int64_t off[1] = {100};
    assert_int_equal(hx_verify_one(m, &none, tok, 300, off, 1, &r, err, sizeof err), ENG_OK);
    assert_false(r.equal);
    assert_true(r.first_diff >= 0);
    eng_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_real_conversation_trace_reads_with_the_papers_figures),
        cmocka_unit_test(each_bad_record_is_an_error_naming_its_line_and_field),
        cmocka_unit_test(blank_lines_are_skipped_and_lines_keep_their_numbers),
        cmocka_unit_test(the_bailian_schema_reads_in_seconds_with_16_token_blocks),
        cmocka_unit_test(a_bailian_block_counts_only_while_every_earlier_block_matched),
        cmocka_unit_test(repeat_makes_shifted_copies_that_share_nothing),
        cmocka_unit_test(simulate_prints_the_contracts_json_fields),
        cmocka_unit_test(a_bad_trace_exits_2_naming_line_and_field_and_writes_nothing),
        cmocka_unit_test(a_sharded_experiment_merges_to_the_unsharded_runs_figures),
        cmocka_unit_test(equal_ids_are_equal_tokens_and_a_partial_block_is_a_prefix),
        cmocka_unit_test(verified_hits_are_identical_to_cold_on_the_grid_and_not_off_it),
        cmocka_unit_test(the_verify_check_catches_a_state_built_from_other_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
