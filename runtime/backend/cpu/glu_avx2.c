/* runtime/backend/cpu/glu_avx2.c: SwiGLU with AVX2 + FMA, the bits of the scalar loop
 * (glu.h: exp in double, libm's expf where the float rounding could differ). The same
 * method as glu_avx512.c on 4-double vectors; 2^k is built in the exponent field, since
 * AVX2 has no scalef. */
#include "runtime/backend/cpu/glu.h"

#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define SD_TA __attribute__((target("avx2,fma")))

/* exp(x) for 4 doubles x in [-87, 88] (glu.h's method; other lanes: anything, the caller
 * replaces them). 2^k without scalef: k + 1023 is an integer in [896, 1151], read from the
 * low bits of k + 1023 + 1.5 * 2^52 and shifted into the exponent field, so 2^k is a normal
 * double and the product is exact. */
SD_TA static inline __m256d exp_pd4(__m256d x) {
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(SD_GLU_LOG2E)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(SD_GLU_LN2_HI), x);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(SD_GLU_LN2_LO), r);
    __m256d p = _mm256_set1_pd(sd_glu_exp_taylor[11]);
    for (int i = 10; i >= 0; i--)
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(sd_glu_exp_taylor[i]));
    const __m256d kb = _mm256_add_pd(k, _mm256_set1_pd(0x1.8p52 + 1023.0));
    const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(kb), 52));
    return _mm256_mul_pd(p, two_k);
}

/* Lanes (bits 0..3) of e in glu.h's midpoint window (AVX2 has no unsigned 64-bit compare:
 * t = low - SD_GLU_MID_LO in [0, SD_GLU_MID_SPAN], two signed compares). */
SD_TA static inline unsigned near_midpoint4(__m256d e) {
    const __m256i low =
        _mm256_and_si256(_mm256_castpd_si256(e), _mm256_set1_epi64x(SD_GLU_MID_MASK));
    const __m256i t = _mm256_sub_epi64(low, _mm256_set1_epi64x(SD_GLU_MID_LO));
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi64(t, _mm256_set1_epi64x(SD_GLU_MID_SPAN)),
                                        _mm256_cmpgt_epi64(_mm256_setzero_si256(), t));
    return (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(out)) ^ 0xFu;
}

SD_TA void sd_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        const __m256 xv =
            _mm256_castsi256_ps(/* -g: the sign flipped, as the scalar -gi */
                                _mm256_xor_si256(_mm256_castps_si256(gv),
                                                 _mm256_set1_epi32((int)0x80000000u)));
        const __m256d e0 = exp_pd4(_mm256_cvtps_pd(_mm256_castps256_ps128(xv)));
        const __m256d e1 = exp_pd4(_mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)));
        /* in range: g in [-88, 87] (NaN is not), so exp(-g) is a normal float */
        const __m256 okv = _mm256_and_ps(_mm256_cmp_ps(gv, _mm256_set1_ps(-88.0f), _CMP_GE_OQ),
                                         _mm256_cmp_ps(gv, _mm256_set1_ps(87.0f), _CMP_LE_OQ));
        const unsigned fix = ((unsigned)_mm256_movemask_ps(okv) ^ 0xFFu) | near_midpoint4(e0) |
                             near_midpoint4(e1) << 4;
        __m256 ev = _mm256_set_m128(_mm256_cvtpd_ps(e1), _mm256_cvtpd_ps(e0));
        if (fix) {
            float tmp[8];
            _mm256_storeu_ps(tmp, ev);
            for (int l = 0; l < 8; l++)
                if ((fix >> l) & 1u) tmp[l] = expf(-g[i + l]);
            ev = _mm256_loadu_ps(tmp);
        }
        const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), ev);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(gv, d), uv));
    }
    for (; i < n; i++) {
        const float gi = g[i];
        y[i] = (gi / (1.0f + expf(-gi))) * u[i];
    }
}

#else
typedef int sd_glu_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
