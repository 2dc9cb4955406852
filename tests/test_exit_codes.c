/*
 * tests/test_exit_codes.c: the exit-code rule (docs/exit-codes.md) for every
 * registered subcommand, table-driven.
 *
 * The subcommands come from the registries as the binary lists them
 * (`kvreplay --help`, `kvreplay model --help`, and the importers of
 * `kvreplay import --help`), so one added later is found. Each is run with
 * a bad path in each of its file arguments:
 *   missing     a path that does not exist
 *   directory   a directory
 *   unreadable  a file with mode 000 (run as nobody when root)
 *   wrong       a text file that is not a GGUF, SQLite database or JSON
 * and must exit 2 with a message naming the path. The file arguments of a
 * subcommand are the rows of k_rows (with whatever else the command needs to
 * get as far as reading them); a subcommand without a row is tested through
 * the file arguments its --help shows (an option whose value is a FILE or a
 * .gguf, .json, .jsonl or .sqlite file, or such a positional in its usage
 * line), and fails with a message asking for a row when it shows none.
 * KVR_VERBOSE=1 prints every run.
 * Output paths (-o) take a directory and a path in a missing directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixtures.h"
#include "gguf.h"
#include "proc.h"
#include "status.h"
#include "synth.h"
#include "synth_transcript.h"
#include "transcript.h"

enum { K_MISSING = 1, K_DIR = 2, K_UNREADABLE = 4, K_WRONG = 8, K_NODIR = 16 };
#define K_INPUT (K_MISSING | K_DIR | K_UNREADABLE | K_WRONG)
#define K_DB (K_DIR | K_UNREADABLE | K_WRONG)  /* an output database: a missing one is created */
#define K_OUTPUT (K_DIR | K_NODIR)

static char g_dir[64], g_model[160], g_tr[160], g_spec[160], g_out[160], g_db[160];
static char g_bad[5][200];  /* by kind: missing, directory, unreadable, wrong, in a missing directory */

/* One way to run a subcommand with a bad path: its argv with "@" where the
 * path goes ("MODEL", "TR", "SPEC", "OUT", "DB", "OPENAI" are fixtures), and
 * the kinds of bad path it is given there. */
typedef struct row {
    const char *cmd;  /* the registry name: "replay", "model info", "import openai" */
    const char *args[16];
    int         kinds;
} row;

