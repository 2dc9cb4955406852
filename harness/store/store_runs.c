/*
 * harness/store/store_runs.c: runs (see store.h): their configuration key,
 * beginning one, finding one to resume and claiming it (one writer per run),
 * finishing it; the set of requests a run has committed; shards.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "model.h"
#include "status.h"
#include "store_int.h"
#include "sysinfo.h"
#include "version.h"

// ----------------------------------------------------------------------------
// Runs

const char *hx_run_status_str(hx_run_status st) {
    switch (st) {
    case HX_RUN_RUNNING: return "running";
    case HX_RUN_DONE:    return "done";
    case HX_RUN_FAILED:  return "failed";
    }
    return "failed";
}

void hx_run_meta_init(hx_run_meta *m) {
    ENG_ASSERT(m != NULL);
    memset(m, 0, sizeof *m);  /* every string NULL */
    m->exp.sweep_value = NAN;
    m->pol.threshold = NAN;
    m->n_requests = m->n_params = -1;
    m->pol.n_slots = m->pol.ctx_checkpoints = m->pol.checkpoint_every = m->pol.waypoint_every = -1;
    m->pol.cache_ram = m->pol.cache_budget = m->pol.block_size = -1;
    m->chunk = m->ubatch = m->threads = m->decode_n = m->cap_prompt = m->n_ctx = m->seed = -1;
    m->machine.n_cpus = -1;
    m->price.n_repeat = -1;
    m->price.calib_gflops = m->price.calib_restore_gbs = m->price.price_gflops = m->price.price_restore_gbs = NAN;
    m->exp.unit = m->exp.n_units = m->exp.shard = m->exp.n_shards = -1;
}

/* m with the defaults of hx_store_begin_run applied; strings may point into si. */
static hx_run_meta resolve(const hx_run_meta *m, hx_sysinfo *si) {
    hx_run_meta r = *m;
    hx_sysinfo_get(si);
    if (!r.version) r.version = KVR_VERSION;
    if (!r.git_rev) r.git_rev = hx_git_rev();
    if (!r.argv) r.argv = hx_argv_joined();
    if (!r.quirks) r.quirks = "";
    if (!r.normalize) r.normalize = "";
    if (!r.machine.blas) r.machine.blas = si->blas;
    if (!r.machine.cpu) r.machine.cpu = si->cpu;
    if (r.machine.n_cpus <= 0) r.machine.n_cpus = si->n_cpus;
    if (!r.machine.hostname) r.machine.hostname = si->hostname;
    if (!r.machine.os_release) r.machine.os_release = si->os_release;
    return r;
}

static int jset(json_t *o, const char *k, json_t *v) { return v ? json_object_set_new(o, k, v) : -1; }
static json_t *jstr(const char *s) { return s ? json_string(s) : json_null(); }
static json_t *jint(int64_t v) { return v >= 0 ? json_integer(v) : json_null(); }
static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

