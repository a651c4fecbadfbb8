/*
 * quant/pack_impl.h: PRIVATE to quant/ (pack.c, the kernel sets in quant/cpu/ and the
 * white-box tests tests/test_quant*.c). Not a face: other parts use quant/sd_quant.h.
 *
 * The packed weight layout ("x16", sd_quant.h: Packed weights). A matrix of `rows`
 * rows of a quantized type is cut into groups of SD_PACK_ROWS = 16 consecutive rows
 * (the last group padded with all-zero rows). A group holds, for each of its nb blocks
 * (32 elements, or 256 for the K-quants) in block order, the block's MAIN part, then,
 * after all nb main parts, the TAIL parts of the nb blocks, then zero padding to a
 * multiple of 64 bytes. So a group is nb * main + round_up(nb * tail, 64) bytes, every
 * main part starts 64-byte aligned (main is a multiple of 64), and groups follow each
 * other.
 *
 * Main part: the block's byte arrays (segments), each SEG_LEN bytes per row (a multiple
 * of 4), "4-byte interleaved": bytes [4v, 4v + 4) of the segment of row r (r < 16) are
 * at main offset seg_off + 64 v + 4 r. So one 64-byte vector holds 4 consecutive bytes
 * of each of the 16 rows, 32-bit lane r = row r: the SIMD kernels run 16 rows in the 16
 * lanes of a vector, each lane's arithmetic that of one row alone.
 * Tail part: the block's fp16 fields (d, dmin or m), each as 16 consecutive fp16 (row r
 * at element r): 32 bytes per field.
 *
 * Two exceptions to "layout only, bytes unchanged", both bijections (no value changes)
 * that make the levels cheaper to unpack. Q6_K's low-nibble bytes ql and high-bit bytes
 * qh are stored regrouped by level (sd_pack_q6 / sd_unpack_q6, below): per half h of the
 * super-block and position l (0..31) the four 6-bit levels L0..L3 of elements
 * 128 h + 32 k + l (k = 0..3) are kept in the same three bytes as in the GGUF block
 * (ql[64 h + l], ql[64 h + 32 + l], qh[32 h + l]) but as P = L0 | (L2 >> 4) << 6, Q = L1 | (L3 >>
 * 4) << 6 and R = (L2 & 15) | (L3 & 15) << 4, so that L0 and L1 are one mask away (P & 63, Q & 63)
 * and L2, L3 three or four operations: 2.75 vector operations per level vector where
 * the GGUF grouping takes 4.25.
 * Q5_0 / Q5_1 alike (sd_pack_q5 / sd_unpack_q5): the 16 qs bytes and the qh word of a row's
 * block hold the 32 five-bit levels as qs'[j] = L_j | (L_{16 + j} & 7) << 5 and qh' byte i,
 * bits 2k, 2k + 1 = L_{16 + 4k + i} >> 3: level vector k < 4 (elements 4k + i) is
 * qs' & 31, one op; vector 4 + k three bits of qs' and two of qh' (five ops): 3 vector ops
 * per level vector where nibble + 5th bit took about 4.4 (the earlier layout kept qh with
 * its bits permuted, sd_pack_qh5 / sd_unpack_qh5: no longer used by the layout, kept with
 * their test).
 */
#ifndef SD_QUANT_PACK_IMPL_H
#define SD_QUANT_PACK_IMPL_H

#include "quant/sd_quant.h"

#include <string.h>

#define SD_PACK_MAX_SEGS   3
#define SD_PACK_MAX_FIELDS 2

typedef struct sd_pack_seg {
    uint16_t src; /* byte offset of the array in the GGUF block */
    uint16_t len; /* bytes per row (multiple of 4) */
    uint16_t dst; /* byte offset in the main part (= 16 * the lengths before it) */
} sd_pack_seg;

typedef struct sd_pack_layout {
    int n_segs;
    sd_pack_seg seg[SD_PACK_MAX_SEGS];
    int n_fields;
    uint16_t field_src[SD_PACK_MAX_FIELDS]; /* byte offsets of the fp16 fields */
    int qh5_seg;      /* index of the Q5_0 / Q5_1 qh segment (bits permuted), -1 if none */
    size_t main;      /* main bytes per block per group */
    size_t tail;      /* tail bytes per block per group (32 per field) */
    int64_t blk;      /* elements per block (32 or 256) */
    size_t blk_bytes; /* bytes of the GGUF block */
} sd_pack_layout;

/* The layout of type t, or NULL if t has none (float and activation types). */
const sd_pack_layout *sd_pack_layout_of(sd_type t);

/* Bytes of one group of rows of n_cols elements: nb * main + round_up(nb * tail, 64). */
static inline size_t sd_pack_group_stride(const sd_pack_layout *L, int64_t n_cols) {
    const size_t nb = (size_t)(n_cols / L->blk);
    return nb * L->main + ((nb * L->tail + 63u) & ~(size_t)63u);
}

