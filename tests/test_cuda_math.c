/*
 * tests/test_cuda_math.c: the CUDA kernels' host-testable arithmetic
 * (runtime/backend/cuda/sd_cuda_math.h), compiled here as plain C11 and run without a GPU,
 * against quant/'s reference:
 *   - fp16 / bf16 conversions: bit for bit, exhaustively (fp16 -> fp32) or over every
 *     rounding boundary and random bit patterns (fp32 -> fp16 / bf16);
 *   - the Q8_0 activation quantizer: bytes identical to sd_quantize_row(SD_TYPE_Q8_0);
 *   - weight unpacking + dequantization (Q8_0, Q4_0): bits identical to sd_dequantize_row;
 *   - the GEMV kernels' reduction order (lanes strided over blocks / 8-element groups, then
 *     the butterfly), emulated here from the header's functions: bit-identical to
 *     sd_matmul_rows_ref where the orders coincide (rows of <= 2 blocks), and within the
 *     classical bound for two summation orders elsewhere:
 *       |a - b| <= 2 (m - 1) u sum_i |t_i|   (m terms t_i, u = 2^-24),
 *     and for float weights within (m + 6) u sum |w_j x_j| of the double-precision oracle;
 *   - the flash-decoding split / combine algebra of attention.cu (chunks of 128 keys),
 *     emulated in float, against a double-precision softmax attention: relative error
 *     below 1e-5 of the output's scale.
 * What this cannot check: that the device code follows these functions (the kernels call
 * them; gpu_check.sh runs the kernels against the CPU backend on a GPU).
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/sd_quant.h"
#include "runtime/backend/cuda/sd_cuda_math.h"

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_f(uint64_t *s) { /* uniform in [-1, 1) */
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- conversions ---- */

Test(cuda_math, fp16_to_fp32_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = sd_cu_fp16_to_fp32((uint16_t)h), b = sd_fp16_to_fp32((uint16_t)h);
        cr_assert_eq(fbits(a), fbits(b), "fp16 0x%04x: 0x%08x vs reference 0x%08x", h, fbits(a),
                     fbits(b));
    }
}

static void check_to_half(float f) {
    cr_assert_eq(sd_cu_fp32_to_fp16(f), sd_fp32_to_fp16(f), "fp32 0x%08x -> fp16", fbits(f));
    cr_assert_eq(sd_cu_fp32_to_bf16(f), sd_fp32_to_bf16(f), "fp32 0x%08x -> bf16", fbits(f));
}

Test(cuda_math, fp32_to_half_boundaries_and_random) {
    /* Every binary16 value, the midpoints to its neighbours and one ulp either side of
     * them (the ties and near-ties of round-to-nearest-even), both signs. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const float lo = sd_fp16_to_fp32((uint16_t)h), hi = sd_fp16_to_fp32((uint16_t)(h + 1));
        const float mid = (float)(((double)lo + (double)hi) / 2.0);
        const float cand[] = {lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            check_to_half(cand[i]);
            check_to_half(-cand[i]);
        }
    }
    const float special[] = {
        0.0f,      -0.0f,    INFINITY, -INFINITY,       NAN,    65504.0f, 65520.0f,
        65519.99f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 1e-30f, 3e38f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_to_half(special[i]);
    uint64_t s = 7;
    for (int i = 0; i < 2000000; i++)
        check_to_half(bitsf((uint32_t)rng_next(&s)));
}

Test(cuda_math, dp4a_and_nibbles) {
    uint64_t s = 11;
    for (int i = 0; i < 200000; i++) {
        const int32_t a = (int32_t)rng_next(&s), b = (int32_t)rng_next(&s),
                      c = (int32_t)(rng_next(&s) >> 40);
        int64_t ref = c;
        for (int k = 0; k < 4; k++)
            ref += (int64_t)(int8_t)(a >> (8 * k)) * (int8_t)(b >> (8 * k));
        cr_assert_eq(sd_cu_dp4a(a, b, c), (int32_t)ref);
    }
    /* Every nibble in every byte position: byte = nibble - 8 as a signed value. */
    for (uint32_t pos = 0; pos < 4; pos++)
        for (uint32_t v = 0; v < 256; v++) {
            const uint32_t other = (uint32_t)rng_next(&s) & ~(0xffu << (8 * pos));
            const uint32_t w = other | (v << (8 * pos));
            const int32_t r = sd_cu_nib4_minus8(w);
            for (int k = 0; k < 4; k++)
                cr_assert_eq(sd_cu_byte(r, k), (int32_t)((w >> (8 * k)) & 15u) - 8,
                             "word 0x%08x byte %d", w, k);
        }
}

