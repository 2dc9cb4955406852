/*
 * tests/test_transcript.c: transcript formats v1 and v2: parsing every
 * field, the FILE:LINE: FIELD error contract, canonical writing (write ->
 * read -> write is byte-identical), v2's compact lines (a session stored
 * once; a line after a skipped one cannot be rebuilt), header, usage and
 * notes, and a seeded fuzz of truncations and byte flips.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <gsl/gsl_rng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "str.h"
#include "template.h"
#include "transcript.h"
#include "util.h"

#define SAMPLE "tests/data/transcript_sample.jsonl"

static int parse_str(const char *text, bool skip_bad, hx_transcript *t, int64_t *skipped, char *err, size_t n) {
    return hx_transcript_parse(text, strlen(text), "t.jsonl", skip_bad, t, skipped, err, n);
}

static void sample_with_every_field_parses(void **state) {
    (void)state;
    hx_transcript t;
    char err[512] = "";
    int64_t skipped = -1;
    assert_int_equal(hx_transcript_read(SAMPLE, false, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 0);
    assert_int_equal(t.n, 5);
    const hx_request *r0 = &t.reqs[0], *r1 = &t.reqs[1];
    assert_string_equal(r0->session, "demo");
    assert_int_equal(r0->turn, 0);
    assert_int_equal(r0->line, 1);
    assert_int_equal(hx_request_kind_of(r0), HX_REQUEST_MESSAGES);
    assert_int_equal(r0->n_system, 1);
    assert_string_equal(r0->system[0].text, "You are a test assistant.");
    assert_int_equal(r0->n_tools, 1);
    assert_string_equal(r0->tools[0].schema,
                        "{\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"],\"type\":\"object\"}");
    assert_int_equal(r0->response.n_blocks, 3);
    assert_int_equal(r0->response.blocks[0].type, HX_BLOCK_THINKING);
    assert_string_equal(r0->response.blocks[0].text, "Just read it.");
    assert_int_equal(r0->response.blocks[2].type, HX_BLOCK_TOOL_USE);
    assert_string_equal(r0->response.blocks[2].id, "t1");
    assert_string_equal(r0->response.blocks[2].name, "Read");
    assert_string_equal(r0->response.blocks[2].input, "{\"path\":\"/etc/hostname\"}");
    assert_string_equal(r0->response.blocks[2].text, "");
    /* line 2: system as a string, a tool message, an image, a string response */
    assert_int_equal(r1->n_system, 1);
    assert_string_equal(r1->tools[0].schema, r0->tools[0].schema);
    assert_int_equal(r1->n_messages, 4);
    assert_true(hx_message_equal(&r1->messages[1], &r0->response));
    assert_int_equal(r1->messages[2].role, HX_ROLE_TOOL);
    assert_int_equal(r1->messages[2].blocks[0].type, HX_BLOCK_TOOL_RESULT);
    assert_string_equal(r1->messages[2].blocks[0].id, "t1");
    assert_string_equal(r1->messages[2].blocks[0].text, "devbox\n");
    assert_int_equal(r1->messages[3].blocks[0].type, HX_BLOCK_IMAGE);
    assert_string_equal(r1->messages[3].blocks[0].text, "[image]");
    assert_string_equal(r1->messages[3].blocks[1].text, "And this image? \xc3\xa9\xc3\xa8 \xe4\xb8\xad\xe6\x96\x87");
    assert_int_equal(r1->response.n_blocks, 1);
    assert_string_equal(r1->response.blocks[0].text, "It is a photo of a terminal.");
    /* prompt and tokens lines */
    assert_int_equal(hx_request_kind_of(&t.reqs[2]), HX_REQUEST_PROMPT);
    assert_string_equal(t.reqs[2].prompt, "Once upon a time");
    assert_string_equal(t.reqs[2].response_text, " there was a cat.");
    assert_int_equal(hx_request_kind_of(&t.reqs[3]), HX_REQUEST_TOKENS);
    assert_int_equal(t.reqs[3].n_tokens, 5);
    assert_int_equal(t.reqs[3].tokens[4], 378);
    assert_null(t.reqs[3].response_text);
    /* a tool_result with block content is flattened, is_error kept */
    const hx_block *tr = &t.reqs[4].messages[0].blocks[0];
    assert_string_equal(tr->text, "a\nb");
    assert_true(tr->is_error);
    assert_int_equal(t.reqs[4].response.n_blocks, 0);
    hx_transcript_free(&t);
    hx_transcript_free(&t); /* idempotent on a zeroed transcript */
}

