/*
 * tests/test_probe.c: `kvreplay probe` against a tiny server of its own
 * (libmicrohttpd, in this file) that speaks llama-server's native API through
 * the API layer's server half, and misbehaves on demand:
 *   ok          a correct prefix cache: one slot, reuse = the common prefix
 *               capped at the prompt's length - 1, deterministic
 *               probabilities of the whole prompt (warm == cold);
 *   misreport   reports one token more than it reused;
 *   stale       a warm run's first-position log-probabilities one ULP off;
 *   sysprompt   reuses the whole cached prompt whatever the new one shares;
 *   http500, http400, malformed (an event that is not JSON), missing (the
 *   last event without tokens_predicted), cut (the connection closed inside
 *   an event), noend (a clean close before the last event), slow (silent for
 *   longer than --idle-timeout), lie (another model than it lists), and a
 *   refused connection (nothing listening).
 * A correct server gives exit 0 with every row identical and reuse as
 * expected; each fault gives exit 1, the row that says what happened, and
 * never a crash or a hang. Then against `kvreplay serve` itself, on
 * loopback: 100% identical under align chunk with reuse reported == expected,
 * and the three faults planted in serve caught: --inject-fault report-cached
 * (reports one token more than it reused), --inject-fault kv-row (a stale KV
 * row on reuse; with --verify, which plants it) and --quirk system-blind
 * (reuses the cached KV across a changed system prompt). Also: the caps of
 * every engine's rule (probe/reuse.c), JSON spans and the bit comparison
 * (probe/bits.c).
 * Fixtures: the tiny synthetic model (byte vocabulary, V = 259) as -m, and a
 * seeded 3-request extend transcript (each request extends the previous).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "bits.h"
#include "fixtures.h"
#include "policy.h"
#include "probe.h"
#include "proc.h"
#include "reuse.h"
#include "runcli.h"
#include "served.h"
#include "sqlq.h"
#include "status.h"
#include "str.h"

// ----------------------------------------------------------------------------
// The fake server

typedef enum mode {
    M_OK, M_MISREPORT, M_STALE, M_SYSPROMPT, M_HTTP500, M_HTTP400, M_MALFORMED, M_MISSING, M_CUT, M_NOEND, M_SLOW,
    M_LIE, M_VLLM,
} mode;

static struct {
    struct MHD_Daemon *d;
    int                port;
    mode               mode;
    pthread_mutex_t    mu;
    int32_t            held[65536];
    int32_t            n_held;
    int                n_generate;  /* /completion requests answered */
    volatile int       stopping;
} g_srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

static char g_dir[64], g_model[160], g_tr[160], g_db[160], g_agent[160];

typedef struct conn {
    eng_buf body;
} conn;

typedef struct feed {
    eng_buf out;      /* the bytes to send */
    size_t  off;
    size_t  cut_at;   /* close the connection with an error here (0: never) */
    size_t  pause_at; /* go silent here for 2.5 s (0: never) */
    bool    paused;
} feed;

static ssize_t feed_read(void *cls, uint64_t pos, char *buf, size_t max) {
    feed *f = cls;
    if (f->pause_at && f->off >= f->pause_at && !f->paused) {
        f->paused = true;
        for (int i = 0; i < 50 && !g_srv.stopping; i++) usleep(50000);
    }
    size_t end = f->out.len;
    if (f->cut_at && f->cut_at < end) end = f->cut_at;
    if (f->pause_at && !f->paused && f->pause_at < end) end = f->pause_at;
    if (f->off >= end) {
        if (f->cut_at && f->off >= f->cut_at) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (f->off >= f->out.len) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = end - f->off < max ? end - f->off : max;
    memcpy(buf, f->out.data + f->off, n);
    f->off += n;
    return (ssize_t)n;
}

static void feed_free(void *cls) {
    feed *f = cls;
    eng_buf_free(&f->out);
    free(f);
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *type, const char *s) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), (void *)s, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static uint32_t hash_ids(const int32_t *ids, int32_t n) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 16777619u;
    return h;
}

/* Token k of a generation from prompt hash h: its K candidates, most probable first. */
static void fake_token(uint32_t h, int32_t k, int32_t K, hx_api_token *t, hx_api_prob *top, char texts[][4]) {
    for (int32_t j = 0; j < K; j++) {
        int32_t id = (int32_t)((h + 7u * (uint32_t)j + 13u * (uint32_t)k) % 256u) + 3;  /* byte tokens 3..258 */
        snprintf(texts[j], 4, "%c", 'a' + (id % 26));
        top[j] = (hx_api_prob){id, texts[j], 1, -(1.0f + 0.25f * (float)j + (float)(h % 97u) / 97.0f)};
    }
    *t = (hx_api_token){top[0].id, texts[0], 1, top[0].logprob, top, K};
}

