/*
 * tests/test_quant.c: quant/ — the traits table (consistency, ggml's sizes), fp16/bf16
 * conversions, the reference quantizers (bytes worked out by hand), round-trip error
 * bounds (hard bounds for the 32-element types, RMSE on Gaussian data for the K-quants,
 * against ggml's figures), row validation. The kernels: tests/test_quant_kernels.c;
 * gguf-py bit-exactness: tests/test_quant_ref.c.
 *
 * White-box: includes quant/cpu/kernels.h (private to quant/) to reach each kernel set.
 */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/sd_quant.h"

#include "runtime/base/sd_base.h"

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

static const sd_type k_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1,
                                  SD_TYPE_Q2_K, SD_TYPE_Q3_K, SD_TYPE_Q4_K, SD_TYPE_Q5_K,
                                  SD_TYPE_Q6_K};
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
/* the traits table                                                                     */
/* ---------------------------------------------------------------------------------- */

/* ggml's type ids, names and sizes (ggml.c type_traits / gguf-py GGML_QUANT_SIZES): facts
 * the table must reproduce. */
static const struct {
    uint32_t id;
    const char *name;
    int64_t be;
    size_t bb;
    int weight;
} k_ggml[] = {
    {0, "f32", 1, 4, 1},       {1, "f16", 1, 2, 1},       {2, "q4_0", 32, 18, 1},
    {3, "q4_1", 32, 20, 1},    {6, "q5_0", 32, 22, 1},    {7, "q5_1", 32, 24, 1},
    {8, "q8_0", 32, 34, 1},    {10, "q2_k", 256, 84, 1},  {11, "q3_k", 256, 110, 1},
    {12, "q4_k", 256, 144, 1}, {13, "q5_k", 256, 176, 1}, {14, "q6_k", 256, 210, 1},
    {15, "q8_k", 256, 292, 0}, {30, "bf16", 1, 2, 1},
};

