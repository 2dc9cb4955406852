/*
 * harness/cli/cmd_merge.c: `kvreplay merge OUT.sqlite SHARD.sqlite...`: the
 * databases of an experiment's shards (`kvreplay experiment SPEC --shard K/N`)
 * joined into one that `report`, the plots and `check` read as they read the
 * unsharded run's (docs/scale.md).
 *
 * Every input must be a shard of the same plan, made by the same build on
 * the same kernels: it refuses (exit 2, naming the field and both values)
 * shards of another schema version, experiment, spec file (SHA-256), scale,
 * shard count or plan, git revision, BLAS build (the kernels' fingerprint:
 * OpenBLAS's bits depend on it) or model file (SHA-256 per model file name).
 * Every shard 1..N must be given once: a missing one is named with its
 * units; two different databases of one shard are refused; the same shard
 * twice (a database identical, row for row, to an earlier input) counts once,
 * so merging it again changes nothing. Every unit of the plan must have a
 * finished run in its shard's database (--partial merges what there is and
 * names what is missing).
 *
 * The output holds every run of every shard, ordered by unit (the order an
 * unsharded experiment creates them), numbered 1, 2, ... with its requests
 * and steps, and every shard's `shards` row. It is written to OUT.tmp.PID,
 * synced, and renamed over OUT: a reader sees the old OUT or the new one,
 * never a part. Inputs are opened read-only.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "sim_store.h"
#include "status.h"
#include "store.h"
#include "util.h"

static const char k_usage[] =
    "usage: kvreplay merge OUT.sqlite SHARD.sqlite... [--partial]\n\n"
    "Joins the databases of an experiment's shards (kvreplay experiment SPEC --shard K/N)\n"
    "into OUT, which report, the plots and check read like the unsharded run's database.\n"
    "Refuses shards of different schema versions, experiments, spec files, scales, plans,\n"
    "git revisions, BLAS builds or model files (exit 2), names a missing shard and a unit\n"
    "without a finished run; the same shard given twice counts once. OUT is replaced\n"
    "atomically (docs/scale.md).\n\n"
    "options:\n";

typedef struct merge_args {
    bool partial;
} merge_args;

static const hx_option k_options[] = {
    {"--partial", NULL, NULL, "merge what there is: missing shards and unfinished units are named on\n"
     "stderr instead of refused", HX_OPT_FLAG, offsetof(merge_args, partial), 0, 0, NULL},
    {0},
};

/* One input database. */
typedef struct shard_in {
    const char   *path;
    hx_store     *st;
    sqlite3      *db;
    int64_t       version;                 /* PRAGMA user_version */
    char         *f[8];                    /* identity fields, as k_fields names them */
    int64_t       shard, n_shards, n_units;
    char         *plan;                    /* the plan's JSON */
    XXH128_hash_t digest;                  /* of every row: equal digests are the same shard twice */
    bool          dup;                     /* the same as an earlier input: counted once */
} shard_in;

/* The identity fields every shard of a plan shares, read from its `shards` row. */
static const char *const k_fields[] = {"experiment", "spec_sha256", "scale", "n_shards", "plan_sha256",
                                       "git_rev", "blas", "n_units"};
static const char *const k_why[] = {
    "shards of different experiments", "shards of different spec files (the spec changed between shards?)",
    "shards of different scales", "shards of different shard counts", "shards planned differently (another "
    "--only, --threads, calibration or inputs?)", "shards built from different revisions: rebuild one binary and "
    "rerun", "shards run on different BLAS builds or CPU kernels: their bits differ", "shards of different plans"};
#define N_FIELDS (sizeof k_fields / sizeof k_fields[0])

