/*
 * engine/kernels_ref_softmax.c: the softmax of a row, the online-softmax
 * step of the attention, the vector exponential and the SwiGLU that uses it
 * (contract: kernels_ref.h), portable and on the AVX2
 * and AVX-512 paths with the same bits (tested): every vector form takes
 * eng_k_softmax_row's operations element for element, its partial maxima
 * and sums in the same 8 lanes (lane j % 8, ascending j), and the engine's
 * exp (eng_expf) operation for operation, no fused steps.
 */
#include "kernels_ref_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

// ----------------------------------------------------------------------------
// The softmax of a row, portable: the bits every path gives (both kernels
// use it: blas's causal softmax through eng_k_softmax_path)

/* Softmax of one row's n attended scores, in place (kernels_ref.h). The
 * `omp simd` loops are element-wise (no reduction clause): they let GCC
 * vectorise eng_expf without changing any element's operations. The max
 * and the sum use 8 explicit lanes (lane j % 8, ascending j). */
void eng_k_softmax_row(float *s, int32_t n, float scale, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * scale;
    if (bf16) eng_bf16_round_vec(s, n);
    float m8[8], a8[8];
    for (int c = 0; c < 8; c++) { m8[c] = -INFINITY; a8[c] = 0.0f; }
    const int32_t n8 = n / 8 * 8;
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) m8[c] = s[j + c] > m8[c] ? s[j + c] : m8[c];
    for (int32_t j = n8; j < n; j++) m8[j & 7] = s[j] > m8[j & 7] ? s[j] : m8[j & 7];
    float mx = m8[0];
    for (int c = 1; c < 8; c++) mx = m8[c] > mx ? m8[c] : mx;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = eng_expf(s[j] - mx);
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) a8[c] += s[j + c];
    for (int32_t j = n8; j < n; j++) a8[j & 7] += s[j];
    const float sum = ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
    const float inv = 1.0f / sum;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * inv;
    if (bf16) eng_bf16_round_vec(s, n);
}

// ----------------------------------------------------------------------------
// The softmax of a row, AVX-512: eng_k_softmax_row's operations element for
// element (the same bits, tested), 16 lanes wide. The 8 partial maxima and
// sums of eng_k_softmax_row (lane j % 8, ascending j) are kept as 8-lane
// vectors that take the low, then the high half of each 16 scores, so each
// partial sees its elements in the same order.

#if REF_X86
#define AI512F static inline __attribute__((always_inline, target("avx512f")))

/* eng_bf16_round, 16 lanes. */
AI512F __m512 bf16_512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
                                             _mm512_set1_epi32((int32_t)0xffff0000u));
    const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)),
                                           _mm512_set1_epi32((int32_t)0xffff0000u));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

/* eng_expf, 16 lanes: the same operations (no fused steps). The range
 * selections change nothing for x in [-87, 88]; a block whose lanes are all
 * there (the usual case: softmax's inputs are <= 0 and rarely below -87)
 * skips them. */
AI512F __m512 exp512_core(__m512 xc) {
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(12582912.0f));
    const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187045e-06f)));
    const __m512 r2 = _mm512_mul_ps(r, r), r4 = _mm512_mul_ps(r2, r2);
    const __m512 p01 = _mm512_add_ps(_mm512_set1_ps(1.0f), r);
    const __m512 p23 = _mm512_add_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 6.0f)));
    const __m512 p45 = _mm512_add_ps(_mm512_set1_ps(1.0f / 24.0f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 120.0f)));
    const __m512 p67 = _mm512_add_ps(_mm512_set1_ps(1.0f / 720.0f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 5040.0f)));
    const __m512 p = _mm512_add_ps(_mm512_add_ps(p01, _mm512_mul_ps(r2, p23)),
                                   _mm512_mul_ps(r4, _mm512_add_ps(p45, _mm512_mul_ps(r2, p67))));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