/* ---- Q8_0 activations ---- */

/* A row of n floats with a mixture of scales, exact ties (x * id = k + 0.5), zeros and an
 * all-zero block. */
static void fill_row(float *x, int n, uint64_t *s) {
    for (int i = 0; i < n; i++) {
        const int blk = i / 32;
        const float scale = blk % 5 == 0 ? 1e-3f : (blk % 5 == 1 ? 7.0f : 1.0f);
        x[i] = blk % 7 == 3 ? 0.0f : rng_f(s) * scale;
    }
    if (n >= 64) {      /* a block whose max is 127 so that id = 1 and halves are ties */
        x[32] = 127.0f; /* d = 1 */
        for (int j = 33; j < 64; j++)
            x[j] = (float)(j - 48) + 0.5f;
    }
}

Test(cuda_math, quantize_q8_0_bytes_identical) {
    enum { N = 32 * 64 };
    float x[N];
    sd_block_q8_0 ref[N / 32];
    uint64_t s = 3;
    for (int rep = 0; rep < 50; rep++) {
        fill_row(x, N, &s);
        sd_quantize_row(SD_TYPE_Q8_0, x, ref, N);
        for (int b = 0; b < N / 32; b++) {
            int8_t q[32];
            uint16_t dh;
            const float d = sd_cu_quantize_q8_0(x + 32 * b, q, &dh);
            cr_assert_eq(dh, ref[b].d, "block %d: scale 0x%04x vs 0x%04x", b, dh, ref[b].d);
            cr_assert_eq(fbits(d), fbits(sd_fp16_to_fp32(ref[b].d)));
            cr_assert_eq(memcmp(q, ref[b].qs, 32), 0, "block %d: quants differ", b);
        }
    }
}

/* ---- weight unpacking ---- */

static void unpack(sd_type t, const uint8_t *blk, int32_t q[8], float *d) {
    if (t == SD_TYPE_Q8_0)
        sd_cu_unpack_q8_0(blk, q, d);
    else
        sd_cu_unpack_q4_0(blk, q, d);
}

static size_t block_bytes(sd_type t) {
    return t == SD_TYPE_Q8_0 ? sizeof(sd_block_q8_0) : sizeof(sd_block_q4_0);
}

/* Random quantized rows: random bytes (every nibble / int8 value appears), with the scale
 * replaced by a finite fp16 (some negative, some zero). */
static void random_qrow(sd_type t, uint8_t *row, int nb, uint64_t *s) {
    const size_t bb = block_bytes(t);
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        row[i] = (uint8_t)rng_next(s);
    for (int b = 0; b < nb; b++) {
        const uint16_t d = b % 9 == 4 ? 0 : sd_fp32_to_fp16(rng_f(s) * 0.05f);
        memcpy(row + (size_t)b * bb, &d, 2);
    }
}

Test(cuda_math, dequant_bits_identical) {
    const sd_type types[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0};
    enum { NB = 96 };
    uint64_t s = 5;
    for (size_t ti = 0; ti < 2; ti++) {
        const sd_type t = types[ti];
        _Alignas(16) uint8_t row[NB * 34];
        float ref[NB * 32], got[32];
        for (int rep = 0; rep < 40; rep++) {
            random_qrow(t, row, NB, &s);
            sd_dequantize_row(t, row, ref, NB * 32);
            for (int b = 0; b < NB; b++) {
                int32_t q[8];
                float d;
                unpack(t, row + (size_t)b * block_bytes(t), q, &d);
                sd_cu_dequant_group(q, d, got);
                for (int j = 0; j < 32; j++)
                    cr_assert_eq(fbits(got[j]), fbits(ref[b * 32 + j]),
                                 "%s block %d element %d: %g vs %g", sd_type_name(t), b, j,
                                 (double)got[j], (double)ref[b * 32 + j]);
            }
        }
    }
}

/* ---- the GEMV reduction order ---- */

/* The warp's result for one (weight row, Q8_0 activation row), as matmul.cu computes it:
 * lane l adds the terms of blocks l, l + 32, ... in order; then the butterfly. Also returns
 * sum |term| for the error bound. */
