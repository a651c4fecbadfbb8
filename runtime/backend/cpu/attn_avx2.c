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

/* Eight elements of an F16 (f16 1) or F32 row at element d, as f32. */
SD_T2 static inline __m256 ld8f(const uint8_t *row, const int f16, int32_t d) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * d)));
    return _mm256_loadu_ps((const float *)(const void *)(row + 4 * d));
}

/* att_scores_avx2 for NH (a constant, <= 6) heads and hd a multiple of 16: the 2 x NH
 * accumulators stay in registers (the general loop below, with nh and the tails known
 * only at run time, keeps them in memory: a store and a load around every FMA). The
 * same operations in the same order: the same bits. */
SD_T2 static inline __attribute__((always_inline)) void
scores_nh(const float *q, const int NH, int32_t hd, const uint8_t *k, size_t stride, const int f16,
          int32_t span, float scale, float *sc, size_t scs) {
    for (int32_t j = 0; j < span; j++) {
        const uint8_t *kr = k + (size_t)j * stride;
        __m256 a0[6], a1[6];
        for (int h = 0; h < NH; h++)
            a0[h] = a1[h] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 16) {
            const __m256 k0 = ld8f(kr, f16, d), k1 = ld8f(kr, f16, d + 8);
            for (int h = 0; h < NH; h++) {
                const float *qh = q + (size_t)h * (size_t)hd + d;
                a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh), k0, a0[h]);
                a1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + 8), k1, a1[h]);
            }
        }
        for (int h = 0; h < NH; h++)
            sc[(size_t)h * scs + (size_t)j] = hsum8(_mm256_add_ps(a0[h], a1[h])) * scale;
    }
}

/* vsum for NH (a constant, <= 8) heads and hd a multiple of 8: accumulators in registers,
 * the same FMAs in the same order as att_vsum_avx2's loop (the same bits). */
SD_T2 static inline __attribute__((always_inline)) void
vsum_nh(const float *sc, size_t scs, const int NH, int32_t hd, const uint8_t *v, size_t stride,
        const int f16, int32_t span, float *out) {
    for (int32_t d = 0; d < hd; d += 8) {
        __m256 acc[8];
        for (int h = 0; h < NH; h++)
            acc[h] = _mm256_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m256 vv = ld8f(v + (size_t)j * stride, f16, d);
            for (int h = 0; h < NH; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int h = 0; h < NH; h++)
            _mm256_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
}

#define SD_ATT_FIXED(N)                                                                            \
    SD_T2 static void scores_##N(const float *q, int32_t hd, const uint8_t *k, size_t stride,      \
                                 int f16, int32_t span, float scale, float *sc, size_t scs) {      \
        if (f16)                                                                                   \
            scores_nh(q, N, hd, k, stride, 1, span, scale, sc, scs);                               \
        else                                                                                       \
            scores_nh(q, N, hd, k, stride, 0, span, scale, sc, scs);                               \
    }                                                                                              \
    SD_T2 static void vsum_##N(const float *sc, size_t scs, int32_t hd, const uint8_t *v,          \
                               size_t stride, int f16, int32_t span, float *out) {                 \
        if (f16)                                                                                   \
            vsum_nh(sc, scs, N, hd, v, stride, 1, span, out);                                      \
        else                                                                                       \
            vsum_nh(sc, scs, N, hd, v, stride, 0, span, out);                                      \
    }
SD_ATT_FIXED(1)
SD_ATT_FIXED(2)
SD_ATT_FIXED(3)
SD_ATT_FIXED(4)
SD_ATT_FIXED(5)
SD_ATT_FIXED(6)

typedef void (*scores_fixed_fn)(const float *, int32_t, const uint8_t *, size_t, int, int32_t,
                                float, float *, size_t);
typedef void (*vsum_fixed_fn)(const float *, size_t, int32_t, const uint8_t *, size_t, int, int32_t,
                              float *);
static const scores_fixed_fn k_scores_fixed[7] = {NULL,     scores_1, scores_2, scores_3,
                                                  scores_4, scores_5, scores_6};
static const vsum_fixed_fn k_vsum_fixed[7] = {NULL, vsum_1, vsum_2, vsum_3, vsum_4, vsum_5, vsum_6};

/* Heads of a block taken at most 6 at a time (7 as 4 + 3, 8 as 4 + 4). */
static inline int32_t head_chunk(int32_t left) {
    return left <= 6 ? left : (left + 1) / 2;
}

/* Two 8-lane accumulators: a0 holds p[0..8), a1 p[8..16) (d mod 16). */
SD_T2 static void att_scores_avx2(const float *q, int32_t nh, int32_t hd, const void *k,
                                  size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                  size_t scs) {
    if (hd % 16 == 0 && (kt == SD_TYPE_F16 || kt == SD_TYPE_F32)) {
        for (int32_t h0 = 0; h0 < nh;) {
            const int32_t c = head_chunk(nh - h0);
            k_scores_fixed[c](q + (size_t)h0 * (size_t)hd, hd, (const uint8_t *)k, stride,
                              kt == SD_TYPE_F16, span, scale, sc + (size_t)h0 * scs, scs);
            h0 += c;
        }
        return;
    }
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
    if (hd % 8 == 0 && (vt == SD_TYPE_F16 || vt == SD_TYPE_F32)) {
        for (int32_t h0 = 0; h0 < nh;) {
            const int32_t c = head_chunk(nh - h0);
            k_vsum_fixed[c](sc + (size_t)h0 * scs, scs, hd, (const uint8_t *)v, stride,
                            vt == SD_TYPE_F16, span, out + (size_t)h0 * (size_t)hd);
            h0 += c;
        }
        return;
    }
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

SD_T2 void sd_att_store_f16_f16c(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = sd_fp32_to_fp16(src[i]);
}

const sd_att_kernels sd_att_avx2 = {"avx2", att_scores_avx2, att_vsum_avx2, sd_att_store_f16_f16c};

#else
typedef int sd_attn_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
