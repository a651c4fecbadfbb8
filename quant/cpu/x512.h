/*
 * quant/cpu/x512.h: PRIVATE to quant/cpu/ (avx512.c, amx.c): the AVX-512 pieces both
 * kernel sets share: loads and broadcasts, the unpacking of packed weights (quant/
 * pack_impl.h) into the 16-lane vectors of levels the dot products take, the K-quant
 * scale decoding, and the float finish of a super-block. Everything is static inline
 * with the AVX-512 target attribute, so each file compiles its own copy; the arithmetic
 * is the one the scalar reference (ref.c) specifies.
 */
#ifndef SD_QUANT_CPU_X512_H
#define SD_QUANT_CPU_X512_H

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"

#define SD_T   __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define SD_INL static inline __attribute__((always_inline))

SD_T SD_INL float hsum16(__m512 v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* 4 bytes at p (any alignment) in every 32-bit lane. */
SD_T SD_INL __m512i bc4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

SD_T SD_INL __m512 bcf(const void *p) {
    float v;
    memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}

SD_T SD_INL __m512i ld(const uint8_t *p) {
    return _mm512_loadu_si512((const void *)p);
}

/* 16 fp16 at p as floats. */
SD_T SD_INL __m512 ldh(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* a | (b & c): vpternlogd 0xF8. */
SD_T SD_INL __m512i or_and(__m512i a, __m512i b, __m512i c) {
    return _mm512_ternarylogic_epi32(a, b, c, 0xF8);
}

/* 32-bit lanes shifted left by s (right by -s). */
SD_T SD_INL __m512i shl(__m512i v, const int s) {
    return s >= 0 ? _mm512_slli_epi32(v, (unsigned)s) : _mm512_srli_epi32(v, (unsigned)-s);
}

/* int16 pairs (lo = a, hi = b) from int32 lanes a, b in int16 range. */
SD_T SD_INL __m512i pair16(__m512i a, __m512i b) {
    return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, a, _mm512_slli_epi32(b, 16));
}

/* s + per lane the dot product of the 4 unsigned bytes of w with the 4 signed bytes at x
 * (broadcast). The broadcast is the instruction's own {1to16} memory operand (GCC does
 * not fold _mm512_set1_epi32 into vpdpbusd: a separate vpbroadcastd per product). */
SD_T SD_INL __m512i dpbusd_bc(__m512i s, __m512i w, const uint8_t *x) {
#if defined(__GNUC__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v"(s)
            : "v"(w), "m"(*(const int32_t *)(const void *)x));
    return s;
#else
    return _mm512_dpbusd_epi32(s, w, bc4(x));
#endif
}

/* s + per lane the dot product of the int16 pair of w with the int16 pair at x. */
SD_T SD_INL __m512i dpwssd_bc(__m512i s, __m512i w, const uint8_t *x) {
#if defined(__GNUC__)
    __asm__("vpdpwssd %2%{1to16%}, %1, %0"
            : "+v"(s)
            : "v"(w), "m"(*(const int32_t *)(const void *)x));
    return s;
#else
    return _mm512_dpwssd_epi32(s, w, bc4(x));
#endif
}

/* s + the 4-byte dot products of w[0..n) with the activation bytes x[0 .. 4n). */
SD_T SD_INL __m512i dot4n(__m512i s, const __m512i *w, const int n, const uint8_t *x) {
    _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) s = dpbusd_bc(s, w[k], x + 4 * k);
    return s;
}

/* ---- weight types: kinds and the main-part sizes of the packed layout ---- */

enum { K8 = 8, K4 = 4, K50 = 50, K41 = 41, K51 = 51 };
#define K8_TYPE  SD_TYPE_Q8_0
#define K4_TYPE  SD_TYPE_Q4_0
#define K50_TYPE SD_TYPE_Q5_0
#define K41_TYPE SD_TYPE_Q4_1
#define K51_TYPE SD_TYPE_Q5_1
enum { KQ2 = 2, KQ3 = 3, KQ4 = 4, KQ5 = 5, KQ6 = 6 };
#define KQ2_TYPE SD_TYPE_Q2_K
#define KQ3_TYPE SD_TYPE_Q3_K
#define KQ4_TYPE SD_TYPE_Q4_K
#define KQ5_TYPE SD_TYPE_Q5_K
#define KQ6_TYPE SD_TYPE_Q6_K

#define XK 292 /* bytes of a Q8_K block: d at 0, qs at 4, bsums at 260 */

