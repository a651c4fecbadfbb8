/*
 * runtime/backend/cuda/kv_store.cu: K, V [n_tok, kv_dim] -> the KV cache rows of layer l at
 * positions pos0 .. pos0 + n_tok - 1 (device memory; addresses from kv/, which never
 * dereferences them), one launch for both. F32 caches: copies. F16: sd_cu_fp32_to_fp16,
 * bit-identical to the CPU backend's sd_quantize_row(SD_TYPE_F16). The destination of
 * position p is the layer's row 0 + sd_cu_kv_off(map, p): p rows on when the rows are
 * contiguous from position 0, else through the sequence's block table (a paged cache:
 * kv/, blocks anywhere in the pool); the first position is pos0 by value or, in a
 * captured graph (contiguous caches only), from the parameter block.
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

template <int F16>
__global__ void sd_cu_kv_store_k(const float *__restrict__ k, const float *__restrict__ v,
                                 int64_t n, int32_t kv_dim, uint8_t *kb, uint8_t *vb,
                                 size_t row_bytes, sd_cu_kvmap map, int32_t pos0,
                                 const sd_cu_par *par) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * n) return;
    const int second = i >= n;
    const int64_t e = second ? i - n : i;
    const int64_t t = e / kv_dim, d = e % kv_dim;
    uint8_t *row =
        (second ? vb : kb) + sd_cu_kv_off(map, sd_cu_pos(pos0, par) + (int32_t)t, row_bytes);
    const float val = (second ? v : k)[e];
    if constexpr (F16)
        ((uint16_t *)row)[d] = sd_cu_fp32_to_fp16(val);
    else
        ((float *)row)[d] = val;
}

void sd_cu_kv_store(sd_cuda_backend *c, const sd_cu_op *op, const sd_cu_par *par) {
    const int64_t n = (int64_t)op->n_tok * op->a.kv_store.kv_dim;
    if (op->a.kv_store.f16)
        sd_cu_kv_store_k<1><<<sd_cu_blocks(2 * n, 256), 256, 0, c->stream>>>(
            op->a.kv_store.k, op->a.kv_store.v, n, op->a.kv_store.kv_dim, op->a.kv_store.kb,
            op->a.kv_store.vb, op->a.kv_store.row_bytes, op->a.kv_store.map, op->pos0, par);
    else
        sd_cu_kv_store_k<0><<<sd_cu_blocks(2 * n, 256), 256, 0, c->stream>>>(
            op->a.kv_store.k, op->a.kv_store.v, n, op->a.kv_store.kv_dim, op->a.kv_store.kb,
            op->a.kv_store.vb, op->a.kv_store.row_bytes, op->a.kv_store.map, op->pos0, par);
    sd_cu_launched(c, "kv_store", op->a.kv_store.f16 ? "kv_store (f16)" : "kv_store (f32)");
}
