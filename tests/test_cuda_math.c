/*
 * tests/test_cuda_math.c: the CUDA kernels' host-testable arithmetic
 * (runtime/backend/cuda/sd_cuda_math.h), compiled here as plain C11 and run without a GPU,
 * against quant/'s reference:
 *   - fp16 / bf16 conversions: bit for bit, exhaustively (fp16 -> fp32) or over every
 *     rounding boundary and random bit patterns (fp32 -> fp16 / bf16);
 *   - the activation quantizers: Q8_0 / Q8_S (one block) and Q8_K (a super-block), bytes
 *     identical to sd_quantize_row of Q8_0, Q8_S, Q8_K, with NaN / infinity blocks, all-zero
 *     blocks and exact ties; the warp-parallel choice of Q8_K's signed maximum (8 values per
 *     lane, then a reduction tree) equals the serial scan on inputs full of ties;
 *   - weight unpacking + dequantization of every type the GPU runs (Q8_0, Q4_0, Q4_1, Q5_0,
 *     Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): bits identical to sd_dequantize_row;
 *   - the GEMV kernels' reduction orders (32-element types: lanes strided over blocks;
 *     K-quants: 8 lanes per super-block, their integers summed exactly, lane groups strided
 *     over super-blocks; float weights: lanes strided over 8-element groups; then the
 *     butterfly), emulated here from the header's functions: bit-identical to
 *     sd_matmul_rows_ref where the orders coincide (rows of <= 2 blocks, or one
 *     super-block), and within the classical bound for two summation orders elsewhere:
 *       |a - b| <= 2 (m - 1) u sum_i |t_i|   (m terms t_i, u = 2^-24),
 *     and for float weights within (m + 6) u sum |w_j x_j| of a double-precision sum;
 *   - the flash-decoding split / combine of attention.cu (chunks of 128 keys, a score per
 *     thread, the V sum split over fixed key ranges), emulated in float, against a
 *     double-precision softmax attention: relative error below 1e-5 of the output's scale.
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

Test(cuda_math, dp4a_and_byte_tricks) {
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
    /* bytes_minus over its whole domain (v in [0, 127], k in {0, 4, 8, 16, 32}). */
    const uint32_t ks[] = {0, 4, 8, 16, 32};
    for (size_t ki = 0; ki < 5; ki++)
        for (uint32_t v = 0; v < 128; v++) {
            const uint32_t w = v | ((127u - v) << 8) | ((v / 2) << 16) | ((v * 3 % 128) << 24);
            const int32_t r = sd_cu_bytes_minus(w, ks[ki]);
            for (int k = 0; k < 4; k++)
                cr_assert_eq(sd_cu_byte(r, k), (int32_t)((w >> (8 * k)) & 0xffu) - (int)ks[ki]);
        }
    for (uint32_t h = 0; h < 16; h++) {
        const uint32_t sp = sd_cu_spread4(h);
        for (int k = 0; k < 4; k++)
            cr_assert_eq((sp >> (8 * k)) & 0xffu, (h >> k) & 1u, "spread4 %u byte %d", h, k);
    }
}

/* ---- activations ---- */

/* A row of n floats with a mixture of scales, exact ties (x * id = k + 0.5), zeros and an
 * all-zero block, and (non_finite) a NaN block and an infinity block. */
static void fill_row(float *x, int n, uint64_t *s, int non_finite) {
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
    if (non_finite && n >= 32 * 12) {
        x[32 * 9 + 5] = NAN;
        x[32 * 11 + 30] = -INFINITY;
    }
}

