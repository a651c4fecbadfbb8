/*
 * runtime/backend/cuda/matmul.cu: the batch-invariant matmul, Y[b, r] = dot(W[r, :], X[b, :])
 * for n_tok < gemm_min_tok (every decode step and verification pass; gemm.cu takes larger
 * prefill batches to cuBLAS).
 *
 * Activations first become what the weight type's integer kernel reads, exactly as the CPU
 * reference makes them (sd_cuda_math.h): 32-element blocks (quants, Q8_0's fp16 scale,
 * Q8_S's float scale and d * sum; one thread per (token, block)) or Q8_K super-blocks (one
 * warp per (token, super-block), the signed maximum chosen by a reduction that picks what
 * the serial scan picks). A conversion is kept while nothing has been written since: the
 * Q, K and V projections (and gate / up) read one quantization of their shared input.
 *
 * One warp per output row r (SD_CU_GEMV_WARPS rows per block); the warp reads each weight
 * byte of row r once for all the tokens of the call (up to SD_CU_GEMV_MAX_NT per launch),
 * the bytes of its next blocks loaded together, 16 bytes per lane per load (ld.global.nc.v4,
 * aligned down to 16: GGUF blocks are only 2-byte aligned), into the warp's shared memory,
 * where each lane unpacks its own block:
 *   32-element types: lane l takes blocks l, l + 32, ... and, per token, adds
 *     sd_cu_qterm(exact int dot, d_w, d_x) in block order (the min terms m_w * ds_x into a
 *     second sum for Q4_1 / Q5_1);
 *   K-quants: lanes 8g .. 8g + 7 share a super-block, lane 8g + p unpacks part p (32
 *     elements); the parts' integers P, M are summed across the 8 lanes (exact) and lane 8g
 *     adds sd_cu_kterm for super-blocks g, g + 4, ... in order;
 *   float W (F32, F16, BF16): lane l takes groups l, l + 32, ... of 8 consecutive elements
 *     (1 when cols % 8 != 0) and accumulates fma(w, x, acc) in element order (16-byte loads
 *     of weights and activations wherever they are aligned: the loads never change the
 *     arithmetic);
 * then the 32 lane sums of each token are combined by the butterfly sd_cu_warp_sum. The
 * order is a function of the row length only (never of n_tok, of which tokens share a
 * launch, or of the row's position in the grid), so Y[b, r] has the same bits in a 1-token
 * decode step and in a 17-token verification pass. tests/test_cuda_math.c checks the host
 * emulation of these orders against the CPU reference (bit for bit where the orders
 * coincide, within a stated bound elsewhere).
 *
 * Not measured yet (no GPU was lent when this was written): the activations of a call are
 * read through the L1 cache by every warp of a block rather than staged in shared memory.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#define SD_CU_GEMV_WARPS  8  /* rows (warps) per block */
#define SD_CU_GEMV_MAX_NT 17 /* tokens per launch: SD_MAX_DRAFT + 1 */
#define SD_CU_KLANES      8  /* lanes per K-quant super-block */
#define SD_CU_KGROUPS     (SD_CU_WARP / SD_CU_KLANES)

/* ---- activations ---- */

/* x [n_tok, cols] -> 32-element blocks: q [n_tok, cols] int8 (block i of token t at
 * (t * nb + i) * 32, 16-byte aligned) and, per block, d16 (the Q8_0 scale, fp16-rounded,
 * as a float), df and ds (the Q8_S scale and d * sum). */
__global__ void sd_cu_quantize_a32_k(const float *__restrict__ x, int64_t cols, int64_t n_blocks,
                                     int8_t *__restrict__ xq, float *__restrict__ d16,
                                     float *__restrict__ df, float *__restrict__ ds) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_blocks) return;
    const int64_t nb = cols / SD_CU_QK, t = i / nb, b = i % nb;
    int8_t q[SD_CU_QK];
    uint16_t dh;
    float d, s;
    sd_cu_quantize_a32(x + t * cols + b * SD_CU_QK, q, &dh, &d, &s);
    int32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        w[k] = sd_cu_pack4(q + 4 * k);
    int4 *dst = (int4 *)(xq + i * SD_CU_QK);
    dst[0] = make_int4(w[0], w[1], w[2], w[3]);
    dst[1] = make_int4(w[4], w[5], w[6], w[7]);
    d16[i] = sd_cu_fp16_to_fp32(dh);
    df[i] = d;
    ds[i] = s;
}

