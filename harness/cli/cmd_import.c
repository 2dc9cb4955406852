/*
 * harness/cli/cmd_import.c: `kvreplay import`: converts recorded agent logs
 * into a transcript (v2, compact, by default; import/import.h) with the
 * importer that --from names; the formats, their help lines and their own
 * options come from the importer registry (import/importers/).
 *
 * Besides converting, it says what the input held that did not map one to
 * one (skipped lines, dropped requests, unknown types, ...), which
 * --normalize rule removes a per-request volatile header, and, where the log
 * recorded its calls' usage, the imported prompt's tokens beside the log's
 * total per request (with -m: the stand-in ratio, also stored in the line).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "import.h"
#include "importer.h"
#include "jsonl.h"
#include "prepare.h"
#include "status.h"
#include "str.h"
#include "template.h"
#include "tokenizer.h"
#include "transcript.h"

typedef struct import_args {
    const char    *from, *output, *vocab, *template_name;
    int32_t        version;
    bool           quiet;
    hx_import_opts o;
} import_args;

#define OPT(field) offsetof(import_args, field)
static const hx_option k_options[] = {
    {"--from", NULL, "FORMAT", "input format (required)", HX_OPT_STRING, OPT(from), 0, 0, NULL},
    {"--output", "-o", "FILE", "output transcript (written atomically; an existing non-regular file,\n"
     "such as a device, FIFO or symbolic link, is refused)", HX_OPT_STRING, OPT(output), 0, 0, NULL},
    {"--skip-bad", NULL, NULL, "skip bad lines instead of failing (claude-code: a request whose\n"
     "history lost a skipped line is dropped whole; each is named, all are counted)", HX_OPT_FLAG,
     OPT(o.skip_bad), 0, 0, NULL},
    {"--session", NULL, "NAME", "session name: anthropic/openai sessions become NAME-0, NAME-1, ...;\n"
     "claude-code replaces the sessionId (subagents: NAME/agent-ID);\n"
     "swe-agent: the session (default: the file name without extension)", HX_OPT_STRING, OPT(o.session), 0, 0, NULL},
    {"--system-file", NULL, "F", "replace every request's system prompt: a JSON string or array of\n"
     "text blocks, otherwise the whole file as one text block\n"
     "(claude-code default: the built-in Claude Code stand-in)", HX_OPT_STRING, OPT(o.system_file), 0, 0, NULL},
    {"--tools-file", NULL, "F", "replace every request's tools: a JSON array of tools, Anthropic\n"
     "{name,description,input_schema} or OpenAI {type,function} shape", HX_OPT_STRING, OPT(o.tools_file), 0, 0,
     NULL},
    {"--model", "-m", "VOCAB.gguf", "count each imported prompt's tokens with this vocabulary (a model or\n"
     "a vocabulary-only GGUF) and print them beside the log's own usage\n"
     "total per request, with the ratio; both are stored in the line", HX_OPT_STRING, OPT(vocab), 0, 0, NULL},
    {"--template", NULL, "NAME", "chat template for -m (chatml, llama2, llama3, raw; default: the\n"
     "vocabulary's tokenizer.chat_template, as replay picks it)", HX_OPT_STRING, OPT(template_name), 0, 0, NULL},
    {"--format-version", NULL, "1|2", "transcript format to write (default 2: compact lines and a header)",
     HX_OPT_INT, OPT(version), 1, 2, NULL},
    {"--quiet", "-q", NULL, "print only errors and warnings (not the per-request usage lines)", HX_OPT_FLAG,
     OPT(quiet), 0, 0, NULL},
    {0},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay import --from FORMAT FILE -o OUT.jsonl [--skip-bad] [--session NAME]\n"
            "                       [--system-file F] [--tools-file F] [-m VOCAB.gguf [--template NAME]]\n"
            "                       [--format-version 1|2] [-q]\n"
            "\n"
            "Converts a recorded agent log into a transcript (format v2 by default: a request names the\n"
            "previous request of its session and holds the messages it appends; docs/transcripts.md).\n"
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
            "Inspect an imported prompt with: kvreplay render -t OUT.jsonl --request N\n"
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

/* "12,345" into buf. */
static const char *group3(int64_t v, char *buf, size_t n) {
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", (long long)(v < 0 ? -v : v));
    size_t len = strlen(raw), o = 0;
    if (v < 0 && o + 1 < n) buf[o++] = '-';
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (i && (len - i) % 3 == 0 && o + 1 < n) buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Counts each request's prompt tokens (rendered by tmpl, tokenized as the
 * replay does: BOS when the vocabulary adds one, special tokens parsed),
 * stores them with the log's usage, and prints one line per request. */
