/*
 * tests/test_api_dialects.c: what is particular to the Responses API and the Gemini API beyond the round
 * trips every dialect passes in test_api.c: bodies in the shapes Codex and the Gemini CLI send, the
 * Responses event sequence (each planted fault in it caught by the reader), previous_response_id and its
 * bounded store, Gemini's model-in-the-path routes, its streams and its error shape.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "status.h"

static const hx_api_route *route(const char *method, const char *path) {
    const hx_api_route *rt = hx_api_route_find(method, path, NULL);
    assert_non_null(rt);
    return rt;
}

static int parse(const char *path, const char *query, const char *body, hx_api_req *q, hx_api_error *e) {
    const hx_api_route *rt = route("POST", path);
    return rt->parse(rt, path, query, body, strlen(body), q, e);
}

static char *dump(json_t *o) {
    assert_non_null(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* A Codex-shaped body: developer messages, the context and the prompt as user messages, a reasoning item, a
 * function call and its output, a custom tool call; function, custom and built-in tools. */
static const char k_codex[] =
    "{\"model\":\"gpt-5-codex\",\"stream\":true,\"store\":false,\"prompt_cache_key\":\"01a2\",\"input\":["
    "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"You are Codex.\"}]},"
    "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"<skills/>\"}]},"
    "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"<environment_context/>\"}]},"
    "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"list files\"}]},"
    "{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"use ls\"}],"
    "\"encrypted_content\":\"gAAA\"},"
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Listing.\"}]},"
    "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"},"
    "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"a\\nb\"},"
    "{\"type\":\"custom_tool_call\",\"call_id\":\"c2\",\"name\":\"apply_patch\",\"input\":\"*** Begin Patch\"},"
    "{\"type\":\"custom_tool_call_output\",\"call_id\":\"c2\",\"output\":\"Done!\"}],"
    "\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\",\"description\":\"run\",\"strict\":false,"
    "\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\",\"name\":\"apply_patch\",\"format\":{\"type\":\"grammar\"}},"
    "{\"type\":\"web_search\"}],\"tool_choice\":\"auto\",\"reasoning\":{\"effort\":\"low\"}}";

static void a_codex_body_is_read_as_codex_means_it(void **state) {
    (void)state;
    hx_api_req q, b;
    hx_api_error e;
    assert_int_equal(parse("/v1/responses", NULL, k_codex, &q, &e), ENG_OK);
    const hx_request *r = &q.req;
    assert_int_equal(r->n_system, 2);
    assert_string_equal(r->system[0].text, "You are Codex.");
    assert_int_equal(r->n_messages, 6);  /* user, user, assistant (thinking, text, call), tool, assistant, tool */
    assert_int_equal(r->messages[2].role, HX_ROLE_ASSISTANT);
    assert_int_equal(r->messages[2].n_blocks, 3);
    assert_int_equal(r->messages[2].blocks[0].type, HX_BLOCK_THINKING);
    assert_string_equal(r->messages[2].blocks[2].input, "{\"cmd\":\"ls\"}");
    assert_int_equal(r->messages[3].role, HX_ROLE_TOOL);
    assert_string_equal(r->messages[4].blocks[0].input, "{\"input\":\"*** Begin Patch\"}");
    assert_int_equal(r->n_tools, 3);
    assert_string_equal(r->tools[2].name, "web_search");
    assert_true(q.params.no_store && q.params.stream);
    assert_string_equal(q.params.cache_key, "01a2");
    assert_non_null(strstr(q.params.ignored, "reasoning"));
    assert_non_null(strstr(q.params.ignored, "tools[].strict"));
    /* what the client side sends for it parses back to the same prompt */
    const hx_api_route *rt = route("POST", "/v1/responses");
    char *again = dump(rt->request(&q));
    assert_int_equal(parse("/v1/responses", NULL, again, &b, &e), ENG_OK);
    assert_true(hx_request_equal(&q.req, &b.req));
    free(again);
    hx_api_req_free(&b);
    hx_api_req_free(&q);
}

// ----------------------------------------------------------------------------
// The Responses stream: its event sequence, and faults planted in it

