/*
 * tests/test_backend_cuda.c (CTest label "gpu"): every op of the CUDA backend against the
 * CPU backend on random inputs, the determinism contract on the GPU (a batch of n <= 17
 * tokens == n single-token calls, bit for bit), error reporting, and whole models: a GPU
 * session's batched logits equal its single-token logits bit for bit, GPU logits are close
 * to the CPU's with the same top-1, and greedy speculative output equals target-alone
 * output on the GPU. Paged KV caches (kv/: blocks anywhere in the pool, reached through
 * the sequence's block table) give the bits of a contiguous cache, op by op and for whole
 * multi-sequence passes, and the batcher on the device (serve, generate) gives greedy
 * speculative text equal to target alone. Each test that needs a GPU skips with one line
 * where no CUDA device can be used (a build without CUDA, no GPU, no driver): that is what
 * happens in CI.
 *
 * Every weight type the GPU runs: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
 * K-quants Q2_K .. Q6_K. Also: rows of one block (or one super-block) give the CPU's bits
 * (the same activation quantization and per-block terms, one term), NaN activations reach
 * the output, a conversion cached for Q / K / V is never reused after its input changed, the
 * fused launches (rope of Q and K, add + rmsnorm) give the bits of the ops one by one, and
 * decode steps replayed as CUDA graphs give the bits of the same steps run op by op
 * (SD_CUDA_GRAPHS=0) at every position, across rollbacks.
 *
 * Bounds (u = 2^-24): bit-identical where the GPU does the CPU's arithmetic (get_rows, the
 * F16 KV store, copies); matmul on the batch-invariant kernels within 2 (m + 32) u sum|w x|
 * (two summation orders of m terms); on cuBLAS (n_tok >= 18) within 4e-3 sum|w x| (F16
 * operands, TF32 for F32 weights; 1e-2 for BF16, whose activations round to 8 bits)
 * plus, for quantized weights, the CPU's own activation quantization error
 * sum |w_j| d_x / 2 (d_x per 32-element block, or per 256 for the K-quants' Q8_K);
 * elementwise ops within a few ulp of the value's
 * scale (device libm vs glibc; rope 1e-4: theta up to ~100 rad); attention within 1e-4
 * of the output scale; whole-model logits within 1e-3 (float weights) or 2e-2 (quantized,
 * where an activation rounding can flip) of the largest logit.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "kv/sd_kv.h"
#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "engine_util.h"

#define U 0x1p-24

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_f(uint64_t *s) {
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

/* The two backends of a test, with the same parameters. */
typedef struct duo {
    sd_backend *cpu, *gpu;
} duo;

/* Open both, or skip the test with one line where no GPU can be used. Where a GPU is
 * present (sd_backend_device_count says so), a backend that does not open is a failure,
 * never a skip: a missing module or kernels for this GPU must not pass silently. */
static void duo_open(duo *d, int32_t n_batch, int64_t max_cols, int32_t n_ctx) {
    sd_backend_params p = {0};
    p.n_threads = 2;
    p.n_batch = n_batch;
    p.max_cols = max_cols;
    p.n_ctx = n_ctx;
    sd_error err = {0};
    memset(d, 0, sizeof *d);
    int rc = sd_backend_init(SD_DEVICE_CUDA, &p, &d->gpu, &err);
    if (rc == SD_ERR_UNSUPPORTED) {
        int32_t n = 0;
        sd_error e2 = {0};
        if (sd_backend_device_count(SD_DEVICE_CUDA, &n, &e2) != SD_OK || n == 0)
            cr_skip_test("no CUDA device to test: %s", err.msg);
        cr_assert_fail("%d CUDA device(s) present, but the backend does not open: %s", n, err.msg);
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(sd_backend_init(SD_DEVICE_CPU, &p, &d->cpu, &err), 0, "%s", err.msg);
}

static void duo_close(duo *d) {
    sd_backend_free(d->gpu);
    sd_backend_free(d->cpu);
}

/* A buffer on backend be holding host[0 .. bytes) (or zeros when host is NULL). */
static sd_buffer *put(sd_backend *be, const void *host, size_t bytes) {
    sd_buffer *b = NULL;
    sd_error err = {0};
    cr_assert_eq(be->ops->buffer_alloc(be, bytes, SD_BUFFER_COMPUTE, &b, &err), 0, "%s", err.msg);
    if (host) cr_assert_eq(be->ops->write(be, b->addr, host, bytes, &err), 0, "%s", err.msg);
    return b;
}

static void get(sd_backend *be, void *host, const void *src, size_t bytes) {
    sd_error err = {0};
    cr_assert_eq(be->ops->read(be, host, src, bytes, &err), 0, "%s", err.msg);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A random weight matrix [rows, cols] of type t (host bytes, malloc'd) and its floats. */
static uint8_t *random_weight(sd_type t, int64_t rows, int64_t cols, uint64_t *s, float **wf,
                              size_t *row_bytes) {
    cr_assert_eq(sd_type_row_bytes(t, cols, row_bytes), 0);
    float *f = malloc((size_t)(rows * cols) * sizeof(float));
    uint8_t *w = malloc(*row_bytes * (size_t)rows);
    cr_assert(f && w);
    for (int64_t i = 0; i < rows * cols; i++)
        f[i] = rng_f(s) * 0.2f;
    for (int64_t r = 0; r < rows; r++)
        sd_quantize_row(t, f + r * cols, w + (size_t)r * *row_bytes, cols);
    for (int64_t r = 0; r < rows; r++) /* the values the weight really holds */
        sd_dequantize_row(t, w + (size_t)r * *row_bytes, f + r * cols, cols);
    *wf = f;
    return w;
}

static const sd_type k_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1,
                                  SD_TYPE_Q2_K, SD_TYPE_Q3_K, SD_TYPE_Q4_K, SD_TYPE_Q5_K,
                                  SD_TYPE_Q6_K};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static int is_quant(sd_type t) {
    return t != SD_TYPE_F32 && t != SD_TYPE_F16 && t != SD_TYPE_BF16;
}

/* ---- get_rows ---- */

Test(cuda_ops, get_rows_bit_identical) {
    duo d;
    duo_open(&d, 8, 256, 16);
    uint64_t s = 1;
    const int64_t rows = 50, cols = 256;
    const int32_t ids[8] = {0, 49, 7, 7, 13, 2, 31, 48};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        float *wf;
        size_t rb;
        uint8_t *w = random_weight(t, rows, cols, &s, &wf, &rb);
        sd_buffer *wc = put(d.cpu, w, rb * rows), *wg = put(d.gpu, w, rb * rows);
        sd_buffer *yc = put(d.cpu, NULL, 8 * cols * 4), *yg = put(d.gpu, NULL, 8 * cols * 4);
        sd_weight W = {.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wc->addr};
        d.cpu->ops->get_rows(d.cpu, &W, ids, 8, yc->addr);
        W.data = wg->addr;
        d.gpu->ops->get_rows(d.gpu, &W, ids, 8, yg->addr);
        float got[8 * 256];
        get(d.gpu, got, yg->addr, sizeof got);
        const float *ref = yc->addr;
        for (int i = 0; i < 8 * 256; i++)
            cr_assert_eq(fbits(got[i]), fbits(ref[i]), "%s element %d: %g vs %g", sd_type_name(t),
                         i, (double)got[i], (double)ref[i]);
        sd_buffer_free(wc), sd_buffer_free(wg), sd_buffer_free(yc), sd_buffer_free(yg);
        free(w), free(wf);
    }
    duo_close(&d);
}

/* ---- matmul ---- */

/* sum_j |w[r, j] x[b, j]| and, for quantized weights, the CPU's activation rounding
 * sum_j |w[r, j]| d_x(b, block of j) / 2. */
static void abs_scale(sd_type t, const float *wf, const float *x, int64_t r, int64_t b,
                      int64_t cols, double *sum_wx, double *act_err) {
    *sum_wx = 0.0;
    *act_err = 0.0;
    for (int64_t j = 0; j < cols; j++)
        *sum_wx += fabs((double)wf[r * cols + j] * (double)x[b * cols + j]);
    if (!is_quant(t)) return;
    const int64_t ab = sd_vec_dot_type(t) == SD_TYPE_Q8_K ? 256 : 32; /* activation block */
    for (int64_t j0 = 0; j0 < cols; j0 += ab) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t j = j0; j < j0 + ab; j++) {
            amax = fmax(amax, fabs((double)x[b * cols + j]));
            wsum += fabs((double)wf[r * cols + j]);
        }
        *act_err += wsum * (amax / 127.0) * 0.5 * 1.01;
    }
}

