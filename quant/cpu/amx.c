/*
 * quant/cpu/amx.c: AMX-INT8 packed kernels (kernel set "amx"; lower = avx512). Off by
 * default: chosen only with SD_KERNELS=amx on a CPU with AMX-TILE + AMX-INT8 + the
 * avx512 set, after Linux granted this process the tile state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, dispatch.c); anywhere else the set does not exist.
 *
 * Written against Intel's documented intrinsics (Intel Intrinsics Guide, AMX; Intel SDM
 * vol. 1 ch. 18 and vol. 2 TDPBSSD / TDPBSUD) and compiled everywhere, but NOT RUN on the
 * machine it was written on (an AMD EPYC without AMX): tests/test_quant_kernels.c runs it
 * against the scalar reference bit for bit where AMX exists and skips it with one line
 * where not.
 *
 * Why the packed layout fits AMX as it is: a 64-byte vector of the layout (4 consecutive
 * quants of each of 16 rows, pack_impl.h) is one row of a B tile in the VNNI layout
 * (B[k][4n + j] = W[n][4k + j]). A block's (or sub-block's, or group's) dot products of
 * 16 weight rows with up to 16 tokens are then one tile op: C[t][n] = sum over its K
 * elements of x_t * w_n, the exact int32 the other sets compute with vpdpbusd. Levels are
 * unpacked (as for AVX-512, x512.h) into a 64-byte-aligned buffer the B tile is loaded
 * from; the A tile is the tokens' part-A activation bytes themselves (row stride = the
 * activation row); C is stored and finished with the AVX-512 float code of avx512.c, in
 * the same order, so the bits are those of every other set:
 *   32-element blocks: K = 32 (B 8 rows); Q8_0 signed x signed (TDPBSSD, no offset),
 *     the others signed x unsigned (TDPBSUD) plus part B's offset correction;
 *   Q4_K / Q5_K: per 32-element sub-block, K = 32, then P += C * scale;
 *   Q2_K / Q3_K / Q6_K: per 16-element group, K = 16 (B 4 rows), then P += C * scale and
 *     the level offsets through the group sums as in avx512.c.
 * Fewer than SD_AMX_MIN tokens run the avx512 set's kernels (a tile op per block does not
 * pay for one token). Tokens go in chunks of at most 16 (tile rows), near-equal.
 */
#include "quant/cpu/x512.h"

#if defined(__x86_64__)

#define SD_TA                                                                                      \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,"       \
                          "f16c")))
#define SD_AMX_MIN 4  /* fewer tokens: the avx512 kernels */
#define SD_AMX_M   16 /* tokens per tile (tile rows) */

/* The tile configuration (palette 1): tile i has rows[i] rows of colsb[i] bytes. */
typedef struct amx_cfg {
    uint8_t palette_id, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) amx_cfg;

/* Tiles: 0 A (nt x 32), 1 B (8 x 64), 2 C (nt x 64), 3 / 4 A halves (nt x 16),
 * 5 / 6 B halves (4 x 64), 7 C of the second half (nt x 64). */
SD_TA static void amx_config(int nt) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    const uint16_t cb[8] = {32, 64, 64, 16, 16, 64, 64, 64};
    const uint8_t r[8] = {(uint8_t)nt, 8, (uint8_t)nt, (uint8_t)nt, (uint8_t)nt, 4, 4, (uint8_t)nt};
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = cb[i];
        c.rows[i] = r[i];
    }
    _tile_loadconfig(&c);
}

SD_TA SD_INL void store8(uint8_t *buf, const __m512i *w) {
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
        _mm512_store_si512((void *)(buf + 64 * k), w[k]);
}

