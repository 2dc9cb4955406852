/*
 * tests/test_synth_transcript.c: synthetic transcripts: determinism, the
 * billing checksum on every request, normalization, git-status changes on
 * commit (per session and between fresh sessions), the template prefix
 * property for every consecutive pair of a session, and sizes that follow
 * the flags.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "normalize.h"
#include "status.h"
#include "synth_transcript.h"
#include "template.h"
#include "transcript.h"
#include "util.h"

static void gen(const hx_synth_params *p, hx_transcript *t) {
    char err[256] = "";
    int rc = hx_synth_transcript(p, t, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
}

static char *bytes_of(const hx_transcript *t, size_t *n) {
    char *b, err[256];
    assert_int_equal(hx_transcript_serialize(t, &b, n, err, sizeof err), ENG_OK);
    return b;
}

static char *gen_bytes(const hx_synth_params *p, size_t *n) {
    hx_transcript t;
    gen(p, &t);
    char *b = bytes_of(&t, n);
    hx_transcript_free(&t);
    return b;
}

static void same_flags_give_identical_bytes_and_another_seed_differs(void **state) {
    (void)state;
    for (int s = 0; s < 2; s++) {
        hx_synth_params p;
        hx_synth_params_init(&p, (hx_synth_scenario)s);
        p.seed = 42;
        p.system_bytes = 8000;
        size_t na, nb, nc;
        char *a = gen_bytes(&p, &na), *b = gen_bytes(&p, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        p.seed = 43;
        char *c = gen_bytes(&p, &nc);
        assert_true(na != nc || memcmp(a, c, na) != 0);
        free(a);
        free(b);
        free(c);
    }
}

static void the_written_file_reads_back_identically(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.system_bytes = 6000;
    hx_transcript t, u;
    gen(&p, &t);
    char path[] = "/tmp/kvr_synth_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256] = "";
    assert_int_equal(hx_transcript_write(path, &t, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_read(path, false, &u, NULL, err, sizeof err), ENG_OK);
    assert_int_equal(t.n, u.n);
    assert_int_equal(t.n, 12);
    for (int32_t i = 0; i < t.n; i++) assert_true(hx_request_equal(&t.reqs[i], &u.reqs[i]));
    hx_transcript_free(&t);
    hx_transcript_free(&u);
    unlink(path);
}

static void the_billing_checksum_is_fresh_on_every_request(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.sessions = 12;
    p.turns = 10;
    p.system_bytes = 4000;
    p.tool_result_bytes = 200;
    hx_transcript t;
    gen(&p, &t);
    assert_int_equal(t.n, 120);
    const char *head = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=";
    for (int32_t i = 0; i < t.n; i++) {
        const char *b = t.reqs[i].system[0].text;
        assert_int_equal(strlen(b), strlen(head) + 6);
        assert_true(strncmp(b, head, strlen(head)) == 0);
        const char *v = b + strlen(head);
        for (int k = 0; k < 5; k++) assert_non_null(strchr("0123456789abcdef", v[k]));
        assert_int_equal(v[5], ';');
        assert_true(strncmp(t.reqs[i].system[1].text, "You are Claude Code, Anthropic's official CLI for Claude.", 57) == 0);
        for (int32_t j = 0; j < i; j++) assert_string_not_equal(b, t.reqs[j].system[0].text);
    }
    hx_transcript_free(&t);
}

/* The rendered system turn (stable prefix) of r after normalization n. */
static char *stable_prefix(const hx_normalize *n, const hx_request *r) {
    hx_request c;
    assert_int_equal(hx_request_copy(&c, r), ENG_OK);
    assert_true(hx_normalize_apply(n, &c) >= 0);
    hx_render p;
    char err[256];
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &c, &p, err, sizeof err), ENG_OK);
    size_t end = hx_render_system_end(&p);
    assert_true(end > 0);
    char *s = strndup(p.text, end);
    hx_render_free(&p);
    hx_request_free(&c);
    return s;
}

