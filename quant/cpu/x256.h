/*
 * quant/cpu/x256.h: PRIVATE to quant/cpu/ (avx2.c, avxvnni.c): the packed kernels on
 * 256-bit vectors, compiled by each of the two files with its own target attribute.
 * Before including, the file defines SD_T (the function target attribute) and
 * SD_X256_VNNI: 0 for the AVX2 set (vpmaddubsw products summed in int16, then one
 * vpmaddwd), 1 for the AVX-VNNI set (vpdpbusd, the VEX form). Everything is static, so
 * each file compiles its own copy.
 *
 * Layout (quant/pack_impl.h): a 64-byte vector of a group's main part holds 4 bytes of
 * each of the group's 16 rows; its low 32 bytes are rows 0..7 (half 0), its high 32
 * bytes rows 8..15 (half 1), and every 32-byte fp16 tail field 8 + 8 rows. A 32-bit lane
 * is one row, and its arithmetic is that row's alone in the scalar reference (ref.c), in
 * the same order (kernels.h): exact integer block / super-block sums, then the float part
 * per block or super-block in block order.
 *
 * Pass structure: one call per group and chunk of up to SD_PT tokens (a verification
 * pass of 2..17 tokens is one chunk). Per block the group's main part is read once (both
 * halves, one software prefetch); each half's levels are unpacked once into 8 registers
 * and then every token of the chunk runs on them (its accumulators in L1; for 1 or 2
 * tokens in registers). So a pass unpacks each block once, whatever its width.
 * AVX2 Q4_K / Q5_K, 1 or 2 tokens (decode and the narrowest verification): both halves
 * at once, each level vector unpacked as it is used, so each broadcast of 4 activation
 * bytes feeds the products of all 16 rows and every sum stays in a register (tile_k45_s);
 * the scales and mins are decoded once per half into bytes and each sub-block's scale
 * taken as its vpmaddwd coefficient pair by one vpshufb (k45_bytes, byte_pair).
 *
 * AVX2 products (SD_X256_VNNI 0): vpmaddubsw(w, x) gives per int16 the pair sum
 * w0 x0 + w1 x1 of unsigned levels w and signed activation bytes x; it saturates only if
 * that pair leaves int16, which |pair| <= 2 * wmax * 128 never does here. Several such
 * outputs are summed in int16 (vpaddw, wrapping) before one vpmaddwd (with 1, or with the
 * K-quant scale as an int16 pair) widens them to int32; the int16 sum is exact when
 * n_fold * 2 * wmax * 128 <= 32767. Activation range: Q8_0 and Q8_S quants are
 * round(x * 127 / amax), so in [-127, 127]; Q8_K quants are round(x * -127 / max) clamped
 * to [-128, 127] (the clamp only guards rounding), so |x| <= 128 is the bound used:
 *   4-bit levels (Q4_0, Q4_1, Q4_K; wmax 15):   2 * 15 * 128 = 3840:   8 summed = 30720;
 *   5-bit levels (Q5_0, Q5_1, Q5_K; wmax 31):   2 * 31 * 128 = 7936:   4 summed = 31744;
 *   6-bit levels (Q6_K, q + 32; wmax 63):       2 * 63 * 128 = 16128:  2 summed = 32256;
 *   2/3-bit levels (Q2_K; Q3_K as q + 4; wmax 7): 2 * 7 * 128 = 1792: 16 summed = 28672
 *     (a 16-element group is 4 products, so 4 are summed);
 *   Q8_0 (signed weights): the sign trick vpmaddubsw(|w|, sign(x, w)), |w| <= 128 and
 *     |x| <= 127 (sign(-128) would wrap; Q8_0 activations never hold -128): 2 * 128 * 127
 *     = 32512, so none are summed (one vpmaddwd per product).
 * The widened sums are the block's exact integer dot (and, with the scale as the
 * vpmaddwd coefficient, scale * dot: |sum16| * 128 * 2 fits int32 easily).
 * tests/test_quant_kernels.c (extreme_levels_bitexact) runs all-max / all-min weights
 * against all-max / all-min activations for every type, where an overflow would show.
 *
 * AVX-VNNI products (SD_X256_VNNI 1): vpdpbusd adds the 4 products of a lane to an int32
 * without saturation: exact for every unsigned level. Q8_0 runs as w + 128 (w ^ 0x80)
 * with the block's offset correction of part B (corr = -128 * sum x) as the start.
 * K-quant sub-block dots are then scaled with vpmulld, as in the AVX-512 set.
 *
 * Scales and minimums: Q4_1 / Q5_1 minimums through Q8_S's d * sum (float, per block);
 * Q4_0 / Q5_0 offsets through part B's corr; Q4_K / Q5_K minimums through part B's
 * sub-block sums; Q2_K minimums and the Q3_K / Q6_K level offsets through Q8_K's bsums
 * (vpmaddwd with the coefficient pairs): no per-token fix-up of the levels.
 */
#ifndef SD_QUANT_CPU_X256_H
#define SD_QUANT_CPU_X256_H

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"

#if !defined(SD_T) || !defined(SD_X256_VNNI)
#error "define SD_T and SD_X256_VNNI before including quant/cpu/x256.h"
#endif

#define SD_INL static inline __attribute__((always_inline))
#define SD_PT  32 /* packed kernels: most tokens per call (one chunk for passes <= 32) */
#ifndef K45_PAIRS_MAX
#define K45_PAIRS_MAX 2 /* AVX2 Q4_K / Q5_K: widest pass run as token pairs (tile_k45) */
#endif

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

/* int16 pairs (lo = a, hi = b) from int32 lanes a, b in int16 range. */
SD_T SD_INL v8i pair16(v8i a, v8i b) {
    return _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA);
}

/* sd_prefetch_at(mp, bytes, SD_PF_BYTES_256) unrolled: bytes is a constant of the type
 * (64..3328), so the loop becomes one prefetch per line, no counter. Not in the Q2_K /
 * Q3_K / Q6_K tile: there it made one token of a 32768 x 2048 Q6_K matrix (from memory,
 * 1 thread, Zen 5, SD_KERNELS=avx2 and avxvnni) take 3.3-3.7 ms against 1.9-2.1 with the
 * plain loop (scripts/width_bench.c, interleaved, load ~2.4), and the real pair's decode
 * about 20% longer. prefetcht0 in place of prefetcht1, in a plain loop in every tile here,
 * made one token from memory slower (4096 x 4096, 1 thread, Zen 5, SD_KERNELS=avx2, load
 * 4-6, 5 interleaved rounds, scripts/bench_quant.c stream mode): Q4_K 0.32-0.52 -> 0.85-0.94
 * ms, Q6_K 0.66-0.92 -> 1.18-1.55, Q5_0 0.59-0.76 -> 0.69-0.86, Q8_0 0.77-1.01 ->
 * 0.90-1.06; a plain loop of prefetcht1 in every tile: no change beyond the noise. */
SD_T SD_INL void pf256(const uint8_t *mp, const size_t bytes, const size_t ahead) {
    _Pragma("GCC unroll 64") for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(mp + ahead + o, 0, 2);
}

