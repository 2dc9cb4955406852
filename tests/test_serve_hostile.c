/*
 * tests/test_serve_hostile.c: serve against bodies that would exhaust it
 * (docs/serve.md, "Hostile bodies"), the quick part; tests/serve_soak.sh
 * floods a server with 30 MB bodies.
 *
 *   - hx_prepare_upto gives a prompt that fits exactly hx_prepare's tokens,
 *     offsets, stable end and response tokens, on every real vocabulary of
 *     ../shared/data/vocab and stories260K, for llama.cpp's tokenizer test
 *     texts sent as chat and as raw prompts; a budget one token short is
 *     refused with the exact count; the request as received is copied only
 *     once it fits, or before a --normalize rule rewrites it;
 *   - a 4 MB prompt of one character is refused without being tokenized: in
 *     each API's context error (the count a lower bound, said so), at
 *     /tokenize and count_tokens too, quickly, the server's peak memory
 *     growing by a small multiple of the body (tokenizing it whole took 20
 *     to 60 times);
 *   - the preparation memory cap: a body held mid-upload keeps its charge, a
 *     large body beyond the cap is refused with 503 and Retry-After and
 *     counted (announced, or chunked), a small request is answered meanwhile, the large one is
 *     admitted once the charge is released; a body of too many JSON values
 *     for the cap is a 413; a cap too small for --max-body is exit 2.
 *
 * Fixtures: a tiny synthetic model with the Llama SPM vocabulary of
 * ../shared/data (skipped without it).
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

#include "api.h"
#include "fixtures.h"
#include "prepare.h"
#include "runcli.h"
#include "served.h"
#include "status.h"
#include "synth.h"
#include "transcript.h"
#include "util.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static const char *const vocabs[] = {
    "../shared/data/vocab/ggml-vocab-llama-spm.gguf", "../shared/data/vocab/ggml-vocab-phi-3.gguf",
    "../shared/data/vocab/ggml-vocab-gpt-2.gguf",     "../shared/data/vocab/ggml-vocab-mpt.gguf",
    "../shared/data/vocab/ggml-vocab-deepseek-coder.gguf", "../shared/data/vocab/ggml-vocab-starcoder.gguf",
    "../shared/data/vocab/ggml-vocab-falcon.gguf",    "../shared/data/models/stories260K.gguf",
};

static char g_dir[64];
static char g_model[128];

static int setup(void **state) {
    (void)state;
    if (access(VOCAB, R_OK) != 0 || !kvr_bin()) return 0;
    if (fx_dir(g_dir, "kvr_hostile") != 0) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    if (fx_tiny_model_vocab(g_model, 5, VOCAB) != 0) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    served_kill_all();
    return g_dir[0] ? fx_rm(g_dir) : 0;
}

static void need_fixtures(void) {
    if (access(VOCAB, R_OK) != 0 || !kvr_bin() || !g_dir[0]) skip();
}

// ----------------------------------------------------------------------------
// hx_prepare_upto against hx_prepare

/* A body parsed by the route's own parser into q (as serve does). */
static void parse_body(const char *path, const char *body, hx_api_req *q) {
    const hx_api_route *rt = hx_api_route_find("POST", path, NULL);
    assert_non_null(rt);
    hx_api_error e;
    int rc = rt->parse(rt, path, "", body, strlen(body), q, &e);
    if (rc) fprintf(stderr, "%s: %s\n", path, e.message);
    assert_int_equal(rc, ENG_OK);
}

/* A recorded response for the request, so that the response tokens are compared too. */
static void give_response(hx_request *r) {
    if (hx_request_kind_of(r) != HX_REQUEST_MESSAGES) {
        r->response_text = strdup(" Sure.");
        return;
    }
    hx_block b;
    assert_int_equal(hx_block_init(&b, HX_BLOCK_TEXT, "Sure, here it is.", NULL, NULL, NULL, false), ENG_OK);
    r->response.role = HX_ROLE_ASSISTANT;
    assert_int_equal(hx_message_push_block(&r->response, &b), ENG_OK);
}

/* The same body prepared whole and within a budget of exactly its tokens: equal bit for bit; a
 * budget one short: refused with the exact count and nothing kept. Returns the prompt's tokens. */
