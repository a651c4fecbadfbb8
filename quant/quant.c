/*
 * quant/quant.c: the element-type traits table (one row per ggml type id), the generic
 * type functions over it, and the reference (scalar) quantizers and dequantizers of the
 * float types and the 32-element block types. The K-quants' are in kquants.c, the
 * fp16/bf16 conversions both use in fp16.c (below both: no call circle).
 *
 * Block layouts: ggml-common.h (mirrored in sd_quant.h). The quantizers of Q8_0, Q4_0,
 * Q4_1, Q5_0 and Q5_1 reproduce ggml-quants.c quantize_row_*_ref operation for
 * operation (same float expressions, same truncations, fp16 stored with
 * round-to-nearest-even like F16C's _cvtss_sh), so the bytes are identical to
 * llama.cpp's (and gguf-py's numpy gguf.quants.quantize) for finite inputs; the
 * dequantizers evaluate gguf-py's expressions in the same order (d * q + m, two
 * roundings, never fused: this file is compiled without FMA), so they are bit-identical
 * to gguf.quants.dequantize (tests/test_quant_ref.c checks both against gguf-py).
 *
 * Adding a type: one row in k_traits (plus its to_float / from_float / first_bad), and
 * its kernels in quant/cpu/ (the scalar one at least).
 */
#include "quant/sd_quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "quant/quant_impl.h"

/* ---------------------------------------------------------------------------------- */
/* Float types                                                                          */
/* ---------------------------------------------------------------------------------- */

static void f32_to_float(const void *x, float *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void f32_from_float(const float *x, void *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void f16_to_float(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = sd_fp16_to_fp32(h[i]);
}
static void f16_from_float(const float *x, void *y, int64_t n) {
    uint16_t *o = y;
    for (int64_t i = 0; i < n; i++)
        o[i] = sd_fp32_to_fp16(x[i]);
}
static void bf16_to_float(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = sd_bf16_to_fp32(h[i]);
}
static void bf16_from_float(const float *x, void *y, int64_t n) {
    uint16_t *o = y;
    for (int64_t i = 0; i < n; i++)
        o[i] = sd_fp32_to_bf16(x[i]);
}
static int64_t f32_first_bad(const void *x, int64_t nb) {
    const float *f = x;
    for (int64_t i = 0; i < nb; i++)
        if (!isfinite(f[i])) return i;
    return -1;
}
static int64_t f16_first_bad(const void *x, int64_t nb) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(h[i])) return i;
    return -1;
}
static int64_t bf16_first_bad(const void *x, int64_t nb) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < nb; i++)
        if ((h[i] & 0x7F80u) == 0x7F80u) return i;
    return -1;
}

/* ---------------------------------------------------------------------------------- */
/* The traits table                                                                     */
/* ---------------------------------------------------------------------------------- */

#define SD_W 1 /* is_weight */
#define SD_A 0 /* activations only */

