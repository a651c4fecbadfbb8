/*
 * quant/kquants.c: reference dequantizers and quantizers of the K-quants (Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K: 256-element super-blocks, ggml-common.h layouts in sd_quant.h) and
 * of their activation type Q8_K.
 *
 * Dequantizers: gguf-py's numpy expressions (gguf/quants.py, the llama.cpp project's
 * Python reference) evaluated in the same order, in float: the scale of a sub-block is
 * the float product d * sc (and dmin * m), then x = (d * sc) * q - (dmin * m); never
 * fused (this file is compiled without FMA). Bit-identical to gguf.quants.dequantize
 * (tests/test_quant_ref.c).
 *
 * Quantizers: our own implementation of the algorithm published with ggml's k-quants
 * (llama.cpp PR 1684, ggml-quants.c make_qkx2_quants / make_qx_quants):
 *   - asymmetric types (Q2_K, Q4_K, Q5_K: x ~ s * q - m): per sub-block, a weighted
 *     least-squares fit of (s, m) to the rounded levels, tried for a few candidate
 *     inverse scales around nmax / (max - min), keeping the lowest weighted squared
 *     error; weights |x| + rms (Q4_K, Q5_K) or |x| (Q2_K);
 *   - symmetric types (Q3_K, Q6_K: x ~ s * q): per sub-block the scale maximising
 *     (sum w x q)^2 / (sum w q^2) over candidate inverse scales -(nmax + 0.1 k) / max,
 *     weights x^2;
 *   then the sub-block scales (and mins) are themselves quantized against the largest
 *   (6 bits: Q3_K, Q4_K, Q5_K; 8 bits: Q6_K; 4 bits: Q2_K), and every element is
 *   re-rounded with the scale it will be decoded with. Bytes differ from ggml's; the
 *   error is comparable (RMSE figures: tests/test_quant_ref.c and the report of
 *   scripts/quant_rmse.c).
 * Q8_K (activations): d = max / -127 with the signed value of largest magnitude,
 *   q = round(x / d) (ties to even) clamped to 127, bsums the exact sums per 16. A
 *   block holding a NaN or an infinity gets d = NaN (and q = 0), so the non-finite
 *   value reaches the matmul output instead of being rounded away.
 *
 * Non-finite inputs give unspecified but memory-safe bytes (every float -> int
 * conversion is clamped first); specdec quantize refuses them before they get here.
 */
#include "quant/sd_quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/quant_impl.h"

/* round to nearest, ties to even, clamped to [lo, hi]; NaN -> lo */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (!(v <= (float)hi)) return hi;
    return (int)nearbyintf(v);
}

/* ---------------------------------------------------------------------------------- */
/* Dequantizers                                                                         */
/* ---------------------------------------------------------------------------------- */

void sd_to_float_q2_k(const void *x, float *y, int64_t n) {
    const sd_block_q2_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++, y += SD_QK_K) {
        const float d = sd_fp16_to_fp32(b[i].d), dmin = sd_fp16_to_fp32(b[i].dmin);
        for (int e = 0; e < SD_QK_K; e++) {
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31, g = e >> 4;
            const int q = (b[i].qs[32 * h + l] >> (2 * k)) & 3;
            const float dl = d * (float)(b[i].scales[g] & 0x0F);
            const float ml = dmin * (float)(b[i].scales[g] >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

void sd_to_float_q3_k(const void *x, float *y, int64_t n) {
    const sd_block_q3_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++, y += SD_QK_K) {
        const float d = sd_fp16_to_fp32(b[i].d);
        int8_t sc[16];
        sd_k3_scales(b[i].scales, sc);
        for (int e = 0; e < SD_QK_K; e++) {
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            const int lo = (b[i].qs[32 * h + l] >> (2 * k)) & 3;
            const int hb = (b[i].hmask[l] >> (e >> 5)) & 1;
            const float dl = d * (float)sc[e >> 4];
            y[e] = dl * (float)(lo - (hb ? 0 : 4));
        }
    }
}

/* Q4_K and Q5_K share everything but the 5th bit (qh == NULL for Q4_K). */
static void to_float_k45(const uint16_t *dd, const uint8_t *scales, const uint8_t *qh,
                         const uint8_t *qs, float *y) {
    const float d = sd_fp16_to_fp32(dd[0]), dmin = sd_fp16_to_fp32(dd[1]);
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        sd_k4_scale_min(scales, s, &sc, &m);
        const float ds = d * (float)sc, dm = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const uint8_t byte = qs[32 * (s >> 1) + l];
            int q = (s & 1) ? (byte >> 4) : (byte & 0x0F);
            if (qh) q |= ((qh[l] >> s) & 1) << 4;
            y[32 * s + l] = ds * (float)q - dm;
        }
    }
}

