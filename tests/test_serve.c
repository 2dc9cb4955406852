/*
 * tests/test_serve.c: `kvreplay serve` end to end, as clients see it: a
 * server in a child process on an ephemeral loopback port (tests/helpers/
 * served.h), talked to over HTTP (libcurl) and raw sockets.
 *
 * Every endpoint, answered and streamed, read back by the API layer's own
 * client side; every error status in each API's shape (400 malformed JSON,
 * wrongly typed fields and a prompt over the context naming both lengths,
 * 401, 404, 405, 413 announced and chunked, 503 with Retry-After); truncated
 * and slow bodies that must not stall other clients; --verify catching a
 * flipped logit bit and a rewritten KV row on the first affected request,
 * in the header, /metrics and SQLite alike; --record then `replay` of the
 * file, with the same rows; seed 001 end to end (a fresh cch= per request:
 * reuse breaks at the billing header without --normalize anthropic-cch and
 * holds with it); --script; cache_prompt false, id_slot and slot erase;
 * sampling fields counted; a client that leaves cancels; SIGTERM finishes
 * the request in progress; and 64 concurrent clients x 20 requests on
 * stories260K, every request answered or refused with 503.
 *
 * Fixtures: a tiny synthetic model with the real Llama SPM vocabulary of
 * ../shared/data (skipped without it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "fixtures.h"
#include "proc.h"
#include "runcli.h"
#include "served.h"
#include "sqlq.h"
#include "status.h"
#include "synth.h"
#include "synth_transcript.h"
#include "transcript.h"
#include "util.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"
#define STORIES "../shared/data/models/stories260K.gguf"

static char g_dir[64];
static char g_model[128];

static int setup(void **state) {
    (void)state;
    if (access(VOCAB, R_OK) != 0 || !kvr_bin()) return 0;
    if (fx_dir(g_dir, "kvr_serve") != 0) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    if (fx_tiny_model_vocab(g_model, 5, VOCAB) != 0) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    served_kill_all();  /* the servers of a test that failed before it stopped them */
    return fx_rm(g_dir);
}

static void need_fixtures(void) {
    if (access(VOCAB, R_OK) != 0 || !kvr_bin() || !g_dir[0]) skip();
}

/* Starts a server on the tiny model with args; fails the test when it does not listen. */
static void start(served *sv, const char *name, const char *const *args) {
    const char *all[48] = {"-m", g_model, "--threads", "1"};
    int n = 4;
    for (int i = 0; args && args[i] && n < 46; i++) all[n++] = args[i];
    all[n] = NULL;
    if (served_start(sv, g_dir, name, all) != 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "cat %s/%s.log >&2", g_dir, name);
        if (system(cmd)) {}
        fail_msg("the server did not start");
    }
}

static void stop_ok(served *sv) { assert_int_equal(served_stop(sv), 0); }

static json_t *body_json(const http_resp *r) {
    json_error_t je;
    json_t *j = json_loads(r->body, 0, &je);
    if (!j) fprintf(stderr, "not JSON (%ld): %s\n", r->status, r->body);
    assert_non_null(j);
    return j;
}

static void expect_status(const http_resp *r, long status) {
    if (r->status != status) fprintf(stderr, "status %ld (want %ld) %s: %s\n", r->status, status, r->curl_error, r->body);
    assert_int_equal(r->status, status);
}

/* POST body to path; expects status; returns the response. */
static void post(const served *sv, const char *path, const char *body, long status, http_resp *r) {
    http_do(sv, "POST", path, body, NULL, 120, r);
    expect_status(r, status);
}

/* Reads r as route's response (the API layer's client side: what probe uses). */
static void read_as(const char *method, const char *path, const http_resp *r, bool stream, hx_api_result *res) {
    const hx_api_route *rt = hx_api_route_find(method, path, NULL);
    assert_non_null(rt);
    hx_api_error e;
    if (!stream) {
        int rc = rt->read(rt, r->body, r->n, res, &e);
        if (rc) fprintf(stderr, "%s: %s\n%s\n", path, e.message, r->body);
        assert_int_equal(rc, ENG_OK);
        return;
    }
    hx_api_reader rd;
    hx_api_reader_init(&rd, rt);
    hx_api_result_init(res);
    int n = hx_api_reader_feed(&rd, r->body, r->n, res, &e);
    if (n < 0) fprintf(stderr, "%s: %s\n%s\n", path, e.message, r->body);
    assert_true(n > 0);
    assert_int_equal(hx_api_reader_finish(&rd, res, &e), ENG_OK);
    hx_api_reader_free(&rd);
}

