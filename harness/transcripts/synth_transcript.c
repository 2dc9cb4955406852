/*
 * harness/transcripts/synth_transcript.c: seeded synthetic transcripts (see synth_transcript.h).
 *
 * Everything random comes from GSL mt19937 streams whose seeds are derived
 * from (seed, stream kind, index) with XXH3, so each part of the output
 * depends only on what it should: the instruction text on (seed, size), a
 * repository on (seed, repo index), a session's conversation on (seed,
 * session index) and the repository state, the billing checksums on the seed
 * and the output order. Text comes from word lists and sentence templates
 * expanded by a tiny "{slot}" engine; it is English prose, C and Python code,
 * shell output, diffs and JSON, so real tokenizers see realistic text.
 *
 * Invariants (tested): same parameters -> identical bytes; the cch checksum
 * is distinct on every request of a file; within a session the system blocks
 * other than the billing header change only when a commit rewrites the
 * git-status block; request t+1 of a session extends request t by its
 * response and new messages (the template prefix property).
 *
 * One file over 1,200 lines, one story: a seeded generator whose text pieces
 * (prose, code, tools, repositories) and scenarios (agent, extend, static)
 * share the same random streams, word lists and template engine; read it
 * top to bottom, one banner per part.
 */
#include "synth_transcript.h"

#include <gsl/gsl_rng.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "json.h"
#include "status.h"
#include "str.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Random streams and a sticky-error text buffer

enum { STREAM_PREFIX = 1, STREAM_REPO = 2, STREAM_SESSION = 3, STREAM_CCH = 4, STREAM_EXTEND = 5, STREAM_TEXT = 6 };

static gsl_rng *rng_new(uint64_t seed, uint32_t stream, uint64_t index) {
    uint64_t key[3] = {seed, stream, index};
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (r) gsl_rng_set(r, (unsigned long)(XXH3_64bits(key, sizeof key) & 0xffffffffu));
    return r;
}

static uint32_t rnd(gsl_rng *r, uint32_t n) { return n <= 1 ? 0 : (uint32_t)gsl_rng_uniform_int(r, n); }
static bool coin(gsl_rng *r, double p) { return gsl_rng_uniform(r) < p; }

typedef struct sbuf {
    eng_buf b;
    int     rc;
} sbuf;

static void sb_put(sbuf *o, const char *s, size_t n) {
    if (!o->rc && eng_buf_append(&o->b, s, n)) o->rc = ENG_ERR_NOMEM;
}
static void sb_puts(sbuf *o, const char *s) { sb_put(o, s, strlen(s)); }
static void sb_printf(sbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *o, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    sb_put(o, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}
/* Takes the text out of o (o is reset); NULL on failure. */
static char *sb_take(sbuf *o) {
    if (!o->rc && !o->b.data) sb_put(o, "", 0);
    char *s = o->rc ? NULL : o->b.data;
    if (!s) eng_buf_free(&o->b);
    memset(o, 0, sizeof *o);
    return s;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(r, a) ((a)[rnd((r), (uint32_t)N_OF(a))])

// ----------------------------------------------------------------------------
// Word lists

static const char *const k_nouns[] = {
    "buffer", "parser", "token", "cache", "session", "request", "header", "entry", "table", "index",
    "node", "queue", "worker", "slot", "chunk", "block", "layer", "stream", "reader", "writer",
    "context", "handle", "record", "batch", "prefix", "window", "checkpoint", "manifest", "schema",
    "policy", "metric", "report", "channel", "pool", "arena", "frame", "cursor", "range", "digest",
    "key", "store", "result", "event", "timer", "counter", "option", "socket", "client", "route",
    "message", "payload", "journal", "snapshot", "segment", "bucket", "lexer", "symbol", "module",
    "plugin", "job", "lock", "config"};
static const char *const k_fields[] = {"count", "len", "cap", "head", "tail", "items", "entries", "flags",
                                       "refs", "size", "next", "state", "hits", "misses", "dirty", "version",
                                       "mtime", "owner", "limit", "offset", "data", "keys", "vals", "nbytes"};
static const char *const k_verbs[] = {
    "parse", "load", "store", "read", "write", "init", "free", "reset", "flush", "build", "merge",
    "split", "find", "insert", "remove", "update", "check", "validate", "encode", "decode", "render",
    "emit", "scan", "sort", "hash", "copy", "resize", "open", "close", "apply", "compute", "collect",
    "lookup", "append", "drain", "resolve", "format", "compare", "serialize", "restore", "evict",
    "refresh", "trim"};
static const char *const k_adjs[] = {"stale", "pending", "active", "cached", "empty", "partial", "final",
                                     "current", "shared", "local", "raw", "sorted", "aligned", "dirty",
                                     "valid", "expired", "unused", "duplicate", "nested"};
static const char *const k_projects[] = {"kvstore", "tinyhttp", "logship", "parsekit", "fastcsv", "gridsim",
                                         "chatbridge", "tracekit", "pixelpipe", "queuectl", "configd",
                                         "metricsd", "ledger", "shardman", "blobfs", "mdlite"};
static const char *const k_locals[] = {"n", "i", "rc", "len", "pos", "off", "idx", "total", "left", "want"};
static const char *const k_clauses[] = {
    "checks the {N} for NULL before using it", "returns early when the {N} is empty",
    "frees the {N} on the error path", "resets the {field} counter after a flush",
    "logs the {N} size at debug level", "uses size_t for the {N} length", "keeps the {N} list sorted by key",
    "retries the {N} once after a timeout", "drops {A} entries before it resizes the table",
    "validates the {N} header before reading the payload", "caches the last {N} lookup",
    "propagates the error code instead of ignoring it", "rounds the {N} size up to a multiple of 64",
    "moves the {N} cleanup into a single exit path", "takes the lock before it touches the {N} list",
    "no longer leaks the {N} when parsing fails", "counts {field} per {N} instead of globally",
    "rejects a {N} whose {field} is out of range"};
static const char *const k_comments[] = {
    "Returns the number of {N} entries, or -1 on error.", "The caller owns the returned {N}.",
    "Keep the {N} in sync with the {N2}.", "TODO: {V} the {N} lazily.", "Fast path: the {N} is already {A}.",
    "This must run before the {N} is flushed.", "Grow the table when it is more than half full.",
    "Entries are sorted by {field}.", "Never called with a NULL {N}.", "The {field} field counts bytes, not entries.",
    "Invariant: {field} <= cap.", "Drop {A} entries first so the {N} stays small."};

// ----------------------------------------------------------------------------
// The "{slot}" template engine

typedef struct tctx {
    const char *proj, *path, *path2, *func, *noun, *field, *var, *arg, *test, *branch;
} tctx;

static void expand(gsl_rng *r, sbuf *o, const char *t, const tctx *c);

static void slot(gsl_rng *r, sbuf *o, const char *name, size_t n, const tctx *c) {
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
    if (IS("proj")) sb_puts(o, c->proj);
    else if (IS("path")) sb_puts(o, c->path);
    else if (IS("path2")) sb_puts(o, c->path2);
    else if (IS("func")) sb_puts(o, c->func);
    else if (IS("noun")) sb_puts(o, c->noun);
    else if (IS("field")) sb_puts(o, c->field);
    else if (IS("var")) sb_puts(o, c->var);
    else if (IS("arg")) sb_puts(o, c->arg);
    else if (IS("test")) sb_puts(o, c->test);
    else if (IS("branch")) sb_puts(o, c->branch);
    else if (IS("N") || IS("N2")) sb_puts(o, PICK(r, k_nouns));
    else if (IS("V")) sb_puts(o, PICK(r, k_verbs));
    else if (IS("A")) sb_puts(o, PICK(r, k_adjs));
    else if (IS("F")) sb_printf(o, "%s_%s", PICK(r, k_nouns), PICK(r, k_verbs));
    else if (IS("L")) sb_puts(o, PICK(r, k_locals));
    else if (IS("num")) sb_printf(o, "%u", 2 + rnd(r, 400));
    else if (IS("hex")) sb_printf(o, "%07x", rnd(r, 1u << 28));
    else if (IS("clause")) expand(r, o, PICK(r, k_clauses), c);
    else if (IS("C")) expand(r, o, PICK(r, k_comments), c);
    else if (IS("F2")) sb_printf(o, "%s_%s", PICK(r, k_nouns), PICK(r, k_verbs));
    else sb_put(o, name - 1, n + 2); /* unknown: keep "{name}" literally */
#undef IS
}

static void expand(gsl_rng *r, sbuf *o, const char *t, const tctx *c) {
    const char *p = t;
    while (*p) {
        const char *open = strchr(p, '{');
        if (!open) {
            sb_puts(o, p);
            return;
        }
        const char *close = strchr(open, '}');
        /* a slot name is short and alphanumeric; anything else is literal text (JSON, C) */
        size_t n = close ? (size_t)(close - open - 1) : 0;
        bool is_slot = close && n > 0 && n < 8;
        for (size_t i = 0; is_slot && i < n; i++) {
            char ch = open[1 + i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))) is_slot = false;
        }
        if (!is_slot) {
            sb_put(o, p, (size_t)(open - p) + 1);
            p = open + 1;
            continue;
        }
        sb_put(o, p, (size_t)(open - p));
        slot(r, o, open + 1, n, c);
        p = close + 1;
    }
}

static char *expand_new(gsl_rng *r, const char *t, const tctx *c) {
    sbuf o = {0};
    expand(r, &o, t, c);
    return sb_take(&o);
}

// ----------------------------------------------------------------------------
// English prose: the instruction text

static const char *const k_headings[] = {
    "Tone and style", "Being proactive", "Following conventions", "Code style", "Task management",
    "Doing tasks", "Tool usage", "Working with git", "Testing", "Security", "Reading files",
    "Editing files", "Running commands", "Asking questions", "Reporting results", "Performance",
    "Long-running work", "Dependencies"};
