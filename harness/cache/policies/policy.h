/*
 * harness/cache/policies/policy.h: the cache policy interface: the system under test.
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
 * Policies mirror real servers (docs/design.md): cold, slot-lcp (llama.cpp slots
 * with context checkpoints), disk-anchor (ds4-server disk checkpoints),
 * block-hash (vLLM's hashed block pool), radix (SGLang's radix tree). A bug
 * from an issue report is a named quirk of its policy, off by default.
 *
 * A new policy is one file under cache/policies/ that defines its
 * hx_policy_ops (with its options and quirks) and one line in the registry
 * of policy.c (docs/where-does-my-change-go.md).
 *
 * Requests in flight (kvreplay serve --parallel N): up to cfg.n_parallel
 * requests may stand between their acquire and their release at once. Each
 * holds its own sequence (no two open requests share one), and on_chunk and
 * release name the request by that sequence; what the policy shares between
 * requests (slots, a block pool, a tree, checkpoint files, a prompt cache)
 * is shared by all of them, and what a request adds becomes visible to the
 * others when it adds it (slot-lcp's and disk-anchor's checkpoints at chunk
 * ends, block-hash's blocks and radix's nodes at its release). A replay has
 * one request in flight: n_parallel 1.
 *
 * The replay loop zeroes hx_acquire and hx_release before each call, so a
 * policy sets only the figures it has. A policy that cannot do what it
 * should (a corrupt stored entry, a store that fails) never fails the
 * request: it counts it (n_quarantined, n_fallbacks, n_store_failed, stored
 * per request) and says it once on stderr; the replay's summary totals them.
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

#include "evict.h"
#include "options.h"
#include "model.h"

/* A quirk: a bug from an issue report, switched on by name (--quirk NAME).
 * A policy lists its quirks in its own file; the quirk at index k of that
 * list is bit (1u << k) of hx_policy_config.quirks. */
typedef struct hx_quirk {
    const char *name;    /* "full-reprocess" */
    const char *help;    /* what it does, one line */
    const char *source;  /* the report it reproduces, e.g. "seeds/002" */
} hx_quirk;

/* Parses a comma-separated quirk list for policy; unknown names or quirks of
 * another policy are ENG_ERR_ARG with a message naming them. "" -> 0. */
int         hx_quirks_parse(const char *policy, const char *list, unsigned *out, char *err, size_t errlen);
/* Canonical comma-separated names of policy's quirk bits in q (static buffer). */
const char *hx_quirks_str(const char *policy, unsigned q);

/* Policy options given on the command line (or set by a program), by name,
 * until the policy that declares them is created. A policy ignores the
 * options of other policies, so one command line can name them all. Each
 * name holds one value (a later one replaces an earlier one). */
#define HX_POLICY_ARGS_MAX 32
typedef struct hx_policy_arg {
    const char *name;   /* "--cache-ram" */
    const char *text;   /* as given ("256"), or NULL when set as a number */
    int64_t     num;    /* set as a number: in the field's own unit (bytes for a MiB option) */
} hx_policy_arg;
typedef struct hx_policy_args {
    int32_t       n;
    hx_policy_arg a[HX_POLICY_ARGS_MAX];
} hx_policy_args;

/* If argv[*i] is an option of any registered policy, checks its value,
 * records it in args (a later one replaces an earlier one), advances *i past
 * the value and returns 1; 0 when it is no policy's option; ENG_ERR_ARG
 * (err names the flag) for a bad value. */
int  hx_policy_args_take(hx_policy_args *args, int argc, char **argv, int *i, char *err, size_t errlen);
/* For programs and tests: sets option name (a policy's "--name") to text, as
 * if given on the command line (checked when the policy is created), or to a
 * number in its field's own unit (bytes for a MiB option). ENG_ERR_ARG when
 * no policy declares name, args is full, or a number cannot set it. text is not copied. */
int  hx_policy_args_set(hx_policy_args *args, const char *name, const char *text);
int  hx_policy_args_set_num(hx_policy_args *args, const char *name, int64_t num);
/* Writes the value of option name, as the first policy that declares it
 * parses it, into field (its type); false (field untouched) when not given. */
bool hx_policy_args_read(const hx_policy_args *args, const char *name, void *field);

typedef struct hx_policy_config {
    const eng_model   *model;
    eng_prefill_params pp;            /* chunk, align, ubatch */
    bool               cap_prompt;    /* cap reuse at the cached prompt's length */
    int32_t            n_ctx;         /* positions per sequence */
    unsigned           quirks;        /* bits of the policy's own quirk list */
    bool               resume;        /* the run completes an interrupted one (keep stored state) */
    int32_t            n_parallel;    /* requests in flight at once at most (0 or 1: one; serve's --parallel) */
    const void        *opts;          /* the policy's own options struct (its defaults, then the
                                         hx_policy_args that name its options); set by hx_policy_create */
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
    int32_t        n_quarantined;   /* stored entries found unusable (corrupt) and set aside */
    int32_t        n_fallbacks;     /* 1 when a shorter entry was used after a longer one failed */
    char           note[256];    /* why the reuse was what it was, e.g. a quirk's log line */
} hx_acquire;

