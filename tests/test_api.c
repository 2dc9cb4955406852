/*
 * tests/test_api.c: the request/response layer of the three dialects
 * (harness/api/): SSE framing and incremental parsing cut anywhere; UTF-8
 * of token pieces across tokens; every route's request round trip (request
 * -> JSON -> request equal) on the real-shaped bodies of tests/data; every
 * generation route's result round trip, as a body and as an SSE stream
 * (result -> JSON/SSE -> result equal, bits of logprobs included); each
 * dialect's error shape and status, read back; fields of the wrong type
 * named in a 400; streams cut short refused; sampling fields counted when
 * greedy decoding does not honour them; and the endpoint registry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "sse.h"
#include "status.h"
#include "transcript.h"
#include "util.h"

#define ANTHROPIC "tests/data/anthropic_sample.jsonl"
#define OPENAI "tests/data/openai_sample.jsonl"

// ----------------------------------------------------------------------------
// Helpers

static char *dump(json_t *o) {
    assert_non_null(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    assert_non_null(s);
    return s;
}

static const hx_api_route *route(const char *method, const char *path) {
    const hx_api_route *rt = hx_api_route_find(method, path, NULL);
    assert_non_null(rt);
    return rt;
}

/* Parses body for method/path as the server does; fails the test on an error. */
static void parse_ok(const char *method, const char *path, const char *query, const char *body, hx_api_req *q) {
    const hx_api_route *rt = route(method, path);
    hx_api_error e;
    int rc = rt->parse(rt, path, query, body, strlen(body), q, &e);
    if (rc) fprintf(stderr, "parse: %s\n", e.message);
    assert_int_equal(rc, ENG_OK);
    assert_ptr_equal(q->route, rt);
}

/* Parses body and expects a 400 (or status) naming field. */
static void parse_fails(const char *path, const char *body, int status, const char *field) {
    const hx_api_route *rt = route("POST", path);
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(rt->parse(rt, path, NULL, body, strlen(body), &q, &e), ENG_ERR_FORMAT);
    assert_int_equal(e.status, status);
    if (field) {
        if (strcmp(e.field, field)) fprintf(stderr, "field '%s', message '%s'\n", e.field, e.message);
        assert_string_equal(e.field, field);
        assert_non_null(strstr(e.message, field));
    }
}

/* Line k (0-based) of a JSONL file, malloc'd. */
static char *line_of(const char *path, int k) {
    char *data = NULL, err[256];
    size_t n = 0;
    assert_int_equal(eng_read_file(path, &data, &n, err, sizeof err), ENG_OK);
    char *p = data;
    for (int i = 0; i < k; i++) {
        p = strchr(p, '\n');
        assert_non_null(p);
        p++;
    }
    char *e = strchr(p, '\n');
    char *line = strndup(p, e ? (size_t)(e - p) : strlen(p));
    free(data);
    return line;
}

/* A token with bytes text (len), logprob lp and n_top candidates derived from id. */
static hx_api_token make_token(int32_t id, const char *text, size_t len, float lp, int n_top, hx_api_prob *top) {
    for (int k = 0; k < n_top; k++) {
        top[k].id = id + k;
        top[k].text = (char *)(k == 0 ? text : "\xE2\x96\x81x");
        top[k].len = k == 0 ? len : 4;
        top[k].logprob = lp - (float)k * 0.3333333f;
    }
    return (hx_api_token){.id = id, .text = (char *)text, .len = len, .logprob = lp, .top = top, .n_top = n_top};
}

/* A generated result: text "Hello, wörld" in 4 tokens (one split inside the
 * two-byte "ö"), probabilities, and the counts dialect d reports. */
static void make_result(hx_api_result *r, const char *dialect, bool with_tokens) {
    hx_api_result_init(r);
    r->id = strdup("id-1");
    r->model = strdup("m");
    r->created = 1700000000;
    static const char *pieces[] = {"Hello", ",", " w\xC3", "\xB6rld"};
    static const float lps[] = {-0.125f, -1.0e-7f, -3.1415927f, -0.69314718f};
    hx_api_prob top[3];
    for (int i = 0; with_tokens && i < 4; i++) {
        hx_api_token t = make_token(10 + i, pieces[i], strlen(pieces[i]), lps[i], 3, top);
        assert_int_equal(hx_api_result_push_token(r, &t), ENG_OK);
    }
    hx_block b;
    assert_int_equal(hx_block_init(&b, HX_BLOCK_TEXT, "Hello, w\xC3\xB6rld", NULL, NULL, NULL, false), ENG_OK);
    assert_int_equal(hx_message_push_block(&r->content, &b), ENG_OK);
    r->finish = HX_API_FINISH_LENGTH;
    r->usage.prompt_tokens = 100;
    r->usage.cached_tokens = 64;
    r->usage.completion_tokens = 4;
    bool anthropic = !strcmp(dialect, "anthropic");
    r->usage.cache_creation_tokens = anthropic ? 0 : -1;
    if (!anthropic && strcmp(dialect, "responses") && strcmp(dialect, "gemini")) {  /* llama-server's timings */
        r->timings = (hx_api_timings){.cache_n = 64, .prompt_n = 36, .predicted_n = 4, .prompt_ms = 12.5, .predicted_ms = 3.25};
    }
    if (!strcmp(dialect, "llama")) r->id_slot = 0;
}

