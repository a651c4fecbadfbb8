/*
 * tests/test_quant.c: quant/ — types, fp16/bf16 conversions, the ggml reference
 * quantizers (bytes worked out by hand), round-trip bounds, and every kernel set this
 * CPU can run against an independent double-precision oracle, plus the batch-invariance
 * contract (bit-exact: batched == single-token == any row split).
 *
 * White-box: includes quant/quant_kernels.h (private to quant/) to reach each kernel set.
 */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/sd_quant.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------------------------- */
/* helpers                                                                              */
/* ---------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_f(uint64_t *s) {
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

static const sd_type k_types[] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0};
#define N_TYPES (sizeof k_types / sizeof k_types[0])
static const char *const k_sets[] = {"scalar", "avx2", "avx512"};
#define N_SETS (sizeof k_sets / sizeof k_sets[0])

static size_t row_bytes(sd_type t, int64_t n) {
    size_t rb = 0;
    cr_assert_eq(sd_type_row_bytes(t, n, &rb), 0, "row_bytes(%s, %lld)", sd_type_name(t),
                 (long long)n);
    return rb;
}

/* n bytes (at least 1), 64-byte aligned */
static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 64) / 64 * 64);
    cr_assert_not_null(p);
    return p;
}

/* x[n_tok, n] prepared by kernel set ks for weights of type t (as sd_quantize_activations
 * does with the active set), in a fresh 64-byte aligned buffer (free()). */
static unsigned char *prep(const sd_kernel_set *ks, sd_type t, const float *x, int64_t n_tok,
                           int64_t n) {
    size_t bytes = 0;
    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok, n, &bytes), 0);
    unsigned char *q = xalloc(bytes);
    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, n_tok, q);
    return q;
}

/* ---------------------------------------------------------------------------------- */
/* types                                                                                */
/* ---------------------------------------------------------------------------------- */

Test(quant_types, names_and_sizes) {
    cr_assert_eq(sd_type_supported(0), 1);
    cr_assert_eq(sd_type_supported(1), 1);
    cr_assert_eq(sd_type_supported(2), 1);
    cr_assert_eq(sd_type_supported(8), 1);
    cr_assert_eq(sd_type_supported(30), 1);
    cr_assert_eq(sd_type_supported(3), 1);  /* Q4_1 */
    cr_assert_eq(sd_type_supported(12), 1); /* Q4_K */
    cr_assert_eq(sd_type_supported(4), 0);  /* Q4_2: removed from ggml */
    cr_assert_eq(sd_type_supported(9), 0);  /* Q8_1: no kernels here */
    cr_assert_eq(sd_type_supported(15), 0); /* Q8_K: activations only */
    cr_assert_eq(sd_type_supported(SD_TYPE_Q8_S), 0);
    cr_assert_eq(sd_type_supported(16), 0); /* IQ2_XXS */
    cr_assert_eq(sd_type_supported(9999), 0);
    cr_assert_str_eq(sd_type_name(SD_TYPE_F32), "f32");
    cr_assert_str_eq(sd_type_name(SD_TYPE_F16), "f16");
    cr_assert_str_eq(sd_type_name(SD_TYPE_Q4_0), "q4_0");
    cr_assert_str_eq(sd_type_name(SD_TYPE_Q8_0), "q8_0");
    cr_assert_str_eq(sd_type_name(SD_TYPE_BF16), "bf16");
    cr_assert_str_eq(sd_type_name(7), "q5_1");
    cr_assert_str_eq(sd_type_name(14), "q6_k");
    cr_assert_str_eq(sd_type_name(5), "unknown");
    cr_assert_str_eq(sd_type_name(SD_TYPE_COUNT), "unknown");

    sd_type t = SD_TYPE_F32;
    cr_assert_eq(sd_type_from_name("Q8_0", &t), 0);
    cr_assert_eq(t, SD_TYPE_Q8_0);
    cr_assert_eq(sd_type_from_name("bf16", &t), 0);
    cr_assert_eq(t, SD_TYPE_BF16);
    cr_assert_eq(sd_type_from_name("F16", &t), 0);
    cr_assert_eq(t, SD_TYPE_F16);
    cr_assert_eq(sd_type_from_name("q4_1", &t), 0);
    cr_assert_eq(t, SD_TYPE_Q4_1);
    cr_assert_eq(sd_type_from_name("Q4_K", &t), 0);
    cr_assert_eq(t, SD_TYPE_Q4_K);
    t = SD_TYPE_F16;
    cr_assert_eq(sd_type_from_name("q8_k", &t), -1, "activation-only types are not names");
    cr_assert_eq(sd_type_from_name("q4_k_m", &t), -1, "a recipe, not a type");
    cr_assert_eq(sd_type_from_name("", &t), -1);
    cr_assert_eq(t, SD_TYPE_F16, "failed parse must not touch *out");

    cr_assert_eq(sd_type_block_elems(SD_TYPE_F32), 1);
    cr_assert_eq(sd_type_block_elems(SD_TYPE_Q4_0), 32);
    cr_assert_eq(sd_type_block_elems(SD_TYPE_Q8_0), 32);
    cr_assert_eq(sd_type_block_elems(SD_TYPE_Q4_K), 256);
    cr_assert_eq(sd_type_block_elems((sd_type)5), 0);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_F32), 4);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_F16), 2);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_BF16), 2);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q4_0), 18);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q8_0), 34);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q4_1), 20);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q5_0), 22);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q5_1), 24);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q2_K), 84);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q3_K), 110);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q4_K), 144);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q5_K), 176);
    cr_assert_eq(sd_type_block_bytes(SD_TYPE_Q6_K), 210);
    cr_assert_eq(sd_type_block_bytes((sd_type)5), 0);

    size_t rb = 12345;
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q8_0, 4096, &rb), 0);
    cr_assert_eq(rb, 128u * 34u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q4_0, 4096, &rb), 0);
    cr_assert_eq(rb, 128u * 18u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_F16, 7, &rb), 0);
    cr_assert_eq(rb, 14u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_F32, 0, &rb), 0);
    cr_assert_eq(rb, 0u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q8_0, 33, &rb), -1);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_F32, -4, &rb), -1);
    cr_assert_eq(sd_type_row_bytes((sd_type)5, 32, &rb), -1);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q4_K, 4096, &rb), 0);
    cr_assert_eq(rb, 16u * 144u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q4_K, 4096 + 32, &rb), -1, "K-quants: 256 blocks");
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_F32, INT64_MAX, &rb), -1, "overflow");
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q8_0, INT64_MAX - 31, &rb), 0, "2^58 - 1 blocks fit");
    cr_assert_eq(rb, (((size_t)1 << 58) - 1u) * 34u);

    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q4_0), SD_TYPE_Q8_0);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q8_0), SD_TYPE_Q8_0);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_F16), SD_TYPE_F32);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_BF16), SD_TYPE_F32);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_F32), SD_TYPE_F32);
}

