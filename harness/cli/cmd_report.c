/*
 * harness/cli/cmd_report.c: `kvreplay report`, a markdown (or JSON) summary of a
 * results database (harness/store/report.h for the figures).
 *
 * Reads the database only. The output goes to stdout, or atomically to -o
 * FILE (built in memory, then eng_write_atomic), so a reader never sees a
 * half-written report. Exit codes: 0 ok; 2 usage, a missing file, a file
 * that is not a kvreplay database (or a newer one), an unknown --run or
 * --experiment; 3 I/O or internal failure.
 */
#include "cli.h"
#include "errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "jsonl.h"
#include "report.h"
#include "status.h"
#include "store.h"
#include "util.h"

static void usage(FILE *f) {
    fputs("usage: kvreplay report --db FILE [--run ID] [--experiment NAME] [--json] [-o FILE]\n"
          "\n"
          "Summarizes a results database written by `kvreplay replay` or `experiment`:\n"
          "per run, its configuration and requests, reuse fraction (reused / prompt\n"
          "tokens), prefilled tokens, TTFT p50 and p95 cold vs reused (ms), speedup of\n"
          "p50, % bit-identical to cold (prompt logits and every decode step), % forked\n"
          "(greedy tokens differ), max ULP distance and total cost (GFLOP).\n"
          "\n"
          "  --db FILE          the SQLite results database (required)\n"
          "  --run ID           only this run (default: every run)\n"
          "  --experiment NAME  one table for that experiment, a row per run, by variant\n"
          "  --json             one JSON object {\"db\", \"runs\": [...]} instead of markdown\n"
          "  -o FILE            write to FILE atomically instead of stdout\n"
          "\n"
          "exit codes: 0 ok, 2 bad usage or a missing/invalid database, 3 I/O error\n", f);
}

/* Exit code for a store/report status. */
static int exit_for(int status) {
    switch (status) {
    case ENG_ERR_FORMAT:
    case ENG_ERR_UNSUPPORTED:
    case ENG_ERR_NOT_FOUND:
    case ENG_ERR_ARG:
        return HX_EXIT_USAGE;
    default:
        return HX_EXIT_INTERNAL;
    }
}

int hx_cmd_report(int argc, char **argv) {
    const char *cmd = argv[0];
    if (hx_wants_help(argc, argv)) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    const char *db = NULL, *out_path = NULL, *experiment = NULL, *v;
    int64_t run_id = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--db"))) db = v;
        else if ((v = hx_opt(argc, argv, &i, "--run"))) run_id = hx_parse_int("--run", v, 1, INT64_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--experiment"))) experiment = v;
        else if ((v = hx_opt(argc, argv, &i, "-o"))) out_path = v;
        else if ((v = hx_opt(argc, argv, &i, "--output"))) out_path = v;
        else if (hx_flag(argv, i, "--json")) json = true;
        else hx_bad_arg(cmd, argv[i]);
    }
    if (!db) {
        usage(stderr);
        hx_die(HX_EXIT_USAGE, "%s: --db: missing (the results database to summarize)", cmd);
    }
    char oerr[1024];
    if (out_path && hx_output_check(out_path, oerr, sizeof oerr) != ENG_OK)
        hx_die(HX_EXIT_USAGE, "%s: -o %s", cmd, oerr);
    if (experiment && run_id > 0 && !json)
        hx_die(HX_EXIT_USAGE, "%s: --run and --experiment: give one of them", cmd);

    struct stat sb;
    if (stat(db, &sb) != 0)
        hx_die(errno == ENOENT || errno == ENOTDIR ? HX_EXIT_USAGE : HX_EXIT_INTERNAL,
               "%s: --db: %s: %s", cmd, db, strerror(errno));

    char err[1024] = "";
    hx_store *st = NULL;
    int status = hx_store_open_readonly(db, &st, err, sizeof err);
    if (status != ENG_OK) hx_die(exit_for(status), "%s: --db: %s", cmd, err);

    /* Build the whole output in memory, then write it in one piece. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) {
        hx_store_close(st);
        hx_die(HX_EXIT_INTERNAL, "%s: out of memory", cmd);
    }
    if (json) {
        json_t *o = NULL;
        status = hx_report_json(st, run_id, experiment, &o, err, sizeof err);
        if (status == ENG_OK) {
            if (json_dumpf(o, mem, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
                snprintf(err, sizeof err, "%s: writing JSON failed", db);
                status = ENG_ERR_IO;
            }
            fputc('\n', mem);
        }
        json_decref(o);
    } else if (experiment) {
        status = hx_report_experiment(st, experiment, mem, err, sizeof err);
    } else {
        status = hx_report_markdown(st, run_id, mem, err, sizeof err);
    }
    hx_store_close(st);
    if (fclose(mem) != 0 && status == ENG_OK) {
        snprintf(err, sizeof err, "report: out of memory");
        status = ENG_ERR_NOMEM;
    }
    if (status != ENG_OK) {
        free(text);
        hx_die(exit_for(status), "%s: %s", cmd, err);
    }

    int code = HX_EXIT_OK;
    if (out_path) {
        int wrc = eng_write_atomic(out_path, text, len, err, sizeof err);
        if (wrc != ENG_OK) {
            fprintf(stderr, "kvreplay: %s: -o: %s\n", cmd, err);
            code = hx_exit_for_status(wrc);
        }
    } else if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "kvreplay: %s: writing stdout: %s\n", cmd, strerror(errno));
        code = HX_EXIT_INTERNAL;
    }
    free(text);
    return code;
}
