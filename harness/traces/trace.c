/*
 * harness/traces/trace.c: the Mooncake and Bailian trace readers, their
 * checks, --repeat's copies and `trace info`'s pass (see trace.h).
 */
#include "trace.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "blockpool.h"
#include "status.h"

#define MAX_ID      ((int64_t)1 << 62)   /* ids and their copies stay below this */
#define MAX_CHAT    ((int64_t)1 << 31)   /* the parent check's bitset */
#define MAX_BLOCKS  (1 << 24)            /* blocks per record */
#define MAX_LENGTH  ((int64_t)1 << 31)   /* tokens per record */

const char *hx_trace_format_name(hx_trace_format f) {
    return f == HX_TRACE_MOONCAKE ? "mooncake" : f == HX_TRACE_BAILIAN ? "bailian" : "auto";
}

int hx_trace_format_parse(const char *s, hx_trace_format *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "mooncake")) *out = HX_TRACE_MOONCAKE;
    else if (!strcmp(s, "bailian")) *out = HX_TRACE_BAILIAN;
    else if (!strcmp(s, "auto")) *out = HX_TRACE_AUTO;
    else return ENG_ERR_ARG;
    return ENG_OK;
}

/* A record of copy 0, kept for the copies that follow (repeat > 1). */
typedef struct kept {
    double  t_ms;
    int64_t line, off, chat, parent;  /* off: its ids in kept_ids */
    int32_t in, out, n, turn;
    uint8_t type;                     /* index into types */
} kept;

struct hx_trace {
    FILE           *f;
    bool            own;
    char            name[512];
    hx_trace_opts   o;
    hx_trace_format fmt;
    int32_t         B;
    char           *line;
    size_t          line_cap;
    int64_t         line_no, emitted;
    double          last_t;
    bool            have_last, eof0;
    int64_t        *ids;
    int32_t        *words;
    int32_t         cap_ids;
    char            type[16];
    uint64_t       *seen;             /* bailian: a bit per chat id seen */
    int64_t         seen_words;
    /* --repeat: copy 0 kept, then replayed shifted */
    kept           *recs;
    int64_t         n_recs, cap_recs;
    int64_t        *kept_ids;
    int64_t         n_kept_ids, cap_kept_ids;
    char            types[8][16];
    int32_t         n_types;
    int64_t         max_id, max_chat;
    double          t_first, shift_ms;
    int32_t         copy;
    int64_t         pos;
    int             rc;               /* a sticky error */
    char            msg[512];
};

static int fail(hx_trace *t, int rc, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(hx_trace *t, int rc, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->msg, sizeof t->msg, fmt, ap);
    va_end(ap);
    t->rc = rc;
    eng_errf(err, errlen, "%s", t->msg);
    return rc;
}

int hx_trace_open_file(FILE *f, const char *name, const hx_trace_opts *o, hx_trace **out, char *err, size_t errlen) {
    *out = NULL;
    if (o->block_tokens < 0 || o->repeat < 0 || o->limit < 0) {
        eng_errf(err, errlen, "%s: bad trace options (block %d, repeat %lld, limit %lld)", name, o->block_tokens,
                 (long long)o->repeat, (long long)o->limit);
        return ENG_ERR_ARG;
    }
    hx_trace *t = calloc(1, sizeof *t);
    if (!t) return ENG_ERR_NOMEM;
    t->f = f;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->o = *o;
    if (t->o.repeat < 1) t->o.repeat = 1;
    t->fmt = o->format;
    t->B = o->block_tokens;
    t->max_id = t->max_chat = -1;
    *out = t;
    return ENG_OK;
}

int hx_trace_open(const char *path, const hx_trace_opts *o, hx_trace **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) {
        eng_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return ENG_ERR_IO;
    }
    int rc = hx_trace_open_file(f, path, o, out, err, errlen);
    if (rc != ENG_OK) { fclose(f); return rc; }
    (*out)->own = true;
    return ENG_OK;
}

void hx_trace_close(hx_trace *t) {
    if (!t) return;
    if (t->own && t->f) fclose(t->f);
    free(t->line);
    free(t->ids);
    free(t->words);
    free(t->seen);
    free(t->recs);
    free(t->kept_ids);
    free(t);
}

hx_trace_format hx_trace_format_of(const hx_trace *t) { return t->fmt; }
int32_t hx_trace_block_tokens(const hx_trace *t) {
    return t->B ? t->B : t->fmt == HX_TRACE_BAILIAN ? 16 : 512;
}