static _Noreturn void die2(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die2(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hx_die(HX_EXIT_USAGE, "merge: %s", msg);
}

static char *col_text(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return strdup(t ? (const char *)t : "(NULL)");
}

/* XXH3-128 of every row of every table of db, in rowid order, with types. */
static XXH128_hash_t content_digest(sqlite3 *db, const char *path) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");
    XXH3_128bits_reset(h);
    static const char *const tables[] = {"shards", "runs", "requests", "steps"};
    for (size_t t = 0; t < 4; t++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT * FROM %s ORDER BY rowid", tables[t]);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
            die2("%s: %s: %s", path, tables[t], sqlite3_errmsg(db));
        XXH3_128bits_update(h, tables[t], strlen(tables[t]) + 1);
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            for (int i = 0, n = sqlite3_column_count(st); i < n; i++) {
                const int ty = sqlite3_column_type(st, i);
                XXH3_128bits_update(h, &ty, sizeof ty);
                if (ty == SQLITE_INTEGER) {
                    const int64_t v = sqlite3_column_int64(st, i);
                    XXH3_128bits_update(h, &v, sizeof v);
                } else if (ty == SQLITE_FLOAT) {
                    const double v = sqlite3_column_double(st, i);
                    XXH3_128bits_update(h, &v, sizeof v);
                } else if (ty != SQLITE_NULL) {
                    const void *p = sqlite3_column_blob(st, i);
                    const int64_t k = sqlite3_column_bytes(st, i);
                    XXH3_128bits_update(h, &k, sizeof k);
                    if (k) XXH3_128bits_update(h, p, (size_t)k);
                }
            }
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) hx_die(HX_EXIT_INTERNAL, "merge: %s: reading %s: %s", path, tables[t], sqlite3_errmsg(db));
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    return d;
}

#define SHARDS_SCHEMA 6  /* the schema version that brought the shards table */

/* Opens and identifies one input (exit 2 when it is not a shard database). */
static void open_input(shard_in *s) {
    char err[1024] = "";
    int rc = hx_store_open_readonly(s->path, &s->st, err, sizeof err);
    if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    s->db = hx_store_db(s->st);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW)
        die2("%s: cannot read its schema version: %s", s->path, sqlite3_errmsg(s->db));
    s->version = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
}

static void read_identity(shard_in *s) {
    if (s->version < SHARDS_SCHEMA)
        die2("%s: schema version %lld has no shards (they came with schema %d): not a database of `kvreplay "
             "experiment --shard K/N`", s->path, (long long)s->version, SHARDS_SCHEMA);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT experiment, spec_sha256, scale, n_shards, plan_sha256, git_rev, coalesce(blas, ''),"
                           " n_units, shard, plan FROM shards ORDER BY rowid", -1, &st, NULL) != SQLITE_OK)
        die2("%s: shards: %s", s->path, sqlite3_errmsg(s->db));
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == 0) {
            for (size_t i = 0; i < N_FIELDS; i++) s->f[i] = col_text(st, (int)i);
            s->n_shards = sqlite3_column_int64(st, 3);
            s->n_units = sqlite3_column_int64(st, 7);
            s->shard = sqlite3_column_int64(st, 8);
            s->plan = col_text(st, 9);
        } else {
            for (size_t i = 0; i < N_FIELDS; i++) {
                char *v = col_text(st, (int)i);
                if (strcmp(v, s->f[i]))
                    die2("%s: %s: %s and %s in one database (a shard run twice, by two builds or plans, into one "
                         "--db): give each shard its own database", s->path, k_fields[i], s->f[i], v);
                free(v);
            }
            if (sqlite3_column_int64(st, 8) != s->shard)
                die2("%s: holds shard %lld/%lld and shard %lld/%lld: give each shard its own database", s->path,
                     (long long)s->shard, (long long)s->n_shards, (long long)sqlite3_column_int64(st, 8),
                     (long long)s->n_shards);
        }
        n++;
    }
    sqlite3_finalize(st);
    if (n == 0)
        die2("%s: holds no shard of an experiment (its `shards` table is empty): give the databases that "
             "`kvreplay experiment SPEC --db DB --shard K/N` wrote", s->path);
    /* every run in it was made by that build, on those kernels, as a unit of that plan */
    if (sqlite3_prepare_v2(s->db, "SELECT run_id, git_rev, coalesce(blas, ''), plan_sha256, unit FROM runs "
                           "ORDER BY run_id", -1, &st, NULL) != SQLITE_OK)
        die2("%s: runs: %s", s->path, sqlite3_errmsg(s->db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        const long long id = sqlite3_column_int64(st, 0);
        const char *rev = (const char *)sqlite3_column_text(st, 1), *blas = (const char *)sqlite3_column_text(st, 2),
                   *plan = (const char *)sqlite3_column_text(st, 3);
        if (sqlite3_column_type(st, 4) == SQLITE_NULL || !plan)
            die2("%s: run %lld is no unit of an experiment plan (a plain replay into the shard's database?)", s->path, id);
        if (strcmp(plan, s->f[4]))
            die2("%s: run %lld: plan_sha256: %s, but the shard's plan is %s", s->path, id, plan, s->f[4]);
        if (strcmp(rev ? rev : "", s->f[5]))
            die2("%s: run %lld: git_rev: %s, but the shard's build is %s", s->path, id, rev ? rev : "NULL", s->f[5]);
        if (strcmp(blas ? blas : "", s->f[6]))
            die2("%s: run %lld: blas: %s, but the shard's is %s", s->path, id, blas ? blas : "NULL", s->f[6]);
    }
    sqlite3_finalize(st);
}

