/* runtime/backend/cpu/attention.c: the attention driver over the KV cache (softmax in a
 * fixed order per (token, head)) and the choice of kernel level (see attn.h). */
#include "runtime/backend/cpu/attn.h"
#include "runtime/base/sd_base.h"

#include <math.h>
#include <string.h>

void sd_cpu_attend_block(const sd_att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                         int32_t layer, int32_t n_keys, int32_t g, int32_t head_dim, float scale,
                         float *sc, size_t scs, float *out) {
    const size_t stride = sd_kv_row_bytes(kv);
    const sd_type t = sd_kv_type(kv);
    const size_t off = (size_t)g * (size_t)head_dim * (t == SD_TYPE_F16 ? 2u : 4u);
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const uint8_t *kb = (const uint8_t *)sd_kv_k(kv, layer, j) + off;
        ak->scores(q, nh, head_dim, kb, stride, t, span, scale, sc + j, scs);
        j += span;
    }
    float inv[SD_ATT_HB];
    for (int32_t h = 0; h < nh; h++) {
        float *s = sc + (size_t)h * scs;
        float mx = s[0];
        for (int32_t j = 1; j < n_keys; j++)
            mx = s[j] > mx ? s[j] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < n_keys; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        inv[h] = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    }
    memset(out, 0, (size_t)nh * (size_t)head_dim * sizeof(float));
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const uint8_t *vb = (const uint8_t *)sd_kv_v(kv, layer, j) + off;
        ak->vsum(sc + j, scs, nh, head_dim, vb, stride, t, span, out);
        j += span;
    }
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = 0; d < head_dim; d++)
            out[(size_t)h * (size_t)head_dim + d] *= inv[h];
}

const sd_att_kernels *sd_cpu_att_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "scalar") == 0) return &sd_att_scalar;
#if defined(__x86_64__)
    const sd_cpu_features *f = sd_cpu_features_get();
    const int avx2 = f->avx2 && f->fma && f->f16c;
    if (strcmp(name, "avx2") == 0) return avx2 ? &sd_att_avx2 : NULL;
    if (strcmp(name, "avx512") == 0) return avx2 && f->avx512f ? &sd_att_avx512 : NULL;
#endif
    return NULL;
}

const sd_att_kernels *sd_cpu_att_pick(void) {
    static const char *const order[] = {"avx512", "avx2", "scalar"};
    const char *cap = sd_quant_kernels_name();
    size_t start = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (strcmp(cap, order[i]) == 0) start = i;
    for (size_t i = start; i < sizeof order / sizeof order[0]; i++) {
        const sd_att_kernels *k = sd_cpu_att_by_name(order[i]);
        if (k) return k;
    }
    return &sd_att_scalar;
}