/* What release reports. */
typedef struct hx_release {
    int32_t n_stored;      /* checkpoints/files written for this request */
    int64_t bytes_stored;
    double  store_ms;
    double  anchor_ms;     /* disk-anchor: time spent writing the anchor (0 when none) */
    int32_t anchor_pos;    /* disk-anchor: position of the anchor written, 0 when none */
    int64_t bytes_held;    /* bytes the cache holds after this request (-1: not reported) */
    int64_t entries_held;  /* its entries then: blocks, tree nodes, checkpoints, files (-1: not reported) */
    int32_t n_store_failed;/* checkpoints that could not be stored (disk full, I/O error, memory) */
} hx_release;

/* What one request asks of the policy: llama-server's per-request fields,
 * which `kvreplay serve` passes on (a replayed request asks nothing). */
typedef struct hx_acquire_hint {
    int32_t id_slot;   /* the slot to serve it from, -1: the policy chooses (llama-server's id_slot) */
    bool    no_reuse;  /* reuse nothing for this request, keep what it computes as usual
                          (llama-server's cache_prompt: false: n_past = 0, the slot then holds it) */
} hx_acquire_hint;

typedef struct hx_policy hx_policy;
struct hx_run_meta;  /* store.h */

/* A policy: one file under cache/policies/ defines one of these, and one line
 * of policy.c's registry lists it. Its options and quirks appear in
 * `kvreplay replay --help` and are parsed by the replay options. */
typedef struct hx_policy_ops {
    const char *name;             /* --policy NAME */
    const hx_option *options;     /* its options ({0}-terminated), fields of its own struct; or NULL */
    const void *defaults;         /* that struct with every default (opts_size bytes) */
    size_t      opts_size;
    const hx_quirk *quirks;       /* its quirks ({0}-terminated, at most 32), or NULL */
    /* Records its settings in the run's columns (threshold, n_slots, cache_dir, ...); or NULL. */
    void (*record)(const void *opts, struct hx_run_meta *meta);
    /* Records what it derived at creation (an effective block size, ...), from its state; or NULL. */
    void (*record_state)(const void *state, struct hx_run_meta *meta);
    int  (*create)(const hx_policy_config *cfg, void **state, char *err, size_t errlen);
    /* stable_end: token position where the stable prefix (system + tools) ends, or -1. */
    int  (*acquire)(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out);
    void (*on_chunk)(void *state, eng_seq *s, int32_t n_tokens);
    int  (*release)(void *state, eng_seq *s, int32_t n_prompt, hx_release *out);
    void (*destroy)(void *state);
    /* The request's hint (hx_acquire_hint), for the next acquire only; or NULL (a hint asking
     * something is then refused by hx_policy_acquire). A hint naming a slot that a request in
     * flight holds makes that acquire fail with ENG_ERR_RANGE: the caller waits for the slot. */
    void (*hint)(void *state, const hx_acquire_hint *h);
    /* llama-server's slots, for a policy that has them (GET /slots, POST /slots/ID?action=erase),
     * or NULL: how many; tokens slot i holds; erase slot i (its sequence and checkpoints),
     * returning the tokens erased, or ENG_ERR_RANGE while a request in flight holds it. */
    int32_t (*n_slots)(const void *state);
    int64_t (*slot_tokens)(const void *state, int32_t slot);
    int64_t (*erase)(void *state, int32_t slot);
    /* Token-only mode (simulate), or NULL when the policy has none. */
    const struct hx_sim_ops *sim;
} hx_policy_ops;

struct hx_policy {
    const hx_policy_ops *ops;
    void                *state;
    hx_policy_config     cfg;
    void                *opts;    /* the policy's options struct (cfg.opts), owned */
};

/* Creates the policy named name ("cold", "slot-lcp", "block-hash", ...), its
 * options being its defaults overridden by the args that name them (args may
 * be NULL; cfg->opts is ignored). Returns ENG_OK, ENG_ERR_ARG (unknown name
 * or bad config, message in err) or ENG_ERR_NOMEM. */
int  hx_policy_create(const char *name, const hx_policy_config *cfg, const hx_policy_args *args, hx_policy **out,
                      char *err, size_t errlen);
void hx_policy_destroy(hx_policy *p);  /* accepts NULL */
/* Records p's settings in meta's policy columns (nothing for a policy without any). */
void hx_policy_record(const hx_policy *p, struct hx_run_meta *meta);
const char *hx_policy_names(void);     /* "cold, slot-lcp, disk-anchor, block-hash, radix" (static) */
/* The registered policies, in registry order, NULL-terminated. */
extern const hx_policy_ops *const hx_policies[];
/* --help lines from the registry: every policy's options ("slot-lcp: ..."),
 * and --quirk with every quirk (name, policy, source, what it does). */
void hx_policy_help(FILE *f);
void hx_policy_quirks_help(FILE *f);

