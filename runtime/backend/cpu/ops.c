/*
 * CPU backend: the ops table over host memory. Our own thread pool (pool.h: persistent
 * workers, a bounded spin then a futex sleep) over chunks of output rows / (token, KV
 * head, head block) items; see sd_backend.h for op shapes and the determinism
 * contract. Attention kernels per instruction set: attn.h. Buffers are host memory
 * (64-byte aligned, zeroed); weights are mapped in place (buffer_from_host copies nothing). Every
 * reduction (dot products, sums of squares, softmax sums) runs in a fixed order inside one thread,
 * so results never depend on the batch size, the thread count or which thread ran them.
 */
#include "runtime/backend/sd_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/backend/cpu/attn.h"
#include "runtime/backend/cpu/glu.h"
#include "runtime/backend/cpu/pool.h"

/* Below this many multiply-adds an op stays on the calling thread (the `if` clause).
 * The environment variable SD_CPU_PAR_MIN_WORK, read once at init, overrides it: the
 * tests set it to 0 so that tiny models exercise the threaded paths. SD_CPU_POOL_BACKOFF=1
 * turns on the pool's back-off (pool.h: runs no worker joins kept on the caller). */
#define SD_CPU_PAR_MIN_WORK 131072
#define SD_CPU_MAX_THREADS  SD_POOL_MAX_THREADS
/* Matmul rows are handed to threads in decreasing chunks (sd_pool_for_guided), at least
 * this many rows of a row-major matrix (packed matrices: one 16-row group). */
#define SD_CPU_MIN_CHUNK_ROWS 16
/* Activations of at most this many tokens are prepared on the calling thread (cheaper
 * than a hand-over to the pool and back). */
#define SD_CPU_PREP_INLINE_TOKENS 8
/* matmul_argmax computes a thread's rows this many at a time into its own scratch (a
 * multiple of SD_PACK_ROWS; 1 KiB stays in L1), scanned before the next ones. */
#define SD_CPU_ARGMAX_ROWS 256

/* Buffers of at least this many bytes are anonymous mappings: zero pages from the kernel
 * on first touch, so a KV cache sized for a long context costs no time and no memory
 * until its rows are written (a memset would fault in every page at init). They are
 * aligned to 2 MiB and offered to transparent huge pages (MADV_HUGEPAGE; a hint the
 * kernel may ignore): one fault and one TLB entry per 2 MiB of weights instead of 512. */
#define SD_CPU_MMAP_MIN ((size_t)1 << 20)
#define SD_CPU_HUGE     ((size_t)2 << 20)

typedef struct big_mem {
    void *addr; /* SD_CPU_HUGE-aligned start */
    void *map;  /* the mapping, for munmap */
    size_t len; /* of the mapping */
} big_mem;

/* bytes (> 0) of zeroed anonymous memory, 2 MiB aligned; 0, or -1 (out of memory). */
static int big_alloc(size_t bytes, big_mem *m) {
    const int huge = bytes >= SD_CPU_HUGE; /* smaller: a huge page would be mostly waste */
    size_t len = bytes;
    if (huge && __builtin_add_overflow(bytes, SD_CPU_HUGE, &len)) return -1;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    uintptr_t a = (uintptr_t)p;
    if (huge) {
        a = (a + SD_CPU_HUGE - 1) & ~(uintptr_t)(SD_CPU_HUGE - 1);
#ifdef MADV_HUGEPAGE
        (void)madvise((void *)a, bytes & ~(SD_CPU_HUGE - 1), MADV_HUGEPAGE); /* whole pages */
#endif
    }
    m->addr = (void *)a;
    m->map = p;
    m->len = len;
    return 0;
}

static void big_free(big_mem *m) {
    if (m->map) munmap(m->map, m->len);
}

typedef struct sd_backend_cpu {
    sd_backend base;
    int32_t n_threads;
    sd_pool *pool;            /* n_threads threads, the caller included (pool.h) */
    struct pool_share *share; /* the pool's owner record, shared by the backends using it */
    int32_t n_batch;
    int64_t max_cols;
    int32_t n_ctx;
    int32_t window;                /* sliding-window attention (sd_backend_params), 0: none */
    double par_min_work;           /* see SD_CPU_PAR_MIN_WORK */
    void *xq[SD_MATMUL_MULTI_MAX]; /* prepared activations (sd_activations_bytes), n_batch rows
                                      of max_cols, one per matrix of a matmul_multi */
    size_t xq_bytes;
    struct big_mem *packed; /* weight copies in the packed layout (prepare_weight), owned */
    int32_t n_packed, cap_packed;
    size_t packed_bytes; /* their total size */
    double packed_ms;    /* time spent packing */
    int profile;         /* per-op timers on (sd_backend_cpu_profile_enable) */
    sd_cpu_profile prof;
    float *scores;             /* attention scores: n_threads x SD_ATT_HB rows of n_ctx */
    float *tiles;              /* quantized-KV tiles: n_threads x SD_ATT_TILE rows of max_cols */
    const sd_att_kernels *att; /* attention kernels (sd_cpu_att_pick) */
    struct amax_best *amax;    /* matmul_argmax: each thread's best, n_threads entries */
    float *amax_rows;          /* matmul_argmax: n_threads x SD_CPU_ARGMAX_ROWS floats */
} sd_backend_cpu;

static sd_backend_cpu *cpu_of(sd_backend *be) {
    return (sd_backend_cpu *)be;
}

/* A pool with the number of backends running on it (sd_backend_params.share_threads);
 * the last one to go frees it. */
typedef struct pool_share {
    sd_pool *pool;
    _Atomic int32_t refs;
} pool_share;

static void share_release(pool_share *sh) {
    if (sh && atomic_fetch_sub(&sh->refs, 1) == 1) {
        sd_pool_free(sh->pool);
        free(sh);
    }
}

/* Per-op timers: t0 = prof_start(c) before an op, prof_end(c, op, t0) after it. */
static double prof_start(const sd_backend_cpu *c) {
    return c->profile ? sd_time_ms() : 0.0;
}
static void prof_end(sd_backend_cpu *c, sd_prof_op op, double t0) {
    if (!c->profile) return;
    c->prof.ms[op] += sd_time_ms() - t0;
    c->prof.calls[op]++;
}