/* ---------------------------------------------------------------------------------- */
/* fp16 / bf16                                                                          */
/* ---------------------------------------------------------------------------------- */

Test(quant_fp16, known_vectors) {
    struct {
        float f;
        uint16_t h;
    } v[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {0.5f, 0x3800},
        {0.1f, 0x2E66},      /* 0.0999755859375 */
        {65504.0f, 0x7BFF},  /* max finite */
        {65505.0f, 0x7BFF},  /* rounds down */
        {65519.99f, 0x7BFF}, /* just below the tie */
        {65520.0f, 0x7C00},  /* tie: 0x7BFF is odd -> up -> inf */
        {-1e6f, 0xFC00},     /* overflow -> -inf */
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
        {0x1p-14f, 0x0400}, /* min normal */
        {0x1p-24f, 0x0001}, /* min subnormal */
        {-0x1p-24f, 0x8001},
        {0x3FFp-24f, 0x03FF},        /* max subnormal */
        {0x1p-25f, 0x0000},          /* tie between 0 and 2^-24 -> even (0) */
        {0x1.000002p-25f, 0x0001},   /* just above the tie */
        {0x3p-25f, 0x0002},          /* 1.5 * 2^-24: tie between 1 and 2 -> 2 */
        {0x5p-25f, 0x0002},          /* 2.5 * 2^-24: tie between 2 and 3 -> 2 */
        {0x7FFp-25f, 0x0400},        /* 1023.5 * 2^-24: tie -> 1024 = min normal */
        {1e-10f, 0x0000},            /* underflow */
        {1.0f + 0x1p-11f, 0x3C00},   /* tie between 0x3C00 and 0x3C01 -> even */
        {1.0f + 0x3p-11f, 0x3C02},   /* tie between 0x3C01 and 0x3C02 -> even */
        {1.0f + 0x1.2p-11f, 0x3C01}, /* just above the tie */
        {2048.0f + 1.0f, 0x6800},    /* 2049: tie between 2048 and 2050 -> 2048 */
        {2048.0f + 3.0f, 0x6802},    /* 2051: tie between 2050 and 2052 -> 2052 */
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint16_t h = sd_fp32_to_fp16(v[i].f);
        cr_expect_eq(h, v[i].h, "fp32_to_fp16(%a) = 0x%04X, want 0x%04X", (double)v[i].f, h,
                     v[i].h);
    }
    cr_assert_eq(sd_fp16_to_fp32(0x3C00), 1.0f);
    cr_assert_eq(sd_fp16_to_fp32(0x7BFF), 65504.0f);
    cr_assert_eq(sd_fp16_to_fp32(0x0001), 0x1p-24f);
    cr_assert_eq(sd_fp16_to_fp32(0x03FF), 0x3FFp-24f);
    cr_assert_eq(sd_fp16_to_fp32(0xC000), -2.0f);
    cr_assert_eq(fbits(sd_fp16_to_fp32(0x8000)), 0x80000000u);
    cr_assert(isinf(sd_fp16_to_fp32(0x7C00)) && sd_fp16_to_fp32(0x7C00) > 0);
    cr_assert(isinf(sd_fp16_to_fp32(0xFC00)) && sd_fp16_to_fp32(0xFC00) < 0);
    cr_assert(isnan(sd_fp16_to_fp32(0x7E00)));
    cr_assert(isnan(sd_fp16_to_fp32(0x7C01)));
    /* NaN stays NaN (quiet) in both directions */
    uint16_t hn = sd_fp32_to_fp16(NAN);
    cr_assert((hn & 0x7C00) == 0x7C00 && (hn & 0x03FF) != 0, "nan -> 0x%04X", hn);
    uint16_t hs = sd_fp32_to_fp16(bitsf(0x7F800001u)); /* signalling nan, tiny payload */
    cr_assert((hs & 0x7C00) == 0x7C00 && (hs & 0x0200) != 0, "snan -> 0x%04X", hs);
}

/* Every binary16 value: fp16 -> fp32 matches ldexp(), and converts back to itself. */
Test(quant_fp16, exhaustive_roundtrip) {
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
        const float f = sd_fp16_to_fp32((uint16_t)h);
        if (e == 0x1F) {
            cr_assert(m ? isnan(f) : isinf(f), "h=0x%04X", h);
            if (m) continue;
        } else {
            double want = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp((double)m, -24);
            if (h & 0x8000) want = -want;
            cr_assert_eq((double)f, want, "h=0x%04X: %a vs %a", h, (double)f, want);
            cr_assert_eq(signbit(f) != 0, (h & 0x8000) != 0, "h=0x%04X sign", h);
        }
        cr_assert_eq(sd_fp32_to_fp16(f), h, "roundtrip 0x%04X", h);
    }
}

/* Random floats: the result is the nearest fp16 (ties to even), checked against
 * neighbours in double; and against the F16C instruction where the CPU has it. */
#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_fp16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#endif

Test(quant_fp16, random_nearest_even) {
    uint64_t s = 42;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    const int have_f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
#endif
    for (int i = 0; i < 200000; i++) {
        /* random sign, exponent in the fp16 range and beyond, random mantissa */
        uint32_t r = (uint32_t)rng_next(&s);
        uint32_t exp = 127 - 30 + (uint32_t)(rng_next(&s) % 48); /* 2^-30 .. 2^17 */
        float f = bitsf((r & 0x80000000u) | (exp << 23) | (r & 0x7FFFFFu));
        uint16_t h = sd_fp32_to_fp16(f);
#if defined(__x86_64__)
        if (have_f16c) cr_assert_eq(h, hw_fp16(f), "%a: 0x%04X vs F16C", (double)f, h);
#endif
        const double fd = fabs((double)f);
        const uint16_t ha = h & 0x7FFF;
        cr_assert_eq((h & 0x8000) != 0, signbit(f) != 0);
        if (ha == 0x7C00) { /* inf: only if |f| >= 65520 */
            cr_assert(fd >= 65520.0, "%a -> inf", (double)f);
            continue;
        }
        const double got = fabs((double)sd_fp16_to_fp32(h));
        const double err = fabs(got - fd);
        if (ha > 0) {
            const double below = fabs((double)sd_fp16_to_fp32((uint16_t)(ha - 1)));
            cr_assert(err <= fd - below, "%a: lower neighbour closer", (double)f);
            if (err == fd - below) cr_assert((ha & 1) == 0, "%a: tie not even", (double)f);
        }
        if (ha < 0x7BFF) {
            const double above = (double)sd_fp16_to_fp32((uint16_t)(ha + 1));
            cr_assert(err <= above - fd, "%a: upper neighbour closer", (double)f);
            if (err == above - fd) cr_assert((ha & 1) == 0, "%a: tie not even", (double)f);
        }
    }
}