static void check_matmul(duo *d, sd_type t, int64_t rows, int64_t cols, int32_t n_tok,
                         uint64_t *s) {
    float *wf;
    size_t rb;
    uint8_t *w = random_weight(t, rows, cols, s, &wf, &rb);
    float *x = malloc((size_t)(n_tok * cols) * 4), *got = malloc((size_t)(n_tok * rows) * 4);
    cr_assert(x && got);
    for (int64_t i = 0; i < n_tok * cols; i++)
        x[i] = rng_f(s) * (i % 37 == 0 ? 8.0f : 1.0f);
    sd_buffer *wc = put(d->cpu, w, rb * rows), *wg = put(d->gpu, w, rb * rows);
    sd_buffer *xc = put(d->cpu, x, n_tok * cols * 4), *xg = put(d->gpu, x, n_tok * cols * 4);
    sd_buffer *yc = put(d->cpu, NULL, n_tok * rows * 4), *yg = put(d->gpu, NULL, n_tok * rows * 4);
    sd_weight W = {.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wc->addr};
    d->cpu->ops->matmul(d->cpu, &W, xc->addr, n_tok, yc->addr);
    W.data = wg->addr;
    d->gpu->ops->matmul(d->gpu, &W, xg->addr, n_tok, yg->addr);
    get(d->gpu, got, yg->addr, (size_t)(n_tok * rows) * 4);
    const float *ref = yc->addr;
    const int gemm = n_tok >= 18;
    for (int32_t b = 0; b < n_tok; b++)
        for (int64_t r = 0; r < rows; r++) {
            double swx, aerr;
            abs_scale(t, wf, x, r, b, cols, &swx, &aerr);
            /* cuBLAS: x rounded to F16 (u = 2^-11) or BF16 (2^-8), TF32 for F32 weights */
            const double g_rel = t == SD_TYPE_BF16 ? 1e-2 : 4e-3;
            const double tol = gemm ? g_rel * swx + aerr : 2.0 * (double)(cols + 32) * U * swx;
            const double diff = fabs((double)got[b * rows + r] - (double)ref[b * rows + r]);
            cr_assert(diff <= tol + 1e-30,
                      "%s [%lld x %lld] n_tok %d: y[%d, %lld] %.9g vs CPU %.9g", sd_type_name(t),
                      (long long)rows, (long long)cols, n_tok, b, (long long)r,
                      (double)got[b * rows + r], (double)ref[b * rows + r]);
        }
    if (!gemm) {
        /* Batch invariance: the same rows one token at a time, bit for bit. */
        float *one = malloc((size_t)rows * 4);
        cr_assert(one);
        for (int32_t b = 0; b < n_tok; b++) {
            d->gpu->ops->matmul(d->gpu, &W, (const float *)xg->addr + b * cols, 1, yg->addr);
            get(d->gpu, one, yg->addr, (size_t)rows * 4);
            for (int64_t r = 0; r < rows; r++)
                cr_assert_eq(fbits(one[r]), fbits(got[b * rows + r]),
                             "%s n_tok %d: token %d row %lld alone differs from the batch",
                             sd_type_name(t), n_tok, b, (long long)r);
        }
        free(one);
    }
    sd_buffer_free(wc), sd_buffer_free(wg), sd_buffer_free(xc), sd_buffer_free(xg);
    sd_buffer_free(yc), sd_buffer_free(yg);
    free(w), free(wf), free(x), free(got);
}

Test(cuda_ops, matmul_all_types_vs_cpu_and_batch_invariant) {
    duo d;
    duo_open(&d, 40, 1024, 16);
    uint64_t s = 2;
    const int32_t toks[] = {1, 2, 3, 5, 8, 9, 17, 18, 40};
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t ni = 0; ni < sizeof toks / sizeof toks[0]; ni++) {
            check_matmul(&d, k_types[ti], 67, 256, toks[ni], &s);
            check_matmul(&d, k_types[ti], 40, 1024, toks[ni], &s);
        }
    duo_close(&d);
}

/* Rows of one block (two for the 32-element types; one super-block for the K-quants): the
 * GPU adds the same terms in the same order as the CPU reference, so every output has the
 * CPU's bits (this also proves the activation quantizers bit-identical on the device). With
 * a NaN in an activation row, that row's outputs are NaN on both. */
Test(cuda_ops, short_rows_bit_identical_to_cpu_and_nan_propagates) {
    duo d;
    duo_open(&d, 17, 256, 16);
    uint64_t s = 12;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const sd_type t = k_types[ti];
        if (!is_quant(t)) continue;
        const int64_t rows = 45, cols = sd_type_block_elems(t) == 256 ? 256 : 64;
        const int32_t n_tok = 17;
        float *wf;
        size_t rb;
        uint8_t *w = random_weight(t, rows, cols, &s, &wf, &rb);
        float x[17 * 256], got[17 * 45];
        for (int64_t i = 0; i < n_tok * cols; i++)
            x[i] = rng_f(&s) * (i % 29 == 0 ? 6.0f : 1.0f);
        x[3 * cols + 7] = NAN; /* token 3 */
        sd_buffer *wc = put(d.cpu, w, rb * rows), *wg = put(d.gpu, w, rb * rows);
        sd_buffer *xc = put(d.cpu, x, sizeof x), *xg = put(d.gpu, x, sizeof x);
        sd_buffer *yc = put(d.cpu, NULL, sizeof got), *yg = put(d.gpu, NULL, sizeof got);
        sd_weight W = {.type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wc->addr};
        d.cpu->ops->matmul(d.cpu, &W, xc->addr, n_tok, yc->addr);
        W.data = wg->addr;
        d.gpu->ops->matmul(d.gpu, &W, xg->addr, n_tok, yg->addr);
        get(d.gpu, got, yg->addr, (size_t)n_tok * rows * 4);
        const float *ref = yc->addr;
        for (int64_t i = 0; i < n_tok * rows; i++) {
            if (i / rows == 3) {
                cr_assert(isnan(got[i]) && isnan(ref[i]), "%s: NaN row: %g (CPU %g)",
                          sd_type_name(t), (double)got[i], (double)ref[i]);
                continue;
            }
            cr_assert_eq(fbits(got[i]), fbits(ref[i]), "%s: y[%lld] %a vs CPU %a", sd_type_name(t),
                         (long long)i, (double)got[i], (double)ref[i]);
        }
        sd_buffer_free(wc), sd_buffer_free(wg), sd_buffer_free(xc), sd_buffer_free(xg);
        sd_buffer_free(yc), sd_buffer_free(yg);
        free(w), free(wf);
    }
    duo_close(&d);
}

/* The Q / K / V pattern reuses one quantization of a shared input; it must never outlive a
 * change of that input: by an op (copy), by a write, or by a buffer freed and its address
 * reused. Each result is compared with the same product of an input no matmul saw before. */
static void product(sd_backend *g, const sd_weight *W, const float *host, float *y) {
    sd_buffer *bx = put(g, host, 4 * 512 * 4), *by = put(g, NULL, 4 * 40 * 4);
    g->ops->matmul(g, W, bx->addr, 4, by->addr);
    get(g, y, by->addr, 4 * 40 * 4);
    sd_buffer_free(bx), sd_buffer_free(by);
}