// ----------------------------------------------------------------------------
// One line

static int reserve_ids(hx_trace *t, int64_t n) {
    if (n <= t->cap_ids) return ENG_OK;
    int32_t cap = t->cap_ids ? t->cap_ids : 64;
    while (cap < n) cap *= 2;
    int64_t *ids = realloc(t->ids, sizeof *ids * (size_t)cap);
    if (ids) t->ids = ids;
    int32_t *w = realloc(t->words, sizeof *w * 2 * (size_t)cap);
    if (w) t->words = w;
    if (!ids || !w) return ENG_ERR_NOMEM;
    t->cap_ids = cap;
    return ENG_OK;
}

/* An integer field in [lo, hi] into *v. */
static int get_int(hx_trace *t, json_t *j, const char *field, int64_t lo, int64_t hi, int64_t *v, char *err,
                   size_t errlen) {
    json_t *x = json_object_get(j, field);
    if (!x) return fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: %s: missing", t->name, (long long)t->line_no, field);
    if (!json_is_integer(x))
        return fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: %s: expected an integer, got %s", t->name,
                    (long long)t->line_no, field, json_is_string(x) ? "a string" : json_is_real(x) ? "a real number"
                    : json_is_array(x) ? "an array" : json_is_object(x) ? "an object" : "null or a boolean");
    *v = json_integer_value(x);
    if (*v < lo || *v > hi)
        return fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: %s: %lld is outside [%lld, %lld]", t->name,
                    (long long)t->line_no, field, (long long)*v, (long long)lo, (long long)hi);
    return ENG_OK;
}

static bool seen_get(const hx_trace *t, int64_t id) {
    return id / 64 < t->seen_words && (t->seen[id / 64] >> (id % 64) & 1);
}

static int seen_set(hx_trace *t, int64_t id) {
    if (id / 64 >= t->seen_words) {
        int64_t n = t->seen_words ? t->seen_words : 1024;
        while (n <= id / 64) n *= 2;
        uint64_t *s = realloc(t->seen, sizeof *s * (size_t)n);
        if (!s) return ENG_ERR_NOMEM;
        memset(s + t->seen_words, 0, sizeof *s * (size_t)(n - t->seen_words));
        t->seen = s;
        t->seen_words = n;
    }
    t->seen[id / 64] |= 1ull << (id % 64);
    return ENG_OK;
}

