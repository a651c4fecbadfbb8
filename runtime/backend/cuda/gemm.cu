/*
 * runtime/backend/cuda/gemm.cu: the prefill matmul (n_tok >= gemm_min_tok, default 18) on
 * cuBLAS tensor cores. Y [n_tok, rows] = X [n_tok, cols] . W^T, as the column-major product
 * C (rows x n_tok, ldc = rows) = op(A) B with A = W seen column-major (cols x rows) and
 * transposed, B = X seen column-major (cols x n_tok), F32 accumulation (CUBLAS_COMPUTE_32F):
 *   F16 weights  : A = W as stored, B = X rounded to F16
 *   BF16 weights : A = W as stored, B = X rounded to BF16
 *   F32 weights  : A = W, B = X, TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
 *   quantized    : tiles of at most SD_CU_TILE_ELEMS weight elements dequantized to F16
 *                  (the values sd_dequantize_row gives, sd_cuda_math.h, then round to
 *                  nearest even), B = X in F16
 * cuBLAS picks its algorithm by shape, so these results are NOT bit-identical to the
 * batch-invariant kernels of matmul.cu (nor across batch sizes): prefill only. Its logits
 * differ from the CPU's by the F16 / TF32 rounding of the operands (relative ~1e-3).
 */
#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#ifdef SD_HAVE_CUBLAS /* a build with SD_CUBLAS=OFF runs prefill on matmul.cu's kernels */

/* x [n] float -> F16 (bf16 = 0) or BF16 (bf16 = 1), round to nearest even. */
__global__ void sd_cu_to_half(const float *__restrict__ x, int64_t n, int bf16,
                              uint16_t *__restrict__ out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = bf16 ? sd_cu_fp32_to_bf16(x[i]) : sd_cu_fp32_to_fp16(x[i]);
}

/* Rows [r0, r0 + nr) of a 32-element-block W -> F16 [nr, cols]; one thread per block. */
template <class W>
__global__ void sd_cu_dequant_f16_q32(const uint8_t *__restrict__ w, size_t row_bytes, int64_t r0,
                                      int64_t nr, int64_t cols, uint16_t *__restrict__ out) {
    const int64_t nb = cols / SD_CU_QK;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * nb) return;
    const int64_t r = i / nb, b = i % nb;
    sd_cu_g32 g;
    float f[SD_CU_QK];
    W::unpack(w + (size_t)(r0 + r) * row_bytes + (size_t)b * W::block_bytes, &g);
    sd_cu_dequant_g32(&g, W::has_min, f);
    uint16_t *o = out + r * cols + b * SD_CU_QK;
#pragma unroll
    for (int j = 0; j < SD_CU_QK; j++)
        o[j] = sd_cu_fp32_to_fp16(f[j]);
}

/* The same for K-quants: one thread per 32-element part of a super-block. */
template <class W>
__global__ void sd_cu_dequant_f16_qk(const uint8_t *__restrict__ w, size_t row_bytes, int64_t r0,
                                     int64_t nr, int64_t cols, uint16_t *__restrict__ out) {
    const int64_t np = cols / SD_CU_QK; /* parts per row */
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * np) return;
    const int64_t r = i / np, j = i % np, sb = j / 8;
    const int p = (int)(j % 8);
    const uint8_t *blk = w + (size_t)(r0 + r) * row_bytes + (size_t)sb * W::block_bytes;
    sd_cu_kpart kp;
    W::part(blk, p, &kp);
    const float d = W::d(blk), dmin = W::dmin(blk);
    uint16_t *o = out + r * cols + j * SD_CU_QK;
#pragma unroll
    for (int l = 0; l < SD_CU_QK; l++)
        o[l] = sd_cu_fp32_to_fp16(sd_cu_kpart_elem(&kp, l, d, dmin, W::has_min));
}

