/*
 * The CPU backend's thread pool: see pool.h for the contract.
 *
 * Protocol (all shared state is C11 atomics; the futex calls only put threads to sleep,
 * every happens-before edge comes from the atomics):
 *  - A run of generation g (1, 2, ...; only the thread holding `busy` publishes) sets
 *    `pending` = nth, writes the job (fn, arg, nth) under a sequence lock (`seq` odd
 *    while writing, 2g when done), bumps the futex word `wake` and wakes sleepers.
 *  - A participant claims task i by raising claim[i] from below g to g (CAS). Claims only
 *    grow, and a run returns only after all its tasks were claimed and finished, so a
 *    thread holding a stale snapshot (generation g' < g) can never claim anything: every
 *    task of g' carries a claim >= g'. Whoever claims a task runs it and decrements
 *    `pending`; the one that brings it to 0 wakes the caller if it sleeps.
 *  - Sleeping workers and a sleeping caller use the Dekker pattern with seq_cst atomics
 *    (announce, then re-check, then FUTEX_WAIT on the value re-checked), so no wake-up
 *    is lost.
 */
#include "runtime/backend/cpu/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CACHE_LINE 64
/* The back-off of sd_pool_run (pool.h): misses in a row, first and longest back-off. */
#define SD_POOL_MISSES         4
#define SD_POOL_BACKOFF_NS     ((int64_t)1000000)
#define SD_POOL_BACKOFF_MAX_NS ((int64_t)16000000)

typedef struct pool_worker {
    sd_pool *pool;
    int32_t self; /* 1 .. n_threads - 1 */
} pool_worker;

struct sd_pool {
    /* Immutable after init. */
    int32_t n_threads, spin_us, backoff;
    pthread_t *threads;      /* [n_threads - 1] */
    pool_worker *workers;    /* [n_threads - 1] */
    _Atomic uint64_t *claim; /* [SD_POOL_MAX_TASKS]: generation that claimed task i */
    uint64_t gen;            /* last generation published; only the `busy` holder */

    /* The job, under the sequence lock. */
    alignas(CACHE_LINE) _Atomic uint64_t seq;
    _Atomic(sd_pool_task) fn; /* NULL: quit */
    _Atomic(void *) arg;
    _Atomic int32_t nth;

    alignas(CACHE_LINE) _Atomic uint32_t wake; /* futex word of sleeping workers */
    _Atomic int32_t n_sleep;                   /* workers asleep or about to be */

    alignas(CACHE_LINE) _Atomic uint32_t pending; /* tasks not finished; caller's futex */
    _Atomic int32_t caller_sleep;

    alignas(CACHE_LINE) _Atomic int32_t busy; /* a run is in progress */
    /* Back-off (the `busy` holder's): runs in a row whose tasks no worker claimed, the
     * clock until which runs stay on the caller (0: none), the next back-off. */
    int32_t missed;
    int64_t keep_until_ns, backoff_ns;
    alignas(CACHE_LINE) _Atomic int32_t worker_claims; /* tasks of this run workers claimed */

    /* sd_pool_stats; runs and caller_sleeps written by the `busy` holder, worker_sleeps by
     * the workers, wakes by the publisher. */
    alignas(CACHE_LINE) _Atomic int64_t n_runs, n_caller_sleeps, n_wakes, n_kept;
    alignas(CACHE_LINE) _Atomic int64_t n_worker_sleeps;
};

static void count(_Atomic int64_t *c) {
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---------------------------------------------------------------- waiting */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    /* Returns at once (EAGAIN) when *addr != val; spurious returns are fine: callers loop. */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Spin until cond(pool, user) holds or spin_ns passed; returns whether it holds. */
static int spin_until(const sd_pool *pool, int (*cond)(const sd_pool *, uint64_t), uint64_t user,
                      int64_t spin_ns) {
    if (cond(pool, user)) return 1;
    if (spin_ns <= 0) return 0;
    const int64_t deadline = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 16; i++) {
            cpu_relax();
            if (cond(pool, user)) return 1;
        }
        if (now_ns() >= deadline) return 0;
    }
}