static const char *const k_imperatives[] = {
    "read the surrounding code before you change a function",
    "run the project's test suite after every non-trivial edit",
    "prefer editing an existing file to creating a new one",
    "keep answers short when the user asks a simple question",
    "explain a command before you run it if it modifies the system",
    "check that a library is already used in the project before you import it",
    "mark each todo item as completed as soon as it is done",
    "quote file paths that contain spaces",
    "use the search tools instead of running grep or find through the shell",
    "look at recent commits to learn the style of commit messages",
    "avoid comments that merely restate what the code does",
    "report the exact command you ran and its outcome",
    "split large tasks into smaller steps and track them with the todo list",
    "stop and ask when the request is ambiguous",
    "reproduce a bug with a failing test before you fix it",
    "keep the diff minimal and focused on the task",
    "preserve the indentation and line endings of the file you edit",
    "use absolute paths in tool calls",
    "batch independent tool calls into a single response",
    "read an error message to the end before you change code",
    "verify a fix by running the same command that failed",
    "use the build system the project already uses",
    "follow the naming scheme of the neighbouring functions",
    "check the return value of every call that can fail",
    "leave the working tree clean when you finish",
    "mention the file and line number when you refer to code",
    "summarise what you changed in one or two sentences at the end",
    "prefer small, pure functions that are easy to test",
    "keep secrets such as API keys out of logs and commits",
    "cite the documentation when you rely on a subtle behaviour"};
static const char *const k_purposes[] = {
    ", so that the edit matches the local conventions", ", because the user may not read the full tool output",
    " unless the user explicitly asks otherwise", ", which keeps the conversation easy to follow",
    ", since a passing build is the only reliable evidence", " before you report that the task is complete",
    ", as the user reviews every change you make", ", so that nothing surprising happens on their machine",
    ", which saves a round trip", " whenever the change touches shared code", "",
    ", even when the change looks trivial", ", so that a reviewer can follow your reasoning"};
static const char *const k_situations[] = {
    "a test fails", "the user asks for a refactor", "a command takes longer than a minute",
    "you are unsure which file to change", "the build breaks after your edit",
    "the user mentions an issue number", "a file is longer than a few hundred lines",
    "two tool calls do not depend on each other", "the user asks how something works",
    "a hook rejects your tool call", "the task needs more than three steps"};
static const char *const k_prohibitions[] = {
    "create documentation files unless the user asks for them", "guess at URLs",
    "use interactive commands such as an editor or an interactive rebase", "add emojis to files",
    "rewrite code that is unrelated to the task", "commit unless the user asks you to",
    "push to a remote branch without permission", "disable a failing test to make the suite pass",
    "print large files in full when a search would do", "change the public API without saying so"};
static const char *const k_adverbs[] = {"", "", "Always ", "As a rule, ", "If possible, ", "Whenever you can, ",
                                        "In general, ", "Make sure to "};
static const char *const k_example_q[] = {
    "what is 2 + 2?", "which file defines the entry point?", "is 11 a prime number?",
    "what command runs the tests?", "how many files are in src?", "what does the -v flag do?",
    "where is the config parsed?", "which branch am I on?"};
static const char *const k_example_a[] = {"4", "src/main.c", "Yes", "make test", "12",
                                          "It prints each step as it runs.", "src/config.c:88", "main"};

static void cap_first(sbuf *o, const char *s) {
    if (!*s) return;
    char c = s[0];
    if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
    sb_put(o, &c, 1);
    sb_puts(o, s + 1);
}

static void sentence(gsl_rng *r, sbuf *o) {
    switch (rnd(r, 4)) {
    case 0:
    case 1: {
        const char *adv = PICK(r, k_adverbs);
        if (*adv) sb_puts(o, adv), sb_puts(o, PICK(r, k_imperatives));
        else cap_first(o, PICK(r, k_imperatives));
        sb_puts(o, PICK(r, k_purposes));
        sb_puts(o, ".");
        break;
    }
    case 2:
        sb_printf(o, "When %s, %s%s.", PICK(r, k_situations), PICK(r, k_imperatives), PICK(r, k_purposes));
        break;
    default:
        sb_printf(o, "Do not %s.", PICK(r, k_prohibitions));
        break;
    }
}

/* Appends sections until o holds at least target bytes. */
static void instructions(gsl_rng *r, sbuf *o, int64_t target) {
    sb_puts(o, "You are an interactive command-line assistant that helps people with software engineering "
               "work. Use the instructions below and the tools available to you to help the user.\n\n");
    while (!o->rc && (int64_t)o->b.len < target) {
        sb_printf(o, "# %s\n", PICK(r, k_headings));
        int paras = 1 + (int)rnd(r, 3);
        for (int p = 0; p < paras; p++) {
            if (coin(r, 0.4)) {
                int items = 3 + (int)rnd(r, 4);
                for (int i = 0; i < items; i++) {
                    sb_puts(o, "- ");
                    sentence(r, o);
                    sb_puts(o, "\n");
                }
            } else {
                int n = 2 + (int)rnd(r, 4);
                for (int i = 0; i < n; i++) {
                    if (i) sb_puts(o, " ");
                    sentence(r, o);
                }
                sb_puts(o, "\n");
            }
            sb_puts(o, "\n");
        }
        if (coin(r, 0.3)) {
            uint32_t k = rnd(r, (uint32_t)N_OF(k_example_q));
            sb_printf(o, "<example>\nuser: %s\nassistant: %s\n</example>\n\n", k_example_q[k], k_example_a[k]);
        }
    }
}

// ----------------------------------------------------------------------------
// Code: C and Python functions, numbered listings, diffs

static const char *const k_c_stmts[] = {
    "if ({var} == NULL)\n        return -EINVAL;",
    "if ({arg} > {var}->cap) {\n        int rc = {noun}_grow({var}, {arg});\n        if (rc != 0)\n            return rc;\n    }",
    "for (size_t i = 0; i < {arg}; i++)\n        {var}->{field}[i] = {F}({var}->{field}[i]);",
    "{var}->{field} += {arg};",
    "memset({var}->{field}, 0, {arg} * sizeof(*{var}->{field}));",
    "/* {C} */",
    "{var}->n_{field} = {arg};",
    "log_debug(\"{noun}: {V} %zu entries\", {arg});",
    "if ({var}->{field} == {var}->cap)\n        goto out;",
    "size_t {L} = {var}->{field} % {var}->cap;",
    "while ({var}->next != NULL) {\n        {var} = {var}->next;\n        {arg}--;\n    }",
    "int rc = {F}({var}, {arg});\n    if (rc < 0)\n        return rc;",
    "assert({var}->{field} <= {var}->cap);"};
static const char *const k_py_stmts[] = {
    "if {arg} is None:\n        raise ValueError(\"{noun} must not be None\")",
    "for item in self.{field}:\n        item.{V}()",
    "self.{field} = {arg}",
    "# {C}",
    "{L} = self.{field}.get({arg}, 0)",
    "logger.debug(\"{V} %s\", {arg})",
    "with open(self.path, \"rb\") as fh:\n        data = fh.read()",
    "if len(self.{field}) > self.limit:\n        self.{field}.pop(0)",
    "result = [{V}_{noun}(x) for x in self.{field}]",
    "self._{field} += 1"};

static void c_function(gsl_rng *r, sbuf *o, const tctx *base) {
    tctx c = *base;
    char fn[64], var[16];
    const char *noun = PICK(r, k_nouns);
    snprintf(fn, sizeof fn, "%s_%s", noun, PICK(r, k_verbs));
    snprintf(var, sizeof var, "%c", noun[0]);
    c.noun = noun;
    c.var = var;
    c.arg = "n";
    c.field = PICK(r, k_fields);
    if (coin(r, 0.5)) {
        sb_puts(o, "/* ");
        expand(r, o, PICK(r, k_comments), &c);
        sb_puts(o, " */\n");
    }
    sb_printf(o, "%sint %s(struct %s *%s, size_t n)\n{\n", coin(r, 0.5) ? "static " : "", fn, noun, var);
    int n = 2 + (int)rnd(r, 5);
    for (int i = 0; i < n; i++) {
        sb_puts(o, "    ");
        expand(r, o, PICK(r, k_c_stmts), &c);
        sb_puts(o, "\n");
    }
    sb_puts(o, "    return 0;\n}\n\n");
}

static void py_function(gsl_rng *r, sbuf *o, const tctx *base) {
    tctx c = *base;
    const char *noun = PICK(r, k_nouns);
    c.noun = noun;
    c.arg = noun;
    c.var = "self";
    c.field = PICK(r, k_fields);
    sb_printf(o, "    def %s_%s(self, %s):\n        \"\"\"", PICK(r, k_verbs), noun, noun);
    expand(r, o, PICK(r, k_comments), &c);
    sb_puts(o, "\"\"\"\n");
    int n = 2 + (int)rnd(r, 4);
    for (int i = 0; i < n; i++) {
        sb_puts(o, "        ");
        /* statements are written for one level of indentation: add one more */
        sbuf s = {0};
        expand(r, &s, PICK(r, k_py_stmts), &c);
        char *t = sb_take(&s);
        if (!t) {
            o->rc = ENG_ERR_NOMEM;
            return;
        }
        for (const char *p = t; *p; p++) {
            sb_put(o, p, 1);
            if (*p == '\n') sb_puts(o, "    ");
        }
        free(t);
        sb_puts(o, "\n");
    }
    sb_printf(o, "        return self.%s\n\n", c.field);
}

static bool is_py(const char *path) {
    size_t n = strlen(path);
    return n > 3 && !strcmp(path + n - 3, ".py");
}