static float emul_gemv_q(sd_type t, const uint8_t *w, const sd_block_q8_0 *x, int nb,
                         double *abs_sum) {
    float lane[32] = {0};
    *abs_sum = 0.0;
    for (int b = 0; b < nb; b++) {
        int32_t q[8], xv[8];
        float dw;
        unpack(t, w + (size_t)b * block_bytes(t), q, &dw);
        memcpy(xv, x[b].qs, 32);
        const float term = sd_cu_qterm(sd_cu_group_isum(q, xv), dw, sd_fp16_to_fp32(x[b].d));
        lane[b % 32] = sd_cu_add(lane[b % 32], term);
        *abs_sum += fabs((double)term);
    }
    return sd_cu_warp_sum_emul(lane);
}

Test(cuda_math, gemv_quant_order_vs_reference) {
    const sd_type types[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0};
    const int nbs[] = {1, 2, 3, 31, 32, 33, 64, 128, 344};
    uint64_t s = 9;
    for (size_t ti = 0; ti < 2; ti++) {
        const sd_type t = types[ti];
        for (size_t ni = 0; ni < sizeof nbs / sizeof nbs[0]; ni++) {
            const int nb = nbs[ni], n = nb * 32;
            uint8_t *w = aligned_alloc(16, ((size_t)nb * 34 + 31) / 16 * 16);
            float *xf = malloc((size_t)n * sizeof(float));
            sd_block_q8_0 *xq = malloc((size_t)nb * sizeof *xq);
            cr_assert(w && xf && xq);
            for (int rep = 0; rep < 30; rep++) {
                random_qrow(t, w, nb, &s);
                fill_row(xf, n, &s);
                sd_quantize_row(SD_TYPE_Q8_0, xf, xq, n);
                float ref;
                sd_matmul_rows_ref(t, w, (size_t)nb * block_bytes(t), n, xq, 1, &ref, 1, 0, 1);
                double abs_sum;
                const float got = emul_gemv_q(t, w, xq, nb, &abs_sum);
                if (nb <= 2) {
                    /* one or two terms: both orders are exactly t0 (+ t1) */
                    cr_assert_eq(fbits(got), fbits(ref), "%s nb %d: %a vs %a", sd_type_name(t), nb,
                                 (double)got, (double)ref);
                } else {
                    const double bound = 2.0 * (nb - 1) * 0x1p-24 * abs_sum;
                    cr_assert(fabs((double)got - (double)ref) <= bound,
                              "%s nb %d: |%.9g - %.9g| > %.3g", sd_type_name(t), nb, (double)got,
                              (double)ref, bound);
                }
            }
            free(w);
            free(xf);
            free(xq);
        }
    }
}

/* Float weights (F16 here: every element exact in float), lane groups of v elements. */
static float emul_gemv_f(const uint16_t *w, const float *x, int n, int v, double *abs_sum) {
    float lane[32] = {0};
    *abs_sum = 0.0;
    for (int g = 0; g < n / v; g++)
        for (int e = 0; e < v; e++) {
            const int j = g * v + e;
            const float wj = sd_cu_fp16_to_fp32(w[j]);
            lane[g % 32] = sd_cu_fma(wj, x[j], lane[g % 32]);
            *abs_sum += fabs((double)wj * (double)x[j]);
        }
    return sd_cu_warp_sum_emul(lane);
}

Test(cuda_math, gemv_float_order_vs_oracle) {
    const int ns[] = {8, 64, 256, 264, 4096, 11008};
    uint64_t s = 13;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        uint16_t *w = malloc((size_t)n * 2);
        float *wf = malloc((size_t)n * 4), *x = malloc((size_t)n * 4);
        cr_assert(w && wf && x);
        for (int rep = 0; rep < 20; rep++) {
            for (int j = 0; j < n; j++) {
                wf[j] = rng_f(&s) * 0.1f;
                x[j] = rng_f(&s) * (j % 13 == 0 ? 20.0f : 1.0f);
            }
            sd_quantize_row(SD_TYPE_F16, wf, w, n);
            float ref; /* the oracle: double accumulation, rounded once */
            sd_matmul_rows_ref(SD_TYPE_F16, w, (size_t)n * 2, n, x, 1, &ref, 1, 0, 1);
            for (int v = 1; v <= SD_CU_FVEC; v += SD_CU_FVEC - 1) {
                double abs_sum;
                const float got = emul_gemv_f(w, x, n, v, &abs_sum);
                const int per_lane = (n / v + 31) / 32 * v;
                const double bound =
                    (per_lane + 6) * 0x1p-24 * abs_sum + fabs((double)ref) * 0x1p-24;
                cr_assert(fabs((double)got - (double)ref) <= bound,
                          "n %d v %d: |%.9g - %.9g| > %.3g", n, v, (double)got, (double)ref, bound);
            }
        }
        free(w);
        free(wf);
        free(x);
    }
}

