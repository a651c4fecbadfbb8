/*
 * runtime/backend/cuda/backend.cu: the CUDA backend's ops table, memory, errors and
 * decode-step graphs. Kernels are in one file per op (see cuda_impl.cuh).
 *
 * Memory: every buffer is cudaMalloc'd device memory, zeroed on allocation; weights are
 * uploaded once (buffer_from_host copies host[0 .. bytes) to a new device buffer, keeping
 * the GGUF block layouts); read / write are cudaMemcpyAsync on the backend's stream
 * followed by a stream synchronize. caps.host_memory = 0, so the forward pass reads back
 * only the logits rows it returns.
 *
 * Graphs (SD_CUDA_GRAPHS=1, off by default): a decode step (get_rows with n_tok <= 17 up to
 * the next sync / read / write / buffer call) is captured into a CUDA graph and replayed
 * through one executable graph per n_tok, updated in place (cudaGraphExecUpdate) when the
 * kernel arguments of the new step differ (positions, KV rows). Capture only records: the
 * step runs at the read that ends it. A capture that fails returns its error for that step
 * and turns graphs off for the rest of the backend's life (the step's ops did not run; the
 * forward pass leaves the session unchanged on error, sd_model.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

/* ---- errors ---- */

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
    return 0;
}

int sd_cu_launched(sd_cuda_backend *c, const char *op, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        sd_cu_failf(c, status_of(e), "%s: launch of %s failed: %s (%s)", op, kernel,
                    cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (c->sync_each && !c->capturing) {
        e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            sd_cu_failf(c, status_of(e), "%s: kernel %s failed: %s (%s)", op, kernel,
                        cudaGetErrorString(e), cudaGetErrorName(e));
            return 0;
        }
    }
    return 1;
}

int sd_cu_blas_check(sd_cuda_backend *c, cublasStatus_t s, const char *op, const char *call) {
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    sd_cu_failf(c, s == CUBLAS_STATUS_ALLOC_FAILED ? SD_ERR_OOM : SD_ERR_IO,
                "%s: %s failed: %s (%s)", op, call, cublasGetStatusString(s),
                cublasGetStatusName(s));
    return 0;
}

int sd_cu_enter(sd_cuda_backend *c) {
    if (c->failed) return 0;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device)
        return sd_cu_check(c, cudaSetDevice(c->device), "op", "cudaSetDevice");
    return 1;
}

/* Hand the pending error (if any) to err and clear it. */
static int take_error(sd_cuda_backend *c, sd_error *err) {
    if (!c->failed) return SD_OK;
    const int st = (int)c->err.status;
    if (err) *err = c->err;
    c->failed = 0;
    sd_error_clear(&c->err);
    return st;
}

/* ---- graphs ---- */

void sd_cu_graphs_off(sd_cuda_backend *c) {
    c->use_graphs = 0;
    for (int i = 0; i <= SD_CU_GRAPH_MAX_TOK; i++) {
        if (c->exec[i]) cudaGraphExecDestroy(c->exec[i]);
        c->exec[i] = NULL;
    }
}

static void graph_begin(sd_cuda_backend *c, int32_t n_tok) {
    if (!c->use_graphs || c->capturing || c->failed || n_tok < 1 || n_tok > SD_CU_GRAPH_MAX_TOK)
        return;
    if (!sd_cu_check(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
                     "graph", "cudaStreamBeginCapture")) {
        sd_cu_graphs_off(c);
        return;
    }
    c->capturing = 1;
    c->cap_tok = n_tok;
}

/* End a capture (if one is open) and run it. */
static void graph_end(sd_cuda_backend *c) {
    if (!c->capturing) return;
    c->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (!sd_cu_check(c, e, "graph", "cudaStreamEndCapture") || c->failed) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        sd_cu_graphs_off(c);
        return;
    }
    cudaGraphExec_t *ex = &c->exec[c->cap_tok];
    if (*ex) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(*ex, g, &info) != cudaSuccess) {
            cudaGetLastError(); /* topology changed: instantiate afresh */
            cudaGraphExecDestroy(*ex);
            *ex = NULL;
        }
    }
    if (!*ex && !sd_cu_check(c, cudaGraphInstantiate(ex, g, 0), "graph", "cudaGraphInstantiate")) {
        *ex = NULL;
        cudaGraphDestroy(g);
        sd_cu_graphs_off(c);
        return;
    }
    cudaGraphDestroy(g);
    if (!sd_cu_check(c, cudaGraphLaunch(*ex, c->stream), "graph", "cudaGraphLaunch"))
        sd_cu_graphs_off(c);
}

/* ---- memory ---- */

static const char *usage_name(sd_buffer_usage u) {
    switch (u) {
    case SD_BUFFER_WEIGHTS:
        return "weights";
    case SD_BUFFER_KV:
        return "KV cache";
    case SD_BUFFER_COMPUTE:
        return "activations";
    case SD_BUFFER_OUTPUT:
        return "output";
    }
    return "buffer";
}