Test(cuda_ops, cached_activations_follow_their_input) {
    duo d;
    duo_open(&d, 4, 512, 16);
    uint64_t s = 14;
    const sd_type types[] = {SD_TYPE_Q8_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K, SD_TYPE_F16};
    sd_backend *g = d.gpu;
    sd_error err = {0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const sd_type t = types[ti];
        const int64_t rows = 40, cols = 512;
        float *wf;
        size_t rb;
        uint8_t *w = random_weight(t, rows, cols, &s, &wf, &rb);
        float x1[4 * 512], x2[4 * 512], r1[4 * 40], r2[4 * 40], y[4 * 40];
        for (int i = 0; i < 4 * 512; i++) {
            x1[i] = rng_f(&s);
            x2[i] = rng_f(&s) * 3.0f;
        }
        sd_buffer *wg = put(g, w, rb * rows);
        const sd_weight W = {
            .type = t, .rows = rows, .cols = cols, .row_bytes = rb, .data = wg->addr};
        product(g, &W, x1, r1);
        product(g, &W, x2, r2);
        cr_assert(memcmp(r1, r2, sizeof r1) != 0, "%s: the two inputs give one product",
                  sd_type_name(t));
        sd_buffer *xb = put(g, x1, sizeof x1), *x2b = put(g, x2, sizeof x2);
        sd_buffer *yb = put(g, NULL, sizeof y);
        /* x1 twice (the second reads the cached conversion), then an op makes it x2 */
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        get(g, y, yb->addr, sizeof y);
        cr_assert_eq(memcmp(y, r1, sizeof y), 0, "%s: cached conversion", sd_type_name(t));
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        g->ops->copy(g, xb->addr, x2b->addr, 4 * 512);
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        get(g, y, yb->addr, sizeof y);
        cr_assert_eq(memcmp(y, r2, sizeof y), 0, "%s: stale conversion after copy",
                     sd_type_name(t));
        /* a write makes it x1 again */
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        cr_assert_eq(g->ops->write(g, xb->addr, x1, sizeof x1, &err), 0, "%s", err.msg);
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        get(g, y, yb->addr, sizeof y);
        cr_assert_eq(memcmp(y, r1, sizeof y), 0, "%s: stale conversion after a write",
                     sd_type_name(t));
        /* freed, and a new buffer (often at the same address) holding x2 */
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        sd_buffer_free(xb);
        xb = put(g, x2, sizeof x2);
        g->ops->matmul(g, &W, xb->addr, 4, yb->addr);
        get(g, y, yb->addr, sizeof y);
        cr_assert_eq(memcmp(y, r2, sizeof y), 0, "%s: stale conversion after a free",
                     sd_type_name(t));
        sd_buffer_free(wg), sd_buffer_free(xb), sd_buffer_free(x2b), sd_buffer_free(yb);
        free(w), free(wf);
    }
    duo_close(&d);
}

/* Fused launches: rope of Q then of K (one kernel), add then rmsnorm of the sum (one
 * kernel) give the bits of the same ops separated by a sync (which ends the fusing window). */
Test(cuda_ops, fused_launches_equal_separate_ops) {
    enum { T = 5, NE = 256, NK = 128 };
    duo d;
    duo_open(&d, T, NE, 64);
    sd_backend *g = d.gpu;
    uint64_t s = 15;
    float x[T * NE], p[T * NE], w[NE], k[T * NK];
    for (int i = 0; i < T * NE; i++) {
        x[i] = rng_f(&s) * 2.0f;
        p[i] = rng_f(&s);
    }
    for (int i = 0; i < NE; i++)
        w[i] = 1.0f + 0.1f * rng_f(&s);
    for (int i = 0; i < T * NK; i++)
        k[i] = rng_f(&s);
    float fused[2][T * NE], sep[2][T * NE], fk[T * NK], sk[T * NK];
    sd_error err = {0};
    for (int mode = 0; mode < 2; mode++) { /* 0: fused, 1: a sync between */
        sd_buffer *bx = put(g, x, sizeof x), *bp = put(g, p, sizeof p), *bw = put(g, w, sizeof w);
        sd_buffer *by = put(g, NULL, sizeof x), *bk = put(g, k, sizeof k);
        const sd_rope r = {64, SD_ROPE_NORM, 10000.0f, 1.0f, NULL};
        g->ops->rope(g, bx->addr, T, 37, NE / 64, 64, &r);
        if (mode) cr_assert_eq(g->ops->sync(g, &err), 0, "%s", err.msg);
        g->ops->rope(g, bk->addr, T, 37, NK / 64, 64, &r);
        g->ops->add(g, bx->addr, bp->addr, T * NE);
        if (mode) cr_assert_eq(g->ops->sync(g, &err), 0, "%s", err.msg);
        g->ops->rmsnorm(g, bx->addr, bw->addr, T, NE, 1e-5f, by->addr);
        get(g, mode ? sep[0] : fused[0], bx->addr, sizeof x);
        get(g, mode ? sep[1] : fused[1], by->addr, sizeof x);
        get(g, mode ? sk : fk, bk->addr, sizeof k);
        sd_buffer_free(bx), sd_buffer_free(bp), sd_buffer_free(bw), sd_buffer_free(by);
        sd_buffer_free(bk);
    }
    cr_assert_eq(memcmp(fused[0], sep[0], sizeof fused[0]), 0, "add + rmsnorm: the sum differs");
    cr_assert_eq(memcmp(fused[1], sep[1], sizeof fused[1]), 0, "add + rmsnorm: the norm differs");
    cr_assert_eq(memcmp(fk, sk, sizeof fk), 0, "rope of q and k in one launch differs");
    duo_close(&d);
}

/* ---- elementwise and row ops ---- */

static void check_close(const float *got, const float *ref, int64_t n, double rel, const char *op) {
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs((double)got[i] - (double)ref[i]) <= rel * scale + 1e-30,
                  "%s element %lld: %.9g vs CPU %.9g", op, (long long)i, (double)got[i],
                  (double)ref[i]);
}

Test(cuda_ops, rows_and_elementwise_vs_cpu) {
    enum { T = 9, N = 384 };
    duo d;
    duo_open(&d, T, N, 64);
    uint64_t s = 3;
    float x[T * N], u[T * N], w[N], got[T * N];
    for (int i = 0; i < T * N; i++) {
        x[i] = rng_f(&s) * 4.0f;
        u[i] = rng_f(&s);
    }
    for (int i = 0; i < N; i++)
        w[i] = 1.0f + 0.1f * rng_f(&s);
    sd_backend *be[2] = {d.cpu, d.gpu};
    sd_buffer *bx[2], *bu[2], *bw[2], *by[2];
    for (int k = 0; k < 2; k++) {
        bx[k] = put(be[k], x, sizeof x);
        bu[k] = put(be[k], u, sizeof u);
        bw[k] = put(be[k], w, sizeof w);
        by[k] = put(be[k], NULL, sizeof x);
    }
    /* rmsnorm (out of place, then in place) */
    for (int k = 0; k < 2; k++)
        be[k]->ops->rmsnorm(be[k], bx[k]->addr, bw[k]->addr, T, N, 1e-5f, by[k]->addr);
    get(d.gpu, got, by[1]->addr, sizeof got);
    check_close(got, by[0]->addr, T * N, (N + 8) * U, "rmsnorm"); /* two orders of N squares */
    /* rope on a copy (heads of 64, n_rot 64, position 100), both pair layouts */
    for (int mode = 0; mode < 2; mode++) {
        for (int k = 0; k < 2; k++) {
            const sd_rope r = {64, mode ? SD_ROPE_NEOX : SD_ROPE_NORM, 10000.0f, 1.0f, NULL};
            be[k]->ops->copy(be[k], by[k]->addr, bx[k]->addr, T * N);
            be[k]->ops->rope(be[k], by[k]->addr, T, 100, N / 64, 64, &r);
        }
        get(d.gpu, got, by[1]->addr, sizeof got);
        /* device powf / cosf / sinf within 2 ulp of glibc's, theta up to ~108 rad */
        check_close(got, by[0]->addr, T * N, 1e-4, mode ? "rope neox" : "rope");
    }
    /* softmax in place on a copy */
    for (int k = 0; k < 2; k++) {
        be[k]->ops->copy(be[k], by[k]->addr, bx[k]->addr, T * N);
        be[k]->ops->softmax(be[k], by[k]->addr, T, N);
    }
    get(d.gpu, got, by[1]->addr, sizeof got);
    check_close(got, by[0]->addr, T * N, (N + 8) * U, "softmax");
    /* swiglu, add, copy */
    for (int k = 0; k < 2; k++)
        be[k]->ops->swiglu(be[k], bx[k]->addr, bu[k]->addr, T * N, by[k]->addr);
    get(d.gpu, got, by[1]->addr, sizeof got);
    check_close(got, by[0]->addr, T * N, 8 * U, "swiglu");
    for (int k = 0; k < 2; k++)
        be[k]->ops->add(be[k], by[k]->addr, bu[k]->addr, T * N);
    get(d.gpu, got, by[1]->addr, sizeof got);
    check_close(got, by[0]->addr, T * N, 8 * U, "add");
    for (int k = 0; k < 2; k++)
        be[k]->ops->copy(be[k], by[k]->addr, bu[k]->addr, T * N);
    get(d.gpu, got, by[1]->addr, sizeof got);
    cr_assert_eq(memcmp(got, u, sizeof got), 0, "copy");
    for (int k = 0; k < 2; k++) {
        sd_buffer_free(bx[k]), sd_buffer_free(bu[k]), sd_buffer_free(bw[k]), sd_buffer_free(by[k]);
    }
    duo_close(&d);
}

