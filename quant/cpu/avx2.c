/*
 * quant/cpu/avx2.c: AVX2 + FMA + F16C row kernels (kernel set "avx2").
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
        },
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx2_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
