/*
 * tests/test_quant_kernels.c: quant/'s activation preparation and matmul row kernels,
 * for every weight type and every kernel set this CPU can run:
 *   - the prepared-activation layout (sizes, part A == the reference quantizer, split
 *     preparation == one call, nothing written past the size, bad shapes refused);
 *   - every kernel against an exact double-precision dot of the weights and
 *     activations, both decoded here independently of quant/ from the ggml layouts
 *     (error bound from the kernel's float operation count);
 *   - every SIMD level BIT FOR BIT against the scalar oracle on odd shapes (rows not a
 *     multiple of any chunk or of the 16-row groups, n_tok 1..17): quantized types through
 *     the sets' packed kernels on weights packed here (quant/pack_impl.h), float types
 *     through their row kernels;
 *   - the packed layout: pack -> unpack gives the GGUF rows back, padding rows are zero;
 *   - batch == single bit for bit (and any row split, and a slice of the tokens);
 *   - per-type fallback and the public dispatch (sd_matmul_rows, sd_matmul_packed);
 *     non-finite activations reach the output (never rounded away).
 * White-box: includes quant/cpu/kernels.h (private to quant/) to reach each set.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"
#include "quant/sd_quant.h"

/* ---------------------------------------------------------------------------------- */
/* helpers                                                                              */
/* ---------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_f(uint64_t *s) {
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

static const sd_type k_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1,
                                  SD_TYPE_Q2_K, SD_TYPE_Q3_K, SD_TYPE_Q4_K, SD_TYPE_Q5_K,
                                  SD_TYPE_Q6_K};
#define N_TYPES (sizeof k_types / sizeof k_types[0])
/* "amx" (opt-in, SD_KERNELS=amx) runs only where the CPU has AMX-INT8 and Linux grants
 * the tile state; elsewhere sd_kernel_set_by_name says NULL and the tests skip it. */
static const char *const k_sets[] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};
#define N_SETS    (sizeof k_sets / sizeof k_sets[0])
#define N_DEFAULT 4 /* the sets the dispatcher picks from by default, lowest first */

/* block size of the kernel: columns must be a multiple of it (1 for float types) */
static int64_t qk(sd_type t) {
    const int64_t a = sd_type_block_elems(t), b = sd_type_block_elems(sd_vec_dot_type(t));
    return a > b ? a : b;
}

static size_t row_bytes(sd_type t, int64_t n) {
    size_t rb = 0;
    cr_assert_eq(sd_type_row_bytes(t, n, &rb), 0, "row_bytes(%s, %lld)", sd_type_name(t),
                 (long long)n);
    return rb;
}

/* n bytes (at least 1), 64-byte aligned */
static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 64) / 64 * 64);
    cr_assert_not_null(p);
    return p;
}

/* x[n_tok, n] prepared by kernel set ks for weights of type t, in a fresh 64-byte
 * aligned buffer (free()). */
static unsigned char *prep(const sd_kernel_set *ks, sd_type t, const float *x, int64_t n_tok,
                           int64_t n) {
    size_t bytes = 0;
    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok, n, &bytes), 0);
    unsigned char *q = xalloc(bytes);
    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, n_tok, q);
    return q;
}

static int64_t pick(uint64_t *s, const int64_t *v, size_t nv) {
    return v[rng_next(s) % nv];
}

/* ---------------------------------------------------------------------------------- */
/* independent decoders (ggml-common.h layouts, as sd_quant.h summarises them)          */
/* ---------------------------------------------------------------------------------- */

static double h2d(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sd_fp16_to_fp32(h);
}

/* Weight row wr (n elements) as w_j = a[j] + b[j] exactly (double): a the scaled level,
 * b the min term (0 for types without one). */
