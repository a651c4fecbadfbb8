/* runtime/backend/cpu/attn_ref.c: scalar attention kernels (the reference; see attn.h). */
#include "runtime/backend/cpu/attn.h"

/* Elements [d0, d0 + n) of a K/V row as floats. */
static void row_to_f32(const void *row, sd_type t, int32_t d0, int32_t n, float *dst) {
    if (t == SD_TYPE_F16) {
        const uint16_t *r = (const uint16_t *)row + d0;
        for (int32_t i = 0; i < n; i++)
            dst[i] = sd_fp16_to_fp32(r[i]);
    } else {
        memcpy(dst, (const float *)row + d0, (size_t)n * sizeof(float));
    }
}

static void att_scores_scalar(const float *q, int32_t nh, int32_t hd, const void *k, size_t stride,
                              sd_type kt, int32_t span, float scale, float *sc, size_t scs) {
    float kc[SD_ATT_CHUNK];
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        float acc[SD_ATT_HB] = {0};
        for (int32_t d0 = 0; d0 < hd; d0 += SD_ATT_CHUNK) {
            const int32_t n = hd - d0 < SD_ATT_CHUNK ? hd - d0 : SD_ATT_CHUNK;
            row_to_f32(kr, kt, d0, n, kc);
            for (int32_t h = 0; h < nh; h++) {
                const float *qh = q + (size_t)h * (size_t)hd + d0;
                float s = acc[h];
                for (int32_t i = 0; i < n; i++)
                    s += qh[i] * kc[i];
                acc[h] = s;
            }
        }
        for (int32_t h = 0; h < nh; h++)
            sc[(size_t)h * scs + (size_t)j] = acc[h] * scale;
    }
}

static void att_vsum_scalar(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                            size_t stride, sd_type vt, int32_t span, float *out) {
    float vc[SD_ATT_CHUNK];
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d0 = 0; d0 < hd; d0 += SD_ATT_CHUNK) {
            const int32_t n = hd - d0 < SD_ATT_CHUNK ? hd - d0 : SD_ATT_CHUNK;
            row_to_f32(vr, vt, d0, n, vc);
            for (int32_t h = 0; h < nh; h++) {
                const float w = sc[(size_t)h * scs + (size_t)j];
                float *oh = out + (size_t)h * (size_t)hd + d0;
                for (int32_t i = 0; i < n; i++)
                    oh[i] += w * vc[i];
            }
        }
    }
}

const sd_att_kernels sd_att_scalar = {"scalar", att_scores_scalar, att_vsum_scalar};
