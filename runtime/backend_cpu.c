/*
 * CPU backend: OpenMP over output rows / (token, head) pairs; see backend.h for op
 * shapes and the determinism contract. Every reduction (dot products, sums of squares,
 * softmax sums) runs sequentially in index order inside one thread, so results never
 * depend on the batch size or the thread count.
 */
#include "runtime/backend.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below this many multiply-adds an op stays on the calling thread (the `if` clause).
 * The environment variable SD_CPU_PAR_MIN_WORK, read once at init, overrides it: the
 * tests set it to 0 so that tiny models exercise the threaded paths. */
#define SD_CPU_PAR_MIN_WORK 131072
#define SD_CPU_MAX_THREADS 1024

typedef struct sd_backend_cpu {
    sd_backend base;
    int32_t n_threads;
    int32_t n_batch;
    int64_t max_cols;
    int32_t n_ctx;
    double par_min_work; /* see SD_CPU_PAR_MIN_WORK */
    void *xq;        /* quantized activations: n_batch rows of max_cols */
    size_t xq_bytes;
    float *scores;   /* attention scores: n_threads rows of n_ctx */
} sd_backend_cpu;

static sd_backend_cpu *cpu_of(sd_backend *be) { return (sd_backend_cpu *)be; }

static void cpu_free(sd_backend *be) {
    sd_backend_cpu *c = cpu_of(be);
    if (!c) return;
    free(c->xq);
    free(c->scores);
    free(c);
}

/* Same-order sequential dot product (no reassociation: deterministic). */
static float dot_f32(const float *a, const float *b, int32_t n) {
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void cpu_get_rows(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                         float *y) {
    for (int32_t t = 0; t < n_tok; t++) {
        SD_CHECK(ids[t] >= 0 && ids[t] < w->rows, "get_rows: id out of range");
        const uint8_t *row = (const uint8_t *)w->data + (size_t)ids[t] * w->row_bytes;
        sd_dequantize_row(w->type, row, y + (size_t)t * (size_t)w->cols, w->cols);
    }
}

static void cpu_matmul(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok,
                       float *y) {
    sd_backend_cpu *c = cpu_of(be);
    const int64_t rows = w->rows, cols = w->cols;
    size_t xrow = 0;
    int rc = sd_type_row_bytes(sd_vec_dot_type(w->type), cols, &xrow);
    (void)rc;
    SD_CHECK(rc == 0, "matmul: bad activation row size");
    SD_CHECK(n_tok >= 1 && n_tok <= c->n_batch && cols <= c->max_cols &&
                 (size_t)n_tok * xrow <= c->xq_bytes,
             "matmul: shape exceeds the scratch sized at init");
    uint8_t *xq = c->xq;
    const double work = (double)rows * (double)cols * (double)n_tok;
#pragma omp parallel num_threads(c->n_threads) if (c->n_threads > 1 && work >= c->par_min_work)
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        const int64_t t0 = n_tok * tid / nth, t1 = n_tok * (tid + 1) / nth;
        if (t1 > t0)
            sd_quantize_activations(w->type, x + t0 * cols, t1 - t0, cols, xq + (size_t)t0 * xrow);
#pragma omp barrier
        const int64_t r0 = rows * tid / nth, r1 = rows * (tid + 1) / nth;
        if (r1 > r0)
            sd_matmul_rows(w->type, w->data, w->row_bytes, cols, xq, n_tok, y, rows, r0, r1);
    }
}