Test(quant_types, traits_table) {
    int seen = 0;
    for (uint32_t t = 0; t < SD_TYPE_COUNT + 3; t++) {
        const sd_type_traits *tr = sd_type_traits_get(t);
        if (!tr) {
            cr_assert_eq(sd_type_supported(t), 0);
            cr_assert_str_eq(sd_type_name(t), "unknown");
            cr_assert_eq(sd_type_block_elems((sd_type)t), 0);
            cr_assert_eq(sd_type_block_bytes((sd_type)t), 0);
            cr_assert_eq(sd_type_align((sd_type)t), 0);
            float f;
            cr_assert_eq(sd_dequantize_row((sd_type)t, "", &f, 0), -1);
            cr_assert_eq(sd_quantize_row((sd_type)t, &f, &f, 0), -1);
            continue;
        }
        seen++;
        cr_assert_lt(t, SD_TYPE_COUNT);
        cr_assert(tr->name && *tr->name);
        for (const char *c = tr->name; *c; c++)
            cr_assert(*c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z'), "%s",
                      tr->name);
        for (uint32_t u = 0; u < t; u++) /* names are unique */
            if (sd_type_traits_get(u)) cr_assert_str_neq(sd_type_name(u), tr->name);
        cr_assert_str_eq(sd_type_name(t), tr->name);
        cr_assert(tr->block_elems == 1 || tr->block_elems == 32 || tr->block_elems == 256);
        cr_assert_gt(tr->block_bytes, 0);
        cr_assert(tr->align == 1 || tr->align == 2 || tr->align == 4, "%s align", tr->name);
        cr_assert_eq(tr->block_bytes % tr->align, 0, "%s: align must divide the block", tr->name);
        cr_assert_not_null(tr->to_float, "%s", tr->name);
        cr_assert_eq(sd_type_supported(t), tr->is_weight != 0);
        sd_type parsed = (sd_type)999;
        cr_assert_eq(sd_type_from_name(tr->name, &parsed) == 0, tr->is_weight != 0, "%s", tr->name);
        if (tr->is_weight) cr_assert_eq(parsed, t);
        /* the activation type: in the table, writable, its blocks tile the weight's */
        const sd_type_traits *vt = sd_type_traits_get((uint32_t)tr->vec_dot_type);
        cr_assert_not_null(vt, "%s: vec_dot_type %d", tr->name, (int)tr->vec_dot_type);
        cr_assert_not_null(vt->from_float, "%s: activations must be writable", tr->name);
        cr_assert_eq(sd_vec_dot_type((sd_type)t), tr->vec_dot_type);
        if (tr->is_weight) {
            cr_assert_eq(tr->block_elems % vt->block_elems, 0, "%s", tr->name);
            cr_assert_not_null(tr->first_bad, "%s: weights must be checkable", tr->name);
            cr_assert_not_null(sd_kernels_scalar.k[t].rows, "%s: no scalar kernel", tr->name);
            if (tr->from_float)
                cr_assert_not_null(strstr(sd_type_writable_names(), tr->name), "%s", tr->name);
        } else {
            cr_assert_null(strstr(sd_type_writable_names(), tr->name), "%s", tr->name);
            cr_assert_null(sd_kernels_scalar.k[t].rows);
        }
        /* ggml's facts, for the ggml ids */
        int found = 0;
        for (size_t k = 0; k < sizeof k_ggml / sizeof k_ggml[0]; k++)
            if (k_ggml[k].id == t) {
                found = 1;
                cr_assert_str_eq(tr->name, k_ggml[k].name);
                cr_assert_eq(tr->block_elems, k_ggml[k].be, "%s", tr->name);
                cr_assert_eq(tr->block_bytes, k_ggml[k].bb, "%s", tr->name);
                cr_assert_eq(tr->is_weight, k_ggml[k].weight, "%s", tr->name);
            }
        cr_assert(found || t == SD_TYPE_Q8_S, "type %u (%s) is not a ggml type", t, tr->name);
    }
    cr_assert_eq(seen, (int)(sizeof k_ggml / sizeof k_ggml[0]) + 1);
    for (size_t ti = 0; ti < N_TYPES; ti++)
        cr_assert(sd_type_supported(k_types[ti]));
    cr_assert_str_eq(sd_type_writable_names(), "f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, "
                                               "q3_k, q4_k, q5_k, q6_k, bf16");
    size_t rb;
    cr_assert_eq(row_bytes(SD_TYPE_Q6_K, 512), 420u);
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q5_K, 200, &rb), -1);
    cr_assert_eq(sd_type_align(SD_TYPE_F32), 4);
    cr_assert_eq(sd_type_align(SD_TYPE_Q4_K), 2);
    cr_assert_eq(sd_type_align(SD_TYPE_Q8_K), 4);
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
    const int have_f16c = sd_cpu_features_get()->f16c;
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

/* ---------------------------------------------------------------------------------- */
/* new 32-element types: bytes by hand                                                  */
/* ---------------------------------------------------------------------------------- */

Test(quant_q4_1, hand_bytes) {
    /* x_j = 2 (j % 16) + 1: min 1, max 31 -> d = 30 / 15 = 2 (fp16 0x4000), m = 1
     * (0x3C00), id = 0.5: q = trunc((x - 1) * 0.5 + 0.5) = j % 16 for both halves */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(2 * (j % 16) + 1);
    sd_block_q4_1 b;
    cr_assert_eq(sd_quantize_row(SD_TYPE_Q4_1, x, &b, 32), 0);
    cr_assert_eq(b.d, 0x4000, "d=0x%04X", b.d);
    cr_assert_eq(b.m, 0x3C00, "m=0x%04X", b.m);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(b.qs[j], (uint8_t)(j | (j << 4)), "qs[%d]=0x%02X", j, b.qs[j]);
    float y[32];
    sd_dequantize_row(SD_TYPE_Q4_1, &b, y, 32);
    for (int j = 0; j < 32; j++)
        cr_assert_eq(y[j], x[j]);
}