char *hx_run_meta_config_key(const hx_run_meta *m) {
    ENG_ASSERT(m != NULL);
    hx_sysinfo si;
    hx_run_meta r = resolve(m, &si);
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= jset(o, "version", jstr(r.version));
    bad |= jset(o, "git_rev", jstr(r.git_rev));
    bad |= jset(o, "experiment", jstr(r.exp.experiment));
    bad |= jset(o, "variant", jstr(r.exp.variant));
    bad |= jset(o, "sweep_name", jstr(r.exp.sweep_name));
    bad |= jset(o, "sweep_value", jreal(r.exp.sweep_value));
    bad |= jset(o, "model", jstr(r.model_sha256 ? r.model_sha256 : r.model_path));
    /* a probe run's server (only when set, so the keys of every other run stay as they were) */
    if (r.probe.server_url) bad |= jset(o, "server_url", jstr(r.probe.server_url));
    if (r.probe.server_api) bad |= jset(o, "server_api", jstr(r.probe.server_api));
    if (r.probe.probe_opts) bad |= jset(o, "probe_opts", jstr(r.probe.probe_opts));
    bad |= jset(o, "transcript", jstr(r.transcript_sha256 ? r.transcript_sha256 : r.transcript));
    bad |= jset(o, "template", jstr(r.template_name));
    bad |= jset(o, "policy", jstr(r.policy));
    bad |= jset(o, "quirks", jstr(r.quirks));
    bad |= jset(o, "normalize", jstr(r.normalize));
    bad |= jset(o, "threshold", jreal(r.pol.threshold));
    bad |= jset(o, "n_slots", jint(r.pol.n_slots));
    bad |= jset(o, "ctx_checkpoints", jint(r.pol.ctx_checkpoints));
    bad |= jset(o, "checkpoint_every", jint(r.pol.checkpoint_every));
    bad |= jset(o, "waypoint_every", jint(r.pol.waypoint_every));
    bad |= jset(o, "anchor", jstr(r.pol.anchor));
    bad |= jset(o, "cache_dir", jstr(r.pol.cache_dir));
    bad |= jset(o, "cache_ram", jint(r.pol.cache_ram));
    bad |= jset(o, "cache_budget", jint(r.pol.cache_budget));
    bad |= jset(o, "align", jstr(r.align));
    bad |= jset(o, "chunk", jint(r.chunk));
    bad |= jset(o, "ubatch", jint(r.ubatch));
    bad |= jset(o, "kernel", jstr(r.kernel));
    bad |= jset(o, "precision", jstr(r.precision));
    bad |= jset(o, "threads", jint(r.threads));
    bad |= jset(o, "decode_n", jint(r.decode_n));
    bad |= jset(o, "cap_prompt", jint(r.cap_prompt));
    bad |= jset(o, "n_ctx", jint(r.n_ctx));
    bad |= jset(o, "seed", jint(r.seed));
    bad |= jset(o, "cpu", jstr(r.machine.cpu));
    bad |= jset(o, "extra", jstr(r.extra));
    bad |= jset(o, "policy_opts", jstr(r.pol.policy_opts));
    bad |= jset(o, "block_size", jint(r.pol.block_size));
    if (r.price.n_repeat > 1) bad |= jset(o, "n_repeat", jint(r.price.n_repeat));  /* absent at 1: keys of older runs still match */
    char *key = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!key) return NULL;
    /* json_dumps allocates with jansson's allocator (malloc by default);
     * copy so the caller's free() is always the right one. */
    char *copy = strdup(key);
    free(key);
    return copy;
}

static int require(const char *path, const char *field, bool ok, char *err, size_t errlen) {
    if (ok) return ENG_OK;
    eng_errf(err, errlen, "%s: runs: %s: required field is missing", path, field);
    return ENG_ERR_ARG;
}

// ----------------------------------------------------------------------------
// Claiming a run: one writer per run at a time. An OFD lock (F_OFD_SETLK) on
// byte run_id of PATH.lock, held by the store that began or resumed the run
// until it is closed; the kernel drops it when the process dies, so a killed
// run can be resumed at once. A separate file, not the database itself:
// closing another descriptor of the database would drop SQLite's own POSIX
// locks.

static int claim_run(hx_store *s, int64_t run_id, char *err, size_t errlen) {
    if (!strcmp(s->path, ":memory:") || !s->path[0]) return ENG_OK;  /* private to this connection */
    if (s->lockfd < 0) {
        char lp[PATH_MAX];
        if (snprintf(lp, sizeof lp, "%s.lock", s->path) >= (int)sizeof lp ||
            (s->lockfd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
            eng_errf(err, errlen, "%s.lock: cannot open the run lock file: %s", s->path, strerror(errno));
            return ENG_ERR_IO;
        }
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)run_id, .l_len = 1};
    if (fcntl(s->lockfd, F_OFD_SETLK, &fl) == 0) return ENG_OK;
    if (errno == EAGAIN || errno == EACCES) {
        eng_errf(err, errlen, "%s: run %lld is being written by another kvreplay process right now (a second "
                 "--resume of the same run?): wait for it to finish, or use another --db", s->path,
                 (long long)run_id);
        return ENG_ERR_UNSUPPORTED;
    }
    eng_errf(err, errlen, "%s.lock: cannot lock run %lld: %s", s->path, (long long)run_id, strerror(errno));
    return ENG_ERR_IO;
}