static enum MHD_Result answer_completion(struct MHD_Connection *c, conn *cn) {
    const hx_api_route *rt = hx_api_route_find("POST", "/completion", NULL);
    hx_api_req q;
    hx_api_error e;
    if (rt->parse(rt, "/completion", NULL, cn->body.data ? cn->body.data : "", cn->body.len, &q, &e))
        return send_text(c, 400, "application/json", "{\"error\":{\"code\":400,\"message\":\"bad\",\"type\":\"invalid_request_error\"}}");
    mode m = g_srv.mode;
    if (m == M_HTTP500 || m == M_HTTP400) {
        hx_api_req_free(&q);
        return m == M_HTTP500 ? send_text(c, 500, "application/json",
                                          "{\"error\":{\"code\":500,\"message\":\"the KV cache is on fire\",\"type\":\"server_error\"}}")
                              : send_text(c, 400, "application/json",
                                          "{\"error\":{\"code\":400,\"message\":\"n_probs: too many\",\"type\":\"invalid_request_error\"}}");
    }
    pthread_mutex_lock(&g_srv.mu);
    g_srv.n_generate++;
    int32_t n = q.req.n_tokens, K = q.params.n_probs > 0 ? q.params.n_probs : 1, N = q.params.max_tokens;
    int32_t lcp = hx_lcp(q.req.tokens, n, g_srv.held, g_srv.n_held);
    int32_t reused = lcp < n - 1 ? lcp : n - 1, reported = reused;
    if (!q.params.cache_prompt) reused = reported = 0;
    if (m == M_MISREPORT && reused > 0) reported = reused + 1;
    if (m == M_SYSPROMPT && q.params.cache_prompt) {  /* the cached prompt is taken whole, changed or not */
        reused = g_srv.n_held < n - 1 ? g_srv.n_held : n - 1;
        reported = reused;
    }
    hx_api_result r;
    hx_api_result_init(&r);
    r.id_slot = 0;
    r.model = hx_strdup(m == M_LIE ? "gpt-4o" : "fake");
    r.usage.prompt_tokens = n;
    r.usage.completion_tokens = N;
    r.finish = HX_API_FINISH_LENGTH;
    r.timings = (hx_api_timings){reported, n - reported, N, 1.0, 1.0};
    uint32_t h = hash_ids(q.req.tokens, n);
    if (m == M_SYSPROMPT && reused > lcp) h ^= 0x5bd1e995u;  /* what a stale system prompt does to the logits */
    hx_api_stream st;
    hx_api_stream_init(&st, &q, &r);
    hx_api_stream_begin(&st);
    feed *f = calloc(1, sizeof *f);
    size_t first_event_end = 0;
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    for (int32_t k = 0; k < N; k++) {
        hx_api_prob top[300];
        char texts[300][4];
        hx_api_token t;
        fake_token(h, k, K, &t, top, texts);
        if (m == M_STALE && k == 0 && reused > 0) top[0].logprob = t.logprob = nextafterf(t.logprob, 0.0f);
        gen[k] = t.id;
        hx_api_stream_token(&st, &t);
        if (k == 0) first_event_end = st.out.len;
    }
    if (m != M_NOEND) hx_api_stream_end(&st);
    eng_buf_append(&f->out, st.out.data, st.out.len);
    hx_api_stream_free(&st);
    /* the slot keeps the prompt and the tokens generated, but the last */
    memcpy(g_srv.held, q.req.tokens, sizeof(int32_t) * (size_t)n);
    if (N > 1) memcpy(g_srv.held + n, gen, sizeof(int32_t) * (size_t)(N - 1));
    g_srv.n_held = n + (N > 1 ? N - 1 : 0);
    pthread_mutex_unlock(&g_srv.mu);
    free(gen);
    if (m == M_MALFORMED) {  /* the second event's JSON broken in the middle */
        char *p = strstr(f->out.data + first_event_end, "\"content\"");
        if (p) memcpy(p, "{{{{{{{{{", 9);
    }
    if (m == M_MISSING) {  /* the last event without tokens_predicted */
        char *p = strstr(f->out.data, "\"tokens_predicted\":" );
        for (char *x = p; x; p = x, x = strstr(x + 1, "\"tokens_predicted\":")) {}
        if (p) memcpy(p, "\"tokens_predicte_\":", 19);
    }
    if (m == M_CUT) f->cut_at = first_event_end + 20;
    if (m == M_SLOW) f->pause_at = first_event_end;
    hx_api_req_free(&q);
    hx_api_result_free(&r);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, feed_read, f, feed_free);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* vLLM's /v1/completions as vLLM writes it (M_VLLM): every full 16-token block of every sequence of
 * the same cache_salt is kept; a hit is at most the prompt's length - 1, whole blocks; the legacy
 * logprobs with return_tokens_as_token_ids ("token_id:N"); usage.prompt_tokens_details only when the
 * hit is above 0. The sequences: salts[k] with seqs[k] (prompt and generated ids but the last). */
static struct { char salt[96]; int32_t ids[8192]; int32_t n; } g_vseq[64];
static int g_nvseq;