Test(quant_bf16, known_vectors) {
    cr_assert_eq(sd_fp32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(sd_fp32_to_bf16(-2.0f), 0xC000);
    cr_assert_eq(sd_fp32_to_bf16(0.0f), 0x0000);
    cr_assert_eq(sd_fp32_to_bf16(-0.0f), 0x8000);
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x3F808000u)), 0x3F80, "tie -> even (down)");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x3F818000u)), 0x3F82, "tie -> even (up)");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x3F808001u)), 0x3F81, "above tie");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x3F807FFFu)), 0x3F80, "below tie");
    cr_assert_eq(sd_fp32_to_bf16(INFINITY), 0x7F80);
    cr_assert_eq(sd_fp32_to_bf16(-INFINITY), 0xFF80);
    cr_assert_eq(sd_fp32_to_bf16(FLT_MAX), 0x7F80, "FLT_MAX rounds to inf in bf16");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x7F7F0000u)), 0x7F7F, "bf16 max finite");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x00010000u)), 0x0001, "subnormal kept");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x00018000u)), 0x0002, "subnormal tie -> even");
    cr_assert_eq(sd_fp32_to_bf16(bitsf(0x00008000u)), 0x0000, "subnormal tie -> 0");
    uint16_t n = sd_fp32_to_bf16(NAN);
    cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0, "nan -> 0x%04X", n);
    n = sd_fp32_to_bf16(bitsf(0x7F800001u)); /* payload only in the dropped bits */
    cr_assert((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0, "snan must stay nan: 0x%04X", n);
    cr_assert_eq(sd_bf16_to_fp32(0x3F80), 1.0f);
    cr_assert_eq(sd_bf16_to_fp32(0xC040), -3.0f);
    cr_assert(isnan(sd_bf16_to_fp32(0x7FC0)));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sd_bf16_to_fp32((uint16_t)h);
        cr_assert_eq(fbits(f), h << 16);
        if (!isnan(f)) cr_assert_eq(sd_fp32_to_bf16(f), h, "roundtrip 0x%04X", h);
    }
}

/* ---------------------------------------------------------------------------------- */
/* reference quantizers: bytes by hand                                                  */
/* ---------------------------------------------------------------------------------- */

Test(quant_q8_0, hand_bytes_unit_scale) {
    /* amax = 127 -> d = 1.0 (fp16 0x3C00), id = 1: q = roundf(x) */
    float x[32];
    x[0] = 127.0f;
    x[1] = -127.0f;
    for (int j = 2; j < 32; j++)
        x[j] = (float)((j - 16) * 4) + 0.25f;
    x[2] = 2.5f;  /* roundf: ties away from zero -> 3 (not rint's 2) */
    x[3] = -0.5f; /* -> -1 */
    sd_block_q8_0 b;
    memset(&b, 0xAB, sizeof b);
    sd_quantize_row(SD_TYPE_Q8_0, x, &b, 32);
    unsigned char bytes[34];
    memcpy(bytes, &b, 34);
    cr_assert_eq(bytes[0], 0x00);
    cr_assert_eq(bytes[1], 0x3C);
    cr_assert_eq(b.qs[0], 127);
    cr_assert_eq(b.qs[1], -127);
    cr_assert_eq(b.qs[2], 3);
    cr_assert_eq(b.qs[3], -1);
    for (int j = 4; j < 32; j++)
        cr_assert_eq(b.qs[j], (j - 16) * 4, "q[%d]=%d", j, b.qs[j]);
}

Test(quant_q8_0, hand_bytes_small_scale) {
    /* amax = 2 -> d = 2/127 = 0.015748.. = 2^-6 * 1.00787: fp16 exponent 9, mantissa
     * round(0.00787 * 1024) = 8 -> 0 01001 0000001000 = 0x2408. id = 63.5:
     * 2 -> 127, -1.5 -> -95.25 -> -95, 0.25 -> 15.875 -> 16, 0.1 -> 6.35 -> 6,
     * -0.03 -> -1.905 -> -2, 0.0078 -> 0.4953 -> 0 */
    float x[32] = {2.0f, -1.5f, 0.25f, 0.1f, -0.03f, 0.0078f};
    sd_block_q8_0 b;
    sd_quantize_row(SD_TYPE_Q8_0, x, &b, 32);
    cr_assert_eq(b.d, 0x2408, "d=0x%04X", b.d);
    const int8_t want[6] = {127, -95, 16, 6, -2, 0};
    for (int j = 0; j < 6; j++)
        cr_assert_eq(b.qs[j], want[j], "q[%d]=%d", j, b.qs[j]);
    for (int j = 6; j < 32; j++)
        cr_assert_eq(b.qs[j], 0);
}

Test(quant_q4_0, hand_bytes) {
    /* Negative max: x[0] = -8 is the largest magnitude -> d = -8 / -8 = 1 (0x3C00),
     * q = min(15, (int)(x + 8.5)). Low half x[j] = j - 8 -> q = j; high half
     * x[16 + k] = 7.3 - k -> trunc(15.8 - k) = 15 - k. Byte j = q[j] | q[j+16] << 4. */
    float x[32];
    for (int j = 0; j < 16; j++)
        x[j] = (float)(j - 8);
    for (int k = 0; k < 16; k++)
        x[16 + k] = 7.3f - (float)k;
    sd_block_q4_0 b;
    sd_quantize_row(SD_TYPE_Q4_0, x, &b, 32);
    cr_assert_eq(b.d, 0x3C00, "d=0x%04X", b.d);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(b.qs[j], (uint8_t)(j | ((15 - j) << 4)), "qs[%d]=0x%02X", j, b.qs[j]);

    /* Positive max, first one wins on a magnitude tie: x[0] = +8 and x[16] = -8 ->
     * max = +8, d = -1 (0xBC00), id = -1: x[0] -> 0.5 -> 0; x[16] -> 16.5 -> 16 ->
     * clamped to 15. Low half x[j] = 8 - j -> q = j; high x[16+k] = -(7.3 - k) -> 15 - k */
    for (int j = 0; j < 16; j++)
        x[j] = (float)(8 - j);
    for (int k = 0; k < 16; k++)
        x[16 + k] = -(7.3f - (float)k);
    x[16] = -8.0f;
    sd_quantize_row(SD_TYPE_Q4_0, x, &b, 32);
    cr_assert_eq(b.d, 0xBC00, "d=0x%04X", b.d);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(b.qs[j], (uint8_t)(j | ((15 - j) << 4)), "qs[%d]=0x%02X", j, b.qs[j]);
    float y[32];
    sd_dequantize_row(SD_TYPE_Q4_0, &b, y, 32);
    cr_assert_eq(y[0], 8.0f);   /* (0 - 8) * -1 */
    cr_assert_eq(y[16], -7.0f); /* (15 - 8) * -1: the clamped element */
}

