/*
 * quant/quant.c: element types, row sizes, fp16/bf16 conversions and the reference
 * (scalar) quantizers / dequantizers.
 *
 * Block layouts (llama.cpp ggml/src/ggml-common.h, mirrored in sd_quant.h):
 *   block_q8_0 { ggml_half d; int8_t qs[32]; }          34 bytes, x[j] = d * qs[j]
 *   block_q4_0 { ggml_half d; uint8_t qs[16]; }         18 bytes,
 *              x[j]      = d * ((qs[j] & 0x0F) - 8)   j in [0, 16)
 *              x[j + 16] = d * ((qs[j] >>   4) - 8)
 * The quantizers reproduce ggml-quants.c quantize_row_q8_0_ref / quantize_row_q4_0_ref
 * operation for operation (same float expressions, same rounding, fp16 scale stored
 * with round-to-nearest-even like F16C's _cvtss_sh), so the bytes are identical to
 * llama.cpp's for finite inputs.
 */
#include "quant/sd_quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

int sd_type_supported(uint32_t t) {
    switch (t) {
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q8_0:
    case SD_TYPE_BF16:
        return 1;
    default:
        return 0;
    }
}

const char *sd_type_name(uint32_t t) {
    switch (t) {
    case SD_TYPE_F32:
        return "f32";
    case SD_TYPE_F16:
        return "f16";
    case SD_TYPE_Q4_0:
        return "q4_0";
    case SD_TYPE_Q8_0:
        return "q8_0";
    case SD_TYPE_BF16:
        return "bf16";
    default:
        return "unknown";
    }
}

int sd_type_from_name(const char *name, sd_type *out) {
    static const sd_type all[] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_Q4_0, SD_TYPE_Q8_0,
                                  SD_TYPE_BF16};
    if (!name) return -1;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcasecmp(name, sd_type_name((uint32_t)all[i])) == 0) {
            if (out) *out = all[i];
            return 0;
        }
    }
    return -1;
}

int64_t sd_type_block_elems(sd_type t) {
    switch (t) {
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_BF16:
        return 1;
    case SD_TYPE_Q4_0:
        return SD_QK4_0;
    case SD_TYPE_Q8_0:
        return SD_QK8_0;
    default:
        return 0;
    }
}

size_t sd_type_block_bytes(sd_type t) {
    switch (t) {
    case SD_TYPE_F32:
        return 4;
    case SD_TYPE_F16:
        return 2;
    case SD_TYPE_BF16:
        return 2;
    case SD_TYPE_Q4_0:
        return sizeof(sd_block_q4_0);
    case SD_TYPE_Q8_0:
        return sizeof(sd_block_q8_0);
    default:
        return 0;
    }
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

/* ---------------------------------------------------------------------------------- */
/* fp16 / bf16                                                                          */
/* ---------------------------------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float sd_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return bits_f32(sign); /* +-0 */
    /* subnormal: man * 2^-24, exact in binary32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

uint16_t sd_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax > 0x7f800000u) /* nan: quiet it, keep the top payload bits (as F16C) */
            return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal */
        if (ax <= 0x33000000u) return sign; /* <= 2^-25: rounds (ties-to-even) to 0 */
        uint32_t e = ax >> 23;              /* 102..112 */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value / 2^-24 = m >> shift; 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into 0x400: fine */
        return (uint16_t)(sign | q);
    }
    uint32_t h = (ax - 0x38000000u) >> 13; /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry may reach inf */
    return (uint16_t)(sign | h);
}

float sd_bf16_to_fp32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t sd_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    /* round to nearest even; overflow carries into the exponent -> inf, as IEEE */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---------------------------------------------------------------------------------- */
/* Reference quantizers (ggml-quants.c *_ref)                                           */
/* ---------------------------------------------------------------------------------- */

/* Float -> int8 as C's (int8_t) conversion of an in-range value; NaN/out-of-range
 * (only reachable from non-finite inputs, UB in ggml) map to 0 / saturate instead. */
static inline int8_t f_to_i8(float v) {
    if (!(v > -129.0f && v < 128.0f)) return v >= 128.0f ? 127 : (v <= -129.0f ? -128 : 0);
    return (int8_t)v;
}

static void quantize_row_q8_0(const float *x, sd_block_q8_0 *y, int64_t n) {
    int64_t nb = n / SD_QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * SD_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < SD_QK8_0; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        for (int j = 0; j < SD_QK8_0; j++) {
            const float x0 = xb[j] * id;
            y[i].qs[j] = f_to_i8(roundf(x0));
        }
    }
}

static void quantize_row_q4_0(const float *x, sd_block_q4_0 *y, int64_t n) {
    int64_t nb = n / SD_QK4_0;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * SD_QK4_0;
        float amax = 0.0f, max = 0.0f; /* |largest|, and that value with its sign */
        for (int j = 0; j < SD_QK4_0; j++) {
            const float v = xb[j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sd_fp32_to_fp16(d);
        for (int j = 0; j < SD_QK4_0 / 2; j++) {
            const float x0 = xb[j] * id;
            const float x1 = xb[SD_QK4_0 / 2 + j] * id;
            int8_t a = f_to_i8(x0 + 8.5f), b = f_to_i8(x1 + 8.5f);
            const uint8_t xi0 = (uint8_t)(a < 15 ? a : 15);
            const uint8_t xi1 = (uint8_t)(b < 15 ? b : 15);
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

void sd_quantize_row(sd_type t, const float *x, void *y, int64_t n) {
    switch (t) {
    case SD_TYPE_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        break;
    case SD_TYPE_F16: {
        uint16_t *o = y;
        for (int64_t i = 0; i < n; i++)
            o[i] = sd_fp32_to_fp16(x[i]);
        break;
    }
    case SD_TYPE_BF16: {
        uint16_t *o = y;
        for (int64_t i = 0; i < n; i++)
            o[i] = sd_fp32_to_bf16(x[i]);
        break;
    }
    case SD_TYPE_Q8_0:
        quantize_row_q8_0(x, y, n);
        break;
    case SD_TYPE_Q4_0:
        quantize_row_q4_0(x, y, n);
        break;
    default:
        break;
    }
}

void sd_dequantize_row(sd_type t, const void *x, float *y, int64_t n) {
    switch (t) {
    case SD_TYPE_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        break;
    case SD_TYPE_F16: {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = sd_fp16_to_fp32(h[i]);
        break;
    }
    case SD_TYPE_BF16: {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = sd_bf16_to_fp32(h[i]);
        break;
    }
    case SD_TYPE_Q8_0: {
        const sd_block_q8_0 *b = x;
        for (int64_t i = 0; i < n / SD_QK8_0; i++) {
            const float d = sd_fp16_to_fp32(b[i].d);
            for (int j = 0; j < SD_QK8_0; j++)
                y[i * SD_QK8_0 + j] = (float)b[i].qs[j] * d;
        }
        break;
    }
    case SD_TYPE_Q4_0: {
        const sd_block_q4_0 *b = x;
        for (int64_t i = 0; i < n / SD_QK4_0; i++) {
            const float d = sd_fp16_to_fp32(b[i].d);
            for (int j = 0; j < SD_QK4_0 / 2; j++) {
                y[i * SD_QK4_0 + j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
                y[i * SD_QK4_0 + j + SD_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
            }
        }
        break;
    }
    default:
        break;
    }
}

sd_type sd_vec_dot_type(sd_type t) {
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q8_0:
        return SD_TYPE_Q8_0;
    default:
        return SD_TYPE_F32;
    }
}