Test(quant_q5_0, hand_bytes) {
    /* x_j = j - 16: the largest magnitude is x_0 = -16 -> d = -16 / -16 = 1 (0x3C00),
     * q = trunc(x + 16.5) = j: low nibble j & 15, 5th bit j >> 4 -> qh = 0xFFFF0000 */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    sd_block_q5_0 b;
    cr_assert_eq(sd_quantize_row(SD_TYPE_Q5_0, x, &b, 32), 0);
    cr_assert_eq(b.d, 0x3C00, "d=0x%04X", b.d);
    const uint8_t qh[4] = {0x00, 0x00, 0xFF, 0xFF};
    cr_assert_eq(memcmp(b.qh, qh, 4), 0, "qh %02X %02X %02X %02X", b.qh[0], b.qh[1], b.qh[2],
                 b.qh[3]);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(b.qs[j], (uint8_t)(j | (j << 4)), "qs[%d]=0x%02X", j, b.qs[j]);
    float y[32];
    sd_dequantize_row(SD_TYPE_Q5_0, &b, y, 32);
    for (int j = 0; j < 32; j++)
        cr_assert_eq(y[j], x[j]);
}

Test(quant_q5_1, hand_bytes) {
    /* x_j = j / 2 + 1: min 1, max 16.5 -> d = 15.5 / 31 = 0.5 (0x3800), m = 1 (0x3C00),
     * q = trunc((x - 1) * 2 + 0.5) = j */
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)j * 0.5f + 1.0f;
    sd_block_q5_1 b;
    cr_assert_eq(sd_quantize_row(SD_TYPE_Q5_1, x, &b, 32), 0);
    cr_assert_eq(b.d, 0x3800, "d=0x%04X", b.d);
    cr_assert_eq(b.m, 0x3C00, "m=0x%04X", b.m);
    const uint8_t qh[4] = {0x00, 0x00, 0xFF, 0xFF};
    cr_assert_eq(memcmp(b.qh, qh, 4), 0);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(b.qs[j], (uint8_t)(j | (j << 4)), "qs[%d]=0x%02X", j, b.qs[j]);
    float y[32];
    sd_dequantize_row(SD_TYPE_Q5_1, &b, y, 32);
    for (int j = 0; j < 32; j++)
        cr_assert_eq(y[j], x[j]);
}

/* A K-quant block built by hand decodes as the layout says (Q4_K: scale 2 and min 1 for
 * sub-block 0, 6-bit values split over scales[0..11]; Q6_K: one scale, q = 32 + 5). */
Test(quant_k, hand_blocks) {
    sd_block_q4_k b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;    /* 0.5 */
    b.dmin = 0x3400; /* 0.25 */
    b.scales[0] = 2; /* sc_0 = 2 */
    b.scales[4] = 1; /* m_0 = 1 */
    /* sub-block 5: sc = 0x2A (low 4 bits in scales[9], high 2 in scales[1] >> 6),
     * m = 0x15 (low 4 in scales[9] >> 4, high 2 in scales[5] >> 6) */
    b.scales[9] = 0x5A;
    b.scales[1] = 0x80;
    b.scales[5] = 0x40;
    b.qs[3] = 0x07;          /* element 3 (sub-block 0, low nibble): q = 7 */
    b.qs[32 * 2 + 4] = 0xB0; /* element 32 * 5 + 4 (sub-block 5, high nibble of chunk 2) */
    float y[256];
    sd_dequantize_row(SD_TYPE_Q4_K, &b, y, 256);
    cr_assert_eq(y[3], 0.5f * 2 * 7 - 0.25f * 1);
    cr_assert_eq(y[0], -0.25f);
    cr_assert_eq(y[5 * 32 + 4], 0.5f * 0x2A * 11 - 0.25f * 0x15);
    cr_assert_eq(y[5 * 32 + 5], -0.25f * 0x15);
    cr_assert_eq(y[40], 0.0f, "sub-block 1: scale and min 0");

    sd_block_q6_k c;
    memset(&c, 0, sizeof c);
    c.d = 0x3C00;
    c.scales[9] = -3; /* elements 144..159 */
    /* element 150 = 128 * 1 + 32 * 0 + 22: ql[64 + 22] low nibble, qh[32 + 22] bits 0-1;
     * q = 37 = 0b100101: low 4 bits 5, high 2 bits 2 */
    c.ql[64 + 22] = 0x05;
    c.qh[32 + 22] = 0x02;
    sd_dequantize_row(SD_TYPE_Q6_K, &c, y, 256);
    cr_assert_eq(y[150], -3.0f * (37 - 32));
    cr_assert_eq(y[151], -3.0f * (0 - 32));
    cr_assert_eq(y[0], 0.0f);
}

