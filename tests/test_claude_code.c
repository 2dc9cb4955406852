/*
 * tests/test_claude_code.c: `import --from claude-code` on faithfully built
 * samples of what current Claude Code logs hold (tests/data/
 * claude_code_current.jsonl: deferred tools and tool_reference results,
 * attachments, isMeta text, a late api_error line, a <synthetic> API error
 * message, a compaction, empty thinking, unknown block and attachment types;
 * claude_code_subagent.jsonl: a subagent's own file), the stand-in, a
 * skipped line in the middle of a chain, input hygiene, and the CLI (usage
 * ratios with -m, -o checks, the temp file on SIGTERM). Each case asserts
 * the rendered prompt (raw template), not only counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "cc_standin.h"
#include "import.h"
#include "jsonl.h"
#include "normalize.h"
#include "status.h"
#include "str.h"
#include "template.h"
#include "transcript.h"
#include "util.h"

#define CURRENT "tests/data/claude_code_current.jsonl"
#define SUBAGENT "tests/data/claude_code_subagent.jsonl"
#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static char g_dir[64], g_sys[128], g_tools[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_cc_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_sys, sizeof g_sys, "%s/sys.txt", g_dir);
    snprintf(g_tools, sizeof g_tools, "%s/tools.json", g_dir);
    char err[256];
    const char *tools = "[{\"name\":\"Edit\",\"description\":\"d\",\"input_schema\":{}}]";
    if (eng_write_atomic(g_sys, "S.", 2, err, sizeof err) || eng_write_atomic(g_tools, tools, strlen(tools), err, sizeof err))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Imports text (path "in.jsonl") or a file, with the small overrides when `plain`. */
static int import_cc(const char *file, const char *text, bool plain, bool skip_bad, hx_transcript *t,
                     hx_import_stats *st, int64_t *skipped, char *err, size_t n) {
    hx_import_opts o = {0};
    o.format = HX_IMPORT_CLAUDE_CODE;
    o.skip_bad = skip_bad;
    o.stats = st;
    if (plain) {
        o.system_file = g_sys;
        o.tools_file = g_tools;
    }
    if (file) return hx_import_file(&o, file, t, skipped, err, n);
    return hx_import_buffer(&o, "in.jsonl", text, strlen(text), t, skipped, err, n);
}

/* The raw-template prompt of request i after the system turn (the messages and generation prompt). */
static char *messages_text(const hx_transcript *t, int32_t i) {
    hx_render p;
    char err[256];
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_RAW, &t->reqs[i], &p, err, sizeof err), ENG_OK);
    char *s = hx_strdup(p.text + hx_render_system_end(&p));
    hx_render_free(&p);
    return s;
}

static void assert_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    if (a < b || strcmp(s + a - b, suffix) != 0) {
        print_error("prompt ends with\n---\n%s\n---\nwant\n---\n%s\n---\n", a > b ? s + a - b : s, suffix);
        fail();
    }
}

static const char k_first_user[] =
    "User: Add a --dry-run flag to the sync command.\n"
    "<system-reminder>\nThese deferred tools can be loaded with ToolSearch; their schemas are not loaded, so load them "
    "(query \"select:NAME[,NAME...]\") before calling them:\nTaskCreate\nTaskUpdate\nWebFetch\n</system-reminder>\n"
    "<system-reminder>\nSkills the Skill tool can run:\n\n- simplify: Review changed code for reuse and quality, then fix "
    "what it finds.\n- loop: Run a prompt on a recurring interval.\n</system-reminder>\n\n";

// ----------------------------------------------------------------------------
// The current log, request by request

