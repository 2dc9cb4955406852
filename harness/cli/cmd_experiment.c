/*
 * harness/cli/cmd_experiment.c: `kvreplay experiment SPEC.json --db OUT.sqlite [--scale demo|full]`.
 *
 * An experiment spec (experiments/NAME.json, documented in docs/experiments.md)
 * names its inputs and its runs:
 *   vars:        {"demo": {NAME: VALUE, ...}, "full": {...}}: ${NAME} in any
 *                string below is replaced by the value for the chosen scale;
 *   models:      {ID: {"path": FILE} | {"synth": [model synth args]}
 *                    | {"convert": [model convert args]}}; a model converted
 *                    from a file that is absent (shared data not installed)
 *                    skips the runs that use it, with a message;
 *   transcripts: {ID: {"path": FILE} | {"synth": [synth-transcript args]}
 *                    | {"import": [import args]}};
 *   runs:        [{"variant": NAME, "model": ID, "transcript": ID,
 *                  "args": [replay flags], "sweep": {"name": N, "values": [...]}}]
 *                or, probing a live server (kvreplay probe, docs/probe.md):
 *                 {"variant": NAME, "server": ID, "transcript": ID, "model": ID (optional: probe's -m),
 *                  "probe": [probe flags]};
 *   servers:     {ID: {"serve": [kvreplay serve args]} (started here on a free loopback port with
 *                    the run's model, stopped after the run) | {"url": URL} | {"url_env": NAME}
 *                    (the URL from that environment variable; unset: the variants that use it are
 *                    skipped, with a message)};
 *                 with a sweep, ${N} takes each value in turn (in args, in the
 *                 variant name, and in the model/transcript generator args),
 *                 and runs.sweep_name / sweep_value record it (NULL for a
 *                 value that is not a number), so a plot is one query.
 * Generated models and transcripts are cached under results/cache/ by a hash
 * of their generator arguments. Every run shares one cold-result cache: the
 * cold run of an identical prompt under identical numerics is computed once.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "child.h"
#include "probe.h"
#include "replay.h"
#include "sha256.h"
#include "shard.h"
#include "status.h"
#include "store.h"
#include "util.h"
#include "version.h"

#define MAX_ARGS 96

int hx_cmd_model_synth(int argc, char **argv);
int hx_cmd_model_convert(int argc, char **argv);
int hx_experiment_simulate(json_t *spec, const char *spec_path, const char *spec_sha, const char *db, const char *scale,
                           const char *shard, bool dry, bool resume, const hx_str_list *only);

typedef struct xctx {
    const char *spec_path;
    json_t     *vars;        /* the chosen scale's vars (borrowed) */
    const char *sweep_name;  /* current sweep variable, or NULL */
    char        sweep_val[64];
    const char *cache_root;
    bool        resume;      /* --resume: a probe variant already done by this build is not run again */
} xctx;

static const char k_usage[] =
    "usage: kvreplay experiment experiments/NAME.json --db results/NAME.sqlite [OPTIONS]\n\n"
    "Runs every variant of an experiment spec into one database (runs.experiment,\n"
    "runs.variant and runs.sweep_* name them).\n\n"
    "options:\n";

typedef struct exp_args {
    const char *db, *scale, *cache_root, *calibration, *shard;
    int32_t     threads, repeat;
    hx_str_list only;
    int64_t     cold_mib;
    bool        resume, dry;
} exp_args;

#define OPT(field) offsetof(exp_args, field)
static const hx_option k_options[] = {
    {"--db", NULL, "FILE", "results database (required)", HX_OPT_STRING, OPT(db), 0, 0, NULL},
    {"--scale", NULL, "demo|full", "the spec's scaled-down default, or the issue report's scale (default demo)",
     HX_OPT_STRING, OPT(scale), 0, 0, NULL},
    {"--threads", NULL, "T", "thread count for every run (default: the spec's, else 1)", HX_OPT_INT, OPT(threads), 1,
     256, NULL},
    {"--repeat", NULL, "N", "time every run's prefills N times (default: each run's --repeat in the spec, else 1)",
     HX_OPT_INT, OPT(repeat), 1, 64, NULL},
    {"--calibration", NULL, "FILE", "price every run's modeled TTFT at FILE's reference calibration (measured\n"
     "and added for configurations it lacks); default: each run's own measurement", HX_OPT_STRING,
     OPT(calibration), 0, 0, NULL},
    {"--only", NULL, "VARIANT", "run only this variant (repeatable prefix match)", HX_OPT_STRINGS, OPT(only), 0, 0,
     NULL},
    {"--resume", NULL, NULL, "complete interrupted runs instead of starting new ones; a variant whose run\n"
     "is complete is not run again", HX_OPT_FLAG, OPT(resume), 0, 0, NULL},
    {"--cold-cache-mib", NULL, "N", "budget of the shared cold-result cache (default 2048)", HX_OPT_INT64,
     OPT(cold_mib), 0, 1 << 20, NULL},
    {"--cache-root", NULL, "DIR", "where generated models and transcripts are cached (default results/cache)",
     HX_OPT_STRING, OPT(cache_root), 0, 0, NULL},
    {"--shard", NULL, "K/N", "run only shard K of N: a deterministic part of the units (variant x transcript\n"
     "x sweep value), balanced by modeled cost; N processes with 1/N .. N/N run every\n"
     "unit once; `kvreplay merge` joins their databases (docs/scale.md)", HX_OPT_STRING, OPT(shard), 0, 0, NULL},
    {"--dry-run", NULL, NULL, "print the replay command lines and stop; with --shard, first the plan: every\n"
     "unit's shard and modeled cost", HX_OPT_FLAG, OPT(dry), 0, 0, NULL},
    {0},
};

