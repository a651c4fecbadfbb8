/*
 * runtime/backend/cuda/comm.cu: the communicator of CUDA ranks (sd_backend.h, "Tensor
 * parallelism"): one process, one thread per GPU, the communicators made together by
 * ncclCommInitAll over the ranks' devices. allreduce(rank, x, n): ncclAllGather of the n
 * floats of every rank into the rank's gather buffer [n_ranks, n] on its stream, then the
 * fixed-order sum (sd_cu_sum_parts: ranks ascending) back into x. An all-gather and a local
 * sum, rather than ncclAllReduce, because a ring or tree all-reduce sums an element in an
 * order that depends on the message size (so on n_tok), which would break the determinism
 * contract; the parts are small (n_tok x n_embd floats). World size 1 needs no NCCL (the
 * all-reduce is the identity).
 *
 * Failures are errors, never hangs: a rank's wait (sd_cu_wait) polls its stream and, through
 * sd_cu_comm_poll, the communicator: when any rank fails (a CUDA error on its stream, an
 * error pending on it when it reaches an all-reduce, an NCCL error reported by
 * ncclCommGetAsyncError) or a wait makes no progress for SD_CUDA_NCCL_TIMEOUT_S seconds
 * (default 600), every rank's communicator is aborted (ncclCommAbort: their all-gathers
 * stop), each rank records an error naming the first cause, and later all-reduces fail at
 * once. Freeing finalizes the communicators inside one NCCL group (ncclCommFinalize of
 * communicators driven from one thread must be grouped, or the first waits for the others)
 * and then destroys them; after an abort there is nothing left to destroy.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend/cuda/cuda_impl.cuh"

#ifdef SD_HAVE_NCCL
#include <nccl.h>
#endif

#define SD_CU_MAX_RANKS 64

typedef struct sd_comm_cuda {
    sd_comm base;
    sd_cuda_backend *be[SD_CU_MAX_RANKS];
    float *gather[SD_CU_MAX_RANKS]; /* per rank, on its device: [n_ranks, max_elems] */
    int64_t max_elems;
    double timeout_s;
    pthread_mutex_t mu; /* guards aborted and why */
    int aborted;
    char why[256];
#ifdef SD_HAVE_NCCL
    ncclComm_t nccl[SD_CU_MAX_RANKS];
#endif
} sd_comm_cuda;

/* Abort every rank's communicator once, remembering why. */
static void comm_abort(sd_comm_cuda *cc, const char *why) {
    pthread_mutex_lock(&cc->mu);
    if (!cc->aborted) {
        cc->aborted = 1;
        snprintf(cc->why, sizeof cc->why, "%s", why);
#ifdef SD_HAVE_NCCL
        for (int32_t r = 0; r < cc->base.n_ranks; r++)
            if (cc->nccl[r]) {
                ncclCommAbort(cc->nccl[r]);
                cc->nccl[r] = NULL;
            }
#endif
    }
    pthread_mutex_unlock(&cc->mu);
}

/* 1 (and an error recorded in rank c) if the communicator was aborted. */
static int aborted_error(sd_comm_cuda *cc, sd_cuda_backend *c) {
    pthread_mutex_lock(&cc->mu);
    const int a = cc->aborted;
    char why[256];
    snprintf(why, sizeof why, "%s", cc->why);
    pthread_mutex_unlock(&cc->mu);
    if (a)
        sd_cu_failf(c, SD_ERR_IO, "rank %d: the NCCL communicator was aborted: %s", c->rank, why);
    return a;
}

int sd_cu_comm_poll(sd_cuda_backend *c, double waited_s) {
    sd_comm_cuda *cc = c->comm;
    if (!cc) return 0;
    char why[200];
    if (waited_s < 0.0) {
        snprintf(why, sizeof why, "rank %d failed: %.160s", c->rank, c->err.msg);
        comm_abort(cc, why);
        return 1;
    }
#ifdef SD_HAVE_NCCL
    ncclResult_t async = ncclSuccess;
    pthread_mutex_lock(&cc->mu);
    if (!cc->aborted && cc->nccl[c->rank]) ncclCommGetAsyncError(cc->nccl[c->rank], &async);
    pthread_mutex_unlock(&cc->mu);
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(why, sizeof why, "rank %d: NCCL reported %s", c->rank, ncclGetErrorString(async));
        comm_abort(cc, why);
    }
