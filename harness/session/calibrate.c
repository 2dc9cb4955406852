/*
 * harness/replay/calibrate.c: measuring a calibration and keeping reference
 * calibrations in a JSON file (see calibrate.h).
 *
 * The measurement is short (about a second at most on the experiments'
 * models): it must not cost a run more than a few of its own requests.
 */
#include "calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "stats.h"
#include "status.h"
#include "store.h"
#include "sysinfo.h"
#include "util.h"
#include "version.h"

#define CAL_SEED      20260815u  /* the calibration prompt's token seed */
#define CAL_TIMED_S   1.0        /* stop timing prefills after this much (at least one) */
#define CAL_RESTORE_S 0.2        /* ... and restores */

// ----------------------------------------------------------------------------
// Measuring

int hx_calibrate_measure(const eng_model *m, const eng_prefill_params *pp_in, int32_t n_ctx, hx_calibration *out) {
    memset(out, 0, sizeof *out);
    eng_prefill_params pp = *pp_in;
    pp.on_chunk = NULL;
    pp.ud = NULL;
    pp.all_logits = false;
    const int64_t C = pp.align == ENG_ALIGN_NONE ? pp.ubatch : pp.chunk;
    int64_t n = 4 * C;
    if (n < 256) n = 256;
    if (n > 1024) n = 1024;
    if (n > n_ctx) n = n_ctx;
    if (n < 1) return ENG_ERR_ARG;
    const int32_t V = eng_model_get_info(m)->n_vocab;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)V);
    eng_seq *s = eng_seq_new(m, (int32_t)n), *d = eng_seq_new(m, (int32_t)n);
    void *blob = NULL;
    int rc = ENG_ERR_NOMEM;
    if (!toks || !logits || !s || !d) goto out;
    hx_random_tokens(CAL_SEED, toks, n, V);

    double t[5];
    int nt = 0;
    const double start = eng_now_s();
    for (int r = -1; r < 5; r++) {  /* r == -1: warm-up */
        if (r > 0 && eng_now_s() - start > CAL_TIMED_S) break;
        eng_seq_reset(s);
        const double t0 = eng_now_s();
        if ((rc = eng_prefill(s, toks, (int32_t)n, &pp, logits)) != ENG_OK) goto out;
        if (r >= 0) t[nt++] = eng_now_s() - t0;
    }
    double sec = t[0];  /* the fastest: on a shared machine the least disturbed by others */
    for (int i = 1; i < nt; i++) sec = t[i] < sec ? t[i] : sec;
    out->gflops = eng_model_prefill_flops_params(m, 0, (int32_t)n, &pp) / (sec > 0 ? sec : 1e-9) / 1e9;
    out->n_tokens = (int32_t)n;

    const size_t size = eng_seq_serialized_size(s);
    size_t w = 0;
    rc = ENG_ERR_NOMEM;
    if (!(blob = malloc(size))) goto out;
    if ((rc = eng_seq_serialize(s, blob, size, &w)) != ENG_OK) goto out;
    double tr[5];
    int nr = 0;
    const double rstart = eng_now_s();
    for (int r = -1; r < 5; r++) {
        if (r > 0 && eng_now_s() - rstart > CAL_RESTORE_S) break;
        const double t0 = eng_now_s();
        if ((rc = eng_seq_deserialize(d, blob, w)) != ENG_OK) goto out;
        if (r >= 0) tr[nr++] = eng_now_s() - t0;
    }
    double rsec = tr[0];
    for (int i = 1; i < nr; i++) rsec = tr[i] < rsec ? tr[i] : rsec;
    out->restore_gbs = (double)w / (rsec > 0 ? rsec : 1e-9) / 1e9;
    rc = ENG_OK;
out:
    free(blob);
    eng_seq_free(d);
    eng_seq_free(s);
    free(logits);
    free(toks);
    return rc;
}

double hx_calibration_price_ms(const hx_calibration *c, double flops, double bytes) {
    double ms = 0.0;
    if (flops > 0) ms += flops / (c->gflops * 1e9) * 1e3;
    if (bytes > 0) ms += bytes / (c->restore_gbs * 1e9) * 1e3;
    return ms;
}

// ----------------------------------------------------------------------------
// The reference file

/* A field of entry i as a string / number, or an error naming it. */
static int field_str(const char *path, size_t i, json_t *e, const char *k, const char **out, char *err, size_t errlen) {
    json_t *v = json_object_get(e, k);
    if (!json_is_string(v)) {
        eng_errf(err, errlen, "%s: entries[%zu].%s: expected a string", path, i, k);
        return ENG_ERR_FORMAT;
    }
    *out = json_string_value(v);
    return ENG_OK;
}