Test(quant_zero, all_zero_blocks) {
    float x[96] = {0};
    for (int j = 64; j < 96; j++)
        x[j] = (float)(j - 80) * 0.01f; /* third block nonzero */
    x[40] = -0.0f;
    sd_block_q8_0 q8[3];
    sd_block_q4_0 q4[3];
    sd_quantize_row(SD_TYPE_Q8_0, x, q8, 96);
    sd_quantize_row(SD_TYPE_Q4_0, x, q4, 96);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(q8[i].d, 0);
        /* ggml: d = max / -8 = 0 / -8 = -0.0 -> fp16 0x8000; x * 0 + 8.5 -> q = 8 */
        cr_assert_eq(q4[i].d, 0x8000, "q4 zero block d=0x%04X (ggml writes -0)", q4[i].d);
        for (int j = 0; j < 32; j++)
            cr_assert_eq(q8[i].qs[j], 0);
        for (int j = 0; j < 16; j++)
            cr_assert_eq(q4[i].qs[j], 0x88, "q4 zero -> 8|8<<4");
    }
    float y[96];
    sd_dequantize_row(SD_TYPE_Q8_0, q8, y, 96);
    for (int j = 0; j < 64; j++)
        cr_assert(y[j] == 0.0f && !isnan(y[j]));
    for (int j = 64; j < 96; j++)
        cr_assert(!isnan(y[j]) && fabsf(y[j] - x[j]) < 2e-3f);
    sd_dequantize_row(SD_TYPE_Q4_0, q4, y, 96);
    for (int j = 0; j < 64; j++)
        cr_assert(y[j] == 0.0f && !isnan(y[j]));

    /* zero activations through every kernel: exactly 0, never NaN */
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        float xa[96] = {0};
        float out[2] = {1.0f, 1.0f};
        unsigned char *xq = prep(ks, SD_TYPE_Q8_0, xa, 1, 96);
        sd_kernel_for_type(ks, SD_TYPE_Q8_0)(q8, sizeof q8, 96, xq, 1, out, 1, 0, 1);
        free(xq);
        xq = prep(ks, SD_TYPE_Q4_0, xa, 1, 96);
        sd_kernel_for_type(ks, SD_TYPE_Q4_0)(q4, sizeof q4, 96, xq, 1, out + 1, 1, 0, 1);
        free(xq);
        cr_assert(out[0] == 0.0f && out[1] == 0.0f, "%s: %g %g", ks->name, out[0], out[1]);
    }
}

/* ---------------------------------------------------------------------------------- */
/* round-trip error bounds                                                              */
/* ---------------------------------------------------------------------------------- */

Test(quant_roundtrip, bounds) {
    uint64_t s = 7;
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static unsigned char buf[N * 4];
    for (int trial = 0; trial < 20; trial++) {
        const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 30) - 15);
        for (int j = 0; j < N; j++)
            x[j] = rng_f(&s) * scale;
        if (trial % 5 == 0) x[trial] = scale * 1.5f; /* an outlier */

        /* Q8_0: |x - q*dh| <= dh/2 (rounding at scale d) + 127*|d - dh| (fp16 scale) */
        sd_quantize_row(SD_TYPE_Q8_0, x, buf, N);
        sd_dequantize_row(SD_TYPE_Q8_0, buf, y, N);
        for (int i = 0; i < N / 32; i++) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[i * 32 + j]));
            const double d = amax / 127.0;
            const double dh = sd_fp16_to_fp32(((sd_block_q8_0 *)buf)[i].d);
            const double bound = 0.5 * d + 127.0 * fabs(d - dh) + 1e-6 * amax;
            for (int j = i * 32; j < i * 32 + 32; j++)
                cr_assert(fabs((double)x[j] - y[j]) <= bound, "q8_0 [%d]: %g vs %g (d=%g)", j, x[j],
                          y[j], d);
        }
        /* Q4_0: d = max/-8; elements at most d/2 away except the clamped one (-max at
         * q = 16 -> 15) which is at most |d| away; plus 8*|d - dh| for the fp16 scale */
        sd_quantize_row(SD_TYPE_Q4_0, x, buf, N);
        sd_dequantize_row(SD_TYPE_Q4_0, buf, y, N);
        for (int i = 0; i < N / 32; i++) {
            float amax = 0, max = 0;
            for (int j = 0; j < 32; j++)
                if (amax < fabsf(x[i * 32 + j])) amax = fabsf(x[i * 32 + j]), max = x[i * 32 + j];
            const double d = max / -8.0;
            const double dh = sd_fp16_to_fp32(((sd_block_q4_0 *)buf)[i].d);
            for (int j = i * 32; j < i * 32 + 32; j++) {
                const double xi = x[j] / d; /* in [-8, 8] */
                const double base = xi <= 7.5 ? 0.5 * fabs(d) : fabs(d);
                const double bound = base + 8.0 * fabs(d - dh) + 1e-6 * amax;
                cr_assert(fabs((double)x[j] - y[j]) <= bound, "q4_0 [%d]: %g vs %g (d=%g)", j, x[j],
                          y[j], d);
            }
        }
        /* F16 / BF16: relative half-ulp */
        sd_quantize_row(SD_TYPE_F16, x, buf, N);
        sd_dequantize_row(SD_TYPE_F16, buf, y, N);
        for (int j = 0; j < N; j++)
            cr_assert(fabs((double)x[j] - y[j]) <= fabs(x[j]) * 0x1p-11 + 0x1p-25, "f16 %g %g",
                      x[j], y[j]);
        sd_quantize_row(SD_TYPE_BF16, x, buf, N);
        sd_dequantize_row(SD_TYPE_BF16, buf, y, N);
        for (int j = 0; j < N; j++)
            cr_assert(fabs((double)x[j] - y[j]) <= fabs(x[j]) * 0x1p-8, "bf16 %g %g", x[j], y[j]);
        sd_quantize_row(SD_TYPE_F32, x, buf, N);
        sd_dequantize_row(SD_TYPE_F32, buf, y, N);
        cr_assert_eq(memcmp(x, y, sizeof x), 0);
    }
}

