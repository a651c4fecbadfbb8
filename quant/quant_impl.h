/*
 * quant/quant_impl.h: PRIVATE to quant/ (the reference conversions behind the traits
 * table of quant.c). Not a face: other parts use quant/sd_quant.h only.
 *
 * Every function converts n elements (n a multiple of the type's block size; the table
 * guarantees it) between floats and one row of a type. *_first_bad: index of the first
 * of nb blocks whose scales (or values) are not finite, -1 if none.
 */
#ifndef SD_QUANT_IMPL_H
#define SD_QUANT_IMPL_H

#include "quant/sd_quant.h"

/* legacy 32-element blocks (quant.c) */
void sd_to_float_q4_0(const void *x, float *y, int64_t n);
void sd_to_float_q4_1(const void *x, float *y, int64_t n);
void sd_to_float_q5_0(const void *x, float *y, int64_t n);
void sd_to_float_q5_1(const void *x, float *y, int64_t n);
void sd_to_float_q8_0(const void *x, float *y, int64_t n);
void sd_to_float_q8_s(const void *x, float *y, int64_t n);
void sd_from_float_q4_0(const float *x, void *y, int64_t n);
void sd_from_float_q4_1(const float *x, void *y, int64_t n);
void sd_from_float_q5_0(const float *x, void *y, int64_t n);
void sd_from_float_q5_1(const float *x, void *y, int64_t n);
void sd_from_float_q8_0(const float *x, void *y, int64_t n);
void sd_from_float_q8_s(const float *x, void *y, int64_t n);

/* K-quants, 256-element super-blocks (kquants.c) */
void sd_to_float_q2_k(const void *x, float *y, int64_t n);
void sd_to_float_q3_k(const void *x, float *y, int64_t n);
void sd_to_float_q4_k(const void *x, float *y, int64_t n);
void sd_to_float_q5_k(const void *x, float *y, int64_t n);
void sd_to_float_q6_k(const void *x, float *y, int64_t n);
void sd_to_float_q8_k(const void *x, float *y, int64_t n);
void sd_from_float_q2_k(const float *x, void *y, int64_t n);
void sd_from_float_q3_k(const float *x, void *y, int64_t n);
void sd_from_float_q4_k(const float *x, void *y, int64_t n);
void sd_from_float_q5_k(const float *x, void *y, int64_t n);
void sd_from_float_q6_k(const float *x, void *y, int64_t n);
void sd_from_float_q8_k(const float *x, void *y, int64_t n);

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from scales[12]
 * (ggml-common.h block_q4_K; gguf-py Q4_K.get_scale_min). */
static inline void sd_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q3_K: the 16 signed scales (sc - 32, in [-32, 31]) from scales[12]. */
static inline void sd_k3_scales(const uint8_t *s, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
        const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* fp16 scale h is finite (not inf / NaN) */
static inline int sd_fp16_finite(uint16_t h) {
    return (h & 0x7C00u) != 0x7C00u;
}

int64_t sd_first_bad_q4_0(const void *x, int64_t nb);
int64_t sd_first_bad_q4_1(const void *x, int64_t nb);
int64_t sd_first_bad_q5_0(const void *x, int64_t nb);
int64_t sd_first_bad_q5_1(const void *x, int64_t nb);
int64_t sd_first_bad_q8_0(const void *x, int64_t nb);
int64_t sd_first_bad_q2_k(const void *x, int64_t nb);
int64_t sd_first_bad_q3_k(const void *x, int64_t nb);
int64_t sd_first_bad_q4_k(const void *x, int64_t nb);
int64_t sd_first_bad_q5_k(const void *x, int64_t nb);
int64_t sd_first_bad_q6_k(const void *x, int64_t nb);

#endif /* SD_QUANT_IMPL_H */
