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
/* ULP distance between two floats: the number of representable floats
 * between them (0 when bit-identical; +0 and -0 are 1 apart; NaN is
 * UINT64_MAX unless both have identical bits). */
uint64_t hx_ulp_distance(float a, float b);
/* The float one ULP above x toward +inf (for planting faults in tests). */
float    hx_next_ulp(float x);

#endif /* HX_COMPARE_H */