int hx_store_begin_run(hx_store *s, const hx_run_meta *m, int64_t *run_id, char *err,
                       size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL && run_id != NULL);
    *run_id = -1;
    hx_sysinfo si;
    hx_run_meta r = resolve(m, &si);
    char now[40];
    char *key = NULL;
    int status = ENG_OK;
    if (!r.started_at) {
        hx_store_utc_now(now, sizeof now);
        r.started_at = now;
    }
    if (!r.config_key) {
        if (!(key = hx_run_meta_config_key(m))) {
            eng_errf(err, errlen, "%s: runs: config_key: out of memory", s->path);
            return ENG_ERR_NOMEM;
        }
        r.config_key = key;
    }
    const char *p = s->path;
    if ((status = require(p, "model_path", r.model_path, err, errlen)) ||
        (status = require(p, "policy", r.policy, err, errlen)) ||
        (status = require(p, "align", r.align, err, errlen)) ||
        (status = require(p, "chunk", r.chunk > 0, err, errlen)) ||
        (status = require(p, "kernel", r.kernel, err, errlen)) ||
        (status = require(p, "precision", r.precision, err, errlen)) ||
        (status = require(p, "threads", r.threads > 0, err, errlen)))
        goto out;

    sqlite3_stmt *st = hx_store_stmt(s, ST_INSERT_RUN, &status, err, errlen);
    if (!st) goto out;
    /* insert and claim in one transaction: no resumer can see the run unclaimed */
    int brc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (brc != SQLITE_OK) {
        status = hx_store_fail(s, brc, err, errlen, "runs: inserting a run: BEGIN IMMEDIATE");
        goto out;
    }
    hx_bind_text(st, "started_at", r.started_at);
    hx_bind_text(st, "version", r.version);
    hx_bind_text(st, "git_rev", r.git_rev);
    hx_bind_text(st, "argv", r.argv);
    hx_bind_text(st, "experiment", r.exp.experiment);
    hx_bind_text(st, "variant", r.exp.variant);
    hx_bind_text(st, "sweep_name", r.exp.sweep_name);
    hx_bind_real(st, "sweep_value", r.exp.sweep_value);
    hx_bind_int_opt(st, "n_requests", r.n_requests);
    hx_bind_text(st, "model_path", r.model_path);
    hx_bind_text(st, "model_sha256", r.model_sha256);
    hx_bind_text(st, "model_name", r.model_name);
    hx_bind_int_opt(st, "n_params", r.n_params);
    hx_bind_text(st, "transcript", r.transcript);
    hx_bind_text(st, "transcript_sha256", r.transcript_sha256);
    hx_bind_text(st, "template", r.template_name);
    hx_bind_text(st, "policy", r.policy);
    hx_bind_text(st, "quirks", r.quirks);
    hx_bind_text(st, "normalize", r.normalize);
    hx_bind_real(st, "threshold", r.pol.threshold);
    hx_bind_int_opt(st, "n_slots", r.pol.n_slots);
    hx_bind_int_opt(st, "ctx_checkpoints", r.pol.ctx_checkpoints);
    hx_bind_int_opt(st, "checkpoint_every", r.pol.checkpoint_every);
    hx_bind_int_opt(st, "waypoint_every", r.pol.waypoint_every);
    hx_bind_text(st, "anchor", r.pol.anchor);
    hx_bind_text(st, "cache_dir", r.pol.cache_dir);
    hx_bind_int_opt(st, "cache_ram", r.pol.cache_ram);
    hx_bind_int_opt(st, "cache_budget", r.pol.cache_budget);
    hx_bind_text(st, "align", r.align);
    hx_bind_int(st, "chunk", r.chunk);
    hx_bind_int_opt(st, "ubatch", r.ubatch);
    hx_bind_text(st, "kernel", r.kernel);
    hx_bind_text(st, "precision", r.precision);
    hx_bind_int(st, "threads", r.threads);
    hx_bind_int_opt(st, "decode_n", r.decode_n);
    hx_bind_int_opt(st, "cap_prompt", r.cap_prompt);
    hx_bind_int_opt(st, "n_ctx", r.n_ctx);
    hx_bind_int_opt(st, "seed", r.seed);
    hx_bind_text(st, "blas", r.machine.blas);
    hx_bind_text(st, "cpu", r.machine.cpu);
    hx_bind_int_opt(st, "n_cpus", r.machine.n_cpus > 0 ? r.machine.n_cpus : -1);
    hx_bind_text(st, "hostname", r.machine.hostname);
    hx_bind_text(st, "os_release", r.machine.os_release);
    hx_bind_text(st, "config_key", r.config_key);
    hx_bind_text(st, "extra", r.extra);
    hx_bind_text(st, "policy_opts", r.pol.policy_opts);
    hx_bind_int_opt(st, "block_size", r.pol.block_size);
    hx_bind_int_opt(st, "n_repeat", r.price.n_repeat);
    hx_bind_real(st, "calib_gflops", r.price.calib_gflops);
    hx_bind_real(st, "calib_restore_gbs", r.price.calib_restore_gbs);
    hx_bind_real(st, "price_gflops", r.price.price_gflops);
    hx_bind_real(st, "price_restore_gbs", r.price.price_restore_gbs);
    hx_bind_text(st, "price_source", r.price.price_source);
    hx_bind_text(st, "spec_sha256", r.exp.spec_sha256);
    hx_bind_text(st, "scale", r.exp.scale);
    hx_bind_int_opt(st, "unit", r.exp.unit);
    hx_bind_int_opt(st, "n_units", r.exp.n_units);
    hx_bind_int_opt(st, "shard", r.exp.shard);
    hx_bind_int_opt(st, "n_shards", r.exp.n_shards);
    hx_bind_text(st, "plan_sha256", r.exp.plan_sha256);
    hx_bind_text(st, "server_url", r.probe.server_url);
    hx_bind_text(st, "server_api", r.probe.server_api);
    hx_bind_text(st, "server_engine", r.probe.server_engine);
    hx_bind_text(st, "server_info", r.probe.server_info);
    hx_bind_text(st, "probe_opts", r.probe.probe_opts);
    int rc = hx_store_step_done(st);
    if (rc != SQLITE_OK) status = hx_store_fail(s, rc, err, errlen, "runs: inserting a run");
    int64_t id = sqlite3_last_insert_rowid(s->db);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (status == ENG_OK) status = claim_run(s, id, err, errlen);
    if (status == ENG_OK && (rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK)
        status = hx_store_fail(s, rc, err, errlen, "runs: inserting a run: COMMIT");
    if (status == ENG_OK) *run_id = id;
    else if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
out:
    free(key);
    return status;
}

