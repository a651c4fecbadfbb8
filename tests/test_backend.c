/*
 * Every op of every backend built, against an independent float64 reference (as ggml's
 * test-backend-ops): each device gets the same checks through backend memory only
 * (buffers it allocates, write / read), with guard values after every output buffer to
 * catch overruns, and batch == single bit for bit (the determinism contract of
 * sd_backend.h). A device this build or machine lacks is skipped with one line.
 *
 * Then the CPU backend's own paths: 1..3 threads, the scratch limits it was sized for,
 * and every attention kernel level this CPU runs.
 *
 * Tolerances (max norm, relative to max |reference|): matmul 1e-5 against the reference
 * computed from the dequantized weights and the activations rounded as the kernels
 * round them (sd_vec_dot_type); rmsnorm, softmax, swiglu 1e-6; rope 1e-5; add, bias,
 * copy exact up to float rounding (1e-7); attention 1e-5.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/sd_kv.h"
#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "runtime/backend/cpu/attn.h"
#include "runtime/backend/cpu/glu.h"

#define GUARD     16
#define GUARD_VAL 12345.678f

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
/* Uniform in [-1, 1). */
static float rng_unif(uint64_t *s) {
    return (float)((double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
static void fill(float *p, size_t n, uint64_t *rng, float scale) {
    for (size_t i = 0; i < n; i++)
        p[i] = rng_unif(rng) * scale;
}
static void expect_close(const float *c, const double *r, size_t n, double tol, const char *what) {
    double dmax = 0, rmax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(c[i] - r[i]);
        if (!(d <= dmax)) dmax = d;
        if (fabs(r[i]) > rmax) rmax = fabs(r[i]);
    }
    cr_expect(dmax <= tol * (rmax > 0 ? rmax : 1), "%s: max|c-r| %.3g vs max|r| %.3g", what, dmax,
              rmax);
}

/* ------------------------------------------------------------ device memory helpers */

/* A backend under test and the buffers made on it (freed together). */
typedef struct dev {
    sd_backend *be;
    sd_buffer *bufs[64];
    size_t n_floats[64]; /* guarded float buffers: floats before the guard (else 0) */
    int n;
} dev;

/* Open device d, or skip the test with one line when this build or machine lacks it. */
static void dev_open(dev *D, sd_device d, int32_t n_threads, int32_t n_batch, int64_t max_cols,
                     int32_t n_ctx) {
    memset(D, 0, sizeof *D);
    sd_backend_params bp = {n_threads, n_batch, max_cols, n_ctx, 0, NULL, 0};
    sd_error err = {0};
    int rc = sd_backend_init(d, &bp, &D->be, &err);
    if (rc == SD_ERR_UNSUPPORTED)
        cr_skip_test("backend '%s' not available: %s", sd_device_name(d), err.msg);
    cr_assert_eq(rc, SD_OK, "%s", err.msg);
}

static void dev_close(dev *D) {
    for (int i = 0; i < D->n; i++)
        sd_buffer_free(D->bufs[i]);
    sd_backend_free(D->be);
}

/* A zeroed backend buffer of n floats plus GUARD guard values; returns its address. */
static float *dev_floats(dev *D, size_t n) {
    sd_error err = {0};
    cr_assert(D->n < 64);
    sd_buffer *b = NULL;
    cr_assert_eq(sd_buffer_alloc(D->be, (n + GUARD) * sizeof(float), SD_BUFFER_COMPUTE, &b, &err),
                 SD_OK, "%s", err.msg);
    D->n_floats[D->n] = n;
    D->bufs[D->n++] = b;
    float g[GUARD];
    for (int i = 0; i < GUARD; i++)
        g[i] = GUARD_VAL;
    cr_assert_eq(D->be->ops->write(D->be, (float *)b->addr + n, g, sizeof g, &err), SD_OK);
    return b->addr;
}

/* Backend copy of host[0 .. n) floats (with guards). */
static float *dev_up(dev *D, const float *host, size_t n) {
    float *a = dev_floats(D, n);
    sd_error err = {0};
    cr_assert_eq(D->be->ops->write(D->be, a, host, n * sizeof(float), &err), SD_OK, "%s", err.msg);
    return a;
}

/* Weights: host bytes as a weights buffer (mapped or uploaded). */
static const void *dev_weights(dev *D, const void *host, size_t bytes) {
    sd_error err = {0};
    cr_assert(D->n < 64);
    sd_buffer *b = NULL;
    cr_assert_eq(D->be->ops->buffer_from_host(D->be, host, bytes, &b, &err), SD_OK, "%s", err.msg);
    D->n_floats[D->n] = 0;
    D->bufs[D->n++] = b;
    return b->addr;
}

/* Read n floats at addr back into host (after a sync), and check the guard values after
 * the guarded buffer addr points into. */
static void dev_down(dev *D, float *host, const float *addr, size_t n, const char *what) {
    sd_error err = {0};
    cr_assert_eq(D->be->ops->sync(D->be, &err), SD_OK, "%s: %s", what, err.msg);
    cr_assert_eq(D->be->ops->read(D->be, host, addr, n * sizeof(float), &err), SD_OK, "%s: %s",
                 what, err.msg);
    for (int i = 0; i < D->n; i++) {
        const float *base = D->bufs[i]->addr;
        if (!D->n_floats[i] || addr < base || addr >= base + D->n_floats[i]) continue;
        float g[GUARD];
        cr_assert_eq(D->be->ops->read(D->be, g, base + D->n_floats[i], sizeof g, &err), SD_OK);
        for (int j = 0; j < GUARD; j++)
            cr_assert_eq(g[j], GUARD_VAL, "%s: wrote past the end", what);
    }
}

/* ------------------------------------------------------------ the op checks */

static const sd_type k_types[] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0};

/* matmul (n_tok 1..17) and get_rows for every weight type: against float64 over the
 * dequantized weights and the activations as the kernels round them; every row of a batch
 * == the same row alone, bit for bit. */
static void check_matmul(sd_device d) {
    const int64_t rows = 37, cols = 96;
    const int32_t max_tok = 17;
    dev D;
    dev_open(&D, d, 2, max_tok, cols, 32);
    uint64_t rng = 42;
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        const sd_type t = k_types[ti];
        size_t rb;
        cr_assert_eq(sd_type_row_bytes(t, cols, &rb), 0);
        uint8_t *wd = malloc(rb * rows);
        float *tmp = malloc(cols * sizeof(float)), *wf = malloc(rows * cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            fill(tmp, cols, &rng, 1.0f);
            sd_quantize_row(t, tmp, wd + r * rb, cols);
            sd_dequantize_row(t, wd + r * rb, wf + r * cols, cols);
        }
        const sd_weight w = {t, rows, cols, rb, dev_weights(&D, wd, rb * rows), SD_LAYOUT_ROWS};
        float *x = malloc(max_tok * cols * sizeof(float)), *xa = malloc(max_tok * cols * 4);
        fill(x, max_tok * cols, &rng, 2.0f);
        const sd_type vt = sd_vec_dot_type(t);
        size_t vrb;
        cr_assert_eq(sd_type_row_bytes(vt, cols, &vrb), 0);
        uint8_t *xq = malloc(vrb);
        for (int32_t b = 0; b < max_tok; b++) {
            sd_quantize_row(vt, x + b * cols, xq, cols);
            sd_dequantize_row(vt, xq, xa + b * cols, cols);
        }
        double *ref = malloc(max_tok * rows * sizeof(double));
        for (int32_t b = 0; b < max_tok; b++)
            for (int64_t r = 0; r < rows; r++) {
                double s = 0;
                for (int64_t c = 0; c < cols; c++)
                    s += (double)wf[r * cols + c] * xa[b * cols + c];
                ref[b * rows + r] = s;
            }
        const float *dx = dev_up(&D, x, max_tok * cols);
        float *dy = dev_floats(&D, max_tok * rows), *dy1 = dev_floats(&D, rows);
        float *y = malloc(max_tok * rows * sizeof(float)), *y1 = malloc(rows * sizeof(float));
        char what[96];
        snprintf(what, sizeof what, "%s matmul %s", sd_device_name(d), sd_type_name(t));
        D.be->ops->matmul(D.be, &w, dx, max_tok, dy);
        dev_down(&D, y, dy, max_tok * rows, what);
        expect_close(y, ref, max_tok * rows, 1e-5, what);
        for (int32_t n_tok = 1; n_tok <= max_tok; n_tok += 4) { /* batches 1, 5, 9, 13, 17 */
            float *yb = malloc(n_tok * rows * sizeof(float));
            D.be->ops->matmul(D.be, &w, dx, n_tok, dy);
            dev_down(&D, yb, dy, n_tok * rows, what);
            cr_expect(memcmp(yb, y, n_tok * rows * sizeof(float)) == 0,
                      "%s: batch of %d != the first rows of a batch of %d", what, n_tok, max_tok);
            free(yb);
        }
        for (int32_t b = 0; b < max_tok; b += 3) {
            D.be->ops->matmul(D.be, &w, dx + b * cols, 1, dy1);
            dev_down(&D, y1, dy1, rows, what);
            cr_expect(memcmp(y1, y + b * rows, rows * sizeof(float)) == 0,
                      "%s: batch row %d != single", what, b);
        }
        const int32_t ids[3] = {36, 0, 17};
        float *dg = dev_floats(&D, 3 * cols), *g = malloc(3 * cols * sizeof(float));
        D.be->ops->get_rows(D.be, &w, ids, 3, dg);
        dev_down(&D, g, dg, 3 * cols, "get_rows");
        for (int i = 0; i < 3; i++)
            cr_expect(memcmp(g + i * cols, wf + ids[i] * cols, cols * sizeof(float)) == 0,
                      "%s get_rows %s", sd_device_name(d), sd_type_name(t));
        free(wd);
        free(tmp);
        free(wf);
        free(x);
        free(xa);
        free(xq);
        free(ref);
        free(y);
        free(y1);
        free(g);
    }
    dev_close(&D);
}

