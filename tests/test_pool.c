/*
 * The CPU backend's thread pool (runtime/backend/cpu/pool.h): every task of a run is
 * executed exactly once with its own index, for thread counts below, at and above the
 * machine's cores and task counts below, at and above the thread count; the dynamic
 * loop hands out every item once, in increasing chunks; the counters count hand-overs,
 * and runs no worker could join back off to the caller; the fixed split is a contiguous,
 * aligned, balanced partition; nested and concurrent use runs serially and correctly; 100k
 * runs in a row (spinning and always-sleeping) lose no task and no wake-up; a pool
 * whose workers sleep frees cleanly; OpenMP regions interleaved with runs do not
 * disturb either. Each expected value is computed here independently of the pool (a
 * serial loop or a closed form). Run under ASan/LSan in the sanitizer build (leaks,
 * use-after-free of the job) and by hand under TSan (see scripts/pool_bench.sh).
 */
#include <criterion/criterion.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/cpu/pool.h"

TestSuite(pool, .timeout = 300);

static sd_pool *make_pool(int32_t n_threads, int32_t spin_us) {
    sd_pool_params p = sd_pool_default_params();
    p.n_threads = n_threads;
    p.spin_us = spin_us;
    sd_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    cr_assert_not_null(pool);
    return pool;
}

/* ---- every task exactly once */

typedef struct count_job {
    _Atomic int32_t calls[SD_POOL_MAX_TASKS];
    _Atomic int32_t bad_nth;
    int32_t want_nth;
    uint64_t out[SD_POOL_MAX_TASKS];
    uint64_t salt;
} count_job;

static uint64_t mix(uint64_t x) { /* splitmix64 finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void count_task(void *arg, int32_t ith, int32_t nth) {
    count_job *j = arg;
    atomic_fetch_add(&j->calls[ith], 1);
    if (nth != j->want_nth) atomic_fetch_add(&j->bad_nth, 1);
    j->out[ith] = mix(j->salt + (uint64_t)ith); /* plain write: published by the run */
}

static void check_run(sd_pool *pool, count_job *j, int32_t nth, uint64_t salt) {
    memset(j, 0, sizeof *j);
    j->want_nth = nth;
    j->salt = salt;
    sd_pool_run(pool, nth, count_task, j);
    cr_assert_eq(atomic_load(&j->bad_nth), 0, "a task saw nth != %d", nth);
    for (int32_t i = 0; i < nth; i++) {
        cr_assert_eq(atomic_load(&j->calls[i]), 1, "task %d of %d ran %d times (threads %d)", i,
                     nth, atomic_load(&j->calls[i]), sd_pool_n_threads(pool));
        cr_assert_eq(j->out[i], mix(salt + (uint64_t)i), "task %d of %d: wrong output", i, nth);
    }
    for (int32_t i = nth; i < SD_POOL_MAX_TASKS; i++)
        cr_assert_eq(atomic_load(&j->calls[i]), 0, "task %d beyond nth = %d ran", i, nth);
}

Test(pool, each_task_once_for_odd_thread_and_task_counts) {
    static const int32_t threads[] = {1, 2, 3, 7};
    static const int32_t tasks[] = {1, 2, 3, 5, 7, 8, 13, 64, 1000};
    count_job *j = malloc(sizeof *j);
    cr_assert_not_null(j);
    for (size_t a = 0; a < sizeof threads / sizeof *threads; a++) {
        sd_pool *pool = make_pool(threads[a], 50);
        cr_assert_eq(sd_pool_n_threads(pool), threads[a]);
        for (int rep = 0; rep < 20; rep++)
            for (size_t b = 0; b < sizeof tasks / sizeof *tasks; b++)
                check_run(pool, j, tasks[b], (uint64_t)rep * 1000003u + b);
        /* nth <= 0 means one task per thread. */
        memset(j, 0, sizeof *j);
        j->want_nth = threads[a];
        sd_pool_run(pool, 0, count_task, j);
        for (int32_t i = 0; i < threads[a]; i++)
            cr_assert_eq(atomic_load(&j->calls[i]), 1);
        sd_pool_free(pool);
    }
    free(j);
}