/* ---------------------------------------------------------------------------------- */
/* round-trip bounds for the new types                                                  */
/* ---------------------------------------------------------------------------------- */

/* Hard bounds per 32-block: Q4_1 / Q5_1 (d = (max - min) / nmax; |x - y| <= d / 2 plus
 * the fp16 rounding of d (times q <= nmax) and of the min); Q5_0 as Q4_0 with 16 levels
 * each side (the clamped element -max at q = 32 -> 31 is a whole step off). */
Test(quant_roundtrip, bounds_new_32) {
    uint64_t s = 9;
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static unsigned char buf[N * 4];
    for (int trial = 0; trial < 20; trial++) {
        const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 30) - 15);
        for (int j = 0; j < N; j++)
            x[j] = rng_f(&s) * scale + (trial % 3 == 0 ? 3.0f * scale : 0.0f);
        if (trial % 5 == 0) x[trial] = scale * 1.5f;
        for (int k = 0; k < 2; k++) {
            const sd_type t = k ? SD_TYPE_Q5_1 : SD_TYPE_Q4_1;
            const double nmax = k ? 31.0 : 15.0;
            sd_quantize_row(t, x, buf, N);
            sd_dequantize_row(t, buf, y, N);
            for (int i = 0; i < N / 32; i++) {
                double mn = x[i * 32], mx = x[i * 32];
                for (int j = 1; j < 32; j++)
                    mn = fmin(mn, x[i * 32 + j]), mx = fmax(mx, x[i * 32 + j]);
                const double d = (mx - mn) / nmax;
                uint16_t dh16, mh16;
                memcpy(&dh16, buf + (size_t)i * sd_type_block_bytes(t), 2);
                memcpy(&mh16, buf + (size_t)i * sd_type_block_bytes(t) + 2, 2);
                const double dh = sd_fp16_to_fp32(dh16), mh = sd_fp16_to_fp32(mh16);
                const double bound = 0.5 * d * (1 + 1e-6) + nmax * fabs(d - dh) + fabs(mn - mh) +
                                     1e-6 * fmax(fabs(mn), fabs(mx));
                for (int j = i * 32; j < i * 32 + 32; j++)
                    cr_assert(fabs((double)x[j] - y[j]) <= bound, "%s [%d]: %g vs %g (bound %g)",
                              sd_type_name(t), j, x[j], y[j], bound);
            }
        }
        sd_quantize_row(SD_TYPE_Q5_0, x, buf, N);
        sd_dequantize_row(SD_TYPE_Q5_0, buf, y, N);
        for (int i = 0; i < N / 32; i++) {
            float amax = 0, max = 0;
            for (int j = 0; j < 32; j++)
                if (amax < fabsf(x[i * 32 + j])) amax = fabsf(x[i * 32 + j]), max = x[i * 32 + j];
            const double d = max / -16.0;
            uint16_t dh16;
            memcpy(&dh16, buf + (size_t)i * 22, 2);
            const double dh = sd_fp16_to_fp32(dh16);
            for (int j = i * 32; j < i * 32 + 32; j++) {
                const double xi = x[j] / d; /* in [-16, 16] */
                const double base = xi <= 15.5 ? 0.5 * fabs(d) : fabs(d);
                const double bound = base + 16.0 * fabs(d - dh) + 1e-6 * amax;
                cr_assert(fabs((double)x[j] - y[j]) <= bound, "q5_0 [%d]: %g vs %g (d=%g)", j, x[j],
                          y[j], d);
            }
        }
    }
}