AI512F __m512 exp512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    /* in [-87, 88] and not NaN: u <= 0x42b00000 as signed (x <= 88, or negative), u <= 0xc2ae0000 as unsigned */
    const __mmask16 out = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b00000)) |
                          _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2ae0000u));
    if (!out) return exp512_core(x);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                     _mm512_set1_epi32(0x7f800000));
    const __mmask16 above = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b00000));
    const __mmask16 below = _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2ae0000u));
    __m512 xc = _mm512_mask_blend_ps(above, x, _mm512_set1_ps(88.0f));
    xc = _mm512_mask_blend_ps(below, xc, _mm512_set1_ps(-87.0f));
    xc = _mm512_mask_blend_ps(is_nan, xc, _mm512_setzero_ps());
    __m512 y = exp512_core(xc);
    y = _mm512_mask_blend_ps(_mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2aeac4fu)), y,
                             _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b17217)), y,
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(is_nan, y, x);
}

/* Lanes [0, n) of 16 (n <= 16). */
static inline __mmask16 mask16(int32_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* R <= 4 rows at once, row r at s[r] with n[r] scores: each row's operations
 * are exactly eng_k_softmax_row's; interleaving rows only overlaps their
 * dependency chains (the 8 partial sums of a row are serial by definition). */
#define SM_ROWS 4
/* Rows beyond R get n = 0 and are skipped; the loops over r are unrolled,
 * so each row's partial maxima and sums stay in registers. */
__attribute__((target("avx512f"))) static void softmax512_rows(float *const *sr, const int32_t *nr, int R, float scale,
                                                                 bool bf16) {
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 m8[SM_ROWS], a8[SM_ROWS], vmx[SM_ROWS], inv[SM_ROWS];
    float *s[SM_ROWS];
    int32_t n[SM_ROWS], nmax = 0;
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        s[r] = r < R ? sr[r] : NULL;
        n[r] = r < R ? nr[r] : 0;
        m8[r] = _mm512_set1_ps(-__builtin_inff());  /* lanes 0..7 used */
        a8[r] = _mm512_setzero_ps();
        if (n[r] > nmax) nmax = n[r];
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s[r] + j), vs);
            if (bf16) v = bf16_512(v);
            _mm512_mask_storeu_ps(s[r] + j, k, v);
            m8[r] = _mm512_mask_max_ps(m8[r], k & 0xff, v, m8[r]);  /* low half: j .. j+7 */
            const __m512 hi = _mm512_shuffle_f32x4(v, v, 0x4e);    /* j+8 .. j+15 into lanes 0..7 */
            m8[r] = _mm512_mask_max_ps(m8[r], (__mmask16)(k >> 8), hi, m8[r]);
        }
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        float m[16];
        _mm512_storeu_ps(m, m8[r]);
        float mx = m[0];
        for (int c = 1; c < 8; c++) mx = m[c] > mx ? m[c] : mx;
        vmx[r] = _mm512_set1_ps(mx);
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s[r] + j), vmx[r]));
            _mm512_mask_storeu_ps(s[r] + j, k, e);
            a8[r] = _mm512_mask_add_ps(a8[r], k & 0xff, a8[r], e);
            a8[r] = _mm512_mask_add_ps(a8[r], (__mmask16)(k >> 8), a8[r], _mm512_shuffle_f32x4(e, e, 0x4e));
        }
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        float a[16];
        _mm512_storeu_ps(a, a8[r]);
        const float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        inv[r] = _mm512_set1_ps(1.0f / sum);
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s[r] + j), inv[r]);
            if (bf16) v = bf16_512(v);
            _mm512_mask_storeu_ps(s[r] + j, k, v);
        }
}
#endif


// ----------------------------------------------------------------------------
// The softmax of a row, AVX2: eng_k_softmax_row's operations element for
// element (the same bits, tested). Its 8 partial maxima and sums (lane
// j % 8, ascending j) are exactly one 8-lane vector; the tail past the last
// multiple of 8 takes the same scalar steps as eng_k_softmax_row, on the
// lanes stored back to floats.

#if REF_X86
#define AI2F static inline __attribute__((always_inline, target("avx2,fma")))

