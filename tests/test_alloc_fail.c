/*
 * tests/test_alloc_fail.c: allocation failures, SQLite-style. The test is linked with
 * -Wl,--wrap for malloc, calloc, realloc, posix_memalign, aligned_alloc, strdup and strndup
 * (CMakeLists.txt), so every allocation the library makes goes through the wrappers
 * below, which count them and fail the Nth (one allocation only; the counter is this
 * file's, the library has no hook). For N = 1, 2, ... the whole sequence of the public
 * face runs: a context over the shipped TinyStories pair (loading and pairing both models),
 * one completion, a queue, two requests submitted, steps until both are done, everything
 * freed. Each run must either report a clean error (a call returns a status other than
 * SD_OK with a message, or a request's last event says it ended without a reason), or,
 * when the failed allocation was one the library can do without, give exactly the output
 * of a run without failures. Nothing may crash, and in the sanitizer build (ASan with
 * leak detection, scripts/test.sh) nothing may leak. The loop ends with the first N past
 * the last allocation of the sequence: a run that succeeds with no failure injected.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/specdec.h"

#define TINY_T SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define TINY_D SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"
#define MAXOUT 64

/* ---- the wrappers: count allocations while armed, fail number fail_at ---- */

static atomic_int armed;
static atomic_long n_alloc, fail_at, n_failed;