const char *sd_prof_op_name(sd_prof_op op) {
    static const char *const names[SD_PROF_N] = {"matmul",   "attention",   "rmsnorm", "rope",
                                                 "kv_store", "elementwise", "get_rows"};
    return (unsigned)op < SD_PROF_N ? names[op] : "?";
}

void sd_backend_cpu_profile_enable(sd_backend *be, int on) {
    sd_backend_cpu *c = cpu_of(be);
    c->profile = on != 0;
    memset(&c->prof, 0, sizeof c->prof);
}

void sd_backend_cpu_profile_get(const sd_backend *be, sd_cpu_profile *out) {
    *out = ((const sd_backend_cpu *)be)->prof;
}

static void cpu_free(sd_backend *be) {
    sd_backend_cpu *c = cpu_of(be);
    if (!c) return;
    share_release(c->share);
    for (int i = 0; i < SD_MATMUL_MULTI_MAX; i++)
        free(c->xq[i]);
    for (int32_t i = 0; i < c->n_packed; i++)
        big_free(&c->packed[i]);
    free(c->packed);
    free(c->scores);
    free(c->tiles);
    free(c->amax);
    free(c->amax_rows);
    free(c);
}

/* ---- memory: host memory; backend addresses are host addresses ---- */

typedef struct cpu_buffer {
    sd_buffer base;
    int owned;   /* 1: addr was allocated here (freed with the buffer) */
    big_mem big; /* big.map != NULL: addr is big.addr (big_alloc) */
} cpu_buffer;

static int cpu_buffer_new(sd_backend *be, void *addr, size_t bytes, sd_buffer_usage usage,
                          int owned, sd_buffer **out, sd_error *err) {
    cpu_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        if (owned) free(addr);
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (buffer record)");
    }
    b->base.be = be;
    b->base.addr = addr;
    b->base.size = bytes;
    b->base.usage = usage;
    b->owned = owned;
    *out = &b->base;
    return SD_OK;
}

static int cpu_buffer_alloc(sd_backend *be, size_t bytes, sd_buffer_usage usage, sd_buffer **out,
                            sd_error *err) {
    *out = NULL;
    if (bytes >= SD_CPU_MMAP_MIN) { /* zero on first touch */
        big_mem m;
        if (big_alloc(bytes, &m))
            return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (%zu bytes)", bytes);
        int rc = cpu_buffer_new(be, m.addr, bytes, usage, 0, out, err); /* 0: never free()d */
        if (rc) {
            big_free(&m);
            return rc;
        }
        ((cpu_buffer *)*out)->owned = 1;
        ((cpu_buffer *)*out)->big = m;
        return SD_OK;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes ? bytes : 64);
    return cpu_buffer_new(be, p, bytes, usage, 1, out, err);
}

static int cpu_buffer_from_host(sd_backend *be, const void *host, size_t bytes, sd_buffer **out,
                                sd_error *err) {
    *out = NULL;
    /* Mapped in place: the weights stay in the caller's (mmap'd) memory, read-only. */
    return cpu_buffer_new(be, (void *)host, bytes, SD_BUFFER_WEIGHTS, 0, out, err);
}

static void cpu_buffer_free(sd_backend *be, sd_buffer *buf) {
    (void)be;
    if (!buf) return;
    cpu_buffer *b = (cpu_buffer *)buf;
    if (b->big.map)
        big_free(&b->big);
    else if (b->owned)
        free(b->base.addr);
    free(b);
}

static int cpu_write(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    (void)be;
    (void)err;
    if (bytes) memmove(dst, src, bytes);
    return SD_OK;
}

static int cpu_read(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    return cpu_write(be, dst, src, bytes, err);
}

static int cpu_supports_type(const sd_backend *be, sd_type t) {
    (void)be;
    const sd_type_traits *tr = sd_type_traits_get((uint32_t)t);
    return tr && tr->is_weight; /* the scalar kernel set covers every weight type */
}

static int cpu_sync(sd_backend *be, sd_error *err) {
    (void)be;
    (void)err;
    return SD_OK; /* ops run synchronously and cannot fail */
}

/* ---- ops ---- */

static void cpu_get_rows_op(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                            float *y) {
    for (int32_t t = 0; t < n_tok; t++) {
        SD_CHECK(ids[t] >= 0 && ids[t] < w->rows, "get_rows: id out of range");
        const uint8_t *row = (const uint8_t *)w->data + (size_t)ids[t] * w->row_bytes;
        sd_dequantize_row(w->type, row, y + (size_t)t * (size_t)w->cols, w->cols);
    }
}

/* ---- weights in the kernels' packed layout ---- */

typedef struct pack_job {
    const sd_weight *w;
    void *out;
} pack_job;

static void pack_range(void *arg, int64_t g0, int64_t g1, int32_t ith) {
    (void)ith;
    const pack_job *j = arg;
    sd_pack_groups(j->w->type, j->w->data, j->w->row_bytes, j->w->rows, j->w->cols, g0, g1, j->out);
}

/* Quantized weights the kernels in use run packed (sd_matmul_packed_available) get a
 * packed copy, made by the pool's threads; others stay mapped in place. */
static int cpu_prepare_weight(sd_backend *be, sd_weight *w, sd_error *err) {
    sd_backend_cpu *c = cpu_of(be);
    if (w->layout != SD_LAYOUT_ROWS || !sd_matmul_packed_available(w->type)) return SD_OK;
    size_t bytes = 0;
    if (sd_pack_bytes(w->type, w->rows, w->cols, &bytes) != 0)
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: packed weights [%lld, %lld] overflow",
                         (long long)w->rows, (long long)w->cols);
    if (c->n_packed == c->cap_packed) {
        const int32_t cap = c->cap_packed ? 2 * c->cap_packed : 64;
        big_mem *np = realloc(c->packed, (size_t)cap * sizeof *np);
        if (!np) return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (weight list)");
        c->packed = np;
        c->cap_packed = cap;
    }
    big_mem mem;
    if (big_alloc(bytes ? bytes : 64, &mem))
        return sd_errorf(err, SD_ERR_OOM,
                         "cpu backend: out of memory packing a %s [%lld, %lld] matrix (%zu bytes)",
                         sd_type_name((uint32_t)w->type), (long long)w->rows, (long long)w->cols,
                         bytes);
    void *p = mem.addr;
    const double t0 = sd_time_ms();
    pack_job j = {w, p};
    sd_pool_for(c->pool, (w->rows + SD_PACK_ROWS - 1) / SD_PACK_ROWS, 8, pack_range, &j);
    c->packed_ms += sd_time_ms() - t0;
    c->packed_bytes += bytes;
    c->packed[c->n_packed++] = mem;
    w->data = p;
    w->layout = SD_LAYOUT_PACKED;
    return SD_OK;
}