/* 32-element blocks: one chunk of nt <= 16 tokens over one group. */
SD_TA SD_INL void amx32(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                        const int kind, int nt) {
    const size_t main = main32(kind);
    const int has_min = kind == K41 || kind == K51;
    const size_t tail = has_min ? 64 : 32;
    const size_t xbb = (kind == K8 || kind == K4) ? sizeof(sd_block_q8_0) : sizeof(sd_block_q8_s);
    const size_t qoff = (kind == K8 || kind == K4) ? 2 : 8;
    const uint8_t *tl = gp + (size_t)nb * main;
    uint8_t wbuf[512] __attribute__((aligned(64)));
    int32_t cbuf[SD_AMX_M * 16] __attribute__((aligned(64)));
    __m512 acc[SD_AMX_M], sm[SD_AMX_M];
    for (int t = 0; t < nt; t++)
        acc[t] = sm[t] = _mm512_setzero_ps();
    amx_config(nt);
    for (int64_t i = 0; i < nb; i++) {
        __m512i w[8];
        unpack32(gp + (size_t)i * main, kind, 1, w);
        store8(wbuf, w);
        _tile_loadd(1, wbuf, 64);
        _tile_loadd(0, xa + (size_t)i * xbb + qoff, sa);
        _tile_zero(2);
        if (kind == K8)
            _tile_dpbssd(2, 0, 1);
        else
            _tile_dpbsud(2, 0, 1);
        _tile_stored(2, cbuf, 64);
        const __m512 dw = ldh(tl + (size_t)i * tail);
        const __m512 dm = has_min ? ldh(tl + (size_t)i * tail + 32) : dw;
        for (int t = 0; t < nt; t++) {
            const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * xbb;
            const sd_xblk *xk = (const sd_xblk *)(xb + (size_t)t * sb) + i;
            __m512i s = _mm512_load_si512((const void *)(cbuf + 16 * t));
            if (kind != K8) s = _mm512_add_epi32(s, _mm512_set1_epi32(xk->corr));
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(xk->d));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
            if (has_min) sm[t] = _mm512_add_ps(sm[t], _mm512_mul_ps(dm, bcf(xr + 4)));
        }
    }
    _tile_release();
    for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(y + t * ldy, mask, has_min ? _mm512_add_ps(acc[t], sm[t]) : acc[t]);
}

/* K-quants: one chunk of nt <= 16 tokens over one group. */
SD_TA SD_INL void amxk(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                       const uint8_t *xb, size_t sb, float *y, int64_t ldy, __mmask16 mask,
                       const int kind, int nt) {
    const size_t main = main_k(kind);
    const size_t tail = (kind == KQ3 || kind == KQ6) ? 32 : 64;
    const int k45 = kind == KQ4 || kind == KQ5;
    const uint8_t *tl = gp + (size_t)nb * main;
    uint8_t wbuf[512] __attribute__((aligned(64)));
    int32_t cbuf[SD_AMX_M * 16] __attribute__((aligned(64)));
    int32_t cbuf2[SD_AMX_M * 16] __attribute__((aligned(64)));
    __m512 acc[SD_AMX_M];
    __m512i P[SD_AMX_M], M[SD_AMX_M];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    amx_config(nt);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        const uint8_t *x0 = xa + (size_t)i * XK + 4;
        for (int t = 0; t < nt; t++)
            P[t] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) { /* 32 elements: a sub-block (Q4_K / Q5_K) or 2 groups */
            __m512i w[8];
            if (k45)
                unpack_k45(mp, kind, s, w);
            else
                unpack_k236(mp, kind, s, w);
            store8(wbuf, w);
            if (k45) {
                _tile_loadd(1, wbuf, 64);
                _tile_loadd(0, x0 + 32 * s, sa);
                _tile_zero(2);
                _tile_dpbsud(2, 0, 1);
                _tile_stored(2, cbuf, 64);
                const __m512i sc = k45_scale(mp, 0, s);
                for (int t = 0; t < nt; t++)
                    P[t] = _mm512_add_epi32(
                        P[t],
                        _mm512_mullo_epi32(_mm512_load_si512((const void *)(cbuf + 16 * t)), sc));
            } else {
                _tile_loadd(5, wbuf, 64);
                _tile_loadd(6, wbuf + 256, 64);
                _tile_loadd(3, x0 + 32 * s, sa);
                _tile_loadd(4, x0 + 32 * s + 16, sa);
                _tile_zero(2);
                _tile_zero(7);
                _tile_dpbsud(2, 3, 5);
                _tile_dpbsud(7, 4, 6);
                _tile_stored(2, cbuf, 64);
                _tile_stored(7, cbuf2, 64);
                const __m512i sa0 = k_scale(mp, kind, 2 * s), sa1 = k_scale(mp, kind, 2 * s + 1);
                for (int t = 0; t < nt; t++) {
                    const __m512i a =
                        _mm512_mullo_epi32(_mm512_load_si512((const void *)(cbuf + 16 * t)), sa0);
                    const __m512i b =
                        _mm512_mullo_epi32(_mm512_load_si512((const void *)(cbuf2 + 16 * t)), sa1);
                    P[t] = _mm512_add_epi32(P[t], _mm512_add_epi32(a, b));
                }
            }
        }
        if (k45) {
            __m512i mp2[4];
            for (int j = 0; j < 4; j++)
                mp2[j] = pair16(k45_scale(mp, 1, 2 * j), k45_scale(mp, 1, 2 * j + 1));
            for (int t = 0; t < nt; t++) {
                const uint8_t *b32 = xb + (size_t)t * sb + (size_t)i * 16;
                __m512i m = _mm512_setzero_si512();
                for (int j = 0; j < 4; j++)
                    m = dpwssd_bc(m, mp2[j], b32 + 4 * j);
                M[t] = m;
            }
        } else {
            __m512i pc[8];
            for (int j = 0; j < 8; j++)
                pc[j] = k_pair(mp, kind, j);
            for (int t = 0; t < nt; t++) {
                const uint8_t *bs = xa + (size_t)t * sa + (size_t)i * XK + 260;
                __m512i c = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++)
                    c = dpwssd_bc(c, pc[j], bs + 4 * j);
                if (kind == KQ2)
                    M[t] = c;
                else
                    P[t] = _mm512_sub_epi32(P[t], _mm512_slli_epi32(c, kind == KQ3 ? 2 : 5));
            }
        }
        const int has_min = kind != KQ3 && kind != KQ6;
        kfinish(acc, P, M, xa, sa, i, ldh(tl + (size_t)i * tail),
                has_min ? ldh(tl + (size_t)i * tail + 32) : _mm512_setzero_ps(), has_min, nt);
    }
    _tile_release();
    for (int t = 0; t < nt; t++)
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

