/* runtime/backend/cpu/attn_avx512.c: AVX-512F attention kernels (see attn.h: the same bits
 * as the scalar reference). */
#include "runtime/backend/cpu/attn.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define SD_T5 __attribute__((target("avx512f,avx2,fma,f16c")))

/* Elements [d, d + 16) of a K/V row as f32, lanes outside mask m zero (nothing read). */
SD_T5 static inline __m512 ld16(const void *row, sd_type t, int32_t d, __mmask16 m) {
    if (t != SD_TYPE_F16) return _mm512_maskz_loadu_ps(m, (const float *)row + d);
    if (m == (__mmask16)0xFFFF)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
    uint16_t tmp[16] = {0}; /* the tail (AVX-512F has no 16-bit masked load) */
    for (int i = 0; i < 16 && ((m >> i) & 1u); i++)
        tmp[i] = ((const uint16_t *)row)[d + i];
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tmp));
}

/* The tree s = 8, 4, 2, 1 of 16 lanes. */
SD_T5 static inline float hsum16(__m512 v) {
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

SD_T5 static inline __mmask16 tail_mask(int32_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* The tree s = 8, 4, 2, 1 of attn.h for 16 keys at once: a[k] holds key k's 16 partial
 * sums; returns lane k = key k's sum. Each add pairs exactly the partials the per-key
 * tree pairs (p[l] + p[l + s]), the shuffles only move them side by side, so every key
 * gets the bits of hsum16(a[k]). */
SD_T5 static inline __m512 tree16(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) /* s = 8: lanes 0..7 key 2i, 8..15 key 2i + 1 */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* s = 4: quarter q holds key 4i + q */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* s = 2: quarter q: keys 8i + q (lanes 0, 1), 8i + 4 + q */
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    /* s = 1: quarter q: keys q, 4 + q, 8 + q, 12 + q */
    const __m512 e =
        _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    const __m512i key_of_lane =
        _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(key_of_lane, e);
}

/* Scores for NH (a constant, <= 8) heads and hd a multiple of 16, key by key: one 16-lane
 * accumulator per head in a register (lane l: p[l], l = d mod 16), the key row loaded
 * (converted) once for all the heads, then each head's tree (hsum16). The same FMAs in the
 * same order and the same tree as below: the same bits. */
SD_T5 static inline __attribute__((always_inline)) void
scores_nh(const float *q, const int NH, int32_t hd, const uint8_t *k, size_t stride,
          const sd_type kt, int32_t span, float scale, float *sc, size_t scs) {
    for (int32_t j = 0; j < span; j++) {
        const uint8_t *kr = k + (size_t)j * stride;
        __m512 acc[8];
        for (int h = 0; h < NH; h++)
            acc[h] = _mm512_setzero_ps();
        for (int32_t d = 0; d < hd; d += 16) {
            const __m512 kv = ld16(kr, kt, d, (__mmask16)0xFFFF);
            for (int h = 0; h < NH; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * (size_t)hd + d), kv, acc[h]);
        }
        for (int h = 0; h < NH; h++)
            sc[(size_t)h * scs + (size_t)j] = hsum16(acc[h]) * scale;
    }
}

#define SD_SCORES_FIXED(N)                                                                         \
    SD_T5 static void scores_##N(const float *q, int32_t hd, const uint8_t *k, size_t stride,      \
                                 sd_type kt, int32_t span, float scale, float *sc, size_t scs) {   \
        if (kt == SD_TYPE_F16)                                                                     \
            scores_nh(q, N, hd, k, stride, SD_TYPE_F16, span, scale, sc, scs);                     \
        else                                                                                       \
            scores_nh(q, N, hd, k, stride, SD_TYPE_F32, span, scale, sc, scs);                     \
    }
SD_SCORES_FIXED(1)
SD_SCORES_FIXED(2)
SD_SCORES_FIXED(3)
SD_SCORES_FIXED(4)
SD_SCORES_FIXED(5)
SD_SCORES_FIXED(6)
SD_SCORES_FIXED(7)
SD_SCORES_FIXED(8)

typedef void (*scores_fixed_fn)(const float *, int32_t, const uint8_t *, size_t, sd_type, int32_t,
                                float, float *, size_t);
static const scores_fixed_fn k_scores_fixed[9] = {NULL,     scores_1, scores_2, scores_3, scores_4,
                                                  scores_5, scores_6, scores_7, scores_8};

/* 16 keys at a time per head (q chunks reused over the 16 key rows, one transposed
 * tree), then the remaining keys one by one with the same per-key arithmetic. */
