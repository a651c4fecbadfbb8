/*
 * quant/cpu/avx2.c: AVX2 + FMA + F16C kernels (kernel set "avx2"). Compiled without any
 * global -m flags: each function carries __attribute__((target("avx2,fma,f16c"))) and
 * is only called after the dispatcher (dispatch.c) checked the CPU. Non-x86-64 builds
 * compile this file to nothing.
 *
 * Packed kernels (every quantized weight type; layout: quant/pack_impl.h): the same
 * per-row arithmetic as the AVX-512 set and the scalar reference (kernels.h), on 8-row
 * halves of each 16-row group: the low 32 bytes of every 64-byte vector of the layout
 * hold rows 0..7, the high 32 bytes rows 8..15, and the tails' fp16 fields 8 + 8. The
 * 4-byte dot product of a lane is maddubs (unsigned weights x signed activations, pairs
 * in int16: no saturation, the unsigned levels are <= 63) then madd with 1; Q8_0 weights
 * are signed and use the sign trick, maddubs(|w|, sign(x, w)) (|w| <= 128, |x| <= 127).
 *
 * F32 / F16 / BF16 x F32 (GGUF rows): four 8-lane FMA accumulators per token (lanes =
 * columns mod 32, the reference's 32 partial sums), a masked tail, the reference's tree.
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "quant/pack_impl.h"

#define SD_T   __attribute__((target("avx2,fma,f16c")))
#define SD_INL static inline __attribute__((always_inline))
#define SD_NT  4 /* float kernels: tokens per tile */
#define SD_PT  4 /* packed kernels: most tokens per tile */

typedef __m256i v8i;
typedef __m256 v8f;

SD_T SD_INL v8i bc4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

SD_T SD_INL v8f bcf(const void *p) {
    float v;
    memcpy(&v, p, 4);
    return _mm256_set1_ps(v);
}

SD_T SD_INL v8i ld(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* 8 fp16 at p as floats. */
SD_T SD_INL v8f ldh(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* a | (b & c) */
SD_T SD_INL v8i or_and(v8i a, v8i b, v8i c) {
    return _mm256_or_si256(a, _mm256_and_si256(b, c));
}

SD_T SD_INL v8i shl(v8i v, const int s) {
    return s >= 0 ? _mm256_slli_epi32(v, s) : _mm256_srli_epi32(v, -s);
}

SD_T SD_INL v8i pair16(v8i a, v8i b) {
    return _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA);
}

/* s + the 4-byte dot products of unsigned w[0..n) with the activation bytes x[0 .. 4n). */
SD_T SD_INL v8i dot4n(v8i s, const v8i *w, const int n, const uint8_t *x) {
    const v8i one = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) s =
        _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], bc4(x + 4 * k)), one));
    return s;
}

/* Signed weights w (|w[k]| in aw[k]) with the sign trick. */
SD_T SD_INL v8i dot4n_signed(v8i s, const v8i *w, const v8i *aw, const int n, const uint8_t *x) {
    const v8i one = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) s = _mm256_add_epi32(
        s, _mm256_madd_epi16(_mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(bc4(x + 4 * k), w[k])),
                             one));
    return s;
}

/* Lanes < n of mask vectors for _mm256_maskstore_ps. */
SD_T SD_INL v8i lanes_lt(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---------------------------------------------------------------------------------- */
/* Packed kernels: the driver                                                           */
/* ---------------------------------------------------------------------------------- */

/* One tile: nt tokens over one 8-row half (ho = 0 or 32: its byte offset in every
 * 64-byte vector; its fp16 fields at ho / 2 in every 32-byte tail field). n_rows: rows
 * of the half that exist (1..8). */
typedef void (*tile_fn)(const uint8_t *gp, int64_t nb, int ho, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows);

SD_T SD_INL void run_packed(sd_type wt, const tile_fn *tab, const void *wp, int64_t rows, int64_t n,
                            const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t g0,
                            int64_t g1) {
    const sd_pack_layout *L = sd_pack_layout_of(wt);
    const int64_t nb = n / L->blk;
    const size_t gs = sd_pack_group_stride(L, n);
    size_t sa = 0;
    (void)sd_type_row_bytes(sd_vec_dot_type(wt), n, &sa);
    const uint8_t *xa = (const uint8_t *)xq;
    const uint8_t *xb = xa + sd_act_partb_offset(wt, n_tok, n);
    const size_t sb = sd_pack_act_tok_bytes(wt, n);
    const int64_t ntile = (n_tok + SD_PT - 1) / SD_PT;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gp = (const uint8_t *)wp + (size_t)g * gs;
        for (int half = 0; half < 2; half++) {
            const int64_t left = rows - 16 * g - 8 * half;
            if (left <= 0) break;
            for (int64_t k = 0; k < ntile; k++) {
                const int64_t t0 = n_tok * k / ntile, t1 = n_tok * (k + 1) / ntile;
                tab[t1 - t0 - 1](gp, nb, 32 * half, xa + (size_t)t0 * sa, sa, xb + (size_t)t0 * sb,
                                 sb, y + t0 * ldy + 16 * g + 8 * half, ldy,
                                 left >= 8 ? 8 : (int)left);
            }
        }
    }
}

