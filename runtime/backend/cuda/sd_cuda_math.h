/*
 * runtime/backend/cuda/sd_cuda_math.h: the arithmetic of the CUDA kernels that can run on
 * the host, shared by the .cu files (nvcc, device and host) and by a plain C11 test
 * (tests/test_cuda_math.c, which runs in CI without a GPU). Everything here is a pure
 * function of its arguments; no CUDA runtime calls, no allocation.
 *
 * What is shared, and why:
 *   - fp16 / bf16 conversions (the KV cache store, the cuBLAS operand conversion) and the
 *     activation quantizers: Q8_0 / Q8_S (one 32-element block: the quants, the fp16
 *     scale Q8_0 uses, the float scale and d * sum Q8_S uses) and Q8_K (a 256-element
 *     super-block), bytes identical to quant/'s reference (sd_quantize_row of Q8_0, Q8_S,
 *     Q8_K), NaN / inf blocks included, so the GPU sees exactly the activations the CPU
 *     backend's integer dot products see;
 *   - weight unpacking: a 32-element group of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (8 packed words
 *     of signed bytes, scale d, min m) and a 32-element part of a K-quant super-block
 *     (Q2_K .. Q6_K: 8 packed words, the integer scales and mins of its two 16-element
 *     groups, with the super-block's d and dmin), and dequantization built on them:
 *     bit-identical to sd_dequantize_row (get_rows, the cuBLAS prefill tiles);
 *   - the per-block terms of the integer dot products, with the same roundings as
 *     quant/cpu/ref.c: (float)isum * (d_w * d_x) (+ m_w * ds_x for Q4_1 / Q5_1) for the
 *     32-element types; per K-quant super-block the exact integers
 *     P = sum_g sc_g * dot_g and M = sum_g mn_g * bsum_g (any split of the super-block
 *     gives the same integers) and acc = (acc + (d_x * d) * P) - (d_x * dmin) * M;
 *   - the fixed reduction orders of the GEMV kernels (matmul.cu), which tests emulate
 *     with these functions: 32-element types: lane l of a warp takes blocks l, l + 32, ...
 *     in ascending order; K-quants: lanes 8g .. 8g + 7 share a super-block (lane 8g + p
 *     takes its part p) and lane group g takes super-blocks g, g + 4, ... in ascending
 *     order, the integers summed exactly across the 8 lanes; float weights: lane l takes
 *     groups l, l + 32, ... of SD_CU_FVEC elements (1 when the row length is not a
 *     multiple of SD_CU_FVEC); then the 32 lane sums are combined by the butterfly
 *     sd_cu_warp_sum_emul describes (xor 16, 8, 4, 2, 1). Nothing in those orders depends
 *     on the number of tokens of the call, which is what makes a verification pass
 *     bit-identical to single-token decode steps on the GPU.
 *
 * Rounding is explicit (sd_cu_mul / sd_cu_add / sd_cu_fma: __fmul_rn, __fadd_rn, __fmaf_rn on
 * the device, which the compiler never contracts or reorders; plain C operators and fmaf()
 * on the host, compiled as ISO C11 with -ffp-contract=off), so a host emulation of a kernel's
 * order produces the device's bits.
 */
#ifndef SD_CUDA_MATH_H
#define SD_CUDA_MATH_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define SD_HD static inline __host__ __device__
#else
#define SD_HD static inline
#endif

#define SD_CU_WARP 32 /* lanes per warp */
#define SD_CU_QK   32 /* elements per quantized weight group / activation block */
#define SD_CU_FVEC 8  /* float-weight GEMV: elements one lane reads per group (16 bytes of f16) */

/* ---- float arithmetic with explicit rounding ---- */

SD_HD float sd_cu_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

SD_HD float sd_cu_add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

SD_HD float sd_cu_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

SD_HD float sd_cu_div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* a * b + c with one rounding. */
SD_HD float sd_cu_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

SD_HD uint32_t sd_cu_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
#endif
}

SD_HD float sd_cu_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union {
        float f;
        uint32_t u;
    } v;
    v.u = u;
    return v.f;
#endif
}