static const sd_type_traits k_traits[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = {"f32", 1, 4, 4, SD_W, SD_TYPE_F32, f32_to_float, f32_from_float,
                     f32_first_bad},
    [SD_TYPE_F16] = {"f16", 1, 2, 2, SD_W, SD_TYPE_F32, f16_to_float, f16_from_float,
                     f16_first_bad},
    [SD_TYPE_Q4_0] = {"q4_0", SD_QK4_0, sizeof(sd_block_q4_0), 2, SD_W, SD_TYPE_Q8_0,
                      sd_to_float_q4_0, sd_from_float_q4_0, sd_first_bad_q4_0},
    [SD_TYPE_Q4_1] = {"q4_1", SD_QK4_1, sizeof(sd_block_q4_1), 2, SD_W, SD_TYPE_Q8_S,
                      sd_to_float_q4_1, sd_from_float_q4_1, sd_first_bad_q4_1},
    [SD_TYPE_Q5_0] = {"q5_0", SD_QK5_0, sizeof(sd_block_q5_0), 2, SD_W, SD_TYPE_Q8_S,
                      sd_to_float_q5_0, sd_from_float_q5_0, sd_first_bad_q5_0},
    [SD_TYPE_Q5_1] = {"q5_1", SD_QK5_1, sizeof(sd_block_q5_1), 2, SD_W, SD_TYPE_Q8_S,
                      sd_to_float_q5_1, sd_from_float_q5_1, sd_first_bad_q5_1},
    [SD_TYPE_Q8_0] = {"q8_0", SD_QK8_0, sizeof(sd_block_q8_0), 2, SD_W, SD_TYPE_Q8_0,
                      sd_to_float_q8_0, sd_from_float_q8_0, sd_first_bad_q8_0},
    [SD_TYPE_Q2_K] = {"q2_k", SD_QK_K, sizeof(sd_block_q2_k), 2, SD_W, SD_TYPE_Q8_K,
                      sd_to_float_q2_k, sd_from_float_q2_k, sd_first_bad_q2_k},
    [SD_TYPE_Q3_K] = {"q3_k", SD_QK_K, sizeof(sd_block_q3_k), 2, SD_W, SD_TYPE_Q8_K,
                      sd_to_float_q3_k, sd_from_float_q3_k, sd_first_bad_q3_k},
    [SD_TYPE_Q4_K] = {"q4_k", SD_QK_K, sizeof(sd_block_q4_k), 2, SD_W, SD_TYPE_Q8_K,
                      sd_to_float_q4_k, sd_from_float_q4_k, sd_first_bad_q4_k},
    [SD_TYPE_Q5_K] = {"q5_k", SD_QK_K, sizeof(sd_block_q5_k), 2, SD_W, SD_TYPE_Q8_K,
                      sd_to_float_q5_k, sd_from_float_q5_k, sd_first_bad_q5_k},
    [SD_TYPE_Q6_K] = {"q6_k", SD_QK_K, sizeof(sd_block_q6_k), 2, SD_W, SD_TYPE_Q8_K,
                      sd_to_float_q6_k, sd_from_float_q6_k, sd_first_bad_q6_k},
    [SD_TYPE_Q8_K] = {"q8_k", SD_QK_K, sizeof(sd_block_q8_k), 4, SD_A, SD_TYPE_Q8_K,
                      sd_to_float_q8_k, sd_from_float_q8_k, NULL},
    [SD_TYPE_BF16] = {"bf16", 1, 2, 2, SD_W, SD_TYPE_F32, bf16_to_float, bf16_from_float,
                      bf16_first_bad},
    [SD_TYPE_Q8_S] = {"q8_s", SD_QK8_S, sizeof(sd_block_q8_s), 4, SD_A, SD_TYPE_Q8_S,
                      sd_to_float_q8_s, sd_from_float_q8_s, NULL},
};

const sd_type_traits *sd_type_traits_get(uint32_t t) {
    if (t >= SD_TYPE_COUNT || !k_traits[t].name) return NULL;
    return &k_traits[t];
}

int sd_type_supported(uint32_t t) {
    const sd_type_traits *tr = sd_type_traits_get(t);
    return tr && tr->is_weight;
}

const char *sd_type_name(uint32_t t) {
    const sd_type_traits *tr = sd_type_traits_get(t);
    return tr ? tr->name : "unknown";
}

int sd_type_from_name(const char *name, sd_type *out) {
    if (!name) return -1;
    for (uint32_t t = 0; t < SD_TYPE_COUNT; t++) {
        if (sd_type_supported(t) && strcasecmp(name, k_traits[t].name) == 0) {
            if (out) *out = (sd_type)t;
            return 0;
        }
    }
    return -1;
}

/* Built once (pthread_once), read-only afterwards. */
static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;
static char g_names[SD_TYPE_COUNT * 8];

