/*
 * harness/cache/policies/cold.c: the baseline policy: never reuses anything.
 * Every request starts from an empty sequence; nothing is stored. Requests
 * in flight at once (cfg.n_parallel) each get a sequence of their own.
 */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct cold_state {
    eng_seq **seq;   /* (n) reset on every acquire */
    bool     *busy;  /* (n) between acquire and release */
    int32_t   n;
} cold_state;

static void cold_destroy(void *state) {
    cold_state *st = state;
    for (int32_t i = 0; st->seq && i < st->n; i++) eng_seq_free(st->seq[i]);
    free(st->seq);
    free(st->busy);
    free(st);
}

static int cold_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    cold_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    st->n = cfg->n_parallel > 1 ? cfg->n_parallel : 1;
    st->seq = calloc((size_t)st->n, sizeof *st->seq);
    st->busy = calloc((size_t)st->n, sizeof *st->busy);
    if (!st->seq || !st->busy) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < st->n; i++)
        if (!(st->seq[i] = eng_seq_new(cfg->model, cfg->n_ctx))) {
            eng_errf(err, errlen, "cold: cannot allocate a sequence of %d positions", cfg->n_ctx);
            return ENG_ERR_NOMEM;
        }
    return ENG_OK;
}

/* Nothing is reused anyway; there are no slots. */
static void cold_hint(void *state, const hx_acquire_hint *h) { (void)state, (void)h; }

static int cold_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    cold_state *st = state;
    int32_t i = 0;
    while (i < st->n && st->busy[i]) i++;
    if (i == st->n) return ENG_ERR_RANGE;  /* more requests in flight than n_parallel */
    st->busy[i] = true;
    eng_seq_reset(st->seq[i]);
    memset(out, 0, sizeof *out);
    out->seq = st->seq[i];
    out->slot = -1;
    return ENG_OK;
}

static void cold_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {}

static int cold_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    cold_state *st = state;
    for (int32_t i = 0; i < st->n; i++)
        if (st->seq[i] == s) st->busy[i] = false;
    memset(out, 0, sizeof *out);
    return ENG_OK;
}

/* Token-only mode (simulate): nothing is held, nothing hits (the baseline's TTFT). */
static int cold_sim_create(const hx_sim_config *cfg, void **state, char *err, size_t errlen) {
    static int nothing;
    *state = &nothing;
    return ENG_OK;
}
static int32_t cold_sim_peek(void *state, const hx_sim_req *r) { return 0; }
static int cold_sim_access(void *state, const hx_sim_req *r, hx_sim_access *out) {
    memset(out, 0, sizeof *out);
    out->origin = -1;
    return ENG_OK;
}
static void cold_sim_destroy(void *state) {}
static int cold_sim_check(void *state, char *err, size_t errlen) { return ENG_OK; }

static const hx_sim_ops cold_sim_ops = {
    .create = cold_sim_create,
    .peek = cold_sim_peek,
    .access = cold_sim_access,
    .destroy = cold_sim_destroy,
    .check = cold_sim_check,
};

const hx_policy_ops hx_policy_cold = {
    .name = "cold",
    .create = cold_create,
    .acquire = cold_acquire,
    .hint = cold_hint,
    .on_chunk = cold_on_chunk,
    .release = cold_release,
    .destroy = cold_destroy,
    .sim = &cold_sim_ops,
};
