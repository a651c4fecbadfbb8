/*
 * runtime/backend/cuda/types.cuh: PRIVATE to the CUDA backend. The weight types the kernels
 * read, one traits struct per type, and the one table that maps an sd_type to its traits
 * (sd_cu_with_type). Three kinds:
 *   SD_CU_KIND_Q32   : blocks of 32 elements (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1); unpack(block, &g)
 *                 gives the levels as packed signed bytes, d and m (sd_cuda_math.h); the
 *                 matmul takes 32-element activation blocks (Q8_0's fp16 scale, or Q8_S's
 *                 float scale and d * sum when act_float: as sd_vec_dot_type) and exact
 *                 integer block dots;
 *   SD_CU_KIND_QK    : K-quant super-blocks of 256 (Q2_K .. Q6_K); part(block, p, &o) gives
 *                 part p (elements 32p .. 32p + 31), d(block) / dmin(block) the factors;
 *                 the matmul takes Q8_K activations;
 *   SD_CU_KIND_FLOAT : one value per element; load(row, j, vec, out) reads elements j .. j+7 as
 *                 floats (16-byte loads when vec); the matmul takes float activations.
 * Adding a type: its unpack / part in sd_cuda_math.h (tested against quant/ in
 * tests/test_cuda_math.c), a traits struct here, one case in sd_cu_with_type.
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

enum { SD_CU_KIND_FLOAT = 0, SD_CU_KIND_Q32 = 1, SD_CU_KIND_QK = 2 };

/* ---- 32-element blocks ---- */

template <int BB, int HM, int ACTF> struct sd_cu_q32_base {
    static constexpr int kind = SD_CU_KIND_Q32;
    static constexpr int block_bytes = BB;
    static constexpr int block_elems = SD_CU_QK;
    static constexpr int has_min = HM;     /* x = d * q + m */
    static constexpr int act_float = ACTF; /* activations with the float scale (Q8_S) */
};

struct sd_cu_q8_0 : sd_cu_q32_base<34, 0, 0> {
    static constexpr const char *name = "q8_0";
    __device__ static void unpack(const uint8_t *b, sd_cu_g32 *g) { sd_cu_unpack_q8_0(b, g); }
};
struct sd_cu_q4_0 : sd_cu_q32_base<18, 0, 0> {
    static constexpr const char *name = "q4_0";
    __device__ static void unpack(const uint8_t *b, sd_cu_g32 *g) { sd_cu_unpack_q4_0(b, g); }
};
struct sd_cu_q4_1 : sd_cu_q32_base<20, 1, 1> {
    static constexpr const char *name = "q4_1";
    __device__ static void unpack(const uint8_t *b, sd_cu_g32 *g) { sd_cu_unpack_q4_1(b, g); }
};
struct sd_cu_q5_0 : sd_cu_q32_base<22, 0, 1> {
    static constexpr const char *name = "q5_0";
    __device__ static void unpack(const uint8_t *b, sd_cu_g32 *g) { sd_cu_unpack_q5_0(b, g); }
};
struct sd_cu_q5_1 : sd_cu_q32_base<24, 1, 1> {
    static constexpr const char *name = "q5_1";
    __device__ static void unpack(const uint8_t *b, sd_cu_g32 *g) { sd_cu_unpack_q5_1(b, g); }
};

/* ---- K-quant super-blocks: DO / MO are the byte offsets of the fp16 d and dmin ---- */

template <int BB, int HM, int DO, int MO> struct sd_cu_qk_base {
    static constexpr int kind = SD_CU_KIND_QK;
    static constexpr int block_bytes = BB;
    static constexpr int block_elems = SD_CU_QKK;
    static constexpr int has_min = HM;
    __device__ static float d(const uint8_t *b) { return sd_cu_ld_fp16(b + DO); }
    __device__ static float dmin(const uint8_t *b) { return HM ? sd_cu_ld_fp16(b + MO) : 0.0f; }
};

