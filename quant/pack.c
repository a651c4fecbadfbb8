/*
 * quant/pack.c: the packed weight layout (x16, quant/pack_impl.h) for every quantized
 * weight type: the layout table, packing GGUF rows into it and back, and the packed
 * activations (part B) the packed kernels read. Plain C: the layout does not depend on
 * the kernel set, so every set that has packed kernels reads the same bytes.
 */
#include "quant/pack_impl.h"

#include <string.h>

/* Segments in the order of the GGUF block; dst = 16 * (lengths before). */
#define SEG(s, l, d)                                                                               \
    { (uint16_t)(s), (uint16_t)(l), (uint16_t)(d) }

static const sd_pack_layout k_layouts[] = {
    /* Q4_0: d | qs[16] */
    {1, {SEG(2, 16, 0)}, 1, {0}, -1, 256, 32, 32, sizeof(sd_block_q4_0)},
    /* Q4_1: d m | qs[16] */
    {1, {SEG(4, 16, 0)}, 2, {0, 2}, -1, 256, 64, 32, sizeof(sd_block_q4_1)},
    /* Q5_0: d | qh[4] qs[16]: qs first (level vectors 0..3), then qh (regrouped: pack_impl.h) */
    {2, {SEG(6, 16, 0), SEG(2, 4, 256)}, 1, {0}, -1, 320, 32, 32, sizeof(sd_block_q5_0)},
    /* Q5_1: d m | qh[4] qs[16] */
    {2, {SEG(8, 16, 0), SEG(4, 4, 256)}, 2, {0, 2}, -1, 320, 64, 32, sizeof(sd_block_q5_1)},
    /* Q8_0: d | qs[32] */
    {1, {SEG(2, 32, 0)}, 1, {0}, -1, 512, 32, 32, sizeof(sd_block_q8_0)},
    /* Q2_K: scales[16] qs[64] | d dmin */
    {2, {SEG(0, 16, 0), SEG(16, 64, 256)}, 2, {80, 82}, -1, 1280, 64, 256, sizeof(sd_block_q2_k)},
    /* Q3_K: hmask[32] qs[64] scales[12] | d */
    {3,
     {SEG(0, 32, 0), SEG(32, 64, 512), SEG(96, 12, 1536)},
     1,
     {108},
     -1,
     1728,
     32,
     256,
     sizeof(sd_block_q3_k)},
    /* Q4_K: d dmin | scales[12] qs[128] */
    {2, {SEG(4, 12, 0), SEG(16, 128, 192)}, 2, {0, 2}, -1, 2240, 64, 256, sizeof(sd_block_q4_k)},
    /* Q5_K: d dmin | scales[12] qh[32] qs[128] */
    {3,
     {SEG(4, 12, 0), SEG(16, 32, 192), SEG(48, 128, 704)},
     2,
     {0, 2},
     -1,
     2752,
     64,
     256,
     sizeof(sd_block_q5_k)},
    /* Q6_K: ql[128] qh[64] scales[16] | d */
    {3,
     {SEG(0, 128, 0), SEG(128, 64, 2048), SEG(192, 16, 3072)},
     1,
     {208},
     -1,
     3328,
     32,
     256,
     sizeof(sd_block_q6_k)},
};

const sd_pack_layout *sd_pack_layout_of(sd_type t) {
    switch (t) {
    case SD_TYPE_Q4_0:
        return &k_layouts[0];
    case SD_TYPE_Q4_1:
        return &k_layouts[1];
    case SD_TYPE_Q5_0:
        return &k_layouts[2];
    case SD_TYPE_Q5_1:
        return &k_layouts[3];
    case SD_TYPE_Q8_0:
        return &k_layouts[4];
    case SD_TYPE_Q2_K:
        return &k_layouts[5];
    case SD_TYPE_Q3_K:
        return &k_layouts[6];
    case SD_TYPE_Q4_K:
        return &k_layouts[7];
    case SD_TYPE_Q5_K:
        return &k_layouts[8];
    case SD_TYPE_Q6_K:
        return &k_layouts[9];
    default:
        return NULL;
    }
}