static void count_prompts(hx_transcript *t, const char *vocab, const char *template_name, bool quiet) {
    char err[1024];
    eng_tokenizer *tok = NULL;
    char *chat = NULL;
    int rc = hx_vocab_load(vocab, &tok, &chat, err, sizeof err);
    if (rc) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    hx_template tmpl;
    if (template_name) {
        int k = hx_template_from_name(template_name);
        if (k < 0) hx_die(HX_EXIT_USAGE, "import: --template: unknown template '%s' (known: chatml, llama2, llama3, raw)",
                          template_name);
        tmpl = (hx_template)k;
    } else {
        tmpl = hx_template_guess(NULL, chat);
    }
    const char *base = strrchr(vocab, '/');
    char with[512];
    snprintf(with, sizeof with, "%s %s", base ? base + 1 : vocab, hx_template_name(tmpl));
    int32_t cap = 1 << 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) hx_die(HX_EXIT_INTERNAL, "import: out of memory");
    int32_t n_usage = 0;
    for (int32_t i = 0; i < t->n; i++) {
        hx_request *r = &t->reqs[i];
        if (!r->usage.present || hx_request_kind_of(r) == HX_REQUEST_TOKENS) continue;
        hx_render p;
        if (hx_render_prompt(tmpl, r, &p, err, sizeof err)) hx_die(HX_EXIT_INTERNAL, "import: %s", err);
        int32_t k;
        while ((k = eng_tokenize(tok, p.text, p.len, eng_tokenizer_add_bos(tok), false, true, ids, cap, NULL)) < 0 &&
               k != INT32_MIN) {
            cap = -k;
            free(ids);
            if (!(ids = malloc((size_t)cap * sizeof *ids))) hx_die(HX_EXIT_INTERNAL, "import: out of memory");
        }
        hx_render_free(&p);
        if (k == INT32_MIN) hx_die(HX_EXIT_INTERNAL, "import: out of memory");
        r->usage.prompt_tokens = k;
        free(r->usage.counted_with);
        if (!(r->usage.counted_with = hx_strdup(with))) hx_die(HX_EXIT_INTERNAL, "import: out of memory");
        int64_t tot = hx_call_usage_total(&r->usage);
        n_usage++;
        if (quiet) continue;
        char a[32], b[32], c1[32], c2[32], c3[32];
        if (tot > 0)
            fprintf(stderr, "kvreplay import: request %d (line %lld, %s turn %d): prompt %s tokens, log usage %s "
                            "(input %s + cache read %s + cache write %s): ratio %.3f\n",
                    i, (long long)r->line, r->session, r->turn, group3(k, a, sizeof a), group3(tot, b, sizeof b),
                    group3(r->usage.input, c1, sizeof c1), group3(r->usage.cache_read, c2, sizeof c2),
                    group3(r->usage.cache_creation, c3, sizeof c3), (double)k / (double)tot);
        else
            fprintf(stderr, "kvreplay import: request %d (line %lld, %s turn %d): prompt %s tokens, log usage 0 "
                            "(the provider reported no input tokens)\n",
                    i, (long long)r->line, r->session, r->turn, group3(k, a, sizeof a));
    }
    if (n_usage && !quiet)
        fprintf(stderr, "kvreplay import: prompt tokens counted with %s (%s template); the log's usage counts the "
                        "model provider's tokens\n", base ? base + 1 : vocab, hx_template_name(tmpl));
    free(ids);
    free(chat);
    eng_tokenizer_free(tok);
}