static int fail_now(void) {
    if (!atomic_load(&armed)) return 0;
    const long k = atomic_fetch_add(&n_alloc, 1) + 1;
    if (k != atomic_load(&fail_at)) return 0;
    atomic_fetch_add(&n_failed, 1);
    return 1;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t m, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t m, size_t n);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t n) {
    return fail_now() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t m, size_t n) {
    return fail_now() ? NULL : __real_calloc(m, n);
}
void *__wrap_realloc(void *p, size_t n) {
    return fail_now() ? NULL : __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    return fail_now() ? 12 /* ENOMEM */ : __real_posix_memalign(p, align, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n) {
    return fail_now() ? NULL : __real_aligned_alloc(align, n);
}
char *__wrap_strdup(const char *s) {
    return fail_now() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n) {
    return fail_now() ? NULL : __real_strndup(s, n);
}

/* ---- the sequence ---- */

typedef struct req_out {
    int32_t ids[MAXOUT];
    int32_t n;
    int done;
    sd_stop_reason stop;
} req_out;

typedef struct run_out {
    int32_t ids[MAXOUT]; /* sd_complete's */
    int32_t n;
    req_out req[2];
    int rc; /* the first status other than SD_OK, or SD_OK */
    char msg[SD_ERROR_MSG_MAX];
    const char *at; /* the call that failed */
} run_out;

static int on_piece(void *user, const sd_piece *pc) {
    run_out *o = user;
    for (int32_t i = 0; i < pc->n_tokens && o->n < MAXOUT; i++)
        o->ids[o->n++] = pc->tokens[i];
    return 0;
}

static int on_event(void *user, const sd_event *ev) {
    req_out *r = user;
    for (int32_t i = 0; i < ev->n_tokens && r->n < MAXOUT; i++)
        r->ids[r->n++] = ev->tokens[i];
    if (ev->done) {
        r->done = 1;
        r->stop = ev->stop;
    }
    return 0;
}

/* Record the first failure: 1 if rc is one. */
static int failed(run_out *o, int rc, const char *at, const sd_error *err) {
    if (rc == SD_OK) return 0;
    o->rc = rc;
    o->at = at;
    snprintf(o->msg, sizeof o->msg, "%s", err->msg);
    return 1;
}

static void run(run_out *o) {
    memset(o, 0, sizeof *o);
    sd_error err = {0};
    sd_context *ctx = NULL;
    sd_queue *q = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.target = TINY_T;
    cp.draft = TINY_D;
    cp.n_ctx = 128;
    cp.n_threads = 1;
    sd_completion_params p = sd_completion_default_params();
    p.n_predict = 24;
    p.temp = 0.0f;
    p.adaptive = 0;
    p.n_draft = 3;
    sd_queue_params qp = sd_queue_default_params();
    qp.n_parallel = 2;
    if (failed(o, sd_context_init(&cp, &ctx, &err), "sd_context_init", &err)) goto done;
    if (failed(o, sd_complete(ctx, "Once upon a time", &p, on_piece, o, NULL, &err), "sd_complete",
               &err))
        goto done;
    if (failed(o, sd_queue_init(ctx, &qp, &q, &err), "sd_queue_init", &err)) goto done;
    if (failed(o, sd_queue_submit(q, "The little dog", &p, on_event, &o->req[0], NULL, &err),
               "sd_queue_submit 1", &err))
        goto done;
    if (failed(o, sd_queue_submit(q, "Lily and Tom", &p, on_event, &o->req[1], NULL, &err),
               "sd_queue_submit 2", &err))
        goto done;
    for (int steps = 0; sd_queue_busy(q) && steps < 1000; steps++)
        if (failed(o, sd_queue_step(q, &err), "sd_queue_step", &err)) goto done;
done:
    sd_queue_free(q);
    sd_context_free(ctx);
}

TestSuite(alloc_fail, .timeout = 900);

Test(alloc_fail, every_allocation_of_init_pair_submit_step) {
    /* The reference: a run without failures, counting the allocations. */
    run_out ref;
    atomic_store(&n_alloc, 0);
    atomic_store(&fail_at, 0);
    atomic_store(&armed, 1);
    run(&ref);
    atomic_store(&armed, 0);
    const long total = atomic_load(&n_alloc);
    cr_assert_eq(ref.rc, SD_OK, "%s: %s", ref.at, ref.msg);
    cr_assert_gt(ref.n, 0);
    for (int i = 0; i < 2; i++)
        cr_assert(ref.req[i].done && ref.req[i].stop != SD_STOP_NONE);
    cr_assert_gt(total, 10, "the wrappers saw %ld allocations: is the test linked with --wrap?",
                 total);

    static run_out o; /* big: off the stack */
    long n_errors = 0, n_tolerated = 0;
    for (long n = 1;; n++) {
        atomic_store(&n_alloc, 0);
        atomic_store(&n_failed, 0);
        atomic_store(&fail_at, n);
        atomic_store(&armed, 1);
        run(&o);
        atomic_store(&armed, 0);
        if (atomic_load(&n_failed) == 0) {
            /* Past the last allocation: the run is the reference run. */
            cr_assert_eq(o.rc, SD_OK, "N = %ld: %s: %s", n, o.at, o.msg);
            cr_assert_gt(n, total, "N = %ld: no allocation failed, the reference made %ld", n,
                         total);
            break;
        }
        if (o.rc != SD_OK) {
            cr_assert(o.msg[0] != '\0', "N = %ld: %s returned %s with no message", n, o.at,
                      sd_status_str((sd_status)o.rc));
            n_errors++;
            continue;
        }
        /* No call failed: a request may have ended for want of memory (its last event
         * without a reason), or the library did without the allocation: then the output is
         * the reference's. */
        int ended = 0;
        for (int i = 0; i < 2; i++) {
            cr_assert(o.req[i].done, "N = %ld: request %d never ended", n, i);
            if (o.req[i].stop == SD_STOP_NONE) ended = 1;
        }
        if (ended) {
            n_errors++;
            continue;
        }
        cr_assert_eq(o.n, ref.n, "N = %ld: sd_complete gave %d ids, %d without failures", n,
                     (int)o.n, (int)ref.n);
        cr_assert_eq(memcmp(o.ids, ref.ids, (size_t)o.n * sizeof(int32_t)), 0, "N = %ld", n);
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(o.req[i].n, ref.req[i].n, "N = %ld: request %d", n, i);
            cr_assert_eq(memcmp(o.req[i].ids, ref.req[i].ids, (size_t)o.req[i].n * sizeof(int32_t)),
                         0, "N = %ld: request %d", n, i);
        }
        n_tolerated++;
    }
    cr_log_info("alloc_fail: %ld allocations; %ld failures reported cleanly, %ld done without",
                total, n_errors, n_tolerated);
    cr_assert_gt(n_errors, 0);
}