/* ---- matmul ---- */

/* One matmul_multi's work for the pool's tasks: n_w matrices of one input, each with
 * its own prepared activations; the work items are the 16-row groups (packed) or the
 * rows (GGUF rows) of matrix 0, then of matrix 1, ... */
typedef struct mm_job {
    const sd_weight *const *w;
    int32_t n_w;
    const float *x;
    int32_t n_tok;
    float *const *y;
    void *const *xq;
    int64_t end[SD_MATMUL_MULTI_MAX]; /* items of matrices 0..i, cumulative */
} mm_job;

/* The work items of the first n_rows rows of w (16-row groups when packed, else rows), and
 * the fewest a thread claims at once (sd_pool_for_guided's min_chunk). */
static int64_t mm_items_of(const sd_weight *w, int64_t n_rows) {
    return w->layout == SD_LAYOUT_PACKED ? (n_rows + SD_PACK_ROWS - 1) / SD_PACK_ROWS : n_rows;
}
static int64_t mm_min_items(const sd_weight *w) {
    return w->layout == SD_LAYOUT_PACKED ? 1 : SD_CPU_MIN_CHUNK_ROWS;
}

static void mm_prepare(void *arg, int32_t ith, int32_t nth) {
    const mm_job *j = arg;
    for (int32_t i = 0; i < j->n_w; i++) {
        int64_t t0, t1;
        sd_pool_split(j->n_tok, 1, ith, nth, &t0, &t1);
        sd_quantize_activations_rows(j->w[i]->type, j->x, j->n_tok, j->w[i]->cols, t0, t1,
                                     j->xq[i]);
    }
}

/* Items [a, b) of matrix i (relative to its first item). */
static void mm_run(const mm_job *j, int32_t i, int64_t a, int64_t b) {
    const sd_weight *w = j->w[i];
    if (w->layout == SD_LAYOUT_PACKED)
        sd_matmul_packed(w->type, w->data, w->rows, w->cols, j->xq[i], j->n_tok, j->y[i], w->rows,
                         a, b);
    else
        sd_matmul_rows(w->type, w->data, w->row_bytes, w->cols, j->xq[i], j->n_tok, j->y[i],
                       w->rows, a, b);
}

static void mm_items_range(void *arg, int64_t a, int64_t b, int32_t ith) {
    (void)ith;
    const mm_job *j = arg;
    int64_t start = 0;
    for (int32_t i = 0; i < j->n_w && a < b; i++) {
        const int64_t end = j->end[i];
        if (a < end) {
            const int64_t e = b < end ? b : end;
            mm_run(j, i, a - start, e - start);
            a = e;
        }
        start = end;
    }
}

static void matmul_run(sd_backend_cpu *c, const sd_weight *const *w, int32_t n_w, const float *x,
                       int32_t n_tok, float *const *y);

static void cpu_matmul_multi(sd_backend *be, const sd_weight *const *w, int32_t n_w, const float *x,
                             int32_t n_tok, float *const *y) {
    sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(n_w >= 1 && n_w <= SD_MATMUL_MULTI_MAX, "matmul_multi: bad matrix count");
    if (!c->profile) {
        matmul_run(c, w, n_w, x, n_tok, y);
        return;
    }
    for (int32_t i = 0; i < n_w; i++) { /* one by one: a time per weight type */
        const double t0 = sd_time_ms();
        matmul_run(c, w + i, 1, x, n_tok, y + i);
        const double dt = sd_time_ms() - t0;
        c->prof.ms[SD_PROF_MATMUL] += dt;
        c->prof.calls[SD_PROF_MATMUL]++;
        c->prof.matmul_ms[w[i]->type] += dt;
        c->prof.matmul_bytes[w[i]->type] += (double)w[i]->row_bytes * (double)w[i]->rows;
        c->prof.matmul_calls[w[i]->type]++;
    }
}

static void matmul_run(sd_backend_cpu *c, const sd_weight *const *w, int32_t n_w, const float *x,
                       int32_t n_tok, float *const *y) {
    mm_job j = {w, n_w, x, n_tok, y, c->xq, {0}};
    double work = 0.0;
    int64_t items = 0;
    for (int32_t i = 0; i < n_w; i++) {
        size_t need = 0;
        int rc = sd_activations_bytes(w[i]->type, n_tok, w[i]->cols, &need);
        (void)rc;
        (void)need;
        SD_CHECK(rc == 0, "matmul: bad activation row size");
        SD_CHECK(n_tok >= 1 && n_tok <= c->n_batch && w[i]->cols <= c->max_cols &&
                     need <= c->xq_bytes && w[i]->cols == w[0]->cols,
                 "matmul: shape exceeds the scratch sized at init");
        work += (double)w[i]->rows * (double)w[i]->cols * (double)n_tok;
        items += mm_items_of(w[i], w[i]->rows);
        j.end[i] = items;
    }
    if (c->n_threads == 1 || work < c->par_min_work) {
        mm_prepare(&j, 0, 1);
        mm_items_range(&j, 0, items, 0);
        return;
    }
    /* Activations prepared once per matrix (sd_quant.h layout), on the calling thread for
     * a few tokens, else token rows split over the threads; then the items handed out
     * dynamically in decreasing chunks (guided): the first ones long, so that the kernel's
     * prefetch lead runs over contiguous rows (16 fixed chunks a thread made the 5..17-token
     * passes 2-5% slower), the last ones short, so that a thread that shares its core with other
     * work (or starts late) takes fewer instead of holding up the others (one fixed slice a
     * thread was slower at load average ~3). docs/performance.md, eighth and thirteenth
     * rounds. Which thread computes a row never changes its value. */
    if (n_tok <= SD_CPU_PREP_INLINE_TOKENS)
        mm_prepare(&j, 0, 1);
    else
        sd_pool_run(c->pool, 0, mm_prepare, &j);
    sd_pool_for_guided(c->pool, items, mm_min_items(w[0]), mm_items_range, &j);
}