#endif
    if (waited_s > cc->timeout_s) {
        snprintf(why, sizeof why,
                 "rank %d made no progress for %.0f s (SD_CUDA_NCCL_TIMEOUT_S): a peer stopped",
                 c->rank, waited_s);
        comm_abort(cc, why);
    }
    return aborted_error(cc, c);
}

static void cuda_comm_free(sd_comm *c) {
    if (!c) return;
    sd_comm_cuda *cc = (sd_comm_cuda *)c;
    int ok = 1;
    for (int32_t r = 0; r < c->n_ranks; r++) {
        if (!cc->be[r]) continue;
        cudaSetDevice(cc->be[r]->device);
        sd_cu_flush(cc->be[r]);
        ok &= sd_cu_wait(cc->be[r], "comm free (queued ops)");
    }
#ifdef SD_HAVE_NCCL
    if (!ok) comm_abort(cc, "a rank failed while the communicator was freed");
    pthread_mutex_lock(&cc->mu);
    if (!cc->aborted && c->n_ranks > 1) {
        ncclResult_t fr = ncclGroupStart();
        for (int32_t r = 0; r < c->n_ranks && fr == ncclSuccess; r++)
            if (cc->nccl[r]) fr = ncclCommFinalize(cc->nccl[r]);
        const ncclResult_t er = ncclGroupEnd();
        for (int32_t r = 0; r < c->n_ranks; r++) {
            if (!cc->nccl[r]) continue;
            if (fr == ncclSuccess && er == ncclSuccess)
                ncclCommDestroy(cc->nccl[r]);
            else
                ncclCommAbort(cc->nccl[r]);
            cc->nccl[r] = NULL;
        }
    }
    pthread_mutex_unlock(&cc->mu);
#else
    (void)ok;
#endif
    for (int32_t r = 0; r < c->n_ranks; r++) {
        if (!cc->be[r]) continue;
        cudaSetDevice(cc->be[r]->device);
        cudaFree(cc->gather[r]);
        cc->be[r]->comm = NULL;
        /* a pending error of this rank stays for its next sync */
    }
    cudaGetLastError();
    pthread_mutex_destroy(&cc->mu);
    free(cc);
}

static void cuda_comm_allreduce(sd_comm *c, int32_t rank, float *x, int64_t n) {
    sd_comm_cuda *cc = (sd_comm_cuda *)c;
    sd_cuda_backend *be = cc->be[rank];
    /* n is the same on every rank (a collective), so these early returns are taken by all. */
    if (c->n_ranks == 1 || n <= 0) return;
    if (n > cc->max_elems) {
        sd_cu_failf(be, SD_ERR_ARG, "allreduce: %lld floats, the communicator holds %lld",
                    (long long)n, (long long)cc->max_elems);
        sd_cu_comm_poll(be, -1.0);
        return;
    }
#ifdef SD_HAVE_NCCL
    /* Every op called so far goes on the stream before the all-gather. */
    sd_cu_flush(be);
    if (be->failed) { /* this rank's ops are being skipped: its part would be garbage */
        sd_cu_comm_poll(be, -1.0);
        return;
    }
    if (aborted_error(cc, be)) return;
    cudaSetDevice(be->device);
    ncclResult_t r =
        ncclAllGather(x, cc->gather[rank], (size_t)n, ncclFloat, cc->nccl[rank], be->stream);
    if (r != ncclSuccess) {
        sd_cu_failf(be, SD_ERR_IO, "allreduce: ncclAllGather failed: %s", ncclGetErrorString(r));
        sd_cu_comm_poll(be, -1.0);
        return;
    }
    if (sd_cu_enter(be)) sd_cu_sum_parts(be, cc->gather[rank], c->n_ranks, n, x);
#else
    sd_cu_failf(be, SD_ERR_UNSUPPORTED, "allreduce: built without NCCL");
#endif
}

static const sd_comm_ops cuda_comm_ops = {cuda_comm_free, cuda_comm_allreduce};