static void names_init(void) {
    size_t len = 0;
    for (uint32_t t = 0; t < SD_TYPE_COUNT; t++) {
        if (!sd_type_supported(t) || !k_traits[t].from_float) continue;
        const size_t n = strlen(k_traits[t].name);
        if (len + n + 3 >= sizeof g_names) break;
        if (len) {
            memcpy(g_names + len, ", ", 2);
            len += 2;
        }
        memcpy(g_names + len, k_traits[t].name, n);
        len += n;
    }
    g_names[len] = '\0';
}

const char *sd_type_writable_names(void) {
    pthread_once(&g_names_once, names_init);
    return g_names;
}

int64_t sd_type_block_elems(sd_type t) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    return tr ? tr->block_elems : 0;
}

size_t sd_type_block_bytes(sd_type t) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    return tr ? tr->block_bytes : 0;
}

size_t sd_type_align(sd_type t) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    return tr ? tr->align : 0;
}

int sd_type_row_bytes(sd_type t, int64_t n, size_t *out) {
    int64_t be = sd_type_block_elems(t);
    size_t bb = sd_type_block_bytes(t);
    if (be <= 0 || bb == 0 || n < 0 || n % be != 0) return -1;
    uint64_t nb = (uint64_t)(n / be);
    if (nb > SIZE_MAX / bb) return -1;
    if (out) *out = (size_t)nb * bb;
    return 0;
}

sd_type sd_vec_dot_type(sd_type t) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    return tr ? tr->vec_dot_type : SD_TYPE_F32;
}

int sd_quantize_row(sd_type t, const float *x, void *y, int64_t n) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    if (!tr || !tr->from_float || n < 0 || n % tr->block_elems != 0) return -1;
    tr->from_float(x, y, n);
    return 0;
}

int sd_dequantize_row(sd_type t, const void *x, float *y, int64_t n) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    if (!tr || !tr->to_float || n < 0 || n % tr->block_elems != 0) return -1;
    tr->to_float(x, y, n);
    return 0;
}

int sd_validate_row(sd_type t, const void *row, int64_t n, int64_t *first_bad) {
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    if (!tr || !tr->first_bad || n < 0 || n % tr->block_elems != 0) return -1;
    const int64_t b = tr->first_bad(row, n / tr->block_elems);
    if (b < 0) return 0;
    if (first_bad) *first_bad = b * tr->block_elems;
    return -1;
}

/* ---------------------------------------------------------------------------------- */
/* 32-element blocks: reference quantizers (ggml-quants.c *_ref)                        */
/* ---------------------------------------------------------------------------------- */

/* (int)trunc(v) clamped to [lo, hi], as C's (int8_t)/(uint8_t) conversion of an
 * in-range value; NaN (only reachable from non-finite inputs, UB in ggml) gives lo. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo - 1.0f)) return lo; /* also NaN */
    if (!(v < (float)hi + 1.0f)) return hi;
    const int i = (int)v;
    return i < lo ? lo : (i > hi ? hi : i);
}

/* Float -> int8 as C's (int8_t) conversion of an in-range value; NaN/out-of-range
 * map to 0 / saturate instead. */
static inline int8_t f_to_i8(float v) {
    if (!(v > -129.0f && v < 128.0f)) return v >= 128.0f ? 127 : (v <= -129.0f ? -128 : 0);
    return (int8_t)v;
}

/* Q8_0: ggml's quantize_row_q8_0_ref for finite blocks. A block holding a NaN or an
 * infinity (ggml: NaN is dropped by fmaxf and rounds to q = 0, hiding it) gets
 * d = NaN and q = 0, so a non-finite activation reaches the matmul output. */
void sd_from_float_q8_0(const float *x, void *vy, int64_t n) {
    sd_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / SD_QK8_0; i++) {
        const float *xb = x + i * SD_QK8_0;
        float amax = 0.0f;
        int finite = 1;
        for (int j = 0; j < SD_QK8_0; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
            finite &= isfinite(xb[j]) != 0;
        }
        if (!finite) {
            y[i].d = 0x7E00; /* fp16 quiet NaN */
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        for (int j = 0; j < SD_QK8_0; j++)
            y[i].qs[j] = f_to_i8(roundf(xb[j] * id));
    }
}