static void cpu_matmul(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok,
                       float *y) {
    cpu_matmul_multi(be, &w, 1, x, n_tok, &y);
}

/* ---- the greedy classifier: matmul + argmax (sd_backend_cpu_matmul_argmax) ---- */

typedef struct amax_best {
    float v;
    int64_t i; /* -1: no row seen yet */
    int nan;
    char pad[64 - sizeof(float) - sizeof(int64_t) - sizeof(int)]; /* one line a thread */
} amax_best;

typedef struct amax_job {
    const sd_weight *w;
    const void *xq;
    int64_t n_rows;
    sd_backend_cpu *c;
} amax_job;

/* Items [a, b) (16-row groups or rows) SD_CPU_ARGMAX_ROWS rows at a time into thread
 * ith's scratch; each scan keeps the first (lowest) index of its largest value, merged
 * into the thread's best with the tie going to the lower index. */
static void amax_range(void *arg, int64_t a, int64_t b, int32_t ith) {
    const amax_job *j = arg;
    const sd_weight *w = j->w;
    float *y = j->c->amax_rows + (size_t)ith * SD_CPU_ARGMAX_ROWS;
    amax_best *best = &j->c->amax[ith];
    const int packed = w->layout == SD_LAYOUT_PACKED;
    const int64_t per = packed ? SD_CPU_ARGMAX_ROWS / SD_PACK_ROWS : SD_CPU_ARGMAX_ROWS;
    for (int64_t s = a; s < b; s += per) {
        const int64_t e = b - s < per ? b : s + per;
        const int64_t r0 = packed ? s * SD_PACK_ROWS : s;
        int64_t r1 = packed ? e * SD_PACK_ROWS : e;
        if (r1 > j->n_rows) r1 = j->n_rows;
        if (packed) {
            size_t off = 0; /* bytes of s whole groups */
            int rc = sd_pack_bytes(w->type, r0, w->cols, &off);
            (void)rc;
            SD_CHECK(rc == 0, "matmul_argmax: packed offset");
            sd_matmul_packed(w->type, (const uint8_t *)w->data + off, r1 - r0, w->cols, j->xq, 1, y,
                             SD_CPU_ARGMAX_ROWS, 0, e - s);
        } else {
            sd_matmul_rows(w->type, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes,
                           w->row_bytes, w->cols, j->xq, 1, y, SD_CPU_ARGMAX_ROWS, 0, r1 - r0);
        }
        const int64_t n = r1 - r0;
        int64_t k = 0;
        int nan = 0;
        for (int64_t r = 0; r < n; r++) {
            nan |= y[r] != y[r];
            if (y[r] > y[k]) k = r;
        }
        best->nan |= nan;
        if (n > 0 && (best->i < 0 || y[k] > best->v || (y[k] == best->v && r0 + k < best->i))) {
            best->v = y[k];
            best->i = r0 + k;
        }
    }
}

int64_t sd_backend_cpu_matmul_argmax(sd_backend *be, const sd_weight *w, const float *x,
                                     int64_t n_rows) {
    sd_backend_cpu *c = cpu_of(be);
    const double t0 = prof_start(c);
    size_t need = 0;
    int rc = sd_activations_bytes(w->type, 1, w->cols, &need);
    (void)rc;
    SD_CHECK(rc == 0 && need <= c->xq_bytes && w->cols <= c->max_cols && n_rows >= 1 &&
                 n_rows <= w->rows,
             "matmul_argmax: shape exceeds the scratch sized at init");
    sd_quantize_activations_rows(w->type, x, 1, w->cols, 0, 1, c->xq[0]);
    for (int32_t t = 0; t < c->n_threads; t++) {
        c->amax[t].i = -1;
        c->amax[t].nan = 0;
    }
    amax_job j = {w, c->xq[0], n_rows, c};
    const int64_t items = mm_items_of(w, n_rows);
    if (c->n_threads == 1 || (double)n_rows * (double)w->cols < c->par_min_work) {
        amax_range(&j, 0, items, 0);
    } else {
        sd_pool_for_guided(c->pool, items, mm_min_items(w), amax_range, &j);
    }
    int64_t bi = -1;
    float bv = 0.0f;
    int nan = 0;
    for (int32_t t = 0; t < c->n_threads; t++) {
        const amax_best *b = &c->amax[t];
        nan |= b->nan;
        if (b->i >= 0 && (bi < 0 || b->v > bv || (b->v == bv && b->i < bi))) {
            bv = b->v;
            bi = b->i;
        }
    }
    if (c->profile) {
        const double dt = sd_time_ms() - t0;
        c->prof.ms[SD_PROF_MATMUL] += dt;
        c->prof.calls[SD_PROF_MATMUL]++;
        c->prof.matmul_ms[w->type] += dt;
        c->prof.matmul_bytes[w->type] += (double)w->row_bytes * (double)n_rows;
        c->prof.matmul_calls[w->type]++;
    }
    return nan ? -1 : bi;
}

typedef struct norm_job {
    const float *x, *w;
    int32_t n;
    float eps;
    float *y;
} norm_job;

/* The sums of squares of m rows (m constant: m independent chains, so m rows cost about
 * one row's latency), each in index order: ss[r] += x[i] * x[i], i ascending. */
static inline __attribute__((always_inline)) void sum_sq(const float *x, size_t stride, int32_t n,
                                                         const int m, float *ss) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    const float *x0 = x, *x1 = m > 1 ? x + stride : x, *x2 = m > 2 ? x + 2 * stride : x;
    const float *x3 = m > 3 ? x + 3 * stride : x;
    for (int32_t i = 0; i < n; i++) {
        s0 += x0[i] * x0[i];
        if (m > 1) s1 += x1[i] * x1[i];
        if (m > 2) s2 += x2[i] * x2[i];
        if (m > 3) s3 += x3[i] * x3[i];
    }
    ss[0] = s0;
    if (m > 1) ss[1] = s1;
    if (m > 2) ss[2] = s2;
    if (m > 3) ss[3] = s3;
}

/* Rows [t0, t1): y = x / sqrt(mean(x^2) + eps) * w, each row's sum in index order (up to 4
 * rows' sums at once: the same bits as one by one). */