int hx_store_run_price(hx_store *s, int64_t run_id, double *gflops, double *restore_gbs, char *err,
                       size_t errlen) {
    ENG_ASSERT(s != NULL && gflops != NULL && restore_gbs != NULL);
    *gflops = *restore_gbs = NAN;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "SELECT price_gflops, price_restore_gbs FROM runs WHERE run_id = ?1", -1, &st,
                                NULL);
    if (rc != SQLITE_OK) return hx_store_fail(s, rc, err, errlen, "runs: reading a run's price");
    sqlite3_bind_int64(st, 1, run_id);
    int status = ENG_OK;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) *gflops = sqlite3_column_double(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) *restore_gbs = sqlite3_column_double(st, 1);
    } else if (rc == SQLITE_DONE) {
        eng_errf(err, errlen, "%s: runs: no run %lld", s->path, (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
    } else {
        status = hx_store_fail(s, rc, err, errlen, "runs: reading a run's price");
    }
    sqlite3_finalize(st);
    return status;
}

/* Runs a one-row, one-integer query; *found tells whether a non-NULL row came back. */
static int query_int(hx_store *s, enum stmt_id id, int64_t a1, const char *a2, int64_t a3,
                     int64_t *out, bool *found, const char *what, char *err, size_t errlen) {
    int status = ENG_OK;
    sqlite3_stmt *st = hx_store_stmt(s, id, &status, err, errlen);
    if (!st) return status;
    int np = sqlite3_bind_parameter_count(st);
    if (np >= 1) sqlite3_bind_int64(st, 1, a1);
    if (np >= 2) sqlite3_bind_text(st, 2, a2, -1, SQLITE_TRANSIENT);
    if (np >= 3) sqlite3_bind_int64(st, 3, a3);
    *found = false;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
            *out = sqlite3_column_int64(st, 0);
            *found = true;
        }
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) status = hx_store_fail(s, rc, err, errlen, "%s", what);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_find_resumable(hx_store *s, const char *config_key, int64_t *run_id, char *err,
                            size_t errlen) {
    ENG_ASSERT(s != NULL && config_key != NULL && run_id != NULL);
    *run_id = -1;
    int status = ENG_OK;
    sqlite3_stmt *st = hx_store_stmt(s, ST_FIND_RESUMABLE, &status, err, errlen);
    if (!st) return status;
    sqlite3_bind_text(st, 1, config_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        status = ENG_ERR_NOT_FOUND;
    }
    if (rc != SQLITE_DONE) status = hx_store_fail(s, rc, err, errlen, "runs: looking up a resumable run");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_find_done(hx_store *s, const char *config_key, int64_t *run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && config_key != NULL && run_id != NULL);
    bool found = false;
    *run_id = -1;
    int status = ENG_OK;
    sqlite3_stmt *st = hx_store_stmt(s, ST_FIND_DONE, &status, err, errlen);
    if (!st) return status;
    sqlite3_bind_text(st, 1, config_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(st, 0);
        found = true;
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) status = hx_store_fail(s, rc, err, errlen, "runs: looking up a finished run");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status != ENG_OK ? status : found ? ENG_OK : ENG_ERR_NOT_FOUND;
}

