/*
 * engine/kernels_ref_attn.c: the ref attention (contract: kernels_ref.h).
 * Per KV head, its query rows are cut into super blocks of up to 32 rows
 * (the pool's items) that walk the keys in blocks of ENG_REF_ATTN_KB
 * absolute positions with an online softmax: scores (chains over e), the
 * block's step (kernels_ref_softmax.c), then the values (chains over the
 * attended keys in ascending position, continued across blocks). Block
 * boundaries are absolute positions and each step a row sees depends on its
 * own keys only, so nothing depends on the super block, the chunk, the
 * thread or the path; the scores stay in cache and the scratch grows with
 * the context only by the packed keys and values.
 *
 * Super blocks of 16 rows or more (prefill) take the same steps grouped
 * (attn_group): a KV head's super blocks go in step over the key blocks,
 * each block's keys and values copied once for all of them, the scores
 * computed transposed (keys by rows: no key packing). Same chains, same bits.
 */
#include "kernels_ref_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* y[0..W) = fma(p, B[j][0..W), y): one step of W chains (W a multiple of
 * 32; b is row j of panel 0, panels ps apart). */
#if REF_X86
__attribute__((target("avx512f"))) static void axpy512(int32_t W, float p, const float *b, int64_t ps, float *y) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int32_t c0 = 0; c0 < W; c0 += PW) {
        const float *bp = b + (c0 / PW) * ps;
        _mm512_storeu_ps(y + c0, _mm512_fmadd_ps(pv, _mm512_loadu_ps(bp), _mm512_loadu_ps(y + c0)));
        _mm512_storeu_ps(y + c0 + 16, _mm512_fmadd_ps(pv, _mm512_loadu_ps(bp + 16), _mm512_loadu_ps(y + c0 + 16)));
    }
}

__attribute__((target("avx2,fma"))) static void axpy256(int32_t W, float p, const float *b, int64_t ps, float *y) {
    const __m256 pv = _mm256_set1_ps(p);
    for (int32_t c0 = 0; c0 < W; c0 += PW) {
        const float *bp = b + (c0 / PW) * ps;
        for (int c = 0; c < PW; c += 8)
            _mm256_storeu_ps(y + c0 + c, _mm256_fmadd_ps(pv, _mm256_loadu_ps(bp + c), _mm256_loadu_ps(y + c0 + c)));
    }
}
#endif

static void axpy_row(eng_kpath path, int32_t W, float p, const float *b, int64_t ps, float *y) {
#if REF_X86
    if (path == ENG_KPATH_AVX512) { axpy512(W, p, b, ps, y); return; }
    if (path == ENG_KPATH_AVX2) { axpy256(W, p, b, ps, y); return; }
#endif
    for (int32_t c0 = 0; c0 < W; c0 += PW)
        for (int32_t c = 0; c < PW; c++) y[c0 + c] = fmaf(p, b[(c0 / PW) * ps + c], y[c0 + c]);
}

/* Rows of a super block: the rows that share one pass over the keys and
 * values (register blocks of the path's MR rows inside). Key blocks: the
 * online softmax's blocks, ATTN_KB keys on absolute positions [ATTN_KB*b,
 * ATTN_KB*(b+1)); a block's scores take up to ATTN_SW columns of whole key
 * panels (one more panel when the gathered keys are not panel-aligned). */
#define ATTN_RB 32
#define ATTN_KB ENG_REF_ATTN_KB
#define ATTN_SW (ATTN_KB + PW)

#define ATTN_GRP 8  /* super blocks of a group (transposed scores) */

/* Floats of one thread's scratch for P keys of head dim E, the larger of
 * the two forms': packed, the head's packed keys and values, the super
 * block's scores of one key block and its outputs; grouped (attn_group),
 * one key block's keys, values and transposed scores, the row-major scores,
 * and the group's transposed queries and outputs. */
static int64_t attn_thread_floats(int32_t P, int32_t E) {
    const int64_t P32 = round32(P), E32 = round32(E);
    const int64_t packed = P32 * E + E32 * P32 + (int64_t)ATTN_RB * ATTN_SW + (int64_t)ATTN_RB * E32;
    const int64_t tr = (int64_t)ATTN_KB * (E + E32 + PW) + (int64_t)ATTN_RB * ATTN_SW + (int64_t)ATTN_GRP * E * PW +
                       (int64_t)ATTN_GRP * ATTN_RB * E32;
    return packed > tr ? packed : tr;
}