int sd_pack_bytes(sd_type wt, int64_t rows, int64_t cols, size_t *out) {
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    if (!L || rows < 0 || cols < 0 || cols % L->blk != 0) return -1;
    const uint64_t nb = (uint64_t)(cols / L->blk), ng = (uint64_t)((rows + 15) / 16);
    uint64_t a, b, g, tot;
    if (__builtin_mul_overflow(nb, (uint64_t)L->main, &a) ||
        __builtin_mul_overflow(nb, (uint64_t)L->tail, &b) || __builtin_add_overflow(b, 63u, &b))
        return -1;
    b &= ~(uint64_t)63;
    if (__builtin_add_overflow(a, b, &g) || __builtin_mul_overflow(g, ng, &tot) ||
        tot > (uint64_t)SIZE_MAX)
        return -1;
    *out = (size_t)tot;
    return 0;
}

/* Copy between a GGUF block of row r (blkp) and its place in a packed group (gp: the
 * group, i the block index, nb blocks): dir 0 packs, 1 unpacks. */
static void move_block(const sd_pack_layout *L, uint8_t *blkp, uint8_t *gp, int64_t i, int64_t nb,
                       int r, int dir) {
    uint8_t *main = gp + (size_t)i * L->main;
    for (int s = 0; s < L->n_segs; s++) {
        const sd_pack_seg *sg = &L->seg[s];
        for (int v = 0; v < sg->len / 4; v++) {
            uint8_t *pv = main + sg->dst + 64 * v + 4 * r, *bv = blkp + sg->src + 4 * v;
            if (s == L->qh5_seg) {
                uint32_t w;
                if (dir == 0) {
                    memcpy(&w, bv, 4);
                    w = sd_pack_qh5(w);
                    memcpy(pv, &w, 4);
                } else {
                    memcpy(&w, pv, 4);
                    w = sd_unpack_qh5(w);
                    memcpy(bv, &w, 4);
                }
            } else if (dir == 0) {
                memcpy(pv, bv, 4);
            } else {
                memcpy(bv, pv, 4);
            }
        }
    }
    uint8_t *tail = gp + (size_t)nb * L->main + (size_t)i * L->tail;
    for (int f = 0; f < L->n_fields; f++) {
        uint8_t *pf = tail + 32 * f + 2 * r, *bf = blkp + L->field_src[f];
        if (dir == 0)
            memcpy(pf, bf, 2);
        else
            memcpy(bf, pf, 2);
    }
}

void sd_pack_groups(sd_type wt, const void *w, size_t w_row_bytes, int64_t rows, int64_t cols,
                    int64_t g0, int64_t g1, void *out) {
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    if (!L) return;
    const int64_t nb = cols / L->blk;
    const size_t gs = sd_pack_group_stride(L, cols);
    uint8_t zero[sizeof(sd_block_q6_k) > 512 ? sizeof(sd_block_q6_k) : 512];
    memset(zero, 0, sizeof zero);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *gp = (uint8_t *)out + (size_t)g * gs;
        memset(gp + (size_t)nb * L->main, 0, gs - (size_t)nb * L->main); /* tails + padding */
        for (int r = 0; r < 16; r++) {
            const int64_t row = 16 * g + r;
            for (int64_t i = 0; i < nb; i++) {
                const uint8_t *src = row < rows ? (const uint8_t *)w + (size_t)row * w_row_bytes +
                                                      (size_t)i * L->blk_bytes
                                                : zero;
                if (wt == SD_TYPE_Q6_K) { /* levels regrouped (pack_impl.h) */
                    sd_block_q6_k b;
                    memcpy(&b, src, sizeof b);
                    sd_pack_q6(b.ql, b.qh);
                    move_block(L, (uint8_t *)&b, gp, i, nb, r, 0);
                    continue;
                }
                if (wt == SD_TYPE_Q5_0 || wt == SD_TYPE_Q5_1) { /* levels regrouped */
                    uint8_t b[sizeof(sd_block_q5_1)];
                    const size_t qh = wt == SD_TYPE_Q5_0 ? 2 : 4;
                    memcpy(b, src, L->blk_bytes);
                    sd_pack_q5(b + qh + 4, b + qh);
                    move_block(L, b, gp, i, nb, r, 0);
                    continue;
                }
                move_block(L, (uint8_t *)src, gp, i, nb, r, 0);
            }
        }
    }
}