void sd_to_float_q4_k(const void *x, float *y, int64_t n) {
    const sd_block_q4_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const uint16_t dd[2] = {b[i].d, b[i].dmin};
        to_float_k45(dd, b[i].scales, NULL, b[i].qs, y + i * SD_QK_K);
    }
}

void sd_to_float_q5_k(const void *x, float *y, int64_t n) {
    const sd_block_q5_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const uint16_t dd[2] = {b[i].d, b[i].dmin};
        to_float_k45(dd, b[i].scales, b[i].qh, b[i].qs, y + i * SD_QK_K);
    }
}

/* q (0..63) of element e of a Q6_K block */
static inline int q6_at(const sd_block_q6_k *b, int e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const uint8_t lo = b->ql[64 * h + 32 * (k & 1) + l];
    const int nib = (k >> 1) ? (lo >> 4) : (lo & 0x0F);
    return nib | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

void sd_to_float_q6_k(const void *x, float *y, int64_t n) {
    const sd_block_q6_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++, y += SD_QK_K) {
        const float d = sd_fp16_to_fp32(b[i].d);
        for (int e = 0; e < SD_QK_K; e++) {
            const float dl = d * (float)b[i].scales[e >> 4];
            y[e] = dl * (float)(q6_at(&b[i], e) - 32);
        }
    }
}

void sd_to_float_q8_k(const void *x, float *y, int64_t n) {
    const sd_block_q8_k *b = x;
    for (int64_t i = 0; i < n / SD_QK_K; i++)
        for (int j = 0; j < SD_QK_K; j++)
            y[i * SD_QK_K + j] = b[i].d * (float)b[i].qs[j];
}

/* ---------------------------------------------------------------------------------- */
/* Validation                                                                           */
/* ---------------------------------------------------------------------------------- */

int64_t sd_first_bad_q2_k(const void *x, int64_t nb) {
    const sd_block_q2_k *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d) || !sd_fp16_finite(b[i].dmin)) return i;
    return -1;
}

int64_t sd_first_bad_q3_k(const void *x, int64_t nb) {
    const sd_block_q3_k *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d)) return i;
    return -1;
}

int64_t sd_first_bad_q4_k(const void *x, int64_t nb) {
    const sd_block_q4_k *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d) || !sd_fp16_finite(b[i].dmin)) return i;
    return -1;
}

int64_t sd_first_bad_q5_k(const void *x, int64_t nb) {
    const sd_block_q5_k *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d) || !sd_fp16_finite(b[i].dmin)) return i;
    return -1;
}

int64_t sd_first_bad_q6_k(const void *x, int64_t nb) {
    const sd_block_q6_k *b = x;
    for (int64_t i = 0; i < nb; i++)
        if (!sd_fp16_finite(b[i].d)) return i;
    return -1;
}

/* ---------------------------------------------------------------------------------- */
/* Sub-block fits                                                                       */
/* ---------------------------------------------------------------------------------- */

/*
 * Asymmetric fit of x[n] (weights w) to levels L in [0, nmax]: x ~ scale * L - min with
 * min >= 0 (a sub-block that is all positive gets min = 0). Candidate inverse scales
 * (nmax + rmin + rdelta * k) / (max - min), k = 0..nstep, each followed by the weighted
 * least-squares (scale, min) for its rounded levels; the one with the lowest weighted
 * squared error wins (the first candidate is the plain min/max grid). Returns scale,
 * sets *min_out and L.
 */