/* One model file's SHA-256 must be the same in every shard. */
static void check_models(shard_in *in, int n) {
    json_t *seen = json_object();  /* file name -> [sha, path of the database] */
    for (int k = 0; k < n; k++) {
        if (in[k].dup) continue;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(in[k].db, "SELECT DISTINCT model_path, coalesce(model_sha256, '') FROM runs", -1, &st,
                               NULL) != SQLITE_OK)
            die2("%s: runs: %s", in[k].path, sqlite3_errmsg(in[k].db));
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *p = (const char *)sqlite3_column_text(st, 0), *sha = (const char *)sqlite3_column_text(st, 1);
            const char *base = p ? strrchr(p, '/') : NULL;
            base = base ? base + 1 : p ? p : "";
            json_t *e = json_object_get(seen, base);
            if (!e) json_object_set_new(seen, base, json_pack("[s, s]", sha, in[k].path));
            else if (strcmp(json_string_value(json_array_get(e, 0)), sha))
                die2("model_sha256 of %s differs: %s has %s, %s has %s (shards ran on different model files)", base,
                     json_string_value(json_array_get(e, 1)), json_string_value(json_array_get(e, 0)), in[k].path, sha);
        }
        sqlite3_finalize(st);
    }
    json_decref(seen);
}

/* The units of shard k in the plan, as "unit 2 (quirk context=258000)", for messages. */
static void plan_units(json_t *plan, int64_t shard, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    size_t i;
    json_t *e;
    json_array_foreach(plan, i, e) {
        if (json_integer_value(json_array_get(e, 1)) != shard) continue;
        int w = snprintf(buf + o, cap - o, "%sunit %lld (%s)", o ? ", " : "",
                         (long long)json_integer_value(json_array_get(e, 0)), json_string_value(json_array_get(e, 2)));
        if (w < 0 || (size_t)w >= cap - o) break;
        o += (size_t)w;
    }
    if (!o) snprintf(buf, cap, "no unit");
}

/* "col1, col2, ..." of table in the output's schema. */
static char *columns(sqlite3 *db, const char *table) {
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", table);
    sqlite3_stmt *st = NULL;
    eng_buf b = {0};
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
    while (sqlite3_step(st) == SQLITE_ROW)
        if (eng_buf_printf(&b, "%s%s", b.len ? ", " : "", (const char *)sqlite3_column_text(st, 0)) != ENG_OK) break;
    sqlite3_finalize(st);
    return b.data;
}

/* Copies the rows `SELECT cols FROM table WHERE ...` of src into dst's table;
 * when new_id >= 0 the first column (run_id) is replaced by it. */
