/*
 * runtime/backend/cuda/cuda_impl.cuh: PRIVATE to the CUDA backend (the .cu files of this
 * folder). The backend struct, error recording, block reductions, and the entry point of
 * every op (one .cu file per op). The face is runtime/backend/sd_backend.h; the C interface
 * of this folder is runtime/backend/cuda/sd_cuda.h.
 *
 * Conventions:
 *   - every op runs on the backend's one stream, in call order; nothing blocks but sync,
 *     read, write and the buffer calls;
 *   - an op validates its shapes against what init sized (n_batch, max_cols, n_ctx) and
 *     records SD_ERR_ARG instead of launching out of bounds; a CUDA or cuBLAS failure is
 *     recorded with the op, the call and cudaGetErrorString / cublasGetStatusString; the
 *     first error is returned by the next sync or read (sd_backend.h, "Errors"); once an
 *     error is recorded, ops are skipped until it has been returned;
 *   - kernels never depend on n_tok for the order of a reduction (the determinism
 *     contract): reductions are per output element, in the fixed orders documented at each
 *     kernel, with rounding made explicit by sd_cuda_math.h.
 */
#ifndef SD_BACKEND_CUDA_IMPL_CUH
#define SD_BACKEND_CUDA_IMPL_CUH

/* The C faces assert their layouts with C11's _Static_assert, which C++ spells
 * static_assert. */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "runtime/backend/cuda/sd_cuda.h"
#include "runtime/backend/cuda/sd_cuda_math.h"
#include "runtime/backend/sd_backend.h"

/* Tokens up to which a decode step may be captured as a CUDA graph (SD_CUDA_GRAPHS=1). */
#define SD_CU_GRAPH_MAX_TOK 17
/* Default smallest n_tok that goes to cuBLAS (SD_CUDA_GEMM_MIN_TOK overrides): every
 * decode step and verification pass (K + 1 <= 17 tokens) stays on the batch-invariant
 * kernels. */
#define SD_CU_GEMM_MIN_TOK_DEFAULT 18
/* Elements of the dequantized weight tile cuBLAS reads (F16): 32 MiB. */
#define SD_CU_TILE_ELEMS ((size_t)16 << 20)
/* cuBLAS workspace (set once, so that no call allocates; 32 MiB as NVIDIA advises for Hopper). */
#define SD_CU_BLAS_WS_BYTES ((size_t)32 << 20)

/* Attention (attention.cu): keys per split of the key axis. Fixed, never a function of
 * n_tok or of the context length: query t's partials are the same whatever batch it is in. */
#define SD_CU_ATT_CHUNK   128
#define SD_CU_ATT_THREADS 128 /* == SD_CU_ATT_CHUNK: one score per thread */
#define SD_CU_ATT_MAX_HD  256
#define SD_CU_ATT_TOK     16 /* tokens per launch (the partials scratch holds this many) */

typedef struct sd_cuda_backend {
    sd_backend base;
    int device;
    char gpu_name[256];
    int cc_major, cc_minor;
    cudaStream_t stream;
    cublasHandle_t blas; /* NULL when n_batch never reaches the cuBLAS path */
    void *blas_ws;

    int32_t n_batch;
    int64_t max_cols; /* as passed */
    int64_t cols_q;   /* max_cols rounded up to a multiple of 32 */
    int32_t n_ctx;

    /* matmul scratch (matmul.cu): Q8_0 activations, n_batch rows of cols_q int8 (16-byte
     * aligned blocks of 32) and n_batch rows of cols_q / 32 float scales */
    int8_t *xq;
    float *xd;
    /* cuBLAS path (gemm.cu): activations as F16/BF16, n_batch x max_cols; weight tile */
    uint16_t *xh;
    uint16_t *wh;
    /* attention partials (attention.cu): [SD_CU_ATT_TOK, n_head, att_nc, hd] and
     * [SD_CU_ATT_TOK, n_head, att_nc] twice */
    float *att_o, *att_m, *att_l;
    int32_t att_nc;
    size_t att_o_elems, att_ml_elems;

    /* first recorded error since the last sync / read */
    int failed;
    sd_error err;

    /* settings read once at init from the environment */
    int32_t gemm_min_tok; /* SD_CUDA_GEMM_MIN_TOK; <= 0: never cuBLAS */
    int sync_each;        /* SD_CUDA_SYNC=1 */
    int use_graphs;       /* SD_CUDA_GRAPHS=1 */

    /* graph capture of decode steps (backend.cu) */
    int capturing;
    int32_t cap_tok;
    cudaGraphExec_t exec[SD_CU_GRAPH_MAX_TOK + 1]; /* by n_tok of the step */
} sd_cuda_backend;

static inline sd_cuda_backend *sd_cu_of(sd_backend *be) {
    return (sd_cuda_backend *)be;
}

