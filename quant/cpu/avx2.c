/*
 * quant/cpu/avx2.c: AVX2 + FMA + F16C row kernels (kernel set "avx2"). Over 600 lines on
 * purpose: one file per instruction set (STYLE.md), so every weight type's AVX2 kernel is
 * here, each a short section.
 *
 * Compiled without any global -m flags: each function carries
 * __attribute__((target("avx2,fma,f16c"))) and is only called after the dispatcher
 * (dispatch.c) checked the CPU. Non-x86-64 builds compile this file to nothing.
 *
 * Loop structure: rows outer; for each row, activation rows in tiles of SD_NT tokens
 * (then single tokens) so one weight block load/decode feeds several tokens. Every
 * (row, token) pair has its own accumulators and the exact same instruction sequence
 * whatever tile it is in, so results are independent of n_tok / r0 / r1.
 *
 * Q8_0 x Q8_0 and Q4_0 x Q8_0 (ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0, AVX2 path):
 *   per 32-element block: signed int8 products summed with the sign trick
 *   maddubs(|w|, sign(x, w)) -> 16 x i16 (no saturation: |w| <= 128, |x| <= 127),
 *   madd with 1 -> 8 x i32 (exact), converted to float and accumulated as
 *   acc = fma(float(p), d_w * d_x, acc); finally a fixed horizontal sum.
 *   Q4_0 nibbles are unpacked to int8 (q - 8), low nibbles -> elements 0..15, high
 *   nibbles -> 16..31 (ggml-common.h block_q4_0).
 * F32 / F16 / BF16 x F32: two 8-lane FMA accumulators per token over 16 columns per
 *   step, one 8-column step, then a scalar fmaf tail; weights converted in registers
 *   (vcvtph2ps for F16, zero-extend + shift left 16 for BF16).
 * Q4_1 / Q5_0 / Q5_1 x Q8_S and Q2_K..Q6_K x Q8_K: weights decoded once per row per
 *   group of up to SD_KG tokens (the comments at "Groups of tokens" below).
 *
 * Over 600 lines on purpose: one file per instruction set (quant/cpu/: ref.c, avx2.c,
 * avx512.c), so every AVX2 kernel of every type is here.
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define SD_T   __attribute__((target("avx2,fma,f16c")))
#define SD_INL static inline __attribute__((always_inline))
#define SD_NT  4 /* tokens per tile */

SD_T SD_INL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

SD_T SD_INL float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

/* ---------------------------------------------------------------------------------- */
/* Q8_0 / Q4_0 weights x Q8_0 activations                                               */
/* ---------------------------------------------------------------------------------- */

/* 32 signed int8 weights of block i (Q8_0 as is, Q4_0 as q - 8). kind: 8 or 4. */
SD_T SD_INL __m256i load_wq(const void *wr, int64_t i, const int kind) {
    if (kind == 8) {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)wr + i;
        return _mm256_loadu_si256((const __m256i *)b->qs);
    } else {
        const sd_block_q4_0 *b = (const sd_block_q4_0 *)wr + i;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
        return _mm256_sub_epi8(_mm256_and_si256(both, m4), _mm256_set1_epi8(8));
    }
}

SD_T SD_INL uint16_t load_wd(const void *wr, int64_t i, const int kind) {
    if (kind == 8) return ((const sd_block_q8_0 *)wr)[i].d;
    return ((const sd_block_q4_0 *)wr)[i].d;
}

/* res[t] = dot(weight row wr, activation row xs[t]) for t < nt; nb blocks of 32. */
SD_T SD_INL void qdot_tile(const void *wr, const sd_block_q8_0 *const *xs, const int nt, int64_t nb,
                           const int kind, float *res) {
    __m256 acc[SD_NT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w = load_wq(wr, i, kind);
        const __m256i aw = _mm256_sign_epi8(w, w); /* |w| as u8 (-128 -> 128) */
        const float dw = h2f(load_wd(wr, i, kind));
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)xs[t][i].qs);
            const __m256i sx = _mm256_sign_epi8(x, w); /* x * sign(w) */
            const __m256i p16 = _mm256_maddubs_epi16(aw, sx);
            const __m256i p32 = _mm256_madd_epi16(p16, ones);
            const __m256 d = _mm256_set1_ps(dw * h2f(xs[t][i].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), d, acc[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) res[t] = hsum8(acc[t]);
}