SD_T5 static void att_scores_avx512(const float *q, int32_t nh, int32_t hd, const void *k,
                                    size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                    size_t scs) {
    if (hd % 16 == 0 && (kt == SD_TYPE_F16 || kt == SD_TYPE_F32)) {
        k_scores_fixed[nh](q, hd, (const uint8_t *)k, stride, kt, span, scale, sc, scs);
        return;
    }
    int32_t j = 0;
    for (; j + 16 <= span; j += 16) {
        for (int32_t h = 0; h < nh; h++) {
            const float *qh = q + (size_t)h * (size_t)hd;
            __m512 acc[16];
            for (int kk = 0; kk < 16; kk++)
                acc[kk] = _mm512_setzero_ps();
            for (int32_t d = 0; d < hd; d += 16) {
                const __mmask16 m = tail_mask(hd - d);
                const __m512 qv = _mm512_maskz_loadu_ps(m, qh + d);
                for (int kk = 0; kk < 16; kk++)
                    acc[kk] = _mm512_fmadd_ps(
                        qv, ld16((const uint8_t *)k + (size_t)(j + kk) * stride, kt, d, m),
                        acc[kk]);
            }
            _mm512_storeu_ps(sc + (size_t)h * scs + (size_t)j,
                             _mm512_mul_ps(tree16(acc), _mm512_set1_ps(scale)));
        }
    }
    for (; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_setzero_ps();
        for (int32_t d = 0; d < hd; d += 16) {
            const __mmask16 m = tail_mask(hd - d);
            const __m512 kv = ld16(kr, kt, d, m);
            for (int32_t h = 0; h < nh; h++)
                acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + (size_t)h * (size_t)hd + d),
                                         kv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            sc[(size_t)h * scs + (size_t)j] = hsum16(acc[h]) * scale;
    }
}

/* att_vsum_avx512 for NH (a constant, <= 8) heads and hd a multiple of 16: the
 * accumulators stay in registers (the general loop below, with nh known only at run time,
 * keeps them in memory: a store and a load around every FMA). The same FMAs in the same
 * order: the same bits. */
SD_T5 static inline __attribute__((always_inline)) void
vsum_nh(const float *sc, size_t scs, const int NH, int32_t hd, const uint8_t *v, size_t stride,
        const sd_type vt, int32_t span, float *out) {
    for (int32_t d = 0; d < hd; d += 16) {
        __m512 acc[8];
        for (int h = 0; h < NH; h++)
            acc[h] = _mm512_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m512 vv = ld16(v + (size_t)j * stride, vt, d, (__mmask16)0xFFFF);
            for (int h = 0; h < NH; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int h = 0; h < NH; h++)
            _mm512_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
}

#define SD_VSUM_FIXED(N)                                                                           \
    SD_T5 static void vsum_##N(const float *sc, size_t scs, int32_t hd, const uint8_t *v,          \
                               size_t stride, sd_type vt, int32_t span, float *out) {              \
        if (vt == SD_TYPE_F16)                                                                     \
            vsum_nh(sc, scs, N, hd, v, stride, SD_TYPE_F16, span, out);                            \
        else                                                                                       \
            vsum_nh(sc, scs, N, hd, v, stride, SD_TYPE_F32, span, out);                            \
    }
SD_VSUM_FIXED(1)
SD_VSUM_FIXED(2)
SD_VSUM_FIXED(3)
SD_VSUM_FIXED(4)
SD_VSUM_FIXED(5)
SD_VSUM_FIXED(6)
SD_VSUM_FIXED(7)
SD_VSUM_FIXED(8)

typedef void (*vsum_fixed_fn)(const float *, size_t, int32_t, const uint8_t *, size_t, sd_type,
                              int32_t, float *);
static const vsum_fixed_fn k_vsum_fixed[9] = {NULL,   vsum_1, vsum_2, vsum_3, vsum_4,
                                              vsum_5, vsum_6, vsum_7, vsum_8};

SD_T5 static void att_vsum_avx512(const float *sc, size_t scs, int32_t nh, int32_t hd,
                                  const void *v, size_t stride, sd_type vt, int32_t span,
                                  float *out) {
    if (hd % 16 == 0 && nh <= 8 && (vt == SD_TYPE_F16 || vt == SD_TYPE_F32)) {
        k_vsum_fixed[nh](sc, scs, hd, (const uint8_t *)v, stride, vt, span, out);
        return;
    }
    for (int32_t d = 0; d < hd; d += 16) {
        const __mmask16 m = tail_mask(hd - d);
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_maskz_loadu_ps(m, out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m512 vv = ld16((const uint8_t *)v + (size_t)j * stride, vt, d, m);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm512_mask_storeu_ps(out + (size_t)h * (size_t)hd + d, m, acc[h]);
    }
}

const sd_att_kernels sd_att_avx512 = {"avx512", att_scores_avx512, att_vsum_avx512,
                                      sd_att_store_f16_f16c};

#else
typedef int sd_attn_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