/* rope reference: pairs (2i, 2i+1) or (i, i + n_rot/2) by
 * theta = pos * fs * base^(-2i/n_rot) / factor_i. */
static void rope_ref(const float *x, int32_t n_tok, int32_t pos0, int32_t n_head, int32_t hd,
                     int32_t n_rot, sd_rope_mode mode, double base, double fs, const float *fac,
                     double *out) {
    const int32_t half = n_rot / 2;
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t h = 0; h < n_head; h++) {
            const float *xr = x + (t * n_head + h) * hd;
            double *o = out + (t * n_head + h) * hd;
            for (int32_t dd = 0; dd < hd; dd++)
                o[dd] = xr[dd];
            for (int32_t i = 0; i < half; i++) {
                const int32_t a = mode == SD_ROPE_NEOX ? i : 2 * i;
                const int32_t b = mode == SD_ROPE_NEOX ? i + half : 2 * i + 1;
                const double th =
                    (pos0 + t) * fs * pow(base, -2.0 * i / n_rot) / (fac ? fac[i] : 1);
                o[a] = xr[a] * cos(th) - xr[b] * sin(th);
                o[b] = xr[a] * sin(th) + xr[b] * cos(th);
            }
        }
}

static void check_elementwise(sd_device d) {
    dev D;
    dev_open(&D, d, 2, 8, 64, 32);
    uint64_t rng = 7;
    const int32_t n_tok = 3, n = 24;
    float x[3 * 24], w[24], y[3 * 24], fac[4] = {1.0f, 2.5f, 8.0f, 0.75f};
    double ref[3 * 24];
    fill(x, n_tok * n, &rng, 3.0f);
    fill(w, n, &rng, 1.0f);
    const float *dx = dev_up(&D, x, n_tok * n), *dw = dev_up(&D, w, n);
    const float *dfac = dev_up(&D, fac, 4);
    float *dy = dev_floats(&D, n_tok * n);
    char what[96];
#define WHAT(op) (snprintf(what, sizeof what, "%s %s", sd_device_name(d), op), what)

    D.be->ops->rmsnorm(D.be, dx, dw, n_tok, n, 1e-5f, dy);
    dev_down(&D, y, dy, n_tok * n, WHAT("rmsnorm"));
    for (int32_t t = 0; t < n_tok; t++) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)x[t * n + i] * x[t * n + i];
        for (int i = 0; i < n; i++)
            ref[t * n + i] = x[t * n + i] / sqrt(ss / n + 1e-5) * w[i];
    }
    expect_close(y, ref, n_tok * n, 1e-6, what);

    /* rope: 2 heads of 12, n_rot 8, positions 5..7; both modes, with and without
     * frequency factors and linear scaling */
    const struct {
        sd_rope_mode mode;
        float fs;
        const float *fac;
        const char *name;
    } ropes[] = {{SD_ROPE_NORM, 1.0f, NULL, "rope norm"},
                 {SD_ROPE_NEOX, 1.0f, NULL, "rope neox"},
                 {SD_ROPE_NORM, 0.25f, fac, "rope norm scaled + factors"},
                 {SD_ROPE_NEOX, 0.5f, fac, "rope neox scaled + factors"}};
    for (size_t ri = 0; ri < sizeof ropes / sizeof ropes[0]; ri++) {
        const sd_rope r = {8, ropes[ri].mode, 10000.0f, ropes[ri].fs, ropes[ri].fac ? dfac : NULL};
        D.be->ops->copy(D.be, dy, dx, n_tok * n);
        D.be->ops->rope(D.be, dy, n_tok, 5, 2, 12, &r);
        dev_down(&D, y, dy, n_tok * n, WHAT(ropes[ri].name));
        rope_ref(x, n_tok, 5, 2, 12, 8, ropes[ri].mode, 10000.0, ropes[ri].fs, ropes[ri].fac, ref);
        expect_close(y, ref, n_tok * n, 1e-5, what);
    }

    D.be->ops->copy(D.be, dy, dx, n_tok * n);
    D.be->ops->add_bias(D.be, dy, dw, n_tok, n);
    dev_down(&D, y, dy, n_tok * n, WHAT("add_bias"));
    for (int32_t t = 0; t < n_tok; t++)
        for (int i = 0; i < n; i++)
            ref[t * n + i] = (double)x[t * n + i] + w[i];
    expect_close(y, ref, n_tok * n, 1e-7, what);

    D.be->ops->copy(D.be, dy, dx, n_tok * n);
    D.be->ops->softmax(D.be, dy, n_tok, n);
    dev_down(&D, y, dy, n_tok * n, WHAT("softmax"));
    for (int32_t t = 0; t < n_tok; t++) {
        double mx = -1e30, s = 0;
        for (int i = 0; i < n; i++)
            mx = fmax(mx, x[t * n + i]);
        for (int i = 0; i < n; i++)
            s += exp(x[t * n + i] - mx);
        for (int i = 0; i < n; i++)
            ref[t * n + i] = exp(x[t * n + i] - mx) / s;
    }
    expect_close(y, ref, n_tok * n, 1e-6, what);

    D.be->ops->swiglu(D.be, dx, dx + n, n, dy);
    float y2[24];
    dev_down(&D, y2, dy, n, WHAT("swiglu"));
    for (int i = 0; i < n; i++)
        ref[i] = x[i] / (1 + exp(-(double)x[i])) * x[n + i];
    expect_close(y2, ref, n, 1e-6, what);

    D.be->ops->copy(D.be, dy, dx, n);
    D.be->ops->add(D.be, dy, dx + n, n);
    dev_down(&D, y2, dy, n, WHAT("add"));
    for (int i = 0; i < n; i++)
        ref[i] = (double)x[i] + x[n + i];
    expect_close(y2, ref, n, 1e-7, what);