SD_T SD_INL void qrows(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = n / 32;
    const size_t xrb = (size_t)nb * sizeof(sd_block_q8_0);
    const sd_block_q8_0 *xs[SD_NT];
    float res[SD_NT];
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        int64_t b = 0;
        for (; b + SD_NT <= n_tok; b += SD_NT) {
            for (int t = 0; t < SD_NT; t++)
                xs[t] = (const sd_block_q8_0 *)((const char *)xq + (size_t)(b + t) * xrb);
            qdot_tile(wr, xs, SD_NT, nb, kind, res);
            for (int t = 0; t < SD_NT; t++)
                y[(b + t) * ldy + r] = res[t];
        }
        for (; b < n_tok; b++) {
            xs[0] = (const sd_block_q8_0 *)((const char *)xq + (size_t)b * xrb);
            qdot_tile(wr, xs, 1, nb, kind, res);
            y[b * ldy + r] = res[0];
        }
    }
}

SD_T static void avx2_q8_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 8);
}

SD_T static void avx2_q4_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 4);
}

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations. kind: 0 f32, 1 f16, 2 bf16              */
/* ---------------------------------------------------------------------------------- */

SD_T SD_INL __m256 load_w8(const void *wr, int64_t j, const int kind) {
    if (kind == 0) return _mm256_loadu_ps((const float *)wr + j);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)wr + j));
    if (kind == 1) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

SD_T SD_INL float load_w1(const void *wr, int64_t j, const int kind) {
    if (kind == 0) return ((const float *)wr)[j];
    const uint16_t h = ((const uint16_t *)wr)[j];
    if (kind == 1) return h2f(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

SD_T SD_INL void fdot_tile(const void *wr, const float *const *xs, const int nt, int64_t n,
                           const int kind, float *res) {
    __m256 a0[SD_NT], a1[SD_NT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a0[t] = a1[t] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 w0 = load_w8(wr, j, kind), w1 = load_w8(wr, j + 8, kind);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + j), a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs[t] + j + 8), a1[t]);
        }
    }
    if (j + 8 <= n) {
        const __m256 w0 = load_w8(wr, j, kind);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a0[t] =
            _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + j), a0[t]);
        j += 8;
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
        float s = hsum8(_mm256_add_ps(a0[t], a1[t]));
        for (int64_t k = j; k < n; k++)
            s = __builtin_fmaf(load_w1(wr, k, kind), xs[t][k], s);
        res[t] = s;
    }
}

SD_T SD_INL void frows(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const float *xs[SD_NT];
    float res[SD_NT];
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        int64_t b = 0;
        for (; b + SD_NT <= n_tok; b += SD_NT) {
            for (int t = 0; t < SD_NT; t++)
                xs[t] = (const float *)xq + (b + t) * n;
            fdot_tile(wr, xs, SD_NT, n, kind, res);
            for (int t = 0; t < SD_NT; t++)
                y[(b + t) * ldy + r] = res[t];
        }
        for (; b < n_tok; b++) {
            xs[0] = (const float *)xq + b * n;
            fdot_tile(wr, xs, 1, n, kind, res);
            y[b * ldy + r] = res[0];
        }
    }
}

SD_T static void avx2_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 0);
}

SD_T static void avx2_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 1);
}

SD_T static void avx2_bf16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 2);
}

/* ---------------------------------------------------------------------------------- */
/* Groups of tokens: Q4_1 / Q5_0 / Q5_1 and the K-quants                                */
/* ---------------------------------------------------------------------------------- */

/*
 * These kernels decode a chunk of weights (8 blocks of 32, or one K super-block of 256)
 * once into registers / L1 (w[8] below), then run every token of the group over it; a
 * group is up to SD_KG consecutive tokens (all of a verification batch), so each weight
 * block is unpacked once per row per group. Per token the float operations are fixed:
 * its own accumulator, one update per block (32) or super-block (256) in order, so the
 * result does not depend on the group it is in, on n_tok, r0 or r1.
 */
#define SD_KG 32 /* most tokens per group */