/* x [n_tok, cols] -> Q8_K: q [n_tok, cols] int8, d [n_tok, cols / 256]. One warp per
 * (token, super-block), 8 elements per lane; the bytes are those of sd_cu_quantize_q8_k. */
__global__ void sd_cu_quantize_q8k_k(const float *__restrict__ x, int64_t cols, int64_t n_sb,
                                     int8_t *__restrict__ xq, float *__restrict__ xd) {
    const int lane = threadIdx.x % SD_CU_WARP;
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / SD_CU_WARP;
    if (i >= n_sb) return; /* the whole warp */
    const int64_t nsb = cols / SD_CU_QKK, t = i / nsb, sb = i % nsb;
    const float *xb = x + t * cols + sb * SD_CU_QKK + 8 * lane;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
        v[e] = xb[e];
    float la = 0.0f;
    int li = SD_CU_QKK;
    int fin = 1;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        if (fabsf(v[e]) > la) la = fabsf(v[e]), li = 8 * lane + e;
        fin &= isfinite(v[e]) ? 1 : 0;
    }
    fin = __all_sync(0xffffffffu, fin);
#pragma unroll
    for (int off = SD_CU_WARP / 2; off > 0; off >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, la, off);
        const int oi = __shfl_xor_sync(0xffffffffu, li, off);
        if (sd_cu_amax_wins(la, li, oa, oi)) la = oa, li = oi;
    }
    float sel = 0.0f; /* v[li % 8]: what the owner lane li / 8 hands out */
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (e == (li & 7)) sel = v[e];
    const float max = li < SD_CU_QKK ? __shfl_sync(0xffffffffu, sel, (li >> 3) & 31) : 0.0f;
    int8_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float d;
    if (!fin) {
        d = sd_cu_nanf();
    } else if (!(fabsf(max) > 0.0f)) {
        d = 0.0f;
    } else {
        const float iscale = sd_cu_div(-127.0f, max);
#pragma unroll
        for (int e = 0; e < 8; e++)
            q[e] = sd_cu_q8k_level(v[e], iscale);
        d = sd_cu_div(1.0f, iscale);
    }
    *(int2 *)(xq + t * cols + sb * SD_CU_QKK + 8 * lane) =
        make_int2(sd_cu_pack4(q), sd_cu_pack4(q + 4));
    if (lane == 0) xd[i] = d;
}

/* ---- staging a warp's weight bytes ---- */

/* Copy bytes [src, src + n) of global memory to the warp's stage with 16-byte loads from
 * the 16-byte boundary below src (reads at most 15 bytes past the end: every buffer has
 * SD_CU_PAD bytes after it). Returns the offset of src in the stage. The caller
 * __syncwarp()s before reading and after its last read. */
__device__ __forceinline__ int sd_cu_stage(uint4 *stage, const uint8_t *src, int n, int lane) {
    const uintptr_t a0 = (uintptr_t)src & ~(uintptr_t)15;
    const int off = (int)((uintptr_t)src - a0);
    const int nch = (off + n + 15) >> 4;
    const uint4 *g = (const uint4 *)a0;
    for (int k = lane; k < nch; k += SD_CU_WARP)
        stage[k] = __ldg(g + k);
    return off;
}

/* 8 activation quant words of block (or part) at xp (16-byte aligned). */
__device__ __forceinline__ void sd_cu_load_x8(const int8_t *xp, int32_t xv[8]) {
    const int4 a0 = __ldg((const int4 *)xp), a1 = __ldg((const int4 *)xp + 1);
    xv[0] = a0.x, xv[1] = a0.y, xv[2] = a0.z, xv[3] = a0.w;
    xv[4] = a1.x, xv[5] = a1.y, xv[6] = a1.z, xv[7] = a1.w;
}

/* ---- GEMV kernels ---- */

