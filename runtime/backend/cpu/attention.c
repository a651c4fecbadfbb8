/* runtime/backend/cpu/attention.c: the attention driver over the KV cache, contiguous or in
 * blocks, F32 / F16 / Q8_0 / Q4_0 (softmax in a fixed order per (token, head)), and the
 * choice of kernel level (see attn.h). */
#include "runtime/backend/cpu/attn.h"
#include "runtime/base/sd_base.h"

#include <math.h>
#include <string.h>

/* Elements [e0, e0 + n) of a quantized row (e0 and n multiples of 32) as f32: the
 * reference dequantization, x = d * q (Q8_0) or d * (q - 8) (Q4_0), each product exact. */
static void dequant_slice(sd_type t, const uint8_t *row, int32_t e0, int32_t n, float *y) {
    if (t == SD_TYPE_Q8_0) {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)row + e0 / SD_QK8_0;
        for (int32_t i = 0; i < n / SD_QK8_0; i++, y += SD_QK8_0) {
            const float d = sd_fp16_to_fp32(b[i].d);
            for (int32_t j = 0; j < SD_QK8_0; j++)
                y[j] = d * (float)b[i].qs[j];
        }
        return;
    }
    const sd_block_q4_0 *b = (const sd_block_q4_0 *)row + e0 / SD_QK4_0;
    for (int32_t i = 0; i < n / SD_QK4_0; i++, y += SD_QK4_0) {
        const float d = sd_fp16_to_fp32(b[i].d);
        for (int32_t j = 0; j < SD_QK4_0 / 2; j++) {
            y[j] = d * (float)((b[i].qs[j] & 0x0F) - 8);
            y[j + SD_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* The next run of keys [j, j + *len) of K (want_v 0) or V (1) of layer `layer` for KV
 * head g: rows `*stride` bytes apart in the cache's type *t, or, for a quantized cache,
 * at most SD_ATT_TILE rows converted into tile (then f32, head_dim apart). */
static const void *key_run(sd_kv *kv, int want_v, int32_t layer, int32_t j, int32_t n_keys,
                           int32_t g, int32_t head_dim, float *tile, int32_t *len, size_t *stride,
                           sd_type *t) {
    const sd_type kt = sd_kv_type(kv);
    int32_t span = sd_kv_span(kv, j);
    if (span > n_keys - j) span = n_keys - j;
    const size_t rb = sd_kv_row_bytes(kv);
    const uint8_t *row = want_v ? sd_kv_v(kv, layer, j) : sd_kv_k(kv, layer, j);
    if (kt == SD_TYPE_F32 || kt == SD_TYPE_F16) {
        *len = span;
        *stride = rb;
        *t = kt;
        return row + (size_t)g * (size_t)head_dim * (kt == SD_TYPE_F16 ? 2u : 4u);
    }
    if (span > SD_ATT_TILE) span = SD_ATT_TILE;
    for (int32_t r = 0; r < span; r++)
        dequant_slice(kt, row + (size_t)r * rb, g * head_dim, head_dim,
                      tile + (size_t)r * (size_t)head_dim);
    *len = span;
    *stride = (size_t)head_dim * sizeof(float);
    *t = SD_TYPE_F32;
    return tile;
}

void sd_cpu_attend_runs(const sd_att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                        int32_t layer, const int32_t *run0, const int32_t *run_len, int32_t n_runs,
                        int32_t g, int32_t head_dim, float scale, float *sc, size_t scs,
                        float *tile, float *out) {
    /* the o-th key seen (runs in order, keys ascending in each): its score at sc[o] */
    int32_t n = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        const int32_t end = run0[r] + run_len[r];
        for (int32_t j = run0[r]; j < end;) {
            int32_t len;
            size_t stride;
            sd_type t;
            const void *kb = key_run(kv, 0, layer, j, end, g, head_dim, tile, &len, &stride, &t);
            ak->scores(q, nh, head_dim, kb, stride, t, len, scale, sc + n, scs);
            j += len;
            n += len;
        }
    }
    float inv[SD_ATT_HB];
    for (int32_t h = 0; h < nh; h++) {
        float *s = sc + (size_t)h * scs;
        float mx = s[0];
        for (int32_t j = 1; j < n; j++)
            mx = s[j] > mx ? s[j] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < n; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        inv[h] = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    }
    memset(out, 0, (size_t)nh * (size_t)head_dim * sizeof(float));
    int32_t o = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        const int32_t end = run0[r] + run_len[r];
        for (int32_t j = run0[r]; j < end;) {
            int32_t len;
            size_t stride;
            sd_type t;
            const void *vb = key_run(kv, 1, layer, j, end, g, head_dim, tile, &len, &stride, &t);
            ak->vsum(sc + o, scs, nh, head_dim, vb, stride, t, len, out);
            j += len;
            o += len;
        }
    }
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = 0; d < head_dim; d++)
            out[(size_t)h * (size_t)head_dim + d] *= inv[h];
}

void sd_cpu_attend_block(const sd_att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                         int32_t layer, int32_t k0, int32_t n_keys, int32_t g, int32_t head_dim,
                         float scale, float *sc, size_t scs, float *tile, float *out) {
    /* keys [k0, n_keys): one run, key j's score at sc[j - k0] */
    const int32_t len = n_keys - k0;
    sd_cpu_attend_runs(ak, q, nh, kv, layer, &k0, &len, 1, g, head_dim, scale, sc, scs, tile, out);
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
    /* "avxvnni" (a matmul set only) caps attention at avx2: it has no attention set */
    static const char *const order[] = {"avx512", "avxvnni", "avx2", "scalar"};
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
