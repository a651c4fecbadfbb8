/*
 * quant/cpu/avx512.c: AVX-512 kernels (kernel set "avx512"; needs AVX-512 F, BW, VL and
 * VNNI plus AVX2/FMA/F16C, checked by the dispatcher in dispatch.c). No global -m flags:
 * functions carry __attribute__((target(...))). Non-x86-64 builds compile this file to
 * nothing.
 *
 * Packed kernels (every quantized weight type; layout: quant/pack_impl.h). One 64-byte
 * vector holds 4 consecutive quants of each of 16 rows, so one VNNI dpbusd with the 4
 * matching activation bytes broadcast ({1to16}) adds 4 products to each row's lane: the
 * 32-bit lane r of every vector is row r, and its arithmetic is exactly that of row r
 * alone in the scalar reference (ref.c), in the same order:
 *   32-element blocks: isum (exact int32, started from part B's offset correction, so
 *     Q8_0 runs as w + 128 and Q4_0 / Q5_0 as their unsigned levels), then per block
 *     sumf += (float)isum * (d_w * d_x) and, for Q4_1 / Q5_1, summ += m_w * ds_x;
 *   K-quants: per super-block the exact int32 P (sub-block / group dots times their
 *     scales, vpmulld; Q3_K / Q6_K with the level offset taken out through the activation
 *     group sums, vpdpwssd) and M (mins times group sums, vpdpwssd), then
 *     sumf += (d_x * d) * (float)P, sumf -= (d_x * dmin) * (float)M.
 * Weights are unpacked once per block per tile of up to SD_PT tokens (a verification
 * pass of K + 1 <= 8 tokens unpacks each block once); tiles follow each other inside a
 * group, whose rows stay in L1 / L2. Output: 16 rows per store (masked for the last
 * group). The bits of (row, token) never depend on n_tok, the tile or the group range.
 *
 * F32 / F16 / BF16 x F32 (GGUF rows): two 16-lane FMA accumulators per token (lanes =
 * columns mod 32, the reference's 32 partial sums), masked loads for the tail, the fixed
 * reduction tree of ref.c (hsum16 of a0 + a1).
 * Activation Q8_0 quantization: vectorized, byte-identical to the reference.
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#include "quant/cpu/x512.h"

#define SD_NT 4 /* float kernels: tokens per tile */
#define SD_PT 8 /* packed kernels: most tokens per tile */

/* ---------------------------------------------------------------------------------- */
/* Packed kernels: the driver                                                           */
/* ---------------------------------------------------------------------------------- */

/* One tile: nt tokens over one group. xa: part-A row of the tile's first token (rows sa
 * bytes apart), xb: its part-B row (sb apart), y: output of its first token at the
 * group's first row. */
typedef void (*tile_fn)(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask);
/* The same for nt (9..SD_GT) tokens at once: each block unpacked once for all of them,
 * their accumulators in L1 (the GEMM form: prefill, wide passes). */
typedef void (*gemm_fn)(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                        int nt);

#define SD_GT 64 /* GEMM form: most tokens per call */

/* The prefetch lead of a tile of nt tokens: SD_PF_BYTES for one token (decode), longer for
 * wider tiles, whose block takes longer, so that the stream keeps enough lines in flight
 * while the arithmetic runs (docs/performance.md, twelfth round). */
#ifndef SD_PF_BYTES_WIDE
#define SD_PF_BYTES_WIDE 16384
#endif
#define PF_LEAD(nt) ((nt) > 1 ? (size_t)SD_PF_BYTES_WIDE : (size_t)SD_PF_BYTES)

SD_T SD_INL void run_packed(sd_type wt, const tile_fn *tab, gemm_fn gemm, const void *wp,
                            int64_t rows, int64_t n, const void *xq, int64_t n_tok, float *y,
                            int64_t ldy, int64_t g0, int64_t g1) {
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    const int64_t nb = n / L->blk;
    const size_t gs = sd_pack_group_stride(L, n);
    size_t sa = 0;
    (void)sd_type_row_bytes(sd_vec_dot_type(wt), n, &sa);
    const uint8_t *xa = (const uint8_t *)xq;
    const uint8_t *xb = xa + sd_act_partb_offset(wt, n_tok, n);
    const size_t sb = sd_pack_act_tok_bytes(wt, n);
    /* Up to SD_PT tokens: register tiles; more: GEMM calls of near-equal token chunks of at
     * most SD_GT. Either way each (row, token) gets the same instructions. */
    const int use_gemm = n_tok > SD_PT;
    const int64_t per = use_gemm ? SD_GT : SD_PT;
    const int64_t ntile = (n_tok + per - 1) / per;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gp = (const uint8_t *)wp + (size_t)g * gs;
        const int64_t left = rows - 16 * g;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        for (int64_t k = 0; k < ntile; k++) {
            const int64_t t0 = n_tok * k / ntile, t1 = n_tok * (k + 1) / ntile;
            if (use_gemm)
                gemm(gp, nb, xa + (size_t)t0 * sa, sa, xb + (size_t)t0 * sb, sb,
                     y + t0 * ldy + 16 * g, ldy, mask, (int)(t1 - t0));
            else
                tab[t1 - t0 - 1](gp, nb, xa + (size_t)t0 * sa, sa, xb + (size_t)t0 * sb, sb,
                                 y + t0 * ldy + 16 * g, ldy, mask);
        }
    }
}