static int32_t same_as_whole(hx_prepare_ctx *pc, const char *path, const char *body) {
    hx_api_req a, b;
    parse_body(path, body, &a);
    parse_body(path, body, &b);
    give_response(&a.req);
    give_response(&b.req);
    hx_prepared pa, pb;
    char err[768];
    int rc = hx_prepare(pc, &a.req, &pa, err, sizeof err);
    if (rc == ENG_ERR_ARG) {  /* an empty prompt: refused alike */
        hx_request rcv;
        hx_prepare_budget bu = {.max_tokens = 100, .received = &rcv};
        assert_int_equal(hx_prepare_upto(pc, &b.req, &bu, &pb, err, sizeof err), ENG_ERR_ARG);
        hx_api_req_free(&a);
        hx_api_req_free(&b);
        return 0;
    }
    assert_int_equal(rc, ENG_OK);
    hx_request rcv;
    hx_prepare_budget bu = {.max_tokens = pa.n, .received = &rcv};
    assert_int_equal(hx_prepare_upto(pc, &b.req, &bu, &pb, err, sizeof err), ENG_OK);
    assert_true(bu.counted);
    assert_int_equal(bu.at_least, pa.n);
    assert_int_equal(pb.n, pa.n);
    assert_memory_equal(pb.tokens, pa.tokens, sizeof(int32_t) * (size_t)pa.n);
    assert_memory_equal(pb.offsets, pa.offsets, sizeof(int32_t) * (size_t)pa.n);
    assert_int_equal(pb.stable_end, pa.stable_end);
    assert_int_equal(pb.n_resp, pa.n_resp);
    if (pa.n_resp) assert_memory_equal(pb.resp, pa.resp, sizeof(int32_t) * (size_t)pa.n_resp);
    assert_int_equal(pb.text_len, pa.text_len);
    assert_memory_equal(pb.text, pa.text, pa.text_len);
    hx_request same;  /* no rule: as received is as prepared */
    assert_int_equal(hx_request_copy(&same, &b.req), ENG_OK);
    assert_true(hx_request_equal(&rcv, &same));
    hx_request_free(&same);
    hx_request_free(&rcv);
    hx_prepared_free(&pb);
    /* one token short: refused, counted exactly, nothing kept */
    hx_api_req c;
    parse_body(path, body, &c);
    bu = (hx_prepare_budget){.max_tokens = pa.n - 1, .received = &rcv};
    assert_int_equal(hx_prepare_upto(pc, &c.req, &bu, &pb, err, sizeof err), ENG_ERR_RANGE);
    assert_true(bu.counted);
    assert_int_equal(bu.at_least, pa.n);
    assert_null(pb.tokens);
    assert_null(rcv.session);
    assert_non_null(strstr(err, "over the budget"));
    int32_t n = pa.n;
    hx_prepared_free(&pa);
    hx_api_req_free(&a);
    hx_api_req_free(&b);
    hx_api_req_free(&c);
    return n;
}

/* llama.cpp's tokenizer test texts (VOCAB.inp, separated by __ggml_vocab_test__). */
static int read_texts(const char *vocab, char ***texts) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s.inp", vocab);
    char *all = NULL;
    size_t n = 0;
    *texts = NULL;
    if (eng_read_file(path, &all, &n, err, sizeof err) != ENG_OK) return 0;
    int k = 0;
    char **t = NULL;
    for (char *p = all; p && *p;) {
        char *sep = strstr(p, "\n__ggml_vocab_test__\n");
        if (sep) *sep = '\0';
        t = realloc(t, sizeof *t * (size_t)(k + 1));
        t[k++] = strdup(p);
        p = sep ? sep + strlen("\n__ggml_vocab_test__\n") : NULL;
    }
    free(all);
    *texts = t;
    return k;
}