/* The prefetch lead of the 32-element tiles (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1; one token and
 * wide): the K-quant tiles' 32 KiB (below). The 0.5B draft of the Qwen2.5-Coder pair (Q5_0
 * and Q8_0 matrices 896 columns wide) decodes in 11.1 / 11.4 ms a step (best / median)
 * against 15.0 / 15.4 with 8 KiB (bench --kernels -t 2, SD_KERNELS=avx2, Zen 4, quiet, 5
 * alternated rounds; docs/performance.md, thirteenth round); one 4864 x 896 Q5_0 matrix
 * from memory, 1 thread: 0.21-0.23 -> 0.14-0.15 ms. 4096 x 4096: no change beyond the
 * noise. */
#ifndef SD_PF_BYTES_32
#define SD_PF_BYTES_32 32768
#endif

/* The prefetch lead of the K-quant tiles (Q4_K / Q5_K at every width, Q6_K at 2+ tokens),
 * longer than SD_PF_BYTES_256 (8 KiB, which the Q2_K / Q3_K / Q6_K one-token tile
 * keeps). One 8960 x 1536 matrix streamed from memory (scripts/bench_quant.c stream
 * mode with --huge 1, 6 copies, 1 thread, Zen 4, SD_KERNELS=avx2, best of 7, 4-6 rounds,
 * load 3-5.5), ms at 8 KiB -> 32 KiB ahead (with the wide tiles' prefetch spread below):
 * Q4_K 1 token 0.32-0.39 -> 0.27-0.32, 5 tokens 0.75-0.84 -> 0.63-0.66 (in cache 0.61-0.69),
 * 9 tokens 1.13-1.21 -> 1.04-1.05; Q6_K 5 tokens 0.77-0.83 -> 0.71-0.72, 9 tokens 1.23-1.31 ->
 * 1.17-1.18 (in cache 0.70-0.75 and 1.17-1.24). 4 KiB no better than 8, 16 KiB between 8
 * and 32, 64 KiB no better than 32; the spread alone at 8 KiB, or 32 KiB as one burst per
 * block, gained less. With 8 KiB a wide pass from memory took about its in-cache time
 * plus half the stream's own time: the stream and the arithmetic overlapped only in part. */
#ifndef SD_PF_BYTES_K256
#define SD_PF_BYTES_K256 32768
#endif

/* Lanes < n of mask vectors for _mm256_maskstore_ps. */
SD_T SD_INL v8i lanes_lt(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

SD_T SD_INL void store_rows(float *y, v8f v, int n_rows) {
    if (n_rows >= 8)
        _mm256_storeu_ps(y, v);
    else
        _mm256_maskstore_ps(y, lanes_lt(n_rows), v);
}

/* v, computed here: an empty asm the compiler cannot move, so a chain of sums stays a
 * chain (else GCC reassociates the unrolled int16 sums of tile_k45_1 into trees whose
 * products all live at once and spill). */
SD_T SD_INL v8i in_reg(v8i v) {
    __asm__("" : "+x"(v));
    return v;
}

/* ---------------------------------------------------------------------------------- */
/* Products                                                                             */
/* ---------------------------------------------------------------------------------- */

#if SD_X256_VNNI
/* s + the 4-byte dot products of unsigned w[0..n) with the activation bytes x[0 .. 4n). */
SD_T SD_INL v8i dot4n(v8i s, const v8i *w, const int n, const uint8_t *x) {
    _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) s =
        _mm256_dpbusd_avx_epi32(s, w[k], bc4(x + 4 * k));
    return s;
}
#else
/* The int16 sum of vpmaddubsw(w[k], x[4k .. 4k + 4)) for k < n: exact only for the fold
 * counts of the header comment. */
SD_T SD_INL v8i mub16(const v8i *w, const int n, const uint8_t *x) {
    v8i s = _mm256_maddubs_epi16(w[0], bc4(x));
    _Pragma("GCC unroll 8") for (int k = 1; k < n; k++) s =
        in_reg(_mm256_add_epi16(s, _mm256_maddubs_epi16(w[k], bc4(x + 4 * k))));
    return s;
}

/* s + c * (the 4-byte dot products of w[0..n) with x), c an int16 pair per lane (1 or a
 * scale), the products summed in int16 fold at a time. */
SD_T SD_INL v8i dotc(v8i s, const v8i *w, const int n, const int fold, const uint8_t *x, v8i c) {
    _Pragma("GCC unroll 8") for (int k = 0; k < n; k += fold) s =
        _mm256_add_epi32(s, _mm256_madd_epi16(mub16(w + k, fold, x + 4 * k), c));
    return s;
}
#endif

/* Activation bytes of the compute roof's loop (8 tokens of 32). */
static const uint8_t k_peak_x[256] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* The compute roof's loop (kernels.h, sd_peak_loop): AVX2 two tokens of 8 vpmaddubsw on
 * 8 weight registers, summed in int16, one vpmaddwd + vpaddd each (the 4-bit fold); VNNI
 * 12 tokens of 3 vpdpbusd (12 independent chains hide vpdpbusd's latency; 3 weight
 * registers leave one for the broadcast). Activation
 * bytes broadcast from L1 as in the kernels (the laundered pointer keeps the loads in
 * the loop). */
SD_T static double peak_loop(int64_t iters) {
    const uint8_t *xp = k_peak_x;
    v8i w[8];
    for (int k = 0; k < 8; k++)
        w[k] = _mm256_set1_epi8((char)(k + 1));
#if SD_X256_VNNI
    v8i acc[12];
    for (int t = 0; t < 12; t++)
        acc[t] = _mm256_setzero_si256();
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+r"(xp)); /* reloads the activations */
        _Pragma("GCC unroll 12") for (int t = 0; t < 12; t++) acc[t] =
            dot4n(acc[t], w, 3, xp + 16 * t);
    }
    v8i s = acc[0];
    for (int t = 1; t < 12; t++)
        s = _mm256_add_epi32(s, acc[t]);
    const double macs = (double)iters * 12 * 3 * 32;
#else
    const v8i one = _mm256_set1_epi16(1);
    v8i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
    for (int64_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+r"(xp)); /* reloads the activations */
        a0 = dotc(a0, w, 8, 8, xp + 32 * 0, one);
        a1 = dotc(a1, w, 8, 8, xp + 32 * 1, one);
    }
    const v8i s = _mm256_add_epi32(a0, a1);
    const double macs = (double)iters * 2 * 8 * 32;
#endif
    volatile int32_t sink = _mm256_extract_epi32(s, 0);
    (void)sink;
    return macs;
}

/* ---------------------------------------------------------------------------------- */
/* Types, sizes, unpacking                                                              */
/* ---------------------------------------------------------------------------------- */

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

/* Q5_0 / Q5_1: level vector c (elements 4c + i, c < 4; 16 + 4(c - 4) + i, c >= 4) of the 8
 * rows of a half (mh: main part + 32 * half), from the packed regrouping (pack_impl.h):
 * c < 4: qs' & 31; c >= 4: (qs' >> 5 & 7) | (qh' shifted so field c - 4 is at bits 3-4, & 24)
 * (32-bit shifts: the bits a mask keeps come from their own byte). */
SD_T SD_INL v8i q5_level(const uint8_t *mh, const int c) {
    const v8i v = ld(mh + 64 * (c & 3));
    if (c < 4) return _mm256_and_si256(v, _mm256_set1_epi8(0x1F));
    const v8i lo = _mm256_and_si256(_mm256_srli_epi16(v, 5), _mm256_set1_epi8(0x07));
    return or_and(lo, shl(ld(mh + 256), 3 - 2 * (c - 4)), _mm256_set1_epi8(0x18));
}