static float fit_asym(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out,
                      float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0];
    float sum_w = 0, sum_x = 0;
    for (int j = 0; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
        sum_w += w[j];
        sum_x += w[j] * x[j];
    }
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { /* constant (and <= 0) sub-block */
        memset(L, 0, (size_t)n);
        *min_out = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1.0f / iscale, off = lo; /* x ~ scale * L + off, off <= 0 */
    float best = 0;
    for (int j = 0; j < n; j++) {
        L[j] = (uint8_t)round_clamp(iscale * (x[j] - lo), 0, nmax);
        const float diff = scale * L[j] + off - x[j];
        best += w[j] * diff * diff;
    }
    uint8_t aux[32];
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int j = 0; j < n; j++) {
            aux[j] = (uint8_t)round_clamp(iscale * (x[j] - lo), 0, nmax);
            sl += w[j] * aux[j];
            sl2 += w[j] * aux[j] * aux[j];
            sxl += w[j] * aux[j] * x[j];
        }
        const float det = sum_w * sl2 - sl * sl;
        if (!(det > 0)) continue;
        float s = (sum_w * sxl - sum_x * sl) / det;
        float o = (sl2 * sum_x - sl * sxl) / det;
        if (o > 0) { /* the fit wants a positive offset: pin it to 0 */
            o = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int j = 0; j < n; j++) {
            const float diff = s * aux[j] + o - x[j];
            err += w[j] * diff * diff;
        }
        if (err < best) {
            best = err;
            scale = s;
            off = o;
            memcpy(L, aux, (size_t)n);
        }
    }
    *min_out = -off;
    return scale;
}

/*
 * Symmetric fit of x[n] to levels in [-nmax, nmax - 1]: x ~ scale * L, weights x^2.
 * Candidate inverse scales -(nmax + 0.1 k) / max, k = -9..9, max the signed value of
 * largest magnitude; the one maximising (sum w x L)^2 / (sum w L^2) (the least-squares
 * error reduction) wins, with its least-squares scale. Returns 0 for an all-zero x.
 */
static float fit_sym(int n, int nmax, const float *x) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (!(amax > 1e-30f)) return 0.0f;
    float best_scale = 0, best = -1;
    for (int k = -9; k <= 9; k++) {
        const float iscale = -((float)nmax + 0.1f * (float)k) / max;
        float sxl = 0, sl2 = 0;
        for (int j = 0; j < n; j++) {
            const int l = round_clamp(iscale * x[j], -nmax, nmax - 1);
            const float w = x[j] * x[j];
            sxl += w * x[j] * (float)l;
            sl2 += w * (float)(l * l);
        }
        if (sl2 > 0 && (best < 0 || sxl * sxl > best * sl2)) {
            best_scale = sxl / sl2;
            best = best_scale * sxl;
        }
    }
    return best_scale;
}

/* ---------------------------------------------------------------------------------- */
/* Quantizers                                                                           */
/* ---------------------------------------------------------------------------------- */

/* Q4_K (nbits 4) and Q5_K (nbits 5): 8 sub-blocks of 32, 6-bit scales and mins.
 * qh == NULL for Q4_K. */
