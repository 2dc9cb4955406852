/*
 * harness/cache/anchor.h: where the `disk-anchor` policy writes checkpoints.
 *
 * Pure functions, no I/O: the placement rules of ds4-server's disk KV
 * checkpoints (seeds/000_*), written so that the reported bug is a switch.
 *
 * Positions are token counts: a checkpoint "at p" covers tokens [0, p).
 * Every position returned here lies on the chunk grid (a multiple of C), as
 * the bit-exactness invariant requires (docs/design.md).
 *
 * - The anchor A: the end of the stable prefix (system prompt + tool
 *   definitions, known to the harness from the rendered spans, or a fixed
 *   count from --anchor), floored to the grid. A = 0 means no anchor.
 * - Waypoints: every multiple of W (waypoint_every, itself a multiple of C)
 *   that the current prefill crosses, i.e. in (cached, n]. Full scale (the
 *   report) is W = 20,480 with C = 64; the scaled default is 2,048.
 * - The anchor rule, by default (the report's proposed fix): write A when the
 *   lookup hit below it (cached < A <= n). A hit below A proves that no file
 *   for this prompt's anchor exists (the lookup returns the longest match),
 *   so this never duplicates one; a hit at or past A writes no anchor.
 * - Quirk `anchor-cold-only` (the reported bug, ds4-server issue #393): write
 *   A only when nothing was cached (cached == 0 and A <= n). After one change
 *   inside the stable prefix, every later fresh session hits the waypoint
 *   below the change, cached != 0, the anchor is never rewritten, and each
 *   session prefills n - waypoint tokens instead of n - A, forever.
 *
 * Usage:
 *   hx_anchor_params p = hx_anchor_params_default();
 *   p.anchor = hx_anchor_position(stable_end, p.chunk);
 *   hx_anchor_ckpt pos[64]; int32_t n_pos;
 *   if (hx_anchor_plan(&p, n_prompt, cached, pos, 64, &n_pos, err, sizeof err)) fail(err);
 *   for (i...) prefill up to pos[i].pos, serialize, hx_diskcache_store(...)
 */
#ifndef HX_ANCHOR_H
#define HX_ANCHOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HX_ANCHOR_QUIRK_COLD_ONLY          "anchor-cold-only"
#define HX_ANCHOR_DEFAULT_CHUNK            64
#define HX_ANCHOR_DEFAULT_WAYPOINT_EVERY   2048   /* scaled (demo) */
#define HX_ANCHOR_FULL_SCALE_WAYPOINT_EVERY 20480 /* ds4-server, seeds/000_* */

/* Placement parameters. */
typedef struct hx_anchor_params {
    int32_t chunk;            /* C > 0, the prefill grid (default 64) */
    int32_t anchor;           /* A >= 0, a multiple of C; 0 = no anchor (default 0) */
    int32_t waypoint_every;   /* W >= 0, a multiple of C; 0 = no waypoints (default 2048) */
    bool    quirk_anchor_cold_only; /* the reported bug (default off) */
} hx_anchor_params;

/* Why a position is in a plan (bit flags: an anchor on a waypoint has both). */
enum hx_anchor_kind {
    HX_ANCHOR_KIND_WAYPOINT = 1,
    HX_ANCHOR_KIND_ANCHOR   = 2,
};

/* One checkpoint to write: after prefilling tokens [0, pos). */
typedef struct hx_anchor_ckpt {
    int32_t pos;
    int32_t kind;  /* hx_anchor_kind flags */
} hx_anchor_ckpt;

/* {chunk 64, anchor 0, waypoint_every 2048, quirk off}. */
hx_anchor_params hx_anchor_params_default(void);

/* The anchor for a stable prefix ending at token stable_end: floor(stable_end
 * / chunk) * chunk (0 when stable_end < chunk). Returns it (>= 0), or
 * ENG_ERR_ARG (< 0) when chunk <= 0 or stable_end < 0. */
int32_t hx_anchor_position(int32_t stable_end, int32_t chunk);

/* Checks the parameters: chunk > 0, anchor >= 0 and a multiple of chunk,
 * waypoint_every >= 0 and a multiple of chunk. Returns ENG_OK or ENG_ERR_ARG
 * with "anchor: FIELD: what is wrong" in err. NULL p is ENG_ERR_ARG. */
int hx_anchor_params_check(const hx_anchor_params *p, char *err, size_t errlen);

/* The checkpoints the current prefill must write, ascending and distinct,
 * for a prompt of n_prompt tokens whose lookup hit `cached` tokens (0 on a
 * miss; 0 <= cached <= n_prompt; need not be on the grid). Every position is
 * a multiple of chunk in (cached, n_prompt]:
 *   waypoints: k * W for every k >= 1 with cached < k * W <= n_prompt;
 *   anchor: A when 0 < A <= n_prompt and (quirk ? cached == 0 : cached < A).
 * Writes at most cap entries into out (may be NULL when cap == 0) and the
 * number the plan holds into *n_out. Returns ENG_OK; ENG_ERR_RANGE when the
 * plan holds more than cap (out holds the first cap, *n_out the full count:
 * call again with a larger array); ENG_ERR_ARG (bad params, n_prompt < 0,
 * cached outside [0, n_prompt], NULL n_out) with err set. */
int hx_anchor_plan(const hx_anchor_params *p, int32_t n_prompt, int32_t cached,
                   hx_anchor_ckpt *out, int32_t cap, int32_t *n_out, char *err, size_t errlen);

/* Upper bound on the plan's length for a prompt of n_prompt tokens
 * (n_prompt / W + 1), to size the array; 1 when W == 0. */
int32_t hx_anchor_plan_max(const hx_anchor_params *p, int32_t n_prompt);

#endif /* HX_ANCHOR_H */