static void attachments_are_sent_as_reminders_and_empty_thinking_is_dropped(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 10);
    for (int32_t i = 0; i < t.n; i++) assert_int_equal(t.reqs[i].turn, i);
    /* request 0: the typed prompt, the deferred-tools and skill reminders (command_permissions is not sent) */
    char *m = messages_text(&t, 0);
    char want[2048];
    snprintf(want, sizeof want, "%sAssistant: ", k_first_user);
    assert_string_equal(m, want);
    free(m);
    /* its response: the empty thinking block (signature only) is gone, the tool call stays */
    assert_int_equal(t.reqs[0].response.n_blocks, 1);
    assert_string_equal(t.reqs[0].response.blocks[0].name, "ToolSearch");
    assert_int_equal(st.empty_thinking, 1);
    assert_int_equal(st.attachments, 5);
    assert_int_equal(st.attachments_unsent, 1);
    /* usage of the call, as the log recorded it */
    assert_int_equal(hx_call_usage_total(&t.reqs[0].usage), 6 + 16232 + 9500);
    hx_transcript_free(&t);
}

static void tool_reference_results_are_kept_as_their_json(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    char *m = messages_text(&t, 1);
    char want[4096];
    snprintf(want, sizeof want,
             "%sAssistant: <tool_call>\n{\"name\":\"ToolSearch\",\"arguments\":{\"max_results\":2,\"query\":"
             "\"select:TaskCreate,TaskUpdate\"}}\n</tool_call>\n\n"
             "User: <tool_response>\n{\"tool_name\":\"TaskCreate\",\"type\":\"tool_reference\"}\n"
             "{\"tool_name\":\"TaskUpdate\",\"type\":\"tool_reference\"}\n</tool_response>\n\nAssistant: ",
             k_first_user);
    assert_string_equal(m, want);
    free(m);
    assert_int_equal(st.tool_references, 2);
    /* the reminder of an empty task list follows the tool result in one user message */
    m = messages_text(&t, 3);
    assert_suffix(m, "User: <tool_response>\nTask #1 created successfully: Add --dry-run to sync\n</tool_response>\n"
                     "<system-reminder>\nThe task list is empty and its tools have not been used lately. When the "
                     "work has several steps, track them with TaskCreate and TaskUpdate; ignore this when it does not "
                     "apply, and do not mention this reminder to the user.\n</system-reminder>\n\nAssistant: <tool_call>\n"
                     "{\"name\":\"Read\",\"arguments\":{\"file_path\":\"/Users/dev/src/tidy/cmd/sync.go\"}}\n</tool_call>\n\n"
                     "User: <tool_response>\n     1\tpackage cmd\n     2\t\n     3\tfunc Sync(dst string) error { return "
                     "copyTree(dst) }\n\n</tool_response>\n\nAssistant: ");
    free(m);
    hx_transcript_free(&t);
}

static void is_meta_text_is_sent_with_the_users_turn(void **state) {
    (void)state;
    hx_transcript t;
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, NULL, NULL, err, sizeof err), ENG_OK);
    char *m = messages_text(&t, 4);
    assert_suffix(m, "Assistant: Done: sync now takes --dry-run.\n\nUser: Also document it in the README.\n"
                     "Base directory for this skill: /Users/dev/.claude/skills/docs\n\nKeep README sections short.\n\n"
                     "Assistant: ");
    free(m);
    hx_transcript_free(&t);
}

static void a_late_api_error_line_does_not_reroot_the_chain(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(st.relinked, 1);
    /* the api_error line's recorded parent is the tool result before "Added it to the README
     * too."; the next prompt still holds that answer (the log's usage grows with it) */
    char *m = messages_text(&t, 6);
    assert_suffix(m, "User: <tool_response>\nThe file /Users/dev/src/tidy/README.md has been updated successfully.\n"
                     "</tool_response>\n\nAssistant: Added it to the README too.\n\nUser: Thanks. What changed in "
                     "total?\n\nAssistant: ");
    free(m);
    assert_string_equal(t.reqs[6].notes, "[\"the first request through the late api_error line 23, re-linked to line 22\"]");
    assert_null(t.reqs[7].notes);
    /* request 6 extends request 5 by its response: the prefix property holds across the error */
    hx_render a, ra, b;
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_RAW, &t.reqs[5], &a, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_response(HX_TEMPLATE_RAW, &t.reqs[5], &ra, err, sizeof err), ENG_OK);
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_RAW, &t.reqs[6], &b, err, sizeof err), ENG_OK);
    assert_memory_equal(b.text, a.text, a.len);
    assert_memory_equal(b.text + a.len, ra.text, ra.len);
    hx_render_free(&a);
    hx_render_free(&ra);
    hx_render_free(&b);
    hx_transcript_free(&t);
}

