/*
 * harness/cli/cmd_render.c: `kvreplay render`: prints the exact prompt text
 * the replay tokenizes for one request of a transcript (and its token ids
 * with --tokens), through the same steps as the replay: the normalization
 * rules applied to the request, the chat template rendered (chosen from the
 * model's tokenizer.chat_template when -m is given, as replay does), the
 * text tokenized with the model's BOS and special tokens parsed.
 *
 * Marks: the end of the stable prefix (the end of the system turn: what
 * fresh sessions share) and each span a normalization rule rewrote. On a
 * terminal (or --color always) the marks are colours and one coloured
 * label; otherwise they are the text forms
 *     ⟦stable-prefix-end⟧   ⟦normalized:RULE⟧...⟦/normalized⟧   ⟦response⟧
 * and a literal "⟦" of the prompt is written twice ("⟦⟦"), so a mark is
 * never confused with prompt text. --raw prints the exact bytes, no marks.
 * A summary (request, template, sizes, where the stable prefix ends) goes
 * to stderr.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "normalize.h"
#include "prepare.h"
#include "status.h"
#include "template.h"
#include "tokenizer.h"
#include "transcript.h"

#define MARK_OPEN "\xE2\x9F\xA6"  /* ⟦ U+27E6 */
#define MARK_CLOSE "\xE2\x9F\xA7" /* ⟧ U+27E7 */

typedef struct render_args {
    const char *transcript, *model, *session, *template_name, *normalize, *color;
    int64_t     request, turn;
    bool        tokens, raw, response, skip_bad, quiet;
} render_args;

#define OPT(field) offsetof(render_args, field)
static const hx_option k_options[] = {
    {"--transcript", "-t", "FILE", "transcript (v1 or v2; required)", HX_OPT_STRING, OPT(transcript), 0, 0, NULL},
    {"--request", NULL, "N", "the request at index N in replay order, from 0 (default 0; replay's req_index)",
     HX_OPT_INT64, OPT(request), 0, INT32_MAX, NULL},
    {"--session", NULL, "S", "with --turn: the request of session S ...", HX_OPT_STRING, OPT(session), 0, 0, NULL},
    {"--turn", NULL, "K", "... at turn K", HX_OPT_INT64, OPT(turn), 0, INT32_MAX, NULL},
    {"--model", "-m", "FILE.gguf", "a model or vocabulary: picks the template as replay does, and\n"
     "tokenizes (needed for --tokens and for token positions)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    {"--template", NULL, "NAME", "chatml, llama2, llama3 or raw (default: from -m, else chatml)", HX_OPT_STRING,
     OPT(template_name), 0, 0, NULL},
    {"--normalize", NULL, "RULES", "normalization rules, as for replay (e.g. anthropic-cch)", HX_OPT_STRING,
     OPT(normalize), 0, 0, NULL},
    {"--tokens", NULL, NULL, "print the token ids instead of the text: one line per token,\n"
     "\"INDEX ID PIECE\" (PIECE escaped as \\xNN for whitespace, control bytes\n"
     "and '\\'; \" *\" after a token of a normalized span), and a line\n"
     "\"-- stable prefix ends --\" where it ends; needs -m", HX_OPT_FLAG, OPT(tokens), 0, 0, NULL},
    {"--raw", NULL, NULL, "the exact bytes (with --tokens: the ids on one line), no marks", HX_OPT_FLAG, OPT(raw), 0,
     0, NULL},
    {"--response", NULL, NULL, "also print the recorded response as replay feeds it (after a mark)", HX_OPT_FLAG,
     OPT(response), 0, 0, NULL},
    {"--color", NULL, "auto|always|never", "colour marks on a terminal (default auto)", HX_OPT_STRING, OPT(color), 0,
     0, NULL},
    {"--skip-bad", NULL, NULL, "skip bad transcript lines (as replay --skip-bad)", HX_OPT_FLAG, OPT(skip_bad), 0, 0,
     NULL},
    {"--quiet", "-q", NULL, "no summary on stderr", HX_OPT_FLAG, OPT(quiet), 0, 0, NULL},
    {0},
};

