/*
 * runtime/backend/cuda/types.cuh: PRIVATE to the CUDA backend. The weight types the kernels
 * read, one traits struct per type, and the one table that maps an sd_type to its traits
 * (sd_cu_with_type). Two kinds:
 *   SD_CU_QUANT : blocks of SD_CU_QK elements; unpack(block, q[8], &d) gives the 32 values
 *                 as packed signed bytes and the block scale (element j = d * q[j]); the
 *                 matmul takes Q8_0 activations and exact integer block dots (as the CPU
 *                 backend's vec_dot_type Q8_0 kernels).
 *   SD_CU_FLOAT : one value per element; load<V>(row, j, out) reads elements j .. j+V-1 as
 *                 floats (V = SD_CU_FVEC with one 16-byte load per group when the row is
 *                 16-byte aligned, else V = 1); the matmul takes float activations.
 * Adding a type: its unpack (quantized) or conversion (float) in sd_cuda_math.h, a traits
 * struct here, and one case in sd_cu_with_type. (A type whose blocks are not 32 elements or
 * that has a min term, e.g. the K-quants, also needs its activation type: see matmul.cu.)
 */
#ifndef SD_BACKEND_CUDA_TYPES_CUH
#define SD_BACKEND_CUDA_TYPES_CUH

/* The C faces assert their layouts with C11's _Static_assert, which C++ spells
 * static_assert. */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#endif

#include <cuda_runtime.h>
#include <stdint.h>

#include "quant/sd_quant.h"
#include "runtime/backend/cuda/sd_cuda_math.h"

enum { SD_CU_FLOAT = 0, SD_CU_QUANT = 1 };

struct sd_cu_q8_0 {
    static constexpr int kind = SD_CU_QUANT;
    static constexpr int block_bytes = 34;
    static constexpr const char *name = "q8_0";
    __device__ static void unpack(const uint8_t *b, int32_t q[8], float *d) {
        sd_cu_unpack_q8_0(b, q, d);
    }
};

struct sd_cu_q4_0 {
    static constexpr int kind = SD_CU_QUANT;
    static constexpr int block_bytes = 18;
    static constexpr const char *name = "q4_0";
    __device__ static void unpack(const uint8_t *b, int32_t q[8], float *d) {
        sd_cu_unpack_q4_0(b, q, d);
    }
};

struct sd_cu_f32 {
    static constexpr int kind = SD_CU_FLOAT;
    static constexpr int elem_bytes = 4;
    static constexpr const char *name = "f32";
    template <int V> __device__ static void load(const uint8_t *row, int64_t j, float *out) {
        const float *r = (const float *)row + j;
        if constexpr (V == 8) {
            const float4 a = *(const float4 *)r, b = *(const float4 *)(r + 4);
            out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
            out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < V; e++)
                out[e] = r[e];
        }
    }
};

/* Shared by the two 16-bit float types (BF = 1: bfloat16, else binary16). */
template <int BF> struct sd_cu_half_loader {
    __device__ static float conv(uint16_t h) {
        if constexpr (BF)
            return sd_cu_bf16_to_fp32(h);
        else
            return sd_cu_fp16_to_fp32(h);
    }
    template <int V> __device__ static void load(const uint8_t *row, int64_t j, float *out) {
        const uint16_t *r = (const uint16_t *)row + j;
        if constexpr (V == 8) {
            const uint4 u = *(const uint4 *)r;
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                out[2 * i] = conv((uint16_t)(w[i] & 0xffffu));
                out[2 * i + 1] = conv((uint16_t)(w[i] >> 16));
            }
        } else {
#pragma unroll
            for (int e = 0; e < V; e++)
                out[e] = conv(r[e]);
        }
    }
};

struct sd_cu_f16 : sd_cu_half_loader<0> {
    static constexpr int kind = SD_CU_FLOAT;
    static constexpr int elem_bytes = 2;
    static constexpr const char *name = "f16";
};

struct sd_cu_bf16 : sd_cu_half_loader<1> {
    static constexpr int kind = SD_CU_FLOAT;
    static constexpr int elem_bytes = 2;
    static constexpr const char *name = "bf16";
};

/* The type table: calls fn(traits{}) for weight type t; 0 if the CUDA backend has no
 * kernels for t. */
template <class Fn> static int sd_cu_with_type(sd_type t, Fn &&fn) {
    switch (t) {
    case SD_TYPE_F32:
        fn(sd_cu_f32{});
        return 1;
    case SD_TYPE_F16:
        fn(sd_cu_f16{});
        return 1;
    case SD_TYPE_BF16:
        fn(sd_cu_bf16{});
        return 1;
    case SD_TYPE_Q8_0:
        fn(sd_cu_q8_0{});
        return 1;
    case SD_TYPE_Q4_0:
        fn(sd_cu_q4_0{});
        return 1;
    default:
        return 0;
    }
}

#endif /* SD_BACKEND_CUDA_TYPES_CUH */