#define SD_TILES(NAME, BODY, KIND)                                                                 \
    SD_T static void NAME##_1(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 1);                                          \
    }                                                                                              \
    SD_T static void NAME##_2(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 2);                                          \
    }                                                                                              \
    SD_T static void NAME##_3(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 3);                                          \
    }                                                                                              \
    SD_T static void NAME##_4(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 4);                                          \
    }                                                                                              \
    SD_T static void NAME##_5(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 5);                                          \
    }                                                                                              \
    SD_T static void NAME##_6(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 6);                                          \
    }                                                                                              \
    SD_T static void NAME##_7(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 7);                                          \
    }                                                                                              \
    SD_T static void NAME##_8(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m) {  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, 8);                                          \
    }                                                                                              \
    static const tile_fn NAME##_tab[SD_PT] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4,              \
                                              NAME##_5, NAME##_6, NAME##_7, NAME##_8};             \
    SD_T static void NAME##_g(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 m,    \
                              int nt) {                                                            \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, m, KIND, nt);                                         \
    }                                                                                              \
    SD_T static void NAME(const void *wp, int64_t rows, int64_t n, const void *xq, int64_t n_tok,  \
                          float *y, int64_t ldy, int64_t g0, int64_t g1) {                         \
        run_packed(KIND##_TYPE, NAME##_tab, NAME##_g, wp, rows, n, xq, n_tok, y, ldy, g0, g1);     \
    }

/* ---------------------------------------------------------------------------------- */
/* Packed 32-element blocks: Q8_0, Q4_0, Q5_0 (x Q8_0 / Q8_S), Q4_1, Q5_1 (x Q8_S)      */
/* ---------------------------------------------------------------------------------- */

SD_T SD_INL void tile32(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                        const int kind, const int nt) {
    const size_t main = main32(kind);
    const int has_min = kind == K41 || kind == K51;
    const size_t tail = has_min ? 64 : 32;
    const size_t xbb = (kind == K8 || kind == K4) ? sizeof(sd_block_q8_0) : sizeof(sd_block_q8_s);
    const size_t qoff = (kind == K8 || kind == K4) ? 2 : 8;
    const uint8_t *tl = gp + (size_t)nb * main;
    __m512 acc[SD_GT], sm[SD_GT];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = sm[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        sd_prefetch_at(mp, main, PF_LEAD(nt));
        __m512i w[8];
        unpack32(mp, kind, 0, w);
        const __m512 dw = ldh(tl + (size_t)i * tail);
        const __m512 dm = has_min ? ldh(tl + (size_t)i * tail + 32) : dw;
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
            const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * xbb;
            const sd_xblk *xk = (const sd_xblk *)(xb + (size_t)t * sb) + i;
            const __m512i s = dot4n(_mm512_set1_epi32(xk->corr), w, 8, xr + qoff);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(xk->d));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
            if (has_min) sm[t] = _mm512_add_ps(sm[t], _mm512_mul_ps(dm, bcf(xr + 4)));
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(y + t * ldy, mask, has_min ? _mm512_add_ps(acc[t], sm[t]) : acc[t]);
}

SD_TILES(p_q8_0, tile32, K8)
SD_TILES(p_q4_0, tile32, K4)
SD_TILES(p_q5_0, tile32, K50)
SD_TILES(p_q4_1, tile32, K41)
SD_TILES(p_q5_1, tile32, K51)

/* ---------------------------------------------------------------------------------- */
/* Packed K-quants x Q8_K                                                               */
/* ---------------------------------------------------------------------------------- */

/* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins (decoded where used, from
 * L1: kept in registers they would spill). */
SD_T SD_INL void tile_k45(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                          const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                          const int kind, const int nt) {
    const size_t main = main_k(kind);
    const uint8_t *tl = gp + (size_t)nb * main;
    __m512 acc[SD_GT];
    __m512i P[SD_GT], M[SD_GT];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) P[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int s = 0; s < 8; s++) {
            /* an eighth of the block's prefetch per sub-block, straight-line: sd_prefetch_at's
             * loop (GCC does not unroll 35 lines) cost 3 instructions more a line. The same
             * spread in the Q6_K tiles (here and x256.h's tile_q6_1) streamed from memory
             * 10-30% slower (docs/performance.md, tenth round): they keep the loop. */
            sd_prefetch_part(mp, main, PF_LEAD(nt), s, 8);
            __m512i w[8];
            unpack_k45(mp, kind, s, w);
            const __m512i sc = k45_scale(mp, 0, s);
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
                const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 32 * s;
                const __m512i d = dot4n(_mm512_setzero_si512(), w, 8, x);
                P[t] = _mm512_add_epi32(P[t], _mm512_mullo_epi32(d, sc));
            }
        }
        __m512i mp2[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) mp2[j] =
            pair16(k45_scale(mp, 1, 2 * j), k45_scale(mp, 1, 2 * j + 1));
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
            const uint8_t *b32 = xb + (size_t)t * sb + (size_t)i * 16;
            __m512i m = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) m =
                dpwssd_bc(m, mp2[j], b32 + 4 * j);
            M[t] = m;
        }
        kfinish(acc, P, M, xa, sa, i, ldh(tl + (size_t)i * 64), ldh(tl + (size_t)i * 64 + 32), 1,
                nt);
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

