/*
 * quant/matmul_avx512.c: AVX-512 row kernels (kernel set "avx512"; needs AVX-512 F, BW,
 * VL and VNNI plus FMA/F16C, checked by the dispatcher in matmul_ref.c).
 *
 * No global -m flags: functions carry __attribute__((target(...))). Non-x86-64 builds
 * compile this file to nothing.
 *
 * Loop structure as in matmul_avx2.c: rows outer, activation rows in tiles of SD_NT
 * tokens then single tokens; each (row, token) pair runs the same instruction sequence
 * with its own accumulators in any tile, so results do not depend on n_tok / r0 / r1.
 *
 * Q8_0 / Q4_0 x Q8_0: two 32-element blocks per 512-bit step (block i in the low 256
 *   bits, block i+1 in the high 256 bits; an odd last block is zero-extended).
 *   Products via VNNI: Q8_0 dpbusd(|w| as u8, x * sign(w) as s8); Q4_0 dpbusd(q as u8,
 *   x) - dpbusd(8, x) -> 16 x i32 (8 per block, exact: |w| <= 128, |x| <= 127),
 *   converted to float and accumulated as
 *   acc = fma(float(p), [d_w0*d_x0 x8 | d_w1*d_x1 x8], acc); fixed horizontal sum.
 *   Q4_0 (ggml-common.h block_q4_0): 16 bytes -> low nibbles = elements 0..15, high
 *   nibbles = 16..31; value q - 8.
 * F32 / F16 / BF16 x F32: two 16-lane FMA accumulators per token (32 columns per step),
 *   masked loads for the tail; F16 via vcvtph2ps, BF16 via zero-extend + shift 16.
 */
#include "quant/quant_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define SD_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define SD_INL static inline __attribute__((always_inline))
#define SD_NT 4 /* tokens per tile */

SD_T SD_INL float hsum16(__m512 v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* ---------------------------------------------------------------------------------- */
/* Q8_0 / Q4_0 weights x Q8_0 activations                                               */
/* ---------------------------------------------------------------------------------- */

/* 32 signed int8 weights of one block, in a 256-bit register. kind: 8 or 4. */
SD_T SD_INL __m256i load_wq1(const void *wr, int64_t i, const int kind) {
    if (kind == 8) {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)wr + i;
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    const sd_block_q4_0 *b = (const sd_block_q4_0 *)wr + i;
    const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                                 _mm_srli_epi16(raw, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F)); /* unsigned nibbles q */
}

/* Blocks i and i+1, i in the low half: Q8_0 as 64 signed int8; Q4_0 as 64 unsigned
 * nibbles q (0..15, the -8 is applied in the dot product). */
SD_T SD_INL __m512i load_wq2(const void *wr, int64_t i, const int kind) {
    if (kind == 8) {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)wr + i;
        return _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
            _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    }
    const sd_block_q4_0 *b = (const sd_block_q4_0 *)wr + i;
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b[0].qs)),
        _mm_loadu_si128((const __m128i *)b[1].qs), 1); /* 128-bit lanes [b0 | b1] */
    /* [b0 b0 b1 b1]; shift the 2nd copy of each right by 4 (high nibbles), mask:
     * lanes [lo0 hi0 lo1 hi1] = block i elements 0..31, block i+1 elements 0..31 */
    const __m512i r2 = _mm512_castsi256_si512(raw);
    const __m512i dup = _mm512_shuffle_i64x2(r2, r2, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i sh = _mm512_mask_srli_epi16(dup, (__mmask32)0xFF00FF00u, dup, 4);
    return _mm512_and_si512(sh, _mm512_set1_epi8(0x0F));
}

SD_T SD_INL uint16_t load_wd(const void *wr, int64_t i, const int kind) {
    if (kind == 8) return ((const sd_block_q8_0 *)wr)[i].d;
    return ((const sd_block_q4_0 *)wr)[i].d;
}

/* Per 32-bit lane (4 consecutive elements) the exact int dot of weights and x:
 * Q8_0: dpbusd(|w|, x * sign(w)) (sign trick; x is never -128 from the quantizer).
 * Q4_0: dpbusd(q, x) - dpbusd(8, x) = sum (q - 8) x (q unsigned nibbles, no sign trick). */
SD_T SD_INL __m512i qprod(__m512i aw, __mmask64 neg, __m512i x, const int kind) {
    const __m512i zero = _mm512_setzero_si512();
    if (kind == 8) {
        const __m512i sx = _mm512_mask_sub_epi8(x, neg, zero, x);
        return _mm512_dpbusd_epi32(zero, aw, sx);
    }
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, aw, x),
                            _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), x));
}

/* [h2f(a), h2f(b), 0, 0]: two fp16 scales converted by one vcvtph2ps. */
SD_T SD_INL __m128 h2f_pair(uint16_t a, uint16_t b) {
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | ((uint32_t)b << 16))));
}

/* res[t] = dot(weight row wr, activation row xs[t]) for t < nt; nb blocks of 32.
 * Block scales: d = [dw0, dw1] * [dx0, dx1] (one mulps: the same IEEE products as
 * scalar dw * dx), expanded to [d0 x8 | d1 x8] with vpermps. */