static void a_prompt_that_fits_gets_the_same_tokens_as_whole(void **state) {
    (void)state;
    int vocabs_run = 0;
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        if (access(vocabs[v], R_OK) != 0) continue;
        eng_tokenizer *tok = NULL;
        char *tmpl = NULL, err[512];
        assert_int_equal(hx_vocab_load(vocabs[v], &tok, &tmpl, err, sizeof err), ENG_OK);
        hx_prepare_ctx *pc;
        assert_int_equal(hx_prepare_ctx_new(tok, NULL, tmpl, "", &pc, err, sizeof err), ENG_OK);
        char **texts;
        int nt = read_texts(vocabs[v], &texts);
        int64_t total = 0;
        for (int i = -2; i < nt; i++) {  /* two texts of our own first: a long run, a mix */
            char own[4096];
            const char *text = i >= 0 ? texts[i] : own;
            if (i == -2) { memset(own, 'a', 3000); own[3000] = '\0'; }
            if (i == -1) snprintf(own, sizeof own, "Hello <|im_end|> world\n\n\t  It's 12345 o'clock. \xc3\xbc" "ber "
                                  "\xe6\x95\xb0\xe5\xad\x97 \xf0\x9f\x98\x80 def f(x):\n    return x**2\n");
            json_t *chat = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "messages", "role", "system", "content",
                                     "You are terse.", "role", "user", "content", text);
            json_t *raw = text[0] ? json_pack("{s:s}", "prompt", text) : json_pack("{s:s}", "prompt", " ");
            char *cb = chat ? json_dumps(chat, JSON_COMPACT) : NULL, *rb = raw ? json_dumps(raw, JSON_COMPACT) : NULL;
            json_decref(chat);
            json_decref(raw);
            if (!cb || !rb) {  /* a text jansson does not take (not UTF-8): not a request a client can send */
                free(cb);
                free(rb);
                continue;
            }
            total += same_as_whole(pc, "/v1/chat/completions", cb);
            total += same_as_whole(pc, "/completion", rb);
            free(cb);
            free(rb);
        }
        assert_true(total > 0);
        for (int i = 0; i < nt; i++) free(texts[i]);
        free(texts);
        hx_prepare_ctx_free(pc);
        eng_tokenizer_free(tok);
        free(tmpl);
        vocabs_run++;
    }
    if (!vocabs_run) skip();
}

static void the_request_as_received_is_copied_before_a_rule_rewrites_it(void **state) {
    (void)state;
    if (access(VOCAB, R_OK) != 0) skip();
    eng_tokenizer *tok = NULL;
    char *tmpl = NULL, err[512];
    assert_int_equal(hx_vocab_load(VOCAB, &tok, &tmpl, err, sizeof err), ENG_OK);
    hx_prepare_ctx *pc;
    assert_int_equal(hx_prepare_ctx_new(tok, "chatml", NULL, "anthropic-cch", &pc, err, sizeof err), ENG_OK);
    const char *body = "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":"
                       "\"x-anthropic-billing-header: cc_version=2.1.101.e51; cch=a5145;\"}],"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    hx_api_req q;
    parse_body("/v1/messages", body, &q);
    hx_request rcv;
    hx_prepared p;
    hx_prepare_budget b = {.max_tokens = 1000, .received = &rcv};
    assert_int_equal(hx_prepare_upto(pc, &q.req, &b, &p, err, sizeof err), ENG_OK);
    assert_int_equal(p.n_normalized, 1);
    assert_non_null(strstr(rcv.system[0].text, "cch=a5145;"));     /* as received */
    assert_non_null(strstr(q.req.system[0].text, "cch=fffff;"));   /* as prepared */
    hx_request_free(&rcv);
    hx_prepared_free(&p);
    hx_api_req_free(&q);
    /* refused: the copy is not kept */
    parse_body("/v1/messages", body, &q);
    b = (hx_prepare_budget){.max_tokens = 5, .received = &rcv};
    assert_int_equal(hx_prepare_upto(pc, &q.req, &b, &p, err, sizeof err), ENG_ERR_RANGE);
    assert_null(rcv.session);
    assert_null(rcv.system);
    hx_api_req_free(&q);
    hx_prepare_ctx_free(pc);
    eng_tokenizer_free(tok);
    free(tmpl);
}

// ----------------------------------------------------------------------------
// Through serve

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

