/*
 * quant/cpu/avx512.c: AVX-512 row kernels (kernel set "avx512"; needs AVX-512 F, BW,
 * VL and VNNI plus FMA/F16C, checked by the dispatcher in dispatch.c). Weight types
 * without an AVX-512 kernel here fall back to the AVX2 set (kernels.h: `lower`).
 *
 * No global -m flags: functions carry __attribute__((target(...))). Non-x86-64 builds
 * compile this file to nothing.
 *
 * Q8_0 / Q4_0 x Q8_0: rows outer; all tokens of a call in groups of at most SD_QNT (16),
 *   so one pass over a weight row feeds up to 16 tokens, and the weight-side work
 *   (loading, Q4_0 nibble unpacking, scales) is done once per row per group. Blocks go
 *   in octets of 8 (layout at SD_XOCT below): per token and octet 4 VNNI dpbusd into one
 *   vector (per 32-bit lane the exact int dot of 16 elements of one block), one int->float
 *   conversion, d = dw * dx, acc = fma(float(p), d, acc). dpbusd wants unsigned x signed:
 *   weights are the unsigned operand (Q4_0 nibbles q, Q8_0 w + 128) and the offset
 *   (8 or 128 times the lane's sum of x) is an activation property, precomputed with the
 *   packed activations as the dpbusd starting value. The packed activations are part B of
 *   the prepared activations (sd_quant.h), written once per matmul by
 *   sd_quantize_activations (avx512_pack_row) into caller-provided memory:
 *   [group][octet][token] of SD_XOCT bytes each; the kernels only read them and allocate
 *   nothing. Each (row, token) runs the same instructions in the same order in any
 *   group, so results do not depend on n_tok / grouping / r0 / r1.
 * Activation Q8_0 quantization (sd_quantize_activations): vectorized, byte-identical to
 *   the scalar reference.
 * F32 / F16 / BF16 x F32: two 16-lane FMA accumulators per token (32 columns per step),
 *   masked loads for the tail; F16 via vcvtph2ps, BF16 via zero-extend + shift 16.
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define SD_T   __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define SD_INL static inline __attribute__((always_inline))
#define SD_NT  4 /* tokens per tile */

SD_T SD_INL float hsum16(__m512 v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* ---------------------------------------------------------------------------------- */
/* Q8_0 / Q4_0 weights x Q8_0 activations                                               */
/* ---------------------------------------------------------------------------------- */

#define SD_QNT  16  /* most tokens per group: one pass over a weight row feeds them all */
#define SD_XOCT 384 /* packed activation bytes per token per octet (8 blocks) */

/*
 * Octet layout. 8 blocks (256 elements) are held in 4 vectors V0..V3: qword b (b = 0..7)
 * of V_k is elements [8k, 8k + 8) of block b. So 32-bit lanes 2b and 2b + 1 only ever
 * see block b, and the four VNNI dot products of an octet accumulate into one vector:
 * per lane the exact sum of 16 products of one block. Weights and activations use the
 * same layout (weights rearranged in registers, activations packed once per matmul).
 */

/* V0..V3 (signed int8) of 8 Q8_0 blocks b[0..7]: a 4 x 8 qword transpose. */
SD_T SD_INL void oct_q8(const sd_block_q8_0 *b, __m512i v[4]) {
    __m512i z[4];
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) /* z_j = [block 2j | block 2j+1] */
        z[j] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[2 * j].qs)),
            _mm256_loadu_si256((const __m256i *)b[2 * j + 1].qs), 1);
    const __m512i i1 = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i i2 = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2);
    const __m512i s0 = _mm512_permutex2var_epi64(z[0], i1, z[1]); /* q0 of 0..3, q1 of 0..3 */
    const __m512i s1 = _mm512_permutex2var_epi64(z[0], i2, z[1]); /* q2, q3 of 0..3 */
    const __m512i s2 = _mm512_permutex2var_epi64(z[2], i1, z[3]); /* q0, q1 of 4..7 */
    const __m512i s3 = _mm512_permutex2var_epi64(z[2], i2, z[3]);
    v[0] = _mm512_shuffle_i64x2(s0, s2, _MM_SHUFFLE(1, 0, 1, 0));
    v[1] = _mm512_shuffle_i64x2(s0, s2, _MM_SHUFFLE(3, 2, 3, 2));
    v[2] = _mm512_shuffle_i64x2(s1, s3, _MM_SHUFFLE(1, 0, 1, 0));
    v[3] = _mm512_shuffle_i64x2(s1, s3, _MM_SHUFFLE(3, 2, 3, 2));
}