/* ---- KV store and attention ---- */

typedef struct kvpair {
    sd_buffer *buf[2];
    sd_kv *kv[2];
} kvpair;

static void kv_open(kvpair *p, duo *d, int32_t n_layer, int32_t n_ctx, int32_t kv_dim, sd_type t) {
    sd_backend *be[2] = {d->cpu, d->gpu};
    sd_kv_params kp = {n_layer, n_ctx, kv_dim, t, NULL};
    size_t bytes;
    sd_error err = {0};
    cr_assert_eq(sd_kv_storage_bytes(&kp, &bytes, &err), 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(be[k]->ops->buffer_alloc(be[k], bytes, SD_BUFFER_KV, &p->buf[k], &err), 0,
                     "%s", err.msg);
        kp.storage = p->buf[k]->addr;
        cr_assert_eq(sd_kv_init(&kp, &p->kv[k], &err), 0, "%s", err.msg);
    }
}

static void kv_close(kvpair *p) {
    for (int k = 0; k < 2; k++) {
        sd_kv_free(p->kv[k]);
        sd_buffer_free(p->buf[k]);
    }
}

static void check_attention(sd_type kvt) {
    enum { NH = 8, NKV = 2, HD = 64, CTX = 300, L = 2 };
    const int32_t kv_dim = NKV * HD, qd = NH * HD;
    duo d;
    duo_open(&d, 17, qd, CTX);
    sd_backend *be[2] = {d.cpu, d.gpu};
    kvpair kp;
    kv_open(&kp, &d, L, CTX, kv_dim, kvt);
    uint64_t s = 4;
    /* Fill positions [0, 280) of layer 1 with random K/V, 17 rows per store. */
    float *k = malloc((size_t)CTX * kv_dim * 4), *v = malloc((size_t)CTX * kv_dim * 4);
    float *q = malloc((size_t)17 * qd * 4), *got = malloc((size_t)17 * qd * 4),
          *one = malloc((size_t)qd * 4);
    cr_assert(k && v && q && got && one);
    for (int i = 0; i < CTX * kv_dim; i++) {
        k[i] = rng_f(&s) * 2.0f;
        v[i] = rng_f(&s);
    }
    for (int i = 0; i < 17 * qd; i++)
        q[i] = rng_f(&s) * 2.0f;
    sd_buffer *bk[2], *bv[2], *bq[2], *bo[2];
    for (int j = 0; j < 2; j++) {
        bk[j] = put(be[j], k, (size_t)CTX * kv_dim * 4);
        bv[j] = put(be[j], v, (size_t)CTX * kv_dim * 4);
        bq[j] = put(be[j], q, (size_t)17 * qd * 4);
        bo[j] = put(be[j], NULL, (size_t)17 * qd * 4);
        for (int32_t p0 = 0; p0 < 280; p0 += 17) {
            const int32_t n = 280 - p0 < 17 ? 280 - p0 : 17;
            be[j]->ops->kv_store(be[j], kp.kv[j], 1, p0, n, kv_dim,
                                 (const float *)bk[j]->addr + (size_t)p0 * kv_dim,
                                 (const float *)bv[j]->addr + (size_t)p0 * kv_dim);
        }
    }
    /* The stored rows: bit-identical (F32 copies, F16 round to nearest even). */
    const size_t rb = sd_kv_row_bytes(kp.kv[0]);
    uint8_t *rows_g = malloc(rb * 280);
    cr_assert(rows_g);
    get(d.gpu, rows_g, sd_kv_v(kp.kv[1], 1, 0), rb * 280);
    cr_assert_eq(memcmp(rows_g, sd_kv_v(kp.kv[0], 1, 0), rb * 280), 0, "kv_store rows differ");
    free(rows_g);
    /* Attention of 17 queries at positions 263 .. 279 (keys span 3 chunks of 128). */
    const int32_t pos0 = 263;
    for (int j = 0; j < 2; j++)
        be[j]->ops->attention(be[j], bq[j]->addr, kp.kv[j], 1, pos0, 17, NH, NKV, HD, bo[j]->addr);
    get(d.gpu, got, bo[1]->addr, (size_t)17 * qd * 4);
    check_close(got, bo[0]->addr, 17 * qd, 1e-4,
                kvt == SD_TYPE_F16 ? "attention f16" : "attention f32");
    /* Each query alone: bit-identical to its row of the batch. */
    for (int32_t t = 0; t < 17; t++) {
        be[1]->ops->attention(be[1], (const float *)bq[1]->addr + (size_t)t * qd, kp.kv[1], 1,
                              pos0 + t, 1, NH, NKV, HD, bo[1]->addr);
        get(d.gpu, one, bo[1]->addr, (size_t)qd * 4);
        for (int32_t i = 0; i < qd; i++)
            cr_assert_eq(fbits(one[i]), fbits(got[(size_t)t * qd + i]),
                         "attention: query %d alone differs from the batch at %d", t, i);
    }
    for (int j = 0; j < 2; j++) {
        sd_buffer_free(bk[j]), sd_buffer_free(bv[j]), sd_buffer_free(bq[j]), sd_buffer_free(bo[j]);
    }
    kv_close(&kp);
    free(k), free(v), free(q), free(got), free(one);
    duo_close(&d);
}

Test(cuda_ops, kv_store_and_attention_f32) {
    check_attention(SD_TYPE_F32);
}

Test(cuda_ops, kv_store_and_attention_f16) {
    check_attention(SD_TYPE_F16);
}

/* ---- paged KV caches ---- */

/* A pool in device memory copies rows through the GPU backend's copy op (what a session
 * makes: runtime/model/forward.c). */
static void gpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    sd_backend *be = ctx;
    cr_assert_eq(bytes % sizeof(float), 0);
    be->ops->copy(be, dst, src, (int64_t)(bytes / sizeof(float)));
}

/* On each backend, a contiguous cache and a paged pool of blocks of 16 positions holding
 * sequences A and B whose blocks are scattered (taken in turn and out of order), and C,
 * forked from A inside a block (its first write copies the block on the device): stored
 * rows and attention outputs of a paged sequence are the contiguous cache's bits on the
 * GPU, every query alone the bits of its pass, and the GPU within the attention tolerance
 * of the CPU backend. */