static void expect_status(const http_resp *r, long status) {
    if (r->status != status) fprintf(stderr, "status %ld (want %ld) %s: %.300s\n", r->status, status, r->curl_error,
                                     r->body ? r->body : "");
    assert_int_equal(r->status, status);
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

/* A field of /proc/PID/status in KiB (VmHWM, VmRSS), -1 when unknown. */
static long proc_kib(pid_t pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    size_t fl = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') v = atol(line + fl + 1);
    if (f) fclose(f);
    return v;
}

/* {PREFIX "aaaa...a" SUFFIX}: a body with a prompt of n copies of one character. */
static char *run_body(const char *prefix, size_t n, const char *suffix) {
    size_t a = strlen(prefix), c = strlen(suffix);
    char *b = malloc(a + n + c + 1);
    memcpy(b, prefix, a);
    memset(b + a, 'a', n);
    memcpy(b + a + n, suffix, c + 1);
    return b;
}

static void a_prompt_that_cannot_fit_is_refused_without_being_tokenized(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "huge", (const char *const[]){"-c", "256", NULL});
    const size_t N = 4u << 20;
    long hwm0 = proc_kib(sv.pid, "VmHWM");
    http_resp r;
    /* OpenAI chat: llama-server's message and counts, the count a lower bound */
    char *b = run_body("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"", N, "\"}]}");
    http_do(&sv, "POST", "/v1/chat/completions", b, NULL, 60, &r);
    expect_status(&r, 400);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je), *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "exceed_context_size_error");
    assert_int_equal(json_integer_value(json_object_get(e, "n_ctx")), 256);
    json_int_t n = json_integer_value(json_object_get(e, "n_prompt_tokens"));
    assert_true(n > 256);
    char want[96];
    snprintf(want, sizeof want, "request (%lld tokens) exceeds the available context size (256 tokens)", (long long)n);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), want));
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "lower bound"));
    json_decref(j);
    /* refused quickly (tokenizing 4 MB whole took seconds; generous for a loaded machine) */
    fprintf(stderr, "hostile: a %zu-byte prompt refused in %.3f s\n", N, r.t_total);
    assert_true(r.t_total < 2.0);
    http_free(&r);
    free(b);
    /* Anthropic's wording, /tokenize and count_tokens: refused alike */
    b = run_body("{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"", N, "\"}]}");
    http_do(&sv, "POST", "/v1/messages", b, NULL, 60, &r);
    expect_status(&r, 400);
    assert_non_null(strstr(r.body, "prompt is too long: "));
    assert_non_null(strstr(r.body, " tokens > 256 maximum"));
    http_free(&r);
    http_do(&sv, "POST", "/v1/messages/count_tokens", b, NULL, 60, &r);
    expect_status(&r, 400);
    assert_non_null(strstr(r.body, " tokens > 256 maximum"));
    http_free(&r);
    free(b);
    b = run_body("{\"content\":\"", N, "\"}");
    http_do(&sv, "POST", "/tokenize", b, NULL, 60, &r);
    expect_status(&r, 400);
    assert_non_null(strstr(r.body, "exceed_context_size_error"));
    http_free(&r);
    free(b);
    /* a text that fits is still tokenized whole */
    http_do(&sv, "POST", "/tokenize", "{\"content\":\"Hello world\"}", NULL, 30, &r);
    expect_status(&r, 200);
    assert_non_null(strstr(r.body, "\"tokens\":["));
    http_free(&r);
    /* the server's peak grew by a few times the body: the body, the parse, the rendering (the whole
     * tokenization took 20 to 60 times) */
    long hwm1 = proc_kib(sv.pid, "VmHWM");
    fprintf(stderr, "hostile: peak RSS %ld -> %ld KiB for %zu-byte bodies (%.1fx)\n", hwm0, hwm1, N,
            (double)(hwm1 - hwm0) * 1024 / (double)N);
    if (hwm0 > 0 && hwm1 > 0) assert_true((hwm1 - hwm0) * 1024 < 6 * (long)N);
    assert_int_equal(served_stop(&sv), 0);
}

typedef struct post_arg { const served *sv; const char *path, *body; http_resp r; } post_arg;

static void *post_thread(void *arg) {
    post_arg *p = arg;
    http_do(p->sv, "POST", p->path, p->body, NULL, 60, &p->r);
    return NULL;
}

