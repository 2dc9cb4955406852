/*
 * tests/helpers/seqcheck.h: the bit-exactness checks every memory kind's
 * tests run (test_hybrid.c, test_rwkv7.c), through the public API.
 * Failures are cmocka failures naming the split.
 */
#ifndef KVR_TESTS_SEQCHECK_H
#define KVR_TESTS_SEQCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* The serialised state of s (caller frees). */
char *sc_blob(const eng_seq *s, size_t *n);
/* eng_seq_compare equal and the serialised bytes memcmp-identical. */
void sc_same_state(const eng_seq *a, const eng_seq *b, const char *what);

/* The invariant with checkpoints: for each chunk C of chunks and prompt
 * length n of ns, cold prefill of toks[0, n); then, for split points k
 * around the grid, a sequence that served toks[0, k) plus 5 tokens the
 * next prompt does not share restores its newest grid checkpoint at or
 * below k and prefills the rest: logits, state and two decode steps must be
 * memcmp-identical to cold. toks must hold max(ns) tokens; n_ctx is the
 * sequences' context. Returns the number of splits checked. */
int sc_invariant(const eng_model *m, const int32_t *toks, int32_t n_ctx, const int32_t *chunks, int n_chunks,
                 const int32_t *ns, int n_ns);

/* A checkpoint at k off the grid (C = 64), then the rest of toks[0, n) in
 * chunks cut at absolute multiples of C from there (the first one shorter
 * than cold's), for each k of ks. Returns how many of the n_ks splits end
 * with logits or state different from cold. */
int sc_off_grid_differences(const eng_model *m, const int32_t *toks, int32_t n, const int32_t *ks, int n_ks);

#endif