static int64_t metric(const served *sv, const char *name) {
    http_resp r;
    http_do(sv, "GET", "/metrics", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(r.body, key);
    int64_t v = p ? strtoll(p + strlen(key), NULL, 10) : -1;
    http_free(&r);
    return v;
}

// ----------------------------------------------------------------------------
// Every endpoint

static void every_endpoint_answers_in_its_apis_shape(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "endpoints", (const char *const[]){"--verify", "-c", "4096", NULL});
    http_resp r;
    hx_api_result res;
    char h[128];

    http_do(&sv, "GET", "/health", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    http_free(&r);
    http_do(&sv, "GET", "/props", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "total_slots")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "default_generation_settings"), "n_ctx")), 4096);
    json_decref(j);
    http_free(&r);
    http_do(&sv, "GET", "/v1/models", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    read_as("GET", "/v1/models", &r, false, &res);
    assert_string_equal(res.model, "tiny.gguf");  /* llama-server: the model file's name when no alias */
    hx_api_result_free(&res);
    http_free(&r);

    /* /tokenize <-> /detokenize, with pieces */
    post(&sv, "/tokenize", "{\"content\":\"Once upon a time\",\"with_pieces\":true}", 200, &r);
    read_as("POST", "/tokenize", &r, false, &res);
    assert_true(res.n_tokens >= 3);
    assert_int_equal(res.tokens[0].len, 5);  /* " Once" (SPM's dummy-prefix space); no BOS without add_special */
    char body[512];
    int k = snprintf(body, sizeof body, "{\"tokens\":[");
    for (int32_t i = 0; i < res.n_ids; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s%d", i ? "," : "", res.ids[i]);
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    hx_api_result_free(&res);
    http_free(&r);
    post(&sv, "/detokenize", body, 200, &r);
    read_as("POST", "/detokenize", &r, false, &res);
    assert_string_equal(res.text, " Once upon a time");  /* the pieces concatenated, as llama-server's */
    hx_api_result_free(&res);
    http_free(&r);

    /* /apply-template and count_tokens: replay's rendering */
    post(&sv, "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 200, &r);
    read_as("POST", "/apply-template", &r, false, &res);
    assert_string_equal(res.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    hx_api_result_free(&res);
    http_free(&r);
    post(&sv, "/v1/messages/count_tokens", "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 200, &r);
    read_as("POST", "/v1/messages/count_tokens", &r, false, &res);
    assert_true(res.n_input_tokens > 5);
    hx_api_result_free(&res);
    http_free(&r);

    /* generations: answered and streamed, in every dialect */
    static const struct { const char *path, *body; } gens[] = {
        {"/completion", "{\"prompt\":\"Once upon a time\",\"n_predict\":6,\"n_probs\":3,\"return_tokens\":true%s}"},
        {"/completion", "{\"prompt\":[1,9038,2501,263,931],\"n_predict\":4%s}"},
        {"/v1/completions", "{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":5,\"logprobs\":2%s}"},
        {"/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                 "{\"role\":\"user\",\"content\":\"Say hi\"}],\"max_tokens\":5,\"logprobs\":true,"
                                 "\"top_logprobs\":2%s}"},
        {"/v1/messages", "{\"model\":\"claude-x\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"}],"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"Say hi\"}]%s}"},
    };
    for (size_t g = 0; g < sizeof gens / sizeof gens[0]; g++) {
        for (int stream = 0; stream < 2; stream++) {
            snprintf(body, sizeof body, gens[g].body,
                     stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "");
            post(&sv, gens[g].path, body, 200, &r);
            assert_true(http_header(&r, "X-Kvreplay-Identical", h, sizeof h));
            assert_string_equal(h, "true");
            assert_true(http_header(&r, "X-Kvreplay-Reused", h, sizeof h));
            assert_true(http_header(&r, "Content-Type", h, sizeof h));
            assert_string_equal(h, stream ? "text/event-stream" : "application/json; charset=utf-8");
            read_as("POST", gens[g].path, &r, stream, &res);
            assert_true(res.usage.prompt_tokens > 0);
            assert_true(res.usage.completion_tokens > 0 && res.usage.completion_tokens <= 6);
            if (strstr(gens[g].body, "n_probs") || strstr(gens[g].body, "logprobs"))
                assert_int_equal(res.n_tokens, res.usage.completion_tokens);  /* a probability list per token */
            hx_api_result_free(&res);
            http_free(&r);
        }
    }
    /* /slots and its erase */
    http_do(&sv, "GET", "/slots", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    j = body_json(&r);
    assert_true(json_integer_value(json_object_get(json_array_get(j, 0), "n_tokens")) > 0);
    json_decref(j);
    http_free(&r);
    post(&sv, "/slots/0?action=erase", "", 200, &r);
    j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "id_slot")), 0);
    assert_true(json_integer_value(json_object_get(j, "n_erased")) > 0);
    json_decref(j);
    http_free(&r);
    http_do(&sv, "GET", "/metrics", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    assert_non_null(strstr(r.body, "kvreplay_identical_total 10\n"));
    assert_non_null(strstr(r.body, "kvreplay_ttft_seconds_count 10\n"));
    http_free(&r);
    stop_ok(&sv);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests WHERE verified = 1 AND logits_equal = 1"), 10);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM runs WHERE status = 'done'"), 1);
}

