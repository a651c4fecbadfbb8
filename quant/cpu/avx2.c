/*
 * quant/cpu/avx2.c: AVX2 + FMA + F16C kernels (kernel set "avx2"). Compiled without any
 * global -m flags: each function carries __attribute__((target("avx2,fma,f16c"))) and
 * is only called after the dispatcher (dispatch.c) checked the CPU. Non-x86-64 builds
 * compile this file to nothing.
 *
 * Packed kernels (every quantized weight type): quant/cpu/x256.h with vpmaddubsw products
 * summed in int16 before one vpmaddwd (the fold counts and their bounds are there).
 *
 * F32 / F16 / BF16 x F32 (GGUF rows): four 8-lane FMA accumulators per token (lanes =
 * columns mod 32, the reference's 32 partial sums), a masked tail, the reference's tree.
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#define SD_T         __attribute__((target("avx2,fma,f16c")))
#define SD_X256_VNNI 0
#include "quant/cpu/x256.h"

#define SD_NT 4 /* float kernels: tokens per tile */

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations. kind: 0 f32, 1 f16, 2 bf16              */
/* ---------------------------------------------------------------------------------- */

SD_T SD_INL float hsum8(v8f v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* 8 weights from column j; lanes >= m (m < 8) read nothing and are 0. */
SD_T SD_INL v8f load_w8(const void *wr, int64_t j, int m, const int kind) {
    if (m >= 8) {
        if (kind == 0) return _mm256_loadu_ps((const float *)wr + j);
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)wr + j));
        if (kind == 1) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (m <= 0) return _mm256_setzero_ps();
    if (kind == 0) return _mm256_maskload_ps((const float *)wr + j, lanes_lt(m));
    uint16_t tmp[8] = {0};
    memcpy(tmp, (const uint16_t *)wr + j, (size_t)m * 2);
    const __m128i h = _mm_loadu_si128((const __m128i *)tmp);
    if (kind == 1) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

SD_T SD_INL v8f load_x8(const float *x, int64_t j, int m) {
    if (m >= 8) return _mm256_loadu_ps(x + j);
    if (m <= 0) return _mm256_setzero_ps();
    return _mm256_maskload_ps(x + j, lanes_lt(m));
}

/* Four accumulators a[0..3] per token: lanes 8q + l accumulate the columns j = 32 s + 8 q
 * + l, the reference's partial sums p[8q + l]; then (a0 + a2) + (a1 + a3) and hsum8: the
 * tree s = 16, 8, 4, 2, 1. */
SD_T SD_INL void fdot_tile(const void *wr, const float *const *xs, const int nt, int64_t n,
                           const int kind, float *res) {
    v8f a[SD_NT][4];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][0] = a[t][1] = a[t][2] = a[t][3] =
        _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            const v8f w = load_w8(wr, j + 8 * q, 8, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][q] =
                _mm256_fmadd_ps(w, _mm256_loadu_ps(xs[t] + j + 8 * q), a[t][q]);
        }
    }
    if (j < n) {
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            const int m = (int)(n - j - 8 * q);
            if (m <= 0) break;
            const v8f w = load_w8(wr, j + 8 * q, m, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][q] =
                _mm256_fmadd_ps(w, load_x8(xs[t], j + 8 * q, m), a[t][q]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) res[t] =
        hsum8(_mm256_add_ps(_mm256_add_ps(a[t][0], a[t][2]), _mm256_add_ps(a[t][1], a[t][3])));
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

/* Quantized types run packed (the backend packs their weights at load); in GGUF rows
 * they run the scalar reference. */
const sd_kernel_set sd_kernels_avx2 = {
    .name = "avx2",
    .lower = &sd_kernels_scalar,
    .peak = peak_loop,
    .k =
        {
            [SD_TYPE_F32] = {avx2_f32, NULL},
            [SD_TYPE_F16] = {avx2_f16, NULL},
            [SD_TYPE_BF16] = {avx2_bf16, NULL},
            [SD_TYPE_Q8_0] = {NULL, p_q8_0},
            [SD_TYPE_Q4_0] = {NULL, p_q4_0},
            [SD_TYPE_Q5_0] = {NULL, p_q5_0},
            [SD_TYPE_Q4_1] = {NULL, p_q4_1},
            [SD_TYPE_Q5_1] = {NULL, p_q5_1},
            [SD_TYPE_Q2_K] = {NULL, p_q2_k},
            [SD_TYPE_Q3_K] = {NULL, p_q3_k},
            [SD_TYPE_Q4_K] = {NULL, p_q4_k},
            [SD_TYPE_Q5_K] = {NULL, p_q5_k},
            [SD_TYPE_Q6_K] = {NULL, p_q6_k},
        },
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx2_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