Test(pool, nth_above_the_maximum_is_clamped) {
    sd_pool *pool = make_pool(2, 50);
    count_job *j = calloc(1, sizeof *j);
    cr_assert_not_null(j);
    j->want_nth = SD_POOL_MAX_TASKS;
    sd_pool_run(pool, SD_POOL_MAX_TASKS + 5, count_task, j);
    for (int32_t i = 0; i < SD_POOL_MAX_TASKS; i++)
        cr_assert_eq(atomic_load(&j->calls[i]), 1);
    cr_assert_eq(atomic_load(&j->bad_nth), 0);
    free(j);
    sd_pool_free(pool);
}

/* ---- many tiny jobs: a reduction whose value is known in closed form */

typedef struct sum_job {
    const uint32_t *x;
    int64_t n;
    uint64_t part[64];
} sum_job;

static void sum_task(void *arg, int32_t ith, int32_t nth) {
    sum_job *j = arg;
    int64_t b, e;
    sd_pool_split(j->n, 8, ith, nth, &b, &e);
    uint64_t s = 0;
    for (int64_t i = b; i < e; i++)
        s += j->x[i];
    j->part[ith] = s;
}

Test(pool, many_tiny_reductions_match_the_closed_form) {
    enum { N = 4099 };
    uint32_t *x = malloc(N * sizeof *x);
    cr_assert_not_null(x);
    for (int64_t i = 0; i < N; i++)
        x[i] = (uint32_t)i;
    for (int32_t t = 1; t <= 7; t += 2) {
        sd_pool *pool = make_pool(t, 20);
        for (int rep = 0; rep < 3000; rep++) {
            sum_job j = {x, 1 + rep % N, {0}};
            const int32_t nth = 1 + rep % 9;
            sd_pool_run(pool, nth, sum_task, &j);
            uint64_t s = 0;
            for (int32_t i = 0; i < nth; i++)
                s += j.part[i];
            const uint64_t n = (uint64_t)j.n;
            cr_assert_eq(s, n * (n - 1) / 2, "run %d (n %lld, nth %d, threads %d): sum %llu", rep,
                         (long long)j.n, nth, t, (unsigned long long)s);
        }
        sd_pool_free(pool);
    }
    free(x);
}

/* ---- the dynamic loop, the fixed split and the guided loop */

typedef struct for_rec {
    _Atomic int32_t *hits; /* [n] */
    _Atomic int32_t bad;
    int64_t chunk, n; /* chunk: the dynamic loop's chunk, the guided loop's min_chunk */
    int32_t n_threads;
    int guided;
    _Atomic int64_t last_begin[SD_POOL_MAX_THREADS]; /* per participant */
} for_rec;

static void for_fn(void *arg, int64_t begin, int64_t end, int32_t ith) {
    for_rec *r = arg;
    if (ith < 0 || ith >= r->n_threads || begin < 0 || end > r->n || begin >= end) {
        atomic_fetch_add(&r->bad, 1);
        return;
    }
    const int64_t len = end - begin, rest = r->n - begin;
    if (r->guided) {
        /* Each claim at least min_chunk (< 1: 1) except the last, and at most the remaining
         * items / (2 x participants), so at most half of what lies at or after its start,
         * unless it is min_chunk long; one thread: one call over all. */
        const int64_t min_chunk = r->chunk < 1 ? 1 : r->chunk;
        if (len < min_chunk && end != r->n) atomic_fetch_add(&r->bad, 1);
        if (r->n_threads > 1 && len > min_chunk && len > rest / 2) atomic_fetch_add(&r->bad, 1);
    } else if (r->chunk > 0) {
        /* Chunks start at multiples of chunk and are full except the last. */
        if (begin % r->chunk || (len != r->chunk && end != r->n)) atomic_fetch_add(&r->bad, 1);
    }
    if (r->guided || r->chunk > 0) {
        /* One participant receives its ranges in increasing order. */
        if (begin <= atomic_load(&r->last_begin[ith])) atomic_fetch_add(&r->bad, 1);
        atomic_store(&r->last_begin[ith], begin);
    }
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&r->hits[i], 1);
}