static void reading_what_was_written_gives_identical_structures(void **state) {
    (void)state;
    hx_transcript a, b;
    char err[512] = "", *bytes;
    size_t n;
    assert_int_equal(hx_transcript_read(SAMPLE, false, &a, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_serialize(&a, &bytes, &n, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_parse(bytes, n, "w.jsonl", false, &b, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(a.n, b.n);
    for (int32_t i = 0; i < a.n; i++) assert_true(hx_request_equal(&a.reqs[i], &b.reqs[i]));
    free(bytes);
    hx_transcript_free(&a);
    hx_transcript_free(&b);
}

static void write_read_write_is_byte_identical(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr_tr_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p1[300], p2[300], err[512] = "";
    snprintf(p1, sizeof p1, "%s/a.jsonl", dir);
    snprintf(p2, sizeof p2, "%s/b.jsonl", dir);
    hx_transcript a, b;
    assert_int_equal(hx_transcript_read(SAMPLE, false, &a, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_write(p1, &a, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_read(p1, false, &b, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_write(p2, &b, err, sizeof err), ENG_OK);
    char *x, *y;
    size_t nx, ny;
    assert_int_equal(eng_read_file(p1, &x, &nx, err, sizeof err), ENG_OK);
    assert_int_equal(eng_read_file(p2, &y, &ny, err, sizeof err), ENG_OK);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    /* canonical line: fixed key order, compact; the session's next request is compact */
    const char *head = "{\"v\":2,\"session\":\"demo\",\"turn\":0,\"system\":[{\"type\":\"text\"";
    assert_true(strncmp(x, head, strlen(head)) == 0);
    const char *second = strchr(x, '\n') + 1;
    const char *head2 = "{\"v\":2,\"session\":\"demo\",\"turn\":1,\"prev\":0,";
    assert_true(strncmp(second, head2, strlen(head2)) == 0);
    free(x);
    free(y);
    hx_transcript_free(&a);
    hx_transcript_free(&b);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
}

static void tool_inputs_are_canonical_whatever_the_key_order(void **state) {
    (void)state;
    const char *text =
        "{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[],\"response\":{\"content\":["
        "{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"X\",\"input\":{\"z\":1,\"a\":{\"y\":[1,2],\"b\":\"\\u00e9\"}}},"
        "{\"type\":\"tool_use\",\"id\":\"b\",\"name\":\"X\",\"input\":{\"a\":{\"b\":\"\xc3\xa9\",\"y\":[1,2]},\"z\":1}}]}}\n";
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(text, false, &t, NULL, err, sizeof err), ENG_OK);
    const hx_message *m = &t.reqs[0].response;
    assert_string_equal(m->blocks[0].input, "{\"a\":{\"b\":\"\xc3\xa9\",\"y\":[1,2]},\"z\":1}");
    assert_string_equal(m->blocks[0].input, m->blocks[1].input);
    hx_transcript_free(&t);
}

static void unknown_block_type_names_file_line_and_field(void **state) {
    (void)state;
    const char *text =
        "{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"x\"}\n"
        "\n"
        "{\"v\":1,\"session\":\"s\",\"turn\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"foo\"}]}]}\n";
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(text, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:3: messages[1].content[0].type: unknown block type \"foo\"");
    assert_int_equal(t.n, 0);
    assert_null(t.reqs);
}

static void a_line_needs_exactly_one_of_messages_prompt_and_tokens(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str("{\"v\":1,\"session\":\"s\",\"turn\":0}", false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "t.jsonl:1: messages/prompt/tokens: a line needs exactly one of them (found none)"));
    assert_int_equal(parse_str("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"tokens\":[1]}", false, &t, NULL,
                               err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "more than one"));
}

static void duplicate_keys_are_rejected(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str("{\"v\":1,\"session\":\"s\",\"session\":\"t\",\"turn\":0,\"prompt\":\"a\"}", false, &t,
                               NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "t.jsonl:1: invalid JSON"));
    assert_non_null(strstr(err, "duplicate"));
}

static void bad_fields_are_named(void **state) {
    (void)state;
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"{\"v\":3,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\"}", "t.jsonl:1: v: unsupported version 3 (expected 1 or 2)"},
        {"{\"session\":\"s\",\"turn\":0,\"prompt\":\"a\"}", "t.jsonl:1: v: missing (expected 1 or 2)"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"notes\":[]}",
         "t.jsonl:1: notes: unknown field in a version 1 line (a version 2 field)"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":1,\"prev\":0,\"append\":[]}",
         "t.jsonl:1: prev: session \"s\" has no earlier request in this file"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"messages\":[],\"append\":[]}",
         "t.jsonl:1: append: allowed only on a compact line (one with prev)"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"messages\":[],\"usage\":{\"input_tokens\":1,"
         "\"cache_read_input_tokens\":2,\"cache_creation_input_tokens\":3,\"total\":7}}",
         "t.jsonl:1: usage.total: 7 is not the sum of the three counts (6)"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"messages\":[],\"usage\":{\"input_tokens\":1}}",
         "t.jsonl:1: usage.cache_read_input_tokens: missing"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"messages\":[],\"notes\":[1]}", "t.jsonl:1: notes[0]: expected a string"},
        {"{\"v\":1,\"turn\":0,\"prompt\":\"a\"}", "t.jsonl:1: session: missing"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":-1,\"prompt\":\"a\"}", "t.jsonl:1: turn: expected an integer in [0, 2147483647]"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"extra\":1}", "t.jsonl:1: extra: unknown field"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"tokens\":[1,-2]}", "t.jsonl:1: tokens[1]: expected a token id in [0, 2147483647]"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"\"}", "t.jsonl:1: prompt: empty"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"system\":\"x\"}", "t.jsonl:1: system: not allowed on a prompt or tokens line"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
         "t.jsonl:1: messages[0].role: unknown role \"bot\" (expected user, assistant, system or tool)"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[{\"role\":\"user\"}]}", "t.jsonl:1: messages[0].content: missing"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"b\",\"input\":[1]}]}]}",
         "t.jsonl:1: messages[0].content[0].input: expected a JSON object"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
         "t.jsonl:1: messages[0].tool_call_id: missing (a tool message with string content needs it)"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"system\":[{\"type\":\"image\"}],\"messages\":[]}",
         "t.jsonl:1: system[0].type: a system block must be \"text\", not \"image\""},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"tools\":[{\"description\":\"d\"}],\"messages\":[]}", "t.jsonl:1: tools[0].name: missing"},
        {"[1,2]", "t.jsonl:1: a line must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hx_transcript t;
        char err[256] = "";
        assert_int_equal(parse_str(cases[i].line, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
        assert_string_equal(err, cases[i].want);
    }
}

static void invalid_utf8_is_rejected(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\xff\"}", false, &t, NULL, err, sizeof err),
                     ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "t.jsonl:1: invalid JSON"));
}

static void turns_must_increase_within_a_session(void **state) {
    (void)state;
    const char *text = "{\"v\":1,\"session\":\"a\",\"turn\":3,\"prompt\":\"x\"}\n"
                       "{\"v\":1,\"session\":\"b\",\"turn\":0,\"prompt\":\"x\"}\n"
                       "{\"v\":1,\"session\":\"a\",\"turn\":3,\"prompt\":\"x\"}\n";
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(text, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:3: turn: 3 is not greater than the previous turn 3 of session \"a\"");
}

static void skip_bad_skips_and_counts_bad_lines(void **state) {
    (void)state;
    const char *text = "{\"v\":1,\"session\":\"a\",\"turn\":0,\"prompt\":\"x\"}\r\n"
                       "{not json\n"
                       "{\"v\":1,\"session\":\"a\",\"turn\":0,\"prompt\":\"dup turn\"}\n"
                       "{\"v\":1,\"session\":\"a\",\"turn\":1,\"tokens\":[5]}";
    hx_transcript t;
    int64_t skipped = 0;
    char err[256] = "";
    assert_int_equal(parse_str(text, true, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 2);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.reqs[1].line, 4);
    hx_transcript_free(&t);
}

static void missing_file_is_an_io_error(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(hx_transcript_read("/nonexistent/t.jsonl", false, &t, NULL, err, sizeof err), ENG_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/t.jsonl"));
    assert_int_equal(t.n, 0);
}

static void copies_are_deep_and_equal(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(hx_transcript_read(SAMPLE, false, &t, NULL, err, sizeof err), ENG_OK);
    for (int32_t i = 0; i < t.n; i++) {
        hx_request c;
        assert_int_equal(hx_request_copy(&c, &t.reqs[i]), ENG_OK);
        assert_true(hx_request_equal(&c, &t.reqs[i]));
        if (c.n_messages) {
            c.messages[0].blocks[0].text[0] ^= 1; /* a planted difference is seen */
            assert_false(hx_request_equal(&c, &t.reqs[i]));
        }
        hx_request_free(&c);
    }
    hx_transcript_free(&t);
}

static void string_map_inserts_overwrites_and_grows(void **state) {
    (void)state;
    hx_strmap m = {0};
    char k[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        assert_int_equal(hx_strmap_put(&m, k, i), ENG_OK);
    }
    assert_int_equal(hx_strmap_put(&m, "key-7", 70), ENG_OK);
    int64_t v = 0;
    assert_true(hx_strmap_get(&m, "key-7", &v));
    assert_int_equal(v, 70);
    assert_true(hx_strmap_get(&m, "key-999", &v));
    assert_int_equal(v, 999);
    assert_false(hx_strmap_get(&m, "key-1000", NULL));
    assert_int_equal(m.n, 1000);
    hx_strmap_free(&m);
}

// ----------------------------------------------------------------------------
// Fuzz: seeded truncations, byte flips, deletions and insertions

/* Mutates buf (n bytes, capacity cap) in place; returns the new length. */
static size_t fuzz_mutate(gsl_rng *r, char *buf, size_t n, size_t cap) {
    static const char junk[] = "{}[]\":,\\\n0a \xff\xc3";
    int ops = 1 + (int)gsl_rng_uniform_int(r, 3);
    for (int k = 0; k < ops && n > 0; k++) {
        size_t at = gsl_rng_uniform_int(r, n);
        switch (gsl_rng_uniform_int(r, 5)) {
        case 0: n = at; break;                                                   /* truncate */
        case 1: buf[at] ^= (char)(1u << gsl_rng_uniform_int(r, 8)); break;      /* bit flip */
        case 2: buf[at] = junk[gsl_rng_uniform_int(r, sizeof junk - 1)]; break;  /* byte swap */
        case 3: {                                                                /* delete a span */
            size_t len = 1 + gsl_rng_uniform_int(r, 16);
            if (at + len > n) len = n - at;
            memmove(buf + at, buf + at + len, n - at - len);
            n -= len;
            break;
        }
        default:                                                                 /* insert a byte */
            if (n + 1 < cap) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = junk[gsl_rng_uniform_int(r, sizeof junk - 1)];
                n++;
            }
        }
    }
    return n;
}

static void fuzzed_transcripts_parse_or_fail_with_a_message(void **state) {
    (void)state;
    char *orig, err[512];
    size_t n0;
    assert_int_equal(eng_read_file(SAMPLE, &orig, &n0, err, sizeof err), ENG_OK);
    char *buf = malloc(n0 + 64);
    assert_non_null(buf);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 12345);
    int ok = 0, bad = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, n0);
        size_t n = fuzz_mutate(r, buf, n0, n0 + 64);
        hx_transcript t;
        err[0] = '\0';
        int rc = hx_transcript_parse(buf, n, "fz.jsonl", it % 2 == 0, &t, NULL, err, sizeof err);
        assert_true(rc == ENG_OK || rc == ENG_ERR_FORMAT);
        if (rc == ENG_ERR_FORMAT) {
            assert_true(strncmp(err, "fz.jsonl:", 9) == 0);
            bad++;
            continue;
        }
        ok++;
        /* what parses round-trips and renders */
        char *bytes;
        size_t nb;
        hx_transcript u;
        assert_int_equal(hx_transcript_serialize(&t, &bytes, &nb, err, sizeof err), ENG_OK);
        assert_int_equal(hx_transcript_parse(bytes, nb, "rt", false, &u, NULL, err, sizeof err), ENG_OK);
        assert_int_equal(u.n, t.n);
        for (int32_t i = 0; i < t.n; i++) {
            assert_true(hx_request_equal(&t.reqs[i], &u.reqs[i]));
            hx_render p;
            if (hx_request_kind_of(&t.reqs[i]) != HX_REQUEST_TOKENS) {
                assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &t.reqs[i], &p, err, sizeof err), ENG_OK);
                hx_render_free(&p);
            }
        }
        free(bytes);
        hx_transcript_free(&u);
        hx_transcript_free(&t);
    }
    print_message("fuzz: %d parsed, %d rejected\n", ok, bad);
    assert_true(ok > 0 && bad > 0);
    gsl_rng_free(r);
    free(buf);
    free(orig);
}