#undef WHAT
    dev_close(&D);
}

/* kv_store then attention over a cache in backend memory (F32 and F16, GQA): against
 * float64 from the values the cache holds; a query alone == its row in the batch. */
static void check_attention_dev(sd_device d, sd_type kv_type, int32_t n_head, int32_t n_head_kv,
                                int32_t hd) {
    const int32_t kv_dim = n_head_kv * hd, n_ctx = 32, qdim = n_head * hd;
    const int32_t pos0 = 6, n_tok = 4, n_pos = pos0 + n_tok;
    char what[128];
    snprintf(what, sizeof what, "%s attention kv %s heads %d/%d hd %d", sd_device_name(d),
             sd_type_name(kv_type), n_head, n_head_kv, hd);
    dev D;
    dev_open(&D, d, 2, 8, 64, n_ctx);
    sd_error err = {0};
    sd_kv_params kp = {2, n_ctx, kv_dim, kv_type, NULL};
    size_t kvb;
    cr_assert_eq(sd_kv_storage_bytes(&kp, &kvb, &err), SD_OK);
    sd_buffer *kb = NULL;
    cr_assert_eq(sd_buffer_alloc(D.be, kvb, SD_BUFFER_KV, &kb, &err), SD_OK, "%s", err.msg);
    kp.storage = kb->addr;
    sd_kv *kv = NULL;
    cr_assert_eq(sd_kv_init(&kp, &kv, &err), SD_OK, "%s", err.msg);
    uint64_t rng = 99 + (uint64_t)hd * 31 + (uint64_t)n_head;
    float *k = malloc(n_pos * kv_dim * 4), *v = malloc(n_pos * kv_dim * 4);
    float *kh = malloc(n_pos * kv_dim * 4), *vh = malloc(n_pos * kv_dim * 4);
    fill(k, n_pos * kv_dim, &rng, 2.0f);
    fill(v, n_pos * kv_dim, &rng, 1.0f);
    for (int32_t i = 0; i < n_pos * kv_dim; i++) {
        kh[i] = kv_type == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(k[i])) : k[i];
        vh[i] = kv_type == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(v[i])) : v[i];
    }
    float *q = malloc(n_tok * qdim * 4), *o = malloc(n_tok * qdim * 4), *o1 = malloc(qdim * 4);
    fill(q, n_tok * qdim, &rng, 6.0f / sqrtf((float)hd));
    double *ref = malloc(n_tok * qdim * sizeof(double));
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t h = 0; h < n_head; h++) {
            const int32_t g = h / (n_head / n_head_kv), p = pos0 + t;
            double sc[64], mx = -1e30, s = 0;
            for (int32_t j = 0; j <= p; j++) {
                double dd = 0;
                for (int i = 0; i < hd; i++)
                    dd += (double)q[(t * n_head + h) * hd + i] * kh[j * kv_dim + g * hd + i];
                sc[j] = dd / sqrt(hd);
                mx = fmax(mx, sc[j]);
            }
            for (int32_t j = 0; j <= p; j++)
                s += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int32_t j = 0; j <= p; j++)
                    a += sc[j] / s * vh[j * kv_dim + g * hd + i];
                ref[(t * n_head + h) * hd + i] = a;
            }
        }
    const float *dk = dev_up(&D, k, n_pos * kv_dim), *dv = dev_up(&D, v, n_pos * kv_dim);
    const float *dq = dev_up(&D, q, n_tok * qdim);
    float *dout = dev_floats(&D, n_tok * qdim), *dout1 = dev_floats(&D, qdim);
    D.be->ops->kv_store(D.be, kv, 1, 0, pos0, kv_dim, dk, dv);
    D.be->ops->kv_store(D.be, kv, 1, pos0, n_tok, kv_dim, dk + pos0 * kv_dim, dv + pos0 * kv_dim);
    cr_assert_eq(D.be->ops->sync(D.be, &err), SD_OK, "%s", err.msg);
    const size_t erb = sd_kv_row_bytes(kv);
    uint8_t row_raw[1024];
    float row[256];
    for (int32_t j = 0; j < n_pos; j++) { /* the cache holds the rounded values */
        cr_assert_eq(D.be->ops->read(D.be, row_raw, sd_kv_k(kv, 1, j), erb, &err), SD_OK);
        sd_dequantize_row(kv_type, row_raw, row, kv_dim);
        cr_assert(memcmp(row, kh + j * kv_dim, kv_dim * 4) == 0, "%s: K row %d", what, j);
        cr_assert_eq(D.be->ops->read(D.be, row_raw, sd_kv_v(kv, 1, j), erb, &err), SD_OK);
        sd_dequantize_row(kv_type, row_raw, row, kv_dim);
        cr_assert(memcmp(row, vh + j * kv_dim, kv_dim * 4) == 0, "%s: V row %d", what, j);
    }
    D.be->ops->attention(D.be, dq, kv, 1, pos0, n_tok, n_head, n_head_kv, hd, dout);
    dev_down(&D, o, dout, n_tok * qdim, what);
    expect_close(o, ref, n_tok * qdim, 1e-5, what);
    for (int32_t t = 0; t < n_tok; t++) {
        D.be->ops->attention(D.be, dq + t * qdim, kv, 1, pos0 + t, 1, n_head, n_head_kv, hd, dout1);
        dev_down(&D, o1, dout1, qdim, what);
        cr_expect(memcmp(o1, o + t * qdim, qdim * 4) == 0, "%s: batch row %d != single", what, t);
    }
    free(k);
    free(v);
    free(kh);
    free(vh);
    free(q);
    free(o);
    free(o1);
    free(ref);
    sd_kv_free(kv);
    sd_buffer_free(kb);
    dev_close(&D);
}