/* Every n of ns with every chunk of chunks (sd_pool_for, or sd_pool_for_guided's
 * min_chunk) on 1, 3, 5 and 7 threads: each item passed exactly once, ranges as for_fn
 * checks. */
static void check_loop(int guided, const int64_t *ns, size_t n_ns, const int64_t *chunks,
                       size_t n_chunks) {
    const char *name = guided ? "min_chunk" : "chunk";
    for (int32_t t = 1; t <= 7; t += 2) {
        sd_pool *pool = make_pool(t, 50);
        for (size_t a = 0; a < n_ns; a++)
            for (size_t b = 0; b < n_chunks; b++) {
                const int64_t n = ns[a];
                for_rec *r = calloc(1, sizeof *r);
                cr_assert_not_null(r);
                r->hits = calloc((size_t)n + 1, sizeof *r->hits);
                cr_assert_not_null(r->hits);
                r->n = n;
                r->chunk = chunks[b];
                r->n_threads = t;
                r->guided = guided;
                for (int32_t i = 0; i < SD_POOL_MAX_THREADS; i++)
                    atomic_init(&r->last_begin[i], -1);
                if (guided)
                    sd_pool_for_guided(pool, n, chunks[b], for_fn, r);
                else
                    sd_pool_for(pool, n, chunks[b], for_fn, r);
                cr_assert_eq(atomic_load(&r->bad), 0, "n %lld %s %lld threads %d: bad range",
                             (long long)n, name, (long long)chunks[b], t);
                for (int64_t i = 0; i < n; i++)
                    cr_assert_eq(atomic_load(&r->hits[i]), 1,
                                 "n %lld %s %lld threads %d: item %lld seen %d times", (long long)n,
                                 name, (long long)chunks[b], t, (long long)i,
                                 atomic_load(&r->hits[i]));
                free(r->hits);
                free(r);
            }
        sd_pool_free(pool);
    }
}

Test(pool, for_visits_every_item_once) {
    static const int64_t ns[] = {0, 1, 2, 5, 64, 1000, 4097};
    static const int64_t chunks[] = {0, 1, 3, 7, 100, 5000};
    check_loop(0, ns, sizeof ns / sizeof *ns, chunks, sizeof chunks / sizeof *chunks);
}

Test(pool, for_guided_visits_every_item_once) {
    static const int64_t ns[] = {0, 1, 2, 5, 64, 96, 1000, 4097};
    static const int64_t mins[] = {0, 1, 3, 16, 5000};
    check_loop(1, ns, sizeof ns / sizeof *ns, mins, sizeof mins / sizeof *mins);
}

/* sd_pool_stats: one run counted per hand-over, none for a run on the caller alone; a
 * worker that does not spin (spin_us 0) sleeps between runs 1 ms apart and is woken. */