int64_t eng_k_attention_ref_ws(int32_t n_threads, int32_t P, int32_t E) {
    return (int64_t)(n_threads > 1 ? n_threads : 1) * attn_thread_floats(P, E);
}

typedef struct attn_args {
    eng_kpath    path;
    bool         bf16;
    int32_t      T, pos0, W, kpos0, GR, E, P, ldkv, ldo;
    int32_t      seg_rows, nb_seg, n_seg, nb_g;  /* row blocks: n_seg segments of seg_rows rows per KV head */
    bool         tr;     /* scores transposed: keys by rows (super blocks of at least ATTN_TR_MIN rows) */
    int32_t      n_grp;  /* tr: groups of super blocks per KV head (the items) */
    float        scale;
    const float *qg, *K, *V;
    float       *O, *ws;
} attn_args;

/* Packs key panel q of KV head g: Kp[q][e][c] = K[32q + c][g*E + e] (0 past P).
 * avx512: head dims [0, E16) as 16 x 16 transposes of 16 keys by 16 dims
 * (keys past n loaded as zeros), the rest gathered, 16 keys a vector. A
 * copy: the bits are the keys'. */
#if REF_X86
__attribute__((target("avx512f"))) static inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);  /* per 128-bit lane: a0 b0 a1 b1 */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  /* a2 b2 a3 b3 */
    }
    for (int i = 0; i < 16; i += 4) {  /* u[i + j]: column j of each lane, rows i..i+3 */
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {  /* lanes of the four row groups: column j + 4L in lane L */
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), w0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
        const __m512 v1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(v0, v1, 0xdd);
        r[j + 4] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        r[j + 12] = _mm512_shuffle_f32x4(w0, w1, 0xdd);
    }
}

__attribute__((target("avx512f"))) static void pack_keys512(const float *k0, int64_t ldkv, int32_t n, int32_t E,
                                                              int32_t n_next, float *dst) {
    const int32_t E16 = E / 16 * 16;
    for (int32_t c0 = 0; c0 < PW; c0 += 16)
        for (int32_t e0 = 0; e0 < E16; e0 += 16) {
            for (int32_t k = c0; k < c0 + 16 && k < n_next; k++)  /* the next panel's rows */
                _mm_prefetch((const char *)(k0 + (int64_t)(PW + k) * ldkv + e0), _MM_HINT_T0);
            __m512 r[16];
            for (int k = 0; k < 16; k++)
                r[k] = c0 + k < n ? _mm512_loadu_ps(k0 + (int64_t)(c0 + k) * ldkv + e0) : _mm512_setzero_ps();
            transpose16(r);
            for (int e = 0; e < 16; e++) _mm512_storeu_ps(dst + (int64_t)(e0 + e) * PW + c0, r[e]);
        }
    if (E16 == E) return;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int32_t)ldkv));
    const __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
    const float *k1 = k0 + 16 * ldkv;
    for (int32_t e = E16; e < E; e++) {
        _mm512_storeu_ps(dst + e * PW, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, idx, k0 + e, 4));
        _mm512_storeu_ps(dst + e * PW + 16,
                         m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, idx, k1 + e, 4) : _mm512_setzero_ps());
    }
}

/* The same with 8 x 8 transposes (AVX2): keys [0, n8) in groups of 8, head
 * dims [0, E8) in groups of 8; the rest as the portable loop. A copy: the
 * bits are the keys'. */
__attribute__((target("avx2,fma"))) static int32_t pack_keys256(const float *k0, int64_t ldkv, int32_t n, int32_t E,
                                                                 float *dst) {
    const int32_t n8 = n / 8 * 8, E8 = E / 8 * 8;
    for (int32_t c0 = 0; c0 < n8; c0 += 8)
        for (int32_t e0 = 0; e0 < E8; e0 += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(k0 + (int64_t)(c0 + k) * ldkv + e0);
            const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
            const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
            const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
            const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            const __m256 o[8] = {
                _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31),
            };
            for (int e = 0; e < 8; e++) _mm256_storeu_ps(dst + (int64_t)(e0 + e) * PW + c0, o[e]);
        }
    for (int32_t c = 0; c < n8; c++)  /* head dims past the last group of 8 */
        for (int32_t e = E8; e < E; e++) dst[(int64_t)e * PW + c] = k0[(int64_t)c * ldkv + e];
    return n8;
}
#endif