template <class W, int NT>
__global__ void __launch_bounds__(SD_CU_GEMV_WARPS *SD_CU_WARP)
    sd_cu_gemv_q32(const uint8_t *__restrict__ w, size_t row_bytes, int64_t rows, int64_t nb,
                   const int8_t *__restrict__ xq, const float *__restrict__ xd,
                   const float *__restrict__ xds, int32_t n_tok, float *__restrict__ y) {
    constexpr int BB = W::block_bytes;
    __shared__ uint4 stage[SD_CU_GEMV_WARPS][(SD_CU_WARP * BB + 15) / 16 + 1];
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * SD_CU_GEMV_WARPS + warp;
    if (r >= rows) return; /* the whole warp */
    const uint8_t *wr = w + (size_t)r * row_bytes;
    float acc[NT], accm[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = accm[t] = 0.0f;
    for (int64_t b0 = 0; b0 < nb; b0 += SD_CU_WARP) {
        const int nv = nb - b0 < SD_CU_WARP ? (int)(nb - b0) : SD_CU_WARP;
        const int off = sd_cu_stage(stage[warp], wr + (size_t)b0 * BB, nv * BB, lane);
        __syncwarp();
        if (lane < nv) {
            sd_cu_g32 g;
            W::unpack((const uint8_t *)stage[warp] + off + lane * BB, &g);
            const int64_t b = b0 + lane;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < n_tok) {
                    int32_t xv[8];
                    sd_cu_load_x8(xq + ((int64_t)t * nb + b) * SD_CU_QK, xv);
                    const int32_t isum = sd_cu_group_isum(g.q, xv);
                    acc[t] =
                        sd_cu_add(acc[t], sd_cu_qterm(isum, g.d, __ldg(xd + (int64_t)t * nb + b)));
                    if constexpr (W::has_min)
                        accm[t] =
                            sd_cu_add(accm[t], sd_cu_mul(g.m, __ldg(xds + (int64_t)t * nb + b)));
                }
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        acc[t] = sd_cu_warp_sum(acc[t]);
        if constexpr (W::has_min) acc[t] = sd_cu_add(acc[t], sd_cu_warp_sum(accm[t]));
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n_tok) y[(int64_t)t * rows + r] = acc[t];
    }
}

template <class W, int NT>
__global__ void __launch_bounds__(SD_CU_GEMV_WARPS *SD_CU_WARP)
    sd_cu_gemv_qk(const uint8_t *__restrict__ w, size_t row_bytes, int64_t rows, int64_t nsb,
                  const int8_t *__restrict__ xq, const float *__restrict__ xd, int32_t n_tok,
                  float *__restrict__ y) {
    constexpr int BB = W::block_bytes;
    __shared__ uint4 stage[SD_CU_GEMV_WARPS][(SD_CU_KGROUPS * BB + 15) / 16 + 1];
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int g = lane / SD_CU_KLANES, p = lane % SD_CU_KLANES;
    const int64_t r = (int64_t)blockIdx.x * SD_CU_GEMV_WARPS + warp;
    if (r >= rows) return;
    const uint8_t *wr = w + (size_t)r * row_bytes;
    const int64_t cols = nsb * SD_CU_QKK;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    for (int64_t s0 = 0; s0 < nsb; s0 += SD_CU_KGROUPS) {
        const int nv = nsb - s0 < SD_CU_KGROUPS ? (int)(nsb - s0) : SD_CU_KGROUPS;
        const int off = sd_cu_stage(stage[warp], wr + (size_t)s0 * BB, nv * BB, lane);
        __syncwarp();
        const int valid = g < nv;
        sd_cu_kpart kp;
        float d = 0.0f, dmin = 0.0f;
        if (valid) {
            const uint8_t *blk = (const uint8_t *)stage[warp] + off + g * BB;
            W::part(blk, p, &kp);
            d = W::d(blk);
            dmin = W::dmin(blk);
        }
        const int64_t sb = s0 + g;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) { /* n_tok is the same in every lane: the shuffles see them all */
                int32_t P = 0, M = 0;
                if (valid) {
                    int32_t xv[8];
                    sd_cu_load_x8(xq + (int64_t)t * cols + sb * SD_CU_QKK + 32 * p, xv);
                    sd_cu_kpart_dot(&kp, xv, &P, &M);
                }
#pragma unroll
                for (int o = 1; o < SD_CU_KLANES; o <<= 1) {
                    P += __shfl_xor_sync(0xffffffffu, P, o);
                    if constexpr (W::has_min) M += __shfl_xor_sync(0xffffffffu, M, o);
                }
                if (valid && p == 0)
                    acc[t] = sd_cu_kterm(acc[t], P, M, __ldg(xd + (int64_t)t * nsb + sb), d, dmin,
                                         W::has_min);
            }
        }
        __syncwarp();
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