/* eng_bf16_round, 8 lanes. */
AI2F __m256 bf16_256(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                                             _mm256_set1_epi32((int32_t)0xffff0000u));
    const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)),
                                           _mm256_set1_epi32((int32_t)0xffff0000u));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet, nan));
}

/* Unsigned a > b, lane by lane (all ones or zero). */
AI2F __m256i gtu_256(__m256i a, uint32_t b) {
    const __m256i bias = _mm256_set1_epi32((int32_t)0x80000000u);
    return _mm256_cmpgt_epi32(_mm256_xor_si256(a, bias), _mm256_set1_epi32((int32_t)(b ^ 0x80000000u)));
}

/* eng_expf, 8 lanes: the same operations (no fused steps), but for the
 * power of two: its exponent comes from t's bits instead of converting n.
 * On the core's domain (after exp256's clamp, [-87, 88]) t lies in
 * [2^23, 2^24), where its bits are 0x4B400000 + n, so this is (int)n + 127
 * exactly, one operation fewer and off the chain through n (the tests
 * compare every float's exp with eng_expf's). */
AI2F __m256 exp256_core(__m256 xc) {
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(12582912.0f));
    const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(1.428606765330187045e-06f)));
    const __m256 r2 = _mm256_mul_ps(r, r), r4 = _mm256_mul_ps(r2, r2);
    const __m256 p01 = _mm256_add_ps(_mm256_set1_ps(1.0f), r);
    const __m256 p23 = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 6.0f)));
    const __m256 p45 = _mm256_add_ps(_mm256_set1_ps(1.0f / 24.0f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 120.0f)));
    const __m256 p67 = _mm256_add_ps(_mm256_set1_ps(1.0f / 720.0f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 5040.0f)));
    const __m256 p = _mm256_add_ps(_mm256_add_ps(p01, _mm256_mul_ps(r2, p23)),
                                   _mm256_mul_ps(r4, _mm256_add_ps(p45, _mm256_mul_ps(r2, p67))));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

AI2F __m256 exp256(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    /* in [-87, 88] and not NaN: u <= 0x42b00000 as signed, u <= 0xc2ae0000 as unsigned */
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b00000)), gtu_256(u, 0xc2ae0000u));
    if (_mm256_testz_si256(out, out)) return exp256_core(x);
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                                                 _mm256_set1_epi32(0x7f800000)));
    const __m256 above = _mm256_castsi256_ps(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b00000)));
    const __m256 below = _mm256_castsi256_ps(gtu_256(u, 0xc2ae0000u));
    __m256 xc = _mm256_blendv_ps(x, _mm256_set1_ps(88.0f), above);
    xc = _mm256_blendv_ps(xc, _mm256_set1_ps(-87.0f), below);
    xc = _mm256_blendv_ps(xc, _mm256_setzero_ps(), is_nan);
    __m256 y = exp256_core(xc);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_castsi256_ps(gtu_256(u, 0xc2aeac4fu)));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()),
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b17217))));
    return _mm256_blendv_ps(y, x, is_nan);
}

/* x[k] = exp256(x[k]) for k < n (n <= 8), the common case (every lane in
 * [-87, 88]) tested once for all of them: the lanes' largest bits as
 * signed and as unsigned integers against exp256's two bounds (a lane is
 * past one exactly when their maximum is), so that the vectors' chains
 * run side by side without a branch between them. */
AI2F void exp256_n(__m256 *x, int n) {
    __m256i ms = _mm256_castps_si256(x[0]), mu = ms;
    _Pragma("GCC unroll 8") for (int k = 1; k < n; k++) {
        ms = _mm256_max_epi32(ms, _mm256_castps_si256(x[k]));
        mu = _mm256_max_epu32(mu, _mm256_castps_si256(x[k]));
    }
    const __m256i out =
        _mm256_or_si256(_mm256_cmpgt_epi32(ms, _mm256_set1_epi32(0x42b00000)), gtu_256(mu, 0xc2ae0000u));
    if (_mm256_testz_si256(out, out)) {
        _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) x[k] = exp256_core(x[k]);
    } else {
        _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) x[k] = exp256(x[k]);
    }
}

