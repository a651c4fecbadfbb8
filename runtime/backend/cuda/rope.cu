/*
 * runtime/backend/cuda/rope.cu: RoPE in place on X [n_tok, n_head * head_dim] (sd_rope):
 * in every head, pairs (2i, 2i+1) or (NEOX) (i, i + n_rot/2), i < n_rot / 2, rotated by
 * theta = ((pos * freq_scale) * base^(-2i / n_rot)) / factor_i, one thread per (token,
 * head, pair), with the CPU backend's expressions (powf, cosf, sinf,
 * then x0 cos - x1 sin, x0 sin + x1 cos, each product rounded). The device's powf / cosf /
 * sinf are within 2 ulp of glibc's, not bit-identical: GPU and CPU logits differ by that.
 * Q and K of a layer (same tokens, positions and rotation) go in one launch: the threads of
 * the first n_head1 heads rotate x1, the others x2.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

__global__ void sd_cu_rope_k(float *x1, int32_t n_head1, float *x2, int32_t n_head2, int32_t n_tok,
                             int32_t pos0, const sd_cu_par *par, int32_t head_dim, int32_t n_rot,
                             int32_t neox, float base, float freq_scale,
                             const float *__restrict__ factors) {
    const int32_t half = n_rot / 2, nh = n_head1 + n_head2;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n_tok * nh * half) return;
    const int32_t i = (int32_t)(idx % half);
    int32_t h = (int32_t)((idx / half) % nh);
    const int32_t t = (int32_t)(idx / ((int64_t)half * nh));
    float *x = x1;
    int32_t n_head = n_head1;
    if (h >= n_head1) {
        x = x2, h -= n_head1, n_head = n_head2;
    }
    const float pos = sd_cu_mul((float)(sd_cu_pos(pos0, par) + t), freq_scale);
    const float freq = powf(base, sd_cu_div(-(float)(2 * i), (float)n_rot));
    float theta = sd_cu_mul(pos, freq);
    if (factors) theta = sd_cu_div(theta, factors[i]);
    const float cs = cosf(theta), sn = sinf(theta);
    /* pairs (2i, 2i+1) (SD_ROPE_NORM) or (i, i + n_rot/2) (SD_ROPE_NEOX) */
    float *p = x + ((int64_t)t * n_head + h) * head_dim + (neox ? i : 2 * i);
    const int32_t o = neox ? half : 1;
    const float x0 = p[0], x1v = p[o];
    p[0] = sd_cu_sub(sd_cu_mul(x0, cs), sd_cu_mul(x1v, sn));
    p[o] = sd_cu_add(sd_cu_mul(x0, sn), sd_cu_mul(x1v, cs));
}

void sd_cu_rope(sd_cuda_backend *c, float *x1, int32_t n_head1, float *x2, int32_t n_head2,
                int32_t n_tok, int32_t pos0, int32_t head_dim, const sd_rope *r,
                const sd_cu_par *par) {
    if (!x2) n_head2 = 0;
    const int64_t n = (int64_t)n_tok * (n_head1 + n_head2) * (r->n_rot / 2);
    sd_cu_rope_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(
        x1, n_head1, x2, n_head2, n_tok, pos0, par, head_dim, r->n_rot, r->mode == SD_ROPE_NEOX,
        r->base, r->freq_scale, r->factors);
    sd_cu_launched(c, "rope", x2 ? "rope (q and k)" : "rope");
}