static void from_float_k45(const float *x, int nbits, uint16_t *dd, uint8_t *scales, uint8_t *qh,
                           uint8_t *qs) {
    const int nmax = (1 << nbits) - 1;
    float sc[8], mn[8], w[32];
    uint8_t L[SD_QK_K];
    float max_sc = 0, max_mn = 0;
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        float sum2 = 0;
        for (int l = 0; l < 32; l++)
            sum2 += xs[l] * xs[l];
        const float rms = sqrtf(sum2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = rms + fabsf(xs[l]);
        sc[s] = nbits == 4 ? fit_asym(32, nmax, xs, w, L + 32 * s, &mn[s], -1.0f, 0.1f, 20)
                           : fit_asym(32, nmax, xs, w, L + 32 * s, &mn[s], -0.5f, 0.1f, 15);
        max_sc = fmaxf(max_sc, sc[s]);
        max_mn = fmaxf(max_mn, mn[s]);
    }
    const float inv_sc = max_sc > 0 ? 63.0f / max_sc : 0.0f;
    const float inv_mn = max_mn > 0 ? 63.0f / max_mn : 0.0f;
    uint8_t ls[8], lm[8];
    for (int s = 0; s < 8; s++) {
        ls[s] = (uint8_t)round_clamp(inv_sc * sc[s], 0, 63);
        lm[s] = (uint8_t)round_clamp(inv_mn * mn[s], 0, 63);
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(ls[j] | ((ls[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(lm[j] | ((lm[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((ls[j + 4] & 0x0F) | ((lm[j + 4] & 0x0F) << 4));
    }
    dd[0] = sd_fp32_to_fp16(max_sc / 63.0f);
    dd[1] = sd_fp32_to_fp16(max_mn / 63.0f);
    const float d = sd_fp16_to_fp32(dd[0]), dmin = sd_fp16_to_fp32(dd[1]);
    for (int s = 0; s < 8; s++) { /* re-round with the scale the decoder will use */
        const float ds = d * (float)ls[s], dm = dmin * (float)lm[s];
        for (int l = 0; l < 32; l++)
            L[32 * s + l] = ds > 0 ? (uint8_t)round_clamp((x[32 * s + l] + dm) / ds, 0, nmax) : 0;
    }
    memset(qs, 0, SD_QK_K / 2);
    if (qh) memset(qh, 0, SD_QK_K / 8);
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) {
            const int q = L[32 * s + l];
            qs[32 * (s >> 1) + l] |= (uint8_t)((q & 0x0F) << (4 * (s & 1)));
            if (qh) qh[l] |= (uint8_t)(((q >> 4) & 1) << s);
        }
}

void sd_from_float_q4_k(const float *x, void *vy, int64_t n) {
    sd_block_q4_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        uint16_t dd[2];
        from_float_k45(x + i * SD_QK_K, 4, dd, y[i].scales, NULL, y[i].qs);
        y[i].d = dd[0];
        y[i].dmin = dd[1];
    }
}

void sd_from_float_q5_k(const float *x, void *vy, int64_t n) {
    sd_block_q5_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        uint16_t dd[2];
        from_float_k45(x + i * SD_QK_K, 5, dd, y[i].scales, y[i].qh, y[i].qs);
        y[i].d = dd[0];
        y[i].dmin = dd[1];
    }
}

void sd_from_float_q2_k(const float *x, void *vy, int64_t n) {
    sd_block_q2_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        float sc[16], mn[16], w[16];
        uint8_t L[SD_QK_K];
        float max_sc = 0, max_mn = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(xb[16 * g + l]);
            sc[g] = fit_asym(16, 3, xb + 16 * g, w, L + 16 * g, &mn[g], -0.5f, 0.1f, 15);
            max_sc = fmaxf(max_sc, sc[g]);
            max_mn = fmaxf(max_mn, mn[g]);
        }
        const float inv_sc = max_sc > 0 ? 15.0f / max_sc : 0.0f;
        const float inv_mn = max_mn > 0 ? 15.0f / max_mn : 0.0f;
        for (int g = 0; g < 16; g++) {
            const int ls = round_clamp(inv_sc * sc[g], 0, 15);
            const int lm = round_clamp(inv_mn * mn[g], 0, 15);
            y[i].scales[g] = (uint8_t)(ls | (lm << 4));
        }
        y[i].d = sd_fp32_to_fp16(max_sc / 15.0f);
        y[i].dmin = sd_fp32_to_fp16(max_mn / 15.0f);
        const float d = sd_fp16_to_fp32(y[i].d), dmin = sd_fp16_to_fp32(y[i].dmin);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < SD_QK_K; e++) {
            const int g = e >> 4;
            const float ds = d * (float)(y[i].scales[g] & 0x0F);
            const float dm = dmin * (float)(y[i].scales[g] >> 4);
            const int q = ds > 0 ? round_clamp((xb[e] + dm) / ds, 0, 3) : 0;
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            y[i].qs[32 * h + l] |= (uint8_t)(q << (2 * k));
        }
    }
}

/* The signed value of largest magnitude among v[0..n) (first one on ties). */
static float signed_amax(const float *v, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(v[j]) > amax) {
            amax = fabsf(v[j]);
            max = v[j];
        }
    return max;
}

void sd_from_float_q3_k(const float *x, void *vy, int64_t n) {
    sd_block_q3_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        float sc[16];
        for (int g = 0; g < 16; g++)
            sc[g] = fit_sym(16, 4, xb + 16 * g);
        const float max_sc = signed_amax(sc, 16);
        memset(&y[i], 0, sizeof y[i]);
        int ls[16];
        float d = 0;
        if (max_sc != 0) {
            const float iscale = -32.0f / max_sc;
            for (int g = 0; g < 16; g++)
                ls[g] = round_clamp(iscale * sc[g], -32, 31);
            d = 1.0f / iscale;
        } else {
            for (int g = 0; g < 16; g++)
                ls[g] = 0;
        }
        for (int g = 0; g < 16; g++) {
            const int v = ls[g] + 32;
            if (g < 8)
                y[i].scales[g] |= (uint8_t)(v & 0x0F);
            else
                y[i].scales[g - 8] |= (uint8_t)((v & 0x0F) << 4);
            y[i].scales[8 + (g & 3)] |= (uint8_t)(((v >> 4) & 3) << (2 * (g >> 2)));
        }
        y[i].d = sd_fp32_to_fp16(d);
        const float dh = sd_fp16_to_fp32(y[i].d);
        for (int e = 0; e < SD_QK_K; e++) {
            const float ds = dh * (float)ls[e >> 4];
            const int v = ds != 0 ? round_clamp(xb[e] / ds, -4, 3) : 0;
            const int u = v + 4; /* 0..7: high bit in hmask, low 2 bits in qs */
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            y[i].qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * k));
            y[i].hmask[l] |= (uint8_t)((u >> 2) << (e >> 5));
        }
    }
}

