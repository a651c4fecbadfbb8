/*
 * Benchmark (and TSan stress driver) for the CPU backend's thread pool
 * (runtime/backend/cpu/pool.h) against OpenMP on the same loop.
 *
 * A job is one dot product of two float vectors of KB KiB together, split in contiguous
 * slices over the threads (sd_pool_split), each slice summed by its thread and the
 * partials added by the caller: the shape of one decode op (a matrix-vector product
 * split by rows), at sizes from "sync overhead only" (16 KiB) to "an op of a 1B-class
 * model" (4 MiB, beyond L2). Many jobs back to back; the figure is microseconds per job
 * (median over batches, and the best batch).
 *
 *   pool_bench --impl serial|pool|omp [--threads T] [--kb KB] [--jobs N] [--batches B]
 *              [--spin US] [--split S]
 *   --split S  pool only: S tasks per thread (default 1: one contiguous slice each; S > 1
 *              lets a thread that is on time take over more of a late thread's work)
 *   pool_bench --stress       correctness under many threads and tiny jobs (exit 1 on a
 *                             wrong result): the TSan run of scripts/pool_bench.sh tsan
 * OpenMP's wait policy comes from the environment (OMP_WAIT_POLICY, GOMP_SPINCOUNT), so
 * scripts/pool_bench.sh runs the binary once per policy. Output: one JSON object a line.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "runtime/backend/cpu/pool.h"

#define MAX_T     64
#define MAX_PARTS 1024

typedef struct dot_job {
    const float *x, *y;
    int64_t n;
    double part[MAX_PARTS];
} dot_job;

static double dot_range(const float *x, const float *y, int64_t b, int64_t e) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        s0 += x[i] * y[i];
        s1 += x[i + 1] * y[i + 1];
        s2 += x[i + 2] * y[i + 2];
        s3 += x[i + 3] * y[i + 3];
        s4 += x[i + 4] * y[i + 4];
        s5 += x[i + 5] * y[i + 5];
        s6 += x[i + 6] * y[i + 6];
        s7 += x[i + 7] * y[i + 7];
    }
    for (; i < e; i++)
        s0 += x[i] * y[i];
    return (double)((s0 + s1) + (s2 + s3)) + (double)((s4 + s5) + (s6 + s7));
}

static void dot_task(void *arg, int32_t ith, int32_t nth) {
    dot_job *j = arg;
    int64_t b, e;
    sd_pool_split(j->n, 64, ith, nth, &b, &e);
    j->part[ith] = dot_range(j->x, j->y, b, e);
}

static double finish(const dot_job *j, int32_t nth) {
    double s = 0;
    for (int32_t i = 0; i < nth; i++)
        s += j->part[i];
    return s;
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- stress (TSan) */

typedef struct stress_job {
    _Atomic int32_t calls[SD_POOL_MAX_TASKS];
    int64_t out[SD_POOL_MAX_TASKS];
} stress_job;

static void stress_task(void *arg, int32_t ith, int32_t nth) {
    stress_job *j = arg;
    atomic_fetch_add(&j->calls[ith], 1);
    j->out[ith] = (int64_t)ith * nth; /* plain write: published by the run */
}

typedef struct nest_arg {
    sd_pool *pool;
    stress_job inner[3];
} nest_arg;

static void nest_task(void *arg, int32_t ith, int32_t nth) {
    (void)nth;
    nest_arg *a = arg;
    sd_pool_run(a->pool, 4, stress_task, &a->inner[ith]);
}

static int check(stress_job *j, int32_t nth) {
    for (int32_t i = 0; i < nth; i++)
        if (atomic_load(&j->calls[i]) != 1 || j->out[i] != (int64_t)i * nth) return 1;
    return 0;
}

static void range_fn(void *arg, int64_t b, int64_t e, int32_t ith) {
    (void)ith;
    _Atomic int32_t *hits = arg;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add_explicit(&hits[i], 1, memory_order_relaxed);
}

typedef struct caller_arg {
    sd_pool *pool;
    int bad;
} caller_arg;

static void *caller_main(void *p) {
    caller_arg *c = p;
    stress_job *j = malloc(sizeof *j);
    for (int r = 0; j && r < 3000; r++) {
        const int32_t nth = 1 + r % 5;
        memset(j, 0, sizeof *j);
        sd_pool_run(c->pool, nth, stress_task, j);
        c->bad += check(j, nth);
    }
    free(j);
    return NULL;
}