Test(cuda_math, quantize_a32_bytes_identical_to_q8_0_and_q8_s) {
    enum { N = 32 * 64 };
    float x[N];
    sd_block_q8_0 r0[N / 32];
    sd_block_q8_s rs[N / 32];
    uint64_t s = 3;
    for (int rep = 0; rep < 50; rep++) {
        fill_row(x, N, &s, rep % 2);
        sd_quantize_row(SD_TYPE_Q8_0, x, r0, N);
        sd_quantize_row(SD_TYPE_Q8_S, x, rs, N);
        for (int b = 0; b < N / 32; b++) {
            int8_t q[32];
            uint16_t dh;
            float d, ds;
            sd_cu_quantize_a32(x + 32 * b, q, &dh, &d, &ds);
            cr_assert_eq(dh, r0[b].d, "block %d: Q8_0 scale 0x%04x vs 0x%04x", b, dh, r0[b].d);
            cr_assert_eq(memcmp(q, r0[b].qs, 32), 0, "block %d: Q8_0 quants differ", b);
            cr_assert_eq(fbits(d), fbits(rs[b].d), "block %d: Q8_S d %a vs %a", b, (double)d,
                         (double)rs[b].d);
            cr_assert_eq(fbits(ds), fbits(rs[b].ds), "block %d: Q8_S ds", b);
            cr_assert_eq(memcmp(q, rs[b].qs, 32), 0, "block %d: Q8_S quants differ", b);
        }
    }
}

/* A super-block row with ties of magnitude between signs and positions. */
static void fill_row_k(float *x, int n, uint64_t *s, int rep, int non_finite) {
    fill_row(x, n, s, non_finite && rep % 3 == 1);
    for (int b = 0; b < n / 256; b++) {
        float *xb = x + 256 * b;
        switch ((b + rep) % 5) {
        case 0: /* the same magnitude with both signs: the first one sets the sign */
            xb[17] = -2.5f, xb[200] = 2.5f, xb[3] = 2.5f;
            break;
        case 1:
            xb[250] = 3.0f, xb[251] = -3.0f;
            break;
        case 2: /* all zero */
            memset(xb, 0, 256 * sizeof(float));
            break;
        case 3: /* quantized values at exact .5 ties: max 127 so iscale = -1 */
            for (int j = 0; j < 256; j++)
                xb[j] = (float)((j % 50) - 25) + 0.5f;
            xb[100] = 127.0f;
            break;
        default:
            break;
        }
        if ((b + rep) % 5 != 3) { /* a scale per block, so that d_x is not a power of 2 */
            const float r = 0.1f + 2.0f * fabsf(rng_f(s));
            for (int j = 0; j < 256; j++)
                xb[j] *= r;
        }
    }
}

Test(cuda_math, quantize_q8_k_bytes_identical) {
    enum { N = 256 * 16 };
    float x[N];
    sd_block_q8_k ref[N / 256];
    uint64_t s = 21;
    for (int rep = 0; rep < 60; rep++) {
        fill_row_k(x, N, &s, rep, 1);
        sd_quantize_row(SD_TYPE_Q8_K, x, ref, N);
        for (int b = 0; b < N / 256; b++) {
            int8_t q[256];
            float d;
            sd_cu_quantize_q8_k(x + 256 * b, q, &d);
            cr_assert_eq(fbits(d), fbits(ref[b].d), "rep %d block %d: d %a vs %a", rep, b,
                         (double)d, (double)ref[b].d);
            cr_assert_eq(memcmp(q, ref[b].qs, 256), 0, "rep %d block %d: quants differ", rep, b);
            for (int g = 0; g < 16; g++) { /* the sums the kernels form from the quants */
                int32_t w[4], bs = 0;
                for (int i = 0; i < 4; i++)
                    w[i] = sd_cu_pack4(q + 16 * g + 4 * i);
                for (int i = 0; i < 4; i++)
                    bs = sd_cu_dp4a(w[i], 0x01010101, bs);
                cr_assert_eq(bs, ref[b].bsums[g], "block %d group %d sum", b, g);
            }
        }
    }
}

/* The device quantizer's choice of the maximum: lane l scans elements 8l .. 8l + 7 with
 * "strictly greater replaces", then a butterfly over the 32 (|v|, index) pairs with
 * sd_cu_amax_wins. Must pick the serial scan's index. */