static void the_preparation_memory_cap_refuses_with_503_and_counts_it(void **state) {
    (void)state;
    need_fixtures();
    served sv;
    start(&sv, "cap", (const char *const[]){"-c", "256", "--max-prep-memory", "16777216", "--max-body", "2097152",
                                            NULL});
    assert_int_equal(metric(&sv, "kvreplay_prep_memory_limit_bytes"), 16777216);
    /* a body of 2,000,000 bytes announced and not sent: its charge is held from its headers */
    int fd = raw_connect(&sv);
    assert_true(fd >= 0);
    const char *head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 2000000\r\n\r\n{\"messages\":";
    assert_true(write(fd, head, strlen(head)) > 0);
    int64_t held = 0;
    for (int i = 0; i < 300 && (held = metric(&sv, "kvreplay_prep_memory_bytes")) < 8000000; i++) usleep(10000);
    if (held < 8000000) fprintf(stderr, "held %lld\n", (long long)held);
    assert_true(held >= 8000000);
    /* a second large body does not fit beside it: 503, Retry-After, counted */
    char *big = run_body("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"", 1900000, "\"}]}");
    http_resp r;
    http_do(&sv, "POST", "/v1/chat/completions", big, NULL, 60, &r);
    expect_status(&r, 503);
    char h[32];
    assert_true(http_header(&r, "Retry-After", h, sizeof h));
    assert_string_equal(h, "1");
    assert_non_null(strstr(r.body, "--max-prep-memory"));
    http_free(&r);
    assert_int_equal(metric(&sv, "kvreplay_refused_memory_total"), 1);
    /* the same body sent chunked (no Content-Length): charged as it arrives, refused at its end */
    http_do(&sv, "POST", "/v1/chat/completions", big, (const char *const[]){"Transfer-Encoding: chunked", NULL}, 60, &r);
    expect_status(&r, 503);
    http_free(&r);
    assert_int_equal(metric(&sv, "kvreplay_refused_memory_total"), 2);
    /* a small request is answered meanwhile */
    http_do(&sv, "POST", "/v1/chat/completions", "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
            NULL, 60, &r);
    expect_status(&r, 200);
    http_free(&r);
    /* the held body's client leaves: its charge is released, and the large body is admitted (and refused
     * for the context, which it is over) */
    close(fd);
    for (int i = 0; i < 300 && metric(&sv, "kvreplay_prep_memory_bytes") >= 8000000; i++) usleep(10000);
    http_do(&sv, "POST", "/v1/chat/completions", big, NULL, 60, &r);
    expect_status(&r, 400);
    assert_non_null(strstr(r.body, "exceed_context_size_error"));
    http_free(&r);
    /* two at once both fit (7/8 of 16 MiB is 14.7 MB; each is charged 7.7 MB): one of them may be refused, never
     * both, and every one is answered */
    for (int i = 0; i < 300 && metric(&sv, "kvreplay_prep_memory_bytes") > 1000000; i++) usleep(10000);
    post_arg pa[2];
    for (int i = 0; i < 2; i++) pa[i] = (post_arg){.sv = &sv, .path = "/v1/chat/completions", .body = big};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, post_thread, &pa[i]);
    int ok = 0;
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        if (pa[i].r.status != 400 && pa[i].r.status != 503) fprintf(stderr, "%ld %.300s\n", pa[i].r.status, pa[i].r.body ? pa[i].r.body : "");
        assert_true(pa[i].r.status == 400 || pa[i].r.status == 503);
        ok += pa[i].r.status == 400;
        http_free(&pa[i].r);
    }
    assert_true(ok >= 1);
    free(big);
    /* the charges all come back */
    int64_t left = 0;
    for (int i = 0; i < 300 && (left = metric(&sv, "kvreplay_prep_memory_bytes")) > 1000000; i++) usleep(10000);
    assert_true(left <= 1000000);  /* the /metrics request's own */
    /* a body of more JSON values than the cap could ever hold: 413, naming them */
    size_t nv = 200000;
    char *ids = malloc(2 * nv + 32);
    size_t k = (size_t)sprintf(ids, "{\"tokens\":[");
    for (size_t i = 0; i < nv; i++) ids[k++] = '1', ids[k++] = ',';
    strcpy(ids + k - 1, "]}");
    http_do(&sv, "POST", "/detokenize", ids, NULL, 60, &r);
    expect_status(&r, 413);
    assert_non_null(strstr(r.body, "JSON values"));
    http_free(&r);
    free(ids);
    assert_int_equal(served_stop(&sv), 0);
    /* a cap too small for --max-body: exit 2, naming both */
    char cmd[512], *out = NULL;
    size_t n = 0;
    snprintf(cmd, sizeof cmd, "%s serve -m %s --listen 127.0.0.1:0 --max-prep-memory 1000000 2>&1", kvr_bin(), g_model);
    int rc = kvr_run(cmd, &out, &n);
    assert_int_equal(rc, 2);
    assert_non_null(out);
    assert_non_null(strstr(out, "--max-prep-memory"));
    assert_non_null(strstr(out, "--max-body"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_prompt_that_fits_gets_the_same_tokens_as_whole),
        cmocka_unit_test(the_request_as_received_is_copied_before_a_rule_rewrites_it),
        cmocka_unit_test(a_prompt_that_cannot_fit_is_refused_without_being_tokenized),
        cmocka_unit_test(the_preparation_memory_cap_refuses_with_503_and_counts_it),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