static int field_num(const char *path, size_t i, json_t *e, const char *k, double *out, bool positive, char *err,
                     size_t errlen) {
    json_t *v = json_object_get(e, k);
    if (!json_is_number(v) || (positive && !(json_number_value(v) > 0))) {
        eng_errf(err, errlen, "%s: entries[%zu].%s: expected a %snumber", path, i, k, positive ? "positive " : "");
        return ENG_ERR_FORMAT;
    }
    *out = json_number_value(v);
    return ENG_OK;
}

/* What an entry is matched on (calibrate.h). */
typedef struct cal_key {
    const char *sha256, *kernel, *precision;
    int32_t     threads, len;  /* len: the chunk length of a prefill from position 0 */
} cal_key;

static cal_key key_of(const eng_model *m, const eng_prefill_params *pp) {
    const eng_numerics *num = eng_model_get_numerics(m);
    return (cal_key){eng_model_get_info(m)->sha256, eng_kernel_name(num->kernel), eng_precision_name(num->precision),
                     num->n_threads, pp->align == ENG_ALIGN_NONE ? pp->ubatch : pp->chunk};
}

/* Does entry i match k? Validates every field it reads. */
static int entry_match(const char *path, size_t i, json_t *e, const cal_key *k, bool *match, hx_calibration *cal,
                       char *err, size_t errlen) {
    const char *sha, *kernel, *prec, *align;
    double threads, chunk, ubatch, gflops, gbs, tokens = 0;
    int rc;
    if (!json_is_object(e)) {
        eng_errf(err, errlen, "%s: entries[%zu]: expected an object", path, i);
        return ENG_ERR_FORMAT;
    }
    if ((rc = field_str(path, i, e, "model_sha256", &sha, err, errlen)) ||
        (rc = field_str(path, i, e, "kernel", &kernel, err, errlen)) ||
        (rc = field_str(path, i, e, "precision", &prec, err, errlen)) ||
        (rc = field_str(path, i, e, "align", &align, err, errlen)) ||
        (rc = field_num(path, i, e, "threads", &threads, true, err, errlen)) ||
        (rc = field_num(path, i, e, "chunk", &chunk, true, err, errlen)) ||
        (rc = field_num(path, i, e, "ubatch", &ubatch, true, err, errlen)) ||
        (rc = field_num(path, i, e, "gflops", &gflops, true, err, errlen)) ||
        (rc = field_num(path, i, e, "restore_gbs", &gbs, true, err, errlen)))
        return rc;
    if (json_object_get(e, "tokens") && (rc = field_num(path, i, e, "tokens", &tokens, true, err, errlen))) return rc;
    eng_align ea;
    if (eng_align_parse(align, &ea) != ENG_OK) {
        eng_errf(err, errlen, "%s: entries[%zu].align: expected \"chunk\" or \"none\"", path, i);
        return ENG_ERR_FORMAT;
    }
    /* the calibration prefill starts at position 0: its chunks are C long under
     * align chunk and ubatch long under align none */
    const double len = ea == ENG_ALIGN_NONE ? ubatch : chunk;
    *match = !strcmp(sha, k->sha256) && !strcmp(kernel, k->kernel) && !strcmp(prec, k->precision) &&
             threads == k->threads && len == k->len;
    if (*match) {
        cal->gflops = gflops;
        cal->restore_gbs = gbs;
        cal->n_tokens = (int32_t)tokens;
    }
    return ENG_OK;
}

/* Reads the reference file into *root (a new, empty one when the file is
 * absent) and finds k's entry. */
static int load_and_find(const char *path, const cal_key *k, json_t **root, hx_calibration *cal, bool *found,
                         char *err, size_t errlen) {
    *found = false;
    *root = NULL;
    if (access(path, F_OK) != 0) {
        *root = json_pack("{s:s, s:i, s:[]}", "format", "kvreplay-calibration", "version", 1, "entries");
        return *root ? ENG_OK : ENG_ERR_NOMEM;
    }
    json_error_t je;
    if (!(*root = json_load_file(path, JSON_REJECT_DUPLICATES, &je))) {
        eng_errf(err, errlen, "%s:%d: %s", path, je.line, je.text);
        return errno == ENOENT ? ENG_ERR_IO : ENG_ERR_FORMAT;
    }
    json_t *fmt = json_object_get(*root, "format"), *ver = json_object_get(*root, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "kvreplay-calibration")) {
        eng_errf(err, errlen, "%s: format: expected \"kvreplay-calibration\"", path);
        return ENG_ERR_FORMAT;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        eng_errf(err, errlen, "%s: version: expected 1", path);
        return ENG_ERR_FORMAT;
    }
    json_t *entries = json_object_get(*root, "entries"), *e;
    if (!json_is_array(entries)) {
        eng_errf(err, errlen, "%s: entries: expected an array", path);
        return ENG_ERR_FORMAT;
    }
    size_t i;
    json_array_foreach(entries, i, e) {
        bool match = false;
        int rc = entry_match(path, i, e, k, &match, cal, err, errlen);
        if (rc != ENG_OK) return rc;
        if (match) {
            *found = true;
            break;
        }
    }
    return ENG_OK;
}