/* Q2_K / Q3_K / Q6_K: 16 groups of 16; element 128 h + 32 k + l from byte 32 h + l of the
 * 2-bit plane (Q2_K, Q3_K: bits 2k) or of ql / qh (Q6_K). Scales are decoded where they
 * are used (from L1): kept in registers they would spill. */
SD_T SD_INL void tile_k236(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                           const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                           const int kind, const int nt) {
    (void)xb;
    (void)sb;
    const size_t main = main_k(kind);
    const size_t tail = kind == KQ2 ? 64 : 32;
    const uint8_t *tl = gp + (size_t)nb * main;
    __m512 acc[SD_GT];
    __m512i P[SD_GT], M[SD_GT];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        sd_prefetch_at(mp, main, PF_LEAD(nt));
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) P[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int hk = 0; hk < 8; hk++) {
            __m512i w[8];
            unpack_k236(mp, kind, hk, w);
            const __m512i sa0 = k_scale(mp, kind, 2 * hk), sa1 = k_scale(mp, kind, 2 * hk + 1);
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
                const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 32 * hk;
                const __m512i da = dot4n(_mm512_setzero_si512(), w, 4, x);
                const __m512i db = dot4n(_mm512_setzero_si512(), w + 4, 4, x + 16);
                P[t] = _mm512_add_epi32(P[t], _mm512_add_epi32(_mm512_mullo_epi32(da, sa0),
                                                               _mm512_mullo_epi32(db, sa1)));
            }
        }
        __m512i pc[8];
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] = k_pair(mp, kind, j);
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
            const uint8_t *bs = xa + (size_t)t * sa + (size_t)i * XK + 260;
            __m512i c = _mm512_setzero_si512();
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) c = dpwssd_bc(c, pc[j], bs + 4 * j);
            if (kind == KQ2)
                M[t] = c;
            else /* levels stored with the offset (4 or 32) added: take it out */
                P[t] = _mm512_sub_epi32(P[t], _mm512_slli_epi32(c, kind == KQ3 ? 2 : 5));
        }
        kfinish(acc, P, M, xa, sa, i, ldh(tl + (size_t)i * tail),
                kind == KQ2 ? ldh(tl + (size_t)i * tail + 32) : _mm512_setzero_ps(), kind == KQ2,
                nt);
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

SD_TILES(p_q2_k, tile_k236, KQ2)
SD_TILES(p_q3_k, tile_k236, KQ3)
SD_TILES(p_q4_k, tile_k45, KQ4)
SD_TILES(p_q5_k, tile_k45, KQ5)
SD_TILES(p_q6_k, tile_k236, KQ6)

/* ---------------------------------------------------------------------------------- */
/* Activation Q8_0 quantization                                                         */
/* ---------------------------------------------------------------------------------- */

