/*
 * harness/cli/cmd_experiment_sim.c: `kvreplay experiment SPEC` for a spec of
 * production traces (one with a "traces" object): each runs[] entry at each
 * sweep value is one `kvreplay simulate` run, a unit (docs/traces.md,
 * "Experiments"):
 *
 *   traces: {ID: {"path": FILE}}    a trace absent (shared data not installed)
 *                                   skips the runs that use it, with a message
 *   vars:   {"demo": {...}, "full": {...}}   ${NAME} in any string below
 *   runs:   [{"variant": NAME, "trace": ID, "simulate": [simulate flags],
 *             "sweep": {"name": N, "values": [...] | "${list}"}}]
 *
 * Units are numbered in spec order; with --shard K/N, unit u runs in shard
 * (u mod N) + 1 (every unit costs under a second or so: no pricing needed).
 * Each run records its experiment, variant, sweep value, unit, shard and
 * plan digest in `runs`, and the process one `shards` row, as replay units do,
 * so `kvreplay merge` joins the shards' databases. --resume skips the units
 * that have a finished run in the database.
 */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sha256.h"
#include "shard.h"
#include "status.h"
#include "store.h"
#include "util.h"

int hx_cmd_simulate(int argc, char **argv);
int hx_experiment_simulate(json_t *spec, const char *spec_path, const char *spec_sha, const char *db, const char *scale,
                           const char *shard, bool dry, bool resume, const hx_str_list *only);

#define MAX_ARGS 128

/* ${NAME}: the sweep variable, then the scale's vars. Exits 2 on an unknown one. */
static void subst(const char *spec_path, json_t *vars, const char *sname, const char *sval, const char *in, char *out,
                  size_t cap) {
    size_t o = 0;
    for (const char *p = in; *p;) {
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            if (!end) hx_die(HX_EXIT_USAGE, "%s: unterminated ${ in '%s'", spec_path, in);
            char name[64], val[512];
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 2), p + 2);
            json_t *v;
            if (sname && !strcmp(name, sname)) snprintf(val, sizeof val, "%s", sval);
            else if (vars && (v = json_object_get(vars, name))) {
                if (json_is_string(v)) snprintf(val, sizeof val, "%s", json_string_value(v));
                else if (json_is_integer(v)) snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
                else if (json_is_real(v)) snprintf(val, sizeof val, "%g", json_real_value(v));
                else hx_die(HX_EXIT_USAGE, "%s: vars.%s: expected a string or number", spec_path, name);
            } else {
                hx_die(HX_EXIT_USAGE, "%s: '%s': unknown variable ${%s}", spec_path, in, name);
            }
            size_t k = strlen(val);
            if (o + k >= cap) hx_die(HX_EXIT_USAGE, "%s: '%s' expands too long", spec_path, in);
            memcpy(out + o, val, k);
            o += k;
            p = end + 1;
        } else {
            if (o + 1 >= cap) hx_die(HX_EXIT_USAGE, "%s: '%s' expands too long", spec_path, in);
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

typedef struct unit {
    char  label[384], variant[256], sweep_name[64], sweep_val[64];
    char *argv[MAX_ARGS];
    int   argc;
    int   shard;
    bool  skip;   /* its trace is absent */
} unit;

static bool selected(const hx_str_list *only, const char *v) {
    for (int k = 0; k < only->n; k++)
        if (!strncmp(v, only->v[k], strlen(only->v[k]))) return true;
    return only->n == 0;
}

/* Whether db has a finished run of this experiment, variant and sweep value. */
static bool done_in(const char *db, const char *exp, const unit *u) {
    struct stat sb;
    if (stat(db, &sb) != 0) return false;
    hx_store *st = NULL;
    char err[512];
    if (hx_store_open_readonly(db, &st, err, sizeof err) != ENG_OK) return false;
    sqlite3_stmt *q = NULL;
    bool done = false;
    if (sqlite3_prepare_v2(hx_store_db(st),
                           "SELECT count(*) FROM runs WHERE experiment = ?1 AND variant = ?2 AND status = 'done' AND "
                           "coalesce(sweep_name, '') = ?3 AND (?4 = '' OR sweep_value = CAST(?4 AS REAL))",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, exp, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, u->variant, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 3, u->sweep_name, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, u->sweep_val, -1, SQLITE_STATIC);
        done = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) > 0;
    }
    sqlite3_finalize(q);
    hx_store_close(st);
    return done;
}