SD_INL size_t main32(const int kind) {
    return kind == K8 ? 512 : (kind == K50 || kind == K51) ? 320 : 256;
}
SD_INL size_t main_k(const int kind) {
    return kind == KQ2 ? 1280 : kind == KQ3 ? 1728 : kind == KQ4 ? 2240 : kind == KQ5 ? 2752 : 3328;
}

/* Q5_0 / Q5_1: level vector c (elements 4c + i, c < 4; 16 + 4(c - 4) + i, c >= 4) of the 16
 * rows, from the packed regrouping (pack_impl.h): c < 4: qs' & 31; c >= 4: (qs' >> 5 & 7) |
 * (qh' shifted so field c - 4 is at bits 3-4, & 24) (32-bit shifts: the bits a mask keeps
 * come from their own byte). */
SD_T SD_INL __m512i q5_level(const uint8_t *mp, const int c) {
    const __m512i v = ld(mp + 64 * (c & 3));
    if (c < 4) return _mm512_and_si512(v, _mm512_set1_epi8(0x1F));
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(v, 5), _mm512_set1_epi8(0x07));
    return or_and(lo, shl(ld(mp + 256), 3 - 2 * (c - 4)), _mm512_set1_epi8(0x18));
}

/* The 8 level vectors of a 32-element block (main part mp): w[k] holds elements 4k..4k+3
 * of the 16 rows. Q8_0: signed (raw) when signed8, else as w + 128 (w ^ 0x80); the others
 * unsigned (Q4_0 / Q4_1 nibbles, Q5_0 / Q5_1 5-bit levels: q5_level). */
SD_T SD_INL void unpack32(const uint8_t *mp, const int kind, const int signed8, __m512i *w) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (kind == K8) {
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) w[k] =
            signed8 ? ld(mp + 64 * k)
                    : _mm512_xor_si512(ld(mp + 64 * k), _mm512_set1_epi8((char)0x80));
        return;
    }
    if (kind == K50 || kind == K51) {
        _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) w[c] = q5_level(mp, c);
        return;
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const __m512i v = ld(mp + 64 * k);
        w[k] = _mm512_and_si512(v, m4);
        w[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

/* Q4_K / Q5_K: the 8 level vectors of sub-block s (elements 32 s + 4k .. of the 16 rows). */
SD_T SD_INL void unpack_k45(const uint8_t *mp, const int kind, const int s, __m512i *w) {
    const int five = kind == KQ5;
    const size_t qso = five ? 704 : 192;
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        const __m512i q = ld(mp + qso + 64 * (8 * (s >> 1) + k));
        w[k] = _mm512_and_si512((s & 1) ? _mm512_srli_epi16(q, 4) : q, m4);
        if (five) w[k] = or_and(w[k], shl(ld(mp + 192 + 64 * k), 4 - s), b4);
    }
}

/* Q6_K: the level vector (q + 32, unsigned) of elements 128 h + 32 k + 4 kk .. + 3 of the
 * 16 rows, from the packed regrouping (pack_impl.h): P (k = 0, 2) or Q (k = 1, 3) at the ql
 * vector, R at the qh vector. L0 = P & 63, L1 = Q & 63, L2 = (R & 15) | (P >> 2 & 48),
 * L3 = (R >> 4 & 15) | (Q >> 2 & 48) (16-bit shifts: the bits a mask keeps come from their
 * own byte). */
SD_T SD_INL __m512i q6_level(const uint8_t *mp, const int h, const int k, const int kk) {
    const __m512i a = ld(mp + 64 * (16 * h + 8 * (k & 1) + kk));
    if (k < 2) return _mm512_and_si512(a, _mm512_set1_epi8(0x3F));
    const __m512i r = ld(mp + 2048 + 64 * (8 * h + kk));
    const __m512i nib =
        _mm512_and_si512(k == 2 ? r : _mm512_srli_epi16(r, 4), _mm512_set1_epi8(0x0F));
    return or_and(nib, _mm512_srli_epi16(a, 2), _mm512_set1_epi8(0x30));
}

/* Q2_K / Q3_K / Q6_K: the 8 level vectors of elements 32 hk .. 32 hk + 31 (h = hk / 4,
 * k = hk % 4: element 128 h + 32 k + l), unsigned (Q3_K: q + 4, Q6_K: q + 32). */
