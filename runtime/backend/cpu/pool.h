/*
 * The CPU backend's thread pool (private to runtime/backend/cpu and its tests).
 *
 * Persistent workers, created once by sd_pool_init and joined by sd_pool_free. A run
 * hands out nth tasks: the calling thread joins as worker 0, so a pool of T threads
 * owns T - 1 workers. Task i is offered first to thread i mod T ("its own contiguous
 * slice" when nth == T and the op splits its rows with sd_pool_split); a thread that has
 * finished the tasks offered to it takes any task nobody has claimed yet. So a worker
 * that the OS has descheduled (another process on the cores) delays nothing: the caller
 * runs its slice itself, and a run on T threads is never slower than the same run on one
 * thread by more than the hand-over (microseconds). Which thread runs task i never
 * changes what task i computes: results stay bit-identical for any thread count as long
 * as each output element is computed by one task in a fixed order (batch invariance).
 *
 * Waiting: a thread with nothing to do spins for params.spin_us microseconds (pause
 * instructions, the clock read every few iterations), then sleeps on a futex (Linux
 * FUTEX_WAIT_PRIVATE); the caller waiting for the last task does the same. A short spin
 * catches the next op of a decode step; the sleep gives the cores back between steps
 * and to other processes.
 *
 * The pool holds no global state, sets no thread affinity, touches no signal mask
 * beyond its own threads' creation, and does not interact with OpenMP (libgomp's threads
 * may run in the same process). Threads: one caller at a time; a run issued while
 * another run of the same pool is in progress (from a task, i.e. nested, or from a
 * second thread) executes all its tasks serially on the calling thread instead of
 * deadlocking.
 *
 * How an op uses it (the backend owns one pool, made at init, freed at free):
 *   typedef struct { const void *w; ...; int64_t rows; } mm_job;
 *   static void mm_task(void *arg, int32_t ith, int32_t nth) {
 *       mm_job *j = arg;
 *       int64_t r0, r1;
 *       sd_pool_split(j->rows, 4, ith, nth, &r0, &r1);  // whole output rows
 *       kernel(j, r0, r1);
 *   }
 *   sd_pool_run(pool, work >= par_min_work ? 0 : 1, mm_task, &job);
 * (0: one task per thread; 1: inline on the caller.) For work that is uneven per row
 * (attention over positions), sd_pool_for(pool, n, chunk, fn, arg) hands out chunks.
 */
#ifndef SD_BACKEND_CPU_POOL_H
#define SD_BACKEND_CPU_POOL_H

#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SD_POOL_MAX_THREADS 512  /* threads of one pool, the caller included */
#define SD_POOL_MAX_TASKS   4096 /* tasks of one sd_pool_run */

typedef struct sd_pool sd_pool;

typedef struct sd_pool_params {
    int32_t n_threads; /* threads including the caller; 0: sd_n_cores() (the cores this
                          process may run on, sched_getaffinity); 1..SD_POOL_MAX_THREADS */
    int32_t spin_us;   /* spin before sleeping, microseconds, 0..1000000; 0: sleep at once */
    int32_t backoff;   /* 1: sd_pool_run's back-off (below); 0: every run handed over */
} sd_pool_params;

/* n_threads 0 (all usable cores), spin_us 50, backoff 0. */
sd_pool_params sd_pool_default_params(void);

/*
 * Start a pool: n_threads - 1 workers, asleep until the first run. Errors: SD_ERR_ARG
 * (a parameter out of range), SD_ERR_OOM, SD_ERR_IO (pthread_create failed; the workers
 * already started are joined, nothing is leaked). *out is set only on success.
 */
int sd_pool_init(const sd_pool_params *params, sd_pool **out, sd_error *err);

/* Join every worker (waking those asleep) and free the pool. NULL is a no-op. Must not
 * be called while a run is in progress. */
void sd_pool_free(sd_pool *pool);

/* What the pool has done since sd_pool_init (relaxed counters, for profiling): runs handed
 * to the workers (sd_pool_run calls not run serially), worker sleeps (futex waits of a
 * worker that found no job within its spin), caller sleeps (the same while waiting for a
 * run's last task), wake calls (futex wakes of sleeping workers at a run's start), kept
 * (runs the back-off of sd_pool_run kept on the caller). */
