/*
 * runtime/backend/cuda/sd_cuda.h: the interface between the library and the CUDA backend
 * module. The backend (this folder, C++/CUDA) is built as a shared module,
 * libspecdec_cuda.so, linked against cudart, cuBLAS and NCCL; the library itself never
 * links them. runtime/backend/backend.c loads the module with dlopen the first time a CUDA
 * device is asked for (sd_backend_init, sd_backend_device_count, sd_comm_init with CUDA
 * backends), so a CPU run, `specdec --version` and every CPU test map none of the CUDA
 * libraries, and one binary starts equally fast with or without a GPU.
 *
 * Where the module is looked for, in order: $SD_CUDA_MODULE (a path to the file), then
 * SD_CUDA_MODULE_NAME beside the executable (/proc/self/exe), in ../lib from it, and beside
 * the object that holds the library (dladdr). A missing or broken module (not found, a
 * dependency such as libcudart.so.13 missing, not a specdec module, another build's) is a
 * one-line SD_ERR_UNSUPPORTED naming the file and the reason, never a crash.
 *
 * The module exports one symbol, sd_cuda_module_v1 (SD_CUDA_MODULE_SYMBOL), returning the
 * table below; the library checks abi and the sizes of the structs both sides share before
 * calling anything else. The module needs no symbol of the executable: it reads the KV
 * cache only through the library's accessors, handed to it in sd_cuda_host (so the cache's
 * layout stays the library's alone), and carries a hidden copy of runtime/base (the error
 * record and checked sizes: plain functions of their arguments).
 */
#ifndef SD_BACKEND_CUDA_H
#define SD_BACKEND_CUDA_H

#include <stdint.h>

#include "kv/sd_kv.h"
#include "runtime/backend/sd_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SD_CUDA_MODULE_ABI    2
#define SD_CUDA_MODULE_NAME   "libspecdec_cuda.so"
#define SD_CUDA_MODULE_SYMBOL "sd_cuda_module_v1"

/* The library functions the module calls (kv/sd_kv.h's accessors). */
typedef struct sd_cuda_host {
    void *(*kv_k)(sd_kv *kv, int32_t layer, int32_t pos);
    void *(*kv_v)(sd_kv *kv, int32_t layer, int32_t pos);
    int32_t (*kv_span)(const sd_kv *kv, int32_t pos);
    int32_t (*kv_capacity)(const sd_kv *kv);
    int32_t (*kv_dim)(const sd_kv *kv);
    sd_type (*kv_type)(const sd_kv *kv);
    size_t (*kv_row_bytes)(const sd_kv *kv);
    int32_t (*kv_block_table)(const sd_kv *kv, int32_t layer, const int32_t **ids,
                              int32_t *block_size);
} sd_cuda_host;

typedef struct sd_cuda_module {
    uint32_t abi;           /* SD_CUDA_MODULE_ABI */
    uint32_t sizeof_ops;    /* sizeof(sd_backend_ops) */
    uint32_t sizeof_params; /* sizeof(sd_backend_params) */
    uint32_t sizeof_error;  /* sizeof(sd_error) */
    uint32_t sizeof_host;   /* sizeof(sd_cuda_host) */
    const char *build;      /* "nvcc 13.0, sm 80 90, NCCL": what the module was built with */

    /*
     * The CUDA backend on device p->device_id; host (kept, static storage) gives the KV
     * cache accessors. Errors: SD_ERR_ARG (bad sizes, no such
     * device), SD_ERR_UNSUPPORTED ("no CUDA device found (cudaGetDeviceCount: ...)" where
     * there is no GPU or driver; a GPU this build has no kernels for), SD_ERR_OOM (naming
     * the scratch that did not fit), SD_ERR_IO (another CUDA or cuBLAS failure, with the
     * call and its message). Environment, read once here: SD_CUDA_GEMM_MIN_TOK=N (calls
     * with n_tok >= N use cuBLAS; default 18; 0: never), SD_CUDA_GRAPHS=0 (run decode steps
     * op by op instead of as replayed CUDA graphs), SD_CUDA_SYNC=1 (synchronize after every
     * op, naming the op of an asynchronous fault; graphs off), SD_CUDA_PROFILE=FILE (time
     * every op with CUDA events, graphs off; one JSON line per backend appended to FILE
     * when it is freed).
     */
    int (*backend_init)(const sd_cuda_host *host, const sd_backend_params *p, sd_backend **out,
                        sd_error *err);
    /* CUDA devices present (0 where there is no GPU or no driver: then SD_ERR_UNSUPPORTED
     * with cudaGetDeviceCount's message). */
    int (*device_count)(int32_t *n, sd_error *err);
    /* A communicator over n CUDA backends (one per GPU, each driven by its own thread).
     * With NCCL: ncclCommInitAll over their devices; without it, n must be 1. */
    int (*comm_init)(sd_backend *const *bes, int32_t n, int64_t max_elems, sd_comm **out,
                     sd_error *err);
} sd_cuda_module;

typedef const sd_cuda_module *(*sd_cuda_module_fn)(void);

/* The module's entry (defined in backend.cu, exported from libspecdec_cuda.so). */
const sd_cuda_module *sd_cuda_module_v1(void);

/* Library side (runtime/backend/backend.c): the loaded module's table, or
 * SD_ERR_UNSUPPORTED with the reason (see the top of this file). Thread-safe; the module
 * stays loaded for the life of the process. */
int sd_cuda_module_open(const sd_cuda_module **out, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_BACKEND_CUDA_H */