/* Float weights: groups of V = 8 elements when cols % 8 == 0, else 1 (v8 = 0); wvec / xvec:
 * the weight rows / activation rows are 16-byte aligned (vector loads). */
template <class W, int NT>
__global__ void __launch_bounds__(SD_CU_GEMV_WARPS *SD_CU_WARP)
    sd_cu_gemv_f(const uint8_t *__restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *__restrict__ x, int32_t n_tok, float *__restrict__ y, int v8,
                 int wvec, int xvec) {
    const int lane = threadIdx.x % SD_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * SD_CU_GEMV_WARPS + threadIdx.x / SD_CU_WARP;
    if (r >= rows) return;
    const uint8_t *wr = w + (size_t)r * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    const int V = v8 ? SD_CU_FVEC : 1;
    const int64_t n_groups = cols / V;
    for (int64_t gi = lane; gi < n_groups; gi += SD_CU_WARP) {
        float wv[SD_CU_FVEC];
        W::load(wr, gi * V, V, wvec, wv);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float *xr = x + (int64_t)t * cols + gi * V;
                if (V == SD_CU_FVEC) {
                    float xv[SD_CU_FVEC];
                    if (xvec) {
                        const float4 a = __ldg((const float4 *)xr),
                                     b = __ldg((const float4 *)xr + 1);
                        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
                        xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
                    } else {
#pragma unroll
                        for (int e = 0; e < SD_CU_FVEC; e++)
                            xv[e] = __ldg(xr + e);
                    }
#pragma unroll
                    for (int e = 0; e < SD_CU_FVEC; e++)
                        acc[t] = sd_cu_fma(wv[e], xv[e], acc[t]);
                } else {
                    acc[t] = sd_cu_fma(wv[0], __ldg(xr), acc[t]);
                }
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

template <class W> struct sd_cu_gemv_q32_launch {
    template <int NT> struct k {
        static void run(dim3 g, dim3 b, cudaStream_t st, const uint8_t *w, size_t rb, int64_t rows,
                        int64_t nb, const int8_t *xq, const float *xd, const float *xds, int32_t n,
                        float *y) {
            sd_cu_gemv_q32<W, NT><<<g, b, 0, st>>>(w, rb, rows, nb, xq, xd, xds, n, y);
        }
    };
};

template <class W> struct sd_cu_gemv_qk_launch {
    template <int NT> struct k {
        static void run(dim3 g, dim3 b, cudaStream_t st, const uint8_t *w, size_t rb, int64_t rows,
                        int64_t nsb, const int8_t *xq, const float *xd, int32_t n, float *y) {
            sd_cu_gemv_qk<W, NT><<<g, b, 0, st>>>(w, rb, rows, nsb, xq, xd, n, y);
        }
    };
};

template <class W> struct sd_cu_gemv_f_launch {
    template <int NT> struct k {
        static void run(dim3 g, dim3 b, cudaStream_t st, const uint8_t *w, size_t rb, int64_t rows,
                        int64_t cols, const float *x, int32_t n, float *y, int v8, int wvec,
                        int xvec) {
            sd_cu_gemv_f<W, NT><<<g, b, 0, st>>>(w, rb, rows, cols, x, n, y, v8, wvec, xvec);
        }
    };
};

/* ---- the op ---- */

int sd_cu_matmul_check(sd_cuda_backend *c, const sd_weight *w, int32_t n_tok) {
    const int64_t rows = w->rows, cols = w->cols;
    if (n_tok < 1 || n_tok > c->n_batch || cols < 1 || cols > c->max_cols || rows < 1 ||
        rows > INT32_MAX) {
        sd_cu_failf(c, SD_ERR_ARG,
                    "matmul: %d tokens x %lld columns exceed the scratch sized at init (n_batch "
                    "%d, max_cols %lld)",
                    n_tok, (long long)cols, c->n_batch, (long long)c->max_cols);
        return 0;
    }
    int ok = 1;
    const int known = sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        if (cols % W::block_elems != 0) {
            sd_cu_failf(c, SD_ERR_ARG, "matmul: %s row of %lld columns (not a multiple of %d)",
                        W::name, (long long)cols, W::block_elems);
            ok = 0;
        }
    });
    if (!known) {
        sd_cu_failf(c, SD_ERR_UNSUPPORTED, "matmul: no CUDA kernels for weight type %s (%d)",
                    sd_cu_type_name(w->type), (int)w->type);
        return 0;
    }
    return ok;
}