/* V0..V3 (unsigned nibbles q, 0..15) of 8 Q4_0 blocks. Block bytes qs[0..7] hold
 * elements 0..7 (low nibbles) and 16..23 (high), qs[8..15] elements 8..15 and 24..31. */
SD_T SD_INL void oct_q4(const sd_block_q4_0 *b, __m512i v[4]) {
#define SD_LQ(k) _mm_loadu_si128((const __m128i *)b[k].qs)
    __m512i z0 = _mm512_castsi128_si512(SD_LQ(0)), z1 = _mm512_castsi128_si512(SD_LQ(4));
    z0 = _mm512_inserti32x4(z0, SD_LQ(1), 1); /* immediates: no loop (-O0 builds) */
    z1 = _mm512_inserti32x4(z1, SD_LQ(5), 1);
    z0 = _mm512_inserti32x4(z0, SD_LQ(2), 2);
    z1 = _mm512_inserti32x4(z1, SD_LQ(6), 2);
    z0 = _mm512_inserti32x4(z0, SD_LQ(3), 3);
    z1 = _mm512_inserti32x4(z1, SD_LQ(7), 3);
#undef SD_LQ
    const __m512i r0 =
        _mm512_permutex2var_epi64(z0, _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), z1);
    const __m512i r1 =
        _mm512_permutex2var_epi64(z0, _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1), z1);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    v[0] = _mm512_and_si512(r0, m4);
    v[1] = _mm512_and_si512(r1, m4);
    v[2] = _mm512_and_si512(_mm512_srli_epi16(r0, 4), m4);
    v[3] = _mm512_and_si512(_mm512_srli_epi16(r1, 4), m4);
}

/* The 8 fp16 scales d[0..7] (stride bytes apart) as floats, lanes 2b and 2b+1 = d[b]. */
SD_T SD_INL __m512 oct_scales(const unsigned char *d, size_t stride) {
    uint64_t lo = 0, hi = 0;
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        uint16_t a, c;
        memcpy(&a, d + (size_t)j * stride, 2);
        memcpy(&c, d + (size_t)(4 + j) * stride, 2);
        lo |= (uint64_t)a << (16 * j);
        hi |= (uint64_t)c << (16 * j);
    }
    const __m256i dup = _mm256_set_epi16(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(
        dup, _mm256_castsi128_si256(_mm_set_epi64x((long long)hi, (long long)lo))));
}

/* Weight octet at blocks [i, i + 8) of row wr (all present): V0..V3 as the unsigned
 * dpbusd operand (Q8_0: w + 128 = w ^ 0x80; Q4_0: the nibbles q) and the scales. */
SD_T SD_INL void w_oct(const void *wr, int64_t i, const int kind, __m512i v[4], __m512 *dw) {
    if (kind == 8) {
        const sd_block_q8_0 *b = (const sd_block_q8_0 *)wr + i;
        oct_q8(b, v);
        const __m512i s = _mm512_set1_epi8((char)0x80);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) v[k] = _mm512_xor_si512(v[k], s);
        *dw = oct_scales((const unsigned char *)b, sizeof *b);
    } else {
        const sd_block_q4_0 *b = (const sd_block_q4_0 *)wr + i;
        oct_q4(b, v);
        *dw = oct_scales((const unsigned char *)b, sizeof *b);
    }
}

/* A last, partial octet (nv < 8 blocks from i): copied to zeroed blocks, so absent
 * blocks have q = 0 (Q4_0), w = 0 (Q8_0) and scale +0; their activations are 0 too. */
SD_T SD_INL void w_oct_tail(const void *wr, int64_t i, int64_t nv, const int kind, __m512i v[4],
                            __m512 *dw) {
    if (kind == 8) {
        sd_block_q8_0 tmp[8];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, (const sd_block_q8_0 *)wr + i, (size_t)nv * sizeof tmp[0]);
        w_oct(tmp, 0, 8, v, dw);
    } else {
        sd_block_q4_0 tmp[8];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, (const sd_block_q4_0 *)wr + i, (size_t)nv * sizeof tmp[0]);
        w_oct(tmp, 0, 4, v, dw);
    }
}

/* Pack one activation octet (Q8_0 blocks xb[0..nv), nv <= 8, absent blocks are 0) to
 * out[SD_XOCT] (64-byte aligned when the prepared buffer is): V0..V3 (signed x), then the int32
 * lane correction corr = -c * (sum of the 16 x of the lane) with c = 128 (Q8_0 weights stored as w
 * + 128) or 8 (Q4_0: q - 8), then the scales as floats (lanes 2b, 2b+1 = dx_b). */