static void cpu_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                        float eps, float *y) {
    sd_backend_cpu *c = cpu_of(be);
    const double work = (double)n_tok * (double)n;
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && work >= c->par_min_work)
    for (int32_t t = 0; t < n_tok; t++) {
        const float *xr = x + (size_t)t * (size_t)n;
        float *yr = y + (size_t)t * (size_t)n;
        float ss = 0.0f;
        for (int32_t i = 0; i < n; i++) ss += xr[i] * xr[i];
        const float scale = 1.0f / sqrtf(ss / (float)n + eps);
        for (int32_t i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

static void cpu_rope(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                     int32_t head_dim, int32_t n_rot, float base) {
    const size_t row = (size_t)n_head * (size_t)head_dim;
    for (int32_t t = 0; t < n_tok; t++) {
        const float pos = (float)(pos0 + t);
        float *xr = x + (size_t)t * row;
        for (int32_t i = 0; i < n_rot / 2; i++) {
            const float freq = powf(base, -(float)(2 * i) / (float)n_rot);
            const float theta = pos * freq;
            const float cs = cosf(theta), sn = sinf(theta);
            for (int32_t h = 0; h < n_head; h++) {
                float *p = xr + (size_t)h * (size_t)head_dim + 2 * (size_t)i;
                const float x0 = p[0], x1 = p[1];
                p[0] = x0 * cs - x1 * sn;
                p[1] = x0 * sn + x1 * cs;
            }
        }
    }
}

static void cpu_kv_store(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                         int32_t kv_dim, const float *k, const float *v) {
    (void)be;
    for (int32_t t = 0; t < n_tok; t++) {
        float *kd = sd_kv_k(kv, layer, pos0 + t);
        float *vd = sd_kv_v(kv, layer, pos0 + t);
        memcpy(kd, k + (size_t)t * (size_t)kv_dim, (size_t)kv_dim * sizeof(float));
        memcpy(vd, v + (size_t)t * (size_t)kv_dim, (size_t)kv_dim * sizeof(float));
    }
}

/* One query row of one head over keys [0, n_keys). sc: scratch of n_keys floats. */
static void attend_one(const float *q, sd_kv *kv, int32_t layer, int32_t n_keys, int32_t kv_off,
                       int32_t head_dim, int32_t kv_dim, float scale, float *sc, float *out) {
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const float *kb = sd_kv_k(kv, layer, j) + kv_off;
        for (int32_t jj = 0; jj < span; jj++)
            sc[j + jj] = dot_f32(q, kb + (size_t)jj * (size_t)kv_dim, head_dim) * scale;
        j += span;
    }
    float mx = sc[0];
    for (int32_t j = 1; j < n_keys; j++) mx = sc[j] > mx ? sc[j] : mx;
    float sum = 0.0f;
    for (int32_t j = 0; j < n_keys; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    for (int32_t d = 0; d < head_dim; d++) out[d] = 0.0f;
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const float *vb = sd_kv_v(kv, layer, j) + kv_off;
        for (int32_t jj = 0; jj < span; jj++) {
            const float wj = sc[j + jj];
            const float *vr = vb + (size_t)jj * (size_t)kv_dim;
            for (int32_t d = 0; d < head_dim; d++) out[d] += wj * vr[d];
        }
        j += span;
    }
    const float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    for (int32_t d = 0; d < head_dim; d++) out[d] *= inv;
}

static void cpu_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                          int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                          float *out) {
    sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(pos0 + n_tok <= c->n_ctx, "attention: more keys than the scratch sized at init");
    const int32_t group = n_head / n_head_kv;
    const int32_t kv_dim = n_head_kv * head_dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int64_t n_items = (int64_t)n_tok * n_head;
    const double work = (double)n_items * (double)(pos0 + n_tok) * (double)head_dim * 2.0;
#pragma omp parallel num_threads(c->n_threads) if (c->n_threads > 1 && work >= c->par_min_work)
    {
        float *sc = c->scores + (size_t)omp_get_thread_num() * (size_t)c->n_ctx;
#pragma omp for schedule(static)
        for (int64_t it = 0; it < n_items; it++) {
            const int32_t t = (int32_t)(it / n_head), h = (int32_t)(it % n_head);
            const size_t off = (size_t)t * (size_t)n_head * (size_t)head_dim + (size_t)h * (size_t)head_dim;
            attend_one(q + off, kv, layer, pos0 + t + 1, (h / group) * head_dim, head_dim, kv_dim,
                       scale, sc, out + off);
        }
    }
}

static void cpu_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
    (void)be;
    for (int32_t r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * (size_t)n;
        float mx = xr[0];
        for (int32_t i = 1; i < n; i++) mx = xr[i] > mx ? xr[i] : mx;
        float sum = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            xr[i] = expf(xr[i] - mx);
            sum += xr[i];
        }
        const float inv = 1.0f / sum;
        for (int32_t i = 0; i < n; i++) xr[i] *= inv;
    }
}

static void cpu_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_backend_cpu *c = cpu_of(be);
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && (double)n >= c->par_min_work)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        y[i] = (gi / (1.0f + expf(-gi))) * u[i];
    }
}

static void cpu_add(sd_backend *be, float *y, const float *x, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static const sd_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .softmax = cpu_softmax,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
};

int sd_backend_cpu_init(const sd_backend_params *p, sd_backend **out, sd_error *err) {
    *out = NULL;
    if (!p || p->n_threads < 0 || p->n_batch < 1 || p->max_cols < 1 || p->n_ctx < 1)
        return sd_errorf(err, SD_ERR_ARG, "cpu backend: bad parameters");
    int32_t nt = p->n_threads ? p->n_threads : sd_n_cores();
    if (nt > SD_CPU_MAX_THREADS) nt = SD_CPU_MAX_THREADS;
    /* Activation rows: at most 4 bytes per element (F32; Q8_0 is 34/32 bytes). */
    size_t xq_bytes, sc_len, sc_bytes;
    if (sd_mul_size((size_t)p->n_batch, (size_t)p->max_cols, &xq_bytes) ||
        sd_mul_size(xq_bytes, sizeof(float), &xq_bytes) ||
        sd_mul_size((size_t)nt, (size_t)p->n_ctx, &sc_len) ||
        sd_mul_size(sc_len, sizeof(float), &sc_bytes))
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: scratch size overflows");
    sd_backend_cpu *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->n_threads = nt;
    c->n_batch = p->n_batch;
    c->max_cols = p->max_cols;
    c->n_ctx = p->n_ctx;
    c->par_min_work = SD_CPU_PAR_MIN_WORK;
    const char *env = getenv("SD_CPU_PAR_MIN_WORK");
    if (env && *env) {
        char *end = NULL;
        double v = strtod(env, &end);
        if (end && *end == '\0' && v >= 0.0) c->par_min_work = v;
    }
    c->xq_bytes = xq_bytes;
    if (posix_memalign(&c->xq, 64, xq_bytes) != 0) c->xq = NULL;
    void *sc = NULL;
    if (posix_memalign(&sc, 64, sc_bytes) != 0) sc = NULL;
    c->scores = sc;
    if (!c->xq || !c->scores) {
        cpu_free(&c->base);
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (%zu + %zu bytes)", xq_bytes,
                         sc_bytes);
    }
    *out = &c->base;
    return SD_OK;
}

int32_t sd_backend_cpu_n_threads(const sd_backend *be) {
    return ((const sd_backend_cpu *)be)->n_threads;
}
