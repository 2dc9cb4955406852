/*
 * harness/cache/diskcache.h: checkpoint files on disk, keyed by token prefix.
 *
 * The storage layer of the `disk-anchor` cache policy (ds4-server's disk KV
 * checkpoints, seeds/000_*). A checkpoint is an opaque payload (the engine's
 * serialized sequence state from eng_seq_serialize; never interpreted here)
 * that covers the first n_tokens tokens of some prompt, for one model and
 * numerics fingerprint (eng_model_fingerprint). Each checkpoint is one file
 * in the cache directory:
 *
 *   DIR/<32 hex digits of the key>.kv        a complete, checksummed file
 *   DIR/<name>.kv.tmp.<pid>.<n>              a write in progress (never read),
 *                                            locked by its writer until the rename
 *   DIR/quarantine/<name>.kv.corrupt-<n>     a file that failed verification
 *
 * Key = XXH3-128 of (prefix hash 16 bytes || fingerprint 8 || n_tokens 4),
 * all little-endian, where prefix hash = XXH3-128 (seed 0) of the tokens
 * tokens[0..n_tokens) as int32 little-endian. The file layout (a 72-byte
 * header, then the payload) is in docs/disk-cache.md.
 *
 * Invariants:
 * - lookup never returns a payload whose header checksum, fields (against
 *   the expected key, length, fingerprint and prefix hash), size or payload
 *   checksum fail: such a file is moved to quarantine/ and skipped;
 * - a write is atomic (temp file, fsync, rename, fsync of the directory), so
 *   a crash leaves either no file or a complete one; temp files are never
 *   looked up; each is created (O_EXCL) and flock'ed by its writer until
 *   the rename, and hx_diskcache_open deletes only those no writer holds
 *   (left by a crash), so processes sharing a directory never delete each
 *   other's writes in flight;
 * - the bytes of indexed files (header + payload) never exceed the budget:
 *   the least recently used entries are evicted before a write, and a file
 *   larger than the whole budget is not stored.
 *
 * LRU: an in-memory index of (key, n_tokens, fingerprint, bytes, last use)
 * is built at open from the headers alone. Every store and every hit takes a
 * strictly increasing stamp (max(realtime ns, previous stamp + 1)) that is
 * also written as the file's mtime, so the LRU order survives a reopen:
 * open orders the entries by mtime (ties by name).
 *
 * Workload: a few to a few thousand files of KB to GB each. Several
 * processes may share a directory (docs/disk-cache.md: each one's index
 * and budget cover the files it found at open and the ones it wrote; a
 * file another process evicted is a miss, never an error). A handle is not
 * thread-safe.
 *
 * Usage:
 *   hx_diskcache *dc;
 *   if (hx_diskcache_open("/tmp/kv", 1 << 30, &dc, err, sizeof err)) fail(err);
 *   hx_diskcache_store(dc, fp, toks, 2048, blob, blob_size, NULL, err, sizeof err);
 *   hx_diskcache_hit hit;
 *   hx_diskcache_lookup(dc, fp, prompt, n_prompt, n_prompt - 1, &hit, err, sizeof err);
 *   if (hit.n_tokens > 0) { restore(hit.payload, hit.payload_size); }
 *   hx_diskcache_hit_free(&hit);
 *   hx_diskcache_close(dc);
 */
#ifndef HX_DISKCACHE_H
#define HX_DISKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HX_DISKCACHE_MAGIC       "KVRCKPT1"
#define HX_DISKCACHE_VERSION     1u
#define HX_DISKCACHE_HEADER_SIZE 72u
#define HX_DISKCACHE_QUARANTINE  "quarantine"

/* Byte offsets of the header fields (all little-endian), for docs and
 * fault-injection tests. */
enum hx_diskcache_field {
    HX_DISKCACHE_OFF_MAGIC        = 0,   /* 8 bytes "KVRCKPT1" */
    HX_DISKCACHE_OFF_VERSION      = 8,   /* u32 */
    HX_DISKCACHE_OFF_HEADER_SIZE  = 12,  /* u32, 72 */
    HX_DISKCACHE_OFF_N_TOKENS     = 16,  /* i32, > 0 */
    HX_DISKCACHE_OFF_RESERVED     = 20,  /* u32, 0 */
    HX_DISKCACHE_OFF_FINGERPRINT  = 24,  /* u64 */
    HX_DISKCACHE_OFF_PREFIX_HASH  = 32,  /* u64 low64, u64 high64 */
    HX_DISKCACHE_OFF_PAYLOAD_SIZE = 48,  /* u64 */
    HX_DISKCACHE_OFF_PAYLOAD_SUM  = 56,  /* u64 XXH3-64 of the payload */
    HX_DISKCACHE_OFF_HEADER_SUM   = 64,  /* u64 XXH3-64 of bytes [0, 64) */
};