static void norm_rows(void *arg, int64_t t0, int64_t t1, int32_t ith) {
    (void)ith;
    const norm_job *j = arg;
    const size_t stride = (size_t)j->n;
    for (int64_t t = t0; t < t1;) {
        const int64_t m = t1 - t >= 4 ? 4 : t1 - t;
        const float *xr = j->x + (size_t)t * stride;
        float ss[4];
        if (m == 4)
            sum_sq(xr, stride, j->n, 4, ss);
        else if (m == 3)
            sum_sq(xr, stride, j->n, 3, ss);
        else if (m == 2)
            sum_sq(xr, stride, j->n, 2, ss);
        else
            sum_sq(xr, stride, j->n, 1, ss);
        for (int64_t r = 0; r < m; r++) {
            const float *xa = xr + (size_t)r * stride;
            float *yr = j->y + (size_t)(t + r) * stride;
            const float scale = 1.0f / sqrtf(ss[r] / (float)j->n + j->eps);
            for (int32_t i = 0; i < j->n; i++)
                yr[i] = (xa[i] * scale) * j->w[i];
        }
        t += m;
    }
}

static void cpu_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                        float eps, float *y) {
    sd_backend_cpu *c = cpu_of(be);
    const double t0 = prof_start(c);
    norm_job j = {x, w, n, eps, y};
    if (c->n_threads == 1 || (double)n_tok * (double)n < c->par_min_work)
        norm_rows(&j, 0, n_tok, 0);
    else
        sd_pool_for(c->pool, n_tok, 0, norm_rows, &j);
    prof_end(c, SD_PROF_NORM, t0);
}

/* Pair i's rotation frequency: base^(-2i / n_rot). */
static float rope_freq(const sd_rope *r, int32_t i) {
    return powf(r->base, -(float)(2 * i) / (float)r->n_rot);
}

static void cpu_rope_op(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                        int32_t head_dim, const sd_rope *r) {
    (void)be;
    const size_t row = (size_t)n_head * (size_t)head_dim;
    const int32_t half = r->n_rot / 2;
    /* Offsets of the two elements of pair i: (2i, 2i+1) or (i, i + n_rot/2). */
    const size_t step = r->mode == SD_ROPE_NEOX ? 1 : 2;
    const size_t other = r->mode == SD_ROPE_NEOX ? (size_t)half : 1;
    /* pair i's frequency, the same for every token: computed once (up to 256 pairs) */
    float freqs[256];
    const int keep = half <= 256;
    for (int32_t i = 0; keep && i < half; i++)
        freqs[i] = rope_freq(r, i);
    for (int32_t t = 0; t < n_tok; t++) {
        const float pos = (float)(pos0 + t) * r->freq_scale;
        float *xr = x + (size_t)t * row;
        for (int32_t i = 0; i < half; i++) {
            const float freq = keep ? freqs[i] : rope_freq(r, i);
            float theta = pos * freq;
            if (r->factors) theta /= r->factors[i];
            const float cs = cosf(theta), sn = sinf(theta);
            for (int32_t h = 0; h < n_head; h++) {
                float *p = xr + (size_t)h * (size_t)head_dim + step * (size_t)i;
                const float x0 = p[0], x1 = p[other];
                p[0] = x0 * cs - x1 * sn;
                p[other] = x0 * sn + x1 * cs;
            }
        }
    }
}

static void cpu_add_bias_op(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n) {
    (void)be;
    for (int32_t t = 0; t < n_tok; t++) {
        float *yr = y + (size_t)t * (size_t)n;
        for (int32_t i = 0; i < n; i++)
            yr[i] += b[i];
    }
}

static void cpu_kv_store_op(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                            int32_t kv_dim, const float *k, const float *v) {
    const sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(kv_dim == sd_kv_dim(kv), "kv_store: kv_dim differs from the cache's");
    const sd_type t = sd_kv_type(kv);
    /* F16 through the attention level's conversion (F16C), the scalar one's bits */
    const att_store_f16_fn f16 = t == SD_TYPE_F16 ? c->att->store_f16 : NULL;
    for (int32_t tk = 0; tk < n_tok; tk++) {
        void *kd = sd_kv_k(kv, layer, pos0 + tk);
        void *vd = sd_kv_v(kv, layer, pos0 + tk);
        const float *ks = k + (size_t)tk * (size_t)kv_dim, *vs = v + (size_t)tk * (size_t)kv_dim;
        if (f16) {
            f16(ks, (uint16_t *)kd, kv_dim);
            f16(vs, (uint16_t *)vd, kv_dim);
        } else if (t != SD_TYPE_F32) { /* F16 rounded to nearest even, Q8_0 / Q4_0: the reference */
            sd_quantize_row(t, ks, kd, kv_dim);
            sd_quantize_row(t, vs, vd, kv_dim);
        } else {
            memcpy(kd, ks, (size_t)kv_dim * sizeof(float));
            memcpy(vd, vs, (size_t)kv_dim * sizeof(float));
        }
    }
}

typedef struct att_job {
    const sd_backend_cpu *c;
    const sd_att_kernels *ak;
    const float *q;
    sd_kv *kv;
    int32_t layer, pos0, n_head, n_head_kv, head_dim, group, n_blk;
    float scale;
    float *out;
    const int32_t *parent; /* attention_tree: [n_tok] (att_tree_items); NULL otherwise */
} att_job;

/* Items [i0, i1) of (token, KV head, head block); participant ith's score scratch. */
static void att_items(void *arg, int64_t i0, int64_t i1, int32_t ith) {
    const att_job *j = arg;
    const size_t scs = (size_t)j->c->n_ctx;
    float *sc = j->c->scores + (size_t)ith * (size_t)SD_ATT_HB * scs;
    float *tile = j->c->tiles + (size_t)ith * (size_t)SD_ATT_TILE * (size_t)j->c->max_cols;
    const int32_t group = j->group, n_blk = j->n_blk;
    for (int64_t it = i0; it < i1; it++) {
        const int32_t t = (int32_t)(it / ((int64_t)j->n_head_kv * n_blk));
        const int32_t r = (int32_t)(it % ((int64_t)j->n_head_kv * n_blk));
        const int32_t g = r / n_blk, h0 = g * group + (r % n_blk) * SD_ATT_HB;
        const int32_t nh = g * group + group - h0 < SD_ATT_HB ? g * group + group - h0 : SD_ATT_HB;
        const size_t off = ((size_t)t * (size_t)j->n_head + (size_t)h0) * (size_t)j->head_dim;
        const int32_t n_keys = j->pos0 + t + 1, w = j->c->window;
        const int32_t k0 = w > 0 && n_keys > w ? n_keys - w : 0; /* a sliding window */
        sd_cpu_attend_block(j->ak, j->q + off, nh, j->kv, j->layer, k0, n_keys, g, j->head_dim,
                            j->scale, sc, scs, tile, j->out + off);
    }
}