/* The SSE of a streamed answer (two tokens, then a tool call) to `input: "hi"`. */
static char *responses_stream(size_t *n) {
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(parse("/v1/responses", NULL, "{\"input\":\"hi\",\"stream\":true}", &q, &e), ENG_OK);
    hx_api_result r;
    hx_api_result_init(&r);
    r.id = strdup("resp_abc");
    r.usage.prompt_tokens = 10;
    r.usage.cached_tokens = 4;
    r.usage.completion_tokens = 2;
    r.finish = HX_API_FINISH_TOOL_USE;
    hx_api_stream s;
    hx_api_stream_init(&s, &q, &r);
    hx_api_token t1 = {.id = 5, .text = "Hel", .len = 3, .logprob = NAN}, t2 = {.id = 6, .text = "lo", .len = 2, .logprob = NAN};
    hx_block call;
    assert_int_equal(hx_block_init(&call, HX_BLOCK_TOOL_USE, "", "call_9", "ls", "{\"d\":\".\"}", false), ENG_OK);
    assert_int_equal(hx_api_stream_token(&s, &t1), ENG_OK);
    assert_int_equal(hx_api_stream_token(&s, &t2), ENG_OK);
    assert_int_equal(hx_api_stream_block(&s, &call), ENG_OK);
    assert_int_equal(hx_api_stream_end(&s), ENG_OK);
    char *out = malloc(s.out.len + 1);
    memcpy(out, s.out.data, s.out.len);
    out[s.out.len] = '\0';
    *n = s.out.len;
    hx_block_free(&call);
    hx_api_stream_free(&s);
    hx_api_result_free(&r);
    hx_api_req_free(&q);
    return out;
}

/* Reads sse as a Responses stream: ENG_OK when it reads to its end, else the error (e). */
static int read_stream(const char *sse, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_reader rd;
    hx_api_reader_init(&rd, route("POST", "/v1/responses"));
    hx_api_result_init(r);
    int rc = hx_api_reader_feed(&rd, sse, n, r, e);
    rc = rc < 0 ? rc : hx_api_reader_finish(&rd, r, e);
    hx_api_reader_free(&rd);
    return rc;
}

static void the_responses_stream_has_the_documented_event_sequence(void **state) {
    (void)state;
    size_t n;
    char *sse = responses_stream(&n);
    static const char *const order[] = {
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed", NULL};
    const char *p = sse;
    for (int i = 0; order[i]; i++) {
        char want[96];
        snprintf(want, sizeof want, "event: %s\ndata: {", order[i]);
        const char *at = strstr(p, "event: ");
        assert_non_null(at);
        if (strncmp(at, want, strlen(want))) fprintf(stderr, "event %d: want %s, got %.60s\n", i, order[i], at);
        assert_int_equal(strncmp(at, want, strlen(want)), 0);
        char seq[48];
        snprintf(seq, sizeof seq, "\"sequence_number\":%d}", i);
        const char *end = strstr(at, "\n\n");
        assert_non_null(strstr(at, seq));
        assert_true(strstr(at, seq) < end);
        p = end;
    }
    hx_api_result r;
    hx_api_error e;
    assert_int_equal(read_stream(sse, n, &r, &e), ENG_OK);
    assert_int_equal(r.content.n_blocks, 2);
    assert_string_equal(r.content.blocks[0].text, "Hello");
    assert_string_equal(r.content.blocks[1].id, "call_9");
    assert_int_equal(r.finish, HX_API_FINISH_TOOL_USE);
    assert_int_equal(r.usage.cached_tokens, 4);
    hx_api_result_free(&r);
    free(sse);
}

/* Replaces the first occurrence of from by to in *s (reallocated). */
static void plant(char **s, const char *from, const char *to) {
    char *at = strstr(*s, from);
    assert_non_null(at);
    size_t a = strlen(from), b = strlen(to), off = (size_t)(at - *s), n = strlen(*s);
    char *t = malloc(n - a + b + 1);
    memcpy(t, *s, off);
    memcpy(t + off, to, b);
    memcpy(t + off + b, at + a, n - off - a + 1);
    free(*s);
    *s = t;
}

static void each_planted_fault_in_the_event_sequence_is_caught(void **state) {
    (void)state;
    static const struct { const char *from, *to, *says; } faults[] = {
        {"\"sequence_number\":5}", "\"sequence_number\":7}", "sequence_number"},          /* a lost event */
        {"\"delta\":\"lo\"", "\"delta\":\"l\"", "differs from its deltas"},                /* a delta changed */
        {"event: response.created", "event: response.createX", NULL},                      /* data says created */
        {"\"type\":\"response.created\"", "\"type\":\"response.in_progress\"", "before response.created"},
        {"\"type\":\"response.content_part.added\"", "\"type\":\"response.content_part.hmm\"", "outside a content part"},
        {"\"output_index\":1,\"item\"", "\"output_index\":3,\"item\"", "output_index out of order"},
    };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        size_t n;
        char *sse = responses_stream(&n);
        plant(&sse, faults[i].from, faults[i].to);
        hx_api_result r;
        hx_api_error e = {0};
        int rc = read_stream(sse, strlen(sse), &r, &e);
        if (faults[i].says) {
            if (rc == ENG_OK || !strstr(e.message, faults[i].says)) fprintf(stderr, "fault %zu: rc %d, %s\n", i, rc, e.message);
            assert_int_not_equal(rc, ENG_OK);
            assert_non_null(strstr(e.message, faults[i].says));
        } else {
            assert_int_equal(rc, ENG_OK);  /* the event line is a label; the data's type decides */
        }
        hx_api_result_free(&r);
        free(sse);
    }
    /* a stream that stops before response.completed */
    size_t n;
    char *sse = responses_stream(&n);
    char *last = strstr(sse, "event: response.completed");
    hx_api_result r;
    hx_api_error e;
    assert_int_equal(read_stream(sse, (size_t)(last - sse), &r, &e), ENG_ERR_FORMAT);
    assert_non_null(strstr(e.message, "ended before"));
    hx_api_result_free(&r);
    free(sse);
}

