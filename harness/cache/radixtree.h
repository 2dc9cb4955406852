/*
 * harness/cache/radixtree.h: SGLang's radix tree over token ids
 * (python/sglang/srt/mem_cache/radix_cache.py), as a data structure without
 * KV: edges labelled by token runs, matches rounded down to whole pages,
 * nodes split where a match or an insertion ends inside an edge, and LRU
 * eviction of unlocked leaves.
 *
 *   match(key):   the longest prefix of key, in whole pages, present in the
 *                 tree; when it ends inside an edge the node is split there
 *                 (SGLang's _split_node: the new upper node takes the prefix,
 *                 the old node keeps the rest and its children), so the match
 *                 ends on a node boundary; every node on the path is touched.
 *   insert(key):  walks the same way, splitting where the key leaves an edge,
 *                 and hangs the rest of the key (if any) under the last node as
 *                 one new leaf; returns how much of the key was present.
 *   evict(n):     removes unlocked leaves whole, in the tree's eviction order
 *                 (evict.h: lru, least recently touched first, by default;
 *                 SGLang's lfu and fifo strategies; s3fifo), until n tokens
 *                 are gone or none is left (a parent left without children
 *                 becomes a candidate).
 *   lock(node):   protects the node and its ancestors from eviction (SGLang's
 *                 inc_lock_ref while a request uses the prefix).
 *
 * Each node carries the policy's payload (data). On a split the policy's
 * split callback gives the new upper node its payload from the old node's
 * (what the prefix's rows need); on removal the drop callback frees it.
 *
 * Positions: a node's key covers [start, start + len) of every sequence
 * through it. The root has len 0. A node's identity (ident) is the chained
 * hash of its path's pages (blockpool.h's hx_block_hash, page by page from
 * the root), so equal identities are equal paths: S3-FIFO's ghost keys.
 * Touches (a walk's stamp) and hits (every node of a match's path) feed the
 * eviction order.
 *
 * The same code serves replay (keys are token ids, page = the page size)
 * and simulate (keys are the words of trace block ids, page = the words of
 * one policy block; cache/policies/radix.c).
 *
 * Workload: hundreds of nodes, keys of thousands of tokens in replay; up to
 * a million nodes in simulate; children are found by a linear scan of their
 * first page.
 */
#ifndef HX_RADIXTREE_H
#define HX_RADIXTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evict.h"

typedef struct hx_rnode {
    struct hx_rnode  *parent;
    struct hx_rnode **kids;
    int32_t           n_kids, cap_kids;
    int32_t          *key;          /* (len) token ids of this edge */
    int32_t           len;
    int32_t           start;        /* position of key[0] */
    uint64_t          last_access;  /* touch stamp; larger is more recent */
    uint64_t          ident;        /* chained hash of the path's pages (0 for the root) */
    int32_t           eid;          /* its entry in the eviction order (-1 for the root) */
    int32_t           lock;
    void             *data;         /* the policy's payload */
} hx_rnode;

typedef struct hx_radix hx_radix;

/* upper (new, covering the first part) was split off lower (the rest, which
 * keeps its children and its own data); set upper->data. */
typedef void (*hx_radix_split_fn)(void *ud, hx_rnode *upper, hx_rnode *lower);
/* node is about to be removed (eviction or free); free node->data. */
typedef void (*hx_radix_drop_fn)(void *ud, hx_rnode *node);

/* page >= 1 tokens; lru; NULL on OOM. */
hx_radix *hx_radix_new(int32_t page, hx_radix_split_fn on_split, hx_radix_drop_fn on_drop, void *ud);
/* The same with an eviction order (evict.h) and the capacity in tokens that
 * s3fifo's queue fractions refer to (0: unbounded). */
hx_radix *hx_radix_new_evict(int32_t page, hx_evict_kind kind, int64_t capacity, hx_radix_split_fn on_split,
                             hx_radix_drop_fn on_drop, void *ud);
void      hx_radix_free(hx_radix *t);  /* drops every node; accepts NULL */
hx_rnode *hx_radix_root(hx_radix *t);
int32_t   hx_radix_page(const hx_radix *t);

/* The matched length (a multiple of the page, <= n) and in *last the node
 * ending there (the root for 0). Splits and touches as described above.
 * -1 on OOM (the tree is unchanged). */
int32_t hx_radix_match(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **last);
/* The length of key[0, n) (rounded down to whole pages) present in the tree,
 * without splitting, touching or counting anything (a router's question). */
int32_t hx_radix_peek(const hx_radix *t, const int32_t *key, int32_t n);
/* Inserts key[0, n) (n rounded down to the page). Returns the length already
 * present, with *leaf the node ending at n (a new leaf when anything was
 * added, whose data is NULL for the caller to set), or -1 on OOM. */
int32_t hx_radix_insert(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **leaf);
/* Splits node so that a node ends at absolute position pos (start < pos <
 * start + len); returns the node ending at pos (node itself when it already
 * ends there), or NULL on OOM. */
hx_rnode *hx_radix_split_at(hx_radix *t, hx_rnode *node, int32_t pos);

void    hx_radix_lock(hx_radix *t, hx_rnode *node);    /* node and its ancestors */
void    hx_radix_unlock(hx_radix *t, hx_rnode *node);
/* Evicts unlocked leaves, least recently touched first, until at least
 * n_tokens are removed or no unlocked leaf is left; returns tokens removed. */
int64_t hx_radix_evict(hx_radix *t, int64_t n_tokens);

int64_t hx_radix_tokens(const hx_radix *t);  /* tokens in the tree */
int32_t hx_radix_nodes(const hx_radix *t);   /* nodes, root excluded */
int64_t hx_radix_evicted(const hx_radix *t); /* tokens evicted so far */
/* The path from the root's child down to node, into out (cap entries);
 * returns its length (0 for the root). */
int32_t hx_radix_path(hx_rnode *node, hx_rnode **out, int32_t cap);
/* Visits every node but the root, parents before children. */
void    hx_radix_each(hx_radix *t, void (*fn)(void *ud, hx_rnode *n), void *ud);
/* Checks the invariants: every node starts where its parent ends, holds whole
 * pages, hangs under its parent, differs from its siblings in its first page
 * and carries its path's identity; the token and node counts; the candidates
 * of the eviction order are exactly the unlocked leaves. ENG_OK, or
 * ENG_ERR_FORMAT with the first broken one in err. */
int     hx_radix_check(hx_radix *t, char *err, size_t errlen);

#endif /* HX_RADIXTREE_H */