static void cpu_attention_op(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                             int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                             float *out) {
    sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(pos0 + n_tok <= c->n_ctx, "attention: more keys than the scratch sized at init");
    SD_CHECK(n_head_kv * head_dim == sd_kv_dim(kv), "attention: kv_dim differs from the cache's");
    const sd_att_kernels *ak = c->att;
    const int32_t group = n_head / n_head_kv;
    const int32_t n_blk = (group + SD_ATT_HB - 1) / SD_ATT_HB; /* head blocks per KV head */
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int64_t n_items = (int64_t)n_tok * n_head_kv * n_blk;
    const double work = (double)n_tok * n_head * (double)(pos0 + n_tok) * (double)head_dim * 2.0;
    att_job j = {c,         ak,       q,     kv,    layer, pos0, n_head,
                 n_head_kv, head_dim, group, n_blk, scale, out,  NULL};
    /* Dynamic, one item at a time: later tokens of a batch see more keys, and a thread may
     * start late. */
    if (c->n_threads == 1 || work < c->par_min_work)
        att_items(&j, 0, n_items, 0);
    else
        sd_pool_for(c->pool, n_items, 1, att_items, &j);
}

/* Items as att_items for a token tree (attention_tree): the keys of token t are the runs
 * [0, pos0), then its ancestors' and its own rows in ascending position (parent[] < t). */
static void att_tree_items(void *arg, int64_t i0, int64_t i1, int32_t ith) {
    const att_job *j = arg;
    const size_t scs = (size_t)j->c->n_ctx;
    float *sc = j->c->scores + (size_t)ith * (size_t)SD_ATT_HB * scs;
    float *tile = j->c->tiles + (size_t)ith * (size_t)SD_ATT_TILE * (size_t)j->c->max_cols;
    const int32_t group = j->group, n_blk = j->n_blk;
    for (int64_t it = i0; it < i1; it++) {
        const int32_t t = (int32_t)(it / ((int64_t)j->n_head_kv * n_blk));
        const int32_t r = (int32_t)(it % ((int64_t)j->n_head_kv * n_blk));
        const int32_t g = r / n_blk, h0 = g * group + (r % n_blk) * SD_ATT_HB;
        const int32_t nh = g * group + group - h0 < SD_ATT_HB ? g * group + group - h0 : SD_ATT_HB;
        const size_t off = ((size_t)t * (size_t)j->n_head + (size_t)h0) * (size_t)j->head_dim;
        /* the path root .. t, deepest first, then runs of adjacent rows, shallowest first */
        int32_t path[SD_MAX_TREE], n_path = 0;
        for (int32_t a = t; a >= 0 && n_path < SD_MAX_TREE; a = j->parent[a])
            path[n_path++] = a;
        int32_t run0[SD_MAX_TREE + 1], run_len[SD_MAX_TREE + 1], n_runs = 0;
        if (j->pos0 > 0) {
            run0[0] = 0;
            run_len[0] = j->pos0;
            n_runs = 1;
        }
        for (int32_t i = n_path - 1; i >= 0; i--) {
            const int32_t row = j->pos0 + path[i];
            if (n_runs > 0 && run0[n_runs - 1] + run_len[n_runs - 1] == row) {
                run_len[n_runs - 1]++;
            } else {
                run0[n_runs] = row;
                run_len[n_runs++] = 1;
            }
        }
        sd_cpu_attend_runs(j->ak, j->q + off, nh, j->kv, j->layer, run0, run_len, n_runs, g,
                           j->head_dim, j->scale, sc, scs, tile, j->out + off);
    }
}

static void cpu_attention_tree_op(sd_backend *be, const float *q, sd_kv *kv, int32_t layer,
                                  int32_t pos0, int32_t n_tok, const int32_t *parent,
                                  int32_t n_head, int32_t n_head_kv, int32_t head_dim, float *out) {
    sd_backend_cpu *c = cpu_of(be);
    SD_CHECK(pos0 + n_tok <= c->n_ctx, "attention: more keys than the scratch sized at init");
    SD_CHECK(n_tok <= SD_MAX_TREE, "attention_tree: more nodes than SD_MAX_TREE");
    SD_CHECK(c->window == 0, "attention_tree: a sliding window");
    SD_CHECK(n_head_kv * head_dim == sd_kv_dim(kv), "attention: kv_dim differs from the cache's");
    const int32_t group = n_head / n_head_kv;
    const int32_t n_blk = (group + SD_ATT_HB - 1) / SD_ATT_HB;
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int64_t n_items = (int64_t)n_tok * n_head_kv * n_blk;
    const double work = (double)n_tok * n_head * (double)(pos0 + n_tok) * (double)head_dim * 2.0;
    att_job j = {c,         c->att,   q,     kv,    layer, pos0, n_head,
                 n_head_kv, head_dim, group, n_blk, scale, out,  parent};
    if (c->n_threads == 1 || work < c->par_min_work)
        att_tree_items(&j, 0, n_items, 0);
    else
        sd_pool_for(c->pool, n_items, 1, att_tree_items, &j);
}

static void cpu_kv_copy_op(sd_backend *be, sd_kv *kv, int32_t layer, int32_t dst, int32_t src,
                           int32_t n_tok) {
    (void)be;
    SD_CHECK(dst <= src, "kv_copy: dst after src");
    const size_t rb = sd_kv_row_bytes(kv);
    for (int32_t i = 0; i < n_tok && dst != src; i++) {
        memmove(sd_kv_k(kv, layer, dst + i), sd_kv_k(kv, layer, src + i), rb);
        memmove(sd_kv_v(kv, layer, dst + i), sd_kv_v(kv, layer, src + i), rb);
    }
}