/* ---------------------------------------------------------------- running tasks */

/* Claim task i of generation g; run it when the claim succeeds. */
static void try_task(sd_pool *pool, uint64_t g, sd_pool_task fn, void *arg, int32_t i, int32_t nth,
                     int32_t self) {
    uint64_t v = atomic_load_explicit(&pool->claim[i], memory_order_relaxed);
    if (v >= g) return;
    if (!atomic_compare_exchange_strong_explicit(&pool->claim[i], &v, g, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return;
    if (self != 0) atomic_fetch_add_explicit(&pool->worker_claims, 1, memory_order_relaxed);
    fn(arg, i, nth);
    if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleep))
        futex_wake(&pool->pending, 1);
}

/* Participant `self` of a run: the tasks offered to it (self, self + T, ...), then any
 * task not claimed yet. */
static void work(sd_pool *pool, uint64_t g, sd_pool_task fn, void *arg, int32_t nth, int32_t self) {
    const int32_t t = pool->n_threads;
    for (int32_t i = self; i < nth; i += t)
        try_task(pool, g, fn, arg, i, nth, self);
    for (int32_t k = 1; k < nth; k++) {
        int32_t i = self + k;
        if (i >= nth) i -= nth;
        if (i % t != self) try_task(pool, g, fn, arg, i, nth, self);
    }
}

/* ---------------------------------------------------------------- workers */

typedef struct job_snap {
    uint64_t g;
    sd_pool_task fn;
    void *arg;
    int32_t nth;
} job_snap;

/* A consistent copy of the job (sequence-lock read). */
static void read_job(sd_pool *pool, job_snap *s) {
    for (;;) {
        const uint64_t s1 = atomic_load_explicit(&pool->seq, memory_order_acquire);
        if (s1 & 1) {
            cpu_relax();
            continue;
        }
        /* Acquire loads keep the re-read of seq after them (no fence: TSan models
         * acquire/release but not fences). */
        s->fn = atomic_load_explicit(&pool->fn, memory_order_acquire);
        s->arg = atomic_load_explicit(&pool->arg, memory_order_acquire);
        s->nth = atomic_load_explicit(&pool->nth, memory_order_acquire);
        if (atomic_load_explicit(&pool->seq, memory_order_relaxed) == s1) {
            s->g = s1 / 2;
            return;
        }
    }
}

static int job_after(const sd_pool *pool, uint64_t seen) {
    return atomic_load_explicit(&((sd_pool *)pool)->seq, memory_order_acquire) != 2 * seen;
}

/* Wait for a generation after `seen`: spin spin_ns, then sleep on `wake`. */
static void wait_job(sd_pool *pool, uint64_t seen, int64_t spin_ns) {
    if (spin_until(pool, job_after, seen, spin_ns)) return;
    for (;;) {
        atomic_fetch_add(&pool->n_sleep, 1);
        const uint32_t w = atomic_load(&pool->wake);
        if (job_after(pool, seen)) {
            atomic_fetch_sub(&pool->n_sleep, 1);
            return;
        }
        count(&pool->n_worker_sleeps);
        futex_wait(&pool->wake, w);
        atomic_fetch_sub(&pool->n_sleep, 1);
        if (job_after(pool, seen)) return;
    }
}

static void *worker_main(void *p) {
    pool_worker *wk = p;
    sd_pool *pool = wk->pool;
    uint64_t seen = 0;
    int64_t spin_ns = 0; /* no spinning before the first job */
    for (;;) {
        wait_job(pool, seen, spin_ns);
        job_snap s;
        read_job(pool, &s);
        seen = s.g;
        if (!s.fn) break;
        const int32_t participants = s.nth < pool->n_threads ? s.nth : pool->n_threads;
        if (wk->self >= participants) {
            spin_ns = 0; /* not needed by this run: back to sleep */
            continue;
        }
        work(pool, s.g, s.fn, s.arg, s.nth, wk->self);
        spin_ns = (int64_t)pool->spin_us * 1000;
    }
    return NULL;
}