/* Q8_0 quantization of an activation row, byte-identical to quant.c's reference
 * (ggml quantize_row_q8_0_ref): amax by a max reduction (order-free), d = amax / 127 and
 * id = 1 / d in scalar float, x * id in vector float (the same IEEE product), roundf
 * exactly as r = trunc(v), r += sign(v) if |v - r| >= 0.5 (v - r is exact), then int8.
 * |v| stays below 2^31 (|x| <= amax, finite id), so int32 conversion then signed
 * saturation to int8 equals quant.c's f_to_i8. A block with a NaN or an infinity, or
 * with 1 / d = inf (amax tiny), goes through the scalar reference. */
SD_T static void avx512_quant_q8_0(const float *x, void *vy, int64_t n) {
    sd_block_q8_0 *y = (sd_block_q8_0 *)vy;
    const __m512 sign = _mm512_set1_ps(-0.0f), half = _mm512_set1_ps(0.5f);
    const __m512 one = _mm512_set1_ps(1.0f), big = _mm512_set1_ps(3.40282347e38f);
    for (int64_t i = 0; i < n / SD_QK8_0; i++) {
        const float *xb = x + i * SD_QK8_0;
        const __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
        const __m512 aa = _mm512_abs_ps(a), ab = _mm512_abs_ps(b);
        if (_mm512_cmp_ps_mask(aa, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(ab, big, _CMP_NLE_UQ)) {
            sd_quantize_row(SD_TYPE_Q8_0, xb, y + i, SD_QK8_0);
            continue;
        }
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(aa, ab));
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!(id <= 3.40282347e38f)) { /* d tiny (subnormal): 1 / d = inf */
            sd_quantize_row(SD_TYPE_Q8_0, xb, y + i, SD_QK8_0);
            continue;
        }
        y[i].d = sd_fp32_to_fp16(d);
        const __m512 vid = _mm512_set1_ps(id);
        __m512i q[2];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m512 v = _mm512_mul_ps(h ? b : a, vid);
            __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 f = _mm512_abs_ps(_mm512_sub_ps(v, r));
            const __mmask16 up = _mm512_cmp_ps_mask(f, half, _CMP_GE_OQ);
            const __m512 sv = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
                _mm512_castps_si512(v), _mm512_castps_si512(sign), _mm512_castps_si512(one),
                0xEA)); /* (v & sign) | one = copysign(1, v) */
            r = _mm512_mask_add_ps(r, up, r, sv);
            q[h] = _mm512_cvttps_epi32(r);
        }
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtsepi32_epi8(q[0]));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtsepi32_epi8(q[1]));
    }
}

/* Q8_K quantization of an activation row (the K-quants' activations), byte-identical to
 * kquants.c's reference: the signed maximum (the first value of the largest magnitude:
 * max |x| by an order-free reduction, then the first lane equal to it), iscale = -127 / max
 * and d = 1 / iscale in scalar float, v = iscale * x in vector float (the same IEEE product),
 * round to nearest even (the reference's nearbyintf) and the clamp to [-128, 127]
 * (round_clamp: a v past a bound gives the bound, as rounding then clamping does), group
 * sums exact. A block with a NaN or an infinity goes through the reference. */
SD_T static void avx512_quant_q8_k(const float *x, void *vy, int64_t n) {
    sd_block_q8_k *y = (sd_block_q8_k *)vy;
    const __m512 big = _mm512_set1_ps(3.40282347e38f);
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        __m512 v[16], amax = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int k = 0; k < 16; k++) {
            v[k] = _mm512_loadu_ps(xb + 16 * k);
            const __m512 a = _mm512_abs_ps(v[k]);
            bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ);
            amax = _mm512_max_ps(amax, a);
        }
        if (bad) {
            sd_quantize_row(SD_TYPE_Q8_K, xb, y + i, SD_QK_K);
            continue;
        }
        const float am = _mm512_reduce_max_ps(amax);
        memset(&y[i], 0, sizeof y[i]);
        if (!(am > 0)) continue; /* all-zero block: d = 0 */
        float max = 0.0f;
        for (int k = 0; k < 16; k++) {
            const __mmask16 hit =
                _mm512_cmp_ps_mask(_mm512_abs_ps(v[k]), _mm512_set1_ps(am), _CMP_EQ_OQ);
            if (hit) {
                max = xb[16 * k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int k = 0; k < 16; k++) {
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(vs, v[k]),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
            const __m512i q = _mm512_cvttps_epi32(r);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
            y[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations. kind: 0 f32, 1 f16, 2 bf16              */
/* ---------------------------------------------------------------------------------- */

/* 16 weights from column j, lanes not in mask m read nothing and are 0. */
SD_T SD_INL __m512 load_w16(const void *wr, int64_t j, __mmask16 m, const int kind) {
    if (kind == 0) return _mm512_maskz_loadu_ps(m, (const float *)wr + j);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)wr + j);
    if (kind == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

SD_T SD_INL void fdot_tile(const void *wr, const float *const *xs, const int nt, int64_t n,
                           const int kind, float *res) {
    __m512 a0[SD_NT], a1[SD_NT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    const __mmask16 all = (__mmask16)0xFFFF;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512 w0 = load_w16(wr, j, all, kind), w1 = load_w16(wr, j + 16, all, kind);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + j), a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + j + 16), a1[t]);
        }
    }
    const int64_t rem = n - j; /* 0..31 */
    if (rem > 0) {
        const __mmask16 m0 = rem >= 16 ? all : (__mmask16)((1u << rem) - 1u);
        const __m512 w0 = load_w16(wr, j, m0, kind);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a0[t] =
            _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, xs[t] + j), a0[t]);
        if (rem > 16) {
            const __mmask16 m1 = (__mmask16)((1u << (rem - 16)) - 1u);
            const __m512 w1 = load_w16(wr, j + 16, m1, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a1[t] =
                _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, xs[t] + j + 16), a1[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) res[t] =
        hsum16(_mm512_add_ps(a0[t], a1[t]));
}