static void check_paged(sd_type kvt) {
    enum { NH = 8, NKV = 2, HD = 64, CTX = 300, L = 2, BS = 16, NB = 64, N = 280 };
    const int32_t kv_dim = NKV * HD, qd = NH * HD;
    duo d;
    duo_open(&d, 17, qd, CTX);
    sd_backend *be[2] = {d.cpu, d.gpu};
    kvpair kc; /* contiguous */
    kv_open(&kc, &d, L, CTX, kv_dim, kvt);
    sd_kv_pool_params pp = {
        .n_layer = L, .kv_dim = kv_dim, .block_size = BS, .n_blocks = NB, .type = kvt};
    size_t bytes;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_storage_bytes(&pp, &bytes, &err), 0, "%s", err.msg);
    sd_buffer *pbuf[2];
    sd_kv_pool *pool[2];
    sd_kv *sa[2], *sb[2], *sc[2], *sx[2];
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(be[j]->ops->buffer_alloc(be[j], bytes, SD_BUFFER_KV, &pbuf[j], &err), 0, "%s",
                     err.msg);
        pp.storage = pbuf[j]->addr;
        pp.copy = j ? gpu_copy : NULL;
        pp.copy_ctx = j ? d.gpu : NULL;
        cr_assert_eq(sd_kv_pool_init(&pp, &pool[j], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_kv_seq_init(pool[j], CTX, &sa[j], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_kv_seq_init(pool[j], CTX, &sb[j], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_kv_seq_init(pool[j], CTX, &sc[j], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_kv_seq_init(pool[j], CTX, &sx[j], &err), 0, "%s", err.msg);
        /* scatter: x takes 5 blocks, A and B alternate, x gives its blocks back (they are
         * taken again last-freed first) */
        cr_assert_eq(sd_kv_reserve(sx[j], 5 * BS, &err), 0, "%s", err.msg);
    }
    uint64_t s = 11;
    float *k = malloc((size_t)CTX * kv_dim * 4), *v = malloc((size_t)CTX * kv_dim * 4);
    float *q = malloc((size_t)17 * qd * 4), *got = malloc((size_t)17 * qd * 4),
          *ref = malloc((size_t)17 * qd * 4), *one = malloc((size_t)qd * 4);
    cr_assert(k && v && q && got && ref && one);
    for (int i = 0; i < CTX * kv_dim; i++) {
        k[i] = rng_f(&s) * 2.0f;
        v[i] = rng_f(&s);
    }
    for (int i = 0; i < 17 * qd; i++)
        q[i] = rng_f(&s) * 2.0f;
    sd_buffer *bk[2], *bv[2], *bq[2], *bo[2];
    for (int j = 0; j < 2; j++) {
        bk[j] = put(be[j], k, (size_t)CTX * kv_dim * 4);
        bv[j] = put(be[j], v, (size_t)CTX * kv_dim * 4);
        bq[j] = put(be[j], q, (size_t)17 * qd * 4);
        bo[j] = put(be[j], NULL, (size_t)17 * qd * 4);
    }
    /* Rows [0, N) into the contiguous cache, A and B (B: the rows in reverse order), 17 and
     * then 9 at a time so that passes straddle block boundaries; x's blocks freed midway. */
    for (int j = 0; j < 2; j++) {
        for (int32_t p0 = 0, i = 0; p0 < N; i++) {
            const int32_t n = N - p0 < (i % 2 ? 9 : 17) ? N - p0 : (i % 2 ? 9 : 17);
            cr_assert_eq(sd_kv_reserve(sa[j], n, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_kv_reserve(sb[j], n, &err), 0, "%s", err.msg);
            const float *kk = (const float *)bk[j]->addr + (size_t)p0 * kv_dim;
            const float *vv = (const float *)bv[j]->addr + (size_t)p0 * kv_dim;
            for (int32_t l = 0; l < L; l++) {
                be[j]->ops->kv_store(be[j], kc.kv[j], l, p0, n, kv_dim, kk, vv);
                be[j]->ops->kv_store(be[j], sa[j], l, p0, n, kv_dim, kk, vv);
                be[j]->ops->kv_store(be[j], sb[j], l, p0, n, kv_dim, vv, kk); /* swapped */
            }
            sd_kv_commit(sa[j], n);
            sd_kv_commit(sb[j], n);
            p0 += n;
            if (i == 3) sd_kv_free(sx[j]), sx[j] = NULL;
        }
        cr_assert_eq(be[j]->ops->sync(be[j], &err), 0, "%s", err.msg);
    }
    /* The blocks are scattered: A's table is not 0, 1, 2, ... */
    const int32_t *ids = NULL;
    int32_t bs = 0, n_blk = sd_kv_block_table(sa[1], 1, &ids, &bs);
    cr_assert_eq(bs, BS);
    cr_assert_eq(n_blk, (N + BS - 1) / BS);
    int scattered = 0;
    for (int32_t i = 1; i < n_blk; i++)
        scattered |= ids[i] != ids[i - 1] + 1;
    cr_assert(scattered, "the test's blocks are adjacent");
    /* C shares A's first 250 positions, then diverges inside block 15: a copy of its rows
     * 240 .. 249 on the device, then rows of its own (the contiguous cache's, rewritten
     * there too, so it stays C's reference). */
    const int32_t fork_at = 250, nc = 17;
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(sd_kv_fork(sc[j], sa[j], fork_at, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_kv_reserve(sc[j], nc, &err), 0, "%s", err.msg);
    }
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool[1], &st);
    cr_assert_eq(st.n_cow, 1, "C's first write copies the shared block");
    const size_t rb = sd_kv_row_bytes(kc.kv[0]);
    uint8_t *r_paged = malloc(rb), *r_cont = malloc(rb);
    cr_assert(r_paged && r_cont);
    /* Stored rows: paged == contiguous on the GPU == the CPU's, bit for bit. */
    for (int32_t l = 0; l < L; l++)
        for (int32_t p = 0; p < N; p++) {
            get(d.gpu, r_cont, sd_kv_k(kc.kv[1], l, p), rb);
            get(d.gpu, r_paged, sd_kv_k(sa[1], l, p), rb);
            cr_assert_eq(memcmp(r_paged, r_cont, rb), 0, "layer %d: A's K row %d", l, p);
            cr_assert_eq(memcmp(sd_kv_k(sa[0], l, p), r_cont, rb), 0, "layer %d: CPU K row %d", l,
                         p);
            get(d.gpu, r_paged, sd_kv_v(sb[1], l, p), rb);
            cr_assert_eq(memcmp(r_paged, r_cont, rb), 0, "layer %d: B's V row %d (= K)", l, p);
            if (p < fork_at) {
                get(d.gpu, r_paged, sd_kv_v(sc[1], l, p), rb);
                get(d.gpu, r_cont, sd_kv_v(kc.kv[1], l, p), rb);
                cr_assert_eq(memcmp(r_paged, r_cont, rb), 0, "layer %d: C's V row %d", l, p);
            }
        }
    /* Attention of 17 queries at 263 .. 279 (A: keys over 3 chunks of 128 and 18 blocks),
     * then C's at 250 .. 266 (A's rows and its own), and each query alone. */
    const int32_t pos0[2] = {263, fork_at};
    sd_kv *seq[2][2] = {{sa[0], sa[1]}, {sc[0], sc[1]}};
    for (int t = 0; t < 2; t++) {
        const char *what = t == 0 ? "A" : "C (forked)";
        for (int j = 0; t == 1 && j < 2; j++) { /* C's own rows, in the reference too */
            const float *kk = (const float *)bk[j]->addr + (size_t)(fork_at + 20) * kv_dim;
            const float *vv = (const float *)bv[j]->addr + (size_t)(fork_at + 20) * kv_dim;
            for (int32_t l = 0; l < L; l++) {
                be[j]->ops->kv_store(be[j], sc[j], l, fork_at, nc, kv_dim, kk, vv);
                be[j]->ops->kv_store(be[j], kc.kv[j], l, fork_at, nc, kv_dim, kk, vv);
            }
            sd_kv_commit(sc[j], nc);
        }
        for (int j = 0; j < 2; j++)
            be[j]->ops->attention(be[j], bq[j]->addr, seq[t][j], 1, pos0[t], 17, NH, NKV, HD,
                                  bo[j]->addr);
        get(d.gpu, got, bo[1]->addr, (size_t)17 * qd * 4);
        check_close(got, bo[0]->addr, 17 * qd, 1e-4, what);
        d.gpu->ops->attention(d.gpu, bq[1]->addr, kc.kv[1], 1, pos0[t], 17, NH, NKV, HD,
                              bo[1]->addr);
        get(d.gpu, ref, bo[1]->addr, (size_t)17 * qd * 4);
        for (int32_t i = 0; i < 17 * qd; i++)
            cr_assert_eq(fbits(got[i]), fbits(ref[i]),
                         "%s %s: paged attention differs from contiguous at %d", what,
                         sd_type_name(kvt), i);
        for (int32_t tq = 0; tq < 17; tq += 4) {
            d.gpu->ops->attention(d.gpu, (const float *)bq[1]->addr + (size_t)tq * qd, seq[t][1], 1,
                                  pos0[t] + tq, 1, NH, NKV, HD, bo[1]->addr);
            get(d.gpu, one, bo[1]->addr, (size_t)qd * 4);
            cr_assert_eq(memcmp(one, got + (size_t)tq * qd, (size_t)qd * 4), 0,
                         "%s: query %d alone differs from its pass", what, tq);
        }
    }
    /* B holds V in K's place: its attention differs from A's (the table is per sequence). */
    d.gpu->ops->attention(d.gpu, bq[1]->addr, sb[1], 1, 263, 17, NH, NKV, HD, bo[1]->addr);
    d.cpu->ops->attention(d.cpu, bq[0]->addr, sb[0], 1, 263, 17, NH, NKV, HD, bo[0]->addr);
    get(d.gpu, got, bo[1]->addr, (size_t)17 * qd * 4);
    check_close(got, bo[0]->addr, 17 * qd, 1e-4, "B");
    cr_assert_eq(d.gpu->ops->sync(d.gpu, &err), 0, "%s", err.msg);
    free(r_paged), free(r_cont);
    for (int j = 0; j < 2; j++) {
        sd_buffer_free(bk[j]), sd_buffer_free(bv[j]), sd_buffer_free(bq[j]), sd_buffer_free(bo[j]);
        sd_kv_free(sa[j]), sd_kv_free(sb[j]), sd_kv_free(sc[j]), sd_kv_free(sx[j]);
        sd_kv_pool_free(pool[j]);
        sd_buffer_free(pbuf[j]);
    }
    kv_close(&kc);
    free(k), free(v), free(q), free(got), free(ref), free(one);
    duo_close(&d);
}

Test(cuda_ops, paged_kv_equals_contiguous_f32) {
    check_paged(SD_TYPE_F32);
}

Test(cuda_ops, paged_kv_equals_contiguous_f16) {
    check_paged(SD_TYPE_F16);
}

/* ---- errors ---- */

Test(cuda_ops, errors_are_recorded_and_returned_once) {
    duo d;
    duo_open(&d, 4, 64, 8);
    sd_error err = {0};
    sd_buffer *b = put(d.gpu, NULL, 64 * 64 * 4);
    sd_weight W = {.type = SD_TYPE_F32, .rows = 64, .cols = 64, .row_bytes = 256, .data = b->addr};
    d.gpu->ops->matmul(d.gpu, &W, b->addr, 5, b->addr); /* 5 > n_batch 4 */
    int rc = d.gpu->ops->sync(d.gpu, &err);
    cr_assert_eq(rc, SD_ERR_ARG, "sync after a bad matmul: %d (%s)", rc, err.msg);
    cr_assert(strstr(err.msg, "matmul") && strstr(err.msg, "n_batch"), "%s", err.msg);
    sd_error_clear(&err);
    cr_assert_eq(d.gpu->ops->sync(d.gpu, &err), 0, "the error is returned once: %s", err.msg);
    /* Out of device memory names the buffer. */
    sd_buffer *huge = NULL;
    rc = d.gpu->ops->buffer_alloc(d.gpu, (size_t)1 << 50, SD_BUFFER_KV, &huge, &err);
    cr_assert_eq(rc, SD_ERR_OOM, "1 PiB: %d (%s)", rc, err.msg);
    cr_assert(strstr(err.msg, "KV cache"), "%s", err.msg);
    cr_assert_null(huge);
    sd_buffer_free(b);
    duo_close(&d);
}

/* ---- whole models ---- */

static char g_dir[1024];
static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

static int cuda_usable(sd_error *err) {
    int32_t n = 0;
    return sd_backend_device_count(SD_DEVICE_CUDA, &n, err) == SD_OK && n > 0;
}

/* The default test model, or (K-quants) one whose rows are multiples of 256. */
static tu_llama_spec spec_for(sd_type wt) {
    tu_llama_spec spec = tu_llama_default_spec();
    spec.wtype = wt;
    if (sd_type_block_elems(wt) == 256) {
        spec.n_embd = 256;
        spec.n_ff = 512;
    }
    return spec;
}

static void model_checks(sd_type wt, sd_type kvt) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    char path[1100];
    tu_llama_spec spec = spec_for(wt);
    tu_path(path, sizeof path, g_dir, "m.gguf");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab, n = 17;
    sd_session_params sp = sd_session_default_params();
    sp.kv_type = kvt;
    sp.n_batch = 32;
    sd_session *cpu = NULL, *gpu = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &cpu, &err), 0, "%s", err.msg);
    sp.device = SD_DEVICE_CUDA;
    cr_assert_eq(sd_session_init(m, &sp, &gpu, &err), 0, "%s", err.msg);
    int32_t toks[17];
    for (int i = 0; i < n; i++)
        toks[i] = 3 + (i * 37) % (nv - 3);
    float *lc = malloc((size_t)n * nv * 4), *lg = malloc((size_t)n * nv * 4),
          *l1 = malloc((size_t)nv * 4);
    cr_assert(lc && lg && l1);
    cr_assert_eq(sd_session_eval(cpu, toks, n, lc, n, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_session_eval(gpu, toks, n, lg, n, &err), 0, "%s", err.msg);
    /* GPU vs CPU: close, same top-1 wherever the CPU's top-2 gap is clear. */
    for (int i = 0; i < n; i++) {
        const float *a = lg + (size_t)i * nv, *b = lc + (size_t)i * nv;
        int ia = 0, ib = 0;
        double scale = 0, diff = 0;
        for (int j = 0; j < nv; j++) {
            if (a[j] > a[ia]) ia = j;
            if (b[j] > b[ib]) ib = j;
            scale = fmax(scale, fabs(b[j]));
            diff = fmax(diff, fabs((double)a[j] - b[j]));
        }
        /* float weights: summation order and libm only; quantized: an activation whose
         * Q8_0 rounding flips moves a logit by about one quantization step */
        const double tol = is_quant(wt) ? 2e-2 : 1e-3;
        cr_assert(diff <= tol * scale + 1e-6,
                  "%s: token %d: max |GPU - CPU| logit %.3g (scale %.3g)", sd_type_name(wt), i,
                  diff, scale);
        float gap = INFINITY;
        for (int j = 0; j < nv; j++)
            if (j != ib) gap = fminf(gap, b[ib] - b[j]);
        if (gap > 2.0 * diff) cr_assert_eq(ia, ib, "token %d: GPU top-1 %d, CPU %d", i, ia, ib);
    }
    /* GPU batch == GPU single steps, bit for bit. */
    cr_assert_eq(sd_session_seq_truncate(gpu, 0, 0, &err), 0, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(sd_session_eval(gpu, toks + i, 1, l1, 1, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(l1, lg + (size_t)i * nv, (size_t)nv * 4), 0,
                     "%s kv %s: token %d decoded alone differs from the 17-token batch",
                     sd_type_name(wt), sd_type_name(kvt), i);
    }
    free(lc), free(lg), free(l1);
    sd_session_free(cpu);
    sd_session_free(gpu);
    sd_model_free(m);
}

TestSuite(cuda_model, .init = setup, .fini = teardown, .timeout = 600);

Test(cuda_model, f32_batch_invariant_and_close_to_cpu) {
    model_checks(SD_TYPE_F32, SD_TYPE_F32);
}
Test(cuda_model, q8_0_f16_kv) {
    model_checks(SD_TYPE_Q8_0, SD_TYPE_F16);
}
Test(cuda_model, q4_0) {
    model_checks(SD_TYPE_Q4_0, SD_TYPE_F32);
}
Test(cuda_model, f16_bf16) {
    model_checks(SD_TYPE_F16, SD_TYPE_F16);
    model_checks(SD_TYPE_BF16, SD_TYPE_F32);
}
Test(cuda_model, q4_1_q5_0_q5_1) {
    model_checks(SD_TYPE_Q4_1, SD_TYPE_F16);
    model_checks(SD_TYPE_Q5_0, SD_TYPE_F32);
    model_checks(SD_TYPE_Q5_1, SD_TYPE_F16);
}
Test(cuda_model, k_quants) {
    model_checks(SD_TYPE_Q4_K, SD_TYPE_F16);
    model_checks(SD_TYPE_Q5_K, SD_TYPE_F32);
    model_checks(SD_TYPE_Q6_K, SD_TYPE_F16);
    model_checks(SD_TYPE_Q3_K, SD_TYPE_F32);
    model_checks(SD_TYPE_Q2_K, SD_TYPE_F16);
}

/* A paged GPU session (3 sequences over blocks of 4 positions, taken in turn: scattered)
 * against a contiguous GPU session: each sequence's logits rows in a pass of all three
 * (15 tokens at most, on the batch-invariant kernels) are the bits of the same tokens
 * decoded in the contiguous session after the same history, through block boundaries, a
 * rollback, and a fork inside a block whose first write copies the block on the device. */
static void paged_session_checks(sd_type wt, sd_type kvt) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    enum { NS = 3, MAXH = 128 };
    char path[1100];
    tu_llama_spec spec = spec_for(wt);
    tu_path(path, sizeof path, g_dir, "paged.gguf");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.device = SD_DEVICE_CUDA;
    sp.kv_type = kvt;
    sp.n_batch = 17;
    sd_session *cont = NULL, *paged = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &cont, &err), 0, "%s", err.msg);
    sp.n_seq = NS;
    sp.kv_block = 4;
    cr_assert_eq(sd_session_init(m, &sp, &paged, &err), 0, "%s", err.msg);
    int32_t hist[NS][MAXH], n[NS] = {0}, toks[17], seq[17];
    int8_t want[17];
    float *lp = malloc((size_t)17 * nv * 4), *lc = malloc((size_t)5 * nv * 4);
    cr_assert(lp && lc);
    uint64_t s = 5;
    for (int r = 0; r < 12; r++) {
        if (r == 5) { /* roll sequence 1 back by 3 */
            cr_assert_eq(sd_session_seq_truncate(paged, 1, n[1] - 3, &err), 0, "%s", err.msg);
            n[1] -= 3;
        }
        if (r == 7) { /* sequence 2 restarts as a fork of 0 inside a block */
            int32_t f = n[0] - 1;
            if (f % 4 == 0) f--;
            cr_assert_eq(sd_session_seq_truncate(paged, 2, 0, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_session_seq_fork(paged, 2, 0, f, &err), 0, "%s", err.msg);
            memcpy(hist[2], hist[0], (size_t)f * sizeof(int32_t));
            n[2] = f;
        }
        int32_t nt = 0, m_i[NS];
        for (int i = 0; i < NS; i++) {
            m_i[i] = 1 + (r + 2 * i) % 5;
            for (int32_t j = 0; j < m_i[i]; j++, nt++) {
                toks[nt] = 3 + (int32_t)(rng_next(&s) % (uint64_t)(nv - 3));
                seq[nt] = i;
                want[nt] = 1;
                hist[i][n[i] + j] = toks[nt];
            }
        }
        sd_batch b = sd_batch_of(toks, nt);
        b.seq_id = seq;
        b.logits = want;
        cr_assert_eq(sd_session_decode(paged, &b, lp, &err), 0, "round %d: %s", r, err.msg);
        for (int i = 0, row = 0; i < NS; row += m_i[i], i++) {
            /* the reference: the history in passes of <= 17, then the new tokens */
            cr_assert_eq(sd_session_seq_truncate(cont, 0, 0, &err), 0, "%s", err.msg);
            for (int32_t p0 = 0; p0 < n[i]; p0 += 17) {
                const int32_t c = n[i] - p0 < 17 ? n[i] - p0 : 17;
                cr_assert_eq(sd_session_eval(cont, hist[i] + p0, c, NULL, 0, &err), 0, "%s",
                             err.msg);
            }
            cr_assert_eq(sd_session_eval(cont, hist[i] + n[i], m_i[i], lc, m_i[i], &err), 0, "%s",
                         err.msg);
            cr_assert_eq(memcmp(lc, lp + (size_t)row * nv, (size_t)m_i[i] * nv * 4), 0,
                         "%s kv %s round %d: sequence %d's rows (positions %d .. %d) differ from "
                         "the contiguous cache's",
                         sd_type_name(wt), sd_type_name(kvt), r, i, n[i], n[i] + m_i[i] - 1);
            n[i] += m_i[i];
        }
    }
    sd_kv_pool_stats st;
    sd_session_kv_stats(paged, &st);
    cr_assert_geq(st.n_cow, 1, "the fork's first write copies its block");
    cr_assert_eq(sd_session_kv_check(paged, &err), 0, "%s", err.msg);
    free(lp), free(lc);
    sd_session_free(paged);
    sd_session_free(cont);
    sd_model_free(m);
}

