/*
 * tests/test_template.c: chat templates (exact text of every template, the
 * span map, the prefix property and a planted fault that breaks it) and the
 * prompt normalization rules (anthropic-cch).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normalize.h"
#include "status.h"
#include "str.h"
#include "template.h"
#include "transcript.h"

/* Parses one v1 line (asserting success) into *r. */
static void load(const char *json, hx_request *r) {
    char err[512] = "";
    int rc = hx_request_parse(json, strlen(json), "test", 1, r, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
}

#define R0_MSGS "{\"role\":\"user\",\"content\":\"Read a.txt\"}"
#define R0_RESP "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Need to read.\"},{\"type\":\"text\",\"text\":\"Reading.\"}," \
                "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Read\",\"input\":{\"path\":\"a.txt\"}}]}"
#define R1_TOOL "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"hello\"}"
#define SYS "\"system\":[{\"type\":\"text\",\"text\":\"You are helpful.\"},{\"type\":\"text\",\"text\":\" Be brief.\"}]"
#define TOOLS "\"tools\":[{\"name\":\"Read\",\"description\":\"Read a file.\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}]"

/* The small conversation every exact-text test renders: system, user, assistant
 * (thinking, text, tool_use), tool result; response "It says hello." */
static const char k_req[] = "{\"v\":1,\"session\":\"s\",\"turn\":1," SYS ",\"messages\":[" R0_MSGS "," R0_RESP "," R1_TOOL
                            "],\"response\":\"It says hello.\"}";

static void check_render(hx_template t, const char *want_prompt, const char *want_response) {
    hx_request r;
    load(k_req, &r);
    hx_render p, q;
    char err[256];
    assert_int_equal(hx_render_prompt(t, &r, &p, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_response(t, &r, &q, err, sizeof err), ENG_OK);
    assert_string_equal(p.text, want_prompt);
    assert_int_equal(p.len, strlen(want_prompt));
    assert_string_equal(q.text, want_response);
    hx_render_free(&p);
    hx_render_free(&q);
    hx_render_free(&q);
    hx_request_free(&r);
}

static void chatml_renders_the_documented_text(void **state) {
    (void)state;
    check_render(HX_TEMPLATE_CHATML,
                 "<|im_start|>system\nYou are helpful. Be brief.<|im_end|>\n"
                 "<|im_start|>user\nRead a.txt<|im_end|>\n"
                 "<|im_start|>assistant\n<think>\nNeed to read.\n</think>\n\nReading.\n<tool_call>\n"
                 "{\"name\":\"Read\",\"arguments\":{\"path\":\"a.txt\"}}\n</tool_call><|im_end|>\n"
                 "<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n"
                 "<|im_start|>assistant\n",
                 "It says hello.<|im_end|>\n");
}

static void llama3_renders_the_documented_text(void **state) {
    (void)state;
    check_render(HX_TEMPLATE_LLAMA3,
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful. Be brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nRead a.txt<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n<think>\nNeed to read.\n</think>\n\nReading.\n"
                 "{\"name\":\"Read\",\"parameters\":{\"path\":\"a.txt\"}}<|eot_id|>"
                 "<|start_header_id|>ipython<|end_header_id|>\n\nhello<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n",
                 "It says hello.<|eot_id|>");
}

static void llama2_renders_the_documented_text(void **state) {
    (void)state;
    check_render(HX_TEMPLATE_LLAMA2,
                 "[INST] <<SYS>>\nYou are helpful. Be brief.\n<</SYS>>\n\nRead a.txt [/INST] <think>\nNeed to read.\n"
                 "</think>\n\nReading.\n<tool_call>\n{\"name\":\"Read\",\"arguments\":{\"path\":\"a.txt\"}}\n</tool_call> </s>"
                 "<s>[INST] <tool_response>\nhello\n</tool_response> [/INST]",
                 " It says hello. </s>");
}

static void raw_renders_the_documented_text(void **state) {
    (void)state;
    check_render(HX_TEMPLATE_RAW,
                 "You are helpful. Be brief.\n\nUser: Read a.txt\n\nAssistant: <think>\nNeed to read.\n</think>\n\n"
                 "Reading.\n<tool_call>\n{\"name\":\"Read\",\"arguments\":{\"path\":\"a.txt\"}}\n</tool_call>\n\n"
                 "Tool: <tool_response>\nhello\n</tool_response>\n\nAssistant: ",
                 "It says hello.\n\n");
}

static void tools_are_rendered_as_canonical_json_inside_the_system_turn(void **state) {
    (void)state;
    hx_request r;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0," SYS "," TOOLS ",\"messages\":[" R0_MSGS "]}", &r);
    hx_render p;
    char err[256];
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &r, &p, err, sizeof err), ENG_OK);
    const char *want_tool = "<tools>\n{\"function\":{\"description\":\"Read a file.\",\"name\":\"Read\",\"parameters\":"
                            "{\"properties\":{\"path\":{\"type\":\"string\"}},\"type\":\"object\"}},\"type\":\"function\"}\n</tools>";
    const char *at = strstr(p.text, want_tool);
    assert_non_null(at);
    assert_true(strncmp(p.text, "<|im_start|>system\nYou are helpful. Be brief.\n\n# Tools\n\n", 56) == 0);
    size_t end = hx_render_system_end(&p);
    assert_true(end > (size_t)(at - p.text));
    assert_true(strncmp(p.text + end - 11, "<|im_end|>\n", 11) == 0);
    assert_true(strncmp(p.text + end, "<|im_start|>user\n", 17) == 0);
    const hx_span *s = hx_render_find(&p, (size_t)(at - p.text) + 8);
    assert_non_null(s);
    assert_int_equal(s->part, HX_PART_TOOLS);
    assert_int_equal(s->index, 0);
    char where[128];
    assert_string_equal(hx_span_describe(s, &r, where, sizeof where), "tool 0 (Read)");
    hx_render_free(&p);
    hx_request_free(&r);
}