/* A source file of about target bytes. */
static void source_file(gsl_rng *r, sbuf *o, const tctx *c, const char *path, int64_t target) {
    size_t start = o->b.len;
    if (is_py(path)) {
        sb_printf(o, "\"\"\"%s: ", path);
        expand(r, o, PICK(r, k_comments), c);
        sb_printf(o, "\"\"\"\n\nimport logging\nimport os\n\nlogger = logging.getLogger(__name__)\n\n\n"
                     "class %c%s:\n", c->noun[0] - 'a' + 'A', c->noun + 1);
        while (!o->rc && (int64_t)(o->b.len - start) < target) py_function(r, o, c);
    } else {
        sb_printf(o, "/*\n * %s: ", path);
        expand(r, o, PICK(r, k_comments), c);
        sb_printf(o, "\n */\n#include <errno.h>\n#include <stdlib.h>\n#include <string.h>\n\n#include \"%s.h\"\n\n",
                  c->noun);
        sb_printf(o, "struct %s {\n    size_t n_%s;\n    size_t cap;\n    struct %s *next;\n    uint64_t %s;\n};\n\n",
                  c->noun, PICK(r, k_fields), c->noun, PICK(r, k_fields));
        while (!o->rc && (int64_t)(o->b.len - start) < target) c_function(r, o, c);
    }
}

/* Numbers the lines of text like `cat -n` ("%6d\t"), starting at first, stopping
 * after max_bytes of output (at a line end). */
static void numbered(sbuf *o, const char *text, int first, int64_t max_bytes) {
    size_t start = o->b.len;
    int ln = first;
    const char *p = text;
    while (*p && (int64_t)(o->b.len - start) < max_bytes) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        sb_printf(o, "%6d\t", ln++);
        sb_put(o, p, n);
        sb_puts(o, "\n");
        p += n + (nl ? 1 : 0);
    }
}

/* One line of code (no newline) for diffs and edits. */
static void code_line(gsl_rng *r, sbuf *o, const tctx *c, bool py) {
    sbuf s = {0};
    expand(r, &s, py ? PICK(r, k_py_stmts) : PICK(r, k_c_stmts), c);
    char *t = sb_take(&s);
    if (!t) {
        o->rc = ENG_ERR_NOMEM;
        return;
    }
    char *nl = strchr(t, '\n');
    if (nl) *nl = '\0';
    sb_puts(o, py ? "        " : "    ");
    sb_puts(o, t);
    free(t);
}

/* A unified diff of about target bytes over the given paths. */
static void diff_text(gsl_rng *r, sbuf *o, const tctx *base, const char *const *paths, int n_paths, int64_t target) {
    size_t start = o->b.len;
    tctx c = *base;
    c.var = "s";
    c.arg = "n";
    while (!o->rc && (int64_t)(o->b.len - start) < target) {
        const char *path = paths[rnd(r, (uint32_t)n_paths)];
        bool py = is_py(path);
        c.noun = PICK(r, k_nouns);
        c.field = PICK(r, k_fields);
        sb_printf(o, "diff --git a/%s b/%s\nindex %07x..%07x 100644\n--- a/%s\n+++ b/%s\n", path, path,
                  rnd(r, 1u << 28), rnd(r, 1u << 28), path, path);
        int hunks = 1 + (int)rnd(r, 3);
        int line = 10 + (int)rnd(r, 50);
        for (int h = 0; h < hunks && !o->rc; h++) {
            int del = (int)rnd(r, 4), add = 1 + (int)rnd(r, 5);
            sb_printf(o, "@@ -%d,%d +%d,%d @@ %s %s_%s(", line, 6 + del, line, 6 + add, py ? "def" : "static int",
                      c.noun, PICK(r, k_verbs));
            sb_puts(o, py ? "self):\n" : "void)\n");
            for (int i = 0; i < 3; i++) sb_puts(o, " "), code_line(r, o, &c, py), sb_puts(o, "\n");
            for (int i = 0; i < del; i++) sb_puts(o, "-"), code_line(r, o, &c, py), sb_puts(o, "\n");
            for (int i = 0; i < add; i++) sb_puts(o, "+"), code_line(r, o, &c, py), sb_puts(o, "\n");
            for (int i = 0; i < 3; i++) sb_puts(o, " "), code_line(r, o, &c, py), sb_puts(o, "\n");
            line += 20 + (int)rnd(r, 80);
        }
    }
}

// ----------------------------------------------------------------------------
// Tool definitions (own wording; realistic JSON schemas)

static const struct {
    const char *name, *description, *schema;
} k_tools[] = {
    {"Bash",
     "Runs a shell command in a persistent bash session and returns its standard output and standard "
     "error. The working directory persists between calls; environment changes made by one command are "
     "visible to the next.\n\nUse it for building, testing, git and other terminal work. Do not use it to "
     "read, search or edit files: the dedicated tools are faster and safer. Quote paths that contain "
     "spaces. Output longer than 30000 characters is truncated. Commands time out after two minutes unless "
     "a longer timeout is given (at most ten minutes).\n\nWhen committing: look at `git status`, `git diff` "
     "and recent commit messages first, stage only the files you changed, write a concise message that "
     "says why the change was made, and never skip hooks or force-push.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"command\":{\"description\":\"The command to run\",\"type\":\"string\"},"
     "\"description\":{\"description\":\"What the command does, in five to ten words\",\"type\":\"string\"},"
     "\"run_in_background\":{\"description\":\"Start the command in the background and return at once\",\"type\":\"boolean\"},"
     "\"timeout\":{\"description\":\"Timeout in milliseconds (at most 600000)\",\"type\":\"number\"}},"
     "\"required\":[\"command\"],\"type\":\"object\"}"},
    {"Read",
     "Reads a file from the local filesystem. The path must be absolute. By default up to 2000 lines are "
     "returned from the start of the file; give an offset and a limit for long files. Lines longer than "
     "2000 characters are cut. The result is numbered like `cat -n`, starting at 1. Images and PDF files "
     "are shown as content. Reading a file that does not exist returns an error, not an empty result. "
     "Prefer reading several related files in one response.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"file_path\":{\"description\":\"The absolute path of the file to read\",\"type\":\"string\"},"
     "\"limit\":{\"description\":\"How many lines to read\",\"type\":\"number\"},"
     "\"offset\":{\"description\":\"The line number to start from\",\"type\":\"number\"}},"
     "\"required\":[\"file_path\"],\"type\":\"object\"}"},
    {"Edit",
     "Replaces text in a file. old_string must match the file exactly, including indentation, and must be "
     "unique in the file unless replace_all is set; include enough surrounding lines to make it unique. "
     "Read the file at least once in the conversation before editing it. The line-number prefix of the "
     "Read output is not part of the file: never include it in old_string or new_string.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"file_path\":{\"description\":\"The absolute path of the file to modify\",\"type\":\"string\"},"
     "\"new_string\":{\"description\":\"The replacement text\",\"type\":\"string\"},"
     "\"old_string\":{\"description\":\"The exact text to replace\",\"type\":\"string\"},"
     "\"replace_all\":{\"default\":false,\"description\":\"Replace every occurrence\",\"type\":\"boolean\"}},"
     "\"required\":[\"file_path\",\"old_string\",\"new_string\"],\"type\":\"object\"}"},
    {"Write",
     "Writes a file, replacing it if it exists. Read an existing file before overwriting it. Prefer Edit "
     "for changes to existing files, and do not create documentation or README files unless asked.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"content\":{\"description\":\"The content to write\",\"type\":\"string\"},"
     "\"file_path\":{\"description\":\"The absolute path of the file to write\",\"type\":\"string\"}},"
     "\"required\":[\"file_path\",\"content\"],\"type\":\"object\"}"},
    {"Grep",
     "Searches file contents with regular expressions (ripgrep syntax). Filter files with glob or type. "
     "output_mode is files_with_matches (default), content (matching lines, with -n for line numbers and "
     "-A/-B/-C for context) or count. Use it instead of running grep through Bash.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"-A\":{\"description\":\"Lines of context after each match\",\"type\":\"number\"},"
     "\"-B\":{\"description\":\"Lines of context before each match\",\"type\":\"number\"},"
     "\"-i\":{\"description\":\"Case-insensitive search\",\"type\":\"boolean\"},"
     "\"-n\":{\"description\":\"Show line numbers\",\"type\":\"boolean\"},"
     "\"glob\":{\"description\":\"Only search files matching this glob, e.g. *.c\",\"type\":\"string\"},"
     "\"head_limit\":{\"description\":\"Return at most this many results\",\"type\":\"number\"},"
     "\"output_mode\":{\"enum\":[\"content\",\"files_with_matches\",\"count\"],\"type\":\"string\"},"
     "\"path\":{\"description\":\"File or directory to search (default: the working directory)\",\"type\":\"string\"},"
     "\"pattern\":{\"description\":\"The regular expression to search for\",\"type\":\"string\"}},"
     "\"required\":[\"pattern\"],\"type\":\"object\"}"},
    {"Glob",
     "Finds files by name with glob patterns such as \"**/*.c\" or \"tests/**/test_*.py\", and returns "
     "matching paths sorted by modification time. Use it to locate files before reading them.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"path\":{\"description\":\"The directory to search in\",\"type\":\"string\"},"
     "\"pattern\":{\"description\":\"The glob pattern\",\"type\":\"string\"}},"
     "\"required\":[\"pattern\"],\"type\":\"object\"}"},
    {"TodoWrite",
     "Creates and updates a structured todo list for the current session, so the user can follow "
     "progress. Use it for tasks with three or more steps, or when the user gives a list of things to do. "
     "Keep exactly one item in_progress at a time and mark items completed as soon as they are done; do "
     "not batch completions.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"todos\":{\"items\":{\"additionalProperties\":false,\"properties\":{"
     "\"activeForm\":{\"minLength\":1,\"type\":\"string\"},\"content\":{\"minLength\":1,\"type\":\"string\"},"
     "\"status\":{\"enum\":[\"pending\",\"in_progress\",\"completed\"],\"type\":\"string\"}},"
     "\"required\":[\"content\",\"status\",\"activeForm\"],\"type\":\"object\"},\"type\":\"array\"}},"
     "\"required\":[\"todos\"],\"type\":\"object\"}"},
    {"WebFetch",
     "Fetches a URL, converts the page to markdown and answers the prompt about its content with a small "
     "model. HTTP is upgraded to HTTPS. Results are cached for fifteen minutes. Never guess URLs.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"prompt\":{\"description\":\"What to extract from the page\",\"type\":\"string\"},"
     "\"url\":{\"description\":\"The URL to fetch\",\"format\":\"uri\",\"type\":\"string\"}},"
     "\"required\":[\"url\",\"prompt\"],\"type\":\"object\"}"},
    {"Task",
     "Starts a subagent that works on its own with the same tools and returns one final report. Use it "
     "for broad searches across the codebase and for independent subtasks. Give it a complete, "
     "self-contained prompt, and say whether it should write code or only research.",
     "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"additionalProperties\":false,"
     "\"properties\":{\"description\":{\"description\":\"A three to five word summary of the task\",\"type\":\"string\"},"
     "\"prompt\":{\"description\":\"The task for the agent\",\"type\":\"string\"},"
     "\"subagent_type\":{\"description\":\"The kind of agent to start\",\"type\":\"string\"}},"
     "\"required\":[\"description\",\"prompt\",\"subagent_type\"],\"type\":\"object\"}"},
};