static void normalization_makes_the_stable_prefix_of_fresh_sessions_identical(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.sessions = 4;
    p.turns = 3;
    p.fresh_sessions = true;
    p.commit_rate = 0.0;
    p.system_bytes = 10000;
    hx_transcript t;
    gen(&p, &t);
    hx_normalize on, off;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &on), ENG_OK);
    assert_int_equal(hx_normalize_parse("none", &off), ENG_OK);
    char *first = stable_prefix(&on, &t.reqs[0]);
    char *raw0 = stable_prefix(&off, &t.reqs[0]);
    for (int32_t i = 1; i < t.n; i++) {
        char *s = stable_prefix(&on, &t.reqs[i]);
        assert_string_equal(s, first);
        free(s);
        /* without the rule the prefixes differ, first inside system block 0 (the header) */
        char *raw = stable_prefix(&off, &t.reqs[i]);
        assert_string_not_equal(raw, raw0);
        size_t x = hx_common_prefix(raw, strlen(raw), raw0, strlen(raw0));
        hx_render pr;
        char err[256], where[64];
        assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &t.reqs[i], &pr, err, sizeof err), ENG_OK);
        assert_string_equal(hx_span_describe(hx_render_find(&pr, x), &t.reqs[i], where, sizeof where), "system block 0");
        hx_render_free(&pr);
        free(raw);
    }
    free(first);
    free(raw0);
    hx_transcript_free(&t);
}

static bool commits(const hx_message *m) {
    for (int32_t b = 0; b < m->n_blocks; b++)
        if (m->blocks[b].type == HX_BLOCK_TOOL_USE && strstr(m->blocks[b].input, "git commit")) return true;
    return false;
}

static void a_commit_rewrites_the_git_status_block_for_the_next_requests(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.sessions = 2;
    p.turns = 5;
    p.commit_rate = 1.0;
    p.system_bytes = 6000;
    hx_transcript t;
    gen(&p, &t);
    hx_normalize n;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    for (int32_t i = 0; i + 1 < t.n; i++) {
        const hx_request *a = &t.reqs[i], *b = &t.reqs[i + 1];
        if (strcmp(a->session, b->session)) continue;
        assert_true(commits(&a->response));
        assert_string_equal(a->system[1].text, b->system[1].text);
        assert_string_not_equal(a->system[2].text, b->system[2].text);
        assert_non_null(strstr(b->system[2].text, "<git-status>"));
        /* the commit subject is now the most recent commit of the block */
        const char *in = a->response.blocks[a->response.n_blocks - 1].input;
        const char *q = strstr(in, "-m \\\"");
        assert_non_null(q);
        char subject[128];
        size_t k = 0;
        for (q += 5; *q && *q != '\\' && k + 1 < sizeof subject; q++) subject[k++] = *q;
        subject[k] = '\0';
        assert_non_null(strstr(b->system[2].text, subject));
        assert_null(strstr(a->system[2].text, subject));
        /* and the first difference of the normalized prompts is in system block 2 */
        char *pa = stable_prefix(&n, a), *pb = stable_prefix(&n, b);
        size_t x = hx_common_prefix(pa, strlen(pa), pb, strlen(pb));
        hx_render r;
        char err[256], where[64];
        hx_request c;
        assert_int_equal(hx_request_copy(&c, b), ENG_OK);
        hx_normalize_apply(&n, &c);
        assert_int_equal(hx_render_prompt(HX_TEMPLATE_CHATML, &c, &r, err, sizeof err), ENG_OK);
        assert_string_equal(hx_span_describe(hx_render_find(&r, x), &c, where, sizeof where), "system block 2");
        hx_render_free(&r);
        hx_request_free(&c);
        free(pa);
        free(pb);
    }
    hx_transcript_free(&t);
}

static void fresh_sessions_share_the_prefix_until_a_commit(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.sessions = 10;
    p.turns = 3;
    p.fresh_sessions = true;
    p.commit_rate = 0.3;
    p.system_bytes = 5000;
    p.tool_result_bytes = 300;
    hx_transcript t;
    gen(&p, &t);
    int changed = 0, same = 0;
    for (int32_t s = 1; s < p.sessions; s++) {
        const hx_request *prev = &t.reqs[(s - 1) * p.turns], *cur = &t.reqs[s * p.turns];
        bool committed = false;
        for (int32_t k = 0; k < p.turns; k++) {
            const hx_request *r = &t.reqs[(s - 1) * p.turns + k];
            committed |= commits(&r->response);
            /* inside a session the snapshot never changes */
            assert_string_equal(r->system[2].text, prev->system[2].text);
        }
        if (committed) {
            assert_string_not_equal(cur->system[2].text, prev->system[2].text);
            changed++;
        } else {
            assert_string_equal(cur->system[2].text, prev->system[2].text);
            same++;
        }
        assert_string_equal(cur->system[1].text, prev->system[1].text);
    }
    print_message("fresh sessions: %d prefix changes, %d shared\n", changed, same);
    assert_true(changed > 0 && same > 0);
    hx_transcript_free(&t);
}

