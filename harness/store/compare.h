/*
 * harness/store/compare.h: bit-exact comparison of two logit vectors.
 *
 * "Equal" means memcmp-equal, nothing else. The other figures (first
 * differing index, max |diff|, max ULP distance, KL, top-1) describe how far
 * apart two unequal vectors are; they never decide equality.
 */
#ifndef HX_COMPARE_H
#define HX_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct hx_cmp {
    bool     equal;        /* memcmp(a, b) == 0 */
    int64_t  first_diff;   /* first index whose bytes differ, -1 when equal */
    float    a_first;      /* a[first_diff], b[first_diff] (0 when equal) */
    float    b_first;
    uint64_t ulp_first;    /* ULP distance at first_diff */
    double   max_abs;      /* max |a[i] - b[i]| */
    uint64_t max_ulp;      /* max ULP distance over all i */
    double   kl;           /* KL(softmax(a) || softmax(b)) in nats, >= 0 */
    bool     top1_equal;   /* argmax(a) == argmax(b) (lowest index wins ties) */
    int32_t  top1_a, top1_b;
} hx_cmp;

/* Compares n logits. a and b must not be NULL. */
void     hx_compare_logits(const float *a, const float *b, int64_t n, hx_cmp *out);
/* ULP distance between two floats: their distance on the ordered integer
 * line of floats (magnitude bits, negated for a negative sign), where -0 and
 * +0 are the same point: the number of steps from a to b through every
 * representable float. 0 for identical bits and for -0 vs +0 (memcmp still
 * tells them apart); 1 between neighbours; 2 between the smallest
 * subnormals of opposite signs; values of opposite signs are the sum of
 * their distances to zero (so -3e-6 and 4e-6 are 1.82e9 apart: read
 * max_abs_diff for logits near zero). NaN: UINT64_MAX unless both have
 * identical bits. docs/sqlite.md. */
uint64_t hx_ulp_distance(float a, float b);
/* The float one ULP above x toward +inf (for planting faults in tests). */
float    hx_next_ulp(float x);

#endif /* HX_COMPARE_H */
