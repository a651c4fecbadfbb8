/* runtime/backend/cpu/attn_avx512.c: AVX-512F attention kernels (see attn.h). */
#include "runtime/backend/cpu/attn.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define SD_T2 __attribute__((target("avx2,fma,f16c")))
#define SD_T5 __attribute__((target("avx512f,avx2,fma,f16c")))

/* 8 elements of a K/V row from element d as f32. */
SD_T2 static inline __m256 ld8(const void *row, sd_type t, int32_t d) {
    if (t == SD_TYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    return _mm256_loadu_ps((const float *)row + d);
}

SD_T2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 elements of a K/V row from element d as f32. */
SD_T5 static inline __m512 ld16(const void *row, sd_type t, int32_t d) {
    if (t == SD_TYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
    return _mm512_loadu_ps((const float *)row + d);
}

/* AVX-512: chunks of 16, then one chunk of 8 (ymm), then scalar; per (head, key) the
 * score is hsum(16-lane acc) + hsum(8-lane acc) + tail, in that order. */
SD_T5 static void att_scores_avx512(const float *q, int32_t nh, int32_t hd, const void *k,
                                    size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                    size_t scs) {
    const int32_t d16 = hd & ~15, d8 = hd & ~7;
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_setzero_ps();
        for (int32_t d = 0; d < d16; d += 16) {
            const __m512 kv = ld16(kr, kt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * (size_t)hd + d), kv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++) {
            const float *qh = q + (size_t)h * (size_t)hd;
            float s = _mm512_reduce_add_ps(acc[h]);
            if (d8 > d16) s += hsum8(_mm256_mul_ps(_mm256_loadu_ps(qh + d16), ld8(kr, kt, d16)));
            for (int32_t d = d8; d < hd; d++)
                s += qh[d] * sd_att_elem(kr, kt, d);
            sc[(size_t)h * scs + (size_t)j] = s * scale;
        }
    }
}

SD_T5 static void att_vsum_avx512(const float *sc, size_t scs, int32_t nh, int32_t hd,
                                  const void *v, size_t stride, sd_type vt, int32_t span,
                                  float *out) {
    const int32_t d16 = hd & ~15, d8 = hd & ~7;
    for (int32_t d = 0; d < d16; d += 16) {
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m512 vv = ld16((const uint8_t *)v + (size_t)j * stride, vt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm512_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
    if (d8 > d16) {
        __m256 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm256_loadu_ps(out + (size_t)h * (size_t)hd + d16);
        for (int32_t j = 0; j < span; j++) {
            const __m256 vv = ld8((const uint8_t *)v + (size_t)j * stride, vt, d16);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm256_storeu_ps(out + (size_t)h * (size_t)hd + d16, acc[h]);
    }
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d = d8; d < hd; d++) {
            const float vd = sd_att_elem(vr, vt, d);
            for (int32_t h = 0; h < nh; h++)
                out[(size_t)h * (size_t)hd + d] += sc[(size_t)h * scs + (size_t)j] * vd;
        }
    }
}

const sd_att_kernels sd_att_avx512 = {"avx512", att_scores_avx512, att_vsum_avx512};

#else
typedef int sd_attn_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