/* acquire through p with the request's hint h (NULL: none): ENG_ERR_UNSUPPORTED
 * when h asks something (a slot, no reuse) of a policy without .hint, else
 * what acquire returns. */
int  hx_policy_acquire(hx_policy *p, const int32_t *tokens, int32_t n, int32_t stable_end, const hx_acquire_hint *h,
                       hx_acquire *out);
/* The policy's slots: 0 when it has none; tokens slot i holds (-1: no such
 * slot); erase slot i: tokens erased, ENG_ERR_RANGE (no such slot, or busy) or
 * ENG_ERR_UNSUPPORTED (no slots). */
int32_t hx_policy_n_slots(const hx_policy *p);
int64_t hx_policy_slot_tokens(const hx_policy *p, int32_t slot);
int64_t hx_policy_erase(hx_policy *p, int32_t slot);

/* Shared reuse rule (see the file comment). lcp: common prefix with the
 * cached entry; n_cached_prompt: that entry's prompt length; n: new prompt length. */
int32_t hx_policy_reuse_len(const hx_policy_config *cfg, int32_t lcp, int32_t n_cached_prompt, int32_t n);
/* Length of the common prefix of two token arrays. */
int32_t hx_lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb);

// ----------------------------------------------------------------------------
// Token-only mode: `kvreplay simulate` runs the same policies over the block
// ids of a production trace (docs/traces.md). Each policy file that supports
// it implements the sim_* functions below with the structures its replay mode
// uses (blockpool, radixtree, its slots, its checkpoint placement), keyed by
// block ids instead of token ids. A trace block id stands for its block's
// tokens; a request is its leading blocks; a hit is a count of leading blocks.

/* A request as simulate hands it over: n_blocks trace blocks, each a 64-bit
 * id as two int32 words (low, high) in words[2 * n_blocks]. Equal ids are
 * equal blocks; the caches chain them (block i counts only while every block
 * before it matched), so Mooncake's prefix hashes and Bailian's per-block
 * hashes mean the same thing here. */
typedef struct hx_sim_req {
    const int32_t *words;
    int32_t        n_blocks;
    int32_t        n_tokens;   /* its input_length */
    int64_t        index;      /* its place in the trace (provenance: hx_sim_access.origin) */
} hx_sim_req;

#define HX_SIM_WORDS 2  /* int32 words per trace block id */

typedef struct hx_sim_config {
    int32_t       block_tokens;     /* tokens per trace block (Mooncake 512, Bailian 16) */
    int64_t       block_size;       /* the policy's block in tokens: a multiple of block_tokens
                                       (0: the trace's block) */
    int64_t       capacity_tokens;  /* what the cache may hold (0: unbounded) */
    hx_evict_kind evict;
    unsigned      quirks;           /* bits of the policy's own quirk list */
    const eng_model_info *model;    /* the model's shape when known (quirks that depend on it), or NULL */
    const void   *opts;             /* the policy's options struct (set by hx_sim_policy_create) */
} hx_sim_config;

/* What one access did: look the request up, count its hit, store what the
 * policy stores (all counts in trace blocks). */
typedef struct hx_sim_access {
    int32_t hit_blocks;      /* leading blocks found */
    int64_t origin;          /* the request (trace index) that computed the deepest block hit, -1 */
    int32_t stored_blocks;   /* blocks newly stored */
    int64_t evicted_blocks;  /* blocks evicted by this access */
    int64_t held_blocks;     /* blocks held after it */
} hx_sim_access;

typedef struct hx_sim_ops {
    int     (*create)(const hx_sim_config *cfg, void **state, char *err, size_t errlen);
    /* Leading blocks held for r, changing nothing (a cache-aware router's question). */
    int32_t (*peek)(void *state, const hx_sim_req *r);
    int     (*access)(void *state, const hx_sim_req *r, hx_sim_access *out);
    void    (*destroy)(void *state);
    /* The structures' invariants and the capacity (tests): ENG_OK or ENG_ERR_FORMAT with err. */
    int     (*check)(void *state, char *err, size_t errlen);
} hx_sim_ops;

/* A policy in token-only mode. */
typedef struct hx_sim_policy {
    const hx_policy_ops *ops;
    const hx_sim_ops    *sim;
    void                *state;
    void                *opts;
    hx_sim_config        cfg;
} hx_sim_policy;

/* Creates policy name in token-only mode, its options being its defaults
 * overridden by args (may be NULL). ENG_ERR_ARG (unknown policy, one without
 * a token-only mode, a bad setting; message in err), ENG_ERR_NOMEM. */
int  hx_sim_policy_create(const char *name, const hx_sim_config *cfg, const hx_policy_args *args,
                          hx_sim_policy **out, char *err, size_t errlen);
void hx_sim_policy_destroy(hx_sim_policy *p);  /* accepts NULL */
/* Leading trace blocks shared by a and b (na, nb blocks). */
int32_t hx_sim_lcp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb);

#endif /* HX_POLICY_H */