/* ---- fp16 / bf16 ---- */

/* binary16 -> binary32, exact. The device uses the hardware conversion (exact by IEEE
 * 754 for every finite value, infinities and signed zeros); the host the bit form, which
 * tests/test_cuda_math.c checks against sd_fp16_to_fp32 for all 65536 inputs. */
SD_HD float sd_cu_fp16_to_fp32(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return sd_cu_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return sd_cu_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return sd_cu_bits_f32(sign);
    const float v = (float)man * 0x1p-24f; /* subnormal, exact */
    return sign ? -v : v;
#endif
}

/* binary32 -> binary16, round to nearest even (NaN: quieted, top payload bits kept, as
 * F16C and sd_fp32_to_fp16). The same integer code on host and device, so bit-identical
 * to quant/'s reference for every input (tested over all binary16 boundaries). */
SD_HD uint16_t sd_cu_fp32_to_fp16(float f) {
    const uint32_t x = sd_cu_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (ax < 0x38800000u) {                                   /* subnormal result */
        if (ax <= 0x33000000u) return sign;
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = (ax - 0x38000000u) >> 13;
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

SD_HD float sd_cu_bf16_to_fp32(uint16_t h) {
    return sd_cu_bits_f32((uint32_t)h << 16);
}

/* binary32 -> bfloat16, round to nearest even (NaN quieted), as sd_fp32_to_bf16. */
SD_HD uint16_t sd_cu_fp32_to_bf16(float f) {
    const uint32_t x = sd_cu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- loads from quantized blocks (2-byte aligned: GGUF blocks are) ---- */

SD_HD uint32_t sd_cu_ld_u16(const uint8_t *p) {
#if defined(__CUDA_ARCH__)
    return *(const uint16_t *)p;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8); /* little-endian, as the GPU */
#endif
}

/* Four bytes p[0..3] as a little-endian word, from two 2-byte loads. */
SD_HD uint32_t sd_cu_ld_u32_a2(const uint8_t *p) {
    return sd_cu_ld_u16(p) | (sd_cu_ld_u16(p + 2) << 16);
}

SD_HD float sd_cu_ld_fp16(const uint8_t *p) {
    return sd_cu_fp16_to_fp32((uint16_t)sd_cu_ld_u16(p));
}

/* ---- integer dot products ---- */

/* c + the dot product of the four signed bytes of a and of b (exact). */
SD_HD int32_t sd_cu_dp4a(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int32_t)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) *
             (int32_t)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

/* Byte i of packed word w as a signed value. */
SD_HD int32_t sd_cu_byte(int32_t w, int i) {
    return (int32_t)(int8_t)(uint8_t)((uint32_t)w >> (8 * i));
}

/* Four bytes v_i in [0, 127] -> the four signed bytes v_i - k (0 <= k <= 128, v_i - k >=
 * -128): no borrow between bytes, as each byte is 0x80 + v_i before the subtraction. */
SD_HD int32_t sd_cu_bytes_minus(uint32_t v, uint32_t k) {
    return (int32_t)(((v | 0x80808080u) - k * 0x01010101u) ^ 0x80808080u);
}

/* Nibbles 0..15 of four bytes -> the four signed bytes nibble - 8. */
SD_HD int32_t sd_cu_nib4_minus8(uint32_t nibbles) {
    return sd_cu_bytes_minus(nibbles & 0x0F0F0F0Fu, 8);
}

/* Bits 0..3 of h -> bit 0 of bytes 0..3. */
SD_HD uint32_t sd_cu_spread4(uint32_t h) {
    return (h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21);
}

/* ---- activations: Q8_0 / Q8_S (32-element blocks) and Q8_K (256) ---- */

SD_HD int8_t sd_cu_f_to_i8(float v) {
    if (!(v > -129.0f && v < 128.0f)) return v >= 128.0f ? 127 : (v <= -129.0f ? -128 : 0);
    return (int8_t)v;
}

SD_HD float sd_cu_nanf(void) {
    return sd_cu_bits_f32(0x7fc00000u); /* the quiet NaN of NAN */
}

/* One block x[32] -> what both 32-element activation types hold (ggml's
 * quantize_row_q8_0_ref quants, as quant/quant.c): the quants q[32], the Q8_0 scale *dh
 * (fp16), the Q8_S scale *d (float) and *ds = d * (sum of the quants). A block holding a
 * NaN or an infinity: q = 0, *dh = fp16 NaN, *d = *ds = NaN (as quant/). Bytes identical to
 * sd_quantize_row(SD_TYPE_Q8_0) and (SD_TYPE_Q8_S). */
SD_HD void sd_cu_quantize_a32(const float *x, int8_t *q, uint16_t *dh, float *d, float *ds) {
    float amax = 0.0f;
    int finite = 1;
    for (int j = 0; j < SD_CU_QK; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
        finite &= isfinite(x[j]) ? 1 : 0;
    }
    if (!finite) {
        for (int j = 0; j < SD_CU_QK; j++)
            q[j] = 0;
        *dh = 0x7E00u;
        *d = *ds = sd_cu_nanf();
        return;
    }
    const float dd = sd_cu_div(amax, 127.0f);
    const float id = dd != 0.0f ? sd_cu_div(1.0f, dd) : 0.0f;
    *dh = sd_cu_fp32_to_fp16(dd);
    int32_t s = 0;
    for (int j = 0; j < SD_CU_QK; j++) {
        q[j] = sd_cu_f_to_i8(roundf(sd_cu_mul(x[j], id)));
        s += q[j];
    }
    *d = dd;
    *ds = sd_cu_mul(dd, (float)s);
}

#define SD_CU_QKK 256 /* elements per K-quant super-block / Q8_K block */

/* Q8_K's level of v: round(iscale * v) to nearest even, clamped to [-128, 127]. */
SD_HD int8_t sd_cu_q8k_level(float v, float iscale) {
    const float t = sd_cu_mul(iscale, v);
    if (!(t >= -128.0f)) return -128;
    if (!(t <= 127.0f)) return 127;
    return (int8_t)rintf(t);
}

/* The signed value of largest magnitude, first on ties, as a reduction: (a, ia) is the
 * candidate so far (|value| a at index ia), (b, ib) another; 1 if (b, ib) wins: a larger
 * magnitude, or the same one at a smaller index. Any reduction tree over this rule picks
 * what the serial scan of quant/kquants.c (strictly greater replaces) picks. */
SD_HD int sd_cu_amax_wins(float a, int ia, float b, int ib) {
    return b > a || (b == a && ib < ia);
}

/* One Q8_K block x[256] -> q[256], *d, as quant/kquants.c: d = max / -127 with max the
 * signed value of largest magnitude, q = round(x * (-127 / max)); all zero: d = 0; a NaN or
 * an infinity: d = NaN, q = 0. (The block sums are not kept: the kernels sum the quants
 * themselves, exactly.) Bytes identical to sd_quantize_row(SD_TYPE_Q8_K). */
SD_HD void sd_cu_quantize_q8_k(const float *x, int8_t *q, float *d) {
    float amax = 0.0f, max = 0.0f;
    int finite = 1;
    for (int j = 0; j < SD_CU_QKK; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
        finite &= isfinite(x[j]) ? 1 : 0;
        q[j] = 0;
    }
    if (!finite) {
        *d = sd_cu_nanf();
        return;
    }
    if (!(fabsf(max) > 0.0f)) {
        *d = 0.0f;
        return;
    }
    const float iscale = sd_cu_div(-127.0f, max);
    for (int j = 0; j < SD_CU_QKK; j++)
        q[j] = sd_cu_q8k_level(x[j], iscale);
    *d = sd_cu_div(1.0f, iscale);
}

/* Four int8 quants as a packed word (byte 0 = q[0]). */
SD_HD int32_t sd_cu_pack4(const int8_t *q) {
    return (int32_t)((uint32_t)(uint8_t)q[0] | ((uint32_t)(uint8_t)q[1] << 8) |
                     ((uint32_t)(uint8_t)q[2] << 16) | ((uint32_t)(uint8_t)q[3] << 24));
}

/* ---- 32-element weight groups: 8 words of 4 signed bytes (element order), d, m ---- */

typedef struct sd_cu_g32 {
    int32_t q[8]; /* levels: element 4i + b is byte b of q[i] */
    float d, m;   /* element = d * level (+ m for Q4_1 / Q5_1; m = 0 for the others) */
} sd_cu_g32;

/* Q8_0 (34 bytes: fp16 d, int8 qs[32]). */
SD_HD void sd_cu_unpack_q8_0(const uint8_t *b, sd_cu_g32 *g) {
    g->d = sd_cu_ld_fp16(b);
    g->m = 0.0f;
    for (int i = 0; i < 8; i++)
        g->q[i] = (int32_t)sd_cu_ld_u32_a2(b + 2 + 4 * i);
}

/* Nibble groups of qs[16] (split order: element j < 16 the low nibble of qs[j], j + 16 the
 * high one) plus 5th bits qh (bit j for element j, or none), minus k. */
SD_HD void sd_cu_unpack_nibbles(const uint8_t *qs, int has_qh, uint32_t qh, uint32_t k,
                                int32_t q[8]) {
    for (int i = 0; i < 4; i++) {
        const uint32_t v = sd_cu_ld_u32_a2(qs + 4 * i);
        uint32_t lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
        if (has_qh) {
            lo |= sd_cu_spread4(qh >> (4 * i)) << 4;
            hi |= sd_cu_spread4(qh >> (16 + 4 * i)) << 4;
        }
        q[i] = sd_cu_bytes_minus(lo, k);
        q[4 + i] = sd_cu_bytes_minus(hi, k);
    }
}

/* Q4_0 (18 bytes: fp16 d, qs[16]): d * (q - 8). */
SD_HD void sd_cu_unpack_q4_0(const uint8_t *b, sd_cu_g32 *g) {
    g->d = sd_cu_ld_fp16(b);
    g->m = 0.0f;
    sd_cu_unpack_nibbles(b + 2, 0, 0, 8, g->q);
}

/* Q4_1 (20 bytes: fp16 d, fp16 m, qs[16]): d * q + m. */
SD_HD void sd_cu_unpack_q4_1(const uint8_t *b, sd_cu_g32 *g) {
    g->d = sd_cu_ld_fp16(b);
    g->m = sd_cu_ld_fp16(b + 2);
    sd_cu_unpack_nibbles(b + 4, 0, 0, 0, g->q);
}

/* Q5_0 (22 bytes: fp16 d, qh[4], qs[16]): d * (q - 16). */
SD_HD void sd_cu_unpack_q5_0(const uint8_t *b, sd_cu_g32 *g) {
    g->d = sd_cu_ld_fp16(b);
    g->m = 0.0f;
    sd_cu_unpack_nibbles(b + 6, 1, sd_cu_ld_u32_a2(b + 2), 16, g->q);
}

/* Q5_1 (24 bytes: fp16 d, fp16 m, qh[4], qs[16]): d * q + m. */
SD_HD void sd_cu_unpack_q5_1(const uint8_t *b, sd_cu_g32 *g) {
    g->d = sd_cu_ld_fp16(b);
    g->m = sd_cu_ld_fp16(b + 2);
    sd_cu_unpack_nibbles(b + 8, 1, sd_cu_ld_u32_a2(b + 4), 0, g->q);
}

/* The 32 floats of a group, as sd_dequantize_row computes them: (float)q * d, then + m for
 * the types with a min (two roundings). */
SD_HD void sd_cu_dequant_g32(const sd_cu_g32 *g, int has_min, float *out) {
    for (int i = 0; i < 8; i++)
        for (int b = 0; b < 4; b++) {
            float v = sd_cu_mul((float)sd_cu_byte(g->q[i], b), g->d);
            out[4 * i + b] = has_min ? sd_cu_add(v, g->m) : v;
        }
}

/* Exact dot of the group's levels with 32 activation quants (8 packed words). */
SD_HD int32_t sd_cu_group_isum(const int32_t w[8], const int32_t x[8]) {
    int32_t s = 0;
    for (int i = 0; i < 8; i++)
        s = sd_cu_dp4a(w[i], x[i], s);
    return s;
}

/* One block's contribution to an integer dot product, rounded as quant/cpu/ref.c:
 * (float)isum * (d_w * d_x). A lane adds its terms with sd_cu_add in block order (and, for
 * Q4_1 / Q5_1, m_w * ds_x into a second sum; the row's result is the sum + the min sum). */
SD_HD float sd_cu_qterm(int32_t isum, float dw, float dx) {
    return sd_cu_mul((float)isum, sd_cu_mul(dw, dx));
}

/* ---- K-quant super-blocks: part p (0..7) = elements 32p .. 32p + 31 ---- */

typedef struct sd_cu_kpart {
    int32_t q[8];         /* levels (signed bytes): element 32p + 4i + b is byte b of q[i] */
    int32_t sc[2], mn[2]; /* integer scales and mins of the part's two 16-element groups */
} sd_cu_kpart;

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from scales[12] (ggml-common.h
 * block_q4_K; quant/quant_impl.h sd_k4_scale_min). */
SD_HD void sd_cu_k4_scale_min(const uint8_t *s, int j, int32_t *sc, int32_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K: signed scale j (0..15, sc - 32) from scales[12] (quant/quant_impl.h sd_k3_scales). */
SD_HD int32_t sd_cu_k3_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Q2_K (84 bytes: scales[16] at 0, qs[64] at 16, fp16 d at 80, dmin at 82): level of
 * element 128h + 32k + l = bits 2k .. 2k+1 of qs[32h + l]; group scales low nibble, mins
 * high nibble. */
SD_HD void sd_cu_kpart_q2_k(const uint8_t *b, int p, sd_cu_kpart *o) {
    const int h = p >> 2, k = p & 3;
    for (int i = 0; i < 8; i++)
        o->q[i] = (int32_t)((sd_cu_ld_u32_a2(b + 16 + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u);
    for (int g = 0; g < 2; g++) {
        o->sc[g] = b[2 * p + g] & 0x0F;
        o->mn[g] = b[2 * p + g] >> 4;
    }
}

/* Q3_K (110 bytes: hmask[32] at 0, qs[64] at 32, scales[12] at 96, fp16 d at 108): level =
 * the 2 bits as Q2_K | bit p of hmask[l] << 2, minus 4; signed scales. */
SD_HD void sd_cu_kpart_q3_k(const uint8_t *b, int p, sd_cu_kpart *o) {
    const int h = p >> 2, k = p & 3;
    for (int i = 0; i < 8; i++) {
        const uint32_t lo = (sd_cu_ld_u32_a2(b + 32 + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u;
        const uint32_t hb = (sd_cu_ld_u32_a2(b + 4 * i) >> p) & 0x01010101u;
        o->q[i] = sd_cu_bytes_minus(lo | (hb << 2), 4);
    }
    for (int g = 0; g < 2; g++) {
        o->sc[g] = sd_cu_k3_scale(b + 96, 2 * p + g);
        o->mn[g] = 0;
    }
}

/* Q4_K (144 bytes: fp16 d at 0, dmin at 2, scales[12] at 4, qs[128] at 16) and Q5_K (176:
 * d, dmin, scales, qh[32] at 16, qs[128] at 48): level of element 64c + l (l < 32) = low
 * nibble of qs[32c + l], of 64c + 32 + l the high one, | bit s of qh[l] << 4 (Q5_K) for
 * sub-block s. */
SD_HD void sd_cu_kpart_q45_k(const uint8_t *b, int p, int five, sd_cu_kpart *o) {
    const uint8_t *qs = b + (five ? 48 : 16) + 32 * (p >> 1);
    for (int i = 0; i < 8; i++) {
        uint32_t v = (sd_cu_ld_u32_a2(qs + 4 * i) >> (4 * (p & 1))) & 0x0F0F0F0Fu;
        if (five) v |= ((sd_cu_ld_u32_a2(b + 16 + 4 * i) >> p) & 0x01010101u) << 4;
        o->q[i] = (int32_t)v;
    }
    int32_t sc, m;
    sd_cu_k4_scale_min(b + 4, p, &sc, &m);
    o->sc[0] = o->sc[1] = sc;
    o->mn[0] = o->mn[1] = m;
}

/* Q6_K (210 bytes: ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, fp16 d at 208):
 * level of element 128h + 32k + l = 4 bits of ql[64h + 32 (k & 1) + l] (low nibble for
 * k < 2) | 2 bits (qh[32h + l] >> 2k) << 4, minus 32. */
SD_HD void sd_cu_kpart_q6_k(const uint8_t *b, int p, sd_cu_kpart *o) {
    const int h = p >> 2, k = p & 3;
    for (int i = 0; i < 8; i++) {
        const uint32_t lo =
            (sd_cu_ld_u32_a2(b + 64 * h + 32 * (k & 1) + 4 * i) >> (4 * (k >> 1))) & 0x0F0F0F0Fu;
        const uint32_t hi = (sd_cu_ld_u32_a2(b + 128 + 32 * h + 4 * i) >> (2 * k)) & 0x03030303u;
        o->q[i] = sd_cu_bytes_minus(lo | (hi << 4), 32);
    }
    for (int g = 0; g < 2; g++) {
        o->sc[g] = (int32_t)(int8_t)b[192 + 2 * p + g];
        o->mn[g] = 0;
    }
}

/* Exact integers of part w against its 32 activation quants x (8 packed words):
 * *p = sum over the two groups of sc_g * dot_g, *m = sum of mn_g * (sum of the group's x). */
SD_HD void sd_cu_kpart_dot(const sd_cu_kpart *w, const int32_t x[8], int32_t *p, int32_t *m) {
    int32_t s[2] = {0, 0}, bs[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        s[i >> 2] = sd_cu_dp4a(w->q[i], x[i], s[i >> 2]);
        bs[i >> 2] = sd_cu_dp4a(x[i], 0x01010101, bs[i >> 2]);
    }
    *p = w->sc[0] * s[0] + w->sc[1] * s[1];
    *m = w->mn[0] * bs[0] + w->mn[1] * bs[1];
}

/* A super-block's contribution with the CPU reference's roundings:
 * acc = (acc + (d_x * d) * P) - (d_x * dmin) * M  (the second step only for types with mins). */
SD_HD float sd_cu_kterm(float acc, int32_t P, int32_t M, float dx, float d, float dmin,
                        int has_min) {
    acc = sd_cu_add(acc, sd_cu_mul(sd_cu_mul(dx, d), (float)P));
    if (has_min) acc = sd_cu_sub(acc, sd_cu_mul(sd_cu_mul(dx, dmin), (float)M));
    return acc;
}

/* Element l (0..31) of part w, as sd_dequantize_row: ((d * sc) * q) - (dmin * mn). */
SD_HD float sd_cu_kpart_elem(const sd_cu_kpart *w, int l, float d, float dmin, int has_min) {
    const int g = l >> 4;
    const float y =
        sd_cu_mul(sd_cu_mul(d, (float)w->sc[g]), (float)sd_cu_byte(w->q[l >> 2], l & 3));
    return has_min ? sd_cu_sub(y, sd_cu_mul(dmin, (float)w->mn[g])) : y;
}

/* ---- the warp combine ---- */

/* What the kernels' butterfly (for off = 16, 8, 4, 2, 1: v += __shfl_xor_sync(v, off))
 * leaves in every lane, computed on the host from the 32 lane values v[] (overwritten). IEEE
 * addition is commutative, so lanes l and l ^ off hold the same sum after each step and
 * every lane ends with the same bits. */
SD_HD float sd_cu_warp_sum_emul(float *v) {
    for (int off = SD_CU_WARP / 2; off > 0; off /= 2) {
        float nv[SD_CU_WARP];
        for (int l = 0; l < SD_CU_WARP; l++)
            nv[l] = sd_cu_add(v[l], v[l ^ off]);
        for (int l = 0; l < SD_CU_WARP; l++)
            v[l] = nv[l];
    }
    return v[0];
}

#endif /* SD_CUDA_MATH_H */
