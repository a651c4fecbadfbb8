/*
 * quant/fp16.c: the scalar fp16 and bf16 conversions (IEEE round-to-nearest-even for
 * fp32 -> fp16 and fp32 -> bf16, NaN quieted as F16C does), under the quantizers of
 * quant.c and kquants.c and the packing of pack.c, which all call them. Moved from
 * quant.c unchanged.
 */
#include "quant/sd_quant.h"

#include <stdint.h>
#include <string.h>

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
