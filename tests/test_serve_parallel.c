/*
 * tests/test_serve_parallel.c: `kvreplay serve --parallel N`, continuous
 * batching (serve/worker.c's scheduler), against a real server process.
 *
 *   - load: 64 clients x 20 requests on stories260K with --parallel 4 at the
 *     default queue: every request answered or refused with 503, none hangs
 *     or is lost, at least 90% answered, one row per answer, and the steps
 *     carried several sequences at once;
 *   - bit-identity: the same requests, sent at once to --parallel 4 and one
 *     after another to --parallel 1, under --kernel ref: the greedy tokens
 *     and the log-probabilities' bytes are equal; --verify finds every one
 *     identical to its cold shadow under each policy; also with a cap of
 *     rows per step (--batch-size) that makes prefill chunks wait;
 *   - cancellation mid-prefill: a long prompt whose client closes is dropped
 *     at the next chunk boundary (its row says after how many prompt tokens,
 *     a multiple of C), the slot frees, and the policy kept the prefix: the
 *     same prompt sent again reuses it;
 *   - /slots: N slots, each with its own cache state under slot-lcp; id_slot
 *     pins a request to a slot.
 * Skipped without stories260K (../shared/data).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#include "runcli.h"
#include "served.h"
#include "sqlq.h"
#include "status.h"
#include "synth.h"
#include "util.h"

#define STORIES "../shared/data/models/stories260K.gguf"

static char g_dir[64], g_small[128];

static int setup(void **state) {
    (void)state;
    if (access(STORIES, R_OK) != 0 || !kvr_bin()) return 0;
    if (fx_dir(g_dir, "kvr_parallel") != 0) return -1;
    snprintf(g_small, sizeof g_small, "%s/small.gguf", g_dir);
    eng_synth_params p = eng_synth_preset("small");  /* byte vocabulary: a long prompt is cheap to write */
    p.seed = 9;
    char err[256];
    return eng_synth_write(&p, g_small, err, sizeof err) == ENG_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    served_kill_all();
    return fx_rm(g_dir);
}

static void need(void) {
    if (!g_dir[0]) skip();
}

static void start(served *sv, const char *name, const char *const *args) {
    if (served_start(sv, g_dir, name, args) != 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "cat %s/%s.log >&2", g_dir, name);
        if (system(cmd)) {}
        fail_msg("the server did not start");
    }
}

static int64_t metric(const served *sv, const char *name) {
    http_resp r;
    http_do(sv, "GET", "/metrics", NULL, NULL, 30, &r);
    assert_int_equal(r.status, 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(r.body, key);
    int64_t v = p ? strtoll(p + strlen(key), NULL, 10) : -1;
    http_free(&r);
    return v;
}

static json_t *post_json(const served *sv, const char *path, const char *body, long want) {
    http_resp r;
    http_do(sv, "POST", path, body, NULL, 120, &r);
    if (r.status != want) fprintf(stderr, "status %ld (want %ld) %s: %s\n", r.status, want, r.curl_error, r.body);
    assert_int_equal(r.status, want);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    http_free(&r);
    return j;
}

// ----------------------------------------------------------------------------
// Load

static void sixty_four_clients_of_four_slots_are_answered_in_shared_steps(void **state) {
    (void)state;
    need();
    served sv;
    start(&sv, "load4", (const char *const[]){"-m", STORIES, "--parallel", "4", "-c", "512", NULL});
    enum { N = 64 };
    served_load l = served_load_run(&sv, N, 20, 8);
    int ok = l.ok, refused = l.refused, other = l.other;
    int64_t steps = metric(&sv, "kvreplay_engine_steps_total"), spans = metric(&sv, "kvreplay_engine_step_spans_total");
    fprintf(stderr, "load, 4 slots: %d answered, %d refused (503), %d other; %lld spans in %lld steps\n", ok, refused,
            other, (long long)spans, (long long)steps);
    assert_int_equal(other, 0);              /* none hangs, none is lost */
    assert_int_equal(ok + refused, N * 20);
    assert_true(ok * 10 >= N * 20 * 9);      /* at least 90% answered at the default queue */
    assert_int_equal(metric(&sv, "kvreplay_refused_queue_full_total"), refused);
    assert_true(spans > steps * 2);          /* the steps carried several sequences */
    assert_int_equal(served_stop(&sv), 0);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests"), ok);
}

// ----------------------------------------------------------------------------
// Bit-identity with --parallel 1

#define N_REQ 12

typedef struct one_req { const served *sv; int i; char *out; } one_req;

/* The greedy tokens and the log-probabilities of request i, as the server wrote them (bytes). */
static void *one(void *arg) {
    one_req *q = arg;
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time %d, in a land\",\"n_predict\":%d,\"n_probs\":4,"
             "\"return_tokens\":true}", q->i, 12 + 3 * q->i);
    json_t *j = post_json(q->sv, "/completion", body, 200);
    json_t *keep = json_pack("[O, O, O]", json_object_get(j, "tokens"), json_object_get(j, "content"),
                             json_object_get(j, "completion_probabilities"));
    q->out = json_dumps(keep, JSON_COMPACT);
    json_decref(keep);
    json_decref(j);
    return NULL;
}

