/*
 * harness/cache/carrier.c: carriers, their provenance runs and the spare
 * sequences (see carrier.h).
 */
#include "carrier.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

#define SPARES_MAX 2

typedef struct prov_run {
    int32_t  start, end;  /* rows [start, end) */
    uint32_t origin;
} prov_run;

struct hx_carrier {
    eng_seq    *seq;      /* NULL once given up in place */
    int32_t     refs;
    prov_run   *runs;     /* ascending, contiguous from 0 */
    int32_t     n_runs;
    hx_carrier *prev, *next;  /* the set's list of live carriers */
};

struct hx_carriers {
    const eng_model *m;
    int32_t          n_ctx;
    eng_seq         *spare[SPARES_MAX];
    int32_t          n_spare;
    int32_t         *eligible;  /* (n_origins + 1): eligible end per origin, [0] unused */
    uint32_t         n_origins, cap_origins;
    hx_carrier      *live;
    int32_t          n_live;
    int32_t         *last;      /* (n_last) the last request's tokens */
    int32_t          n_last, cap_last;
};

// ----------------------------------------------------------------------------
// The set, origins and spare sequences

hx_carriers *hx_carriers_new(const eng_model *m, int32_t n_ctx) {
    hx_carriers *cs = calloc(1, sizeof *cs);
    if (!cs) return NULL;
    cs->m = m;
    cs->n_ctx = n_ctx;
    return cs;
}

static void carrier_free(hx_carriers *cs, hx_carrier *c) {
    if (c->prev) c->prev->next = c->next;
    else cs->live = c->next;
    if (c->next) c->next->prev = c->prev;
    cs->n_live--;
    hx_carriers_give_seq(cs, c->seq);
    free(c->runs);
    free(c);
}

void hx_carriers_free(hx_carriers *cs) {
    if (!cs) return;
    while (cs->live) {
        hx_carrier *c = cs->live;
        cs->live = c->next;
        eng_seq_free(c->seq);
        free(c->runs);
        free(c);
    }
    for (int32_t i = 0; i < cs->n_spare; i++) eng_seq_free(cs->spare[i]);
    free(cs->eligible);
    free(cs->last);
    free(cs);
}

uint32_t hx_carriers_origin(hx_carriers *cs, int32_t eligible_end) {
    if (cs->n_origins + 2 > cs->cap_origins) {
        uint32_t cap = cs->cap_origins ? 2 * cs->cap_origins : 64;
        int32_t *e = realloc(cs->eligible, sizeof *e * cap);
        if (!e) return 0;
        cs->eligible = e;
        cs->cap_origins = cap;
    }
    uint32_t o = ++cs->n_origins;
    cs->eligible[o] = eligible_end;
    return o;
}

int32_t hx_carriers_eligible_end(const hx_carriers *cs, uint32_t origin) {
    return origin >= 1 && origin <= cs->n_origins ? cs->eligible[origin] : 0;
}

eng_seq *hx_carriers_take_seq(hx_carriers *cs) {
    eng_seq *s = cs->n_spare > 0 ? cs->spare[--cs->n_spare] : eng_seq_new(cs->m, cs->n_ctx);
    if (s) eng_seq_reset(s);
    return s;
}

void hx_carriers_give_seq(hx_carriers *cs, eng_seq *s) {
    if (!s) return;
    if (cs->n_spare < SPARES_MAX) cs->spare[cs->n_spare++] = s;
    else eng_seq_free(s);
}

// ----------------------------------------------------------------------------
// Carriers

int hx_carrier_restore(hx_carriers *cs, hx_carrier *src, int32_t n, const eng_ckpt *state, bool in_place,
                       eng_seq **out) {
    *out = NULL;
    if (!src || !src->seq) return ENG_ERR_ARG;
    eng_seq *s;
    if (in_place) {
        s = src->seq;
        src->seq = NULL;
    } else {
        if (!(s = hx_carriers_take_seq(cs))) return ENG_ERR_NOMEM;
        int rc = eng_seq_copy(s, src->seq);
        if (rc != ENG_OK) { hx_carriers_give_seq(cs, s); return rc; }
    }
    int rc = state ? eng_seq_restore(s, state) : eng_seq_truncate(s, n);
    if (rc == ENG_OK && eng_seq_n_tokens(s) != n) rc = ENG_ERR_RANGE;
    if (rc != ENG_OK) {
        if (in_place) src->seq = s;  /* nothing moved */
        else hx_carriers_give_seq(cs, s);
        return rc;
    }
    *out = s;
    return ENG_OK;
}

/* Appends run [start, end) of origin to c, merging with the last run. */
static int add_run(hx_carrier *c, int32_t *cap, int32_t start, int32_t end, uint32_t origin) {
    if (end <= start) return ENG_OK;
    if (c->n_runs > 0 && c->runs[c->n_runs - 1].origin == origin && c->runs[c->n_runs - 1].end == start) {
        c->runs[c->n_runs - 1].end = end;
        return ENG_OK;
    }
    if (c->n_runs == *cap) {
        int32_t ncap = *cap ? 2 * *cap : 4;
        prov_run *r = realloc(c->runs, sizeof *r * (size_t)ncap);
        if (!r) return ENG_ERR_NOMEM;
        c->runs = r;
        *cap = ncap;
    }
    c->runs[c->n_runs++] = (prov_run){start, end, origin};
    return ENG_OK;
}