/* Parses the line into *r (copy 0). ENG_OK, or an error (sticky). */
static int parse_line(hx_trace *t, const char *line, size_t len, hx_trace_rec *r, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: not a JSON object (%s, column %d)", t->name,
                    (long long)t->line_no, je.text, je.column);
    int rc = ENG_OK;
    if (!json_is_object(j)) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: expected a JSON object", t->name, (long long)t->line_no);
        goto out;
    }
    if (t->fmt == HX_TRACE_AUTO) t->fmt = json_object_get(j, "chat_id") ? HX_TRACE_BAILIAN : HX_TRACE_MOONCAKE;
    int32_t B = hx_trace_block_tokens(t);
    bool bl = t->fmt == HX_TRACE_BAILIAN;
    int64_t in, out_len;
    json_t *ts = json_object_get(j, "timestamp"), *h = json_object_get(j, "hash_ids");
    if (!ts) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: timestamp: missing", t->name, (long long)t->line_no);
        goto out;
    }
    if (!json_is_number(ts) || !isfinite(json_number_value(ts)) || json_number_value(ts) < 0) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: timestamp: expected a number >= 0 (%s)", t->name,
                  (long long)t->line_no, bl ? "seconds" : "milliseconds");
        goto out;
    }
    double t_ms = json_number_value(ts) * (bl ? 1000.0 : 1.0);
    if ((rc = get_int(t, j, "input_length", 1, MAX_LENGTH - 1, &in, err, errlen)) ||
        (rc = get_int(t, j, "output_length", 0, MAX_LENGTH - 1, &out_len, err, errlen)))
        goto out;
    if (!h) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: hash_ids: missing", t->name, (long long)t->line_no);
        goto out;
    }
    if (!json_is_array(h) || json_array_size(h) == 0 || json_array_size(h) > MAX_BLOCKS) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: hash_ids: expected a non-empty array of block ids",
                  t->name, (long long)t->line_no);
        goto out;
    }
    int64_t n = (int64_t)json_array_size(h);
    if ((n - 1) * B >= in || in > n * B) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: input_length: %lld tokens contradicts %lld blocks of %d "
                  "tokens (needs %lld..%lld)", t->name, (long long)t->line_no, (long long)in, (long long)n, B,
                  (long long)((n - 1) * B + 1), (long long)(n * B));
        goto out;
    }
    if ((rc = reserve_ids(t, n)) != ENG_OK) {
        rc = fail(t, rc, err, errlen, "%s:%lld: out of memory", t->name, (long long)t->line_no);
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        json_t *x = json_array_get(h, (size_t)i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= MAX_ID) {
            rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: hash_ids[%lld]: expected an integer in [0, 2^62)",
                      t->name, (long long)t->line_no, (long long)i);
            goto out;
        }
        t->ids[i] = json_integer_value(x);
        if (t->ids[i] > t->max_id) t->max_id = t->ids[i];
    }
    if (t->have_last && t_ms < t->last_t) {
        rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: timestamp: %.17g is before the previous line's %.17g (the "
                  "trace must be in arrival order)", t->name, (long long)t->line_no, bl ? t_ms / 1000 : t_ms,
                  bl ? t->last_t / 1000 : t->last_t);
        goto out;
    }
    r->chat_id = r->parent_chat_id = -1;
    r->turn = 0;
    r->type = "";
    if (bl) {
        int64_t chat, parent, turn;
        if ((rc = get_int(t, j, "chat_id", 0, MAX_CHAT - 1, &chat, err, errlen)) ||
            (rc = get_int(t, j, "parent_chat_id", -1, MAX_CHAT - 1, &parent, err, errlen)) ||
            (rc = get_int(t, j, "turn", 0, INT32_MAX, &turn, err, errlen)))
            goto out;
        json_t *ty = json_object_get(j, "type");
        if (!ty || !json_is_string(ty) || !json_string_length(ty) || json_string_length(ty) >= sizeof t->type) {
            rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: type: %s", t->name, (long long)t->line_no,
                      ty ? "expected a short non-empty string (text, search, image, file)" : "missing");
            goto out;
        }
        if (parent >= 0 && !seen_get(t, parent)) {
            rc = fail(t, ENG_ERR_FORMAT, err, errlen, "%s:%lld: parent_chat_id: %lld never appeared as a chat_id "
                      "before this line", t->name, (long long)t->line_no, (long long)parent);
            goto out;
        }
        if (seen_set(t, chat) != ENG_OK) {
            rc = fail(t, ENG_ERR_NOMEM, err, errlen, "%s:%lld: out of memory", t->name, (long long)t->line_no);
            goto out;
        }
        if (chat > t->max_chat) t->max_chat = chat;
        snprintf(t->type, sizeof t->type, "%s", json_string_value(ty));
        r->chat_id = chat;
        r->parent_chat_id = parent;
        r->turn = (int32_t)turn;
        r->type = t->type;
    }
    if (!t->have_last) t->t_first = t_ms;
    t->have_last = true;
    t->last_t = t_ms;
    r->t_ms = t_ms;
    r->input_length = (int32_t)in;
    r->output_length = (int32_t)out_len;
    r->n_blocks = (int32_t)n;
out:
    json_decref(j);
    return rc;
}

// ----------------------------------------------------------------------------
// Copies (--repeat)

static int keep(hx_trace *t, const hx_trace_rec *r) {
    if (t->n_recs == t->cap_recs) {
        int64_t cap = t->cap_recs ? 2 * t->cap_recs : 1024;
        kept *k = realloc(t->recs, sizeof *k * (size_t)cap);
        if (!k) return ENG_ERR_NOMEM;
        t->recs = k;
        t->cap_recs = cap;
    }
    if (t->n_kept_ids + r->n_blocks > t->cap_kept_ids) {
        int64_t cap = t->cap_kept_ids ? 2 * t->cap_kept_ids : 16384;
        while (cap < t->n_kept_ids + r->n_blocks) cap *= 2;
        int64_t *v = realloc(t->kept_ids, sizeof *v * (size_t)cap);
        if (!v) return ENG_ERR_NOMEM;
        t->kept_ids = v;
        t->cap_kept_ids = cap;
    }
    uint8_t ty = 0;
    for (; ty < t->n_types && strcmp(t->types[ty], r->type); ty++) {}
    if (ty == t->n_types && t->n_types < 8) snprintf(t->types[t->n_types++], sizeof t->types[0], "%s", r->type);
    if (ty == 8) ty = 7;  /* more than 8 kinds: the copies call the rest by the 8th's name */
    t->recs[t->n_recs++] = (kept){r->t_ms, r->line, t->n_kept_ids, r->chat_id, r->parent_chat_id, r->input_length,
                                  r->output_length, r->n_blocks, r->turn, ty};
    memcpy(t->kept_ids + t->n_kept_ids, t->ids, sizeof(int64_t) * (size_t)r->n_blocks);
    t->n_kept_ids += r->n_blocks;
    return ENG_OK;
}