static int make_tools(hx_tool **out, int32_t *n, int64_t *bytes) {
    int32_t m = (int32_t)N_OF(k_tools);
    hx_tool *ts = calloc((size_t)m, sizeof *ts);
    if (!ts) return ENG_ERR_NOMEM;
    int64_t total = 0;
    for (int32_t i = 0; i < m; i++) {
        ts[i].name = hx_strdup(k_tools[i].name);
        ts[i].description = hx_strdup(k_tools[i].description);
        ts[i].schema = hx_json_canonical_text(k_tools[i].schema, strlen(k_tools[i].schema));
        if (!ts[i].name || !ts[i].description || !ts[i].schema) {
            for (int32_t k = 0; k <= i; k++) hx_tool_free(&ts[k]);
            free(ts);
            return ENG_ERR_NOMEM;
        }
        total += (int64_t)(strlen(ts[i].name) + strlen(ts[i].description) + strlen(ts[i].schema));
    }
    *out = ts;
    *n = m;
    if (bytes) *bytes = total;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Repositories and the environment block (git-status snapshot)

#define RECENT 5
#define MAX_FILES 12

typedef struct repo {
    char name[32];
    char root[64];     /* /home/dev/src/NAME */
    char branch[48];
    bool py;
    char files[MAX_FILES][48];
    int  n_files;
    char commits[RECENT][112];  /* most recent first: "abc1234 Subject" */
    int  n_commits;
    char status[4][56];         /* " M src/x.c" */
    int  n_status;
    int  day;                   /* day of March 2026 in the env block */
    gsl_rng *r;                 /* the repo's own stream: commits, status */
} repo;

static const char *const k_commit_subjects[] = {
    "Fix {N} leak on the error path of {F}", "Add {A} {N} support to {F}", "Refactor {F} into smaller helpers",
    "Handle an empty {N} in {F}", "Speed up {F} by caching the {N}", "Document the {N} lifecycle",
    "Remove the unused {field} field", "Update tests for {F}", "Check {N} bounds before {V}",
    "Make {F} return an error instead of aborting", "Bump version to 0.{num}.0"};

static void repo_status(repo *rp) {
    rp->n_status = 1 + (int)rnd(rp->r, 3);
    for (int i = 0; i < rp->n_status; i++) {
        char line[sizeof rp->status[0]];
        if (coin(rp->r, 0.2))
            snprintf(line, sizeof line, "?? notes/%s-%u.md", PICK(rp->r, k_nouns), rnd(rp->r, 100));
        else
            snprintf(line, sizeof line, " M %s", rp->files[rnd(rp->r, (uint32_t)rp->n_files)]);
        memcpy(rp->status[i], line, sizeof line);
    }
}

/* Adds a commit with subject (NULL: a random one) and refreshes the status. */
static void repo_commit(repo *rp, const char *subject, char *hash_out) {
    char subj[96];
    if (!subject) {
        tctx c = {0};
        c.field = PICK(rp->r, k_fields);
        char *s = expand_new(rp->r, PICK(rp->r, k_commit_subjects), &c);
        snprintf(subj, sizeof subj, "%s", s ? s : "Update");
        free(s);
        subject = subj;
    }
    char hash[8];
    snprintf(hash, sizeof hash, "%07x", rnd(rp->r, 1u << 28));
    if (hash_out) memcpy(hash_out, hash, 8);
    memmove(rp->commits[1], rp->commits[0], sizeof rp->commits[0] * (RECENT - 1));
    snprintf(rp->commits[0], sizeof rp->commits[0], "%s %.100s", hash, subject);
    if (rp->n_commits < RECENT) rp->n_commits++;
    repo_status(rp);
}

static int repo_init(repo *rp, uint64_t seed, uint64_t index) {
    memset(rp, 0, sizeof *rp);
    if (!(rp->r = rng_new(seed, STREAM_REPO, index))) return ENG_ERR_NOMEM;
    snprintf(rp->name, sizeof rp->name, "%s", PICK(rp->r, k_projects));
    snprintf(rp->root, sizeof rp->root, "/home/dev/src/%s", rp->name);
    rp->py = coin(rp->r, 0.35);
    if (coin(rp->r, 0.5)) snprintf(rp->branch, sizeof rp->branch, "main");
    else snprintf(rp->branch, sizeof rp->branch, "fix/%s-%s", PICK(rp->r, k_nouns), PICK(rp->r, k_adjs));
    rp->n_files = 6 + (int)rnd(rp->r, MAX_FILES - 5);
    for (int i = 0; i < rp->n_files; i++) {
        const char *noun = k_nouns[(rnd(rp->r, (uint32_t)N_OF(k_nouns)) + (uint32_t)i) % N_OF(k_nouns)];
        if (i % 3 == 2) snprintf(rp->files[i], sizeof rp->files[i], "tests/test_%s.%s", noun, rp->py ? "py" : "c");
        else snprintf(rp->files[i], sizeof rp->files[i], "%s/%s.%s", rp->py ? rp->name : "src", noun, rp->py ? "py" : "c");
    }
    rp->day = 1 + (int)rnd(rp->r, 28);
    for (int i = 0; i < RECENT; i++) repo_commit(rp, NULL, NULL);
    return ENG_OK;
}

static void repo_free(repo *rp) {
    if (rp && rp->r) gsl_rng_free(rp->r);
    if (rp) rp->r = NULL;
}

static char *env_block(const repo *rp) {
    sbuf o = {0};
    sb_printf(&o, "<env>\nWorking directory: %s\nIs a git repository: yes\nPlatform: linux\n"
                  "OS version: Linux 6.8.0-45-generic\nToday's date: 2026-03-%02d\n</env>\n\n",
              rp->root, rp->day);
    sb_printf(&o, "<git-status>\nA snapshot of the repository's git status, taken when this prompt was built. "
                  "It does not change while you work.\n\nCurrent branch: %s\nMain branch: main\n\nStatus:\n",
              rp->branch);
    for (int i = 0; i < rp->n_status; i++) sb_printf(&o, "%s\n", rp->status[i]);
    sb_puts(&o, "\nRecent commits:\n");
    for (int i = 0; i < rp->n_commits; i++) sb_printf(&o, "%s\n", rp->commits[i]);
    sb_puts(&o, "</git-status>");
    return sb_take(&o);
}

// ----------------------------------------------------------------------------
// The stable prefix: billing header, identity + instructions, environment

static const char k_billing_fmt[] = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=%s;";
static const char k_identity[] = "You are Claude Code, Anthropic's official CLI for Claude.\n\n";

static char *billing_block(const char *cch) {
    char b[128];
    snprintf(b, sizeof b, k_billing_fmt, cch ? cch : "00000");
    return hx_strdup(b);
}

/* identity + instructions sized so that the whole prefix is about system_bytes. */
static char *instruction_block(uint64_t seed, int64_t system_bytes, int64_t fixed_bytes) {
    gsl_rng *r = rng_new(seed, STREAM_PREFIX, 0);
    if (!r) return NULL;
    sbuf o = {0};
    sb_puts(&o, k_identity);
    int64_t target = system_bytes - fixed_bytes;
    instructions(r, &o, target);
    sb_puts(&o, "\n");
    gsl_rng_free(r);
    return sb_take(&o);
}

int hx_synth_agent_tools(hx_tool **tools, int32_t *n_tools) { return make_tools(tools, n_tools, NULL); }

char *hx_synth_instruction_text(uint64_t seed, uint64_t index, int64_t bytes, bool intro) {
    gsl_rng *r = rng_new(seed, STREAM_TEXT, index);
    if (!r) return NULL;
    sbuf o = {0};
    if (intro) {
        instructions(r, &o, bytes);
    } else {
        while (!o.rc && (int64_t)o.b.len < bytes) {
            if (o.b.len) sb_puts(&o, coin(r, 0.3) ? "\n\n" : " ");
            if (coin(r, 0.25)) sb_puts(&o, "- ");
            sentence(r, &o);
        }
    }
    gsl_rng_free(r);
    return sb_take(&o);
}

int hx_synth_agent_prefix(uint64_t seed, int64_t system_bytes, const char *cch, hx_block **system,
                          int32_t *n_system, hx_tool **tools, int32_t *n_tools) {
    *system = NULL;
    *tools = NULL;
    *n_system = *n_tools = 0;
    repo rp;
    int64_t tool_bytes = 0;
    int rc = repo_init(&rp, seed, 0);
    if (rc) return rc;
    char *env = env_block(&rp);
    char *bill = billing_block(cch);
    hx_block *sys = calloc(3, sizeof *sys);
    char *instr = NULL;
    rc = ENG_ERR_NOMEM;
    if (!env || !bill || !sys) goto out;
    if (make_tools(tools, n_tools, &tool_bytes)) goto out;
    instr = instruction_block(seed, system_bytes, (int64_t)(strlen(env) + strlen(bill)) + tool_bytes);
    if (!instr) goto out;
    if (hx_block_init(&sys[0], HX_BLOCK_TEXT, bill, NULL, NULL, NULL, false) ||
        hx_block_init(&sys[1], HX_BLOCK_TEXT, instr, NULL, NULL, NULL, false) ||
        hx_block_init(&sys[2], HX_BLOCK_TEXT, env, NULL, NULL, NULL, false))
        goto out;
    *system = sys;
    *n_system = 3;
    sys = NULL;
    rc = ENG_OK;
out:
    if (sys) {
        for (int i = 0; i < 3; i++) hx_block_free(&sys[i]);
        free(sys);
    }
    if (rc && *tools) {
        for (int32_t i = 0; i < *n_tools; i++) hx_tool_free(&(*tools)[i]);
        free(*tools);
        *tools = NULL;
        *n_tools = 0;
    }
    free(env);
    free(bill);
    free(instr);
    repo_free(&rp);
    return rc;
}

// ----------------------------------------------------------------------------
// Agent sessions: tasks, assistant turns, tool calls and their results

static const char *const k_tasks[] = {
    "The {noun} module in {proj} returns stale entries after a reload. Can you find out why and fix it? "
    "The failing test is {test} in {path2}.",
    "Add a `--{V}-{noun}` flag to the {proj} command line and wire it through to `{func}`. Please add a test for it.",
    "`make test` fails on {test} since the last commit. Please investigate and fix it without changing the test.",
    "Refactor `{func}` in {path}: it has grown too long. Split it into smaller helpers and keep the behaviour identical.",
    "Why does `{func}` return -1 when the {noun} is empty? I expected 0. Please explain, and fix it if it is a bug.",
    "Please review {path} for memory leaks on the error paths and fix any you find.",
    "Write a unit test for `{func}` that covers the {A} {noun} case, then make it pass.",
    "The {noun} parser in {path} rejects input with a trailing newline. Make it accept it and add a regression test."};
static const char *const k_thoughts[] = {
    "The user wants me to look into `{func}`. I should read {path} first to see how the {noun} is handled, "
    "then check the tests in {path2}.",
    "The failure mentions the {field} field. Probably `{func}` {clause}... or rather it does not. Let me verify "
    "before changing anything.",
    "I have enough context now. The fix is local to `{func}`; I will keep the diff minimal and run the tests after.",
    "Before editing, I should search for other callers of `{func}` so the change does not break them.",
    "The output shows the test still failing at the same assertion, so my previous change did not reach the "
    "code path that {clause}."};
static const char *const k_says_read[] = {"Let me look at {path} to see how `{func}` handles the {noun}.",
                                          "I'll read {path} first.", "Let me check the implementation of `{func}`."};
static const char *const k_says_test[] = {"Now let me run the tests to check the change.",
                                          "Let me run the test suite.", "Let me build and run the failing test."};
static const char *const k_says_edit[] = {
    "The bug is in `{func}`: it never resets `{field}` when the {noun} is full. I'll fix that.",
    "I'll change `{func}` so that it {clause}.", "Here is the fix: `{func}` now {clause}."};
static const char *const k_says_grep[] = {"Let me search for the callers of `{func}`.",
                                          "Let me find where `{field}` is updated."};
static const char *const k_says_glob[] = {"Let me find the test files for the {noun} module.",
                                          "Let me list the source files first."};
static const char *const k_says_write[] = {"I'll add a regression test in {path2}.",
                                           "I'll write a small test file for this case."};
static const char *const k_says_diff[] = {"Let me look at the full diff before going further.",
                                          "Let me check what has changed so far."};
static const char *const k_says_log[] = {"Let me check the recent history of the repository.",
                                         "Let me see which commits touched this recently."};
static const char *const k_says_todo[] = {"I'll break this task into steps.", "Let me plan this out first."};
static const char *const k_says_commit[] = {"The tests pass. Let me commit the change.",
                                            "Everything is green; committing."};
static const char *const k_final[] = {
    "Done. `{func}` in {path} now {clause}, and I added a test for the {A} {noun} case. All tests pass.",
    "The problem was in `{func}`: it did not handle an {A} {noun}. I fixed it in {path} and the test suite passes.",
    "I refactored `{func}` into smaller helpers without changing its behaviour; the tests still pass."};

typedef struct agent {
    const hx_synth_params *p;
    gsl_rng *r;          /* the current session's stream */
    repo    *rp;         /* the current session's repository */
    char     buf[4][64]; /* storage behind c */
    tctx     c;          /* what the current turns talk about */
} agent;

static void pick_ctx(agent *a) {
    gsl_rng *r = a->r;
    repo *rp = a->rp;
    const char *noun = PICK(r, k_nouns);
    snprintf(a->buf[0], 64, "%s", rp->files[rnd(r, (uint32_t)rp->n_files)]);
    snprintf(a->buf[1], 64, "%s", rp->files[rnd(r, (uint32_t)rp->n_files)]);
    snprintf(a->buf[2], 64, "%s_%s", noun, PICK(r, k_verbs));
    snprintf(a->buf[3], 64, "test_%s_%s", noun, PICK(r, k_adjs));
    a->c = (tctx){rp->name, a->buf[0], a->buf[1], a->buf[2], noun, PICK(r, k_fields), "s", "n", a->buf[3], rp->branch};
}

static void tool_id(gsl_rng *r, char out[32]) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "toolu_01", 8);
    for (int i = 0; i < 22; i++) out[8 + i] = al[rnd(r, 62)];
    out[30] = '\0';
}

