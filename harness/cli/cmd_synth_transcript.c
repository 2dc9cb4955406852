/*
 * harness/cli/cmd_synth_transcript.c: `kvreplay synth-transcript`: writes a seeded
 * synthetic transcript (harness/transcripts/synth_transcript.h) as transcript v2 (compact lines).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "status.h"
#include "synth_transcript.h"
#include "transcript.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay synth-transcript --scenario agent|extend|static [--seed S] -o FILE.jsonl [OPTIONS]\n"
            "\n"
            "Writes a seeded synthetic transcript (transcript v2, docs/transcripts.md). The same flags\n"
            "always give a byte-identical file.\n"
            "\n"
            "common:\n"
            "  --scenario NAME            agent: Claude-Code-shaped coding sessions; extend: each request\n"
            "                             extends the previous one (git-diff summarisation); static: one\n"
            "                             large static context, a different short question per request\n"
            "  --seed S                   random seed (default 0)\n"
            "  -o, --output FILE          output transcript (written atomically)\n"
            "  --sessions N               number of sessions (default: agent 2, extend 1)\n"
            "  --turns N, --requests N    requests per session (default: agent 6, extend 8)\n"
            "agent:\n"
            "  --system-bytes B           approx bytes of the stable prefix: system blocks + tool\n"
            "                             definitions (default 24000)\n"
            "  --system-tokens-approx T   the same in tokens: B = 4 * T\n"
            "  --tool-result-bytes B      approx size of large tool results (Read, Bash) (default 2000)\n"
            "  --commit-rate P            probability that a non-final response commits, which changes\n"
            "                             the git-status block inside the stable prefix (default 0.1)\n"
            "  --fresh-sessions           all sessions work in one repository one after another, each\n"
            "                             starting fresh from the shared stable prefix; the git-status\n"
            "                             block changes between sessions after a commit\n"
            "  --interleave               emit the sessions' requests round-robin (not with --fresh-sessions)\n"
            "  --env-last                 render the tool definitions inside the system prompt and put the\n"
            "                             environment (git-status) block last, at the end of the stable\n"
            "                             prefix, as in ds4-server's layout (seeds/000)\n"
            "extend, static:\n"
            "  --base-bytes B             diff bytes in the first request (extend) or of the static\n"
            "                             context (static) (default 4096)\n"
            "  --base-tokens-approx T     the same in tokens of diff text: B = 2 * T (the Llama SPM and\n"
            "                             GPT-2 vocabularies give about 2 bytes per token on it)\n"
            "  --base-tokens T            the same, closer: B = 2.3 * T (the Llama SPM vocabulary's bytes\n"
            "                             per token on this text: T within 1%%; GPT-2's about 2.1)\n"
            "  --step-bytes B             diff bytes added by each later request (default 1024)\n"
            "  --format chat|prompt       messages lines (default) or raw prompt lines\n"
            "\n"
            "Every agent request starts with the billing header block\n"
            "  x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=XXXXX;\n"
            "with a fresh checksum (see --normalize anthropic-cch).\n"
            "exit codes: 0 ok, 2 bad usage, 3 I/O or internal error\n");
}

int hx_cmd_synth_transcript(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    const char *scenario = NULL, *outp = NULL, *format = NULL;
    /* parse everything first: defaults depend on the scenario */
    const char *v_seed = NULL, *v_sessions = NULL, *v_turns = NULL, *v_sys = NULL, *v_systok = NULL, *v_tr = NULL,
               *v_commit = NULL, *v_base = NULL, *v_basetok = NULL, *v_basetok23 = NULL, *v_step = NULL;
    bool env_last = false;
    bool fresh = false, inter = false;
    const char *v;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--scenario"))) scenario = v;
        else if ((v = hx_opt(argc, argv, &i, "--seed"))) v_seed = v;
        else if ((v = hx_opt(argc, argv, &i, "-o")) || (v = hx_opt(argc, argv, &i, "--output"))) outp = v;
        else if ((v = hx_opt(argc, argv, &i, "--sessions"))) v_sessions = v;
        else if ((v = hx_opt(argc, argv, &i, "--turns")) || (v = hx_opt(argc, argv, &i, "--requests"))) v_turns = v;
        else if ((v = hx_opt(argc, argv, &i, "--system-bytes"))) v_sys = v;
        else if ((v = hx_opt(argc, argv, &i, "--system-tokens-approx"))) v_systok = v;
        else if ((v = hx_opt(argc, argv, &i, "--tool-result-bytes"))) v_tr = v;
        else if ((v = hx_opt(argc, argv, &i, "--commit-rate"))) v_commit = v;
        else if ((v = hx_opt(argc, argv, &i, "--base-bytes"))) v_base = v;
        else if ((v = hx_opt(argc, argv, &i, "--base-tokens-approx"))) v_basetok = v;
        else if ((v = hx_opt(argc, argv, &i, "--base-tokens"))) v_basetok23 = v;
        else if ((v = hx_opt(argc, argv, &i, "--step-bytes"))) v_step = v;
        else if ((v = hx_opt(argc, argv, &i, "--format"))) format = v;
        else if (hx_flag(argv, i, "--fresh-sessions")) fresh = true;
        else if (hx_flag(argv, i, "--interleave")) inter = true;
        else if (hx_flag(argv, i, "--env-last")) env_last = true;
        else hx_bad_arg(argv[0], argv[i]);
    }
    if (!scenario) hx_die(HX_EXIT_USAGE, "%s: --scenario is required (agent, extend or static)", argv[0]);
    int sc = hx_synth_scenario_from_name(scenario);
    if (sc < 0) hx_die(HX_EXIT_USAGE, "%s: --scenario: expected agent, extend or static, got '%s'", argv[0], scenario);
    if (!outp) hx_die(HX_EXIT_USAGE, "%s: -o FILE is required", argv[0]);
    if (v_sys && v_systok) hx_die(HX_EXIT_USAGE, "%s: give --system-bytes or --system-tokens-approx, not both", argv[0]);

    hx_synth_params p;
    hx_synth_params_init(&p, (hx_synth_scenario)sc);
    if (v_seed) p.seed = (uint64_t)hx_parse_int("--seed", v_seed, 0, INT64_MAX);
    if (v_sessions) p.sessions = (int32_t)hx_parse_int("--sessions", v_sessions, 1, 100000);
    if (v_turns) p.turns = (int32_t)hx_parse_int("--turns", v_turns, 1, 100000);
    if (v_sys) p.system_bytes = hx_parse_int("--system-bytes", v_sys, 0, 64 << 20);
    if (v_systok) p.system_bytes = 4 * hx_parse_int("--system-tokens-approx", v_systok, 0, 16 << 20);
    if (v_tr) p.tool_result_bytes = hx_parse_int("--tool-result-bytes", v_tr, 16, 16 << 20);
    if (v_commit) p.commit_rate = hx_parse_double("--commit-rate", v_commit, 0.0, 1.0);
    if (v_base) p.base_bytes = hx_parse_int("--base-bytes", v_base, 1, 64 << 20);
    if (v_basetok) p.base_bytes = 2 * hx_parse_int("--base-tokens-approx", v_basetok, 1, (64 << 20) / 2);
    if (v_basetok23) p.base_bytes = 23 * hx_parse_int("--base-tokens", v_basetok23, 1, (64 << 20) / 23) / 10;
    if (v_step) p.step_bytes = hx_parse_int("--step-bytes", v_step, 1, 64 << 20);
    p.fresh_sessions = fresh;
    p.interleave = inter;
    p.env_last = env_last;
    if (format) {
        if (!strcmp(format, "prompt")) p.prompt_lines = true;
        else if (strcmp(format, "chat")) hx_die(HX_EXIT_USAGE, "%s: --format: expected chat or prompt, got '%s'", argv[0], format);
    }
    bool agent_only = v_sys || v_systok || v_tr || v_commit || fresh || inter || env_last;
    bool extend_only = v_base || v_basetok || v_basetok23 || v_step || format;
    if (sc == HX_SYNTH_AGENT && extend_only)
        hx_die(HX_EXIT_USAGE, "%s: --base-bytes, --step-bytes and --format apply to --scenario extend", argv[0]);
    if (sc == HX_SYNTH_STATIC && (v_step || format))
        hx_die(HX_EXIT_USAGE, "%s: --step-bytes and --format apply to --scenario extend", argv[0]);
    if (sc != HX_SYNTH_AGENT && agent_only)
        hx_die(HX_EXIT_USAGE, "%s: --system-bytes, --tool-result-bytes, --commit-rate, --fresh-sessions and "
                              "--interleave apply to --scenario agent", argv[0]);

    char err[512] = "";
    hx_transcript t;
    int rc = hx_synth_transcript(&p, &t, err, sizeof err);
    if (rc == ENG_ERR_ARG) hx_die(HX_EXIT_USAGE, "%s", err);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s", err);
    rc = hx_transcript_write(outp, &t, err, sizeof err);
    int32_t n = t.n;
    hx_transcript_free(&t);
    if (rc == ENG_ERR_ARG) hx_die(HX_EXIT_USAGE, "%s: -o %s", argv[0], err); /* an unsafe or empty -o */
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s", err);
    fprintf(stderr, "synth-transcript: wrote %d requests (%d sessions) to %s\n", n, p.sessions, outp);
    return HX_EXIT_OK;
}