Test(quant_activations, layout) {
    uint64_t s = 11;
    enum { T = 3, N = 96 };
    float x[T * N];
    for (int j = 0; j < T * N; j++)
        x[j] = rng_f(&s) * 3.0f;
    _Alignas(64) unsigned char got[4096];
    unsigned char want[T * 102];
    sd_quantize_activations(SD_TYPE_Q4_0, x, T, N, got);
    for (int b = 0; b < T; b++)
        sd_quantize_row(SD_TYPE_Q8_0, x + b * N, want + b * 102, N);
    cr_assert_eq(memcmp(got, want, T * 102), 0);
    sd_quantize_activations(SD_TYPE_Q8_0, x, T, N, got);
    cr_assert_eq(memcmp(got, want, T * 102), 0);
    sd_quantize_activations(SD_TYPE_F16, x, T, N, got);
    cr_assert_eq(memcmp(got, x, sizeof x), 0);
    sd_quantize_activations(SD_TYPE_BF16, x, T, N, got);
    cr_assert_eq(memcmp(got, x, sizeof x), 0);
}

/* The prepared layout (sd_quant.h) for every kernel set: its size; part A is the
 * reference Q8_0 rows (F32-dot: a copy); nothing is written past the size; preparing
 * disjoint row ranges (as the backend's threads do) writes what one call writes; sizes
 * are monotone; bad shapes and overflow are refused. */
Test(quant_activations, prepared_layout) {
    uint64_t s = 5150;
    static const int64_t toks[] = {1, 2, 5, 9, 16, 17, 33};
    static const int64_t cols[] = {32, 96, 256, 288, 1024};
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const sd_type t = k_types[ti];
            const int q = sd_vec_dot_type(t) == SD_TYPE_Q8_0;
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
                    const int64_t n_tok = toks[k], n = cols[c];
                    const size_t rb = row_bytes(sd_vec_dot_type(t), n);
                    size_t bytes = 0, want_bytes = (size_t)n_tok * rb;
                    const sd_act_pack *pk = sd_kernel_pack_for_type(ks, t);
                    if (pk)
                        want_bytes =
                            ((want_bytes + 63) & ~(size_t)63) + (size_t)n_tok * pk->tok_bytes(n);
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok, n, &bytes), 0);
                    cr_assert_eq(bytes, want_bytes, "%s %s", ks->name, sd_type_name(t));
                    size_t b2 = 0; /* monotone */
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok + 1, n + 32, &b2), 0);
                    cr_assert_geq(b2, bytes);
                    float *x = malloc(sizeof(float) * (size_t)(n_tok * n));
                    for (int64_t j = 0; j < n_tok * n; j++)
                        x[j] = rng_f(&s) * 5.0f;
                    unsigned char *one = xalloc(bytes + 64), *split = xalloc(bytes + 64);
                    memset(one, 0xA5, bytes + 64);
                    memset(split, 0xA5, bytes + 64);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, n_tok, one);
                    for (int64_t j = 0; j < 64; j++)
                        cr_assert_eq(one[bytes + (size_t)j], 0xA5, "%s wrote past the size",
                                     ks->name);
                    unsigned char *want = malloc(rb);
                    for (int64_t b = 0; b < n_tok; b++) {
                        sd_quantize_row(sd_vec_dot_type(t), x + b * n, want, n);
                        cr_assert_eq(memcmp(one + (size_t)b * rb, want, rb), 0,
                                     "%s %s: part A row %lld differs from the reference", ks->name,
                                     sd_type_name(t), (long long)b);
                    }
                    free(want);
                    /* three ranges, prepared in reverse order */
                    const int64_t c1 = (int64_t)(rng_next(&s) % (uint64_t)(n_tok + 1));
                    const int64_t c2 = c1 + (int64_t)(rng_next(&s) % (uint64_t)(n_tok - c1 + 1));
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, c2, n_tok, split);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, c1, c2, split);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, c1, split);
                    cr_assert_eq(memcmp(one, split, bytes + 64), 0,
                                 "%s %s n_tok=%lld n=%lld: split preparation differs", ks->name,
                                 sd_type_name(t), (long long)n_tok, (long long)n);
                    free(x);
                    free(one);
                    free(split);
                }
            }
            size_t b = 12345;
            cr_assert_eq(sd_kernel_act_bytes(ks, t, 0, 64, &b), 0);
            cr_assert_eq(b, 0);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, -1, 64, &b), -1);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, 1, -32, &b), -1);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, INT64_MAX / 2, 1 << 20, &b), -1);
            if (q) cr_assert_eq(sd_kernel_act_bytes(ks, t, 1, 33, &b), -1);
        }
        size_t b;
        cr_assert_eq(sd_kernel_act_bytes(ks, (sd_type)5, 1, 64, &b), -1);
        cr_assert_eq(sd_kernel_act_bytes(ks, SD_TYPE_Q8_K, 1, 256, &b), -1, "not a weight type");
    }
    /* the public face is the active set */
    size_t a = 0, b = 0;
    cr_assert_eq(sd_activations_bytes(SD_TYPE_Q4_0, 7, 320, &a), 0);
    cr_assert_eq(sd_kernel_act_bytes(sd_kernel_set_active(), SD_TYPE_Q4_0, 7, 320, &b), 0);
    cr_assert_eq(a, b);
}

/* Every kernel set's SIMD Q8_0 activation quantizer gives the reference's bytes: random
 * rows over many magnitudes, exact roundf ties (+-k.5 at d = 1), zero / -0 blocks, values
 * just below and above .5, subnormals, a scale that overflows fp16, NaN and infinities. */