// ----------------------------------------------------------------------------
// Format v2: compact lines, header, usage, notes

static const char k_v2[] =
    "{\"v\":2,\"header\":{\"format\":\"test\",\"requests\":3}}\n"
    "{\"v\":2,\"session\":\"a\",\"turn\":0,\"system\":[{\"type\":\"text\",\"text\":\"H cch=11111;\"},{\"type\":\"text\",\"text\":\"S\"}],"
    "\"tools\":[{\"name\":\"Read\",\"description\":\"d\",\"input_schema\":{}}],"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response\":{\"content\":[{\"type\":\"text\",\"text\":\"yo\"}]},"
    "\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":10,\"cache_creation_input_tokens\":7,\"total\":20},"
    "\"notes\":[\"made by hand\"]}\n"
    "{\"v\":2,\"session\":\"a\",\"turn\":1,\"prev\":0,\"system\":[{\"type\":\"text\",\"text\":\"H cch=22222;\"},null],"
    "\"append\":[{\"role\":\"user\",\"content\":\"more\"}],\"response\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n"
    "{\"v\":2,\"session\":\"a\",\"turn\":2,\"prev\":1,\"prev_response\":false,\"tools\":[],"
    "\"append\":[{\"role\":\"user\",\"content\":\"again\"}]}\n";