static void pack_keys(const attn_args *a, int32_t g, int32_t q, float *Kp) {
    const int32_t E = a->E;
    float *dst = Kp + (int64_t)q * E * PW;
    const int32_t n = a->P - q * PW < PW ? a->P - q * PW : PW;
    const float *k0 = a->K + (int64_t)q * PW * a->ldkv + (int64_t)g * E;
#if REF_X86
    if (a->path == ENG_KPATH_AVX512 && (int64_t)a->ldkv * PW < INT32_MAX) {
        const int32_t left = a->P - (q + 1) * PW;
        pack_keys512(k0, a->ldkv, n, E, left < 0 ? 0 : left < PW ? left : PW, dst);
        return;
    }
#endif
    int32_t c_done = 0;
#if REF_X86
    if (a->path == ENG_KPATH_AVX2) c_done = pack_keys256(k0, a->ldkv, n, E, dst);
#endif
    for (int32_t c = c_done; c < n; c++) {
        const float *k = k0 + (int64_t)c * a->ldkv;
        for (int32_t e = 0; e < E; e++) dst[e * PW + c] = k[e];
    }
    for (int32_t c = n; c < PW; c++)
        for (int32_t e = 0; e < E; e++) dst[e * PW + c] = 0.0f;
}

/* Packs the values of keys [j0, j0 + n) of KV head g into panels of ldp
 * rows: Vp[qe][j - j0][c] = V[j][g*E + 32qe + c] (0 past E). Rows 16
 * ahead are prefetched (the rows are a whole KV row apart). */
#define PACK_AHEAD 16
static void pack_values(const attn_args *a, int32_t g, int32_t j0, int32_t n_keys, float *Vp, int32_t ldp) {
    const int32_t E = a->E, E32 = round32(E);
    for (int32_t j = j0; j < j0 + n_keys; j++) {
        const float *v = a->V + (int64_t)j * a->ldkv + (int64_t)g * E;
#if REF_X86
        if (j + PACK_AHEAD < j0 + n_keys)
            for (int32_t e = 0; e < E; e += 16) _mm_prefetch((const char *)(v + PACK_AHEAD * a->ldkv + e), _MM_HINT_T0);
#endif
        for (int32_t qe = 0; qe < E32 / PW; qe++) {
            float *dst = Vp + ((int64_t)qe * ldp + (j - j0)) * PW;
            const int32_t n = E - qe * PW < PW ? E - qe * PW : PW;
            memcpy(dst, v + qe * PW, sizeof(float) * (size_t)n);
            for (int32_t c = n; c < PW; c++) dst[c] = 0.0f;
        }
    }
}

/* Keys attended by row r of a KV head's stack (query head r / T, token r % T):
 * [lo, hi] in gathered key rows. */
static inline void row_band(const attn_args *a, int32_t r, int32_t *lo, int32_t *hi) {
    const int32_t p = a->pos0 + r % a->T;
    int32_t l = a->W > 0 ? p - a->W + 1 : 0;
    if (l < a->kpos0) l = a->kpos0;
    *lo = l - a->kpos0;
    *hi = p - a->kpos0;
}

// ----------------------------------------------------------------------------
// Transposed scores (super blocks of ATTN_TR_MIN rows or more; not yet on
// the avx512 path, which has no X-transposed blocks): ST[j - js][c] = the
// chain over e of k_j[e] * q_c[e], the block's keys as the rows of the
// product and the super block's queries as one panel of its columns, so the
// keys are never transposed into panels. The chains are the same fmaf steps
// as q_c . k_j (a product's operands commute), so the bits are those of the
// packed form. A block that every row attends whole (all but a window's
// start and the causal diagonal) then takes its softmax across rows, 8 rows
// a vector (avx2; each row's steps exactly), and its values through
// X-transposed register blocks reading ST itself; any other block is copied
// back to the row-major S and takes attn_super's per-row steps.

#define ATTN_TR_MIN 16

/* Qt[e][c] = q[c][e] for rows c < R, 0 for c in [R, w). */
static void pack_q_t(const float *q, int32_t R, int32_t E, int32_t w, float *Qt) {
    for (int32_t e = 0; e < E; e++)
        for (int32_t c = 0; c < w; c++) Qt[(int64_t)e * PW + c] = c < R ? q[(int64_t)c * E + e] : 0.0f;
}