/* Q8_S: Q8_0's quants with the float scale, and d * (their sum). A block holding a NaN
 * or an infinity gets d = ds = NaN and q = 0 (as Q8_0). */
void sd_from_float_q8_s(const float *x, void *vy, int64_t n) {
    sd_block_q8_s *y = vy;
    for (int64_t i = 0; i < n / SD_QK8_S; i++) {
        const float *xb = x + i * SD_QK8_S;
        float amax = 0.0f;
        int finite = 1;
        for (int j = 0; j < SD_QK8_S; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
            finite &= isfinite(xb[j]) != 0;
        }
        if (!finite) {
            y[i].d = y[i].ds = NAN;
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int s = 0;
        for (int j = 0; j < SD_QK8_S; j++) {
            y[i].qs[j] = f_to_i8(roundf(xb[j] * id));
            s += y[i].qs[j];
        }
        y[i].d = d;
        y[i].ds = d * (float)s;
    }
}

/* The value of largest magnitude in xb[0..31], with its sign (first one on ties). */
static inline float signed_amax32(const float *xb) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = xb[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    return max;
}

static inline void min_max32(const float *xb, float *mn, float *mx) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        const float v = xb[j];
        if (v < min) min = v;
        if (v > max) max = v;
    }
    *mn = min;
    *mx = max;
}