Test(cuda_math, q8_k_parallel_max_equals_serial) {
    uint64_t s = 23;
    float x[256];
    for (int rep = 0; rep < 20000; rep++) {
        const int levels = 1 + (int)(rng_next(&s) % 6); /* few distinct magnitudes: ties */
        for (int j = 0; j < 256; j++) {
            const int v = (int)(rng_next(&s) % (uint64_t)(2 * levels + 1)) - levels;
            x[j] = (float)v * (rep % 2 ? 0.25f : 1.0f);
        }
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float la[32];
        int li[32];
        for (int l = 0; l < 32; l++) {
            la[l] = 0.0f;
            li[l] = 256;
            for (int j = 8 * l; j < 8 * l + 8; j++)
                if (fabsf(x[j]) > la[l]) la[l] = fabsf(x[j]), li[l] = j;
        }
        for (int off = 16; off > 0; off /= 2) {
            float na[32];
            int ni[32];
            for (int l = 0; l < 32; l++) {
                const int o = l ^ off, w = sd_cu_amax_wins(la[l], li[l], la[o], li[o]);
                na[l] = w ? la[o] : la[l];
                ni[l] = w ? li[o] : li[l];
            }
            memcpy(la, na, sizeof la);
            memcpy(li, ni, sizeof li);
        }
        for (int l = 0; l < 32; l++) {
            const float got = li[l] < 256 ? x[li[l]] : 0.0f;
            cr_assert_eq(fbits(got), fbits(max), "rep %d lane %d: %g vs serial %g", rep, l,
                         (double)got, (double)max);
        }
    }
}

/* ---- weights ---- */

typedef struct qtype {
    sd_type t;
    int kquant, has_min;
} qtype;

static const qtype k_qtypes[] = {
    {SD_TYPE_Q8_0, 0, 0}, {SD_TYPE_Q4_0, 0, 0}, {SD_TYPE_Q4_1, 0, 1}, {SD_TYPE_Q5_0, 0, 0},
    {SD_TYPE_Q5_1, 0, 1}, {SD_TYPE_Q2_K, 1, 1}, {SD_TYPE_Q3_K, 1, 0}, {SD_TYPE_Q4_K, 1, 1},
    {SD_TYPE_Q5_K, 1, 1}, {SD_TYPE_Q6_K, 1, 0},
};
#define N_QTYPES (sizeof k_qtypes / sizeof k_qtypes[0])

static void unpack32(sd_type t, const uint8_t *b, sd_cu_g32 *g) {
    switch (t) {
    case SD_TYPE_Q8_0:
        sd_cu_unpack_q8_0(b, g);
        break;
    case SD_TYPE_Q4_0:
        sd_cu_unpack_q4_0(b, g);
        break;
    case SD_TYPE_Q4_1:
        sd_cu_unpack_q4_1(b, g);
        break;
    case SD_TYPE_Q5_0:
        sd_cu_unpack_q5_0(b, g);
        break;
    default:
        sd_cu_unpack_q5_1(b, g);
        break;
    }
}

/* Part p of a K-quant super-block, with its d and dmin. */
static void kpart(sd_type t, const uint8_t *b, int p, sd_cu_kpart *o, float *d, float *dmin) {
    *dmin = 0.0f;
    switch (t) {
    case SD_TYPE_Q2_K:
        sd_cu_kpart_q2_k(b, p, o);
        *d = sd_cu_ld_fp16(b + 80);
        *dmin = sd_cu_ld_fp16(b + 82);
        break;
    case SD_TYPE_Q3_K:
        sd_cu_kpart_q3_k(b, p, o);
        *d = sd_cu_ld_fp16(b + 108);
        break;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
        sd_cu_kpart_q45_k(b, p, t == SD_TYPE_Q5_K, o);
        *d = sd_cu_ld_fp16(b);
        *dmin = sd_cu_ld_fp16(b + 2);
        break;
    default:
        sd_cu_kpart_q6_k(b, p, o);
        *d = sd_cu_ld_fp16(b + 208);
        break;
    }
}