static void check_attention_all(sd_device d) {
    const int32_t shapes[][3] = {/* n_head, n_head_kv, head_dim */
                                 {4, 2, 8},
                                 {8, 1, 24},
                                 {16, 2, 64},
                                 {4, 1, 37},
                                 {2, 2, 3}};
    for (int kt = 0; kt < 2; kt++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            check_attention_dev(d, kt ? SD_TYPE_F16 : SD_TYPE_F32, shapes[si][0], shapes[si][1],
                                shapes[si][2]);
}

/* Buffers: zeroed on allocation, write/read round trip, weights from host hold the bytes. */
static void check_buffers(sd_device d) {
    dev D;
    dev_open(&D, d, 1, 4, 32, 8);
    float *a = dev_floats(&D, 100), back[100];
    dev_down(&D, back, a, 100, "zeroed buffer");
    for (int i = 0; i < 100; i++)
        cr_expect_eq(back[i], 0.0f, "buffer not zeroed at %d", i);
    float src[100];
    for (int i = 0; i < 100; i++)
        src[i] = (float)i * 0.5f - 7.0f;
    sd_error err = {0};
    cr_assert_eq(D.be->ops->write(D.be, a, src, sizeof src, &err), SD_OK);
    dev_down(&D, back, a, 100, "write/read");
    cr_expect(memcmp(back, src, sizeof src) == 0, "write/read round trip");
    const float *wa = dev_weights(&D, src, sizeof src);
    float wb[100];
    cr_assert_eq(D.be->ops->read(D.be, wb, wa, sizeof wb, &err), SD_OK);
    cr_expect(memcmp(wb, src, sizeof src) == 0, "weights buffer holds the host bytes");
    sd_buffer *empty = NULL;
    cr_expect_eq(sd_buffer_alloc(D.be, 0, SD_BUFFER_COMPUTE, &empty, &err), SD_OK, "%s", err.msg);
    sd_buffer_free(empty);
    sd_buffer_free(NULL);
    dev_close(&D);
}

TestSuite(backend, .timeout = 300);

#define DEVICE_TESTS(NAME, DEV)                                                                    \
    Test(backend, NAME##_buffers) {                                                                \
        check_buffers(DEV);                                                                        \
    }                                                                                              \
    Test(backend, NAME##_matmul_get_rows) {                                                        \
        setenv("SD_CPU_PAR_MIN_WORK", "0", 1);                                                     \
        check_matmul(DEV);                                                                         \
    }                                                                                              \
    Test(backend, NAME##_elementwise) {                                                            \
        check_elementwise(DEV);                                                                    \
    }                                                                                              \
    Test(backend, NAME##_attention) {                                                              \
        setenv("SD_CPU_PAR_MIN_WORK", "0", 1);                                                     \
        check_attention_all(DEV);                                                                  \
    }

DEVICE_TESTS(cpu, SD_DEVICE_CPU)
DEVICE_TESTS(cuda, SD_DEVICE_CUDA)

/* ------------------------------------------------------------ the CPU backend's own paths */

/* float [n] plus GUARD sentinel floats after it. */
static float *galloc(size_t n) {
    float *p = malloc((n + GUARD) * sizeof(float));
    cr_assert(p);
    for (size_t i = 0; i < n + GUARD; i++)
        p[i] = GUARD_VAL;
    return p;
}
static void gcheck(const float *p, size_t n, const char *what) {
    for (size_t i = n; i < n + GUARD; i++)
        cr_assert_eq(p[i], GUARD_VAL, "%s: wrote past the end", what);
}
static sd_backend *cpu_backend_ctx(int32_t n_threads, int32_t n_ctx) {
    sd_backend_params bp = {n_threads, 8, 256, n_ctx, 0, NULL, 0};
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
    return be;
}
static sd_backend *cpu_backend(int32_t n_threads) {
    sd_backend_params bp = {n_threads, 8, 256, 32, 0, NULL, 0};
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
    return be;
}

Test(backend, cpu_matmul_and_get_rows_all_types) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    const sd_type types[] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q8_0, SD_TYPE_Q4_0};
    const int64_t rows = 37, cols = 64;
    const int32_t n_tok = 5;
    uint64_t rng = 42;
    for (int nt = 1; nt <= 2; nt++) {
        sd_backend *be = cpu_backend(nt);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            sd_type t = types[ti];
            size_t rb;
            cr_assert_eq(sd_type_row_bytes(t, cols, &rb), 0);
            uint8_t *wd = malloc(rb * rows);
            float *tmp = malloc(cols * sizeof(float)), *wf = malloc(rows * cols * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                fill(tmp, cols, &rng, 1.0f);
                sd_quantize_row(t, tmp, wd + r * rb, cols);
                sd_dequantize_row(t, wd + r * rb, wf + r * cols, cols);
            }
            sd_weight w = {t, rows, cols, rb, wd, SD_LAYOUT_ROWS};
            float *x = galloc(n_tok * cols), *xa = malloc(n_tok * cols * sizeof(float));
            fill(x, n_tok * cols, &rng, 2.0f);
            /* What the activations become for this weight type. */
            sd_type vt = sd_vec_dot_type(t);
            size_t vrb;
            cr_assert_eq(sd_type_row_bytes(vt, cols, &vrb), 0);
            uint8_t *xq = malloc(vrb);
            for (int32_t b = 0; b < n_tok; b++) {
                sd_quantize_row(vt, x + b * cols, xq, cols);
                sd_dequantize_row(vt, xq, xa + b * cols, cols);
            }
            float *y = galloc(n_tok * rows);
            double *ref = malloc(n_tok * rows * sizeof(double));
            be->ops->matmul(be, &w, x, n_tok, y);
            for (int32_t b = 0; b < n_tok; b++)
                for (int64_t r = 0; r < rows; r++) {
                    double s = 0;
                    for (int64_t c = 0; c < cols; c++)
                        s += (double)wf[r * cols + c] * xa[b * cols + c];
                    ref[b * rows + r] = s;
                }
            gcheck(y, n_tok * rows, "matmul");
            expect_close(y, ref, n_tok * rows, 1e-5, sd_type_name(t));
            /* Row b of a batch == the same row alone. */
            float *y1 = galloc(rows);
            be->ops->matmul(be, &w, x + 3 * cols, 1, y1);
            cr_expect(memcmp(y1, y + 3 * rows, rows * sizeof(float)) == 0,
                      "%s: batch row != single", sd_type_name(t));

            int32_t ids[3] = {36, 0, 17};
            float *g = galloc(3 * cols);
            be->ops->get_rows(be, &w, ids, 3, g);
            gcheck(g, 3 * cols, "get_rows");
            for (int i = 0; i < 3; i++)
                cr_expect(memcmp(g + i * cols, wf + ids[i] * cols, cols * sizeof(float)) == 0,
                          "get_rows %s", sd_type_name(t));
            free(wd);
            free(tmp);
            free(wf);
            free(x);
            free(xa);
            free(xq);
            free(y);
            free(ref);
            free(y1);
            free(g);
        }
        sd_backend_free(be);
    }
}

/* The matmul at the limits its scratch was sized for (n_batch tokens, max_cols columns,
 * many row chunks), with 1..3 threads: activations are prepared once per call into the
 * backend's scratch; results are bit-identical to sd_matmul_rows on activations
 * prepared by sd_quantize_activations, whatever the thread count, and row b of a batch
 * equals the same row alone. A max_cols that is not a multiple of 32 is accepted. */
