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

/* The SIMD kernels' exp(x), x in [-87, 88], shared by glu_avx512.c and glu_avx2.c: x =
 * k ln2 + r with k = round(x * SD_GLU_LOG2E), r = x - k ln2 in two FMAs (ln2 = HI + LO),
 * |r| <= ln2 / 2; exp(r) by its Taylor polynomial of degree 11, sd_glu_exp_taylor[i] = 1 / i!
 * (Horner: the remainder r^12 / 12! is below 7e-15 of the result, the rounding of the 12
 * steps about 1e-15), times 2^k exactly. Relative error below 1e-14: a thousandth of a
 * float ulp is 6e-11. */
#define SD_GLU_LOG2E  1.4426950408889634
#define SD_GLU_LN2_HI 0x1.62e42fefa39efp-1
#define SD_GLU_LN2_LO 0x1.abc9e3b39803fp-56
__attribute__((unused)) static const double sd_glu_exp_taylor[12] = {
    1.0,       1.0,        1.0 / 2,     1.0 / 6,      1.0 / 24,      1.0 / 120,
    1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800};
/* The midpoint window of exp's double result e (a normal float once rounded): its 29 bits
 * below the float's last bit, low = bits(e) & SD_GLU_MID_MASK, within 2^21 of the half-way
 * point 2^28 (2^-8 ulp; libm's expf is within 0.502 ulp of the exact value, so it can differ
 * from the correctly rounded one only within 0.002 ulp of a midpoint): (uint64) (low -
 * SD_GLU_MID_LO) <= SD_GLU_MID_SPAN. Such lanes call expf. */
#define SD_GLU_MID_MASK ((1 << 29) - 1)
#define SD_GLU_MID_LO   ((1 << 28) - (1 << 21))
#define SD_GLU_MID_SPAN (1 << 22)

/* y[i] for i in [0, n) as above; y may alias g or u. */
typedef void (*sd_cpu_glu_fn)(const float *g, const float *u, float *y, int64_t n);

#if defined(__x86_64__)
/* AVX-512F; call only where the CPU has it (the attention level "avx512" is picked). */
void sd_cpu_swiglu_avx512(const float *g, const float *u, float *y, int64_t n);
/* AVX2 + FMA; call only where the CPU has them (the attention level "avx2" is picked). */
void sd_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n);
#endif

#endif /* SD_BACKEND_CPU_GLU_H */