/* Offsets of the fp16 factors of a block of type t (d, then dmin or m, -1 if none). */
static void scale_offsets(sd_type t, int *o1, int *o2) {
    *o2 = -1;
    switch (t) {
    case SD_TYPE_Q4_1:
    case SD_TYPE_Q5_1:
        *o1 = 0, *o2 = 2;
        break;
    case SD_TYPE_Q2_K:
        *o1 = 80, *o2 = 82;
        break;
    case SD_TYPE_Q3_K:
        *o1 = 108;
        break;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
        *o1 = 0, *o2 = 2;
        break;
    case SD_TYPE_Q6_K:
        *o1 = 208;
        break;
    default:
        *o1 = 0;
        break;
    }
}

/* Random quantized rows: random bytes (every level and scale value appears), with the fp16
 * factors replaced by finite ones (some negative, some zero). */
static void random_qrow(sd_type t, uint8_t *row, int nb, uint64_t *s) {
    const size_t bb = sd_type_block_bytes(t);
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        row[i] = (uint8_t)rng_next(s);
    int o1, o2;
    scale_offsets(t, &o1, &o2);
    for (int b = 0; b < nb; b++) {
        /* a quarter of the blocks with d = 0 and a quarter with the min factor 0, so that
         * each term's rounding shows alone */
        const int var = (int)(rng_next(s) % 4);
        const uint16_t d = var == 1 ? 0 : sd_fp32_to_fp16(rng_f(s) * 0.05f);
        memcpy(row + (size_t)b * bb + o1, &d, 2);
        if (o2 >= 0) {
            const uint16_t m = var == 2 ? 0 : sd_fp32_to_fp16(rng_f(s) * 0.05f);
            memcpy(row + (size_t)b * bb + o2, &m, 2);
        }
    }
}

/* Dequantize block b of a row with the header's functions (elems floats). */
static void cu_dequant_block(const qtype *qt, const uint8_t *blk, float *out) {
    if (!qt->kquant) {
        sd_cu_g32 g;
        unpack32(qt->t, blk, &g);
        sd_cu_dequant_g32(&g, qt->has_min, out);
        return;
    }
    for (int p = 0; p < 8; p++) {
        sd_cu_kpart w;
        float d, dmin;
        kpart(qt->t, blk, p, &w, &d, &dmin);
        for (int l = 0; l < 32; l++)
            out[32 * p + l] = sd_cu_kpart_elem(&w, l, d, dmin, qt->has_min);
    }
}

Test(cuda_math, dequant_bits_identical_every_type) {
    enum { NE = 256 * 12 };
    uint64_t s = 5;
    uint8_t *row = malloc(NE * 2);
    float *ref = malloc(NE * sizeof(float)), got[256];
    cr_assert(row && ref);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const qtype *qt = &k_qtypes[ti];
        const int be = (int)sd_type_block_elems(qt->t), nb = NE / be;
        const size_t bb = sd_type_block_bytes(qt->t);
        for (int rep = 0; rep < 40; rep++) {
            random_qrow(qt->t, row, nb, &s);
            cr_assert_eq(sd_dequantize_row(qt->t, row, ref, NE), 0);
            for (int b = 0; b < nb; b++) {
                cu_dequant_block(qt, row + (size_t)b * bb, got);
                for (int j = 0; j < be; j++)
                    cr_assert_eq(fbits(got[j]), fbits(ref[b * be + j]),
                                 "%s block %d element %d: %g vs %g", sd_type_name(qt->t), b, j,
                                 (double)got[j], (double)ref[b * be + j]);
            }
        }
    }
    free(row);
    free(ref);
}

/* ---- the GEMV reduction orders ---- */

/* 32-element types, as matmul.cu: lane l adds the terms of blocks l, l + 32, ... in order
 * (and the min terms into a second sum); then two butterflies and their sum. The
 * activations come from sd_cu_quantize_a32 (Q8_0's fp16 scale for Q8_0 / Q4_0, the float
 * one and d * sum for the others, as sd_vec_dot_type). Also sum |term| for the bound. */
