/*
 * quant/cpu/ref.c: the scalar reference row kernels (kernel set "scalar"), the
 * specification the SIMD sets are tested against. Plain C, no intrinsics.
 *
 * Dot products (weight row of n_cols elements, activation row of n_cols):
 *   F32/F16/BF16 weights x F32 activations (weights converted to float exactly): 32
 *     partial sums p[l], l = j mod 32, each p[l] = fma(w[j], x[j], p[l]) (one rounding)
 *     for j ascending, then the fixed tree p[l] += p[l + s] for s = 16, 8, 4, 2, 1
 *     (l < s), the result p[0]. (What 2 x 16 AVX-512 or 4 x 8 AVX2 lanes compute; the
 *     columns past n count as w = x = 0, which leaves every p[l] unchanged.)
 *   32-element blocks (ggml_vec_dot_q*_q8_0 / _q8_1): per block i an exact int32 dot
 *     isum_i = sum_j qw[j] * qx[j] with qw the signed level (Q8_0 q, Q4_0 q - 8,
 *     Q5_0 q - 16) or the unsigned one (Q4_1, Q5_1), then in float, blocks in order:
 *       sumf += (float)isum_i * (d_w * d_x)
 *     with d_x fp16 (Q8_0, for Q8_0 / Q4_0) or float (Q8_S, for Q5_0 / Q4_1 / Q5_1),
 *     and for Q4_1 / Q5_1 (min m_w) summ += m_w * ds_x with ds_x = d_x * (sum of the
 *     block's activation quants) from Q8_S; the result is sumf + summ.
 *   K-quants x Q8_K (ggml_vec_dot_q*_K_q8_K): per super-block the exact int32
 *       P = sum_g sc_g * sum_{j in g} q_j x_j   (g: the 16 groups of 16; 32-element
 *           sub-blocks count as two groups with the same scale)
 *     with q the unsigned level for Q2_K / Q4_K / Q5_K and the signed one for Q3_K
 *     (q - 4, scales sc - 32) and Q6_K (q - 32), and for the types with mins
 *       M = sum_g m_g * bsum_g   (bsum_g: the exact sum of x over group g, from Q8_K)
 *     then sumf += (d_x * d) * (float)P - (d_x * dmin) * (float)M  (no M term for Q3_K,
 *     Q6_K), super-blocks in order.
 * Each weight block is decoded once per row (for all tokens); per token the operations
 * and their order are fixed, so results do not depend on n_tok / r0 / r1.
 */
#include "quant/cpu/kernels.h"

#include <math.h>
#include <string.h>

#include "quant/quant_impl.h"

#define SD_RT 32 /* tokens per pass over a row: one decode of each block feeds them */

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations                                           */
/* ---------------------------------------------------------------------------------- */

/* Element j of a float-type weight row (exact conversion). */
static float ref_elem(sd_type t, const void *row, int64_t j) {
    switch (t) {
    case SD_TYPE_F16:
        return sd_fp16_to_fp32(((const uint16_t *)row)[j]);
    case SD_TYPE_BF16:
        return sd_bf16_to_fp32(((const uint16_t *)row)[j]);
    default:
        return ((const float *)row)[j];
    }
}

/* F32/F16/BF16 weights against F32 activations: 32 fused partial sums, fixed tree. */
static void ref_float(sd_type t, const void *w, size_t wrb, int64_t n, const void *xq,
                      int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t b = 0; b < n_tok; b++) {
            const float *xr = (const float *)xq + b * n;
            float p[32] = {0};
            for (int64_t j = 0; j < n; j++)
                p[j & 31] = fmaf(ref_elem(t, wr, j), xr[j], p[j & 31]);
            for (int s = 16; s >= 1; s /= 2)
                for (int l = 0; l < s; l++)
                    p[l] += p[l + s];
            y[b * ldy + r] = p[0];
        }
    }
}

static void ref_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_F32, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

static void ref_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_F16, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

static void ref_bf16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_float(SD_TYPE_BF16, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

/* ---------------------------------------------------------------------------------- */
/* 32-element blocks x Q8_0 / Q8_S                                                      */
/* ---------------------------------------------------------------------------------- */

/* One decoded weight block: levels q[32] in element order, scale d, min m (0 if none). */
typedef struct {
    int q[32];
    float d, m;
} dec32;

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Nibble levels of a split-order qs[16] (+ 5th bits h) minus off. */
static inline void nibbles(const uint8_t *qs, uint32_t h, int off, int *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) + (int)(((h >> j) & 1u) << 4) - off;
        q[j + 16] = (qs[j] >> 4) + (int)(((h >> (j + 16)) & 1u) << 4) - off;
    }
}

