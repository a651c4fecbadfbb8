/*
 * runtime/backend/cuda/matmul.cu: the batch-invariant matmul, Y[b, r] = dot(W[r, :], X[b, :])
 * for n_tok < gemm_min_tok (every decode step and verification pass; gemm.cu takes larger
 * prefill batches to cuBLAS).
 *
 * One warp per output row r; the warp reads each weight byte of row r once for all the
 * tokens of the call (up to SD_CU_GEMV_MAX_NT per launch; more tokens loop over groups of
 * SD_CU_GEMV_MAX_NT, each reading the row again), dequantizing in registers:
 *   quantized W (Q8_0, Q4_0): the activations are first quantized to Q8_0 blocks exactly as
 *     the CPU reference does (sd_cu_quantize_q8_0, one thread per (token, block)); lane l
 *     takes blocks l, l + 32, ... of the row and, per token, adds
 *     sd_cu_qterm(exact int dot, d_w, d_x) in block order;
 *   float W (F32, F16, BF16): lane l takes groups l, l + 32, ... of V consecutive elements
 *     (V = 8 with 16-byte loads when the rows are 16-byte aligned, else 1) and, per token,
 *     accumulates fma(w, x, acc) in element order;
 * then the 32 lane sums of each token are combined by the butterfly sd_cu_warp_sum. The
 * order is a function of the row length and the weight's alignment only (never of n_tok,
 * of which tokens share a launch, or of the row's position in the grid), so the value of
 * Y[b, r] is the same bits in a 1-token decode step and in a 17-token verification pass.
 * tests/test_cuda_math.c checks the host emulation of this order against the CPU reference
 * (bit for bit where the orders coincide, within a stated bound elsewhere).
 *
 * Not measured yet (no GPU was lent when this was written): each lane reads its quantized
 * block with 2-byte loads (GGUF blocks of 34 / 18 bytes are only 2-byte aligned). A warp's
 * 32 blocks are contiguous, so if decode falls short of the HBM roof, the first change to
 * try is a warp-cooperative 16-byte load of those bytes into shared memory; the reduction
 * order (and so the bits) would not change.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#define SD_CU_GEMV_WARPS  4  /* rows (warps) per block */
#define SD_CU_GEMV_MAX_NT 17 /* tokens per launch: SD_MAX_DRAFT + 1 */

/* x [n_tok, cols] -> Q8_0 blocks: xq [n_tok, cols] int8 (block i of token t at
 * (t * nb + i) * 32, 16-byte aligned) and xd [n_tok, nb] float scales (fp16-rounded). */
__global__ void sd_cu_quantize_x(const float *__restrict__ x, int64_t cols, int64_t n_blocks,
                                 int8_t *__restrict__ xq, float *__restrict__ xd) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_blocks) return;
    const int64_t nb = cols / SD_CU_QK, t = i / nb, b = i % nb;
    int8_t q[SD_CU_QK];
    uint16_t dh;
    const float d = sd_cu_quantize_q8_0(x + t * cols + b * SD_CU_QK, q, &dh);
    int32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        w[k] = (int32_t)((uint32_t)(uint8_t)q[4 * k] | ((uint32_t)(uint8_t)q[4 * k + 1] << 8) |
                         ((uint32_t)(uint8_t)q[4 * k + 2] << 16) |
                         ((uint32_t)(uint8_t)q[4 * k + 3] << 24));
    int4 *dst = (int4 *)(xq + i * SD_CU_QK);
    dst[0] = make_int4(w[0], w[1], w[2], w[3]);
    dst[1] = make_int4(w[4], w[5], w[6], w[7]);
    xd[i] = d;
}

template <class W, int NT>
__global__ void __launch_bounds__(SD_CU_GEMV_WARPS *SD_CU_WARP)
    sd_cu_gemv_q(const uint8_t *__restrict__ w, size_t row_bytes, int64_t rows, int64_t nb,
                 const int8_t *__restrict__ xq, const float *__restrict__ xd, int32_t n_tok,
                 float *__restrict__ y) {
    const int lane = threadIdx.x % SD_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * SD_CU_GEMV_WARPS + threadIdx.x / SD_CU_WARP;
    if (r >= rows) return; /* the whole warp */
    const uint8_t *wr = w + (size_t)r * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    for (int64_t b = lane; b < nb; b += SD_CU_WARP) {
        int32_t q[8];
        float dw;
        W::unpack(wr + (size_t)b * W::block_bytes, q, &dw);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const int4 *xp = (const int4 *)(xq + ((int64_t)t * nb + b) * SD_CU_QK);
                const int4 a0 = __ldg(xp), a1 = __ldg(xp + 1);
                const int32_t xv[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                const int32_t isum = sd_cu_group_isum(q, xv);
                acc[t] = sd_cu_add(acc[t], sd_cu_qterm(isum, dw, __ldg(xd + (int64_t)t * nb + b)));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = sd_cu_warp_sum(acc[t]);
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n_tok) y[(int64_t)t * rows + r] = acc[t];
    }
}

template <class W, int NT, int V>
__global__ void __launch_bounds__(SD_CU_GEMV_WARPS *SD_CU_WARP)
    sd_cu_gemv_f(const uint8_t *__restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *__restrict__ x, int32_t n_tok, float *__restrict__ y) {
    const int lane = threadIdx.x % SD_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * SD_CU_GEMV_WARPS + threadIdx.x / SD_CU_WARP;
    if (r >= rows) return;
    const uint8_t *wr = w + (size_t)r * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    const int64_t n_groups = cols / V;
    for (int64_t g = lane; g < n_groups; g += SD_CU_WARP) {
        float wv[V];
        W::template load<V>(wr, g * V, wv);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float *xr = x + (int64_t)t * cols + g * V;
#pragma unroll
                for (int e = 0; e < V; e++)
                    acc[t] = sd_cu_fma(wv[e], __ldg(xr + e), acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = sd_cu_warp_sum(acc[t]);
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n_tok) y[(int64_t)t * rows + r] = acc[t];
    }
}