static const row k_rows[] = {
    {"model synth", {"model", "synth", "--seed", "1", "--vocab", "@", "-o", "OUT"}, K_INPUT},
    {"model synth", {"model", "synth", "--seed", "1", "-o", "@"}, K_OUTPUT},
    {"model info", {"model", "info", "@"}, K_INPUT},
    {"model convert", {"model", "convert", "--from", "rwkv.cpp", "@", "-o", "OUT"}, K_INPUT},
    {"model convert", {"model", "convert", "--from", "rwkv.cpp", "MODEL", "-o", "@"}, K_OUTPUT},
    {"logits", {"logits", "-m", "@", "-p", "hello"}, K_INPUT},
    {"render", {"render", "-t", "@"}, K_INPUT},
    {"render", {"render", "-t", "TR", "-m", "@"}, K_INPUT},
    {"tokenize", {"tokenize", "-m", "@", "hello"}, K_INPUT},
    {"generate", {"generate", "-m", "@", "-n", "1"}, K_INPUT},
    {"bench", {"bench", "-m", "@"}, K_INPUT},
    {"bench", {"bench", "--tokenizer", "-m", "@"}, K_INPUT},
    {"bench", {"bench", "--checkpoints", "-m", "@"}, K_INPUT},
    {"bench", {"bench", "--serve", "-m", "@"}, K_INPUT},
    {"bench", {"bench", "--disk-cache", "--dir", "@"}, K_MISSING | K_WRONG},
    {"synth-transcript", {"synth-transcript", "--scenario", "agent", "-o", "@"}, K_OUTPUT},
    {"import", {"import", "--from", "openai", "OPENAI", "--tools-file", "@", "-o", "OUT"}, K_INPUT},
    {"import", {"import", "--from", "openai", "OPENAI", "--system-file", "@", "-o", "OUT"},
     K_MISSING | K_DIR | K_UNREADABLE},  /* any text is a valid system prompt */
    {"import", {"import", "--from", "openai", "OPENAI", "-o", "@"}, K_OUTPUT},
    {"replay", {"replay", "-m", "@", "-t", "TR", "--db", "DB"}, K_INPUT},
    {"replay", {"replay", "-m", "MODEL", "-t", "@", "--db", "DB"}, K_INPUT},
    {"replay", {"replay", "-m", "MODEL", "-t", "TR", "--db", "@"}, K_DB | K_NODIR},
    {"check", {"check", "-m", "@", "-t", "TR"}, K_INPUT},
    {"check", {"check", "-m", "MODEL", "-t", "@"}, K_INPUT},
    {"check", {"check", "-m", "MODEL", "-t", "TR", "--db", "@"}, K_DB | K_NODIR},
    /* probe: nothing listens on port 9, so the inputs are what fails */
    {"probe", {"probe", "--server", "http://127.0.0.1:9", "--api", "llama", "-t", "@"}, K_INPUT},
    {"probe", {"probe", "--server", "http://127.0.0.1:9", "--api", "llama", "-t", "TR", "-m", "@"}, K_INPUT},
    {"probe", {"probe", "--server", "http://127.0.0.1:9", "--api", "llama", "-t", "TR", "-o", "@"}, K_DB | K_NODIR},
    {"experiment", {"experiment", "@", "--db", "DB"}, K_INPUT},
    {"experiment", {"experiment", "SPEC", "--db", "@"}, K_DB | K_NODIR},
    {"merge", {"merge", "OUT", "@"}, K_INPUT},
    {"merge", {"merge", "@", "DB"}, K_DB | K_NODIR},  /* OUT: replaced only when it is a results database */
    {"report", {"report", "--db", "@"}, K_INPUT},
    {"report", {"report", "--db", "DB", "-o", "@"}, K_OUTPUT},
    /* serve checks every file it names before it listens (port 0: never a port in use) */
    {"serve", {"serve", "--listen", "127.0.0.1:0", "-m", "@"}, K_INPUT},
    {"serve", {"serve", "--listen", "127.0.0.1:0", "-m", "MODEL", "--script", "@"}, K_INPUT},
    {"serve", {"serve", "--listen", "127.0.0.1:0", "-m", "MODEL", "--record", "@"}, K_OUTPUT},
    {"serve", {"serve", "--listen", "127.0.0.1:0", "-m", "MODEL", "--db", "@"}, K_DB | K_NODIR},
    /* simulate and trace info (traces/): the trace, the model, the database, the materialized prompts */
    {"simulate", {"simulate", "-t", "@"}, K_INPUT},
    {"simulate", {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "-m", "@"}, K_INPUT},
    {"simulate", {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "--db", "@"}, K_DB | K_NODIR},
    {"simulate", {"simulate", "-t", "tests/data/trace_mooncake.jsonl", "-m", "MODEL", "--profile", "llama3-8b-h100",
                  "--materialize", "@"}, K_OUTPUT},
    {"trace", {"trace", "info", "@"}, K_INPUT},
};
#define N_ROWS (sizeof k_rows / sizeof k_rows[0])

static const char *const k_kind_name[] = {"missing", "directory", "unreadable", "wrong-format", "in-missing-dir"};