/* An error after the stream began: the flat error event, numbered in sequence. */
static void a_failure_mid_stream_is_the_flat_error_event(void **state) {
    (void)state;
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(parse("/v1/responses", NULL, "{\"input\":\"hi\",\"stream\":true}", &q, &e), ENG_OK);
    hx_api_result r;
    hx_api_result_init(&r);
    hx_api_stream s;
    hx_api_stream_init(&s, &q, &r);
    assert_int_equal(hx_api_stream_begin(&s), ENG_OK);
    hx_api_errf(&e, HX_API_ERR_SERVER, NULL, "the engine failed");
    assert_int_equal(hx_api_stream_error(&s, &e), ENG_OK);
    assert_non_null(strstr(s.out.data, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\","
                                       "\"message\":\"the engine failed\",\"param\":null,\"sequence_number\":2}"));
    hx_api_result back;
    hx_api_error be;
    assert_int_equal(read_stream(s.out.data, s.out.len, &back, &be), ENG_ERR_FORMAT);
    assert_int_equal(be.kind, HX_API_ERR_SERVER);
    assert_string_equal(be.message, "the engine failed");
    hx_api_result_free(&back);
    hx_api_stream_free(&s);
    hx_api_result_free(&r);
    hx_api_req_free(&q);
}

// ----------------------------------------------------------------------------
// previous_response_id

/* Answers body with `text` under id (stored unless the body says store false). */
static void answer(const char *body, const char *id, const char *text) {
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(parse("/v1/responses", NULL, body, &q, &e), ENG_OK);
    hx_api_result r;
    hx_api_result_init(&r);
    r.id = strdup(id);
    hx_block b;
    assert_int_equal(hx_block_init(&b, HX_BLOCK_TEXT, text, NULL, NULL, NULL, false), ENG_OK);
    assert_int_equal(hx_message_push_block(&r.content, &b), ENG_OK);
    r.finish = HX_API_FINISH_STOP;
    json_decref(q.route->respond(&q, &r));
    hx_api_result_free(&r);
    hx_api_req_free(&q);
}

