/*
 * tests/test_api_tolerance.c: a field kvreplay does not know, at any depth of
 * a request body, is accepted, listed by its normalized path, and changes
 * nothing in the prompt; only malformed JSON and wrongly typed known fields
 * are a 400. Checked on every dialect's generation route by planting an
 * unknown member into every object of a real-shaped body, one at a time; the
 * checker itself is shown to catch a shape that swallows a member silently.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "status.h"

/* Members whose values a dialect keeps whole (schemas, arguments, images): not walked, not planted in. */
static const char *const k_opaque[] = {"input", "input_schema", "parameters", "arguments", "tool_choice", "source",
                                       "image_url", "args", "response", "parametersJsonSchema", "metadata",
                                       "output_config", "text_format", "format", NULL};

static bool opaque(const char *key) {
    for (int i = 0; k_opaque[i]; i++)
        if (!strcmp(k_opaque[i], key)) return true;
    return false;
}

typedef struct planted {
    json_t *node;       /* an object of the body */
    char    path[256];  /* its normalized path ("" for the body) */
} planted;

static void collect(json_t *v, const char *path, planted *out, int *n, int cap) {
    if (json_is_object(v)) {
        if (*n < cap) {
            out[*n].node = v;
            snprintf(out[*n].path, sizeof out[*n].path, "%s", path);
            (*n)++;
        }
        const char *key;
        json_t *m;
        json_object_foreach(v, key, m) {
            if (opaque(key)) continue;
            char p[256];
            snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", key);
            collect(m, p, out, n, cap);
        }
    } else if (json_is_array(v)) {
        char p[256];
        snprintf(p, sizeof p, "%s[]", path);
        for (size_t i = 0; i < json_array_size(v); i++) collect(json_array_get(v, i), p, out, n, cap);
    }
}

static bool listed(const hx_api_req *q, const char *path) {
    for (int32_t i = 0; i < q->n_ignored; i++)
        if (!strcmp(q->ignored_paths[i], path)) return true;
    return false;
}

/* Plants "zz_new" into each object of body in turn and parses the body for rt. Returns NULL when every
 * planting was accepted, listed under its path and left the prompt as it was; otherwise (static) the
 * first path that was refused, not listed or changed the prompt. */
static const char *first_unlisted(const hx_api_route *rt, const char *body, const char *query) {
    static char bad[300];
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    hx_api_req base;
    hx_api_error e;
    int rc = rt->parse(rt, rt->path, query, body, strlen(body), &base, &e);
    if (rc) fprintf(stderr, "%s: %s\n", rt->path, e.message);
    assert_int_equal(rc, ENG_OK);
    planted nodes[256];
    int n = 0;
    collect(j, "", nodes, &n, 256);
    assert_true(n >= 1);
    const char *fail = NULL;
    for (int i = 0; i < n && !fail; i++) {
        bool inside_ignored = false;  /* a member kvreplay ignores is listed once, not what it holds */
        for (int32_t k = 0; k < base.n_ignored; k++) {
            size_t l = strlen(base.ignored_paths[k]);
            inside_ignored |= !strncmp(nodes[i].path, base.ignored_paths[k], l) &&
                              (nodes[i].path[l] == '.' || nodes[i].path[l] == '[' || nodes[i].path[l] == '\0');
        }
        if (inside_ignored) continue;
        json_object_set_new(nodes[i].node, "zz_new", json_pack("{s:i}", "x", 1));
        char *text = json_dumps(j, JSON_COMPACT);
        json_object_del(nodes[i].node, "zz_new");
        hx_api_req q;
        snprintf(bad, sizeof bad, "%s%szz_new", nodes[i].path, nodes[i].path[0] ? "." : "");
        if (rt->parse(rt, rt->path, query, text, strlen(text), &q, &e) != ENG_OK) {
            fprintf(stderr, "%s: refused: %s\n", bad, e.message);
            fail = bad;
        } else {
            if (!listed(&q, bad) || !hx_request_equal(&q.req, &base.req)) fail = bad;
            hx_api_req_free(&q);
        }
        free(text);
    }
    hx_api_req_free(&base);
    json_decref(j);
    return fail;
}

/* Bodies of every dialect's generation route, in the shapes real clients send. */
static const struct { const char *method, *path, *query, *body; } k_bodies[] = {
    {"POST", "/completion", NULL, "{\"prompt\":\"hi\",\"n_predict\":2,\"stream\":false}"},
    {"POST", "/v1/chat/completions", NULL,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
     "\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"a b\"}],"
     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"ls\",\"description\":\"list\","
     "\"parameters\":{\"type\":\"object\"}}}],\"stream_options\":{\"include_usage\":true},\"stream\":true}"},
    {"POST", "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":2}"},
    {"POST", "/v1/messages", NULL,
     "{\"model\":\"claude\",\"max_tokens\":8,\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],"
     "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
     "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},"
     "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"ls\",\"input\":{}}]},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
     "\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]},"
     "{\"role\":\"system\",\"content\":\"note\"}],"
     "\"tools\":[{\"name\":\"ls\",\"description\":\"list\",\"input_schema\":{\"type\":\"object\"}}]}"},
    {"POST", "/v1/responses", NULL,
     "{\"model\":\"gpt\",\"instructions\":\"be brief\",\"input\":["
     "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"env\"}]},"
     "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]},"
     "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"think\"}]},"
     "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"ls\",\"arguments\":\"{}\"},"
     "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"a b\"},"
     "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]}],"
     "\"tools\":[{\"type\":\"function\",\"name\":\"ls\",\"description\":\"list\",\"parameters\":{\"type\":\"object\"}}],"
     "\"reasoning\":{\"effort\":\"low\"},\"max_output_tokens\":8,\"stream\":true}"},
    {"POST", "/v1beta/models/gemini-2.5-flash:generateContent", NULL,
     "{\"systemInstruction\":{\"parts\":[{\"text\":\"sys\"}]},\"contents\":["
     "{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]},"
     "{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"ls\",\"args\":{}}}]},"
     "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"ls\",\"response\":{\"output\":\"a\"}}}]}],"
     "\"tools\":[{\"functionDeclarations\":[{\"name\":\"ls\",\"description\":\"list\","
     "\"parameters\":{\"type\":\"object\"}}]}],\"generationConfig\":{\"temperature\":0,\"maxOutputTokens\":8}}"},
};