void sd_from_float_q6_k(const float *x, void *vy, int64_t n) {
    sd_block_q6_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        float sc[16];
        for (int g = 0; g < 16; g++)
            sc[g] = fit_sym(16, 32, xb + 16 * g);
        const float max_sc = signed_amax(sc, 16);
        memset(&y[i], 0, sizeof y[i]);
        float d = 0;
        if (max_sc != 0) {
            const float iscale = -128.0f / max_sc;
            for (int g = 0; g < 16; g++)
                y[i].scales[g] = (int8_t)round_clamp(iscale * sc[g], -128, 127);
            d = 1.0f / iscale;
        }
        y[i].d = sd_fp32_to_fp16(d);
        const float dh = sd_fp16_to_fp32(y[i].d);
        for (int e = 0; e < SD_QK_K; e++) {
            const float ds = dh * (float)y[i].scales[e >> 4];
            const int q = (ds != 0 ? round_clamp(xb[e] / ds, -32, 31) : 0) + 32;
            const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            y[i].ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((q & 0x0F) << (4 * (k >> 1)));
            y[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
}

void sd_from_float_q8_k(const float *x, void *vy, int64_t n) {
    sd_block_q8_k *y = vy;
    for (int64_t i = 0; i < n / SD_QK_K; i++) {
        const float *xb = x + i * SD_QK_K;
        const float max = signed_amax(xb, SD_QK_K);
        memset(&y[i], 0, sizeof y[i]);
        int finite = 1;
        for (int j = 0; j < SD_QK_K; j++)
            finite &= isfinite(xb[j]) != 0;
        if (!finite) { /* NaN / inf activations must not vanish: d = NaN poisons the dot */
            y[i].d = NAN;
            continue;
        }
        if (!(fabsf(max) > 0)) continue; /* all-zero block: d = 0 */
        const float iscale = -127.0f / max;
        for (int j = 0; j < SD_QK_K; j++)
            y[i].qs[j] = (int8_t)round_clamp(iscale * xb[j], -128, 127);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}