/* Non-error outcomes of hx_diskcache_store (errors are negative eng_status). */
enum hx_diskcache_store_result {
    HX_DISKCACHE_STORED      = 0,  /* written (== ENG_OK) */
    HX_DISKCACHE_PRESENT     = 1,  /* same key already indexed: touched, nothing written */
    HX_DISKCACHE_OVER_BUDGET = 2,  /* file larger than the budget: nothing written */
};

typedef struct hx_diskcache hx_diskcache;

/* Counters since open (entries and bytes_on_disk are current values). */
typedef struct hx_diskcache_stats {
    int64_t lookups;          /* hx_diskcache_lookup calls */
    int64_t hits;             /* lookups that returned a payload */
    int64_t misses;           /* lookups that returned nothing */
    int64_t fallbacks;        /* hits on a shorter entry after a longer one failed verification */
    int64_t quarantined;      /* files moved aside (at open or at lookup) */
    int64_t stores;           /* files written */
    int64_t stores_present;   /* stores skipped: key already present */
    int64_t stores_too_large; /* stores skipped: file larger than the budget */
    int64_t evictions;        /* files deleted to respect the budget */
    int64_t temps_removed;    /* stale temp files deleted at open */
    int64_t bytes_read;       /* header + payload bytes read by lookups */
    int64_t bytes_written;    /* header + payload bytes written by stores */
    int64_t bytes_evicted;
    int64_t entries;          /* files indexed now */
    int64_t bytes_on_disk;    /* their header + payload bytes now */
    int64_t budget_bytes;
} hx_diskcache_stats;

/* A lookup result: n_tokens == 0 and payload == NULL on a miss. */
typedef struct hx_diskcache_hit {
    int32_t n_tokens;
    void   *payload;       /* malloc'd, owned by the caller (hx_diskcache_hit_free) */
    size_t  payload_size;
} hx_diskcache_hit;

/* One indexed file, as listed by hx_diskcache_list. */
typedef struct hx_diskcache_entry {
    char     name[40];       /* "<32 hex>.kv", relative to the cache dir */
    int32_t  n_tokens;
    uint64_t fingerprint;
    uint64_t prefix_hash_lo, prefix_hash_hi;
    uint64_t file_bytes;     /* header + payload */
    uint64_t payload_bytes;
    int64_t  last_use_ns;    /* LRU stamp (also the file's mtime) */
} hx_diskcache_entry;

/* Opens (creating it and its parents when missing, mode 0755) the cache
 * directory dir with a byte budget (> 0). Deletes stale temp files (those
 * no writer holds locked: a write in flight in another process is kept), reads
 * every *.kv header (not payloads) into the index, quarantines files whose
 * header is invalid, and evicts LRU entries while the total exceeds the
 * budget. Other files are left alone. On success *out owns the handle (free
 * with hx_diskcache_close); on failure *out is NULL and err says why.
 * Returns ENG_OK, ENG_ERR_ARG (NULL dir/out, budget <= 0), ENG_ERR_IO,
 * ENG_ERR_NOMEM. */
int hx_diskcache_open(const char *dir, int64_t budget_bytes, hx_diskcache **out,
                      char *err, size_t errlen);

/* Closes the handle; files stay on disk. Accepts NULL. */
void hx_diskcache_close(hx_diskcache *dc);

/* Stores payload[0..payload_size) as the checkpoint of tokens[0..n_tokens)
 * (n_tokens > 0) for fingerprint. The payload is copied to disk, never kept.
 * Evicts LRU entries first until the new file fits the budget, then writes
 * atomically. *bytes_written (may be NULL) gets the file's bytes, 0 when
 * nothing was written. Returns HX_DISKCACHE_STORED (ENG_OK),
 * HX_DISKCACHE_PRESENT (same key indexed: its LRU stamp is refreshed),
 * HX_DISKCACHE_OVER_BUDGET, or ENG_ERR_ARG / ENG_ERR_IO / ENG_ERR_NOMEM with
 * err set (the cache stays consistent: no temp file is left behind). */
int hx_diskcache_store(hx_diskcache *dc, uint64_t fingerprint, const int32_t *tokens,
                       int32_t n_tokens, const void *payload, size_t payload_size,
                       size_t *bytes_written, char *err, size_t errlen);

