/* runtime/backend/cpu/attn_ref.c: scalar attention kernels (the reference; see attn.h for
 * the arithmetic every level reproduces bit for bit). */
#include "runtime/backend/cpu/attn.h"

#include <math.h>

static void att_scores_scalar(const float *q, int32_t nh, int32_t hd, const void *k, size_t stride,
                              sd_type kt, int32_t span, float scale, float *sc, size_t scs) {
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        for (int32_t h = 0; h < nh; h++) {
            const float *qh = q + (size_t)h * (size_t)hd;
            float p[SD_ATT_LANES] = {0};
            for (int32_t d = 0; d < hd; d++)
                p[d % SD_ATT_LANES] = fmaf(qh[d], sd_att_elem(kr, kt, d), p[d % SD_ATT_LANES]);
            for (int s = SD_ATT_LANES / 2; s >= 1; s /= 2)
                for (int l = 0; l < s; l++)
                    p[l] += p[l + s];
            sc[(size_t)h * scs + (size_t)j] = p[0] * scale;
        }
    }
}

static void att_vsum_scalar(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                            size_t stride, sd_type vt, int32_t span, float *out) {
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t h = 0; h < nh; h++) {
            const float w = sc[(size_t)h * scs + (size_t)j];
            float *oh = out + (size_t)h * (size_t)hd;
            for (int32_t d = 0; d < hd; d++)
                oh[d] = fmaf(w, sd_att_elem(vr, vt, d), oh[d]);
        }
    }
}

const sd_att_kernels sd_att_scalar = {"scalar", att_scores_scalar, att_vsum_scalar, NULL};