/* ---------------------------------------------------------------- the caller */

/* Publish generation ++gen with job (fn, arg, nth); the caller holds `busy`. */
static uint64_t publish(sd_pool *pool, sd_pool_task fn, void *arg, int32_t nth, uint32_t pending) {
    const uint64_t g = ++pool->gen;
    atomic_store_explicit(&pool->pending, pending, memory_order_relaxed);
    atomic_store_explicit(&pool->seq, 2 * g - 1, memory_order_relaxed);
    /* Release stores: a reader that sees any new field also sees the odd seq. */
    atomic_store_explicit(&pool->fn, fn, memory_order_release);
    atomic_store_explicit(&pool->arg, arg, memory_order_release);
    atomic_store_explicit(&pool->nth, nth, memory_order_release);
    atomic_store_explicit(&pool->seq, 2 * g, memory_order_release);
    atomic_fetch_add(&pool->wake, 1);
    if (atomic_load(&pool->n_sleep) > 0) {
        count(&pool->n_wakes);
        futex_wake(&pool->wake, INT_MAX);
    }
    return g;
}

static int all_done(const sd_pool *pool, uint64_t unused) {
    (void)unused;
    return atomic_load_explicit(&((sd_pool *)pool)->pending, memory_order_acquire) == 0;
}

static void wait_done(sd_pool *pool) {
    if (spin_until(pool, all_done, 0, (int64_t)pool->spin_us * 1000)) return;
    count(&pool->n_caller_sleeps);
    atomic_store(&pool->caller_sleep, 1);
    uint32_t p;
    while ((p = atomic_load(&pool->pending)) != 0)
        futex_wait(&pool->pending, p);
    atomic_store(&pool->caller_sleep, 0);
}

static void run_serial(int32_t nth, sd_pool_task fn, void *arg) {
    for (int32_t i = 0; i < nth; i++)
        fn(arg, i, nth);
}

/* After a run: no worker claimed a task (missed) or one did. SD_POOL_MISSES missed runs in a
 * row (one, right after a back-off) keep the next runs on the caller for backoff_ns, doubled
 * up to SD_POOL_BACKOFF_MAX_NS while the misses go on; a claim resets both. */
static void after_run(sd_pool *pool, int missed) {
    if (!missed) {
        pool->missed = 0;
        pool->backoff_ns = SD_POOL_BACKOFF_NS;
        return;
    }
    if (++pool->missed < (pool->backoff_ns > SD_POOL_BACKOFF_NS ? 1 : SD_POOL_MISSES)) return;
    pool->missed = 0;
    pool->keep_until_ns = now_ns() + pool->backoff_ns;
    pool->backoff_ns = pool->backoff_ns * 2 < SD_POOL_BACKOFF_MAX_NS ? pool->backoff_ns * 2
                                                                     : SD_POOL_BACKOFF_MAX_NS;
}

void sd_pool_run(sd_pool *pool, int32_t nth, sd_pool_task fn, void *arg) {
    if (nth <= 0) nth = pool->n_threads;
    if (nth > SD_POOL_MAX_TASKS) nth = SD_POOL_MAX_TASKS;
    int32_t expected = 0;
    if (nth == 1 || pool->n_threads == 1 ||
        !atomic_compare_exchange_strong_explicit(&pool->busy, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed)) {
        run_serial(nth, fn, arg); /* nothing to share, or nested / concurrent use */
        return;
    }
    if (pool->keep_until_ns) { /* backing off: the workers missed the last runs */
        if (now_ns() < pool->keep_until_ns) {
            count(&pool->n_kept);
            run_serial(nth, fn, arg);
            atomic_store_explicit(&pool->busy, 0, memory_order_release);
            return;
        }
        pool->keep_until_ns = 0;
    }
    count(&pool->n_runs);
    atomic_store_explicit(&pool->worker_claims, 0, memory_order_relaxed);
    const uint64_t g = publish(pool, fn, arg, nth, (uint32_t)nth);
    work(pool, g, fn, arg, nth, 0);
    wait_done(pool);
    if (pool->backoff)
        after_run(pool, atomic_load_explicit(&pool->worker_claims, memory_order_relaxed) == 0);
    atomic_store_explicit(&pool->busy, 0, memory_order_release);
}

