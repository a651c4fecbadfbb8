/*
 * runtime/backend/cuda/sd_cuda.h: the C interface of the CUDA backend (compiled only with
 * -DSD_CUDA=ON; the library reaches it through sd_backend_init, sd_backend_device_count and
 * sd_comm_init in runtime/backend/). Implemented in C++/CUDA in this folder.
 */
#ifndef SD_BACKEND_CUDA_H
#define SD_BACKEND_CUDA_H

#include <stdint.h>

#include "runtime/backend/sd_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The CUDA backend on device p->device_id. Errors: SD_ERR_ARG (bad sizes, no such device),
 * SD_ERR_UNSUPPORTED ("no CUDA device found (cudaGetDeviceCount: ...)" where there is no
 * GPU or driver; a GPU this build has no kernels for), SD_ERR_OOM (naming the scratch that
 * did not fit), SD_ERR_IO (another CUDA or cuBLAS failure, with the call and its message).
 * Environment, read once here: SD_CUDA_GEMM_MIN_TOK=N (calls with n_tok >= N use cuBLAS;
 * default 18; 0: never), SD_CUDA_GRAPHS=1 (capture decode steps of <= 17 tokens as CUDA
 * graphs), SD_CUDA_SYNC=1 (synchronize after every op, naming the op of an asynchronous
 * fault).
 */
int sd_backend_cuda_init(const sd_backend_params *p, sd_backend **out, sd_error *err);

/* CUDA devices present (0 where there is no GPU or no driver: then SD_ERR_UNSUPPORTED with
 * cudaGetDeviceCount's message). */
int sd_cuda_device_count(int32_t *n, sd_error *err);

/* A communicator over n CUDA backends (one per GPU, each driven by its own thread). With
 * NCCL (SD_NCCL): ncclCommInitAll over their devices; without it, n must be 1. */
int sd_comm_cuda_init(sd_backend *const *bes, int32_t n, int64_t max_elems, sd_comm **out,
                      sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_BACKEND_CUDA_H */
