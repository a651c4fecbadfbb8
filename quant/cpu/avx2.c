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

/* ---------------------------------------------------------------------------------- */
/* Activation quantization (Q8_0, Q8_K), byte-identical to the references             */
/* ---------------------------------------------------------------------------------- */

SD_T SD_INL float hmax8(v8f v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* Whether any lane of a (|x|) is NaN or an infinity. */
SD_T SD_INL int any_bad(v8f a) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(3.40282347e38f), _CMP_NLE_UQ)) != 0;
}

/* 32 int32 in [-128, 127] (q[0..3], 8 each, in element order) as 32 int8 at out. */
SD_T SD_INL void store_i8x32(int8_t *out, const v8i *q) {
    const v8i a = _mm256_packs_epi32(q[0], q[1]); /* 128-bit lanes: q0lo q1lo | q0hi q1hi */
    const v8i b = _mm256_packs_epi32(q[2], q[3]);
    const v8i c = _mm256_packs_epi16(a, b); /* q0lo q1lo q2lo q3lo | q0hi q1hi q2hi q3hi */
    const v8i o = _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(void *)out, o);
}

/* One block of 32 floats quantized as Q8_0's reference does (shared by Q8_0 and Q8_S):
 * d = amax / 127 in float, the quants q[4] (int32 lanes) and d; returns 1 (nothing
 * written) where the block must go through the reference: a NaN or an infinity, or
 * 1 / d = inf. */
SD_T SD_INL int q8_block32(const float *xb, v8i q[4], float *d_out) {
    const v8f sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    const v8f one = _mm256_set1_ps(1.0f);
    v8f v[4];
    v8f am = _mm256_setzero_ps();
    int bad = 0;
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(xb + 8 * k);
        const v8f a = _mm256_andnot_ps(sign, v[k]);
        bad |= any_bad(a);
        am = _mm256_max_ps(am, a);
    }
    const float amax = hmax8(am);
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (bad || !(id <= 3.40282347e38f)) return 1;
    const v8f vid = _mm256_set1_ps(id);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const v8f t = _mm256_mul_ps(v[k], vid);
        const v8f r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const v8f f = _mm256_andnot_ps(sign, _mm256_sub_ps(t, r));
        const v8f up = _mm256_cmp_ps(f, half, _CMP_GE_OQ);
        const v8f sv = _mm256_or_ps(_mm256_and_ps(t, sign), one); /* copysign(1, t) */
        q[k] = _mm256_cvttps_epi32(_mm256_add_ps(r, _mm256_and_ps(up, sv)));
    }
    *d_out = d;
    return 0;
}

/* Q8_0 quantization of an activation row, byte-identical to quant.c's reference: amax by a
 * max reduction (order-free), d = amax / 127 and id = 1 / d in scalar float, x * id in
 * vector float (the same IEEE product), roundf as r = trunc(v), r += sign(v) where
 * |v - r| >= 0.5 (v - r is exact), then int32 and signed saturation to int8 (|v| <= 127
 * here). A block with a NaN or an infinity, or with 1 / d = inf, goes through the
 * reference. */
SD_T static void avx2_quant_q8_0(const float *x, void *vy, int64_t n) {
    sd_block_q8_0 *y = (sd_block_q8_0 *)vy;
    for (int64_t i = 0; i < n / SD_QK8_0; i++) {
        const float *xb = x + i * SD_QK8_0;
        v8i q[4];
        float d;
        if (q8_block32(xb, q, &d)) {
            sd_quantize_row(SD_TYPE_Q8_0, xb, y + i, SD_QK8_0);
            continue;
        }
        y[i].d = sd_fp32_to_fp16(d);
        store_i8x32(y[i].qs, q);
    }
}

