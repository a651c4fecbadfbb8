/*
 * quant/matmul_ref.c: scalar reference row kernels (the specification the SIMD sets are
 * tested against), activation preparation (sizes and layout: sd_quant.h), and the
 * kernel-set dispatch.
 *
 * Dot products (shapes: weight row of n_cols elements, activation row of n_cols):
 *   F32/F16/BF16 weights x F32 activations: sum over j of (double)w[j] * (double)x[j],
 *     accumulated in double in index order, rounded to float once (an accurate oracle).
 *   Q8_0 / Q4_0 weights x Q8_0 activations (ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0):
 *     per block i an exact int32 dot isum_i = sum_j qw[j] * qx[j] (qw - 8 for Q4_0),
 *     then sumf += (float)isum_i * (d_w_i * d_x_i) in float, blocks in order.
 */
#include "quant/cpu/kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------------------------- */
/* Scalar kernels                                                                       */
/* ---------------------------------------------------------------------------------- */

static size_t x_row_bytes(sd_type wt, int64_t n_cols) {
    size_t rb = 0;
    (void)sd_type_row_bytes(sd_vec_dot_type(wt), n_cols, &rb);
    return rb;
}

/* Element j of a float-type weight row as a double. */
static double ref_elem(sd_type t, const void *row, int64_t j) {
    switch (t) {
    case SD_TYPE_F16:
        return (double)sd_fp16_to_fp32(((const uint16_t *)row)[j]);
    case SD_TYPE_BF16:
        return (double)sd_bf16_to_fp32(((const uint16_t *)row)[j]);
    default:
        return (double)((const float *)row)[j];
    }
}

/* F32/F16/BF16 weights against F32 activations, accumulated in double: the oracle. */
static void ref_float(sd_type t, const void *w, size_t wrb, int64_t n, const void *xq,
                      int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t b = 0; b < n_tok; b++) {
            const float *xr = (const float *)xq + b * n;
            double s = 0.0;
            for (int64_t j = 0; j < n; j++)
                s += ref_elem(t, wr, j) * (double)xr[j];
            y[b * ldy + r] = (float)s;
        }
    }
}

static void ref_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_F32, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

static void ref_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_F16, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

static void ref_bf16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_BF16, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

static void ref_q8_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = n / SD_QK8_0;
    const size_t xrb = x_row_bytes(SD_TYPE_Q8_0, n);
    for (int64_t r = r0; r < r1; r++) {
        const sd_block_q8_0 *wr = (const sd_block_q8_0 *)((const char *)w + (size_t)r * wrb);
        for (int64_t b = 0; b < n_tok; b++) {
            const sd_block_q8_0 *xr = (const sd_block_q8_0 *)((const char *)xq + (size_t)b * xrb);
            float sumf = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int32_t isum = 0;
                for (int j = 0; j < SD_QK8_0; j++)
                    isum += (int32_t)wr[i].qs[j] * xr[i].qs[j];
                const float d = sd_fp16_to_fp32(wr[i].d) * sd_fp16_to_fp32(xr[i].d);
                sumf += (float)isum * d;
            }
            y[b * ldy + r] = sumf;
        }
    }
}

static void ref_q4_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = n / SD_QK4_0;
    const size_t xrb = x_row_bytes(SD_TYPE_Q4_0, n);
    for (int64_t r = r0; r < r1; r++) {
        const sd_block_q4_0 *wr = (const sd_block_q4_0 *)((const char *)w + (size_t)r * wrb);
        for (int64_t b = 0; b < n_tok; b++) {
            const sd_block_q8_0 *xr = (const sd_block_q8_0 *)((const char *)xq + (size_t)b * xrb);
            float sumf = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int32_t isum = 0;
                for (int j = 0; j < SD_QK4_0 / 2; j++) {
                    const int v0 = (wr[i].qs[j] & 0x0F) - 8;
                    const int v1 = (wr[i].qs[j] >> 4) - 8;
                    isum += v0 * xr[i].qs[j] + v1 * xr[i].qs[j + SD_QK4_0 / 2];
                }
                const float d = sd_fp16_to_fp32(wr[i].d) * sd_fp16_to_fp32(xr[i].d);
                sumf += (float)isum * d;
            }
            y[b * ldy + r] = sumf;
        }
    }
}

const sd_kernel_set sd_kernels_scalar = {
    .name = "scalar",
    .f32 = ref_f32,
    .f16 = ref_f16,
    .bf16 = ref_bf16,
    .q8_0 = ref_q8_0,
    .q4_0 = ref_q4_0,
};

/* ---------------------------------------------------------------------------------- */
/* Activations                                                                          */
/* ---------------------------------------------------------------------------------- */

static int is_weight_type(sd_type wt) {
    return wt == SD_TYPE_F32 || wt == SD_TYPE_F16 || wt == SD_TYPE_BF16 || wt == SD_TYPE_Q8_0 ||
           wt == SD_TYPE_Q4_0;
}

/* Part A (n_tok rows of sd_vec_dot_type(wt)), then for Q8_0-dot types and a set with a
 * packed form, part B at the next multiple of 64 (sd_act_pack_offset). */