SD_T SD_INL void unpack_k236(const uint8_t *mp, const int kind, const int hk, __m512i *w) {
    const int h = hk >> 2, k = hk & 3;
    const __m512i m2 = _mm512_set1_epi8(0x03), b2 = _mm512_set1_epi8(0x04);
    _Pragma("GCC unroll 8") for (int kk = 0; kk < 8; kk++) {
        if (kind == KQ6) {
            w[kk] = q6_level(mp, h, k, kk);
        } else {
            const size_t qo = kind == KQ2 ? 256 : 512;
            w[kk] = _mm512_and_si512(_mm512_srli_epi32(ld(mp + qo + 64 * (8 * h + kk)), 2 * k), m2);
            if (kind == KQ3) w[kk] = or_and(w[kk], shl(ld(mp + 64 * kk), 2 - (4 * h + k)), b2);
        }
    }
}

/* Finish a super-block for nt tokens: acc += (d_x d) P, and for types with mins
 * acc -= (d_x dmin) M. */
SD_T SD_INL void kfinish(__m512 *acc, const __m512i *P, const __m512i *M, const uint8_t *xa,
                         size_t sa, int64_t i, __m512 dw, __m512 dmn, const int has_min,
                         const int nt) {
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
        const __m512 xd = bcf(xa + (size_t)t * sa + (size_t)i * XK);
        acc[t] =
            _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(xd, dw), _mm512_cvtepi32_ps(P[t])));
        if (has_min)
            acc[t] = _mm512_sub_ps(acc[t],
                                   _mm512_mul_ps(_mm512_mul_ps(xd, dmn), _mm512_cvtepi32_ps(M[t])));
    }
}

/* Q4_K / Q5_K: the 6-bit scale (m = 0) or min (m = 1) of sub-block s, int32 lanes, from
 * the 12 scale bytes (3 vectors at mp). */
SD_T SD_INL __m512i k45_scale(const uint8_t *mp, const int m, const int s) {
    const __m512i S = ld(mp + 64 * m), S2 = ld(mp + 128);
    if (s < 4) return _mm512_and_si512(_mm512_srli_epi32(S, 8 * s), _mm512_set1_epi32(63));
    const int j = s - 4;
    return _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(S2, 8 * j + 4 * m), _mm512_set1_epi32(15)),
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(S, 8 * j + 6), _mm512_set1_epi32(3)),
                          4));
}

/* Group g's scale of a K-quant super-block (int32 lanes); mp its main part. */
SD_T SD_INL __m512i k_scale(const uint8_t *mp, const int kind, const int g) {
    const __m512i m15 = _mm512_set1_epi32(15);
    if (kind == KQ2) /* low nibble of scales[g] */
        return _mm512_and_si512(_mm512_srli_epi32(ld(mp + 64 * (g >> 2)), 8 * (g & 3)), m15);
    if (kind == KQ6) /* int8 scales[g] */
        return _mm512_srai_epi32(_mm512_slli_epi32(ld(mp + 3072 + 64 * (g >> 2)), 24 - 8 * (g & 3)),
                                 24);
    /* Q3_K: 6 bits (4 from scales[g % 8], low or high nibble; 2 from scales[8 + g % 4]),
     * minus 32 */
    const uint8_t *sp = mp + 1536;
    const int lb = g < 8 ? g : g - 8;
    const __m512i lo = _mm512_and_si512(
        _mm512_srli_epi32(ld(sp + 64 * (lb >> 2)), 8 * (lb & 3) + (g < 8 ? 0 : 4)), m15);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(ld(sp + 128), 8 * (g & 3) + 2 * (g >> 2)),
                                        _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
}

/* The int16 pair (coefficient 2j, 2j + 1) of the group-sum term: the mins (Q2_K: high
 * nibbles of scales) or the scales (Q3_K, Q6_K: their level offsets). */
SD_T SD_INL __m512i k_pair(const uint8_t *mp, const int kind, const int j) {
    if (kind == KQ2) {
        const __m512i m15 = _mm512_set1_epi32(15);
        const __m512i s = ld(mp + 64 * (j >> 1));
        const int b = 8 * (2 * (j & 1));
        return pair16(_mm512_and_si512(_mm512_srli_epi32(s, b + 4), m15),
                      _mm512_and_si512(_mm512_srli_epi32(s, b + 12), m15));
    }
    return pair16(k_scale(mp, kind, 2 * j), k_scale(mp, kind, 2 * j + 1));
}

#endif /* __x86_64__ */
#endif /* SD_QUANT_CPU_X512_H */