int hx_store_find_done_variant(hx_store *s, const char *experiment, const char *variant, const char *git_rev,
                               int64_t *run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && experiment != NULL && variant != NULL && git_rev != NULL && run_id != NULL);
    *run_id = -1;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "SELECT run_id FROM runs WHERE experiment = ?1 AND variant = ?2 AND git_rev = ?3 "
                                "AND status = 'done' ORDER BY run_id DESC LIMIT 1", -1, &st, NULL);
    if (rc != SQLITE_OK) return hx_store_fail(s, rc, err, errlen, "runs: looking up a finished variant");
    sqlite3_bind_text(st, 1, experiment, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, variant, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, git_rev, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *run_id = sqlite3_column_int64(st, 0);
    int status = rc == SQLITE_ROW ? ENG_OK : rc == SQLITE_DONE ? ENG_ERR_NOT_FOUND
                                   : hx_store_fail(s, rc, err, errlen, "runs: looking up a finished variant");
    sqlite3_finalize(st);
    return status;
}

/* Runs an UPDATE of one run; ENG_ERR_NOT_FOUND when no row changed. */
static int update_run(hx_store *s, sqlite3_stmt *st, int64_t run_id, const char *what, char *err,
                      size_t errlen) {
    int status = ENG_OK;
    int rc = hx_store_step_done(st);
    if (rc != SQLITE_OK) {
        status = hx_store_fail(s, rc, err, errlen, "runs: %s run %lld", what, (long long)run_id);
    } else if (sqlite3_changes(s->db) == 0) {
        eng_errf(err, errlen, "%s: runs: %s: no run with run_id %lld", s->path, what,
                 (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_note_resume(hx_store *s, int64_t run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL);
    int status = ENG_OK;
    sqlite3_stmt *st = hx_store_stmt(s, ST_NOTE_RESUME, &status, err, errlen);
    if (!st) return status;
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, now, -1, SQLITE_TRANSIENT);
    return update_run(s, st, run_id, "resuming", err, errlen);
}

int hx_store_finish_run(hx_store *s, int64_t run_id, hx_run_status to, char *err,
                        size_t errlen) {
    ENG_ASSERT(s != NULL);
    int status = ENG_OK;
    sqlite3_stmt *st = hx_store_stmt(s, ST_FINISH_RUN, &status, err, errlen);
    if (!st) return status;
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, hx_run_status_str(to), -1, SQLITE_STATIC);
    if (to == HX_RUN_RUNNING) sqlite3_bind_null(st, 3);
    else sqlite3_bind_text(st, 3, now, -1, SQLITE_TRANSIENT);
    return update_run(s, st, run_id, "finishing", err, errlen);
}

int hx_store_last_run(hx_store *s, int64_t *run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && run_id != NULL);
    bool found = false;
    *run_id = -1;
    int status = query_int(s, ST_LAST_RUN, 0, NULL, 0, run_id, &found, "runs: latest run", err,
                           errlen);
    if (status == ENG_OK && !found) {
        eng_errf(err, errlen, "%s: runs: the database has no runs", s->path);
        status = ENG_ERR_NOT_FOUND;
    }
    return status;
}

