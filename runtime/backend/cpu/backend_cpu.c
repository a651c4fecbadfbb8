/*
 * CPU backend: OpenMP over chunks of output rows / (token, KV head, head block) items;
 * see backend.h for op shapes and the determinism contract. Every reduction (dot
 * products, sums of squares, softmax sums) runs in a fixed order inside one thread, so
 * results never depend on the batch size, the thread count or which thread ran them.
 */
#include "runtime/backend/sd_backend.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below this many multiply-adds an op stays on the calling thread (the `if` clause).
 * The environment variable SD_CPU_PAR_MIN_WORK, read once at init, overrides it: the
 * tests set it to 0 so that tiny models exercise the threaded paths. */
#define SD_CPU_PAR_MIN_WORK 131072
#define SD_CPU_MAX_THREADS  1024
/* Matmul rows are handed to threads in chunks (see cpu_matmul). */
#define SD_CPU_CHUNKS_PER_THREAD 16
#define SD_CPU_MIN_CHUNK_ROWS    16

typedef struct sd_backend_cpu {
    sd_backend base;
    int32_t n_threads;
    int32_t n_batch;
    int64_t max_cols;
    int32_t n_ctx;
    double par_min_work; /* see SD_CPU_PAR_MIN_WORK */
    void *xq;            /* prepared activations (sd_activations_bytes), n_batch rows of max_cols */
    size_t xq_bytes;
    float *scores;                 /* attention scores: n_threads x SD_ATT_HB rows of n_ctx */
    const struct att_kernels *att; /* attention kernels (kernels_pick) */
} sd_backend_cpu;

static sd_backend_cpu *cpu_of(sd_backend *be) {
    return (sd_backend_cpu *)be;
}

static void cpu_free(sd_backend *be) {
    sd_backend_cpu *c = cpu_of(be);
    if (!c) return;
    free(c->xq);
    free(c->scores);
    free(c);
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
    size_t need = 0;
    int rc = sd_activations_bytes(w->type, n_tok, cols, &need);
    (void)rc;
    (void)need;
    SD_CHECK(rc == 0, "matmul: bad activation row size");
    SD_CHECK(n_tok >= 1 && n_tok <= c->n_batch && cols <= c->max_cols && need <= c->xq_bytes,
             "matmul: shape exceeds the scratch sized at init");
    void *xq = c->xq;
    const double work = (double)rows * (double)cols * (double)n_tok;
    /* About SD_CPU_CHUNKS_PER_THREAD chunks per thread, at least SD_CPU_MIN_CHUNK_ROWS rows. */
    int64_t chunk = rows / ((int64_t)c->n_threads * SD_CPU_CHUNKS_PER_THREAD);
    if (chunk < SD_CPU_MIN_CHUNK_ROWS) chunk = SD_CPU_MIN_CHUNK_ROWS;
#pragma omp parallel num_threads(c->n_threads) if (c->n_threads > 1 && work >= c->par_min_work)
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        /* Prepared once per matmul (sd_quant.h layout), token rows split over threads. */
        const int64_t t0 = n_tok * tid / nth, t1 = n_tok * (tid + 1) / nth;
        sd_quantize_activations_rows(w->type, x, n_tok, cols, t0, t1, xq);
#pragma omp barrier
        /* Rows in chunks handed out dynamically: a thread that shares its core with other
         * work (or starts late) takes fewer chunks instead of holding up the others.
         * Which thread computes a row never changes its value. */
        const int64_t n_chunks = (rows + chunk - 1) / chunk;
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t ci = 0; ci < n_chunks; ci++) {
            const int64_t r0 = ci * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
            sd_matmul_rows(w->type, w->data, w->row_bytes, cols, xq, n_tok, y, rows, r0, r1);
        }
    }
}