static void a_synthetic_error_message_is_no_call_and_left_out(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(st.synthetic, 1);
    assert_int_equal(st.api_error_messages, 1);
    /* no request for it; the two user turns around it merge, as the API request had them */
    char *m = messages_text(&t, 7);
    assert_suffix(m, "Assistant: Two files: cmd/sync.go and README.md.\n\nUser: Now run the tests.\nTry again.\n\n"
                     "Assistant: ");
    assert_null(strstr(m, "API Error"));
    free(m);
    for (int32_t i = 0; i < t.n; i++) assert_string_not_equal(t.reqs[i].response.blocks[0].text, "API Error: Rate limit reached");
    hx_transcript_free(&t);
}

static void a_compaction_starts_the_history_at_its_summary(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    char *m = messages_text(&t, 9);
    assert_string_equal(m,
        "User: This session is being continued from a previous conversation that ran out of context. The summary "
        "below covers the earlier portion of the conversation.\n\nSummary:\n1. The user asked for a --dry-run flag on "
        "sync; it was added, documented and tested.\n"
        "<system-reminder>\nNote: /Users/dev/src/tidy/cmd/sync.go was read before the conversation was summarized; it "
        "is too large to repeat here. Read it again with the Read tool when you need it.\n</system-reminder>\n"
        "<system-reminder>\n{\"note\":\"a type this importer does not know\",\"type\":\"brand_new_reminder\"}\n"
        "</system-reminder>\nPlease also add a changelog entry.\n\nAssistant: ");
    free(m);
    /* unknown types are kept (as their JSON text), counted, never dropped */
    assert_int_equal(st.unknown_attachments, 1);
    assert_string_equal(st.unknown_attachment_types, "brand_new_reminder");
    assert_int_equal(st.unknown_blocks, 1);
    assert_string_equal(st.unknown_types, "server_tool_use");
    const hx_message *r = &t.reqs[9].response;
    assert_int_equal(r->n_blocks, 3);
    assert_string_equal(r->blocks[0].text, "CHANGELOG.md has an Unreleased section.");
    assert_string_equal(r->blocks[1].text, "{\"id\":\"srvtoolu_01\",\"input\":{\"query\":\"keep a changelog format\"},"
                                          "\"name\":\"web_search\",\"type\":\"server_tool_use\"}");
    hx_transcript_free(&t);
}