static int gemm(sd_cuda_backend *c, const void *a, cudaDataType at, int64_t lda, const void *b,
                cudaDataType bt, int64_t m, int64_t n, int64_t k, float *y, int64_t ldc,
                cublasComputeType_t ct) {
    const float one = 1.0f, zero = 0.0f;
    return sd_cu_blas_check(c,
                            cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k,
                                         &one, a, at, (int)lda, b, bt, (int)k, &zero, y, CUDA_R_32F,
                                         (int)ldc, ct, CUBLAS_GEMM_DEFAULT),
                            "matmul (prefill)", "cublasGemmEx");
}

/* Is x [n_tok, cols] already in xh as F16 (bf = 0) or BF16? If not, mark it as what xh is
 * about to hold. */
static int half_cached(sd_cuda_backend *c, const float *x, int32_t n_tok, int64_t cols, int bf) {
    sd_cu_act *a = &c->act[SD_CU_ACT_HALF];
    if (a->x == x && a->n_tok == n_tok && a->cols == cols && a->variant == bf) return 1;
    a->x = x;
    a->n_tok = n_tok;
    a->cols = cols;
    a->variant = bf;
    return 0;
}

/* Shapes were checked by sd_cu_matmul_check when the op was called. */
void sd_cu_matmul_gemm(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok,
                       float *y) {
    const int64_t rows = w->rows, cols = w->cols;
    const int64_t nx = (int64_t)n_tok * cols;
    const int ok = sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        if constexpr (W::kind == SD_CU_KIND_FLOAT) {
            if (w->type == SD_TYPE_F32) {
                gemm(c, w->data, CUDA_R_32F, cols, x, CUDA_R_32F, rows, n_tok, cols, y, rows,
                     CUBLAS_COMPUTE_32F_FAST_TF32);
                return;
            }
            const int bf = w->type == SD_TYPE_BF16;
            if (!half_cached(c, x, n_tok, cols, bf)) {
                sd_cu_to_half<<<sd_cu_blocks(nx, 256), 256, 0, c->stream>>>(x, nx, bf, c->xh);
                if (!sd_cu_launched(c, "matmul (prefill)", "to_half")) return;
            }
            gemm(c, w->data, bf ? CUDA_R_16BF : CUDA_R_16F, cols, c->xh,
                 bf ? CUDA_R_16BF : CUDA_R_16F, rows, n_tok, cols, y, rows, CUBLAS_COMPUTE_32F);
        } else {
            if (!half_cached(c, x, n_tok, cols, 0)) {
                sd_cu_to_half<<<sd_cu_blocks(nx, 256), 256, 0, c->stream>>>(x, nx, 0, c->xh);
                if (!sd_cu_launched(c, "matmul (prefill)", "to_half")) return;
            }
            int64_t tile = (int64_t)(SD_CU_TILE_ELEMS / (size_t)cols);
            if (tile < 1) {
                sd_cu_failf(c, SD_ERR_ARG,
                            "matmul (prefill): row of %lld columns is wider than "
                            "the weight tile",
                            (long long)cols);
                return;
            }
            for (int64_t r0 = 0; r0 < rows; r0 += tile) {
                const int64_t nr = rows - r0 < tile ? rows - r0 : tile;
                const int64_t nblk = nr * (cols / SD_CU_QK);
                if constexpr (W::kind == SD_CU_KIND_QK)
                    sd_cu_dequant_f16_qk<W><<<sd_cu_blocks(nblk, 128), 128, 0, c->stream>>>(
                        (const uint8_t *)w->data, w->row_bytes, r0, nr, cols, c->wh);
                else
                    sd_cu_dequant_f16_q32<W><<<sd_cu_blocks(nblk, 128), 128, 0, c->stream>>>(
                        (const uint8_t *)w->data, w->row_bytes, r0, nr, cols, c->wh);
                if (!sd_cu_launched(c, "matmul (prefill)", "dequant_f16")) return;
                if (!gemm(c, c->wh, CUDA_R_16F, cols, c->xh, CUDA_R_16F, nr, n_tok, cols, y + r0,
                          rows, CUBLAS_COMPUTE_32F))
                    return;
            }
        }
    });
    (void)ok;
}
#endif /* SD_HAVE_CUBLAS */