static int64_t jitter(gsl_rng *r, int64_t base, double lo, double hi) {
    int64_t v = (int64_t)((double)base * (lo + (hi - lo) * gsl_rng_uniform(r)));
    return v < 16 ? 16 : v;
}

/* The output of a test run of about target bytes; returns true when it fails. */
static bool test_output(agent *a, sbuf *o, int64_t target) {
    gsl_rng *r = a->r;
    size_t start = o->b.len;
    bool py = a->rp->py, fail = coin(r, 0.5);
    if (py)
        sb_printf(o, "============================= test session starts ==============================\n"
                     "platform linux -- Python 3.12.3, pytest-8.2.0, pluggy-1.5.0\nrootdir: %s\ncollected %u items\n\n",
                  a->rp->root, 20 + rnd(r, 200));
    int k = 0;
    while (!o->rc && (int64_t)(o->b.len - start) < target * 3 / 4) {
        const char *noun = PICK(r, k_nouns), *verb = PICK(r, k_verbs);
        if (py) sb_printf(o, "tests/test_%s.py::test_%s_%s PASSED [%3d%%]\n", noun, verb, noun, (k * 7) % 100);
        else if (k % 4 == 0) sb_printf(o, "cc -std=c11 -Wall -Wextra -O2 -g -Iinclude -c src/%s.c -o build/%s.o\n", noun, noun);
        else sb_printf(o, "[ RUN      ] test_%s_%s\n[       OK ] test_%s_%s (%u ms)\n", verb, noun, verb, noun, rnd(r, 40));
        k++;
    }
    const tctx *c = &a->c;
    if (fail && py)
        sb_printf(o, "\n=================================== FAILURES ===================================\n"
                     "____________________ %s ____________________\n\n    def %s():\n>       assert %s.%s == %u\n"
                     "E       AssertionError: assert %u == %u\n\n%s:%u: AssertionError\n"
                     "=========================== short test summary info ============================\n"
                     "FAILED %s::%s - AssertionError\n========================= 1 failed, %d passed in 0.%02us ==========================\n",
                  c->test, c->test, c->noun, c->field, rnd(r, 64), rnd(r, 64) + 64, rnd(r, 64), c->path2,
                  10 + rnd(r, 300), c->path2, c->test, k, rnd(r, 100));
    else if (fail)
        sb_printf(o, "[ RUN      ] %s\n%s:%u: error: assertion failed: %s->%s == %u\n[  FAILED  ] %s\n"
                     "[==========] %d test(s) run.\n[  PASSED  ] %d test(s).\n[  FAILED  ] 1 test(s), listed below:\n"
                     "[  FAILED  ] %s\n\n 1 FAILED TEST\nmake: *** [Makefile:42: test] Error 1\n",
                  c->test, c->path2, 10 + rnd(r, 300), c->noun, c->field, rnd(r, 64), c->test, k + 1, k, c->test);
    else if (py)
        sb_printf(o, "\n============================== %d passed in 0.%02us ==============================\n", k, rnd(r, 100));
    else
        sb_printf(o, "[==========] %d test(s) run.\n[  PASSED  ] %d test(s).\n", k, k);
    return fail;
}

enum tool_kind { T_READ, T_BASH_TEST, T_BASH_DIFF, T_BASH_LS, T_BASH_LOG, T_EDIT, T_GREP, T_GLOB, T_WRITE, T_TODO, T_COMMIT };

static const char *const *says_for(enum tool_kind k, size_t *n) {
    switch (k) {
    case T_READ:      *n = N_OF(k_says_read); return k_says_read;
    case T_BASH_TEST: *n = N_OF(k_says_test); return k_says_test;
    case T_EDIT:      *n = N_OF(k_says_edit); return k_says_edit;
    case T_GREP:      *n = N_OF(k_says_grep); return k_says_grep;
    case T_BASH_LOG:  *n = N_OF(k_says_log); return k_says_log;
    case T_GLOB:
    case T_BASH_LS:   *n = N_OF(k_says_glob); return k_says_glob;
    case T_WRITE:     *n = N_OF(k_says_write); return k_says_write;
    case T_TODO:      *n = N_OF(k_says_todo); return k_says_todo;
    case T_COMMIT:    *n = N_OF(k_says_commit); return k_says_commit;
    case T_BASH_DIFF: *n = N_OF(k_says_diff); return k_says_diff;
    }
    *n = N_OF(k_says_read);
    return k_says_read;
}

static enum tool_kind pick_kind(gsl_rng *r) {
    static const enum tool_kind w[] = {T_READ, T_READ, T_READ, T_READ, T_READ, T_READ, T_BASH_TEST, T_BASH_TEST,
                                       T_BASH_TEST, T_BASH_TEST, T_BASH_DIFF, T_BASH_LS, T_BASH_LOG, T_EDIT, T_EDIT,
                                       T_EDIT, T_GREP, T_GREP, T_GLOB, T_WRITE};
    return PICK(r, w);
}