static enum MHD_Result answer_vllm(struct MHD_Connection *c, conn *cn) {
    json_error_t je;
    json_t *b = json_loadb(cn->body.data ? cn->body.data : "", cn->body.len, 0, &je);
    const json_t *pr = json_object_get(b, "prompt");
    char salt[96];
    const char *sv = json_string_value(json_object_get(b, "cache_salt"));
    snprintf(salt, sizeof salt, "%s", sv ? sv : "");
    int32_t n = (int32_t)json_array_size(pr), N = (int32_t)json_integer_value(json_object_get(b, "max_tokens"));
    int32_t K = (int32_t)json_integer_value(json_object_get(b, "logprobs"));
    int32_t ids[8192];
    for (int32_t i = 0; i < n && i < 8192; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, i));
    bool tok_ids = json_is_true(json_object_get(b, "return_tokens_as_token_ids"));
    json_decref(b);
    pthread_mutex_lock(&g_srv.mu);
    g_srv.n_generate++;
    int32_t hit = 0;
    for (int k = 0; k < g_nvseq; k++) {
        if (strcmp(g_vseq[k].salt, salt)) continue;
        int32_t l = hx_lcp(ids, n, g_vseq[k].ids, g_vseq[k].n);
        if (l > n - 1) l = n - 1;
        l = l / 16 * 16;
        if (l > hit) hit = l;
    }
    eng_buf out = {0};
    uint32_t h = hash_ids(ids, n);
    int32_t gen[64];
    for (int32_t k = 0; k < N && k < 64; k++) {
        hx_api_prob top[300];
        char texts[300][4];
        hx_api_token t;
        fake_token(h, k, K > 0 ? K : 1, &t, top, texts);
        gen[k] = t.id;
        eng_buf_printf(&out, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"fake\","
                       "\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":{\"text_offset\":[%d],"
                       "\"token_logprobs\":[%.9g],\"tokens\":[\"token_id:%d\"],\"top_logprobs\":[{", texts[0], k,
                       (double)t.logprob, t.id);
        for (int32_t j = 0; j < K; j++)
            eng_buf_printf(&out, "%s\"token_id:%d\":%.9g", j ? "," : "", top[j].id, (double)top[j].logprob);
        eng_buf_printf(&out, "}]},\"finish_reason\":null}]}\n\n");
    }
    eng_buf_printf(&out, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"fake\","
                   "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n");
    eng_buf_printf(&out, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"fake\","
                   "\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d", n, N,
                   n + N);
    if (hit > 0) eng_buf_printf(&out, ",\"prompt_tokens_details\":{\"cached_tokens\":%d}", hit);
    eng_buf_printf(&out, "}}\n\ndata: [DONE]\n\n");
    if (g_nvseq < 64 && n + N < 8192) {
        snprintf(g_vseq[g_nvseq].salt, sizeof g_vseq[g_nvseq].salt, "%s", salt);
        memcpy(g_vseq[g_nvseq].ids, ids, sizeof(int32_t) * (size_t)n);
        if (N > 1) memcpy(g_vseq[g_nvseq].ids + n, gen, sizeof(int32_t) * (size_t)(N - 1));
        g_vseq[g_nvseq++].n = n + (N > 1 ? N - 1 : 0);
    }
    pthread_mutex_unlock(&g_srv.mu);
    if (!tok_ids) {
        eng_buf_free(&out);
        return send_text(c, 400, "application/json", "{\"error\":{\"message\":\"expected token ids\",\"type\":\"BadRequestError\",\"code\":400}}");
    }
    enum MHD_Result ok = send_text(c, 200, "text/event-stream", out.data);
    eng_buf_free(&out);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    conn *cn = *con_cls;
    if (!cn) {
        *con_cls = calloc(1, sizeof(conn));
        return MHD_YES;
    }
    if (*upload_size) {
        eng_buf_append(&cn->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (g_srv.mode == M_VLLM) {  /* vLLM: no /props, no slots */
        if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
            return send_text(c, 200, "application/json", "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":"
                             "\"model\",\"owned_by\":\"vllm\",\"max_model_len\":8192}]}");
        if (!strcmp(method, "GET") && !strcmp(url, "/version")) return send_text(c, 200, "application/json", "{\"version\":\"0.fake\"}");
        if (!strcmp(method, "POST") && !strcmp(url, "/v1/completions")) return answer_vllm(c, cn);
        return send_text(c, 404, "application/json", "{\"detail\":\"Not Found\"}");
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/props"))
        return send_text(c, 200, "application/json",
                         "{\"default_generation_settings\":{\"n_ctx\":65536},\"total_slots\":1,\"model_alias\":\"fake\","
                         "\"model_path\":\"/models/fake.gguf\",\"build_info\":\"fake-1\"}");
    if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
        return send_text(c, 200, "application/json",
                         "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":\"model\",\"owned_by\":\"llamacpp\","
                         "\"meta\":{\"n_vocab\":259}}]}");
    if (!strcmp(method, "POST") && !strcmp(url, "/slots/0")) {
        pthread_mutex_lock(&g_srv.mu);
        g_srv.n_held = 0;
        pthread_mutex_unlock(&g_srv.mu);
        return send_text(c, 200, "application/json", "{\"id_slot\":0,\"n_erased\":0}");
    }
    if (!strcmp(method, "POST") && !strcmp(url, "/completion")) return answer_completion(c, cn);
    return send_text(c, 404, "application/json", "{\"error\":{\"code\":404,\"message\":\"File Not Found\",\"type\":\"not_found_error\"}}");
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn *cn = *con_cls;
    if (cn) {
        eng_buf_free(&cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

static void srv_start(mode m) {
    g_srv.mode = m;
    g_nvseq = 0;
    g_srv.n_held = 0;
    g_srv.n_generate = 0;
    g_srv.stopping = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    g_srv.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
                               on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
                               MHD_OPTION_END);
    assert_non_null(g_srv.d);
    g_srv.port = MHD_get_daemon_info(g_srv.d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void srv_stop(void) {
    g_srv.stopping = 1;
    MHD_stop_daemon(g_srv.d);
    g_srv.d = NULL;
}

// ----------------------------------------------------------------------------
// Running the probe against it

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_probe")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_tr, sizeof g_tr, "%s/t.jsonl", g_dir);
    /* Claude Code's shape, small: the billing header with a fresh cch= on every request, then a growing
     * conversation (seeds/001) */
    snprintf(g_agent, sizeof g_agent, "%s/agent.jsonl", g_dir);
    FILE *f = fopen(g_agent, "w");
    if (!f) return -1;
    static const char *const cch[] = {"a5145", "4a1a8", "0c3d2"};
    char msgs[4096] = "";
    for (int t = 0; t < 3; t++) {
        char add[600];
        snprintf(add, sizeof add, "%s{\"role\":\"user\",\"content\":\"Step %d: list the files of the project "
                 "and say which of them changed since the last commit, then explain why.\"}", t ? "," : "", t);
        strcat(msgs, add);
        fprintf(f, "{\"v\":1,\"session\":\"cc\",\"turn\":%d,\"system\":[{\"type\":\"text\",\"text\":"
                "\"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=%s;\"},{\"type\":"
                "\"text\",\"text\":\"You are a coding agent. Read files, run commands and answer briefly.\"}],"
                "\"messages\":[%s],\"response\":\"Done with step %d.\"}\n", t, cch[t], msgs, t);
        snprintf(add, sizeof add, ",{\"role\":\"assistant\",\"content\":\"Done with step %d.\"}", t);
        strcat(msgs, add);
    }
    fclose(f);
    return fx_tiny_model(g_model, 4) || fx_transcript(g_tr, HX_SYNTH_EXTEND, 5, 3, 300) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static double g_idle = 1;  /* --idle-timeout: short for the fake (the silent server's test), long for serve */

static int probe_api(const char *name, int port, hx_probe_summary *sum, int repeat, const char *api, const char *tr) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(g_db, sizeof g_db, "%s/%s.sqlite", g_dir, name);
    hx_probe_opts o;
    hx_probe_opts_default(&o);
    o.server = url;
    o.api = api;
    o.transcript_path = tr;
    o.db_path = g_db;
    o.sp.model_path = g_model;
    o.n_probs = 5;
    o.sp.decode_n = 3;
    o.sp.repeat = repeat;
    o.idle_s = g_idle;
    o.timeout_s = g_idle > 1 ? 600 : 20;
    o.sp.quiet = true;
    return hx_probe_run(&o, sum);
}

static int probe(const char *name, int port, hx_probe_summary *sum, int repeat) {
    return probe_api(name, port, sum, repeat, "llama", g_tr);
}

/* Runs the probe against the fake in mode m; the exit code. */
static int probe_mode(mode m, const char *name, hx_probe_summary *sum) {
    srv_start(m);
    int code = probe(name, g_srv.port, sum, 1);
    srv_stop();
    return code;
}

static int64_t q(const char *sql) { return q_int(g_db, sql); }

static void a_correct_server_is_identical_with_reuse_as_expected(void **state) {
    (void)state;
    hx_probe_summary s;
    srv_start(M_OK);
    int code = probe("ok", g_srv.port, &s, 2);
    int n_generate = g_srv.n_generate;
    srv_stop();
    assert_int_equal(code, 0);
    assert_int_equal(s.n_requests, 3);
    assert_int_equal(s.n_identical, 3);
    assert_int_equal(s.n_reuse_checked, 3);
    assert_int_equal(s.n_reuse_less + s.n_reuse_more + s.n_failed, 0);
    /* the rows: reuse reported == expected, counted on the ids sent, later requests reusing most of the prompt */
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected AND reuse_basis = 'sent ids'"), 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index > 0 AND reuse_expected = lcp AND lcp > 900"), 2);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE logits_equal = 1 AND json_equal = 1 AND decode_equal = 1 "
                       "AND fork_step IS NULL AND verified = 1 AND n_probs = 5 AND error IS NULL"), 3);
    assert_int_equal(q("SELECT count(*) FROM steps"), 9);
    /* the ids sent are kvreplay's own rendering: n_prompt (the server's count) == n_prompt_local */
    assert_int_equal(q("SELECT count(*) FROM requests WHERE n_prompt = n_prompt_local AND prompt_diff IS NULL"), 3);
    /* --repeat 2: both timings, the warm one repeated from the same cache state (the same reuse) */
    assert_int_equal(q("SELECT count(*) FROM requests WHERE ttft_cold_min_ms <= ttft_cold_max_ms AND "
                       "ttft_reuse_min_ms <= ttft_reuse_max_ms AND json_extract(extra, '$.warm_reused[0]') = "
                       "json_extract(extra, '$.warm_reused[1]')"), 3);
    assert_int_equal(n_generate, 3 * 4 + 2);  /* 2 warm + 2 cold each, and the previous request again twice */
    assert_int_equal(q("SELECT count(*) FROM runs WHERE policy = 'probe' AND server_api = 'llama' AND "
                       "server_engine = 'llama.cpp' AND json_extract(server_info, '$.props.model_alias') = 'fake' "
                       "AND json_extract(probe_opts, '$.cold') = 'cache-prompt' AND status = 'done'"), 1);
}

static void a_misreported_reuse_is_caught(void **state) {
    (void)state;
    hx_probe_summary s;
    assert_int_equal(probe_mode(M_MISREPORT, "misreport", &s), 1);
    assert_int_equal(s.n_reuse_more, 2);
    assert_int_equal(s.n_identical, 3);  /* the bits are right: only the count is wrong */
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected + 1"), 2);
}

static void a_stale_prefix_is_caught_in_the_bits(void **state) {
    (void)state;
    hx_probe_summary s;
    assert_int_equal(probe_mode(M_STALE, "stale", &s), 1);
    assert_int_equal(s.n_diverged, 2);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE logits_equal = 0 AND json_equal = 0 AND ulp_first = 1 "
                       "AND first_diff_index = 0"), 2);
}