static void w_row_exact(sd_type t, const unsigned char *wr, int64_t n, double *a, double *b) {
    for (int64_t j = 0; j < n; j++)
        b[j] = 0.0;
    switch (t) {
    case SD_TYPE_F32:
        for (int64_t j = 0; j < n; j++) {
            float f;
            memcpy(&f, wr + 4 * j, 4);
            a[j] = f;
        }
        return;
    case SD_TYPE_F16:
        for (int64_t j = 0; j < n; j++)
            a[j] = h2d(wr + 2 * j);
        return;
    case SD_TYPE_BF16:
        for (int64_t j = 0; j < n; j++) {
            uint16_t h;
            memcpy(&h, wr + 2 * j, 2);
            uint32_t u = (uint32_t)h << 16;
            float f;
            memcpy(&f, &u, 4);
            a[j] = f;
        }
        return;
    default:
        break;
    }
    const size_t bb = sd_type_block_bytes(t);
    const int64_t be = sd_type_block_elems(t);
    for (int64_t i = 0; i < n / be; i++) {
        const unsigned char *p = wr + (size_t)i * bb;
        double *ab = a + i * be, *bbk = b + i * be;
        switch (t) {
        case SD_TYPE_Q8_0:
            for (int j = 0; j < 32; j++)
                ab[j] = h2d(p) * (int8_t)p[2 + j];
            break;
        case SD_TYPE_Q4_0:
        case SD_TYPE_Q4_1: {
            const int off = t == SD_TYPE_Q4_0 ? 2 : 4;
            for (int j = 0; j < 32; j++) {
                const int q = j < 16 ? (p[off + j] & 15) : (p[off + j - 16] >> 4);
                ab[j] = h2d(p) * (t == SD_TYPE_Q4_0 ? q - 8 : q);
                if (t == SD_TYPE_Q4_1) bbk[j] = h2d(p + 2);
            }
            break;
        }
        case SD_TYPE_Q5_0:
        case SD_TYPE_Q5_1: {
            const int o = t == SD_TYPE_Q5_0 ? 2 : 4; /* qh at o, qs at o + 4 */
            const uint32_t h = (uint32_t)p[o] | (uint32_t)p[o + 1] << 8 | (uint32_t)p[o + 2] << 16 |
                               (uint32_t)p[o + 3] << 24;
            for (int j = 0; j < 32; j++) {
                const int nib = j < 16 ? (p[o + 4 + j] & 15) : (p[o + 4 + j - 16] >> 4);
                const int q = nib | (int)((h >> j) & 1) << 4;
                ab[j] = h2d(p) * (t == SD_TYPE_Q5_0 ? q - 16 : q);
                if (t == SD_TYPE_Q5_1) bbk[j] = h2d(p + 2);
            }
            break;
        }
        case SD_TYPE_Q2_K: /* scales[16] qs[64] d dmin */
            for (int e = 0; e < 256; e++) {
                const int q = (p[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
                ab[e] = h2d(p + 80) * (p[e / 16] & 15) * q;
                bbk[e] = -h2d(p + 82) * (p[e / 16] >> 4);
            }
            break;
        case SD_TYPE_Q3_K: /* hmask[32] qs[64] scales[12] d */
            for (int e = 0; e < 256; e++) {
                const int g = e / 16;
                const unsigned char *sc = p + 96;
                const int lo4 = g < 8 ? (sc[g] & 15) : (sc[g - 8] >> 4);
                const int hi2 = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
                const int lo = (p[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
                const int hb = (p[e % 32] >> (e / 32)) & 1;
                ab[e] = h2d(p + 108) * ((lo4 | hi2 << 4) - 32) * (lo + 4 * hb - 4);
            }
            break;
        case SD_TYPE_Q4_K: /* d dmin scales[12] qs[128] */
        case SD_TYPE_Q5_K: /* d dmin scales[12] qh[32] qs[128] */
            for (int e = 0; e < 256; e++) {
                const int s = e / 32, l = e % 32;
                const unsigned char *sc = p + 4;
                int scale, mn;
                if (s < 4) {
                    scale = sc[s] & 63;
                    mn = sc[s + 4] & 63;
                } else {
                    scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
                    mn = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
                }
                const unsigned char *qs = p + (t == SD_TYPE_Q4_K ? 16 : 48);
                int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
                if (t == SD_TYPE_Q5_K) q |= ((p[16 + l] >> s) & 1) << 4;
                ab[e] = h2d(p) * scale * q;
                bbk[e] = -h2d(p + 2) * mn;
            }
            break;
        case SD_TYPE_Q6_K: /* ql[128] qh[64] scales[16] d */
            for (int e = 0; e < 256; e++) {
                const int h = e / 128, k = (e / 32) % 4, l = e % 32;
                const int lo = (p[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
                const int hi = (p[128 + 32 * h + l] >> (2 * k)) & 3;
                ab[e] = h2d(p + 208) * (int8_t)p[192 + e / 16] * ((lo | hi << 4) - 32);
            }
            break;
        default:
            cr_assert_fail("type %s", sd_type_name(t));
        }
    }
}

/* Activation row b (part A of a prepared buffer) as exact doubles. */
static void x_row_exact(sd_type wt, const unsigned char *xq, int64_t n, int64_t b, double *x) {
    const sd_type vt = sd_vec_dot_type(wt);
    const unsigned char *xr = xq + (size_t)b * row_bytes(vt, n);
    for (int64_t j = 0; j < n; j++) {
        if (vt == SD_TYPE_F32) {
            float f;
            memcpy(&f, xr + 4 * j, 4);
            x[j] = f;
        } else if (vt == SD_TYPE_Q8_0) {
            const unsigned char *blk = xr + 34 * (j / 32);
            x[j] = h2d(blk) * (int8_t)blk[2 + j % 32];
        } else if (vt == SD_TYPE_Q8_S) { /* float d, float ds, qs[32] */
            const unsigned char *blk = xr + 40 * (j / 32);
            float d;
            memcpy(&d, blk, 4);
            x[j] = (double)d * (int8_t)blk[8 + j % 32];
        } else { /* Q8_K: float d, qs[256], bsums[16] */
            const unsigned char *blk = xr + 292 * (j / 256);
            float d;
            memcpy(&d, blk, 4);
            x[j] = (double)d * (int8_t)blk[4 + j % 256];
        }
    }
}

/* Byte offsets of the fp16 scales of a block (-1 ends). */
static void scale_offsets(sd_type t, int off[3]) {
    off[0] = off[1] = off[2] = -1;
    if (t == SD_TYPE_Q4_1 || t == SD_TYPE_Q5_1 || t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K)
        off[0] = 0, off[1] = 2;
    else if (t == SD_TYPE_Q2_K)
        off[0] = 80, off[1] = 82;
    else if (t == SD_TYPE_Q3_K)
        off[0] = 108;
    else if (t == SD_TYPE_Q6_K)
        off[0] = 208;
    else
        off[0] = 0;
}

/* A random weight matrix of type t, rows of stride wrb >= row bytes. Quantized types:
 * odd rows raw random bytes (every level, every scale code) with random finite fp16
 * scales (zero sometimes), even rows our quantizer's output, so the kernels see more
 * than the quantizer ever emits. */
static void *make_weights(uint64_t *s, sd_type t, int64_t rows, int64_t n, size_t wrb) {
    unsigned char *w = calloc((size_t)rows, wrb);
    cr_assert_not_null(w);
    const int64_t be = sd_type_block_elems(t);
    for (int64_t r = 0; r < rows; r++) {
        unsigned char *wr = w + (size_t)r * wrb;
        if (be > 1 && (r & 1)) {
            const size_t bb = sd_type_block_bytes(t);
            int off[3];
            scale_offsets(t, off);
            for (int64_t i = 0; i < n / be; i++) {
                unsigned char *blk = wr + (size_t)i * bb;
                for (size_t k = 0; k < bb; k++)
                    blk[k] = (unsigned char)rng_next(s);
                for (int k = 0; k < 3 && off[k] >= 0; k++) {
                    uint16_t d = sd_fp32_to_fp16(ldexpf(rng_f(s), -(int)(rng_next(s) % 8)));
                    if (rng_next(s) % 16 == 0) d = 0; /* an all-zero-scale block */
                    memcpy(blk + off[k], &d, 2);
                }
            }
        } else {
            float *tmp = malloc(sizeof(float) * (size_t)n + 1);
            cr_assert_not_null(tmp);
            for (int64_t j = 0; j < n; j++)
                tmp[j] = rng_f(s) * 2.0f;
            cr_assert_eq(sd_quantize_row(t, tmp, wr, n), 0);
            free(tmp);
        }
    }
    return w;
}

typedef struct {
    sd_type t;
    int64_t rows, n, n_tok;
    size_t wrb;
    void *w;
    float *x;              /* [n_tok, n] */
    unsigned char *xq;     /* x prepared by sd_quantize_activations (the active set) */
    double *exact, *absum; /* [n_tok * rows] */
} problem;

/* The problem of weights w (rows of stride wrb) and activations x [n_tok, n], both
 * taken over: the prepared activations and the exact dots. */
static problem make_problem_of(sd_type t, int64_t rows, int64_t n, int64_t n_tok, size_t wrb,
                               void *w, float *x) {
    problem p = {.t = t, .rows = rows, .n = n, .n_tok = n_tok, .wrb = wrb, .w = w};
    size_t xb = 0;
    cr_assert_eq(sd_activations_bytes(t, n_tok, n, &xb), 0);
    p.xq = xalloc(xb);
    sd_quantize_activations(t, x, n_tok, n, p.xq);
    p.x = x;
    p.exact = malloc(sizeof(double) * (size_t)(n_tok * rows));
    p.absum = malloc(sizeof(double) * (size_t)(n_tok * rows));
    double *wa = malloc(sizeof(double) * (size_t)n), *wb = malloc(sizeof(double) * (size_t)n);
    double *xd = malloc(sizeof(double) * (size_t)(n * n_tok));
    for (int64_t b = 0; b < n_tok; b++)
        x_row_exact(t, p.xq, n, b, xd + b * n);
    for (int64_t r = 0; r < rows; r++) {
        w_row_exact(t, (const unsigned char *)p.w + (size_t)r * p.wrb, n, wa, wb);
        for (int64_t b = 0; b < n_tok; b++) {
            double e = 0, a = 0;
            for (int64_t j = 0; j < n; j++) {
                const double xv = xd[b * n + j];
                e += (wa[j] + wb[j]) * xv;
                a += (fabs(wa[j]) + fabs(wb[j])) * fabs(xv);
            }
            p.exact[b * rows + r] = e;
            p.absum[b * rows + r] = a;
        }
    }
    free(wa);
    free(wb);
    free(xd);
    return p;
}

static problem make_problem(uint64_t *s, sd_type t, int64_t rows, int64_t n, int64_t n_tok,
                            size_t pad) {
    const size_t wrb = row_bytes(t, n) + pad;
    void *w = make_weights(s, t, rows, n, wrb);
    float *x = malloc(sizeof(float) * (size_t)(n_tok * n) + 1);
    cr_assert_not_null(x);
    for (int64_t j = 0; j < n_tok * n; j++)
        x[j] = rng_f(s) * 4.0f;
    return make_problem_of(t, rows, n, n_tok, wrb, w, x);
}

static void free_problem(problem *p) {
    free(p->w);
    free(p->x);
    free(p->xq);
    free(p->exact);
    free(p->absum);
}

/* Runs kernel set ks on W (GGUF rows, wrb apart) for rows [r0, r1) of `rows`: its packed
 * kernel when it has one for t (W packed here, the groups covering [r0, r1) run into a
 * scratch matrix, then rows [r0, r1) copied to y), else its rows kernel. Writes y only in
 * rows [r0, r1), as a rows kernel does. */
static void run_set(const sd_kernel_set *ks, sd_type t, const void *w, size_t wrb, int64_t rows,
                    int64_t n, const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t r0,
                    int64_t r1) {
    sd_packed_kernel pk = sd_kernel_packed_for_type(ks, t);
    if (!pk) {
        sd_kernel_for_type(ks, t)(w, wrb, n, xq, n_tok, y, ldy, r0, r1);
        return;
    }
    if (r1 <= r0) return;
    size_t pb = 0;
    cr_assert_eq(sd_pack_bytes(t, rows, n, &pb), 0);
    void *wp = xalloc(pb);
    sd_pack_groups(t, w, wrb, rows, n, 0, (rows + 15) / 16, wp);
    float *tmp = malloc(sizeof(float) * (size_t)(n_tok * rows) + 1);
    pk(wp, rows, n, xq, n_tok, tmp, rows, r0 / 16, (r1 + 15) / 16);
    for (int64_t b = 0; b < n_tok; b++)
        memcpy(y + b * ldy + r0, tmp + b * rows + r0, sizeof(float) * (size_t)(r1 - r0));
    free(tmp);
    free(wp);
}

/* Error bound vs the exact dot, relative to sum (|a_j| + |b_j|) |x_j|:
 *  float types: 32 FMA partial sums of n/32 steps each, then a 5-level tree;
 *  integer-dot types: each block's integer exact, then per block (32) or super-block
 *  (256) a few float roundings (int -> float, d_w * d_x, the product, the min term)
 *  and a float sum over the blocks (+ 8 hsum adds). */
static double err_bound(const sd_kernel_set *ks, sd_type t, int64_t n, double absum) {
    const double u = 0x1p-24;
    double k;
    (void)ks;
    if (sd_type_block_elems(t) > 1)
        k = 3.0 * (double)(n / sd_type_block_elems(t)) + 16.0;
    else
        k = (double)n / 32.0 + 8.0;
    return k * u * absum + 1e-30;
}

static void check_kernel_vs_exact(const sd_kernel_set *ks, problem *p) {
    const int64_t ldy = p->rows + 3;
    float *y = malloc(sizeof(float) * (size_t)(p->n_tok * ldy));
    cr_assert_not_null(y);
    for (int64_t i = 0; i < p->n_tok * ldy; i++)
        y[i] = -12345.0f; /* sentinel */
    unsigned char *xq = prep(ks, p->t, p->x, p->n_tok, p->n);
    run_set(ks, p->t, p->w, p->wrb, p->rows, p->n, xq, p->n_tok, y, ldy, 0, p->rows);
    free(xq);
    for (int64_t b = 0; b < p->n_tok; b++) {
        for (int64_t r = 0; r < p->rows; r++) {
            const double got = y[b * ldy + r], want = p->exact[b * p->rows + r];
            const double bound = err_bound(ks, p->t, p->n, p->absum[b * p->rows + r]);
            cr_assert(fabs(got - want) <= bound,
                      "%s %s n=%lld rows=%lld n_tok=%lld: y[%lld,%lld]=%.9g want %.9g "
                      "(err %.3g > bound %.3g)",
                      ks->name, sd_type_name(p->t), (long long)p->n, (long long)p->rows,
                      (long long)p->n_tok, (long long)b, (long long)r, got, want, fabs(got - want),
                      bound);
        }
        for (int64_t r = p->rows; r < ldy; r++)
            cr_assert_eq(y[b * ldy + r], -12345.0f, "%s wrote outside [r0, r1)", ks->name);
    }
    free(y);
}

/* a random column count for type t: a multiple of its block, odd multiples included */
static int64_t rand_cols(uint64_t *s, sd_type t) {
    static const int64_t f[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 64, 100, 257, 1024};
    static const int64_t q32[] = {1, 2, 3, 5, 7, 9, 16, 32};
    static const int64_t qk_k[] = {1, 2, 3, 5, 8};
    const int64_t b = qk(t);
    if (b == 1) return pick(s, f, sizeof f / sizeof f[0]);
    if (b == 32) return 32 * pick(s, q32, sizeof q32 / sizeof q32[0]);
    return 256 * pick(s, qk_k, sizeof qk_k / sizeof qk_k[0]);
}

/* ---------------------------------------------------------------------------------- */
/* activations                                                                          */
/* ---------------------------------------------------------------------------------- */

Test(quant_activations, layout) {
    uint64_t s = 11;
    enum { T = 3, N = 256 };
    float x[T * N];
    for (int j = 0; j < T * N; j++)
        x[j] = rng_f(&s) * 3.0f;
    _Alignas(64) unsigned char got[16384];
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti], vt = sd_vec_dot_type(t);
        const size_t rb = row_bytes(vt, N);
        unsigned char want[T * 1024];
        cr_assert_leq(T * rb, sizeof want);
        sd_quantize_activations(t, x, T, N, got);
        for (int b = 0; b < T; b++)
            cr_assert_eq(sd_quantize_row(vt, x + b * N, want + b * rb, N), 0);
        cr_assert_eq(memcmp(got, want, T * rb), 0, "%s", sd_type_name(t));
    }
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q4_1), SD_TYPE_Q8_S);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q5_1), SD_TYPE_Q8_S);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q5_0), SD_TYPE_Q8_S);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q4_0), SD_TYPE_Q8_0);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q6_K), SD_TYPE_Q8_K);
    cr_assert_eq(sd_vec_dot_type(SD_TYPE_Q2_K), SD_TYPE_Q8_K);
}

