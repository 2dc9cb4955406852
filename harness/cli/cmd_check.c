/*
 * harness/cli/cmd_check.c: `kvreplay check`: a replay whose verdict is the exit
 * code, for any engine's CI: 0 when every reused run is bit-identical to
 * cold (last prompt token and every decode step), 1 on any divergence (the
 * first divergent request is printed with the logit index, both values in
 * %a and the ULP distance), 2 bad input, 3 internal error.
 *
 * Without --db the results go to a temporary database that is removed
 * afterwards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "replay.h"
#include "report.h"
#include "status.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kvreplay check -m MODEL.gguf -t TRANSCRIPT.jsonl [--db OUT.sqlite] [--json] [OPTIONS]\n\n"
               "Replays like `kvreplay replay` and exits 1 when any reused run differs from cold by a\n"
               "single bit, in its logits or in the state it leaves after the prompt (0 when all are\n"
               "bit-identical, 2 bad input, 3 internal error).\n\n"
               "options (as replay):\n");
    hx_replay_opts_help(f);
    fprintf(f, "  --json                    print the verdict as one JSON object\n");
}

int hx_cmd_check(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    hx_replay_opts o;
    hx_replay_opts_default(&o);
    char err[512];
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (hx_flag(argv, i, "--json")) json = true;
        else if (!hx_took(hx_replay_opts_take(&o, argc, argv, &i, err, sizeof err), err)) hx_bad_arg("check", argv[i]);
    }
    char tmpdb[64] = "";
    if (!o.db_path) {
        snprintf(tmpdb, sizeof tmpdb, "/tmp/kvreplay-check-%ld.sqlite", (long)getpid());
        o.db_path = tmpdb;
    }
    o.sp.quiet = json;
    hx_coldcache *cold = hx_coldcache_new(0);
    hx_replay_summary sum;
    int code = hx_replay_run(&o, cold, &sum);
    hx_coldcache_free(cold);
    if (code == HX_EXIT_OK) {
        hx_store *st = NULL;
        if (hx_store_open_readonly(o.db_path, &st, err, sizeof err) != ENG_OK) {
            fprintf(stderr, "kvreplay: %s\n", err);
            code = HX_EXIT_INTERNAL;
        } else {
            int d = json ? hx_report_first_divergence_json(st, sum.run_id, stdout, err, sizeof err)
                         : hx_report_first_divergence(st, sum.run_id, stdout, err, sizeof err);
            if (d < 0) { fprintf(stderr, "kvreplay: %s\n", err); code = HX_EXIT_INTERNAL; }
            else code = d ? HX_EXIT_DIVERGED : HX_EXIT_OK;
            hx_store_close(st);
        }
    }
    if (tmpdb[0]) {
        unlink(tmpdb);
        char side[96];
        snprintf(side, sizeof side, "%s-wal", tmpdb);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", tmpdb);
        unlink(side);
        snprintf(side, sizeof side, "%s.lock", tmpdb);  /* the run lock file (store.h) */
        unlink(side);
    }
    return code;
}