static int copy_rows(sqlite3 *src, sqlite3 *dst, const char *table, const char *cols, const char *where,
                     int64_t old_id, int64_t new_id, char *err, size_t errlen) {
    eng_buf q = {0}, ins = {0};
    int rc = eng_buf_printf(&q, "SELECT %s FROM %s %s", cols, table, where);
    int n_cols = 1;
    for (const char *p = cols; *p; p++) n_cols += *p == ',';
    if (rc == ENG_OK) rc = eng_buf_printf(&ins, "INSERT INTO %s(%s) VALUES(", table, cols);
    for (int i = 0; i < n_cols && rc == ENG_OK; i++) rc = eng_buf_printf(&ins, "%s?", i ? ", " : "");
    if (rc == ENG_OK) rc = eng_buf_printf(&ins, ")");
    sqlite3_stmt *s = NULL, *d = NULL;
    if (rc == ENG_OK && (sqlite3_prepare_v2(src, q.data, -1, &s, NULL) != SQLITE_OK ||
                         sqlite3_prepare_v2(dst, ins.data, -1, &d, NULL) != SQLITE_OK)) {
        eng_errf(err, errlen, "%s: %s", table, sqlite3_errmsg(s ? dst : src));
        rc = ENG_ERR_IO;
    }
    if (rc == ENG_OK && old_id >= 0) sqlite3_bind_int64(s, 1, old_id);
    int sr;
    while (rc == ENG_OK && (sr = sqlite3_step(s)) == SQLITE_ROW) {
        for (int i = 0; i < n_cols; i++) {
            if (i == 0 && new_id >= 0) sqlite3_bind_int64(d, 1, new_id);
            else sqlite3_bind_value(d, i + 1, sqlite3_column_value(s, i));
        }
        if (sqlite3_step(d) != SQLITE_DONE) {
            eng_errf(err, errlen, "%s: inserting a row: %s", table, sqlite3_errmsg(dst));
            rc = ENG_ERR_IO;
        }
        sqlite3_reset(d);
        sqlite3_clear_bindings(d);
    }
    if (rc == ENG_OK && sr != SQLITE_DONE) {
        eng_errf(err, errlen, "%s: reading: %s", table, sqlite3_errmsg(src));
        rc = ENG_ERR_IO;
    }
    sqlite3_finalize(s);
    sqlite3_finalize(d);
    eng_buf_free(&q);
    eng_buf_free(&ins);
    return rc;
}

typedef struct run_ref {
    int64_t unit, run_id;
    int     in;  /* input index */
} run_ref;

static int run_ref_cmp(const void *a, const void *b) {
    const run_ref *x = a, *y = b;
    if (x->unit != y->unit) return x->unit < y->unit ? -1 : 1;
    if (x->in != y->in) return x->in < y->in ? -1 : 1;
    return (x->run_id > y->run_id) - (x->run_id < y->run_id);
}