Test(cuda_model, paged_sessions_equal_contiguous_f32) {
    paged_session_checks(SD_TYPE_F32, SD_TYPE_F32);
}
Test(cuda_model, paged_sessions_equal_contiguous_q8_0_f16_kv) {
    paged_session_checks(SD_TYPE_Q8_0, SD_TYPE_F16);
}

/* More sequences in one pass (40) than the backend has block-table slots (32): slots are
 * taken in turn, every sequence's rows stay the bits of a contiguous cache's. Passes of 40
 * tokens, so cuBLAS is kept off (SD_CUDA_GEMM_MIN_TOK=0) for the batch-invariant kernels. */
Test(cuda_model, paged_more_sequences_than_table_slots) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    enum { NS = 40, ROUNDS = 6 };
    char path[1100];
    tu_llama_spec spec = spec_for(SD_TYPE_F32);
    tu_path(path, sizeof path, g_dir, "many.gguf");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.device = SD_DEVICE_CUDA;
    sp.n_batch = NS;
    sd_session *cont = NULL, *paged = NULL;
    setenv("SD_CUDA_GEMM_MIN_TOK", "0", 1);
    int rc = sd_session_init(m, &sp, &cont, &err);
    sp.n_seq = NS;
    sp.kv_block = 2;
    if (rc == SD_OK) rc = sd_session_init(m, &sp, &paged, &err);
    unsetenv("SD_CUDA_GEMM_MIN_TOK");
    cr_assert_eq(rc, 0, "%s", err.msg);
    int32_t hist[NS][ROUNDS], toks[NS], seq[NS];
    int8_t want[NS];
    float *lp = malloc((size_t)NS * nv * 4), *lc = malloc((size_t)nv * 4);
    cr_assert(lp && lc);
    uint64_t s = 9;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < NS; i++) {
            toks[i] = hist[i][r] = 3 + (int32_t)(rng_next(&s) % (uint64_t)(nv - 3));
            seq[i] = i;
            want[i] = 1;
        }
        sd_batch b = sd_batch_of(toks, NS);
        b.seq_id = seq;
        b.logits = want;
        cr_assert_eq(sd_session_decode(paged, &b, lp, &err), 0, "round %d: %s", r, err.msg);
        for (int i = 0; i < NS; i += 3) { /* every third sequence against the reference */
            cr_assert_eq(sd_session_seq_truncate(cont, 0, 0, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_session_eval(cont, hist[i], r + 1, lc, 1, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(lc, lp + (size_t)i * nv, (size_t)nv * 4), 0,
                         "round %d: sequence %d of %d differs from the contiguous cache's", r, i,
                         NS);
        }
    }
    free(lp), free(lc);
    sd_session_free(paged);
    sd_session_free(cont);
    sd_model_free(m);
}