/* The 8 level vectors of a 32-element block's half (mp: main part + 32 * half): w[k] holds
 * elements 4k..4k+3 of the 8 rows. Q8_0: AVX2 w raw (signed) and aw = |w|; VNNI w + 128
 * (w ^ 0x80). The others unsigned (Q4_0 / Q4_1 nibbles, Q5_0 / Q5_1 5-bit levels: q5_level). */
SD_T SD_INL void unpack32(const uint8_t *mp, const int kind, v8i *w, v8i *aw) {
    const v8i m4 = _mm256_set1_epi8(0x0F);
    if (kind == K8) {
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            const v8i v = ld(mp + 64 * k);
#if SD_X256_VNNI
            (void)aw;
            w[k] = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
#else
            w[k] = v;
            aw[k] = _mm256_sign_epi8(v, v);
#endif
        }
        return;
    }
    if (kind == K50 || kind == K51) {
        _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) w[c] = q5_level(mp, c);
        return;
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const v8i v = ld(mp + 64 * k);
        w[k] = _mm256_and_si256(v, m4);
        w[4 + k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* The int32 dot of a 32-element block's levels with the activation bytes x, plus corr. */
SD_T SD_INL v8i dot32(const v8i *w, const v8i *aw, const uint8_t *x, int32_t corr, const int kind) {
#if SD_X256_VNNI
    (void)aw;
    (void)kind;
    return dot4n(_mm256_set1_epi32(corr), w, 8, x);
#else
    const v8i one = _mm256_set1_epi16(1);
    if (kind == K8) { /* sign trick, one product per vpmaddwd (no int16 fold) */
        (void)corr;
        v8i s = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) s = _mm256_add_epi32(
            s, _mm256_madd_epi16(
                   _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(bc4(x + 4 * k), w[k])), one));
        return s;
    }
    const int fold = (kind == K50 || kind == K51) ? 4 : 8;
    return dotc(_mm256_set1_epi32(corr), w, 8, fold, x, one);
#endif
}

/* Q4_K / Q5_K: the 8 level vectors of sub-block s (elements 32 s + 4k .. of the 8 rows). */
SD_T SD_INL void unpack_k45(const uint8_t *mp, const int kind, const int s, v8i *w) {
    const int five = kind == KQ5;
    const size_t qso = five ? 704 : 192;
    const v8i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        const v8i q = ld(mp + qso + 64 * (8 * (s >> 1) + k));
        w[k] = _mm256_and_si256((s & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
        if (five) w[k] = or_and(w[k], shl(ld(mp + 192 + 64 * k), 4 - s), b4);
    }
}

/* Q6_K: the level vector (q + 32, unsigned) of elements 128 h + 32 k + 4 kk .. + 3 of the 8
 * rows of a half (mh: main part + 32 * half), from the packed regrouping (pack_impl.h):
 * P (k = 0, 2) or Q (k = 1, 3) at the ql vector, R at the qh vector. L0 = P & 63,
 * L1 = Q & 63, L2 = (R & 15) | (P >> 2 & 48), L3 = (R >> 4 & 15) | (Q >> 2 & 48) (16-bit
 * shifts: the bits a mask keeps come from their own byte). */
SD_T SD_INL v8i q6_level(const uint8_t *mh, const int h, const int k, const int kk) {
    const v8i a = ld(mh + 64 * (16 * h + 8 * (k & 1) + kk));
    if (k < 2) return _mm256_and_si256(a, _mm256_set1_epi8(0x3F));
    const v8i r = ld(mh + 2048 + 64 * (8 * h + kk));
    const v8i nib = _mm256_and_si256(k == 2 ? r : _mm256_srli_epi16(r, 4), _mm256_set1_epi8(0x0F));
    return or_and(nib, _mm256_srli_epi16(a, 2), _mm256_set1_epi8(0x30));
}

/* Q2_K / Q3_K / Q6_K: the 8 level vectors of elements 32 hk .. 32 hk + 31 (h = hk / 4,
 * k = hk % 4: element 128 h + 32 k + l), unsigned (Q3_K: q + 4, Q6_K: q + 32). */
SD_T SD_INL void unpack_k236(const uint8_t *mp, const int kind, const int hk, v8i *w) {
    const int h = hk >> 2, k = hk & 3;
    const v8i m2 = _mm256_set1_epi8(0x03), b2 = _mm256_set1_epi8(0x04);
    _Pragma("GCC unroll 8") for (int kk = 0; kk < 8; kk++) {
        if (kind == KQ6) {
            w[kk] = q6_level(mp, h, k, kk);
        } else {
            const size_t qo = kind == KQ2 ? 256 : 512;
            w[kk] = _mm256_and_si256(_mm256_srli_epi32(ld(mp + qo + 64 * (8 * h + kk)), 2 * k), m2);
            if (kind == KQ3) w[kk] = or_and(w[kk], shl(ld(mp + 64 * kk), 2 - (4 * h + k)), b2);
        }
    }
}

/* Q4_K / Q5_K: the 6-bit scale (m = 0) or min (m = 1) of sub-block s, int32 lanes. */
SD_T SD_INL v8i k45_scale(const uint8_t *mp, const int m, const int s) {
    const v8i S = ld(mp + 64 * m), S2 = ld(mp + 128);
    if (s < 4) return _mm256_and_si256(_mm256_srli_epi32(S, 8 * s), _mm256_set1_epi32(63));
    const int j = s - 4;
    return _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(S2, 8 * j + 4 * m), _mm256_set1_epi32(15)),
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(S, 8 * j + 6), _mm256_set1_epi32(3)),
                          4));
}

/* Group g's scale of a Q2_K / Q3_K / Q6_K super-block (int32 lanes). */
SD_T SD_INL v8i k_scale(const uint8_t *mp, const int kind, const int g) {
    const v8i m15 = _mm256_set1_epi32(15);
    if (kind == KQ2) /* low nibble of scales[g] */
        return _mm256_and_si256(_mm256_srli_epi32(ld(mp + 64 * (g >> 2)), 8 * (g & 3)), m15);
    if (kind == KQ6) /* int8 scales[g] */
        return _mm256_srai_epi32(_mm256_slli_epi32(ld(mp + 3072 + 64 * (g >> 2)), 24 - 8 * (g & 3)),
                                 24);
    /* Q3_K: 6 bits (4 from scales[g % 8], low or high nibble; 2 from scales[8 + g % 4]),
     * minus 32 */
    const uint8_t *sp = mp + 1536;
    const int lb = g < 8 ? g : g - 8;
    const v8i lo = _mm256_and_si256(
        _mm256_srli_epi32(ld(sp + 64 * (lb >> 2)), 8 * (lb & 3) + (g < 8 ? 0 : 4)), m15);
    const v8i hi = _mm256_and_si256(_mm256_srli_epi32(ld(sp + 128), 8 * (g & 3) + 2 * (g >> 2)),
                                    _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

/* The int16 pair (coefficient 2j, 2j + 1) of the group-sum term: the mins (Q2_K: high
 * nibbles of scales) or the scales (Q3_K, Q6_K: their level offsets). */
SD_T SD_INL v8i k_pair(const uint8_t *mp, const int kind, const int j) {
    if (kind == KQ2) {
        const v8i m15 = _mm256_set1_epi32(15);
        const v8i s = ld(mp + 64 * (j >> 1));
        const int b = 8 * (2 * (j & 1));
        return pair16(_mm256_and_si256(_mm256_srli_epi32(s, b + 4), m15),
                      _mm256_and_si256(_mm256_srli_epi32(s, b + 12), m15));
    }
    return pair16(k_scale(mp, kind, 2 * j), k_scale(mp, kind, 2 * j + 1));
}

/* int16-pair dot products of coefficient pairs pc[0..n) with the int16 pairs at b. */
SD_T SD_INL v8i pairdot(const v8i *pc, const int n, const uint8_t *b) {
    v8i c = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int j = 0; j < n; j++) c =
        _mm256_add_epi32(c, _mm256_madd_epi16(pc[j], bc4(b + 4 * j)));
    return c;
}

/* acc += (d_x d) P, and for types with mins acc -= (d_x dmin) M (one super-block). */
SD_T SD_INL v8f kfin(v8f acc, v8i P, v8i M, v8f xd, v8f dw, v8f dmn, const int has_min) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(xd, dw), _mm256_cvtepi32_ps(P)));
    if (has_min)
        acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(xd, dmn), _mm256_cvtepi32_ps(M)));
    return acc;
}