// ----------------------------------------------------------------------------
// Fixtures

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_exit") || chmod(g_dir, 0777) != 0) return -1;  /* nobody writes outputs here too */
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_tr, sizeof g_tr, "%s/t.jsonl", g_dir);
    if (fx_tiny_model(g_model, 1) || fx_transcript(g_tr, HX_SYNTH_STATIC, 0, 1, 200)) return -1;
    snprintf(g_spec, sizeof g_spec, "%s/spec.json", g_dir);
    FILE *f = fopen(g_spec, "w");
    if (!f) return -1;
    fprintf(f, "{\"name\": \"x\", \"models\": {\"m\": {\"path\": \"%s\"}}, \"transcripts\": {\"t\": {\"path\": \"%s\"}},"
               " \"runs\": [{\"variant\": \"v\", \"model\": \"m\", \"transcript\": \"t\", \"args\": [\"--decode\", \"1\"]}]}\n",
            g_model, g_tr);
    fclose(f);
    snprintf(g_out, sizeof g_out, "%s/out.any", g_dir);
    snprintf(g_db, sizeof g_db, "%s/good.sqlite", g_dir);
    const char *args[] = {"replay", "-m", g_model, "-t", g_tr, "--db", g_db, "--decode", "1", "--quiet", NULL};
    if (proc_run(NULL, NULL, 0, NULL, 0, args) != 0) return -1;
    snprintf(g_bad[0], sizeof g_bad[0], "%s/no-such-file", g_dir);
    snprintf(g_bad[1], sizeof g_bad[1], "%s/a-directory", g_dir);
    snprintf(g_bad[2], sizeof g_bad[2], "%s/unreadable", g_dir);
    snprintf(g_bad[3], sizeof g_bad[3], "%s/not-a-model.txt", g_dir);
    snprintf(g_bad[4], sizeof g_bad[4], "%s/no-such-dir/out.file", g_dir);
    if (mkdir(g_bad[1], 0755) != 0) return -1;
    for (int k = 2; k <= 3; k++) {
        f = fopen(g_bad[k], "w");
        if (!f) return -1;
        fputs("this is not a model, a database or JSON\n", f);
        fclose(f);
    }
    return chmod(g_bad[2], 0) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

// ----------------------------------------------------------------------------
// The registries, as the binary lists them

typedef struct names { char v[64][48]; int n; } names;

static void add_name(names *ns, const char *s, size_t len) {
    if (ns->n < 64 && len < sizeof ns->v[0]) {
        memcpy(ns->v[ns->n], s, len);
        ns->v[ns->n++][len] = '\0';
    }
}

/* Subcommands: the "  NAME   help" lines of `kvreplay --help`, with "model"
 * replaced by "model NAME" for each line of `kvreplay model --help`, and
 * "import NAME" for each format of `kvreplay import --help`. */
static void registered(names *ns) {
    static char out[16384];
    const char *help[] = {"--help", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, help), 0);
    char *line = out;
    for (char *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (line[0] != ' ' || line[1] != ' ' || !islower((unsigned char)line[2])) continue;
        size_t n = strcspn(line + 2, " \n");
        if (n == 5 && !strncmp(line + 2, "model", 5)) continue;
        add_name(ns, line + 2, n);
    }
    const char *model[] = {"model", "--help", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, model), 0);
    for (char *p = out; (p = strstr(p, "kvreplay model ")); p += 15) {
        char buf[48];
        size_t n = strcspn(p + 15, " \n");
        if (n >= 40) continue;
        snprintf(buf, sizeof buf, "model %.*s", (int)n, p + 15);
        bool dup = false;
        for (int i = 0; i < ns->n; i++) dup |= !strcmp(ns->v[i], buf);
        if (!dup) add_name(ns, buf, strlen(buf));
    }
}

// ----------------------------------------------------------------------------
// Running a row

/* Expands a row's argv for bad-path kind k into argv (NULL-terminated). */
static void expand(const char *const *tmpl, int k, const char **argv) {
    int n = 0;
    for (; tmpl[n]; n++) {
        const char *a = tmpl[n];
        argv[n] = !strcmp(a, "@") ? g_bad[k] : !strcmp(a, "MODEL") ? g_model : !strcmp(a, "TR") ? g_tr
                : !strcmp(a, "SPEC") ? g_spec : !strcmp(a, "OUT") ? g_out : !strcmp(a, "DB") ? g_db
                : !strcmp(a, "OPENAI") ? "tests/data/openai_sample.jsonl" : a;
    }
    argv[n] = NULL;
}