/* ---- errors (backend.cu) ---- */

/* Record err (the first one only) with printf-style detail; st as sd_status. */
void sd_cu_failf(sd_cuda_backend *c, sd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a failed CUDA call of op; returns 1 if e is cudaSuccess, else 0. */
int sd_cu_check(sd_cuda_backend *c, cudaError_t e, const char *op, const char *call);
/* After a kernel launch: cudaGetLastError (and, with SD_CUDA_SYNC=1 outside a capture, a
 * stream synchronize that attributes asynchronous faults to this op). */
int sd_cu_launched(sd_cuda_backend *c, const char *op, const char *kernel);
int sd_cu_blas_check(sd_cuda_backend *c, cublasStatus_t s, const char *op, const char *call);
/* An op's first line: 0 if it must be skipped (an error is pending), else makes the
 * backend's device current and returns 1. */
int sd_cu_enter(sd_cuda_backend *c);

/* Stop capturing decode steps as graphs (for good): after a failed capture, and for the
 * ranks of a multi-GPU communicator (NCCL calls stay outside graphs). backend.cu. */
void sd_cu_graphs_off(sd_cuda_backend *c);

/* ---- ops (one file each) ---- */

void sd_cu_get_rows(sd_cuda_backend *c, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                    float *y);
void sd_cu_matmul(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok, float *y);
/* The cuBLAS path of matmul (gemm.cu), n_tok >= gemm_min_tok. */
void sd_cu_matmul_gemm(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok,
                       float *y);
void sd_cu_rmsnorm(sd_cuda_backend *c, const float *x, const float *w, int32_t n_tok, int32_t n,
                   float eps, float *y);
void sd_cu_rope(sd_cuda_backend *c, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                int32_t head_dim, const sd_rope *r);
void sd_cu_add_bias(sd_cuda_backend *c, float *y, const float *b, int32_t n_tok, int32_t n);
void sd_cu_kv_store(sd_cuda_backend *c, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                    int32_t kv_dim, const float *k, const float *v);
void sd_cu_attention(sd_cuda_backend *c, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                     int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                     float *out);
void sd_cu_softmax(sd_cuda_backend *c, float *x, int32_t n_rows, int32_t n);
void sd_cu_swiglu(sd_cuda_backend *c, const float *g, const float *u, int64_t n, float *y);
void sd_cu_add(sd_cuda_backend *c, float *y, const float *x, int64_t n);
/* y[i] = sum over r of parts[r * n + i], r ascending (comm.cu's all-reduce). */
void sd_cu_sum_parts(sd_cuda_backend *c, const float *parts, int32_t n_parts, int64_t n, float *y);

/* Blocks of elementwise kernels: enough to cover n with `threads` per block. */
static inline unsigned sd_cu_blocks(int64_t n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

#if defined(__CUDACC__)
/* ---- deterministic block reductions (blockDim.x a multiple of 32, <= 1024) ---- */

/* Butterfly over the warp (the order sd_cu_warp_sum_emul describes). */
__device__ __forceinline__ float sd_cu_warp_sum(float v) {
#pragma unroll
    for (int off = SD_CU_WARP / 2; off > 0; off >>= 1)
        v = sd_cu_add(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float sd_cu_warp_max(float v) {
#pragma unroll
    for (int off = SD_CU_WARP / 2; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Sum of v over the block, the same bits in every thread: warp butterflies, then warp 0
 * adds the warp sums (zeros beyond the last warp) by a butterfly. A fixed tree for a fixed
 * blockDim. red: __shared__ float[SD_CU_WARP + 1]. Contains __syncthreads: every thread
 * of the block must call it. */
__device__ __forceinline__ float sd_cu_block_sum(float v, float *red) {
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int n_warps = blockDim.x / SD_CU_WARP;
    v = sd_cu_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < n_warps ? red[lane] : 0.0f;
        s = sd_cu_warp_sum(s);
        if (lane == 0) red[SD_CU_WARP] = s;
    }
    __syncthreads();
    const float r = red[SD_CU_WARP];
    __syncthreads(); /* red may be reused by the caller */
    return r;
}

/* Maximum of v over the block (order-free). Same calling rules as sd_cu_block_sum. */
__device__ __forceinline__ float sd_cu_block_max(float v, float *red) {
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int n_warps = blockDim.x / SD_CU_WARP;
    v = sd_cu_warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < n_warps ? red[lane] : -INFINITY;
        s = sd_cu_warp_max(s);
        if (lane == 0) red[SD_CU_WARP] = s;
    }
    __syncthreads();
    const float r = red[SD_CU_WARP];
    __syncthreads();
    return r;
}
#endif

#endif /* SD_BACKEND_CUDA_IMPL_CUH */