// ----------------------------------------------------------------------------
// Errors

static void errors_come_in_each_apis_shape_and_status(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "errors", (const char *const[]){"-c", "200", "--max-body", "4096", NULL});
    http_resp r;
    char h[64];
    /* malformed JSON: each dialect's own shape */
    post(&sv, "/completion", "{\"prompt\":", 400, &r);
    assert_non_null(strstr(r.body, "{\"error\":{\"code\":400,"));
    http_free(&r);
    post(&sv, "/v1/chat/completions", "{\"messages\":[}", 400, &r);
    assert_non_null(strstr(r.body, "\"param\":null"));
    http_free(&r);
    post(&sv, "/v1/messages", "not json", 400, &r);
    assert_non_null(strstr(r.body, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\""));
    http_free(&r);
    /* a wrongly typed field is named */
    post(&sv, "/v1/messages", "{\"max_tokens\":\"5\",\"messages\":[]}", 400, &r);
    assert_non_null(strstr(r.body, "max_tokens: expected an integer"));
    http_free(&r);
    post(&sv, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400, &r);
    assert_non_null(strstr(r.body, "\"param\":\"messages[0].content\""));
    http_free(&r);
    /* a prompt over the context names both lengths */
    char big[3000];
    int k = snprintf(big, sizeof big, "{\"prompt\":\"");
    for (int i = 0; i < 300; i++) k += snprintf(big + k, sizeof big - (size_t)k, " word");
    snprintf(big + k, sizeof big - (size_t)k, "\"}");
    post(&sv, "/completion", big, 400, &r);
    json_t *j = body_json(&r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "exceed_context_size_error");
    assert_int_equal(json_integer_value(json_object_get(e, "n_ctx")), 200);
    assert_true(json_integer_value(json_object_get(e, "n_prompt_tokens")) > 300);
    json_decref(j);
    http_free(&r);
    snprintf(big, sizeof big, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"");
    k = (int)strlen(big);
    for (int i = 0; i < 300; i++) k += snprintf(big + k, sizeof big - (size_t)k, " word");
    snprintf(big + k, sizeof big - (size_t)k, "\"}]}");
    post(&sv, "/v1/messages", big, 400, &r);
    assert_non_null(strstr(r.body, "prompt is too long: "));
    assert_non_null(strstr(r.body, " tokens > 200 maximum"));
    http_free(&r);
    /* 404, 405, 413 announced by Content-Length */
    post(&sv, "/v2/nothing", "{}", 404, &r);
    http_free(&r);
    http_do(&sv, "GET", "/v1/messages", NULL, NULL, 30, &r);
    expect_status(&r, 405);
    assert_non_null(strstr(r.body, "\"type\":\"error\""));
    http_free(&r);
    char *huge = malloc(8192);
    memset(huge, ' ', 8191);
    huge[0] = '{';
    huge[8190] = '}';
    huge[8191] = '\0';
    post(&sv, "/completion", huge, 413, &r);
    http_free(&r);
    /* ... and a chunked body that grows past it */
    http_do(&sv, "POST", "/v1/chat/completions", huge, (const char *const[]){"Transfer-Encoding: chunked", NULL}, 30, &r);
    expect_status(&r, 413);
    http_free(&r);
    free(huge);
    /* the server still answers */
    post(&sv, "/completion", "{\"prompt\":\"Once\",\"n_predict\":1}", 200, &r);
    assert_true(http_header(&r, "X-Kvreplay-Identical", h, sizeof h));
    assert_string_equal(h, "unverified");  /* no --verify */
    http_free(&r);
    stop_ok(&sv);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests WHERE verified = 0 AND ttft_cold_ms IS NULL"), 1);

    /* the key: required to listen beyond the loopback, then checked (Bearer or x-api-key) */
    char out[256], err[512];
    int rc = proc_run(NULL, out, sizeof out, err, sizeof err,
                      (const char *const[]){"serve", "-m", g_model, "--listen", "0.0.0.0:0", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--api-key"));
    start(&sv, "key", (const char *const[]){"--api-key", "k3y", NULL});
    post(&sv, "/completion", "{\"prompt\":\"Once\",\"n_predict\":1}", 401, &r);
    http_free(&r);
    http_do(&sv, "POST", "/v1/messages", "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            (const char *const[]){"x-api-key: k3y", NULL}, 60, &r);
    expect_status(&r, 200);
    http_free(&r);
    http_do(&sv, "POST", "/completion", "{\"prompt\":\"Once\",\"n_predict\":1}",
            (const char *const[]){"Authorization: Bearer k3y", NULL}, 60, &r);
    expect_status(&r, 200);
    http_free(&r);
    http_do(&sv, "GET", "/health", NULL, NULL, 30, &r);  /* open, as llama-server's */
    expect_status(&r, 200);
    http_free(&r);
    stop_ok(&sv);
}

typedef struct slow_req { const served *sv; const char *body; http_resp r; } slow_req;

static void *post_thread(void *arg) {
    slow_req *s = arg;
    http_do(s->sv, "POST", "/completion", s->body, NULL, 120, &s->r);
    return NULL;
}

static void a_full_queue_refuses_with_503_and_retry_after(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "queue", (const char *const[]){"--queue", "1", "--verify", "--decode", "200", NULL});
    enum { N = 6 };
    slow_req q[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        q[i].sv = &sv;
        q[i].body = "{\"prompt\":\"Once upon a time there was\",\"n_predict\":200,\"cache_prompt\":false}";
    }
    /* one request on the engine, then five at once: one waits in the queue, the others are refused */
    pthread_create(&t[0], NULL, post_thread, &q[0]);
    for (int i = 0; i < 500 && metric(&sv, "kvreplay_ttft_seconds_count") < 1; i++) usleep(10000);
    int ok = 0, refused = 0;
    for (int i = 1; i < N; i++) pthread_create(&t[i], NULL, post_thread, &q[i]);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        char h[32];
        if (q[i].r.status == 200) ok++;
        else if (q[i].r.status == 503) {
            refused++;
            assert_true(http_header(&q[i].r, "Retry-After", h, sizeof h));
            assert_string_equal(h, "1");
            assert_non_null(strstr(q[i].r.body, "the queue is full"));
        }
        http_free(&q[i].r);
    }
    assert_int_equal(ok + refused, N);  /* every request answered, none lost */
    assert_int_equal(ok, 2);
    assert_int_equal(refused, 4);
    assert_int_equal(metric(&sv, "kvreplay_refused_queue_full_total"), refused);
    stop_ok(&sv);
}