/* Code lines (n of them) joined by "\n", for Edit and Write. */
static void code_lines(gsl_rng *r, sbuf *o, const tctx *c, bool py, int n) {
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(o, "\n");
        code_line(r, o, c, py);
    }
}

/* Appends a tool_use block of this kind to msg and its tool_result to res. */
static int tool_call(agent *a, enum tool_kind kind, hx_message *msg, hx_message *res) {
    gsl_rng *r = a->r;
    const tctx *c = &a->c;
    bool py = a->rp->py, is_error = false;
    char id[32], abspath[192], abspath2[192];
    tool_id(r, id);
    snprintf(abspath, sizeof abspath, "%s/%s", a->rp->root, c->path);
    snprintf(abspath2, sizeof abspath2, "%s/%s", a->rp->root, c->path2);
    int64_t big = jitter(r, a->p->tool_result_bytes, 0.8, 1.2);
    const char *name = "Bash";
    json_t *in = NULL;
    sbuf out = {0}, tmp = {0};
    char *t = NULL;
    switch (kind) {
    case T_READ:
        name = "Read";
        in = json_pack("{s:s}", "file_path", abspath);
        source_file(r, &tmp, c, c->path, big);
        if ((t = sb_take(&tmp))) numbered(&out, t, 1, big);
        else out.rc = ENG_ERR_NOMEM;
        break;
    case T_BASH_TEST:
        in = json_pack("{s:s,s:s}", "command", py ? "python -m pytest -q" : "make test", "description", "Run the test suite");
        is_error = test_output(a, &out, big);
        break;
    case T_BASH_DIFF: {
        in = json_pack("{s:s,s:s}", "command", "git diff", "description", "Show the working tree changes");
        const char *paths[2] = {c->path, c->path2};
        diff_text(r, &out, c, paths, 2, big);
        break;
    }
    case T_BASH_LS: {
        in = json_pack("{s:s,s:s}", "command", py ? "ls -la tests" : "ls -la src", "description", "List the source files");
        sb_printf(&out, "total %u\ndrwxr-xr-x  2 dev dev  4096 Mar %2d 09:12 .\ndrwxr-xr-x 11 dev dev  4096 Mar %2d 09:12 ..\n",
                  8 + rnd(r, 200), a->rp->day, a->rp->day);
        while (!out.rc && (int64_t)out.b.len < big / 3)
            sb_printf(&out, "-rw-r--r--  1 dev dev %5u Mar %2u %02u:%02u %s_%s.%s\n", 200 + rnd(r, 30000), 1 + rnd(r, 28),
                      rnd(r, 24), rnd(r, 60), PICK(r, k_nouns), PICK(r, k_verbs), py ? "py" : "c");
        break;
    }
    case T_BASH_LOG:
        in = json_pack("{s:s,s:s}", "command", "git log --oneline -20", "description", "Show recent commits");
        for (int i = 0; i < a->rp->n_commits; i++) sb_printf(&out, "%s\n", a->rp->commits[i]);
        for (int i = 0; i < 15 && !out.rc; i++) {
            sb_printf(&out, "%07x ", rnd(r, 1u << 28));
            expand(r, &out, PICK(r, k_commit_subjects), c);
            sb_puts(&out, "\n");
        }
        break;
    case T_EDIT: {
        name = "Edit";
        int nold = 1 + (int)rnd(r, 4), nnew = 1 + (int)rnd(r, 5);
        code_lines(r, &tmp, c, py, nold);
        char *olds = sb_take(&tmp);
        code_lines(r, &tmp, c, py, nnew);
        char *news = sb_take(&tmp);
        if (olds && news) in = json_pack("{s:s,s:s,s:s}", "file_path", abspath, "old_string", olds, "new_string", news);
        sb_printf(&out, "The file %s has been updated. Here is the edited region with line numbers:\n", abspath);
        sbuf snip = {0};
        code_lines(r, &snip, c, py, 3);
        sb_puts(&snip, "\n");
        if (news) sb_puts(&snip, news);
        sb_puts(&snip, "\n");
        code_lines(r, &snip, c, py, 3);
        if ((t = sb_take(&snip))) numbered(&out, t, 20 + (int)rnd(r, 300), big);
        else out.rc = ENG_ERR_NOMEM;
        free(olds);
        free(news);
        break;
    }
    case T_GREP:
        name = "Grep";
        in = json_pack("{s:s,s:s,s:s,s:b}", "pattern", c->func, "path", a->rp->root, "output_mode", "content", "-n", 1);
        while (!out.rc && (int64_t)out.b.len < big / 2) {
            sb_printf(&out, "%s/%s:%u:", a->rp->root, a->rp->files[rnd(r, (uint32_t)a->rp->n_files)], 1 + rnd(r, 900));
            code_line(r, &out, c, py);
            sb_puts(&out, "\n");
        }
        break;
    case T_GLOB:
        name = "Glob";
        in = json_pack("{s:s}", "pattern", py ? "**/*.py" : "**/*.[ch]");
        for (int i = 0; i < a->rp->n_files; i++) sb_printf(&out, "%s/%s\n", a->rp->root, a->rp->files[i]);
        break;
    case T_WRITE: {
        name = "Write";
        source_file(r, &tmp, c, c->path2, big / 3);
        char *content = sb_take(&tmp);
        if (content) in = json_pack("{s:s,s:s}", "file_path", abspath2, "content", content);
        free(content);
        sb_printf(&out, "File created successfully at: %s", abspath2);
        break;
    }
    case T_TODO: {
        name = "TodoWrite";
        json_t *todos = json_array();
        int n = 3 + (int)rnd(r, 3);
        for (int i = 0; i < n && todos; i++) {
            char *s = expand_new(r, i == 0 ? "Reproduce the failure in {test}" : i == n - 1 ? "Run the full test suite"
                                                                                            : "Update `{F}` to handle the {A} {N} case", c);
            if (s) json_array_append_new(todos, json_pack("{s:s,s:s,s:s}", "content", s, "status",
                                                          i == 0 ? "in_progress" : "pending", "activeForm", s));
            free(s);
        }
        if (todos) in = json_pack("{s:o}", "todos", todos);
        sb_puts(&out, "The todo list has been updated. Continue with the next pending item, and mark each item "
                      "completed as soon as it is done.");
        break;
    }
    case T_COMMIT: {
        char *subj = expand_new(r, PICK(r, k_commit_subjects), c);
        char cmd[256], hash[8];
        snprintf(cmd, sizeof cmd, "git add -A && git commit -m \"%.180s\"", subj ? subj : "Update");
        in = json_pack("{s:s,s:s}", "command", cmd, "description", "Commit the change");
        repo_commit(a->rp, subj ? subj : "Update", hash);
        sb_printf(&out, "[%s %s] %s\n %u files changed, %u insertions(+), %u deletions(-)\n", a->rp->branch, hash,
                  subj ? subj : "Update", 1 + rnd(r, 4), 1 + rnd(r, 80), rnd(r, 30));
        free(subj);
        break;
    }
    }
    free(t);
    char *input = in ? hx_json_canonical(in) : NULL;
    json_decref(in);
    char *text = sb_take(&out);
    int rc = ENG_ERR_NOMEM;
    hx_block bu = {0}, br = {0};
    if (input && text && !hx_block_init(&bu, HX_BLOCK_TOOL_USE, "", id, name, input, false) &&
        !hx_block_init(&br, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, is_error) && !hx_message_push_block(msg, &bu) &&
        !hx_message_push_block(res, &br))
        rc = ENG_OK;
    hx_block_free(&bu);
    hx_block_free(&br);
    eng_buf_free(&tmp.b);
    free(input);
    free(text);
    return rc;
}

static int push_text(hx_message *m, hx_block_type type, char *text /* taken */) {
    if (!text) return ENG_ERR_NOMEM;
    hx_block b;
    int rc = hx_block_init(&b, type, text, NULL, NULL, NULL, false);
    free(text);
    if (rc) return rc;
    if ((rc = hx_message_push_block(m, &b))) hx_block_free(&b);
    return rc;
}