static int fsync_path(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int hx_cmd_merge(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return HX_EXIT_OK; }
    merge_args a = {0};
    const char **paths = calloc((size_t)argc, sizeof *paths);
    int n_paths = 0;
    if (!paths) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_options, &a, argc, argv, &i)) continue;
        if (argv[i][0] == '-' && argv[i][1]) hx_bad_arg("merge", argv[i]);
        paths[n_paths++] = argv[i];
    }
    if (n_paths < 2) hx_die(HX_EXIT_USAGE, "merge: expected OUT.sqlite and at least one SHARD.sqlite (see --help)");
    const char *out = paths[0];
    const int n = n_paths - 1;
    shard_in *in = calloc((size_t)n, sizeof *in);
    if (!in) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");

    /* OUT: not a directory, not an input, and when it exists, a kvreplay database (never another file) */
    struct stat so, si;
    const bool out_exists = stat(out, &so) == 0;
    if (out_exists && S_ISDIR(so.st_mode)) hx_die(HX_EXIT_USAGE, "%s: is a directory", out);
    if (!out_exists) {  /* its directory must exist: the new file is made beside it */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", out);
        char *slash = strrchr(dir, '/');
        struct stat sd;
        if (slash) {
            slash[slash == dir ? 1 : 0] = '\0';  /* "/x" -> "/", "a/b/x" -> "a/b" */
            if (stat(dir, &sd) != 0 || !S_ISDIR(sd.st_mode))
                hx_die(HX_EXIT_USAGE, "%s: cannot create: directory %s does not exist", out, dir);
        }
    }
    for (int k = 0; k < n; k++) {
        in[k].path = paths[k + 1];
        if (out_exists && stat(in[k].path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            hx_die(HX_EXIT_USAGE, "merge: %s is both the output and an input", out);
    }
    if (out_exists) {
        hx_store *o = NULL;
        char err[1024] = "";
        int rc = hx_store_open_readonly(out, &o, err, sizeof err);
        if (rc != ENG_OK) hx_die(HX_EXIT_USAGE, "%s: not a kvreplay results database (%s): refusing to replace it", out, err);
        hx_store_close(o);
    }

    /* inputs: same schema version, then each one's identity */
    for (int k = 0; k < n; k++) open_input(&in[k]);
    for (int k = 1; k < n; k++)
        if (in[k].version != in[0].version)
            die2("schema version differs: %s has %lld, %s has %lld (made by different kvreplay builds)", in[0].path,
                 (long long)in[0].version, in[k].path, (long long)in[k].version);
    for (int k = 0; k < n; k++) {
        read_identity(&in[k]);
        in[k].digest = content_digest(in[k].db, in[k].path);
        for (int j = 0; j < k && !in[k].dup; j++)
            if (!in[j].dup && !XXH128_cmp(&in[j].digest, &in[k].digest)) {
                in[k].dup = true;
                fprintf(stderr, "kvreplay: merge: %s holds the same rows as %s (shard %lld/%lld): counted once\n",
                        in[k].path, in[j].path, (long long)in[k].shard, (long long)in[k].n_shards);
            }
    }
    int first = 0;
    for (int k = 1; k < n; k++) {
        if (in[k].dup) continue;
        for (size_t i = 0; i < N_FIELDS; i++)
            if (strcmp(in[first].f[i], in[k].f[i]))
                die2("%s differs: %s has %s, %s has %s (%s)", k_fields[i], in[first].path, in[first].f[i], in[k].path,
                     in[k].f[i], k_why[i]);
    }
    check_models(in, n);

    /* shards: each of 1..N once */
    const int64_t N = in[first].n_shards, n_units = in[first].n_units;
    json_error_t je;
    json_t *plan = json_loads(in[first].plan, 0, &je);
    if (!json_is_array(plan) || (int64_t)json_array_size(plan) != n_units)
        die2("%s: shards.plan: expected an array of %lld units", in[first].path, (long long)n_units);
    int *of = malloc(sizeof *of * (size_t)(N + 1));
    if (!of) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");
    for (int64_t s = 0; s <= N; s++) of[s] = -1;
    for (int k = 0; k < n; k++) {
        if (in[k].dup) continue;
        int *slot = &of[in[k].shard];
        if (*slot >= 0)
            die2("shard %lld/%lld is given twice, as %s and %s, with different rows (two attempts at it?): give one",
                 (long long)in[k].shard, (long long)N, in[*slot].path, in[k].path);
        *slot = k;
    }
    int n_missing = 0;
    for (int64_t s = 1; s <= N; s++) {
        if (of[s] >= 0) continue;
        char units[2048];
        plan_units(plan, s, units, sizeof units);
        fprintf(stderr, "kvreplay: merge: shard %lld/%lld is missing (no database given holds it): its %s\n",
                (long long)s, (long long)N, units);
        n_missing++;
    }
    if (n_missing && !a.partial)
        die2("%d of %lld shards missing (named above): give every shard's database, or --partial", n_missing,
             (long long)N);

    /* units: each unit's runs come from its own shard, and one of them finished */
    run_ref *refs = NULL;
    int64_t n_refs = 0, n_unfinished = 0;
    char *done = calloc((size_t)(n_units > 0 ? n_units : 1), 1);
    if (!done) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");
    for (int k = 0; k < n; k++) {
        if (in[k].dup) continue;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(in[k].db, "SELECT unit, run_id, status FROM runs ORDER BY run_id", -1, &st, NULL) !=
            SQLITE_OK)
            die2("%s: runs: %s", in[k].path, sqlite3_errmsg(in[k].db));
        while (sqlite3_step(st) == SQLITE_ROW) {
            const int64_t unit = sqlite3_column_int64(st, 0), id = sqlite3_column_int64(st, 1);
            if (unit < 0 || unit >= n_units)
                die2("%s: run %lld: unit %lld is not in the plan (%lld units)", in[k].path, (long long)id,
                     (long long)unit, (long long)n_units);
            const int64_t owner = json_integer_value(json_array_get(json_array_get(plan, (size_t)unit), 1));
            if (owner != in[k].shard)
                die2("%s: run %lld: unit %lld belongs to shard %lld/%lld, not to this database's %lld/%lld",
                     in[k].path, (long long)id, (long long)unit, (long long)owner, (long long)N,
                     (long long)in[k].shard, (long long)N);
            if (!strcmp((const char *)sqlite3_column_text(st, 2), "done")) done[unit] = 1;
            run_ref *g = realloc(refs, sizeof *refs * (size_t)(n_refs + 1));
            if (!g) hx_die(HX_EXIT_INTERNAL, "merge: out of memory");
            refs = g;
            refs[n_refs++] = (run_ref){unit, id, k};
        }
        sqlite3_finalize(st);
    }
    for (int64_t u = 0; u < n_units; u++) {
        json_t *e = json_array_get(plan, (size_t)u);
        const int64_t s = json_integer_value(json_array_get(e, 1));
        if (done[u] || of[s] < 0) continue;  /* a missing shard was named above */
        fprintf(stderr, "kvreplay: merge: unit %lld (%s) has no finished run in %s (shard %lld/%lld): complete it "
                "with `kvreplay experiment SPEC --db %s --shard %lld/%lld --resume`\n", (long long)u,
                json_string_value(json_array_get(e, 2)), in[of[s]].path, (long long)s, (long long)N, in[of[s]].path,
                (long long)s, (long long)N);
        n_unfinished++;
    }
    if (n_unfinished && !a.partial)
        die2("%lld units without a finished run (named above): resume their shards, or --partial",
             (long long)n_unfinished);
    qsort(refs, (size_t)n_refs, sizeof *refs, run_ref_cmp);

    /* the output, written beside OUT and renamed over it */
    char tmp[PATH_MAX], side[PATH_MAX + 8], err[1024] = "";
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= (int)sizeof tmp)
        hx_die(HX_EXIT_USAGE, "%s: path too long", out);
    static const char *const sfx[] = {"", "-wal", "-shm", ".lock"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(side, sizeof side, "%s%s", tmp, sfx[i]);
        unlink(side);
    }
    hx_store *os = NULL;
    int rc = hx_store_open(tmp, &os, err, sizeof err);
    if (rc != ENG_OK) hx_die(rc == ENG_ERR_ARG || rc == ENG_ERR_FORMAT ? HX_EXIT_USAGE : HX_EXIT_INTERNAL, "%s", err);
    sqlite3 *odb = hx_store_db(os);
    char *cols[4] = {columns(odb, "shards"), columns(odb, "runs"), columns(odb, "requests"), columns(odb, "steps")};
    if (!cols[0] || !cols[1] || !cols[2] || !cols[3]) hx_die(HX_EXIT_INTERNAL, "merge: %s: reading its schema", tmp);
    rc = sqlite3_exec(odb, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? ENG_OK : ENG_ERR_IO;
    for (int64_t s = 1; s <= N && rc == ENG_OK; s++)
        if (of[s] >= 0) rc = copy_rows(in[of[s]].db, odb, "shards", cols[0], "ORDER BY rowid", -1, -1, err, sizeof err);
    int64_t n_req = 0;
    for (int64_t r = 0; r < n_refs && rc == ENG_OK; r++) {
        sqlite3 *src = in[refs[r].in].db;
        const int64_t id = refs[r].run_id, nid = r + 1;
        rc = copy_rows(src, odb, "runs", cols[1], "WHERE run_id = ?1", id, nid, err, sizeof err);
        if (rc == ENG_OK)
            rc = copy_rows(src, odb, "requests", cols[2], "WHERE run_id = ?1 ORDER BY req_index", id, nid, err,
                           sizeof err);
        if (rc == ENG_OK)
            rc = copy_rows(src, odb, "steps", cols[3], "WHERE run_id = ?1 ORDER BY session, turn, step", id, nid, err,
                           sizeof err);
        /* ---- simulate runs (harness/traces/sim_store.c): their sim_* rows, renumbered as the run ---- */
        static const char *const k_sim_tables[] = {"sim_runs", "sim_requests", "sim_windows", "sim_verify"};
        for (int t = 0; t < 4 && rc == ENG_OK; t++) {
            char probe[96];
            snprintf(probe, sizeof probe, "SELECT 1 FROM %s LIMIT 0", k_sim_tables[t]);
            sqlite3_stmt *ps = NULL;
            bool has = sqlite3_prepare_v2(src, probe, -1, &ps, NULL) == SQLITE_OK;
            sqlite3_finalize(ps);
            if (!has) continue;  /* a database without simulate runs */
            if ((rc = hx_sim_store_schema(odb, err, sizeof err)) != ENG_OK) break;
            char *sc = columns(odb, k_sim_tables[t]);
            rc = sc ? copy_rows(src, odb, k_sim_tables[t], sc, "WHERE run_id = ?1 ORDER BY rowid", id, nid, err,
                                sizeof err) : ENG_ERR_NOMEM;
            free(sc);
        }
        /* ---- end of simulate runs ---- */
    }
    if (rc == ENG_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(odb, "SELECT count(*) FROM requests", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            n_req = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        if (sqlite3_exec(odb, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            eng_errf(err, sizeof err, "COMMIT: %s", sqlite3_errmsg(odb));
            rc = ENG_ERR_IO;
        }
    }
    hx_store_close(os);  /* the last connection: the WAL is checkpointed into the file and removed */
    if (rc == ENG_OK && fsync_path(tmp, O_RDONLY) != 0) {
        eng_errf(err, sizeof err, "fsync: %s", strerror(errno));
        rc = ENG_ERR_IO;
    }
    /* a reader of OUT must not find the old file's write-ahead log beside the new file */
    snprintf(side, sizeof side, "%s-wal", out);
    struct stat sw;
    if (rc == ENG_OK && stat(side, &sw) == 0 && sw.st_size > 0) {
        for (size_t i = 0; i < 4; i++) {
            snprintf(side, sizeof side, "%s%s", tmp, sfx[i]);
            unlink(side);
        }
        hx_die(HX_EXIT_USAGE, "merge: %s-wal is not empty: another process has %s open (or was killed writing it): "
               "close it, or merge into another OUT", out, out);
    }
    if (rc == ENG_OK) {
        static const char *const stale[] = {"-wal", "-shm"};
        for (size_t i = 0; i < 2; i++) {
            snprintf(side, sizeof side, "%s%s", out, stale[i]);
            unlink(side);
        }
        if (rename(tmp, out) != 0) {
            eng_errf(err, sizeof err, "rename %s -> %s: %s", tmp, out, strerror(errno));
            rc = ENG_ERR_IO;
        }
    }
    if (rc == ENG_OK) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", out);
        char *slash = strrchr(dir, '/');
        if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
        else snprintf(dir, sizeof dir, ".");
        fsync_path(dir, O_RDONLY | O_DIRECTORY);
    }
    for (size_t i = 0; i < 4; i++) {
        snprintf(side, sizeof side, "%s%s", tmp, sfx[i]);
        unlink(side);
    }
    for (int i = 0; i < 4; i++) free(cols[i]);
    int64_t n_done = 0;
    for (int64_t u = 0; u < n_units; u++) n_done += done[u];
    if (rc == ENG_OK)
        fprintf(stderr, "kvreplay: merge: %lld of %lld shards of experiment %s (%s scale, plan %.12s): %lld runs, %lld "
                "of %lld units finished, %lld requests -> %s\n", (long long)(N - n_missing), (long long)N, in[first].f[0],
                in[first].f[2], in[first].f[4], (long long)n_refs, (long long)n_done, (long long)n_units,
                (long long)n_req, out);
    else fprintf(stderr, "kvreplay: merge: %s: %s\n", out, err);
    free(done);
    free(refs);
    free(of);
    json_decref(plan);
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < N_FIELDS; i++) free(in[k].f[i]);
        free(in[k].plan);
        hx_store_close(in[k].st);
    }
    free(in);
    free(paths);
    return rc == ENG_OK ? HX_EXIT_OK : HX_EXIT_INTERNAL;
}