/* The activation types' own invariants: Q8_S = Q8_0's quants with the unrounded float
 * scale amax / 127 and ds = d * their sum; Q8_K's bsums are the exact sums and every
 * value is within half a step; a zero block is all zero; a block with a NaN or an
 * infinity gets a NaN scale (never a finite one). */
Test(quant_activations, activation_types) {
    uint64_t s = 8;
    enum { N = 512 };
    float x[N];
    for (int trial = 0; trial < 50; trial++) {
        const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 40) - 20);
        for (int j = 0; j < N; j++)
            x[j] = rng_f(&s) * scale;
        if (trial % 5 == 1) memset(x + 256, 0, 256 * sizeof(float));
        sd_block_q8_s qs[N / 32];
        sd_block_q8_0 q0[N / 32];
        sd_block_q8_k qk8[N / 256];
        cr_assert_eq(sd_quantize_row(SD_TYPE_Q8_S, x, qs, N), 0);
        cr_assert_eq(sd_quantize_row(SD_TYPE_Q8_0, x, q0, N), 0);
        cr_assert_eq(sd_quantize_row(SD_TYPE_Q8_K, x, qk8, N), 0);
        for (int i = 0; i < N / 32; i++) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[32 * i + j]));
            cr_assert_eq(qs[i].d, amax / 127.0f);
            cr_assert_eq(sd_fp32_to_fp16(qs[i].d), q0[i].d);
            cr_assert_eq(memcmp(qs[i].qs, q0[i].qs, 32), 0);
            int sum = 0;
            for (int j = 0; j < 32; j++)
                sum += qs[i].qs[j];
            cr_assert_eq(qs[i].ds, qs[i].d * (float)sum);
        }
        for (int i = 0; i < N / 256; i++) {
            double amax = 0;
            for (int j = 0; j < 256; j++)
                amax = fmax(amax, fabs(x[256 * i + j]));
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++)
                    sum += qk8[i].qs[16 * g + j];
                cr_assert_eq(qk8[i].bsums[g], sum);
            }
            if (amax == 0) {
                cr_assert_eq(qk8[i].d, 0.0f);
                continue;
            }
            /* |x - d q| <= |d| / 2 (round to nearest at the stored float scale) */
            for (int j = 0; j < 256; j++) {
                const double err = fabs((double)x[256 * i + j] - (double)qk8[i].d * qk8[i].qs[j]);
                cr_assert_leq(err, fabs(qk8[i].d) * 0.5 * (1 + 1e-6) + 1e-30);
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < N; j++)
            x[j] = rng_f(&s);
        x[300] = k ? INFINITY : NAN;
        x[5] = NAN;
        sd_block_q8_s qs[N / 32];
        sd_block_q8_0 q0[N / 32];
        sd_block_q8_k qk8[N / 256];
        sd_quantize_row(SD_TYPE_Q8_S, x, qs, N);
        sd_quantize_row(SD_TYPE_Q8_0, x, q0, N);
        sd_quantize_row(SD_TYPE_Q8_K, x, qk8, N);
        cr_assert(isnan(sd_fp16_to_fp32(q0[0].d)) && isnan(sd_fp16_to_fp32(q0[9].d)));
        cr_assert(isnan(qs[0].d) && isnan(qs[9].d) && isnan(qs[9].ds));
        cr_assert(isnan(qk8[0].d) && isnan(qk8[1].d));
        cr_assert(!isnan(sd_fp16_to_fp32(q0[1].d)), "finite blocks stay finite");
    }
}