Test(backend, cpu_matmul_full_scratch_threads) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    const sd_type types[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_F32};
    const int64_t rows = 300, cols = 512;
    const int32_t n_batch = 16;
    uint64_t rng = 7;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const sd_type t = types[ti];
        size_t rb, xb;
        cr_assert_eq(sd_type_row_bytes(t, cols, &rb), 0);
        uint8_t *wd = malloc(rb * rows);
        float *tmp = malloc(cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            fill(tmp, cols, &rng, 1.0f);
            sd_quantize_row(t, tmp, wd + r * rb, cols);
        }
        sd_weight w = {t, rows, cols, rb, wd, SD_LAYOUT_ROWS};
        float *x = malloc((size_t)n_batch * cols * sizeof(float));
        fill(x, (size_t)n_batch * cols, &rng, 2.0f);
        cr_assert_eq(sd_activations_bytes(t, n_batch, cols, &xb), 0);
        void *xq = NULL;
        cr_assert_eq(posix_memalign(&xq, 64, xb), 0);
        sd_quantize_activations(t, x, n_batch, cols, xq);
        float *want = malloc((size_t)n_batch * rows * sizeof(float));
        sd_matmul_rows(t, wd, rb, cols, xq, n_batch, want, rows, 0, rows);
        for (int32_t nt = 1; nt <= 3; nt++) {
            sd_backend_params bp = {nt, n_batch, cols, 32, 0, NULL, 0};
            sd_backend *be = NULL;
            sd_error err = {0};
            cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
            float *y = galloc((size_t)n_batch * rows);
            be->ops->matmul(be, &w, x, n_batch, y);
            gcheck(y, (size_t)n_batch * rows, "matmul");
            cr_expect(memcmp(y, want, (size_t)n_batch * rows * sizeof(float)) == 0,
                      "%s, %d threads: backend != sd_matmul_rows", sd_type_name(t), nt);
            float *y1 = galloc(rows);
            for (int32_t b = 0; b < n_batch; b += 5) {
                be->ops->matmul(be, &w, x + (size_t)b * cols, 1, y1);
                cr_expect(memcmp(y1, want + (size_t)b * rows, rows * sizeof(float)) == 0,
                          "%s, %d threads: row %d alone differs", sd_type_name(t), nt, b);
            }
            free(y);
            free(y1);
            sd_backend_free(be);
        }
        free(wd);
        free(tmp);
        free(x);
        free(xq);
        free(want);
    }
    /* max_cols not a multiple of 32 (F32 models may have such rows) */
    sd_backend_params bp = {2, 4, 100, 8, 0, NULL, 0};
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
    float wf[3 * 100], x[4 * 100], *y = galloc(4 * 3);
    fill(wf, 300, &rng, 1.0f);
    fill(x, 400, &rng, 1.0f);
    sd_weight w = {SD_TYPE_F32, 3, 100, 400, wf, SD_LAYOUT_ROWS};
    be->ops->matmul(be, &w, x, 4, y);
    gcheck(y, 12, "matmul f32 100");
    for (int b = 0; b < 4; b++)
        for (int r = 0; r < 3; r++) {
            double d = 0;
            for (int c = 0; c < 100; c++)
                d += (double)wf[r * 100 + c] * x[b * 100 + c];
            cr_expect(fabs(y[b * 3 + r] - d) <= 1e-4, "f32 100: %g vs %g", y[b * 3 + r], d);
        }
    free(y);
    sd_backend_free(be);
    unsetenv("SD_CPU_PAR_MIN_WORK");
}

/* prepare_weight packs every quantized matrix the kernels in use run packed (and leaves
 * float ones in GGUF rows); matmul on the packed copy == sd_matmul_rows_ref on the GGUF
 * rows, bit for bit, at 1 and 2 threads and batch sizes 1..17 (rows not a multiple of
 * 16); matmul_multi of three matrices == three matmul calls; the backend's packing
 * statistics count what it packed. */
Test(backend, cpu_packed_weights_and_matmul_multi) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    uint64_t rng = 4242;
    const int64_t rows[3] = {37, 16, 21}, cols = 512;
    const sd_type types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0, SD_TYPE_Q4_0,
                             SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q2_K, SD_TYPE_Q3_K,
                             SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const sd_type t = types[ti];
        size_t rb = 0;
        cr_assert_eq(sd_type_row_bytes(t, cols, &rb), 0);
        void *wd[3];
        sd_weight W[3];
        for (int i = 0; i < 3; i++) {
            float *wf = malloc(sizeof(float) * (size_t)(rows[i] * cols));
            fill(wf, rows[i] * cols, &rng, 1.0f);
            wd[i] = malloc(rb * (size_t)rows[i]);
            for (int64_t r = 0; r < rows[i]; r++)
                cr_assert_eq(sd_quantize_row(t, wf + r * cols, (char *)wd[i] + r * rb, cols), 0);
            free(wf);
        }
        for (int nt = 1; nt <= 2; nt++) {
            sd_backend_params bp = {nt, 17, cols, 32, 0, NULL, 0};
            sd_backend *be = NULL;
            sd_error err = {0};
            cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
            for (int i = 0; i < 3; i++) {
                W[i] = (sd_weight){t, rows[i], cols, rb, wd[i], SD_LAYOUT_ROWS};
                cr_assert_eq(be->ops->prepare_weight(be, &W[i], &err), SD_OK, "%s", err.msg);
                cr_assert_eq(W[i].layout,
                             sd_matmul_packed_available(t) ? SD_LAYOUT_PACKED : SD_LAYOUT_ROWS,
                             "%s", sd_type_name(t));
            }
            int32_t np = 0;
            size_t pbytes = 0, want_bytes = 0;
            double ms = 0;
            sd_backend_cpu_packed_stats(be, &np, &pbytes, &ms);
            for (int i = 0; i < 3 && W[0].layout == SD_LAYOUT_PACKED; i++) {
                size_t b = 0;
                cr_assert_eq(sd_pack_bytes(t, rows[i], cols, &b), 0);
                want_bytes += b;
            }
            cr_assert_eq(np, W[0].layout == SD_LAYOUT_PACKED ? 3 : 0);
            cr_assert_eq(pbytes, want_bytes);
            for (int32_t n_tok = 1; n_tok <= 17; n_tok += 4) {
                float *x = galloc(n_tok * cols);
                fill(x, n_tok * cols, &rng, 2.0f);
                float *y[3], *ym[3], *want = malloc(sizeof(float) * 64 * (size_t)n_tok);
                for (int i = 0; i < 3; i++) {
                    y[i] = galloc(n_tok * rows[i]);
                    ym[i] = galloc(n_tok * rows[i]);
                    be->ops->matmul(be, &W[i], x, n_tok, y[i]);
                    size_t xb = 0;
                    cr_assert_eq(sd_activations_bytes(t, n_tok, cols, &xb), 0);
                    void *xq = malloc(xb);
                    sd_quantize_activations(t, x, n_tok, cols, xq);
                    sd_matmul_rows_ref(t, wd[i], rb, cols, xq, n_tok, want, rows[i], 0, rows[i]);
                    free(xq);
                    cr_assert(memcmp(y[i], want, sizeof(float) * (size_t)(n_tok * rows[i])) == 0,
                              "%s, %d threads, n_tok %d: matmul != the scalar reference",
                              sd_type_name(t), nt, n_tok);
                }
                const sd_weight *ws[3] = {&W[0], &W[1], &W[2]};
                be->ops->matmul_multi(be, ws, 3, x, n_tok, ym);
                for (int i = 0; i < 3; i++) {
                    cr_assert(memcmp(y[i], ym[i], sizeof(float) * (size_t)(n_tok * rows[i])) == 0,
                              "%s: matmul_multi matrix %d != matmul", sd_type_name(t), i);
                    free(y[i]);
                    free(ym[i]);
                }
                free(want);
                free(x);
            }
            sd_backend_free(be);
        }
        for (int i = 0; i < 3; i++)
            free(wd[i]);
    }
}

/* A CPU backend on another's threads (share_threads): the same thread count, the same
 * bits as a backend with its own pool, at 2 threads; either backend may be freed first
 * (ASan: nothing leaked, nothing used after free). */