SD_T SD_INL void store_rows(float *y, v8f v, int n_rows) {
    if (n_rows == 8)
        _mm256_storeu_ps(y, v);
    else
        _mm256_maskstore_ps(y, lanes_lt(n_rows), v);
}

#define SD_TILE_FN(NAME, BODY, KIND, NT)                                                           \
    SD_T static void NAME##_##NT(const uint8_t *gp, int64_t nb, int ho, const uint8_t *xa,         \
                                 size_t sa, const uint8_t *xb, size_t sb, float *y, int64_t ldy,   \
                                 int n_rows) {                                                     \
        BODY(gp, nb, ho, xa, sa, xb, sb, y, ldy, n_rows, KIND, NT);                                \
    }
#define SD_TILES(NAME, BODY, KIND)                                                                 \
    SD_TILE_FN(NAME, BODY, KIND, 1)                                                                \
    SD_TILE_FN(NAME, BODY, KIND, 2)                                                                \
    SD_TILE_FN(NAME, BODY, KIND, 3)                                                                \
    SD_TILE_FN(NAME, BODY, KIND, 4)                                                                \
    static const tile_fn NAME##_tab[SD_PT] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};             \
    SD_T static void NAME(const void *wp, int64_t rows, int64_t n, const void *xq, int64_t n_tok,  \
                          float *y, int64_t ldy, int64_t g0, int64_t g1) {                         \
        run_packed(KIND##_TYPE, NAME##_tab, wp, rows, n, xq, n_tok, y, ldy, g0, g1);               \
    }

/* ---------------------------------------------------------------------------------- */
/* Packed 32-element blocks                                                             */
/* ---------------------------------------------------------------------------------- */

enum { K8 = 8, K4 = 4, K50 = 50, K41 = 41, K51 = 51 };
#define K8_TYPE  SD_TYPE_Q8_0
#define K4_TYPE  SD_TYPE_Q4_0
#define K50_TYPE SD_TYPE_Q5_0
#define K41_TYPE SD_TYPE_Q4_1
#define K51_TYPE SD_TYPE_Q5_1

SD_T SD_INL void tile32(const uint8_t *gp, int64_t nb, int ho, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                        const int kind, const int nt) {
    const size_t main = kind == K8 ? 512 : (kind == K50 || kind == K51) ? 320 : 256;
    const int has_min = kind == K41 || kind == K51, has_h = kind == K50 || kind == K51;
    const size_t tail = has_min ? 64 : 32;
    const size_t xbb = (kind == K8 || kind == K4) ? sizeof(sd_block_q8_0) : sizeof(sd_block_q8_s);
    const size_t qoff = (kind == K8 || kind == K4) ? 2 : 8;
    const uint8_t *tl = gp + (size_t)nb * main + ho / 2;
    const v8i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    v8f acc[SD_PT], sm[SD_PT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = sm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main + ho;
        if (ho == 0) sd_prefetch_ahead(mp, main); /* the second half reads them from cache */
        v8i w[8], aw[8];
        if (kind == K8) {
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                w[k] = ld(mp + 64 * k);
                aw[k] = _mm256_sign_epi8(w[k], w[k]);
            }
        } else {
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const v8i v = ld(mp + 64 * k);
                w[k] = _mm256_and_si256(v, m4);
                w[4 + k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
        }
        if (has_h) {
            const v8i h = ld(mp + 256);
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) w[c] =
                or_and(w[c], shl(h, 4 - c), b4);
        }
        const v8f dw = ldh(tl + (size_t)i * tail);
        const v8f dm = has_min ? ldh(tl + (size_t)i * tail + 32) : dw;
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * xbb;
            const sd_xblk *xk = (const sd_xblk *)(xb + (size_t)t * sb) + i;
            const v8i s = kind == K8 ? dot4n_signed(_mm256_setzero_si256(), w, aw, 8, xr + qoff)
                                     : dot4n(_mm256_set1_epi32(xk->corr), w, 8, xr + qoff);
            const v8f d = _mm256_mul_ps(dw, _mm256_set1_ps(xk->d));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(s), d));
            if (has_min) sm[t] = _mm256_add_ps(sm[t], _mm256_mul_ps(dm, bcf(xr + 4)));
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
        store_rows(y + t * ldy, has_min ? _mm256_add_ps(acc[t], sm[t]) : acc[t], n_rows);
}