/* Warnings: what the input held that did not map one to one. */
static void report(const hx_import_stats *st, int64_t skipped) {
    if (skipped) fprintf(stderr, "kvreplay import: skipped %lld bad lines\n", (long long)skipped);
    if (st->dropped_requests)
        fprintf(stderr, "kvreplay import: dropped %lld requests whose history lost a skipped line\n",
                (long long)st->dropped_requests);
    if (st->unknown_blocks)
        fprintf(stderr, "kvreplay import: warning: %lld content blocks of unknown types (%s) kept as their JSON text\n",
                (long long)st->unknown_blocks, st->unknown_types);
    if (st->unknown_fields)
        fprintf(stderr, "kvreplay import: %lld fields the importer does not know, accepted (%s)\n",
                (long long)st->unknown_fields, st->unknown_field_paths);
    if (st->skipped_line_types)
        fprintf(stderr, "kvreplay import: %lld lines of types the importer does not know, skipped (%s)\n",
                (long long)st->skipped_line_types, st->skipped_types);
    if (st->unknown_attachments)
        fprintf(stderr, "kvreplay import: warning: %lld attachments of unknown types (%s) sent as their JSON text\n",
                (long long)st->unknown_attachments, st->unknown_attachment_types);
    if (st->big_integers)
        fprintf(stderr, "kvreplay import: warning: %lld integers beyond 2^63-1 in fields the importer does not read "
                        "(read as reals, not used)\n", (long long)st->big_integers);
    if (st->relinked)
        fprintf(stderr, "kvreplay import: %lld late api_error lines re-linked to the line before them "
                        "(docs/transcripts.md)\n", (long long)st->relinked);
    if (st->synthetic)
        fprintf(stderr, "kvreplay import: %lld client-made assistant messages (<synthetic>) are not model calls%s\n",
                (long long)st->synthetic, st->api_error_messages ? "; API error messages are left out of the prompts"
                                                                 : "");
}

int hx_cmd_import(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    import_args a = {0};
    a.version = 2;
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
    if (!outp[0]) hx_die(HX_EXIT_USAGE, "%s: -o: the output path is empty", argv[0]);
    if (o.session && !o.session[0]) hx_die(HX_EXIT_USAGE, "%s: --session: must not be empty", argv[0]);
    if (a.template_name && !a.vocab) hx_die(HX_EXIT_USAGE, "%s: --template needs -m VOCAB.gguf", argv[0]);

    char err[1024] = "";
    if (hx_output_check(outp, err, sizeof err)) hx_die(HX_EXIT_USAGE, "%s: -o %s", argv[0], err);
    hx_transcript t;
    int64_t skipped = 0;
    hx_import_stats st = {0};
    st.report = stderr;
    o.stats = &st;
    int rc = hx_import_file(&o, in, &t, &skipped, err, sizeof err);
    /* an input or override file that cannot be read is the user's argument: exit 2 */
    if (rc == ENG_ERR_FORMAT || rc == ENG_ERR_IO || rc == ENG_ERR_ARG) hx_die(HX_EXIT_USAGE, "%s", err);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s: %s", in, eng_status_str(rc));
    report(&st, skipped);
    if (t.n == 0) {
        hx_transcript_free(&t);
        if (st.synthetic)
            hx_die(HX_EXIT_USAGE, "%s: no model calls found: its only assistant messages are %lld made by the client "
                                  "(<synthetic>), e.g. an API error, so no request reached a model", in,
                   (long long)st.synthetic);
        hx_die(HX_EXIT_USAGE, "%s: no model calls found", in);
    }
    int32_t n_usage = 0;
    for (int32_t i = 0; i < t.n; i++) n_usage += t.reqs[i].usage.present;
    if (a.vocab) count_prompts(&t, a.vocab, a.template_name, a.quiet);
    else if (n_usage && !a.quiet)
        fprintf(stderr, "kvreplay import: %d requests carry the log's usage; give -m VOCAB.gguf to print the imported "
                        "prompt's tokens beside it\n", n_usage);
    char vol[64];
    int32_t n_vol = 0;
    if (hx_import_volatile(&t, vol, sizeof vol, &n_vol) == ENG_OK && vol[0] && n_vol > 1)
        fprintf(stderr, "kvreplay import: %d requests carry a per-request volatile header (%s); replay with "
                        "--normalize %s to let a prefix cache reuse across them\n", n_vol,
                !strcmp(vol, "anthropic-cch") ? "the billing header's cch= checksum" : vol, vol);
    int32_t n_sessions = 0;
    hx_strmap seen = {0};
    for (int32_t i = 0; i < t.n; i++)
        if (!hx_strmap_get(&seen, t.reqs[i].session, NULL) && hx_strmap_put(&seen, t.reqs[i].session, i) == ENG_OK)
            n_sessions++;
    hx_strmap_free(&seen);
    rc = hx_transcript_write_version(outp, &t, a.version, err, sizeof err);
    int32_t n = t.n;
    hx_transcript_free(&t);
    free(fmt_opts);
    if (rc == ENG_ERR_ARG) hx_die(HX_EXIT_USAGE, "%s: -o %s", argv[0], err);
    if (rc) hx_die(HX_EXIT_INTERNAL, "%s", err);
    fprintf(stderr, "kvreplay import: %d requests in %d sessions from %s (%s) to %s\n", n, n_sessions, in, from, outp);
    return HX_EXIT_OK;
}