Test(pool, stats_count_runs_sleeps_and_wakes) {
    sd_pool *pool = make_pool(2, 0);
    count_job *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    sd_pool_stats a, b;
    sd_pool_stats_get(pool, &a);
    for (int r = 0; r < 20; r++) {
        memset(c, 0, sizeof *c);
        c->want_nth = 2;
        sd_pool_run(pool, 2, count_task, c);
        c->want_nth = 1;
        sd_pool_run(pool, 1, count_task, c); /* serial: not a hand-over */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    sd_pool_stats_get(pool, &b);
    /* each 2-task run handed over or kept by the back-off; the first 4 always handed over */
    cr_assert_eq(b.runs - a.runs + b.kept - a.kept, 20, "runs %lld, kept %lld",
                 (long long)(b.runs - a.runs), (long long)(b.kept - a.kept));
    cr_assert_geq(b.runs - a.runs, 4);
    cr_assert_geq(b.worker_sleeps - a.worker_sleeps, 1);
    cr_assert_geq(b.wakes - a.wakes, 1);
    free(c);
    sd_pool_free(pool);
}

/* The back-off: a worker that never spins (spin_us 0) cannot claim a task of trivial runs
 * issued back to back before the caller has run them all (it is still being woken), so
 * after 4 missed runs the pool keeps runs on the caller; every task still runs once. Under
 * a loaded machine the caller can be preempted after each hand-over often enough that the
 * worker claims its part, so misses are counted over up to 20 rounds of 200 runs (each
 * round alone has shown them on an idle machine; one loaded round did not). */
Test(pool, back_off_keeps_runs_on_the_caller_when_workers_miss) {
    sd_pool_params bp = sd_pool_default_params();
    bp.n_threads = 2;
    bp.spin_us = 0;
    bp.backoff = 1;
    sd_pool *pool = NULL;
    sd_error berr = {0};
    cr_assert_eq(sd_pool_init(&bp, &pool, &berr), SD_OK, "%s", berr.msg);
    count_job *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    sd_pool_stats a, b;
    sd_pool_stats_get(pool, &a);
    int rounds = 0;
    do {
        for (int r = 0; r < 200; r++)
            check_run(pool, c, 2, (uint64_t)r);
        sd_pool_stats_get(pool, &b);
        rounds++;
    } while (b.kept == a.kept && rounds < 20);
    cr_assert_eq(b.runs - a.runs + b.kept - a.kept, 200 * rounds);
    cr_assert_gt(b.kept - a.kept, 0, "no run kept on the caller (runs %lld in %d rounds)",
                 (long long)(b.runs - a.runs), rounds);
    sd_pool_free(pool);
    /* backoff 0: every run handed over */
    sd_pool_params p = sd_pool_default_params();
    p.n_threads = 2;
    p.spin_us = 0;
    p.backoff = 0;
    sd_error err = {0};
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_pool_stats_get(pool, &a);
    for (int r = 0; r < 200; r++)
        check_run(pool, c, 2, (uint64_t)r);
    sd_pool_stats_get(pool, &b);
    cr_assert_eq(b.runs - a.runs, 200);
    cr_assert_eq(b.kept - a.kept, 0);
    free(c);
    sd_pool_free(pool);
}

Test(pool, split_is_contiguous_aligned_and_balanced) {
    for (int64_t n = 0; n <= 70; n++)
        for (int64_t align = 1; align <= 9; align++)
            for (int32_t nth = 1; nth <= 9; nth++) {
                int64_t prev_end = 0, lo = INT64_MAX, hi = 0;
                for (int32_t i = 0; i < nth; i++) {
                    int64_t b, e;
                    sd_pool_split(n, align, i, nth, &b, &e);
                    cr_assert_eq(b, prev_end, "n %lld align %lld nth %d: slice %d starts at %lld",
                                 (long long)n, (long long)align, nth, i, (long long)b);
                    cr_assert_leq(b, e);
                    if (e != n)
                        cr_assert_eq(e % align, 0, "slice end %lld not aligned", (long long)e);
                    prev_end = e;
                    /* Balance in whole units (a partial last unit counts as one). */
                    const int64_t units = (e - b + align - 1) / align;
                    lo = units < lo ? units : lo;
                    hi = units > hi ? units : hi;
                }
                cr_assert_eq(prev_end, n);
                cr_assert_leq(hi - lo, 1, "unbalanced: %lld vs %lld units", (long long)lo,
                              (long long)hi);
            }
}

/* ---- nested and concurrent use */

typedef struct nest_job {
    sd_pool *pool;
    count_job inner[4];
} nest_job;

static void nest_task(void *arg, int32_t ith, int32_t nth) {
    (void)nth;
    nest_job *j = arg;
    count_job *c = &j->inner[ith];
    c->want_nth = 5;
    c->salt = 77 + (uint64_t)ith;
    sd_pool_run(j->pool, 5, count_task, c); /* from inside a task: runs serially */
}

Test(pool, nested_run_executes_serially) {
    sd_pool *pool = make_pool(3, 50);
    nest_job *j = calloc(1, sizeof *j);
    cr_assert_not_null(j);
    j->pool = pool;
    for (int rep = 0; rep < 50; rep++) {
        memset(j->inner, 0, sizeof j->inner);
        sd_pool_run(pool, 4, nest_task, j);
        for (int32_t t = 0; t < 4; t++)
            for (int32_t i = 0; i < 5; i++) {
                cr_assert_eq(atomic_load(&j->inner[t].calls[i]), 1);
                cr_assert_eq(j->inner[t].out[i], mix(77 + (uint64_t)t + (uint64_t)i));
            }
    }
    free(j);
    sd_pool_free(pool);
}

typedef struct caller_arg {
    sd_pool *pool;
    int fails;
    count_job job;
    uint64_t salt;
} caller_arg;

static void *caller_main(void *p) {
    caller_arg *c = p;
    for (int rep = 0; rep < 2000; rep++) {
        const int32_t nth = 1 + rep % 6;
        memset(&c->job, 0, sizeof c->job);
        c->job.want_nth = nth;
        c->job.salt = c->salt + (uint64_t)rep;
        sd_pool_run(c->pool, nth, count_task, &c->job);
        for (int32_t i = 0; i < nth; i++)
            if (atomic_load(&c->job.calls[i]) != 1 ||
                c->job.out[i] != mix(c->job.salt + (uint64_t)i))
                c->fails++;
    }
    return NULL;
}

Test(pool, two_callers_share_a_pool) {
    sd_pool *pool = make_pool(3, 20);
    caller_arg *c = calloc(2, sizeof *c);
    cr_assert_not_null(c);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        c[i].pool = pool;
        c[i].salt = (uint64_t)i << 40;
        cr_assert_eq(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(c[0].fails + c[1].fails, 0, "%d wrong task results", c[0].fails + c[1].fails);
    free(c);
    sd_pool_free(pool);
}

/* ---- stress: many runs back to back, spinning and always sleeping */

typedef struct tick_job {
    _Atomic int64_t total;
} tick_job;

static void tick_task(void *arg, int32_t ith, int32_t nth) {
    (void)nth;
    tick_job *j = arg;
    atomic_fetch_add_explicit(&j->total, ith + 1, memory_order_relaxed);
}

static void stress(int32_t threads, int32_t spin_us, int runs) {
    sd_pool *pool = make_pool(threads, spin_us);
    tick_job j;
    atomic_init(&j.total, 0);
    int64_t want = 0;
    for (int r = 0; r < runs; r++) {
        const int32_t nth = 2 + r % 3;
        sd_pool_run(pool, nth, tick_task, &j);
        want += (int64_t)nth * (nth + 1) / 2;
        if (atomic_load_explicit(&j.total, memory_order_relaxed) != want)
            cr_assert_fail("run %d (threads %d, spin %d us): total %lld, expected %lld", r, threads,
                           spin_us, (long long)atomic_load(&j.total), (long long)want);
    }
    sd_pool_free(pool);
}

Test(pool, stress_100k_runs_spinning) {
    stress(2, 50, 100000);
}

Test(pool, stress_100k_runs_oversubscribed) {
    stress(3, 50, 100000);
}

Test(pool, stress_runs_always_sleeping) {
    /* spin 0: every hand-over goes through the futex path (lost wake-ups would hang). */
    stress(2, 0, 20000);
    stress(7, 0, 5000);
}

/* Tasks that each wait until all nth have started: finishes only if nth distinct
 * threads run them at the same time (a pool whose workers never ran a task, or ran
 * them one after another, would hang here and hit the suite's timeout). */
typedef struct barrier_job {
    _Atomic int32_t arrived;
    _Atomic int32_t calls;
} barrier_job;

static void barrier_task(void *arg, int32_t ith, int32_t nth) {
    (void)ith;
    barrier_job *j = arg;
    atomic_fetch_add(&j->arrived, 1);
    while (atomic_load(&j->arrived) < nth)
        sched_yield();
    atomic_fetch_add(&j->calls, 1);
}

Test(pool, workers_run_tasks_concurrently) {
    for (int32_t t = 2; t <= 7; t++) {
        sd_pool *pool = make_pool(t, t % 2 ? 0 : 50);
        for (int rep = 0; rep < 20; rep++) {
            barrier_job j;
            atomic_init(&j.arrived, 0);
            atomic_init(&j.calls, 0);
            sd_pool_run(pool, t, barrier_task, &j);
            cr_assert_eq(atomic_load(&j.calls), t);
        }
        sd_pool_free(pool);
    }
}

/* Short tasks of a few microseconds, so that hand-overs to workers really happen. */
static void busy_task(void *arg, int32_t ith, int32_t nth) {
    (void)nth;
    tick_job *j = arg;
    volatile uint64_t x = (uint64_t)ith;
    for (int i = 0; i < 2000; i++)
        x = x * 6364136223846793005ull + 1;
    atomic_fetch_add_explicit(&j->total, ith + 1, memory_order_relaxed);
}

Test(pool, stress_short_tasks) {
    static const int32_t threads[] = {2, 3, 7};
    static const int32_t spins[] = {0, 2, 50};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            sd_pool *pool = make_pool(threads[a], spins[b]);
            tick_job j;
            atomic_init(&j.total, 0);
            int64_t want = 0;
            for (int r = 0; r < 3000; r++) {
                const int32_t nth = 1 + r % 8;
                sd_pool_run(pool, nth, busy_task, &j);
                want += (int64_t)nth * (nth + 1) / 2;
                if (atomic_load_explicit(&j.total, memory_order_relaxed) != want)
                    cr_assert_fail("threads %d spin %d run %d: total %lld, expected %lld",
                                   threads[a], spins[b], r, (long long)atomic_load(&j.total),
                                   (long long)want);
            }
            sd_pool_free(pool);
        }
}

/* ---- life cycle */

Test(pool, free_with_idle_workers) {
    for (int i = 0; i < 50; i++) {
        sd_pool *pool = make_pool(1 + i % 7, i % 2 ? 0 : 1000);
        if (i % 3 == 0) {
            count_job *j = calloc(1, sizeof *j);
            cr_assert_not_null(j);
            check_run(pool, j, 3, (uint64_t)i);
            free(j);
        }
        if (i % 5 == 0) { /* let the workers fall asleep on the futex */
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        sd_pool_free(pool);
    }
    sd_pool_free(NULL);
}

Test(pool, parameters_are_checked) {
    sd_pool *pool = NULL;
    sd_error err = {0};
    sd_pool_params p = sd_pool_default_params();
    cr_assert_eq(p.n_threads, 0);
    cr_assert_geq(p.spin_us, 0);
    p.n_threads = -1;
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_assert_null(pool);
    cr_assert(strstr(err.msg, "n_threads -1") != NULL, "message: %s", err.msg);
    p.n_threads = SD_POOL_MAX_THREADS + 1;
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_ERR_ARG);
    p.n_threads = 2;
    p.spin_us = -5;
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "spin_us -5") != NULL, "message: %s", err.msg);
    cr_assert_null(pool);
    p.spin_us = 50;
    p.backoff = 2;
    cr_assert_eq(sd_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "backoff 2") != NULL, "message: %s", err.msg);
    cr_assert_null(pool);
    /* Defaults: the cores this process may run on. */
    cr_assert_eq(sd_pool_init(NULL, &pool, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_pool_n_threads(pool), sd_n_cores());
    sd_pool_free(pool);
}

/* ---- OpenMP in the same process */

Test(pool, interleaves_with_openmp) {
    sd_pool *pool = make_pool(2, 50);
    count_job *j = malloc(sizeof *j);
    cr_assert_not_null(j);
    for (int rep = 0; rep < 200; rep++) {
        int64_t s = 0;
#pragma omp parallel for num_threads(2) reduction(+ : s)
        for (int i = 0; i < 1000; i++)
            s += i;
        cr_assert_eq(s, 999 * 1000 / 2);
        check_run(pool, j, 2 + rep % 4, (uint64_t)rep);
    }
    free(j);
    sd_pool_free(pool);
}
