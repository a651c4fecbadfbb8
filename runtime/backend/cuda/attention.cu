/*
 * runtime/backend/cuda/attention.cu: causal attention over the KV cache with GQA, the key
 * axis split in chunks of SD_CU_ATT_CHUNK keys (flash-decoding), in two kernels:
 *
 *   split   : one block of SD_CU_ATT_THREADS per (chunk c, query head h, token t): thread i
 *             scores key j0 + i of the chunk (s_i = dot(q, k) * scale, fma over d in order;
 *             keys past the token's position are not scored), m_c = max s_i,
 *             l_c = sum exp(s_i - m_c) (the block's fixed tree over the chunk's slots,
 *             zeros past the last key), and o_c[d] = sum exp(s_i - m_c) v_i[d], the keys
 *             split into G = THREADS / head_dim fixed ranges of CHUNK / G keys (all threads
 *             busy: thread (g, d) sums range g for dimension d in key order), the G range
 *             sums added in range order;
 *   combine : one block per (head, token): M = max m_c, L = sum l_c exp(m_c - M),
 *             out[d] = (sum o_c[d] exp(m_c - M)) * (1 / L), chunks ascending.
 *
 * Fixed orders: nothing depends on n_tok, on the other tokens of the batch, or on how many
 * chunks a launch covers, and the chunk boundaries are multiples of SD_CU_ATT_CHUNK, so
 * token t's result is the same bits whether it is decoded alone or inside a verification
 * pass (tests/test_cuda_math.c emulates these formulas against a double-precision softmax).
 * Query head h reads KV head h / (n_head / n_head_kv). F16 rows are converted exactly.
 * Key j's row is the layer's row 0 + sd_cu_kv_off(map, j) (contiguous, or through a paged
 * sequence's block table): thread i finds key j0 + i's offset once and shares it in the
 * block, so a paged cache gives the bits of a contiguous one holding the same rows.
 * Tokens go SD_CU_ATT_TOK per launch pair, and heads as many as the partials scratch holds
 * (all of a model's: init sizes it for max_cols >= n_head * head_dim). In a captured graph the
 * position comes from the parameter block and the grid covers every chunk of the context (blocks
 * past a token's keys return at once).
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

/* Element d of a K / V row, and 8 elements d .. d + 7 (vec: 16-byte loads). */
template <int F16> __device__ __forceinline__ float sd_cu_kv_elem(const uint8_t *row, int32_t d) {
    if constexpr (F16)
        return sd_cu_fp16_to_fp32(__ldg((const uint16_t *)row + d));
    else
        return __ldg((const float *)row + d);
}

template <int F16>
__device__ __forceinline__ void sd_cu_kv_elem8(const uint8_t *row, int32_t d, int vec, float *o) {
    if (vec) {
        if constexpr (F16) {
            const uint4 u = __ldg((const uint4 *)((const uint16_t *)row + d));
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                o[2 * i] = sd_cu_fp16_to_fp32((uint16_t)(w[i] & 0xffffu));
                o[2 * i + 1] = sd_cu_fp16_to_fp32((uint16_t)(w[i] >> 16));
            }
        } else {
            const float4 a = __ldg((const float4 *)((const float *)row + d)),
                         b = __ldg((const float4 *)((const float *)row + d) + 1);
            o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
            o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[i] = sd_cu_kv_elem<F16>(row, d + i);
    }
}