static void reuse_across_a_changed_prompt_is_caught(void **state) {
    (void)state;
    /* the transcript's requests extend each other: make the second one's start differ */
    char tr[160];
    snprintf(tr, sizeof tr, "%.100s/changed.jsonl", g_dir);
    hx_transcript t;
    char err[512];
    assert_int_equal(hx_transcript_read(g_tr, false, &t, NULL, err, sizeof err), ENG_OK);
    hx_message *m = &t.reqs[1].messages[0];
    assert_true(m->n_blocks > 0 && strlen(m->blocks[0].text) > 4);
    m->blocks[0].text[0] = m->blocks[0].text[0] == 'Z' ? 'Y' : 'Z';
    assert_int_equal(hx_transcript_write(tr, &t, err, sizeof err), ENG_OK);
    hx_transcript_free(&t);
    const char *keep = g_tr;
    char saved[160];
    snprintf(saved, sizeof saved, "%s", keep);
    snprintf(g_tr, sizeof g_tr, "%s", tr);
    hx_probe_summary s;
    int code = probe_mode(M_SYSPROMPT, "sysprompt", &s);
    snprintf(g_tr, sizeof g_tr, "%s", saved);
    assert_int_equal(code, 1);
    assert_true(s.n_reuse_more >= 1);
    assert_true(s.n_diverged >= 1);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index = 1 AND reuse_reported > reuse_expected "
                       "AND logits_equal = 0"), 1);
}

/* Each misbehaviour: exit 1, one row per request probed, the error the row names. */
static void check_failure(mode m, const char *name, const char *kind, const char *in_message) {
    hx_probe_summary s;
    double t0 = eng_now_s();
    assert_int_equal(probe_mode(m, name, &s), 1);
    assert_true(eng_now_s() - t0 < 15);  /* never a hang */
    assert_int_equal(s.n_failed, 3);
    assert_int_equal(s.n_requests, 3);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM requests WHERE error = '%s' AND verified = 0 AND error_message LIKE "
             "'%%%s%%'", kind, in_message);
    assert_int_equal(q(sql), 3);
}