static void truncated_and_slow_bodies_do_not_stall_other_clients(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "slow", (const char *const[]){"--timeout", "2", NULL});
    /* a slowloris: headers and a little of a body, then silence */
    int slow[4];
    for (int i = 0; i < 4; i++) {
        slow[i] = raw_connect(&sv);
        assert_true(slow[i] >= 0);
        const char *head = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 5000\r\n\r\n{\"max_tokens\":";
        assert_true(write(slow[i], head, strlen(head)) > 0);
    }
    /* a truncated body: announced longer than sent, then closed */
    int cut = raw_connect(&sv);
    const char *trunc = "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":\"On";
    assert_true(write(cut, trunc, strlen(trunc)) > 0);
    close(cut);
    /* the others are served at once */
    http_resp r;
    for (int i = 0; i < 5; i++) {
        post(&sv, "/completion", "{\"prompt\":\"Once upon\",\"n_predict\":2}", 200, &r);
        assert_true(r.t_total < 10);
        http_free(&r);
    }
    /* the stalled connections are closed after --timeout */
    for (int i = 0; i < 4; i++) {
        size_t n = 0;
        char *got = raw_read_all(slow[i], 15, &n);
        assert_int_equal(n, 0);  /* closed without an answer */
        free(got);
        close(slow[i]);
    }
    stop_ok(&sv);
}

// ----------------------------------------------------------------------------
// --verify with planted faults

/* Sends a 3-turn Anthropic conversation (system long enough to span chunks); the Identical headers. */
static void conversation(const served *sv, char verdicts[3][16], int32_t reused[3]) {
    char sys[2048] = "";
    for (int i = 0; i < 40; i++) strcat(sys, "You are a careful assistant. ");
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Tell me about caches.");
    for (int t = 0; t < 3; t++) {
        json_t *b = json_pack("{s:s, s:i, s:s, s:O}", "model", "claude-x", "max_tokens", 6, "system", sys, "messages", msgs);
        char *body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        http_resp r;
        post(sv, "/v1/messages", body, 200, &r);
        free(body);
        char h[32];
        assert_true(http_header(&r, "X-Kvreplay-Identical", verdicts[t], 16));
        assert_true(http_header(&r, "X-Kvreplay-Reused", h, sizeof h));
        reused[t] = atoi(h);
        json_t *j = body_json(&r);
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "assistant", "content", json_object_get(j, "content")));
        char next[32];
        snprintf(next, sizeof next, "And then %d?", t);
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", next));
        json_decref(j);
        http_free(&r);
    }
    json_decref(msgs);
}