/* ---------------------------------------------------------------------------------- */
/* The driver                                                                           */
/* ---------------------------------------------------------------------------------- */

/* One group, nt (1..SD_PT) tokens: xa the part-A row of the first token (rows sa bytes
 * apart), xb its part-B row (sb apart), y its output at the group's first row; n_rows:
 * the group's rows that exist (1..16). */
typedef void (*tile_fn)(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows, int nt);

SD_T SD_INL void run_packed(sd_type wt, tile_fn t1, tile_fn t2, tile_fn tn, const void *wp,
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
    const int64_t nch = (n_tok + SD_PT - 1) / SD_PT;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gp = (const uint8_t *)wp + (size_t)g * gs;
        const int64_t left = rows - 16 * g;
        if (left <= 0) break;
        const int n_rows = left >= 16 ? 16 : (int)left;
        for (int64_t k = 0; k < nch; k++) {
            const int64_t c0 = n_tok * k / nch, c1 = n_tok * (k + 1) / nch;
            const int nt = (int)(c1 - c0);
            const tile_fn f = nt == 1 ? t1 : nt == 2 ? t2 : tn;
            f(gp, nb, xa + (size_t)c0 * sa, sa, xb + (size_t)c0 * sb, sb, y + c0 * ldy + 16 * g,
              ldy, n_rows, nt);
        }
    }
}

/* Whether a pass of 2 tokens runs the tile compiled for nt = 2 (accumulators in registers)
 * or the one for any nt (accumulators in L1). Measured per type (scripts/width_bench.sh,
 * 2048 x 2048 in cache, widths interleaved, one thread on Zen 5): the nt = 2 tile won only
 * for Q8_0 and Q2_K under AVX2 (about 5%); elsewhere its extra registers spill, and Q6_K,
 * Q3_K (both sets), Q2_K (AVX-VNNI) and Q5_0 cost 10-45% more at 2 tokens than with the
 * general tile (Q6_K and Q3_K: more than at 3 tokens). */
SD_INL int tile2_pays(const int kind) {
    return !SD_X256_VNNI && (kind == K8 || kind == KQ2);
}

/* NAME: the packed kernel; BODY(.., KIND, nt) the tile, compiled for nt = 1, 2 (accumulators
 * in registers; used where tile2_pays) and any nt. */
#define SD_TILES(NAME, BODY, KIND)                                                                 \
    SD_T static void NAME##_1(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,     \
                              int nt) {                                                            \
        (void)nt;                                                                                  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, n_rows, KIND, 1);                                     \
    }                                                                                              \
    SD_T static void NAME##_2(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,     \
                              int nt) {                                                            \
        (void)nt;                                                                                  \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, n_rows, KIND, 2);                                     \
    }                                                                                              \
    SD_T static void NAME##_n(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,         \
                              const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,     \
                              int nt) {                                                            \
        BODY(gp, nb, xa, sa, xb, sb, y, ldy, n_rows, KIND, nt);                                    \
    }                                                                                              \
    SD_T static void NAME(const void *wp, int64_t rows, int64_t n, const void *xq, int64_t n_tok,  \
                          float *y, int64_t ldy, int64_t g0, int64_t g1) {                         \
        run_packed(KIND##_TYPE, NAME##_1, tile2_pays(KIND) ? NAME##_2 : NAME##_n, NAME##_n, wp,    \
                   rows, n, xq, n_tok, y, ldy, g0, g1);                                            \
    }

/* Rows of half h (0, 1) of a group with n_rows rows; <= 0: the half is absent. */
SD_INL int half_rows(int n_rows, int h) {
    return h ? n_rows - 8 : (n_rows < 8 ? n_rows : 8);
}

/* ---------------------------------------------------------------------------------- */
/* 32-element blocks: Q8_0, Q4_0 (x Q8_0), Q5_0, Q4_1, Q5_1 (x Q8_S)                    */
/* ---------------------------------------------------------------------------------- */

#if !SD_X256_VNNI
/* Q4_0 / Q5_0, one token (decode), AVX2: both halves at once, so each broadcast of 4
 * activation bytes feeds the products of all 16 rows; each level vector unpacked where it
 * is multiplied (it is used once), the sums in registers. The same integer block dots as
 * dot32 (exact, in another order) and the same float part as tile32: the scalar oracle's
 * bits. The padded rows of a group's last half are zero bytes in the packed layout,
 * computed and not stored. Per 16 x 256 (scripts/kernel_ir.sh): Q4_0 841 -> 776 Ir, Q5_0
 * 1329 -> 1184 (1008 with the regrouped Q5_0 levels, q5_level). Q8_0 in this form (1145 -> 1024 Ir,
 * faster in cache) streamed about 10% slower from memory (4096 x 4096, 1 thread, Zen 5,
 * SD_KERNELS=avx2, load ~8, 9 interleaved rounds: 0.86-0.96 ms against 0.77-0.91), so Q8_0 keeps
 * tile32. */
SD_T SD_INL void tile32_1(const uint8_t *gp, int64_t nb, const uint8_t *xa, const uint8_t *xb,
                          float *y, int n_rows, const int kind) {
    const size_t main = main32(kind);
    const size_t xbb = kind == K50 ? sizeof(sd_block_q8_s) : sizeof(sd_block_q8_0);
    const size_t qoff = kind == K50 ? 8 : 2;
    const int fold = kind == K50 ? 4 : 8;
    const uint8_t *tl = gp + (size_t)nb * main;
    const v8i m4 = _mm256_set1_epi8(0x0F);
    const v8i one = _mm256_set1_epi16(1);
    v8f acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        pf256(mp, main, SD_PF_BYTES_32); /* both halves: one stream of the group's lines */
        const uint8_t *x = xa + (size_t)i * xbb + qoff;
        const sd_xblk *xk = (const sd_xblk *)(const void *)xb + i;
        /* the levels' offset (8 or 16) through part B's corr */
        const v8i c0 = _mm256_set1_epi32(xk->corr);
        v8i s[2] = {c0, c0}, m[2];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            const v8i b = bc4(x + 4 * k);
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const uint8_t *mh = mp + 32 * h;
                const v8i v = ld(mh + 64 * (k & 3));
                const v8i w = kind == K50
                                  ? q5_level(mh, k)
                                  : _mm256_and_si256(k < 4 ? v : _mm256_srli_epi16(v, 4), m4);
                const v8i p = _mm256_maddubs_epi16(w, b);
                m[h] = in_reg(k % fold ? _mm256_add_epi16(m[h], p) : p);
                if (k % fold == fold - 1)
                    s[h] = in_reg(_mm256_add_epi32(s[h], _mm256_madd_epi16(m[h], one)));
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const v8f d = _mm256_mul_ps(ldh(tl + (size_t)i * 32 + 16 * h), _mm256_set1_ps(xk->d));
            acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_cvtepi32_ps(s[h]), d));
        }
    }
    store_rows(y, acc[0], half_rows(n_rows, 0));
    if (n_rows > 8) store_rows(y + 8, acc[1], half_rows(n_rows, 1));
}
#endif