static void a_subagent_file_is_its_own_session(void **state) {
    (void)state;
    hx_transcript t;
    hx_import_stats st = {0};
    char err[512] = "";
    assert_int_equal(import_cc(SUBAGENT, NULL, false, false, &t, &st, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.reqs[0].session, "7d4c9a2e-1f3b-4c5d-9e8f-0a1b2c3d4e5f/agent-a4c1e2f0b9d8e7a6");
    assert_int_equal(t.reqs[1].turn, 1);
    assert_int_equal(st.sidechain_sessions, 1);
    /* a subagent's stand-in: the short prompt, no Agent tool */
    assert_int_equal(t.reqs[0].n_system, 4);
    assert_true(strlen(t.reqs[0].system[2].text) < 6000);
    for (int32_t i = 0; i < t.reqs[0].n_tools; i++) assert_string_not_equal(t.reqs[0].tools[i].name, "Agent");
    const hx_message *u = &t.reqs[0].messages[0];
    assert_int_equal(u->n_blocks, 2);
    assert_string_equal(u->blocks[1].text, "Find every caller of cache_evict and report file:line.");
    char *m = messages_text(&t, 1);
    assert_suffix(m, "Today's date is 2026-05-04.\n</system-reminder>\nFind every caller of cache_evict and report "
                     "file:line.\n\nAssistant: <tool_call>\n"
                     "{\"name\":\"Grep\",\"arguments\":{\"-n\":true,\"output_mode\":\"content\",\"pattern\":\"cache_evict\"}}"
                     "\n</tool_call>\n\nUser: <tool_response>\nsrc/cache.c:88:int cache_evict(struct cache *c)\n"
                     "src/store.c:41:    cache_evict(s->cache);\n</tool_response>\n\nAssistant: ");
    free(m);
    hx_transcript_free(&t);
}

// ----------------------------------------------------------------------------
// The stand-in

static void the_stand_in_has_claude_codes_shape_from_the_logs_own_fields(void **state) {
    (void)state;
    hx_transcript t;
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, false, false, &t, NULL, NULL, err, sizeof err), ENG_OK);
    const hx_request *r = &t.reqs[0];
    const char *S = "5b0f3c2e-8a41-4d6e-9b7c-2f1e0d9c8b7a";
    char want[200];
    snprintf(want, sizeof want, "x-anthropic-billing-header: cc_version=2.1.121.%03llx; cc_entrypoint=cli; cch=%05llx;",
             (unsigned long long)(XXH3_64bits(S, strlen(S)) >> 52), (unsigned long long)(XXH3_64bits("req_01", 6) >> 44));
    assert_int_equal(r->n_system, 4);
    assert_string_equal(r->system[0].text, want);
    assert_string_equal(r->system[1].text, "You are Claude Code, Anthropic's official CLI for Claude.");
    assert_true(strlen(r->system[2].text) >= HX_CC_INSTRUCTION_BYTES);
    assert_string_equal(r->system[3].text,
                        "Facts about the environment of this session:\n<env>\nWorking directory: /Users/dev/src/tidy\n"
                        "Is the directory a git repository: yes\nPlatform: darwin\nToday's date: 2026-05-04\n</env>\n"
                        "The model answering is claude-opus-4-7.\n\ngit status when the session started (it is not "
                        "updated while you work):\nCurrent branch: main\n(the status and recent commits are not in the log)\n");
    /* the log announces deferred tools: the core set only (TaskCreate comes by tool search) */
    static const char *const names[] = {"Agent", "Bash", "Edit", "Glob", "Grep", "Read", "Skill", "ToolSearch", "Write"};
    assert_int_equal(r->n_tools, 9);
    for (int i = 0; i < 9; i++) assert_string_equal(r->tools[i].name, names[i]);
    assert_true(strlen(r->tools[1].description) >= 13000); /* Bash: the longest */
    /* the context reminder opens the first user message of every request */
    for (int32_t i = 0; i < t.n; i++) {
        const char *c = t.reqs[i].messages[0].blocks[0].text;
        assert_true(strncmp(c, "<system-reminder>\nContext for the user's requests.", 50) == 0);
        assert_non_null(strstr(c, "\n# Date\nToday's date is 2026-05-04.\n</system-reminder>"));
        /* the same prefix for the whole session, the checksum apart */
        assert_true(hx_block_equal(&t.reqs[i].system[2], &r->system[2]));
        assert_string_not_equal(t.reqs[i].system[0].text, i ? t.reqs[i - 1].system[0].text : "");
    }
    /* the checksum is the only difference: after anthropic-cch the prefix is the same */
    hx_normalize nz;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &nz), ENG_OK);
    hx_request a, b;
    assert_int_equal(hx_request_copy(&a, &t.reqs[0]), ENG_OK);
    assert_int_equal(hx_request_copy(&b, &t.reqs[3]), ENG_OK);
    assert_int_equal(hx_normalize_apply(&nz, &a), 1);
    assert_int_equal(hx_normalize_apply(&nz, &b), 1);
    assert_string_equal(a.system[0].text, b.system[0].text);
    hx_request_free(&a);
    hx_request_free(&b);
    hx_transcript_free(&t);
}