/* Record pos of copy c (>= 1) into *r. */
static int from_copy(hx_trace *t, int32_t c, int64_t pos, hx_trace_rec *r) {
    const kept *k = &t->recs[pos];
    if (reserve_ids(t, k->n) != ENG_OK) return ENG_ERR_NOMEM;
    int64_t stride = t->max_id + 1;
    for (int32_t i = 0; i < k->n; i++) t->ids[i] = t->kept_ids[k->off + i] + c * stride;
    int64_t cs = t->max_chat + 1;
    r->t_ms = k->t_ms + c * t->shift_ms;
    r->line = k->line;
    r->input_length = k->in;
    r->output_length = k->out;
    r->n_blocks = k->n;
    r->chat_id = k->chat >= 0 ? k->chat + c * cs : -1;
    r->parent_chat_id = k->parent >= 0 ? k->parent + c * cs : -1;
    r->turn = k->turn;
    r->type = t->types[k->type];
    return ENG_OK;
}

int hx_trace_next(hx_trace *t, hx_trace_rec *r, char *err, size_t errlen) {
    if (t->rc) {
        eng_errf(err, errlen, "%s", t->msg);
        return t->rc;
    }
    if (t->o.limit && t->emitted >= t->o.limit) return 0;
    memset(r, 0, sizeof *r);
    int rc;
    if (!t->eof0) {
        for (;;) {
            errno = 0;
            ssize_t n = getline(&t->line, &t->line_cap, t->f);
            if (n < 0) {
                if (ferror(t->f))
                    return fail(t, ENG_ERR_IO, err, errlen, "%s:%lld: read error: %s", t->name,
                                (long long)t->line_no + 1, strerror(errno ? errno : EIO));
                t->eof0 = true;
                break;
            }
            t->line_no++;
            size_t k = 0;
            while (k < (size_t)n && strchr(" \t\r\n", t->line[k])) k++;
            if (k == (size_t)n) continue;  /* blank */
            if ((rc = parse_line(t, t->line, (size_t)n, r, err, errlen)) != ENG_OK) return rc;
            r->line = t->line_no;
            if (t->o.repeat > 1 && (rc = keep(t, r)) != ENG_OK)
                return fail(t, rc, err, errlen, "%s:%lld: out of memory keeping the trace for --repeat", t->name,
                            (long long)t->line_no);
            goto emit;
        }
        /* end of copy 0: the copies' shift */
        if (t->o.repeat > 1 && t->n_recs > 0) {
            double T = t->last_t;
            t->shift_ms = t->n_recs > 1 ? T + T / (double)(t->n_recs - 1) : T + 1.0;
            if (t->shift_ms <= 0) t->shift_ms = 1.0;
            if (t->max_id + 1 > (MAX_ID - 1) / t->o.repeat)
                return fail(t, ENG_ERR_RANGE, err, errlen, "%s: --repeat %lld: the copies' block ids would pass 2^62",
                            t->name, (long long)t->o.repeat);
            t->copy = 1;
            t->pos = 0;
        }
    }
    if (t->copy < 1 || t->copy >= t->o.repeat || t->n_recs == 0) return 0;
    if ((rc = from_copy(t, t->copy, t->pos, r)) != ENG_OK)
        return fail(t, rc, err, errlen, "%s: out of memory", t->name);
    r->copy = t->copy;
    if (++t->pos == t->n_recs) {
        t->pos = 0;
        t->copy++;
    }
emit:
    for (int32_t i = 0; i < r->n_blocks; i++) {
        t->words[2 * i] = (int32_t)(uint32_t)((uint64_t)t->ids[i] & 0xffffffffu);
        t->words[2 * i + 1] = (int32_t)(uint32_t)((uint64_t)t->ids[i] >> 32);
    }
    r->ids = t->ids;
    r->words = t->words;
    r->index = t->emitted++;
    return 1;
}

// ----------------------------------------------------------------------------
// trace info: one pass, the ideal hit rate of an unbounded cache