typedef struct sd_pool_stats {
    int64_t runs, worker_sleeps, caller_sleeps, wakes, kept;
} sd_pool_stats;
void sd_pool_stats_get(const sd_pool *pool, sd_pool_stats *out);

/* Threads of the pool, the caller included (>= 1). */
int32_t sd_pool_n_threads(const sd_pool *pool);

/* One task: ith in [0, nth). Each call of a run gets a distinct ith, so per-thread
 * scratch indexed by ith is safe; the OS thread that runs a given ith varies (do not
 * use thread-local state to carry results). */
typedef void (*sd_pool_task)(void *arg, int32_t ith, int32_t nth);

/*
 * Run fn(arg, ith, nth) exactly once for every ith in [0, nth) and return when all have
 * returned. nth in [1, SD_POOL_MAX_TASKS] (0 or below: sd_pool_n_threads; above the
 * maximum: clamped); nth == 1 or a 1-thread pool runs inline with no hand-over. Every
 * write a task makes is visible to the caller after the return, and everything the
 * caller wrote before the call is visible to the tasks.
 *
 * Back-off (params.backoff 1): when no worker claimed any task of 4 runs in a row (the workers are
 * not getting a core: an oversubscribed machine, where each hand-over would only cost a wake-up
 * call and a worker spinning on a core the caller needs), the runs of the next 1 ms are run on the
 * caller alone; the next hand-over that no worker takes part in backs off again, twice as long (up
 * to 16 ms); one that a worker takes part in ends it. Results are the same either way (a run's
 * tasks compute the same whoever runs them).
 */
void sd_pool_run(sd_pool *pool, int32_t nth, sd_pool_task fn, void *arg);

/* A range of a dynamic loop: items [begin, end), run by participant ith (distinct among
 * the calls running at the same time, in [0, sd_pool_n_threads)). */
typedef void (*sd_pool_range)(void *arg, int64_t begin, int64_t end, int32_t ith);

/*
 * Dynamic loop for uneven work: [0, n) is cut into chunks of `chunk` items (the last
 * may be shorter), handed out in increasing order from one atomic counter; every item
 * is passed to exactly one call of fn. n <= 0: nothing. chunk <= 0: one contiguous
 * slice per thread (sd_pool_split), i.e. a fixed split.
 */
void sd_pool_for(sd_pool *pool, int64_t n, int64_t chunk, sd_pool_range fn, void *arg);

/*
 * Guided loop (decreasing chunks): each claim takes the remaining items / (2 x the
 * participants), at least min_chunk (< 1: 1), in increasing order from one atomic counter;
 * every item of [0, n) is passed to exactly one call of fn. The first claims are long runs
 * (a streaming kernel keeps its prefetch lead over them), the last ones short, so a thread
 * that shares its core with other work still takes less. n <= 0: nothing; one participant
 * or n <= min_chunk: one call on the caller.
 */
void sd_pool_for_guided(sd_pool *pool, int64_t n, int64_t min_chunk, sd_pool_range fn, void *arg);

/*
 * The fixed split: [*begin, *end) is slice ith of nth over [0, n), contiguous, in order,
 * sizes differing by at most `align` items; slice boundaries are multiples of align
 * (align >= 1; the last slice ends at n). Slices may be empty when n < nth * align.
 */
static inline void sd_pool_split(int64_t n, int64_t align, int32_t ith, int32_t nth, int64_t *begin,
                                 int64_t *end) {
    if (align < 1) align = 1;
    const int64_t units = (n + align - 1) / align; /* whole aligned units */
    const int64_t q = units / nth, r = units % nth;
    const int64_t b = ith * q + (ith < r ? ith : r);
    const int64_t e = b + q + (ith < r ? 1 : 0);
    *begin = b * align < n ? b * align : n;
    *end = e * align < n ? e * align : n;
}

#ifdef __cplusplus
}
#endif
#endif /* SD_BACKEND_CPU_POOL_H */