SD_TILES(p_q8_0, tile32, K8)
SD_TILES(p_q4_0, tile32, K4)
SD_TILES(p_q5_0, tile32, K50)
SD_TILES(p_q4_1, tile32, K41)
SD_TILES(p_q5_1, tile32, K51)

/* ---------------------------------------------------------------------------------- */
/* Packed K-quants x Q8_K                                                               */
/* ---------------------------------------------------------------------------------- */

enum { KQ2 = 2, KQ3 = 3, KQ4 = 4, KQ5 = 5, KQ6 = 6 };
#define KQ2_TYPE SD_TYPE_Q2_K
#define KQ3_TYPE SD_TYPE_Q3_K
#define KQ4_TYPE SD_TYPE_Q4_K
#define KQ5_TYPE SD_TYPE_Q5_K
#define KQ6_TYPE SD_TYPE_Q6_K

#define XK 292 /* bytes of a Q8_K block: d at 0, qs at 4, bsums at 260 */

SD_T SD_INL void kfinish(v8f *acc, const v8i *P, const v8i *M, const uint8_t *xa, size_t sa,
                         int64_t i, v8f dw, v8f dmn, const int has_min, const int nt) {
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
        const v8f xd = bcf(xa + (size_t)t * sa + (size_t)i * XK);
        acc[t] =
            _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_mul_ps(xd, dw), _mm256_cvtepi32_ps(P[t])));
        if (has_min)
            acc[t] = _mm256_sub_ps(acc[t],
                                   _mm256_mul_ps(_mm256_mul_ps(xd, dmn), _mm256_cvtepi32_ps(M[t])));
    }
}

/* int16-pair dot products of coefficient pairs pc[0..n) with the int16 pairs at b. */
SD_T SD_INL v8i pairdot(const v8i *pc, const int n, const uint8_t *b) {
    v8i c = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int j = 0; j < n; j++) c =
        _mm256_add_epi32(c, _mm256_madd_epi16(pc[j], bc4(b + 4 * j)));
    return c;
}

SD_T SD_INL void tile_k45(const uint8_t *gp, int64_t nb, int ho, const uint8_t *xa, size_t sa,
                          const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                          const int kind, const int nt) {
    const int five = kind == KQ5;
    const size_t main = five ? 2752 : 2240, qso = five ? 704 : 192;
    const uint8_t *tl = gp + (size_t)nb * main + ho / 2;
    const v8i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const v8i m63 = _mm256_set1_epi32(63), m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3);
    v8f acc[SD_PT];
    v8i P[SD_PT], M[SD_PT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main + ho;
        if (ho == 0) sd_prefetch_ahead(mp, main); /* the second half reads them from cache */
        const v8i S0 = ld(mp), S1 = ld(mp + 64), S2 = ld(mp + 128);
        v8i sc[8], mn[8];
        _Pragma("GCC unroll 4") for (int s = 0; s < 4; s++) {
            sc[s] = _mm256_and_si256(_mm256_srli_epi32(S0, 8 * s), m63);
            mn[s] = _mm256_and_si256(_mm256_srli_epi32(S1, 8 * s), m63);
            sc[4 + s] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(S2, 8 * s), m15),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(S0, 8 * s + 6), m3), 4));
            mn[4 + s] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(S2, 8 * s + 4), m15),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(S1, 8 * s + 6), m3), 4));
        }
        v8i mp2[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) mp2[j] =
            pair16(mn[2 * j], mn[2 * j + 1]);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) P[t] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            v8i w[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const v8i q = ld(mp + qso + 64 * (8 * (s >> 1) + k));
                w[k] = _mm256_and_si256((s & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
                if (five) w[k] = or_and(w[k], shl(ld(mp + 192 + 64 * k), 4 - s), b4);
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
                const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 32 * s;
                const v8i d = dot4n(_mm256_setzero_si256(), w, 8, x);
                P[t] = _mm256_add_epi32(P[t], _mm256_mullo_epi32(d, sc[s]));
            }
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) M[t] =
            pairdot(mp2, 4, xb + (size_t)t * sb + (size_t)i * 16);
        kfinish(acc, P, M, xa, sa, i, ldh(tl + (size_t)i * 64), ldh(tl + (size_t)i * 64 + 32), 1,
                nt);
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) store_rows(y + t * ldy, acc[t], n_rows);
}