Test(quant_activations, simd_q8_0_bit_exact) {
    uint64_t s = 2024;
    enum { NB = 64, N = NB * 32 };
    static float x[N];
    static unsigned char want[NB * 34], got[NB * 34];
    int tested = 0;
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks || !ks->quant[SD_TYPE_Q8_0]) continue;
        tested++;
        for (int trial = 0; trial < 200; trial++) {
            for (int i = 0; i < NB; i++) {
                float *xb = x + 32 * i;
                const int kind = (int)(rng_next(&s) % 10);
                const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 60) - 40);
                for (int j = 0; j < 32; j++)
                    xb[j] = rng_f(&s) * scale;
                switch (kind) {
                case 0: /* amax 127 -> d = 1: x = +-k.5 are exact roundf ties */
                    for (int j = 0; j < 32; j++)
                        xb[j] = (float)((int)(rng_next(&s) % 254) - 127) + 0.5f;
                    xb[0] = 127.0f;
                    xb[1] = -0.5f;
                    xb[2] = 0.5f;
                    xb[3] = -126.5f;
                    break;
                case 1: /* zero block, with a -0 */
                    memset(xb, 0, 32 * sizeof(float));
                    xb[5] = -0.0f;
                    break;
                case 2: /* around .5 at d = 1 */
                    for (int j = 1; j < 32; j++)
                        xb[j] = nextafterf((float)(j % 7) + 0.5f, (j & 1) ? 0.0f : 100.0f);
                    xb[0] = -127.0f;
                    break;
                case 3: /* subnormals */
                    for (int j = 0; j < 32; j++)
                        xb[j] = rng_f(&s) * 0x1p-130f;
                    break;
                case 4: /* d beyond the fp16 range (stored as inf) */
                    for (int j = 0; j < 32; j++)
                        xb[j] = rng_f(&s) * 1e7f;
                    xb[9] = 3e38f;
                    break;
                case 5:
                    xb[rng_next(&s) % 32] = NAN;
                    break;
                case 6:
                    xb[rng_next(&s) % 32] = (rng_next(&s) & 1) ? INFINITY : -INFINITY;
                    break;
                default:
                    break;
                }
            }
            memset(got, 0xAB, sizeof got);
            sd_quantize_row(SD_TYPE_Q8_0, x, want, N);
            ks->quant[SD_TYPE_Q8_0](x, got, N);
            for (int i = 0; i < NB; i++)
                cr_assert_eq(memcmp(got + 34 * i, want + 34 * i, 34), 0,
                             "%s: block %d of trial %d differs from the reference", ks->name, i,
                             trial);
        }
    }
    cr_log_info("SIMD Q8_0 activation quantizers tested: %d", tested);
}

/* ---------------------------------------------------------------------------------- */
/* kernels                                                                              */
/* ---------------------------------------------------------------------------------- */

/* A random weight matrix of type t, rows of stride wrb >= row bytes. Quantized types
 * get raw random bytes (the full int8 range incl. -128, every nibble) with random
 * fp16 scales, so the kernels see more than the quantizer ever emits. */
static void *make_weights(uint64_t *s, sd_type t, int64_t rows, int64_t n, size_t wrb) {
    unsigned char *w = calloc((size_t)rows, wrb);
    cr_assert_not_null(w);
    for (int64_t r = 0; r < rows; r++) {
        unsigned char *wr = w + (size_t)r * wrb;
        if (t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0) {
            const size_t bb = sd_type_block_bytes(t);
            for (int64_t i = 0; i < n / 32; i++) {
                unsigned char *blk = wr + (size_t)i * bb;
                for (size_t k = 2; k < bb; k++)
                    blk[k] = (unsigned char)rng_next(s);
                uint16_t d = sd_fp32_to_fp16(ldexpf(rng_f(s), -(int)(rng_next(s) % 8)));
                if (rng_next(s) % 16 == 0) d = 0; /* an all-zero-scale block */
                memcpy(blk, &d, 2);
            }
        } else {
            float *tmp = malloc(sizeof(float) * (size_t)n + 1);
            cr_assert_not_null(tmp);
            for (int64_t j = 0; j < n; j++)
                tmp[j] = rng_f(s) * 2.0f;
            sd_quantize_row(t, tmp, wr, n);
            free(tmp);
        }
    }
    return w;
}

/* exact (double) weight element j of row wr, decoded independently of quant.c's
 * dequantizer (ggml-common.h layouts) */
static double w_elem(sd_type t, const unsigned char *wr, int64_t j) {
    uint16_t h;
    switch (t) {
    case SD_TYPE_F32: {
        float f;
        memcpy(&f, wr + 4 * j, 4);
        return f;
    }
    case SD_TYPE_F16:
        memcpy(&h, wr + 2 * j, 2);
        return sd_fp16_to_fp32(h);
    case SD_TYPE_BF16:
        memcpy(&h, wr + 2 * j, 2);
        return bitsf((uint32_t)h << 16);
    case SD_TYPE_Q8_0: {
        const unsigned char *blk = wr + 34 * (j / 32);
        memcpy(&h, blk, 2);
        return (double)sd_fp16_to_fp32(h) * (double)(int8_t)blk[2 + j % 32];
    }
    case SD_TYPE_Q4_0: {
        const unsigned char *blk = wr + 18 * (j / 32);
        memcpy(&h, blk, 2);
        const int k = (int)(j % 32);
        const int q = k < 16 ? (blk[2 + k] & 0xF) : (blk[2 + k - 16] >> 4);
        return (double)sd_fp16_to_fp32(h) * (double)(q - 8);
    }
    default:
        cr_assert_fail("type");
        return 0;
    }
}

/* activation element j of prepared row b */
static double x_elem(sd_type wt, const unsigned char *xq, int64_t n, int64_t b, int64_t j) {
    if (sd_vec_dot_type(wt) == SD_TYPE_F32) return ((const float *)xq)[b * n + j];
    const unsigned char *blk = xq + (size_t)b * (size_t)(n / 32) * 34 + 34 * (j / 32);
    uint16_t h;
    memcpy(&h, blk, 2);
    return (double)sd_fp16_to_fp32(h) * (double)(int8_t)blk[2 + j % 32];
}

typedef struct {
    sd_type t;
    int64_t rows, n, n_tok;
    size_t wrb;
    void *w;
    float *x;              /* [n_tok, n] */
    unsigned char *xq;     /* x prepared by sd_quantize_activations (the active set) */
    double *exact, *absum; /* [n_tok * rows] */
} problem;