int hx_experiment_simulate(json_t *spec, const char *spec_path, const char *spec_sha, const char *db, const char *scale,
                           const char *shard, bool dry, bool resume, const hx_str_list *only) {
    const char *name = json_string_value(json_object_get(spec, "name"));
    json_t *traces = json_object_get(spec, "traces"), *runs = json_object_get(spec, "runs");
    json_t *vars = json_object_get(json_object_get(spec, "vars"), scale);
    if (!json_is_object(traces)) hx_die(HX_EXIT_USAGE, "%s: traces: expected an object", spec_path);
    int32_t k_shard = 1, n_shards = 1;
    if (shard && hx_shard_parse(shard, &k_shard, &n_shards) != ENG_OK)
        hx_die(HX_EXIT_USAGE, "--shard: expected K/N with 1 <= K <= N <= 4096, got '%s'", shard);
    unit *u = NULL;
    int n = 0;
    size_t ri;
    json_t *run;
    json_array_foreach(runs, ri, run) {
        json_t *variant = json_object_get(run, "variant"), *tid = json_object_get(run, "trace"),
               *sim = json_object_get(run, "simulate"), *sweep = json_object_get(run, "sweep");
        if (!json_is_string(variant) || !json_is_string(tid) || !json_is_array(sim))
            hx_die(HX_EXIT_USAGE, "%s: runs[%zu]: variant and trace (strings) and simulate (an array) are required",
                   spec_path, ri);
        json_t *tr = json_object_get(traces, json_string_value(tid));
        if (!json_is_string(json_object_get(tr, "path")))
            hx_die(HX_EXIT_USAGE, "%s: runs[%zu].trace: no trace '%s' with a path in traces", spec_path, ri,
                   json_string_value(tid));
        const char *sname = sweep ? json_string_value(json_object_get(sweep, "name")) : NULL;
        json_t *values = sweep ? json_object_get(sweep, "values") : NULL;
        if (sweep && (!sname || !values)) hx_die(HX_EXIT_USAGE, "%s: runs[%zu].sweep: expected name and values", spec_path, ri);
        char list[4096];
        json_t *vals = NULL;
        if (values && json_is_string(values)) {
            subst(spec_path, vars, NULL, NULL, json_string_value(values), list, sizeof list);
            vals = json_array();
            char *save = NULL;
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                json_array_append_new(vals, json_string(tok));
        } else if (values) {
            vals = json_incref(values);
        }
        size_t nv = vals ? json_array_size(vals) : 1;
        for (size_t vi = 0; vi < nv; vi++) {
            char sval[64] = "";
            if (vals) {
                json_t *v = json_array_get(vals, vi);
                if (json_is_string(v)) snprintf(sval, sizeof sval, "%s", json_string_value(v));
                else snprintf(sval, sizeof sval, "%g", json_number_value(v));
            }
            char vname[256];
            subst(spec_path, vars, sname, sval, json_string_value(variant), vname, sizeof vname);
            if (!selected(only, vname)) continue;
            unit *g = realloc(u, sizeof *u * (size_t)(n + 1));
            if (!g) hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
            u = g;
            unit *x = &u[n++];
            memset(x, 0, sizeof *x);
            snprintf(x->variant, sizeof x->variant, "%s", vname);
            snprintf(x->sweep_name, sizeof x->sweep_name, "%s", sname ? sname : "");
            snprintf(x->sweep_val, sizeof x->sweep_val, "%s", sval);
            snprintf(x->label, sizeof x->label, "%s%s%s%s%s", vname, sname ? " " : "", sname ? sname : "",
                     sname ? "=" : "", sval);
            char path[1024];
            subst(spec_path, vars, sname, sval, json_string_value(json_object_get(tr, "path")), path, sizeof path);
            struct stat sb;
            if (stat(path, &sb) != 0) x->skip = true;
            x->argv[x->argc++] = strdup("simulate");
            x->argv[x->argc++] = strdup("-t");
            x->argv[x->argc++] = strdup(path);
            size_t ai;
            json_t *av;
            json_array_foreach(sim, ai, av) {
                char raw[512], buf[1024];
                if (json_is_string(av)) snprintf(raw, sizeof raw, "%s", json_string_value(av));
                else if (json_is_integer(av)) snprintf(raw, sizeof raw, "%lld", (long long)json_integer_value(av));
                else if (json_is_real(av)) snprintf(raw, sizeof raw, "%g", json_real_value(av));
                else hx_die(HX_EXIT_USAGE, "%s: runs[%zu].simulate[%zu]: expected a string or number", spec_path, ri, ai);
                subst(spec_path, vars, sname, sval, raw, buf, sizeof buf);
                if (x->argc >= MAX_ARGS - 40) hx_die(HX_EXIT_USAGE, "%s: runs[%zu].simulate: too many arguments", spec_path, ri);
                x->argv[x->argc++] = strdup(buf);
            }
        }
        json_decref(vals);
    }
    /* the plan: unit i in shard (i mod N) + 1 */
    json_t *plan = json_array();
    for (int i = 0; i < n; i++) {
        u[i].shard = i % n_shards + 1;
        json_array_append_new(plan, json_pack("[i, i, s]", i, u[i].shard, u[i].label));
    }
    char *ptext = json_dumps(plan, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(plan);
    if (!ptext) hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
    uint8_t dg[32];
    char plan_sha[65];
    eng_sha256(ptext, strlen(ptext), dg);
    eng_sha256_hex(dg, plan_sha);
    if (!dry) {
        hx_shard_meta m = {.experiment = name, .spec_sha256 = spec_sha, .scale = scale, .shard = k_shard,
                           .n_shards = n_shards, .n_units = n, .plan_sha256 = plan_sha, .plan = ptext};
        char err[1024] = "";
        hx_store *st = NULL;
        int rc = hx_store_open(db, &st, err, sizeof err);
        if (rc == ENG_OK) rc = hx_store_put_shard(st, &m, err, sizeof err);
        hx_store_close(st);
        if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    }
    double t0 = eng_now_s();
    int n_runs = 0, n_skipped = 0, n_done = 0, code = HX_EXIT_OK;
    for (int i = 0; i < n && code == HX_EXIT_OK; i++) {
        unit *x = &u[i];
        if (x->shard != k_shard) continue;
        if (x->skip) {
            fprintf(stderr, "kvreplay: %s: variant %s skipped: trace %s absent\n", spec_path, x->label, x->argv[2]);
            n_skipped++;
            continue;
        }
        if (resume && done_in(db, name, x)) { n_done++; continue; }
        char unit_s[24], nu[24], sh[24], nsh[24];
        snprintf(unit_s, sizeof unit_s, "%d", i);
        snprintf(nu, sizeof nu, "%d", n);
        snprintf(sh, sizeof sh, "%d", x->shard);
        snprintf(nsh, sizeof nsh, "%d", n_shards);
        const char *extra[] = {"--db", db, "--experiment", name, "--variant", x->variant, "--unit", unit_s,
                               "--n-units", nu, "--shard-index", sh, "--n-shards", nsh, "--plan-sha256", plan_sha,
                               "--spec-sha256", spec_sha, "--scale", scale, "--quiet"};
        int argc = x->argc;
        char *argv[MAX_ARGS];
        memcpy(argv, x->argv, sizeof(char *) * (size_t)argc);
        for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++) argv[argc++] = (char *)extra[k];
        if (x->sweep_name[0]) {
            argv[argc++] = "--sweep-name";
            argv[argc++] = x->sweep_name;
            char *end = NULL;
            strtod(x->sweep_val, &end);
            if (end != x->sweep_val && *end == '\0') {
                argv[argc++] = "--sweep-value";
                argv[argc++] = x->sweep_val;
            }
        }
        argv[argc] = NULL;
        if (dry) {
            printf("kvreplay");
            for (int k = 0; k < argc; k++) printf(" %s", argv[k]);
            printf("   # unit %d: %s\n", i, x->label);
            continue;
        }
        if (eng_stderr_is_tty()) fprintf(stderr, "kvreplay: %s / %s\n", name, x->label);
        code = hx_cmd_simulate(argc, argv);
        if (code == HX_EXIT_DIVERGED) code = HX_EXIT_OK;  /* a verified divergence is a result, not a failure */
        n_runs++;
    }
    if (!dry && code == HX_EXIT_OK)
        fprintf(stderr, "kvreplay: experiment %s (%s scale, shard %d/%d): %d simulate runs%s%s in %.1fs -> %s\n", name,
                scale, k_shard, n_shards, n_runs, n_done ? " (some already complete, not re-run)" : "",
                n_skipped ? " (some skipped: trace absent)" : "", eng_now_s() - t0, db);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < u[i].argc; k++) free(u[i].argv[k]);
    free(u);
    free(ptext);
    return code;
}