int hx_calibration_lookup(const char *path, const char *model_sha256, const eng_numerics *num, int32_t len,
                          hx_calibration *out, bool *found, char *err, size_t errlen) {
    const cal_key k = {model_sha256, eng_kernel_name(num->kernel), eng_precision_name(num->precision), num->n_threads,
                       len};
    json_t *root = NULL;
    int rc = load_and_find(path, &k, &root, out, found, err, errlen);
    json_decref(root);
    return rc;
}

/* Adding an entry reads, changes and rewrites the file: an exclusive lock on
 * PATH.lock makes that one step for every process that adds (the shards of
 * one experiment start together and must all price at the same entries). */
static int lock_reference(const char *path, int *fd, char *err, size_t errlen) {
    char lp[PATH_MAX];
    if (snprintf(lp, sizeof lp, "%s.lock", path) >= (int)sizeof lp) {
        eng_errf(err, errlen, "%s: path too long", path);
        return ENG_ERR_ARG;
    }
    if ((*fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        eng_errf(err, errlen, "%s: cannot open the lock file: %s", lp, strerror(errno));
        return ENG_ERR_IO;
    }
    while (flock(*fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            eng_errf(err, errlen, "%s: cannot lock: %s", lp, strerror(errno));
            close(*fd);
            *fd = -1;
            return ENG_ERR_IO;
        }
    return ENG_OK;
}

int hx_calibration_reference(const char *path, const eng_model *m, const eng_prefill_params *pp,
                             const hx_calibration *measured, hx_calibration *ref, bool *added, char *err,
                             size_t errlen) {
    *added = false;
    const cal_key k = key_of(m, pp);
    json_t *root = NULL;
    bool found = false;
    int rc = load_and_find(path, &k, &root, ref, &found, err, errlen);
    if (rc != ENG_OK || found) {
        json_decref(root);
        return rc;
    }
    /* missing: under the lock, read again (another process may have added it), then add */
    json_decref(root);
    root = NULL;
    int lockfd = -1;
    if ((rc = lock_reference(path, &lockfd, err, errlen)) != ENG_OK) return rc;
    if ((rc = load_and_find(path, &k, &root, ref, &found, err, errlen)) != ENG_OK || found) goto out;
    hx_calibration r;
    if (measured) r = *measured;
    else if ((rc = hx_calibrate_measure(m, pp, 1024, &r)) != ENG_OK) {
        eng_errf(err, errlen, "%s: measuring a calibration of %s: %s", path, eng_model_get_info(m)->name,
                 eng_status_str(rc));
        goto out;
    }
    /* Six significant digits, written so that they read back exactly: the
     * run that adds an entry prices at the same figures as every later one. */
    char b[32];
    snprintf(b, sizeof b, "%.6g", r.gflops);
    r.gflops = strtod(b, NULL);
    snprintf(b, sizeof b, "%.6g", r.restore_gbs);
    r.restore_gbs = strtod(b, NULL);
    const eng_model_info *in = eng_model_get_info(m);
    const eng_numerics *num = eng_model_get_numerics(m);
    char now[40];
    hx_store_utc_now(now, sizeof now);
    hx_sysinfo si;
    hx_sysinfo_get(&si);
    json_t *ne = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:i, s:i, s:f, s:f, s:i, s:s, s:s, s:s}",
                           "model_sha256", in->sha256, "model_name", in->name, "kernel", eng_kernel_name(num->kernel),
                           "precision", eng_precision_name(num->precision), "threads", (json_int_t)num->n_threads,
                           "align", eng_align_name(pp->align), "chunk", (json_int_t)pp->chunk, "ubatch",
                           (json_int_t)pp->ubatch, "gflops", r.gflops, "restore_gbs", r.restore_gbs, "tokens",
                           (json_int_t)r.n_tokens, "measured_at", now, "cpu", si.cpu, "git_rev", hx_git_rev());
    char *txt = ne && json_array_append_new(json_object_get(root, "entries"), ne) == 0
                    ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6))
                    : NULL;
    eng_buf b2 = {0};
    if (!txt || eng_buf_printf(&b2, "%s\n", txt) != ENG_OK) {
        rc = ENG_ERR_NOMEM;
    } else if ((rc = eng_write_atomic(path, b2.data, b2.len, err, errlen)) == ENG_OK) {
        *ref = r;
        *added = true;
    }
    free(txt);
    eng_buf_free(&b2);
out:
    json_decref(root);
    close(lockfd);  /* releases the lock */
    return rc;
}
