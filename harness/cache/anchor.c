/*
 * harness/cache/anchor.c: where the `disk-anchor` policy writes checkpoints.
 *
 * See anchor.h. Pure integer arithmetic: the plan is the merge of the
 * waypoint multiples in (cached, n] and at most one anchor, ascending, with
 * an anchor that falls on a waypoint reported once with both kind flags.
 */
#include "anchor.h"
#include "status.h"

hx_anchor_params hx_anchor_params_default(void) {
    return (hx_anchor_params){.chunk = HX_ANCHOR_DEFAULT_CHUNK,
                              .anchor = 0,
                              .waypoint_every = HX_ANCHOR_DEFAULT_WAYPOINT_EVERY,
                              .quirk_anchor_cold_only = false};
}

int32_t hx_anchor_position(int32_t stable_end, int32_t chunk) {
    if (chunk <= 0 || stable_end < 0) return ENG_ERR_ARG;
    return stable_end / chunk * chunk;
}

int hx_anchor_params_check(const hx_anchor_params *p, char *err, size_t errlen) {
    if (!p) {
        eng_errf(err, errlen, "anchor: params: NULL");
        return ENG_ERR_ARG;
    }
    if (p->chunk <= 0) {
        eng_errf(err, errlen, "anchor: chunk: must be > 0, got %d", (int)p->chunk);
        return ENG_ERR_ARG;
    }
    if (p->anchor < 0 || p->anchor % p->chunk != 0) {
        eng_errf(err, errlen, "anchor: anchor: must be >= 0 and a multiple of the chunk %d, got %d",
                 (int)p->chunk, (int)p->anchor);
        return ENG_ERR_ARG;
    }
    if (p->waypoint_every < 0 || p->waypoint_every % p->chunk != 0) {
        eng_errf(err, errlen,
                 "anchor: waypoint_every: must be >= 0 and a multiple of the chunk %d, got %d",
                 (int)p->chunk, (int)p->waypoint_every);
        return ENG_ERR_ARG;
    }
    return ENG_OK;
}

int32_t hx_anchor_plan_max(const hx_anchor_params *p, int32_t n_prompt) {
    if (!p || n_prompt <= 0 || p->waypoint_every <= 0) return 1;
    return n_prompt / p->waypoint_every + 1;
}

int hx_anchor_plan(const hx_anchor_params *p, int32_t n_prompt, int32_t cached,
                   hx_anchor_ckpt *out, int32_t cap, int32_t *n_out, char *err, size_t errlen) {
    if (n_out) *n_out = 0;
    int rc = hx_anchor_params_check(p, err, errlen);
    if (rc != ENG_OK) return rc;
    if (!n_out || n_prompt < 0 || cached < 0 || cached > n_prompt || cap < 0 || (!out && cap > 0)) {
        eng_errf(err, errlen, "anchor: cached: need 0 <= cached (%d) <= n_prompt (%d), an output",
                 (int)cached, (int)n_prompt);
        return ENG_ERR_ARG;
    }
    const int32_t W = p->waypoint_every, A = p->anchor;
    bool want_anchor = A > 0 && A <= n_prompt &&
                       (p->quirk_anchor_cold_only ? cached == 0 : cached < A);
    /* Merge the waypoints k*W (k from the first multiple past cached) with A. */
    int32_t n = 0;
    int64_t w = W > 0 ? ((int64_t)cached / W + 1) * W : INT64_MAX;
    while (true) {
        int64_t next = w <= n_prompt ? w : INT64_MAX;
        int32_t kind = 0;
        if (want_anchor && A <= next) {
            kind = HX_ANCHOR_KIND_ANCHOR;
            if (A == next) {  /* the anchor sits on a waypoint: one write */
                kind |= HX_ANCHOR_KIND_WAYPOINT;
                w += W;
            }
            next = A;
            want_anchor = false;
        } else if (next != INT64_MAX) {
            kind = HX_ANCHOR_KIND_WAYPOINT;
            w += W;
        } else {
            break;
        }
        if (n < cap) out[n] = (hx_anchor_ckpt){(int32_t)next, kind};
        n++;
    }
    *n_out = n;
    if (n > cap) {
        eng_errf(err, errlen, "anchor: cap: the plan holds %d positions, the array %d", (int)n,
                 (int)cap);
        return ENG_ERR_RANGE;
    }
    return ENG_OK;
}
