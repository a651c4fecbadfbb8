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
 */
#include <stdlib.h>

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
#ifdef SD_HAVE_NCCL
    ncclComm_t nccl[SD_CU_MAX_RANKS];
#endif
} sd_comm_cuda;

static void cuda_comm_free(sd_comm *c) {
    if (!c) return;
    sd_comm_cuda *cc = (sd_comm_cuda *)c;
    for (int32_t r = 0; r < c->n_ranks; r++) {
        if (!cc->be[r]) continue;
        cudaSetDevice(cc->be[r]->device);
        cudaStreamSynchronize(cc->be[r]->stream);
#ifdef SD_HAVE_NCCL
        if (cc->nccl[r]) ncclCommDestroy(cc->nccl[r]);
#endif
        cudaFree(cc->gather[r]);
    }
    cudaGetLastError();
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
        return;
    }
#ifdef SD_HAVE_NCCL
    /* Issued even when this rank has a pending error (its ops are being skipped): the other
     * ranks' all-gathers would otherwise wait for it forever. */
    cudaSetDevice(be->device);
    ncclResult_t r =
        ncclAllGather(x, cc->gather[rank], (size_t)n, ncclFloat, cc->nccl[rank], be->stream);
    if (r != ncclSuccess) {
        sd_cu_failf(be, SD_ERR_IO, "allreduce: ncclAllGather failed: %s", ncclGetErrorString(r));
        return;
    }
    if (sd_cu_enter(be)) sd_cu_sum_parts(be, cc->gather[rank], c->n_ranks, n, x);
#else
    sd_cu_failf(be, SD_ERR_UNSUPPORTED, "allreduce: built without NCCL");
#endif
}

static const sd_comm_ops cuda_comm_ops = {cuda_comm_free, cuda_comm_allreduce};

extern "C" int sd_comm_cuda_init(sd_backend *const *bes, int32_t n, int64_t max_elems,
                                 sd_comm **out, sd_error *err) {
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
    int devs[SD_CU_MAX_RANKS];
    for (int32_t r = 0; r < n; r++) {
        cc->be[r] = sd_cu_of(bes[r]);
        devs[r] = cc->be[r]->device;
        for (int32_t q = 0; q < r; q++)
            if (devs[q] == devs[r]) {
                free(cc);
                return sd_errorf(err, SD_ERR_ARG,
                                 "comm: ranks %d and %d are both on GPU %d (one GPU per rank)", q,
                                 r, devs[r]);
            }
    }
    if (n == 1) {
        *out = &cc->base;
        return SD_OK;
    }
#ifdef SD_HAVE_NCCL
    size_t bytes;
    if (sd_mul_size((size_t)n * sizeof(float), (size_t)max_elems, &bytes)) {
        free(cc);
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
#endif
    *out = &cc->base;
    return SD_OK;
}