/* Runs one expanded command; returns a failure description or NULL. */
static const char *try_kind(const char *cmd, const char *const *tmpl, int k, char *why, size_t cap) {
    const char *argv[20];
    expand(tmpl, k, argv);
    proc_opts o = {.uid = (1 << k) == K_UNREADABLE ? 65534 : -1};
    static char out[8192], err[8192];
    unlink(g_out);
    int rc = proc_run(&o, out, sizeof out, err, sizeof err, argv);
    const char *path = g_bad[k];
    if (rc == 126) return NULL;  /* could not become nobody: covered by the non-root run */
    if (getenv("KVR_VERBOSE")) fprintf(stderr, "[%s %s] rc=%d %.160s\n", cmd, k_kind_name[k], rc, err);
    if (rc == 2 && strstr(err, path)) return NULL;
    char line[600] = "";
    for (int i = 0; argv[i]; i++) snprintf(line + strlen(line), sizeof line - strlen(line), " %s", argv[i]);
    snprintf(why, cap, "%s, %s path: exit %d (want 2 naming the path):%s\n  stderr: %.300s", cmd, k_kind_name[k], rc,
             line, err);
    return why;
}

static int run_row(const char *cmd, const char *const *tmpl, int kinds, char *report, size_t cap) {
    int fails = 0;
    for (int k = 0; k < 5; k++) {
        if (!(kinds & (1 << k))) continue;
        char why[1200];
        if (try_kind(cmd, tmpl, k, why, sizeof why)) {
            fails++;
            snprintf(report + strlen(report), cap - strlen(report), "%s\n", why);
        }
    }
    return fails;
}

/* The file arguments a subcommand's --help shows: options whose metavar
 * names a file, and file-like positionals of its usage line. */
static int discovered_rows(const char *cmd, row *rows, int cap) {
    static char help[16384];
    const char *argv[4] = {NULL, NULL, "--help", NULL};
    char words[2][48];
    int nw = sscanf(cmd, "%47s %47s", words[0], words[1]);
    argv[0] = words[0];
    if (nw == 2) argv[1] = words[1];
    else argv[1] = "--help", argv[2] = NULL;
    if (proc_run(NULL, help, sizeof help, NULL, 0, argv) != 0) return 0;
    int n = 0;
    static char store[16][48];
    for (char *p = help; *p && n < cap; p++) {
        if (!(p[0] == '-' && p[1] == '-' && (p == help || p[-1] == ' ' || p[-1] == ','))) continue;
        size_t len = strcspn(p, " =\n");
        char *meta = p + len;
        while (*meta == ' ') meta++;
        size_t ml = strcspn(meta, " \n");
        bool file = (memmem(meta, ml, "FILE", 4) || memmem(meta, ml, ".gguf", 5) || memmem(meta, ml, ".json", 5) ||
                     memmem(meta, ml, ".sqlite", 7)) && strncmp(p, "--output", 8);
        if (!file || len >= 48) continue;
        snprintf(store[n], sizeof store[n], "%.*s", (int)len, p);
        row r = {cmd, {0}, K_INPUT};
        int a = 0;
        r.args[a++] = words[0];
        if (nw == 2) r.args[a++] = words[1];
        r.args[a++] = store[n];
        r.args[a++] = "@";
        rows[n++] = r;
    }
    /* a positional file argument of the usage line: "kvreplay model info [OPTIONS] MODEL.gguf" */
    char *u = strstr(help, "usage:");
    size_t ulen = u ? strcspn(u, "\n") : 0;
    for (char *w = u; w && w < u + ulen && n < cap;) {
        w += strspn(w, " ");
        size_t wl = strcspn(w, " \n");
        char *prev = w - 2;
        while (prev > u && *prev != ' ') prev--;
        bool after_option = prev[1] == '-' || (prev[1] == '[' && prev[2] == '-');  /* the value of an option */
        bool upper = isupper((unsigned char)w[0]);
        bool file = upper && (memmem(w, wl, ".gguf", 5) || memmem(w, wl, ".json", 5) || memmem(w, wl, ".sqlite", 7) ||
                              (wl == 4 && !strncmp(w, "FILE", 4)));
        if (file && !after_option) {
            row r = {cmd, {0}, K_INPUT};
            int a = 0;
            r.args[a++] = words[0];
            if (nw == 2) r.args[a++] = words[1];
            r.args[a++] = "@";
            rows[n++] = r;
        }
        w += wl;
    }
    return n;
}

// ----------------------------------------------------------------------------
// The tests