static void the_stand_in_era_and_extra_tools_follow_the_log(void **state) {
    (void)state;
    /* no deferred tools (an older log): the full set; a tool the log calls is added with its parameters */
    hx_tool extra = {"mcp__db__query", "d", "{\"properties\":{\"sql\":{\"type\":\"string\"}},\"type\":\"object\"}"};
    hx_cc_env e = {"2.1.81", "claude-vscode", "s", "C:\\Users\\me\\proj", "2026-04-17", NULL, NULL, false, false,
                   &extra, 1};
    hx_block *sys;
    hx_tool *tools;
    int32_t ns, nt;
    char *ctx;
    assert_int_equal(hx_cc_standin(&e, &sys, &ns, &tools, &nt, &ctx), ENG_OK);
    assert_true(strncmp(sys[0].text, "x-anthropic-billing-header: cc_version=2.1.81.", 46) == 0);
    assert_non_null(strstr(sys[0].text, "; cc_entrypoint=claude-vscode; cch=00000;"));
    assert_non_null(strstr(sys[3].text, "Platform: win32\n"));
    assert_non_null(strstr(sys[3].text, "Is the directory a git repository: no\n"));
    assert_null(strstr(sys[3].text, "The model answering"));
    static const char *const names[] = {"Agent", "Bash", "Edit", "Glob", "Grep", "Read", "Skill", "Write", "TodoWrite",
                                        "WebFetch", "WebSearch", "NotebookEdit", "AskUserQuestion", "ExitPlanMode",
                                        "mcp__db__query"};
    assert_int_equal(nt, 15);
    for (int i = 0; i < nt; i++) assert_string_equal(tools[i].name, names[i]);
    /* a pure function of its input */
    hx_block *sys2;
    hx_tool *tools2;
    int32_t ns2, nt2;
    char *ctx2;
    assert_int_equal(hx_cc_standin(&e, &sys2, &ns2, &tools2, &nt2, &ctx2), ENG_OK);
    assert_string_equal(ctx, ctx2);
    for (int i = 0; i < ns; i++) assert_true(hx_block_equal(&sys[i], &sys2[i]));
    for (int i = 0; i < nt; i++) assert_string_equal(tools[i].description, tools2[i].description);
    char *h = hx_strdup("x-anthropic-billing-header: cc_version=2.1.81.abc; cc_entrypoint=cli; cch=00000;");
    assert_int_equal(hx_cc_billing_cch(&h, "req_x"), ENG_OK);
    char want[120];
    snprintf(want, sizeof want, "x-anthropic-billing-header: cc_version=2.1.81.abc; cc_entrypoint=cli; cch=%05llx;",
             (unsigned long long)(XXH3_64bits("req_x", 5) >> 44));
    assert_string_equal(h, want);
    free(h);
    for (int i = 0; i < ns; i++) hx_block_free(&sys[i]), hx_block_free(&sys2[i]);
    for (int i = 0; i < nt; i++) hx_tool_free(&tools[i]), hx_tool_free(&tools2[i]);
    free(sys), free(sys2), free(tools), free(tools2), free(ctx), free(ctx2);
}

// ----------------------------------------------------------------------------
// No silent damage: skipped lines, missing parents

/* The log with line `lineno` (1-based) replaced by repl (malloc'd result). */
static char *with_line(const char *path, int lineno, const char *repl) {
    char *data, err[256];
    size_t n;
    assert_int_equal(eng_read_file(path, &data, &n, err, sizeof err), ENG_OK);
    eng_buf b = {0};
    const char *p = data;
    for (int l = 1; *p; l++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (l == lineno) eng_buf_printf(&b, "%s\n", repl);
        else eng_buf_append(&b, p, len);
        p += len;
    }
    eng_buf_append(&b, "", 1);
    free(data);
    return b.data;
}