SD_T SD_INL void tile_k236(const uint8_t *gp, int64_t nb, int ho, const uint8_t *xa, size_t sa,
                           const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                           const int kind, const int nt) {
    (void)xb;
    (void)sb;
    const size_t main = kind == KQ2 ? 1280 : kind == KQ3 ? 1728 : 3328;
    const size_t tail = kind == KQ2 ? 64 : 32;
    const uint8_t *tl = gp + (size_t)nb * main + ho / 2;
    const v8i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const v8i b2 = _mm256_set1_epi8(0x04), b45 = _mm256_set1_epi8(0x30);
    const v8i m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3);
    v8f acc[SD_PT];
    v8i P[SD_PT], M[SD_PT];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main + ho;
        if (ho == 0) sd_prefetch_ahead(mp, main); /* the second half reads them from cache */
        v8i sc[16], pc[8];
        if (kind == KQ2) {
            v8i mn[16];
            _Pragma("GCC unroll 16") for (int g = 0; g < 16; g++) {
                const v8i s = _mm256_srli_epi32(ld(mp + 64 * (g >> 2)), 8 * (g & 3));
                sc[g] = _mm256_and_si256(s, m15);
                mn[g] = _mm256_and_si256(_mm256_srli_epi32(s, 4), m15);
            }
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] =
                pair16(mn[2 * j], mn[2 * j + 1]);
        } else if (kind == KQ3) {
            const uint8_t *sp = mp + 1536;
            const v8i S2 = ld(sp + 128);
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                const v8i lo =
                    j < 8 ? _mm256_and_si256(_mm256_srli_epi32(ld(sp + 64 * (j >> 2)), 8 * (j & 3)),
                                             m15)
                          : _mm256_and_si256(_mm256_srli_epi32(ld(sp + 64 * ((j - 8) >> 2)),
                                                               8 * ((j - 8) & 3) + 4),
                                             m15);
                const v8i hi =
                    _mm256_and_si256(_mm256_srli_epi32(S2, 8 * (j & 3) + 2 * (j >> 2)), m3);
                sc[j] = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                         _mm256_set1_epi32(32));
            }
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] =
                pair16(sc[2 * j], sc[2 * j + 1]);
        } else {
            _Pragma("GCC unroll 16") for (int g = 0; g < 16; g++) sc[g] = _mm256_srai_epi32(
                _mm256_slli_epi32(ld(mp + 3072 + 64 * (g >> 2)), 24 - 8 * (g & 3)), 24);
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] =
                pair16(sc[2 * j], sc[2 * j + 1]);
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) P[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                v8i w[8];
                _Pragma("GCC unroll 8") for (int kk = 0; kk < 8; kk++) {
                    if (kind == KQ6) {
                        const v8i q = ld(mp + 64 * (16 * h + 8 * (k & 1) + kk));
                        const v8i nib = _mm256_and_si256(k < 2 ? q : _mm256_srli_epi16(q, 4), m4);
                        w[kk] = or_and(nib, shl(ld(mp + 2048 + 64 * (8 * h + kk)), 4 - 2 * k), b45);
                    } else {
                        const size_t qo = kind == KQ2 ? 256 : 512;
                        w[kk] = _mm256_and_si256(
                            _mm256_srli_epi32(ld(mp + qo + 64 * (8 * h + kk)), 2 * k), m2);
                        if (kind == KQ3)
                            w[kk] = or_and(w[kk], shl(ld(mp + 64 * kk), 2 - (4 * h + k)), b2);
                    }
                }
                const int g = 8 * h + 2 * k;
                _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
                    const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 128 * h + 32 * k;
                    const v8i da = dot4n(_mm256_setzero_si256(), w, 4, x);
                    const v8i db = dot4n(_mm256_setzero_si256(), w + 4, 4, x + 16);
                    P[t] =
                        _mm256_add_epi32(P[t], _mm256_add_epi32(_mm256_mullo_epi32(da, sc[g]),
                                                                _mm256_mullo_epi32(db, sc[g + 1])));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            const v8i c = pairdot(pc, 8, xa + (size_t)t * sa + (size_t)i * XK + 260);
            if (kind == KQ2)
                M[t] = c;
            else
                P[t] = _mm256_sub_epi32(P[t], _mm256_slli_epi32(c, kind == KQ3 ? 2 : 5));
        }
        kfinish(acc, P, M, xa, sa, i, ldh(tl + (size_t)i * tail),
                kind == KQ2 ? ldh(tl + (size_t)i * tail + 32) : _mm256_setzero_ps(), kind == KQ2,
                nt);
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) store_rows(y + t * ldy, acc[t], n_rows);
}