static void verify_catches_a_flipped_logit_and_a_rewritten_kv_row(void **state) {
    (void)state;
    need_fixtures();
    static const char *const faults[] = {"ulp-flip", "kv-row"};
    for (int f = 0; f < 2; f++) {
        served sv;
        char name[32];
        snprintf(name, sizeof name, "fault-%s", faults[f]);
        start(&sv, name, (const char *const[]){"--verify", "--inject-fault", faults[f], "--fault-request", "1", NULL});
        char v[3][16];
        int32_t reused[3];
        conversation(&sv, v, reused);
        assert_true(reused[1] > 0);  /* the fault lands on a reuse */
        assert_string_equal(v[0], "true");
        assert_string_equal(v[1], "false");  /* the first affected request, in the header */
        assert_string_equal(v[2], "true");
        assert_int_equal(metric(&sv, "kvreplay_diverged_total"), 1);
        assert_int_equal(metric(&sv, "kvreplay_identical_total"), 2);
        stop_ok(&sv);
        assert_true(served_log_has(&sv, "DIVERGED: request"));
        /* and in SQLite, as check reads it */
        assert_int_equal(q_int(sv.db, "SELECT req_index FROM requests WHERE NOT (logits_equal = 1 AND decode_equal = 1 "
                                      "AND coalesce(state_equal, 1) = 1)"), 1);
        if (f == 0) assert_int_equal(q_int(sv.db, "SELECT first_diff_index FROM requests WHERE req_index = 1"), 0);
        char out[1024], err[512];
        int rc = proc_run(NULL, out, sizeof out, err, sizeof err, (const char *const[]){"report", "--db", sv.db, NULL});
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "66.7%"));
    }
}

// ----------------------------------------------------------------------------
// --record, then replay