/* standard normal (Box-Muller) */
static float rng_gauss(uint64_t *s) {
    const double u1 = ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
    const double u2 = (double)(rng_next(s) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/*
 * RMSE of quantize -> dequantize on N(0, 1) data (1M values, fixed seed), per type,
 * against a bound 5% above the RMSE of ggml's own quantizer (llama.cpp's
 * quantize_row_*_ref through ggml_quantize_chunk, measured on 2^20 N(0, 1) values by
 * `scripts/quant_vs_llamacpp.py rmse`; a 1M-value RMSE varies by ~0.1% between
 * samples). The 32-element types are byte-identical to ggml (tests/test_quant_ref.c);
 * the K-quant quantizers are our own implementation of ggml's algorithm, and must be at
 * least about as good. The lower bound (half) catches a "quantizer" that stores the
 * input. Deterministic seed: no false alarms.
 */
Test(quant_roundtrip, rmse_gaussian_vs_ggml) {
    static const struct {
        sd_type t;
        double ggml; /* ggml's RMSE on N(0, 1) */
    } k[] = {
        {SD_TYPE_Q8_0, 0.005359}, {SD_TYPE_Q4_0, 0.086029}, {SD_TYPE_Q4_1, 0.078228},
        {SD_TYPE_Q5_0, 0.042757}, {SD_TYPE_Q5_1, 0.037871}, {SD_TYPE_Q2_K, 0.296927},
        {SD_TYPE_Q3_K, 0.151047}, {SD_TYPE_Q4_K, 0.071352}, {SD_TYPE_Q5_K, 0.036130},
        {SD_TYPE_Q6_K, 0.017737},
    };
    uint64_t s = 2718;
    const int64_t n = 256 * 4096;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    unsigned char *q = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_gauss(&s);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        cr_assert_eq(sd_quantize_row(k[i].t, x, q, n), 0);
        cr_assert_eq(sd_dequantize_row(k[i].t, q, y, n), 0);
        double e = 0;
        for (int64_t j = 0; j < n; j++)
            e += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
        const double rmse = sqrt(e / (double)n);
        cr_log_info("%s: RMSE %.5f on N(0,1) (ggml %.5f)", sd_type_name(k[i].t), rmse, k[i].ggml);
        cr_assert(rmse <= 1.05 * k[i].ggml && rmse >= 0.5 * k[i].ggml,
                  "%s: RMSE %.5f, ggml's quantizer %.5f", sd_type_name(k[i].t), rmse, k[i].ggml);
    }
    free(x);
    free(y);
    free(q);
}

/* ---------------------------------------------------------------------------------- */
/* validation                                                                           */
/* ---------------------------------------------------------------------------------- */

/* sd_validate_row: finite rows pass; a NaN / inf scale (or element, for float types)
 * is found, and the index reported is the first element of the first bad block. */
Test(quant_validate, nonfinite_scales) {
    uint64_t s = 12;
    enum { N = 1024 };
    float x[N];
    for (int j = 0; j < N; j++)
        x[j] = rng_f(&s);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const size_t rb = row_bytes(t, N), bb = sd_type_block_bytes(t);
        const int64_t be = sd_type_block_elems(t);
        unsigned char *row = malloc(rb);
        sd_quantize_row(t, x, row, N);
        int64_t bad = -7;
        cr_assert_eq(sd_validate_row(t, row, N, &bad), 0, "%s", sd_type_name(t));
        cr_assert_eq(bad, -7, "untouched when valid");
        /* the fp16 (or float) fields at a block: for float types the element itself */
        static const struct {
            sd_type t;
            int off[2];
        } fields[] = {
            {SD_TYPE_F16, {0, -1}},    {SD_TYPE_BF16, {0, -1}},  {SD_TYPE_F32, {0, -1}},
            {SD_TYPE_Q8_0, {0, -1}},   {SD_TYPE_Q4_0, {0, -1}},  {SD_TYPE_Q5_0, {0, -1}},
            {SD_TYPE_Q4_1, {0, 2}},    {SD_TYPE_Q5_1, {0, 2}},   {SD_TYPE_Q4_K, {0, 2}},
            {SD_TYPE_Q5_K, {0, 2}},    {SD_TYPE_Q2_K, {80, 82}}, {SD_TYPE_Q3_K, {108, -1}},
            {SD_TYPE_Q6_K, {208, -1}},
        };
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            if (fields[f].t != t) continue;
            for (int k = 0; k < 2 && fields[f].off[k] >= 0; k++) {
                for (int v = 0; v < 2; v++) { /* NaN, then inf */
                    unsigned char *cp = malloc(rb);
                    memcpy(cp, row, rb);
                    const size_t blk = (size_t)(N / be) / 2 + 1;
                    unsigned char *at = cp + blk * bb + (size_t)fields[f].off[k];
                    if (t == SD_TYPE_F32) {
                        const float bad_f = v ? INFINITY : NAN;
                        memcpy(at, &bad_f, 4);
                    } else if (t == SD_TYPE_BF16) {
                        const uint16_t h = v ? 0x7F80 : 0x7FC0;
                        memcpy(at, &h, 2);
                    } else {
                        const uint16_t h = v ? 0xFC00 : 0x7E01;
                        memcpy(at, &h, 2);
                    }
                    cr_assert_eq(sd_validate_row(t, cp, N, &bad), -1, "%s field %d",
                                 sd_type_name(t), k);
                    cr_assert_eq(bad, (int64_t)blk * be, "%s: first bad %lld", sd_type_name(t),
                                 (long long)bad);
                    free(cp);
                }
            }
        }
        free(row);
    }
    cr_assert_eq(sd_validate_row(SD_TYPE_Q4_K, "", 100, NULL), -1, "bad length");
    cr_assert_eq(sd_validate_row(SD_TYPE_Q8_K, "", 0, NULL), -1, "activation type");
}