/* For every consecutive pair of a session (after normalization), checks the
 * template prefix property under every template; pairs separated by a commit
 * in default mode are skipped (their system prompt changed by design).
 * Returns the number of pairs checked. */
static int check_prefix_property(const hx_transcript *t) {
    hx_normalize n;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &n), ENG_OK);
    int checked = 0;
    for (int32_t i = 0; i < t->n; i++) {
        const hx_request *a = &t->reqs[i], *b = NULL;
        for (int32_t j = i + 1; j < t->n && !b; j++)
            if (!strcmp(t->reqs[j].session, a->session)) b = &t->reqs[j];
        if (!b) continue;
        assert_int_equal(b->turn, a->turn + 1);
        if (commits(&a->response)) continue;
        hx_request ca, cb;
        assert_int_equal(hx_request_copy(&ca, a), ENG_OK);
        assert_int_equal(hx_request_copy(&cb, b), ENG_OK);
        hx_normalize_apply(&n, &ca);
        hx_normalize_apply(&n, &cb);
        for (int k = 0; k < HX_TEMPLATE_COUNT; k++) {
            hx_render pa, ra, pb;
            char err[256];
            assert_int_equal(hx_render_prompt((hx_template)k, &ca, &pa, err, sizeof err), ENG_OK);
            assert_int_equal(hx_render_response((hx_template)k, &ca, &ra, err, sizeof err), ENG_OK);
            assert_int_equal(hx_render_prompt((hx_template)k, &cb, &pb, err, sizeof err), ENG_OK);
            assert_true(pa.len + ra.len < pb.len);
            assert_memory_equal(pb.text, pa.text, pa.len);
            assert_memory_equal(pb.text + pa.len, ra.text, ra.len);
            hx_render_free(&pa);
            hx_render_free(&ra);
            hx_render_free(&pb);
        }
        hx_request_free(&ca);
        hx_request_free(&cb);
        checked++;
    }
    return checked;
}

static void every_consecutive_pair_of_an_agent_session_extends_the_previous(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.sessions = 3;
    p.turns = 8;
    p.commit_rate = 0.2;
    p.interleave = true;
    p.system_bytes = 6000;
    hx_transcript t;
    gen(&p, &t);
    /* interleaved: round-robin over the sessions */
    assert_string_equal(t.reqs[0].session, "agent-000");
    assert_string_equal(t.reqs[1].session, "agent-001");
    assert_string_equal(t.reqs[3].session, "agent-000");
    assert_int_equal(t.reqs[3].turn, 1);
    int checked = check_prefix_property(&t);
    assert_true(checked >= 10);
    hx_transcript_free(&t);
}

static void every_consecutive_pair_of_an_extend_session_extends_the_previous(void **state) {
    (void)state;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_EXTEND);
    p.sessions = 2;
    p.turns = 6;
    hx_transcript t;
    gen(&p, &t);
    assert_int_equal(t.n, 12);
    assert_int_equal(check_prefix_property(&t), 10);
    hx_transcript_free(&t);
    /* raw prompt lines: prompt(t+1) starts with prompt(t) + response(t) */
    p.prompt_lines = true;
    gen(&p, &t);
    for (int32_t i = 0; i + 1 < t.n; i++) {
        const hx_request *a = &t.reqs[i], *b = &t.reqs[i + 1];
        assert_int_equal(hx_request_kind_of(a), HX_REQUEST_PROMPT);
        if (strcmp(a->session, b->session)) continue;
        size_t la = strlen(a->prompt), lr = strlen(a->response_text);
        assert_true(strlen(b->prompt) > la + lr);
        assert_memory_equal(b->prompt, a->prompt, la);
        assert_memory_equal(b->prompt + la, a->response_text, lr);
    }
    assert_int_equal(check_prefix_property(&t), 10);
    hx_transcript_free(&t);
}