int sd_kernel_act_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_tok, int64_t n_cols,
                        size_t *out) {
    size_t rb, a, b, tot;
    if (!is_weight_type(wt) || n_tok < 0 || n_cols < 0) return -1;
    if (sd_type_row_bytes(sd_vec_dot_type(wt), n_cols, &rb) != 0) return -1;
    if (__builtin_mul_overflow((size_t)n_tok, rb, &a)) return -1;
    if (sd_vec_dot_type(wt) != SD_TYPE_Q8_0 || !ks->pack_tok_bytes) {
        *out = a;
        return 0;
    }
    if (__builtin_add_overflow(a, (size_t)63, &a)) return -1;
    a &= ~(size_t)63;
    if (__builtin_mul_overflow((size_t)n_tok, ks->pack_tok_bytes(n_cols), &b) ||
        __builtin_add_overflow(a, b, &tot))
        return -1;
    *out = tot;
    return 0;
}

/* Q8_0 rows go through the set's quantizer when it has one (bytes identical to the
 * reference, tested), then its packer; everything else through sd_quantize_row. */
void sd_kernel_prepare_rows(const sd_kernel_set *ks, sd_type wt, const float *x, int64_t n_tok,
                            int64_t n_cols, int64_t b0, int64_t b1, void *out) {
    const sd_type vt = sd_vec_dot_type(wt);
    const size_t rb = x_row_bytes(wt, n_cols);
    if (vt != SD_TYPE_Q8_0) {
        for (int64_t b = b0; b < b1; b++)
            sd_quantize_row(vt, x + b * n_cols, (char *)out + (size_t)b * rb, n_cols);
        return;
    }
    void *pb = ks->pack_row ? (char *)out + sd_act_pack_offset(n_tok, n_cols) : NULL;
    for (int64_t b = b0; b < b1; b++) {
        sd_block_q8_0 *xr = (sd_block_q8_0 *)((char *)out + (size_t)b * rb);
        if (ks->quant_q8_0)
            ks->quant_q8_0(x + b * n_cols, xr, n_cols);
        else
            sd_quantize_row(SD_TYPE_Q8_0, x + b * n_cols, xr, n_cols);
        if (pb) ks->pack_row(wt, xr, n_cols, n_tok, b, pb);
    }
}

int sd_activations_bytes(sd_type wt, int64_t n_tok, int64_t n_cols, size_t *out) {
    return sd_kernel_act_bytes(sd_kernel_set_active(), wt, n_tok, n_cols, out);
}

void sd_quantize_activations_rows(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols,
                                  int64_t b0, int64_t b1, void *out) {
    if (b0 < 0) b0 = 0;
    if (b1 > n_tok) b1 = n_tok;
    if (b1 <= b0) return;
    sd_kernel_prepare_rows(sd_kernel_set_active(), wt, x, n_tok, n_cols, b0, b1, out);
}

void sd_quantize_activations(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols, void *out) {
    sd_quantize_activations_rows(wt, x, n_tok, n_cols, 0, n_tok, out);
}

/* ---------------------------------------------------------------------------------- */
/* Dispatch                                                                             */
/* ---------------------------------------------------------------------------------- */

sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt) {
    switch (wt) {
    case SD_TYPE_F32:
        return ks->f32;
    case SD_TYPE_F16:
        return ks->f16;
    case SD_TYPE_BF16:
        return ks->bf16;
    case SD_TYPE_Q8_0:
        return ks->q8_0;
    case SD_TYPE_Q4_0:
        return ks->q4_0;
    default:
        return NULL;
    }
}

#if defined(__x86_64__)
#include <cpuid.h>

/* F16C: CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c"). */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
/* __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 state. */
static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}
static int cpu_has_avx512(void) {
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}
#endif

const sd_kernel_set *sd_kernel_set_by_name(const char *name) {
    if (!name) return NULL;
    if (strcasecmp(name, "scalar") == 0) return &sd_kernels_scalar;
#if defined(__x86_64__)
    if (strcasecmp(name, "avx2") == 0) return cpu_has_avx2() ? &sd_kernels_avx2 : NULL;
    if (strcasecmp(name, "avx512") == 0) return cpu_has_avx512() ? &sd_kernels_avx512 : NULL;
#endif
    return NULL;
}

/* Written once under pthread_once, read-only afterwards. */
static pthread_once_t g_kernels_once = PTHREAD_ONCE_INIT;
static const sd_kernel_set *g_kernels = &sd_kernels_scalar;

static void kernels_init(void) {
    static const char *const order[] = {"avx512", "avx2", "scalar"}; /* best first */
    const char *force = getenv("SD_KERNELS");
    size_t start = 0;
    if (force && *force) {
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
            if (strcasecmp(force, order[i]) == 0) start = i; /* only ever lowers the level */
    }
    for (size_t i = start; i < sizeof order / sizeof order[0]; i++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(order[i]);
        if (ks) {
            g_kernels = ks;
            return;
        }
    }
}

const sd_kernel_set *sd_kernel_set_active(void) {
    pthread_once(&g_kernels_once, kernels_init);
    return g_kernels;
}

const char *sd_quant_kernels_name(void) {
    return sd_kernel_set_active()->name;
}

void sd_matmul_rows(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                    int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (r1 <= r0 || n_tok <= 0) return;
    sd_rows_kernel k = sd_kernel_for_type(sd_kernel_set_active(), wt);
    if (k) k(w, w_row_bytes, n_cols, xq, n_tok, y, ldy, r0, r1);
}

void sd_matmul_rows_ref(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols,
                        const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t r0,
                        int64_t r1) {
    if (r1 <= r0 || n_tok <= 0) return;
    sd_rows_kernel k = sd_kernel_for_type(&sd_kernels_scalar, wt);
    if (k) k(w, w_row_bytes, n_cols, xq, n_tok, y, ldy, r0, r1);
}