/* ST[jj][0, w) = the scores of keys jj < nk (rows of k0, ld apart) (row stride PW). */
static void scores_t(const attn_args *a, const float *k0, int32_t ld, int32_t nk, const float *Qt, int32_t w,
                     float *ST) {
    const int32_t mr = mr_max(a->path);  /* avx2: 6 x 16 blocks (6 x 32 in halves) */
    for (int32_t i = 0; i < nk; i += mr) {
        const int32_t n = nk - i < mr ? nk - i : mr;
        eng_kr_ukr_run(a->path, n, w, a->E, k0 + (int64_t)i * ld, ld, 0, Qt, 0, PW, ST + (int64_t)i * PW, PW, 0,
                (const char *)Qt, 0);
    }
}

/* S[c][off + jj] = ST[jj][c] (the per-row steps' layout). */
static void st_to_s(const float *ST, int32_t nk, int32_t R, float *S, int32_t off) {
    for (int32_t c = 0; c < R; c++)
        for (int32_t jj = 0; jj < nk; jj++) S[(int64_t)c * ATTN_SW + off + jj] = ST[(int64_t)jj * PW + c];
}

/* Ot[c][0, WV) (+)= the chains over keys jj < nk of e[c][jj] * (value row js + jj of Vb), e in ST
 * (rows: keys), in passes of PV_KS keys (each chain continued through Ot: a stored float is exact). */
#define PV_KS 32  /* keys per pass of the value product: the values and the ST rows it reads stay in L1 */
static void pv_t(eng_kpath path, int32_t R, int32_t nk, const float *ST, const ref_b *Vb, int32_t js, float *Ot,
                 int32_t E32, int32_t WV) {
    const int32_t mr = mr_max(path), nb = (R + mr - 1) / mr;
    for (int32_t k0 = 0; k0 < nk; k0 += PV_KS) {
        const int32_t kn = nk - k0 < PV_KS ? nk - k0 : PV_KS;
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t b0, b1;
            row_block(R, nb, ib, &b0, &b1);
            for (int32_t c = 0; c < WV; c += PW) {
                const float *v = Vb->b + (int64_t)(js + k0) * Vb->ldb + (c / PW) * Vb->ps + c % PW;
                eng_kr_ukr_run(path, b1 - b0, PW, kn, ST + (int64_t)k0 * PW + b0, PW, 1, v, 0, Vb->ldb,
                        Ot + (int64_t)b0 * E32 + c, E32, 1, (const char *)v, 0);
            }
        }
    }
}

/* A super block of KV head g: rows [r0, r0 + R) of the head's stack (at
 * most ATTN_RB), each with its keys [lo, hi], running max mx, sum l and
 * outputs Ot (R rows of E32). */
typedef struct attn_sb {
    int32_t      r0, R, lo_min, hi_max;
    int32_t      lo[ATTN_RB], hi[ATTN_RB];
    float        mx[ATTN_RB], l[ATTN_RB];
    const float *q;   /* its query rows [R][E] */
    float       *Ot;
} attn_sb;

static void sb_init(const attn_args *a, int32_t g, int32_t r0, int32_t r1, float *Ot, attn_sb *sb) {
    sb->r0 = r0;
    sb->R = r1 - r0;
    sb->lo_min = INT32_MAX;
    sb->hi_max = 0;
    for (int32_t i = 0; i < sb->R; i++) {
        row_band(a, r0 + i, &sb->lo[i], &sb->hi[i]);
        if (sb->lo[i] < sb->lo_min) sb->lo_min = sb->lo[i];
        if (sb->hi[i] > sb->hi_max) sb->hi_max = sb->hi[i];
        sb->mx[i] = -INFINITY;
        sb->l[i] = 0.0f;
    }
    sb->q = a->qg + ((int64_t)g * a->GR * a->T + r0) * a->E;
    sb->Ot = Ot;
    memset(Ot, 0, sizeof(float) * (size_t)sb->R * (size_t)round32(a->E));
}

/* The last key block of a block that starts at absolute position kpos0 + js. */
static inline int32_t block_end(const attn_args *a, int32_t js) {
    return (int32_t)(((int64_t)a->kpos0 + js) / ATTN_KB * ATTN_KB + ATTN_KB - a->kpos0 - 1);
}

/* Steps 2 and 3 of attn_super for key block [js, je] of a super block,
 * row by row: the scores of row i at S + i*ATTN_SW, key j in column j - cs;
 * the values of key j at Vb->b + (j - jb)*Vb->ldb. */