/* Q5_0 / Q5_1 qh (bit j: 5th bit of element j) <-> the packed word: bit 8 i + c holds
 * element 4 c + i (c < 4, the low nibbles of nibble vector c) or 16 + 4 (c - 4) + i
 * (c >= 4, its high nibbles), i = 0..3. */
static inline uint32_t sd_pack_qh5(uint32_t qh) {
    uint32_t o = 0;
    for (int c = 0; c < 8; c++)
        for (int i = 0; i < 4; i++) {
            const int e = c < 4 ? 4 * c + i : 16 + 4 * (c - 4) + i;
            o |= ((qh >> e) & 1u) << (8 * i + c);
        }
    return o;
}
static inline uint32_t sd_unpack_qh5(uint32_t p) {
    uint32_t o = 0;
    for (int c = 0; c < 8; c++)
        for (int i = 0; i < 4; i++) {
            const int e = c < 4 ? 4 * c + i : 16 + 4 * (c - 4) + i;
            o |= ((p >> (8 * i + c)) & 1u) << e;
        }
    return o;
}

/* Q5_0 / Q5_1: the GGUF qs[16] and qh[4] (bit e: 5th bit of element e) of one block <-> the
 * packed regrouping (header comment), in place. */
static inline void sd_pack_q5(uint8_t *qs, uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    uint8_t L[32];
    for (int e = 0; e < 32; e++)
        L[e] = (uint8_t)((e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) | ((h >> e) & 1u) << 4);
    uint8_t o[4] = {0, 0, 0, 0};
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)(L[j] | (L[16 + j] & 7) << 5);
        o[j & 3] = (uint8_t)(o[j & 3] | (L[16 + j] >> 3) << (2 * (j >> 2)));
    }
    memcpy(qh, o, 4);
}
static inline void sd_unpack_q5(uint8_t *qs, uint8_t *qh) {
    uint8_t L[32];
    for (int j = 0; j < 16; j++) {
        L[j] = qs[j] & 31;
        L[16 + j] = (uint8_t)(qs[j] >> 5 | ((qh[j & 3] >> (2 * (j >> 2))) & 3) << 3);
    }
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 15) | (L[16 + j] & 15) << 4);
        h |= (uint32_t)(L[j] >> 4) << j | (uint32_t)(L[16 + j] >> 4) << (16 + j);
    }
    memcpy(qh, &h, 4);
}

/* Q6_K: the GGUF ql[128] / qh[64] of one block <-> the packed regrouping (header comment),
 * in place. */
static inline void sd_pack_q6(uint8_t *ql, uint8_t *qh) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t a = ql[64 * h + l], b = ql[64 * h + 32 + l], c = qh[32 * h + l];
            ql[64 * h + l] = (uint8_t)((a & 15) | (c & 3) << 4 | ((c >> 4) & 3) << 6);
            ql[64 * h + 32 + l] = (uint8_t)((b & 15) | ((c >> 2) & 3) << 4 | ((c >> 6) & 3) << 6);
            qh[32 * h + l] = (uint8_t)((a >> 4) | (b & 0xF0));
        }
}
static inline void sd_unpack_q6(uint8_t *ql, uint8_t *qh) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t p = ql[64 * h + l], q = ql[64 * h + 32 + l], r = qh[32 * h + l];
            ql[64 * h + l] = (uint8_t)((p & 15) | (r & 15) << 4);
            ql[64 * h + 32 + l] = (uint8_t)((q & 15) | (r & 0xF0));
            qh[32 * h + l] = (uint8_t)(((p >> 4) & 3) | ((q >> 4) & 3) << 2 | ((p >> 6) & 3) << 4 |
                                       ((q >> 6) & 3) << 6);
        }
}

/*
 * Packed activations (part B of the prepared activations for the packed kernels,
 * sd_quant.h) per token row, for weights of type wt (nb blocks of the row):
 *   32-element types (activation Q8_0 or Q8_S): nb records {float d; int32 corr}: d the
 *     block's activation scale as the reference kernel uses it (Q8_0: the fp16 d
 *     converted; Q8_S: d), corr = -off * (sum of the block's 32 quants) with off = 128
 *     (Q8_0 weights, run as w + 128), 8 (Q4_0: q - 8), 16 (Q5_0: q - 16), 0 (Q4_1, Q5_1);
 *   Q4_K / Q5_K: per super-block the 8 sums of its 32-element sub-blocks as int16 (the
 *     sum of two Q8_K bsums);
 *   other K-quants: none (the kernels read Q8_K's bsums in part A).
 */
typedef struct sd_xblk {
    float d;
    int32_t corr;
} sd_xblk;

/* Bytes of part B per token row of n_cols for weights of type wt (0: none). */
size_t sd_pack_act_tok_bytes(sd_type wt, int64_t n_cols);
/* Part B of token row b: xr its part-A row (sd_vec_dot_type(wt), n_cols), out its
 * sd_pack_act_tok_bytes bytes. */
void sd_pack_act_row(sd_type wt, const void *xr, int64_t n_cols, void *out);

#endif /* SD_QUANT_PACK_IMPL_H */