/* ---------------------------------------------------------------- loops */

typedef struct for_job {
    sd_pool_range fn;
    void *arg;
    int64_t n, chunk;
    _Atomic int64_t next;
    int64_t div; /* guided: a claim takes the remaining items / div (at least chunk) */
} for_job;

static void for_dynamic(void *p, int32_t ith, int32_t nth) {
    (void)nth;
    for_job *j = p;
    for (;;) {
        const int64_t b = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (b >= j->n) return;
        j->fn(j->arg, b, b + j->chunk < j->n ? b + j->chunk : j->n, ith);
    }
}

static void for_guided(void *p, int32_t ith, int32_t nth) {
    (void)nth;
    for_job *j = p;
    int64_t b = atomic_load_explicit(&j->next, memory_order_relaxed);
    for (;;) {
        if (b >= j->n) return;
        int64_t take = (j->n - b) / j->div;
        if (take < j->chunk) take = j->chunk;
        const int64_t e = j->n - b < take ? j->n : b + take;
        /* On failure b is reloaded with the counter's current value. */
        if (!atomic_compare_exchange_weak_explicit(&j->next, &b, e, memory_order_relaxed,
                                                   memory_order_relaxed))
            continue;
        j->fn(j->arg, b, e, ith);
        b = atomic_load_explicit(&j->next, memory_order_relaxed);
    }
}

static void for_static(void *p, int32_t ith, int32_t nth) {
    const for_job *j = p;
    int64_t b, e;
    sd_pool_split(j->n, 1, ith, nth, &b, &e);
    if (b < e) j->fn(j->arg, b, e, ith);
}

void sd_pool_for(sd_pool *pool, int64_t n, int64_t chunk, sd_pool_range fn, void *arg) {
    if (n <= 0) return;
    for_job j = {fn, arg, n, chunk, 0, 0};
    int64_t tasks = pool->n_threads;
    if (chunk > 0) {
        const int64_t n_chunks = (n - 1) / chunk + 1;
        if (n_chunks < tasks) tasks = n_chunks;
        if (tasks <= 1) { /* one chunk or one thread: no counter needed */
            for (int64_t b = 0; b < n; b += chunk)
                fn(arg, b, b + chunk < n ? b + chunk : n, 0);
            return;
        }
        sd_pool_run(pool, (int32_t)tasks, for_dynamic, &j);
    } else {
        if (n < tasks) tasks = n;
        sd_pool_run(pool, (int32_t)tasks, for_static, &j);
    }
}

void sd_pool_for_guided(sd_pool *pool, int64_t n, int64_t min_chunk, sd_pool_range fn, void *arg) {
    if (n <= 0) return;
    if (min_chunk < 1) min_chunk = 1;
    const int64_t tasks = pool->n_threads < n ? pool->n_threads : n;
    if (tasks <= 1 || n <= min_chunk) {
        fn(arg, 0, n, 0);
        return;
    }
    for_job j = {fn, arg, n, min_chunk, 0, 2 * tasks};
    sd_pool_run(pool, (int32_t)tasks, for_guided, &j);
}

/* ---------------------------------------------------------------- life cycle */

sd_pool_params sd_pool_default_params(void) {
    sd_pool_params p = {0, 50, 0};
    return p;
}

void sd_pool_stats_get(const sd_pool *pool, sd_pool_stats *out) {
    sd_pool *p = (sd_pool *)pool; /* atomic loads of a const object */
    out->runs = atomic_load_explicit(&p->n_runs, memory_order_relaxed);
    out->worker_sleeps = atomic_load_explicit(&p->n_worker_sleeps, memory_order_relaxed);
    out->caller_sleeps = atomic_load_explicit(&p->n_caller_sleeps, memory_order_relaxed);
    out->wakes = atomic_load_explicit(&p->n_wakes, memory_order_relaxed);
    out->kept = atomic_load_explicit(&p->n_kept, memory_order_relaxed);
}