static void compact_lines_rebuild_whole_requests(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(k_v2, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 3);
    assert_string_equal(t.header, "{\"format\":\"test\",\"requests\":3}");
    const hx_request *r1 = &t.reqs[1], *r2 = &t.reqs[2];
    /* turn 1: turn 0's messages + its response + the appended message; system block 1 inherited */
    assert_int_equal(r1->n_messages, 3);
    assert_int_equal(r1->messages[1].role, HX_ROLE_ASSISTANT);
    assert_string_equal(r1->messages[1].blocks[0].text, "yo");
    assert_string_equal(r1->messages[2].blocks[0].text, "more");
    assert_int_equal(r1->n_system, 2);
    assert_string_equal(r1->system[0].text, "H cch=22222;");
    assert_string_equal(r1->system[1].text, "S");
    assert_int_equal(r1->n_tools, 1);
    /* turn 2: without turn 1's response, tools replaced by none, system inherited whole */
    assert_int_equal(r2->n_messages, 4);
    assert_string_equal(r2->messages[3].blocks[0].text, "again");
    assert_int_equal(r2->n_tools, 0);
    assert_string_equal(r2->system[0].text, "H cch=22222;");
    assert_int_equal(r2->response.n_blocks, 0);
    /* usage and notes */
    assert_true(t.reqs[0].usage.present);
    assert_int_equal(hx_call_usage_total(&t.reqs[0].usage), 20);
    assert_int_equal(t.reqs[0].usage.prompt_tokens, -1);
    assert_string_equal(t.reqs[0].notes, "[\"made by hand\"]");
    assert_false(r1->usage.present);
    /* the same rendered prompt as the whole line it stands for */
    hx_render a;
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, r2, &a, err, sizeof err), ENG_OK);
    const char *want =
        "<|im_start|>system\nH cch=22222;S<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
        "<|im_start|>user\nmore<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n";
    assert_string_equal(a.text, want);
    hx_render_free(&a);
    /* written back: compact again, and byte-identical after another round */
    char *x, *y;
    size_t nx, ny;
    assert_int_equal(hx_transcript_serialize(&t, &x, &nx, err, sizeof err), ENG_OK);
    hx_transcript u;
    assert_int_equal(hx_transcript_parse(x, nx, "w", false, &u, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_serialize(&u, &y, &ny, err, sizeof err), ENG_OK);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    for (int32_t i = 0; i < t.n; i++) assert_true(hx_request_equal(&t.reqs[i], &u.reqs[i]));
    assert_non_null(strstr(x, "\"prev\":1,\"prev_response\":false,\"tools\":[]"));
    assert_non_null(strstr(x, "\"system\":[{\"type\":\"text\",\"text\":\"H cch=22222;\"},null]"));
    assert_non_null(strstr(x, "\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":10,"
                              "\"cache_creation_input_tokens\":7,\"total\":20},\"notes\":[\"made by hand\"]}"));
    /* version 1: self-contained lines, no v2 fields; the same structures */
    char *v1;
    size_t n1;
    assert_int_equal(hx_transcript_serialize_version(&t, 1, &v1, &n1, err, sizeof err), ENG_OK);
    assert_null(strstr(v1, "\"prev\""));
    assert_null(strstr(v1, "\"usage\""));
    assert_null(strstr(v1, "\"header\""));
    hx_transcript w;
    assert_int_equal(hx_transcript_parse(v1, n1, "v1", false, &w, NULL, err, sizeof err), ENG_OK);
    for (int32_t i = 0; i < t.n; i++) assert_true(hx_request_equal(&t.reqs[i], &w.reqs[i]));
    free(x);
    free(y);
    free(v1);
    hx_transcript_free(&t);
    hx_transcript_free(&u);
    hx_transcript_free(&w);
}