int hx_store_count_requests(hx_store *s, int64_t run_id, int64_t *n, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && n != NULL);
    bool found = false;
    *n = 0;
    return query_int(s, ST_COUNT_REQUESTS, run_id, NULL, 0, n, &found, "requests: counting",
                     err, errlen);
}

// ----------------------------------------------------------------------------
// The done set: sorted (session, turn) pairs, searched by bisection

typedef struct done_pair {
    char   *session;
    int32_t turn;
} done_pair;

struct hx_done_set {
    done_pair *pairs;
    int64_t    n;
};

static int pair_cmp(const void *a, const void *b) {
    const done_pair *x = a, *y = b;
    int c = strcmp(x->session, y->session);
    if (c) return c;
    return (x->turn > y->turn) - (x->turn < y->turn);
}

void hx_done_set_free(hx_done_set *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) free(d->pairs[i].session);
    free(d->pairs);
    free(d);
}

int64_t hx_done_set_count(const hx_done_set *d) { return d ? d->n : 0; }

bool hx_done_set_has(const hx_done_set *d, const char *session, int32_t turn) {
    if (!d || !session || d->n == 0) return false;
    done_pair key = {(char *)session, turn};
    return bsearch(&key, d->pairs, (size_t)d->n, sizeof key, pair_cmp) != NULL;
}

int hx_store_load_done(hx_store *s, int64_t run_id, hx_done_set **out, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    *out = NULL;
    int status = ENG_OK;
    hx_done_set *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    sqlite3_stmt *st = hx_store_stmt(s, ST_LOAD_DONE, &status, err, errlen);
    if (!st) goto out;
    sqlite3_bind_int64(st, 1, run_id);
    int64_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (d->n == cap) {
            int64_t nc = cap ? cap * 2 : 64;
            done_pair *np = realloc(d->pairs, (size_t)nc * sizeof *np);
            if (!np) { sqlite3_reset(st); goto nomem; }
            d->pairs = np;
            cap = nc;
        }
        const char *sess = (const char *)sqlite3_column_text(st, 0);
        char *copy = strdup(sess ? sess : "");
        if (!copy) { sqlite3_reset(st); goto nomem; }
        d->pairs[d->n].session = copy;
        d->pairs[d->n].turn = (int32_t)sqlite3_column_int64(st, 1);
        d->n++;
    }
    if (rc != SQLITE_DONE) status = hx_store_fail(s, rc, err, errlen, "requests: loading done requests");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (d->n > 1) qsort(d->pairs, (size_t)d->n, sizeof *d->pairs, pair_cmp);
    goto out;