static int64_t prefix_bytes(const hx_request *r) {
    int64_t n = 0;
    for (int32_t i = 0; i < r->n_system; i++) n += (int64_t)strlen(r->system[i].text);
    for (int32_t i = 0; i < r->n_tools; i++)
        n += (int64_t)(strlen(r->tools[i].name) + strlen(r->tools[i].description) + strlen(r->tools[i].schema));
    return n;
}

static void sizes_follow_the_flags(void **state) {
    (void)state;
    static const int64_t sys[] = {12000, 24000, 60000};
    for (size_t i = 0; i < 3; i++) {
        hx_synth_params p;
        hx_synth_params_init(&p, HX_SYNTH_AGENT);
        p.system_bytes = sys[i];
        p.tool_result_bytes = i == 0 ? 1000 : 4000;
        p.turns = 10;
        p.seed = 7 + i;
        hx_transcript t;
        gen(&p, &t);
        int reads = 0;
        for (int32_t r = 0; r < t.n; r++) {
            int64_t b = prefix_bytes(&t.reqs[r]);
            assert_true(b >= sys[i] * 85 / 100 && b <= sys[i] * 115 / 100);
            const hx_message *m = &t.reqs[r].response;
            for (int32_t k = 0; k < m->n_blocks; k++) {
                if (m->blocks[k].type != HX_BLOCK_TOOL_USE || strcmp(m->blocks[k].name, "Read")) continue;
                /* the matching result is in the next request of the session */
                for (int32_t s = r + 1; s < t.n; s++) {
                    if (strcmp(t.reqs[s].session, t.reqs[r].session)) continue;
                    const hx_message *u = &t.reqs[s].messages[t.reqs[s].n_messages - 1];
                    for (int32_t q = 0; q < u->n_blocks; q++) {
                        if (strcmp(u->blocks[q].id, m->blocks[k].id)) continue;
                        int64_t len = (int64_t)strlen(u->blocks[q].text);
                        assert_true(len >= p.tool_result_bytes * 3 / 4 && len <= p.tool_result_bytes * 13 / 10 + 200);
                        reads++;
                    }
                    break;
                }
            }
        }
        assert_true(reads > 0);
        hx_transcript_free(&t);
    }
    /* extend: the first diff is about base bytes, each step about step bytes */
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_EXTEND);
    p.base_bytes = 8000;
    p.step_bytes = 2000;
    p.turns = 5;
    hx_transcript t;
    gen(&p, &t);
    for (int32_t r = 0; r < t.n; r++) {
        const hx_message *u = &t.reqs[r].messages[t.reqs[r].n_messages - 1];
        int64_t len = (int64_t)strlen(u->blocks[0].text), want = r == 0 ? p.base_bytes : p.step_bytes;
        assert_true(len >= want && len <= want + 2000);
    }
    hx_transcript_free(&t);
}

static void out_of_range_parameters_are_named(void **state) {
    (void)state;
    hx_synth_params p;
    hx_transcript t;
    char err[256] = "";
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.turns = 0;
    assert_int_equal(hx_synth_transcript(&p, &t, err, sizeof err), ENG_ERR_ARG);
    assert_string_equal(err, "--turns: must be in [1, 100000]");
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.commit_rate = 1.5;
    assert_int_equal(hx_synth_transcript(&p, &t, err, sizeof err), ENG_ERR_ARG);
    assert_string_equal(err, "--commit-rate: must be in [0, 1]");
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.fresh_sessions = p.interleave = true;
    assert_int_equal(hx_synth_transcript(&p, &t, err, sizeof err), ENG_ERR_ARG);
    assert_int_equal(hx_synth_scenario_from_name("agent"), HX_SYNTH_AGENT);
    assert_int_equal(hx_synth_scenario_from_name("extend"), HX_SYNTH_EXTEND);
    assert_int_equal(hx_synth_scenario_from_name("chat"), ENG_ERR_NOT_FOUND);
}