/* A scripted turn: thinking, text and a tool_use. */
static void make_blocks_result(hx_api_result *r, const char *dialect) {
    make_result(r, dialect, false);
    hx_message_free(&r->content);
    r->content.role = HX_ROLE_ASSISTANT;
    hx_block b;
    assert_int_equal(hx_block_init(&b, HX_BLOCK_THINKING, "I should read the file.", NULL, NULL, NULL, false), ENG_OK);
    assert_int_equal(hx_message_push_block(&r->content, &b), ENG_OK);
    assert_int_equal(hx_block_init(&b, HX_BLOCK_TEXT, "Reading it.", NULL, NULL, NULL, false), ENG_OK);
    assert_int_equal(hx_message_push_block(&r->content, &b), ENG_OK);
    assert_int_equal(hx_block_init(&b, HX_BLOCK_TOOL_USE, "", "toolu_1", "Read", "{\"file_path\":\"/tmp/a b.txt\"}",
                                   false), ENG_OK);
    assert_int_equal(hx_message_push_block(&r->content, &b), ENG_OK);
    r->finish = HX_API_FINISH_TOOL_USE;
}

/* Streams r through q's route, then reads the SSE back, fed in pieces of `step` bytes. */
static void stream_round_trip(const hx_api_req *q, const hx_api_result *r, bool blocks, size_t step,
                              hx_api_result *back) {
    hx_api_stream s;
    hx_api_stream_init(&s, q, r);
    eng_buf all = {0};
    assert_int_equal(hx_api_stream_begin(&s), ENG_OK);
    if (blocks)
        for (int32_t i = 0; i < r->content.n_blocks; i++) assert_int_equal(hx_api_stream_block(&s, &r->content.blocks[i]), ENG_OK);
    else
        for (int32_t i = 0; i < r->n_tokens; i++) assert_int_equal(hx_api_stream_token(&s, &r->tokens[i]), ENG_OK);
    assert_int_equal(hx_api_stream_end(&s), ENG_OK);
    assert_int_equal(eng_buf_append(&all, s.out.data, s.out.len), ENG_OK);
    hx_api_stream_free(&s);

    hx_api_reader rd;
    hx_api_reader_init(&rd, q->route);
    hx_api_result_init(back);
    hx_api_error e;
    int64_t events = 0;
    for (size_t i = 0; i < all.len; i += step) {
        size_t k = all.len - i < step ? all.len - i : step;
        int n = hx_api_reader_feed(&rd, all.data + i, k, back, &e);
        if (n < 0) fprintf(stderr, "reader: %s\n%s\n", e.message, all.data);
        assert_true(n >= 0);
        events += n;
    }
    assert_int_equal(hx_api_reader_finish(&rd, back, &e), ENG_OK);
    assert_true(events > 0);
    assert_int_equal(events, rd.n_token_events);
    hx_api_reader_free(&rd);
    eng_buf_free(&all);
}

// ----------------------------------------------------------------------------
// SSE

typedef struct got_events {
    char names[16][32];
    char data[16][256];
    int  n;
} got_events;

static int collect(void *ud, const hx_sse_event *ev) {
    got_events *g = ud;
    if (g->n < 16) {
        snprintf(g->names[g->n], 32, "%s", ev->name);
        snprintf(g->data[g->n], 256, "%.*s", (int)ev->n, ev->data);
    }
    g->n++;
    return 0;
}