/* cudaMalloc with a message naming what did not fit and the free memory. */
static int dev_alloc(sd_cuda_backend *c, size_t bytes, const char *what, void **out,
                     sd_error *err) {
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e == cudaSuccess) return SD_OK;
    cudaGetLastError();
    *out = NULL;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    cudaGetLastError();
    return sd_errorf(err, e == cudaErrorMemoryAllocation ? SD_ERR_OOM : SD_ERR_IO,
                     "cuda backend (device %d, %s): cannot allocate %.1f MiB for the %s: %s "
                     "(%.1f MiB free of %.1f MiB)",
                     c->device, c->gpu_name, bytes / 1048576.0, what, cudaGetErrorString(e),
                     fr / 1048576.0, tot / 1048576.0);
}

static int buffer_new(sd_cuda_backend *c, void *addr, size_t bytes, sd_buffer_usage usage,
                      sd_buffer **out, sd_error *err) {
    sd_buffer *b = (sd_buffer *)calloc(1, sizeof *b);
    if (!b) {
        cudaFree(addr);
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: out of host memory (buffer record)");
    }
    b->be = &c->base;
    b->addr = addr;
    b->size = bytes;
    b->usage = usage;
    *out = b;
    return SD_OK;
}

static int cu_buffer_alloc(sd_backend *be, size_t bytes, sd_buffer_usage usage, sd_buffer **out,
                           sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    *out = NULL;
    graph_end(c);
    if (cudaSetDevice(c->device) != cudaSuccess) cudaGetLastError();
    void *p = NULL;
    int rc = dev_alloc(c, bytes, usage_name(usage), &p, err);
    if (rc) return rc;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes ? bytes : 256, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return sd_errorf(err, SD_ERR_IO, "cuda backend: zeroing the %s (%zu bytes): %s",
                         usage_name(usage), bytes, cudaGetErrorString(e));
    }
    return buffer_new(c, p, bytes, usage, out, err);
}

static int cu_buffer_from_host(sd_backend *be, const void *host, size_t bytes, sd_buffer **out,
                               sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    *out = NULL;
    graph_end(c);
    if (cudaSetDevice(c->device) != cudaSuccess) cudaGetLastError();
    void *p = NULL;
    int rc = dev_alloc(c, bytes, "weights", &p, err);
    if (rc) return rc;
    cudaError_t e = bytes ? cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) : cudaSuccess;
    if (e != cudaSuccess) {
        cudaFree(p);
        return sd_errorf(err, SD_ERR_IO, "cuda backend: uploading %zu bytes of weights: %s", bytes,
                         cudaGetErrorString(e));
    }
    return buffer_new(c, p, bytes, SD_BUFFER_WEIGHTS, out, err);
}

static void cu_buffer_free(sd_backend *be, sd_buffer *buf) {
    if (!buf) return;
    sd_cuda_backend *c = sd_cu_of(be);
    graph_end(c);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream); /* no queued op may still use it */
    cudaFree(buf->addr);
    cudaGetLastError();
    free(buf);
}

static int cu_write(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    graph_end(c);
    if (sd_cu_enter(c) && bytes) {
        sd_cu_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "write",
                    "cudaMemcpyAsync (host to device)");
        sd_cu_check(c, cudaStreamSynchronize(c->stream), "write", "cudaStreamSynchronize");
    }
    return take_error(c, err);
}

static int cu_read(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    graph_end(c);
    if (sd_cu_enter(c)) {
        if (bytes)
            sd_cu_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                        "read", "cudaMemcpyAsync (device to host)");
        sd_cu_check(c, cudaStreamSynchronize(c->stream), "read (queued ops)",
                    "cudaStreamSynchronize");
    }
    return take_error(c, err);
}

static int cu_sync(sd_backend *be, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    graph_end(c);
    if (sd_cu_enter(c))
        sd_cu_check(c, cudaStreamSynchronize(c->stream), "sync (queued ops)",
                    "cudaStreamSynchronize");
    return take_error(c, err);
}

/* ---- ops table ---- */

static void op_get_rows(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                        float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    graph_begin(c, n_tok); /* the first op of a forward step */
    sd_cu_get_rows(c, w, ids, n_tok, y);
}

static void op_matmul(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    if (c->blas && c->gemm_min_tok > 0 && n_tok >= c->gemm_min_tok)
        sd_cu_matmul_gemm(c, w, x, n_tok, y);
    else
        sd_cu_matmul(c, w, x, n_tok, y);
}

static void op_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                       float eps, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_rmsnorm(c, x, w, n_tok, n, eps, y);
}