static void http_errors_are_recorded(void **state) {
    (void)state;
    check_failure(M_HTTP500, "h500", "http", "HTTP 500: the KV cache is on fire");
    assert_int_equal(q("SELECT count(*) FROM requests WHERE http_status = 500"), 3);
    check_failure(M_HTTP400, "h400", "http", "n_probs: too many");
}

static void malformed_json_is_recorded(void **state) {
    (void)state;
    check_failure(M_MALFORMED, "malformed", "malformed", "not JSON");
}

static void a_missing_field_is_recorded(void **state) {
    (void)state;
    check_failure(M_MISSING, "missing", "field", "tokens_predicted: missing");
}

static void a_stream_cut_mid_event_is_recorded(void **state) {
    (void)state;
    check_failure(M_CUT, "cut", "cut", "");
    check_failure(M_NOEND, "noend", "cut", "the stream ended before its last event");
}

static void a_silent_server_times_out(void **state) {
    (void)state;
    check_failure(M_SLOW, "slow", "timeout", "sent nothing for 1 s");
}

static void a_server_lying_about_its_model_is_recorded(void **state) {
    (void)state;
    check_failure(M_LIE, "lie", "model", "names model \"gpt-4o\", but the server lists \"fake\"");
}

static void a_refused_connection_is_recorded_and_stops(void **state) {
    (void)state;
    srv_start(M_OK);
    int port = g_srv.port;
    srv_stop();  /* nothing listens there now */
    hx_probe_summary s;
    assert_int_equal(probe("refused", port, &s, 1), 1);
    assert_true(s.stopped);
    assert_int_equal(s.n_requests, 1);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE error = 'refused' AND error_message LIKE '%onnect%'"), 1);
    assert_int_equal(q("SELECT count(*) FROM runs WHERE status = 'failed'"), 1);
}

/* vLLM's API: token ids to /v1/completions, the cold run under a fresh cache_salt (the warm runs share
 * one of their own), hits of whole 16-token blocks, the legacy logprobs with "token_id:N", and a
 * cached-token count left out at 0, which --reports-reuse yes reads as 0 (no: unknown). */
static void a_vllm_server_is_probed_through_its_own_rules(void **state) {
    (void)state;
    hx_probe_summary s;
    srv_start(M_VLLM);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", g_srv.port);
    snprintf(g_db, sizeof g_db, "%s/vllm.sqlite", g_dir);
    hx_probe_opts o;
    hx_probe_opts_default(&o);
    o.server = url;
    o.api = "vllm";
    o.transcript_path = g_tr;
    o.db_path = g_db;
    o.sp.model_path = g_model;
    o.n_probs = 5;
    o.sp.decode_n = 3;
    o.reports_reuse = 1;
    o.sp.quiet = true;
    int code = hx_probe_run(&o, &s);
    assert_int_equal(code, 0);
    assert_int_equal(s.n_identical, 3);
    assert_int_equal(s.n_reuse_checked, 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected AND reuse_expected % 16 = 0 "
                       "AND json_equal = 1 AND n_probs = 5"), 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index > 0 AND reuse_expected > 512"), 2);
    assert_int_equal(q("SELECT count(*) FROM steps WHERE token_cold >= 3"), 9);  /* ids from "token_id:N" */
    assert_int_equal(q("SELECT count(*) FROM runs WHERE server_engine = 'vllm' AND block_size = 16 AND "
                       "json_extract(probe_opts, '$.cold') = 'salt'"), 1);
    /* without --reports-reuse the first request's absent count is unknown, never 0 */
    snprintf(g_db, sizeof g_db, "%s/vllm-unknown.sqlite", g_dir);
    o.db_path = g_db;
    o.reports_reuse = -1;
    assert_int_equal(hx_probe_run(&o, &s), 0);
    assert_int_equal(s.n_reuse_unknown, 1);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported IS NULL AND req_index = 0"), 1);
    srv_stop();
}

// ----------------------------------------------------------------------------
// Options that cannot work

/* Each option the probe cannot work with is refused with the flag named (ENG_ERR_ARG), before a
 * database is made or a server asked; the command line and an experiment's probe run exit 2 with
 * the same message, the experiment before it starts its server. */