/* 32 bytes: byte j = 0xFF if bit j of the little-endian 32-bit word at qh is set. */
SD_T SD_INL __m256i bits_to_bytes(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf =
        _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The 32 nibbles of a split-order qs[16]: elements 0..15 low nibbles, 16..31 high. */
SD_T SD_INL __m256i nibbles32(const uint8_t *qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

/* --- 32-element blocks: kind 41 (Q4_1), 50 (Q5_0), 51 (Q5_1) ----------------------- */

/* (Q4_0 and Q8_0 keep the 4-token tiles above: for 32-element blocks the per-token
 * work per block dominates, and grouping measured no faster for them.) The signed kind
 * (Q5_0: q - 16) uses the sign trick; the unsigned ones (Q4_1, Q5_1: q, plus the min
 * through the activation sums) use maddubs directly. */
#define SD_SIGNED(kind) ((kind) == 50)

/* The fp16 pair (d, m) at p (adjacent, as in Q4_1 / Q5_1) as floats, in one conversion. */
SD_T SD_INL void h2f_pair(const uint16_t *p, float *d, float *m) {
    uint32_t u;
    memcpy(&u, p, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
    *d = _mm_cvtss_f32(f);
    *m = _mm_cvtss_f32(_mm_movehdup_ps(f));
}

/* Block i of row wr: levels w (and |w| for signed kinds), scale d, min m. */
SD_T SD_INL void dec_blk32(const void *wr, int64_t i, const int kind, __m256i *w, __m256i *aw,
                           float *d, float *m) {
    if (kind == 41) {
        const sd_block_q4_1 *b = (const sd_block_q4_1 *)wr + i;
        *w = nibbles32(b->qs);
        h2f_pair(&b->d, d, m);
    } else if (kind == 50) {
        const sd_block_q5_0 *b = (const sd_block_q5_0 *)wr + i;
        /* q - 16 = nibble - 16 + 16 h: nibble | 0xF0 where the 5th bit is clear */
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(b->qh), _mm256_set1_epi8((char)0xF0));
        *w = _mm256_or_si256(nibbles32(b->qs), hi);
        *d = h2f(b->d);
    } else {
        const sd_block_q5_1 *b = (const sd_block_q5_1 *)wr + i;
        const __m256i hi = _mm256_and_si256(bits_to_bytes(b->qh), _mm256_set1_epi8(0x10));
        *w = _mm256_or_si256(nibbles32(b->qs), hi);
        h2f_pair(&b->d, d, m);
    }
    if (SD_SIGNED(kind)) *aw = _mm256_sign_epi8(*w, *w); /* |w| as u8 (-128 -> 128) */
}

/* One token, one block: the fixed per-block float update of (acc, summ). xr: the
 * token's activation row (Q8_S: float scale, and d * sum for the min term). */
SD_T SD_INL void tok_blk32(__m256i w, __m256i aw, float d, float m, const void *xr, int64_t i,
                           const int kind, __m256 *acc, float *summ) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p16;
    const sd_block_q8_s *x = (const sd_block_q8_s *)xr + i;
    const __m256i xv = _mm256_loadu_si256((const __m256i *)x->qs);
    if (SD_SIGNED(kind)) { /* |w| * (x * sign(w)): no saturation, |w| <= 16, |x| <= 127 */
        p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w));
    } else {
        p16 = _mm256_maddubs_epi16(w, xv); /* unsigned w <= 31: no saturation */
        *summ += m * x->ds;
    }
    const float dx = x->d;
    const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
    *acc = _mm256_fmadd_ps(p, _mm256_set1_ps(d * dx), *acc);
}

/* One decoded chunk of up to 8 blocks. */
typedef struct {
    __m256i w[8], aw[8];
    float d[8], m[8];
} chunk32;

/* Token state: two accumulators (8 lanes: even and odd blocks, so consecutive FMAs do
 * not wait on each other) and, for Q4_1 / Q5_1, the sums of the min terms (same). */
typedef struct {
    __m256 acc[2];
    float summ[2];
} tok32;

/*
 * Groups of up to SD_KG tokens: each chunk of 8 blocks is decoded once, then every
 * token of the group runs over it. A group of one token (decode) runs the same
 * per-block update fused with the decode, without the round trip through the chunk:
 * per token the float operations and their order are identical either way (tok_blk32
 * per block, in block order), so results are too.
 */
