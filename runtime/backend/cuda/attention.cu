/*
 * runtime/backend/cuda/attention.cu: causal attention over the KV cache with GQA, the key
 * axis split in chunks of SD_CU_ATT_CHUNK keys (flash-decoding), in two kernels:
 *
 *   split   : one block per (chunk c, query head h, token t): scores s_j = dot(q, k_j) * scale
 *             for the keys j of chunk c that token t sees (j <= pos0 + t), then
 *             m_c = max s_j, l_c = sum exp(s_j - m_c), o_c[d] = sum exp(s_j - m_c) v_j[d];
 *   combine : one block per (head, token): M = max m_c, L = sum l_c exp(m_c - M),
 *             out[d] = (sum o_c[d] exp(m_c - M)) * (1 / L), chunks ascending.
 *
 * Fixed orders (never a function of n_tok, of the other tokens of the batch, or of how many
 * chunks a launch covers): a score is lane-strided fma over d (lane l: d = l, l + 32, ...)
 * then the warp butterfly; l_c is the block's fixed tree over the chunk's 128 slots (zeros
 * past the last key); o_c[d] is sequential over the chunk's keys; the combine is sequential
 * over chunks. The chunk boundaries are multiples of SD_CU_ATT_CHUNK, so token t's result is
 * the same bits whether it is decoded alone or inside a verification pass.
 * Query head h reads KV head h / (n_head / n_head_kv). F16 rows are converted exactly.
 * Tokens go SD_CU_ATT_TOK per launch pair (the partials scratch holds that many).
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

template <int F16> __device__ __forceinline__ float sd_cu_kv_elem(const void *row, int32_t d) {
    if constexpr (F16)
        return sd_cu_fp16_to_fp32(((const uint16_t *)row)[d]);
    else
        return ((const float *)row)[d];
}

template <int F16>
__global__ void __launch_bounds__(SD_CU_ATT_THREADS)
    sd_cu_att_split(const float *__restrict__ q, const uint8_t *__restrict__ kb,
                    const uint8_t *__restrict__ vb, size_t row_bytes, int32_t pos0, int32_t n_head,
                    int32_t group, int32_t hd, float scale, int32_t nc_cap, float *__restrict__ po,
                    float *__restrict__ pm, float *__restrict__ pl) {
    __shared__ float qs[SD_CU_ATT_MAX_HD];
    __shared__ float p[SD_CU_ATT_CHUNK];
    __shared__ float red[SD_CU_WARP + 1];
    const int32_t c = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
    const int32_t n_keys = pos0 + t + 1;
    const int32_t j0 = c * SD_CU_ATT_CHUNK;
    if (j0 >= n_keys) return; /* the whole block: this token sees no key of chunk c */
    const int32_t len = n_keys - j0 < SD_CU_ATT_CHUNK ? n_keys - j0 : SD_CU_ATT_CHUNK;
    const int tid = threadIdx.x, lane = tid % SD_CU_WARP, warp = tid / SD_CU_WARP;
    const size_t off = (size_t)(h / group) * (size_t)hd * (F16 ? 2u : 4u);
    const float *qr = q + ((int64_t)t * n_head + h) * hd;
    for (int32_t d = tid; d < hd; d += SD_CU_ATT_THREADS)
        qs[d] = qr[d];
    __syncthreads();
    for (int32_t i = warp; i < len; i += SD_CU_ATT_THREADS / SD_CU_WARP) {
        const uint8_t *kr = kb + (size_t)(j0 + i) * row_bytes + off;
        float s = 0.0f;
        for (int32_t d = lane; d < hd; d += SD_CU_WARP)
            s = sd_cu_fma(qs[d], sd_cu_kv_elem<F16>(kr, d), s);
        s = sd_cu_warp_sum(s);
        if (lane == 0) p[i] = sd_cu_mul(s, scale);
    }
    __syncthreads();
    const float m = sd_cu_block_max(tid < len ? p[tid] : -INFINITY, red);
    const float e = tid < len ? expf(sd_cu_sub(p[tid], m)) : 0.0f;
    p[tid] = e; /* each thread rewrites only its own slot; block_sum's barriers publish it */
    const float l = sd_cu_block_sum(e, red);
    const int64_t slot = ((int64_t)t * n_head + h) * nc_cap + c;
    for (int32_t d = tid; d < hd; d += SD_CU_ATT_THREADS) {
        float o = 0.0f;
        for (int32_t i = 0; i < len; i++)
            o = sd_cu_fma(p[i], sd_cu_kv_elem<F16>(vb + (size_t)(j0 + i) * row_bytes + off, d), o);
        po[slot * hd + d] = o;
    }
    if (tid == 0) {
        pm[slot] = m;
        pl[slot] = l;
    }
}