/* Finds the longest indexed checkpoint for fingerprint whose token prefix
 * equals prompt[0..n) for some n <= min(max_tokens, n_prompt) (pass
 * n_prompt - 1 to keep at least one token to prefill). Hashes the prompt
 * once, incrementally, digesting at each length the index knows of, so the
 * cost is O(n_prompt + candidates). The winner's file is read and fully
 * verified; a file that fails is quarantined and the next shorter candidate
 * is tried. On a hit, hit->payload is a malloc'd copy the caller frees
 * (hx_diskcache_hit_free) and the entry becomes most recently used; on a
 * miss *hit is {0, NULL, 0}. Corrupt files are not errors: returns ENG_OK
 * for hits and misses, ENG_ERR_ARG (NULL dc/hit, n_prompt < 0, NULL prompt
 * with n_prompt > 0), ENG_ERR_IO (a read failed for another reason than
 * truncation or a vanished file), ENG_ERR_NOMEM. */
int hx_diskcache_lookup(hx_diskcache *dc, uint64_t fingerprint, const int32_t *prompt,
                        int32_t n_prompt, int32_t max_tokens, hx_diskcache_hit *hit,
                        char *err, size_t errlen);

/* A check of a payload that passed every checksum, run by
 * hx_diskcache_lookup_checked before the payload is returned (the policy's
 * eng_seq_deserialize, say). Returns NULL to accept it, or a short reason
 * ("state blob: checksum") to reject it: the file is then quarantined like
 * a corrupt one and the lookup falls back to the next shorter match. */
typedef const char *(*hx_diskcache_check)(void *ctx, const void *payload, size_t payload_size,
                                          int32_t n_tokens);

/* hx_diskcache_lookup with a check of each candidate payload (check NULL:
 * none). A rejected file counts in stats.quarantined, and a hit after it in
 * stats.fallbacks; its key is no longer indexed, so the next store of that
 * prefix writes it again. */
int hx_diskcache_lookup_checked(hx_diskcache *dc, uint64_t fingerprint, const int32_t *prompt,
                                int32_t n_prompt, int32_t max_tokens, hx_diskcache_check check,
                                void *ctx, hx_diskcache_hit *hit, char *err, size_t errlen);

/* "NAME: reason" of the latest file quarantined by this handle (at open or
 * lookup), or NULL when none was. Owned by the handle. */
const char *hx_diskcache_last_quarantine(const hx_diskcache *dc);

/* Frees hit->payload and zeroes *hit. Accepts NULL. */
void hx_diskcache_hit_free(hx_diskcache_hit *hit);

/* True when a checkpoint of exactly tokens[0..n_tokens) for fingerprint is
 * indexed. Reads no file, does not verify it and does not touch the LRU.
 * False for NULL dc/tokens or n_tokens <= 0. */
bool hx_diskcache_contains(const hx_diskcache *dc, uint64_t fingerprint,
                           const int32_t *tokens, int32_t n_tokens);

/* Current counters; NULL dc gives zeros. */
hx_diskcache_stats hx_diskcache_get_stats(const hx_diskcache *dc);

/* The indexed entries, least recently used first, in a malloc'd array the
 * caller frees (NULL when there are none). Returns ENG_OK, ENG_ERR_ARG or
 * ENG_ERR_NOMEM. */
int hx_diskcache_list(const hx_diskcache *dc, hx_diskcache_entry **out, size_t *n_out);

/* The cache directory as given to open (owned by the handle). */
const char *hx_diskcache_dir(const hx_diskcache *dc);

/* The prefix hash and the key of tokens[0..n_tokens) for fingerprint, as
 * stored in headers and file names; name (>= 36 bytes, may be NULL) gets
 * "<32 hex>.kv". For tests and tools. */
void hx_diskcache_key(uint64_t fingerprint, const int32_t *tokens, int32_t n_tokens,
                      uint64_t prefix_hash[2], uint64_t key[2], char *name);

/* Test hook: simulates a crash during or after the temp write of a store.
 * Writes the first min(max_bytes, file size) bytes of the file that
 * hx_diskcache_store would write into its temp file (fsync'd), then returns
 * without renaming or indexing it. tmp_path (may be NULL) receives the temp
 * file's path. Returns ENG_OK, ENG_ERR_ARG, ENG_ERR_IO or ENG_ERR_NOMEM. */
int hx_diskcache_write_tmp_only(hx_diskcache *dc, uint64_t fingerprint, const int32_t *tokens,
                                int32_t n_tokens, const void *payload, size_t payload_size,
                                size_t max_bytes, char *tmp_path, size_t tmp_path_len,
                                char *err, size_t errlen);

#endif /* HX_DISKCACHE_H */