static void sse_events_survive_any_cut_and_every_line_ending(void **state) {
    (void)state;
    eng_buf b = {0};
    assert_int_equal(hx_sse_write(&b, "message_start", "{\"a\":1}", 7), ENG_OK);
    assert_int_equal(hx_sse_write(&b, NULL, "two\nlines", 9), ENG_OK);
    assert_int_equal(hx_sse_write(&b, NULL, "[DONE]", 6), ENG_OK);
    assert_string_equal(b.data, "event: message_start\ndata: {\"a\":1}\n\ndata: two\ndata: lines\n\ndata: [DONE]\n\n");
    /* the same events with CRLF and CR line ends, a comment, an id, a retry, cut at every byte */
    const char *crlf = ": comment\r\nevent: message_start\r\nid: 7\r\ndata:{\"a\":1}\r\n\r\nretry: 10\rdata: two\rdata: lines\r\r"
                       "data: [DONE]\n\n";
    const char *texts[] = {b.data, crlf};
    for (int t = 0; t < 2; t++) {
        size_t n = strlen(texts[t]);
        for (size_t cut = 1; cut <= n; cut++) {
            hx_sse_parser p;
            hx_sse_parser_init(&p);
            got_events g = {0};
            assert_int_equal(hx_sse_feed(&p, texts[t], cut, collect, &g), 0);
            assert_int_equal(hx_sse_feed(&p, texts[t] + cut, n - cut, collect, &g), 0);
            assert_int_equal(g.n, 3);
            assert_string_equal(g.names[0], "message_start");
            assert_string_equal(g.data[0], "{\"a\":1}");
            assert_string_equal(g.names[1], "");
            assert_string_equal(g.data[1], "two\nlines");
            assert_string_equal(g.data[2], "[DONE]");
            assert_true(hx_sse_at_boundary(&p));
            hx_sse_parser_free(&p);
        }
    }
    eng_buf_free(&b);
}

static void sse_refuses_a_line_longer_than_its_limit(void **state) {
    (void)state;
    hx_sse_parser p;
    hx_sse_parser_init(&p);
    p.max_line = 16;
    got_events g = {0};
    assert_int_equal(hx_sse_feed(&p, "data: 0123456789abcdef", 22, collect, &g), ENG_ERR_RANGE);
    assert_int_equal(hx_sse_feed(&p, "\n\n", 2, collect, &g), ENG_ERR_RANGE);  /* stays failed */
    assert_int_equal(g.n, 0);
    hx_sse_parser_free(&p);
    /* an event without a blank line after it is not dispatched */
    hx_sse_parser_init(&p);
    assert_int_equal(hx_sse_feed(&p, "data: x\n", 8, collect, &g), 0);
    assert_int_equal(g.n, 0);
    assert_false(hx_sse_at_boundary(&p));
    hx_sse_parser_free(&p);
}

// ----------------------------------------------------------------------------
// UTF-8 of token pieces

static void utf8_pieces_stream_as_the_whole_text_sanitizes(void **state) {
    (void)state;
    assert_int_equal(hx_api_utf8_complete("ab\xC3", 3), 2);              /* an incomplete tail waits */
    assert_int_equal(hx_api_utf8_complete("ab\xE2\x96", 4), 2);
    assert_int_equal(hx_api_utf8_complete("ab\xFF", 3), 3);              /* an invalid byte does not */
    assert_int_equal(hx_api_utf8_complete("\xE0\x80", 2), 2);            /* an overlong start never completes */
    int64_t bad = 0;
    char *s = hx_api_utf8_sanitize("a\xFF" "b\xC3", 4, &bad);
    assert_string_equal(s, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    assert_int_equal(bad, 2);
    free(s);
    /* seeded random byte strings cut into random token pieces: the streamed text equals sanitize(whole) */
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 20);
    static const unsigned char alphabet[] = {'a', ' ', 0xC3, 0xB6, 0xE2, 0x96, 0x81, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0x80};
    hx_api_req q;
    hx_api_req_init(&q);
    q.route = route("POST", "/v1/messages");
    for (int trial = 0; trial < 300; trial++) {
        char whole[64];
        size_t n = 1 + gsl_rng_uniform_int(rng, 63);
        for (size_t i = 0; i < n; i++) whole[i] = (char)alphabet[gsl_rng_uniform_int(rng, sizeof alphabet)];
        hx_api_result r;
        hx_api_result_init(&r);
        hx_api_stream st;
        hx_api_stream_init(&st, &q, &r);
        for (size_t i = 0; i < n;) {
            size_t k = 1 + gsl_rng_uniform_int(rng, 4);
            if (k > n - i) k = n - i;
            hx_api_token t = {.id = 1, .text = whole + i, .len = k, .logprob = NAN};
            assert_int_equal(hx_api_stream_token(&st, &t), ENG_OK);
            i += k;
        }
        assert_int_equal(hx_api_stream_end(&st), ENG_OK);
        hx_api_reader rd;
        hx_api_reader_init(&rd, q.route);
        hx_api_result back;
        hx_api_result_init(&back);
        hx_api_error e;
        assert_true(hx_api_reader_feed(&rd, st.out.data, st.out.len, &back, &e) >= 0);
        assert_int_equal(hx_api_reader_finish(&rd, &back, &e), ENG_OK);
        char *want = hx_api_utf8_sanitize(whole, n, NULL), *got = hx_api_result_text(&back);
        assert_string_equal(got, want);
        free(want);
        free(got);
        hx_api_reader_free(&rd);
        hx_api_result_free(&back);
        hx_api_stream_free(&st);
    }
    gsl_rng_free(rng);
}

// ----------------------------------------------------------------------------
// Requests: body -> request -> body -> request