SD_T SD_INL void rows32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = n / 32;
    const size_t xrb = (size_t)nb * sizeof(sd_block_q8_s);
    tok32 st[SD_KG];
    chunk32 c;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t g0 = 0; g0 < n_tok; g0 += SD_KG) {
            const int nt = (int)(n_tok - g0 < SD_KG ? n_tok - g0 : SD_KG);
            for (int t = 0; t < nt; t++) {
                st[t].acc[0] = st[t].acc[1] = _mm256_setzero_ps();
                st[t].summ[0] = st[t].summ[1] = 0.0f;
            }
            if (nt == 1) { /* decode: fused, blocks in pairs (even -> 0, odd -> 1) */
                const void *xr = (const char *)xq + (size_t)g0 * xrb;
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                float s0 = 0.0f, s1 = 0.0f;
                __m256i wv, awv = _mm256_setzero_si256();
                float d, m = 0.0f;
                int64_t i = 0;
                for (; i + 1 < nb; i += 2) {
                    dec_blk32(wr, i, kind, &wv, &awv, &d, &m);
                    tok_blk32(wv, awv, d, m, xr, i, kind, &a0, &s0);
                    dec_blk32(wr, i + 1, kind, &wv, &awv, &d, &m);
                    tok_blk32(wv, awv, d, m, xr, i + 1, kind, &a1, &s1);
                }
                if (i < nb) {
                    dec_blk32(wr, i, kind, &wv, &awv, &d, &m);
                    tok_blk32(wv, awv, d, m, xr, i, kind, &a0, &s0);
                }
                st[0].acc[0] = a0, st[0].acc[1] = a1;
                st[0].summ[0] = s0, st[0].summ[1] = s1;
            } else {
                for (int64_t i0 = 0; i0 < nb; i0 += 8) {
                    const int nbk = (int)(nb - i0 < 8 ? nb - i0 : 8);
                    for (int j = 0; j < nbk; j++) {
                        c.m[j] = 0.0f;
                        c.aw[j] = _mm256_setzero_si256();
                        dec_blk32(wr, i0 + j, kind, &c.w[j], &c.aw[j], &c.d[j], &c.m[j]);
                    }
                    for (int t = 0; t < nt; t++) {
                        const void *xr = (const char *)xq + (size_t)(g0 + t) * xrb;
                        __m256 a0 = st[t].acc[0], a1 = st[t].acc[1];
                        float s0 = st[t].summ[0], s1 = st[t].summ[1];
                        int j = 0; /* i0 is even: block parity is that of j */
                        for (; j + 1 < nbk; j += 2) {
                            tok_blk32(c.w[j], c.aw[j], c.d[j], c.m[j], xr, i0 + j, kind, &a0, &s0);
                            tok_blk32(c.w[j + 1], c.aw[j + 1], c.d[j + 1], c.m[j + 1], xr,
                                      i0 + j + 1, kind, &a1, &s1);
                        }
                        if (j < nbk)
                            tok_blk32(c.w[j], c.aw[j], c.d[j], c.m[j], xr, i0 + j, kind, &a0, &s0);
                        st[t].acc[0] = a0, st[t].acc[1] = a1;
                        st[t].summ[0] = s0, st[t].summ[1] = s1;
                    }
                }
            }
            for (int t = 0; t < nt; t++) {
                const float s = hsum8(_mm256_add_ps(st[t].acc[0], st[t].acc[1]));
                y[(g0 + t) * ldy + r] = SD_SIGNED(kind) ? s : s + (st[t].summ[0] + st[t].summ[1]);
            }
        }
    }
}

SD_T static void avx2_q4_1(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    rows32(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 41);
}

SD_T static void avx2_q5_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    rows32(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 50);
}

SD_T static void avx2_q5_1(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    rows32(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 51);
}

/* --- K-quants x Q8_K: kind 2 (Q2_K), 3 (Q3_K), 4 (Q4_K), 5 (Q5_K), 6 (Q6_K) -------- */

/*
 * One decoded super-block: w[j] the 32 unsigned levels of elements [32j, 32j + 32)
 * (Q3_K: q + 4 in 0..7, Q6_K: q in 0..63, both with the offset taken out through the
 * activation sums), sv[j] the 16 x int16 scales for them (lanes 0..7: group 2j, lanes
 * 8..15: group 2j + 1), mg the 16 x int16 coefficients of the 16 activation group sums
 * (Q2_K / Q4_K / Q5_K: the mins; Q3_K / Q6_K: offset * scale), d and dmin.
 * Per token: P = sum_j madd(maddubs(w[j], x[j]), sv[j]) (exact int32 lanes),
 * M = madd(bsums, mg); types with mins: acc = fma(P, dx d, acc), then
 * acc = fnma(M, dx dmin, acc); offset types: acc = fma(P - M, dx d, acc).
 */
typedef struct {
    __m256i w[8], sv[8], mg;
    float d, dmin;
} kblock;