static float emul_gemv32(const qtype *qt, const uint8_t *w, const float *x, int nb, double *abs_sum,
                         int *n_terms) {
    float lane[32] = {0}, lanem[32] = {0};
    const int xs = sd_vec_dot_type(qt->t) == SD_TYPE_Q8_S;
    const size_t bb = sd_type_block_bytes(qt->t);
    *abs_sum = 0.0;
    for (int b = 0; b < nb; b++) {
        sd_cu_g32 g;
        unpack32(qt->t, w + (size_t)b * bb, &g);
        int8_t q[32];
        uint16_t dh;
        float d, ds;
        sd_cu_quantize_a32(x + 32 * b, q, &dh, &d, &ds);
        int32_t xv[8];
        for (int i = 0; i < 8; i++)
            xv[i] = sd_cu_pack4(q + 4 * i);
        const float dx = xs ? d : sd_cu_fp16_to_fp32(dh);
        const float term = sd_cu_qterm(sd_cu_group_isum(g.q, xv), g.d, dx);
        lane[b % 32] = sd_cu_add(lane[b % 32], term);
        *abs_sum += fabs((double)term);
        if (qt->has_min) {
            const float mt = sd_cu_mul(g.m, ds);
            lanem[b % 32] = sd_cu_add(lanem[b % 32], mt);
            *abs_sum += fabs((double)mt);
        }
    }
    *n_terms = nb * (qt->has_min ? 2 : 1) + 1;
    const float a = sd_cu_warp_sum_emul(lane);
    return qt->has_min ? sd_cu_add(a, sd_cu_warp_sum_emul(lanem)) : a;
}

/* K-quants, as matmul.cu: super-block sb goes to lane group g = sb % 4 (lanes 8g .. 8g+7,
 * lane 8g + p reads part p); the parts' integers are summed exactly; lane 8g adds the term
 * to its sum; the other lanes hold 0; then the butterfly. */
static float emul_gemvk(const qtype *qt, const uint8_t *w, const float *x, int nb,
                        double *abs_sum) {
    float lane[32] = {0};
    const size_t bb = sd_type_block_bytes(qt->t);
    *abs_sum = 0.0;
    for (int sb = 0; sb < nb; sb++) {
        int8_t q[256];
        float dx;
        sd_cu_quantize_q8_k(x + 256 * sb, q, &dx);
        int32_t P = 0, M = 0;
        float d = 0.0f, dmin = 0.0f;
        for (int p = 0; p < 8; p++) {
            sd_cu_kpart kp;
            kpart(qt->t, w + (size_t)sb * bb, p, &kp, &d, &dmin);
            int32_t xv[8], pp, mm;
            for (int i = 0; i < 8; i++)
                xv[i] = sd_cu_pack4(q + 32 * p + 4 * i);
            sd_cu_kpart_dot(&kp, xv, &pp, &mm);
            P += pp;
            M += mm;
        }
        const int l = 8 * (sb % 4);
        lane[l] = sd_cu_kterm(lane[l], P, M, dx, d, dmin, qt->has_min);
        *abs_sum += fabs((double)sd_cu_mul(sd_cu_mul(dx, d), (float)P)) +
                    fabs((double)sd_cu_mul(sd_cu_mul(dx, dmin), (float)M));
    }
    return sd_cu_warp_sum_emul(lane);
}