/* R <= SM_ROWS rows at once (their dependency chains overlap), row r at
 * s[r] with n[r] scores. */
__attribute__((target("avx2,fma"))) static void softmax256_rows(float *const *sr, const int32_t *nr, int R, float scale,
                                                                 bool bf16) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 m8[SM_ROWS], a8[SM_ROWS];
    float *s[SM_ROWS], mx[SM_ROWS], inv[SM_ROWS];
    int32_t n[SM_ROWS], n8[SM_ROWS], nmax = 0;
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        s[r] = r < R ? sr[r] : NULL;
        n[r] = r < R ? nr[r] : 0;
        n8[r] = n[r] / 8 * 8;
        m8[r] = _mm256_set1_ps(-__builtin_inff());
        a8[r] = _mm256_setzero_ps();
        if (n8[r] > nmax) nmax = n8[r];
    }
    /* scale (and round), the 8 partial maxima */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s[r] + j), vs);
            if (bf16) v = bf16_256(v);
            _mm256_storeu_ps(s[r] + j, v);
            m8[r] = _mm256_max_ps(v, m8[r]);  /* v > m ? v : m, as the scalar lanes */
        }
    for (int r = 0; r < R; r++) {
        float m[8];
        _mm256_storeu_ps(m, m8[r]);
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = s[r][j] * scale;
            if (bf16) s[r][j] = eng_bf16_round(s[r][j]);
            m[j & 7] = s[r][j] > m[j & 7] ? s[r][j] : m[j & 7];
        }
        float x = m[0];
        for (int c = 1; c < 8; c++) x = m[c] > x ? m[c] : x;
        mx[r] = x;
    }
    /* exponentials, the 8 partial sums */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s[r] + j), _mm256_set1_ps(mx[r])));
            _mm256_storeu_ps(s[r] + j, e);
            a8[r] = _mm256_add_ps(a8[r], e);
        }
    for (int r = 0; r < R; r++) {
        float a[8];
        _mm256_storeu_ps(a, a8[r]);
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = eng_expf(s[r][j] - mx[r]);
            a[j & 7] += s[r][j];
        }
        const float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        inv[r] = 1.0f / sum;
    }
    /* normalised (and rounded) */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s[r] + j), _mm256_set1_ps(inv[r]));
            if (bf16) v = bf16_256(v);
            _mm256_storeu_ps(s[r] + j, v);
        }
    for (int r = 0; r < R; r++)
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = s[r][j] * inv[r];
            if (bf16) s[r][j] = eng_bf16_round(s[r][j]);
        }
}
#endif

/* The softmax of R rows (row r: s[r], n[r] scores), eng_k_softmax_row's bits on every path. */
static void softmax_rows(eng_kpath path, float *const *s, const int32_t *n, int R, float scale, bool bf16) {
#if REF_X86
    if (path == ENG_KPATH_AVX512) {
        for (int r0 = 0; r0 < R; r0 += SM_ROWS)
            softmax512_rows(s + r0, n + r0, R - r0 < SM_ROWS ? R - r0 : SM_ROWS, scale, bf16);
        return;
    }
    if (path == ENG_KPATH_AVX2) {
        for (int r0 = 0; r0 < R; r0 += SM_ROWS)
            softmax256_rows(s + r0, n + r0, R - r0 < SM_ROWS ? R - r0 : SM_ROWS, scale, bf16);
        return;
    }
#endif
    for (int r = 0; r < R; r++) eng_k_softmax_row(s[r], n[r], scale, bf16);
}

/* The softmax of n scores (eng_k_softmax_row's bits on every path). */
void eng_k_softmax_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16) {
    softmax_rows(path, &s, &n, 1, scale, bf16);
}

