/*
 * runtime/backend/cuda/kv_store.cu: K, V [n_tok, kv_dim] -> the KV cache rows of layer l at
 * positions pos0 .. pos0 + n_tok - 1 (device memory; addresses from kv/, which never
 * dereferences them). F32 caches: copies. F16: sd_cu_fp32_to_fp16, bit-identical to the CPU
 * backend's sd_quantize_row(SD_TYPE_F16).
 */
#include "runtime/backend/cuda/cuda_impl.cuh"

__global__ void sd_cu_store_f16_k(const float *__restrict__ src, int64_t n,
                                  uint16_t *__restrict__ dst) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = sd_cu_fp32_to_fp16(src[i]);
}

void sd_cu_kv_store(sd_cuda_backend *c, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                    int32_t kv_dim, const float *k, const float *v) {
    if (n_tok < 1 || kv_dim != sd_kv_dim(kv) || pos0 < 0 || pos0 + n_tok > sd_kv_capacity(kv)) {
        sd_cu_failf(c, SD_ERR_ARG, "kv_store: %d rows of %d at position %d (cache: %d of %d)",
                    n_tok, kv_dim, pos0, sd_kv_capacity(kv), sd_kv_dim(kv));
        return;
    }
    if (sd_kv_span(kv, pos0) < n_tok) {
        sd_cu_failf(c, SD_ERR_UNSUPPORTED,
                    "kv_store: rows %d .. %d are not contiguous in the cache (paged caches are "
                    "not supported by the CUDA backend yet)",
                    pos0, pos0 + n_tok - 1);
        return;
    }
    void *kd = sd_kv_k(kv, layer, pos0), *vd = sd_kv_v(kv, layer, pos0);
    if (!kd || !vd) {
        sd_cu_failf(c, SD_ERR_ARG, "kv_store: layer %d is not in the cache", layer);
        return;
    }
    const int64_t n = (int64_t)n_tok * kv_dim;
    if (sd_kv_type(kv) == SD_TYPE_F16) {
        sd_cu_store_f16_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(k, n, (uint16_t *)kd);
        if (!sd_cu_launched(c, "kv_store", "store_f16 (K)")) return;
        sd_cu_store_f16_k<<<sd_cu_blocks(n, 256), 256, 0, c->stream>>>(v, n, (uint16_t *)vd);
        sd_cu_launched(c, "kv_store", "store_f16 (V)");
    } else {
        const size_t bytes = (size_t)n * sizeof(float);
        if (sd_cu_check(c, cudaMemcpyAsync(kd, k, bytes, cudaMemcpyDeviceToDevice, c->stream),
                        "kv_store", "cudaMemcpyAsync (K)"))
            sd_cu_check(c, cudaMemcpyAsync(vd, v, bytes, cudaMemcpyDeviceToDevice, c->stream),
                        "kv_store", "cudaMemcpyAsync (V)");
    }
}
