/*
 * The memory roof of `specdec bench`: the best streaming read this machine does, the
 * figure decode (which streams every weight once per token) is measured against.
 *
 * Method (each step is there because leaving it out measured low on some machine):
 *  - one buffer of M MiB (default 2048, far beyond any last-level cache), mapped
 *    anonymously with transparent huge pages requested (madvise; fewer TLB misses;
 *    ignored where THP is off), first touched by the thread that will read each part;
 *  - T threads (pthreads, the caller is thread 0), thread i reads its own contiguous
 *    slice [i M/T, (i+1) M/T) in address order;
 *  - wide loads chosen at run time: AVX-512 (64 B) when the CPU and OS support it, else
 *    AVX2 (32 B), else 64-bit scalar; 8 loads per iteration into 4 independent
 *    accumulators (integer adds: 1-cycle latency, so the adds never limit the loads),
 *    the sum kept in a volatile sink so no load can be dropped;
 *  - a pass is timed from a barrier that all threads leave together to the barrier
 *    after the slowest thread's last load; best of N passes (a shared machine only ever
 *    makes a pass slower), the median reported beside it.
 * GB/s = 1e9 bytes per second. scripts/roof_check.sh compares it with a plain
 * one-accumulator AVX2 sum over 2 GiB (scripts/roof_plain.c); the probe must not be
 * below that.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tools/tools.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef uint64_t (*read_fn)(const unsigned char *p, size_t bytes);

/* 64-bit scalar: 8 loads (64 B) per iteration, 4 accumulators; bytes % 64 == 0. */
static uint64_t read_scalar(const unsigned char *p, size_t bytes) {
    const uint64_t *v = (const uint64_t *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < bytes / 8; i += 8) {
        a0 += v[i] + v[i + 4];
        a1 += v[i + 1] + v[i + 5];
        a2 += v[i + 2] + v[i + 6];
        a3 += v[i + 3] + v[i + 7];
    }
    return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
/* AVX2: 8 x 32 B loads (256 B, 4 cache lines) per iteration; bytes % 256 == 0. */
__attribute__((target("avx2"))) static uint64_t read_avx2(const unsigned char *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < bytes; i += 256) {
        const __m256i *v = (const __m256i *)(p + i);
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + 0));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + 1));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + 2));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + 3));
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + 4));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + 5));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + 6));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + 7));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, a0);
    return o[0] + o[1] + o[2] + o[3];
}

/* AVX-512: 8 x 64 B loads (512 B, 8 cache lines) per iteration; bytes % 512 == 0. */
__attribute__((target("avx512f"))) static uint64_t read_avx512(const unsigned char *p,
                                                               size_t bytes) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < bytes; i += 512) {
        const __m512i *v = (const __m512i *)(p + i);
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(v + 0));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(v + 1));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(v + 2));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(v + 3));
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(v + 4));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(v + 5));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(v + 6));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(v + 7));
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    /* Not _mm512_reduce_add_epi64: GCC's version adds signed 64-bit lanes, and the sum of
     * arbitrary words wraps (undefined behaviour that UBSan reports). */
    uint64_t o[8];
    _mm512_storeu_si512((void *)o, a0);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
#endif

#define ROOF_GRAIN 4096 /* slice boundaries: page-aligned, a multiple of every step */

/* The widest kernel this CPU runs; name via *name. kernel: NULL (best) or a name. */
static read_fn pick_kernel(const char *want, const char **name) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector state. */
    if ((!want || !strcmp(want, "avx512")) && __builtin_cpu_supports("avx512f")) {
        *name = "avx512";
        return read_avx512;
    }
    if ((!want || !strcmp(want, "avx2")) && __builtin_cpu_supports("avx2")) {
        *name = "avx2";
        return read_avx2;
    }
#endif
    if (!want || !strcmp(want, "scalar")) {
        *name = "scalar";
        return read_scalar;
    }
    return NULL;
}

typedef struct roof_run roof_run;
typedef struct roof_thread {
    roof_run *run;
    int32_t id;
    pthread_t th;
    uint64_t sum;
} roof_thread;

struct roof_run {
    unsigned char *buf;
    size_t bytes;
    int32_t threads, passes;
    read_fn fn;
    pthread_barrier_t bar;
    pthread_mutex_t gate_mu; /* the start gate: 0 wait, 1 go, -1 abort (a thread failed */
    pthread_cond_t gate_cv;  /* to start: the others return without touching anything) */
    int gate;
    roof_thread *t;
    double *pass_s; /* [passes], written by thread 0 */
};

static void slice(const roof_run *r, int32_t i, size_t *b, size_t *n) {
    const size_t units = r->bytes / ROOF_GRAIN;
    const size_t lo = units * (size_t)i / (size_t)r->threads;
    const size_t hi = units * (size_t)(i + 1) / (size_t)r->threads;
    *b = lo * ROOF_GRAIN;
    *n = (hi - lo) * ROOF_GRAIN;
}