static void cpu_softmax_op(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
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

typedef struct swiglu_job {
    const float *g, *u;
    float *y;
    sd_cpu_glu_fn fn; /* swiglu_range's kernel (glu.h: the same bits); NULL: the loop below */
} swiglu_job;

static void swiglu_range(void *arg, int64_t i0, int64_t i1, int32_t ith) {
    (void)ith;
    const swiglu_job *j = arg;
    if (j->fn) {
        j->fn(j->g + i0, j->u + i0, j->y + i0, i1 - i0);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float gi = j->g[i];
        j->y[i] = (gi / (1.0f + expf(-gi))) * j->u[i];
    }
}

/* The SwiGLU kernel of the attention level in use (it follows SD_KERNELS and
 * sd_backend_cpu_set_kernels): AVX-512 or AVX2 (glu.h), else the scalar loop. */
static sd_cpu_glu_fn swiglu_kernel(const sd_backend_cpu *c) {
#if defined(__x86_64__)
    if (c->att == &sd_att_avx512) return sd_cpu_swiglu_avx512;
    if (c->att == &sd_att_avx2) return sd_cpu_swiglu_avx2;
#endif
    (void)c;
    return NULL;
}

static void cpu_swiglu_op(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_backend_cpu *c = cpu_of(be);
    swiglu_job j = {g, u, y, swiglu_kernel(c)};
    if (c->n_threads == 1 || (double)n < c->par_min_work)
        swiglu_range(&j, 0, n, 0);
    else
        sd_pool_for(c->pool, n, 0, swiglu_range, &j);
}

/* GELU, tanh approximation, times the up projection (gemma3's gated FFN). */
static void geglu_range(void *arg, int64_t i0, int64_t i1, int32_t ith) {
    (void)ith;
    const swiglu_job *j = arg;
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t i = i0; i < i1; i++) {
        const float gi = j->g[i];
        j->y[i] = 0.5f * gi * (1.0f + tanhf(c * gi * (1.0f + 0.044715f * gi * gi))) * j->u[i];
    }
}

static void cpu_geglu_op(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_backend_cpu *c = cpu_of(be);
    swiglu_job j = {g, u, y, NULL};
    if (c->n_threads == 1 || (double)n < c->par_min_work)
        geglu_range(&j, 0, n, 0);
    else
        sd_pool_for(c->pool, n, 0, geglu_range, &j);
}

static void cpu_scale_op(sd_backend *be, float *y, float sc, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] *= sc;
}

