/*
 * runtime/backend/cuda/elementwise.cu: swiglu (y = silu(g) * u, the CPU's expression
 * (g / (1 + exp(-g))) * u), add (y += x), and the fixed-order sum of an all-reduce's parts.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

__global__ void sd_cu_swiglu_k(const float *g, const float *u, int64_t n, float *y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    y[i] = sd_cu_mul(sd_cu_div(gi, sd_cu_add(1.0f, expf(-gi))), u[i]);
}

__global__ void sd_cu_add_k(float *y, const float *__restrict__ x, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sd_cu_add(y[i], x[i]);
}

/* y[t, i] += b[i] for every row t of y [n_tok, n]. */
__global__ void sd_cu_add_bias_k(float *y, const float *__restrict__ b, int64_t n_all, int32_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_all) y[i] = sd_cu_add(y[i], b[i % n]);
}

/* y[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...: rank order, every rank alike. */
__global__ void sd_cu_sum_parts_k(const float *__restrict__ parts, int32_t n_parts, int64_t n,
                                  float *y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = parts[i];
    for (int32_t r = 1; r < n_parts; r++)
        s = sd_cu_add(s, parts[(int64_t)r * n + i]);
    y[i] = s;
}

void sd_cu_swiglu(sd_cuda_backend *c, const float *g, const float *u, int64_t n, float *y) {
    sd_cu_swiglu_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(g, u, n, y);
    sd_cu_launched(c, "swiglu", "swiglu");
}

void sd_cu_add(sd_cuda_backend *c, float *y, const float *x, int64_t n) {
    sd_cu_add_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(y, x, n);
    sd_cu_launched(c, "add", "add");
}

void sd_cu_add_bias(sd_cuda_backend *c, float *y, const float *b, int32_t n_tok, int32_t n) {
    const int64_t n_all = (int64_t)n_tok * n;
    sd_cu_add_bias_k<<<sd_cu_blocks(n_all, 256), 256, 0, c->stream>>>(y, b, n_all, n);
    sd_cu_launched(c, "add_bias", "add_bias");
}

void sd_cu_sum_parts(sd_cuda_backend *c, const float *parts, int32_t n_parts, int64_t n, float *y) {
    if (n <= 0) return;
    sd_cu_sum_parts_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(parts, n_parts, n, y);
    sd_cu_launched(c, "allreduce", "sum_parts");
}
