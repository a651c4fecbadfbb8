/*
 * runtime/backend/cuda/sd_cuda_math.h: the arithmetic of the CUDA kernels that can run on
 * the host, shared by the .cu files (nvcc, device and host) and by a plain C11 test
 * (tests/test_cuda_math.c, which runs in CI without a GPU). Everything here is a pure
 * function of its arguments; no CUDA runtime calls, no allocation.
 *
 * What is shared, and why:
 *   - fp16 / bf16 conversions (the KV cache store, the cuBLAS operand conversion) and the
 *     Q8_0 activation quantizer: bit-identical to quant/'s reference (sd_fp32_to_fp16,
 *     sd_quantize_row(SD_TYPE_Q8_0)), so the GPU sees exactly the activations the CPU
 *     backend's integer dot products see.
 *   - weight-group unpacking (32 elements of a quantized row -> 8 packed int8x4 words and a
 *     float scale: element j = d * q[j]) and dequantization built on it: bit-identical to
 *     sd_dequantize_row. A new type is one unpack function here plus one row in the
 *     kernels' type table (runtime/backend/cuda/types.cuh).
 *   - the per-block term of an integer dot product, (float)isum * (d_w * d_x), the same
 *     two roundings as quant/cpu/ref.c, and the fixed reduction order of the GEMV kernels
 *     (matmul.cu): lane l of a warp takes weight blocks (or 8-element float groups)
 *     l, l + 32, l + 64, ... in ascending order and accumulates in float; the 32 lane sums
 *     are then combined by the butterfly sd_cu_warp_sum_emul describes (xor 16, 8, 4, 2,
 *     1). Nothing in that order depends on the number of tokens of the call, which is what
 *     makes a verification pass bit-identical to single-token decode steps on the GPU.
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

/* ---- Q8_0 activations (ggml quantize_row_q8_0_ref, as quant/quant.c) ---- */

SD_HD int8_t sd_cu_f_to_i8(float v) {
    if (!(v > -129.0f && v < 128.0f)) return v >= 128.0f ? 127 : (v <= -129.0f ? -128 : 0);
    return (int8_t)v;
}

/* One block: x[32] -> q[32] and the fp16 scale *dh; returns the scale as the dot product
 * uses it (fp16 -> fp32). Bytes identical to sd_quantize_row(SD_TYPE_Q8_0). */
SD_HD float sd_cu_quantize_q8_0(const float *x, int8_t *q, uint16_t *dh) {
    float amax = 0.0f;
    for (int j = 0; j < SD_CU_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = sd_cu_div(amax, 127.0f);
    const float id = d != 0.0f ? sd_cu_div(1.0f, d) : 0.0f;
    *dh = sd_cu_fp32_to_fp16(d);
    for (int j = 0; j < SD_CU_QK; j++)
        q[j] = sd_cu_f_to_i8(roundf(sd_cu_mul(x[j], id)));
    return sd_cu_fp16_to_fp32(*dh);
}

/* ---- weight groups: 32 elements -> q (8 words of 4 signed bytes, element order) and d ---- */

/* Q8_0 (34 bytes: fp16 d, int8 qs[32]): element j = d * qs[j]. */
SD_HD void sd_cu_unpack_q8_0(const uint8_t *blk, int32_t q[8], float *d) {
    *d = sd_cu_fp16_to_fp32((uint16_t)sd_cu_ld_u16(blk));
    for (int i = 0; i < 8; i++)
        q[i] = (int32_t)sd_cu_ld_u32_a2(blk + 2 + 4 * i);
}

/* Nibbles 0..15 of four bytes -> the four signed bytes nibble - 8 (no borrow between bytes:
 * each byte is 0x80 + nibble before the subtraction). */
SD_HD int32_t sd_cu_nib4_minus8(uint32_t nibbles) {
    return (int32_t)((((nibbles & 0x0F0F0F0Fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u);
}

/* Q4_0 (18 bytes: fp16 d, qs[16]): element j < 16 = d * ((qs[j] & 15) - 8), element
 * j + 16 = d * ((qs[j] >> 4) - 8). */
SD_HD void sd_cu_unpack_q4_0(const uint8_t *blk, int32_t q[8], float *d) {
    *d = sd_cu_fp16_to_fp32((uint16_t)sd_cu_ld_u16(blk));
    for (int i = 0; i < 4; i++) {
        const uint32_t v = sd_cu_ld_u32_a2(blk + 2 + 4 * i);
        q[i] = sd_cu_nib4_minus8(v);
        q[4 + i] = sd_cu_nib4_minus8(v >> 4);
    }
}

/* The 32 floats of an unpacked group, as sd_dequantize_row computes them: (float)q * d. */
SD_HD void sd_cu_dequant_group(const int32_t q[8], float d, float *out) {
    for (int i = 0; i < 8; i++)
        for (int b = 0; b < 4; b++)
            out[4 * i + b] = sd_cu_mul((float)sd_cu_byte(q[i], b), d);
}

/* Exact dot of an unpacked weight group with 32 activation quants (8 packed words). */
SD_HD int32_t sd_cu_group_isum(const int32_t w[8], const int32_t x[8]) {
    int32_t s = 0;
    for (int i = 0; i < 8; i++)
        s = sd_cu_dp4a(w[i], x[i], s);
    return s;
}

/* One block's contribution to an integer dot product, rounded as quant/cpu/ref.c:
 * (float)isum * (d_w * d_x). A lane adds its terms with sd_cu_add in block order. */
SD_HD float sd_cu_qterm(int32_t isum, float dw, float dx) {
    return sd_cu_mul((float)isum, sd_cu_mul(dw, dx));
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