/* sv[j] from g16 (16 x int16 per-group scales). */
SD_T SD_INL void k_scale_vectors(__m256i g16, __m256i *sv) {
    const __m256i lo = _mm256_permute2x128_si256(g16, g16, 0x00); /* groups 0..7 twice */
    const __m256i hi = _mm256_permute2x128_si256(g16, g16, 0x11); /* groups 8..15 twice */
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        /* low lane: int16 #2j (bytes 4j, 4j+1); high lane: #2j+1 */
        const char a = (char)(4 * j), b = (char)(4 * j + 2);
        const __m256i ctl = _mm256_setr_epi8(
            a, (char)(a + 1), a, (char)(a + 1), a, (char)(a + 1), a, (char)(a + 1), a,
            (char)(a + 1), a, (char)(a + 1), a, (char)(a + 1), a, (char)(a + 1), b, (char)(b + 1),
            b, (char)(b + 1), b, (char)(b + 1), b, (char)(b + 1), b, (char)(b + 1), b,
            (char)(b + 1), b, (char)(b + 1), b, (char)(b + 1));
        sv[j] = _mm256_shuffle_epi8(lo, ctl);
        sv[j + 4] = _mm256_shuffle_epi8(hi, ctl);
    }
}

/* Q4_K / Q5_K: 8 scales and 8 mins (6 bits) from scales[12] as two 8-byte words each
 * (the bit layout of sd_k4_scale_min, four bytes at a time). */
SD_T SD_INL void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    const uint32_t sc_lo = a & 0x3F3F3F3Fu, mn_lo = b & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t mn_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *mn = (uint64_t)mn_lo | ((uint64_t)mn_hi << 32);
}

/* 8 bytes v0..v7 -> 16 x int16 v0, v0, v1, v1, ..., v7, v7 */
SD_T SD_INL __m256i dup8_epu8(uint64_t v) {
    const __m128i x = _mm_cvtsi64_si128((long long)v);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x, x));
}

SD_T SD_INL void dec_k(const void *wr, int64_t i, const int kind, kblock *o) {
    const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F);
    const __m256i one = _mm256_set1_epi8(1);
    __m256i g16;
    if (kind == 4 || kind == 5) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t d, dmin;
        if (kind == 4) {
            const sd_block_q4_k *b = (const sd_block_q4_k *)wr + i;
            scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
        } else {
            const sd_block_q5_k *b = (const sd_block_q5_k *)wr + i;
            scales = b->scales, qs = b->qs, qh = b->qh, d = b->d, dmin = b->dmin;
        }
        uint64_t sc, mn;
        k4_scales(scales, &sc, &mn);
        g16 = dup8_epu8(sc);
        o->mg = dup8_epu8(mn);
        o->d = h2f(d);
        o->dmin = h2f(dmin);
        __m256i h = kind == 5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (kind == 5) { /* bit s of qh[l] is the 5th bit of element 32 s + l */
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                h = _mm256_srli_epi16(h, 1);
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                h = _mm256_srli_epi16(h, 1);
            }
            o->w[2 * c] = lo;
            o->w[2 * c + 1] = hi;
        }
    } else if (kind == 6) {
        const sd_block_q6_k *b = (const sd_block_q6_k *)wr + i;
        g16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        o->mg = _mm256_slli_epi16(g16, 5); /* 32 * sc: the offset of q - 32 */
        o->d = h2f(b->d);
        o->dmin = 0.0f;
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
            const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
            const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
            o->w[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), h0);
            o->w[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), h1);
            o->w[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2);
            o->w[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3);
        }
    } else if (kind == 2) {
        const sd_block_q2_k *b = (const sd_block_q2_k *)wr + i;
        const __m128i s = _mm_loadu_si128((const __m128i *)b->scales);
        const __m128i m4x = _mm_set1_epi8(0x0F);
        g16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4x));
        o->mg = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4x));
        o->d = h2f(b->d);
        o->dmin = h2f(b->dmin);
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            o->w[4 * h + 0] = _mm256_and_si256(q, m2);
            o->w[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m2);
            o->w[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m2);
            o->w[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m2);
        }
    } else { /* kind 3: Q3_K */
        const sd_block_q3_k *b = (const sd_block_q3_k *)wr + i;
        uint32_t a, bb, c;
        memcpy(&a, b->scales, 4);
        memcpy(&bb, b->scales + 4, 4);
        memcpy(&c, b->scales + 8, 4);
        /* scale j (0..15): low 4 bits from byte j (j < 8, low nibble) or j - 8 (high
         * nibble), 2 high bits from byte 8 + (j & 3) at bit 2 (j >> 2); minus 32 */
        const uint32_t w0 = (a & 0x0F0F0F0Fu) | ((c & 0x03030303u) << 4);
        const uint32_t w1 = (bb & 0x0F0F0F0Fu) | (((c >> 2) & 0x03030303u) << 4);
        const uint32_t w2 = ((a >> 4) & 0x0F0F0F0Fu) | (((c >> 4) & 0x03030303u) << 4);
        const uint32_t w3 = ((bb >> 4) & 0x0F0F0F0Fu) | (((c >> 6) & 0x03030303u) << 4);
        const __m128i s =
            _mm_sub_epi8(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3), _mm_set1_epi8(32));
        g16 = _mm256_cvtepi8_epi16(s);
        o->mg = _mm256_slli_epi16(g16, 2); /* 4 * sc: the offset of q - 4 */
        o->d = h2f(b->d);
        o->dmin = 0.0f;
        __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m2);
                o->w[4 * h + k] =
                    _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
                hm = _mm256_srli_epi16(hm, 1);
            }
        }
    }
    k_scale_vectors(g16, o->sv);
}