void sd_unpack_groups(sd_type wt, const void *packed, int64_t rows, int64_t cols, int64_t g0,
                      int64_t g1, void *w, size_t w_row_bytes) {
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    if (!L) return;
    const int64_t nb = cols / L->blk;
    const size_t gs = sd_pack_group_stride(L, cols);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *gp = (uint8_t *)packed + (size_t)g * gs;
        for (int r = 0; r < 16 && 16 * g + r < rows; r++)
            for (int64_t i = 0; i < nb; i++) {
                uint8_t *dst =
                    (uint8_t *)w + (size_t)(16 * g + r) * w_row_bytes + (size_t)i * L->blk_bytes;
                move_block(L, dst, gp, i, nb, r, 1);
                if (wt == SD_TYPE_Q6_K) { /* back to the GGUF grouping (pack_impl.h) */
                    sd_block_q6_k b;
                    memcpy(&b, dst, sizeof b);
                    sd_unpack_q6(b.ql, b.qh);
                    memcpy(dst, &b, sizeof b);
                }
                if (wt == SD_TYPE_Q5_0 || wt == SD_TYPE_Q5_1) {
                    const size_t qh = wt == SD_TYPE_Q5_0 ? 2 : 4;
                    sd_unpack_q5(dst + qh + 4, dst + qh);
                }
            }
    }
}

/* ---------------------------------------------------------------------------------- */
/* Packed activations (part B)                                                          */
/* ---------------------------------------------------------------------------------- */

size_t sd_pack_act_tok_bytes(sd_type wt, int64_t n_cols) {
    switch (wt) {
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q4_1:
    case SD_TYPE_Q5_1:
        return (size_t)(n_cols / 32) * sizeof(sd_xblk);
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
        return (size_t)(n_cols / SD_QK_K) * 8 * sizeof(int16_t);
    default:
        return 0;
    }
}

void sd_pack_act_row(sd_type wt, const void *xr, int64_t n_cols, void *out) {
    const int64_t nb = n_cols / 32;
    switch (wt) {
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_0: {
        const sd_block_q8_0 *x = xr;
        const int off = wt == SD_TYPE_Q8_0 ? 128 : 8;
        sd_xblk *o = out;
        for (int64_t i = 0; i < nb; i++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++)
                s += x[i].qs[j];
            o[i].d = sd_fp16_to_fp32(x[i].d);
            o[i].corr = -off * s;
        }
        break;
    }
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q4_1:
    case SD_TYPE_Q5_1: {
        const sd_block_q8_s *x = xr;
        const int off = wt == SD_TYPE_Q5_0 ? 16 : 0;
        sd_xblk *o = out;
        for (int64_t i = 0; i < nb; i++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++)
                s += x[i].qs[j];
            o[i].d = x[i].d;
            o[i].corr = -off * s;
        }
        break;
    }
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K: {
        const sd_block_q8_k *x = xr;
        int16_t *o = out;
        for (int64_t i = 0; i < n_cols / SD_QK_K; i++)
            for (int s = 0; s < 8; s++)
                o[8 * i + s] = (int16_t)(x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
        break;
    }
    default:
        break;
    }
}