/* ---- attention: the split / combine algebra ---- */

#define CH 128

/* One query head against n keys (head_dim hd), attention.cu's formulas in float. */
static void emul_attention(const float *q, const float *k, const float *v, int n, int hd,
                           float *out) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int nc = (n + CH - 1) / CH;
    float *po = calloc((size_t)nc * hd, sizeof(float)), *pm = calloc((size_t)nc, sizeof(float)),
          *pl = calloc((size_t)nc, sizeof(float)), p[CH];
    cr_assert(po && pm && pl);
    for (int c = 0; c < nc; c++) {
        const int j0 = c * CH, len = n - j0 < CH ? n - j0 : CH;
        float m = -INFINITY;
        for (int i = 0; i < len; i++) {
            float lane[32] = {0};
            for (int d = 0; d < hd; d++)
                lane[d % 32] = sd_cu_fma(q[d], k[(size_t)(j0 + i) * hd + d], lane[d % 32]);
            p[i] = sd_cu_mul(sd_cu_warp_sum_emul(lane), scale);
            m = fmaxf(m, p[i]);
        }
        float l = 0.0f;
        for (int i = 0; i < len; i++) {
            p[i] = expf(p[i] - m);
            l += p[i];
        }
        for (int d = 0; d < hd; d++) {
            float o = 0.0f;
            for (int i = 0; i < len; i++)
                o = sd_cu_fma(p[i], v[(size_t)(j0 + i) * hd + d], o);
            po[(size_t)c * hd + d] = o;
        }
        pm[c] = m;
        pl[c] = l;
    }
    float mx = pm[0], sum = 0.0f;
    for (int c = 1; c < nc; c++)
        mx = fmaxf(mx, pm[c]);
    for (int c = 0; c < nc; c++)
        sum = sd_cu_fma(pl[c], expf(pm[c] - mx), sum);
    for (int d = 0; d < hd; d++) {
        float o = 0.0f;
        for (int c = 0; c < nc; c++)
            o = sd_cu_fma(po[(size_t)c * hd + d], expf(pm[c] - mx), o);
        out[d] = o * (1.0f / sum);
    }
    free(po);
    free(pm);
    free(pl);
}

Test(cuda_math, attention_split_combine_vs_double) {
    const int ns[] = {1, 5, 127, 128, 129, 300, 1000};
    const int hd = 64;
    uint64_t s = 17;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        float *k = malloc((size_t)n * hd * 4), *v = malloc((size_t)n * hd * 4), q[64], out[64];
        double *w = malloc((size_t)n * sizeof(double));
        cr_assert(k && v && w);
        for (int i = 0; i < n * hd; i++) {
            k[i] = rng_f(&s) * 3.0f;
            v[i] = rng_f(&s);
        }
        for (int d = 0; d < hd; d++)
            q[d] = rng_f(&s) * 3.0f;
        emul_attention(q, k, v, n, hd, out);
        double mx = -INFINITY, sum = 0.0, vmax = 0.0;
        for (int j = 0; j < n; j++) {
            double sc = 0.0;
            for (int d = 0; d < hd; d++)
                sc += (double)q[d] * k[(size_t)j * hd + d];
            w[j] = sc / sqrt((double)hd);
            mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < n; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int i = 0; i < n * hd; i++)
            vmax = fabs(v[i]) > vmax ? fabs(v[i]) : vmax;
        for (int d = 0; d < hd; d++) {
            double ref = 0.0;
            for (int j = 0; j < n; j++)
                ref += w[j] * v[(size_t)j * hd + d];
            ref /= sum;
            cr_assert(fabs(out[d] - ref) <= 1e-5 * vmax, "n %d d %d: %.9g vs %.9g", n, d,
                      (double)out[d], ref);
        }
        free(k);
        free(v);
        free(w);
    }
}