/* Thread i: touch its slice (first touch places the pages), then the timed passes. */
static void roof_body(roof_thread *t) {
    roof_run *r = t->run;
    size_t b, n;
    slice(r, t->id, &b, &n);
    for (size_t off = 0; off < n; off += 64)
        r->buf[b + off] = (unsigned char)(off * 131u >> 6);
    for (int32_t p = -1; p < r->passes; p++) { /* pass -1: untimed warm-up */
        pthread_barrier_wait(&r->bar);
        const double t0 = t->id == 0 ? sd_time_ms() : 0.0;
        t->sum += r->fn(r->buf + b, n);
        pthread_barrier_wait(&r->bar);
        if (t->id == 0 && p >= 0) r->pass_s[p] = (sd_time_ms() - t0) * 1e-3;
    }
}

static void *roof_main(void *p) {
    roof_thread *t = p;
    roof_run *r = t->run;
    pthread_mutex_lock(&r->gate_mu);
    while (r->gate == 0)
        pthread_cond_wait(&r->gate_cv, &r->gate_mu);
    const int go = r->gate > 0;
    pthread_mutex_unlock(&r->gate_mu);
    if (go) roof_body(t);
    return NULL;
}

static void open_gate(roof_run *r, int value) {
    pthread_mutex_lock(&r->gate_mu);
    r->gate = value;
    pthread_cond_broadcast(&r->gate_cv);
    pthread_mutex_unlock(&r->gate_mu);
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int sd_cli_roof_measure(int64_t mib, int32_t threads, int32_t passes, const char *kernel,
                        sd_cli_roof *out, sd_error *err) {
    memset(out, 0, sizeof *out);
    if (mib < 1 || mib > (INT64_C(1) << 24) || threads < 1 || threads > 4096 || passes < 1)
        return sd_errorf(err, SD_ERR_ARG,
                         "roof: expected 1 <= MiB <= 2^24, 1 <= threads <= 4096, passes >= 1 "
                         "(found %lld, %d, %d)",
                         (long long)mib, (int)threads, (int)passes);
    const char *kname = NULL;
    read_fn fn = pick_kernel(kernel, &kname);
    if (!fn)
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "roof: kernel '%s' is not supported by this CPU",
                         kernel ? kernel : "?");
    roof_run r = {0};
    r.bytes = (size_t)mib << 20;
    r.threads = threads;
    r.passes = passes;
    r.fn = fn;
    int rc = SD_OK, bar = 0;
    int32_t started = 0;
    r.buf = mmap(NULL, r.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r.buf == MAP_FAILED) {
        r.buf = NULL;
        return sd_errorf(err, SD_ERR_OOM, "roof: cannot map %lld MiB: %s", (long long)mib,
                         strerror(errno));
    }
#ifdef MADV_HUGEPAGE
    madvise(r.buf, r.bytes, MADV_HUGEPAGE); /* a hint: fine to be refused */
#endif
    r.t = calloc((size_t)threads, sizeof *r.t);
    r.pass_s = calloc((size_t)passes, sizeof *r.pass_s);
    if (!r.t || !r.pass_s) {
        rc = sd_errorf(err, SD_ERR_OOM, "roof: out of memory");
        goto done;
    }
    if (pthread_barrier_init(&r.bar, NULL, (unsigned)threads)) {
        rc = sd_errorf(err, SD_ERR_IO, "roof: cannot create a barrier");
        goto done;
    }
    bar = 1;
    pthread_mutex_init(&r.gate_mu, NULL);
    pthread_cond_init(&r.gate_cv, NULL);
    for (int32_t i = 0; i < threads; i++) {
        r.t[i].run = &r;
        r.t[i].id = i;
    }
    for (started = 1; started < threads; started++)
        if (pthread_create(&r.t[started].th, NULL, roof_main, &r.t[started])) break;
    open_gate(&r, started == threads ? 1 : -1);
    if (started < threads) {
        for (int32_t i = 1; i < started; i++)
            pthread_join(r.t[i].th, NULL);
        rc = sd_errorf(err, SD_ERR_IO, "roof: cannot start thread %d of %d", (int)started + 1,
                       (int)threads);
        goto done;
    }
    roof_body(&r.t[0]);
    for (int32_t i = 1; i < threads; i++)
        pthread_join(r.t[i].th, NULL);
    {
        volatile uint64_t sink = 0;
        for (int32_t i = 0; i < threads; i++)
            sink += r.t[i].sum;
        (void)sink;
    }
    qsort(r.pass_s, (size_t)passes, sizeof *r.pass_s, cmp_dbl);
    out->threads = threads;
    out->passes = passes;
    out->bytes = r.bytes;
    out->kernel = kname;
    out->gbps = (double)r.bytes / r.pass_s[0] / 1e9;
    out->gbps_median = (double)r.bytes / r.pass_s[passes / 2] / 1e9;
done:
    if (bar) {
        pthread_barrier_destroy(&r.bar);
        pthread_mutex_destroy(&r.gate_mu);
        pthread_cond_destroy(&r.gate_cv);
    }
    free(r.t);
    free(r.pass_s);
    if (r.buf) munmap(r.buf, r.bytes);
    return rc;
}
