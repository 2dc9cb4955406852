/*
 * harness/cmd_import.c: `kvreplay import`: converts recorded agent logs
 * (anthropic, openai, claude-code, swe-agent) into transcript v1
 * (harness/import.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "import.h"
#include "status.h"
#include "transcript.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay import --from FORMAT FILE -o OUT.jsonl [--skip-bad] [--session NAME]\n"
            "                       [--system-file F] [--tools-file F]\n"
            "\n"
            "Converts a recorded agent log into a transcript v1 file (docs/transcripts.md).\n"
            "\n"
            "formats:\n"
            "  anthropic     JSONL of Messages API request bodies (one model call per line)\n"
            "  openai        JSONL of chat-completions request bodies (one model call per line)\n"
            "  claude-code   a Claude Code session log (~/.claude/projects/<project>/<session>.jsonl)\n"
            "  swe-agent     a SWE-agent trajectory (*.traj JSON with history[])\n"
            "\n"
            "options:\n"
            "  --from FORMAT       input format (required)\n"
            "  -o, --output FILE   output transcript (written atomically)\n"
            "  --skip-bad          skip bad lines (printing \"skipped N bad lines\") instead of failing\n"
            "  --session NAME      session name: anthropic/openai sessions become NAME-0, NAME-1, ...;\n"
            "                      claude-code replaces the sessionId (sidechains: NAME/sidechain-K);\n"
            "                      swe-agent: the session (default: the file name without extension)\n"
            "  --system-file F     replace every request's system prompt: a JSON string or array of\n"
            "                      text blocks, otherwise the whole file as one text block\n"
            "                      (claude-code default: a built-in Claude-Code-like stand-in)\n"
            "  --tools-file F      replace every request's tools: a JSON array of tools, Anthropic\n"
            "                      {name,description,input_schema} or OpenAI {type,function} shape\n"
            "\n"
            "Sessions (anthropic/openai): same system prompt (billing checksum ignored) and same first\n"
            "message; a request's response is the assistant message its session's next request adds.\n"
            "exit codes: 0 ok, 2 bad input (FILE:LINE: FIELD: what) or usage, 3 I/O or internal error\n");
}

int hx_cmd_import(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    hx_import_opts o = {0};
    const char *from = NULL, *in = NULL, *outp = NULL, *v;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--from"))) from = v;
        else if ((v = hx_opt(argc, argv, &i, "-o")) || (v = hx_opt(argc, argv, &i, "--output"))) outp = v;
        else if ((v = hx_opt(argc, argv, &i, "--session"))) o.session = v;
        else if ((v = hx_opt(argc, argv, &i, "--system-file"))) o.system_file = v;
        else if ((v = hx_opt(argc, argv, &i, "--tools-file"))) o.tools_file = v;
        else if (hx_flag(argv, i, "--skip-bad")) o.skip_bad = true;
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else hx_bad_arg(argv[0], argv[i]);
    }
    if (!from) hx_die(HX_EXIT_USAGE, "%s: --from is required (anthropic, openai, claude-code or swe-agent)", argv[0]);
    int fmt = hx_import_format_from_name(from);
    if (fmt < 0)
        hx_die(HX_EXIT_USAGE, "%s: --from: expected anthropic, openai, claude-code or swe-agent, got '%s'", argv[0], from);
    o.format = (hx_import_format)fmt;
    if (!in) hx_die(HX_EXIT_USAGE, "%s: the input FILE is required", argv[0]);
    if (!outp) hx_die(HX_EXIT_USAGE, "%s: -o FILE is required", argv[0]);
    if (o.session && !o.session[0]) hx_die(HX_EXIT_USAGE, "%s: --session: must not be empty", argv[0]);

    char err[1024] = "";
    hx_transcript t;
    int64_t skipped = 0;
    int rc = hx_import_file(&o, in, &t, &skipped, err, sizeof err);
    /* an input or override file that cannot be read is the user's argument: exit 2 */
    if (rc == ENG_ERR_FORMAT || rc == ENG_ERR_IO || rc == ENG_ERR_ARG) hx_die(HX_EXIT_USAGE, "%s", err);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s: %s", in, eng_status_str(rc));
    if (skipped) fprintf(stderr, "kvreplay import: skipped %lld bad lines\n", (long long)skipped);
    if (t.n == 0) {
        hx_transcript_free(&t);
        hx_die(HX_EXIT_USAGE, "%s: no model calls found", in);
    }
    int32_t n_sessions = 0;
    hx_strmap seen = {0};
    for (int32_t i = 0; i < t.n; i++)
        if (!hx_strmap_get(&seen, t.reqs[i].session, NULL) && hx_strmap_put(&seen, t.reqs[i].session, i) == ENG_OK)
            n_sessions++;
    hx_strmap_free(&seen);
    rc = hx_transcript_write(outp, &t, err, sizeof err);
    int32_t n = t.n;
    hx_transcript_free(&t);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s", err);
    fprintf(stderr, "kvreplay import: %d requests in %d sessions from %s (%s) to %s\n", n, n_sessions, in, from, outp);
    return HX_EXIT_OK;
}