static void spans_partition_the_text_in_order(void **state) {
    (void)state;
    hx_request r;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0," SYS "," TOOLS ",\"messages\":[" R0_MSGS "," R0_RESP "," R1_TOOL
         "],\"response\":{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}}", &r);
    char err[256];
    for (int t = 0; t < HX_TEMPLATE_COUNT; t++) {
        hx_render rs[2];
        assert_int_equal(hx_render_prompt((hx_template)t, &r, &rs[0], err, sizeof err), ENG_OK);
        assert_int_equal(hx_render_response((hx_template)t, &r, &rs[1], err, sizeof err), ENG_OK);
        for (int k = 0; k < 2; k++) {
            const hx_render *p = &rs[k];
            assert_true(p->n_spans > 0);
            assert_int_equal(p->spans[0].begin, 0);
            assert_int_equal(p->spans[p->n_spans - 1].end, p->len);
            for (int32_t i = 0; i < p->n_spans; i++) {
                assert_true(p->spans[i].begin < p->spans[i].end);
                if (i) assert_int_equal(p->spans[i].begin, p->spans[i - 1].end);
                if (i) /* merged: no two neighbours share a key */
                    assert_false(p->spans[i].part == p->spans[i - 1].part && p->spans[i].index == p->spans[i - 1].index &&
                                 p->spans[i].block == p->spans[i - 1].block);
            }
            assert_ptr_equal(hx_render_find(p, p->len - 1), &p->spans[p->n_spans - 1]);
            assert_null(hx_render_find(p, p->len));
        }
        assert_int_equal(rs[1].spans[0].part, HX_PART_RESPONSE);
        hx_render_free(&rs[0]);
        hx_render_free(&rs[1]);
    }
    hx_request_free(&r);
}

static void first_difference_is_located_in_message_and_block(void **state) {
    (void)state;
    hx_request a, b;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0," SYS ",\"messages\":[" R0_MSGS "," R0_RESP
         ",{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"hello\"}]}", &a);
    load("{\"v\":1,\"session\":\"s\",\"turn\":1," SYS ",\"messages\":[" R0_MSGS "," R0_RESP
         ",{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"hellO\"}]}", &b);
    hx_render pa, pb;
    char err[256], where[128];
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &a, &pa, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &b, &pb, err, sizeof err), ENG_OK);
    size_t x = hx_common_prefix(pa.text, pa.len, pb.text, pb.len);
    assert_int_equal(pb.text[x], 'O');
    assert_string_equal(hx_span_describe(hx_render_find(&pb, x), &b, where, sizeof where),
                        "message 2 (tool) block 0 (tool_result)");
    assert_string_equal(hx_span_describe(hx_render_find(&pb, 0), &b, where, sizeof where), "system turn (framing)");
    assert_string_equal(hx_span_describe(hx_render_find(&pb, pb.len - 1), &b, where, sizeof where), "generation prompt");
    assert_string_equal(hx_span_describe(NULL, &b, where, sizeof where), "end of text");
    hx_render_free(&pa);
    hx_render_free(&pb);
    hx_request_free(&a);
    hx_request_free(&b);
}