static void block_rows(const attn_args *a, attn_sb *sb, int32_t js, int32_t je, int32_t cs, float *S, const ref_b *Vb,
                       int32_t jb) {
    const eng_kpath path = a->path;
    const int32_t E32 = round32(a->E), WV = a->E % PW ? E32 : a->E, R = sb->R;
    int32_t j0[ATTN_RB], j1[ATTN_RB];
    float *Ot = sb->Ot;
    /* 2. per row: max, rescale, exponentials and sum */
    int32_t i0 = -1, i1 = -1, A = 0, B = INT32_MAX;
    bool together = true;
    for (int32_t i = 0; i < R; i++) {
        j0[i] = sb->lo[i] > js ? sb->lo[i] : js;
        j1[i] = sb->hi[i] < je ? sb->hi[i] : je;
        if (j0[i] > j1[i]) continue;
        if (i0 < 0) i0 = i;
        else if (i1 != i) together = false;
        i1 = i + 1;
        if (j0[i] > A) A = j0[i];
        if (j1[i] < B) B = j1[i];
        eng_k_softmax_step_path(path, S + (int64_t)i * ATTN_SW + (j0[i] - cs), j1[i] - j0[i] + 1, a->scale, a->bf16,
                                &sb->mx[i], &sb->l[i], Ot + (int64_t)i * E32, WV);
    }
    /* 3. values */
    if (i0 < 0) return;
    if (!together || A > B) A = INT32_MAX;  /* no keys common to the attending rows: each row on its own */
    for (int32_t i = i0; i < i1; i++)
        for (int32_t j = j0[i]; j < A && j <= j1[i]; j++)
            axpy_row(path, WV, S[(int64_t)i * ATTN_SW + (j - cs)], Vb->b + (int64_t)(j - jb) * Vb->ldb, Vb->ps,
                     Ot + (int64_t)i * E32);
    if (A != INT32_MAX) {
        const ref_b VS = {.b = Vb->b + (int64_t)(A - jb) * Vb->ldb, .ps = Vb->ps, .ldb = Vb->ldb, .nread = Vb->nread};
        eng_kr_gemm_region(path, i0, i1, 0, WV, WV, B - A + 1, S + (A - cs), ATTN_SW, NULL, &VS, Ot, E32, 1);
        for (int32_t i = i0; i < i1; i++)
            for (int32_t j = B + 1; j <= j1[i]; j++)
                axpy_row(path, WV, S[(int64_t)i * ATTN_SW + (j - cs)], Vb->b + (int64_t)(j - jb) * Vb->ldb, Vb->ps,
                         Ot + (int64_t)i * E32);
    }
}

/* out = round(o * (1 / l)) for every row of a super block. */
static void sb_finish(const attn_args *a, int32_t g, const attn_sb *sb) {
    for (int32_t i = 0; i < sb->R; i++) {
        const int32_t r = sb->r0 + i, t = r % a->T, h = g * a->GR + r / a->T;
        eng_kr_sm_norm(a->path, sb->Ot + (int64_t)i * round32(a->E), a->O + (int64_t)t * a->ldo + (int64_t)h * a->E, a->E,
                1.0f / sb->l[i], a->bf16);
    }
}

/* One super block [r0, r1) of KV head g (at most ATTN_RB rows), key block
 * by key block (absolute positions [ATTN_KB*b, ATTN_KB*(b+1)), cut to the
 * rows' keys), each row with its running max m, sum l and outputs o:
 *   1. the block's scores for every register block (chains over e against
 *      the packed keys), into S;
 *   2. per row attending keys [j0, j1] of the block: s = round(s * scale)
 *      and the block's max; when it is above m (after the row's first
 *      block), o = o * a and l = l * a with a = exp(m - max), and m = max;
 *      then e = exp(s - m) (rounded when bf16) in place, and l = l + the
 *      sum of the e in 8 lanes (lane (j - j0) % 8), combined pairwise;
 *   3. the block's values: the keys every attending row attends through
 *      the register-blocked product over those rows (chains continued from
 *      o), the rest (a window's start, the causal diagonal) by per-row axpy
 *      continuing the same chains, in ascending position.
 * Then out = round(o * (1 / l)). Every operation a row sees depends on its
 * keys and the absolute block boundaries only: not on the super block, the
 * chunk, the thread or the path. */