Test(backend, cpu_shared_thread_pool) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    uint64_t rng = 77;
    const int64_t rows = 40, cols = 256;
    const int32_t n_tok = 5;
    size_t rb = 0;
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q4_K, cols, &rb), 0);
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    fill(wf, rows * cols, &rng, 1.0f);
    uint8_t *wd = malloc(rb * rows);
    for (int64_t r = 0; r < rows; r++)
        sd_quantize_row(SD_TYPE_Q4_K, wf + r * cols, wd + r * rb, cols);
    float *x = galloc(n_tok * cols), *ya = galloc(n_tok * rows), *yb = galloc(n_tok * rows);
    fill(x, n_tok * cols, &rng, 2.0f);
    for (int order = 0; order < 2; order++) {
        sd_backend_params bp = {2, 8, cols, 32, 0, NULL, 0};
        sd_backend *a = NULL, *b = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_backend_cpu_init(&bp, &a, &err), SD_OK, "%s", err.msg);
        bp.n_threads = 1; /* ignored: the shared pool's count is used */
        bp.share_threads = a;
        cr_assert_eq(sd_backend_cpu_init(&bp, &b, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_backend_cpu_n_threads(b), sd_backend_cpu_n_threads(a));
        sd_weight wa = {SD_TYPE_Q4_K, rows, cols, rb, wd, SD_LAYOUT_ROWS}, wb = wa;
        cr_assert_eq(a->ops->prepare_weight(a, &wa, &err), SD_OK);
        cr_assert_eq(b->ops->prepare_weight(b, &wb, &err), SD_OK);
        a->ops->matmul(a, &wa, x, n_tok, ya);
        b->ops->matmul(b, &wb, x, n_tok, yb);
        cr_assert(memcmp(ya, yb, sizeof(float) * (size_t)(n_tok * rows)) == 0,
                  "shared pool gives other bits");
        if (order) {
            sd_backend_free(a);
            b->ops->matmul(b, &wb, x, n_tok, yb); /* still runs on the pool a made */
            cr_assert(memcmp(ya, yb, sizeof(float) * (size_t)(n_tok * rows)) == 0);
            sd_backend_free(b);
        } else {
            sd_backend_free(b);
            sd_backend_free(a);
        }
    }
    free(wf);
    free(wd);
    free(x);
    free(ya);
    free(yb);
}

Test(backend, cpu_elementwise_norm_rope_softmax) {
    sd_backend *be = cpu_backend(2);
    uint64_t rng = 7;
    const int32_t n_tok = 3, n = 24;
    float *x = galloc(n_tok * n), *w = galloc(n), *y = galloc(n_tok * n);
    double ref[3 * 24];
    fill(x, n_tok * n, &rng, 3.0f);
    fill(w, n, &rng, 1.0f);
    be->ops->rmsnorm(be, x, w, n_tok, n, 1e-5f, y);
    for (int32_t t = 0; t < n_tok; t++) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)x[t * n + i] * x[t * n + i];
        for (int i = 0; i < n; i++)
            ref[t * n + i] = x[t * n + i] / sqrt(ss / n + 1e-5) * w[i];
    }
    gcheck(y, n_tok * n, "rmsnorm");
    expect_close(y, ref, n_tok * n, 1e-6, "rmsnorm");

    /* rope: 2 heads of 12, n_rot 8, positions 5..7 */
    memcpy(y, x, n_tok * n * sizeof(float));
    const sd_rope rope = {8, SD_ROPE_NORM, 10000.0f, 1.0f, NULL};
    be->ops->rope(be, y, n_tok, 5, 2, 12, &rope);
    for (int32_t t = 0; t < n_tok; t++)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 12; d++) {
                const float *xr = x + t * n + h * 12;
                double v = xr[d];
                if (d < 8) {
                    int i = d / 2;
                    double th = (5 + t) * pow(10000.0, -2.0 * i / 8);
                    v = d % 2 == 0 ? xr[d] * cos(th) - xr[d + 1] * sin(th)
                                   : xr[d - 1] * sin(th) + xr[d] * cos(th);
                }
                ref[t * n + h * 12 + d] = v;
            }
    gcheck(y, n_tok * n, "rope");
    expect_close(y, ref, n_tok * n, 1e-5, "rope");

    memcpy(y, x, n_tok * n * sizeof(float));
    be->ops->softmax(be, y, n_tok, n);
    for (int32_t t = 0; t < n_tok; t++) {
        double mx = -1e30, s = 0;
        for (int i = 0; i < n; i++)
            mx = fmax(mx, x[t * n + i]);
        for (int i = 0; i < n; i++)
            s += exp(x[t * n + i] - mx);
        for (int i = 0; i < n; i++)
            ref[t * n + i] = exp(x[t * n + i] - mx) / s;
    }
    gcheck(y, n_tok * n, "softmax");
    expect_close(y, ref, n_tok * n, 1e-6, "softmax");

    be->ops->swiglu(be, x, x + n, n, y);
    for (int i = 0; i < n; i++)
        ref[i] = x[i] / (1 + exp(-(double)x[i])) * x[n + i];
    gcheck(y, n_tok * n, "swiglu");
    expect_close(y, ref, n, 1e-6, "swiglu");

    memcpy(y, x, n * sizeof(float));
    be->ops->add(be, y, x + n, n);
    for (int i = 0; i < n; i++)
        ref[i] = (double)x[i] + x[n + i];
    gcheck(y, n_tok * n, "add");
    expect_close(y, ref, n, 1e-7, "add");
    free(x);
    free(w);
    free(y);
    sd_backend_free(be);
}

/* Attention of every kernel level this CPU runs, for F32 and F16 caches, head sizes that
 * exercise every chunk width (8: one 8-lane chunk; 24: 16 + 8; 64: 4 x 16; 37: 2 x 16 +
 * a scalar tail of 5; 3: scalar only; 16, 48, 128) and GQA groups of 1, 2, 3, 5, 6, 7, 8
 * and 12 (two head blocks):
 * against a float64 reference computed from the values the cache holds (rounded to
 * binary16 for F16), within 1e-5 relative (max norm); a query alone == its row in the
 * batch (memcmp); 2 threads == 1 thread (memcmp); every level == the scalar level
 * (memcmp: attn.h fixes the arithmetic). */