static void cpu_add_op(sd_backend *be, float *y, const float *x, int64_t n) {
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void cpu_copy_op(sd_backend *be, float *y, const float *x, int64_t n) {
    (void)be;
    memcpy(y, x, (size_t)n * sizeof(float));
}

/* ---- the ops table: every op through its timer (prof_start / prof_end) ---- */

static void cpu_get_rows(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                         float *y) {
    const double t0 = prof_start(cpu_of(be));
    cpu_get_rows_op(be, w, ids, n_tok, y);
    prof_end(cpu_of(be), SD_PROF_GET_ROWS, t0);
}

static void cpu_rope(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                     int32_t head_dim, const sd_rope *r) {
    const double t0 = prof_start(cpu_of(be));
    cpu_rope_op(be, x, n_tok, pos0, n_head, head_dim, r);
    prof_end(cpu_of(be), SD_PROF_ROPE, t0);
}

static void cpu_add_bias(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n) {
    const double t0 = prof_start(cpu_of(be));
    cpu_add_bias_op(be, y, b, n_tok, n);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_kv_store(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                         int32_t kv_dim, const float *k, const float *v) {
    const double t0 = prof_start(cpu_of(be));
    cpu_kv_store_op(be, kv, layer, pos0, n_tok, kv_dim, k, v);
    prof_end(cpu_of(be), SD_PROF_KV_STORE, t0);
}

static void cpu_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                          int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                          float *out) {
    const double t0 = prof_start(cpu_of(be));
    cpu_attention_op(be, q, kv, layer, pos0, n_tok, n_head, n_head_kv, head_dim, out);
    prof_end(cpu_of(be), SD_PROF_ATTENTION, t0);
}

static void cpu_attention_tree(sd_backend *be, const float *q, sd_kv *kv, int32_t layer,
                               int32_t pos0, int32_t n_tok, const int32_t *parent, int32_t n_head,
                               int32_t n_head_kv, int32_t head_dim, float *out) {
    const double t0 = prof_start(cpu_of(be));
    cpu_attention_tree_op(be, q, kv, layer, pos0, n_tok, parent, n_head, n_head_kv, head_dim, out);
    prof_end(cpu_of(be), SD_PROF_ATTENTION, t0);
}

static void cpu_kv_copy(sd_backend *be, sd_kv *kv, int32_t layer, int32_t dst, int32_t src,
                        int32_t n_tok) {
    const double t0 = prof_start(cpu_of(be));
    cpu_kv_copy_op(be, kv, layer, dst, src, n_tok);
    prof_end(cpu_of(be), SD_PROF_KV_STORE, t0);
}

static void cpu_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
    const double t0 = prof_start(cpu_of(be));
    cpu_softmax_op(be, x, n_rows, n);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    const double t0 = prof_start(cpu_of(be));
    cpu_swiglu_op(be, g, u, n, y);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_add(sd_backend *be, float *y, const float *x, int64_t n) {
    const double t0 = prof_start(cpu_of(be));
    cpu_add_op(be, y, x, n);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_copy(sd_backend *be, float *y, const float *x, int64_t n) {
    const double t0 = prof_start(cpu_of(be));
    cpu_copy_op(be, y, x, n);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_geglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    const double t0 = prof_start(cpu_of(be));
    cpu_geglu_op(be, g, u, n, y);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

static void cpu_scale(sd_backend *be, float *y, float sc, int64_t n) {
    const double t0 = prof_start(cpu_of(be));
    cpu_scale_op(be, y, sc, n);
    prof_end(cpu_of(be), SD_PROF_ELEMENTWISE, t0);
}

/* The window of the following attention calls (the scores scratch is sized for n_ctx
 * keys, which bounds any window). */
static void cpu_set_window(sd_backend *be, int32_t window) {
    cpu_of(be)->window = window > 0 ? window : 0;
}

static const sd_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_from_host = cpu_buffer_from_host,
    .buffer_free = cpu_buffer_free,
    .write = cpu_write,
    .read = cpu_read,
    .sync = cpu_sync,
    .supports_type = cpu_supports_type,
    .prepare_weight = cpu_prepare_weight,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add_bias = cpu_add_bias,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .softmax = cpu_softmax,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .copy = cpu_copy,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .set_window = cpu_set_window,
    .attention_tree = cpu_attention_tree,
    .kv_copy = cpu_kv_copy,
};

int sd_backend_cpu_init(const sd_backend_params *p, sd_backend **out, sd_error *err) {
    *out = NULL;
    if (!p || p->n_threads < 0 || p->n_batch < 1 || p->max_cols < 1 || p->n_ctx < 1 ||
        p->window < 0)
        return sd_errorf(err, SD_ERR_ARG, "cpu backend: bad parameters");
    sd_backend_cpu *other = NULL;
    if (p->share_threads) {
        if (p->share_threads->device != SD_DEVICE_CPU)
            return sd_errorf(err, SD_ERR_ARG, "cpu backend: threads shared with a %s backend",
                             sd_device_name(p->share_threads->device));
        other = cpu_of(p->share_threads);
    }
    int32_t nt = other ? other->n_threads : p->n_threads ? p->n_threads : sd_n_cores();
    if (nt > SD_CPU_MAX_THREADS) nt = SD_CPU_MAX_THREADS;
    /* Prepared activations: the largest sd_activations_bytes over the weight types for
     * n_batch rows of up to max_cols. */
    size_t xq_bytes = 0, sc_len, sc_bytes, tile_bytes;
    if (sd_activations_bytes_max(p->n_batch, p->max_cols, &xq_bytes) != 0)
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: scratch size overflows");
    if (sd_mul_size((size_t)nt * SD_ATT_HB, (size_t)p->n_ctx, &sc_len) ||
        sd_mul_size(sc_len, sizeof(float), &sc_bytes) ||
        sd_mul_size((size_t)nt * SD_ATT_TILE * sizeof(float), (size_t)p->max_cols, &tile_bytes))
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: scratch size overflows");
    sd_backend_cpu *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->base.caps.host_memory = 1;
    c->base.device = SD_DEVICE_CPU;
    c->n_threads = nt;
    c->n_batch = p->n_batch;
    c->max_cols = p->max_cols;
    c->window = p->window;
    c->n_ctx = p->n_ctx;
    c->par_min_work = SD_CPU_PAR_MIN_WORK;
    const char *env = getenv("SD_CPU_PAR_MIN_WORK");
    if (env && *env) {
        char *end = NULL;
        double v = strtod(env, &end);
        if (end && *end == '\0' && v >= 0.0) c->par_min_work = v;
    }
    c->att = sd_cpu_att_pick();
    c->xq_bytes = xq_bytes;
    int xq_ok = 1;
    for (int i = 0; i < SD_MATMUL_MULTI_MAX; i++)
        if (posix_memalign(&c->xq[i], 64, xq_bytes) != 0) {
            c->xq[i] = NULL;
            xq_ok = 0;
        }
    void *sc = NULL, *tl = NULL;
    if (posix_memalign(&sc, 64, sc_bytes) != 0) sc = NULL;
    c->scores = sc;
    if (posix_memalign(&tl, 64, tile_bytes) != 0) tl = NULL;
    c->tiles = tl;
    c->amax = calloc((size_t)nt, sizeof *c->amax);
    void *ar = NULL;
    if (posix_memalign(&ar, 64, (size_t)nt * SD_CPU_ARGMAX_ROWS * sizeof(float)) != 0) ar = NULL;
    c->amax_rows = ar;
    if (!xq_ok || !c->scores || !c->tiles || !c->amax || !c->amax_rows) {
        cpu_free(&c->base);
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory (%zu + %zu bytes)", xq_bytes,
                         sc_bytes);
    }
    if (other) {
        c->share = other->share;
        atomic_fetch_add(&c->share->refs, 1);
        c->pool = c->share->pool;
        *out = &c->base;
        return SD_OK;
    }
    pool_share *sh = calloc(1, sizeof *sh);
    if (!sh) {
        cpu_free(&c->base);
        return sd_errorf(err, SD_ERR_OOM, "cpu backend: out of memory");
    }
    sd_pool_params pp = sd_pool_default_params();
    pp.n_threads = nt;
    /* The pool's back-off (pool.h) only when asked: it cut the wake-up calls under load
     * but showed no wall gain on the loaded machine it was tried on (docs/performance.md). */
    const char *bo = getenv("SD_CPU_POOL_BACKOFF");
    pp.backoff = bo && !strcmp(bo, "1");
    int rc = sd_pool_init(&pp, &sh->pool, err);
    if (rc) {
        free(sh);
        cpu_free(&c->base);
        return sd_error_prefix(err, rc, "cpu backend: thread pool");
    }
    atomic_init(&sh->refs, 1);
    c->share = sh;
    c->pool = sh->pool;
    *out = &c->base;
    return SD_OK;
}

void sd_backend_cpu_packed_stats(const sd_backend *be, int32_t *n, size_t *bytes, double *ms) {
    const sd_backend_cpu *c = (const sd_backend_cpu *)be;
    *n = c->n_packed;
    *bytes = c->packed_bytes;
    *ms = c->packed_ms;
}

void sd_backend_cpu_pool_counts(const sd_backend *be, sd_cpu_pool_counts *out) {
    sd_pool_stats st;
    sd_pool_stats_get(((const sd_backend_cpu *)be)->pool, &st);
    out->runs = st.runs;
    out->worker_sleeps = st.worker_sleeps;
    out->caller_sleeps = st.caller_sleeps;
    out->wakes = st.wakes;
    out->kept = st.kept;
}

int32_t sd_backend_cpu_n_threads(const sd_backend *be) {
    return ((const sd_backend_cpu *)be)->n_threads;
}

const char *sd_backend_cpu_kernels(const sd_backend *be) {
    return ((const sd_backend_cpu *)be)->att->name;
}

int sd_backend_cpu_set_kernels(sd_backend *be, const char *name) {
    const sd_att_kernels *k = sd_cpu_att_by_name(name);
    if (!k) return -1;
    cpu_of(be)->att = k;
    return 0;
}
