/*
 * runtime/backend/cuda/status.cu: the CUDA backend's error recording (cuda_impl.cuh,
 * "errors"): the first failure of a CUDA or cuBLAS call or a kernel launch is kept in the
 * backend (c->err) until the next sync or read returns it, and the ops after it are
 * skipped (sd_cu_enter). Under every other file of the folder, which all call it; moved
 * from backend.cu unchanged.
 */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/backend/cuda/cuda_impl.cuh"

void sd_cu_failf(sd_cuda_backend *c, sd_status st, const char *fmt, ...) {
    if (c->failed) return;
    char msg[SD_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = 1;
    sd_errorf(&c->err, st, "cuda backend (device %d, %s): %s", c->device, c->gpu_name, msg);
}

static sd_status status_of(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? SD_ERR_OOM : SD_ERR_IO;
}

int sd_cu_check(sd_cuda_backend *c, cudaError_t e, const char *op, const char *call) {
    if (e == cudaSuccess) return 1;
    sd_cu_failf(c, status_of(e), "%s: %s failed: %s (%s)", op, call, cudaGetErrorString(e),
                cudaGetErrorName(e));
    cudaGetLastError(); /* a non-sticky error must not be reported again by the next launch */
    return 0;
}

int sd_cu_launched(sd_cuda_backend *c, const char *op, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        sd_cu_failf(c, status_of(e), "%s: launch of %s failed: %s (%s)", op, kernel,
                    cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (c->sync_each && !c->exec_par) {
        e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            sd_cu_failf(c, status_of(e), "%s: kernel %s failed: %s (%s)", op, kernel,
                        cudaGetErrorString(e), cudaGetErrorName(e));
            return 0;
        }
    }
    return 1;
}

#ifdef SD_HAVE_CUBLAS
int sd_cu_blas_check(sd_cuda_backend *c, cublasStatus_t s, const char *op, const char *call) {
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    sd_cu_failf(c, s == CUBLAS_STATUS_ALLOC_FAILED ? SD_ERR_OOM : SD_ERR_IO,
                "%s: %s failed: %s (%s)", op, call, cublasGetStatusString(s),
                cublasGetStatusName(s));
    return 0;
}
#endif

int sd_cu_enter(sd_cuda_backend *c) {
    if (c->failed) return 0;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device)
        return sd_cu_check(c, cudaSetDevice(c->device), "op", "cudaSetDevice");
    return 1;
}