static void an_unknown_field_at_any_depth_is_accepted_and_listed(void **state) {
    (void)state;
    int n_routes = 0;
    for (size_t i = 0; i < sizeof k_bodies / sizeof k_bodies[0]; i++) {
        const hx_api_route *rt = hx_api_route_find(k_bodies[i].method, k_bodies[i].path, NULL);
        if (!rt) continue;  /* a dialect this build does not register */
        n_routes++;
        const char *bad = first_unlisted(rt, k_bodies[i].body, k_bodies[i].query);
        if (bad) fprintf(stderr, "%s: %s was refused, not listed, or changed the prompt\n", k_bodies[i].path, bad);
        assert_null(bad);
    }
    /* every dialect with a generation route is covered */
    int n_gen = 0;
    for (size_t d = 0; hx_api_dialects[d]; d++) n_gen += hx_api_route_of(hx_api_dialects[d], HX_API_OP_GENERATE) != NULL;
    assert_true(n_routes >= n_gen);
}

/* Claude Code 2.1.328's first request: a system-role message with output_config beside role and content, and
 * a top-level output_config (it had been a 400: "messages[1].output_config: unknown field"). */
static void claude_code_2_1_328s_output_config_is_accepted(void **state) {
    (void)state;
    const char *body = "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":32000,\"output_config\":{\"effort\":\"medium\"},"
                       "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"say hi\","
                       "\"cache_control\":{\"type\":\"ephemeral\"}}]},{\"role\":\"system\",\"content\":\"mode\","
                       "\"output_config\":{\"effort\":\"medium\"}}],\"stream\":true}";
    const hx_api_route *rt = hx_api_route_find("POST", "/v1/messages", NULL);
    hx_api_req q;
    hx_api_error e;
    assert_int_equal(rt->parse(rt, rt->path, NULL, body, strlen(body), &q, &e), ENG_OK);
    assert_int_equal(q.n_ignored, 3);
    assert_string_equal(q.params.ignored, "output_config,messages[].content[].cache_control,messages[].output_config");
    assert_int_equal(q.req.n_messages, 2);
    hx_api_req_free(&q);
    /* a wrongly typed known field is still a 400 naming it */
    const char *bad = "{\"max_tokens\":5,\"output_config\":{},\"messages\":[{\"role\":\"user\",\"content\":7}]}";
    assert_int_equal(rt->parse(rt, rt->path, NULL, bad, strlen(bad), &q, &e), ENG_ERR_FORMAT);
    assert_string_equal(e.field, "messages[0].content");
}

/* The checker catches a shape that claims a member it does not read (a parser that would drop an unknown
 * field silently), and a shape that refuses one. */
static const hx_api_shape blind = {.members = HX_API_MEMBERS({"prompt", NULL}, {"zz_new", NULL})};

static int parse_with_blind_shape(const hx_api_route *rt, const char *path, const char *query, const char *body,
                                  size_t n, hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    int rc = json_is_string(json_object_get(j, "prompt")) && (q->req.prompt = strdup(json_string_value(json_object_get(j, "prompt"))))
                 ? hx_api_note_unknown(q, j, &blind) : hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "missing");
    json_decref(j);
    return rc;
}

static int parse_refusing(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                          hx_api_req *q, hx_api_error *e) {
    int rc = rt[1].parse(rt, path, query, body, n, q, e);  /* the real /completion parser */
    if (!rc && q->params.ignored && strstr(q->params.ignored, "zz_new")) {
        hx_api_req_free(q);
        return hx_api_errf(e, HX_API_ERR_INVALID, "zz_new", "unknown field");
    }
    return rc;
}

static void the_checker_catches_a_silent_drop_and_a_refusal(void **state) {
    (void)state;
    const hx_api_route *real = hx_api_route_find("POST", "/completion", NULL);
    hx_api_route fake[2] = {*real, *real};
    fake[0].parse = parse_with_blind_shape;
    assert_non_null(first_unlisted(&fake[0], "{\"prompt\":\"hi\",\"x\":{\"y\":1}}", NULL));
    fake[0].parse = parse_refusing;
    assert_non_null(first_unlisted(&fake[0], "{\"prompt\":\"hi\",\"x\":{\"y\":1}}", NULL));
    /* and the real parser passes */
    assert_null(first_unlisted(real, "{\"prompt\":\"hi\",\"x\":{\"y\":1}}", NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_unknown_field_at_any_depth_is_accepted_and_listed),
        cmocka_unit_test(claude_code_2_1_328s_output_config_is_accepted),
        cmocka_unit_test(the_checker_catches_a_silent_drop_and_a_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