/* render_prompt(a) + render_response(a) is a prefix of render_prompt(b). */
static bool prefix_holds(hx_template t, const hx_request *a, const hx_request *b) {
    hx_render pa, ra, pb;
    char err[256];
    assert_int_equal(hx_render_prompt(t, a, &pa, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_response(t, a, &ra, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_prompt(t, b, &pb, err, sizeof err), ENG_OK);
    bool ok = pa.len + ra.len <= pb.len && memcmp(pb.text, pa.text, pa.len) == 0 &&
              memcmp(pb.text + pa.len, ra.text, ra.len) == 0;
    hx_render_free(&pa);
    hx_render_free(&ra);
    hx_render_free(&pb);
    return ok;
}

static void render_prompt_plus_response_is_a_prefix_of_the_next_prompt(void **state) {
    (void)state;
    /* with and without system/tools (llama2's open [INST] case), for every template */
    const char *heads[] = {SYS "," TOOLS ",", "", SYS ","};
    for (size_t h = 0; h < 3; h++) {
        char l0[2048], l1[2048], l2[2048];
        /* R0_RESP without its role: {"content":[...]} */
        snprintf(l0, sizeof l0, "{\"v\":1,\"session\":\"s\",\"turn\":0,%s\"messages\":[" R0_MSGS "],\"response\":{%s}",
                 heads[h], R0_RESP + strlen("{\"role\":\"assistant\","));
        snprintf(l1, sizeof l1, "{\"v\":1,\"session\":\"s\",\"turn\":1,%s\"messages\":[" R0_MSGS "," R0_RESP "," R1_TOOL
                 "],\"response\":\"It says hello.\"}", heads[h]);
        snprintf(l2, sizeof l2, "{\"v\":1,\"session\":\"s\",\"turn\":2,%s\"messages\":[" R0_MSGS "," R0_RESP "," R1_TOOL
                 ",{\"role\":\"assistant\",\"content\":\"It says hello.\"},{\"role\":\"user\",\"content\":\"Thanks!\"}]}", heads[h]);
        hx_request r0, r1, r2;
        load(l0, &r0);
        load(l1, &r1);
        load(l2, &r2);
        assert_int_equal(r0.response.n_blocks, 3);
        for (int t = 0; t < HX_TEMPLATE_COUNT; t++) {
            assert_true(prefix_holds((hx_template)t, &r0, &r1));
            assert_true(prefix_holds((hx_template)t, &r1, &r2));
        }
        hx_request_free(&r0);
        hx_request_free(&r1);
        hx_request_free(&r2);
    }
}

static void prefix_check_fails_when_history_drops_the_thinking(void **state) {
    (void)state;
    /* a planted fault: the next request's history lacks the response's thinking block
     * (what templates that strip earlier reasoning do): the property must fail */
    hx_request r0, r1;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0,\"messages\":[" R0_MSGS "],\"response\":{\"content\":["
         "{\"type\":\"thinking\",\"thinking\":\"Need to read.\"},{\"type\":\"text\",\"text\":\"Reading.\"}]}}", &r0);
    load("{\"v\":1,\"session\":\"s\",\"turn\":1,\"messages\":[" R0_MSGS ",{\"role\":\"assistant\",\"content\":\"Reading.\"},"
         "{\"role\":\"user\",\"content\":\"ok\"}]}", &r1);
    for (int t = 0; t < HX_TEMPLATE_COUNT; t++) assert_false(prefix_holds((hx_template)t, &r0, &r1));
    hx_request_free(&r0);
    hx_request_free(&r1);
}

static void prompt_lines_render_verbatim_and_token_lines_have_no_text(void **state) {
    (void)state;
    hx_request p, t;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"<|im_start|>raw\",\"response\":\" tail\"}", &p);
    load("{\"v\":1,\"session\":\"s\",\"turn\":1,\"tokens\":[1,2,3]}", &t);
    hx_render r;
    char err[256] = "";
    for (int k = 0; k < HX_TEMPLATE_COUNT; k++) {
        assert_int_equal(hx_render_prompt((hx_template)k, &p, &r, err, sizeof err), ENG_OK);
        assert_string_equal(r.text, "<|im_start|>raw");
        assert_int_equal(r.n_spans, 1);
        assert_int_equal(r.spans[0].part, HX_PART_PROMPT);
        hx_render_free(&r);
        assert_int_equal(hx_render_response((hx_template)k, &p, &r, err, sizeof err), ENG_OK);
        assert_string_equal(r.text, " tail");
        hx_render_free(&r);
    }
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &t, &r, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "pre-tokenized"));
    assert_null(r.text);
    assert_int_equal(hx_render_response(HX_TEMPLATE_CHATML, &t, &r, err, sizeof err), ENG_OK);
    assert_int_equal(r.len, 0);
    assert_string_equal(r.text, "");
    hx_render_free(&r);
    hx_request_free(&p);
    hx_request_free(&t);
}