SD_T SD_INL void tile32(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                        const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                        const int kind, const int nt) {
#if !SD_X256_VNNI
    if (nt == 1 && (kind == K4 || kind == K50)) {
        tile32_1(gp, nb, xa, xb, y, n_rows, kind);
        return;
    }
#endif
    const size_t main = main32(kind);
    const int has_min = kind == K41 || kind == K51;
    const size_t tail = has_min ? 64 : 32;
    const size_t xbb = (kind == K8 || kind == K4) ? sizeof(sd_block_q8_0) : sizeof(sd_block_q8_s);
    const size_t qoff = (kind == K8 || kind == K4) ? 2 : 8;
    const uint8_t *tl = gp + (size_t)nb * main;
    const int nh = n_rows > 8 ? 2 : 1;
    v8f acc[2][SD_PT], sm[2][SD_PT];
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            acc[h][t] = sm[h][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        pf256(mp, main, SD_PF_BYTES_32); /* both halves: one stream of the group's lines */
        for (int h = 0; h < nh; h++) {
            v8i w[8], aw[8];
            unpack32(mp + 32 * h, kind, w, aw);
            const uint8_t *th = tl + (size_t)i * tail + 16 * h;
            const v8f dw = ldh(th);
            const v8f dm = has_min ? ldh(th + 32) : dw;
            for (int t = 0; t < nt; t++) {
                const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * xbb;
                const sd_xblk *xk = (const sd_xblk *)(const void *)(xb + (size_t)t * sb) + i;
                const v8i s = dot32(w, aw, xr + qoff, xk->corr, kind);
                const v8f d = _mm256_mul_ps(dw, _mm256_set1_ps(xk->d));
                acc[h][t] = _mm256_add_ps(acc[h][t], _mm256_mul_ps(_mm256_cvtepi32_ps(s), d));
                if (has_min) sm[h][t] = _mm256_add_ps(sm[h][t], _mm256_mul_ps(dm, bcf(xr + 4)));
            }
        }
    }
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            store_rows(y + t * ldy + 8 * h,
                       has_min ? _mm256_add_ps(acc[h][t], sm[h][t]) : acc[h][t],
                       half_rows(n_rows, h));
}

/* ---------------------------------------------------------------------------------- */
/* K-quants x Q8_K                                                                      */
/* ---------------------------------------------------------------------------------- */

/* Q4_K / Q5_K: the 6-bit scales and mins of one half (mp: main part + 32 * half) as bytes,
 * k45_scale's decoding done once for all 16: byte b of lane r of sc[0] is scale b of row r,
 * of sc[1] scale 4 + b; mn[0], mn[1] the mins alike. 16-bit shifts move bits across the
 * bytes of a lane, but every bit kept by the masks comes from its own byte. */
SD_T SD_INL void k45_bytes(const uint8_t *mp, v8i *sc, v8i *mn) {
    const v8i S = ld(mp), M = ld(mp + 64), S2 = ld(mp + 128);
    const v8i m63 = _mm256_set1_epi8(0x3F), m15 = _mm256_set1_epi8(0x0F);
    const v8i m48 = _mm256_set1_epi8(0x30);
    sc[0] = _mm256_and_si256(S, m63);
    mn[0] = _mm256_and_si256(M, m63);
    sc[1] =
        _mm256_or_si256(_mm256_and_si256(S2, m15), _mm256_and_si256(_mm256_srli_epi16(S, 2), m48));
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(S2, 4), m15),
                            _mm256_and_si256(_mm256_srli_epi16(M, 2), m48));
}

/* The int16 pair (byte b0, byte b1) of each 32-bit lane of v, zero-extended (one vpshufb). */
SD_T SD_INL v8i byte_pair(v8i v, const int b0, const int b1) {
    const char z = (char)0x80;
    const v8i c = _mm256_setr_epi8((char)b0, z, (char)b1, z, (char)(4 + b0), z, (char)(4 + b1), z,
                                   (char)(8 + b0), z, (char)(8 + b1), z, (char)(12 + b0), z,
                                   (char)(12 + b1), z, (char)b0, z, (char)b1, z, (char)(4 + b0), z,
                                   (char)(4 + b1), z, (char)(8 + b0), z, (char)(8 + b1), z,
                                   (char)(12 + b0), z, (char)(12 + b1), z);
    return _mm256_shuffle_epi8(v, c);
}

/* Q4_K / Q5_K: the min term of one half, sum over sub-blocks of min * (activation sum),
 * from its mins as bytes and the token's part-B sub-block sums xs (8 int16). */
SD_T SD_INL v8i k45_minsum(const v8i *mn, const uint8_t *xs) {
    v8i c = _mm256_setzero_si256();
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) c = _mm256_add_epi32(
        c, _mm256_madd_epi16(byte_pair(mn[j >> 1], 2 * (j & 1), 2 * (j & 1) + 1), bc4(xs + 4 * j)));
    return c;
}

/* Q4_K / Q5_K level vectors of sub-blocks 2j (lo) and 2j + 1 (hi) from the byte vector q
 * (qs vector 8j + k) and, for Q5_K, qh (the 5th-bit vector k). */
SD_T SD_INL void k45_levels(v8i q, v8i qh, const int five, const int j, v8i *lo, v8i *hi) {
    const v8i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (five) {
        *lo = or_and(*lo, shl(qh, 4 - 2 * j), b4);
        *hi = or_and(*hi, shl(qh, 3 - 2 * j), b4);
    }
}

#if !SD_X256_VNNI
/* Q4_K / Q5_K, one token (decode), AVX2: both halves at once, so each broadcast of 4
 * activation bytes feeds the products of both halves (16 rows), with the same arithmetic
 * per row as tile_k45. The padded rows of a group's last half are zero bytes in the
 * packed layout, computed and not stored. */