SD_TILES(p_q2_k, tile_k236, KQ2)
SD_TILES(p_q3_k, tile_k236, KQ3)
SD_TILES(p_q4_k, tile_k45, KQ4)
SD_TILES(p_q5_k, tile_k45, KQ5)
SD_TILES(p_q6_k, tile_k236, KQ6)

/* ---------------------------------------------------------------------------------- */
/* F32 / F16 / BF16 weights x F32 activations. kind: 0 f32, 1 f16, 2 bf16              */
/* ---------------------------------------------------------------------------------- */

SD_T SD_INL float hsum8(v8f v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* 8 weights from column j; lanes >= m (m < 8) read nothing and are 0. */
SD_T SD_INL v8f load_w8(const void *wr, int64_t j, int m, const int kind) {
    if (m >= 8) {
        if (kind == 0) return _mm256_loadu_ps((const float *)wr + j);
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)wr + j));
        if (kind == 1) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (m <= 0) return _mm256_setzero_ps();
    if (kind == 0) return _mm256_maskload_ps((const float *)wr + j, lanes_lt(m));
    uint16_t tmp[8] = {0};
    memcpy(tmp, (const uint16_t *)wr + j, (size_t)m * 2);
    const __m128i h = _mm_loadu_si128((const __m128i *)tmp);
    if (kind == 1) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

SD_T SD_INL v8f load_x8(const float *x, int64_t j, int m) {
    if (m >= 8) return _mm256_loadu_ps(x + j);
    if (m <= 0) return _mm256_setzero_ps();
    return _mm256_maskload_ps(x + j, lanes_lt(m));
}

/* Four accumulators a[0..3] per token: lanes 8q + l accumulate the columns j = 32 s + 8 q
 * + l, the reference's partial sums p[8q + l]; then (a0 + a2) + (a1 + a3) and hsum8: the
 * tree s = 16, 8, 4, 2, 1. */
SD_T SD_INL void fdot_tile(const void *wr, const float *const *xs, const int nt, int64_t n,
                           const int kind, float *res) {
    v8f a[SD_NT][4];
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][0] = a[t][1] = a[t][2] = a[t][3] =
        _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            const v8f w = load_w8(wr, j + 8 * q, 8, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][q] =
                _mm256_fmadd_ps(w, _mm256_loadu_ps(xs[t] + j + 8 * q), a[t][q]);
        }
    }
    if (j < n) {
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            const int m = (int)(n - j - 8 * q);
            if (m <= 0) break;
            const v8f w = load_w8(wr, j + 8 * q, m, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) a[t][q] =
                _mm256_fmadd_ps(w, load_x8(xs[t], j + 8 * q, m), a[t][q]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) res[t] =
        hsum8(_mm256_add_ps(_mm256_add_ps(a[t][0], a[t][2]), _mm256_add_ps(a[t][1], a[t][3])));
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

SD_T static void avx2_f32(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 0);
}

SD_T static void avx2_f16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 1);
}

SD_T static void avx2_bf16(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    frows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 2);
}

/* Quantized types run packed (the backend packs their weights at load); in GGUF rows
 * they run the scalar reference. */
const sd_kernel_set sd_kernels_avx2 = {
    .name = "avx2",
    .lower = &sd_kernels_scalar,
    .k =
        {
            [SD_TYPE_F32] = {avx2_f32, NULL},
            [SD_TYPE_F16] = {avx2_f16, NULL},
            [SD_TYPE_BF16] = {avx2_bf16, NULL},
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
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx2_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