static void a_recorded_session_replays_to_the_same_rows(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    char rec[192];
    snprintf(rec, sizeof rec, "%s/recorded.jsonl", g_dir);
    unlink(rec);
    start(&sv, "record", (const char *const[]){"--verify", "--record", rec, "--slots", "2", NULL});
    char v[3][16];
    int32_t reused[3];
    conversation(&sv, v, reused);
    http_resp r;
    post(&sv, "/completion", "{\"prompt\":\"Once upon a time there was a little girl\",\"n_predict\":5,\"id_slot\":1}", 200, &r);
    http_free(&r);
    post(&sv, "/completion", "{\"prompt\":\"Once upon a time there was a little girl\",\"n_predict\":3,\"id_slot\":1,"
                             "\"cache_prompt\":false}", 200, &r);
    http_free(&r);
    post(&sv, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":true,"
                                      "\"temperature\":0.7}", 200, &r);
    http_free(&r);
    assert_int_equal(metric(&sv, "kvreplay_sampling_not_honoured_total"), 1);
    stop_ok(&sv);
    /* the file: what was received, what was answered, how it came */
    hx_transcript t;
    char err[512];
    assert_int_equal(hx_transcript_read(rec, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 6);
    assert_non_null(strstr(t.header, "kvreplay-serve"));
    assert_non_null(strstr(t.reqs[0].served, "\"body\":\"{\\\"model\\\":\\\"claude-x\\\""));
    assert_non_null(strstr(t.reqs[4].served, "\"cache_prompt\":false"));
    assert_non_null(strstr(t.reqs[5].notes, "sampling not honoured"));
    assert_true(t.reqs[0].response.n_blocks == 1 || t.reqs[0].response.n_blocks == 0);
    assert_true(t.reqs[1].usage.present && t.reqs[1].usage.cache_read > 0);
    hx_transcript_free(&t);
    /* replay reads it directly; its rows are serve's, bit for bit in every column but the timings */
    char db2[192];
    snprintf(db2, sizeof db2, "%s/replayed.sqlite", g_dir);
    int rc = proc_run(NULL, NULL, 0, err, sizeof err,
                      (const char *const[]){"replay", "-m", g_model, "-t", rec, "--db", db2, "--slots", "2", "--threads",
                                            "1", NULL});
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    static const char *const cols =
        "req_index, session, turn, n_prompt, n_reused, n_prefilled, logits_equal, first_diff_index, top1_equal, "
        "fork_step, decode_equal, n_decode, flops_cold, flops_reuse, bytes_restored, sim, f_keep, slot, lcp, "
        "miss_pos, miss_byte, miss_text, miss_where, stable_end, note, extra, state_equal, state_hash_cold, "
        "state_hash_reuse, cache_bytes, cache_entries, verified";
    char sql[2048];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS b; SELECT count(*) FROM (SELECT %s FROM main.requests EXCEPT "
             "SELECT %s FROM b.requests)", db2, cols, cols);
    assert_int_equal(q_int(sv.db, sql), 0);
    snprintf(sql, sizeof sql, "ATTACH '%s' AS b; SELECT count(*) FROM b.requests", db2);
    assert_int_equal(q_int(sv.db, sql), 6);
    snprintf(sql, sizeof sql, "ATTACH '%s' AS b; SELECT count(*) FROM (SELECT session, turn, step, token_cold, "
             "token_reuse, logits_equal FROM main.steps EXCEPT SELECT session, turn, step, token_cold, token_reuse, "
             "logits_equal FROM b.steps)", db2);
    assert_int_equal(q_int(sv.db, sql), 0);
    /* the second id_slot 1 request reused nothing (cache_prompt false) yet left the slot filled */
    assert_int_equal(q_int(sv.db, "SELECT n_reused FROM requests WHERE req_index = 4"), 0);
    assert_int_equal(q_int(sv.db, "SELECT slot FROM requests WHERE req_index = 4"), 1);
}

// ----------------------------------------------------------------------------
// What newer clients send: accepted, counted by path, noted, said once

static void a_newer_clients_unknown_fields_are_accepted_counted_and_noted(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    char rec[192];
    snprintf(rec, sizeof rec, "%s/newer.jsonl", g_dir);
    unlink(rec);
    start(&sv, "newer", (const char *const[]){"--verify", "--record", rec, NULL});
    /* Claude Code 2.1.328's shape: a system-role message with output_config, and a top-level output_config */
    static const char body[] =
        "{\"model\":\"claude-x\",\"max_tokens\":4,\"output_config\":{\"effort\":\"medium\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"say hi\"},{\"role\":\"system\",\"content\":\"mode\","
        "\"output_config\":{\"effort\":\"medium\"}}]}";
    http_resp r;
    for (int i = 0; i < 2; i++) {
        post(&sv, "/v1/messages", body, 200, &r);
        http_free(&r);
    }
    http_do(&sv, "GET", "/metrics", NULL, NULL, 30, &r);
    expect_status(&r, 200);
    assert_non_null(strstr(r.body, "kvreplay_ignored_fields_total{path=\"messages[].output_config\"} 2\n"));
    assert_non_null(strstr(r.body, "kvreplay_ignored_fields_total{path=\"output_config\"} 2\n"));
    http_free(&r);
    /* a wrongly typed known field is still a 400 naming it */
    post(&sv, "/v1/messages", "{\"max_tokens\":4,\"output_config\":{},\"messages\":[{\"role\":\"user\",\"content\":5}]}",
         400, &r);
    assert_non_null(strstr(r.body, "messages[0].content"));
    http_free(&r);
    stop_ok(&sv);
    hx_transcript t;
    char err[512];
    assert_int_equal(hx_transcript_read(rec, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 2);
    assert_non_null(strstr(t.reqs[1].notes, "messages[].output_config"));
    hx_transcript_free(&t);
    /* said once on stderr per path */
    char log[192], cmd[320];
    snprintf(log, sizeof log, "%s/newer.log", g_dir);
    snprintf(cmd, sizeof cmd, "test \"$(grep -c 'does not act on: messages\\[\\].output_config (said once)' %s)\" = 1", log);
    assert_int_equal(system(cmd), 0);
}

// ----------------------------------------------------------------------------
// Seed 001 end to end: a fresh cch= per request

static void seed_001_reuse_breaks_at_the_billing_header_unless_normalized(void **state) {
    (void)state;
    need_fixtures();
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.seed = 7;
    p.sessions = 1;
    p.turns = 4;
    p.system_bytes = 8000;
    p.tool_result_bytes = 300;
    hx_transcript t;
    char err[256];
    assert_int_equal(hx_synth_transcript(&p, &t, err, sizeof err), ENG_OK);
    const hx_api_route *rt = hx_api_route_find("POST", "/v1/messages", NULL);
    int64_t reads[2][4];
    for (int norm = 0; norm < 2; norm++) {
        served sv;
        start(&sv, norm ? "seed001-norm" : "seed001-raw",
              norm ? (const char *const[]){"--normalize", "anthropic-cch", "-c", "8192", NULL}
                   : (const char *const[]){"-c", "8192", NULL});
        for (int32_t i = 0; i < t.n; i++) {
            hx_api_req q;
            hx_api_req_init(&q);
            q.route = rt;
            assert_int_equal(hx_request_copy(&q.req, &t.reqs[i]), ENG_OK);
            /* the client's own turn: the synthetic transcript's recorded response is what it appends */
            q.params.max_tokens = 4;
            json_t *b = rt->request(&q);
            char *body = json_dumps(b, JSON_COMPACT);
            json_decref(b);
            http_resp r;
            post(&sv, "/v1/messages", body, 200, &r);
            hx_api_result res;
            read_as("POST", "/v1/messages", &r, false, &res);
            reads[norm][i] = res.usage.cached_tokens;
            hx_api_result_free(&res);
            http_free(&r);
            free(body);
            hx_api_req_free(&q);
        }
        stop_ok(&sv);
        /* SQLite says the same */
        assert_int_equal(q_int(sv.db, "SELECT sum(n_reused) FROM requests"),
                         reads[norm][0] + reads[norm][1] + reads[norm][2] + reads[norm][3]);
        if (!norm) assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests WHERE turn > 0 AND miss_where LIKE "
                                                 "'system block 0%'"), 3);
    }
    for (int i = 1; i < 4; i++) {
        assert_true(reads[0][i] <= 64);        /* cut at the header: the billing block's first chunk at most */
        assert_true(reads[1][i] > 1500);       /* the whole stable prefix and more */
    }
    hx_transcript_free(&t);
}