/* Is conversion `slot` of x [n_tok, cols] (variant v) still in its scratch? If not, mark it
 * as what the scratch is about to hold and return 0. */
static int act_cached(sd_cuda_backend *c, int slot, const float *x, int32_t n_tok, int64_t cols,
                      int32_t v) {
    sd_cu_act *a = &c->act[slot];
    if (a->x == x && a->n_tok == n_tok && a->cols == cols && a->variant == v) return 1;
    a->x = x;
    a->n_tok = n_tok;
    a->cols = cols;
    a->variant = v;
    return 0;
}

void sd_cu_matmul(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok, float *y) {
    const int64_t rows = w->rows, cols = w->cols;
    const dim3 grid((unsigned)((rows + SD_CU_GEMV_WARPS - 1) / SD_CU_GEMV_WARPS));
    const uint8_t *wd = (const uint8_t *)w->data;
    sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        if constexpr (W::kind == SD_CU_KIND_Q32) {
            const int64_t nb = cols / SD_CU_QK, n_blocks = nb * n_tok;
            if (!act_cached(c, SD_CU_ACT_A32, x, n_tok, cols, 0)) {
                sd_cu_quantize_a32_k<<<sd_cu_blocks(n_blocks, 128), 128, 0, c->stream>>>(
                    x, cols, n_blocks, c->a32_q, c->a32_d16, c->a32_df, c->a32_ds);
                if (!sd_cu_launched(c, "matmul", "quantize_a32")) return;
            }
            const float *xd = W::act_float ? c->a32_df : c->a32_d16;
            for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_GEMV_MAX_NT) {
                const int32_t n = n_tok - t0 < SD_CU_GEMV_MAX_NT ? n_tok - t0 : SD_CU_GEMV_MAX_NT;
                sd_cu_launch_nt<sd_cu_gemv_q32_launch<W>::template k>(
                    n, grid, c->stream, wd, w->row_bytes, rows, nb, c->a32_q + (int64_t)t0 * cols,
                    xd + (int64_t)t0 * nb, c->a32_ds + (int64_t)t0 * nb, n, y + (int64_t)t0 * rows);
                if (!sd_cu_launched(c, "matmul", "gemv_q32")) return;
            }
        } else if constexpr (W::kind == SD_CU_KIND_QK) {
            const int64_t nsb = cols / SD_CU_QKK, n_sb = nsb * n_tok;
            if (!act_cached(c, SD_CU_ACT_K, x, n_tok, cols, 0)) {
                sd_cu_quantize_q8k_k<<<sd_cu_blocks(n_sb * SD_CU_WARP, 128), 128, 0, c->stream>>>(
                    x, cols, n_sb, c->ak_q, c->ak_d);
                if (!sd_cu_launched(c, "matmul", "quantize_q8k")) return;
            }
            for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_GEMV_MAX_NT) {
                const int32_t n = n_tok - t0 < SD_CU_GEMV_MAX_NT ? n_tok - t0 : SD_CU_GEMV_MAX_NT;
                sd_cu_launch_nt<sd_cu_gemv_qk_launch<W>::template k>(
                    n, grid, c->stream, wd, w->row_bytes, rows, nsb, c->ak_q + (int64_t)t0 * cols,
                    c->ak_d + (int64_t)t0 * nsb, n, y + (int64_t)t0 * rows);
                if (!sd_cu_launched(c, "matmul", "gemv_qk")) return;
            }
        } else {
            /* The grouping is a function of cols alone; the loads of the alignment. */
            const int v8 = cols % SD_CU_FVEC == 0;
            const int wvec = w->row_bytes % 16 == 0 && (uintptr_t)w->data % 16 == 0;
            const int xvec = (cols * (int64_t)sizeof(float)) % 16 == 0 && (uintptr_t)x % 16 == 0;
            for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_GEMV_MAX_NT) {
                const int32_t n = n_tok - t0 < SD_CU_GEMV_MAX_NT ? n_tok - t0 : SD_CU_GEMV_MAX_NT;
                sd_cu_launch_nt<sd_cu_gemv_f_launch<W>::template k>(
                    n, grid, c->stream, wd, w->row_bytes, rows, cols, x + (int64_t)t0 * cols, n,
                    y + (int64_t)t0 * rows, v8, wvec, xvec);
                if (!sd_cu_launched(c, "matmul", "gemv_f")) return;
            }
        }
    });
}