/* The batcher on the device (serve's engine, and generate's one-slot batcher): greedy
 * speculative text (LLM draft on the GPU, K = 1, 2, 4, fixed) equals target alone through
 * sd_engine_generate, which takes the batcher;
 * three requests at once through one batcher (paged KV, passes of 15 tokens) give their
 * target-alone texts too. */
Test(cuda_model, batcher_greedy_speculative_equals_target_alone) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    char t[1100], dr[1100];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, dr, sizeof dr), 0);
    sd_engine_params ep = eu_engine_params(t, dr, 0, 2);
    ep.device = ep.device_draft = SD_DEVICE_CUDA;
    ep.kv_type = SD_TYPE_F16;
    sd_engine *e = eu_engine_open(&ep);
    enum { NP = 48 };
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NP;
    gp.samp.temp = 0.0f;
    gp.ignore_eos = 1;
    const int32_t prompts[3][5] = {{1, 5, 9, 12, 7}, {1, 30, 31, 40, 41}, {1, 60, 22, 77, 80}};
    int32_t ref[NP], got[NP];
    sd_gen_stats st;
    const int32_t n_ref =
        eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompts[0], 5, ref, &st);
    cr_assert_eq(n_ref, NP);
    int64_t drafted = 0;
    for (int32_t k = 1; k <= 4; k *= 2) {
        cr_assert_eq(eu_generate(e, &gp, SD_DRAFT_LLM, SD_K_FIXED, k, prompts[0], 5, got, &st), NP);
        for (int32_t i = 0; i < NP; i++)
            cr_assert_eq(got[i], ref[i], "K=%d: token %d is %d, target alone %d", k, i, got[i],
                         ref[i]);
        drafted += st.n_drafted;
    }
    cr_assert_gt(drafted, 0, "the draft drafted");
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 3;
    bp.kv_block = 8;
    bp.draft_chunk = 4;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int64_t dr_round[2], acc_round[2];
    eu_batcher_equals_generate(e, b, &gp, &prompts[0][0], 3, 5, SD_DRAFT_LLM, 4, 2, dr_round,
                               acc_round);
    cr_assert_gt(dr_round[0], 0);
    cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* Quantized KV rows are the CPU's: a batcher on a device refuses them in one line naming
 * the type and the cpu, before any device is opened (so also where there is none). */
