/*
 * harness/cache/policies/cold.c: the baseline policy: never reuses anything.
 * Every request starts from an empty sequence; nothing is stored.
 */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct cold_state {
    eng_seq *seq;  /* reset on every acquire */
} cold_state;

static int cold_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    cold_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    st->seq = eng_seq_new(cfg->model, cfg->n_ctx);
    if (!st->seq) {
        free(st);
        eng_errf(err, errlen, "cold: cannot allocate a sequence of %d positions", cfg->n_ctx);
        return ENG_ERR_NOMEM;
    }
    *state = st;
    return ENG_OK;
}

/* Nothing is reused anyway; there are no slots. */
static void cold_hint(void *state, const hx_acquire_hint *h) { (void)state, (void)h; }

static int cold_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    cold_state *st = state;
    eng_seq_reset(st->seq);
    memset(out, 0, sizeof *out);
    out->seq = st->seq;
    out->slot = -1;
    return ENG_OK;
}

static void cold_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {}

static int cold_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    memset(out, 0, sizeof *out);
    return ENG_OK;
}

static void cold_destroy(void *state) {
    cold_state *st = state;
    eng_seq_free(st->seq);
    free(st);
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