static int stress(void) {
    static const int32_t threads[] = {1, 2, 3, 7};
    static const int32_t spins[] = {0, 50};
    stress_job *j = malloc(sizeof *j);
    nest_arg *na = malloc(sizeof *na);
    _Atomic int32_t *hits = malloc(1000 * sizeof *hits);
    if (!j || !na || !hits) return 1;
    int bad = 0;
    long runs = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t s = 0; s < 2; s++) {
            sd_pool_params pp = {threads[a], spins[s], 1};
            sd_pool *pool = NULL;
            sd_error err = {0};
            if (sd_pool_init(&pp, &pool, &err)) {
                fprintf(stderr, "pool_bench: %s\n", err.msg);
                return 1;
            }
            for (int r = 0; r < 20000; r++, runs++) {
                const int32_t nth = 1 + r % 9;
                memset(j->calls, 0, (size_t)nth * sizeof j->calls[0]);
                sd_pool_run(pool, nth, stress_task, j);
                bad += check(j, nth);
            }
            for (int r = 0; r < 200; r++, runs++) {
                memset(na, 0, sizeof *na);
                na->pool = pool;
                sd_pool_run(pool, 3, nest_task, na);
                for (int k = 0; k < 3; k++)
                    bad += check(&na->inner[k], 4);
                const int64_t n = 1 + r * 4, chunk = r % 7;
                for (int64_t i = 0; i < n; i++)
                    atomic_init(&hits[i], 0);
                sd_pool_for(pool, n, chunk, range_fn, (void *)hits);
                for (int64_t i = 0; i < n; i++)
                    bad += atomic_load(&hits[i]) != 1;
            }
            caller_arg ca[2] = {{pool, 0}, {pool, 0}};
            pthread_t th[2];
            for (int i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, caller_main, &ca[i]);
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
            bad += ca[0].bad + ca[1].bad;
            sd_pool_free(pool);
        }
    free(j);
    free(na);
    free(hits);
    printf("{\"mode\": \"stress\", \"runs\": %ld, \"wrong\": %d}\n", runs, bad);
    return bad != 0;
}

/* ---------------------------------------------------------------- benchmark */

int main(int argc, char **argv) {
    const char *impl = "pool";
    int32_t threads = 2, spin = -1, split = 1;
    long kb = 256, jobs = 2000, batches = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--stress")) return stress();
        if (!v) {
            fprintf(stderr, "pool_bench: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--impl"))
            impl = v;
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--kb"))
            kb = atol(v);
        else if (!strcmp(a, "--jobs"))
            jobs = atol(v);
        else if (!strcmp(a, "--batches"))
            batches = atol(v);
        else if (!strcmp(a, "--spin"))
            spin = atoi(v);
        else if (!strcmp(a, "--split"))
            split = atoi(v);
        else {
            fprintf(stderr, "pool_bench: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (threads < 1 || threads > MAX_T || kb < 1 || jobs < 1 || batches < 1 || split < 1 ||
        threads * split > MAX_PARTS) {
        fprintf(stderr, "pool_bench: bad arguments\n");
        return 2;
    }
    const int64_t n = (int64_t)kb * 1024 / 2 / (int64_t)sizeof(float);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double *per = malloc((size_t)batches * sizeof *per);
    if (!x || !y || !per) return 1;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)((i * 7) % 13) * 0.125f;
        y[i] = (float)((i * 5) % 11) * 0.25f;
    }
    const double want = dot_range(x, y, 0, n); /* not the same split: compared loosely */
    sd_pool *pool = NULL;
    if (!strcmp(impl, "pool")) {
        sd_pool_params pp = sd_pool_default_params();
        pp.n_threads = threads;
        if (spin >= 0) pp.spin_us = spin;
        sd_error err = {0};
        if (sd_pool_init(&pp, &pool, &err)) {
            fprintf(stderr, "pool_bench: %s\n", err.msg);
            return 1;
        }
        spin = pp.spin_us;
    } else if (!strcmp(impl, "serial")) {
        threads = 1;
#ifdef _OPENMP
    } else if (!strcmp(impl, "omp")) {
#endif
    } else {
        fprintf(stderr, "pool_bench: unknown --impl %s\n", impl);
        return 2;
    }
    dot_job j = {x, y, n, {0}};
    const int32_t parts = pool ? threads * split : threads;
    double got = 0;
    for (long b = -1; b < batches; b++) { /* batch -1: warm-up */
        const double t0 = sd_time_ms();
        for (long k = 0; k < jobs; k++) {
            if (pool) {
                sd_pool_run(pool, parts, dot_task, &j);
            } else if (threads == 1) {
                dot_task(&j, 0, 1);
            } else {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
                dot_task(&j, omp_get_thread_num(), omp_get_num_threads());
#endif
            }
            got = finish(&j, parts);
        }
        if (b >= 0) per[b] = (sd_time_ms() - t0) * 1000.0 / (double)jobs;
    }
    qsort(per, (size_t)batches, sizeof *per, cmp_dbl);
    const char *policy = getenv("OMP_WAIT_POLICY");
    printf("{\"impl\": \"%s\", \"threads\": %d, \"kb\": %ld, \"jobs\": %ld, \"batches\": %ld, "
           "\"spin_us\": %d, \"split\": %d, \"omp_wait_policy\": \"%s\", \"us_per_job\": %.3f, "
           "\"us_per_job_best\": %.3f, \"ok\": %s}\n",
           impl, threads, kb, jobs, batches, pool ? spin : -1, pool ? split : 1,
           !strcmp(impl, "omp") ? (policy ? policy : "default") : "-", per[batches / 2], per[0],
           got > 0.999 * want && got < 1.001 * want ? "true" : "false");
    sd_pool_free(pool);
    free(x);
    free(y);
    free(per);
    return 0;
}