static void attn_super(const attn_args *a, int32_t g, int32_t r0, int32_t r1, float *Kp, bool packed, const ref_b *Vb,
                       float *S, float *Ot) {
    const eng_kpath path = a->path;
    const int32_t E = a->E, P32 = round32(a->P), mr = mr_max(path);
    attn_sb sb;
    sb_init(a, g, r0, r1, Ot, &sb);
    const int32_t nb = (sb.R + mr - 1) / mr;
    int32_t q_next = sb.lo_min / PW;  /* streamed keys: the next panel to pack */
    for (int32_t js = sb.lo_min, je; js <= sb.hi_max; js = je + 1) {
        je = block_end(a, js);
        if (je > sb.hi_max) je = sb.hi_max;
        /* 1. scores of the key panels [cs, ce) (extra scores are never read) */
        const int32_t cs = js / PW * PW, ce = (je / PW + 1) * PW;
        if (!packed)
            for (; q_next < ce / PW; q_next++) pack_keys(a, g, q_next, Kp);
        const ref_b KB = {.b = Kp + (int64_t)(cs / PW) * E * PW, .ps = (int64_t)E * PW, .ldb = PW, .nread = P32 - cs};
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t b0, b1;
            row_block(sb.R, nb, ib, &b0, &b1);
            eng_kr_gemm_rows(path, b1 - b0, E, sb.q + (int64_t)b0 * E, E, 0, &KB, 0, ce - cs, P32 - cs,
                      S + (int64_t)b0 * ATTN_SW, ATTN_SW, 0, tile_w(path, b1 - b0), NULL, 0);
        }
        block_rows(a, &sb, js, je, cs, S, Vb, 0);
    }
    sb_finish(a, g, &sb);
}

/* dst[jj][0, E) = src[jj * ld][0, E) for jj < n. */
#if REF_X86
__attribute__((target("avx2"))) static void copy_rows8(const float *src, int64_t ld, int32_t n, int32_t E, float *dst,
                                                        int32_t ldd) {
    for (int32_t jj = 0; jj < n; jj++)
        for (int32_t e = 0; e < E; e += 8)
            _mm256_storeu_ps(dst + (int64_t)jj * ldd + e, _mm256_loadu_ps(src + (int64_t)jj * ld + e));
}
#endif
static void copy_rows(eng_kpath path, const float *src, int64_t ld, int32_t n, int32_t E, float *dst, int32_t ldd) {
#if REF_X86
    if (E % 8 == 0 && path != ENG_KPATH_SCALAR) { copy_rows8(src, ld, n, E, dst, ldd); return; }
#endif
    for (int32_t jj = 0; jj < n; jj++) {
        const float *a = src + (int64_t)jj * ld;
        float *d = dst + (int64_t)jj * ldd;
        for (int32_t e = 0; e < E; e++) d[e] = a[e];
    }
}

/* Prefetches rows [j0, j1) of src (ld apart, E floats each) into L2. */
static void prefetch_rows(const float *src, int64_t ld, int32_t j0, int32_t j1, int32_t E) {
#if REF_X86
    for (int32_t j = j0; j < j1; j++)
        for (int32_t e = 0; e < E; e += 16) _mm_prefetch((const char *)(src + (int64_t)j * ld + e), _MM_HINT_T1);
#else
    (void)src, (void)ld, (void)j0, (void)j1, (void)E;
#endif
}

/* Super blocks [b0, b1) of KV head g (at most ATTN_GRP), in step over the
 * key blocks: each block's keys and values are copied once into contiguous
 * Kc [nk][E] and Vc ([nk][E], or panels [E32/32][nk][32] zero-padded when E
 * is not a multiple of 32) and serve every super block, with transposed
 * scores (above). Each super block takes exactly attn_super's steps. */