struct sd_cu_q2_k : sd_cu_qk_base<84, 1, 80, 82> {
    static constexpr const char *name = "q2_k";
    __device__ static void part(const uint8_t *b, int p, sd_cu_kpart *o) {
        sd_cu_kpart_q2_k(b, p, o);
    }
};
struct sd_cu_q3_k : sd_cu_qk_base<110, 0, 108, 0> {
    static constexpr const char *name = "q3_k";
    __device__ static void part(const uint8_t *b, int p, sd_cu_kpart *o) {
        sd_cu_kpart_q3_k(b, p, o);
    }
};
struct sd_cu_q4_k : sd_cu_qk_base<144, 1, 0, 2> {
    static constexpr const char *name = "q4_k";
    __device__ static void part(const uint8_t *b, int p, sd_cu_kpart *o) {
        sd_cu_kpart_q45_k(b, p, 0, o);
    }
};
struct sd_cu_q5_k : sd_cu_qk_base<176, 1, 0, 2> {
    static constexpr const char *name = "q5_k";
    __device__ static void part(const uint8_t *b, int p, sd_cu_kpart *o) {
        sd_cu_kpart_q45_k(b, p, 1, o);
    }
};
struct sd_cu_q6_k : sd_cu_qk_base<210, 0, 208, 0> {
    static constexpr const char *name = "q6_k";
    __device__ static void part(const uint8_t *b, int p, sd_cu_kpart *o) {
        sd_cu_kpart_q6_k(b, p, o);
    }
};

/* ---- float types ---- */

struct sd_cu_f32 {
    static constexpr int kind = SD_CU_KIND_FLOAT;
    static constexpr int elem_bytes = 4;
    static constexpr int block_elems = 1;
    static constexpr const char *name = "f32";
    /* elements j .. j + n - 1 (n = 8 or 1); vec: the row is 16-byte aligned, j % 8 == 0 */
    __device__ static void load(const uint8_t *row, int64_t j, int n, int vec, float *out) {
        const float *r = (const float *)row + j;
        if (n == 8 && vec) {
            const float4 a = __ldg((const float4 *)r), b = __ldg((const float4 *)r + 1);
            out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
            out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
        } else {
            for (int e = 0; e < n; e++)
                out[e] = __ldg(r + e);
        }
    }
    __device__ static float elem(const uint8_t *row, int64_t j) {
        return __ldg((const float *)row + j);
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
    __device__ static void load(const uint8_t *row, int64_t j, int n, int vec, float *out) {
        const uint16_t *r = (const uint16_t *)row + j;
        if (n == 8 && vec) {
            const uint4 u = __ldg((const uint4 *)r);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                out[2 * i] = conv((uint16_t)(w[i] & 0xffffu));
                out[2 * i + 1] = conv((uint16_t)(w[i] >> 16));
            }
        } else {
            for (int e = 0; e < n; e++)
                out[e] = conv(__ldg(r + e));
        }
    }
    __device__ static float elem(const uint8_t *row, int64_t j) {
        return conv(__ldg((const uint16_t *)row + j));
    }
};

struct sd_cu_f16 : sd_cu_half_loader<0> {
    static constexpr int kind = SD_CU_KIND_FLOAT;
    static constexpr int elem_bytes = 2;
    static constexpr int block_elems = 1;
    static constexpr const char *name = "f16";
};

struct sd_cu_bf16 : sd_cu_half_loader<1> {
    static constexpr int kind = SD_CU_KIND_FLOAT;
    static constexpr int elem_bytes = 2;
    static constexpr int block_elems = 1;
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
    case SD_TYPE_Q4_1:
        fn(sd_cu_q4_1{});
        return 1;
    case SD_TYPE_Q5_0:
        fn(sd_cu_q5_0{});
        return 1;
    case SD_TYPE_Q5_1:
        fn(sd_cu_q5_1{});
        return 1;
    case SD_TYPE_Q2_K:
        fn(sd_cu_q2_k{});
        return 1;
    case SD_TYPE_Q3_K:
        fn(sd_cu_q3_k{});
        return 1;
    case SD_TYPE_Q4_K:
        fn(sd_cu_q4_k{});
        return 1;
    case SD_TYPE_Q5_K:
        fn(sd_cu_q5_k{});
        return 1;
    case SD_TYPE_Q6_K:
        fn(sd_cu_q6_k{});
        return 1;
    default:
        return 0;
    }
}

/* The name of any type id (the module carries no copy of quant/'s traits table). */
static inline const char *sd_cu_type_name(sd_type t) {
    const char *n = "unknown";
    if (!sd_cu_with_type(t, [&](auto tr) { n = decltype(tr)::name; })) {
        if (t == SD_TYPE_Q8_K) n = "q8_k";
        if (t == SD_TYPE_Q8_S) n = "q8_s";
    }
    return n;
}

#endif /* SD_BACKEND_CUDA_TYPES_CUH */