SD_T SD_INL void tile_k45_s(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                            const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                            const int kind, const int NT) {
    const int five = kind == KQ5;
    const int fold = five ? 4 : 8;
    const size_t main = main_k(kind);
    const size_t qso = five ? 704 : 192;
    const uint8_t *tl = gp + (size_t)nb * main;
    v8f acc[2][2];
    for (int t = 0; t < NT; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        pf256(mp, main, SD_PF_BYTES_K256);
        v8i P[2][2];
        for (int t = 0; t < NT; t++)
            P[t][0] = P[t][1] = _mm256_setzero_si256();
        v8i sc[2][2], mn[2][2];
        k45_bytes(mp, sc[0], mn[0]);
        k45_bytes(mp + 32, sc[1], mn[1]);
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            v8i al[2][2], ah[2][2]; /* [token][half] */
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                v8i lo[2], hi[2];
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                    k45_levels(ld(mp + qso + 64 * (8 * j + k) + 32 * h),
                               five ? ld(mp + 192 + 64 * k + 32 * h) : _mm256_setzero_si256(), five,
                               j, &lo[h], &hi[h]);
                _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++) {
                    const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 64 * j + 4 * k;
                    const v8i xl = bc4(x), xh = bc4(x + 32);
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        const v8i pl = _mm256_maddubs_epi16(lo[h], xl);
                        const v8i ph = _mm256_maddubs_epi16(hi[h], xh);
                        al[t][h] = in_reg(k % fold ? _mm256_add_epi16(al[t][h], pl) : pl);
                        ah[t][h] = in_reg(k % fold ? _mm256_add_epi16(ah[t][h], ph) : ph);
                    }
                }
                if (k % fold == fold - 1) {
                    const int b = 2 * (j & 1);
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        const v8i cl = byte_pair(sc[h][j >> 1], b, b);
                        const v8i ch = byte_pair(sc[h][j >> 1], b + 1, b + 1);
                        _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++) P[t][h] =
                            _mm256_add_epi32(P[t][h],
                                             _mm256_add_epi32(_mm256_madd_epi16(al[t][h], cl),
                                                              _mm256_madd_epi16(ah[t][h], ch)));
                    }
                }
            }
        }
        _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++) {
            const v8f xd = bcf(xa + (size_t)t * sa + (size_t)i * XK);
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const uint8_t *th = tl + (size_t)i * 64 + 16 * h;
                acc[t][h] = kfin(acc[t][h], P[t][h],
                                 k45_minsum(mn[h], xb + (size_t)t * sb + (size_t)i * 16), xd,
                                 ldh(th), ldh(th + 32), 1);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        store_rows(y + t * ldy, acc[t][0], half_rows(n_rows, 0));
        if (n_rows > 8) store_rows(y + t * ldy + 8, acc[t][1], half_rows(n_rows, 1));
    }
}

/* tile_k45_s per type and width, each its own function (inlined into the caller, the
 * registers of the caller's other paths made it spill). */
#define SD_K45S(NAME, KIND, NT)                                                                    \
    SD_T __attribute__((noinline)) static void NAME(                                               \
        const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa, const uint8_t *xb, size_t sb, \
        float *y, int64_t ldy, int n_rows) {                                                       \
        tile_k45_s(gp, nb, xa, sa, xb, sb, y, ldy, n_rows, KIND, NT);                              \
    }
SD_K45S(k45s_q4_1, KQ4, 1)
SD_K45S(k45s_q4_2, KQ4, 2)
SD_K45S(k45s_q5_1, KQ5, 1)
SD_K45S(k45s_q5_2, KQ5, 2)
#endif

/* Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins. Per half, the scales and
 * mins are decoded once into bytes (k45_bytes) and each sub-block's scale taken as its
 * vpmaddwd coefficient pair with one vpshufb; the sub-block loop is unrolled, so every
 * offset and shift is an immediate. */
SD_T SD_INL void tile_k45(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                          const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                          const int kind, const int nt) {
#if !SD_X256_VNNI
    /* Up to K45_PAIRS_MAX tokens: in pairs, the last alone. Each pair's pass over the
     * group's blocks unpacks them again (from cache) but keeps every sum in registers and
     * shares each broadcast between the two halves. Instructions per 16 x 256 super-block
     * (scripts/kernel_ir.sh, Q4_K): a pair 1216, one token 761; this tile beyond 2 tokens
     * about 1648 + 541 per token more, so pairs cost fewer up to 6 tokens. */
    if (nt <= K45_PAIRS_MAX) {
        int t0 = 0;
        for (; t0 + 2 <= nt; t0 += 2)
            (kind == KQ5 ? k45s_q5_2 : k45s_q4_2)(gp, nb, xa + (size_t)t0 * sa, sa,
                                                  xb + (size_t)t0 * sb, sb, y + t0 * ldy, ldy,
                                                  n_rows);
        if (t0 < nt)
            (kind == KQ5 ? k45s_q5_1 : k45s_q4_1)(gp, nb, xa + (size_t)t0 * sa, sa,
                                                  xb + (size_t)t0 * sb, sb, y + t0 * ldy, ldy,
                                                  n_rows);
        return;
    }
#endif
    const int five = kind == KQ5;
    const size_t main = main_k(kind);
    const size_t qso = five ? 704 : 192;
    const uint8_t *tl = gp + (size_t)nb * main;
    const int nh = n_rows > 8 ? 2 : 1;
    v8f acc[2][SD_PT];
    v8i P[SD_PT];
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            acc[h][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp0 = gp + (size_t)i * main;
        for (int h = 0; h < nh; h++) {
            const uint8_t *mp = mp0 + 32 * h;
            v8i sc[2], mn[2];
            k45_bytes(mp, sc, mn);
            /* P[t] starts at sub-block 0 (a zeroing loop here became a memset call) */
            /* one sub-block at a time: its 8 level vectors stay in registers through the
             * token loop (two at a time would spill) */
            _Pragma("GCC unroll 8") for (int sb = 0; sb < 8; sb++) {
                const int j = sb >> 1;
                const uint8_t *ms = mp;
                __asm__("" : "+r"(ms)); /* no reuse of the sub-block pair's loads: it spills */
                /* the block's prefetch spread over its 16 (half, sub-block) steps, not one burst */
                sd_prefetch_part(mp0, main, SD_PF_BYTES_K256, 8 * h + sb, 16);
                v8i w[8];
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                    v8i lo, hi;
                    k45_levels(ld(ms + qso + 64 * (8 * j + k)),
                               five ? ld(ms + 192 + 64 * k) : _mm256_setzero_si256(), five, j, &lo,
                               &hi);
                    w[k] = (sb & 1) ? hi : lo;
                }
#if SD_X256_VNNI
                const v8i sl = _mm256_and_si256(_mm256_srli_epi32(sc[sb >> 2], 8 * (sb & 3)),
                                                _mm256_set1_epi32(0xFF));
#else
                const v8i cl = byte_pair(sc[sb >> 2], sb & 3, sb & 3);
#endif
                for (int t = 0; t < nt; t++) {
                    const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 32 * sb;
                    const v8i p0 = sb ? P[t] : _mm256_setzero_si256();
#if SD_X256_VNNI
                    P[t] = _mm256_add_epi32(
                        p0, _mm256_mullo_epi32(dot4n(_mm256_setzero_si256(), w, 8, x), sl));
#else
                    P[t] = dotc(p0, w, 8, five ? 4 : 8, x, cl);
#endif
                }
            }
            const uint8_t *th = tl + (size_t)i * 64 + 16 * h;
            const v8f dw = ldh(th), dmn = ldh(th + 32);
            for (int t = 0; t < nt; t++) {
                const v8i M = k45_minsum(mn, xb + (size_t)t * sb + (size_t)i * 16);
                acc[h][t] =
                    kfin(acc[h][t], P[t], M, bcf(xa + (size_t)t * sa + (size_t)i * XK), dw, dmn, 1);
            }
        }
    }
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            store_rows(y + t * ldy + 8 * h, acc[h][t], half_rows(n_rows, h));
}