SD_T SD_INL __m256 tok_k(const kblock *kb, const sd_block_q8_k *x, const int kind, __m256 acc) {
    __m256i p = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
        p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(kb->w[j], xv), kb->sv[j]));
    }
    const __m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), kb->mg);
    if (kind == 3 || kind == 6)
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(p, m)),
                               _mm256_set1_ps(x->d * kb->d), acc);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(x->d * kb->d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(x->d * kb->dmin), acc);
}

SD_T SD_INL void rows_k(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = n / SD_QK_K;
    const size_t xrb = (size_t)nb * sizeof(sd_block_q8_k);
    __m256 acc[SD_KG];
    kblock kb;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t g0 = 0; g0 < n_tok; g0 += SD_KG) {
            const int nt = (int)(n_tok - g0 < SD_KG ? n_tok - g0 : SD_KG);
            const sd_block_q8_k *x0 = (const sd_block_q8_k *)((const char *)xq + (size_t)g0 * xrb);
            for (int t = 0; t < nt; t++)
                acc[t] = _mm256_setzero_ps();
            for (int64_t i = 0; i < nb; i++) {
                dec_k(wr, i, kind, &kb);
                for (int t = 0; t < nt; t++)
                    acc[t] = tok_k(&kb, x0 + (size_t)t * (size_t)nb + i, kind, acc[t]);
            }
            for (int t = 0; t < nt; t++)
                y[(g0 + t) * ldy + r] = hsum8(acc[t]);
        }
    }
}

#define SD_AVX2_K(NAME, KIND)                                                                      \
    SD_T static void NAME(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,     \
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {                         \
        rows_k(w, wrb, n, xq, n_tok, y, ldy, r0, r1, KIND);                                        \
    }
SD_AVX2_K(avx2_q2_k, 2)
SD_AVX2_K(avx2_q3_k, 3)
SD_AVX2_K(avx2_q4_k, 4)
SD_AVX2_K(avx2_q5_k, 5)
SD_AVX2_K(avx2_q6_k, 6)

const sd_kernel_set sd_kernels_avx2 = {
    .name = "avx2",
    .lower = &sd_kernels_scalar,
    .k =
        {
            [SD_TYPE_F32] = {avx2_f32, NULL},
            [SD_TYPE_F16] = {avx2_f16, NULL},
            [SD_TYPE_BF16] = {avx2_bf16, NULL},
            [SD_TYPE_Q8_0] = {avx2_q8_0, NULL},
            [SD_TYPE_Q4_0] = {avx2_q4_0, NULL},
            [SD_TYPE_Q4_1] = {avx2_q4_1, NULL},
            [SD_TYPE_Q5_0] = {avx2_q5_0, NULL},
            [SD_TYPE_Q5_1] = {avx2_q5_1, NULL},
            [SD_TYPE_Q2_K] = {avx2_q2_k, NULL},
            [SD_TYPE_Q3_K] = {avx2_q3_k, NULL},
            [SD_TYPE_Q4_K] = {avx2_q4_k, NULL},
            [SD_TYPE_Q5_K] = {avx2_q5_k, NULL},
            [SD_TYPE_Q6_K] = {avx2_q6_k, NULL},
        },
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx2_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