static void op_rope(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                    int32_t head_dim, const sd_rope *r) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_rope(c, x, n_tok, pos0, n_head, head_dim, r);
}

static void op_add_bias(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_add_bias(c, y, b, n_tok, n);
}

static void op_kv_store(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                        int32_t kv_dim, const float *k, const float *v) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_kv_store(c, kv, layer, pos0, n_tok, kv_dim, k, v);
}

static void op_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                         int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                         float *out) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c))
        sd_cu_attention(c, q, kv, layer, pos0, n_tok, n_head, n_head_kv, head_dim, out);
}

static void op_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_softmax(c, x, n_rows, n);
}

static void op_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_swiglu(c, g, u, n, y);
}

static void op_add(sd_backend *be, float *y, const float *x, int64_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (sd_cu_enter(c)) sd_cu_add(c, y, x, n);
}

static void op_copy(sd_backend *be, float *y, const float *x, int64_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || n <= 0) return;
    sd_cu_check(
        c, cudaMemcpyAsync(y, x, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream),
        "copy", "cudaMemcpyAsync (device to device)");
}

static void cu_free(sd_backend *be) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g) cudaGraphDestroy(g);
        c->capturing = 0;
    }
    sd_cu_graphs_off(c);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->xq);
    cudaFree(c->xd);
    cudaFree(c->xh);
    cudaFree(c->wh);
    cudaFree(c->att_o);
    cudaFree(c->att_m);
    cudaFree(c->att_l);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

/* Positional (C++17 has no designated initializers): the assert catches a changed face. */
static int cu_supports_type(const sd_backend *be, sd_type t) {
    (void)be;
    return sd_cu_with_type(t, [](auto) {});
}

static_assert(sizeof(sd_backend_ops) == 22 * sizeof(void *),
              "sd_backend_ops changed: update cuda_ops to the new table");
static const sd_backend_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .free = */ cu_free,
    /* .buffer_alloc = */ cu_buffer_alloc,
    /* .buffer_from_host = */ cu_buffer_from_host,
    /* .buffer_free = */ cu_buffer_free,
    /* .write = */ cu_write,
    /* .read = */ cu_read,
    /* .sync = */ cu_sync,
    /* .supports_type = */ cu_supports_type,
    /* .prepare_weight = */ nullptr,
    /* .get_rows = */ op_get_rows,
    /* .matmul = */ op_matmul,
    /* .matmul_multi = */ nullptr,
    /* .rmsnorm = */ op_rmsnorm,
    /* .rope = */ op_rope,
    /* .add_bias = */ op_add_bias,
    /* .kv_store = */ op_kv_store,
    /* .attention = */ op_attention,
    /* .softmax = */ op_softmax,
    /* .swiglu = */ op_swiglu,
    /* .add = */ op_add,
    /* .copy = */ op_copy,
};

/* ---- init ---- */

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    return end && *end == '\0' ? (int)v : def;
}

extern "C" int sd_cuda_device_count(int32_t *n, sd_error *err) {
    *n = 0;
    int cnt = 0;
    cudaError_t e = cudaGetDeviceCount(&cnt);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "no CUDA device found (cudaGetDeviceCount: %s)",
                         cudaGetErrorString(e));
    }
    if (cnt <= 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "no CUDA device found (cudaGetDeviceCount: 0 devices)");
    *n = cnt;
    return SD_OK;
}

/* A kernel whose attributes tell whether this build has machine code (or PTX) for the GPU. */
__global__ void sd_cu_probe_kernel(int *p) {
    if (p) *p = 1;
}