/* Q2_K / Q3_K / Q6_K: 16 groups of 16 (two per 32-element step hk). */
SD_T SD_INL void tile_k236(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                           const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                           const int kind, const int nt) {
    (void)xb;
    (void)sb;
    const size_t main = main_k(kind);
    const size_t tail = kind == KQ2 ? 64 : 32;
    const uint8_t *tl = gp + (size_t)nb * main;
    const int nh = n_rows > 8 ? 2 : 1;
    v8f acc[2][SD_PT];
    v8i P[SD_PT];
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            acc[h][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp0 = gp + (size_t)i * main;
        sd_prefetch_at(mp0, main, SD_PF_BYTES_256); /* not pf256: see its comment */
        for (int h = 0; h < nh; h++) {
            const uint8_t *mp = mp0 + 32 * h;
            for (int t = 0; t < nt; t++)
                P[t] = _mm256_setzero_si256();
            /* unrolled: the level and scale shifts become immediates */
            _Pragma("GCC unroll 8") for (int hk = 0; hk < 8; hk++) {
                v8i w[8];
                unpack_k236(mp, kind, hk, w);
                const v8i sa0 = k_scale(mp, kind, 2 * hk), sa1 = k_scale(mp, kind, 2 * hk + 1);
#if !SD_X256_VNNI
                const v8i c0 = pair16(sa0, sa0), c1 = pair16(sa1, sa1);
                const int fold = kind == KQ6 ? 2 : 4;
#endif
                for (int t = 0; t < nt; t++) {
                    const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 32 * hk;
#if SD_X256_VNNI
                    const v8i da = dot4n(_mm256_setzero_si256(), w, 4, x);
                    const v8i db = dot4n(_mm256_setzero_si256(), w + 4, 4, x + 16);
                    P[t] = _mm256_add_epi32(P[t], _mm256_add_epi32(_mm256_mullo_epi32(da, sa0),
                                                                   _mm256_mullo_epi32(db, sa1)));
#else
                    P[t] = dotc(dotc(P[t], w, 4, fold, x, c0), w + 4, 4, fold, x + 16, c1);
#endif
                }
            }
            v8i pc[8];
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] = k_pair(mp, kind, j);
            const uint8_t *th = tl + (size_t)i * tail + 16 * h;
            const v8f dw = ldh(th);
            const v8f dmn = kind == KQ2 ? ldh(th + 32) : _mm256_setzero_ps();
            for (int t = 0; t < nt; t++) {
                const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * XK;
                const v8i c = pairdot(pc, 8, xr + 260);
                v8i Pt = P[t], M = _mm256_setzero_si256();
                if (kind == KQ2)
                    M = c;
                else /* levels stored with the offset (4 or 32) added: take it out */
                    Pt = _mm256_sub_epi32(Pt, _mm256_slli_epi32(c, kind == KQ3 ? 2 : 5));
                acc[h][t] = kfin(acc[h][t], Pt, M, bcf(xr), dw, dmn, kind == KQ2);
            }
        }
    }
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            store_rows(y + t * ldy + 8 * h, acc[h][t], half_rows(n_rows, h));
}

#if !SD_X256_VNNI
/* The int16 pair (b0, b1) of each 32-bit lane of v taken as signed bytes, sign-extended:
 * one vpshufb into the high byte of each int16, one arithmetic shift. */
SD_T SD_INL v8i sbyte_pair(v8i v, const int b0, const int b1) {
    const char z = (char)0x80;
    const v8i c =
        _mm256_setr_epi8(z, (char)b0, z, (char)b1, z, (char)(4 + b0), z, (char)(4 + b1), z,
                         (char)(8 + b0), z, (char)(8 + b1), z, (char)(12 + b0), z, (char)(12 + b1),
                         z, (char)b0, z, (char)b1, z, (char)(4 + b0), z, (char)(4 + b1), z,
                         (char)(8 + b0), z, (char)(8 + b1), z, (char)(12 + b0), z, (char)(12 + b1));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, c), 8);
}

#endif

#if !SD_X256_VNNI
/* Q6_K, AVX2: both halves at once, one 16-element group (one scale) at a time. The
 * group's 4 level vectors of each half are unpacked once; then every token of the chunk
 * runs on them, each broadcast of 4 activation bytes feeding the products of all 16 rows
 * (tile_k236 broadcasts per half), two products summed in int16 (the 6-bit fold) and
 * widened by the group's scale pair, taken with the level-offset pairs straight from the
 * int8 scale bytes (sbyte_pair, as tile_q6_1: 2 instructions where k_scale + pair16 took 5;
 * 2444.7 -> 2328.7 / 4127.1 -> 4011.1 / 6370.4 -> 6254.4 Ir per 16 x 256 super-block at
 * 2 / 5 / 9 tokens, scripts/kernel_ir.sh). The integer sums are the same as tile_k236's (exact,
 * in another order), the float part is the same: the scalar oracle's bits. The padded
 * rows of a group's last half are zero bytes in the packed layout, computed and not
 * stored. */
SD_T SD_INL void tile_q6_s(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa, float *y,
                           int64_t ldy, int n_rows, const int nt) {
    const size_t main = main_k(KQ6);
    const uint8_t *tl = gp + (size_t)nb * main;
    v8f acc[SD_PT][2];
    v8i P[SD_PT][2];
    for (int t = 0; t < nt; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        for (int t = 0; t < nt; t++)
            P[t][0] = P[t][1] = _mm256_setzero_si256();
        /* unrolled: the level and scale shifts become immediates */
        _Pragma("GCC unroll 16") for (int g = 0; g < 16; g++) {
            const int hk = g >> 1, h6 = hk >> 2, k = hk & 3, kk0 = 4 * (g & 1);
            const uint8_t *ms = mp;
            __asm__("" : "+r"(ms)); /* no hoisting of the next groups' unpacking: it spills */
            /* the block's prefetch spread over its 16 groups, not one burst */
            sd_prefetch_part(mp, main, SD_PF_BYTES_K256, g, 16);
            v8i w[2][4], c[2];
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const uint8_t *mh = ms + 32 * h;
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
                    w[h][q] = q6_level(mh, h6, k, kk0 + q);
                }
                c[h] = sbyte_pair(ld(mh + 3072 + 64 * (g >> 2)), g & 3, g & 3);
            }
            for (int t = 0; t < nt; t++) {
                const uint8_t *x = xa + (size_t)t * sa + (size_t)i * XK + 4 + 16 * g;
                _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) {
                    v8i m[2];
                    _Pragma("GCC unroll 2") for (int q = 2 * j; q < 2 * j + 2; q++) {
                        const v8i b = bc4(x + 4 * q);
                        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                            const v8i p = _mm256_maddubs_epi16(w[h][q], b);
                            m[h] = in_reg(q & 1 ? _mm256_add_epi16(m[h], p) : p);
                        }
                    }
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) P[t][h] =
                        _mm256_add_epi32(P[t][h], _mm256_madd_epi16(m[h], c[h]));
                }
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const uint8_t *mh = mp + 32 * h;
            v8i pc[8];
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) pc[j] =
                sbyte_pair(ld(mh + 3072 + 64 * (j >> 1)), 2 * (j & 1), 2 * (j & 1) + 1);
            const v8f dw = ldh(tl + (size_t)i * 32 + 16 * h);
            for (int t = 0; t < nt; t++) {
                const uint8_t *xr = xa + (size_t)t * sa + (size_t)i * XK;
                const v8i cs = pairdot(pc, 8, xr + 260);
                /* levels stored with the offset 32 added: take it out */
                const v8i Pt = _mm256_sub_epi32(P[t][h], _mm256_slli_epi32(cs, 5));
                acc[t][h] = kfin(acc[t][h], Pt, _mm256_setzero_si256(), bcf(xr), dw,
                                 _mm256_setzero_ps(), 0);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        store_rows(y + t * ldy, acc[t][0], half_rows(n_rows, 0));
        if (n_rows > 8) store_rows(y + t * ldy + 8, acc[t][1], half_rows(n_rows, 1));
    }
}
#endif

