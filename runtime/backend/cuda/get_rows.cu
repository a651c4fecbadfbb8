/*
 * runtime/backend/cuda/get_rows.cu: Y [n_tok, cols] = rows ids[0 .. n_tok) of W, dequantized
 * (the embedding lookup). Bit-identical to sd_dequantize_row (same unpack and one rounding
 * per element, sd_cuda_math.h). The ids are host values: they travel by value in the
 * kernel's parameters (SD_CU_IDS per launch), so a captured graph owns its copy.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#define SD_CU_IDS 256

struct sd_cu_ids {
    int32_t v[SD_CU_IDS];
};

/* Quantized: one thread per (token, 32-element block). */
template <class W>
__global__ void sd_cu_get_rows_q(const uint8_t *__restrict__ w, size_t row_bytes, int64_t cols,
                                 sd_cu_ids ids, int32_t n, float *__restrict__ y) {
    const int64_t nb = cols / SD_CU_QK;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb * n) return;
    const int64_t t = i / nb, b = i % nb;
    int32_t q[8];
    float d;
    W::unpack(w + (size_t)ids.v[t] * row_bytes + (size_t)b * W::block_bytes, q, &d);
    sd_cu_dequant_group(q, d, y + t * cols + b * SD_CU_QK);
}

/* Float types: one thread per element. */
template <class W>
__global__ void sd_cu_get_rows_f(const uint8_t *__restrict__ w, size_t row_bytes, int64_t cols,
                                 sd_cu_ids ids, int32_t n, float *__restrict__ y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cols * n) return;
    const int64_t t = i / cols, j = i % cols;
    W::template load<1>(w + (size_t)ids.v[t] * row_bytes, j, y + i);
}

void sd_cu_get_rows(sd_cuda_backend *c, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                    float *y) {
    const int64_t cols = w->cols;
    for (int32_t t = 0; t < n_tok; t++) {
        if (ids[t] < 0 || ids[t] >= w->rows) {
            sd_cu_failf(c, SD_ERR_ARG, "get_rows: id %d at index %d is out of range [0, %lld)",
                        ids[t], t, (long long)w->rows);
            return;
        }
    }
    const int ok = sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        for (int32_t t0 = 0; t0 < n_tok; t0 += SD_CU_IDS) {
            const int32_t n = n_tok - t0 < SD_CU_IDS ? n_tok - t0 : SD_CU_IDS;
            sd_cu_ids pack;
            for (int32_t i = 0; i < SD_CU_IDS; i++)
                pack.v[i] = i < n ? ids[t0 + i] : 0;
            float *yt = y + (int64_t)t0 * cols;
            if constexpr (W::kind == SD_CU_QUANT) {
                const int64_t work = cols / SD_CU_QK * n;
                sd_cu_get_rows_q<W><<<sd_cu_blocks(work, 128), 128, 0, c->stream>>>(
                    (const uint8_t *)w->data, w->row_bytes, cols, pack, n, yt);
            } else {
                sd_cu_get_rows_f<W><<<sd_cu_blocks(cols * n, 256), 256, 0, c->stream>>>(
                    (const uint8_t *)w->data, w->row_bytes, cols, pack, n, yt);
            }
            if (!sd_cu_launched(c, "get_rows", W::name)) return;
        }
    });
    if (!ok)
        sd_cu_failf(c, SD_ERR_UNSUPPORTED, "get_rows: no CUDA kernels for weight type %s",
                    sd_type_name((uint32_t)w->type));
}