static void cpu_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                        float eps, float *y) {
    sd_backend_cpu *c = cpu_of(be);
    const double work = (double)n_tok * (double)n;
#pragma omp parallel for num_threads(c->n_threads)                                                 \
    schedule(static) if (c->n_threads > 1 && work >= c->par_min_work)
    for (int32_t t = 0; t < n_tok; t++) {
        const float *xr = x + (size_t)t * (size_t)n;
        float *yr = y + (size_t)t * (size_t)n;
        float ss = 0.0f;
        for (int32_t i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        const float scale = 1.0f / sqrtf(ss / (float)n + eps);
        for (int32_t i = 0; i < n; i++)
            yr[i] = (xr[i] * scale) * w[i];
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
    SD_CHECK(kv_dim == sd_kv_dim(kv), "kv_store: kv_dim differs from the cache's");
    const sd_type t = sd_kv_type(kv);
    for (int32_t tk = 0; tk < n_tok; tk++) {
        void *kd = sd_kv_k(kv, layer, pos0 + tk);
        void *vd = sd_kv_v(kv, layer, pos0 + tk);
        const float *ks = k + (size_t)tk * (size_t)kv_dim, *vs = v + (size_t)tk * (size_t)kv_dim;
        if (t == SD_TYPE_F16) { /* round to nearest even (the reference conversion) */
            sd_quantize_row(SD_TYPE_F16, ks, kd, kv_dim);
            sd_quantize_row(SD_TYPE_F16, vs, vd, kv_dim);
        } else {
            memcpy(kd, ks, (size_t)kv_dim * sizeof(float));
            memcpy(vd, vs, (size_t)kv_dim * sizeof(float));
        }
    }
}

/*
 * Attention kernels. One call handles a block of nh <= SD_ATT_HB query heads of one
 * token that share one KV head, so every K/V row of that KV head is read once for all
 * of them (GQA: n_head / n_head_kv heads share a KV head). Two kernels per level:
 *   scores: sc[h * scs + j] = dot(q_h, k_j) * scale     for j in [0, span)
 *   vsum  : out_h[d] += sc[h * scs + j] * v_j[d]          for j = 0, 1, .. span - 1
 * k_j / v_j: row j of a span (rows `stride` bytes apart) at the KV head's offset, F32
 * or F16 (converted to f32 in registers). The value computed for one (head, key) or
 * (head, d) is a fixed function of that head's q / weights and the K/V rows, with a
 * fixed accumulation order (d ascending in fixed-width chunks, keys ascending): never
 * of nh, the span split, the batch size or the thread count. Levels: scalar (the
 * reference), AVX2+FMA+F16C, AVX-512F; chosen at backend init (see kernels_pick).
 */
#define SD_ATT_HB    8  /* query heads per block (accumulators kept in registers) */
#define SD_ATT_CHUNK 64 /* scalar path: K/V elements converted at a time */

typedef void (*att_scores_fn)(const float *q, int32_t nh, int32_t hd, const void *k, size_t stride,
                              sd_type kt, int32_t span, float scale, float *sc, size_t scs);
typedef void (*att_vsum_fn)(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                            size_t stride, sd_type vt, int32_t span, float *out);

typedef struct att_kernels {
    const char *name;
    att_scores_fn scores;
    att_vsum_fn vsum;
} att_kernels;

/* Elements [d0, d0 + n) of a K/V row as floats. */
static void row_to_f32(const void *row, sd_type t, int32_t d0, int32_t n, float *dst) {
    if (t == SD_TYPE_F16) {
        const uint16_t *r = (const uint16_t *)row + d0;
        for (int32_t i = 0; i < n; i++)
            dst[i] = sd_fp16_to_fp32(r[i]);
    } else {
        memcpy(dst, (const float *)row + d0, (size_t)n * sizeof(float));
    }
}

static void att_scores_scalar(const float *q, int32_t nh, int32_t hd, const void *k, size_t stride,
                              sd_type kt, int32_t span, float scale, float *sc, size_t scs) {
    float kc[SD_ATT_CHUNK];
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        float acc[SD_ATT_HB] = {0};
        for (int32_t d0 = 0; d0 < hd; d0 += SD_ATT_CHUNK) {
            const int32_t n = hd - d0 < SD_ATT_CHUNK ? hd - d0 : SD_ATT_CHUNK;
            row_to_f32(kr, kt, d0, n, kc);
            for (int32_t h = 0; h < nh; h++) {
                const float *qh = q + (size_t)h * (size_t)hd + d0;
                float s = acc[h];
                for (int32_t i = 0; i < n; i++)
                    s += qh[i] * kc[i];
                acc[h] = s;
            }
        }
        for (int32_t h = 0; h < nh; h++)
            sc[(size_t)h * scs + (size_t)j] = acc[h] * scale;
    }
}

static void att_vsum_scalar(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                            size_t stride, sd_type vt, int32_t span, float *out) {
    float vc[SD_ATT_CHUNK];
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d0 = 0; d0 < hd; d0 += SD_ATT_CHUNK) {
            const int32_t n = hd - d0 < SD_ATT_CHUNK ? hd - d0 : SD_ATT_CHUNK;
            row_to_f32(vr, vt, d0, n, vc);
            for (int32_t h = 0; h < nh; h++) {
                const float w = sc[(size_t)h * scs + (size_t)j];
                float *oh = out + (size_t)h * (size_t)hd + d0;
                for (int32_t i = 0; i < n; i++)
                    oh[i] += w * vc[i];
            }
        }
    }
}