/* The prepared layout (sd_quant.h) for every kernel set and type: its size; part A is
 * the reference rows of the activation type (F32-dot: a copy); nothing is written past
 * the size; preparing disjoint row ranges (as the backend's threads do) writes what one
 * call writes; sizes are monotone; bad shapes and overflow are refused. */
Test(quant_activations, prepared_layout) {
    uint64_t s = 5150;
    static const int64_t toks[] = {1, 2, 5, 9, 16, 17, 33};
    static const int64_t mult[] = {1, 3, 4, 9};
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const sd_type t = k_types[ti], vt = sd_vec_dot_type(t);
            const int64_t b = qk(t) > 1 ? qk(t) : 32;
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                for (size_t c = 0; c < sizeof mult / sizeof mult[0]; c++) {
                    const int64_t n_tok = toks[k], n = b * mult[c];
                    const size_t rb = row_bytes(vt, n);
                    size_t bytes = 0, want_bytes = (size_t)n_tok * rb;
                    const size_t tb =
                        sd_kernel_packed_for_type(ks, t) ? sd_pack_act_tok_bytes(t, n) : 0;
                    if (tb) want_bytes = ((want_bytes + 63) & ~(size_t)63) + (size_t)n_tok * tb;
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok, n, &bytes), 0);
                    cr_assert_eq(bytes, want_bytes, "%s %s", ks->name, sd_type_name(t));
                    size_t b2 = 0; /* monotone */
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, n_tok + 1, n + b, &b2), 0);
                    cr_assert_geq(b2, bytes);
                    float *x = malloc(sizeof(float) * (size_t)(n_tok * n));
                    for (int64_t j = 0; j < n_tok * n; j++)
                        x[j] = rng_f(&s) * 5.0f;
                    unsigned char *one = xalloc(bytes + 64), *split = xalloc(bytes + 64);
                    memset(one, 0xA5, bytes + 64);
                    memset(split, 0xA5, bytes + 64);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, n_tok, one);
                    for (int64_t j = 0; j < 64; j++)
                        cr_assert_eq(one[bytes + (size_t)j], 0xA5, "%s wrote past the size",
                                     ks->name);
                    unsigned char *want = malloc(rb);
                    for (int64_t bb = 0; bb < n_tok; bb++) {
                        sd_quantize_row(vt, x + bb * n, want, n);
                        cr_assert_eq(memcmp(one + (size_t)bb * rb, want, rb), 0,
                                     "%s %s: part A row %lld differs from the reference", ks->name,
                                     sd_type_name(t), (long long)bb);
                    }
                    free(want);
                    /* three ranges, prepared in reverse order */
                    const int64_t c1 = (int64_t)(rng_next(&s) % (uint64_t)(n_tok + 1));
                    const int64_t c2 = c1 + (int64_t)(rng_next(&s) % (uint64_t)(n_tok - c1 + 1));
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, c2, n_tok, split);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, c1, c2, split);
                    sd_kernel_prepare_rows(ks, t, x, n_tok, n, 0, c1, split);
                    cr_assert_eq(memcmp(one, split, bytes + 64), 0,
                                 "%s %s n_tok=%lld n=%lld: split preparation differs", ks->name,
                                 sd_type_name(t), (long long)n_tok, (long long)n);
                    free(x);
                    free(one);
                    free(split);
                }
            }
            size_t bb = 12345;
            cr_assert_eq(sd_kernel_act_bytes(ks, t, 0, b, &bb), 0);
            cr_assert_eq(bb, 0);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, -1, b, &bb), -1);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, 1, -b, &bb), -1);
            cr_assert_eq(sd_kernel_act_bytes(ks, t, INT64_MAX / 2, 1 << 20, &bb), -1);
            if (qk(t) > 1) cr_assert_eq(sd_kernel_act_bytes(ks, t, 1, qk(t) + 16, &bb), -1);
        }
        size_t b;
        cr_assert_eq(sd_kernel_act_bytes(ks, (sd_type)5, 1, 64, &b), -1);
        cr_assert_eq(sd_kernel_act_bytes(ks, SD_TYPE_Q8_K, 1, 256, &b), -1, "not a weight type");
        cr_assert_eq(sd_kernel_act_bytes(ks, SD_TYPE_COUNT, 1, 256, &b), -1);
    }
    /* the public face is the active set */
    size_t a = 0, b = 0;
    cr_assert_eq(sd_activations_bytes(SD_TYPE_Q4_0, 7, 320, &a), 0);
    cr_assert_eq(sd_kernel_act_bytes(sd_kernel_set_active(), SD_TYPE_Q4_0, 7, 320, &b), 0);
    cr_assert_eq(a, b);
}