#if REF_X86
__attribute__((target("avx512f"))) static int64_t exp_path512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
    return i;
}
__attribute__((target("avx2,fma"))) static int64_t exp_path256(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {  /* as the softmax steps take them: 4 vectors, one range test */
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + i + 8 * k);
        exp256_n(v, 4);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(y + i + 8 * k, v[k]);
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_loadu_ps(x + i)));
    return i;
}
#endif

/* y = exp(x), eng_expf's bits, through path's vector exponential (the
 * tests compare them over every float). */
void eng_k_exp_path(eng_kpath path, const float *x, float *y, int64_t n) {
    int64_t i = 0;
#if REF_X86
    if (path == ENG_KPATH_AVX512) i = exp_path512(x, y, n);
    else if (path == ENG_KPATH_AVX2) i = exp_path256(x, y, n);
#endif
    for (; i < n; i++) y[i] = eng_expf(x[i]);
}

/* h = (g / (1 + exp(-g))) * u, the SwiGLU of eng_kfuse (kernels.h): the
 * same operations on every path, eng_expf's bits for the exponential. */
#if REF_X86
__attribute__((target("avx512f"))) static int64_t silu_mul512(const float *g, const float *u, float *h, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int32_t)0x80000000u);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m512 e = exp512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign)));
        _mm512_storeu_ps(h + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
    }
    return i;
}
#endif

void eng_k_silu_mul_path(eng_kpath path, const float *g, const float *u, float *h, int64_t n) {
    int64_t i = 0;
#if REF_X86
    if (path == ENG_KPATH_AVX512) i = silu_mul512(g, u, h, n);
#endif
    #pragma omp simd
    for (int64_t j = i; j < n; j++) h[j] = (g[j] / (1.0f + eng_expf(-g[j]))) * u[j];
}

// ----------------------------------------------------------------------------
// The steps of the attention's online softmax over one key block of a row
// (attn_super), the same bits on every path:
//   sm_scale_max: s = round(s * scale) over the row's keys in the block, and
//     the running max. The max is taken over 8 lanes then across them, with
//     `s > m ? s : m`: NaN never wins and the value is the largest of the
//     others, whatever the order; only the sign of a zero maximum can depend
//     on it, and s - (+0) and s - (-0) give the same e = exp(s - max) for
//     every s (exp(+0) = exp(-0) = 1), as +0 > -0 is false (no rescale).
//   sm_exp_sum: e = round(exp(s - max)) over the row's keys in the block, and
//     the sum in 8 lanes (lane j % 8 from the row's first key there,
//     ascending j), combined pairwise.
//   eng_kr_sm_norm: d = round(s * f) (the outputs' rescale, and the final 1 / sum).
// The AVX2 versions serve the avx512 path too (an AVX-512 CPU runs AVX2).

static void sm_scale_max_c(float *s, int32_t n, float scale, bool bf16, float *mx) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * scale;
    if (bf16) eng_bf16_round_vec(s, n);
    float m = *mx;
    for (int32_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    *mx = m;
}

static float sm_exp_sum_c(float *s, int32_t n, float mx, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = eng_expf(s[j] - mx);
    if (bf16) eng_bf16_round_vec(s, n);
    float a8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int32_t n8 = n / 8 * 8;
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) a8[c] += s[j + c];
    for (int32_t j = n8; j < n; j++) a8[j & 7] += s[j];
    return ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
}

/* The scalar end of the vector exp-sums: e = round(exp(s - mx)) for j in
 * [j, n), each added to lane j % 8 of a, then the 8 lanes pairwise. */
static float sm_exp_tail(float *s, int32_t j, int32_t n, float mx, bool bf16, float *a) {
    for (; j < n; j++) {
        s[j] = eng_expf(s[j] - mx);
        if (bf16) s[j] = eng_bf16_round(s[j]);
        a[j & 7] += s[j];
    }
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static void sm_norm_c(const float *s, float *d, int32_t n, float inv, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) d[j] = s[j] * inv;
    if (bf16) eng_bf16_round_vec(d, n);
}