static void check_attention(const char *kname, sd_type kv_type, int32_t n_head, int32_t n_head_kv,
                            int32_t hd, int32_t pos0, int32_t n_tok) {
    const int32_t kv_dim = n_head_kv * hd, n_ctx = 64, qdim = n_head * hd;
    const int32_t n_pos = pos0 + n_tok;
    cr_assert_leq(n_pos, n_ctx);
    char what[128];
    snprintf(what, sizeof what, "attention %s kv %s heads %d/%d hd %d pos %d + %d", kname,
             sd_type_name(kv_type), n_head, n_head_kv, hd, pos0, n_tok);
    uint64_t rng = 99 + (uint64_t)hd * 31 + (uint64_t)n_head;
    sd_kv *kv = NULL;
    sd_error err = {0};
    sd_kv_params kp = {2, n_ctx, kv_dim, kv_type, NULL};
    cr_assert_eq(sd_kv_init(&kp, &kv, &err), SD_OK, "%s", err.msg);
    float *k = malloc(n_pos * kv_dim * sizeof(float)), *v = malloc(n_pos * kv_dim * sizeof(float));
    fill(k, n_pos * kv_dim, &rng, 2.0f);
    fill(v, n_pos * kv_dim, &rng, 1.0f);
    /* What the cache holds. */
    float *kh = malloc(n_pos * kv_dim * sizeof(float)),
          *vh = malloc(n_pos * kv_dim * sizeof(float));
    for (int32_t i = 0; i < n_pos * kv_dim; i++) {
        kh[i] = kv_type == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(k[i])) : k[i];
        vh[i] = kv_type == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(v[i])) : v[i];
    }
    float *q = galloc(n_tok * qdim), *o = galloc(n_tok * qdim), *o1 = galloc(qdim),
          *first = galloc(n_tok * qdim);
    fill(q, n_tok * qdim, &rng, 2.0f / sqrtf((float)hd) * 3.0f);
    double *ref = malloc(n_tok * qdim * sizeof(double));
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t h = 0; h < n_head; h++) {
            int32_t g = h / (n_head / n_head_kv), p = pos0 + t;
            double sc[64], mx = -1e30, s = 0;
            for (int32_t j = 0; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[(t * n_head + h) * hd + i] * kh[j * kv_dim + g * hd + i];
                sc[j] = d / sqrt(hd);
                mx = fmax(mx, sc[j]);
            }
            for (int32_t j = 0; j <= p; j++)
                s += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int32_t j = 0; j <= p; j++)
                    a += sc[j] / s * vh[j * kv_dim + g * hd + i];
                ref[(t * n_head + h) * hd + i] = a;
            }
        }
    for (int nt = 1; nt <= 2; nt++) {
        sd_backend *be = cpu_backend_ctx(nt, n_ctx);
        cr_assert_eq(sd_backend_cpu_set_kernels(be, kname), 0, "%s", what);
        cr_assert_str_eq(sd_backend_cpu_kernels(be), kname);
        be->ops->kv_store(be, kv, 1, 0, pos0, kv_dim, k, v);
        be->ops->kv_store(be, kv, 1, pos0, n_tok, kv_dim, k + pos0 * kv_dim, v + pos0 * kv_dim);
        for (int32_t j = 0; j < n_pos; j++) { /* the cache holds the rounded values */
            float row[256];
            sd_dequantize_row(kv_type, sd_kv_k(kv, 1, j), row, kv_dim);
            cr_assert(memcmp(row, kh + j * kv_dim, kv_dim * sizeof(float)) == 0, "%s: K row %d",
                      what, j);
            sd_dequantize_row(kv_type, sd_kv_v(kv, 1, j), row, kv_dim);
            cr_assert(memcmp(row, vh + j * kv_dim, kv_dim * sizeof(float)) == 0, "%s: V row %d",
                      what, j);
        }
        be->ops->attention(be, q, kv, 1, pos0, n_tok, n_head, n_head_kv, hd, o);
        gcheck(o, n_tok * qdim, what);
        expect_close(o, ref, n_tok * qdim, 1e-5, what);
        for (int32_t t = 0; t < n_tok; t++) { /* query t alone (position pos0 + t) == row t */
            be->ops->attention(be, q + t * qdim, kv, 1, pos0 + t, 1, n_head, n_head_kv, hd, o1);
            gcheck(o1, qdim, what);
            cr_expect(memcmp(o1, o + t * qdim, qdim * sizeof(float)) == 0,
                      "%s: batch row %d != single", what, t);
        }
        if (nt == 1)
            memcpy(first, o, n_tok * qdim * sizeof(float));
        else
            cr_expect(memcmp(first, o, n_tok * qdim * sizeof(float)) == 0,
                      "%s: 2 threads != 1 thread", what);
        sd_backend_free(be);
    }
    if (strcmp(kname, "scalar") != 0) { /* the same bits as the scalar reference */
        sd_backend *be = cpu_backend_ctx(1, n_ctx);
        cr_assert_eq(sd_backend_cpu_set_kernels(be, "scalar"), 0);
        be->ops->attention(be, q, kv, 1, pos0, n_tok, n_head, n_head_kv, hd, o);
        cr_expect(memcmp(first, o, n_tok * qdim * sizeof(float)) == 0, "%s: != scalar level", what);
        sd_backend_free(be);
    }
    free(k);
    free(v);
    free(kh);
    free(vh);
    free(q);
    free(o);
    free(o1);
    free(first);
    free(ref);
    sd_kv_free(kv);
}

static void attention_level(const char *level) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    /* n_head, n_head_kv, head_dim; the last four: groups of 6 (hd 128), 7, 5, 3 (AVX2
     * keeps <= 6 heads in registers: 7 runs as 4 + 3) */
    const int32_t shapes[][3] = {{4, 2, 8},   {4, 4, 8},   {8, 1, 24}, {24, 2, 24},
                                 {16, 2, 64}, {4, 1, 37},  {2, 2, 3},  {12, 2, 128},
                                 {14, 2, 64}, {10, 2, 48}, {3, 1, 16}};
    sd_backend *probe = cpu_backend(1);
    const int ok = sd_backend_cpu_set_kernels(probe, level) == 0;
    cr_expect_eq(sd_backend_cpu_set_kernels(probe, "sse9"), -1);
    sd_backend_free(probe);
    if (!ok) cr_skip_test("attention kernels '%s': not supported by this CPU", level);
    for (int kt = 0; kt < 2; kt++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int depth = 0; depth < 2; depth++) /* 6 + 4 keys; 37 + 5 (blocks of 16 keys) */
                check_attention(level, kt ? SD_TYPE_F16 : SD_TYPE_F32, shapes[si][0], shapes[si][1],
                                shapes[si][2], depth ? 37 : 6, depth ? 5 : 4);
}

/* The scalar level always runs; the SIMD levels where this CPU has them. */
Test(backend, cpu_attention_causal_gqa_scalar) {
    attention_level("scalar");
}
Test(backend, cpu_attention_causal_gqa_avx2) {
    attention_level("avx2");
}
Test(backend, cpu_attention_causal_gqa_avx512) {
    attention_level("avx512");
}

/* The default attention kernels: a known level, never above the matmul kernels. */
Test(backend, cpu_attention_kernels_default) {
    sd_backend *be = cpu_backend(1);
    const char *name = sd_backend_cpu_kernels(be);
    cr_expect(strcmp(name, "scalar") == 0 || strcmp(name, "avx2") == 0 ||
                  strcmp(name, "avx512") == 0,
              "%s", name);
    /* Never above the matmul kernels (SD_KERNELS lowers both). */
    const char *order[] = {"scalar", "avx2", "avx512"};
    int la = -1, lq = -1;
    for (int i = 0; i < 3; i++) {
        if (!strcmp(name, order[i])) la = i;
        if (!strcmp(sd_quant_kernels_name(), order[i])) lq = i;
    }
    cr_expect(la <= lq, "attention %s above matmul %s", name, sd_quant_kernels_name());
    sd_backend_free(be);
}

/* The scalar SwiGLU of ops.c (swiglu_range), the specification of every level. */
static float swiglu_ref(float g, float u) {
    return (g / (1.0f + expf(-g))) * u;
}

/* A SwiGLU kernel of glu.h (fn, run at attention level `level`) against the scalar formula,
 * bit for bit: float bit patterns strided over all 2^32 (NaNs, infinities, subnormals, both
 * signs), patterns strided over (-16, 16) (where activations lie), the range limits (-88, 87)
 * and their neighbours, lengths 0..40 at odd offsets (the scalar tail), y aliasing g; then the
 * backend op at `level` and "scalar", 1 and 2 threads. A copy that rounds every lane's double
 * result (no libm fallback near a midpoint) fails the sweeps (21, 25 and 159 elements; over all
 * 2^32 g it differs on 65051, the kernel on none: checked once with glibc 2.36,
 * docs/performance.md, eleventh round). */