/* sd_activations_bytes_max covers every type at every row length up to n_cols. */
Test(quant_activations, bytes_max) {
    static const int64_t toks[] = {1, 4, 17};
    static const int64_t cols[] = {1, 31, 32, 255, 256, 576, 1000, 4096};
    for (size_t k = 0; k < 3; k++)
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
            size_t mx = 0;
            cr_assert_eq(sd_activations_bytes_max(toks[k], cols[c], &mx), 0);
            for (size_t ti = 0; ti < N_TYPES; ti++) {
                const int64_t b = qk(k_types[ti]);
                for (int64_t n = b; n <= cols[c]; n += b) {
                    size_t need = 0;
                    cr_assert_eq(sd_activations_bytes(k_types[ti], toks[k], n, &need), 0);
                    cr_assert_leq(need, mx, "%s n=%lld", sd_type_name(k_types[ti]), (long long)n);
                }
            }
        }
    size_t mx;
    cr_assert_eq(sd_activations_bytes_max(-1, 64, &mx), -1);
    cr_assert_eq(sd_activations_bytes_max(1, INT64_MAX - 3, &mx), -1);
}

/* Every kernel set's SIMD Q8_0 activation quantizer gives the reference's bytes: random
 * rows over many magnitudes, exact roundf ties (+-k.5 at d = 1), zero / -0 blocks, values
 * just below and above .5, subnormals, a scale that overflows fp16, NaN and infinities. */
/* Hard activation values, in chunks of 32: exact roundf ties, zero blocks with a -0,
 * values next to .5, subnormals, a scale beyond fp16, NaN, infinities, and a largest
 * magnitude that occurs with both signs (the signed maximum takes the first). */
static void fill_hard(uint64_t *s, float *x, int64_t n) {
    for (int64_t i = 0; i + 32 <= n; i += 32) {
        float *xb = x + i;
        const int kind = (int)(rng_next(s) % 11);
        const float scale = ldexpf(1.0f, (int)(rng_next(s) % 60) - 40);
        for (int j = 0; j < 32; j++)
            xb[j] = rng_f(s) * scale;
        switch (kind) {
        case 0: /* amax 127 -> d = 1: x = +-k.5 are exact roundf ties */
            for (int j = 0; j < 32; j++)
                xb[j] = (float)((int)(rng_next(s) % 254) - 127) + 0.5f;
            xb[0] = 127.0f;
            xb[1] = -0.5f;
            xb[2] = 0.5f;
            xb[3] = -126.5f;
            break;
        case 1: /* zero block, with a -0 */
            memset(xb, 0, 32 * sizeof(float));
            xb[5] = -0.0f;
            break;
        case 2: /* around .5 at d = 1 */
            for (int j = 1; j < 32; j++)
                xb[j] = nextafterf((float)(j % 7) + 0.5f, (j & 1) ? 0.0f : 100.0f);
            xb[0] = -127.0f;
            break;
        case 3: /* subnormals */
            for (int j = 0; j < 32; j++)
                xb[j] = rng_f(s) * 0x1p-130f;
            break;
        case 4: /* d beyond the fp16 range (stored as inf) */
            for (int j = 0; j < 32; j++)
                xb[j] = rng_f(s) * 1e7f;
            xb[9] = 3e38f;
            break;
        case 5:
            xb[rng_next(s) % 32] = NAN;
            break;
        case 6:
            xb[rng_next(s) % 32] = (rng_next(s) & 1) ? INFINITY : -INFINITY;
            break;
        case 7: { /* the largest magnitude twice, with opposite signs */
            const int a = (int)(rng_next(s) % 32), b = (a + 1 + (int)(rng_next(s) % 31)) % 32;
            xb[a] = 4.0f * scale;
            xb[b] = -4.0f * scale;
            break;
        }
        default:
            break;
        }
    }
}

/* Every kernel set's SIMD activation quantizers (Q8_0, Q8_S, Q8_K: whichever a set has)
 * give the reference's bytes, on hard values (fill_hard). */
Test(quant_activations, simd_quantizers_bit_exact) {
    uint64_t s = 2024;
    static const sd_type acts[] = {SD_TYPE_Q8_0, SD_TYPE_Q8_S, SD_TYPE_Q8_K};
    enum { N = 64 * 256 };
    static float x[N];
    static unsigned char want[N * 2], got[N * 2];
    int tested = 0;
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
            const sd_type at = acts[ai];
            if (!ks->quant[at]) continue;
            tested++;
            const size_t bb = sd_type_block_bytes(at);
            const int64_t be = sd_type_block_elems(at), nb = N / be;
            for (int trial = 0; trial < 100; trial++) {
                fill_hard(&s, x, N);
                memset(got, 0xAB, sizeof got);
                sd_quantize_row(at, x, want, N);
                ks->quant[at](x, got, N);
                for (int64_t i = 0; i < nb; i++)
                    cr_assert_eq(memcmp(got + bb * (size_t)i, want + bb * (size_t)i, bb), 0,
                                 "%s %s: block %lld of trial %d differs from the reference",
                                 ks->name, sd_type_name((uint32_t)at), (long long)i, trial);
            }
        }
    }
    cr_log_info("SIMD activation quantizers tested: %d", tested);
}

/* ---------------------------------------------------------------------------------- */
/* kernels                                                                              */
/* ---------------------------------------------------------------------------------- */

Test(quant_kernels, all_sets_vs_exact) {
    uint64_t s = 1234;
    static const int64_t nrows[] = {1, 2, 3, 5, 13, 37};
    int checked[N_SETS] = {0};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        for (int64_t n_tok = 1; n_tok <= 17; n_tok++) {
            const int64_t n = rand_cols(&s, t);
            const int64_t rows = pick(&s, nrows, 6);
            const size_t pad = (n_tok % 3 == 0) ? 64 : 0; /* stride > row bytes */
            problem p = make_problem(&s, t, rows, n, n_tok, pad);
            for (size_t si = 0; si < N_SETS; si++) {
                const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                if (!ks) continue;
                check_kernel_vs_exact(ks, &p);
                checked[si]++;
            }
            free_problem(&p);
        }
    }
    cr_assert_gt(checked[0], 0);
    for (size_t si = 0; si < N_SETS; si++)
        cr_log_info("kernel set %s: %s (%d problems)", k_sets[si],
                    checked[si] ? "tested" : "not available on this CPU", checked[si]);
}

/* A wide case per type (real row lengths) with a few tokens. */
Test(quant_kernels, wide_rows) {
    uint64_t s = 99;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        problem p = make_problem(&s, t, 7, qk(t) > 1 ? 4096 : 4099, 5, 0);
        for (size_t si = 0; si < N_SETS; si++) {
            const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
            if (ks) check_kernel_vs_exact(ks, &p);
        }
        free_problem(&p);
    }
}

/* Every SIMD set against the scalar reference, BIT FOR BIT, on the same inputs: odd
 * shapes (rows not a multiple of 16 or of anything else, block counts not a multiple of
 * a chunk), n_tok 1..17, weights with random scales (and the activations of each set's
 * own preparation, which must not matter: part A is the reference's bytes). */