static const char k_usage[] =
    "usage: kvreplay render -t T.jsonl [--request N | --session S --turn K] [-m MODEL.gguf] [--template NAME]\n"
    "                       [--normalize RULES] [--tokens] [--raw] [--response] [--color auto|always|never]\n"
    "\n"
    "Prints the exact prompt text the replay tokenizes for one request, with the end of the stable\n"
    "prefix and the normalized spans marked: in colour on a terminal, otherwise as the text marks\n"
    "\xE2\x9F\xA6stable-prefix-end\xE2\x9F\xA7 and \xE2\x9F\xA6normalized:RULE\xE2\x9F\xA7...\xE2\x9F\xA6/normalized\xE2\x9F\xA7"
    " (a literal \xE2\x9F\xA6 of the prompt is doubled).\n"
    "--raw prints the exact bytes. A summary goes to stderr.\n"
    "exit codes: 0 ok, 2 bad usage, transcript or model, 3 internal error\n";

/* A byte range of the rendered prompt that a rule normalized. */
typedef struct mark {
    size_t begin, end;
} mark;

/* Maps the rules' spans (inside blocks) to byte ranges of the render: a
 * text block renders verbatim at the start of its span. */
static int32_t normalized_ranges(const hx_normalize *nz, const hx_request *r, const hx_render *p, mark **out) {
    int n = hx_normalize_spans(nz, r, NULL, 0);
    *out = NULL;
    if (n <= 0) return 0;
    hx_norm_span *sp = calloc((size_t)n, sizeof *sp);
    mark *m = calloc((size_t)n, sizeof *m);
    if (!sp || !m) hx_die(HX_EXIT_INTERNAL, "render: out of memory");
    hx_normalize_spans(nz, r, sp, n);
    int32_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *text = sp[i].part == HX_PART_SYSTEM    ? r->system[sp[i].index].text
                           : sp[i].part == HX_PART_MESSAGE ? r->messages[sp[i].index].blocks[sp[i].block].text
                                                           : r->prompt;
        for (int32_t s = 0; s < p->n_spans; s++) {
            const hx_span *x = &p->spans[s];
            bool same = x->part == sp[i].part && (sp[i].part == HX_PART_PROMPT || x->index == sp[i].index) &&
                        (sp[i].part != HX_PART_MESSAGE || x->block == sp[i].block);
            if (!same) continue;
            size_t at = x->begin + sp[i].off;
            if (at + sp[i].len <= p->len && !memcmp(p->text + at, text + sp[i].off, sp[i].len) && sp[i].len > 0)
                m[k++] = (mark){at, at + sp[i].len};
            break;
        }
    }
    free(sp);
    *out = m;
    return k;
}

/* Writes text [a, b) with every "⟦" doubled (marked, plain form). */
static void put_escaped(const char *t, size_t a, size_t b, bool escape) {
    while (a < b) {
        const char *hit = escape ? memmem(t + a, b - a, MARK_OPEN, 3) : NULL;
        size_t upto = hit ? (size_t)(hit - t) + 3 : b;
        fwrite(t + a, 1, upto - a, stdout);
        if (hit) fputs(MARK_OPEN, stdout);
        a = upto;
    }
}