#if REF_X86
__attribute__((target("avx2,fma"))) static void sm_scale_max256(float *s, int32_t n, float scale, bool bf16,
                                                                 float *mx) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 m0 = _mm256_set1_ps(*mx), m1 = m0;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 v0 = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs), v1 = _mm256_mul_ps(_mm256_loadu_ps(s + j + 8), vs);
        if (bf16) { v0 = bf16_256(v0); v1 = bf16_256(v1); }
        _mm256_storeu_ps(s + j, v0);
        _mm256_storeu_ps(s + j + 8, v1);
        m0 = _mm256_max_ps(v0, m0);
        m1 = _mm256_max_ps(v1, m1);
    }
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
        if (bf16) v = bf16_256(v);
        _mm256_storeu_ps(s + j, v);
        m0 = _mm256_max_ps(v, m0);
    }
    float m[16];
    _mm256_storeu_ps(m, m0);
    _mm256_storeu_ps(m + 8, m1);
    float x = *mx;
    for (int c = 0; c < 16; c++) x = m[c] > x ? m[c] : x;
    sm_scale_max_c(s + j, n - j, scale, bf16, &x);
    *mx = x;
}

__attribute__((target("avx2,fma"))) static float sm_exp_sum256(float *s, int32_t n, float mx, bool bf16) {
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 a8 = _mm256_setzero_ps();
    const int32_t n8 = n / 8 * 8;
    int32_t j = 0;
    for (; j + 32 <= n8; j += 32) {  /* 4 vectors a step (exp256_n), added in order */
        __m256 x[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) x[k] = _mm256_sub_ps(_mm256_loadu_ps(s + j + 8 * k), vm);
        exp256_n(x, 4);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            if (bf16) x[k] = bf16_256(x[k]);
            _mm256_storeu_ps(s + j + 8 * k, x[k]);
            a8 = _mm256_add_ps(a8, x[k]);
        }
    }
    for (; j < n8; j += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        if (bf16) e = bf16_256(e);
        _mm256_storeu_ps(s + j, e);
        a8 = _mm256_add_ps(a8, e);
    }
    float a[8];
    _mm256_storeu_ps(a, a8);
    return sm_exp_tail(s, j, n, mx, bf16, a);
}

__attribute__((target("avx2,fma"))) static void sm_norm256(const float *s, float *d, int32_t n, float inv, bool bf16) {
    const __m256 vi = _mm256_set1_ps(inv);
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vi);
        if (bf16) v = bf16_256(v);
        _mm256_storeu_ps(d + j, v);
    }
    for (; j < n; j++) {
        d[j] = s[j] * inv;
        if (bf16) d[j] = eng_bf16_round(d[j]);
    }
}
/* The same two steps 16 lanes a vector (avx512): the maximum keeps the two
 * 8-lane halves of sm_scale_max256 (lanes j % 16 < 8 and >= 8), and the sum
 * adds each vector's low then high 8 lanes to the 8 lane sums, in the
 * order of sm_exp_sum256; exp512 has exp256's bits. */
__attribute__((target("avx512f"))) static void sm_scale_max512(float *s, int32_t n, float scale, bool bf16,
                                                                float *mx) {
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 m = _mm512_set1_ps(*mx);
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + j), vs);
        if (bf16) v = bf16_512(v);
        _mm512_storeu_ps(s + j, v);
        m = _mm512_max_ps(v, m);
    }
    if (j + 8 <= n) {  /* the low half only */
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(0x00ff, s + j), vs);
        if (bf16) v = bf16_512(v);
        _mm512_mask_storeu_ps(s + j, 0x00ff, v);
        m = _mm512_mask_max_ps(m, 0x00ff, v, m);
        j += 8;
    }
    float mm[16];
    _mm512_storeu_ps(mm, m);
    float x = *mx;
    for (int c = 0; c < 16; c++) x = mm[c] > x ? mm[c] : x;
    sm_scale_max_c(s + j, n - j, scale, bf16, &x);
    *mx = x;
}