static const att_kernels att_scalar = {"scalar", att_scores_scalar, att_vsum_scalar};

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define SD_T2 __attribute__((target("avx2,fma,f16c")))
#define SD_T5 __attribute__((target("avx512f,avx2,fma,f16c")))

/* 8 elements of a K/V row from element d as f32. */
SD_T2 static inline __m256 ld8(const void *row, sd_type t, int32_t d) {
    if (t == SD_TYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    return _mm256_loadu_ps((const float *)row + d);
}

SD_T2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Scalar tail element d of a row. */
static inline float elem(const void *row, sd_type t, int32_t d) {
    return t == SD_TYPE_F16 ? sd_fp16_to_fp32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

SD_T2 static void att_scores_avx2(const float *q, int32_t nh, int32_t hd, const void *k,
                                  size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                  size_t scs) {
    const int32_t d8 = hd & ~7;
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        __m256 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm256_setzero_ps();
        for (int32_t d = 0; d < d8; d += 8) {
            const __m256 kv = ld8(kr, kt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * (size_t)hd + d), kv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++) {
            float s = hsum8(acc[h]);
            for (int32_t d = d8; d < hd; d++)
                s += q[(size_t)h * (size_t)hd + d] * elem(kr, kt, d);
            sc[(size_t)h * scs + (size_t)j] = s * scale;
        }
    }
}

SD_T2 static void att_vsum_avx2(const float *sc, size_t scs, int32_t nh, int32_t hd, const void *v,
                                size_t stride, sd_type vt, int32_t span, float *out) {
    const int32_t d8 = hd & ~7;
    for (int32_t d = 0; d < d8; d += 8) {
        __m256 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm256_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m256 vv = ld8((const uint8_t *)v + (size_t)j * stride, vt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm256_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d = d8; d < hd; d++) {
            const float vd = elem(vr, vt, d);
            for (int32_t h = 0; h < nh; h++)
                out[(size_t)h * (size_t)hd + d] += sc[(size_t)h * scs + (size_t)j] * vd;
        }
    }
}

static const att_kernels att_avx2 = {"avx2", att_scores_avx2, att_vsum_avx2};

/* 16 elements of a K/V row from element d as f32. */
SD_T5 static inline __m512 ld16(const void *row, sd_type t, int32_t d) {
    if (t == SD_TYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
    return _mm512_loadu_ps((const float *)row + d);
}

/* AVX-512: chunks of 16, then one chunk of 8 (ymm), then scalar; per (head, key) the
 * score is hsum(16-lane acc) + hsum(8-lane acc) + tail, in that order. */
SD_T5 static void att_scores_avx512(const float *q, int32_t nh, int32_t hd, const void *k,
                                    size_t stride, sd_type kt, int32_t span, float scale, float *sc,
                                    size_t scs) {
    const int32_t d16 = hd & ~15, d8 = hd & ~7;
    for (int32_t j = 0; j < span; j++) {
        const void *kr = (const uint8_t *)k + (size_t)j * stride;
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_setzero_ps();
        for (int32_t d = 0; d < d16; d += 16) {
            const __m512 kv = ld16(kr, kt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * (size_t)hd + d), kv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++) {
            const float *qh = q + (size_t)h * (size_t)hd;
            float s = _mm512_reduce_add_ps(acc[h]);
            if (d8 > d16) s += hsum8(_mm256_mul_ps(_mm256_loadu_ps(qh + d16), ld8(kr, kt, d16)));
            for (int32_t d = d8; d < hd; d++)
                s += qh[d] * elem(kr, kt, d);
            sc[(size_t)h * scs + (size_t)j] = s * scale;
        }
    }
}

SD_T5 static void att_vsum_avx512(const float *sc, size_t scs, int32_t nh, int32_t hd,
                                  const void *v, size_t stride, sd_type vt, int32_t span,
                                  float *out) {
    const int32_t d16 = hd & ~15, d8 = hd & ~7;
    for (int32_t d = 0; d < d16; d += 16) {
        __m512 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm512_loadu_ps(out + (size_t)h * (size_t)hd + d);
        for (int32_t j = 0; j < span; j++) {
            const __m512 vv = ld16((const uint8_t *)v + (size_t)j * stride, vt, d);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm512_storeu_ps(out + (size_t)h * (size_t)hd + d, acc[h]);
    }
    if (d8 > d16) {
        __m256 acc[SD_ATT_HB];
        for (int32_t h = 0; h < nh; h++)
            acc[h] = _mm256_loadu_ps(out + (size_t)h * (size_t)hd + d16);
        for (int32_t j = 0; j < span; j++) {
            const __m256 vv = ld8((const uint8_t *)v + (size_t)j * stride, vt, d16);
            for (int32_t h = 0; h < nh; h++)
                acc[h] =
                    _mm256_fmadd_ps(_mm256_set1_ps(sc[(size_t)h * scs + (size_t)j]), vv, acc[h]);
        }
        for (int32_t h = 0; h < nh; h++)
            _mm256_storeu_ps(out + (size_t)h * (size_t)hd + d16, acc[h]);
    }
    for (int32_t j = 0; j < span; j++) {
        const void *vr = (const uint8_t *)v + (size_t)j * stride;
        for (int32_t d = d8; d < hd; d++) {
            const float vd = elem(vr, vt, d);
            for (int32_t h = 0; h < nh; h++)
                out[(size_t)h * (size_t)hd + d] += sc[(size_t)h * scs + (size_t)j] * vd;
        }
    }
}

static const att_kernels att_avx512 = {"avx512", att_scores_avx512, att_vsum_avx512};

/* F16C: CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c"). */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif /* __x86_64__ */

/* The kernels called `name` ("scalar", "avx2", "avx512") if this CPU runs them. */
static const att_kernels *att_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "scalar") == 0) return &att_scalar;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    if (strcmp(name, "avx2") == 0) return avx2 ? &att_avx2 : NULL;
    if (strcmp(name, "avx512") == 0)
        return avx2 && __builtin_cpu_supports("avx512f") ? &att_avx512 : NULL;
#endif
    return NULL;
}