template <int F16>
__global__ void __launch_bounds__(SD_CU_ATT_THREADS)
    sd_cu_att_split(const float *__restrict__ q, const uint8_t *__restrict__ kb,
                    const uint8_t *__restrict__ vb, size_t row_bytes, sd_cu_kvmap map, int32_t pos0,
                    const sd_cu_par *par, int32_t h0, int32_t n_head, int32_t nh, int32_t group,
                    int32_t hd, float scale, int32_t nc_cap, int vec, float *__restrict__ po,
                    float *__restrict__ pm, float *__restrict__ pl) {
    __shared__ float qs[SD_CU_ATT_MAX_HD];
    __shared__ float p[SD_CU_ATT_CHUNK];
    __shared__ float ov[SD_CU_ATT_THREADS];
    __shared__ float red[SD_CU_WARP + 1];
    __shared__ int64_t roff[SD_CU_ATT_CHUNK]; /* key j0 + i's row offset */
    const int32_t c = blockIdx.x, hl = blockIdx.y, h = h0 + hl, t = blockIdx.z;
    const int32_t n_keys = sd_cu_pos(pos0, par) + t + 1;
    const int32_t j0 = c * SD_CU_ATT_CHUNK;
    if (j0 >= n_keys) return; /* the whole block: this token sees no key of chunk c */
    const int32_t len = n_keys - j0 < SD_CU_ATT_CHUNK ? n_keys - j0 : SD_CU_ATT_CHUNK;
    const int tid = threadIdx.x;
    const size_t off = (size_t)(h / group) * (size_t)hd * (F16 ? 2u : 4u);
    const float *qr = q + ((int64_t)t * n_head + h) * hd;
    for (int32_t d = tid; d < hd; d += SD_CU_ATT_THREADS)
        qs[d] = qr[d];
    if (tid < len) roff[tid] = sd_cu_kv_off(map, j0 + tid, row_bytes);
    __syncthreads();
    float s = -INFINITY;
    if (tid < len) {
        const uint8_t *kr = kb + roff[tid] + off;
        float acc = 0.0f;
        int32_t d = 0;
        for (; d + 8 <= hd; d += 8) {
            float kv[8];
            sd_cu_kv_elem8<F16>(kr, d, vec, kv);
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc = sd_cu_fma(qs[d + i], kv[i], acc);
        }
        for (; d < hd; d++)
            acc = sd_cu_fma(qs[d], sd_cu_kv_elem<F16>(kr, d), acc);
        s = sd_cu_mul(acc, scale);
    }
    const float m = sd_cu_block_max(s, red);
    const float e = tid < len ? expf(sd_cu_sub(s, m)) : 0.0f;
    p[tid] = e; /* each thread writes only its own slot; block_sum's barriers publish it */
    const float l = sd_cu_block_sum(e, red);
    const int64_t slot = ((int64_t)t * nh + hl) * nc_cap + c;
    if (hd <= SD_CU_ATT_THREADS) {
        const int32_t G = SD_CU_ATT_THREADS / hd, KG = (SD_CU_ATT_CHUNK + G - 1) / G;
        const int32_t gi = tid / hd, d = tid % hd;
        if (gi < G) {
            float o = 0.0f;
            const int32_t i1 = (gi + 1) * KG < len ? (gi + 1) * KG : len;
            for (int32_t i = gi * KG; i < i1; i++)
                o = sd_cu_fma(p[i], sd_cu_kv_elem<F16>(vb + roff[i] + off, d), o);
            ov[tid] = o;
        }
        __syncthreads();
        if (tid < hd) {
            float o = ov[tid];
            for (int32_t g = 1; g < G; g++)
                o = sd_cu_add(o, ov[g * hd + tid]);
            po[slot * hd + tid] = o;
        }
    } else {
        for (int32_t d = tid; d < hd; d += SD_CU_ATT_THREADS) {
            float o = 0.0f;
            for (int32_t i = 0; i < len; i++)
                o = sd_cu_fma(p[i], sd_cu_kv_elem<F16>(vb + roff[i] + off, d), o);
            po[slot * hd + d] = o;
        }
    }
    if (tid == 0) {
        pm[slot] = m;
        pl[slot] = l;
    }
}

