/*
 * runtime/backend/cuda/get_rows.cu: Y [n_tok, cols] = rows ids[0 .. n_tok) of W, dequantized
 * (the embedding lookup). Bit-identical to sd_dequantize_row (same unpack and the same
 * roundings per element, sd_cuda_math.h). The ids are host values: they travel by value in
 * the kernel's parameters (SD_CU_IDS per launch), or, in a captured graph, from the device
 * parameter block the step writes before each replay.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#define SD_CU_IDS 256

struct sd_cu_ids {
    int32_t v[SD_CU_IDS];
};

__device__ __forceinline__ int32_t sd_cu_id(const sd_cu_ids &ids, const sd_cu_par *par, int64_t t) {
    return par ? par->ids[t] : ids.v[t];
}

/* 32-element blocks: one thread per (token, block). */
template <class W>
__global__ void sd_cu_get_rows_q32(const uint8_t *__restrict__ w, size_t row_bytes, int64_t cols,
                                   sd_cu_ids ids, const sd_cu_par *par, int32_t n,
                                   float *__restrict__ y) {
    const int64_t nb = cols / SD_CU_QK;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * n) return;
    const int64_t t = i / nb, b = i % nb;
    sd_cu_g32 g;
    W::unpack(w + (size_t)sd_cu_id(ids, par, t) * row_bytes + (size_t)b * W::block_bytes, &g);
    sd_cu_dequant_g32(&g, W::has_min, y + t * cols + b * SD_CU_QK);
}

/* K-quants: one thread per (token, 32-element part). */
template <class W>
__global__ void sd_cu_get_rows_qk(const uint8_t *__restrict__ w, size_t row_bytes, int64_t cols,
                                  sd_cu_ids ids, const sd_cu_par *par, int32_t n,
                                  float *__restrict__ y) {
    const int64_t np = cols / SD_CU_QK;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= np * n) return;
    const int64_t t = i / np, j = i % np;
    const uint8_t *blk =
        w + (size_t)sd_cu_id(ids, par, t) * row_bytes + (size_t)(j / 8) * W::block_bytes;
    sd_cu_kpart kp;
    W::part(blk, (int)(j % 8), &kp);
    const float d = W::d(blk), dmin = W::dmin(blk);
    float *o = y + t * cols + j * SD_CU_QK;
#pragma unroll 4
    for (int l = 0; l < SD_CU_QK; l++)
        o[l] = sd_cu_kpart_elem(&kp, l, d, dmin, W::has_min);
}

/* Float types: one thread per element. */
template <class W>
__global__ void sd_cu_get_rows_f(const uint8_t *__restrict__ w, size_t row_bytes, int64_t cols,
                                 sd_cu_ids ids, const sd_cu_par *par, int32_t n,
                                 float *__restrict__ y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cols * n) return;
    const int64_t t = i / cols, j = i % cols;
    y[i] = W::elem(w + (size_t)sd_cu_id(ids, par, t) * row_bytes, j);
}

/* ids were checked against w->rows when the op was called. */
void sd_cu_get_rows(sd_cuda_backend *c, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                    float *y, const sd_cu_par *par) {
    const int64_t cols = w->cols;
    sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_IDS) {
            const int32_t n = n_tok - t0 < SD_CU_IDS ? n_tok - t0 : SD_CU_IDS;
            sd_cu_ids pack;
            for (int32_t i = 0; i < SD_CU_IDS; i++)
                pack.v[i] = i < n && !par ? ids[t0 + i] : 0;
            float *yt = y + (int64_t)t0 * cols;
            const uint8_t *wd = (const uint8_t *)w->data;
            if constexpr (W::kind == SD_CU_KIND_Q32) {
                const int64_t work = cols / SD_CU_QK * n;
                sd_cu_get_rows_q32<W><<<sd_cu_blocks(work, 128), 128, 0, c->stream>>>(
                    wd, w->row_bytes, cols, pack, par, n, yt);
            } else if constexpr (W::kind == SD_CU_KIND_QK) {
                const int64_t work = cols / SD_CU_QK * n;
                sd_cu_get_rows_qk<W><<<sd_cu_blocks(work, 128), 128, 0, c->stream>>>(
                    wd, w->row_bytes, cols, pack, par, n, yt);
            } else {
                sd_cu_get_rows_f<W><<<sd_cu_blocks(cols * n, 256), 256, 0, c->stream>>>(
                    wd, w->row_bytes, cols, pack, par, n, yt);
            }
            if (!sd_cu_launched(c, "get_rows", W::name)) return;
        }
    });
}
