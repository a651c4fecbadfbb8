/*
 * runtime/backend/cuda/softmax.cu: X [n_rows, n] in place, per row: x = exp(x - max) / sum,
 * one block of SD_CU_SOFTMAX_THREADS per row; the sum in the block's fixed tree
 * (sd_cu_block_sum) over per-thread sums of elements i, i + 256, ... in order.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

#define SD_CU_SOFTMAX_THREADS 256

__global__ void __launch_bounds__(SD_CU_SOFTMAX_THREADS) sd_cu_softmax_k(float *x, int32_t n) {
    __shared__ float red[SD_CU_WARP + 1];
    float *xr = x + (int64_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int32_t i = threadIdx.x; i < n; i += SD_CU_SOFTMAX_THREADS)
        mx = fmaxf(mx, xr[i]);
    mx = sd_cu_block_max(mx, red);
    float s = 0.0f;
    for (int32_t i = threadIdx.x; i < n; i += SD_CU_SOFTMAX_THREADS) {
        const float e = expf(sd_cu_sub(xr[i], mx));
        xr[i] = e;
        s = sd_cu_add(s, e);
    }
    s = sd_cu_block_sum(s, red);
    const float inv = sd_cu_div(1.0f, s);
    for (int32_t i = threadIdx.x; i < n; i += SD_CU_SOFTMAX_THREADS)
        xr[i] = sd_cu_mul(xr[i], inv);
}

void sd_cu_softmax(sd_cuda_backend *c, float *x, int32_t n_rows, int32_t n) {
    sd_cu_softmax_k<<<(unsigned)n_rows, SD_CU_SOFTMAX_THREADS, 0, c->stream>>>(x, n);
    sd_cu_launched(c, "softmax", "softmax");
}