int32_t sd_pool_n_threads(const sd_pool *pool) {
    return pool->n_threads;
}

/* Publish the quit job, join the first n_started workers, free everything. */
static void pool_destroy(sd_pool *pool, int32_t n_started) {
    if (n_started > 0) {
        publish(pool, NULL, NULL, 0, 0);
        for (int32_t i = 0; i < n_started; i++)
            pthread_join(pool->threads[i], NULL);
    }
    free(pool->threads);
    free(pool->workers);
    free(pool->claim);
    free(pool);
}

int sd_pool_init(const sd_pool_params *params, sd_pool **out, sd_error *err) {
    const sd_pool_params dp = sd_pool_default_params();
    const sd_pool_params *p = params ? params : &dp;
    int32_t nt = p->n_threads ? p->n_threads : sd_n_cores();
    if (nt < 1 || nt > SD_POOL_MAX_THREADS)
        return sd_errorf(err, SD_ERR_ARG, "thread pool: n_threads %d: expected 0..%d",
                         (int)p->n_threads, SD_POOL_MAX_THREADS);
    if (p->spin_us < 0 || p->spin_us > 1000000)
        return sd_errorf(err, SD_ERR_ARG, "thread pool: spin_us %d: expected 0..1000000",
                         (int)p->spin_us);
    if (p->backoff != 0 && p->backoff != 1)
        return sd_errorf(err, SD_ERR_ARG, "thread pool: backoff %d: expected 0 or 1",
                         (int)p->backoff);
    sd_pool *pool =
        aligned_alloc(CACHE_LINE, (sizeof *pool + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!pool) return sd_errorf(err, SD_ERR_OOM, "thread pool: out of memory");
    memset(pool, 0, sizeof *pool);
    pool->n_threads = nt;
    pool->spin_us = p->spin_us;
    pool->backoff = p->backoff;
    atomic_init(&pool->seq, 0);
    atomic_init(&pool->fn, NULL);
    atomic_init(&pool->arg, NULL);
    atomic_init(&pool->nth, 0);
    atomic_init(&pool->wake, 0);
    atomic_init(&pool->n_sleep, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->caller_sleep, 0);
    atomic_init(&pool->busy, 0);
    atomic_init(&pool->n_runs, 0);
    atomic_init(&pool->n_caller_sleeps, 0);
    atomic_init(&pool->n_wakes, 0);
    atomic_init(&pool->n_worker_sleeps, 0);
    atomic_init(&pool->n_kept, 0);
    atomic_init(&pool->worker_claims, 0);
    pool->backoff_ns = SD_POOL_BACKOFF_NS;
    pool->claim = calloc(SD_POOL_MAX_TASKS, sizeof *pool->claim);
    if (nt > 1) {
        pool->threads = calloc((size_t)nt - 1, sizeof *pool->threads);
        pool->workers = calloc((size_t)nt - 1, sizeof *pool->workers);
    }
    if (!pool->claim || (nt > 1 && (!pool->threads || !pool->workers))) {
        pool_destroy(pool, 0);
        return sd_errorf(err, SD_ERR_OOM, "thread pool: out of memory");
    }
    for (int32_t i = 0; i < SD_POOL_MAX_TASKS; i++)
        atomic_init(&pool->claim[i], 0);
    for (int32_t i = 0; i < nt - 1; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].self = i + 1;
        const int e = pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]);
        if (e) {
            pool_destroy(pool, i);
            return sd_errorf(err, SD_ERR_IO, "thread pool: cannot start worker %d of %d: %s",
                             (int)i + 1, (int)nt - 1, strerror(e));
        }
    }
    *out = pool;
    return SD_OK;
}

void sd_pool_free(sd_pool *pool) {
    if (!pool) return;
    pool_destroy(pool, pool->n_threads - 1);
}
