/*
 * tests/test_import.c: importers (anthropic, openai, claude-code, swe-agent)
 * on the faithful samples in tests/data/ and on the real SWE-agent
 * trajectory in ../shared/data; the FILE:LINE: FIELD error contract,
 * --skip-bad, overrides, and a seeded fuzz of every sample.
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
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "import.h"
#include "normalize.h"
#include "status.h"
#include "template.h"
#include "transcript.h"
#include "util.h"

#define ANTHROPIC "tests/data/anthropic_sample.jsonl"
#define OPENAI "tests/data/openai_sample.jsonl"
#define CLAUDE "tests/data/claude_code_sample.jsonl"
#define SWE "../shared/data/transcripts/sweagent_function_calling_simple.traj"

static void import_ok(hx_import_format f, const char *path, hx_transcript *t) {
    hx_import_opts o = {0};
    o.format = f;
    char err[512] = "";
    int rc = hx_import_file(&o, path, t, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
}

static int import_text(hx_import_format f, bool skip_bad, const char *text, hx_transcript *t, int64_t *skipped,
                       char *err, size_t n) {
    hx_import_opts o = {0};
    o.format = f;
    o.skip_bad = skip_bad;
    return hx_import_buffer(&o, "in.jsonl", text, strlen(text), t, skipped, err, n);
}

/* Every consecutive pair of requests of each session extends the previous
 * one (after anthropic-cch normalization): the template prefix property. */
static void assert_sessions_extend(const hx_transcript *t) {
    hx_normalize n;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    for (int32_t i = 0; i < t->n; i++) {
        for (int32_t j = i + 1; j < t->n; j++) {
            if (strcmp(t->reqs[i].session, t->reqs[j].session)) continue;
            hx_request a, b;
            assert_int_equal(hx_request_copy(&a, &t->reqs[i]), ENG_OK);
            assert_int_equal(hx_request_copy(&b, &t->reqs[j]), ENG_OK);
            assert_true(hx_normalize_apply(&n, &a) >= 0);
            assert_true(hx_normalize_apply(&n, &b) >= 0);
            for (int k = 0; k < HX_TEMPLATE_COUNT; k++) {
                hx_render pa, ra, pb;
                char err[256];
                assert_int_equal(hx_render_prompt((hx_template)k, &a, &pa, err, sizeof err), ENG_OK);
                assert_int_equal(hx_render_response((hx_template)k, &a, &ra, err, sizeof err), ENG_OK);
                assert_int_equal(hx_render_prompt((hx_template)k, &b, &pb, err, sizeof err), ENG_OK);
                assert_true(pa.len + ra.len <= pb.len);
                assert_memory_equal(pb.text, pa.text, pa.len);
                assert_memory_equal(pb.text + pa.len, ra.text, ra.len);
                hx_render_free(&pa);
                hx_render_free(&ra);
                hx_render_free(&pb);
            }
            hx_request_free(&a);
            hx_request_free(&b);
            break; /* the next request of this session */
        }
    }
}