Test(quant_kernels, simd_vs_ref_bitexact) {
    uint64_t s = 555;
    int tested = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        for (int64_t n_tok = 1; n_tok <= 17; n_tok++) {
            const int64_t n = qk(t) == 1    ? 203 + 64 * (n_tok % 3)
                              : qk(t) == 32 ? 32 * (11 + n_tok % 4)
                                            : 256 * (1 + n_tok % 3);
            const int64_t rows = 19 + 7 * (n_tok % 5);
            problem p = make_problem(&s, t, rows, n, n_tok, 0);
            float *yr = malloc(sizeof(float) * (size_t)(rows * n_tok));
            float *ys = malloc(sizeof(float) * (size_t)(rows * n_tok));
            /* the oracle on the plain reference layout == on the active set's layout */
            const size_t xrb = row_bytes(sd_vec_dot_type(t), n);
            unsigned char *plain = malloc((size_t)n_tok * xrb);
            for (int64_t b = 0; b < n_tok; b++)
                sd_quantize_row(sd_vec_dot_type(t), p.x + b * n, plain + (size_t)b * xrb, n);
            sd_matmul_rows_ref(t, p.w, p.wrb, n, plain, n_tok, yr, rows, 0, rows);
            sd_matmul_rows_ref(t, p.w, p.wrb, n, p.xq, n_tok, ys, rows, 0, rows);
            cr_assert_eq(memcmp(yr, ys, sizeof(float) * (size_t)(rows * n_tok)), 0,
                         "%s: ref on the prepared layout != ref on plain rows", sd_type_name(t));
            free(plain);
            for (size_t si = 1; si < N_SETS; si++) {
                const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                if (!ks) continue;
                unsigned char *xq = prep(ks, t, p.x, n_tok, n);
                memset(ys, 0xEE, sizeof(float) * (size_t)(rows * n_tok));
                run_set(ks, t, p.w, p.wrb, rows, n, xq, n_tok, ys, rows, 0, rows);
                free(xq);
                for (int64_t i = 0; i < rows * n_tok; i++)
                    cr_assert(memcmp(&ys[i], &yr[i], sizeof(float)) == 0,
                              "%s %s n=%lld rows=%lld n_tok=%lld [%lld]: %.9g vs ref %.9g "
                              "(bits differ)",
                              ks->name, sd_type_name(t), (long long)n, (long long)rows,
                              (long long)n_tok, (long long)i, ys[i], yr[i]);
                tested++;
            }
            free(yr);
            free(ys);
            free_problem(&p);
        }
    }
    cr_log_info("SIMD vs scalar, bit for bit: %d (set, type, n_tok) cases", tested);
}

/* Worst cases for the integer sums the SIMD sets keep (x256.h: int16 sums of several
 * vpmaddubsw outputs, int32 sums of scaled sub-block dots): every non-scale byte of every
 * weight block one fill value (0xFF: all-max levels, all-max scales and mins; 0x00:
 * all-min levels; 0x80 / 0x7F: Q8_0's -128 / 127, Q6_K's scale -128 / 127; 0xAA / 0x55
 * mixed), the fp16 scales 1, and activations of one magnitude (every quant +-127): all
 * positive, all negative, or the sign flipping every 16 columns. A fold count one too
 * large overflows int16 on the all-max rows. Every set, n_tok 1, 2, 5 and 17: bit for bit
 * against the scalar reference, which is within the bound of the exact dot. */
Test(quant_kernels, extreme_levels_bitexact) {
    static const unsigned char fills[] = {0xFF, 0x00, 0x80, 0x7F, 0xAA, 0x55};
    static const int64_t toks[] = {1, 2, 5, 17};
    int tested = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        if (qk(t) == 1) continue;
        const int64_t n = 512, rows = 19; /* two groups, the second partial */
        const size_t wrb = row_bytes(t, n), bb = sd_type_block_bytes(t);
        int off[3];
        scale_offsets(t, off);
        for (size_t fi = 0; fi < sizeof fills; fi++) {
            for (int xs = 0; xs < 3; xs++) {
                for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++) {
                    const int64_t n_tok = toks[ki];
                    unsigned char *w = malloc((size_t)rows * wrb);
                    cr_assert_not_null(w);
                    memset(w, fills[fi], (size_t)rows * wrb);
                    for (size_t b = 0; b < (size_t)rows * wrb / bb; b++)
                        for (int k = 0; k < 3 && off[k] >= 0; k++) {
                            const uint16_t one = sd_fp32_to_fp16(1.0f);
                            memcpy(w + b * bb + off[k], &one, 2);
                        }
                    float *x = malloc(sizeof(float) * (size_t)(n_tok * n));
                    cr_assert_not_null(x);
                    for (int64_t j = 0; j < n_tok * n; j++)
                        x[j] = xs == 0 ? 1.0f : xs == 1 ? -1.0f : ((j / 16) & 1) ? -1.0f : 1.0f;
                    problem p = make_problem_of(t, rows, n, n_tok, wrb, w, x);
                    float *yr = malloc(sizeof(float) * (size_t)(rows * n_tok));
                    float *ys = malloc(sizeof(float) * (size_t)(rows * n_tok));
                    sd_matmul_rows_ref(t, p.w, p.wrb, n, p.xq, n_tok, yr, rows, 0, rows);
                    check_kernel_vs_exact(&sd_kernels_scalar, &p);
                    for (size_t si = 1; si < N_SETS; si++) {
                        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                        if (!ks) continue;
                        unsigned char *xq = prep(ks, t, p.x, n_tok, n);
                        memset(ys, 0xEE, sizeof(float) * (size_t)(rows * n_tok));
                        run_set(ks, t, p.w, p.wrb, rows, n, xq, n_tok, ys, rows, 0, rows);
                        free(xq);
                        for (int64_t i = 0; i < rows * n_tok; i++)
                            cr_assert(memcmp(&ys[i], &yr[i], sizeof(float)) == 0,
                                      "%s %s fill 0x%02X x pattern %d n_tok=%lld [%lld]: %.9g vs "
                                      "ref %.9g",
                                      ks->name, sd_type_name(t), fills[fi], xs, (long long)n_tok,
                                      (long long)i, ys[i], yr[i]);
                        tested++;
                    }
                    free(yr);
                    free(ys);
                    free_problem(&p);
                }
            }
        }
    }
    cr_log_info("extreme levels and activations, bit for bit: %d cases", tested);
}

/* The packed layout round-trips: pack -> unpack gives back every GGUF row (rows not a
 * multiple of 16 included); padding rows of the last group pack as zeros (they unpack
 * to all-zero blocks); two disjoint group ranges packed separately equal one call; the
 * size is that of the layout (pack_impl.h); bad shapes and unpackable types refused. */