hx_carrier *hx_carrier_new(hx_carriers *cs, eng_seq *s, const hx_carrier *src, int32_t n_src, uint32_t origin) {
    hx_carrier *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    int32_t cap = 0, n = eng_seq_n_tokens(s);
    if (n_src > n) n_src = n;
    int rc = ENG_OK;
    for (int32_t i = 0; src && i < src->n_runs && rc == ENG_OK && src->runs[i].start < n_src; i++)
        rc = add_run(c, &cap, src->runs[i].start, src->runs[i].end < n_src ? src->runs[i].end : n_src,
                     src->runs[i].origin);
    if (rc == ENG_OK) rc = add_run(c, &cap, n_src, n, origin);
    if (rc != ENG_OK) {
        free(c->runs);
        free(c);
        return NULL;
    }
    c->seq = s;
    c->next = cs->live;
    if (cs->live) cs->live->prev = c;
    cs->live = c;
    cs->n_live++;
    return c;
}

void hx_carrier_ref(hx_carrier *c) { c->refs++; }

void hx_carrier_unref(hx_carriers *cs, hx_carrier *c) {
    if (!c) return;
    ENG_ASSERT(c->refs > 0);
    if (--c->refs == 0) carrier_free(cs, c);
}

int32_t hx_carrier_refs(const hx_carrier *c) { return c->refs; }
const eng_seq *hx_carrier_seq(const hx_carrier *c) { return c->seq; }

uint32_t hx_carrier_origin_at(const hx_carrier *c, int32_t pos) {
    for (int32_t i = 0; i < c->n_runs; i++)
        if (pos >= c->runs[i].start && pos < c->runs[i].end) return c->runs[i].origin;
    return 0;
}

bool hx_carrier_holds(const hx_carriers *cs, const hx_carrier *c, int32_t a, int32_t b, uint32_t origin, bool grid) {
    if (b <= a) return true;
    if (!c || c->n_runs == 0 || c->runs[c->n_runs - 1].end < b) return false;
    bool mine_eligible = b <= hx_carriers_eligible_end(cs, origin);
    for (int32_t i = 0; i < c->n_runs; i++) {
        const prov_run *r = &c->runs[i];
        if (r->end <= a || r->start >= b) continue;
        if (r->origin == origin) continue;
        /* on the grid, eligible rows of the same tokens are the same bytes */
        int32_t hi = r->end < b ? r->end : b;
        if (!(grid && mine_eligible && hi <= hx_carriers_eligible_end(cs, r->origin))) return false;
    }
    return true;
}

// ----------------------------------------------------------------------------
// Payloads, hits and the last request

void hx_rows_point(hx_carriers *cs, hx_rows *r, hx_carrier *c) {
    if (r->carrier == c) return;
    if (c) hx_carrier_ref(c);
    hx_carrier_unref(cs, r->carrier);
    r->carrier = c;
}

int64_t hx_rows_clear(hx_carriers *cs, hx_rows *r) {
    if (!r) return 0;
    int64_t bytes = r->state ? (int64_t)eng_ckpt_size(r->state) : 0;
    hx_carrier_unref(cs, r->carrier);
    eng_ckpt_free(r->state);
    r->carrier = NULL;
    r->state = NULL;
    return bytes;
}

int hx_carrier_restore_hit(hx_carriers *cs, hx_carrier *src, int32_t n, const eng_ckpt *state, int32_t refs_below,
                           eng_seq **out, int64_t *bytes) {
    bool in_place = src && src->refs == refs_below;
    size_t copied = in_place || !src || !src->seq ? 0 : eng_seq_serialized_size(src->seq);
    int rc = hx_carrier_restore(cs, src, n, state, in_place, out);
    *bytes = rc == ENG_OK ? (int64_t)copied + (state ? (int64_t)eng_ckpt_size(state) : 0) : 0;
    return rc;
}

void hx_carriers_remember(hx_carriers *cs, const int32_t *tokens, int32_t n) {
    if (n > cs->cap_last) {
        int32_t *p = realloc(cs->last, sizeof *p * (size_t)n);
        if (!p) { cs->n_last = 0; return; }
        cs->last = p;
        cs->cap_last = n;
    }
    if (n > 0) memcpy(cs->last, tokens, sizeof *tokens * (size_t)n);
    cs->n_last = n;
}

const int32_t *hx_carriers_last(const hx_carriers *cs, int32_t *n) {
    *n = cs->n_last;
    return cs->n_last ? cs->last : NULL;
}

int32_t hx_carriers_live(const hx_carriers *cs) { return cs->n_live; }

int64_t hx_carriers_bytes(const hx_carriers *cs) {
    int64_t b = 0;
    for (const hx_carrier *c = cs->live; c; c = c->next)
        if (c->seq) b += (int64_t)eng_seq_serialized_size(c->seq);
    return b;
}