static void assert_round_trips(const hx_transcript *t) {
    char *bytes, err[256];
    size_t n;
    hx_transcript u;
    assert_int_equal(hx_transcript_serialize(t, &bytes, &n, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_parse(bytes, n, "rt", false, &u, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(u.n, t->n);
    for (int32_t i = 0; i < t->n; i++) assert_true(hx_request_equal(&t->reqs[i], &u.reqs[i]));
    free(bytes);
    hx_transcript_free(&u);
}

// ----------------------------------------------------------------------------
// anthropic

static void anthropic_requests_form_sessions_and_take_the_next_assistant_turn(void **state) {
    (void)state;
    hx_transcript t;
    import_ok(HX_IMPORT_ANTHROPIC, ANTHROPIC, &t);
    assert_int_equal(t.n, 5);
    /* line 2 (the title request: another system prompt) is its own session */
    static const char *sess[] = {"anthropic_sample-0", "anthropic_sample-1", "anthropic_sample-0", "anthropic_sample-0",
                                 "anthropic_sample-0"};
    static const int turns[] = {0, 0, 1, 2, 3};
    static const int resp[] = {3, 0, 2, 1, 0};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(t.reqs[i].session, sess[i]);
        assert_int_equal(t.reqs[i].turn, turns[i]);
        assert_int_equal(t.reqs[i].line, i + 1);
        assert_int_equal(t.reqs[i].response.n_blocks, resp[i]);
    }
    const hx_request *r0 = &t.reqs[0], *r2 = &t.reqs[2], *r3 = &t.reqs[3];
    assert_int_equal(r0->n_system, 3);
    assert_true(strstr(r0->system[0].text, "cch=a5145;") != NULL);
    assert_int_equal(r0->n_tools, 2);
    assert_int_equal(r0->n_messages, 1);
    assert_int_equal(r0->messages[0].n_blocks, 2);
    assert_int_equal(r0->response.blocks[0].type, HX_BLOCK_THINKING);
    assert_true(hx_message_equal(&r0->response, &r2->messages[1]));
    /* tool_result with text + image blocks is flattened, is_error kept */
    const hx_block *tr = &r3->messages[4].blocks[0];
    assert_int_equal(tr->type, HX_BLOCK_TOOL_RESULT);
    assert_true(tr->is_error);
    assert_string_equal(tr->text, "tests/test_cache.c:5: assertion failed: cache_evict(c) == 0\nmake: *** [test] Error 1\n[image]");
    assert_string_equal(r3->messages[3].blocks[1].input, "{\"command\":\"make test\",\"timeout\":60000}");
    assert_int_equal(t.reqs[4].messages[6].blocks[1].type, HX_BLOCK_IMAGE);
    assert_sessions_extend(&t);
    assert_round_trips(&t);
    hx_transcript_free(&t);
}

// ----------------------------------------------------------------------------
// openai

static void openai_tool_calls_and_roles_are_converted(void **state) {
    (void)state;
    hx_transcript t;
    import_ok(HX_IMPORT_OPENAI, OPENAI, &t);
    assert_int_equal(t.n, 4);
    assert_string_equal(t.reqs[0].session, "openai_sample-0");
    assert_string_equal(t.reqs[2].session, "openai_sample-1");
    assert_int_equal(t.reqs[3].turn, 2);
    const hx_request *r0 = &t.reqs[0], *r1 = &t.reqs[1], *r3 = &t.reqs[3];
    assert_int_equal(r0->n_system, 1);
    assert_string_equal(r0->system[0].text, "You are a helpful assistant. Use tools when needed.");
    assert_int_equal(r0->n_tools, 1);
    assert_string_equal(r0->tools[0].name, "get_weather");
    assert_string_equal(r0->tools[0].schema, "{\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"],"
                                             "\"type\":\"string\"}},\"required\":[\"city\"],\"type\":\"object\"}");
    /* content null + two tool calls; arguments strings become canonical objects */
    assert_int_equal(r0->response.n_blocks, 2);
    assert_string_equal(r0->response.blocks[0].id, "call_1");
    assert_string_equal(r0->response.blocks[0].input, "{\"city\":\"Paris\",\"unit\":\"c\"}");
    assert_string_equal(r0->response.blocks[1].input, "{\"city\":\"Berlin\",\"unit\":\"c\"}");
    assert_int_equal(r1->messages[2].role, HX_ROLE_TOOL);
    assert_string_equal(r1->messages[2].blocks[0].id, "call_1");
    assert_string_equal(r1->messages[3].blocks[0].text, "12 C, light rain");
    /* reasoning_content -> thinking first */
    assert_int_equal(r1->response.blocks[0].type, HX_BLOCK_THINKING);
    assert_int_equal(r3->messages[5].blocks[1].type, HX_BLOCK_IMAGE);
    /* developer message -> system block */
    assert_string_equal(t.reqs[2].system[0].text, "Answer in one word.");
    assert_sessions_extend(&t);
    assert_round_trips(&t);
    hx_transcript_free(&t);
}

// ----------------------------------------------------------------------------
// claude-code

static void claude_code_lines_merge_into_requests_and_sidechains(void **state) {
    (void)state;
    hx_transcript t;
    import_ok(HX_IMPORT_CLAUDE_CODE, CLAUDE, &t);
    assert_int_equal(t.n, 6);
    const char *S = "7d4c9a2e-1f3b-4c5d-9e8f-0a1b2c3d4e5f";
    char side[128];
    snprintf(side, sizeof side, "%s/agent-a1b2", S);
    const char *sess[] = {S, S, side, side, S, S};
    static const int turns[] = {0, 1, 0, 1, 2, 3};
    static const int n_msgs[] = {1, 3, 1, 3, 5, 7};
    static const int n_resp[] = {3, 2, 1, 1, 3, 1};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(t.reqs[i].session, sess[i]);
        assert_int_equal(t.reqs[i].turn, turns[i]);
        assert_int_equal(t.reqs[i].n_messages, n_msgs[i]);
        assert_int_equal(t.reqs[i].response.n_blocks, n_resp[i]);
    }
    /* the stand-in's context reminder first, then the user line, the todo reminder (an
     * attachment line) and the isMeta line, merged into one user message */
    const hx_message *u = &t.reqs[0].messages[0];
    assert_int_equal(u->n_blocks, 4);
    assert_true(strncmp(u->blocks[0].text, "<system-reminder>\nContext for the user's requests.", 50) == 0);
    assert_string_equal(u->blocks[1].text, "The test test_cache_evict in tests/test_cache.c fails. Can you fix it?");
    assert_true(strncmp(u->blocks[2].text, "<system-reminder>\nThe todo list is empty", 40) == 0);
    assert_true(strstr(u->blocks[3].text, "CLAUDE.md") != NULL);
    /* three assistant lines of req_011 -> one turn */
    assert_int_equal(t.reqs[0].response.blocks[0].type, HX_BLOCK_THINKING);
    assert_string_equal(t.reqs[0].response.blocks[2].name, "Read");
    /* two tool results of one turn -> one user message */
    const hx_message *last = &t.reqs[5].messages[6];
    assert_int_equal(last->n_blocks, 2);
    assert_string_equal(last->blocks[0].id, "toolu_D");
    assert_true(last->blocks[1].is_error);
    /* the stand-in system prompt: billing header (the log's version) with a per-request checksum */
    char want[160];
    snprintf(want, sizeof want, "x-anthropic-billing-header: cc_version=2.1.101.%03llx; cc_entrypoint=cli; cch=%05llx;",
             (unsigned long long)(XXH3_64bits(S, strlen(S)) >> 52),
             (unsigned long long)(XXH3_64bits("req_011", 7) >> 44));
    assert_string_equal(t.reqs[0].system[0].text, want);
    assert_string_not_equal(t.reqs[0].system[0].text, t.reqs[1].system[0].text);
    assert_int_equal(t.reqs[0].n_system, 4);
    assert_string_equal(t.reqs[0].system[1].text, "You are Claude Code, Anthropic's official CLI for Claude.");
    assert_non_null(strstr(t.reqs[0].system[3].text, "Working directory: /home/dev/src/kvstore\n"));
    assert_non_null(strstr(t.reqs[0].system[3].text, "Platform: linux\n"));
    assert_true(t.reqs[0].n_tools >= 9);
    /* usage recorded per request */
    assert_true(t.reqs[0].usage.present);
    assert_int_equal(hx_call_usage_total(&t.reqs[0].usage), 4);
    assert_sessions_extend(&t);
    assert_round_trips(&t);
    hx_transcript_free(&t);
}