static int alloc_scratch(sd_cuda_backend *c, sd_error *err) {
    int rc;
    size_t xq_bytes, xd_bytes, a, b;
    if (sd_mul_size((size_t)c->n_batch, (size_t)c->cols_q, &xq_bytes) ||
        sd_mul_size(xq_bytes / SD_CU_QK, sizeof(float), &xd_bytes))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: scratch size overflows");
    if ((rc = dev_alloc(c, xq_bytes, "matmul scratch (Q8_0 activations)", (void **)&c->xq, err)) ||
        (rc = dev_alloc(c, xd_bytes, "matmul scratch (activation scales)", (void **)&c->xd, err)))
        return rc;
    /* Attention partials: SD_CU_ATT_TOK tokens x n_head x att_nc x head_dim, with
     * n_head * head_dim <= max_cols and head_dim >= 2 (the loader's n_rot >= 2). */
    c->att_nc = (c->n_ctx + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
    if (sd_mul_size((size_t)SD_CU_ATT_TOK * (size_t)c->att_nc, (size_t)c->max_cols, &a) ||
        sd_mul_size(a, sizeof(float), &b))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: attention scratch size overflows");
    c->att_o_elems = a;
    c->att_ml_elems = (size_t)SD_CU_ATT_TOK * (size_t)c->att_nc * (size_t)(c->max_cols / 2 + 1);
    if ((rc = dev_alloc(c, b, "attention partials", (void **)&c->att_o, err)) ||
        (rc = dev_alloc(c, c->att_ml_elems * sizeof(float), "attention partials (max)",
                        (void **)&c->att_m, err)) ||
        (rc = dev_alloc(c, c->att_ml_elems * sizeof(float), "attention partials (sums)",
                        (void **)&c->att_l, err)))
        return rc;
    if (c->gemm_min_tok <= 0 || c->n_batch < c->gemm_min_tok) return SD_OK; /* no cuBLAS path */
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return sd_errorf(err, s == CUBLAS_STATUS_ALLOC_FAILED ? SD_ERR_OOM : SD_ERR_IO,
                         "cuda backend: cublasCreate failed: %s", cublasGetStatusString(s));
    }
    if ((rc = dev_alloc(c, SD_CU_BLAS_WS_BYTES, "cuBLAS workspace", &c->blas_ws, err))) return rc;
    s = cublasSetStream(c->blas, c->stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetWorkspace(c->blas, c->blas_ws, SD_CU_BLAS_WS_BYTES);
    if (s != CUBLAS_STATUS_SUCCESS)
        return sd_errorf(err, SD_ERR_IO, "cuda backend: cuBLAS stream / workspace: %s",
                         cublasGetStatusString(s));
    size_t xh_elems;
    if (sd_mul_size((size_t)c->n_batch, (size_t)c->max_cols, &xh_elems) ||
        sd_mul_size(xh_elems, sizeof(uint16_t), &a))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: prefill scratch size overflows");
    if ((rc = dev_alloc(c, a, "prefill activations (f16)", (void **)&c->xh, err)) ||
        (rc = dev_alloc(c, SD_CU_TILE_ELEMS * sizeof(uint16_t), "prefill weight tile (f16)",
                        (void **)&c->wh, err)))
        return rc;
    return SD_OK;
}

extern "C" int sd_backend_cuda_init(const sd_backend_params *p, sd_backend **out, sd_error *err) {
    *out = NULL;
    if (!p || p->n_batch < 1 || p->max_cols < 1 || p->n_ctx < 1 || p->device_id < 0)
        return sd_errorf(err, SD_ERR_ARG, "cuda backend: bad parameters");
    int32_t n_dev = 0;
    int rc = sd_cuda_device_count(&n_dev, err);
    if (rc) return rc;
    if (p->device_id >= n_dev)
        return sd_errorf(err, SD_ERR_ARG, "cuda backend: device %d requested, %d present",
                         p->device_id, n_dev);
    sd_cuda_backend *c = (sd_cuda_backend *)calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "cuda backend: out of host memory");
    c->base.ops = &cuda_ops;
    c->base.caps.host_memory = 0;
    c->base.device = SD_DEVICE_CUDA;
    c->device = p->device_id;
    c->n_batch = p->n_batch;
    c->max_cols = p->max_cols;
    c->cols_q = (p->max_cols + SD_CU_QK - 1) / SD_CU_QK * SD_CU_QK;
    c->n_ctx = p->n_ctx;
    c->gemm_min_tok = env_int("SD_CUDA_GEMM_MIN_TOK", SD_CU_GEMM_MIN_TOK_DEFAULT);
    c->sync_each = env_int("SD_CUDA_SYNC", 0) == 1;
    c->use_graphs = env_int("SD_CUDA_GRAPHS", 0) == 1 && !c->sync_each;
    snprintf(c->gpu_name, sizeof c->gpu_name, "?");

    cudaError_t e = cudaSetDevice(c->device);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, c->device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        free(c);
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "cuda backend: device %d: %s", p->device_id,
                         cudaGetErrorString(e));
    }
    snprintf(c->gpu_name, sizeof c->gpu_name, "%s", prop.name);
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, sd_cu_probe_kernel);
    if (e != cudaSuccess) {
        cudaGetLastError();
        rc = sd_errorf(err, SD_ERR_UNSUPPORTED,
                       "cuda backend: GPU %d (%s, compute capability %d.%d) cannot run this "
                       "build's kernels (%s); rebuild with CMAKE_CUDA_ARCHITECTURES including %d%d",
                       c->device, c->gpu_name, c->cc_major, c->cc_minor, cudaGetErrorString(e),
                       c->cc_major, c->cc_minor);
        free(c);
        return rc;
    }
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        c->stream = NULL;
        rc = sd_errorf(err, SD_ERR_IO, "cuda backend: cudaStreamCreate: %s", cudaGetErrorString(e));
        cu_free(&c->base);
        return rc;
    }
    if ((rc = alloc_scratch(c, err))) {
        cu_free(&c->base);
        return rc;
    }
    *out = &c->base;
    return SD_OK;
}