SD_T SD_INL void frows(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const float *xs[SD_NT];
    float res[SD_NT];
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        int64_t b = 0;
        for (; b + SD_NT <= n_tok; b += SD_NT) {
            for (int t = 0; t < SD_NT; t++)
                xs[t] = (const float *)xq + (b + t) * n;
            fdot_tile(wr, xs, SD_NT, n, kind, res);
            for (int t = 0; t < SD_NT; t++)
                y[(b + t) * ldy + r] = res[t];
        }
        for (; b < n_tok; b++) {
            xs[0] = (const float *)xq + b * n;
            fdot_tile(wr, xs, 1, n, kind, res);
            y[b * ldy + r] = res[0];
        }
    }
}

SD_T static void avx512_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 0);
}

SD_T static void avx512_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                            float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 1);
}

SD_T static void avx512_bf16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                             float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 2);
}

/* Quantized types run packed (the backend packs their weights at load); in GGUF rows
 * they run the scalar reference (lower sets have no row kernels for them either). */
/* Activation bytes of the compute roof's loop (8 tokens of 32). */
static const uint8_t k_peak_x[256] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* The compute roof's loop (kernels.h, sd_peak_loop): 8 tokens of 8 vpdpbusd with the
 * {1to16} broadcast from L1 (8 independent chains), as the packed kernels' inner loop. */
SD_T static double avx512_peak_loop(int64_t iters) {
    const uint8_t *xp = k_peak_x;
    __m512i w[8], acc[8];
    for (int k = 0; k < 8; k++) {
        w[k] = _mm512_set1_epi8((char)(k + 1));
        acc[k] = _mm512_setzero_si512();
    }
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+r"(xp)); /* reloads the activations */
        _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) acc[t] =
            dot4n(acc[t], w, 8, xp + 32 * t);
    }
    __m512i s = acc[0];
    for (int t = 1; t < 8; t++)
        s = _mm512_add_epi32(s, acc[t]);
    volatile int32_t sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return (double)iters * 8 * 8 * 64;
}

const sd_kernel_set sd_kernels_avx512 = {
    .name = "avx512",
    .lower = &sd_kernels_avx2,
    .peak = avx512_peak_loop,
    .k =
        {
            [SD_TYPE_F32] = {avx512_f32, NULL},
            [SD_TYPE_F16] = {avx512_f16, NULL},
            [SD_TYPE_BF16] = {avx512_bf16, NULL},
            [SD_TYPE_Q8_0] = {NULL, p_q8_0},
            [SD_TYPE_Q4_0] = {NULL, p_q4_0},
            [SD_TYPE_Q5_0] = {NULL, p_q5_0},
            [SD_TYPE_Q4_1] = {NULL, p_q4_1},
            [SD_TYPE_Q5_1] = {NULL, p_q5_1},
            [SD_TYPE_Q2_K] = {NULL, p_q2_k},
            [SD_TYPE_Q3_K] = {NULL, p_q3_k},
            [SD_TYPE_Q4_K] = {NULL, p_q4_k},
            [SD_TYPE_Q5_K] = {NULL, p_q5_k},
            [SD_TYPE_Q6_K] = {NULL, p_q6_k},
        },
    .quant = {[SD_TYPE_Q8_0] = avx512_quant_q8_0, [SD_TYPE_Q8_K] = avx512_quant_q8_k},
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx512_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