__attribute__((target("avx512f"))) static float sm_exp_sum512(float *s, int32_t n, float mx, bool bf16) {
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 a8 = _mm512_setzero_ps();  /* the 8 lane sums in the low half */
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        if (bf16) e = bf16_512(e);
        _mm512_storeu_ps(s + j, e);
        a8 = _mm512_add_ps(a8, e);  /* low lanes: j..j+7 added (high lanes unused) */
        a8 = _mm512_add_ps(a8, _mm512_shuffle_f32x4(e, e, 0xee));  /* then j+8..j+15 */
    }
    if (j + 8 <= n) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(0x00ff, s + j), vm));
        if (bf16) e = bf16_512(e);
        _mm512_mask_storeu_ps(s + j, 0x00ff, e);
        a8 = _mm512_add_ps(a8, e);
        j += 8;
    }
    float a[16];
    _mm512_storeu_ps(a, a8);
    return sm_exp_tail(s, j, n, mx, bf16, a);
}
#endif

static void sm_scale_max(eng_kpath path, float *s, int32_t n, float scale, bool bf16, float *mx) {
    if (n <= 0) return;
#if REF_X86
    if (path == ENG_KPATH_AVX512) { sm_scale_max512(s, n, scale, bf16, mx); return; }
    if (path != ENG_KPATH_SCALAR) { sm_scale_max256(s, n, scale, bf16, mx); return; }
#endif
    sm_scale_max_c(s, n, scale, bf16, mx);
}

static float sm_exp_sum(eng_kpath path, float *s, int32_t n, float mx, bool bf16) {
#if REF_X86
    if (path == ENG_KPATH_AVX512) return sm_exp_sum512(s, n, mx, bf16);
    if (path != ENG_KPATH_SCALAR) return sm_exp_sum256(s, n, mx, bf16);
#endif
    return sm_exp_sum_c(s, n, mx, bf16);
}

/* d = round(s * inv) (d may be s) */
void eng_kr_sm_norm(eng_kpath path, const float *s, float *d, int32_t n, float inv, bool bf16) {
    if (n <= 0) return;
#if REF_X86
    if (path != ENG_KPATH_SCALAR) { sm_norm256(s, d, n, inv, bf16); return; }
#endif
    sm_norm_c(s, d, n, inv, bf16);
}


/* One key block of a row's online softmax, the steps above (attn_super's
 * step 2, and blas's blocked attention in kernels.c): s = round(s * scale)
 * and m = max(*mx, max s); when m > *mx, a = exp(*mx - m), the row's
 * outputs so far o[0, no) = o * a and *l = *l * a (a = 0 on the row's first
 * block, whose *mx is -inf: o and *l are still 0); *mx = m; then
 * e = round(exp(s - m)) in place and *l = *l + the sum of the e in 8 lanes. */
void eng_k_softmax_step_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16, float *mx, float *l,
                             float *o, int32_t no) {
    float m = *mx;
    sm_scale_max(path, s, n, scale, bf16, &m);
    if (m > *mx) {
        const float al = eng_expf(*mx - m);
        eng_kr_sm_norm(path, o, o, no, al, false);
        *l = *l * al;
    }
    *mx = m;
    *l = *l + sm_exp_sum(path, s, n, m, bf16);
}

#if REF_X86
/* One group of 8 rows of eng_kr_sm_block_t256's last step: for the vectors
 * p[jj * PW] (keys jj < nk), e = round(exp(v - m)) in place, and then
 * l[c] = l[c] + the sum of row c's e (c < nc): lane jj % 8, ascending jj,
 * the 8 lanes combined pairwise. 4 keys a step (exp256_n), each e added
 * to its own lane's sum. */