static void options_that_cannot_work_are_refused_before_anything_runs(void **state) {
    (void)state;
    static const struct { const char *flag, *value, *says; } k_bad[] = {
        {"server", NULL, "probe: --server is required"},
        {"transcript", NULL, "probe: -t/--transcript is required"},
        {"api", "gemini-pro", "--api: expected llama, openai, vllm, sglang, anthropic, responses or gemini, got 'gemini-pro'"},
        {"route", "chatty", "--route: expected auto, tokens or chat, got 'chatty'"},
        {"engine", "tgi", "--engine: expected llama.cpp, vllm, sglang or kvreplay, got 'tgi'"},
        {"normalize", "bogus", "--normalize: unknown rule 'bogus'"},
        {"route", "tokens", "--route tokens: --api anthropic takes no token ids"},
        {"cold", "salt", "--cold salt: --api anthropic forces a cold run by erase"},
        {"repeat", "65", "expected --repeat in [1, 64]"},
    };
    char db[200], err[512];
    snprintf(db, sizeof db, "%s/cannot-work.sqlite", g_dir);
    for (size_t k = 0; k < sizeof k_bad / sizeof k_bad[0]; k++) {
        hx_probe_opts o;
        hx_probe_opts_default(&o);
        o.server = "http://127.0.0.1:9";
        o.api = "anthropic";
        o.transcript_path = g_tr;
        o.db_path = db;
        o.sp.quiet = true;
        assert_int_equal(hx_probe_opts_check(&o, err, sizeof err), ENG_OK);
        const char *f = k_bad[k].flag, *v = k_bad[k].value;
        if (!strcmp(f, "server")) o.server = v;
        if (!strcmp(f, "transcript")) o.transcript_path = v;
        if (!strcmp(f, "api")) o.api = v;
        if (!strcmp(f, "route")) o.route = v;
        if (!strcmp(f, "engine")) o.engine = v;
        if (!strcmp(f, "normalize")) o.sp.normalize = v;
        if (!strcmp(f, "cold")) o.cold = v;
        if (!strcmp(f, "repeat")) o.sp.repeat = 65;
        err[0] = '\0';
        assert_int_equal(hx_probe_opts_check(&o, err, sizeof err), ENG_ERR_ARG);
        if (!strstr(err, k_bad[k].says)) fail_msg("--%s %s: '%s' does not say '%s'", f, v ? v : "", err, k_bad[k].says);
        hx_probe_summary s;
        assert_int_equal(hx_probe_run(&o, &s), 2);
        assert_int_equal(access(db, F_OK), -1);  /* nothing written */
    }
    if (!kvr_bin()) return;
    char out[4096];
    const char *cli[] = {"probe", "--server", "http://127.0.0.1:9", "--api", "llama", "-t", g_tr, "-o", db,
                         "--cold", "salt", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, out, sizeof out, cli), 2);
    assert_non_null(strstr(out, "kvreplay: --cold salt: --api llama forces a cold run by cache-prompt,erase"));
    assert_int_equal(access(db, F_OK), -1);
    /* an experiment's probe run against a server it would start itself */
    char spec[200], cache[200], log[300];
    snprintf(spec, sizeof spec, "%s/cannot-work-spec.json", g_dir);
    snprintf(cache, sizeof cache, "%s/cannot-work-cache", g_dir);
    snprintf(log, sizeof log, "%s/logs/serve-cannot-work-0.log", cache);
    FILE *fp = fopen(spec, "w");
    assert_non_null(fp);
    fprintf(fp, "{\"name\": \"cannot-work\", \"models\": {\"m\": {\"path\": \"%s\"}},\n"
                " \"transcripts\": {\"t\": {\"path\": \"%s\"}},\n"
                " \"servers\": {\"own\": {\"serve\": [\"--policy\", \"slot-lcp\"]}},\n"
                " \"runs\": [{\"variant\": \"v\", \"server\": \"own\", \"transcript\": \"t\", \"model\": \"m\",\n"
                "            \"probe\": [\"--api\", \"llama\", \"--route\", \"chatty\"]}]}\n", g_model, g_tr);
    fclose(fp);
    const char *exp[] = {"experiment", spec, "--db", db, "--cache-root", cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, out, sizeof out, exp), 2);
    assert_non_null(strstr(out, "kvreplay: --route: expected auto, tokens or chat, got 'chatty'"));
    assert_int_equal(access(log, F_OK), -1);  /* no server was started */
}

/* An experiment's probe run against a serve it starts (a new port each time): with --resume, a
 * variant this build has finished is not run again, and no server is started for it; without,
 * it runs anew. */
static void an_experiments_finished_probe_variant_is_not_run_again_on_resume(void **state) {
    (void)state;
    if (!kvr_bin()) return;
    char spec[200], cache[200], db[200], out[8192];
    snprintf(spec, sizeof spec, "%s/resume-spec.json", g_dir);
    snprintf(cache, sizeof cache, "%s/resume-cache", g_dir);
    snprintf(db, sizeof db, "%s/resume.sqlite", g_dir);
    FILE *fp = fopen(spec, "w");
    assert_non_null(fp);
    fprintf(fp, "{\"name\": \"resume\", \"models\": {\"m\": {\"path\": \"%s\"}},\n"
                " \"transcripts\": {\"t\": {\"path\": \"%s\"}},\n"
                " \"servers\": {\"own\": {\"serve\": [\"--policy\", \"slot-lcp\", \"--align\", \"chunk\", \"-c\", \"8192\"]}},\n"
                " \"runs\": [{\"variant\": \"v\", \"server\": \"own\", \"transcript\": \"t\", \"model\": \"m\",\n"
                "            \"probe\": [\"--api\", \"llama\"]}]}\n", g_model, g_tr);
    fclose(fp);
    const char *first[] = {"experiment", spec, "--db", db, "--cache-root", cache, NULL};
    const char *again[] = {"experiment", spec, "--db", db, "--cache-root", cache, "--resume", NULL};
    int rc = proc_run(NULL, NULL, 0, out, sizeof out, first);
    if (rc != 0) fail_msg("experiment: exit %d: %s", rc, out);
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs WHERE status = 'done'"), 1);
    rc = proc_run(NULL, NULL, 0, out, sizeof out, again);
    if (rc != 0) fail_msg("experiment --resume: exit %d: %s", rc, out);
    assert_non_null(strstr(out, "resume / v: run 1 is complete, not run again"));
    assert_non_null(strstr(out, "(1 already complete, not re-run)"));
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs"), 1);
    rc = proc_run(NULL, NULL, 0, out, sizeof out, first);  /* without --resume: anew */
    if (rc != 0) fail_msg("experiment: exit %d: %s", rc, out);
    assert_int_equal(q_int(db, "SELECT count(*) FROM runs WHERE status = 'done'"), 2);
}

// ----------------------------------------------------------------------------
// kvreplay serve on loopback, and the faults planted in it

/* Starts kvreplay serve on the tiny model with flags (NULL-terminated), probes it through api with
 * transcript tr; the exit code. */
static int probe_serve(const char *name, const char *api, const char *tr, const char *const *flags,
                       hx_probe_summary *sum) {
    const char *args[16] = {"-m", g_model, "--policy", "slot-lcp", "--align", "chunk", "-c", "8192"};
    int k = 8;
    for (int i = 0; flags && flags[i]; i++) args[k++] = flags[i];
    args[k] = NULL;
    served sv;
    if (served_start(&sv, g_dir, name, args)) fail_msg("kvreplay serve did not start");
    char pname[96];
    snprintf(pname, sizeof pname, "%s-probe", name);  /* serve writes its own rows to NAME.sqlite */
    g_idle = 300;  /* a real engine (under ASan, slow) */
    int code = probe_api(pname, sv.port, sum, 1, api, tr);
    g_idle = 1;
    assert_int_equal(served_stop(&sv), 0);
    return code;
}