static problem make_problem(uint64_t *s, sd_type t, int64_t rows, int64_t n, int64_t n_tok,
                            size_t pad) {
    problem p = {.t = t, .rows = rows, .n = n, .n_tok = n_tok};
    p.wrb = row_bytes(t, n) + pad;
    p.w = make_weights(s, t, rows, n, p.wrb);
    float *x = malloc(sizeof(float) * (size_t)(n_tok * n) + 1);
    cr_assert_not_null(x);
    for (int64_t j = 0; j < n_tok * n; j++)
        x[j] = rng_f(s) * 4.0f;
    size_t xb = 0;
    cr_assert_eq(sd_activations_bytes(t, n_tok, n, &xb), 0);
    p.xq = xalloc(xb);
    sd_quantize_activations(t, x, n_tok, n, p.xq);
    p.x = x;
    p.exact = malloc(sizeof(double) * (size_t)(n_tok * rows));
    p.absum = malloc(sizeof(double) * (size_t)(n_tok * rows));
    for (int64_t b = 0; b < n_tok; b++)
        for (int64_t r = 0; r < rows; r++) {
            double e = 0, a = 0;
            const unsigned char *wr = (const unsigned char *)p.w + (size_t)r * p.wrb;
            for (int64_t j = 0; j < n; j++) {
                const double v = w_elem(t, wr, j) * x_elem(t, p.xq, n, b, j);
                e += v;
                a += fabs(v);
            }
            p.exact[b * rows + r] = e;
            p.absum[b * rows + r] = a;
        }
    return p;
}

static void free_problem(problem *p) {
    free(p->w);
    free(p->x);
    free(p->xq);
    free(p->exact);
    free(p->absum);
}

/* Error bound vs the exact dot, relative to sum |w_j x_j|:
 *  scalar float types: double accumulation, one rounding -> 2^-24 (+ n 2^-53);
 *  SIMD float types: float FMA accumulation over n/16 steps per lane + 5 hsum adds;
 *  integer-dot types: each block exact, (float)isum * float(dw*dx) (2 roundings) then
 *  a float sum over nb = n/32 blocks (+ 8 hsum adds). */
static double err_bound(const sd_kernel_set *ks, sd_type t, int64_t n, double absum) {
    const double u = 0x1p-24;
    double k;
    if (t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0)
        k = (double)(n / 32) + 12.0;
    else if (ks == &sd_kernels_scalar)
        k = 1.0 + (double)n * 0x1p-29;
    else
        k = (double)n / 16.0 + 12.0;
    return k * u * absum + 1e-30;
}

static void check_kernel_vs_exact(const sd_kernel_set *ks, problem *p) {
    const int64_t ldy = p->rows + 3;
    float *y = malloc(sizeof(float) * (size_t)(p->n_tok * ldy));
    cr_assert_not_null(y);
    for (int64_t i = 0; i < p->n_tok * ldy; i++)
        y[i] = -12345.0f; /* sentinel */
    unsigned char *xq = prep(ks, p->t, p->x, p->n_tok, p->n);
    sd_kernel_for_type(ks, p->t)(p->w, p->wrb, p->n, xq, p->n_tok, y, ldy, 0, p->rows);
    free(xq);
    for (int64_t b = 0; b < p->n_tok; b++) {
        for (int64_t r = 0; r < p->rows; r++) {
            const double got = y[b * ldy + r], want = p->exact[b * p->rows + r];
            const double bound = err_bound(ks, p->t, p->n, p->absum[b * p->rows + r]);
            cr_assert(fabs(got - want) <= bound,
                      "%s %s n=%lld rows=%lld n_tok=%lld: y[%lld,%lld]=%.9g want %.9g "
                      "(err %.3g > bound %.3g)",
                      ks->name, sd_type_name(p->t), (long long)p->n, (long long)p->rows,
                      (long long)p->n_tok, (long long)b, (long long)r, got, want, fabs(got - want),
                      bound);
        }
        for (int64_t r = p->rows; r < ldy; r++)
            cr_assert_eq(y[b * ldy + r], -12345.0f, "%s wrote outside [r0, r1)", ks->name);
    }
    free(y);
}

static int64_t pick(uint64_t *s, const int64_t *v, size_t nv) {
    return v[rng_next(s) % nv];
}

Test(quant_kernels, all_sets_vs_exact) {
    uint64_t s = 1234;
    static const int64_t ncols_q[] = {32, 64, 96, 160, 224, 512, 1024};
    static const int64_t ncols_f[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 64, 100, 257, 1024};
    static const int64_t nrows[] = {1, 2, 3, 5, 13, 37};
    int checked[N_SETS] = {0};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int quantized = t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0;
        for (int64_t n_tok = 1; n_tok <= 17; n_tok++) {
            const int64_t n = quantized ? pick(&s, ncols_q, 7) : pick(&s, ncols_f, 14);
            const int64_t rows = pick(&s, nrows, 6);
            const size_t pad = (n_tok % 3 == 0) ? 64 : 0; /* stride > row bytes */
            problem p = make_problem(&s, t, rows, n, n_tok, pad);
            for (size_t si = 0; si < N_SETS; si++) {
                const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                if (!ks) continue;
                check_kernel_vs_exact(ks, &p);
                checked[si]++;
            }
            free_problem(&p);
        }
    }
    cr_assert_gt(checked[0], 0);
    for (size_t si = 0; si < N_SETS; si++)
        cr_log_info("kernel set %s: %s (%d problems)", k_sets[si],
                    checked[si] ? "tested" : "not available on this CPU", checked[si]);
}

/* A wide case per type (real row lengths) with a few tokens. */
Test(quant_kernels, wide_rows) {
    uint64_t s = 99;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int quantized = t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0;
        problem p = make_problem(&s, t, 7, quantized ? 4096 : 4099, 5, 0);
        for (size_t si = 0; si < N_SETS; si++) {
            const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
            if (ks) check_kernel_vs_exact(ks, &p);
        }
        free_problem(&p);
    }
}