// ----------------------------------------------------------------------------
// --script

static void a_script_answers_with_its_turns_and_says_where_the_agent_departs(void **state) {
    (void)state;
    need_fixtures();
    char path[192];
    snprintf(path, sizeof path, "%s/script.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"v\":2,\"session\":\"s\",\"turn\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"Read notes.txt\"}]}],\"response\":{\"content\":[{\"type\":\"thinking\",\"thinking\":\"I will read it.\"},"
          "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{\"file_path\":\"notes.txt\"}}]}}\n"
          "{\"v\":2,\"session\":\"s\",\"turn\":1,\"prev\":0,\"append\":[],\"response\":{\"content\":[{\"type\":\"text\","
          "\"text\":\"It says hello.\"}]}}\n", f);
    fclose(f);
    served sv;
    start(&sv, "script", (const char *const[]){"--script", path, "--verify", NULL});
    http_resp r;
    char h[256];
    /* turn 0: the agent's first request (its own system prompt and reminders around the task) */
    const char *first = "{\"model\":\"c\",\"max_tokens\":100,\"system\":\"You are an agent.\",\"messages\":[{\"role\":\"user\","
                        "\"content\":[{\"type\":\"text\",\"text\":\"<system-reminder>ctx</system-reminder>\"},{\"type\":"
                        "\"text\",\"text\":\"Read notes.txt\"}]}],\"stream\":true}";
    post(&sv, "/v1/messages", first, 200, &r);
    assert_true(http_header(&r, "X-Kvreplay-Script", h, sizeof h));
    assert_string_equal(h, "turn 0 of 2");
    hx_api_result res;
    read_as("POST", "/v1/messages", &r, true, &res);
    assert_int_equal(res.content.n_blocks, 2);
    assert_int_equal(res.content.blocks[1].type, HX_BLOCK_TOOL_USE);
    assert_string_equal(res.content.blocks[1].input, "{\"file_path\":\"notes.txt\"}");
    assert_int_equal(res.finish, HX_API_FINISH_TOOL_USE);
    hx_api_result_free(&res);
    http_free(&r);
    /* a side request (a quota probe): the model answers, the script does not advance */
    post(&sv, "/v1/messages", "{\"model\":\"c\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"quota\"}]}", 200, &r);
    assert_true(http_header(&r, "X-Kvreplay-Script", h, sizeof h));
    assert_string_equal(h, "side request");
    http_free(&r);
    /* turn 1, echoing turn 0 with its thinking dropped: answered, the departure said */
    const char *second = "{\"model\":\"c\",\"max_tokens\":100,\"system\":\"You are an agent.\",\"messages\":[{\"role\":\"user\","
                         "\"content\":[{\"type\":\"text\",\"text\":\"<system-reminder>ctx</system-reminder>\"},{\"type\":"
                         "\"text\",\"text\":\"Read notes.txt\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
                         "\"id\":\"toolu_1\",\"name\":\"Read\",\"input\":{\"file_path\":\"notes.txt\"}}]},{\"role\":\"user\","
                         "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"hello\"}]}]}";
    post(&sv, "/v1/messages", second, 200, &r);
    assert_true(http_header(&r, "X-Kvreplay-Script", h, sizeof h));
    assert_non_null(strstr(h, "turn 1 of 2; departs: message 1 (assistant, the script's turn 0)"));
    read_as("POST", "/v1/messages", &r, false, &res);
    assert_string_equal(res.content.blocks[0].text, "It says hello.");
    hx_api_result_free(&res);
    http_free(&r);
    assert_int_equal(metric(&sv, "kvreplay_scripted_total"), 2);
    assert_int_equal(metric(&sv, "kvreplay_side_requests_total"), 1);
    assert_int_equal(metric(&sv, "kvreplay_script_departures_total"), 1);
    stop_ok(&sv);
    assert_true(served_log_has(&sv, "departs from the script (turn 1)"));
    /* the scripted turns were verified like any other */
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests WHERE verified = 1 AND logits_equal = 1"), 3);
}