static void request_round_trip(const char *path, const char *body) {
    hx_api_req a, b;
    parse_ok("POST", path, NULL, body, &a);
    char *again = dump(a.route->request(&a));
    parse_ok("POST", path, NULL, again, &b);
    assert_true(hx_request_equal(&a.req, &b.req));
    assert_int_equal(a.params.max_tokens, b.params.max_tokens);
    assert_int_equal(a.params.stream, b.params.stream);
    assert_int_equal(a.params.n_probs, b.params.n_probs);
    assert_int_equal(a.params.n_stop, b.params.n_stop);
    free(again);
    hx_api_req_free(&a);
    hx_api_req_free(&b);
}

static void anthropic_bodies_round_trip(void **state) {
    (void)state;
    for (int k = 0; k < 5; k++) {
        char *line = line_of(ANTHROPIC, k);
        request_round_trip("/v1/messages", line);
        free(line);
    }
    /* Claude Code 2.1.328's system-role messages, thinking with a signature, an image, a document */
    request_round_trip("/v1/messages",
                       "{\"model\":\"claude-x\",\"max_tokens\":50,\"stream\":true,\"system\":\"You are brief.\","
                       "\"messages\":[{\"role\":\"system\",\"content\":\"be terse\"},{\"role\":\"user\",\"content\":["
                       "{\"type\":\"text\",\"text\":\"look\",\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":"
                       "\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]},"
                       "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":"
                       "\"sig\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Read\",\"input\":{\"p\":1}}]},{\"role\":"
                       "\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":[{\"type\":"
                       "\"text\",\"text\":\"data\"}],\"is_error\":true}]}],\"stop_sequences\":[\"\\n\\nHuman:\"]}");
}

static void openai_bodies_round_trip(void **state) {
    (void)state;
    for (int k = 0; k < 3; k++) {
        char *line = line_of(OPENAI, k);
        request_round_trip("/v1/chat/completions", line);
        free(line);
    }
    request_round_trip("/v1/chat/completions",
                       "{\"model\":\"qwen\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":5,\"stop\":\"END\"}");
    request_round_trip("/v1/completions", "{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":7,\"logprobs\":3}");
    request_round_trip("/v1/completions", "{\"prompt\":\"Once upon a time\",\"stream\":true}");
    request_round_trip("/completion", "{\"prompt\":\"Once\",\"n_predict\":3,\"n_probs\":32000,\"cache_prompt\":false,"
                                      "\"id_slot\":0,\"stream\":true,\"return_tokens\":true}");
    request_round_trip("/completion", "{\"prompt\":[1,403,407],\"n_predict\":0}");
}

static void llama_params_are_read_as_llama_server_reads_them(void **state) {
    (void)state;
    hx_api_req q;
    parse_ok("POST", "/completion", NULL,
             "{\"prompt\":[1,2],\"n_predict\":5,\"n_probs\":10,\"cache_prompt\":false,\"id_slot\":1,"
             "\"temperature\":0.8,\"n_keep\":3,\"samplers\":[\"top_k\"]}", &q);
    assert_int_equal(q.req.n_tokens, 2);
    assert_int_equal(q.params.max_tokens, 5);
    assert_int_equal(q.params.n_probs, 10);
    assert_true(q.params.logprobs);
    assert_false(q.params.cache_prompt);
    assert_int_equal(q.params.id_slot, 1);
    assert_string_equal(q.params.ignored, "n_keep");  /* accepted, not acted on, and said */
    char why[128];
    assert_false(hx_api_sampling_honoured(&q.params.sampling, why, sizeof why));
    assert_string_equal(why, "temperature 0.8");
    hx_api_req_free(&q);
    /* OpenAI: top_logprobs is n_probs when logprobs is true; max_completion_tokens is max_tokens */
    parse_ok("POST", "/v1/chat/completions", NULL,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":7,"
             "\"max_completion_tokens\":9,\"temperature\":0,\"top_p\":0.9}", &q);
    assert_int_equal(q.params.n_probs, 7);
    assert_int_equal(q.params.max_tokens, 9);
    assert_true(hx_api_sampling_honoured(&q.params.sampling, why, sizeof why));  /* greedy: top_p cannot matter */
    hx_api_req_free(&q);
    /* /tokenize and /detokenize, /slots/ID?action=erase */
    parse_ok("POST", "/tokenize", NULL, "{\"content\":\"Once upon\",\"with_pieces\":true,\"add_special\":true}", &q);
    assert_string_equal(q.req.prompt, "Once upon");
    assert_true(q.params.with_pieces && q.params.add_special && q.params.parse_special);
    hx_api_req_free(&q);
    parse_ok("POST", "/slots/2", "action=erase", "", &q);
    assert_int_equal(q.params.slot_id, 2);
    assert_string_equal(q.params.action, "erase");
    hx_api_req_free(&q);
}

static void sampling_fields_greedy_cannot_honour_are_named(void **state) {
    (void)state;
    static const struct { const char *body; bool honoured; const char *why; } cases[] = {
        {"{}", true, ""},
        {"{\"temperature\":0}", true, ""},
        {"{\"temperature\":1.0,\"top_k\":1}", true, ""},
        {"{\"temperature\":0,\"seed\":42,\"top_p\":0.5,\"min_p\":0.1}", true, ""},
        {"{\"temperature\":0.7}", false, "temperature 0.7"},
        {"{\"repeat_penalty\":1.1}", false, "repeat_penalty 1.1"},
        {"{\"presence_penalty\":0.5}", false, "presence_penalty 0.5"},
        {"{\"n\":1,\"logit_bias\":{}}", true, ""},
        {"{\"n\":2}", false, "{\"n\":2}"},
        {"{\"mirostat\":2}", false, "{\"mirostat\":2}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *j = json_loads(cases[i].body, 0, &je);
        hx_api_req q;
        hx_api_req_init(&q);
        hx_api_error e;
        assert_int_equal(hx_api_read_sampling(j, &q.params.sampling, &e), ENG_OK);
        char why[128];
        assert_int_equal(hx_api_sampling_honoured(&q.params.sampling, why, sizeof why), cases[i].honoured);
        assert_string_equal(why, cases[i].why);
        json_decref(j);
        hx_api_req_free(&q);
    }
}

static void wrong_fields_are_a_400_that_names_them(void **state) {
    (void)state;
    parse_fails("/completion", "{\"prompt\":", 400, NULL);             /* truncated JSON */
    parse_fails("/completion", "[1,2]", 400, NULL);                    /* not an object */
    parse_fails("/completion", "{\"prompt\":5}", 400, "prompt");
    parse_fails("/completion", "{\"n_predict\":5}", 400, "prompt");
    parse_fails("/completion", "{\"prompt\":\"x\",\"n_predict\":\"10\"}", 400, "n_predict");
    parse_fails("/completion", "{\"prompt\":\"x\",\"n_probs\":-1}", 400, "n_probs");
    parse_fails("/completion", "{\"prompt\":\"x\",\"cache_prompt\":1}", 400, "cache_prompt");
    parse_fails("/completion", "{\"prompt\":[1,-2]}", 400, "prompt[1]");
    parse_fails("/completion", "{\"prompt\":[\"a\",\"b\"]}", 501, "prompt");
    parse_fails("/completion", "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature");
    parse_fails("/completion", "{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "stop[0]");
    parse_fails("/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "messages");
    parse_fails("/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role");
    parse_fails("/v1/chat/completions", "{\"messages\":[],\"stream_options\":{\"include_usage\":\"yes\"}}", 400,
                "stream_options.include_usage");
    parse_fails("/v1/chat/completions", "{\"messages\":[],\"top_logprobs\":3}", 400, "top_logprobs");
    parse_fails("/v1/completions", "{\"prompt\":\"x\",\"echo\":true}", 400, "echo");
    parse_fails("/v1/messages", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "max_tokens");
    parse_fails("/v1/messages", "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400,
                "messages[0].content");
    parse_fails("/v1/messages", "{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[]}", 400,
                "system[0].type");
    parse_fails("/v1/messages", "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\","
                "\"name\":\"x\"}]}]}", 400, "messages[0].content[0].id");
    parse_fails("/tokenize", "{\"content\":[1]}", 400, "content");
    parse_fails("/detokenize", "{\"tokens\":[1,\"a\"]}", 400, "tokens[1]");
    parse_fails("/slots/x", "", 400, "id_slot");
    /* an unknown Anthropic block type is kept and counted (a real client's new block types never fail a request) */
    hx_api_req q;
    parse_ok("POST", "/v1/messages", NULL,
             "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"server_tool_use\",\"id\":\"s\"}]}]}", &q);
    assert_int_equal(q.n_unknown_blocks, 1);
    assert_string_equal(q.unknown_types, "server_tool_use");
    assert_non_null(strstr(q.req.messages[0].blocks[0].text, "server_tool_use"));
    hx_api_req_free(&q);
}

// ----------------------------------------------------------------------------
// Results: result -> body -> result, result -> SSE -> result

static const char *const k_generate[][2] = {{"llama", "/completion"}, {"openai", "/v1/chat/completions"},
                                           {"openai", "/v1/completions"}, {"anthropic", "/v1/messages"},
                                           {"responses", "/v1/responses"},
                                           {"gemini", "/v1beta/models/m:generateContent"}};

static void request_for(const char *path, hx_api_req *q, bool stream) {
    char body[256];
    if (!strcmp(path, "/v1/messages"))
        snprintf(body, sizeof body, "{\"max_tokens\":4,\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 stream ? "true" : "false");
    else if (!strcmp(path, "/v1/chat/completions"))
        snprintf(body, sizeof body, "{\"stream\":%s,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
                 "\"top_logprobs\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", stream ? "true" : "false");
    else if (!strcmp(path, "/v1/responses"))
        snprintf(body, sizeof body, "{\"stream\":%s,\"top_logprobs\":3,\"include\":[\"message.output_text.logprobs\"],"
                 "\"input\":\"hi\"}", stream ? "true" : "false");
    else if (strstr(path, "/v1beta/models/"))
        snprintf(body, sizeof body, "{\"generationConfig\":{\"responseLogprobs\":true,\"logprobs\":3},"
                 "\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]}]}");
    else if (!strcmp(path, "/v1/completions"))
        snprintf(body, sizeof body, "{\"stream\":%s,\"stream_options\":{\"include_usage\":true},\"logprobs\":3,"
                 "\"prompt\":\"hi\"}", stream ? "true" : "false");
    else
        snprintf(body, sizeof body, "{\"stream\":%s,\"n_probs\":3,\"return_tokens\":true,\"prompt\":\"hi\"}",
                 stream ? "true" : "false");
    if (strstr(path, "/v1beta/models/")) {  /* Gemini streams on its own verb */
        char p2[96];
        snprintf(p2, sizeof p2, "/v1beta/models/m:%s", stream ? "streamGenerateContent" : "generateContent");
        parse_ok("POST", p2, stream ? "alt=sse" : NULL, body, q);
        return;
    }
    parse_ok("POST", path, NULL, body, q);
}

static void generated_results_round_trip_as_a_body(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_generate / sizeof k_generate[0]; i++) {
        if (!hx_api_dialect_find(k_generate[i][0])) continue;
        bool anthropic = !strcmp(k_generate[i][0], "anthropic");
        hx_api_req q;
        request_for(k_generate[i][1], &q, false);
        hx_api_result r, back;
        make_result(&r, k_generate[i][0], !anthropic);
        char *body = dump(q.route->respond(&q, &r));
        hx_api_error e;
        int rc = q.route->read(q.route, body, strlen(body), &back, &e);
        if (rc || !hx_api_result_equal(&r, &back)) fprintf(stderr, "%s: %s\n%s\n", k_generate[i][1], rc ? e.message : "differs", body);
        assert_int_equal(rc, ENG_OK);
        assert_true(hx_api_result_equal(&r, &back));
        if (strcmp(k_generate[i][0], "llama")) assert_string_equal(back.id, "id-1");  /* /completion has no id */
        free(body);
        hx_api_result_free(&back);
        hx_api_result_free(&r);
        hx_api_req_free(&q);
    }
}

static void generated_results_round_trip_as_a_stream_cut_anywhere(void **state) {
    (void)state;
    static const size_t steps[] = {1, 7, 1 << 20};
    for (size_t i = 0; i < sizeof k_generate / sizeof k_generate[0]; i++) {
        if (!hx_api_dialect_find(k_generate[i][0])) continue;
        bool anthropic = !strcmp(k_generate[i][0], "anthropic");
        for (size_t s = 0; s < 3; s++) {
            hx_api_req q;
            request_for(k_generate[i][1], &q, true);
            hx_api_result r, back;
            make_result(&r, k_generate[i][0], true);
            stream_round_trip(&q, &r, false, steps[s], &back);
            if (anthropic) {  /* the Messages stream carries no token ids or probabilities */
                for (int32_t k = 0; k < r.n_tokens; k++) {
                    free(r.tokens[k].text);
                    for (int32_t t = 0; t < r.tokens[k].n_top; t++) free(r.tokens[k].top[t].text);
                    free(r.tokens[k].top);
                }
                free(r.tokens);
                r.tokens = NULL;
                r.n_tokens = 0;
            }
            if (!hx_api_result_equal(&r, &back)) fprintf(stderr, "%s step %zu differs\n", k_generate[i][1], steps[s]);
            assert_true(hx_api_result_equal(&r, &back));
            hx_api_result_free(&back);
            hx_api_result_free(&r);
            hx_api_req_free(&q);
        }
    }
}

static void scripted_blocks_round_trip_in_both_chat_dialects(void **state) {
    (void)state;
    static const char *const chat[][2] = {{"openai", "/v1/chat/completions"}, {"anthropic", "/v1/messages"},
                                          {"responses", "/v1/responses"}, {"gemini", "/v1beta/models/m:generateContent"}};
    for (int i = 0; i < 4; i++) {
        if (!hx_api_dialect_find(chat[i][0])) continue;
        for (int stream = 0; stream < 2; stream++) {
            hx_api_req q;
            request_for(chat[i][1], &q, stream);
            q.params.logprobs = false;
            hx_api_result r, back;
            make_blocks_result(&r, chat[i][0]);
            if (stream) stream_round_trip(&q, &r, true, 5, &back);
            else {
                char *body = dump(q.route->respond(&q, &r));
                hx_api_error e;
                assert_int_equal(q.route->read(q.route, body, strlen(body), &back, &e), ENG_OK);
                free(body);
            }
            assert_true(hx_api_result_equal(&r, &back));
            assert_int_equal(back.content.n_blocks, 3);
            assert_string_equal(back.content.blocks[2].input, "{\"file_path\":\"/tmp/a b.txt\"}");
            hx_api_result_free(&back);
            hx_api_result_free(&r);
            hx_api_req_free(&q);
        }
    }
}

static void the_anthropic_stream_has_the_documented_event_sequence(void **state) {
    (void)state;
    hx_api_req q;
    request_for("/v1/messages", &q, true);
    hx_api_result r;
    make_blocks_result(&r, "anthropic");
    hx_api_stream s;
    hx_api_stream_init(&s, &q, &r);
    for (int32_t i = 0; i < r.content.n_blocks; i++) assert_int_equal(hx_api_stream_block(&s, &r.content.blocks[i]), ENG_OK);
    assert_int_equal(hx_api_stream_end(&s), ENG_OK);
    static const char *const want[] = {"message_start", "ping", "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop", "content_block_start",
                                       "content_block_delta", "content_block_stop", "content_block_start",
                                       "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
    const char *p = s.out.data;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        p = strstr(p, "event: ");
        assert_non_null(p);
        p += 7;
        assert_int_equal(strncmp(p, want[i], strlen(want[i])), 0);
        assert_true(p[strlen(want[i])] == '\n');
    }
    assert_null(strstr(p, "event: "));
    assert_non_null(strstr(s.out.data, "\"signature_delta\""));
    assert_non_null(strstr(s.out.data, "\"input_json_delta\""));
    assert_non_null(strstr(s.out.data, "\"cache_read_input_tokens\":64"));
    hx_api_stream_free(&s);
    hx_api_result_free(&r);
    hx_api_req_free(&q);
}

static void a_stream_cut_short_is_refused(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_generate / sizeof k_generate[0]; i++) {
        if (!hx_api_dialect_find(k_generate[i][0])) continue;
        hx_api_req q;
        request_for(k_generate[i][1], &q, true);
        hx_api_result r;
        make_result(&r, k_generate[i][0], true);
        hx_api_stream s;
        hx_api_stream_init(&s, &q, &r);
        for (int32_t k = 0; k < r.n_tokens; k++) assert_int_equal(hx_api_stream_token(&s, &r.tokens[k]), ENG_OK);
        /* no end: the body stops mid-stream (cut in the middle of the last event too) */
        hx_api_reader rd;
        hx_api_reader_init(&rd, q.route);
        hx_api_result back;
        hx_api_result_init(&back);
        hx_api_error e;
        assert_true(hx_api_reader_feed(&rd, s.out.data, s.out.len - 3, &back, &e) >= 0);
        assert_int_equal(hx_api_reader_finish(&rd, &back, &e), ENG_ERR_FORMAT);
        assert_non_null(strstr(e.message, "ended before"));
        hx_api_reader_free(&rd);
        hx_api_result_free(&back);
        hx_api_stream_free(&s);
        hx_api_result_free(&r);
        hx_api_req_free(&q);
    }
}

// ----------------------------------------------------------------------------
// Errors

static void each_dialect_writes_and_reads_its_own_error_shape(void **state) {
    (void)state;
    for (size_t d = 0; hx_api_dialects[d]; d++) {
        const hx_api_dialect *dl = hx_api_dialects[d];
        hx_api_error e, back;
        hx_api_errf(&e, HX_API_ERR_INVALID, "max_tokens", "expected an integer");
        char *body = dump(hx_api_error_body(dl, &e));
        if (!strcmp(dl->name, "anthropic")) assert_int_equal(strncmp(body, "{\"type\":\"error\",\"error\":{", 24), 0);
        else assert_int_equal(strncmp(body, "{\"error\":{", 10), 0);
        assert_true(hx_api_read_error(dl, body, strlen(body), 400, &back));
        assert_int_equal(back.kind, HX_API_ERR_INVALID);
        assert_int_equal(back.status, 400);
        assert_string_equal(back.message, "max_tokens: expected an integer");
        free(body);
        /* the context error names both lengths, in the dialect's wording */
        hx_api_errf(&e, HX_API_ERR_CONTEXT, NULL, "request (%d tokens) exceeds the available context size (%d tokens)",
                    5000, 4096);
        e.n_prompt_tokens = 5000;
        e.n_ctx = 4096;
        body = dump(hx_api_error_body(dl, &e));
        assert_non_null(strstr(body, "5000"));
        assert_non_null(strstr(body, "4096"));
        assert_true(hx_api_read_error(dl, body, strlen(body), 400, &back));
        assert_int_equal(back.kind, HX_API_ERR_CONTEXT);
        assert_int_equal(back.n_prompt_tokens, 5000);
        assert_int_equal(back.n_ctx, 4096);
        free(body);
        /* 503 keeps its kind */
        hx_api_errf(&e, HX_API_ERR_UNAVAILABLE, NULL, "the queue is full");
        body = dump(hx_api_error_body(dl, &e));
        assert_true(hx_api_read_error(dl, body, strlen(body), 503, &back));
        assert_int_equal(back.kind, HX_API_ERR_UNAVAILABLE);
        free(body);
        /* an error event inside a stream ends it with that error */
        eng_buf out = {0};
        assert_int_equal(hx_api_write_stream_error(dl, &out, 0, &e), ENG_OK);
        const hx_api_route *gen = hx_api_route_of(dl, HX_API_OP_GENERATE);
        hx_api_reader rd;
        hx_api_reader_init(&rd, gen);
        hx_api_result r;
        hx_api_result_init(&r);
        assert_int_equal(hx_api_reader_feed(&rd, out.data, out.len, &r, &back), ENG_ERR_FORMAT);
        assert_int_equal(back.kind, HX_API_ERR_UNAVAILABLE);
        assert_string_equal(back.message, "the queue is full");
        hx_api_reader_free(&rd);
        eng_buf_free(&out);
    }
}

// ----------------------------------------------------------------------------
// The endpoint registry

static void the_endpoint_registry_is_consistent(void **state) {
    (void)state;
    int n_routes = 0;
    for (size_t d = 0; hx_api_dialects[d]; d++) {
        const hx_api_dialect *dl = hx_api_dialects[d];
        assert_ptr_equal(hx_api_dialect_find(dl->name), dl);
        assert_non_null(dl->errors);
        for (const hx_api_route *r = dl->routes; r->path; r++, n_routes++) {
            assert_ptr_equal(r->dialect, dl);
            assert_true(!strcmp(r->method, "GET") || !strcmp(r->method, "POST"));
            assert_true(r->path[0] == '/');
            /* a POST reads a body; a route answers with a body (metrics: Prometheus text, by serve) */
            assert_true(!strcmp(r->method, "POST") == (r->parse != NULL));
            assert_true(r->respond != NULL || r->op == HX_API_OP_METRICS);
            if (r->op == HX_API_OP_GENERATE)
                assert_true(r->request && r->read && r->stream_token && r->stream_block && r->stream_end && r->stream_read);
            /* no other route answers the same method and path */
            for (size_t d2 = 0; hx_api_dialects[d2]; d2++)
                for (const hx_api_route *o = hx_api_dialects[d2]->routes; o->path; o++)
                    if (o != r) assert_false(!strcmp(o->method, r->method) && !strcmp(o->path, r->path));
            /* the route finds itself */
            char path[128];
            snprintf(path, sizeof path, "%s", r->path);
            size_t L = strlen(path);
            if (path[L - 1] == '*') snprintf(path + L - 1, sizeof path - L + 1, "3");
            assert_ptr_equal(hx_api_route_find(r->method, path, NULL), r);
        }
    }
    assert_true(n_routes >= 18);
    bool other = false;
    assert_null(hx_api_route_find("GET", "/v1/messages", &other));
    assert_true(other);  /* 405, not 404 */
    assert_null(hx_api_route_find("POST", "/v2/nothing", &other));
    assert_false(other);
    assert_null(hx_api_route_find("POST", "/slots/", &other));  /* the wildcard needs an id */
    assert_non_null(hx_api_route_of(hx_api_dialect_find("anthropic"), HX_API_OP_COUNT_TOKENS));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sse_events_survive_any_cut_and_every_line_ending),
        cmocka_unit_test(sse_refuses_a_line_longer_than_its_limit),
        cmocka_unit_test(utf8_pieces_stream_as_the_whole_text_sanitizes),
        cmocka_unit_test(anthropic_bodies_round_trip),
        cmocka_unit_test(openai_bodies_round_trip),
        cmocka_unit_test(llama_params_are_read_as_llama_server_reads_them),
        cmocka_unit_test(sampling_fields_greedy_cannot_honour_are_named),
        cmocka_unit_test(wrong_fields_are_a_400_that_names_them),
        cmocka_unit_test(generated_results_round_trip_as_a_body),
        cmocka_unit_test(generated_results_round_trip_as_a_stream_cut_anywhere),
        cmocka_unit_test(scripted_blocks_round_trip_in_both_chat_dialects),
        cmocka_unit_test(the_anthropic_stream_has_the_documented_event_sequence),
        cmocka_unit_test(a_stream_cut_short_is_refused),
        cmocka_unit_test(each_dialect_writes_and_reads_its_own_error_shape),
        cmocka_unit_test(the_endpoint_registry_is_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