void sd_from_float_q4_0(const float *x, void *vy, int64_t n) {
    sd_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / SD_QK4_0; i++) {
        const float *xb = x + i * SD_QK4_0;
        const float d = signed_amax32(xb) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        for (int j = 0; j < SD_QK4_0 / 2; j++) {
            const int q0 = trunc_clamp(xb[j] * id + 8.5f, 0, 15);
            const int q1 = trunc_clamp(xb[SD_QK4_0 / 2 + j] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void sd_from_float_q4_1(const float *x, void *vy, int64_t n) {
    sd_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / SD_QK4_1; i++) {
        const float *xb = x + i * SD_QK4_1;
        float min, max;
        min_max32(xb, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        y[i].m = sd_fp32_to_fp16(min);
        for (int j = 0; j < SD_QK4_1 / 2; j++) {
            const int q0 = trunc_clamp((xb[j] - min) * id + 0.5f, 0, 15);
            const int q1 = trunc_clamp((xb[SD_QK4_1 / 2 + j] - min) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Pack 32 5-bit values q[] into qs (low nibbles, split order) and qh (bit j = q[j] >> 4). */
static inline void pack5(const int *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) /* little-endian, whatever the host */
        qh[k] = (uint8_t)(h >> (8 * k));
}

void sd_from_float_q5_0(const float *x, void *vy, int64_t n) {
    sd_block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / SD_QK5_0; i++) {
        const float *xb = x + i * SD_QK5_0;
        const float d = signed_amax32(xb) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = trunc_clamp(xb[j] * id + 16.5f, 0, 31);
        pack5(q, y[i].qs, y[i].qh);
    }
}

void sd_from_float_q5_1(const float *x, void *vy, int64_t n) {
    sd_block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / SD_QK5_1; i++) {
        const float *xb = x + i * SD_QK5_1;
        float min, max;
        min_max32(xb, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        y[i].m = sd_fp32_to_fp16(min);
        int q[32];
        for (int j = 0; j < 32; j++)
            q[j] = trunc_clamp((xb[j] - min) * id + 0.5f, 0, 31);
        pack5(q, y[i].qs, y[i].qh);
    }
}

/* ---------------------------------------------------------------------------------- */
/* 32-element blocks: reference dequantizers (gguf-py's expressions, in its order)      */
/* ---------------------------------------------------------------------------------- */

static inline uint32_t qh32(const uint8_t *qh) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) |
           ((uint32_t)qh[3] << 24);
}

void sd_to_float_q8_0(const void *x, float *y, int64_t n) {
    const sd_block_q8_0 *b = x;
    for (int64_t i = 0; i < n / SD_QK8_0; i++) {
        const float d = sd_fp16_to_fp32(b[i].d);
        for (int j = 0; j < SD_QK8_0; j++)
            y[i * SD_QK8_0 + j] = (float)b[i].qs[j] * d;
    }
}

void sd_to_float_q8_s(const void *x, float *y, int64_t n) {
    const sd_block_q8_s *b = x;
    for (int64_t i = 0; i < n / SD_QK8_S; i++)
        for (int j = 0; j < SD_QK8_S; j++)
            y[i * SD_QK8_S + j] = (float)b[i].qs[j] * b[i].d;
}

void sd_to_float_q4_0(const void *x, float *y, int64_t n) {
    const sd_block_q4_0 *b = x;
    for (int64_t i = 0; i < n / SD_QK4_0; i++) {
        const float d = sd_fp16_to_fp32(b[i].d);
        float *yb = y + i * SD_QK4_0;
        for (int j = 0; j < SD_QK4_0 / 2; j++) {
            yb[j] = d * (float)((b[i].qs[j] & 0x0F) - 8);
            yb[j + SD_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void sd_to_float_q4_1(const void *x, float *y, int64_t n) {
    const sd_block_q4_1 *b = x;
    for (int64_t i = 0; i < n / SD_QK4_1; i++) {
        const float d = sd_fp16_to_fp32(b[i].d), m = sd_fp16_to_fp32(b[i].m);
        float *yb = y + i * SD_QK4_1;
        for (int j = 0; j < SD_QK4_1 / 2; j++) {
            yb[j] = d * (float)(b[i].qs[j] & 0x0F) + m;
            yb[j + SD_QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

void sd_to_float_q5_0(const void *x, float *y, int64_t n) {
    const sd_block_q5_0 *b = x;
    for (int64_t i = 0; i < n / SD_QK5_0; i++) {
        const float d = sd_fp16_to_fp32(b[i].d);
        const uint32_t h = qh32(b[i].qh);
        float *yb = y + i * SD_QK5_0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (b[i].qs[j] & 0x0F) | (int)(((h >> j) & 1u) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((h >> (j + 16)) & 1u) << 4);
            yb[j] = d * (float)(q0 - 16);
            yb[j + 16] = d * (float)(q1 - 16);
        }
    }
}

void sd_to_float_q5_1(const void *x, float *y, int64_t n) {
    const sd_block_q5_1 *b = x;
    for (int64_t i = 0; i < n / SD_QK5_1; i++) {
        const float d = sd_fp16_to_fp32(b[i].d), m = sd_fp16_to_fp32(b[i].m);
        const uint32_t h = qh32(b[i].qh);
        float *yb = y + i * SD_QK5_1;
        for (int j = 0; j < 16; j++) {
            const int q0 = (b[i].qs[j] & 0x0F) | (int)(((h >> j) & 1u) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((h >> (j + 16)) & 1u) << 4);
            yb[j] = d * (float)q0 + m;
            yb[j + 16] = d * (float)q1 + m;
        }
    }
}

/* ---------------------------------------------------------------------------------- */
/* 32-element blocks: validation                                                        */
/* ---------------------------------------------------------------------------------- */

int64_t sd_first_bad_q4_0(const void *x, int64_t nb) {
    const sd_block_q4_0 *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d)) return i;
    return -1;
}

int64_t sd_first_bad_q4_1(const void *x, int64_t nb) {
    const sd_block_q4_1 *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d) || !sd_fp16_finite(b[i].m)) return i;
    return -1;
}

int64_t sd_first_bad_q5_0(const void *x, int64_t nb) {
    const sd_block_q5_0 *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d)) return i;
    return -1;
}

int64_t sd_first_bad_q5_1(const void *x, int64_t nb) {
    const sd_block_q5_1 *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d) || !sd_fp16_finite(b[i].m)) return i;
    return -1;
}

int64_t sd_first_bad_q8_0(const void *x, int64_t nb) {
    const sd_block_q8_0 *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d)) return i;
    return -1;
}
