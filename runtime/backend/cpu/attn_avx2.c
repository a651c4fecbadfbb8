/* runtime/backend/cpu/attn_avx2.c: AVX2+FMA+F16C attention kernels (see attn.h: the same
 * bits as the scalar reference). No global -m flags: functions carry target attributes
 * and run only after CPUID said so. */
#include "runtime/backend/cpu/attn.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define SD_T2 __attribute__((target("avx2,fma,f16c")))

/* Elements [d, d + m) (m <= 8) of a K/V row as f32, lanes >= m zero. */
SD_T2 static inline __m256 ld8(const void *row, sd_type t, int32_t d, int32_t m) {
    if (m >= 8) {
        if (t == SD_TYPE_F16)
            return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
        return _mm256_loadu_ps((const float *)row + d);
    }
    float tmp[8] = {0};
    for (int32_t i = 0; i < m; i++)
        tmp[i] = sd_att_elem(row, t, d + i);
    return _mm256_loadu_ps(tmp);
}

SD_T2 static inline __m256 ldq8(const float *q, int32_t d, int32_t m) {
    if (m >= 8) return _mm256_loadu_ps(q + d);
    float tmp[8] = {0};
    for (int32_t i = 0; i < m; i++)
        tmp[i] = q[d + i];
    return _mm256_loadu_ps(tmp);
}

/* The tree s = 4, 2, 1 of 8 lanes (lane l holds p[l] + p[l + 8]). */
SD_T2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Two 8-lane accumulators: a0 holds p[0..8), a1 p[8..16) (d mod 16). */
SD_T2 static void att_scores_avx2(const float *q, int32_t nh, int32_t hd, const void *k,
                                  size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                  size_t scs) {
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        __m256 a0[SD_ATT_HB], a1[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            a0[h] = a1[h] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 16) {
            const int32_t m0 = hd - d, m1 = hd - d - 8;
            const __m256 k0 = ld8(kr, kt, d, m0);
            for (int32_t h = 0; h < nh; h++)
                a0[h] = _mm256_fmadd_ps(ldq8(q + (size_t)h * (size_t)hd, d, m0), k0, a0[h]);
            if (m1 > 0) {
                const __m256 k1 = ld8(kr, kt, d + 8, m1);
                for (int32_t h = 0; h < nh; h++)
                    a1[h] = _mm256_fmadd_ps(ldq8(q + (size_t)h * (size_t)hd, d + 8, m1), k1, a1[h]);
            }
        }
        for (int32_t h = 0; h < nh; h++)
            sc[(size_t)h * scs + (size_t)j] = hsum8(_mm256_add_ps(a0[h], a1[h])) * scale;
    }
}

SD_T2 static void att_vsum_avx2(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                                size_t stride, sd_type vt, int32_t span, float *out) {
    const int32_t d8 = hd & ~7;
    for (int32_t d = 0; d < d8; d += 8) {
        __m256 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm256_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m256 vv = ld8((const uint8_t *)v + (size_t)j * stride, vt, d, 8);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm256_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d = d8; d < hd; d++) {
            const float vd = sd_att_elem(vr, vt, d);
            for (int32_t h = 0; h < nh; h++) {
                float *o = out + (size_t)h * (size_t)hd + d;
                *o = __builtin_fmaf(sc[(size_t)h * scs + (size_t)j], vd, *o);
            }
        }
    }
}

const sd_att_kernels sd_att_avx2 = {"avx2", att_scores_avx2, att_vsum_avx2};

#else
typedef int sd_attn_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