static void every_registered_subcommand_exits_2_naming_a_bad_input_path(void **state) {
    (void)state;
    names ns = {0};
    registered(&ns);
    assert_true(ns.n >= 10);
    static char report[65536];
    report[0] = '\0';
    int fails = 0, covered = 0;
    for (int i = 0; i < ns.n; i++) {
        bool has_row = false;
        for (size_t r = 0; r < N_ROWS; r++) {
            if (strcmp(k_rows[r].cmd, ns.v[i])) continue;
            has_row = true;
            covered++;
            fails += run_row(k_rows[r].cmd, k_rows[r].args, k_rows[r].kinds, report, sizeof report);
        }
        if (has_row) continue;
        row rows[16];
        int n = discovered_rows(ns.v[i], rows, 16);
        if (n == 0) {
            fails++;
            snprintf(report + strlen(report), sizeof report - strlen(report),
                     "subcommand '%s': no row in tests/test_exit_codes.c and no file argument in its --help: add a "
                     "row (its file arguments, and what else it needs to reach them)\n", ns.v[i]);
        }
        int before = fails;
        for (int r = 0; r < n; r++) fails += run_row(rows[r].cmd, rows[r].args, rows[r].kinds, report, sizeof report);
        if (fails > before)
            snprintf(report + strlen(report), sizeof report - strlen(report),
                     "subcommand '%s' has no row in tests/test_exit_codes.c: if it needs other arguments to get as "
                     "far as reading its files, add one\n", ns.v[i]);
    }
    if (fails) fail_msg("%d of the bad-path runs broke the exit-code rule:\n%s", fails, report);
    assert_true(covered >= 10);
}

static void every_importer_exits_2_naming_a_bad_input_path(void **state) {
    (void)state;
    static char help[16384];
    const char *argv[] = {"import", "--help", NULL};
    assert_int_equal(proc_run(NULL, help, sizeof help, NULL, 0, argv), 0);
    char *p = strstr(help, "formats:");
    assert_non_null(p);
    static char report[32768];
    report[0] = '\0';
    int fails = 0, n = 0;
    for (char *line = strchr(p, '\n') + 1; line && line[0] == ' ' && line[1] == ' ' && line[2] != ' ';
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char name[48];
        if (sscanf(line, " %47s", name) != 1) break;
        char cmd[64];
        snprintf(cmd, sizeof cmd, "import --from %s", name);
        row r = {cmd, {"import", "--from", name, "@", "-o", "OUT"}, K_INPUT};
        fails += run_row(cmd, r.args, r.kinds, report, sizeof report);
        n++;
    }
    if (fails) fail_msg("%d of the bad-path runs broke the exit-code rule:\n%s", fails, report);
    assert_true(n >= 4);
}

/* Planted breaches: the same check fails a command that exits 0 on a bad
 * path, and one that exits 2 without naming it (the table test can fail). */
static void the_check_catches_a_command_that_breaks_the_rule(void **state) {
    (void)state;
    char why[1200];
    const char *exit0[] = {"--version", NULL};
    assert_non_null(try_kind("--version", exit0, 0, why, sizeof why));
    assert_non_null(strstr(why, "exit 0 (want 2"));
    const char *unnamed[] = {"report", "--db", "DB", "--experiment", "no-such-experiment", NULL};
    assert_non_null(try_kind("report --experiment", unnamed, 0, why, sizeof why));
    const char *ok[] = {"model", "info", "@", NULL};
    assert_null(try_kind("model info", ok, 0, why, sizeof why));
}

// ----------------------------------------------------------------------------
// Smaller items of issue #14 (each failed before)

static void a_thread_count_above_the_cap_is_refused_naming_the_flag(void **state) {
    (void)state;
    char err[4096];
    const char *gen[] = {"generate", "-m", g_model, "-n", "1", "--threads", "1000", NULL};
    const char *info[] = {"model", "info", g_model, "--threads", "1000", NULL};
    const char *bench[] = {"bench", "-m", g_model, "--threads", "1000", NULL};
    const char *const *cmds[] = {gen, info, bench};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, cmds[i]), 2);
        assert_non_null(strstr(err, "--threads: expected an integer in [1, 256], got '1000'"));
    }
}