static int push_message(hx_message **arr, int32_t *n, hx_message *m /* taken */) {
    hx_message *na = realloc(*arr, (size_t)(*n + 1) * sizeof *na);
    if (!na) return ENG_ERR_NOMEM;
    *arr = na;
    na[(*n)++] = *m;
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

/* Shared parts of every agent request. */
typedef struct prefix {
    char    *instr;
    hx_tool *tools;
    int32_t  n_tools;
    char     *tools_text; /* env_last: the tool definitions as a system block, else NULL */
} prefix;

static int make_request(hx_request *q, const char *session, int32_t turn, const prefix *px, const char *env,
                        const hx_message *conv, int32_t n_conv) {
    memset(q, 0, sizeof *q);
    q->turn = turn;
    q->response.role = HX_ROLE_ASSISTANT;
    if (!(q->session = hx_strdup(session))) goto nomem;
    int32_t ns = px->tools_text ? 4 : 3;
    if (!(q->system = calloc((size_t)ns, sizeof *q->system))) goto nomem;
    q->n_system = ns;
    /* block 0 (the billing header) gets its checksum when the output order is known;
     * with env_last the tool definitions are block 2 and the environment comes last */
    if (hx_block_init(&q->system[0], HX_BLOCK_TEXT, "", NULL, NULL, NULL, false) ||
        hx_block_init(&q->system[1], HX_BLOCK_TEXT, px->instr, NULL, NULL, NULL, false) ||
        (px->tools_text && hx_block_init(&q->system[2], HX_BLOCK_TEXT, px->tools_text, NULL, NULL, NULL, false)) ||
        hx_block_init(&q->system[ns - 1], HX_BLOCK_TEXT, env, NULL, NULL, NULL, false))
        goto nomem;
    if (!px->tools_text) {
        if (!(q->tools = calloc((size_t)px->n_tools, sizeof *q->tools))) goto nomem;
        for (int32_t i = 0; i < px->n_tools; i++, q->n_tools++)
            if (hx_tool_copy(&q->tools[i], &px->tools[i])) goto nomem;
    }
    if (n_conv && !(q->messages = calloc((size_t)n_conv, sizeof *q->messages))) goto nomem;
    for (int32_t i = 0; i < n_conv; i++, q->n_messages++)
        if (hx_message_copy(&q->messages[i], &conv[i])) goto nomem;
    return ENG_OK;
nomem:
    hx_request_free(q);
    return ENG_ERR_NOMEM;
}

/* Generates session s (p->turns requests) into reqs[0..turns). */
static int agent_session(const hx_synth_params *p, const prefix *px, int32_t s, repo *rp, hx_request *reqs) {
    agent a = {p, rng_new(p->seed, STREAM_SESSION, (uint64_t)s), rp, {{0}}, {0}};
    hx_message *conv = NULL, resp = {0}, res = {0}, task = {0};
    int32_t n_conv = 0;
    char session[32];
    snprintf(session, sizeof session, "agent-%03d", s);
    char *env = env_block(rp);
    int rc = ENG_ERR_NOMEM;
    if (!a.r || !env) goto out;
    pick_ctx(&a);
    task.role = HX_ROLE_USER;
    if ((rc = push_text(&task, HX_BLOCK_TEXT, expand_new(a.r, PICK(a.r, k_tasks), &a.c))) ||
        (rc = push_message(&conv, &n_conv, &task)))
        goto out;
    for (int32_t k = 0; k < p->turns; k++) {
        hx_request *q = &reqs[k];
        if ((rc = make_request(q, session, k, px, env, conv, n_conv))) goto out;
        bool final = k == p->turns - 1;
        bool commit = !final && coin(a.r, p->commit_rate);
        if (coin(a.r, 0.3)) pick_ctx(&a);
        resp = (hx_message){HX_ROLE_ASSISTANT, NULL, 0};
        res = (hx_message){HX_ROLE_USER, NULL, 0};
        if (coin(a.r, 0.35) && (rc = push_text(&resp, HX_BLOCK_THINKING, expand_new(a.r, PICK(a.r, k_thoughts), &a.c))))
            goto out;
        if (final) {
            if ((rc = push_text(&resp, HX_BLOCK_TEXT, expand_new(a.r, PICK(a.r, k_final), &a.c)))) goto out;
        } else {
            enum tool_kind kind = commit ? T_COMMIT : (k == 0 && coin(a.r, 0.4)) ? T_TODO : pick_kind(a.r);
            size_t ns;
            const char *const *says = says_for(kind, &ns);
            if ((rc = push_text(&resp, HX_BLOCK_TEXT, expand_new(a.r, says[rnd(a.r, (uint32_t)ns)], &a.c))) ||
                (rc = tool_call(&a, kind, &resp, &res)))
                goto out;
            if (!commit && kind == T_READ && coin(a.r, 0.2)) { /* a second, parallel Read */
                pick_ctx(&a);
                if ((rc = tool_call(&a, T_READ, &resp, &res))) goto out;
            }
        }
        if ((rc = hx_message_copy(&q->response, &resp))) goto out;
        if (!final) {
            if ((rc = push_message(&conv, &n_conv, &resp)) || (rc = push_message(&conv, &n_conv, &res))) goto out;
            if (commit && !p->fresh_sessions) { /* the harness rewrites the git-status block */
                free(env);
                if (!(env = env_block(rp))) { rc = ENG_ERR_NOMEM; goto out; }
            }
        }
        hx_message_free(&resp);
        hx_message_free(&res);
    }
    rc = ENG_OK;
out:
    hx_message_free(&resp);
    hx_message_free(&res);
    hx_message_free(&task);
    for (int32_t i = 0; i < n_conv; i++) hx_message_free(&conv[i]);
    free(conv);
    free(env);
    if (a.r) gsl_rng_free(a.r);
    return rc;
}

static int synth_agent(const hx_synth_params *p, hx_transcript *out) {
    prefix px = {0};
    int64_t tool_bytes = 0;
    int32_t S = p->sessions, T = p->turns;
    hx_request *all = calloc((size_t)S * (size_t)T, sizeof *all);
    repo *repos = calloc((size_t)(p->fresh_sessions ? 1 : S), sizeof *repos);
    uint8_t *used = calloc(1u << 17, 1);  /* 2^20 bits: the cch values drawn so far */
    gsl_rng *cr = rng_new(p->seed, STREAM_CCH, 0);
    int rc = ENG_ERR_NOMEM;
    if (!all || !repos || !used || !cr) goto out;
    if ((rc = make_tools(&px.tools, &px.n_tools, &tool_bytes))) goto out;
    {
        /* the prefix size estimate uses repository 0's environment block */
        if ((rc = repo_init(&repos[0], p->seed, 0))) goto out;
        char *env = env_block(&repos[0]);
        if (!env) { rc = ENG_ERR_NOMEM; goto out; }
        int64_t fixed = (int64_t)(strlen(env) + sizeof k_billing_fmt) + tool_bytes;
        free(env);
        if (!(px.instr = instruction_block(p->seed, p->system_bytes, fixed))) { rc = ENG_ERR_NOMEM; goto out; }
    }
    if (p->env_last) {  /* the tool definitions rendered inside the system prompt, before the environment */
        sbuf o = {0};
        sb_puts(&o, "# Tools\n\nYou can call these tools:\n");
        for (int32_t i = 0; i < px.n_tools; i++)
            sb_printf(&o, "\n## %s\n%s\nInput schema: %s\n", px.tools[i].name, px.tools[i].description,
                      px.tools[i].schema);
        if (!(px.tools_text = sb_take(&o))) { rc = ENG_ERR_NOMEM; goto out; }
    }
    for (int32_t s = 0; s < S; s++) {
        repo *rp = p->fresh_sessions ? &repos[0] : &repos[s];
        if (!rp->r && (rc = repo_init(rp, p->seed, (uint64_t)s))) goto out;
        if ((rc = agent_session(p, &px, s, rp, &all[(size_t)s * (size_t)T]))) goto out;
        if (eng_stderr_is_tty() && S > 8) fprintf(stderr, "\rsynth-transcript: session %d/%d", s + 1, S);
    }
    if (eng_stderr_is_tty() && S > 8) fprintf(stderr, "\n");
    /* output order, then one fresh distinct checksum per request */
    for (int32_t i = 0; i < S * T; i++) {
        int32_t s = p->interleave ? i % S : i / T, k = p->interleave ? i / S : i % T;
        hx_request *q = &all[(size_t)s * (size_t)T + (size_t)k];
        uint32_t v;
        do v = rnd(cr, 1u << 20);
        while (used[v >> 3] & (1u << (v & 7)));
        used[v >> 3] |= (uint8_t)(1u << (v & 7));
        char cch[8];
        snprintf(cch, sizeof cch, "%05x", v);
        char *bill = billing_block(cch);
        if (!bill) { rc = ENG_ERR_NOMEM; goto out; }
        free(q->system[0].text);
        q->system[0].text = bill;
        if ((rc = hx_transcript_push(out, q))) goto out;
    }
    rc = ENG_OK;
out:
    if (all) {
        for (size_t i = 0; i < (size_t)S * (size_t)T; i++) hx_request_free(&all[i]);
        free(all);
    }
    for (int32_t i = 0; repos && i < (p->fresh_sessions ? 1 : S); i++) repo_free(&repos[i]);
    free(repos);
    free(used);
    if (cr) gsl_rng_free(cr);
    free(px.instr);
    free(px.tools_text);
    for (int32_t i = 0; i < px.n_tools; i++) hx_tool_free(&px.tools[i]);
    free(px.tools);
    return rc;
}

// ----------------------------------------------------------------------------
// The extend scenario: each request = previous request + response + more diff + a question

static const char *const k_questions[] = {
    "Summarise what this part of the diff does.", "Which functions change behaviour here?",
    "Could this hunk introduce a regression? Explain briefly.", "Write a one-line commit message for the changes so far.",
    "Are there any missing error checks in this part?", "What tests would you add for these changes?"};
static const char *const k_answers[] = {
    "In {path}, `{func}` now {clause}.", "It also {clause}.", "The rest of the hunk only renames locals.",
    "There is a small risk that callers relying on the old behaviour of `{F}` break.",
    "I would add a test that covers the {A} {noun} case.", "Overall this is a refactor with one behaviour change in `{func}`."};
static const char k_extend_system[] = "You review code changes and answer questions about them. Be brief and precise.";

static char *answer(gsl_rng *r, const tctx *c) {
    sbuf o = {0};
    int n = 2 + (int)rnd(r, 3);
    uint32_t used = 0; /* distinct sentence templates */
    for (int i = 0; i < n; i++) {
        uint32_t k;
        do k = rnd(r, (uint32_t)N_OF(k_answers));
        while (used & (1u << k));
        used |= 1u << k;
        if (i) sb_puts(&o, " ");
        expand(r, &o, k_answers[k], c);
    }
    return sb_take(&o);
}

static int synth_extend(const hx_synth_params *p, hx_transcript *out) {
    int rc = ENG_OK;
    for (int32_t s = 0; s < p->sessions && rc == ENG_OK; s++) {
        gsl_rng *r = rng_new(p->seed, STREAM_EXTEND, (uint64_t)s);
        char session[32], paths[6][48], func[64];
        snprintf(session, sizeof session, "extend-%03d", s);
        hx_message *conv = NULL;
        int32_t n_conv = 0;
        char *prompt = NULL;
        if (!r) return ENG_ERR_NOMEM;
        int np = 3 + (int)rnd(r, 4);
        const char *proj = PICK(r, k_projects);
        for (int i = 0; i < np; i++)
            snprintf(paths[i], sizeof paths[i], "%s/%s.c", i % 2 ? "src" : "lib", k_nouns[(rnd(r, 60) + (uint32_t)i) % N_OF(k_nouns)]);
        const char *pp[6] = {paths[0], paths[1], paths[2], paths[3], paths[4], paths[5]};
        for (int32_t t = 0; t < p->turns && rc == ENG_OK; t++) {
            const char *noun = PICK(r, k_nouns);
            snprintf(func, sizeof func, "%s_%s", noun, PICK(r, k_verbs));
            tctx c = {proj, paths[rnd(r, (uint32_t)np)], paths[0], func, noun, PICK(r, k_fields), "s", "n", "", "main"};
            sbuf d = {0};
            diff_text(r, &d, &c, pp, np, t == 0 ? p->base_bytes : p->step_bytes);
            char *diff = sb_take(&d);
            const char *q = PICK(r, k_questions);
            char *ans = answer(r, &c);
            hx_request req = {0};
            req.response.role = HX_ROLE_ASSISTANT;
            req.turn = t;
            sbuf o = {0};
            rc = ENG_ERR_NOMEM;
            if (!diff || !ans || !(req.session = hx_strdup(session))) goto step_out;
            if (p->prompt_lines) {
                if (prompt) sb_puts(&o, prompt);
                sb_puts(&o, t == 0 ? "Below is a diff of a working tree, followed by questions about it.\n\n"
                                   : "\nNext part of the diff:\n\n");
                sb_puts(&o, diff);
                sb_printf(&o, "\nQuestion: %s\nAnswer:", q);
                free(prompt);
                if (!(prompt = sb_take(&o))) goto step_out;
                if (!(req.prompt = hx_strdup(prompt))) goto step_out;
                sb_printf(&o, " %s\n", ans);
                if (!(req.response_text = sb_take(&o))) goto step_out;
                /* the next prompt continues after this response */
                sb_puts(&o, prompt);
                sb_puts(&o, req.response_text);
                free(prompt);
                if (!(prompt = sb_take(&o))) goto step_out;
            } else {
                hx_message user = {HX_ROLE_USER, NULL, 0};
                sb_puts(&o, t == 0 ? "Here is a diff of my working tree:\n\n```diff\n" : "Here is the next part of the diff:\n\n```diff\n");
                sb_puts(&o, diff);
                sb_printf(&o, "```\n\n%s", q);
                if (push_text(&user, HX_BLOCK_TEXT, sb_take(&o)) || push_message(&conv, &n_conv, &user)) {
                    hx_message_free(&user);
                    goto step_out;
                }
                if (!(req.system = calloc(1, sizeof *req.system))) goto step_out;
                req.n_system = 1;
                if (hx_block_init(&req.system[0], HX_BLOCK_TEXT, k_extend_system, NULL, NULL, NULL, false)) goto step_out;
                if (!(req.messages = calloc((size_t)n_conv, sizeof *req.messages))) goto step_out;
                for (int32_t i = 0; i < n_conv; i++, req.n_messages++)
                    if (hx_message_copy(&req.messages[i], &conv[i])) goto step_out;
                if (push_text(&req.response, HX_BLOCK_TEXT, hx_strdup(ans))) goto step_out;
                hx_message a2;
                if (hx_message_copy(&a2, &req.response)) goto step_out;
                if (push_message(&conv, &n_conv, &a2)) {
                    hx_message_free(&a2);
                    goto step_out;
                }
            }
            rc = hx_transcript_push(out, &req);
        step_out:
            eng_buf_free(&o.b);
            hx_request_free(&req);
            free(diff);
            free(ans);
        }
        for (int32_t i = 0; i < n_conv; i++) hx_message_free(&conv[i]);
        free(conv);
        free(prompt);
        gsl_rng_free(r);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// The static scenario: one large static context, a different short question
// on every request (seeds/004: "large static context + small varying query").
// Request t = system + one user message (context + question t); requests do
// not extend each other, so the reusable prefix ends where the question starts.

static int synth_static(const hx_synth_params *p, hx_transcript *out) {
    int rc = ENG_OK;
    for (int32_t s = 0; s < p->sessions && rc == ENG_OK; s++) {
        gsl_rng *r = rng_new(p->seed, STREAM_EXTEND, 1000000u + (uint64_t)s);
        char session[32], paths[6][48], func[64];
        if (!r) return ENG_ERR_NOMEM;
        snprintf(session, sizeof session, "static-%03d", s);
        int np = 3 + (int)rnd(r, 4);
        const char *proj = PICK(r, k_projects);
        for (int i = 0; i < np; i++)
            snprintf(paths[i], sizeof paths[i], "%s/%s.c", i % 2 ? "src" : "lib", k_nouns[(rnd(r, 60) + (uint32_t)i) % N_OF(k_nouns)]);
        const char *pp[6] = {paths[0], paths[1], paths[2], paths[3], paths[4], paths[5]};
        snprintf(func, sizeof func, "%s_%s", PICK(r, k_nouns), PICK(r, k_verbs));
        tctx c0 = {proj, paths[0], paths[0], func, "buffer", "len", "s", "n", "", "main"};
        sbuf d = {0};
        sb_puts(&d, "Here is the full diff of my working tree:\n\n```diff\n");
        diff_text(r, &d, &c0, pp, np, p->base_bytes);
        sb_puts(&d, "```\n\n");
        char *context = sb_take(&d);
        if (!context) { gsl_rng_free(r); return ENG_ERR_NOMEM; }
        for (int32_t t = 0; t < p->turns && rc == ENG_OK; t++) {
            const char *noun = PICK(r, k_nouns);
            snprintf(func, sizeof func, "%s_%s", noun, PICK(r, k_verbs));
            tctx c = {proj, paths[rnd(r, (uint32_t)np)], paths[0], func, noun, PICK(r, k_fields), "s", "n", "", "main"};
            const char *q = PICK(r, k_questions);
            char *ans = answer(r, &c);
            hx_request req = {0};
            hx_message user = {HX_ROLE_USER, NULL, 0};
            sbuf o = {0};
            req.response.role = HX_ROLE_ASSISTANT;
            req.turn = t;
            rc = ENG_ERR_NOMEM;
            if (!ans || !(req.session = hx_strdup(session))) goto step_out;
            sb_puts(&o, context);
            sb_printf(&o, "Question %d: %s Focus on `%s` in %s.", t + 1, q, func, c.path);
            if (push_text(&user, HX_BLOCK_TEXT, sb_take(&o))) goto step_out;
            if (!(req.system = calloc(1, sizeof *req.system))) goto step_out;
            req.n_system = 1;
            if (hx_block_init(&req.system[0], HX_BLOCK_TEXT, k_extend_system, NULL, NULL, NULL, false)) goto step_out;
            if (!(req.messages = calloc(1, sizeof *req.messages))) goto step_out;
            req.messages[0] = user;
            req.n_messages = 1;
            user.blocks = NULL;
            user.n_blocks = 0;
            if (push_text(&req.response, HX_BLOCK_TEXT, hx_strdup(ans))) goto step_out;
            rc = hx_transcript_push(out, &req);
        step_out:
            eng_buf_free(&o.b);
            hx_message_free(&user);
            hx_request_free(&req);
            free(ans);
        }
        free(context);
        gsl_rng_free(r);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// Entry points

void hx_synth_params_init(hx_synth_params *p, hx_synth_scenario s) {
    memset(p, 0, sizeof *p);
    p->scenario = s;
    p->seed = 0;
    p->sessions = s == HX_SYNTH_AGENT ? 2 : 1;
    p->turns = s == HX_SYNTH_AGENT ? 6 : 8;
    p->system_bytes = 24000;
    p->tool_result_bytes = 2000;
    p->commit_rate = 0.1;
    p->base_bytes = 4096;
    p->step_bytes = 1024;
}

int hx_synth_scenario_from_name(const char *name) {
    if (name && !strcmp(name, "agent")) return HX_SYNTH_AGENT;
    if (name && !strcmp(name, "extend")) return HX_SYNTH_EXTEND;
    if (name && !strcmp(name, "static")) return HX_SYNTH_STATIC;
    return ENG_ERR_NOT_FOUND;
}

int hx_synth_transcript(const hx_synth_params *p, hx_transcript *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
#define RANGE(cond, ...) do { if (!(cond)) { eng_errf(err, errlen, __VA_ARGS__); return ENG_ERR_ARG; } } while (0)
    RANGE(p->scenario == HX_SYNTH_AGENT || p->scenario == HX_SYNTH_EXTEND || p->scenario == HX_SYNTH_STATIC,
          "--scenario: expected agent, extend or static");
    RANGE(p->sessions >= 1 && p->sessions <= 100000, "--sessions: must be in [1, 100000]");
    RANGE(p->turns >= 1 && p->turns <= 100000, "--turns: must be in [1, 100000]");
    RANGE((int64_t)p->sessions * p->turns <= 1000000, "--sessions x --turns: at most 1000000 requests");
    RANGE(p->system_bytes >= 0 && p->system_bytes <= (64 << 20), "--system-bytes: must be in [0, 67108864]");
    RANGE(p->tool_result_bytes >= 16 && p->tool_result_bytes <= (16 << 20), "--tool-result-bytes: must be in [16, 16777216]");
    RANGE(p->commit_rate >= 0.0 && p->commit_rate <= 1.0, "--commit-rate: must be in [0, 1]");
    RANGE(!(p->fresh_sessions && p->interleave), "--fresh-sessions and --interleave cannot be combined");
    RANGE(p->base_bytes >= 1 && p->base_bytes <= (64 << 20), "--base-bytes: must be in [1, 67108864]");
    RANGE(p->step_bytes >= 1 && p->step_bytes <= (64 << 20), "--step-bytes: must be in [1, 67108864]");
#undef RANGE
    int rc = p->scenario == HX_SYNTH_AGENT ? synth_agent(p, out)
           : p->scenario == HX_SYNTH_STATIC ? synth_static(p, out) : synth_extend(p, out);
    if (rc) {
        hx_transcript_free(out);
        eng_errf(err, errlen, "synth-transcript: %s", eng_status_str(rc));
    }
    return rc;
}