#if !SD_X256_VNNI
/* Q6_K, one token (decode), AVX2: both halves at once as tile_q6_s, but each level vector
 * (used once at one token) unpacked where it is multiplied, every sum in registers (the
 * super-block's sums kept a chain by in_reg, else GCC makes them a tree that spills), and
 * the int8 scales taken as vpmaddwd coefficient pairs straight from their bytes
 * (sbyte_pair: 2 instructions where k_scale + pair16 took 5), for the products and the
 * level-offset term alike. Integer sums exact, as tile_k236's and tile_q6_s's; the float
 * part the same: the scalar oracle's bits. Against tile_k236 (the one-token tile before):
 * 1737 -> 1566 Ir per super-block (scripts/kernel_ir.sh); 4096 x 4096 in cache, 1 thread,
 * Zen 5, SD_KERNELS=avx2, load ~5: 0.53-0.68 -> 0.43-0.62 ms (scripts/bench_quant.c). With
 * the regrouped Q6_K levels (q6_level) 1566 -> 1249 Ir per super-block; tile_q6_s 2329 -> 2060
 * / 4011 -> 3742 / 6254 -> 5986 at 2 / 5 / 9 tokens. */
SD_T SD_INL void tile_q6_1(const uint8_t *gp, int64_t nb, const uint8_t *xa, float *y, int n_rows) {
    const size_t main = main_k(KQ6);
    const uint8_t *tl = gp + (size_t)nb * main;
    v8f acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *mp = gp + (size_t)i * main;
        const uint8_t *xr = xa + (size_t)i * XK;
        sd_prefetch_at(mp, main, SD_PF_BYTES_256); /* not pf256: see its comment */
        v8i P[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        /* unrolled: the level and scale shifts become immediates */
        _Pragma("GCC unroll 16") for (int g = 0; g < 16; g++) {
            const int hk = g >> 1, h6 = hk >> 2, k = hk & 3, kk0 = 4 * (g & 1);
            const uint8_t *ms = mp;
            __asm__("" : "+r"(ms)); /* no hoisting of the next groups' unpacking: it spills */
            const uint8_t *x = xr + 4 + 16 * g;
            /* each level vector is used once: unpacked where it is multiplied */
            _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) {
                v8i m[2];
                _Pragma("GCC unroll 2") for (int q = 2 * j; q < 2 * j + 2; q++) {
                    const v8i b = bc4(x + 4 * q);
                    const int kk = kk0 + q;
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        const v8i p = _mm256_maddubs_epi16(q6_level(ms + 32 * h, h6, k, kk), b);
                        m[h] = in_reg(q & 1 ? _mm256_add_epi16(m[h], p) : p);
                    }
                }
                /* in_reg: a chain, not a tree of 32 live products */
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) P[h] = in_reg(_mm256_add_epi32(
                    P[h], _mm256_madd_epi16(m[h], sbyte_pair(ld(ms + 32 * h + 3072 + 64 * (g >> 2)),
                                                             g & 3, g & 3))));
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const uint8_t *mh = mp + 32 * h;
            v8i cs = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) cs =
                _mm256_add_epi32(cs, _mm256_madd_epi16(sbyte_pair(ld(mh + 3072 + 64 * (j >> 1)),
                                                                  2 * (j & 1), 2 * (j & 1) + 1),
                                                       bc4(xr + 260 + 4 * j)));
            /* levels stored with the offset 32 added: take it out */
            const v8i Pt = _mm256_sub_epi32(P[h], _mm256_slli_epi32(cs, 5));
            acc[h] = kfin(acc[h], Pt, _mm256_setzero_si256(), bcf(xr),
                          ldh(tl + (size_t)i * 32 + 16 * h), _mm256_setzero_ps(), 0);
        }
    }
    store_rows(y, acc[0], half_rows(n_rows, 0));
    if (n_rows > 8) store_rows(y + 8, acc[1], half_rows(n_rows, 1));
}

/* tile_q6_1 as its own function (as q6s_n: kept apart from the caller's registers) */
SD_T __attribute__((noinline)) static void q6_1(const uint8_t *gp, int64_t nb, const uint8_t *xa,
                                                float *y, int n_rows) {
    tile_q6_1(gp, nb, xa, y, n_rows);
}
#endif

#if !SD_X256_VNNI
/* tile_q6_s as its own function: inlined beside tile_k236 in the caller it spilled (width
 * 5: 4180 Ir per super-block against 3969) */
SD_T __attribute__((noinline)) static void q6s_n(const uint8_t *gp, int64_t nb, const uint8_t *xa,
                                                 size_t sa, float *y, int64_t ldy, int n_rows,
                                                 int nt) {
    tile_q6_s(gp, nb, xa, sa, y, ldy, n_rows, nt);
}
#endif

/* Q6_K: in the AVX2 set one token runs tile_q6_1, passes of 2 or more tokens tile_q6_s;
 * the AVX-VNNI set tile_k236 (tile_q6_s at one token: 1664 Ir per super-block against
 * tile_k236's 1592, scripts/kernel_ir.sh). */
SD_T SD_INL void tile_q6(const uint8_t *gp, int64_t nb, const uint8_t *xa, size_t sa,
                         const uint8_t *xb, size_t sb, float *y, int64_t ldy, int n_rows,
                         const int kind, const int nt) {
#if !SD_X256_VNNI
    if (nt == 1)
        q6_1(gp, nb, xa, y, n_rows);
    else
        q6s_n(gp, nb, xa, sa, y, ldy, n_rows, nt);
    return;
#endif
    tile_k236(gp, nb, xa, sa, xb, sb, y, ldy, n_rows, kind, nt);
}

SD_TILES(p_q8_0, tile32, K8)
SD_TILES(p_q4_0, tile32, K4)
SD_TILES(p_q5_0, tile32, K50)
SD_TILES(p_q4_1, tile32, K41)
SD_TILES(p_q5_1, tile32, K51)
SD_TILES(p_q2_k, tile_k236, KQ2)
SD_TILES(p_q3_k, tile_k236, KQ3)
SD_TILES(p_q4_k, tile_k45, KQ4)
SD_TILES(p_q5_k, tile_k45, KQ5)
SD_TILES(p_q6_k, tile_q6, KQ6)

#endif /* __x86_64__ */
#endif /* SD_QUANT_CPU_X256_H */