Test(quant_pack, round_trip) {
    uint64_t s = 8080;
    static const int64_t nrows[] = {1, 15, 16, 17, 33, 48};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const sd_pack_layout *L = sd_pack_layout_of(t);
        size_t pb = 0;
        if (qk(t) == 1) {
            cr_assert_null(L);
            cr_assert_eq(sd_pack_bytes(t, 16, 64, &pb), -1, "float types have no packed layout");
            continue;
        }
        cr_assert_not_null(L);
        cr_assert_eq(L->main % 64, 0, "%s: main part not a multiple of 64", sd_type_name(t));
        cr_assert_eq(L->blk_bytes, sd_type_block_bytes(t));
        size_t seg = 0;
        for (int k = 0; k < L->n_segs; k++) {
            cr_assert_eq(L->seg[k].dst, 16 * seg);
            seg += L->seg[k].len;
        }
        cr_assert_eq(16 * (seg + 2 * (size_t)L->n_fields), 16 * L->blk_bytes,
                     "%s: segments + fields must hold every byte of the block", sd_type_name(t));
        for (size_t k = 0; k < sizeof nrows / sizeof nrows[0]; k++) {
            const int64_t rows = nrows[k], n = qk(t) * (1 + (int64_t)(rng_next(&s) % 5));
            const size_t rb = row_bytes(t, n);
            unsigned char *w = malloc(rb * (size_t)rows);
            for (size_t j = 0; j < rb * (size_t)rows; j++)
                w[j] = (unsigned char)rng_next(&s);
            cr_assert_eq(sd_pack_bytes(t, rows, n, &pb), 0);
            const int64_t ng = (rows + 15) / 16;
            cr_assert_eq(pb, (size_t)ng * sd_pack_group_stride(L, n));
            unsigned char *a = xalloc(pb), *b = xalloc(pb);
            memset(a, 0x5A, pb);
            memset(b, 0xA5, pb);
            sd_pack_groups(t, w, rb, rows, n, 0, ng, a);
            const int64_t cut = (int64_t)(rng_next(&s) % (uint64_t)(ng + 1));
            sd_pack_groups(t, w, rb, rows, n, cut, ng, b);
            sd_pack_groups(t, w, rb, rows, n, 0, cut, b);
            cr_assert_eq(memcmp(a, b, pb), 0, "%s: split packing differs", sd_type_name(t));
            unsigned char *back = malloc(rb * 16 * (size_t)ng);
            memset(back, 0x33, rb * 16 * (size_t)ng);
            sd_unpack_groups(t, a, 16 * ng, n, 0, ng, back, rb);
            cr_assert_eq(memcmp(back, w, rb * (size_t)rows), 0, "%s rows=%lld: round trip differs",
                         sd_type_name(t), (long long)rows);
            for (size_t j = rb * (size_t)rows; j < rb * 16 * (size_t)ng; j++)
                cr_assert_eq(back[j], 0, "%s: padding row byte not zero", sd_type_name(t));
            free(back);
            free(a);
            free(b);
            free(w);
        }
        cr_assert_eq(sd_pack_bytes(t, -1, qk(t), &pb), -1);
        cr_assert_eq(sd_pack_bytes(t, 16, qk(t) + 16, &pb), -1);
        cr_assert_eq(sd_pack_bytes(t, INT64_MAX / 2, qk(t) * 1024, &pb), -1);
    }
    cr_assert_eq(sd_pack_bytes(SD_TYPE_Q8_K, 16, 256, &(size_t){0}), -1);
    for (uint32_t q = 0; q < (1u << 12); q++) { /* the qh bit permutation is a bijection */
        const uint32_t v = (uint32_t)rng_next(&s) ^ q;
        cr_assert_eq(sd_unpack_qh5(sd_pack_qh5(v)), v);
    }
}

/* The batch-invariance contract, bit-exact, for every kernel set and type: one call
 * with n_tok rows == n_tok single-token calls (each token prepared alone, as a decode
 * step does) == any split of [0, rows) into ranges == a slice of the tokens prepared as
 * its own batch (in a buffer that is not 64-byte aligned). */
Test(quant_kernels, batch_invariance_bitexact) {
    uint64_t s = 4321;
    static const int64_t toks[] = {9, 17, 4, 5, 8, 16, 33, 2, 70}; /* 33, 70: 2, 3 chunks */
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            const int64_t n_tok = toks[k];
            const int64_t b = qk(t);
            const int64_t n = b == 1    ? (int64_t)(1 + rng_next(&s) % 300)
                              : b == 32 ? 32 * (int64_t)(1 + rng_next(&s) % 40)
                                        : 256 * (int64_t)(1 + rng_next(&s) % 5);
            const int64_t rows = 1 + (int64_t)(rng_next(&s) % 41);
            problem p = make_problem(&s, t, rows, n, n_tok, 0);
            float *yb = malloc(sizeof(float) * (size_t)(rows * n_tok));
            float *y1 = malloc(sizeof(float) * (size_t)(rows * n_tok));
            for (size_t si = 0; si < N_SETS; si++) {
                const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
                if (!ks) continue;
                unsigned char *xq = prep(ks, t, p.x, n_tok, n);
                run_set(ks, t, p.w, p.wrb, rows, n, xq, n_tok, yb, rows, 0, rows);
                free(xq);
                /* single tokens, rows split at two random points */
                const int64_t c1 = (int64_t)(rng_next(&s) % (uint64_t)(rows + 1));
                const int64_t c2 = c1 + (int64_t)(rng_next(&s) % (uint64_t)(rows - c1 + 1));
                memset(y1, 0xFF, sizeof(float) * (size_t)(rows * n_tok));
                for (int64_t bb = 0; bb < n_tok; bb++) {
                    unsigned char *xb = prep(ks, t, p.x + bb * n, 1, n);
                    run_set(ks, t, p.w, p.wrb, rows, n, xb, 1, y1 + bb * rows, rows, 0, c1);
                    run_set(ks, t, p.w, p.wrb, rows, n, xb, 1, y1 + bb * rows, rows, c1, c2);
                    run_set(ks, t, p.w, p.wrb, rows, n, xb, 1, y1 + bb * rows, rows, c2, rows);
                    free(xb);
                }
                cr_assert_eq(memcmp(yb, y1, sizeof(float) * (size_t)(rows * n_tok)), 0,
                             "%s %s n=%lld rows=%lld n_tok=%lld: batched != single", ks->name,
                             sd_type_name(t), (long long)n, (long long)rows, (long long)n_tok);
                /* a middle slice of tokens as its own batch, at a misaligned address */
                const int64_t b0 = n_tok / 3, nt2 = n_tok - b0 - 1;
                if (nt2 > 0) {
                    size_t bytes = 0;
                    cr_assert_eq(sd_kernel_act_bytes(ks, t, nt2, n, &bytes), 0);
                    unsigned char *buf = xalloc(bytes + 8);
                    sd_kernel_prepare_rows(ks, t, p.x + b0 * n, nt2, n, 0, nt2, buf + 8);
                    memset(y1, 0xFF, sizeof(float) * (size_t)(rows * n_tok));
                    run_set(ks, t, p.w, p.wrb, rows, n, buf + 8, nt2, y1, rows, 0, rows);
                    free(buf);
                    cr_assert_eq(memcmp(yb + b0 * rows, y1, sizeof(float) * (size_t)(rows * nt2)),
                                 0, "%s %s: token slice differs", ks->name, sd_type_name(t));
                }
            }
            free(yb);
            free(y1);
            free_problem(&p);
        }
    }
}

/* All-zero weights (as the quantizer writes them for an all-zero row) and zero
 * activations: exactly 0 through every kernel, never NaN. */
Test(quant_kernels, zero_blocks) {
    enum { N = 512 };
    float zero[N] = {0};
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const sd_type t = k_types[ti];
            unsigned char w[4 * N];
            cr_assert_eq(sd_quantize_row(t, zero, w, N), 0);
            float back[N];
            cr_assert_eq(sd_dequantize_row(t, w, back, N), 0);
            for (int j = 0; j < N; j++)
                cr_assert(back[j] == 0.0f, "%s: zero row decodes to %g", sd_type_name(t), back[j]);
            float x[N], out[2] = {1.0f, 1.0f};
            uint64_t s = 3;
            for (int j = 0; j < N; j++)
                x[j] = rng_f(&s);
            unsigned char *xq = prep(ks, t, zero, 1, N);
            run_set(ks, t, w, row_bytes(t, N), 1, N, xq, 1, out, 1, 0, 1);
            free(xq);
            xq = prep(ks, t, x, 1, N);
            run_set(ks, t, w, row_bytes(t, N), 1, N, xq, 1, out + 1, 1, 0, 1);
            free(xq);
            cr_assert(out[0] == 0.0f && out[1] == 0.0f, "%s %s: %g %g", ks->name, sd_type_name(t),
                      out[0], out[1]);
        }
    }
}