static void serve_is_identical_with_reuse_as_expected(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    hx_probe_summary s;
    /* token ids on /completion, and the messages on /v1/messages (kvreplay's rendering, read back) */
    assert_int_equal(probe_serve("serve-llama", "llama", g_tr, NULL, &s), 0);
    assert_int_equal(s.n_identical, 3);
    assert_int_equal(s.n_reuse_checked, 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected AND logits_equal = 1 AND "
                       "json_equal = 1 AND decode_equal = 1"), 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index > 0 AND reuse_expected > 512 AND "
                       "reuse_expected % 64 = 0"), 2);  /* serve's grid: reuse floored to C = 64 */
    assert_int_equal(q("SELECT count(*) FROM runs WHERE server_engine = 'kvreplay' AND "
                       "json_extract(server_info, '$.props.kvreplay.align') = 'chunk'"), 1);
    const char *norm[] = {"--normalize", "anthropic-cch", NULL};
    assert_int_equal(probe_serve("serve-anthropic", "anthropic", g_agent, norm, &s), 0);
    assert_int_equal(s.n_identical, 3);
    assert_int_equal(s.n_reuse_checked, 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected AND logits_equal = 1"), 3);
}

static void serve_misreporting_its_cache_is_caught(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    const char *flags[] = {"--inject-fault", "report-cached", NULL};
    hx_probe_summary s;
    assert_int_equal(probe_serve("serve-report", "llama", g_tr, flags, &s), 1);
    assert_int_equal(s.n_reuse_more, 2);
    assert_int_equal(s.n_identical, 3);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected + 1"), 2);
}

static void serve_with_a_stale_kv_row_is_caught(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    /* serve's 3rd generation is probe's warm run of request 1 (each request: warm, then cold) */
    const char *flags[] = {"--verify", "--inject-fault", "kv-row", "--fault-request", "2", NULL};
    hx_probe_summary s;
    assert_int_equal(probe_serve("serve-kvrow", "llama", g_tr, flags, &s), 1);
    assert_int_equal(s.n_diverged, 1);
    assert_int_equal(s.n_reuse_less + s.n_reuse_more, 0);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index = 1 AND logits_equal = 0 AND json_equal = 0"), 1);
}

static void serve_reusing_across_a_changed_system_prompt_is_caught(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    const char *flags[] = {"--quirk", "system-blind", NULL};
    hx_probe_summary s;
    /* every request's cch= differs: a correct server reuses nothing of the system prompt */
    assert_int_equal(probe_serve("serve-blind", "anthropic", g_agent, flags, &s), 1);
    assert_int_equal(s.n_reuse_more, 2);
    assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index > 0 AND reuse_reported > reuse_expected"), 2);
    /* and without the quirk the same transcript holds */
    assert_int_equal(probe_serve("serve-blind-off", "anthropic", g_agent, NULL, &s), 0);
}

/* The Responses API and the Gemini API: reuse as expected and warm = cold bit for bit; serve's planted faults
 * (a misreported cache, a stale KV row) caught through each. */
static void serve_through_responses_and_gemini_is_checked_as_the_others(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    static const char *const apis[] = {"responses", "gemini"};
    for (int a = 0; a < 2; a++) {
        char name[64];
        hx_probe_summary s;
        const char *norm[] = {"--normalize", "anthropic-cch", NULL};
        snprintf(name, sizeof name, "serve-%s", apis[a]);
        assert_int_equal(probe_serve(name, apis[a], g_agent, norm, &s), 0);
        assert_int_equal(s.n_identical, 3);
        assert_int_equal(s.n_reuse_checked, 3);
        assert_int_equal(q("SELECT count(*) FROM requests WHERE reuse_reported = reuse_expected AND logits_equal = 1"), 3);
        assert_int_equal(q("SELECT count(*) FROM requests WHERE req_index > 0 AND reuse_reported > 0"), 2);
        const char *lie[] = {"--normalize", "anthropic-cch", "--inject-fault", "report-cached", NULL};
        snprintf(name, sizeof name, "serve-%s-report", apis[a]);
        assert_int_equal(probe_serve(name, apis[a], g_agent, lie, &s), 1);
        assert_int_equal(s.n_reuse_more, 2);
        const char *stale[] = {"--normalize", "anthropic-cch", "--verify", "--inject-fault", "kv-row", "--fault-request",
                               "2", NULL};
        snprintf(name, sizeof name, "serve-%s-kvrow", apis[a]);
        assert_int_equal(probe_serve(name, apis[a], g_agent, stale, &s), 1);
        assert_int_equal(s.n_diverged, 1);
    }
}

// ----------------------------------------------------------------------------
// The parts: every engine's cap, JSON spans, the bit comparison

