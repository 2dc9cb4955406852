/*
 * harness/replay/shard.h: an experiment's units and their plan: which shard
 * runs which unit (`kvreplay experiment SPEC --shard K/N`; docs/scale.md).
 *
 * A unit is one run of the experiment: one runs[] entry of the spec at one
 * sweep value (variant x transcript x sweep value), numbered 0, 1, ... in
 * spec order. The plan gives every unit to exactly one of N shards, the same
 * way in every process that plans the same units with the same prices, so N
 * processes with --shard 1/N .. N/N run every unit exactly once, whatever N.
 *
 * What may not be separated is kept together. Units that share a cold result
 * (an identical prompt under identical numerics, grid and decode length:
 * coldcache.h) or a policy's cache directory (disk-anchor's checkpoint files)
 * form a group; one shard runs a whole group in spec order, so its rows are
 * those of the unsharded run and no cold prefill is computed twice. A group
 * is split into its units (its cache-directory sets stay whole) only when
 * that shortens the longest shard by at least HX_PLAN_MIN_GAIN; each part
 * then computes the cold results it needs (CPU spent twice: a few percent of
 * wall time is not worth it).
 *
 * The cost of a unit is modeled, never measured: the FLOPs of its cold and
 * reused prefills, decode steps and teacher-forced responses (the engine's
 * cost model), times --repeat, priced at the reference calibration of its
 * configuration (--calibration FILE; an entry the file lacks is measured and
 * added first, under the file's lock, so that every shard plans at the same
 * prices), or at a nominal HX_PLAN_NOMINAL_GFLOPS without a file. The reused
 * prefill is modeled as a cache that works: every prompt reuses its longest
 * common prefix with an earlier prompt of the transcript (capped at that
 * prompt's length, floored to the grid under --align chunk); the cold policy
 * reuses nothing. A quirk that defeats reuse costs more than modeled.
 * Groups go to shards longest first, each to the least loaded shard (LPT).
 */
#ifndef HX_SHARD_H
#define HX_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "replay.h"

#define HX_PLAN_NOMINAL_GFLOPS 50.0  /* the price without a reference calibration */
#define HX_PLAN_MIN_GAIN       0.10  /* a group is split only to shorten the longest shard by 10% or more */

typedef struct hx_unit {
    int32_t        index;       /* 0-based place in the experiment (spec order) */
    char           label[384];  /* the variant, and " NAME=VALUE" for a sweep */
    hx_replay_opts o;           /* its replay (strings owned by the caller) */
    /* set by hx_plan_make */
    double         cold_ms;     /* modeled cost of its cold prefills and decodes, computed alone */
    double         reuse_ms;    /* ... of its reused prefills, decodes and teacher-forced responses */
    int32_t        group;       /* units that must share a shard have the same group */
    int32_t        shard;       /* 1..n_shards */
} hx_unit;

typedef struct hx_plan {
    int32_t n_units, n_shards;
    bool    priced;             /* costs modeled (always when n_shards > 1) */
    int32_t n_groups;           /* groups of units that share cold results or a cache directory */
    int32_t n_split;            /* groups split to shorten the longest shard */
    double *load_ms;            /* (n_shards) modeled cost of each shard */
    double  total_ms;           /* their sum */
    char    price[512];         /* what the costs are priced at, in words */
    char    sha256[65];         /* digest of the plan: N, and every unit's place, label, inputs and shard */
} hx_plan;

/* Plans units u[0..n) over n_shards shards: sets u[i].shard (and, when
 * price or n_shards > 1, the costs and groups), p->load_ms and p->sha256.
 * calibration: the reference file the runs are priced at, or NULL. ENG_OK, or
 * an error with a message naming the file (an input that cannot be read, a
 * malformed calibration file, out of memory). */
int  hx_plan_make(hx_unit *u, int32_t n, int32_t n_shards, bool price, const char *calibration, hx_plan *p,
                  char *err, size_t errlen);
/* The plan as text: one line per shard (units, modeled cost, its ratio to
 * the mean), then one per unit (shard, group, costs, label); each line starts
 * with '#' so the replay lines that follow stay the only others. */
void hx_plan_print(FILE *f, const hx_unit *u, int32_t n, const hx_plan *p, const char *experiment,
                   const char *scale);
void hx_plan_free(hx_plan *p);  /* accepts NULL and zeroed */

/* Parses "K/N" (1 <= K <= N <= 4096): ENG_OK or ENG_ERR_ARG. */
int  hx_shard_parse(const char *s, int32_t *k, int32_t *n);

#endif /* HX_SHARD_H */