/* A NaN or an infinity in the activations reaches the output of every kernel (the
 * activation quantizers must not round it away). */
Test(quant_kernels, nonfinite_activations_propagate) {
    uint64_t s = 31;
    enum { N = 512, ROWS = 3 };
    for (size_t si = 0; si < N_SETS; si++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(k_sets[si]);
        if (!ks) continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const sd_type t = k_types[ti];
            for (int k = 0; k < 2; k++) {
                float *wf = malloc(sizeof(float) * N * ROWS);
                for (int j = 0; j < N * ROWS; j++)
                    wf[j] = rng_f(&s) + 1.5f; /* no zero weights */
                const size_t rb = row_bytes(t, N);
                unsigned char *w = malloc(rb * ROWS);
                for (int r = 0; r < ROWS; r++)
                    sd_quantize_row(t, wf + r * N, w + (size_t)r * rb, N);
                float x[N];
                for (int j = 0; j < N; j++)
                    x[j] = rng_f(&s);
                x[77] = k ? INFINITY : NAN;
                float y[ROWS];
                unsigned char *xq = prep(ks, t, x, 1, N);
                run_set(ks, t, w, rb, ROWS, N, xq, 1, y, ROWS, 0, ROWS);
                free(xq);
                for (int r = 0; r < ROWS; r++)
                    cr_assert(!isfinite(y[r]), "%s %s: %s activation gave a finite %g", ks->name,
                              sd_type_name(t), k ? "inf" : "nan", y[r]);
                free(w);
                free(wf);
            }
        }
    }
}

/* Per-type fallback: the scalar set has a rows kernel for every weight type and no
 * packed kernels; the SIMD sets have packed kernels for every quantized type and rows
 * kernels for the float types (quantized GGUF rows fall back to the scalar reference). */
Test(quant_kernels, fallback_tables) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        cr_assert_not_null(sd_kernels_scalar.k[t].rows, "scalar lacks %s", sd_type_name(t));
        cr_assert_null(sd_kernels_scalar.k[t].packed);
        cr_assert_eq(sd_kernel_owner(&sd_kernels_scalar, t), &sd_kernels_scalar);
#if defined(__x86_64__)
        const sd_kernel_set *simd[2] = {&sd_kernels_avx2, &sd_kernels_avx512};
        for (int k = 0; k < 2; k++) {
            if (qk(t) == 1) {
                cr_assert_not_null(simd[k]->k[t].rows, "%s lacks %s", simd[k]->name,
                                   sd_type_name(t));
                cr_assert_null(sd_kernel_packed_for_type(simd[k], t));
                cr_assert_eq(sd_kernel_owner(simd[k], t), simd[k]);
            } else {
                cr_assert_not_null(simd[k]->k[t].packed, "%s has no packed %s", simd[k]->name,
                                   sd_type_name(t));
                cr_assert_eq(sd_kernel_packed_for_type(simd[k], t), simd[k]->k[t].packed);
                cr_assert_eq(sd_kernel_owner(simd[k], t), &sd_kernels_scalar);
            }
        }
        /* avxvnni: its own packed kernels for every quantized type, the rest from avx2 */
        cr_assert_eq(sd_kernels_avxvnni.lower, &sd_kernels_avx2);
        if (qk(t) == 1)
            cr_assert_eq(sd_kernel_owner(&sd_kernels_avxvnni, t), &sd_kernels_avx2);
        else
            cr_assert_not_null(sd_kernels_avxvnni.k[t].packed, "avxvnni has no packed %s",
                               sd_type_name(t));
        /* amx: its own packed kernels for every quantized type, the rest from avx512 */
        cr_assert_eq(sd_kernels_amx.lower, &sd_kernels_avx512);
        if (qk(t) == 1)
            cr_assert_eq(sd_kernel_owner(&sd_kernels_amx, t), &sd_kernels_avx512);
        else
            cr_assert_not_null(sd_kernels_amx.k[t].packed, "amx has no packed %s", sd_type_name(t));
#endif
    }
    for (uint32_t t = 0; t < SD_TYPE_COUNT; t++)
        if (!sd_type_supported(t)) {
            cr_assert_null(sd_kernel_for_type(&sd_kernels_scalar, t));
            cr_assert_null(sd_kernel_packed_for_type(sd_kernel_set_active(), t));
        }
    cr_assert_null(sd_kernel_for_type(&sd_kernels_scalar, SD_TYPE_COUNT));
}

/* Public dispatch: the name is one of the sets and sd_matmul_rows uses that set. */
Test(quant_kernels, dispatch) {
    const char *name = sd_quant_kernels_name();
    const sd_kernel_set *ks = sd_kernel_set_by_name(name);
    cr_assert_not_null(ks, "active set '%s' must be runnable", name);
    cr_assert_eq(ks, sd_kernel_set_active());
    const char *force = getenv("SD_KERNELS");
    if (!force || !*force) { /* the best available */
        for (size_t si = N_DEFAULT; si-- > 0;) {
            if (sd_kernel_set_by_name(k_sets[si])) {
                cr_assert_str_eq(name, k_sets[si]);
                break;
            }
        }
    }
    cr_log_info("sd_quant_kernels_name() = %s", name);
    cr_assert_null(sd_kernel_set_by_name("sse9"));
    cr_assert_str_eq(sd_quant_kernel_name_for(SD_TYPE_Q8_K), "none");

    uint64_t s = 77;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        const int64_t n = 256, rows = 9, n_tok = 3;
        cr_assert_str_eq(sd_quant_kernel_name_for(t), sd_kernel_owner(ks, t)->name);
        problem p = make_problem(&s, t, rows, n, n_tok, 0);
        float ya[27], yb[27];
        sd_matmul_rows(t, p.w, p.wrb, n, p.xq, n_tok, ya, rows, 0, rows);
        sd_kernel_for_type(ks, t)(p.w, p.wrb, n, p.xq, n_tok, yb, rows, 0, rows);
        cr_assert_eq(memcmp(ya, yb, sizeof ya), 0, "%s", sd_type_name(t));
        sd_matmul_rows_ref(t, p.w, p.wrb, n, p.xq, n_tok, ya, rows, 0, rows);
        sd_kernel_for_type(&sd_kernels_scalar, t)(p.w, p.wrb, n, p.xq, n_tok, yb, rows, 0, rows);
        cr_assert_eq(memcmp(ya, yb, sizeof ya), 0, "ref %s", sd_type_name(t));
        cr_assert_eq(sd_matmul_packed_available(t), sd_kernel_packed_for_type(ks, t) != NULL);
        if (sd_matmul_packed_available(t)) { /* public packed path == the reference */
            size_t pb = 0;
            cr_assert_eq(sd_pack_bytes(t, rows, n, &pb), 0);
            void *wp = xalloc(pb);
            sd_pack_groups(t, p.w, p.wrb, rows, n, 0, 1, wp);
            memset(yb, 0, sizeof yb);
            sd_matmul_packed(t, wp, rows, n, p.xq, n_tok, yb, rows, 0, 1);
            cr_assert_eq(memcmp(ya, yb, sizeof ya), 0, "packed %s", sd_type_name(t));
            free(wp);
        }
        free_problem(&p);
    }
}