static void each_engine_caps_reuse_its_own_way(void **state) {
    (void)state;
    int32_t a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = b[i] = i;
    b[70] = -1;  /* 70 tokens in common */
    hx_reuse_rule r;
    hx_held h = {0};
    hx_reuse_rule_default(&r, HX_ENGINE_LLAMA);
    assert_int_equal(hx_held_add(&h, &r, a, 100, NULL, 0), ENG_OK);
    assert_int_equal(hx_reuse_expected(&r, &h, a, 100, NULL), 99);   /* the same prompt: length - 1 */
    assert_int_equal(hx_reuse_expected(&r, &h, b, 100, NULL), 70);
    hx_reuse_rule_default(&r, HX_ENGINE_VLLM);                      /* blocks of 16 */
    assert_int_equal(hx_reuse_expected(&r, &h, a, 100, NULL), 96);
    assert_int_equal(hx_reuse_expected(&r, &h, b, 100, NULL), 64);
    hx_reuse_rule_default(&r, HX_ENGINE_KVREPLAY);                  /* grid 64, capped at the cached prompt */
    assert_int_equal(hx_reuse_expected(&r, &h, b, 100, NULL), 64);
    int32_t gen[5] = {100, 101, 102, 103, 104};
    hx_held_clear(&h);
    hx_reuse_rule_default(&r, HX_ENGINE_LLAMA);
    assert_int_equal(hx_held_add(&h, &r, a, 50, gen, 5), ENG_OK);   /* holds 50 + 4: the last token is not */
    int32_t next[60];
    memcpy(next, a, sizeof(int32_t) * 50);
    memcpy(next + 50, gen, sizeof gen);
    for (int i = 55; i < 60; i++) next[i] = 7;
    int32_t lcp;
    assert_int_equal(hx_reuse_expected(&r, &h, next, 60, &lcp), 54);
    assert_int_equal(lcp, 54);
    hx_reuse_rule_default(&r, HX_ENGINE_KVREPLAY);
    r.grid = 1;
    assert_int_equal(hx_reuse_expected(&r, &h, next, 60, NULL), 50);  /* decode-written rows are not reused */
    /* a slot keeps one sequence; a tree every one */
    hx_reuse_rule_default(&r, HX_ENGINE_LLAMA);
    hx_held_add(&h, &r, b, 100, NULL, 0);
    assert_int_equal(h.n, 1);
    hx_reuse_rule_default(&r, HX_ENGINE_SGLANG);
    hx_held_add(&h, &r, a, 100, NULL, 0);
    assert_int_equal(h.n, 2);
    assert_int_equal(hx_reuse_expected(&r, &h, a, 100, NULL), 99);
    hx_held_free(&h);
}

static void json_spans_are_the_bytes_the_server_wrote(void **state) {
    (void)state;
    const char *s = "{\"index\":0, \"content\":\"a}\\\"[\",\"completion_probabilities\":[{\"id\":5,\"logprob\":"
                    "-1.50000000,\"top_logprobs\":[]}] ,\"choices\":[{\"x\":1},{\"logprobs\":{\"content\":[7, 8]}}]}";
    size_t off, len;
    assert_true(hx_json_span(s, strlen(s), "completion_probabilities.0", &off, &len));
    assert_int_equal(len, strlen("{\"id\":5,\"logprob\":-1.50000000,\"top_logprobs\":[]}"));
    assert_memory_equal(s + off, "{\"id\":5,\"logprob\":-1.50000000,", 30);
    assert_true(hx_json_span(s, strlen(s), "choices.1.logprobs.content.1", &off, &len));
    assert_int_equal(len, 1);
    assert_int_equal(s[off], '8');
    assert_true(hx_json_span(s, strlen(s), "content", &off, &len));
    assert_int_equal(len, 7);
    assert_false(hx_json_span(s, strlen(s), "choices.2", &off, &len));
    assert_false(hx_json_span(s, strlen(s), "nothing", &off, &len));
    assert_false(hx_json_span(s, 40, "completion_probabilities.0", &off, &len));  /* cut */
}

static void one_ulp_in_one_candidate_is_a_difference(void **state) {
    (void)state;
    hx_api_prob pa[3] = {{5, "a", 1, -1.0f}, {6, "b", 1, -2.0f}, {7, "c", 1, -3.0f}};
    hx_api_prob pb[3];
    memcpy(pb, pa, sizeof pa);
    hx_api_token a = {5, "a", 1, -1.0f, pa, 3}, b = {5, "a", 1, -1.0f, pb, 3};
    hx_cmp c;
    hx_probs_compare(&a, &b, 0, &c);
    assert_true(c.equal);
    assert_true(c.top1_equal);
    pb[2].logprob = nextafterf(-3.0f, 0.0f);
    hx_probs_compare(&a, &b, 0, &c);
    assert_false(c.equal);
    assert_int_equal(c.first_diff, 2);
    assert_int_equal(c.ulp_first, 1);
    assert_int_equal(c.max_ulp, 1);
    assert_true(c.top1_equal);
    /* the same numbers in another order: not equal, the figures over the matched candidates 0 */
    memcpy(pb, pa, sizeof pa);
    pb[1] = pa[2], pb[2] = pa[1];
    hx_probs_compare(&a, &b, 0, &c);
    assert_false(c.equal);
    assert_int_equal(c.first_diff, 1);
    assert_int_equal(c.max_ulp, 0);
    /* the whole vocabulary on both sides: KL */
    memcpy(pb, pa, sizeof pa);
    hx_probs_compare(&a, &b, 3, &c);
    assert_true(c.kl == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_engine_caps_reuse_its_own_way),
        cmocka_unit_test(json_spans_are_the_bytes_the_server_wrote),
        cmocka_unit_test(one_ulp_in_one_candidate_is_a_difference),
        cmocka_unit_test(a_correct_server_is_identical_with_reuse_as_expected),
        cmocka_unit_test(a_misreported_reuse_is_caught),
        cmocka_unit_test(a_stale_prefix_is_caught_in_the_bits),
        cmocka_unit_test(reuse_across_a_changed_prompt_is_caught),
        cmocka_unit_test(http_errors_are_recorded),
        cmocka_unit_test(malformed_json_is_recorded),
        cmocka_unit_test(a_missing_field_is_recorded),
        cmocka_unit_test(a_stream_cut_mid_event_is_recorded),
        cmocka_unit_test(a_silent_server_times_out),
        cmocka_unit_test(a_server_lying_about_its_model_is_recorded),
        cmocka_unit_test(a_refused_connection_is_recorded_and_stops),
        cmocka_unit_test(a_vllm_server_is_probed_through_its_own_rules),
        cmocka_unit_test(options_that_cannot_work_are_refused_before_anything_runs),
        cmocka_unit_test(an_experiments_finished_probe_variant_is_not_run_again_on_resume),
        cmocka_unit_test(serve_is_identical_with_reuse_as_expected),
        cmocka_unit_test(serve_misreporting_its_cache_is_caught),
        cmocka_unit_test(serve_with_a_stale_kv_row_is_caught),
        cmocka_unit_test(serve_reusing_across_a_changed_system_prompt_is_caught),
        cmocka_unit_test(serve_through_responses_and_gemini_is_checked_as_the_others),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
