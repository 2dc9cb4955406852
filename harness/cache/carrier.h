/*
 * harness/cache/carrier.h: the sequences that hold the rows of a paged prefix
 * cache (the block-hash and radix policies).
 *
 * vLLM's block pool and SGLang's radix tree keep KV in pages that a block or
 * a tree node points to; the engine keeps a sequence's rows contiguous in one
 * eng_seq. A carrier is a whole eng_seq kept after a request: it holds the
 * rows of every cached block or node that names it, at their own positions.
 * Restoring a cached prefix [0, n) is a copy of the carrier of its deepest
 * block or node (or, when nothing else needs that carrier, the carrier's own
 * sequence, without a copy), truncated to n or, for memory that cannot be
 * truncated, set to a state checkpoint taken at n.
 *
 * Provenance. Every request that computes rows is an origin (1, 2, ...),
 * with the position below which its rows are eligible for bit-exact reuse:
 * its prompt's last grid point under --align chunk, its prompt length under
 * --align none (rows at or past it were written by a final partial chunk or
 * by decode). A block or node records the origin of its rows; a carrier
 * records, run by run, the origin of each of its rows. A carrier holds a
 * block's or node's rows when the origins agree, or, under --align chunk,
 * when both rows are eligible: on the grid, rows of the same tokens are
 * byte-identical whoever computed them (the invariant the replay checks
 * against cold for every request).
 *
 * Ownership: the set owns its carriers and a few spare sequences; a carrier
 * lives while a block or node holds a reference (hx_carrier_ref/unref), then
 * its sequence becomes a spare. Workload: one carrier per request at most,
 * a handful alive at once.
 */
#ifndef HX_CARRIER_H
#define HX_CARRIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct hx_carrier hx_carrier;
typedef struct hx_carriers hx_carriers;

/* A set for sequences of model m with n_ctx positions; NULL on OOM. */
hx_carriers *hx_carriers_new(const eng_model *m, int32_t n_ctx);
/* Frees every carrier (whatever its references) and the spares. Accepts NULL. */
void hx_carriers_free(hx_carriers *cs);

/* A new origin whose rows below eligible_end are eligible; 0 on OOM. */
uint32_t hx_carriers_origin(hx_carriers *cs, int32_t eligible_end);
/* The eligible end of an origin (0 for an unknown one). */
int32_t  hx_carriers_eligible_end(const hx_carriers *cs, uint32_t origin);

/* An empty sequence to fill (a spare, or a new one); NULL on OOM. The caller
 * owns it until it wraps it in a carrier or gives it back. */
eng_seq *hx_carriers_take_seq(hx_carriers *cs);
void     hx_carriers_give_seq(hx_carriers *cs, eng_seq *s);  /* accepts NULL */

/* The sequence holding rows [0, n) of src: src's own sequence when in_place
 * (src gives it up; src must then be named only by blocks or nodes that the
 * caller moves to the carrier it makes of that sequence), else a copy into a
 * taken sequence. Then state (a checkpoint at n, for memory that cannot be
 * truncated) is restored, or without one the sequence is truncated to n.
 * Returns ENG_OK with *out, or an engine status (nothing taken). */
int hx_carrier_restore(hx_carriers *cs, hx_carrier *src, int32_t n, const eng_ckpt *state, bool in_place,
                       eng_seq **out);

/* A carrier over s (taken from the set or returned by hx_carrier_restore):
 * rows [0, n_src) have src's provenance (src NULL when n_src is 0), rows
 * [n_src, n_tokens(s)) the given origin. It starts with no reference: the
 * caller refs it, and the last unref frees it. NULL on OOM (s not taken). */
hx_carrier *hx_carrier_new(hx_carriers *cs, eng_seq *s, const hx_carrier *src, int32_t n_src, uint32_t origin);

void    hx_carrier_ref(hx_carrier *c);
/* Drops one reference; at zero the carrier is freed and its sequence becomes
 * a spare (or is freed). Accepts NULL. */
void    hx_carrier_unref(hx_carriers *cs, hx_carrier *c);
int32_t hx_carrier_refs(const hx_carrier *c);
/* The carrier's sequence (NULL once given up in place), its token ids and count. */
const eng_seq *hx_carrier_seq(const hx_carrier *c);

/* Whether c holds rows [a, b) as computed by origin (see the file comment);
 * grid: --align chunk. */
bool     hx_carrier_holds(const hx_carriers *cs, const hx_carrier *c, int32_t a, int32_t b, uint32_t origin, bool grid);
/* The origin of row pos of c (0 past its rows). */
uint32_t hx_carrier_origin_at(const hx_carrier *c, int32_t pos);

/* What a cached block or tree node holds: the carrier with its rows (NULL
 * when they can never serve a hit), the request that computed them, and the
 * state at its end for memory that cannot be truncated (or NULL). */
typedef struct hx_rows {
    hx_carrier *carrier;
    uint32_t    origin;
    eng_ckpt   *state;
} hx_rows;

/* Points r at carrier c: r's reference moves from its old carrier (if any). */
void    hx_rows_point(hx_carriers *cs, hx_rows *r, hx_carrier *c);
/* Drops r's carrier reference and frees its state; returns the state's bytes. Accepts NULL. */
int64_t hx_rows_clear(hx_carriers *cs, hx_rows *r);

/* A hit on rows [0, n) of src: restored in src's own sequence when the
 * refs_below blocks or nodes below n that name src are all its references
 * (no other needs its rows), else into a copy; then state (at n) or a
 * truncation. *bytes gets the bytes copied (the sequence, when copied, and
 * the state). As hx_carrier_restore otherwise. */
int hx_carrier_restore_hit(hx_carriers *cs, hx_carrier *src, int32_t n, const eng_ckpt *state, int32_t refs_below,
                           eng_seq **out, int64_t *bytes);

/* The tokens of the last request kept (for the miss explanation): remember
 * copies them; last returns them (NULL and 0 before the first). */
void           hx_carriers_remember(hx_carriers *cs, const int32_t *tokens, int32_t n);
const int32_t *hx_carriers_last(const hx_carriers *cs, int32_t *n);

/* Carriers alive, and the bytes their sequences hold (eng_seq_serialized_size). */
int32_t hx_carriers_live(const hx_carriers *cs);
int64_t hx_carriers_bytes(const hx_carriers *cs);

#endif /* HX_CARRIER_H */