/* Q8_S quantization of an activation row (the activations of Q4_1 / Q5_1 / Q5_0 weights,
 * part A), byte-identical to quant.c's reference: Q8_0's quants from a float d (not rounded
 * to fp16), and ds = d * (their exact sum). Blocks with a NaN or an infinity, or with
 * 1 / d = inf, go through the reference. */
SD_T static void avx2_quant_q8_s(const float *x, void *vy, int64_t n) {
    sd_block_q8_s *y = (sd_block_q8_s *)vy;
    for (int64_t i = 0; i < n / SD_QK8_S; i++) {
        const float *xb = x + i * SD_QK8_S;
        v8i q[4];
        float d;
        if (q8_block32(xb, q, &d)) {
            sd_quantize_row(SD_TYPE_Q8_S, xb, y + i, SD_QK8_S);
            continue;
        }
        store_i8x32(y[i].qs, q);
        const v8i s4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        s = _mm_hadd_epi32(s, s);
        s = _mm_hadd_epi32(s, s);
        y[i].d = d;
        y[i].ds = d * (float)_mm_cvtsi128_si32(s);
    }
}

/* Q8_K quantization of an activation row, byte-identical to kquants.c's reference: the
 * signed maximum (the first value of the largest magnitude: max |x| by an order-free
 * reduction, then the first element equal to it in magnitude), iscale = -127 / max and
 * d = 1 / iscale in scalar float, iscale * x in vector float (the same IEEE product),
 * round to nearest even (the reference's nearbyintf), the clamp to [-128, 127] (a value
 * past a bound gives the bound, as rounding then clamping does), group sums exact. A
 * block with a NaN or an infinity goes through the reference. */
SD_T static void avx2_quant_q8_k(const float *x, void *vy, int64_t n) {
    sd_block_q8_k *y = (sd_block_q8_k *)vy;
    const v8f sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        v8f am = _mm256_setzero_ps();
        int bad = 0;
        _Pragma("GCC unroll 8") for (int k = 0; k < 32; k++) {
            const v8f a = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k));
            bad |= any_bad(a);
            am = _mm256_max_ps(am, a);
        }
        if (bad) {
            sd_quantize_row(SD_TYPE_Q8_K, xb, y + i, SD_QK_K);
            continue;
        }
        const float amax = hmax8(am);
        memset(&y[i], 0, sizeof y[i]);
        if (!(amax > 0)) continue; /* all-zero block: d = 0 */
        float max = 0.0f;
        const v8f vam = _mm256_set1_ps(amax);
        for (int k = 0; k < 32; k++) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(
                _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k)), vam, _CMP_EQ_OQ));
            if (hit) {
                max = xb[8 * k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const v8f vs = _mm256_set1_ps(iscale);
        const v8f lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
        _Pragma("GCC unroll 2") for (int c = 0; c < 8; c++) { /* 32 elements, 2 groups */
            v8i q[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const v8f r =
                    _mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(xb + 32 * c + 8 * k)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
            }
            store_i8x32(y[i].qs + 32 * c, q);
            /* group sums: lanes of q0 + q1 (group 2c), q2 + q3 (group 2c + 1) */
            const v8i s01 = _mm256_add_epi32(q[0], q[1]), s23 = _mm256_add_epi32(q[2], q[3]);
            const v8i h = _mm256_hadd_epi32(s01, s23); /* per 128-bit lane: a a b b */
            const __m128i g =
                _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            const __m128i g2 = _mm_hadd_epi32(g, g); /* sum(s01), sum(s23), .. */
            y[i].bsums[2 * c] = (int16_t)_mm_cvtsi128_si32(g2);
            y[i].bsums[2 * c + 1] = (int16_t)_mm_extract_epi32(g2, 1);
        }
        y[i].d = 1.0f / iscale;
    }
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
    .quant = {[SD_TYPE_Q8_0] = avx2_quant_q8_0,
              [SD_TYPE_Q8_S] = avx2_quant_q8_s,
              [SD_TYPE_Q8_K] = avx2_quant_q8_k},
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx2_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