static void replies(const char *name, const char *policy, const char *parallel, const char *batch_size, bool at_once,
                    char **out) {
    served sv;
    start(&sv, name, (const char *const[]){"-m", STORIES, "--kernel", "ref", "--parallel", parallel, "--policy", policy,
                                           "--verify", "-c", "512", "--batch-size", batch_size, NULL});
    one_req q[N_REQ];
    pthread_t t[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        q[i] = (one_req){.sv = &sv, .i = i};
        if (at_once) pthread_create(&t[i], NULL, one, &q[i]);
        else one(&q[i]);
    }
    for (int i = 0; at_once && i < N_REQ; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N_REQ; i++) out[i] = q[i].out;
    if (at_once) assert_true(metric(&sv, "kvreplay_engine_step_spans_total") > metric(&sv, "kvreplay_engine_steps_total"));
    assert_int_equal(metric(&sv, "kvreplay_diverged_total"), 0);  /* each identical to its cold shadow */
    assert_int_equal(metric(&sv, "kvreplay_identical_total"), N_REQ);
    assert_int_equal(served_stop(&sv), 0);
}

/* Long prompts sent at once: by default one of them reads a grid chunk per step, the oldest first
 * (--max-partial-prefills 1, as vLLM's default), so the first answers early; with 0 every prompt
 * reads a chunk in every step. Under ref the replies are the same bytes either way. */
typedef struct long_req { const served *sv; int i; char *out; } long_req;

static void *one_long(void *arg) {
    long_req *q = arg;
    eng_buf b = {0};
    eng_buf_printf(&b, "{\"prompt\":\"%d", q->i);
    for (int k = 0; k < 120; k++) eng_buf_printf(&b, " once upon a time there was a little girl");
    eng_buf_printf(&b, "\",\"n_predict\":4,\"n_probs\":4,\"return_tokens\":true}");
    json_t *j = post_json(q->sv, "/completion", b.data, 200);
    json_t *keep = json_pack("[O, O]", json_object_get(j, "tokens"), json_object_get(j, "completion_probabilities"));
    q->out = json_dumps(keep, JSON_COMPACT);
    json_decref(keep);
    json_decref(j);
    eng_buf_free(&b);
    return NULL;
}

static void concurrent_prompts_advance_one_at_a_time_by_default(void **state) {
    (void)state;
    need();
    char *got[2][4];
    for (int mode = 0; mode < 2; mode++) {
        served sv;
        start(&sv, mode ? "partial-all" : "partial-one",
              (const char *const[]){"-m", STORIES, "--kernel", "ref", "--parallel", "4", "-c", "4096",
                                    "--max-partial-prefills", mode ? "0" : "1", NULL});
        long_req q[4];
        pthread_t t[4];
        for (int i = 0; i < 4; i++) {
            q[i] = (long_req){.sv = &sv, .i = i};
            pthread_create(&t[i], NULL, one_long, &q[i]);
        }
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < 4; i++) got[mode][i] = q[i].out;
        int64_t steps = metric(&sv, "kvreplay_engine_prefill_steps_total");
        int64_t chunks = metric(&sv, "kvreplay_engine_step_prefills_total");
        fprintf(stderr, "partial prefills %s: %lld prompt chunks in %lld steps\n", mode ? "all" : "1",
                (long long)chunks, (long long)steps);
        assert_true(steps > 0);
        if (mode == 0) assert_int_equal(chunks, steps);  /* never two prompts in one step */
        else assert_true(chunks > steps);                /* several prompts read together */
        assert_int_equal(served_stop(&sv), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_string_equal(got[0][i], got[1][i]);
        free(got[0][i]);
        free(got[1][i]);
    }
}

static void four_slots_under_ref_reply_bit_for_bit_as_one_slot(void **state) {
    (void)state;
    need();
    /* the last: a cap of 20 rows per step, so prefill chunks wait for steps of their own (never cut) */
    static const char *const pols[] = {"slot-lcp", "block-hash", "radix", "cold", "slot-lcp"};
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
        char *a[N_REQ], *b[N_REQ], n1[64], n4[64];
        const char *cap = p == 4 ? "20" : "0";
        snprintf(n1, sizeof n1, "one-%s-%s", pols[p], cap);
        snprintf(n4, sizeof n4, "four-%s-%s", pols[p], cap);
        replies(n1, pols[p], "1", "0", false, a);
        replies(n4, pols[p], "4", cap, true, b);
        for (int i = 0; i < N_REQ; i++) {
            assert_non_null(a[i]);
            assert_non_null(b[i]);
            assert_string_equal(a[i], b[i]);  /* tokens, text and logprob bytes */
            free(a[i]);
            free(b[i]);
        }
    }
}

// ----------------------------------------------------------------------------
// Cancellation mid-prefill