SD_T SD_INL void x_oct(const sd_block_q8_0 *xb, int64_t nv, const int kind, uint8_t *out) {
    sd_block_q8_0 tmp[8];
    if (nv < 8) {
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, xb, (size_t)nv * sizeof tmp[0]);
        xb = tmp;
    }
    __m512i v[4];
    oct_q8(xb, v);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i sx = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        _mm512_storeu_si512((__m512i *)(out + 64 * k), v[k]);
        sx = _mm512_dpbusd_epi32(sx, ones, v[k]); /* sum of x per lane */
    }
    const __m512i corr =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sx, kind == 8 ? 7 : 3));
    _mm512_storeu_si512((__m512i *)(out + 256), corr);
    _mm512_storeu_ps((float *)(out + 320), oct_scales((const unsigned char *)xb, sizeof *xb));
}

/* One octet for nt tokens; xp: the octet's packed activations of the nt tokens, one
 * after the other. Per token: p = corr + sum_k dpbusd(V_k(w), V_k(x)) = per lane the
 * exact int dot of 16 weights (Q4_0: q - 8) and activations of one block, then
 * acc = fma(float(p), dw * dx, acc). The weight-side work is shared by all tokens. */
SD_T SD_INL void q_oct(const __m512i v[4], __m512 dw, const int nt, const uint8_t *xp,
                       __m512 *acc) {
    _Pragma("GCC unroll 16") for (int t = 0; t < nt; t++) {
        const uint8_t *x = xp + (size_t)t * SD_XOCT;
        __m512i p = _mm512_loadu_si512((const __m512i *)(x + 256));
        p = _mm512_dpbusd_epi32(p, v[0], _mm512_loadu_si512((const __m512i *)(x + 0)));
        p = _mm512_dpbusd_epi32(p, v[1], _mm512_loadu_si512((const __m512i *)(x + 64)));
        p = _mm512_dpbusd_epi32(p, v[2], _mm512_loadu_si512((const __m512i *)(x + 128)));
        p = _mm512_dpbusd_epi32(p, v[3], _mm512_loadu_si512((const __m512i *)(x + 192)));
        const __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps((const float *)(x + 320)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[t]);
    }
}

/* res[t] = dot(weight row wr, activation row t), t < nt. Packed activations xp:
 * [octet][token][SD_XOCT]. */
SD_T SD_INL void qgroup(const void *wr, int64_t nb, const int kind, const int nt, const uint8_t *xp,
                        float *res) {
    __m512 acc[SD_QNT];
    _Pragma("GCC unroll 16") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    __m512i v[4];
    __m512 dw;
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        w_oct(wr, i, kind, v, &dw);
        q_oct(v, dw, nt, xp, acc);
        xp += (size_t)nt * SD_XOCT;
    }
    if (i < nb) {
        w_oct_tail(wr, i, nb - i, kind, v, &dw);
        q_oct(v, dw, nt, xp, acc);
    }
    _Pragma("GCC unroll 16") for (int t = 0; t < nt; t++) res[t] = hsum16(acc[t]);
}

#define SD_QG(K, NT)                                                                               \
    SD_T static void qgroup_##K##_##NT(const void *wr, int64_t nb, const uint8_t *xp,              \
                                       float *res) {                                               \
        qgroup(wr, nb, K, NT, xp, res);                                                            \
    }
#define SD_QG_ALL(K)                                                                               \
    SD_QG(K, 1)                                                                                    \
    SD_QG(K, 2)                                                                                    \
    SD_QG(K, 3)                                                                                    \
    SD_QG(K, 4) SD_QG(K, 5) SD_QG(K, 6) SD_QG(K, 7) SD_QG(K, 8) SD_QG(K, 9) SD_QG(K, 10)           \
        SD_QG(K, 11) SD_QG(K, 12) SD_QG(K, 13) SD_QG(K, 14) SD_QG(K, 15) SD_QG(K, 16)
SD_QG_ALL(8)
SD_QG_ALL(4)

typedef void (*qgroup_fn)(const void *, int64_t, const uint8_t *, float *);
#define SD_QG_TAB(K)                                                                               \
    {                                                                                              \
        qgroup_##K##_1, qgroup_##K##_2, qgroup_##K##_3, qgroup_##K##_4, qgroup_##K##_5,            \
            qgroup_##K##_6, qgroup_##K##_7, qgroup_##K##_8, qgroup_##K##_9, qgroup_##K##_10,       \
            qgroup_##K##_11, qgroup_##K##_12, qgroup_##K##_13, qgroup_##K##_14, qgroup_##K##_15,   \
            qgroup_##K##_16                                                                        \
    }