static void an_empty_transcript_is_exit_2_not_a_run_of_nothing(void **state) {
    (void)state;
    char empty[200], bad[200], db[200], err[4096];
    snprintf(empty, sizeof empty, "%s/empty.jsonl", g_dir);
    snprintf(bad, sizeof bad, "%s/allbad.jsonl", g_dir);
    snprintf(db, sizeof db, "%s/empty.sqlite", g_dir);
    FILE *f = fopen(empty, "w");
    assert_non_null(f);
    fclose(f);
    f = fopen(bad, "w");
    assert_non_null(f);
    fputs("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":42}\n", f);
    fclose(f);
    const char *a[] = {"replay", "-m", g_model, "-t", empty, "--db", db, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, a), 2);
    assert_non_null(strstr(err, "no requests to replay (the transcript is empty)"));
    assert_non_null(strstr(err, empty));
    const char *b[] = {"check", "-m", g_model, "-t", bad, "--skip-bad", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, b), 2);
    assert_non_null(strstr(err, "every line was bad and skipped"));
}

static void limit_0_means_every_request_and_says_so(void **state) {
    (void)state;
    char out[16384], db[200];
    const char *help[] = {"replay", "--help", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, NULL, 0, help), 0);
    assert_non_null(strstr(out, "(default 0: all of them)"));
    char two[200];
    snprintf(two, sizeof two, "%s/two.jsonl", g_dir);
    assert_int_equal(fx_transcript(two, HX_SYNTH_STATIC, 0, 2, 200), 0);
    snprintf(db, sizeof db, "%s/limit.sqlite", g_dir);
    const char *a[] = {"replay", "-m", g_model, "-t", two, "--db", db, "--decode", "1", "--limit", "0", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, NULL, 0, a), 0);
    assert_int_equal(db_int_or(db, "select count(*) from requests", -1), 2);
}

static void a_missing_or_directory_spec_names_the_path_without_a_bogus_line(void **state) {
    (void)state;
    char err[4096];
    const char *a[] = {"experiment", g_bad[0], "--db", g_db, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, a), 2);
    assert_null(strstr(err, ":-1:"));
    assert_non_null(strstr(err, "No such file or directory"));
    const char *b[] = {"experiment", g_bad[1], "--db", g_db, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, b), 2);
    assert_null(strstr(err, "expected near"));
    assert_non_null(strstr(err, "Is a directory"));
}

static void a_special_token_id_outside_the_vocabulary_is_refused_naming_the_key(void **state) {
    (void)state;
    eng_synth_params p = eng_synth_preset("tiny");
    void *buf = NULL;
    size_t n = 0;
    char err[4096];
    assert_int_equal(eng_synth_to_buffer(&p, &buf, &n, err, sizeof err), ENG_OK);
    eng_gguf *g = NULL;
    assert_int_equal(eng_gguf_open_buffer(buf, n, "tiny", &g, err, sizeof err), ENG_OK);
    eng_gguf_writer *w = eng_gguf_writer_new(3, 0);
    assert_int_equal(eng_gguf_writer_copy_kv(w, g, "tokenizer."), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu), ENG_OK);
    char vocab[200];
    snprintf(vocab, sizeof vocab, "%s/bos-none.gguf", g_dir);
    assert_int_equal(eng_gguf_writer_write(w, vocab, err, sizeof err), ENG_OK);
    eng_gguf_writer_free(w);
    eng_gguf_close(g);
    free(buf);
    const char *a[] = {"tokenize", "-m", vocab, "hello", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, a), 2);
    assert_non_null(strstr(err, "tokenizer.ggml.bos_token_id: 4294967295 is not a token id of this vocabulary"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_registered_subcommand_exits_2_naming_a_bad_input_path),
        cmocka_unit_test(every_importer_exits_2_naming_a_bad_input_path),
        cmocka_unit_test(the_check_catches_a_command_that_breaks_the_rule),
        cmocka_unit_test(a_thread_count_above_the_cap_is_refused_naming_the_flag),
        cmocka_unit_test(an_empty_transcript_is_exit_2_not_a_run_of_nothing),
        cmocka_unit_test(limit_0_means_every_request_and_says_so),
        cmocka_unit_test(a_missing_or_directory_spec_names_the_path_without_a_bogus_line),
        cmocka_unit_test(a_special_token_id_outside_the_vocabulary_is_refused_naming_the_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