/* The driver: groups outer, chunks of <= 16 tokens inner; fewer than SD_AMX_MIN tokens go
 * to the avx512 kernel of the type. */
SD_TA SD_INL void run_amx(sd_type wt, const int kind, const void *wp, int64_t rows, int64_t n,
                          const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t g0,
                          int64_t g1) {
    if (n_tok < SD_AMX_MIN) {
        sd_kernels_avx512.k[wt].packed(wp, rows, n, xq, n_tok, y, ldy, g0, g1);
        return;
    }
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    const int64_t nb = n / L->blk;
    const size_t gs = sd_pack_group_stride(L, n);
    size_t sa = 0;
    (void)sd_type_row_bytes(sd_vec_dot_type(wt), n, &sa);
    const uint8_t *xa = (const uint8_t *)xq;
    const uint8_t *xb = xa + sd_act_partb_offset(wt, n_tok, n);
    const size_t sb = sd_pack_act_tok_bytes(wt, n);
    const int64_t nch = (n_tok + SD_AMX_M - 1) / SD_AMX_M;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gp = (const uint8_t *)wp + (size_t)g * gs;
        const int64_t left = rows - 16 * g;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        for (int64_t k = 0; k < nch; k++) {
            const int64_t t0 = n_tok * k / nch, t1 = n_tok * (k + 1) / nch;
            if (L->blk == 32)
                amx32(gp, nb, xa + (size_t)t0 * sa, sa, xb + (size_t)t0 * sb, sb,
                      y + t0 * ldy + 16 * g, ldy, mask, kind, (int)(t1 - t0));
            else
                amxk(gp, nb, xa + (size_t)t0 * sa, sa, xb + (size_t)t0 * sb, sb,
                     y + t0 * ldy + 16 * g, ldy, mask, kind, (int)(t1 - t0));
        }
    }
}

#define SD_AMX_KERNEL(NAME, KIND)                                                                  \
    SD_TA static void NAME(const void *wp, int64_t rows, int64_t n, const void *xq, int64_t n_tok, \
                           float *y, int64_t ldy, int64_t g0, int64_t g1) {                        \
        run_amx(KIND##_TYPE, KIND, wp, rows, n, xq, n_tok, y, ldy, g0, g1);                        \
    }
SD_AMX_KERNEL(amx_q8_0, K8)
SD_AMX_KERNEL(amx_q4_0, K4)
SD_AMX_KERNEL(amx_q5_0, K50)
SD_AMX_KERNEL(amx_q4_1, K41)
SD_AMX_KERNEL(amx_q5_1, K51)
SD_AMX_KERNEL(amx_q2_k, KQ2)
SD_AMX_KERNEL(amx_q3_k, KQ3)
SD_AMX_KERNEL(amx_q4_k, KQ4)
SD_AMX_KERNEL(amx_q5_k, KQ5)
SD_AMX_KERNEL(amx_q6_k, KQ6)

const sd_kernel_set sd_kernels_amx = {
    .name = "amx",
    .lower = &sd_kernels_avx512,
    .k =
        {
            [SD_TYPE_Q8_0] = {NULL, amx_q8_0},
            [SD_TYPE_Q4_0] = {NULL, amx_q4_0},
            [SD_TYPE_Q5_0] = {NULL, amx_q5_0},
            [SD_TYPE_Q4_1] = {NULL, amx_q4_1},
            [SD_TYPE_Q5_1] = {NULL, amx_q5_1},
            [SD_TYPE_Q2_K] = {NULL, amx_q2_k},
            [SD_TYPE_Q3_K] = {NULL, amx_q3_k},
            [SD_TYPE_Q4_K] = {NULL, amx_q4_k},
            [SD_TYPE_Q5_K] = {NULL, amx_q5_k},
            [SD_TYPE_Q6_K] = {NULL, amx_q6_k},
        },
};

#else  /* !__x86_64__ */
typedef int sd_matmul_amx_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
