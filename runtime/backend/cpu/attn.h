/*
 * runtime/backend/cpu/attn.h: PRIVATE to the CPU backend. The attention kernels, one
 * file per instruction set (attn_ref.c scalar reference, attn_avx2.c, attn_avx512.c),
 * and the driver (attention.c) that runs them over the KV cache.
 *
 * Attention kernels. One call handles a block of nh <= SD_ATT_HB query heads of one
 * token that share one KV head, so every K/V row of that KV head is read once for all
 * of them (GQA: n_head / n_head_kv heads share a KV head). Two kernels per level:
 *   scores: sc[h * scs + j] = dot(q_h, k_j) * scale     for j in [0, span)
 *   vsum  : out_h[d] += sc[h * scs + j] * v_j[d]          for j = 0, 1, .. span - 1
 * k_j / v_j: row j of a span (rows `stride` bytes apart) at the KV head's offset, F32
 * or F16 (converted to f32 exactly). The arithmetic, the same bits at every level:
 *   scores: 16 partial sums p[l], l = d mod 16, p[l] = fma(q[d], k[d], p[l]) for d
 *           ascending (columns past head_dim count as 0: p unchanged), then the tree
 *           p[l] += p[l + s] for s = 8, 4, 2, 1 (l < s), then p[0] * scale;
 *   vsum  : out_h[d] = fma(sc[h, j], v_j[d], out_h[d]) for j ascending.
 * So a value never depends on nh, the span split, the batch size, the thread count or
 * the instruction set. Levels: scalar (the reference), AVX2+FMA+F16C, AVX-512F; chosen
 * at backend init (sd_cpu_att_pick).
 */
#ifndef SD_BACKEND_CPU_ATTN_H
#define SD_BACKEND_CPU_ATTN_H

#include <string.h>

#include "kv/sd_kv.h"
#include "quant/sd_quant.h"

#define SD_ATT_HB    8  /* query heads per block (accumulators kept in registers) */
#define SD_ATT_LANES 16 /* partial sums of a score (the spec above) */

typedef void (*att_scores_fn)(const float *q, int32_t nh, int32_t hd, const void *k, size_t stride,
                              sd_type kt, int32_t span, float scale, float *sc, size_t scs);
typedef void (*att_vsum_fn)(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                            size_t stride, sd_type vt, int32_t span, float *out);

/* A K or V row stored as F16: dst[i] = fp16(src[i]) for i < n, rounded to nearest even
 * with NaN quieted: the bits of quant/fp16.c's sd_fp32_to_fp16 (which follows F16C). */
typedef void (*att_store_f16_fn)(const float *src, uint16_t *dst, int64_t n);

typedef struct sd_att_kernels {
    const char *name;
    att_scores_fn scores;
    att_vsum_fn vsum;
    att_store_f16_fn store_f16; /* NULL: sd_quantize_row (the scalar conversion) */
} sd_att_kernels;

extern const sd_att_kernels sd_att_scalar;
#if defined(__x86_64__)
extern const sd_att_kernels sd_att_avx2;
extern const sd_att_kernels sd_att_avx512;
/* F16C's vcvtps2ph, round to nearest even (attn_avx2.c; both x86 levels use it). */
void sd_att_store_f16_f16c(const float *src, uint16_t *dst, int64_t n);
#endif

/* The kernels called `name` ("scalar", "avx2", "avx512") if this CPU runs them, else NULL. */
const sd_att_kernels *sd_cpu_att_by_name(const char *name);
/* The best level this CPU runs, never above the matmul kernels' level (so SD_KERNELS,
 * which lowers that, lowers this too). */
const sd_att_kernels *sd_cpu_att_pick(void);

/* Rows of a quantized (Q8_0 / Q4_0) KV span the driver converts to f32 at a time. */
#define SD_ATT_TILE 32

/* Heads [h0, h0 + nh) (nh <= SD_ATT_HB) of one query row, all sharing KV head g, over keys
 * [k0, n_keys) of layer `layer` (k0 > 0: a sliding window; keys before k0 are never read), whatever
 * the cache's layout (contiguous or blocks: the driver walks sd_kv_span) and element type. q, out:
 * the rows of head h0 (heads head_dim apart). sc: scratch [SD_ATT_HB, scs], scs >= n_keys - k0 (key
 * j's score at j - k0). tile: scratch [SD_ATT_TILE, head_dim] for Q8_0 / Q4_0 rows: their head
 * slices are converted to f32 (exactly: a scale times an integer), SD_ATT_TILE rows at a time, and
 * the kernels run on the f32 tile, so a quantized cache gives the bits of an f32 cache holding its
 * dequantized values, at every kernel level. */
void sd_cpu_attend_block(const sd_att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                         int32_t layer, int32_t k0, int32_t n_keys, int32_t g, int32_t head_dim,
                         float scale, float *sc, size_t scs, float *tile, float *out);

/* As sd_cpu_attend_block over the keys of n_runs runs [run0[r], run0[r] + run_len[r]) in
 * order (a token tree's row: the committed context, then its ancestors and itself), every
 * run_len >= 1, their total <= scs: the o-th key seen has its score at sc[o]; softmax and the
 * value sum run over the keys in that order, so the bits are those of one run over the same
 * keys stored contiguously (each score is its own dot product; the sums run key by key). */
void sd_cpu_attend_runs(const sd_att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                        int32_t layer, const int32_t *run0, const int32_t *run_len, int32_t n_runs,
                        int32_t g, int32_t head_dim, float scale, float *sc, size_t scs,
                        float *tile, float *out);

/* Scalar tail element d of a K/V row. */
static inline float sd_att_elem(const void *row, sd_type t, int32_t d) {
    return t == SD_TYPE_F16 ? sd_fp16_to_fp32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

#endif /* SD_BACKEND_CPU_ATTN_H */