/* Launch the instantiation for n (1 .. SD_CU_GEMV_MAX_NT) tokens: the smallest NT >= n. Which
 * NT runs never changes a token's value (the masked tokens do no arithmetic). */
template <template <int> class K, class... A>
static void sd_cu_launch_nt(int32_t n, dim3 grid, cudaStream_t st, A... a) {
    const dim3 block(SD_CU_GEMV_WARPS * SD_CU_WARP);
    if (n <= 1)
        K<1>::run(grid, block, st, a...);
    else if (n <= 2)
        K<2>::run(grid, block, st, a...);
    else if (n <= 4)
        K<4>::run(grid, block, st, a...);
    else if (n <= 8)
        K<8>::run(grid, block, st, a...);
    else
        K<SD_CU_GEMV_MAX_NT>::run(grid, block, st, a...);
}

template <class W> struct sd_cu_gemv_q_launch {
    template <int NT> struct k {
        static void run(dim3 g, dim3 b, cudaStream_t st, const uint8_t *w, size_t rb, int64_t rows,
                        int64_t nb, const int8_t *xq, const float *xd, int32_t n, float *y) {
            sd_cu_gemv_q<W, NT><<<g, b, 0, st>>>(w, rb, rows, nb, xq, xd, n, y);
        }
    };
};

template <class W, int V> struct sd_cu_gemv_f_launch {
    template <int NT> struct k {
        static void run(dim3 g, dim3 b, cudaStream_t st, const uint8_t *w, size_t rb, int64_t rows,
                        int64_t cols, const float *x, int32_t n, float *y) {
            sd_cu_gemv_f<W, NT, V><<<g, b, 0, st>>>(w, rb, rows, cols, x, n, y);
        }
    };
};

void sd_cu_matmul(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok, float *y) {
    const int64_t rows = w->rows, cols = w->cols;
    if (n_tok < 1 || n_tok > c->n_batch || cols < 1 || cols > c->max_cols || rows < 1) {
        sd_cu_failf(c, SD_ERR_ARG,
                    "matmul: %d tokens x %lld columns exceed the scratch sized at init (n_batch "
                    "%d, max_cols %lld)",
                    n_tok, (long long)cols, c->n_batch, (long long)c->max_cols);
        return;
    }
    const dim3 grid((unsigned)((rows + SD_CU_GEMV_WARPS - 1) / SD_CU_GEMV_WARPS));
    const uint8_t *wd = (const uint8_t *)w->data;
    const int ok = sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        if constexpr (W::kind == SD_CU_QUANT) {
            if (cols % SD_CU_QK != 0) {
                sd_cu_failf(c, SD_ERR_ARG, "matmul: %s row of %lld columns", W::name,
                            (long long)cols);
                return;
            }
            const int64_t nb = cols / SD_CU_QK, n_blocks = nb * n_tok;
            sd_cu_quantize_x<<<sd_cu_blocks(n_blocks, 128), 128, 0, c->stream>>>(x, cols, n_blocks,
                                                                                 c->xq, c->xd);
            if (!sd_cu_launched(c, "matmul", "quantize_x")) return;
            for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_GEMV_MAX_NT) {
                const int32_t n = n_tok - t0 < SD_CU_GEMV_MAX_NT ? n_tok - t0 : SD_CU_GEMV_MAX_NT;
                sd_cu_launch_nt<sd_cu_gemv_q_launch<W>::template k>(
                    n, grid, c->stream, wd, w->row_bytes, rows, nb, c->xq + (int64_t)t0 * cols,
                    c->xd + (int64_t)t0 * nb, n, y + (int64_t)t0 * rows);
                if (!sd_cu_launched(c, "matmul", "gemv_q")) return;
            }
        } else {
            /* 16-byte loads when every row starts 16-byte aligned (a property of the
             * weight alone, so the order is the same for every call on this weight). */
            const int vec =
                cols % SD_CU_FVEC == 0 && w->row_bytes % 16 == 0 && (uintptr_t)w->data % 16 == 0;
            for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_GEMV_MAX_NT) {
                const int32_t n = n_tok - t0 < SD_CU_GEMV_MAX_NT ? n_tok - t0 : SD_CU_GEMV_MAX_NT;
                if (vec)
                    sd_cu_launch_nt<sd_cu_gemv_f_launch<W, SD_CU_FVEC>::template k>(
                        n, grid, c->stream, wd, w->row_bytes, rows, cols, x + (int64_t)t0 * cols, n,
                        y + (int64_t)t0 * rows);
                else
                    sd_cu_launch_nt<sd_cu_gemv_f_launch<W, 1>::template k>(
                        n, grid, c->stream, wd, w->row_bytes, rows, cols, x + (int64_t)t0 * cols, n,
                        y + (int64_t)t0 * rows);
                if (!sd_cu_launched(c, "matmul", "gemv_f")) return;
            }
        }
    });
    if (!ok)
        sd_cu_failf(c, SD_ERR_UNSUPPORTED, "matmul: no CUDA kernels for weight type %s (%d)",
                    sd_type_name((uint32_t)w->type), (int)w->type);
}