static void a_client_gone_mid_prefill_is_dropped_at_the_next_chunk_boundary(void **state) {
    (void)state;
    need();
    served sv;
    /* a threshold below 0.1: the second request finds the kept prefix however short it is */
    start(&sv, "midprefill", (const char *const[]){"-m", g_small, "--parallel", "2", "-c", "8192", "--sim-threshold",
                                                   "0.001", NULL});
    enum { LEN = 6000 };
    char *text = malloc(LEN + 1);
    for (int i = 0; i < LEN; i++) text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    text[LEN] = '\0';
    char *body = malloc(LEN + 128);
    snprintf(body, LEN + 128, "{\"prompt\":\"%s\",\"n_predict\":4}", text);
    int fd = raw_connect(&sv);
    assert_true(fd >= 0);
    char head[256];
    snprintf(head, sizeof head, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", strlen(body));
    assert_true(write(fd, head, strlen(head)) > 0);
    assert_true(write(fd, body, strlen(body)) > 0);
    for (int i = 0; i < 400 && metric(&sv, "kvreplay_engine_steps_total") < 3; i++) usleep(10000);
    close(fd);  /* the prompt is being prefilled */
    double t0 = eng_now_s();
    for (int i = 0; i < 1000 && metric(&sv, "kvreplay_cancelled_total") < 1; i++) usleep(10000);
    double gone = eng_now_s() - t0;
    assert_int_equal(metric(&sv, "kvreplay_cancelled_total"), 1);
    /* the same prompt again: the cancelled prefix was kept by the policy, and reused */
    json_t *j = post_json(&sv, "/completion", body, 200);
    int64_t cached = json_integer_value(json_object_get(json_object_get(j, "timings"), "cache_n"));
    double full_ms = json_real_value(json_object_get(json_object_get(j, "timings"), "prompt_ms"));
    json_decref(j);
    assert_int_equal(served_stop(&sv), 0);
    int64_t cut = q_int(sv.db, "SELECT n_prefilled FROM requests WHERE note LIKE '%cancelled after%'");
    fprintf(stderr, "mid-prefill: dropped after %lld of %d prompt tokens, %.0f ms after the close; the rest took "
            "%.0f ms; %lld reused\n", (long long)cut, LEN + 1, 1e3 * gone, full_ms, (long long)cached);
    assert_true(cut > 0 && cut < LEN);  /* dropped inside the prompt ... */
    assert_int_equal(cut % 64, 0);      /* ... at a chunk boundary */
    assert_int_equal(cached, cut);      /* what it computed stayed valid, and served the next one */
    free(text);
    free(body);
}

// ----------------------------------------------------------------------------
// /slots

static void each_slot_holds_its_own_cache_and_id_slot_pins_one(void **state) {
    (void)state;
    need();
    served sv;
    start(&sv, "slots", (const char *const[]){"-m", STORIES, "--parallel", "3", "-c", "512", NULL});
    http_resp r;
    http_do(&sv, "GET", "/props", NULL, NULL, 30, &r);
    json_t *props = json_loads(r.body, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(props, "total_slots")), 3);
    json_decref(props);
    http_free(&r);
    for (int k = 0; k < 3; k++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":\"Slot %d: once upon a time%.*s\",\"n_predict\":2,\"id_slot\":%d}", k, k * 4,
                 "................", k);
        json_t *j = post_json(&sv, "/completion", body, 200);
        assert_int_equal(json_integer_value(json_object_get(j, "id_slot")), k);
        json_decref(j);
    }
    /* a slot is released just after its answer is sent (as llama-server sends, then releases): wait */
    json_t *slots = NULL;
    for (int tries = 0; tries < 200; tries++) {
        json_decref(slots);
        http_do(&sv, "GET", "/slots", NULL, NULL, 30, &r);
        slots = json_loads(r.body, 0, NULL);
        http_free(&r);
        bool busy = false;
        for (size_t k = 0; k < json_array_size(slots); k++)
            busy |= json_is_true(json_object_get(json_array_get(slots, k), "is_processing"));
        if (!busy) break;
        usleep(10000);
    }
    assert_int_equal(json_array_size(slots), 3);
    int64_t n[3];
    for (int k = 0; k < 3; k++) {
        n[k] = json_integer_value(json_object_get(json_array_get(slots, (size_t)k), "n_tokens"));
        assert_true(n[k] > 0);
        assert_false(json_is_true(json_object_get(json_array_get(slots, (size_t)k), "is_processing")));
    }
    assert_true(n[0] != n[1] && n[1] != n[2]);  /* each its own prompt */
    json_decref(slots);
    json_t *j = post_json(&sv, "/completion", "{\"prompt\":\"x\",\"n_predict\":1,\"id_slot\":3}", 400);
    json_decref(j);
    assert_int_equal(served_stop(&sv), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sixty_four_clients_of_four_slots_are_answered_in_shared_steps),
        cmocka_unit_test(four_slots_under_ref_reply_bit_for_bit_as_one_slot),
        cmocka_unit_test(concurrent_prompts_advance_one_at_a_time_by_default),
        cmocka_unit_test(a_client_gone_mid_prefill_is_dropped_at_the_next_chunk_boundary),
        cmocka_unit_test(each_slot_holds_its_own_cache_and_id_slot_pins_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