Test(cuda_math, gemv_quant_orders_vs_reference) {
    const int n32[] = {32, 64, 96, 992, 1024, 1056, 2048, 4096, 11008};
    const int nk[] = {256, 512, 768, 1024, 1280, 2048, 4096, 11008 / 256 * 256};
    uint64_t s = 9;
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const qtype *qt = &k_qtypes[ti];
        const int *ns = qt->kquant ? nk : n32;
        const size_t nn = qt->kquant ? sizeof nk / sizeof nk[0] : sizeof n32 / sizeof n32[0];
        const sd_type xt = sd_vec_dot_type(qt->t);
        for (size_t ni = 0; ni < nn; ni++) {
            const int n = ns[ni], be = (int)sd_type_block_elems(qt->t), nb = n / be;
            size_t wrb, xrb;
            cr_assert_eq(sd_type_row_bytes(qt->t, n, &wrb), 0);
            cr_assert_eq(sd_type_row_bytes(xt, n, &xrb), 0);
            uint8_t *w = malloc(wrb), *xq = malloc(xrb);
            float *xf = malloc((size_t)n * sizeof(float));
            cr_assert(w && xf && xq);
            const int exact = nb <= (qt->kquant ? 1 : 2); /* the CPU's order */
            for (int rep = 0; rep < (exact ? 400 : 25); rep++) {
                random_qrow(qt->t, w, nb, &s);
                if (qt->kquant)
                    fill_row_k(xf, n, &s, rep, 0);
                else
                    fill_row(xf, n, &s, 0);
                cr_assert_eq(sd_quantize_row(xt, xf, xq, n), 0);
                float ref;
                sd_matmul_rows_ref(qt->t, w, wrb, n, xq, 1, &ref, 1, 0, 1);
                double abs_sum;
                int m = 2 * nb;
                const float got = qt->kquant ? emul_gemvk(qt, w, xf, nb, &abs_sum)
                                             : emul_gemv32(qt, w, xf, nb, &abs_sum, &m);
                if (exact) {
                    /* the same terms added in the same order */
                    cr_assert_eq(fbits(got), fbits(ref), "%s n %d: %a vs %a", sd_type_name(qt->t),
                                 n, (double)got, (double)ref);
                } else {
                    const double bound = 2.0 * (m - 1) * 0x1p-24 * abs_sum;
                    cr_assert(fabs((double)got - (double)ref) <= bound,
                              "%s n %d: |%.9g - %.9g| > %.3g", sd_type_name(qt->t), n, (double)got,
                              (double)ref, bound);
                }
            }
            free(w);
            free(xf);
            free(xq);
        }
    }
}

/* NaN / infinity activations reach the result on the GPU as on the CPU. */
Test(cuda_math, gemv_non_finite_activations_propagate) {
    uint64_t s = 31;
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const qtype *qt = &k_qtypes[ti];
        const int n = 512, nb = n / (int)sd_type_block_elems(qt->t);
        uint8_t w[512 * 2];
        float x[512];
        random_qrow(qt->t, w, nb, &s);
        for (int j = 0; j < n; j++)
            x[j] = rng_f(&s);
        x[300] = ti % 2 ? NAN : INFINITY;
        double a;
        int m;
        const float got =
            qt->kquant ? emul_gemvk(qt, w, x, nb, &a) : emul_gemv32(qt, w, x, nb, &a, &m);
        cr_assert(isnan(got), "%s: %g", sd_type_name(qt->t), (double)got);
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
    const int ns[] = {8, 12, 64, 256, 264, 4096, 4100, 11008};
    uint64_t s = 13;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        const int v = n % SD_CU_FVEC == 0 ? SD_CU_FVEC : 1; /* matmul.cu's choice */
        uint16_t *w = malloc((size_t)n * 2);
        float *wf = malloc((size_t)n * 4), *x = malloc((size_t)n * 4);
        cr_assert(w && wf && x);
        for (int rep = 0; rep < 20; rep++) {
            for (int j = 0; j < n; j++) {
                wf[j] = rng_f(&s) * 0.1f;
                x[j] = rng_f(&s) * (j % 13 == 0 ? 20.0f : 1.0f);
            }
            sd_quantize_row(SD_TYPE_F16, wf, w, n);
            double acc = 0.0; /* the oracle: double accumulation, rounded once */
            for (int j = 0; j < n; j++)
                acc += (double)sd_fp16_to_fp32(w[j]) * (double)x[j];
            const float ref = (float)acc;
            double abs_sum;
            const float got = emul_gemv_f(w, x, n, v, &abs_sum);
            const int per_lane = (n / v + 31) / 32 * v;
            const double bound = (per_lane + 6) * 0x1p-24 * abs_sum + fabs((double)ref) * 0x1p-24;
            cr_assert(fabs((double)got - (double)ref) <= bound, "n %d v %d: |%.9g - %.9g| > %.3g",
                      n, v, (double)got, (double)ref, bound);
        }
        free(w);
        free(wf);
        free(x);
    }
}

/* ---- attention: the split / combine algebra ---- */

#define CH  128 /* SD_CU_ATT_CHUNK */
#define THR 128 /* SD_CU_ATT_THREADS */