int hx_cmd_render(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        hx_usage(stdout, k_usage, k_options);
        return HX_EXIT_OK;
    }
    render_args a = {0};
    a.request = -1;
    a.turn = -1;
    for (int i = 1; i < argc; i++)
        if (!hx_options_parse(k_options, &a, argc, argv, &i)) hx_bad_arg(argv[0], argv[i]);
    if (!a.transcript) hx_die(HX_EXIT_USAGE, "render: -t/--transcript is required");
    if ((a.session != NULL) != (a.turn >= 0)) hx_die(HX_EXIT_USAGE, "render: --session and --turn go together");
    if (a.session && a.request >= 0) hx_die(HX_EXIT_USAGE, "render: give --request N or --session S --turn K, not both");
    if (a.tokens && !a.model) hx_die(HX_EXIT_USAGE, "render: --tokens needs -m MODEL.gguf");
    bool color = false;
    if (!a.color || !strcmp(a.color, "auto")) color = isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
    else if (!strcmp(a.color, "always")) color = true;
    else if (strcmp(a.color, "never")) hx_die(HX_EXIT_USAGE, "render: --color: expected auto, always or never, got '%s'", a.color);

    char err[1024] = "";
    hx_transcript t;
    int64_t skipped = 0;
    int rc = hx_transcript_read(a.transcript, a.skip_bad, &t, &skipped, err, sizeof err);
    if (rc) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    if (skipped && !a.quiet) fprintf(stderr, "kvreplay render: skipped %lld bad lines\n", (long long)skipped);
    int32_t idx = -1;
    if (a.session) {
        for (int32_t i = 0; i < t.n && idx < 0; i++)
            if (!strcmp(t.reqs[i].session, a.session) && t.reqs[i].turn == a.turn) idx = i;
        if (idx < 0) hx_die(HX_EXIT_USAGE, "render: %s has no request of session \"%s\" at turn %lld", a.transcript,
                            a.session, (long long)a.turn);
    } else {
        idx = a.request < 0 ? 0 : (int32_t)a.request;
        if (idx >= t.n) hx_die(HX_EXIT_USAGE, "render: --request %d: %s holds %d requests (0 to %d)", idx, a.transcript,
                               t.n, t.n - 1);
    }
    hx_request *r = &t.reqs[idx];
    if (hx_request_kind_of(r) == HX_REQUEST_TOKENS && !a.tokens)
        hx_die(HX_EXIT_USAGE, "render: request %d (line %lld) is pre-tokenized: it has no text (use --tokens -m MODEL)",
               idx, (long long)r->line);

    /* the replay's steps: the model's tokenizer and template, normalization, render, tokenize */
    eng_tokenizer *tok = NULL;
    char *chat = NULL;
    if (a.model && (rc = hx_vocab_load(a.model, &tok, &chat, err, sizeof err)))
        hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    hx_normalize nz;
    if (hx_normalize_parse(a.normalize, &nz)) hx_die(HX_EXIT_USAGE, "render: %s", nz.err);
    hx_template tmpl;
    if (a.template_name) {
        int k = hx_template_from_name(a.template_name);
        if (k < 0) hx_die(HX_EXIT_USAGE, "render: --template: unknown template '%s' (known: chatml, llama2, llama3, raw)",
                          a.template_name);
        tmpl = (hx_template)k;
    } else {
        tmpl = hx_template_guess(NULL, chat);
    }
    hx_prepared prep = {0};
    hx_render own = {0}, resp = {0};
    const hx_render *p = &own;
    int n_changed = 0;
    if (tok) {
        hx_prepare_ctx *pc = NULL;
        if ((rc = hx_prepare_ctx_new(tok, hx_template_name(tmpl), NULL, a.normalize, &pc, err, sizeof err)))
            hx_die(HX_EXIT_USAGE, "render: %s", err);
        hx_prepare_ctx_set_source(pc, a.transcript);
        if ((rc = hx_prepare(pc, r, &prep, err, sizeof err)))
            hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
        hx_prepare_ctx_free(pc);
        p = &prep.prompt;
        n_changed = prep.n_normalized;
    } else {
        if ((n_changed = hx_normalize_apply(&nz, r)) < 0) hx_die(HX_EXIT_INTERNAL, "render: out of memory");
        if ((rc = hx_render_prompt(tmpl, r, &own, err, sizeof err))) hx_die(HX_EXIT_INTERNAL, "render: %s", err);
    }
    if (a.response && (rc = hx_render_response(tmpl, r, &resp, err, sizeof err)))
        hx_die(HX_EXIT_INTERNAL, "render: %s", err);
    char rule_names[128];
    hx_normalize_names(&nz, rule_names, sizeof rule_names);
    mark *marks = NULL;
    int32_t n_marks = p->text ? normalized_ranges(&nz, r, p, &marks) : 0;
    size_t stable = p->text ? hx_render_system_end(p) : 0;

    if (!a.quiet) {
        fprintf(stderr, "kvreplay render: %s request %d: session \"%s\" turn %d (line %lld); template %s", a.transcript,
                idx, r->session, r->turn, (long long)r->line, hx_template_name(tmpl));
        if (nz.rules) {
            char names[128];
            fprintf(stderr, "; normalize %s: %d values changed, %d spans marked",
                    hx_normalize_names(&nz, names, sizeof names), n_changed, n_marks);
        }
        fprintf(stderr, "\nkvreplay render: %zu bytes", p->len);
        if (tok) fprintf(stderr, ", %d tokens (%s)", prep.n, eng_tokenizer_add_bos(tok) ? "BOS first" : "no BOS");
        if (stable) {
            fprintf(stderr, "; the stable prefix ends at byte %zu", stable);
            if (tok) fprintf(stderr, " (token %d)", prep.stable_end);
        } else {
            fprintf(stderr, "; no system turn (no stable prefix)");
        }
        if (r->usage.present) fprintf(stderr, "; the log's usage: %lld tokens", (long long)hx_call_usage_total(&r->usage));
        fprintf(stderr, "\n");
    }

    if (a.tokens) {
        if (a.raw) {
            for (int32_t i = 0; i < prep.n; i++) printf(i ? " %d" : "%d", prep.tokens[i]);
            if (a.response)
                for (int32_t i = 0; i < prep.n_resp; i++) printf(" %d", prep.resp[i]);
            putchar('\n');
        } else {
            for (int32_t i = 0; i < prep.n; i++) {
                if (stable && i == prep.stable_end) puts("-- stable prefix ends --");
                size_t pl;
                const char *pc = eng_token_piece(tok, prep.tokens[i], &pl);
                printf("%d %d ", i, prep.tokens[i]);
                hx_fput_piece(stdout, pc, pl);
                size_t b0 = (size_t)prep.offsets[i], b1 = i + 1 < prep.n ? (size_t)prep.offsets[i + 1] : p->len;
                bool norm = false;
                for (int32_t k = 0; k < n_marks && !norm; k++) norm = b0 < marks[k].end && marks[k].begin < b1 && b1 > b0;
                puts(norm ? " *" : "");
            }
            if (a.response) {
                puts("-- response --");
                for (int32_t i = 0; i < prep.n_resp; i++) {
                    size_t pl;
                    const char *pc = eng_token_piece(tok, prep.resp[i], &pl);
                    printf("%d %d ", prep.n + i, prep.resp[i]);
                    hx_fput_piece(stdout, pc, pl);
                    putchar('\n');
                }
            }
        }
    } else if (a.raw) {
        fwrite(p->text, 1, p->len, stdout);
        if (a.response) fwrite(resp.text, 1, resp.len, stdout);
    } else {
        const char *t0 = p->text;
        size_t at = 0;
        int32_t k = 0;
        bool stable_done = stable == 0;
        while (at < p->len || !stable_done) {
            size_t next = p->len;
            if (!stable_done && stable < next) next = stable;
            if (k < n_marks && marks[k].begin < next) next = marks[k].begin;
            put_escaped(t0, at, next, !color);
            at = next;
            if (!stable_done && at == stable) {
                fputs(color ? "\x1b[1;7;35m" MARK_OPEN "stable prefix ends" MARK_CLOSE "\x1b[0m"
                            : MARK_OPEN "stable-prefix-end" MARK_CLOSE, stdout);
                stable_done = true;
                continue;
            }
            if (k < n_marks && at == marks[k].begin) {
                if (color) fputs("\x1b[30;43m", stdout);
                else printf(MARK_OPEN "normalized:%s" MARK_CLOSE, rule_names);
                put_escaped(t0, marks[k].begin, marks[k].end, !color);
                fputs(color ? "\x1b[0m" : MARK_OPEN "/normalized" MARK_CLOSE, stdout);
                at = marks[k].end;
                k++;
                continue;
            }
            if (at >= p->len && stable_done) break;
        }
        if (a.response) {
            fputs(color ? "\x1b[1;7;36m" MARK_OPEN "response" MARK_CLOSE "\x1b[0m" : MARK_OPEN "response" MARK_CLOSE,
                  stdout);
            put_escaped(resp.text, 0, resp.len, !color);
        }
    }
    free(marks);
    hx_render_free(&own);
    hx_render_free(&resp);
    hx_prepared_free(&prep);
    free(chat);
    eng_tokenizer_free(tok);
    hx_transcript_free(&t);
    if (fflush(stdout) != 0 || ferror(stdout)) hx_die(HX_EXIT_INTERNAL, "render: stdout: write failed");
    return HX_EXIT_OK;
}