static void the_agent_prefix_stand_in_has_three_blocks_and_the_tools(void **state) {
    (void)state;
    hx_block *sys;
    hx_tool *tools;
    int32_t ns, nt;
    assert_int_equal(hx_synth_agent_prefix(0, 24000, "a5145", &sys, &ns, &tools, &nt), ENG_OK);
    assert_int_equal(ns, 3);
    assert_string_equal(sys[0].text, "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;");
    assert_non_null(strstr(sys[2].text, "<git-status>"));
    static const char *names[] = {"Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bool found = false;
        for (int32_t k = 0; k < nt; k++) found |= !strcmp(tools[k].name, names[i]);
        assert_true(found);
    }
    for (int32_t i = 0; i < ns; i++) hx_block_free(&sys[i]);
    for (int32_t i = 0; i < nt; i++) hx_tool_free(&tools[i]);
    free(sys);
    free(tools);
}

// ----------------------------------------------------------------------------
// The CLI (skipped when the kvreplay binary has not been built)

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cli_writes_identical_files_for_identical_flags(void **state) {
    (void)state;
    char bin[256];
    snprintf(bin, sizeof bin, "%s/kvreplay", getenv("BUILD") ? getenv("BUILD") : "build");
    if (access(bin, X_OK) != 0) skip();
    char dir[] = "/tmp/kvr_scli_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[300], b[300], cmd[2048], err[256];
    snprintf(a, sizeof a, "%s/a.jsonl", dir);
    snprintf(b, sizeof b, "%s/b.jsonl", dir);
    const char *flags = "--scenario agent --seed 9 --sessions 2 --turns 3 --system-tokens-approx 2500 "
                        "--tool-result-bytes 500 --commit-rate 0.5 --fresh-sessions";
    snprintf(cmd, sizeof cmd, "%s synth-transcript %s -o %s 2>/dev/null", bin, flags, a);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s synth-transcript %s --output=%s 2>/dev/null", bin, flags, b);
    assert_int_equal(run(cmd), 0);
    char *x, *y;
    size_t nx, ny;
    assert_int_equal(eng_read_file(a, &x, &nx, err, sizeof err), ENG_OK);
    assert_int_equal(eng_read_file(b, &y, &ny, err, sizeof err), ENG_OK);
    assert_true(nx > 0);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    free(x);
    free(y);
    /* --base-tokens T is --base-bytes 2.3 T (the Llama SPM vocabulary's bytes per token) */
    snprintf(cmd, sizeof cmd, "%s synth-transcript --scenario static --seed 4 --base-tokens 10000 -o %s "
             "2>/dev/null && %s synth-transcript --scenario static --seed 4 --base-bytes 23000 -o %s 2>/dev/null && "
             "cmp -s %s %s", bin, a, bin, b, a, b);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s synth-transcript --scenario static --seed 4 --base-bytes 20000 -o %s "
             "2>/dev/null && ! cmp -s %s %s", bin, b, a, b);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s synth-transcript --help | grep -q -- --commit-rate", bin);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s synth-transcript --scenario agent --base-bytes 5 -o %s 2>/dev/null", bin, a);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s synth-transcript --scenario extend --turns 0 -o %s 2>/dev/null", bin, a);
    assert_int_equal(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s synth-transcript --scenario nope -o %s 2>/dev/null", bin, a);
    assert_int_equal(run(cmd), 2);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_flags_give_identical_bytes_and_another_seed_differs),
        cmocka_unit_test(the_written_file_reads_back_identically),
        cmocka_unit_test(the_billing_checksum_is_fresh_on_every_request),
        cmocka_unit_test(normalization_makes_the_stable_prefix_of_fresh_sessions_identical),
        cmocka_unit_test(a_commit_rewrites_the_git_status_block_for_the_next_requests),
        cmocka_unit_test(fresh_sessions_share_the_prefix_until_a_commit),
        cmocka_unit_test(every_consecutive_pair_of_an_agent_session_extends_the_previous),
        cmocka_unit_test(every_consecutive_pair_of_an_extend_session_extends_the_previous),
        cmocka_unit_test(sizes_follow_the_flags),
        cmocka_unit_test(out_of_range_parameters_are_named),
        cmocka_unit_test(the_agent_prefix_stand_in_has_three_blocks_and_the_tools),
        cmocka_unit_test(cli_writes_identical_files_for_identical_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