static void a_stored_response_is_continued_and_the_store_is_bounded(void **state) {
    (void)state;
    answer("{\"instructions\":\"old\",\"input\":\"first\"}", "resp_first", "one");
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(parse("/v1/responses", NULL, "{\"instructions\":\"new\",\"previous_response_id\":\"resp_first\","
                                               "\"input\":\"second\"}", &q, &e), ENG_OK);
    assert_int_equal(q.req.n_messages, 3);  /* first, its answer, second */
    assert_string_equal(q.req.messages[1].blocks[0].text, "one");
    assert_int_equal(q.req.n_system, 1);
    assert_string_equal(q.req.system[0].text, "new");  /* instructions are not carried over */
    hx_api_req_free(&q);
    /* store false keeps nothing; an unknown id is a 400 naming the field */
    answer("{\"input\":\"x\",\"store\":false}", "resp_nostore", "y");
    assert_int_equal(parse("/v1/responses", NULL, "{\"previous_response_id\":\"resp_nostore\",\"input\":\"z\"}", &q, &e),
                     ENG_ERR_FORMAT);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.field, "previous_response_id");
    /* bounded: 64 more responses push the first out */
    for (int i = 0; i < 64; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_%d", i);
        answer("{\"input\":\"x\"}", id, "y");
    }
    assert_int_equal(parse("/v1/responses", NULL, "{\"previous_response_id\":\"resp_first\",\"input\":\"z\"}", &q, &e),
                     ENG_ERR_FORMAT);
    assert_int_equal(parse("/v1/responses", NULL, "{\"previous_response_id\":\"resp_63\",\"input\":\"z\"}", &q, &e), ENG_OK);
    hx_api_req_free(&q);
    /* server-side conversations and prompt templates change the prompt: refused, not ignored */
    assert_int_equal(parse("/v1/responses", NULL, "{\"conversation\":\"conv_1\",\"input\":\"z\"}", &q, &e), ENG_ERR_FORMAT);
    assert_int_equal(e.status, 501);
}

// ----------------------------------------------------------------------------
// Gemini

