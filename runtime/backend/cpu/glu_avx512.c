/* runtime/backend/cpu/glu_avx512.c: SwiGLU with AVX-512F, the bits of the scalar loop
 * (glu.h: exp in double, libm's expf where the float rounding could differ). */
#include "runtime/backend/cpu/glu.h"

#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define SD_TG __attribute__((target("avx512f,avx2,fma")))

/* exp(x) for 8 doubles x in [-87, 88] (glu.h's method; other lanes: anything, the caller
 * replaces them), 2^k applied by scalef. */
SD_TG static inline __m512d exp_pd(__m512d x) {
    const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(SD_GLU_LOG2E)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(SD_GLU_LN2_HI), x);
    r = _mm512_fnmadd_pd(k, _mm512_set1_pd(SD_GLU_LN2_LO), r);
    __m512d p = _mm512_set1_pd(sd_glu_exp_taylor[11]);
    for (int i = 10; i >= 0; i--)
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(sd_glu_exp_taylor[i]));
    return _mm512_scalef_pd(p, k);
}

/* Lanes of e (8 doubles) in glu.h's midpoint window. */
SD_TG static inline __mmask8 near_midpoint(__m512d e) {
    const __m512i low =
        _mm512_and_si512(_mm512_castpd_si512(e), _mm512_set1_epi64(SD_GLU_MID_MASK));
    const __m512i t = _mm512_sub_epi64(low, _mm512_set1_epi64(SD_GLU_MID_LO));
    return _mm512_cmp_epu64_mask(t, _mm512_set1_epi64(SD_GLU_MID_SPAN), _MM_CMPINT_LE);
}

SD_TG void sd_cpu_swiglu_avx512(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 gv = _mm512_loadu_ps(g + i), uv = _mm512_loadu_ps(u + i);
        const __m512 xv =
            _mm512_castsi512_ps(/* -g: the sign flipped, as the scalar -gi */
                                _mm512_xor_si512(_mm512_castps_si512(gv),
                                                 _mm512_set1_epi32((int)0x80000000u)));
        const __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(xv));
        const __m512d x1 =
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1)));
        const __m512d e0 = exp_pd(x0), e1 = exp_pd(x1);
        /* in range: g in [-88, 87] (NaN is not), so exp(-g) is a normal float */
        const __mmask16 ok = _mm512_cmp_ps_mask(gv, _mm512_set1_ps(-88.0f), _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(gv, _mm512_set1_ps(87.0f), _CMP_LE_OQ);
        const __mmask16 fix =
            (__mmask16)(~ok | near_midpoint(e0) | (unsigned)near_midpoint(e1) << 8);
        __m512 ev = _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(e0))),
                               _mm256_castps_pd(_mm512_cvtpd_ps(e1)), 1));
        if (fix) {
            float tmp[16];
            _mm512_storeu_ps(tmp, ev);
            for (int l = 0; l < 16; l++)
                if ((fix >> l) & 1u) tmp[l] = expf(-g[i + l]);
            ev = _mm512_loadu_ps(tmp);
        }
        const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), ev);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_div_ps(gv, d), uv));
    }
    for (; i < n; i++) {
        const float gi = g[i];
        y[i] = (gi / (1.0f + expf(-gi))) * u[i];
    }
}

#else
typedef int sd_glu_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