#if defined(__x86_64__)
static void swiglu_bits(const char *level, sd_cpu_glu_fn fn) {
    sd_backend *probe = cpu_backend(1);
    const int ok = sd_backend_cpu_set_kernels(probe, level) == 0;
    sd_backend_free(probe);
    if (!ok) {
        cr_skip_test("%s: not supported by this CPU", level);
        return;
    }
    enum { N = 1 << 20 };
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *y = malloc(N * sizeof(float));
    cr_assert(g && u && y);
    uint64_t rng = 99;
    int64_t bad = 0, n_tested = 0;
    for (int sweep = 0; sweep < 3; sweep++) {
        for (int64_t i = 0; i < N; i++) {
            uint32_t b;
            if (sweep == 0) /* all float patterns, strided */
                b = (uint32_t)((uint64_t)i * 4099u + 17u);
            else if (sweep == 1) { /* (-16, 16): patterns below 16 = 0x41800000, both signs */
                b = (uint32_t)((uint64_t)(i >> 1) * 2099u + (uint64_t)(i & 6));
                if (i & 1) b |= 0x80000000u;
            } else { /* around the range limits and 0 */
                static const float at[] = {-88.0f, 87.0f, 0.0f, -87.0f, 88.0f, -103.0f, 89.0f};
                float a = at[i % 7];
                memcpy(&b, &a, 4);
                b += (uint32_t)((i / 7) % 4001) - 2000u;
            }
            memcpy(&g[i], &b, 4);
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            u[i] = (float)((rng >> 40) & 0xffff) / 16384.0f - 2.0f;
        }
        fn(g, u, y, N);
        for (int64_t i = 0; i < N; i++) {
            const float r = swiglu_ref(g[i], u[i]);
            if (memcmp(&r, &y[i], 4) != 0 && bad++ < 5)
                cr_log_error("%s sweep %d: g %a: %a, scalar %a", level, sweep, (double)g[i],
                             (double)y[i], (double)r);
        }
        n_tested += N;
    }
    cr_expect_eq(bad, 0, "%lld of %lld elements differ from the scalar SwiGLU", (long long)bad,
                 (long long)n_tested);
    /* lengths and offsets (the 16-wide loop and the tail), y == g */
    for (int64_t len = 0; len <= 40; len++)
        for (int64_t off = 0; off < 3; off++) {
            float yr[48], ga[48];
            for (int64_t i = 0; i < len; i++) {
                yr[i] = swiglu_ref(g[off + 1000 * i + 3], u[off + i]);
                ga[i] = g[off + 1000 * i + 3];
            }
            fn(ga, u + off, ga, len);
            cr_expect(memcmp(ga, yr, (size_t)len * sizeof(float)) == 0, "len %lld off %lld",
                      (long long)len, (long long)off);
        }
    /* through the op: every level gives the scalar bits, split over threads or not */
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    const int64_t n = 8960 * 3 + 5;
    for (int64_t i = 0; i < n; i++)
        g[i] = (float)((int64_t)(i * 2654435761u % 20001u) - 10000) / 500.0f;
    for (int lv = 0; lv < 2; lv++)
        for (int32_t nt = 1; nt <= 2; nt++) {
            sd_backend *be = cpu_backend(nt);
            cr_assert_eq(sd_backend_cpu_set_kernels(be, lv ? "scalar" : level), 0);
            be->ops->swiglu(be, g, u, n, y);
            for (int64_t i = 0; i < n; i++) {
                const float r = swiglu_ref(g[i], u[i]);
                cr_assert(memcmp(&r, &y[i], 4) == 0, "level %d threads %d [%lld]", lv, nt,
                          (long long)i);
            }
            sd_backend_free(be);
        }
    free(g);
    free(u);
    free(y);
}
#endif

Test(backend, cpu_swiglu_avx512_bits) {
#if defined(__x86_64__)
    swiglu_bits("avx512", sd_cpu_swiglu_avx512);
#else
    cr_skip_test("not x86-64");
#endif
}

/* The AVX2 kernel: the same checks (its 2^k built in the exponent field, 8-wide loop). */
Test(backend, cpu_swiglu_avx2_bits) {
#if defined(__x86_64__)
    swiglu_bits("avx2", sd_cpu_swiglu_avx2);
#else
    cr_skip_test("not x86-64");
#endif
}

/* The F16C row conversion of the KV store (attn.h) against the scalar sd_fp32_to_fp16, bit for
 * bit: float patterns strided over all 2^32 (NaNs with payloads, infinities, subnormals, both
 * signs), every pattern around the fp16 limits (overflow to inf at 65520, the smallest subnormal,
 * the normal/subnormal boundary, ties), lengths 0..20 (the 8-wide loop and the tail). */
Test(backend, cpu_store_f16_bits) {
#if defined(__x86_64__)
    if (!sd_cpu_att_by_name("avx2")) cr_skip_test("avx2+f16c: not supported by this CPU");
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    cr_assert(x && h);
    static const uint32_t at[] = {0x477fe000u, 0x477ff000u, 0x33000000u, 0x33800000u, 0x38800000u,
                                  0x387fc000u, 0x7f800000u, 0x7fc00000u, 0x3f801000u, 0x3f803000u};
    int64_t bad = 0;
    for (int sweep = 0; sweep < 2; sweep++) {
        for (int64_t i = 0; i < N; i++) {
            uint32_t b = sweep == 0 ? (uint32_t)((uint64_t)i * 4099u + 5u)
                                    : at[i % 10] + (uint32_t)((i / 10) % 50001) - 25000u;
            if (sweep == 1 && (i & 1)) b |= 0x80000000u;
            memcpy(&x[i], &b, 4);
        }
        sd_att_store_f16_f16c(x, h, N);
        for (int64_t i = 0; i < N; i++)
            if (h[i] != sd_fp32_to_fp16(x[i]) && bad++ < 5)
                cr_log_error("sweep %d: %a: 0x%04x, scalar 0x%04x", sweep, (double)x[i],
                             (unsigned)h[i], (unsigned)sd_fp32_to_fp16(x[i]));
    }
    cr_expect_eq(bad, 0, "%lld conversions differ from sd_fp32_to_fp16", (long long)bad);
    for (int64_t len = 0; len <= 20; len++) {
        uint16_t out[24];
        memset(out, 0xAB, sizeof out);
        sd_att_store_f16_f16c(x + 3, out, len);
        for (int64_t i = 0; i < len; i++)
            cr_expect_eq(out[i], sd_fp32_to_fp16(x[3 + i]), "len %lld [%lld]", (long long)len,
                         (long long)i);
        cr_expect_eq(out[len], 0xABABu, "len %lld: wrote past the row", (long long)len);
    }
    free(x);
    free(h);
#else
    cr_skip_test("not x86-64");
#endif
}

Test(backend, unknown_device_is_an_error) {
    sd_backend_params bp = {1, 4, 32, 8, 0, NULL, 0};
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_expect_eq(sd_backend_init((sd_device)77, &bp, &be, &err), SD_ERR_ARG);
    cr_expect_null(be);
    cr_expect(strstr(err.msg, "device") != NULL, "%s", err.msg);
}
