/*
 * harness/cli/cmd_import.c: `kvreplay import`: converts recorded agent logs
 * into transcript v1 (transcripts/import.h) with the importer that --from
 * names; the formats, their help lines and their own options come from the
 * importer registry (transcripts/importers/).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "import.h"
#include "importer.h"
#include "status.h"
#include "transcript.h"

typedef struct import_args {
    const char    *from, *output;
    hx_import_opts o;
} import_args;

#define OPT(field) offsetof(import_args, field)
static const hx_option k_options[] = {
    {"--from", NULL, "FORMAT", "input format (required)", HX_OPT_STRING, OPT(from), 0, 0, NULL},
    {"--output", "-o", "FILE", "output transcript (written atomically)", HX_OPT_STRING, OPT(output), 0, 0, NULL},
    {"--skip-bad", NULL, NULL, "skip bad lines (printing \"skipped N bad lines\") instead of failing", HX_OPT_FLAG,
     OPT(o.skip_bad), 0, 0, NULL},
    {"--session", NULL, "NAME", "session name: anthropic/openai sessions become NAME-0, NAME-1, ...;\n"
     "claude-code replaces the sessionId (sidechains: NAME/sidechain-K);\n"
     "swe-agent: the session (default: the file name without extension)", HX_OPT_STRING, OPT(o.session), 0, 0, NULL},
    {"--system-file", NULL, "F", "replace every request's system prompt: a JSON string or array of\n"
     "text blocks, otherwise the whole file as one text block\n"
     "(claude-code default: a built-in Claude-Code-like stand-in)", HX_OPT_STRING, OPT(o.system_file), 0, 0, NULL},
    {"--tools-file", NULL, "F", "replace every request's tools: a JSON array of tools, Anthropic\n"
     "{name,description,input_schema} or OpenAI {type,function} shape", HX_OPT_STRING, OPT(o.tools_file), 0, 0,
     NULL},
    {0},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay import --from FORMAT FILE -o OUT.jsonl [--skip-bad] [--session NAME]\n"
            "                       [--system-file F] [--tools-file F]\n"
            "\n"
            "Converts a recorded agent log into a transcript v1 file (docs/transcripts.md).\n"
            "\n"
            "formats:\n");
    for (int i = 0; hx_importers[i]; i++) fprintf(f, "  %-13s %s\n", hx_importers[i]->name, hx_importers[i]->help);
    fprintf(f, "\noptions:\n");
    hx_options_help(k_options, NULL, f);
    for (int i = 0; hx_importers[i]; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: ", hx_importers[i]->name);
        hx_options_help(hx_importers[i]->options, prefix, f);
    }
    fprintf(f,
            "\n"
            "Sessions (anthropic/openai): same system prompt (billing checksum ignored) and same first\n"
            "message; a request's response is the assistant message its session's next request adds.\n"
            "exit codes: 0 ok, 2 bad input (FILE:LINE: FIELD: what) or usage, 3 I/O or internal error\n");
}

/* "anthropic, openai, claude-code or swe-agent" (static). */
static const char *format_names(void) {
    static char buf[256];
    size_t off = 0;
    for (int i = 0; hx_importers[i] && off < sizeof buf; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i == 0 ? "" : hx_importers[i + 1] ? ", " : " or ",
                                hx_importers[i]->name);
    return buf;
}

int hx_cmd_import(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    import_args a = {0};
    /* the format first: its importer's own options are parsed with the shared ones */
    for (int i = 1; i < argc && !a.from; i++) a.from = hx_opt(argc, argv, &i, "--from");
    const hx_importer *imp = NULL;
    if (a.from) {
        int fmt = hx_import_format_from_name(a.from);
        if (fmt < 0)
            hx_die(HX_EXIT_USAGE, "%s: --from: expected %s, got '%s'", argv[0], format_names(), a.from);
        a.o.format = (hx_import_format)fmt;
        imp = hx_importer_at(fmt);
    }
    void *fmt_opts = NULL;
    if (imp && imp->opts_size) {
        if (!(fmt_opts = malloc(imp->opts_size))) hx_die(HX_EXIT_INTERNAL, "import: out of memory");
        memcpy(fmt_opts, imp->defaults, imp->opts_size);
        a.o.format_opts = fmt_opts;
    }
    const char *in = NULL;
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_options, &a, argc, argv, &i)) continue;
        if (imp && fmt_opts && hx_options_parse(imp->options, fmt_opts, argc, argv, &i)) continue;
        if (argv[i][0] != '-' && !in) in = argv[i];
        else hx_bad_arg(argv[0], argv[i]);
    }
    const char *from = a.from, *outp = a.output;
    hx_import_opts o = a.o;
    if (!from) hx_die(HX_EXIT_USAGE, "%s: --from is required (%s)", argv[0], format_names());
    if (!in) hx_die(HX_EXIT_USAGE, "%s: the input FILE is required", argv[0]);
    if (!outp) hx_die(HX_EXIT_USAGE, "%s: -o FILE is required", argv[0]);
    hx_check_output_path("-o", outp);
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
    free(fmt_opts);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s", err);
    fprintf(stderr, "kvreplay import: %d requests in %d sessions from %s (%s) to %s\n", n, n_sessions, in, from, outp);
    return HX_EXIT_OK;
}