static void claude_code_unknown_types_are_skipped_and_a_loop_is_an_error(void **state) {
    (void)state;
    const char *text =
        "{\"type\":\"brand-new\",\"whatever\":[1]}\n"
        "{\"type\":\"user\",\"uuid\":\"a\",\"parentUuid\":\"b\",\"sessionId\":\"S\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n"
        "{\"type\":\"assistant\",\"uuid\":\"b\",\"parentUuid\":\"a\",\"sessionId\":\"S\",\"requestId\":\"r1\","
        "\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"yo\"}]}}\n";
    hx_transcript t;
    char err[256] = "";
    int64_t skipped = 0;
    assert_int_equal(import_text(HX_IMPORT_CLAUDE_CODE, false, text, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl:3: parentUuid: the parentUuid chain loops");
    /* --skip-bad: no line is bad, the request is dropped whole and counted */
    hx_import_stats st = {0};
    hx_import_opts o = {0};
    o.format = HX_IMPORT_CLAUDE_CODE;
    o.skip_bad = true;
    o.stats = &st;
    assert_int_equal(hx_import_buffer(&o, "in.jsonl", text, strlen(text), &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 0);
    assert_int_equal(st.dropped_requests, 1);
    assert_int_equal(t.n, 0);
    hx_transcript_free(&t);
}

static void claude_code_session_flag_renames_main_and_sidechains(void **state) {
    (void)state;
    hx_import_opts o = {0};
    o.format = HX_IMPORT_CLAUDE_CODE;
    o.session = "cc";
    hx_transcript t;
    char err[256] = "";
    assert_int_equal(hx_import_file(&o, CLAUDE, &t, NULL, err, sizeof err), ENG_OK);
    assert_string_equal(t.reqs[0].session, "cc");
    assert_string_equal(t.reqs[2].session, "cc/agent-a1b2");
    hx_transcript_free(&t);
}

// ----------------------------------------------------------------------------
// swe-agent (real file)

static void swe_agent_trajectory_gives_one_request_per_assistant_message(void **state) {
    (void)state;
    if (access(SWE, R_OK) != 0) skip(); /* ../shared/data is absent */
    hx_transcript t;
    import_ok(HX_IMPORT_SWE_AGENT, SWE, &t);
    assert_int_equal(t.n, 5);
    for (int32_t i = 0; i < t.n; i++) {
        assert_string_equal(t.reqs[i].session, "sweagent_function_calling_simple");
        assert_int_equal(t.reqs[i].turn, i);
        assert_int_equal(t.reqs[i].n_system, 1);
        assert_int_equal(t.reqs[i].n_messages, 1 + 2 * i);
        assert_int_equal(t.reqs[i].response.n_blocks, 2);
        assert_int_equal(t.reqs[i].response.blocks[1].type, HX_BLOCK_TOOL_USE);
    }
    assert_true(strncmp(t.reqs[0].system[0].text, "SETTING: You are an autonomous programmer", 41) == 0);
    assert_string_equal(t.reqs[0].response.blocks[1].name, "find_file");
    assert_string_equal(t.reqs[0].response.blocks[1].input, "{\"file_name\":\"missing_colon.py\"}");
    assert_string_equal(t.reqs[0].response.blocks[1].id, "call_PbWErNIge3YTrli3fiVvmIid");
    /* tool messages use tool_call_ids[0] */
    const hx_message *tool = &t.reqs[1].messages[2];
    assert_int_equal(tool->role, HX_ROLE_TOOL);
    assert_string_equal(tool->blocks[0].id, "call_PbWErNIge3YTrli3fiVvmIid");
    assert_string_equal(t.reqs[4].response.blocks[1].name, "submit");
    assert_string_equal(t.reqs[4].response.blocks[1].input, "{}");
    assert_sessions_extend(&t);
    assert_round_trips(&t);
    hx_transcript_free(&t);
}

static void swe_agent_bad_history_entry_is_named(void **state) {
    (void)state;
    hx_transcript t;
    char err[256] = "";
    int64_t skipped = 0;
    const char *text = "{\"history\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"robot\",\"content\":\"y\"},"
                       "{\"role\":\"assistant\",\"content\":\"z\"}]}";
    assert_int_equal(import_text(HX_IMPORT_SWE_AGENT, false, text, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl: history[1].role: unknown role \"robot\" (expected system, developer, user, assistant or tool)");
    assert_int_equal(import_text(HX_IMPORT_SWE_AGENT, true, text, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 1);
    assert_int_equal(t.n, 1);
    hx_transcript_free(&t);
    assert_int_equal(import_text(HX_IMPORT_SWE_AGENT, false, "{\"trajectory\":[]}", &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl: history: missing");
}

// ----------------------------------------------------------------------------
// Errors, --skip-bad, overrides

static void a_bad_line_names_file_line_and_field(void **state) {
    (void)state;
    static const struct {
        hx_import_format f;
        const char *text, *want;
    } cases[] = {
        {HX_IMPORT_ANTHROPIC,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"foo\"}]}]}\n",
         "in.jsonl:2: messages[0].content[0].type: unknown block type \"foo\""},
        {HX_IMPORT_ANTHROPIC, "{\"system\":5,\"messages\":[]}", "in.jsonl:1: system: expected a string or an array of text blocks"},
        {HX_IMPORT_ANTHROPIC, "{\"model\":\"x\"}", "in.jsonl:1: messages: missing"},
        {HX_IMPORT_OPENAI, "\n\n{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\","
                           "\"arguments\":\"{oops\"}}]}]}",
         "in.jsonl:3: messages[0].tool_calls[0].function.arguments: not a JSON object"},
        {HX_IMPORT_OPENAI, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "in.jsonl:1: messages[0].tool_call_id: missing or not a string"},
        {HX_IMPORT_OPENAI, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\"}]}]}",
         "in.jsonl:1: messages[0].content[0].type: unknown content part type \"video\""},
        {HX_IMPORT_CLAUDE_CODE, "{\"type\":\"user\",\"uuid\":\"a\",\"parentUuid\":null,\"message\":{\"role\":\"assistant\",\"content\":\"x\"}}",
         "in.jsonl:1: message.role: expected \"user\" (the line's type)"},
        {HX_IMPORT_CLAUDE_CODE, "{\"type\":\"user\",\"uuid\":\"a\",\"message\":{\"role\":\"user\",\"content\":\"x\"}}",
         "in.jsonl:1: parentUuid: missing (null for the first line of a conversation)"},
        {HX_IMPORT_ANTHROPIC, "[{\"messages\":[]}]",
         "in.jsonl:1: expected a JSON object, found an array (JSONL holds one object per line; a file that is one "
         "array converts with: jq -c '.[]' in.jsonl)"},
        {HX_IMPORT_CLAUDE_CODE, "{\"type\":\"assistant\",\"message\":{\"role\":\"assistant\",\"content\":[]}}", "in.jsonl:1: uuid: missing"},
        {HX_IMPORT_CLAUDE_CODE, "{\"type\":\"user\",\"uuid\":\"a\"", "in.jsonl:1: invalid JSON at column "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hx_transcript t;
        char err[256] = "";
        assert_int_equal(import_text(cases[i].f, false, cases[i].text, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0) fail_msg("got \"%s\", want \"%s\"", err, cases[i].want);
        /* jansson's own wording may change; ours is exact */
        if (!strstr(cases[i].want, "invalid JSON")) assert_string_equal(err, cases[i].want);
        assert_int_equal(t.n, 0);
    }
}

static void skip_bad_skips_and_counts_bad_lines(void **state) {
    (void)state;
    const char *text = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n"
                       "not json at all\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"foo\"}]}]}\n"
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                       "{\"role\":\"user\",\"content\":\"c\"}]}\n";
    hx_transcript t;
    char err[256] = "";
    int64_t skipped = 0;
    assert_int_equal(import_text(HX_IMPORT_ANTHROPIC, true, text, &t, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 2);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.reqs[1].line, 4);
    assert_int_equal(t.reqs[0].response.n_blocks, 1);
    assert_string_equal(t.reqs[0].response.blocks[0].text, "b");
    hx_transcript_free(&t);
}

static void system_and_tools_files_replace_the_prompt(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr_imp_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sp[300], tp[300], err[256] = "";
    snprintf(sp, sizeof sp, "%s/system.txt", dir);
    snprintf(tp, sizeof tp, "%s/tools.json", dir);
    const char *sys = "You are a stand-in.\nSecond line.\n";
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"b\":1,\"a\":2}}}]";
    assert_int_equal(eng_write_atomic(sp, sys, strlen(sys), err, sizeof err), ENG_OK);
    assert_int_equal(eng_write_atomic(tp, tools, strlen(tools), err, sizeof err), ENG_OK);
    for (int f = 0; f < 3; f++) {
        hx_import_opts o = {0};
        o.format = f == 0 ? HX_IMPORT_ANTHROPIC : f == 1 ? HX_IMPORT_OPENAI : HX_IMPORT_CLAUDE_CODE;
        o.system_file = sp;
        o.tools_file = tp;
        hx_transcript t;
        assert_int_equal(hx_import_file(&o, f == 0 ? ANTHROPIC : f == 1 ? OPENAI : CLAUDE, &t, NULL, err, sizeof err), ENG_OK);
        assert_true(t.n > 0);
        for (int32_t i = 0; i < t.n; i++) {
            assert_int_equal(t.reqs[i].n_system, 1);
            assert_string_equal(t.reqs[i].system[0].text, sys);
            assert_int_equal(t.reqs[i].n_tools, 1);
            assert_string_equal(t.reqs[i].tools[0].schema, "{\"a\":2,\"b\":1}");
        }
        hx_transcript_free(&t);
    }
    hx_import_opts o = {0};
    o.format = HX_IMPORT_ANTHROPIC;
    o.tools_file = sp; /* not JSON */
    hx_transcript t;
    assert_int_equal(hx_import_file(&o, ANTHROPIC, &t, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_true(strncmp(err, sp, strlen(sp)) == 0);
    o.tools_file = "/nonexistent/tools.json";
    assert_int_equal(hx_import_file(&o, ANTHROPIC, &t, NULL, err, sizeof err), ENG_ERR_IO);
    unlink(sp);
    unlink(tp);
    rmdir(dir);
}

static void format_names_are_recognised(void **state) {
    (void)state;
    assert_int_equal(hx_import_format_from_name("anthropic"), HX_IMPORT_ANTHROPIC);
    assert_int_equal(hx_import_format_from_name("openai"), HX_IMPORT_OPENAI);
    assert_int_equal(hx_import_format_from_name("claude-code"), HX_IMPORT_CLAUDE_CODE);
    assert_int_equal(hx_import_format_from_name("swe-agent"), HX_IMPORT_SWE_AGENT);
    assert_int_equal(hx_import_format_from_name("gemini"), ENG_ERR_NOT_FOUND);
    assert_string_equal(hx_import_format_name(HX_IMPORT_CLAUDE_CODE), "claude-code");
}

// ----------------------------------------------------------------------------
// Fuzz: seeded mutations of every sample never crash

static size_t mutate(gsl_rng *r, char *buf, size_t n, size_t cap) {
    static const char junk[] = "{}[]\":,\\\n0a \xff\xc3";
    int ops = 1 + (int)gsl_rng_uniform_int(r, 3);
    for (int k = 0; k < ops && n > 0; k++) {
        size_t at = gsl_rng_uniform_int(r, n);
        switch (gsl_rng_uniform_int(r, 5)) {
        case 0: n = at; break;
        case 1: buf[at] ^= (char)(1u << gsl_rng_uniform_int(r, 8)); break;
        case 2: buf[at] = junk[gsl_rng_uniform_int(r, sizeof junk - 1)]; break;
        case 3: {
            size_t len = 1 + gsl_rng_uniform_int(r, 16);
            if (at + len > n) len = n - at;
            memmove(buf + at, buf + at + len, n - at - len);
            n -= len;
            break;
        }
        default:
            if (n + 1 < cap) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = junk[gsl_rng_uniform_int(r, sizeof junk - 1)];
                n++;
            }
        }
    }
    return n;
}

static void fuzz_one(hx_import_format f, const char *path, int iters, unsigned long seed) {
    char *orig, err[512];
    size_t n0;
    if (eng_read_file(path, &orig, &n0, err, sizeof err) != ENG_OK) {
        assert_true(f == HX_IMPORT_SWE_AGENT); /* only the shared file may be absent */
        return;
    }
    char *buf = malloc(n0 + 64);
    assert_non_null(buf);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    int ok = 0, bad = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(buf, orig, n0);
        size_t n = mutate(r, buf, n0, n0 + 64);
        hx_import_opts o = {0};
        o.format = f;
        o.skip_bad = it % 3 == 0;
        hx_transcript t;
        err[0] = '\0';
        int rc = hx_import_buffer(&o, "fz", buf, n, &t, NULL, err, sizeof err);
        assert_true(rc == ENG_OK || rc == ENG_ERR_FORMAT);
        if (rc) {
            assert_true(strncmp(err, "fz", 2) == 0);
            bad++;
            continue;
        }
        ok++;
        assert_round_trips(&t);
        for (int32_t i = 0; i < t.n; i++) {
            hx_render p;
            assert_int_equal(hx_render_prompt(HX_TEMPLATE_LLAMA2, &t.reqs[i], &p, err, sizeof err), ENG_OK);
            hx_render_free(&p);
        }
        hx_transcript_free(&t);
    }
    print_message("fuzz %s: %d imported, %d rejected\n", hx_import_format_name(f), ok, bad);
    assert_true(bad > 0);
    gsl_rng_free(r);
    free(buf);
    free(orig);
}

static void fuzzed_samples_import_or_fail_with_a_message(void **state) {
    (void)state;
    fuzz_one(HX_IMPORT_ANTHROPIC, ANTHROPIC, 400, 1);
    fuzz_one(HX_IMPORT_OPENAI, OPENAI, 600, 2);
    fuzz_one(HX_IMPORT_CLAUDE_CODE, CLAUDE, 400, 3);
    fuzz_one(HX_IMPORT_CLAUDE_CODE, "tests/data/claude_code_current.jsonl", 300, 5);
    fuzz_one(HX_IMPORT_SWE_AGENT, SWE, 400, 4);
}

// ----------------------------------------------------------------------------
// The CLI (skipped when build/kvreplay has not been built)

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cli_import_exits_2_on_a_bad_line_and_reports_skips(void **state) {
    (void)state;
    const char *bin = getenv("BUILD") ? NULL : "build/kvreplay";
    char binbuf[256];
    if (!bin) {
        snprintf(binbuf, sizeof binbuf, "%s/kvreplay", getenv("BUILD"));
        bin = binbuf;
    }
    if (access(bin, X_OK) != 0) skip();
    char dir[] = "/tmp/kvr_cli_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[300], out[300], log[300], cmd[1200], err[256];
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    snprintf(log, sizeof log, "%s/err.txt", dir);
    const char *text = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n{\"messages\":[{\"role\":7}]}\n";
    assert_int_equal(eng_write_atomic(in, text, strlen(text), err, sizeof err), ENG_OK);
    snprintf(cmd, sizeof cmd, "%s import --from anthropic %s -o %s 2>%s", bin, in, out, log);
    assert_int_equal(run(cmd), 2);
    char *msg;
    size_t n;
    assert_int_equal(eng_read_file(log, &msg, &n, err, sizeof err), ENG_OK);
    assert_non_null(strstr(msg, "in.jsonl:2: messages[0].role: expected a string"));
    free(msg);
    snprintf(cmd, sizeof cmd, "%s import --from anthropic %s -o %s --skip-bad 2>%s", bin, in, out, log);
    assert_int_equal(run(cmd), 0);
    assert_int_equal(eng_read_file(log, &msg, &n, err, sizeof err), ENG_OK);
    assert_non_null(strstr(msg, "skipped 1 bad lines"));
    free(msg);
    snprintf(cmd, sizeof cmd, "%s import --help >/dev/null", bin);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s import --from nope %s -o %s 2>/dev/null", bin, in, out);
    assert_int_equal(run(cmd), 2);
    unlink(in);
    unlink(out);
    unlink(log);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(anthropic_requests_form_sessions_and_take_the_next_assistant_turn),
        cmocka_unit_test(openai_tool_calls_and_roles_are_converted),
        cmocka_unit_test(claude_code_lines_merge_into_requests_and_sidechains),
        cmocka_unit_test(claude_code_unknown_types_are_skipped_and_a_loop_is_an_error),
        cmocka_unit_test(claude_code_session_flag_renames_main_and_sidechains),
        cmocka_unit_test(swe_agent_trajectory_gives_one_request_per_assistant_message),
        cmocka_unit_test(swe_agent_bad_history_entry_is_named),
        cmocka_unit_test(a_bad_line_names_file_line_and_field),
        cmocka_unit_test(skip_bad_skips_and_counts_bad_lines),
        cmocka_unit_test(system_and_tools_files_replace_the_prompt),
        cmocka_unit_test(format_names_are_recognised),
        cmocka_unit_test(fuzzed_samples_import_or_fail_with_a_message),
        cmocka_unit_test(cli_import_exits_2_on_a_bad_line_and_reports_skips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
