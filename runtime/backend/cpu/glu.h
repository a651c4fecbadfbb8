/*
 * runtime/backend/cpu/glu.h: PRIVATE to the CPU backend. Gated-FFN activation kernels per
 * instruction set beside the scalar loop of ops.c (swiglu_range), with its bits:
 *   y[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i]      (float arithmetic, libm's expf)
 * The AVX-512 one (glu_avx512.c; glu_avx2.c the same on 4-double vectors) computes exp
 * in double precision to well below a thousandth of a float ulp and rounds it to float;
 * where that rounding could differ from libm's expf (the double result within 2^-8 ulp of
 * a float rounding midpoint, which libm, within 0.502 ulp of the exact value, may round
 * either way), outside the range [-88, 87] and for NaN it calls expf itself. The division,
 * the add and the multiply are the same IEEE float operations as the scalar loop's, so
 * every element has the scalar loop's bits.
 */
#ifndef SD_BACKEND_CPU_GLU_H
#define SD_BACKEND_CPU_GLU_H

#include <stdint.h>

/* y[i] for i in [0, n) as above; y may alias g or u. */
typedef void (*sd_cpu_glu_fn)(const float *g, const float *u, float *y, int64_t n);

#if defined(__x86_64__)
/* AVX-512F; call only where the CPU has it (the attention level "avx512" is picked). */
void sd_cpu_swiglu_avx512(const float *g, const float *u, float *y, int64_t n);
/* AVX2 + FMA; call only where the CPU has them (the attention level "avx2" is picked). */
void sd_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n);
#endif

#endif /* SD_BACKEND_CPU_GLU_H */
