/*
 * harness/store/compare.c: the comparator. Equality is memcmp; the rest measures
 * distance. KL is computed in double with the max-subtracted log-sum-exp so
 * it is finite for any finite logits.
 */
#include "compare.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Maps a float onto the ordered integer line of floats: its magnitude bits,
 * negated for a negative sign, so -inf .. -tiny, 0 (both zeros), tiny .. +inf
 * are consecutive integers (numpy's nulp_diff uses the same line). */
static int64_t ordered(float x) {
    uint32_t u = float_bits(x);
    int64_t mag = (int64_t)(u & 0x7fffffffu);
    return (u & 0x80000000u) ? -mag : mag;
}

uint64_t hx_ulp_distance(float a, float b) {
    if (float_bits(a) == float_bits(b)) return 0;
    if (isnan(a) || isnan(b)) return UINT64_MAX;
    int64_t oa = ordered(a), ob = ordered(b);
    return (uint64_t)(oa > ob ? oa - ob : ob - oa);
}

float hx_next_ulp(float x) { return nextafterf(x, INFINITY); }

static double log_sum_exp(const float *x, int64_t n, double *maxv) {
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++) if (x[i] > m) m = x[i];
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - m);
    *maxv = m;
    return m + log(s);
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

void hx_compare_logits(const float *a, const float *b, int64_t n, hx_cmp *out) {
    memset(out, 0, sizeof *out);
    out->first_diff = -1;
    out->equal = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    out->top1_a = argmax(a, n);
    out->top1_b = argmax(b, n);
    out->top1_equal = out->top1_a == out->top1_b;
    if (out->equal) return;
    for (int64_t i = 0; i < n; i++) {
        if (float_bits(a[i]) == float_bits(b[i])) continue;
        if (out->first_diff < 0) {
            out->first_diff = i;
            out->a_first = a[i];
            out->b_first = b[i];
            out->ulp_first = hx_ulp_distance(a[i], b[i]);
        }
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > out->max_abs || isnan(d)) out->max_abs = d;
        uint64_t u = hx_ulp_distance(a[i], b[i]);
        if (u > out->max_ulp) out->max_ulp = u;
    }
    double ma, mb;
    double lsa = log_sum_exp(a, n, &ma), lsb = log_sum_exp(b, n, &mb);
    double kl = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double la = (double)a[i] - lsa, lb = (double)b[i] - lsb;
        kl += exp(la) * (la - lb);
    }
    out->kl = kl > 0.0 ? kl : 0.0;
}