int sd_comm_cuda_init(sd_backend *const *bes, int32_t n, int64_t max_elems, sd_comm **out,
                      sd_error *err) {
    *out = NULL;
    if (n < 1 || n > SD_CU_MAX_RANKS)
        return sd_errorf(err, SD_ERR_ARG, "comm: %d CUDA ranks, expected 1..%d", n,
                         SD_CU_MAX_RANKS);
#ifndef SD_HAVE_NCCL
    if (n > 1)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "comm: %d GPUs need NCCL, and this specdec was built without it "
                         "(configure with -DSD_NCCL=ON where NCCL is installed)",
                         n);
#endif
    sd_comm_cuda *cc = (sd_comm_cuda *)calloc(1, sizeof *cc);
    if (!cc) return sd_errorf(err, SD_ERR_OOM, "comm: out of memory");
    cc->base.ops = &cuda_comm_ops;
    cc->base.n_ranks = n;
    cc->max_elems = max_elems;
    const char *t = getenv("SD_CUDA_NCCL_TIMEOUT_S");
    cc->timeout_s = t && *t ? atof(t) : 600.0;
    if (!(cc->timeout_s > 0.0)) cc->timeout_s = 600.0;
    pthread_mutex_init(&cc->mu, NULL);
    int devs[SD_CU_MAX_RANKS];
    for (int32_t r = 0; r < n; r++) {
        devs[r] = sd_cu_of(bes[r])->device;
        for (int32_t q = 0; q < r; q++)
            if (devs[q] == devs[r]) {
                pthread_mutex_destroy(&cc->mu);
                free(cc);
                return sd_errorf(err, SD_ERR_ARG,
                                 "comm: ranks %d and %d are both on GPU %d (one GPU per rank)", q,
                                 r, devs[r]);
            }
    }
    for (int32_t r = 0; r < n; r++)
        cc->be[r] = sd_cu_of(bes[r]);
    if (n == 1) {
        *out = &cc->base;
        return SD_OK;
    }
#ifdef SD_HAVE_NCCL
    size_t bytes;
    if (sd_mul_size((size_t)n * sizeof(float), (size_t)max_elems, &bytes)) {
        cuda_comm_free(&cc->base);
        return sd_errorf(err, SD_ERR_OOM, "comm: gather buffer size overflows");
    }
    for (int32_t r = 0; r < n; r++) {
        cudaSetDevice(devs[r]);
        cudaError_t e = cudaMalloc((void **)&cc->gather[r], bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            cc->gather[r] = NULL;
            cuda_comm_free(&cc->base);
            return sd_errorf(err, SD_ERR_OOM,
                             "comm: cannot allocate the %.1f MiB all-gather buffer on GPU %d: %s",
                             bytes / 1048576.0, devs[r], cudaGetErrorString(e));
        }
    }
    for (int32_t r = 0; r < n; r++)
        sd_cu_graphs_off(cc->be[r]);
    ncclResult_t nr = ncclCommInitAll(cc->nccl, n, devs);
    if (nr != ncclSuccess) {
        for (int32_t r = 0; r < n; r++)
            cc->nccl[r] = NULL;
        cuda_comm_free(&cc->base);
        return sd_errorf(err, SD_ERR_IO, "comm: ncclCommInitAll over %d GPUs failed: %s", n,
                         ncclGetErrorString(nr));
    }
    for (int32_t r = 0; r < n; r++) {
        cc->be[r]->comm = cc;
        cc->be[r]->rank = r;
    }
#endif
    *out = &cc->base;
    return SD_OK;
}

/* ---- the stream wait (moved from backend.cu: it polls the communicator) ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int sd_cu_wait(sd_cuda_backend *c, const char *op) {
    if (!c->comm)
        return sd_cu_check(c, cudaStreamSynchronize(c->stream), op, "cudaStreamSynchronize");
    /* A rank: poll, so that a peer's failure (its kernels or NCCL's) aborts the
     * communicator instead of leaving this stream waiting in an all-gather forever. */
    const double t0 = now_s();
    for (;;) {
        const cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return sd_cu_comm_poll(c, 0.0) == 0;
        if (e != cudaErrorNotReady) {
            sd_cu_check(c, e, op, "cudaStreamQuery");
            sd_cu_comm_poll(c, -1.0); /* this rank failed: the others must not wait for it */
            return 0;
        }
        if (sd_cu_comm_poll(c, now_s() - t0)) return 0;
        usleep(20);
    }
}