static void a_skipped_line_drops_every_request_whose_history_held_it(void **state) {
    (void)state;
    hx_transcript clean, t;
    char err[512] = "";
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &clean, NULL, NULL, err, sizeof err), ENG_OK);
    /* line 15: the Read tool's result, in the middle of the first conversation */
    char *text = with_line(CURRENT, 15, "{\"parentUuid\":\"x5\",\"type\":\"user\",\"uuid\":\"u4\",\"message\":{\"role\":\"us");
    assert_int_equal(import_cc(NULL, text, true, false, &t, NULL, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_true(strncmp(err, "in.jsonl:15: invalid JSON", 25) == 0);
    hx_import_stats st = {0};
    int64_t skipped = 0;
    assert_int_equal(import_cc(NULL, text, true, true, &t, &st, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 1);
    assert_int_equal(st.dropped_requests, 6); /* requests 3..8 held it; 0..2 did not; 9 starts after the compaction */
    assert_int_equal(t.n, 4);
    static const int32_t kept[] = {0, 1, 2, 9};
    for (int i = 0; i < 4; i++) {
        char *a = messages_text(&t, i), *b = messages_text(&clean, kept[i]);
        assert_string_equal(a, b); /* the kept prompts are exactly those of the whole log */
        free(a);
        free(b);
        assert_true(hx_message_equal(&t.reqs[i].response, &clean.reqs[kept[i]].response));
    }
    assert_non_null(strstr(t.header, "\"dropped_requests\":6,"));
    assert_non_null(strstr(t.header, "\"requests\":4,"));
    assert_non_null(strstr(t.header, "\"skipped_lines\":1,"));
    free(text);
    hx_transcript_free(&t);
    hx_transcript_free(&clean);
}

static void a_missing_or_dangling_parent_is_an_error_never_a_new_root(void **state) {
    (void)state;
    hx_transcript t;
    char err[512] = "";
    /* line 22 ("Added it to the README too.") without its parentUuid key */
    char *text = with_line(CURRENT, 22,
                           "{\"isSidechain\":false,\"message\":{\"model\":\"claude-opus-4-7\",\"id\":\"msg_06\",\"role\":"
                           "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Added it.\"}]},\"requestId\":\"req_06\","
                           "\"type\":\"assistant\",\"uuid\":\"x8\",\"sessionId\":\"S\"}");
    assert_int_equal(import_cc(NULL, text, true, false, &t, NULL, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl:22: parentUuid: missing (null for the first line of a conversation)");
    hx_import_stats st = {0};
    int64_t skipped = 0;
    assert_int_equal(import_cc(NULL, text, true, true, &t, &st, &skipped, err, sizeof err), ENG_OK);
    assert_int_equal(skipped, 1);
    assert_int_equal(st.dropped_requests, 4); /* its own request and the three after it, up to the compaction */
    assert_int_equal(t.n, 6);
    hx_transcript_free(&t);
    free(text);
    /* a parentUuid that names no line */
    text = with_line(CURRENT, 24, "{\"parentUuid\":\"nowhere\",\"isSidechain\":false,\"type\":\"user\",\"message\":{\"role\":"
                                  "\"user\",\"content\":\"Thanks. What changed in total?\"},\"uuid\":\"u7\",\"sessionId\":\"S\"}");
    assert_int_equal(import_cc(NULL, text, true, false, &t, NULL, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl:25: parentUuid: the chain reaches parentUuid \"nowhere\", which names no line of "
                             "this file (the history before it is missing)");
    free(text);
}

// ----------------------------------------------------------------------------
// Input hygiene

static void a_bom_utf16_pretty_print_and_big_integers_are_handled(void **state) {
    (void)state;
    char *data, err[512] = "";
    size_t n;
    assert_int_equal(eng_read_file(CURRENT, &data, &n, err, sizeof err), ENG_OK);
    char *bom = malloc(n + 4);
    memcpy(bom, "\xEF\xBB\xBF", 3);
    memcpy(bom + 3, data, n + 1);
    hx_transcript a, b;
    assert_int_equal(import_cc(CURRENT, NULL, true, false, &a, NULL, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(import_cc(NULL, bom, true, false, &b, NULL, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(a.n, b.n);
    for (int32_t i = 0; i < a.n; i++) assert_true(hx_request_equal(&a.reqs[i], &b.reqs[i]));
    hx_transcript_free(&a);
    hx_transcript_free(&b);
    free(bom);
    free(data);
    const char u16[] = "\xFF\xFE{\0\"\0t\0";
    hx_import_opts o = {0};
    o.format = HX_IMPORT_CLAUDE_CODE;
    assert_int_equal(hx_import_buffer(&o, "w.jsonl", u16, sizeof u16 - 1, &a, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_true(strncmp(err, "w.jsonl: the file is UTF-16 encoded", 35) == 0);
    const char *pretty = "{\n  \"type\": \"user\",\n  \"uuid\": \"a\"\n}\n";
    assert_int_equal(import_cc(NULL, pretty, false, false, &a, NULL, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl: the file is one pretty-printed JSON object (5 lines), not JSONL (one JSON object "
                             "per line); convert it with: jq -c . in.jsonl");
    /* an integer beyond 2^63-1 where the importer does not read: counted; inside a message: refused */
    const char *big =
        "{\"type\":\"user\",\"uuid\":\"a\",\"parentUuid\":null,\"sessionId\":\"S\",\"message\":{\"role\":\"user\",\"content\":\"hi\"},"
        "\"toolUseResult\":{\"inode\":18446744073709551616}}\n"
        "{\"type\":\"assistant\",\"uuid\":\"b\",\"parentUuid\":\"a\",\"sessionId\":\"S\",\"requestId\":\"r\",\"message\":"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"yo\"}]}}\n";
    hx_import_stats st = {0};
    assert_int_equal(import_cc(NULL, big, true, false, &a, &st, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(st.big_integers, 1);
    assert_int_equal(a.n, 1);
    hx_transcript_free(&a);
    const char *inside =
        "{\"type\":\"assistant\",\"uuid\":\"b\",\"parentUuid\":null,\"sessionId\":\"S\",\"requestId\":\"r\",\"message\":"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{\"n\":-99999999999999999999}}]}}\n";
    assert_int_equal(import_cc(NULL, inside, true, false, &a, NULL, NULL, err, sizeof err), ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl:1: message.content[0].input.n: an integer beyond 2^63-1 (it cannot be kept exactly)");
    /* not a Claude Code log at all */
    assert_int_equal(import_cc(NULL, "{\"type\":\"message\",\"text\":\"x\"}\n", false, false, &a, NULL, NULL, err, sizeof err),
                     ENG_ERR_FORMAT);
    assert_string_equal(err, "in.jsonl: no Claude Code conversation lines (\"type\": \"user\" or \"assistant\" with a "
                             "message); is this a Claude Code session log?");
}

// ----------------------------------------------------------------------------
// The CLI

static const char *bin(void) {
    static char b[256];
    snprintf(b, sizeof b, "%s/kvreplay", getenv("BUILD") ? getenv("BUILD") : "build");
    return b;
}

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
    char *d, err[256];
    size_t n;
    return eng_read_file(path, &d, &n, err, sizeof err) == ENG_OK ? d : NULL;
}

static void cli_import_prints_and_stores_the_stand_in_ratio(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0 || access(VOCAB, R_OK) != 0) skip();
    char cmd[1024], out[128], log[128];
    snprintf(out, sizeof out, "%s/cur.jsonl", g_dir);
    snprintf(log, sizeof log, "%s/log.txt", g_dir);
    snprintf(cmd, sizeof cmd, "%s import --from claude-code %s -o %s -m %s 2>%s", bin(), CURRENT, out, VOCAB, log);
    assert_int_equal(run(cmd), 0);
    char *msg = slurp(log);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "kvreplay import: request 0 (line 7, 5b0f3c2e-8a41-4d6e-9b7c-2f1e0d9c8b7a turn 0): prompt "));
    assert_non_null(strstr(msg, " tokens, log usage 25,738 (input 6 + cache read 16,232 + cache write 9,500): ratio 0."));
    assert_non_null(strstr(msg, "replay with --normalize anthropic-cch"));
    assert_non_null(strstr(msg, "1 late api_error lines re-linked"));
    free(msg);
    /* stored in the line, and the same count the CLI printed */
    hx_transcript t;
    char err[256];
    assert_int_equal(hx_transcript_read(out, false, &t, NULL, err, sizeof err), ENG_OK);
    assert_true(t.reqs[0].usage.prompt_tokens > 10000);
    assert_string_equal(t.reqs[0].usage.counted_with, "ggml-vocab-llama-spm.gguf chatml");
    assert_non_null(strstr(t.header, "\"volatile\":{\"normalize\":\"anthropic-cch\",\"requests\":10}"));
    hx_transcript_free(&t);
    char *file = slurp(out);
    char want[96];
    snprintf(want, sizeof want, "\"total\":25738,\"prompt_tokens\":");
    assert_non_null(strstr(file, want));
    assert_non_null(strstr(file, "\"counted_with\":\"ggml-vocab-llama-spm.gguf chatml\",\"ratio\":0."));
    free(file);
}

static void cli_import_refuses_unsafe_outputs_and_bad_override_files(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0) skip();
    char cmd[1024], fifo[128], link[128], target[128], bad[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", g_dir);
    snprintf(link, sizeof link, "%s/link", g_dir);
    snprintf(target, sizeof target, "%s/target", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.txt", g_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char err[256];
    assert_int_equal(eng_write_atomic(target, "keep", 4, err, sizeof err), ENG_OK);
    assert_int_equal(symlink(target, link), 0);
    snprintf(cmd, sizeof cmd, "%s import --from claude-code %s -o '' 2>/dev/null", bin(), CURRENT);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s import --from claude-code %s -o %s 2>/dev/null", bin(), CURRENT, fifo);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s import --from claude-code %s -o %s 2>/dev/null", bin(), CURRENT, link);
    assert_int_equal(run(cmd), 2);
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *kept = slurp(target);
    assert_string_equal(kept, "keep");
    free(kept);
    /* a --system-file that is not UTF-8: named, exit 2 */
    assert_int_equal(eng_write_atomic(bad, "ok \xff\xfe no", 8, err, sizeof err), ENG_OK);
    char log[128];
    snprintf(log, sizeof log, "%s/log2.txt", g_dir);
    snprintf(cmd, sizeof cmd, "%s import --from claude-code %s -o %s/x.jsonl --system-file %s 2>%s", bin(), CURRENT,
             g_dir, bad, log);
    assert_int_equal(run(cmd), 2);
    char *msg = slurp(log), want[200];
    snprintf(want, sizeof want, "%s: is not valid UTF-8 text", bad);
    assert_non_null(strstr(msg, want));
    free(msg);
}

static const char *g_kill_dir;
static void kill_hook(const char *tmp) {
    (void)tmp;
    raise(SIGTERM);
}

static void an_interrupted_write_removes_its_temporary_file(void **state) {
    (void)state;
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/sig", g_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/out.jsonl", dir);
    g_kill_dir = dir;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hx_write_atomic_chunk_hook = kill_hook;
        size_t n = 3u << 20;
        char *data = calloc(n, 1);
        char err[256];
        hx_write_atomic(path, data, n, err, sizeof err);
        _exit(0); /* not reached: SIGTERM */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);
    DIR *d = opendir(dir);
    struct dirent *e;
    int n_files = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n_files++;
    closedir(d);
    assert_int_equal(n_files, 0); /* neither the output nor its temporary file */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attachments_are_sent_as_reminders_and_empty_thinking_is_dropped),
        cmocka_unit_test(tool_reference_results_are_kept_as_their_json),
        cmocka_unit_test(is_meta_text_is_sent_with_the_users_turn),
        cmocka_unit_test(a_late_api_error_line_does_not_reroot_the_chain),
        cmocka_unit_test(a_synthetic_error_message_is_no_call_and_left_out),
        cmocka_unit_test(a_compaction_starts_the_history_at_its_summary),
        cmocka_unit_test(a_subagent_file_is_its_own_session),
        cmocka_unit_test(the_stand_in_has_claude_codes_shape_from_the_logs_own_fields),
        cmocka_unit_test(the_stand_in_era_and_extra_tools_follow_the_log),
        cmocka_unit_test(a_skipped_line_drops_every_request_whose_history_held_it),
        cmocka_unit_test(a_missing_or_dangling_parent_is_an_error_never_a_new_root),
        cmocka_unit_test(a_bom_utf16_pretty_print_and_big_integers_are_handled),
        cmocka_unit_test(cli_import_prints_and_stores_the_stand_in_ratio),
        cmocka_unit_test(cli_import_refuses_unsafe_outputs_and_bad_override_files),
        cmocka_unit_test(an_interrupted_write_removes_its_temporary_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