__global__ void __launch_bounds__(SD_CU_ATT_THREADS)
    sd_cu_att_combine(const float *__restrict__ po, const float *__restrict__ pm,
                      const float *__restrict__ pl, int32_t pos0, int32_t n_head, int32_t hd,
                      int32_t nc_cap, float *__restrict__ out) {
    const int32_t h = blockIdx.x, t = blockIdx.y;
    const int32_t n_keys = pos0 + t + 1;
    const int32_t nc = (n_keys + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
    const int64_t base = ((int64_t)t * n_head + h) * nc_cap;
    float mx = pm[base];
    for (int32_t c = 1; c < nc; c++)
        mx = fmaxf(mx, pm[base + c]);
    float sum = 0.0f;
    for (int32_t c = 0; c < nc; c++)
        sum = sd_cu_fma(pl[base + c], expf(sd_cu_sub(pm[base + c], mx)), sum);
    const float inv = sd_cu_div(1.0f, sum);
    for (int32_t d = threadIdx.x; d < hd; d += SD_CU_ATT_THREADS) {
        float o = 0.0f;
        for (int32_t c = 0; c < nc; c++)
            o = sd_cu_fma(po[(base + c) * hd + d], expf(sd_cu_sub(pm[base + c], mx)), o);
        out[((int64_t)t * n_head + h) * hd + d] = sd_cu_mul(o, inv);
    }
}

void sd_cu_attention(sd_cuda_backend *c, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                     int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                     float *out) {
    const int32_t n_keys = pos0 + n_tok;
    if (n_tok < 1 || pos0 < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 ||
        head_dim < 1 || head_dim > SD_CU_ATT_MAX_HD || n_head_kv * head_dim != sd_kv_dim(kv) ||
        n_keys > c->n_ctx || n_keys > sd_kv_capacity(kv) ||
        (size_t)SD_CU_ATT_TOK * n_head * c->att_nc * head_dim > c->att_o_elems ||
        (size_t)SD_CU_ATT_TOK * n_head * c->att_nc > c->att_ml_elems) {
        sd_cu_failf(c, SD_ERR_ARG,
                    "attention: %d tokens at position %d, %d heads (%d KV) of %d: outside what "
                    "init sized (n_ctx %d, max_cols %lld, head_dim <= %d) or the cache",
                    n_tok, pos0, n_head, n_head_kv, head_dim, c->n_ctx, (long long)c->max_cols,
                    SD_CU_ATT_MAX_HD);
        return;
    }
    if (sd_kv_span(kv, 0) < n_keys) {
        sd_cu_failf(c, SD_ERR_UNSUPPORTED,
                    "attention: keys 0 .. %d are not contiguous in the cache (paged caches are "
                    "not supported by the CUDA backend yet)",
                    n_keys - 1);
        return;
    }
    const uint8_t *kb = (const uint8_t *)sd_kv_k(kv, layer, 0);
    const uint8_t *vb = (const uint8_t *)sd_kv_v(kv, layer, 0);
    if (!kb || !vb) {
        sd_cu_failf(c, SD_ERR_ARG, "attention: layer %d is not in the cache", layer);
        return;
    }
    const int f16 = sd_kv_type(kv) == SD_TYPE_F16;
    const size_t rb = sd_kv_row_bytes(kv);
    const int32_t group = n_head / n_head_kv;
    const float scale = sd_cu_div(1.0f, sqrtf((float)head_dim));
    for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_ATT_TOK) {
        const int32_t nt = n_tok - t0 < SD_CU_ATT_TOK ? n_tok - t0 : SD_CU_ATT_TOK;
        const int32_t p0 = pos0 + t0;
        const int32_t nc = (p0 + nt + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
        const float *qt = q + (int64_t)t0 * n_head * head_dim;
        const dim3 grid((unsigned)nc, (unsigned)n_head, (unsigned)nt);
        if (f16)
            sd_cu_att_split<1><<<grid, SD_CU_ATT_THREADS, 0, c->stream>>>(
                qt, kb, vb, rb, p0, n_head, group, head_dim, scale, c->att_nc, c->att_o, c->att_m,
                c->att_l);
        else
            sd_cu_att_split<0><<<grid, SD_CU_ATT_THREADS, 0, c->stream>>>(
                qt, kb, vb, rb, p0, n_head, group, head_dim, scale, c->att_nc, c->att_o, c->att_m,
                c->att_l);
        if (!sd_cu_launched(c, "attention", "att_split")) return;
        sd_cu_att_combine<<<dim3((unsigned)n_head, (unsigned)nt), SD_CU_ATT_THREADS, 0,
                            c->stream>>>(c->att_o, c->att_m, c->att_l, p0, n_head, head_dim,
                                         c->att_nc, out + (int64_t)t0 * n_head * head_dim);
        if (!sd_cu_launched(c, "attention", "att_combine")) return;
    }
}