Test(cuda_model, batcher_refuses_quantized_kv_on_a_device) {
    char t[1100], dr[1100];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, dr, sizeof dr), 0);
    sd_engine_params ep = eu_engine_params(t, dr, 0, 1);
    ep.device = ep.device_draft = SD_DEVICE_CUDA;
    ep.models_only = 1;
    for (int q = 0; q < 2; q++) {
        ep.kv_type = q ? SD_TYPE_Q4_0 : SD_TYPE_Q8_0;
        sd_engine *e = eu_engine_open(&ep);
        sd_batcher_params bp = sd_batcher_default_params();
        bp.n_parallel = 2;
        sd_batcher *b = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_ERR_UNSUPPORTED, "%s", err.msg);
        cr_assert_null(b);
        cr_assert(strstr(err.msg, q ? "q4_0" : "q8_0") && strstr(err.msg, "cpu") &&
                      !strchr(err.msg, '\n'),
                  "%s", err.msg);
        sd_engine_free(e);
    }
}

/* Decode steps replayed as CUDA graphs (the default) against the same steps run op by op
 * (SD_CUDA_GRAPHS=0): the same logits bits at every step, over 40 single-token steps at
 * rising positions, 5-token passes, and rollbacks (truncate) that move positions back; with
 * paged > 0, in a paged cache of one sequence over blocks of `paged` positions (its block
 * table read by the graph from a slot refreshed as blocks come and go). */
static void graphs_vs_eager(sd_type wt, int32_t paged) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    char path[1100];
    tu_llama_spec spec = spec_for(wt);
    tu_path(path, sizeof path, g_dir, "g.gguf");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.device = SD_DEVICE_CUDA;
    sp.kv_type = SD_TYPE_F16;
    sp.n_batch = 17;
    sp.n_seq = paged > 0 ? 1 : 0;
    sp.kv_block = paged;
    sd_session *gs = NULL, *es = NULL;
    unsetenv("SD_CUDA_GRAPHS");
    cr_assert_eq(sd_session_init(m, &sp, &gs, &err), 0, "%s", err.msg);
    setenv("SD_CUDA_GRAPHS", "0", 1);
    cr_assert_eq(sd_session_init(m, &sp, &es, &err), 0, "%s", err.msg);
    unsetenv("SD_CUDA_GRAPHS");
    float *lg = malloc((size_t)5 * nv * 4), *le = malloc((size_t)5 * nv * 4);
    cr_assert(lg && le);
    uint64_t s = 77;
    int32_t step = 0;
    for (int round = 0; round < 3; round++) {
        /* The test model's context is 128 positions: the three rounds reach 46, 73 and 94
         * (every seventh eval is 5 tokens; a third kept after each round). */
        for (int i = 0; i < 30 + 8 * round; i++, step++) {
            const int n = i % 7 == 6 ? 5 : 1;
            int32_t toks[5];
            for (int j = 0; j < n; j++)
                toks[j] = 3 + (int32_t)(rng_next(&s) % (uint64_t)(nv - 3));
            cr_assert_eq(sd_session_eval(gs, toks, n, lg, n, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_session_eval(es, toks, n, le, n, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(lg, le, (size_t)n * nv * 4), 0,
                         "%s%s: step %d (%d tokens at position %d): graph replay differs from "
                         "the ops run one by one",
                         sd_type_name(wt), paged ? " (paged)" : "", step, n,
                         sd_session_seq_n_past(gs, 0) - n);
        }
        const int32_t keep = sd_session_seq_n_past(gs, 0) / 3; /* roll back: positions go down */
        cr_assert_eq(sd_session_seq_truncate(gs, 0, keep, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_session_seq_truncate(es, 0, keep, &err), 0, "%s", err.msg);
    }
    free(lg), free(le);
    sd_session_free(gs);
    sd_session_free(es);
    sd_model_free(m);
}

Test(cuda_model, graphs_equal_eager_q8_0) {
    graphs_vs_eager(SD_TYPE_Q8_0, 0);
}
Test(cuda_model, graphs_equal_eager_q4_k) {
    graphs_vs_eager(SD_TYPE_Q4_K, 0);
}
Test(cuda_model, graphs_equal_eager_paged) {
    graphs_vs_eager(SD_TYPE_Q8_0, 4);
    graphs_vs_eager(SD_TYPE_F32, 16);
}

/* SD_CUDA_PROFILE=FILE: one JSON line per freed backend with every op kind it ran. */
Test(cuda_model, profile_file_lists_the_ops) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    char path[1100], prof[1100];
    tu_llama_spec spec = spec_for(SD_TYPE_Q4_K);
    tu_path(path, sizeof path, g_dir, "p.gguf");
    tu_path(prof, sizeof prof, g_dir, "prof.jsonl");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.device = SD_DEVICE_CUDA;
    sd_session *ss = NULL;
    setenv("SD_CUDA_PROFILE", prof, 1);
    const int rc = sd_session_init(m, &sp, &ss, &err);
    unsetenv("SD_CUDA_PROFILE");
    cr_assert_eq(rc, 0, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab, toks[3] = {5, 9, 11};
    float *l = malloc((size_t)nv * 4);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sd_session_eval(ss, toks + i, 1, l, 1, &err), 0, "%s", err.msg);
    sd_session_free(ss);
    size_t n = 0;
    char *text = (char *)tu_read_file(prof, &n);
    cr_assert_not_null(text, "%s was not written", prof);
    const char *want[] = {"\"matmul q4_k n=1\", \"count\": ",
                          "\"get_rows q4_k\"",
                          "\"attention\"",
                          "\"rope (q and k)\"",
                          "\"add + rmsnorm\"",
                          "\"kv_store\"",
                          "\"swiglu\""};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(text, want[i]), "%s: no %s in %s", prof, want[i], text);
    cr_assert(strchr(text, '\n') == text + n - 1, "one line: %s", text);
    free(text);
    free(l);
    sd_model_free(m);
}

/* Greedy speculative == greedy target-alone (sd_engine_generate) with the target on the GPU
 * and the draft on the GPU, then on the CPU, K = 1..8. */
Test(cuda_model, greedy_speculative_equals_target_alone) {
    sd_error err = {0};
    if (!cuda_usable(&err)) cr_skip_test("no CUDA device to test: %s", err.msg);
    char t[1100], dr[1100];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, dr, sizeof dr), 0);
    const int32_t prompt[4] = {1, 5, 9, 12}, n_pred = 48;
    int32_t ref[48], got[48];
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_pred;
    gp.samp.temp = 0.0f;
    sd_gen_stats st;
    int32_t n_ref = -1;
    for (int dev = 0; dev < 2; dev++) { /* draft on the GPU, then on the CPU */
        sd_engine_params ep = eu_engine_params(t, dr, 0, 0);
        ep.device = SD_DEVICE_CUDA;
        ep.device_draft = dev == 0 ? SD_DEVICE_CUDA : SD_DEVICE_CPU;
        sd_engine *e = eu_engine_open(&ep);
        if (dev == 0)
            n_ref = eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, 4, ref, &st);
        for (int32_t k = 1; k <= 8; k++) {
            eu_generate(e, &gp, SD_DRAFT_LLM, SD_K_FIXED, k, prompt, 4, got, &st);
            cr_assert_eq(st.n_generated, n_ref, "K=%d: %d tokens vs %d", k, st.n_generated, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "K=%d draft on %s: token %d is %d, target-alone %d", k,
                             dev == 0 ? "cuda" : "cpu", i, got[i], ref[i]);
        }
        sd_engine_free(e);
    }
}
