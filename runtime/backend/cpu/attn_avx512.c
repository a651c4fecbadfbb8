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

/* 16 keys at a time per head (q chunks reused over the 16 key rows, one transposed
 * tree), then the remaining keys one by one with the same per-key arithmetic. */
SD_T5 static void att_scores_avx512(const float *q, int32_t nh, int32_t hd, const void *k,
                                    size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                    size_t scs) {
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

SD_T5 static void att_vsum_avx512(const float *sc, size_t scs, int32_t nh, int32_t hd,
                                  const void *v, size_t stride, sd_type vt, int32_t span,
                                  float *out) {
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

const sd_att_kernels sd_att_avx512 = {"avx512", att_scores_avx512, att_vsum_avx512};

#else
typedef int sd_attn_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
