/*
 * runtime/backend/cuda/rmsnorm.cu: Y [n_tok, n] = X / sqrt(mean(X^2) + eps) * w, one block
 * of SD_CU_NORM_THREADS per row. The sum of squares: thread i accumulates elements i,
 * i + 256, ... with fma in that order, then the block's fixed tree (sd_cu_block_sum); the
 * scaling is (x * scale) * w, as the CPU backend. Y may alias X (every thread reads its
 * elements before the reduction's barriers and writes only its own).
 *
 * Fused with the residual add before it (backend.cu's fusing window: add(x, p) then an
 * rmsnorm of x over the same rows): x = x + p is written back and normed in the same pass,
 * each element the same bits as the two ops one after the other.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

#define SD_CU_NORM_THREADS 256

__global__ void __launch_bounds__(SD_CU_NORM_THREADS)
    sd_cu_rmsnorm_k(float *x, const float *__restrict__ add, const float *__restrict__ w, int32_t n,
                    float eps, float *y) {
    __shared__ float red[SD_CU_WARP + 1];
    float *xr = x + (int64_t)blockIdx.x * n;
    const float *ar = add ? add + (int64_t)blockIdx.x * n : NULL;
    float *yr = y + (int64_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int32_t i = threadIdx.x; i < n; i += SD_CU_NORM_THREADS) {
        float v = xr[i];
        if (ar) xr[i] = v = sd_cu_add(v, ar[i]);
        ss = sd_cu_fma(v, v, ss);
    }
    ss = sd_cu_block_sum(ss, red);
    const float scale = sd_cu_div(1.0f, sqrtf(sd_cu_add(sd_cu_div(ss, (float)n), eps)));
    for (int32_t i = threadIdx.x; i < n; i += SD_CU_NORM_THREADS)
        yr[i] = sd_cu_mul(sd_cu_mul(xr[i], scale), w[i]);
}

void sd_cu_rmsnorm(sd_cuda_backend *c, float *x, const float *add, const float *w, int32_t n_tok,
                   int32_t n, float eps, float *y) {
    sd_cu_rmsnorm_k<<<(unsigned)n_tok, SD_CU_NORM_THREADS, 0, c->stream>>>(x, add, w, n, eps, y);
    sd_cu_launched(c, "rmsnorm", add ? "add_rmsnorm" : "rmsnorm");
}