static void gemini_routes_carry_the_model_in_the_path(void **state) {
    (void)state;
    bool other;
    assert_non_null(hx_api_route_find("POST", "/v1beta/models/gemini-2.5-flash:generateContent", NULL));
    assert_non_null(hx_api_route_find("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", NULL));
    assert_int_equal(hx_api_route_find("POST", "/v1beta/models/m:countTokens", NULL)->op, HX_API_OP_COUNT_TOKENS);
    assert_null(hx_api_route_find("POST", "/v1beta/models/:generateContent", &other));  /* no model */
    assert_null(hx_api_route_find("POST", "/v1beta/models/a/b:generateContent", &other)); /* one name only */
    assert_null(hx_api_route_find("POST", "/v1beta/models/m:fooContent", &other));
    assert_null(hx_api_route_find("GET", "/v1beta/models/m:generateContent", &other));
    assert_true(other);
    /* the client side puts the model back */
    char t[128];
    const hx_api_route *rt = route("POST", "/v1beta/models/x:streamGenerateContent");
    assert_int_equal(hx_api_route_target(rt, "gemini-2.5-flash", t, sizeof t), ENG_OK);
    assert_string_equal(t, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    assert_int_equal(hx_api_route_target(rt, "m", t, 20), ENG_ERR_RANGE);
    hx_api_req q;
    hx_api_error e;
    const char *body = "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]}]}";
    assert_int_equal(parse("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", body, &q, &e), ENG_OK);
    assert_string_equal(q.params.model, "gemini-2.5-flash");
    assert_true(q.params.stream);
    hx_api_req_free(&q);
    /* a streamed JSON array (no alt=sse) and cached contents are not something kvreplay does */
    assert_int_equal(parse("/v1beta/models/m:streamGenerateContent", NULL, body, &q, &e), ENG_ERR_FORMAT);
    assert_int_equal(e.status, 501);
    assert_int_equal(parse("/v1beta/models/m:generateContent", NULL,
                           "{\"cachedContent\":\"cachedContents/1\",\"contents\":[]}", &q, &e), ENG_ERR_FORMAT);
    assert_int_equal(e.status, 501);
    assert_string_equal(e.field, "cachedContent");
    /* generationConfig's known fields typed; a wrong one named */
    assert_int_equal(parse("/v1beta/models/m:generateContent", NULL,
                           "{\"contents\":[],\"generationConfig\":{\"maxOutputTokens\":\"8\"}}", &q, &e), ENG_ERR_FORMAT);
    assert_string_equal(e.field, "generationConfig.maxOutputTokens");
}

static void gemini_errors_are_googles_shape_and_streams_are_checked(void **state) {
    (void)state;
    const hx_api_dialect *g = hx_api_dialect_find("gemini");
    hx_api_error e, back;
    hx_api_errf(&e, HX_API_ERR_INVALID, "contents", "expected an array");
    char *body = dump(hx_api_error_body(g, &e));
    assert_string_equal(body, "{\"error\":{\"code\":400,\"message\":\"contents: expected an array\",\"status\":\"INVALID_ARGUMENT\"}}");
    free(body);
    hx_api_errf(&e, HX_API_ERR_CONTEXT, NULL, "too long");
    e.n_prompt_tokens = 5000;
    e.n_ctx = 4096;
    body = dump(hx_api_error_body(g, &e));
    assert_true(hx_api_read_error(g, body, strlen(body), 400, &back));
    assert_int_equal(back.kind, HX_API_ERR_CONTEXT);
    assert_int_equal(back.n_prompt_tokens, 5000);
    free(body);
    /* a chunk of another response in the stream, and a stream without its finish, are caught */
    const hx_api_route *rt = route("POST", "/v1beta/models/m:streamGenerateContent");
    static const char a[] = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"}}],"
                            "\"responseId\":\"r1\"}\n\n";
    static const char b[] = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}],\"role\":\"model\"},"
                            "\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":5,"
                            "\"cachedContentTokenCount\":3},\"responseId\":\"r2\"}\n\n";
    hx_api_reader rd;
    hx_api_result r;
    hx_api_reader_init(&rd, rt);
    hx_api_result_init(&r);
    assert_int_equal(hx_api_reader_feed(&rd, a, strlen(a), &r, &back), 1);
    assert_int_equal(hx_api_reader_feed(&rd, b, strlen(b), &r, &back), ENG_ERR_FORMAT);
    assert_string_equal(back.field, "responseId");
    hx_api_reader_free(&rd);
    hx_api_result_free(&r);
    hx_api_reader_init(&rd, rt);
    hx_api_result_init(&r);
    assert_int_equal(hx_api_reader_feed(&rd, a, strlen(a), &r, &back), 1);
    assert_int_equal(hx_api_reader_finish(&rd, &r, &back), ENG_ERR_FORMAT);
    hx_api_reader_free(&rd);
    hx_api_result_free(&r);
    /* the same response's chunks read to one text block, the cached count as the reuse */
    char whole[512];
    snprintf(whole, sizeof whole, "%s%.*sr1\"}\n\n", a, (int)(strlen(b) - strlen("r2\"}\n\n")), b);
    hx_api_reader_init(&rd, rt);
    hx_api_result_init(&r);
    assert_int_equal(hx_api_reader_feed(&rd, whole, strlen(whole), &r, &back), 2);
    assert_int_equal(hx_api_reader_finish(&rd, &r, &back), ENG_OK);
    assert_int_equal(r.content.n_blocks, 1);
    assert_string_equal(r.content.blocks[0].text, "Hi!");
    assert_int_equal(r.usage.cached_tokens, 3);
    assert_int_equal(r.finish, HX_API_FINISH_STOP);
    hx_api_reader_free(&rd);
    hx_api_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_codex_body_is_read_as_codex_means_it),
        cmocka_unit_test(the_responses_stream_has_the_documented_event_sequence),
        cmocka_unit_test(each_planted_fault_in_the_event_sequence_is_caught),
        cmocka_unit_test(a_failure_mid_stream_is_the_flat_error_event),
        cmocka_unit_test(a_stored_response_is_continued_and_the_store_is_bounded),
        cmocka_unit_test(gemini_routes_carry_the_model_in_the_path),
        cmocka_unit_test(gemini_errors_are_googles_shape_and_streams_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