static void attn_group(const attn_args *a, int32_t g, int32_t b0, int32_t b1, float *w) {
    const eng_kpath path = a->path;
    const int32_t E = a->E, E32 = round32(E), WV = E % PW ? E32 : E, n = b1 - b0;
    float *Kc = w, *Vc = Kc + (int64_t)ATTN_KB * E, *ST = Vc + (int64_t)ATTN_KB * E32;
    float *S = ST + (int64_t)ATTN_KB * PW, *Qt = S + (int64_t)ATTN_RB * ATTN_SW;
    float *Ob = Qt + (int64_t)ATTN_GRP * E * PW;
    attn_sb sb[ATTN_GRP];
    int32_t wt[ATTN_GRP], lo_min = INT32_MAX, hi_max = 0;
    for (int32_t k = 0; k < n; k++) {
        const int32_t b = b0 + k, s = b / a->nb_seg;
        int32_t r0, r1;
        row_block(a->seg_rows, a->nb_seg, b % a->nb_seg, &r0, &r1);
        sb_init(a, g, s * a->seg_rows + r0, s * a->seg_rows + r1, Ob + (int64_t)k * ATTN_RB * E32, &sb[k]);
        wt[k] = sb[k].R <= 16 ? 16 : PW;
        pack_q_t(sb[k].q, sb[k].R, E, wt[k], Qt + (int64_t)k * E * PW);
        if (sb[k].lo_min < lo_min) lo_min = sb[k].lo_min;
        if (sb[k].hi_max > hi_max) hi_max = sb[k].hi_max;
    }
    const ref_b Vb = E % PW ? (ref_b){.b = Vc, .ps = (int64_t)ATTN_KB * PW, .ldb = PW, .nread = E32}
                            : (ref_b){.b = Vc, .ps = PW, .ldb = E, .nread = E};
    for (int32_t js = lo_min, je; js <= hi_max; js = je + 1) {
        je = block_end(a, js);
        if (je > hi_max) je = hi_max;
        const int32_t nk = je - js + 1;
        const float *k0 = a->K + (int64_t)js * a->ldkv + (int64_t)g * E;
        const float *v0 = a->V + (int64_t)js * a->ldkv + (int64_t)g * E;
        copy_rows(path, k0, a->ldkv, nk, E, Kc, E);
        if (E % PW) pack_values(a, g, js, nk, Vc, ATTN_KB);
        else copy_rows(path, v0, a->ldkv, nk, E, Vc, E);
        /* the next block's keys and values, into L2 while this one is computed (a share per super block) */
        const int32_t nn = je < hi_max ? (block_end(a, je + 1) < hi_max ? block_end(a, je + 1) : hi_max) - je : 0;
        for (int32_t k = 0; k < n; k++) {
            attn_sb *s = &sb[k];
            prefetch_rows(k0 + (int64_t)nk * a->ldkv, a->ldkv, nn * k / n, nn * (k + 1) / n, E);
            prefetch_rows(v0 + (int64_t)nk * a->ldkv, a->ldkv, nn * k / n, nn * (k + 1) / n, E);
            const int32_t bs = js > s->lo_min ? js : s->lo_min, be = je < s->hi_max ? je : s->hi_max;
            if (bs > be) continue;
            const int32_t nkk = be - bs + 1;
            scores_t(a, Kc + (int64_t)(bs - js) * E, E, nkk, Qt + (int64_t)k * E * PW, wt[k], ST);
            bool whole = true;  /* every row attends the whole block */
            for (int32_t i = 0; i < s->R && whole; i++) whole = s->lo[i] <= bs && s->hi[i] >= be;
#if REF_X86
            if (whole && path == ENG_KPATH_AVX2) {
                eng_kr_sm_block_t256(ST, nkk, s->R, a->scale, a->bf16, s->mx, s->l, s->Ot, E32, WV);
                pv_t(path, s->R, nkk, ST, &Vb, bs - js, s->Ot, E32, WV);
                continue;
            }
#endif
            const int32_t cs = bs / PW * PW;
            st_to_s(ST, nkk, s->R, S, bs - cs);
            block_rows(a, s, bs, be, cs, S, &Vb, js);
        }
    }
    for (int32_t k = 0; k < n; k++) sb_finish(a, g, &sb[k]);
}

/* Items [it0, it1) of thread ith: item = KV head * nb_g + row block, or
 * with transposed scores KV head * n_grp + group of super blocks. */