static void dec_block32(sd_type t, const void *wr, int64_t i, dec32 *o) {
    o->m = 0.0f;
    switch (t) {
    case SD_TYPE_Q8_0: {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        for (int j = 0; j < 32; j++)
            o->q[j] = b->qs[j];
        break;
    }
    case SD_TYPE_Q4_0: {
        const sd_block_q4_0 *b = (const sd_block_q4_0 *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        nibbles(b->qs, 0, 8, o->q);
        break;
    }
    case SD_TYPE_Q5_0: {
        const sd_block_q5_0 *b = (const sd_block_q5_0 *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        nibbles(b->qs, le32(b->qh), 16, o->q);
        break;
    }
    case SD_TYPE_Q4_1: {
        const sd_block_q4_1 *b = (const sd_block_q4_1 *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        o->m = sd_fp16_to_fp32(b->m);
        nibbles(b->qs, 0, 0, o->q);
        break;
    }
    default: { /* SD_TYPE_Q5_1 */
        const sd_block_q5_1 *b = (const sd_block_q5_1 *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        o->m = sd_fp16_to_fp32(b->m);
        nibbles(b->qs, le32(b->qh), 0, o->q);
        break;
    }
    }
}

/* Blocks of type t (32 elements) against Q8_0 (Q8_0, Q4_0 weights) or Q8_S (Q5_0, and
 * with the min term Q4_1, Q5_1). */
static void ref_blocks32(sd_type t, const void *w, size_t wrb, int64_t n, const void *xq,
                         int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = n / 32;
    const int xs = sd_vec_dot_type(t) == SD_TYPE_Q8_S;
    const int has_min = t == SD_TYPE_Q4_1 || t == SD_TYPE_Q5_1;
    const size_t xbb = xs ? sizeof(sd_block_q8_s) : sizeof(sd_block_q8_0);
    const size_t xrb = (size_t)nb * xbb;
    float sumf[SD_RT], summ[SD_RT];
    dec32 wd;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t b0 = 0; b0 < n_tok; b0 += SD_RT) {
            const int nt = (int)(n_tok - b0 < SD_RT ? n_tok - b0 : SD_RT);
            for (int k = 0; k < nt; k++)
                sumf[k] = summ[k] = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                dec_block32(t, wr, i, &wd);
                for (int k = 0; k < nt; k++) {
                    const char *xb = (const char *)xq + (size_t)(b0 + k) * xrb + (size_t)i * xbb;
                    const sd_block_q8_s *x8s = (const sd_block_q8_s *)xb;
                    const sd_block_q8_0 *x80 = (const sd_block_q8_0 *)xb;
                    const int8_t *qx = xs ? x8s->qs : x80->qs;
                    int32_t isum = 0;
                    for (int j = 0; j < 32; j++)
                        isum += wd.q[j] * qx[j];
                    const float dx = xs ? x8s->d : sd_fp16_to_fp32(x80->d);
                    sumf[k] += (float)isum * (wd.d * dx);
                    if (has_min) summ[k] += wd.m * x8s->ds;
                }
            }
            for (int k = 0; k < nt; k++)
                y[(b0 + k) * ldy + r] = has_min ? sumf[k] + summ[k] : sumf[k];
        }
    }
}

static void ref_q8_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_blocks32(SD_TYPE_Q8_0, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}
static void ref_q4_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_blocks32(SD_TYPE_Q4_0, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}
static void ref_q5_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_blocks32(SD_TYPE_Q5_0, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}
static void ref_q4_1(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_blocks32(SD_TYPE_Q4_1, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}
static void ref_q5_1(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    ref_blocks32(SD_TYPE_Q5_1, w, wrb, n, xq, n_tok, y, ldy, r0, r1);
}

/* ---------------------------------------------------------------------------------- */
/* K-quants x Q8_K                                                                      */
/* ---------------------------------------------------------------------------------- */

/* One decoded super-block: levels q[256] (unsigned for types with mins, signed for
 * Q3_K / Q6_K), per-group (16 elements) scale sc and min mn (0 without mins), and the
 * super-block factors d, dmin. */
typedef struct {
    int q[256];
    int sc[16], mn[16];
    float d, dmin;
} deck;

static void dec_superblock(sd_type t, const void *wr, int64_t i, deck *o) {
    memset(o->mn, 0, sizeof o->mn);
    o->dmin = 0.0f;
    switch (t) {
    case SD_TYPE_Q2_K: {
        const sd_block_q2_k *b = (const sd_block_q2_k *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        o->dmin = sd_fp16_to_fp32(b->dmin);
        for (int g = 0; g < 16; g++) {
            o->sc[g] = b->scales[g] & 0x0F;
            o->mn[g] = b->scales[g] >> 4;
        }
        for (int e = 0; e < 256; e++)
            o->q[e] = (b->qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
        break;
    }
    case SD_TYPE_Q3_K: {
        const sd_block_q3_k *b = (const sd_block_q3_k *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        int8_t sc[16];
        sd_k3_scales(b->scales, sc);
        for (int g = 0; g < 16; g++)
            o->sc[g] = sc[g];
        for (int e = 0; e < 256; e++) {
            const int lo = (b->qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
            const int hb = (b->hmask[e & 31] >> (e >> 5)) & 1;
            o->q[e] = lo - (hb ? 0 : 4);
        }
        break;
    }
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K: {
        const int five = t == SD_TYPE_Q5_K;
        const sd_block_q4_k *b4 = (const sd_block_q4_k *)wr + i;
        const sd_block_q5_k *b5 = (const sd_block_q5_k *)wr + i;
        const uint8_t *scales = five ? b5->scales : b4->scales;
        const uint8_t *qs = five ? b5->qs : b4->qs;
        o->d = sd_fp16_to_fp32(five ? b5->d : b4->d);
        o->dmin = sd_fp16_to_fp32(five ? b5->dmin : b4->dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            sd_k4_scale_min(scales, s, &sc, &m);
            o->sc[2 * s] = o->sc[2 * s + 1] = sc;
            o->mn[2 * s] = o->mn[2 * s + 1] = m;
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = qs[32 * (s >> 1) + l];
                int q = (s & 1) ? (byte >> 4) : (byte & 0x0F);
                if (five) q |= ((b5->qh[l] >> s) & 1) << 4;
                o->q[32 * s + l] = q;
            }
        }
        break;
    }
    default: { /* SD_TYPE_Q6_K */
        const sd_block_q6_k *b = (const sd_block_q6_k *)wr + i;
        o->d = sd_fp16_to_fp32(b->d);
        for (int g = 0; g < 16; g++)
            o->sc[g] = b->scales[g];
        for (int e = 0; e < 256; e++) {
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            const uint8_t lo = b->ql[64 * h + 32 * (k & 1) + l];
            const int nib = (k >> 1) ? (lo >> 4) : (lo & 0x0F);
            o->q[e] = (nib | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
        }
        break;
    }
    }
}

static void ref_kquant(sd_type t, const void *w, size_t wrb, int64_t n, const void *xq,
                       int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = n / SD_QK_K;
    const int has_min = t == SD_TYPE_Q2_K || t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K;
    const size_t xrb = (size_t)nb * sizeof(sd_block_q8_k);
    float sumf[SD_RT];
    deck wd;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t b0 = 0; b0 < n_tok; b0 += SD_RT) {
            const int nt = (int)(n_tok - b0 < SD_RT ? n_tok - b0 : SD_RT);
            for (int k = 0; k < nt; k++)
                sumf[k] = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                dec_superblock(t, wr, i, &wd);
                for (int k = 0; k < nt; k++) {
                    const sd_block_q8_k *x =
                        (const sd_block_q8_k *)((const char *)xq + (size_t)(b0 + k) * xrb) + i;
                    int32_t p = 0, m = 0;
                    for (int g = 0; g < 16; g++) {
                        int32_t s = 0;
                        for (int j = 16 * g; j < 16 * g + 16; j++)
                            s += wd.q[j] * x->qs[j];
                        p += wd.sc[g] * s;
                        m += wd.mn[g] * x->bsums[g];
                    }
                    sumf[k] += (x->d * wd.d) * (float)p;
                    if (has_min) sumf[k] -= (x->d * wd.dmin) * (float)m;
                }
            }
            for (int k = 0; k < nt; k++)
                y[(b0 + k) * ldy + r] = sumf[k];
        }
    }
}

#define SD_REF_K(NAME, TYPE)                                                                       \
    static void NAME(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,          \
                     float *y, int64_t ldy, int64_t r0, int64_t r1) {                              \
        ref_kquant(TYPE, w, wrb, n, xq, n_tok, y, ldy, r0, r1);                                    \
    }
SD_REF_K(ref_q2_k, SD_TYPE_Q2_K)
SD_REF_K(ref_q3_k, SD_TYPE_Q3_K)
SD_REF_K(ref_q4_k, SD_TYPE_Q4_K)
SD_REF_K(ref_q5_k, SD_TYPE_Q5_K)
SD_REF_K(ref_q6_k, SD_TYPE_Q6_K)

const sd_kernel_set sd_kernels_scalar = {
    .name = "scalar",
    .lower = NULL,
    .k =
        {
            [SD_TYPE_F32] = {ref_f32, NULL},
            [SD_TYPE_F16] = {ref_f16, NULL},
            [SD_TYPE_BF16] = {ref_bf16, NULL},
            [SD_TYPE_Q8_0] = {ref_q8_0, NULL},
            [SD_TYPE_Q4_0] = {ref_q4_0, NULL},
            [SD_TYPE_Q5_0] = {ref_q5_0, NULL},
            [SD_TYPE_Q4_1] = {ref_q4_1, NULL},
            [SD_TYPE_Q5_1] = {ref_q5_1, NULL},
            [SD_TYPE_Q2_K] = {ref_q2_k, NULL},
            [SD_TYPE_Q3_K] = {ref_q3_k, NULL},
            [SD_TYPE_Q4_K] = {ref_q4_k, NULL},
            [SD_TYPE_Q5_K] = {ref_q5_k, NULL},
            [SD_TYPE_Q6_K] = {ref_q6_k, NULL},
        },
};
