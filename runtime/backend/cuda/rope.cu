/*
 * runtime/backend/cuda/rope.cu: RoPE in place on X [n_tok, n_head * head_dim] (sd_rope):
 * in every head, pairs (2i, 2i+1) or (NEOX) (i, i + n_rot/2), i < n_rot / 2, rotated by
 * theta = ((pos * freq_scale) * base^(-2i / n_rot)) / factor_i, one thread per (token,
 * head, pair), with the CPU backend's expressions (powf, cosf, sinf,
 * then x0 cos - x1 sin, x0 sin + x1 cos, each product rounded). The device's powf / cosf /
 * sinf are within 2 ulp of glibc's, not bit-identical: GPU and CPU logits differ by that.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

__global__ void sd_cu_rope_k(float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                             int32_t head_dim, int32_t n_rot, int32_t neox, float base,
                             float freq_scale, const float *__restrict__ factors) {
    const int32_t half = n_rot / 2;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n_tok * n_head * half) return;
    const int32_t i = (int32_t)(idx % half);
    const int32_t h = (int32_t)((idx / half) % n_head);
    const int32_t t = (int32_t)(idx / ((int64_t)half * n_head));
    const float pos = sd_cu_mul((float)(pos0 + t), freq_scale);
    const float freq = powf(base, sd_cu_div(-(float)(2 * i), (float)n_rot));
    float theta = sd_cu_mul(pos, freq);
    if (factors) theta = sd_cu_div(theta, factors[i]);
    const float cs = cosf(theta), sn = sinf(theta);
    /* pairs (2i, 2i+1) (SD_ROPE_NORM) or (i, i + n_rot/2) (SD_ROPE_NEOX) */
    float *p = x + ((int64_t)t * n_head + h) * head_dim + (neox ? i : 2 * i);
    const int32_t o = neox ? half : 1;
    const float x0 = p[0], x1 = p[o];
    p[0] = sd_cu_sub(sd_cu_mul(x0, cs), sd_cu_mul(x1, sn));
    p[o] = sd_cu_add(sd_cu_mul(x0, sn), sd_cu_mul(x1, cs));
}

void sd_cu_rope(sd_cuda_backend *c, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                int32_t head_dim, const sd_rope *r) {
    if (n_tok < 1 || n_head < 1 || r->n_rot < 2 || r->n_rot > head_dim) {
        sd_cu_failf(c, SD_ERR_ARG, "rope: %d tokens, %d heads, n_rot %d, head_dim %d", n_tok,
                    n_head, r->n_rot, head_dim);
        return;
    }
    const int64_t n = (int64_t)n_tok * n_head * (r->n_rot / 2);
    sd_cu_rope_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(
        x, n_tok, pos0, n_head, head_dim, r->n_rot, r->mode == SD_ROPE_NEOX, r->base,
        r->freq_scale, r->factors);
    sd_cu_launched(c, "rope", "rope");
}