// ----------------------------------------------------------------------------
// The cache's per-request controls, cancellation and stopping

static void a_client_that_leaves_cancels_its_request(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "cancel", (const char *const[]){"-n", "100000", "-c", "8192", NULL});
    int fd = raw_connect(&sv);
    const char *body = "{\"prompt\":\"Once upon a time\",\"n_predict\":6000,\"stream\":true}";
    char req[512];
    snprintf(req, sizeof req, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    assert_true(write(fd, req, strlen(req)) > 0);
    char buf[256];
    assert_true(read(fd, buf, sizeof buf) > 0);  /* the stream began */
    close(fd);
    for (int i = 0; i < 200 && metric(&sv, "kvreplay_cancelled_total") < 1; i++) usleep(50000);
    assert_int_equal(metric(&sv, "kvreplay_cancelled_total"), 1);
    http_resp r;
    post(&sv, "/completion", "{\"prompt\":\"Once\",\"n_predict\":2}", 200, &r);  /* the engine is free again */
    http_free(&r);
    stop_ok(&sv);
    assert_true(q_int(sv.db, "SELECT count(*) FROM requests") == 2);
}

typedef struct stream_req { const served *sv; http_resp r; } stream_req;

static void *stream_thread(void *arg) {
    stream_req *s = arg;
    http_do(s->sv, "POST", "/completion", "{\"prompt\":\"Once upon a time\",\"n_predict\":300,\"stream\":true}", NULL, 120,
            &s->r);
    return NULL;
}

static void sigterm_finishes_the_request_in_progress(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "sigterm", (const char *const[]){"--verify", "-n", "300", NULL});
    stream_req s = {.sv = &sv};
    pthread_t t;
    pthread_create(&t, NULL, stream_thread, &s);
    for (int i = 0; i < 200 && metric(&sv, "kvreplay_ttft_seconds_count") < 1; i++) usleep(20000);
    pid_t pid = sv.pid;
    kill(pid, SIGTERM);
    pthread_join(t, NULL);
    expect_status(&s.r, 200);
    assert_non_null(strstr(s.r.body, "\"stop\":true"));  /* the stream ended as it should */
    http_free(&s.r);
    assert_int_equal(served_stop(&sv), 0);  /* a second SIGTERM during the stop changes nothing */
    assert_true(served_log_has(&sv, "SIGTERM: finishing the request in progress"));
    assert_true(served_log_has(&sv, "stopped: 1 requests"));
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM runs WHERE status = 'done'"), 1);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests"), 1);
}

// ----------------------------------------------------------------------------
// Load: 64 clients x 20 requests on stories260K

static void sixty_four_clients_are_all_answered_or_refused(void **state) {
    (void)state;
    need_fixtures();
    if (access(STORIES, R_OK) != 0) skip();
    served sv;
    const char *args[] = {"-m", STORIES, "--queue", "16", "-c", "512", NULL};
    if (served_start(&sv, g_dir, "load", args) != 0) fail_msg("the server did not start");
    enum { C = 64 };
    served_load l = served_load_run(&sv, C, 20, 4);
    int ok = l.ok, refused = l.refused, other = l.other;
    fprintf(stderr, "load: %d answered, %d refused (503), %d other\n", ok, refused, other);
    assert_int_equal(other, 0);               /* none hangs, none is lost */
    assert_int_equal(ok + refused, C * 20);
    assert_true(ok > 0);
    assert_int_equal(metric(&sv, "kvreplay_refused_queue_full_total"), refused);
    stop_ok(&sv);
    assert_int_equal(q_int(sv.db, "SELECT count(*) FROM requests"), ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_endpoint_answers_in_its_apis_shape),
        cmocka_unit_test(errors_come_in_each_apis_shape_and_status),
        cmocka_unit_test(a_full_queue_refuses_with_503_and_retry_after),
        cmocka_unit_test(truncated_and_slow_bodies_do_not_stall_other_clients),
        cmocka_unit_test(verify_catches_a_flipped_logit_and_a_rewritten_kv_row),
        cmocka_unit_test(a_recorded_session_replays_to_the_same_rows),
        cmocka_unit_test(a_newer_clients_unknown_fields_are_accepted_counted_and_noted),
        cmocka_unit_test(seed_001_reuse_breaks_at_the_billing_header_unless_normalized),
        cmocka_unit_test(a_script_answers_with_its_turns_and_says_where_the_agent_departs),
        cmocka_unit_test(a_client_that_leaves_cancels_its_request),
        cmocka_unit_test(sigterm_finishes_the_request_in_progress),
        cmocka_unit_test(sixty_four_clients_are_all_answered_or_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
