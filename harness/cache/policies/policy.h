/*
 * harness/policies/policy.h: the cache policy interface: the system under test.
 *
 * A policy decides, for each incoming request, what state to reuse and what
 * to keep afterwards. The replay loop drives it in this order per request:
 *
 *   acquire(tokens)  -> a sequence holding a reusable prefix of the prompt
 *                       (n_reused tokens), owned by the policy;
 *   on_chunk(...)    -> called by eng_prefill at each chunk end while the
 *                       rest of the prompt is prefilled into that sequence
 *                       (policies take grid checkpoints here);
 *   release(n_prompt)-> after the prompt, the greedy decode (rolled back) and
 *                       the teacher-forced recorded response: the sequence
 *                       holds prompt + response; the policy keeps what it keeps.
 *
 * Policies mirror real servers (DESIGN.md): cold, slot-lcp (llama.cpp slots
 * with context checkpoints), disk-anchor (ds4-server disk checkpoints). A bug
 * from an issue report is a named quirk of its policy, off by default.
 *
 * Reuse rules shared by every policy (hx_policy_reuse_len): with align
 * chunk the reuse boundary is floored to the grid and, with cap_prompt,
 * capped at the cached entry's prompt length (tokens written by decode are
 * off the grid); at least one prompt token is always prefilled so the last
 * prompt token's logits exist. With align none the boundary is the raw
 * common prefix (llama.cpp), still leaving one token to prefill.
 */
#ifndef HX_POLICY_H
#define HX_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* Quirks: bugs from the issue reports, switched on by name (--quirk). */
enum hx_quirk {
    HX_QUIRK_FULL_REPROCESS     = 1u << 0,  /* slot-lcp, seed 002: FULL-only memory forces re-processing */
    HX_QUIRK_SWA_THRESHOLD      = 1u << 1,  /* slot-lcp, seed 004: SWA pos_min threshold applied to recurrent memory */
    HX_QUIRK_OFFGRID_CHECKPOINT = 1u << 2,  /* slot-lcp: checkpoints at the prompt end, off the grid */
    HX_QUIRK_ANCHOR_COLD_ONLY   = 1u << 3,  /* disk-anchor, seed 000: anchor written only when nothing was cached */
};

/* Parses a comma-separated quirk list for policy; unknown names or quirks of
 * another policy are ENG_ERR_ARG with a message naming them. "" -> 0. */
int         hx_quirks_parse(const char *policy, const char *list, unsigned *out, char *err, size_t errlen);
/* Canonical comma-separated names of the bits in q (static buffer). */
const char *hx_quirks_str(unsigned q);

typedef struct hx_policy_config {
    const eng_model   *model;
    eng_prefill_params pp;            /* chunk, align, ubatch */
    bool               cap_prompt;    /* cap reuse at the cached prompt's length */
    int32_t            n_ctx;         /* positions per sequence */
    unsigned           quirks;
    /* slot-lcp */
    int32_t            n_slots;       /* default 1 */
    double             sim_threshold; /* llama.cpp --slot-prompt-similarity, default 0.1 */
    int32_t            ctx_checkpoints;   /* max context checkpoints per slot (llama.cpp --ctx-checkpoints), default 8 */
    int32_t            checkpoint_every;  /* tokens between prefill checkpoints (multiple of C), 0 = only the last grid point */
    int64_t            cache_ram;         /* host prompt-cache budget in bytes (llama.cpp --cache-ram), 0 = off */
    /* disk-anchor */
    const char        *cache_dir;
    int64_t            cache_budget;      /* bytes */
    int32_t            waypoint_every;    /* tokens (multiple of C) */
    int32_t            anchor_tokens;     /* fixed anchor position, or -1: end of system + tools (stable_end) */
} hx_policy_config;

/* What acquire reports about the reuse decision (all figures stored per request). */
typedef struct hx_acquire {
    eng_seq       *seq;          /* positioned at n_reused tokens; owned by the policy */
    int32_t        n_reused;     /* prompt tokens whose state came from the cache */
    int32_t        lcp;          /* longest common prefix with the best cached entry */
    const int32_t *best;         /* that entry's tokens (valid until release), or NULL */
    int32_t        n_best;
    int32_t        slot;         /* slot index, -1 when not applicable */
    double         sim;          /* llama.cpp's sim_best: lcp / n_prompt */
    double         f_keep;       /* llama.cpp's f_keep: lcp / n_cached */
    int64_t        bytes_restored;  /* bytes copied/read to restore state */
    int32_t        n_checkpoints;   /* checkpoints the entry holds */
    char           note[256];    /* why the reuse was what it was, e.g. a quirk's log line */
} hx_acquire;

/* What release reports. */
typedef struct hx_release {
    int32_t n_stored;      /* checkpoints/files written for this request */
    int64_t bytes_stored;
    double  store_ms;
    double  anchor_ms;     /* disk-anchor: time spent writing the anchor (0 when none) */
    int32_t anchor_pos;    /* disk-anchor: position of the anchor written, 0 when none */
} hx_release;

typedef struct hx_policy hx_policy;

typedef struct hx_policy_ops {
    const char *name;
    int  (*create)(const hx_policy_config *cfg, void **state, char *err, size_t errlen);
    /* stable_end: token position where the stable prefix (system + tools) ends, or -1. */
    int  (*acquire)(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out);
    void (*on_chunk)(void *state, eng_seq *s, int32_t n_tokens);
    int  (*release)(void *state, eng_seq *s, int32_t n_prompt, hx_release *out);
    void (*destroy)(void *state);
} hx_policy_ops;

struct hx_policy {
    const hx_policy_ops *ops;
    void                *state;
    hx_policy_config     cfg;
};

/* Creates the policy named name ("cold", "slot-lcp", "disk-anchor").
 * Returns ENG_OK, ENG_ERR_ARG (unknown name or bad config, message in err). */
int  hx_policy_create(const char *name, const hx_policy_config *cfg, hx_policy **out, char *err, size_t errlen);
void hx_policy_destroy(hx_policy *p);  /* accepts NULL */
const char *hx_policy_names(void);     /* "cold, slot-lcp, disk-anchor" */

/* Shared reuse rule (see the file comment). lcp: common prefix with the
 * cached entry; n_cached_prompt: that entry's prompt length; n: new prompt length. */
int32_t hx_policy_reuse_len(const hx_policy_config *cfg, int32_t lcp, int32_t n_cached_prompt, int32_t n);
/* Length of the common prefix of two token arrays. */
int32_t hx_lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb);

extern const hx_policy_ops hx_policy_cold;
extern const hx_policy_ops hx_policy_slot_lcp;
extern const hx_policy_ops hx_policy_disk_anchor;

#endif /* HX_POLICY_H */