__global__ void __launch_bounds__(SD_CU_ATT_THREADS)
    sd_cu_att_combine(const float *__restrict__ po, const float *__restrict__ pm,
                      const float *__restrict__ pl, int32_t pos0, const sd_cu_par *par, int32_t h0,
                      int32_t n_head, int32_t nh, int32_t hd, int32_t nc_cap,
                      float *__restrict__ out) {
    const int32_t hl = blockIdx.x, h = h0 + hl, t = blockIdx.y;
    const int32_t n_keys = sd_cu_pos(pos0, par) + t + 1;
    const int32_t nc = (n_keys + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
    const int64_t base = ((int64_t)t * nh + hl) * nc_cap;
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

/* Shapes, the cache layout and the scratch were checked when the op was called. */
void sd_cu_attention(sd_cuda_backend *c, const sd_cu_op *op, const sd_cu_par *par) {
    const int32_t n_tok = op->n_tok, pos0 = op->pos0;
    const int32_t n_head = op->a.attention.n_head, hd = op->a.attention.head_dim;
    const int32_t group = n_head / op->a.attention.n_head_kv;
    const size_t rb = op->a.attention.row_bytes;
    const int f16 = op->a.attention.f16;
    const size_t off_align = (size_t)hd * (f16 ? 2u : 4u);
    const sd_cu_kvmap map = op->a.attention.map;
    const int vec = rb % 16 == 0 && off_align % 16 == 0 &&
                    (uintptr_t)op->a.attention.kb % 16 == 0 && map.block_bytes % 16 == 0 &&
                    hd % 8 == 0;
    const float scale = sd_cu_div(1.0f, sqrtf((float)hd));
    /* heads per launch: what the partials hold (>= 1: init sizes them for SD_CU_ATT_MAX_HD) */
    const size_t per_head = (size_t)SD_CU_ATT_TOK * (size_t)c->att_nc;
    int32_t hpl = n_head;
    if ((size_t)hpl * per_head * (size_t)hd > c->att_o_elems)
        hpl = (int32_t)(c->att_o_elems / (per_head * (size_t)hd));
    if ((size_t)hpl * per_head > c->att_ml_elems) hpl = (int32_t)(c->att_ml_elems / per_head);
    for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_ATT_TOK) {
        const int32_t nt = n_tok - t0 < SD_CU_ATT_TOK ? n_tok - t0 : SD_CU_ATT_TOK;
        const int32_t p0 = pos0 + t0; /* par: t0 == 0 (graph steps have <= ATT_TOK tokens) */
        const int32_t nc =
            par ? c->cap_att_chunks : (p0 + nt + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
        const float *qt = op->a.attention.q + (int64_t)t0 * n_head * hd;
        float *ot = op->a.attention.out + (int64_t)t0 * n_head * hd;
        for (int32_t h0 = 0; h0 < n_head; h0 += hpl) {
            const int32_t nh = n_head - h0 < hpl ? n_head - h0 : hpl;
            const dim3 grid((unsigned)nc, (unsigned)nh, (unsigned)nt);
            if (f16)
                sd_cu_att_split<1><<<grid, SD_CU_ATT_THREADS, 0, c->stream>>>(
                    qt, op->a.attention.kb, op->a.attention.vb, rb, map, p0, par, h0, n_head, nh,
                    group, hd, scale, c->att_nc, vec, c->att_o, c->att_m, c->att_l);
            else
                sd_cu_att_split<0><<<grid, SD_CU_ATT_THREADS, 0, c->stream>>>(
                    qt, op->a.attention.kb, op->a.attention.vb, rb, map, p0, par, h0, n_head, nh,
                    group, hd, scale, c->att_nc, vec, c->att_o, c->att_m, c->att_l);
            if (!sd_cu_launched(c, "attention", "att_split")) return;
            sd_cu_att_combine<<<dim3((unsigned)nh, (unsigned)nt), SD_CU_ATT_THREADS, 0,
                                c->stream>>>(c->att_o, c->att_m, c->att_l, p0, par, h0, n_head, nh,
                                             hd, c->att_nc, ot);
            if (!sd_cu_launched(c, "attention", "att_combine")) return;
        }
    }
}