AI2F void exp_sum_t256(float *p, int32_t nk, __m256 m, bool bf16, float *l, int32_t nc) {
    __m256 s8[8];
    for (int k = 0; k < 8; k++) s8[k] = _mm256_setzero_ps();
    int32_t jj = 0;
    for (; jj + 8 <= nk; jj += 8, p += 8 * PW)
        _Pragma("GCC unroll 2") for (int h = 0; h < 8; h += 4) {
            __m256 x[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                x[k] = _mm256_sub_ps(_mm256_loadu_ps(p + (h + k) * PW), m);
            exp256_n(x, 4);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                if (bf16) x[k] = bf16_256(x[k]);
                _mm256_storeu_ps(p + (h + k) * PW, x[k]);
                s8[h + k] = _mm256_add_ps(s8[h + k], x[k]);
            }
        }
    for (int k = 0; jj < nk; jj++, k++, p += PW) {
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(p), m);
        exp256_n(&x, 1);
        if (bf16) x = bf16_256(x);
        _mm256_storeu_ps(p, x);
        s8[k] = _mm256_add_ps(s8[k], x);
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s8[0], s8[1]), _mm256_add_ps(s8[2], s8[3])),
                                     _mm256_add_ps(_mm256_add_ps(s8[4], s8[5]), _mm256_add_ps(s8[6], s8[7])));
    float sb[8];
    _mm256_storeu_ps(sb, sum);
    for (int32_t c = 0; c < nc && c < 8; c++) l[c] = l[c] + sb[c];
}

/* The per-row steps of a block every row c < R attends whole (keys [0, nk)
 * of ST), 8 rows a vector: s = round(s * scale) and the max with the
 * running max mx[c] (the same value in any order); the rescale of Ot[c]
 * and l[c] when it grew; e = round(exp(s - m)) in place, and l[c] = l[c] +
 * the sum of its 8 lanes (lane jj % 8, ascending jj), combined pairwise. */
__attribute__((target("avx2,fma"))) void eng_kr_sm_block_t256(float *ST, int32_t nk, int32_t R, float scale,
                                                               bool bf16, float *mx, float *l, float *Ot,
                                                               int32_t E32, int32_t WV) {
    const __m256 vs = _mm256_set1_ps(scale);
    const int32_t ng = (R + 7) / 8;  /* groups of 8 rows */
    float mb[PW];
    for (int32_t c = 0; c < ng * 8; c++) mb[c] = c < R ? mx[c] : 0.0f;
    __m256 mv[PW / 8];
    for (int32_t t = 0; t < ng; t++) mv[t] = _mm256_loadu_ps(mb + 8 * t);
    for (int32_t t = 0; t < ng; t++) {  /* group by group, its max in a register, keys ascending */
        __m256 m = mv[t];
        float *p = ST + 8 * t;
        if (bf16)
            for (int32_t jj = 0; jj < nk; jj++, p += PW) {
                const __m256 v = bf16_256(_mm256_mul_ps(_mm256_loadu_ps(p), vs));
                _mm256_storeu_ps(p, v);
                m = _mm256_max_ps(v, m);
            }
        else
            for (int32_t jj = 0; jj < nk; jj++, p += PW) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p), vs);
                _mm256_storeu_ps(p, v);
                m = _mm256_max_ps(v, m);
            }
        mv[t] = m;
    }
    for (int32_t t = 0; t < ng; t++) _mm256_storeu_ps(mb + 8 * t, mv[t]);
    for (int32_t i = 0; i < R; i++) {
        if (mb[i] > mx[i]) {  /* on a row's first block mx is -inf: a = 0, and Ot and l are still 0 */
            const float al = eng_expf(mx[i] - mb[i]);
            sm_norm256(Ot + (int64_t)i * E32, Ot + (int64_t)i * E32, WV, al, false);
            l[i] = l[i] * al;
        }
        mx[i] = mb[i];
    }
    /* exponentials and sums, group by group (mv holds the new maxima) */
    if (bf16)
        for (int32_t t = 0; t < ng; t++) exp_sum_t256(ST + 8 * t, nk, mv[t], true, l + 8 * t, R - 8 * t);
    else
        for (int32_t t = 0; t < ng; t++) exp_sum_t256(ST + 8 * t, nk, mv[t], false, l + 8 * t, R - 8 * t);
}
#endif