static void attn_items(void *v, int32_t ith, int32_t it0, int32_t it1) {
    const attn_args *a = v;
    const int32_t E = a->E, P32 = round32(a->P), E32 = round32(E);
    float *Kp = a->ws + (int64_t)ith * attn_thread_floats(a->P, E);
    if (a->tr) {
        for (int32_t it = it0; it < it1; it++) {
            const int32_t g = it / a->n_grp, k = it % a->n_grp;
            int32_t b0, b1;
            row_block(a->nb_g, a->n_grp, k, &b0, &b1);  /* the same balanced split as rows */
            attn_group(a, g, b0, b1, Kp);
        }
        return;
    }
    float *Vp = Kp + (int64_t)P32 * E;
    float *S = Vp + (int64_t)E32 * P32;
    float *Ot = S + (int64_t)ATTN_RB * ATTN_SW;
    int32_t g_packed = -1;
    for (int32_t it = it0; it < it1; it++) {
        const int32_t g = it / a->nb_g, b = it % a->nb_g;
        /* keys: packed once per head when the thread has several blocks of it, else panel by panel */
        const int32_t g_first = it0 > g * a->nb_g ? it0 : g * a->nb_g;
        const int32_t g_end = it1 < (g + 1) * a->nb_g ? it1 : (g + 1) * a->nb_g;
        const bool pack_all = g_end - g_first > 1;
        /* values: packed too (a contiguous stream per panel) when reused, else read in place */
        const bool pack_v = pack_all || E % PW;
        ref_b Vb;
        if (g != g_packed) {
            if (pack_all)
                for (int32_t q = 0; q < P32 / PW; q++) pack_keys(a, g, q, Kp);
            if (pack_v) pack_values(a, g, 0, a->P, Vp, P32);
            g_packed = g;
        }
        if (pack_v) Vb = (ref_b){.b = Vp, .ps = (int64_t)P32 * PW, .ldb = PW, .nread = E32};
        else Vb = (ref_b){.b = a->V + (int64_t)g * E, .ps = PW, .ldb = a->ldkv, .nread = E};
        const int32_t s = b / a->nb_seg, bs = b % a->nb_seg;
        int32_t r0, r1;
        row_block(a->seg_rows, a->nb_seg, bs, &r0, &r1);
        attn_super(a, g, s * a->seg_rows + r0, s * a->seg_rows + r1, Kp, pack_all, &Vb, S, Ot);
    }
}

void eng_k_attention_ref(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H, int32_t G,
                         int32_t E, const float *qg, const float *K, const float *V, int32_t ldkv, float *O,
                         int32_t ldo, float *ws, int64_t ws_cap) {
    const int32_t GR = H / G, P = pos0 + T - kpos0, mr = mr_max(ctx->path);
    ENG_ASSERT(GR * G == H && T >= 1 && P >= T && ws_cap >= eng_k_attention_ref_ws(ctx->n_threads, P, E));
    attn_args a = {
        .path = ctx->path, .bf16 = ctx->bf16, .T = T, .pos0 = pos0, .W = W, .kpos0 = kpos0, .GR = GR, .E = E,
        .P = P, .ldkv = ldkv, .ldo = ldo, .scale = 1.0f / sqrtf((float)E), .qg = qg, .K = K, .V = V, .O = O,
        .ws = ws,
    };
    /* A KV head's GR*T rows: per query head when a head's T rows fill blocks,
     * else all together (decode: the GR rows of one token share a block). */
    if (T >= mr) { a.seg_rows = T; a.n_seg = GR; }
    else { a.seg_rows = GR * T; a.n_seg = 1; }
    /* super blocks of at most ATTN_RB rows; more (down to one register block
     * each) when they would be too few for the threads */
    a.nb_seg = (a.seg_rows + ATTN_RB - 1) / ATTN_RB;
    const int32_t want = (2 * ctx->n_threads + G * a.n_seg - 1) / (G * a.n_seg);
    if (ctx->n_threads > 1 && a.nb_seg < want) {
        const int32_t most = (a.seg_rows + mr - 1) / mr;
        a.nb_seg = want < most ? want : most;
    }
    a.nb_g = a.n_seg * a.nb_seg;
    a.tr = ctx->path != ENG_KPATH_AVX512 && a.seg_rows / a.nb_seg >= ATTN_TR_MIN;
    /* transposed: a head's super blocks in groups of at most ATTN_GRP, more when the heads are too few for
     * the threads */
    const int32_t want_g = (2 * ctx->n_threads + G - 1) / G;
    a.n_grp = (a.nb_g + ATTN_GRP - 1) / ATTN_GRP;
    if (a.n_grp < want_g) a.n_grp = want_g < a.nb_g ? want_g : a.nb_g;
    const int32_t items = a.tr ? G * a.n_grp : G * a.nb_g;
    eng_k_parallel_ith(ctx, items, (int64_t)a.n_seg * a.seg_rows * P * E * 4 * G / items + 1, attn_items, &a);
}