static void templates_are_found_by_name_and_guessed_from_metadata(void **state) {
    (void)state;
    assert_int_equal(hx_template_from_name("chatml"), HX_TEMPLATE_CHATML);
    assert_int_equal(hx_template_from_name("llama2"), HX_TEMPLATE_LLAMA2);
    assert_int_equal(hx_template_from_name("llama3"), HX_TEMPLATE_LLAMA3);
    assert_int_equal(hx_template_from_name("raw"), HX_TEMPLATE_RAW);
    assert_int_equal(hx_template_from_name("vicuna"), ENG_ERR_NOT_FOUND);
    assert_int_equal(hx_template_from_name(NULL), ENG_ERR_NOT_FOUND);
    assert_string_equal(hx_template_name(HX_TEMPLATE_LLAMA3), "llama3");
    assert_int_equal(hx_template_guess("qwen2", "{% for m in messages %}<|im_start|>{{ m.role }}"), HX_TEMPLATE_CHATML);
    assert_int_equal(hx_template_guess("llama", "{{ '<|start_header_id|>' + role }}"), HX_TEMPLATE_LLAMA3);
    assert_int_equal(hx_template_guess("llama", "{{ bos_token + '[INST] ' + content }}"), HX_TEMPLATE_LLAMA2);
    assert_int_equal(hx_template_guess("llama", NULL), HX_TEMPLATE_CHATML);
    assert_int_equal(hx_template_guess(NULL, "plain"), HX_TEMPLATE_CHATML);
}

// ----------------------------------------------------------------------------
// Normalization: anthropic-cch

static void normalize_rule_names_are_parsed_and_unknown_ones_named(void **state) {
    (void)state;
    hx_normalize n;
    char buf[64];
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    assert_int_equal(n.rules, HX_NORMALIZE_ANTHROPIC_CCH);
    assert_string_equal(hx_normalize_names(&n, buf, sizeof buf), "anthropic-cch");
    assert_int_equal(hx_normalize_parse(" none , anthropic-cch ,", &n), ENG_OK);
    assert_int_equal(n.rules, HX_NORMALIZE_ANTHROPIC_CCH);
    assert_int_equal(hx_normalize_parse("", &n), ENG_OK);
    assert_int_equal(n.rules, 0);
    assert_string_equal(hx_normalize_names(&n, buf, sizeof buf), "");
    assert_int_equal(hx_normalize_parse("anthropic-cch,strip-dates", &n), ENG_ERR_NOT_FOUND);
    assert_int_equal(n.rules, 0);
    assert_string_equal(n.err, "--normalize: unknown rule 'strip-dates' (known: anthropic-cch)");
}

static char *billing_request(const char *cch_value, hx_request *r) {
    char line[1024];
    snprintf(line, sizeof line,
             "{\"v\":1,\"session\":\"s\",\"turn\":0,\"system\":[{\"type\":\"text\",\"text\":"
             "\"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=%s;\"},"
             "{\"type\":\"text\",\"text\":\"You are Claude Code, Anthropic's official CLI for Claude.\"}],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", cch_value);
    load(line, r);
    return r->system[0].text;
}