/* Substitutes ${name} from the sweep variable, then the scale's vars. */
static int substitute(const xctx *x, const char *in, char *out, size_t cap, char *err, size_t errlen) {
    size_t o = 0;
    for (const char *p = in; *p;) {
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            if (!end) { eng_errf(err, errlen, "%s: unterminated ${ in '%s'", x->spec_path, in); return ENG_ERR_FORMAT; }
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 2), p + 2);
            char val[256];
            json_t *v;
            if (x->sweep_name && !strcmp(name, x->sweep_name)) snprintf(val, sizeof val, "%s", x->sweep_val);
            else if (x->vars && (v = json_object_get(x->vars, name))) {
                if (json_is_string(v)) snprintf(val, sizeof val, "%s", json_string_value(v));
                else if (json_is_integer(v)) snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
                else if (json_is_real(v)) snprintf(val, sizeof val, "%g", json_real_value(v));
                else { eng_errf(err, errlen, "%s: vars.%s: expected a string or number", x->spec_path, name); return ENG_ERR_FORMAT; }
            } else { eng_errf(err, errlen, "%s: '%s': unknown variable ${%s}", x->spec_path, in, name); return ENG_ERR_FORMAT; }
            size_t k = strlen(val);
            if (o + k >= cap) return ENG_ERR_RANGE;
            memcpy(out + o, val, k);
            o += k;
            p = end + 1;
        } else {
            if (o + 1 >= cap) return ENG_ERR_RANGE;
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    return ENG_OK;
}

/* Expands a JSON array of strings/numbers into argv (strings are malloc'd). */
static int expand_args(const xctx *x, json_t *arr, const char *field, char **argv, int *argc, char *err, size_t errlen) {
    if (!json_is_array(arr)) { eng_errf(err, errlen, "%s: %s: expected an array", x->spec_path, field); return ENG_ERR_FORMAT; }
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (*argc >= MAX_ARGS - 2) { eng_errf(err, errlen, "%s: %s: too many arguments", x->spec_path, field); return ENG_ERR_RANGE; }
        char raw[512], buf[1024];
        if (json_is_string(v)) snprintf(raw, sizeof raw, "%s", json_string_value(v));
        else if (json_is_integer(v)) snprintf(raw, sizeof raw, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(raw, sizeof raw, "%g", json_real_value(v));
        else { eng_errf(err, errlen, "%s: %s[%zu]: expected a string or number", x->spec_path, field, i); return ENG_ERR_FORMAT; }
        int rc = substitute(x, raw, buf, sizeof buf, err, errlen);
        if (rc) return rc;
        argv[(*argc)++] = strdup(buf);
    }
    return ENG_OK;
}

static void free_args(char **argv, int argc) {
    for (int i = 0; i < argc; i++) free(argv[i]);
}

static int mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    return mkdir(buf, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && st.st_size > 0;
}

/* Resolves a model or transcript input to a file path, generating it when needed;
 * *seed (when seed is not NULL) gets the generator's --seed, -1 without one. */