static const qgroup_fn k_qgroup8[SD_QNT] = SD_QG_TAB(8);
static const qgroup_fn k_qgroup4[SD_QNT] = SD_QG_TAB(4);

/* Tokens are processed in ng = ceil(n_tok / SD_QNT) groups of near-equal size: group g
 * is tokens [n_tok * g / ng, n_tok * (g + 1) / ng); its packed activations start at
 * part-B offset b0 * n_oct * SD_XOCT, [octet][token in group]. */
static void group_of(int64_t n_tok, int64_t b, int64_t *b0, int64_t *nt) {
    const int64_t ng = (n_tok + SD_QNT - 1) / SD_QNT;
    int64_t g = b * ng / n_tok; /* near the answer; exact after the fix-ups */
    while (n_tok * (g + 1) / ng <= b)
        g++;
    while (n_tok * g / ng > b)
        g--;
    *b0 = n_tok * g / ng;
    *nt = n_tok * (g + 1) / ng - *b0;
}

static size_t avx512_pack_tok_bytes(int64_t n_cols) {
    return (size_t)((n_cols / 32 + 7) / 8) * SD_XOCT;
}

/* Part B for row b of a batch of n_tok: its octets at [group][octet][token]. */
SD_T static void avx512_pack_row(sd_type wt, const void *vxr, int64_t n, int64_t n_tok, int64_t b,
                                 void *pb) {
    const sd_block_q8_0 *xr = (const sd_block_q8_0 *)vxr;
    const int kind = wt == SD_TYPE_Q8_0 ? 8 : 4;
    const int64_t nb = n / 32, no = (nb + 7) / 8;
    int64_t b0, nt;
    group_of(n_tok, b, &b0, &nt);
    uint8_t *gp = (uint8_t *)pb + (size_t)(b0 * no) * SD_XOCT;
    for (int64_t o = 0; o < no; o++) {
        const int64_t nv = nb - 8 * o < 8 ? nb - 8 * o : 8;
        x_oct(xr + 8 * o, nv, kind, gp + (size_t)(o * nt + (b - b0)) * SD_XOCT);
    }
}

SD_T SD_INL void qrows(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = n / 32, no = (nb + 7) / 8;
    const int64_t ng = (n_tok + SD_QNT - 1) / SD_QNT;
    const uint8_t *pb = (const uint8_t *)xq + sd_act_pack_offset(n_tok, n);
    const qgroup_fn *tab = kind == 8 ? k_qgroup8 : k_qgroup4;
    float res[SD_QNT];
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = (const char *)w + (size_t)r * wrb;
        for (int64_t g = 0; g < ng; g++) {
            const int64_t b0 = n_tok * g / ng, b1 = n_tok * (g + 1) / ng;
            tab[b1 - b0 - 1](wr, nb, pb + (size_t)(b0 * no) * SD_XOCT, res);
            for (int64_t b = b0; b < b1; b++)
                y[b * ldy + r] = res[b - b0];
        }
    }
}

SD_T static void avx512_q8_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                             float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 8);
}

SD_T static void avx512_q4_0(const void *w, size_t wrb, int64_t n, const void *xq, int64_t n_tok,
                             float *y, int64_t ldy, int64_t r0, int64_t r1) {
    qrows(w, wrb, n, xq, n_tok, y, ldy, r0, r1, 4);
}

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

static const sd_act_pack avx512_pack = {avx512_pack_tok_bytes, avx512_pack_row};

/* Types without an entry here (Q4_1, Q5_0, Q5_1, the K-quants) run the AVX2 kernels. */
const sd_kernel_set sd_kernels_avx512 = {
    .name = "avx512",
    .lower = &sd_kernels_avx2,
    .k =
        {
            [SD_TYPE_F32] = {avx512_f32, NULL},
            [SD_TYPE_F16] = {avx512_f16, NULL},
            [SD_TYPE_BF16] = {avx512_bf16, NULL},
            [SD_TYPE_Q8_0] = {avx512_q8_0, &avx512_pack},
            [SD_TYPE_Q4_0] = {avx512_q4_0, &avx512_pack},
        },
    .quant = {[SD_TYPE_Q8_0] = avx512_quant_q8_0},
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avx512_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
