/*
 * harness/serve/admit.c: what the requests serve prepares may hold, in
 * memory and in CPU (the contract is in serve_int.h, "Admission").
 *
 * Memory: each request is charged, from its headers to its end, an estimate
 * of its peak on the way from the body to the tokens (hx_admit_estimate):
 *   - per body byte, HX_ADMIT_PER_BYTE bytes: the body, jansson's lexer
 *     buffer and the decoded string during the parse, the request's own
 *     copy while the tree lives (three copies of a long string at once); a
 *     tool's schema parsed again and written canonical by the template (four,
 *     the body freed); one more where --record keeps the body, one more where
 *     a --normalize rule copies the request before rewriting it;
 *   - per JSON value (a container, a key, a scalar), HX_ADMIT_PER_VALUE
 *     bytes: jansson's nodes, the request's messages and blocks, the
 *     rendering's span map, so that a body of millions of tiny values is
 *     charged what it costs, not what its bytes weigh;
 *   - HX_ADMIT_BASE bytes and 16 per context position: the connection, the
 *     job, the token and offset arrays of a prompt that fits.
 * The sum over requests stays at or under --max-prep-memory: a request that
 * would pass it is refused with 503 and Retry-After, one that could never
 * be admitted with 413. A large body (over HX_ADMIT_LARGE bytes) may only
 * be admitted under 7/8 of the cap, so small requests always find room
 * beside a flood of large ones. The memory a large preparation freed is
 * handed back to the system (malloc_trim) before its charge is released.
 *
 * CPU: the connection threads parse and prepare in parallel; a body over
 * HX_ADMIT_LANE bytes first takes a lane (hx_admit_lane_enter), and there
 * are as many lanes as cores the engine's threads leave (one at least), so
 * bodies that take long to parse never hold every core away from the engine
 * worker; smaller bodies take no lane.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"

/* Measured on jansson 2.14 and glibc 2.36 (docs/serve.md, "Hostile bodies"): at most four copies of
 * a long string at once (a tool's description), 45 to 80 bytes per value of a body of tiny values. */
#define HX_ADMIT_PER_BYTE  4
#define HX_ADMIT_PER_VALUE 96
#define HX_ADMIT_BASE      ((int64_t)64 << 10)

void hx_admit_init(hx_admit *a, int64_t limit, int32_t lanes, int32_t n_ctx, bool keep_body, bool normalize,
                   hx_metrics *m) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->limit = limit;
    a->lanes = lanes > 0 ? lanes : 1;
    a->n_ctx = n_ctx > 0 ? n_ctx : 0;
    a->per_byte = HX_ADMIT_PER_BYTE + (keep_body ? 1 : 0) + (normalize ? 1 : 0);
    a->m = m;
    if (m) {
        pthread_mutex_lock(&m->mu);
        m->prep_limit = limit;
        pthread_mutex_unlock(&m->mu);
    }
}

void hx_admit_destroy(hx_admit *a) {
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

int64_t hx_admit_estimate(const hx_admit *a, int64_t body_len, int64_t n_values) {
    return HX_ADMIT_BASE + 16 * (int64_t)a->n_ctx + a->per_byte * (body_len > 0 ? body_len : 0) +
           HX_ADMIT_PER_VALUE * (n_values > 0 ? n_values : 0);
}

int64_t hx_admit_room(const hx_admit *a, bool large) { return large ? a->limit - a->limit / 8 : a->limit; }

int64_t hx_admit_retained(const hx_admit *a, int64_t body_kept, int64_t text_len, int32_t n_tokens) {
    return HX_ADMIT_BASE + 16 * (int64_t)a->n_ctx + body_kept + 3 * text_len + 8 * (int64_t)n_tokens;
}

int64_t hx_admit_count_values(const char *b, size_t n) {
    int64_t v = 0;
    const char *p = b, *end = b + n;
    while (p < end) {
        char c = *p++;
        if (c == '"') {  /* a string: to its closing quote, escapes skipped */
            for (;;) {
                const char *q = memchr(p, '"', (size_t)(end - p));
                if (!q) return v + 1;
                const char *r = q;  /* the backslashes right before the quote: an odd count escapes it */
                while (r > p && r[-1] == '\\') r--;
                p = q + 1;
                if ((q - r) % 2 == 0) break;
            }
            v++;
        } else if (c == '{' || c == '[' || c == ',' || c == ':') {
            v++;
        }
    }
    return v;
}

static void gauge(hx_admit *a) {  /* a->mu held */
    if (a->held > a->peak) a->peak = a->held;
    if (!a->m) return;
    pthread_mutex_lock(&a->m->mu);
    a->m->prep_bytes = a->held;
    a->m->prep_peak = a->peak;
    pthread_mutex_unlock(&a->m->mu);
}

bool hx_admit_charge(hx_admit *a, int64_t bytes, bool large) {
    if (bytes <= 0) return true;
    pthread_mutex_lock(&a->mu);
    bool ok = a->held + bytes <= hx_admit_room(a, large);
    if (ok) {
        a->held += bytes;
        gauge(a);
    }
    pthread_mutex_unlock(&a->mu);
    return ok;
}

void hx_admit_release(hx_admit *a, int64_t bytes) {
    if (bytes <= 0) return;
    pthread_mutex_lock(&a->mu);
    a->held -= bytes;
    if (a->held < 0) a->held = 0;
    gauge(a);
    pthread_mutex_unlock(&a->mu);
}

void hx_admit_lane_enter(hx_admit *a) {
    pthread_mutex_lock(&a->mu);
    while (a->busy >= a->lanes) pthread_cond_wait(&a->cv, &a->mu);
    a->busy++;
    pthread_mutex_unlock(&a->mu);
}

void hx_admit_lane_leave(hx_admit *a, bool trim) {
    if (trim) malloc_trim(0);  /* what the preparation freed goes back to the system before its charge does */
    pthread_mutex_lock(&a->mu);
    a->busy--;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}