nomem:
    eng_errf(err, errlen, "%s: requests: loading done requests: out of memory", s->path);
    status = ENG_ERR_NOMEM;
out:
    if (status != ENG_OK) {
        hx_done_set_free(d);
        return status;
    }
    *out = d;
    return ENG_OK;
}

int hx_store_request_done(hx_store *s, int64_t run_id, const char *session, int32_t turn,
                          char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && session != NULL);
    bool found = false;
    int64_t one = 0;
    int status = query_int(s, ST_REQUEST_DONE, run_id, session, turn, &one, &found,
                           "requests: looking up a request", err, errlen);
    return status != ENG_OK ? status : found ? 1 : 0;
}

int hx_store_begin_or_resume(hx_store *s, const hx_run_meta *m, bool resume, int64_t *run_id,
                             hx_done_set **done, bool *resumed, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL && run_id != NULL && done != NULL);
    *done = NULL;
    *run_id = -1;
    if (resumed) *resumed = false;
    char *key = m->config_key ? strdup(m->config_key) : hx_run_meta_config_key(m);
    if (!key) {
        eng_errf(err, errlen, "%s: runs: config_key: out of memory", s->path);
        return ENG_ERR_NOMEM;
    }
    int status = ENG_ERR_NOT_FOUND;
    int64_t id = -1;
    if (resume) status = hx_store_find_resumable(s, key, &id, err, errlen);
    if (status == ENG_OK) {
        status = claim_run(s, id, err, errlen);
        if (status == ENG_OK) status = hx_store_note_resume(s, id, err, errlen);
        if (status == ENG_OK) status = hx_store_load_done(s, id, done, err, errlen);
        if (status == ENG_OK && resumed) *resumed = true;
    } else if (status == ENG_ERR_NOT_FOUND) {
        hx_run_meta copy = *m;
        copy.config_key = key;
        status = hx_store_begin_run(s, &copy, &id, err, errlen);
        if (status == ENG_OK) status = hx_store_load_done(s, id, done, err, errlen);
    }
    free(key);
    if (status == ENG_OK) *run_id = id;
    return status;
}

// ----------------------------------------------------------------------------
// Shards

int hx_store_put_shard(hx_store *s, const hx_shard_meta *m, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL);
    hx_sysinfo si;
    hx_sysinfo_get(&si);
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "INSERT OR IGNORE INTO shards(plan_sha256, shard, n_shards, experiment, spec_sha256, scale,"
                                " n_units, plan, git_rev, version, blas, started_at, argv, hostname)"
                                " VALUES(:plan_sha256, :shard, :n_shards, :experiment, :spec_sha256, :scale, :n_units,"
                                " :plan, :git_rev, :version, :blas, :started_at, :argv, :hostname)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) return hx_store_fail(s, rc, err, errlen, "shards: preparing the insert");
    hx_bind_text(st, "plan_sha256", m->plan_sha256);
    hx_bind_int(st, "shard", m->shard);
    hx_bind_int(st, "n_shards", m->n_shards);
    hx_bind_text(st, "experiment", m->experiment);
    hx_bind_text(st, "spec_sha256", m->spec_sha256);
    hx_bind_text(st, "scale", m->scale);
    hx_bind_int(st, "n_units", m->n_units);
    hx_bind_text(st, "plan", m->plan);
    hx_bind_text(st, "git_rev", hx_git_rev());
    hx_bind_text(st, "version", KVR_VERSION);
    hx_bind_text(st, "blas", eng_blas_info());  /* as runs.blas: the kernels' fingerprint */
    hx_bind_text(st, "started_at", now);
    hx_bind_text(st, "argv", hx_argv_joined());
    hx_bind_text(st, "hostname", si.hostname);
    rc = hx_store_step_done(st);
    int status = rc == SQLITE_OK ? ENG_OK : hx_store_fail(s, rc, err, errlen, "shards: recording shard %lld/%lld",
                                                      (long long)m->shard, (long long)m->n_shards);
    sqlite3_finalize(st);
    return status;
}