/* SIMD vs the scalar reference directly, on the same inputs. */
Test(quant_kernels, simd_vs_ref) {
    uint64_t s = 555;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int quantized = t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0;
        const int64_t n = quantized ? 32 * 11 : 203, rows = 19, n_tok = 6;
        problem p = make_problem(&s, t, rows, n, n_tok, 0);
        float *yr = malloc(sizeof(float) * (size_t)(rows * n_tok));
        float *ys = malloc(sizeof(float) * (size_t)(rows * n_tok));
        /* the oracle on the plain reference layout == on the active set's layout */
        const size_t xrb = row_bytes(sd_vec_dot_type(t), n);
        unsigned char *plain = malloc((size_t)n_tok * xrb);
        for (int64_t b = 0; b < n_tok; b++)
            sd_quantize_row(sd_vec_dot_type(t), p.x + b * n, plain + (size_t)b * xrb, n);
        sd_matmul_rows_ref(t, p.w, p.wrb, n, plain, n_tok, yr, rows, 0, rows);
        sd_matmul_rows_ref(t, p.w, p.wrb, n, p.xq, n_tok, ys, rows, 0, rows);
        cr_assert_eq(memcmp(yr, ys, sizeof(float) * (size_t)(rows * n_tok)), 0,
                     "%s: ref on the prepared layout != ref on plain rows", sd_type_name(t));
        free(plain);
        for (size_t si = 1; si < N_SETS; si++) {
            const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
            if (!ks) continue;
            unsigned char *xq = prep(ks, t, p.x, n_tok, n);
            sd_kernel_for_type(ks, t)(p.w, p.wrb, n, xq, n_tok, ys, rows, 0, rows);
            free(xq);
            for (int64_t i = 0; i < rows * n_tok; i++) {
                const double bound = 2.0 * err_bound(ks, t, n, p.absum[i]);
                cr_assert(fabs((double)ys[i] - yr[i]) <= bound, "%s %s [%lld]: %.9g vs ref %.9g",
                          ks->name, sd_type_name(t), (long long)i, ys[i], yr[i]);
            }
        }
        free(yr);
        free(ys);
        free_problem(&p);
    }
}

/* The batch-invariance contract, bit-exact, for every kernel set: one call with n_tok
 * rows == n_tok single-token calls (each token prepared alone, as a decode step does) ==
 * any split of [0, rows) into ranges == a slice of the tokens prepared as its own batch
 * (in a buffer that is not 64-byte aligned). */
Test(quant_kernels, batch_invariance_bitexact) {
    uint64_t s = 4321;
    static const int64_t toks[] = {9, 17, 4, 5, 8, 16, 33, 2};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int quantized = t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0;
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            const int64_t n_tok = toks[k];
            const int64_t n = quantized ? 32 * (int64_t)(1 + rng_next(&s) % 40)
                                        : (int64_t)(1 + rng_next(&s) % 300);
            const int64_t rows = 1 + (int64_t)(rng_next(&s) % 41);
            problem p = make_problem(&s, t, rows, n, n_tok, 0);
            float *yb = malloc(sizeof(float) * (size_t)(rows * n_tok));
            float *y1 = malloc(sizeof(float) * (size_t)(rows * n_tok));
            for (size_t si = 0; si < N_SETS; si++) {
                const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                if (!ks) continue;
                sd_rows_kernel kern = sd_kernel_for_type(ks, t);
                unsigned char *xq = prep(ks, t, p.x, n_tok, n);
                kern(p.w, p.wrb, n, xq, n_tok, yb, rows, 0, rows);
                free(xq);
                /* single tokens, rows split at two random points */
                const int64_t c1 = (int64_t)(rng_next(&s) % (uint64_t)(rows + 1));
                const int64_t c2 = c1 + (int64_t)(rng_next(&s) % (uint64_t)(rows - c1 + 1));
                memset(y1, 0xFF, sizeof(float) * (size_t)(rows * n_tok));
                for (int64_t b = 0; b < n_tok; b++) {
                    unsigned char *xb = prep(ks, t, p.x + b * n, 1, n);
                    kern(p.w, p.wrb, n, xb, 1, y1 + b * rows, rows, 0, c1);
                    kern(p.w, p.wrb, n, xb, 1, y1 + b * rows, rows, c1, c2);
                    kern(p.w, p.wrb, n, xb, 1, y1 + b * rows, rows, c2, rows);
                    free(xb);
                }
                cr_assert_eq(memcmp(yb, y1, sizeof(float) * (size_t)(rows * n_tok)), 0,
                             "%s %s n=%lld rows=%lld n_tok=%lld: batched != single", ks->name,
                             sd_type_name(t), (long long)n, (long long)rows, (long long)n_tok);
                /* a middle slice of tokens as its own batch, at a misaligned address */
                const int64_t b0 = n_tok / 3, nt2 = n_tok - b0 - 1;
                if (nt2 > 0) {
                    size_t bytes = 0;
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, nt2, n, &bytes), 0);
                    unsigned char *buf = xalloc(bytes + 8);
                    sd_kernel_prepare_rows(ks, t, p.x + b0 * n, nt2, n, 0, nt2, buf + 8);
                    memset(y1, 0xFF, sizeof(float) * (size_t)(rows * n_tok));
                    kern(p.w, p.wrb, n, buf + 8, nt2, y1, rows, 0, rows);
                    free(buf);
                    cr_assert_eq(memcmp(yb + b0 * rows, y1, sizeof(float) * (size_t)(rows * nt2)),
                                 0, "%s %s: token slice differs", ks->name, sd_type_name(t));
                }
            }
            free(yb);
            free(y1);
            free_problem(&p);
        }
    }
}

/* Public dispatch: the name is one of the sets and sd_matmul_rows uses that set. */
Test(quant_kernels, dispatch) {
    const char *name = sd_quant_kernels_name();
    const sd_kernel_set *ks = sd_kernel_set_by_name(name);
    cr_assert_not_null(ks, "active set '%s' must be runnable", name);
    cr_assert_eq(ks, sd_kernel_set_active());
    const char *force = getenv("SD_KERNELS");
    if (!force || !*force) { /* the best available */
        for (size_t si = N_SETS; si-- > 0;) {
            if (sd_kernel_set_by_name(k_sets[si])) {
                cr_assert_str_eq(name, k_sets[si]);
                break;
            }
        }
    }
    cr_log_info("sd_quant_kernels_name() = %s", name);
    cr_assert_null(sd_kernel_set_by_name("sse9"));

    uint64_t s = 77;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int64_t n = 256, rows = 9, n_tok = 3;
        problem p = make_problem(&s, t, rows, n, n_tok, 0);
        float ya[27], yb[27];
        sd_matmul_rows(t, p.w, p.wrb, n, p.xq, n_tok, ya, rows, 0, rows);
        sd_kernel_for_type(ks, t)(p.w, p.wrb, n, p.xq, n_tok, yb, rows, 0, rows);
        cr_assert_eq(memcmp(ya, yb, sizeof ya), 0, "%s", sd_type_name(t));
        sd_matmul_rows_ref(t, p.w, p.wrb, n, p.xq, n_tok, ya, rows, 0, rows);
        sd_kernel_for_type(&sd_kernels_scalar, t)(p.w, p.wrb, n, p.xq, n_tok, yb, rows, 0, rows);
        cr_assert_eq(memcmp(ya, yb, sizeof ya), 0, "ref %s", sd_type_name(t));
        free_problem(&p);
    }
}
