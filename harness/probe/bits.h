/*
 * harness/probe/bits.h: comparing what two runs of one request sent back,
 * for `kvreplay probe`: a generated position's top-K log-probabilities as
 * float bits (memcmp, never a tolerance), and the exact JSON text a server
 * wrote them in (a byte span of the response, found without re-serializing:
 * jansson would print the numbers its own way).
 */
#ifndef HX_PROBE_BITS_H
#define HX_PROBE_BITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "compare.h"

/* The byte span of the JSON value at path inside the JSON text s (n bytes):
 * path is dot-separated object keys and array indexes, "choices.0.logprobs".
 * True with *off and *len set; false when s is not JSON down to there or
 * the path is absent. Keys are compared as their raw text (no escapes). */
bool hx_json_span(const char *s, size_t n, const char *path, size_t *off, size_t *len);

/* Compares one generated position of two runs (a: cold, b: warm) into c:
 *   equal       the same candidates in the same order (by id, else by their bytes), each log-probability
 *               memcmp-equal (and the chosen tokens' own); with no candidates, the chosen tokens and
 *               their log-probabilities;
 *   first_diff  the first rank where they differ (a_first, b_first, ulp_first there: the two log-probabilities);
 *   max_abs, max_ulp  over the candidates both lists hold;
 *   top1_equal  the most probable candidate (or the chosen token) is the same;
 *   kl          KL(a || b) in nats when both lists hold the whole vocabulary (n_vocab > 0 candidates), else NaN.
 */
void hx_probs_compare(const hx_api_token *a, const hx_api_token *b, int32_t n_vocab, hx_cmp *c);

/* Whether two tokens are the same token (id when both have one, else bytes). */
bool hx_token_same(int32_t ida, const char *ta, size_t na, int32_t idb, const char *tb, size_t nb);

#endif /* HX_PROBE_BITS_H */