static int resolve_input(const xctx *x, json_t *inputs, const char *kind, const char *id, char *path, size_t cap,
                         int64_t *seed, char *err, size_t errlen) {
    if (seed) *seed = -1;
    json_t *e = json_object_get(inputs, id);
    if (!e) { eng_errf(err, errlen, "%s: %s: no %s named '%s'", x->spec_path, kind, kind, id); return ENG_ERR_FORMAT; }
    json_t *p = json_object_get(e, "path");
    if (p) {
        if (!json_is_string(p)) { eng_errf(err, errlen, "%s: %s.%s.path: expected a string", x->spec_path, kind, id); return ENG_ERR_FORMAT; }
        return substitute(x, json_string_value(p), path, cap, err, errlen);
    }
    const char *gen = json_object_get(e, "synth")     ? "synth"
                      : json_object_get(e, "import")  ? "import"
                      : json_object_get(e, "convert") ? "convert" : NULL;
    int is_model = !strcmp(kind, "models");
    if (!gen || (!strcmp(gen, "convert") && !is_model) || (!strcmp(gen, "import") && is_model)) {
        eng_errf(err, errlen, "%s: %s.%s: expected path, %s", x->spec_path, kind, id,
                 is_model ? "synth or convert" : "synth or import");
        return ENG_ERR_FORMAT;
    }
    char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = strdup(is_model ? gen : !strcmp(gen, "synth") ? "synth-transcript" : "import");
    char field[160];
    snprintf(field, sizeof field, "%s.%s.%s", kind, id, gen);
    int rc = expand_args(x, json_object_get(e, gen), field, argv, &argc, err, errlen);
    if (rc) { free_args(argv, argc); return rc; }
    for (int i = 1; i + 1 < argc; i++)  /* the generator's seed, recorded in the run */
        if (seed && !strcmp(argv[i], "--seed")) *seed = strtoll(argv[i + 1], NULL, 10);
    if (!strcmp(gen, "convert"))  /* its input file (the argument that is no option's value) must exist */
        for (int i = 1; i < argc; i++) {
            if (argv[i][0] == '-') { i++; continue; }
            if (!file_exists(argv[i])) {
                eng_errf(err, errlen, "%s: %s.%s.convert: %s absent", x->spec_path, kind, id, argv[i]);
                free_args(argv, argc);
                return ENG_ERR_NOT_FOUND;
            }
        }
    /* cache key: the generator and its expanded arguments */
    XXH64_hash_t h = 0;
    for (int i = 0; i < argc; i++) h = XXH64(argv[i], strlen(argv[i]) + 1, h);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", x->cache_root, is_model ? "models" : "transcripts");
    mkdirs(dir);
    snprintf(path, cap, "%s/%s-%016llx.%s", dir, id, (unsigned long long)h, is_model ? "gguf" : "jsonl");
    if (!file_exists(path)) {
        argv[argc++] = strdup("-o");
        argv[argc++] = strdup(path);
        if (eng_stderr_is_tty()) fprintf(stderr, "kvreplay: generating %s\n", path);
        int code = is_model ? (!strcmp(gen, "synth") ? hx_cmd_model_synth(argc, argv) : hx_cmd_model_convert(argc, argv))
                 : !strcmp(gen, "synth") ? hx_cmd_synth_transcript(argc, argv) : hx_cmd_import(argc, argv);
        if (code != HX_EXIT_OK) {
            eng_errf(err, errlen, "%s: %s.%s: generator failed (exit %d)", x->spec_path, kind, id, code);
            free_args(argv, argc);
            return ENG_ERR_FORMAT;
        }
    }
    free_args(argv, argc);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Probe runs: a live server (kvreplay serve started here, or a URL)

/* One probe run of the spec. HX_EXIT_OK when it ran (its findings, exit 1 of probe, are its
 * results, not the experiment's failure) or was skipped (*skipped). */
/* With --resume: whether db holds a finished run of this variant by this build (said on stderr). */
static bool probe_done(const xctx *x, const char *db, const char *exp_name, const char *vname) {
    if (!x->resume || access(db, F_OK) != 0) return false;
    hx_store *st = NULL;
    char err[512];
    int64_t id = -1;
    bool done = hx_store_open(db, &st, err, sizeof err) == ENG_OK &&
                hx_store_find_done_variant(st, exp_name, vname, hx_git_rev(), &id, err, sizeof err) == ENG_OK;
    hx_store_close(st);
    if (done) fprintf(stderr, "kvreplay: %s / %s: run %lld is complete, not run again\n", exp_name, vname, (long long)id);
    return done;
}

static int run_probe(const xctx *x, json_t *spec, json_t *run, size_t ri, const char *vname, const char *db,
                     const char *exp_name, bool dry, bool *skipped, bool *complete, char *err, size_t errlen) {
    *skipped = *complete = false;
    json_t *servers = json_object_get(spec, "servers");
    const char *sid = json_string_value(json_object_get(run, "server"));
    json_t *srv = json_object_get(servers, sid ? sid : "");
    json_t *tid = json_object_get(run, "transcript"), *mid = json_object_get(run, "model");
    if (!json_is_object(srv)) {
        eng_errf(err, errlen, "%s: runs[%zu].server: no server named '%s' in servers", x->spec_path, ri, sid ? sid : "");
        return HX_EXIT_USAGE;
    }
    if (!json_is_string(tid) || (mid && !json_is_string(mid))) {
        eng_errf(err, errlen, "%s: runs[%zu]: transcript (and model, when given) must be strings", x->spec_path, ri);
        return HX_EXIT_USAGE;
    }
    char model_path[1024] = "", tr_path[1024], url[512] = "";
    int rc;
    if (mid) {
        rc = resolve_input(x, json_object_get(spec, "models"), "models", json_string_value(mid), model_path,
                           sizeof model_path, NULL, err, errlen);
        if (rc == ENG_ERR_NOT_FOUND) {
            fprintf(stderr, "kvreplay: %s: variant %s skipped\n", err, vname);
            *skipped = true;
            return HX_EXIT_OK;
        }
        if (rc) return HX_EXIT_USAGE;
    }
    if (resolve_input(x, json_object_get(spec, "transcripts"), "transcripts", json_string_value(tid), tr_path,
                      sizeof tr_path, NULL, err, errlen))
        return HX_EXIT_USAGE;
    char *sargv[MAX_ARGS], *pargv[MAX_ARGS];
    int sargc = 0, pargc = 0;
    pargv[pargc++] = strdup("probe");
    char field[96];
    snprintf(field, sizeof field, "runs[%zu].probe", ri);
    json_t *pa = json_object_get(run, "probe");
    if (pa && expand_args(x, pa, field, pargv, &pargc, err, errlen)) {
        free_args(pargv, pargc);
        return HX_EXIT_USAGE;
    }
    json_t *serve = json_object_get(srv, "serve");
    const char *env = json_string_value(json_object_get(srv, "url_env"));
    if (serve) {
        snprintf(field, sizeof field, "servers.%s.serve", sid);
        if (!mid) {
            eng_errf(err, errlen, "%s: runs[%zu]: a server started by the experiment needs the run's model", x->spec_path, ri);
            free_args(pargv, pargc);
            return HX_EXIT_USAGE;
        }
        sargv[sargc++] = strdup("-m");
        sargv[sargc++] = strdup(model_path);
        if (expand_args(x, serve, field, sargv, &sargc, err, errlen)) {
            free_args(pargv, pargc);
            free_args(sargv, sargc);
            return HX_EXIT_USAGE;
        }
    } else if (env) {
        const char *v = getenv(env);
        if (!v || !*v) {
            fprintf(stderr, "kvreplay: %s: variant %s skipped: set %s to the server's URL (docs/probe.md)\n",
                    x->spec_path, vname, env);
            free_args(pargv, pargc);
            *skipped = true;
            return HX_EXIT_OK;
        }
        snprintf(url, sizeof url, "%s", v);
    } else if (json_is_string(json_object_get(srv, "url"))) {
        if (substitute(x, json_string_value(json_object_get(srv, "url")), url, sizeof url, err, errlen)) {
            free_args(pargv, pargc);
            return HX_EXIT_USAGE;
        }
    } else {
        eng_errf(err, errlen, "%s: servers.%s: expected serve, url or url_env", x->spec_path, sid);
        free_args(pargv, pargc);
        return HX_EXIT_USAGE;
    }
    int code = HX_EXIT_OK;
    if (dry) {
        if (serve) {
            printf("kvreplay serve");
            for (int i = 0; i < sargc; i++) printf(" %s", sargv[i]);
            printf(" --listen 127.0.0.1:0 --port-file F &   # PORT: what F says\n");
        }
        printf("kvreplay probe --server %s -t %s -o %s%s%s", serve ? "http://127.0.0.1:PORT" : url, tr_path, db,
               mid ? " -m " : "", mid ? model_path : "");
        for (int i = 1; i < pargc; i++) printf(" %s", pargv[i]);
        printf("   # variant %s\n", vname);
        goto out;
    }
    /* the probe's flags, checked before a server is started (exit 2 naming the flag) */
    hx_probe_opts o;
    hx_probe_opts_default(&o);
    for (int i = 1; i < pargc; i++)
        if (!hx_took(hx_probe_opts_take(&o, pargc, pargv, &i, err, errlen), err)) hx_bad_arg("experiment (spec probe flags)", pargv[i]);
    o.server = url;  /* a started serve's port is written into url below */
    o.transcript_path = tr_path;
    o.db_path = db;
    if (mid) o.sp.model_path = model_path;
    o.experiment = exp_name;
    o.variant = vname;
    o.sp.quiet = !eng_stderr_is_tty();
    hx_check(hx_probe_opts_check(&o, err, errlen), err);
    if (probe_done(x, db, exp_name, vname)) {
        *complete = true;
        goto out;
    }
    hx_serve_child child = {0};
    if (serve) {
        char logdir[600], log[800];
        snprintf(logdir, sizeof logdir, "%s/logs", x->cache_root);
        mkdirs(logdir);
        snprintf(log, sizeof log, "%s/serve-%s-%zu.log", logdir, exp_name, ri);
        sargv[sargc] = NULL;
        if (hx_serve_child_start(NULL, (const char *const *)sargv, log, 60, &child, err, errlen)) {
            code = HX_EXIT_INTERNAL;
            goto out;
        }
        snprintf(url, sizeof url, "http://127.0.0.1:%d", child.port);
    }
    if (eng_stderr_is_tty()) fprintf(stderr, "kvreplay: %s / %s (probe %s)\n", exp_name, vname, url);
    hx_probe_summary sum;
    int prc = hx_probe_run(&o, &sum);
    hx_serve_child_stop(&child, 10);
    if (prc != HX_EXIT_OK && prc != HX_EXIT_DIVERGED) {
        eng_errf(err, errlen, "%s: variant %s: probe failed (exit %d)", x->spec_path, vname, prc);
        code = prc;
    }
out:
    free_args(pargv, pargc);
    free_args(sargv, sargc);
    return code;
}

/* Whether --only selects this variant (a prefix of it; every variant without --only). */
static bool selected(const exp_args *a, const char *variant) {
    for (int k = 0; k < a->only.n; k++)
        if (!strncmp(variant, a->only.v[k], strlen(a->only.v[k]))) return true;
    return a->only.n == 0;
}

/* What one unit owns: the strings its replay options point into. */
typedef struct unit_own {
    char *rargv[MAX_ARGS];
    int   rargc;
    char *model_path, *tr_path, *vname, *quirks;
} unit_own;

static void unit_own_free(unit_own *w) {
    free_args(w->rargv, w->rargc);
    free(w->model_path);
    free(w->tr_path);
    free(w->vname);
    free(w->quirks);
}

/* Every unit of the spec (runs[] entry x sweep value), in spec order, with
 * its inputs generated and its replay options parsed; units whose converted
 * model's input is absent are skipped (*n_skipped). Exits 2 on a bad spec. */
static void expand_units(xctx *x, json_t *spec, const exp_args *a, const char *name, hx_unit **out_u,
                         unit_own **out_w, int32_t *out_n, int *n_skipped) {
    json_t *runs = json_object_get(spec, "runs"), *models = json_object_get(spec, "models"),
           *transcripts = json_object_get(spec, "transcripts"), *run;
    hx_unit *u = NULL;
    unit_own *w = NULL;
    int32_t n = 0;
    char err[1024] = "";
    size_t ri;
    json_array_foreach(runs, ri, run) {
        json_t *variant = json_object_get(run, "variant"), *mid = json_object_get(run, "model"),
               *tid = json_object_get(run, "transcript"), *sweep = json_object_get(run, "sweep");
        if (json_object_get(run, "server")) continue;  /* a probe run: not a unit (run_probes) */
        if (!json_is_string(variant) || !json_is_string(mid) || !json_is_string(tid))
            hx_die(HX_EXIT_USAGE, "%s: runs[%zu]: variant, model and transcript must be strings", x->spec_path, ri);
        if (!selected(a, json_string_value(variant))) continue;
        json_t *values = sweep ? json_object_get(sweep, "values") : NULL;
        const char *sname = sweep ? json_string_value(json_object_get(sweep, "name")) : NULL;
        if (sweep && (!sname || !values))
            hx_die(HX_EXIT_USAGE, "%s: runs[%zu].sweep: expected name and values", x->spec_path, ri);
        char sbuf[256];
        if (values && json_is_string(values)) {  /* "${chunks}": a comma list from vars */
            if (substitute(x, json_string_value(values), sbuf, sizeof sbuf, err, sizeof err)) hx_die(HX_EXIT_USAGE, "%s", err);
            json_t *arr = json_array();
            char *save = NULL;
            for (char *tok = strtok_r(sbuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                json_array_append_new(arr, json_string(tok));
            values = arr;
        } else if (values) json_incref(values);
        size_t n_vals = values ? json_array_size(values) : 1;
        for (size_t vi = 0; vi < n_vals; vi++) {
            x->sweep_name = sname;
            if (values) {
                json_t *v = json_array_get(values, vi);
                if (json_is_string(v)) snprintf(x->sweep_val, sizeof x->sweep_val, "%s", json_string_value(v));
                else snprintf(x->sweep_val, sizeof x->sweep_val, "%g", json_number_value(v));
            }
            char model_path[1024], tr_path[1024];
            int64_t tr_seed;
            int mrc = resolve_input(x, models, "models", json_string_value(mid), model_path, sizeof model_path, NULL,
                                    err, sizeof err);
            if (mrc == ENG_ERR_NOT_FOUND) {  /* a model from shared data that is not installed */
                fprintf(stderr, "kvreplay: %s: variant %s skipped\n", err, json_string_value(variant));
                (*n_skipped)++;
                continue;
            }
            if (mrc || resolve_input(x, transcripts, "transcripts", json_string_value(tid), tr_path, sizeof tr_path,
                                     &tr_seed, err, sizeof err))
                hx_die(HX_EXIT_USAGE, "%s", err);
            hx_unit *gu = realloc(u, sizeof *u * (size_t)(n + 1));
            unit_own *gw = realloc(w, sizeof *w * (size_t)(n + 1));
            if (!gu || !gw) hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
            u = gu;
            w = gw;
            hx_unit *un = &u[n];
            unit_own *uw = &w[n];
            memset(un, 0, sizeof *un);
            memset(uw, 0, sizeof *uw);
            uw->rargv[uw->rargc++] = strdup("replay");
            char field[64];
            snprintf(field, sizeof field, "runs[%zu].args", ri);
            json_t *args = json_object_get(run, "args");
            if (args && expand_args(x, args, field, uw->rargv, &uw->rargc, err, sizeof err)) hx_die(HX_EXIT_USAGE, "%s", err);
            char vname[256];  /* ${...} in the variant name too: one entry can sweep over policies */
            if (substitute(x, json_string_value(variant), vname, sizeof vname, err, sizeof err))
                hx_die(HX_EXIT_USAGE, "%s", err);
            hx_replay_opts *o = &un->o;
            hx_replay_opts_default(o);
            for (int i = 1; i < uw->rargc; i++)
                if (!hx_took(hx_replay_opts_take(o, uw->rargc, uw->rargv, &i, err, sizeof err), err))
                    hx_bad_arg("experiment (spec args)", uw->rargv[i]);
            uw->quirks = strdup(o->sp.quirks);  /* --quirk's buffer is shared by every option set parsed */
            uw->model_path = strdup(model_path);
            uw->tr_path = strdup(tr_path);
            uw->vname = strdup(vname);
            if (!uw->quirks || !uw->model_path || !uw->tr_path || !uw->vname)
                hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
            o->sp.quirks = uw->quirks;
            o->sp.model_path = uw->model_path;
            o->transcript_path = uw->tr_path;
            o->db_path = a->db;
            o->experiment = name;
            o->variant = uw->vname;
            o->resume = a->resume;
            o->sp.quiet = !eng_stderr_is_tty();
            if (a->threads) o->sp.num.n_threads = a->threads;
            if (a->repeat) o->sp.repeat = a->repeat;
            if (a->calibration) o->sp.calibration = a->calibration;
            if (o->seed < 0) o->seed = tr_seed;  /* the transcript generator's seed (models: model_sha256) */
            if (sname) {  /* a value that is not a number (a policy name) is stored as NULL */
                char *end = NULL;
                double v = strtod(x->sweep_val, &end);
                o->sweep_name = sname;
                o->sweep_value = end != x->sweep_val && *end == '\0' ? v : NAN;
            }
            un->index = n;
            snprintf(un->label, sizeof un->label, "%.240s%s%.64s%s%.64s", vname, sname ? " " : "", sname ? sname : "",
                     sname ? "=" : "", sname ? x->sweep_val : "");
            n++;
        }
        json_decref(values);
    }
    x->sweep_name = NULL;
    *out_u = u;
    *out_w = w;
    *out_n = n;
}

/* The `shards` row of this process: the whole plan and the shard it runs,
 * written before the first run, so that a shard that holds no unit (more
 * shards than units) still leaves a database `kvreplay merge` can place. */
static void record_shard(const char *db, const char *experiment, const char *spec_sha, const char *scale,
                         int32_t shard, int32_t n_shards, const hx_unit *u, int32_t n, const hx_plan *plan) {
    json_t *arr = json_array();
    for (int32_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_pack("[i, i, s]", (json_int_t)u[i].index, (json_int_t)u[i].shard,
                                                 u[i].label)))
            hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
    char *text = arr ? json_dumps(arr, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(arr);
    if (!text) hx_die(HX_EXIT_INTERNAL, "experiment: out of memory");
    hx_shard_meta m = {.experiment = experiment, .spec_sha256 = spec_sha, .scale = scale, .shard = shard,
                       .n_shards = n_shards, .n_units = n, .plan_sha256 = plan->sha256, .plan = text};
    char err[1024] = "";
    hx_store *st = NULL;
    int rc = hx_store_open(db, &st, err, sizeof err);
    if (rc == ENG_OK) rc = hx_store_put_shard(st, &m, err, sizeof err);
    hx_store_close(st);
    free(text);
    if (rc != ENG_OK)
        hx_die(rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE
                                                                                       : HX_EXIT_INTERNAL, "%s", err);
}

/* The spec's probe runs (runs[] entries with "server"), in spec order, after its units. */
static int run_probes(xctx *x, json_t *spec, const exp_args *a, const char *db, const char *exp_name, bool dry,
                      int *n_runs, int *n_skipped, int *n_complete) {
    json_t *run;
    size_t ri;
    json_array_foreach(json_object_get(spec, "runs"), ri, run) {
        json_t *variant = json_object_get(run, "variant");
        if (!json_object_get(run, "server")) continue;
        if (!json_is_string(variant)) hx_die(HX_EXIT_USAGE, "%s: runs[%zu]: variant must be a string", x->spec_path, ri);
        if (!selected(a, json_string_value(variant))) continue;
        char vname[256], err[1024] = "";
        bool skipped = false, complete = false;
        int code = HX_EXIT_OK;
        if (substitute(x, json_string_value(variant), vname, sizeof vname, err, sizeof err) ||
            (code = run_probe(x, spec, run, ri, vname, db, exp_name, dry, &skipped, &complete, err, sizeof err)) !=
                HX_EXIT_OK) {
            fprintf(stderr, "kvreplay: %s\n", err);
            return code == HX_EXIT_OK ? HX_EXIT_USAGE : code;
        }
        if (skipped) (*n_skipped)++;
        else if (!dry) (*n_runs)++;
        if (complete) (*n_complete)++;
    }
    return HX_EXIT_OK;
}

int hx_cmd_experiment(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return HX_EXIT_OK; }
    exp_args a = {.scale = "demo", .cache_root = "results/cache", .cold_mib = 2048};
    const char *spec_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_options, &a, argc, argv, &i)) continue;
        if (argv[i][0] != '-' && !spec_path) spec_path = argv[i];
        else hx_bad_arg("experiment", argv[i]);
    }
    const char *db = a.db, *scale = a.scale;
    int dry = a.dry;
    int32_t shard = 1, n_shards = 1;
    if (!spec_path) hx_die(HX_EXIT_USAGE, "experiment: the spec file is required (see --help)");
    if (!db) hx_die(HX_EXIT_USAGE, "experiment: --db is required");
    if (strcmp(scale, "demo") && strcmp(scale, "full")) hx_die(HX_EXIT_USAGE, "--scale: expected demo or full, got '%s'", scale);
    if (a.shard && hx_shard_parse(a.shard, &shard, &n_shards) != ENG_OK)
        hx_die(HX_EXIT_USAGE, "--shard: expected K/N with 1 <= K <= N <= 4096, got '%s'", a.shard);

    char err[1024] = "";
    char *text = NULL;
    size_t text_len = 0;
    int rrc = eng_read_file(spec_path, &text, &text_len, err, sizeof err);  /* "PATH: cannot open: why" */
    if (rrc != ENG_OK) hx_die(rrc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    uint8_t digest[32];
    char spec_sha[65];
    eng_sha256(text, text_len, digest);
    eng_sha256_hex(digest, spec_sha);
    json_error_t je;
    json_t *spec = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!spec) hx_die(HX_EXIT_USAGE, "%s:%d: %s", spec_path, je.line, je.text);
    if (!json_is_object(spec)) hx_die(HX_EXIT_USAGE, "%s: expected a JSON object (an experiment spec)", spec_path);
    json_t *name = json_object_get(spec, "name"), *runs = json_object_get(spec, "runs");
    if (!json_is_string(name)) hx_die(HX_EXIT_USAGE, "%s: name: expected a string", spec_path);
    if (!json_is_array(runs)) hx_die(HX_EXIT_USAGE, "%s: runs: expected an array", spec_path);
    if (json_object_get(spec, "traces")) {  /* production traces: simulate units (cmd_experiment_sim.c) */
        int code = hx_experiment_simulate(spec, spec_path, spec_sha, db, scale, a.shard, dry, a.resume, &a.only);
        json_decref(spec);
        return code;
    }
    json_t *models = json_object_get(spec, "models"), *transcripts = json_object_get(spec, "transcripts");
    if (!json_is_object(models) || !json_is_object(transcripts))
        hx_die(HX_EXIT_USAGE, "%s: models and transcripts: expected objects", spec_path);
    xctx x = {.spec_path = spec_path, .cache_root = a.cache_root, .resume = a.resume};
    json_t *vars = json_object_get(spec, "vars");
    x.vars = vars ? json_object_get(vars, scale) : NULL;

    size_t ri;
    json_t *run;
    json_array_foreach(runs, ri, run)
        if (a.shard && json_object_get(run, "server"))
            hx_die(HX_EXIT_USAGE, "%s: runs[%zu] probes a live server: --shard splits replay units only; "
                   "run this spec without --shard", spec_path, ri);
    hx_unit *u = NULL;
    unit_own *w = NULL;
    int32_t n = 0;
    int n_skipped = 0;
    expand_units(&x, spec, &a, json_string_value(name), &u, &w, &n, &n_skipped);

    /* The plan: which shard runs which unit (every unit in shard 1 of 1 without --shard). */
    hx_plan plan;
    int prc = hx_plan_make(u, n, n_shards, a.shard != NULL, a.calibration, &plan, err, sizeof err);
    if (prc != ENG_OK) hx_die(hx_exit_for_input(prc), "experiment: planning the shards: %s", err);
    double shard_ms = 0;
    int32_t n_mine = 0;
    for (int32_t i = 0; i < n; i++) {
        hx_replay_opts *o = &u[i].o;
        o->spec_sha256 = spec_sha;
        o->scale = scale;
        o->unit = u[i].index;
        o->n_units = n;
        o->shard = u[i].shard;
        o->n_shards = n_shards;
        o->plan_sha256 = plan.sha256;
        if (u[i].shard == shard) n_mine++;
    }
    if (plan.priced) shard_ms = plan.load_ms[shard - 1];

    if (!dry) record_shard(db, json_string_value(name), spec_sha, scale, shard, n_shards, u, n, &plan);

    hx_coldcache *cold = hx_coldcache_new(a.cold_mib << 20);
    int code = HX_EXIT_OK, n_runs = 0, n_complete = 0;
    double t0 = eng_now_s();
    if (dry && a.shard) hx_plan_print(stdout, u, n, &plan, json_string_value(name), scale);
    if (!dry && a.shard)
        fprintf(stderr, "kvreplay: experiment %s: shard %d/%d runs %d of %d units (modeled %.1f s of %.1f s; "
                "`--dry-run --shard %d/%d` lists them)\n", json_string_value(name), shard, n_shards, n_mine, n,
                shard_ms / 1e3, plan.total_ms / 1e3, shard, n_shards);
    for (int32_t i = 0; i < n && code == HX_EXIT_OK; i++) {
        hx_unit *un = &u[i];
        if (un->shard != shard) continue;
        hx_replay_opts *o = &un->o;
        if (dry) {
            printf("kvreplay replay -m %s -t %s --db %s", o->sp.model_path, o->transcript_path, db);
            for (int k = 1; k < w[i].rargc; k++) printf(" %s", w[i].rargv[k]);
            if (a.threads) printf(" --threads %d", a.threads);
            if (a.repeat) printf(" --repeat %d", a.repeat);
            if (a.calibration) printf(" --calibration %s", a.calibration);
            printf("   # unit %d: variant %s\n", un->index, un->label);
            continue;
        }
        if (eng_stderr_is_tty())
            fprintf(stderr, "kvreplay: %s / %s%s%s%s\n", o->experiment, o->variant, o->sweep_name ? " (" : "",
                    o->sweep_name ? o->sweep_name : "", o->sweep_name ? ")" : "");
        hx_replay_summary sum;
        int rc = hx_replay_run(o, cold, &sum);
        if (rc != HX_EXIT_OK) { code = rc; break; }
        n_runs++;
        n_complete += sum.already_done;
    }
    if (code == HX_EXIT_OK)
        code = run_probes(&x, spec, &a, db, json_string_value(name), dry, &n_runs, &n_skipped, &n_complete);
    if (code == HX_EXIT_OK && !dry) {
        hx_coldcache_stats cs = hx_coldcache_get_stats(cold);
        char done_note[64] = "", shard_note[64] = "";
        if (n_complete) snprintf(done_note, sizeof done_note, " (%d already complete, not re-run)", n_complete);
        if (a.shard) snprintf(shard_note, sizeof shard_note, ", shard %d/%d", shard, n_shards);
        fprintf(stderr, "kvreplay: experiment %s (%s scale%s): %d runs%s in %.1fs -> %s%s; shared cold cache: %lld hits, "
                "%lld misses, %.1fs of cold prefill+decode not recomputed\n",
                json_string_value(name), scale, shard_note, n_runs, done_note, eng_now_s() - t0, db,
                n_skipped ? " (some variants skipped: input absent)" : "", (long long)cs.hits,
                (long long)cs.misses, cs.saved_ms / 1e3);
    }
    hx_coldcache_free(cold);
    hx_plan_free(&plan);
    for (int32_t i = 0; i < n; i++) unit_own_free(&w[i]);
    free(w);
    free(u);
    json_decref(spec);
    return code;
}