SD_T SD_INL void qdot_tile(const void *wr, const sd_block_q8_0 *const *xs, const int nt,
                           int64_t nb, const int kind, float *res) {
    __m512 acc[SD_NT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    const __m512i expand = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512i w = load_wq2(wr, i, kind);
        const __mmask64 neg = kind == 8 ? _mm512_movepi8_mask(w) : 0;
        const __m512i aw = kind == 8 ? _mm512_abs_epi8(w) : w; /* -128 -> 128 as u8 */
        const __m128 dw = h2f_pair(load_wd(wr, i, kind), load_wd(wr, i + 1, kind));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < nt; t++) {
            const sd_block_q8_0 *xb = xs[t] + i;
            const __m512i x = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].qs)),
                _mm256_loadu_si256((const __m256i *)xb[1].qs), 1);
            const __m512i p = qprod(aw, neg, x, kind);
            const __m128 d2 = _mm_mul_ps(dw, h2f_pair(xb[0].d, xb[1].d));
            const __m512 d = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(d2));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[t]);
        }
    }
    if (i < nb) { /* odd last block: zero-extended to 512 bits, high half adds 0 * 0 */
        const __m512i w = _mm512_zextsi256_si512(load_wq1(wr, i, kind));
        const __mmask64 neg = kind == 8 ? _mm512_movepi8_mask(w) : 0;
        const __m512i aw = kind == 8 ? _mm512_abs_epi8(w) : w;
        const __m128 dw = h2f_pair(load_wd(wr, i, kind), 0);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < nt; t++) {
            const sd_block_q8_0 *xb = xs[t] + i;
            const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].qs));
            const __m512i p = qprod(aw, neg, x, kind);
            const __m128 d2 = _mm_mul_ps(dw, h2f_pair(xb[0].d, 0)); /* [d0, 0, 0, 0] */
            const __m512 d = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(d2));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < nt; t++) res[t] = hsum16(acc[t]);
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
            for (int t = 0; t < SD_NT; t++) y[(b + t) * ldy + r] = res[t];
        }
        for (; b < n_tok; b++) {
            xs[0] = (const sd_block_q8_0 *)((const char *)xq + (size_t)b * xrb);
            qdot_tile(wr, xs, 1, nb, kind, res);
            y[b * ldy + r] = res[0];
        }
    }
}

SD_T static void avx512_q8_0(const void *w, size_t wrb, int64_t n, const void *xq,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 8);
}

SD_T static void avx512_q4_0(const void *w, size_t wrb, int64_t n, const void *xq,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 4);
}

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations. kind: 0 f32, 1 f16, 2 bf16              */
/* ---------------------------------------------------------------------------------- */

/* 16 weights from column j, lanes not in mask m read nothing and are 0. */
SD_T SD_INL __m512 load_w16(const void *wr, int64_t j, __mmask16 m, const int kind) {
    if (kind == 0) return _mm512_maskz_loadu_ps(m, (const float *)wr + j);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)wr + j);
    if (kind == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

SD_T SD_INL void fdot_tile(const void *wr, const float *const *xs, const int nt, int64_t n,
                           const int kind, float *res) {
    __m512 a0[SD_NT], a1[SD_NT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < nt; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    const __mmask16 all = (__mmask16)0xFFFF;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512 w0 = load_w16(wr, j, all, kind), w1 = load_w16(wr, j + 16, all, kind);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < nt; t++) {
            a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + j), a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + j + 16), a1[t]);
        }
    }
    const int64_t rem = n - j; /* 0..31 */
    if (rem > 0) {
        const __mmask16 m0 = rem >= 16 ? all : (__mmask16)((1u << rem) - 1u);
        const __m512 w0 = load_w16(wr, j, m0, kind);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < nt; t++)
            a0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, xs[t] + j), a0[t]);
        if (rem > 16) {
            const __mmask16 m1 = (__mmask16)((1u << (rem - 16)) - 1u);
            const __m512 w1 = load_w16(wr, j + 16, m1, kind);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < nt; t++)
                a1[t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, xs[t] + j + 16), a1[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < nt; t++) res[t] = hsum16(_mm512_add_ps(a0[t], a1[t]));
}

SD_T SD_INL void frows(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const float *xs[SD_NT];
    float res[SD_NT];
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        int64_t b = 0;
        for (; b + SD_NT <= n_tok; b += SD_NT) {
            for (int t = 0; t < SD_NT; t++) xs[t] = (const float *)xq + (b + t) * n;
            fdot_tile(wr, xs, SD_NT, n, kind, res);
            for (int t = 0; t < SD_NT; t++) y[(b + t) * ldy + r] = res[t];
        }
        for (; b < n_tok; b++) {
            xs[0] = (const float *)xq + b * n;
            fdot_tile(wr, xs, 1, n, kind, res);
            y[b * ldy + r] = res[0];
        }
    }
}

SD_T static void avx512_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 0);
}

SD_T static void avx512_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 1);
}

SD_T static void avx512_bf16(const void *w, size_t wrb, int64_t n, const void *xq,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 2);
}

const sd_kernel_set sd_kernels_avx512 = {
    .name = "avx512",
    .f32 = avx512_f32,
    .f16 = avx512_f16,
    .bf16 = avx512_bf16,
    .q8_0 = avx512_q8_0,
    .q4_0 = avx512_q4_0,
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx512_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