typedef struct u64set {
    uint64_t *v;   /* 0: empty (keys are never 0: hashes are not, ids are stored + 1) */
    int64_t   cap, n;
} u64set;

/* Inserts key; 1 when new, 0 when present, <0 on OOM. */
static int u64set_add(u64set *s, uint64_t key) {
    if ((s->n + 1) * 2 > s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1 << 16;
        uint64_t *v = calloc((size_t)cap, sizeof *v);
        if (!v) return ENG_ERR_NOMEM;
        for (int64_t i = 0; i < s->cap; i++) {
            if (!s->v[i]) continue;
            int64_t j = (int64_t)(s->v[i] * 0x9E3779B97F4A7C15ULL >> 17) & (cap - 1);
            while (v[j]) j = (j + 1) & (cap - 1);
            v[j] = s->v[i];
        }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    int64_t j = (int64_t)(key * 0x9E3779B97F4A7C15ULL >> 17) & (s->cap - 1);
    while (s->v[j]) {
        if (s->v[j] == key) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->v[j] = key;
    s->n++;
    return 1;
}

static bool u64set_has(const u64set *s, uint64_t key) {
    if (!s->cap) return false;
    int64_t j = (int64_t)(key * 0x9E3779B97F4A7C15ULL >> 17) & (s->cap - 1);
    while (s->v[j]) {
        if (s->v[j] == key) return true;
        j = (j + 1) & (s->cap - 1);
    }
    return false;
}

int hx_trace_info_read(const char *path, const hx_trace_opts *o, hx_trace_info *info, char *err, size_t errlen) {
    memset(info, 0, sizeof *info);
    hx_trace *t;
    int rc = hx_trace_open(path, o, &t, err, errlen);
    if (rc != ENG_OK) return rc;
    u64set prefixes = {0}, ids = {0};
    uint64_t *h = NULL;
    int32_t cap_h = 0;
    hx_trace_rec r;
    double t0 = 0, t1 = 0, out_sum = 0;
    while ((rc = hx_trace_next(t, &r, err, errlen)) == 1) {
        if (r.n_blocks > cap_h) {
            uint64_t *g = realloc(h, sizeof *g * (size_t)r.n_blocks);
            if (!g) { rc = ENG_ERR_NOMEM; break; }
            h = g;
            cap_h = r.n_blocks;
        }
        hx_block_hashes(r.words, 2 * r.n_blocks, 2, NULL, h);
        int32_t k = 0;
        while (k < r.n_blocks && u64set_has(&prefixes, h[k])) k++;
        int32_t B = hx_trace_block_tokens(t);
        int64_t hit = (int64_t)k * B < r.input_length ? (int64_t)k * B : r.input_length;
        for (int32_t i = 0; i < r.n_blocks && rc >= 0; i++)
            if (u64set_add(&prefixes, h[i]) < 0 || u64set_add(&ids, (uint64_t)r.ids[i] + 1) < 0) rc = ENG_ERR_NOMEM;
        if (rc < 0) break;
        if (info->requests == 0) t0 = r.t_ms;
        t1 = r.t_ms;
        info->requests++;
        info->input_tokens += r.input_length;
        info->blocks += r.n_blocks;
        info->ideal_hit_tokens += hit;
        info->ideal_hit_blocks += k;
        out_sum += r.output_length;
        if (r.input_length > info->max_input) info->max_input = r.input_length;
        info->roots += r.parent_chat_id < 0;
        if (r.turn > info->max_turn) info->max_turn = r.turn;
    }
    if (rc == ENG_ERR_NOMEM) eng_errf(err, errlen, "%s: out of memory", path);
    if (rc >= 0) {
        rc = ENG_OK;
        info->format = hx_trace_format_of(t);
        info->block_tokens = hx_trace_block_tokens(t);
        info->span_s = (t1 - t0) / 1e3;
        info->unique_ids = ids.n;
        info->unique_prefixes = prefixes.n;
        if (info->requests) {
            info->mean_input = (double)info->input_tokens / (double)info->requests;
            info->mean_output = out_sum / (double)info->requests;
            info->ideal_hit_rate_tokens = (double)info->ideal_hit_tokens / (double)info->input_tokens;
            info->ideal_hit_rate_blocks = (double)info->ideal_hit_blocks / (double)info->blocks;
        }
    }
    free(prefixes.v);
    free(ids.v);
    free(h);
    hx_trace_close(t);
    return rc;
}