/* One query head against n keys (head_dim hd), attention.cu's formulas in float: per chunk,
 * score i by one thread (sequential fma over d), the block maximum and sum, and the V sum
 * split into G = THR / hd key ranges of CH / G keys (sequential fma each), added in range
 * order; then the combine over chunks. */
static void emul_attention(const float *q, const float *k, const float *v, int n, int hd,
                           float *out) {
    const float scale = sd_cu_div(1.0f, sqrtf((float)hd));
    const int nc = (n + CH - 1) / CH;
    const int G = hd <= THR ? THR / hd : 1, KG = (CH + G - 1) / G;
    float *po = calloc((size_t)nc * hd, sizeof(float)), *pm = calloc((size_t)nc, sizeof(float)),
          *pl = calloc((size_t)nc, sizeof(float)), p[CH];
    cr_assert(po && pm && pl);
    for (int c = 0; c < nc; c++) {
        const int j0 = c * CH, len = n - j0 < CH ? n - j0 : CH;
        float m = -INFINITY;
        for (int i = 0; i < len; i++) {
            float sc = 0.0f;
            for (int d = 0; d < hd; d++)
                sc = sd_cu_fma(q[d], k[(size_t)(j0 + i) * hd + d], sc);
            p[i] = sd_cu_mul(sc, scale);
            m = fmaxf(m, p[i]);
        }
        float slot[THR];
        for (int i = 0; i < THR; i++)
            slot[i] = i < len ? expf(sd_cu_sub(p[i], m)) : 0.0f;
        for (int i = 0; i < len; i++)
            p[i] = slot[i];
        /* sd_cu_block_sum over THR threads: 4 warp butterflies, then one over the warp sums */
        float ws[32] = {0};
        for (int wi = 0; wi < THR / 32; wi++)
            ws[wi] = sd_cu_warp_sum_emul(slot + 32 * wi);
        const float l = sd_cu_warp_sum_emul(ws);
        for (int d = 0; d < hd; d++) {
            float o = 0.0f;
            for (int gi = 0; gi < G; gi++) {
                float og = 0.0f;
                for (int i = gi * KG; i < (gi + 1) * KG && i < len; i++)
                    og = sd_cu_fma(p[i], v[(size_t)(j0 + i) * hd + d], og);
                o = gi == 0 ? og : sd_cu_add(o, og);
            }
            po[(size_t)c * hd + d] = o;
        }
        pm[c] = m;
        pl[c] = l;
    }
    float mx = pm[0], sum = 0.0f;
    for (int c = 1; c < nc; c++)
        mx = fmaxf(mx, pm[c]);
    for (int c = 0; c < nc; c++)
        sum = sd_cu_fma(pl[c], expf(sd_cu_sub(pm[c], mx)), sum);
    const float inv = sd_cu_div(1.0f, sum);
    for (int d = 0; d < hd; d++) {
        float o = 0.0f;
        for (int c = 0; c < nc; c++)
            o = sd_cu_fma(po[(size_t)c * hd + d], expf(sd_cu_sub(pm[c], mx)), o);
        out[d] = sd_cu_mul(o, inv);
    }
    free(po);
    free(pm);
    free(pl);
}

Test(cuda_math, attention_split_combine_vs_double) {
    const int ns[] = {1, 5, 63, 64, 65, 127, 128, 129, 300, 1000};
    const int hds[] = {64, 128, 80, 256};
    uint64_t s = 17;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni], hd = hds[hi];
            float *k = malloc((size_t)n * hd * 4), *v = malloc((size_t)n * hd * 4), q[256],
                  out[256];
            double *w = malloc((size_t)n * sizeof(double));
            cr_assert(k && v && w);
            for (int i = 0; i < n * hd; i++) {
                k[i] = rng_f(&s) * 3.0f / sqrtf((float)hd / 64.0f);
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
                cr_assert(fabs(out[d] - ref) <= 1e-5 * vmax, "hd %d n %d d %d: %.9g vs %.9g", hd, n,
                          d, (double)out[d], ref);
            }
            free(k);
            free(v);
            free(w);
        }
}