/* ---------------------------------------------------------------------------------- */
/* CPU features (runtime/base), as the dispatcher reads them                            */
/* ---------------------------------------------------------------------------------- */

/* sd_cpu_features_get agrees with the compiler's own CPU detection (which also checks
 * that the OS saves the registers), is stable, and the kernel sets follow it. */
Test(quant_cpu, features_and_sets) {
    const sd_cpu_features *f = sd_cpu_features_get();
    cr_assert_not_null(f);
    cr_assert_eq(f, sd_cpu_features_get(), "one table");
#if defined(__x86_64__)
    __builtin_cpu_init();
    cr_assert_eq(f->avx2, __builtin_cpu_supports("avx2") != 0);
    cr_assert_eq(f->fma, __builtin_cpu_supports("fma") != 0);
    cr_assert_eq(f->avx512f, __builtin_cpu_supports("avx512f") != 0);
    cr_assert_eq(f->avx512bw, __builtin_cpu_supports("avx512bw") != 0);
    cr_assert_eq(f->avx512vl, __builtin_cpu_supports("avx512vl") != 0);
    cr_assert_eq(f->avx512vnni, __builtin_cpu_supports("avx512vnni") != 0);
    if (f->avx512bw || f->avx512vl || f->avx512vnni || f->avx512_bf16)
        cr_assert(f->avx512f, "AVX-512 extensions imply AVX512F");
    cr_assert_eq(sd_kernel_set_by_name("avx2") != NULL, f->avx2 && f->fma && f->f16c);
    { /* AVX-VNNI: CPUID leaf 7 sub-leaf 1 EAX bit 4 (GCC 12's __builtin_cpu_supports does
       * not report it on AMD), usable with the OS's AVX state (which f->avx2 implies) */
        unsigned a = 0, b, c, d;
        const int bit = __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1u);
        cr_assert_eq(f->avx_vnni, bit && __builtin_cpu_supports("avx") != 0);
        cr_assert_eq(sd_kernel_set_by_name("avxvnni") != NULL,
                     f->avx2 && f->fma && f->f16c && f->avx_vnni);
    }
    cr_assert_eq(sd_kernel_set_by_name("avx512") != NULL, f->avx2 && f->fma && f->f16c &&
                                                              f->avx512f && f->avx512bw &&
                                                              f->avx512vl && f->avx512vnni);
    cr_log_info("cpu: avx2 %d fma %d f16c %d avx_vnni %d avx512f %d bw %d vl %d vnni %d bf16 %d "
                "amx_tile %d amx_int8 %d",
                f->avx2, f->fma, f->f16c, f->avx_vnni, f->avx512f, f->avx512bw, f->avx512vl,
                f->avx512vnni, f->avx512_bf16, f->amx_tile, f->amx_int8);
#else
    cr_assert(!f->avx2 && !f->avx512f);
#endif
}