static void checksums_of_any_length_normalize_to_the_same_text(void **state) {
    (void)state;
    const char *values[] = {"a5145", "4a1a8", "1c8b4", "fff", "0123456789abcdef", "zz-9/x", ""};
    hx_normalize n;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    char *first = NULL;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        hx_request r;
        billing_request(values[i], &r);
        assert_int_equal(hx_normalize_apply(&n, &r), 1);
        assert_string_equal(r.system[0].text,
                            "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=fffff;");
        assert_string_equal(r.system[1].text, "You are Claude Code, Anthropic's official CLI for Claude.");
        if (!first) first = hx_strdup(r.system[0].text);
        else assert_string_equal(first, r.system[0].text);
        assert_int_equal(hx_normalize_apply(&n, &r), 0); /* idempotent */
        hx_request_free(&r);
    }
    free(first);
}

static void a_block_that_is_not_a_billing_header_is_untouched(void **state) {
    (void)state;
    hx_normalize n, none;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    assert_int_equal(hx_normalize_parse(NULL, &none), ENG_OK);
    hx_request r;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0,\"system\":[{\"type\":\"text\",\"text\":\"note: cch=a5145; stays\"},"
         "{\"type\":\"text\",\"text\":\" x-anthropic-billing-header: cch=a5145;\"}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x-anthropic-billing-header: a=1; cch=12345; b=2\\nsecond line cch=99999;\"},"
         "{\"role\":\"user\",\"content\":\"x-anthropic-billing-header: cch=77777;\"}]}", &r);
    assert_int_equal(hx_normalize_apply(&none, &r), 0);
    assert_int_equal(hx_normalize_apply(&n, &r), 1); /* only the first user text block's header line */
    assert_string_equal(r.system[0].text, "note: cch=a5145; stays");
    assert_string_equal(r.system[1].text, " x-anthropic-billing-header: cch=a5145;");
    assert_string_equal(r.messages[0].blocks[0].text, "x-anthropic-billing-header: a=1; cch=fffff; b=2\nsecond line cch=99999;");
    assert_string_equal(r.messages[1].blocks[0].text, "x-anthropic-billing-header: cch=77777;");
    hx_request_free(&r);
}

static void header_lines_inside_a_raw_prompt_are_normalized(void **state) {
    (void)state;
    hx_normalize n;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    hx_request r;
    load("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"<|im_start|>system\\nx-anthropic-billing-header: cc_version=1; "
         "cch=abcde;You are Claude Code\\nnot a header cch=12345;\"}", &r);
    assert_int_equal(hx_normalize_apply(&n, &r), 1);
    assert_string_equal(r.prompt, "<|im_start|>system\nx-anthropic-billing-header: cc_version=1; cch=fffff;You are Claude Code\n"
                                  "not a header cch=12345;");
    hx_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chatml_renders_the_documented_text),
        cmocka_unit_test(llama3_renders_the_documented_text),
        cmocka_unit_test(llama2_renders_the_documented_text),
        cmocka_unit_test(raw_renders_the_documented_text),
        cmocka_unit_test(tools_are_rendered_as_canonical_json_inside_the_system_turn),
        cmocka_unit_test(spans_partition_the_text_in_order),
        cmocka_unit_test(first_difference_is_located_in_message_and_block),
        cmocka_unit_test(render_prompt_plus_response_is_a_prefix_of_the_next_prompt),
        cmocka_unit_test(prefix_check_fails_when_history_drops_the_thinking),
        cmocka_unit_test(prompt_lines_render_verbatim_and_token_lines_have_no_text),
        cmocka_unit_test(templates_are_found_by_name_and_guessed_from_metadata),
        cmocka_unit_test(normalize_rule_names_are_parsed_and_unknown_ones_named),
        cmocka_unit_test(checksums_of_any_length_normalize_to_the_same_text),
        cmocka_unit_test(a_block_that_is_not_a_billing_header_is_untouched),
        cmocka_unit_test(header_lines_inside_a_raw_prompt_are_normalized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