/* The best level this CPU runs, never above the matmul kernels' level (so SD_KERNELS,
 * which lowers that, lowers this too). */
static const att_kernels *kernels_pick(void) {
    static const char *const order[] = {"avx512", "avx2", "scalar"};
    const char *cap = sd_quant_kernels_name();
    size_t start = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (strcmp(cap, order[i]) == 0) start = i;
    for (size_t i = start; i < sizeof order / sizeof order[0]; i++) {
        const att_kernels *k = att_by_name(order[i]);
        if (k) return k;
    }
    return &att_scalar;
}

/* Heads [h0, h0 + nh) of one query row (all sharing KV head g) over keys [0, n_keys).
 * q, out: the rows of head h0 (heads head_dim apart). sc: scratch [SD_ATT_HB, scs]. */
static void attend_block(const att_kernels *ak, const float *q, int32_t nh, sd_kv *kv,
                         int32_t layer, int32_t n_keys, int32_t g, int32_t head_dim, float scale,
                         float *sc, size_t scs, float *out) {
    const size_t stride = sd_kv_row_bytes(kv);
    const sd_type t = sd_kv_type(kv);
    const size_t off = (size_t)g * (size_t)head_dim * (t == SD_TYPE_F16 ? 2u : 4u);
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const uint8_t *kb = (const uint8_t *)sd_kv_k(kv, layer, j) + off;
        ak->scores(q, nh, head_dim, kb, stride, t, span, scale, sc + j, scs);
        j += span;
    }
    float inv[SD_ATT_HB];
    for (int32_t h = 0; h < nh; h++) {
        float *s = sc + (size_t)h * scs;
        float mx = s[0];
        for (int32_t j = 1; j < n_keys; j++)
            mx = s[j] > mx ? s[j] : mx;
        float sum = 0.0f;
        for (int32_t j = 0; j < n_keys; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        inv[h] = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    }
    memset(out, 0, (size_t)nh * (size_t)head_dim * sizeof(float));
    for (int32_t j = 0; j < n_keys;) {
        int32_t span = sd_kv_span(kv, j);
        if (span > n_keys - j) span = n_keys - j;
        const uint8_t *vb = (const uint8_t *)sd_kv_v(kv, layer, j) + off;
        ak->vsum(sc + j, scs, nh, head_dim, vb, stride, t, span, out);
        j += span;
    }
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = 0; d < head_dim; d++)
            out[(size_t)h * (size_t)head_dim + d] *= inv[h];
}