static void a_compact_line_after_a_skipped_line_is_skipped_too(void **state) {
    (void)state;
    /* turn 1 is damaged: turn 2 extends it and cannot be rebuilt; session b is untouched */
    const char *text =
        "{\"v\":2,\"session\":\"a\",\"turn\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n"
        "{\"v\":2,\"session\":\"a\",\"turn\":1,\"prev\":0,\"append\":[{\"role\":\"robot\",\"content\":\"x\"}]}\n"
        "{\"v\":2,\"session\":\"b\",\"turn\":0,\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n"
        "{\"v\":2,\"session\":\"a\",\"turn\":2,\"prev\":1,\"append\":[{\"role\":\"user\",\"content\":\"y\"}]}\n"
        "{\"v\":2,\"session\":\"a\",\"turn\":3,\"messages\":[{\"role\":\"user\",\"content\":\"fresh\"}]}\n"
        "{\"v\":2,\"session\":\"a\",\"turn\":4,\"prev\":3,\"append\":[{\"role\":\"user\",\"content\":\"z\"}]}\n";
    hx_transcript t;
    char err[256] = "";
    int64_t skipped = 0;
    assert_int_equal(parse_str(text, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:2: append[0].role: unknown role \"robot\" (expected user, assistant, system or tool)");
    assert_int_equal(parse_str(text, true, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 2);
    assert_int_equal(t.n, 4);
    assert_string_equal(t.reqs[1].session, "b");
    assert_int_equal(t.reqs[2].turn, 3);
    assert_int_equal(t.reqs[3].n_messages, 2); /* a whole line restores the chain */
    assert_string_equal(t.reqs[3].messages[1].blocks[0].text, "z");
    hx_transcript_free(&t);
    /* the message names the skipped line */
    const char *two = "{\"v\":2,\"session\":\"a\",\"turn\":0,\"messages\":[]}\n{\"v\":2,\"session\":\"a\",\"turn\":1,\"prompt\":7}\n"
                      "{\"v\":2,\"session\":\"a\",\"turn\":2,\"prev\":0,\"append\":[]}\n";
    assert_int_equal(parse_str(two, true, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 2);
    hx_transcript_free(&t);
    const char *wrong = "{\"v\":2,\"session\":\"a\",\"turn\":0,\"messages\":[]}\n"
                        "{\"v\":2,\"session\":\"a\",\"turn\":1,\"prev\":5,\"append\":[]}\n";
    assert_int_equal(parse_str(wrong, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:2: prev: 5 is not the turn of the previous request of session \"a\" (0)");
    const char *late = "{\"v\":2,\"session\":\"a\",\"turn\":0,\"messages\":[]}\n{\"v\":2,\"header\":{}}\n";
    assert_int_equal(parse_str(late, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:2: header: allowed only on the first line");
    const char *nullsys = "{\"v\":2,\"session\":\"a\",\"turn\":0,\"system\":\"s\",\"messages\":[]}\n"
                          "{\"v\":2,\"session\":\"a\",\"turn\":1,\"prev\":0,\"system\":[null,null],\"append\":[]}\n";
    assert_int_equal(parse_str(nullsys, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl:2: system[1]: null (the previous request's block) but the previous request has 1 system blocks");
}

static void a_byte_order_mark_is_accepted_and_utf16_is_refused_by_name(void **state) {
    (void)state;
    const char *line = "{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\"}\n";
    char buf[128];
    snprintf(buf, sizeof buf, "\xEF\xBB\xBF%s", line);
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(buf, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_string_equal(t.reqs[0].prompt, "a");
    hx_transcript_free(&t);
    const char u16[] = "\xFF\xFE{\0\"\0v\0\"\0";
    assert_int_equal(hx_transcript_parse(u16, sizeof u16 - 1, "w.jsonl", false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_true(strncmp(err, "w.jsonl: the file is UTF-16 encoded", 35) == 0);
    assert_non_null(strstr(err, "iconv -f UTF-16 -t UTF-8"));
    /* a pretty-printed document is named as such */
    const char *pretty = "{\n  \"v\": 1,\n  \"session\": \"s\",\n  \"turn\": 0,\n  \"prompt\": \"a\"\n}\n";
    assert_int_equal(parse_str(pretty, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "t.jsonl: the file is one pretty-printed JSON object (7 lines), not JSONL (one JSON object "
                             "per line); convert it with: jq -c . t.jsonl");
    /* an integer beyond 2^63-1 in meta (not read) does not fail the line */
    const char *big = "{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"meta\":{\"inode\":18446744073709551616}}\n";
    assert_int_equal(parse_str(big, false, &t, NULL, err, sizeof err), ENG_OK);
    hx_transcript_free(&t);
}

/* v2 `served` (kvreplay serve --record): kept verbatim (canonical), written
 * back byte-identical line by line, its id_slot and cache_prompt read as the
 * request's hint, wrong types named. */
static void a_served_request_keeps_how_it_was_received(void **state) {
    (void)state;
    const char *text =
        "{\"v\":2,\"header\":{\"format\":\"kvreplay-serve\"}}\n"
        "{\"v\":2,\"session\":\"serve-0\",\"turn\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"hi\"}]}],\"response\":{\"content\":[{\"type\":\"text\",\"text\":\"yo\"}]},"
        "\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":0,\"total\":5},"
        "\"served\":{\"api\":\"anthropic\",\"body\":\"{\\\"max_tokens\\\": 5}\",\"cache_prompt\":false,\"id_slot\":1}}\n"
        "{\"v\":2,\"session\":\"serve-0\",\"turn\":1,\"prev\":0,\"append\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"more\"}]}],\"response\":{\"content\":[]},\"served\":{\"api\":\"anthropic\"}}\n";
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(parse_str(text, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.reqs[0].served, "{\"api\":\"anthropic\",\"body\":\"{\\\"max_tokens\\\": 5}\","
                                          "\"cache_prompt\":false,\"id_slot\":1}");
    int32_t slot;
    bool no_reuse;
    hx_request_served_hint(&t.reqs[0], &slot, &no_reuse);
    assert_int_equal(slot, 1);
    assert_true(no_reuse);
    hx_request_served_hint(&t.reqs[1], &slot, &no_reuse);
    assert_int_equal(slot, -1);
    assert_false(no_reuse);
    /* line by line as the whole file writes it (the header, then compact lines) */
    char *whole, *line;
    size_t nw, nl;
    assert_int_equal(hx_transcript_serialize(&t, &whole, &nw, err, sizeof err), ENG_OK);
    assert_int_equal(nw, strlen(text));
    assert_memory_equal(whole, text, nw);
    eng_buf b = {0};
    assert_int_equal(hx_request_serialize_line(NULL, NULL, t.header, &line, &nl, err, sizeof err), ENG_OK);
    eng_buf_append(&b, line, nl);
    eng_buf_append(&b, "\n", 1);
    free(line);
    for (int32_t i = 0; i < t.n; i++) {
        assert_int_equal(hx_request_serialize_line(&t.reqs[i], i ? &t.reqs[i - 1] : NULL, NULL, &line, &nl, err,
                                                   sizeof err), ENG_OK);
        eng_buf_append(&b, line, nl);
        eng_buf_append(&b, "\n", 1);
        free(line);
    }
    assert_int_equal(b.len, nw);
    assert_memory_equal(b.data, whole, nw);
    eng_buf_free(&b);
    free(whole);
    hx_transcript_free(&t);
    static const struct { const char *line, *field; } bad[] = {
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"served\":[]}", "served"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"served\":{\"id_slot\":-2}}", "served.id_slot"},
        {"{\"v\":2,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"served\":{\"cache_prompt\":0}}", "served.cache_prompt"},
        {"{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"a\",\"served\":{}}", "served"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse_str(bad[i].line, false, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
        char want[64];
        snprintf(want, sizeof want, "t.jsonl:1: %s: ", bad[i].field);
        assert_int_equal(strncmp(err, want, strlen(want)), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_served_request_keeps_how_it_was_received),
        cmocka_unit_test(compact_lines_rebuild_whole_requests),
        cmocka_unit_test(a_compact_line_after_a_skipped_line_is_skipped_too),
        cmocka_unit_test(a_byte_order_mark_is_accepted_and_utf16_is_refused_by_name),
        cmocka_unit_test(sample_with_every_field_parses),
        cmocka_unit_test(reading_what_was_written_gives_identical_structures),
        cmocka_unit_test(write_read_write_is_byte_identical),
        cmocka_unit_test(tool_inputs_are_canonical_whatever_the_key_order),
        cmocka_unit_test(unknown_block_type_names_file_line_and_field),
        cmocka_unit_test(a_line_needs_exactly_one_of_messages_prompt_and_tokens),
        cmocka_unit_test(duplicate_keys_are_rejected),
        cmocka_unit_test(bad_fields_are_named),
        cmocka_unit_test(invalid_utf8_is_rejected),
        cmocka_unit_test(turns_must_increase_within_a_session),
        cmocka_unit_test(skip_bad_skips_and_counts_bad_lines),
        cmocka_unit_test(missing_file_is_an_io_error),
        cmocka_unit_test(copies_are_deep_and_equal),
        cmocka_unit_test(string_map_inserts_overwrites_and_grows),
        cmocka_unit_test(fuzzed_transcripts_parse_or_fail_with_a_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