static void cpu_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                          int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                          float *out) {
    sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(pos0 + n_tok <= c->n_ctx, "attention: more keys than the scratch sized at init");
    SD_CHECK(n_head_kv * head_dim == sd_kv_dim(kv), "attention: kv_dim differs from the cache's");
    const att_kernels *ak = c->att;
    const int32_t group = n_head / n_head_kv;
    const int32_t n_blk = (group + SD_ATT_HB - 1) / SD_ATT_HB; /* head blocks per KV head */
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int64_t n_items = (int64_t)n_tok * n_head_kv * n_blk;
    const size_t scs = (size_t)c->n_ctx;
    const double work = (double)n_tok * n_head * (double)(pos0 + n_tok) * (double)head_dim * 2.0;
#pragma omp parallel num_threads(c->n_threads) if (c->n_threads > 1 && work >= c->par_min_work)
    {
        float *sc = c->scores + (size_t)omp_get_thread_num() * (size_t)SD_ATT_HB * scs;
        /* Dynamic: later tokens of a batch see more keys, and a thread may start late. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < n_items; it++) {
            const int32_t t = (int32_t)(it / ((int64_t)n_head_kv * n_blk));
            const int32_t r = (int32_t)(it % ((int64_t)n_head_kv * n_blk));
            const int32_t g = r / n_blk, h0 = g * group + (r % n_blk) * SD_ATT_HB;
            const int32_t nh =
                g * group + group - h0 < SD_ATT_HB ? g * group + group - h0 : SD_ATT_HB;
            const size_t off = ((size_t)t * (size_t)n_head + (size_t)h0) * (size_t)head_dim;
            attend_block(ak, q + off, nh, kv, layer, pos0 + t + 1, g, head_dim, scale, sc, scs,
                         out + off);
        }
    }
}

static void cpu_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
    (void)be;
    for (int32_t r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * (size_t)n;
        float mx = xr[0];
        for (int32_t i = 1; i < n; i++)
            mx = xr[i] > mx ? xr[i] : mx;
        float sum = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            xr[i] = expf(xr[i] - mx);
            sum += xr[i];
        }
        const float inv = 1.0f / sum;
        for (int32_t i = 0; i < n; i++)
            xr[i] *= inv;
    }
}

static void cpu_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_backend_cpu *c = cpu_of(be);
#pragma omp parallel for num_threads(c->n_threads)                                                 \
    schedule(static) if (c->n_threads > 1 && (double)n >= c->par_min_work)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        y[i] = (gi / (1.0f + expf(-gi))) * u[i];
    }
}

static void cpu_add(sd_backend *be, float *y, const float *x, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
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
    /* Prepared activations: the largest sd_activations_bytes over the weight types for
     * n_batch rows of up to max_cols. */
    size_t xq_bytes = 0, sc_len, sc_bytes;
    if (sd_activations_bytes_max(p->n_batch, p->max_cols, &xq_bytes) != 0)
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: scratch size overflows");
    if (sd_mul_size((size_t)nt * SD_ATT_HB, (size_t)p->n_ctx, &sc_len) ||
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
    c->att = kernels_pick();
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

const char *sd_backend_cpu_kernels(const sd_backend *be) {
    return ((const sd_backend_cpu *)be)->att->name;
}

int sd_backend_cpu_set_kernels(sd_backend *be, const char *name) {
    const att_kernels *k = att_by_name(name);
    if (!k) return -1;
    cpu_of(be)->att = k;
    return 0;
}
