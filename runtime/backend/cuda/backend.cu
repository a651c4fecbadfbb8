/*
 * runtime/backend/cuda/backend.cu: the CUDA backend's ops table, memory, init, and the
 * module's entry (sd_cuda_module_v1). Op entries are in ops.cu, how records run (fusing,
 * graphs) in graph.cu, kernels in one file per op (see cuda_impl.cuh), error recording in
 * status.cu (under every other file), the stream wait in comm.cu. The files call downwards
 * only: status.cu, the kernels, graph.cu, comm.cu and ops.cu, backend.cu.
 *
 * Memory: every buffer is cudaMalloc'd device memory with SD_CU_PAD bytes after it, zeroed
 * on allocation. Weights are uploaded once (buffer_from_host copies host[0 .. bytes) into a
 * new device buffer, keeping the GGUF block layouts) on the backend's stream, through two
 * pinned staging halves (the host copy into one overlaps the DMA from the other), and the
 * call returns when the copy is complete: nothing orders the legacy stream with ours, so
 * no copy goes there. Output buffers (SD_BUFFER_OUTPUT: the logits rows) get a pinned host
 * shadow: read() from them copies device -> pinned in chunks, each chunk copied on to the
 * caller while the next one is in flight. caps.host_memory = 0, so the forward pass reads
 * back only the logits rows it returns.
 *
 * Every sync point (read, write, sync, a buffer call, free) first ends the graph step and
 * launches what the fusing window holds (sd_cu_flush), then waits for the stream (a rank of
 * a communicator polls it, so that a failed peer is an error, not a hang: sd_cu_wait).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

#ifndef SD_CUDA_BUILD_DESC
#define SD_CUDA_BUILD_DESC "nvcc"
#endif

/* ---- errors (recorded by status.cu) ---- */

/* Hand the pending error (if any) to err and clear it. */
static int take_error(sd_cuda_backend *c, sd_error *err) {
    if (!c->failed) return SD_OK;
    const int st = (int)c->err.status;
    if (err) *err = c->err;
    c->failed = 0;
    sd_error_clear(&c->err);
    return st;
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

/* cudaMalloc of bytes + SD_CU_PAD with a message naming what did not fit and the free
 * memory. */
static int dev_alloc(sd_cuda_backend *c, size_t bytes, const char *what, void **out,
                     sd_error *err) {
    *out = NULL;
    size_t total;
    if (sd_add_size(bytes, SD_CU_PAD, &total))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: %s: %zu bytes overflow", what, bytes);
    cudaError_t e = cudaMalloc(out, total);
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

/* The sync point before host-visible memory traffic: run everything called so far. */
static int sync_point(sd_cuda_backend *c, const char *op) {
    sd_cu_flush(c);
    if (cudaSetDevice(c->device) != cudaSuccess) cudaGetLastError();
    return sd_cu_wait(c, op);
}

/* The pinned shadow of output buffer memory [p, p + bytes), or NULL. */
static uint8_t *shadow_of(sd_cuda_backend *c, const void *p, size_t bytes) {
    for (int i = 0; i < SD_CU_MAX_OUT; i++) {
        const uint8_t *a = (const uint8_t *)c->out[i].addr;
        if (a && (const uint8_t *)p >= a &&
            (size_t)((const uint8_t *)p - a) + bytes <= c->out[i].size)
            return (uint8_t *)c->out[i].pinned + ((const uint8_t *)p - a);
    }
    return NULL;
}

static int cu_buffer_alloc(sd_backend *be, size_t bytes, sd_buffer_usage usage, sd_buffer **out,
                           sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    *out = NULL;
    sync_point(c, "buffer_alloc (queued ops)");
    void *p = NULL;
    int rc = dev_alloc(c, bytes, usage_name(usage), &p, err);
    if (rc) return rc;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes + SD_CU_PAD, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return sd_errorf(err, SD_ERR_IO, "cuda backend: zeroing the %s (%zu bytes): %s",
                         usage_name(usage), bytes, cudaGetErrorString(e));
    }
    if (usage == SD_BUFFER_OUTPUT && bytes > 0) {
        for (int i = 0; i < SD_CU_MAX_OUT; i++) {
            if (c->out[i].addr) continue;
            void *h = NULL;
            if (cudaHostAlloc(&h, bytes, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError(); /* no shadow: reads go to pageable memory directly */
                break;
            }
            c->out[i].addr = p;
            c->out[i].size = bytes;
            c->out[i].pinned = h;
            break;
        }
    }
    return buffer_new(c, p, bytes, usage, out, err);
}

static int cu_buffer_from_host(sd_backend *be, const void *host, size_t bytes, sd_buffer **out,
                               sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    *out = NULL;
    sync_point(c, "buffer_from_host (queued ops)");
    void *p = NULL;
    int rc = dev_alloc(c, bytes, "weights", &p, err);
    if (rc) return rc;
    cudaError_t e = cudaMemsetAsync((uint8_t *)p + bytes, 0, SD_CU_PAD, c->stream);
    const uint8_t *src = (const uint8_t *)host;
    for (size_t off = 0, k = 0; e == cudaSuccess && off < bytes; k++) {
        const size_t n = bytes - off < SD_CU_STAGE_BYTES ? bytes - off : SD_CU_STAGE_BYTES;
        if (c->stage) {
            /* half k % 2 is free once its previous DMA is done */
            uint8_t *h = c->stage + (k % 2) * SD_CU_STAGE_BYTES;
            e = cudaEventSynchronize(c->stage_ev[k % 2]);
            if (e != cudaSuccess) break;
            memcpy(h, src + off, n);
            e = cudaMemcpyAsync((uint8_t *)p + off, h, n, cudaMemcpyHostToDevice, c->stream);
            if (e == cudaSuccess) e = cudaEventRecord(c->stage_ev[k % 2], c->stream);
        } else {
            e = cudaMemcpyAsync((uint8_t *)p + off, src + off, n, cudaMemcpyHostToDevice,
                                c->stream);
        }
        off += n;
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaStreamSynchronize(c->stream);
        cudaFree(p);
        return sd_errorf(err, SD_ERR_IO, "cuda backend: uploading %zu bytes of weights: %s", bytes,
                         cudaGetErrorString(e));
    }
    return buffer_new(c, p, bytes, SD_BUFFER_WEIGHTS, out, err);
}

static void cu_buffer_free(sd_backend *be, sd_buffer *buf) {
    if (!buf) return;
    sd_cuda_backend *c = sd_cu_of(be);
    sync_point(c, "buffer_free (queued ops)"); /* no queued op may still use it */
    for (int i = 0; i < SD_CU_MAX_OUT; i++)
        if (c->out[i].addr == buf->addr) {
            cudaFreeHost(c->out[i].pinned);
            memset(&c->out[i], 0, sizeof c->out[i]);
        }
    cudaFree(buf->addr);
    cudaGetLastError();
    free(buf);
}

static int cu_write(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    sd_cu_flush(c);
    if (sd_cu_enter(c) && bytes) {
        if (sd_cu_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
                        "write", "cudaMemcpyAsync (host to device)"))
            sd_cu_wait(c, "write");
    }
    return take_error(c, err);
}

static int cu_read(sd_backend *be, void *dst, const void *src, size_t bytes, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    sd_cu_flush(c);
    if (!sd_cu_enter(c)) return take_error(c, err);
    uint8_t *sh = bytes >= ((size_t)64 << 10) && !c->comm ? shadow_of(c, src, bytes) : NULL;
    if (sh) {
        /* chunk k: device -> pinned, then pinned -> dst while chunk k + 1 is in flight */
        const size_t ch = ((bytes + SD_CU_RD_CHUNKS - 1) / SD_CU_RD_CHUNKS + 4095) & ~(size_t)4095;
        int k = 0, ok = 1;
        for (size_t off = 0; ok && off < bytes; off += ch, k++) {
            const size_t n = bytes - off < ch ? bytes - off : ch;
            ok = sd_cu_check(c,
                             cudaMemcpyAsync(sh + off, (const uint8_t *)src + off, n,
                                             cudaMemcpyDeviceToHost, c->stream),
                             "read", "cudaMemcpyAsync (device to pinned host)") &&
                 sd_cu_check(c, cudaEventRecord(c->rd_ev[k], c->stream), "read", "cudaEventRecord");
        }
        k = 0;
        for (size_t off = 0; ok && off < bytes; off += ch, k++) {
            const size_t n = bytes - off < ch ? bytes - off : ch;
            ok = sd_cu_check(c, cudaEventSynchronize(c->rd_ev[k]), "read (queued ops)",
                             "cudaEventSynchronize");
            if (ok) memcpy((uint8_t *)dst + off, sh + off, n);
        }
        if (!ok) cudaStreamSynchronize(c->stream);
    } else {
        if (bytes)
            sd_cu_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                        "read", "cudaMemcpyAsync (device to host)");
        sd_cu_wait(c, "read (queued ops)");
    }
    return take_error(c, err);
}

static int cu_sync(sd_backend *be, sd_error *err) {
    sd_cuda_backend *c = sd_cu_of(be);
    sd_cu_flush(c);
    if (sd_cu_enter(c)) sd_cu_wait(c, "sync (queued ops)");
    return take_error(c, err);
}

static void cu_free(sd_backend *be) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!c) return;
    cudaSetDevice(c->device);
    sd_cu_flush(c);
    if (c->stream) cudaStreamSynchronize(c->stream);
    sd_cu_prof_write(c);
    sd_cu_graphs_off(c);
#ifdef SD_HAVE_CUBLAS
    if (c->blas) cublasDestroy(c->blas);
#endif
    cudaFree(c->blas_ws);
    cudaFree(c->a32_q);
    cudaFree(c->a32_d16);
    cudaFree(c->a32_df);
    cudaFree(c->a32_ds);
    cudaFree(c->ak_q);
    cudaFree(c->ak_d);
    cudaFree(c->xh);
    cudaFree(c->wh);
    cudaFree(c->att_o);
    cudaFree(c->att_m);
    cudaFree(c->att_l);
    cudaFree(c->d_par);
    cudaFreeHost(c->h_par);
    cudaFree(c->tab_slot_d);
    cudaFreeHost(c->tab_slot_h);
    for (int i = 0; i < SD_CU_TAB_SLOTS; i++)
        if (c->tab_slot[i].ev) cudaEventDestroy(c->tab_slot[i].ev);
    cudaFreeHost(c->stage);
    for (int i = 0; i < SD_CU_MAX_OUT; i++)
        if (c->out[i].pinned) cudaFreeHost(c->out[i].pinned);
    if (c->par_ev) cudaEventDestroy(c->par_ev);
    for (int i = 0; i < 2; i++) {
        if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
    }
    for (int i = 0; i < SD_CU_RD_CHUNKS; i++)
        if (c->rd_ev[i]) cudaEventDestroy(c->rd_ev[i]);
    if (c->prof) {
        for (int i = 0; i < 2 * SD_CU_PROF_EVENTS; i++)
            if (c->prof->ev[i]) cudaEventDestroy(c->prof->ev[i]);
        free(c->prof);
    }
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c->step_ops);
    free(c);
}

/* Positional (C++17 has no designated initializers): the assert catches a changed face. */
static int cu_supports_type(const sd_backend *be, sd_type t) {
    (void)be;
    return sd_cu_with_type(t, [](auto) {});
}

static_assert(sizeof(sd_backend_ops) == 27 * sizeof(void *),
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
    /* .get_rows = */ sd_cu_op_get_rows,
    /* .matmul = */ sd_cu_op_matmul,
    /* .matmul_multi = */ nullptr,
    /* .rmsnorm = */ sd_cu_op_rmsnorm,
    /* .rope = */ sd_cu_op_rope,
    /* .add_bias = */ sd_cu_op_add_bias,
    /* .kv_store = */ sd_cu_op_kv_store,
    /* .attention = */ sd_cu_op_attention,
    /* .softmax = */ sd_cu_op_softmax,
    /* .swiglu = */ sd_cu_op_swiglu,
    /* .add = */ sd_cu_op_add,
    /* .copy = */ sd_cu_op_copy,
    /* .geglu = */ nullptr, /* gemma3 is refused by name at session init */
    /* .scale = */ nullptr,
    /* .set_window = */ nullptr,
    /* .attention_tree = */ nullptr, /* no token trees: sd_session_seq_decode_tree refuses */
    /* .kv_copy = */ nullptr,
};

/* ---- init ---- */

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    return end && *end == '\0' ? (int)v : def;
}

static int cuda_device_count(int32_t *n, sd_error *err) {
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
    size_t q_bytes, a, b;
    const size_t nb32 = (size_t)c->cols_q / SD_CU_QK, nbk = (size_t)c->cols_q / SD_CU_QKK;
    if (sd_mul_size((size_t)c->n_batch, (size_t)c->cols_q, &q_bytes))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: scratch size overflows");
    const size_t f32s = (size_t)c->n_batch * nb32 * sizeof(float);
    const size_t fks = (size_t)c->n_batch * nbk * sizeof(float);
    if ((rc =
             dev_alloc(c, q_bytes, "matmul scratch (Q8_0 activations)", (void **)&c->a32_q, err)) ||
        (rc = dev_alloc(c, f32s, "matmul scratch (scales)", (void **)&c->a32_d16, err)) ||
        (rc = dev_alloc(c, f32s, "matmul scratch (scales)", (void **)&c->a32_df, err)) ||
        (rc = dev_alloc(c, f32s, "matmul scratch (sums)", (void **)&c->a32_ds, err)) ||
        (rc = dev_alloc(c, q_bytes, "matmul scratch (Q8_K activations)", (void **)&c->ak_q, err)) ||
        (rc = dev_alloc(c, fks, "matmul scratch (Q8_K scales)", (void **)&c->ak_d, err)))
        return rc;
    /* Attention partials: SD_CU_ATT_TOK tokens x heads x att_nc x head_dim: every head of a
     * model (n_head * head_dim <= max_cols, head_dim >= 2); at least one head of
     * SD_CU_ATT_MAX_HD (attention.cu launches fewer heads at a time for a caller with more). */
    c->att_nc = (c->n_ctx + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
    const size_t att_cols =
        (size_t)(c->max_cols > SD_CU_ATT_MAX_HD ? c->max_cols : SD_CU_ATT_MAX_HD);
    if (sd_mul_size((size_t)SD_CU_ATT_TOK * (size_t)c->att_nc, att_cols, &a) ||
        sd_mul_size(a, sizeof(float), &b))
        return sd_errorf(err, SD_ERR_OOM, "cuda backend: attention scratch size overflows");
    c->att_o_elems = a;
    c->att_ml_elems = (size_t)SD_CU_ATT_TOK * (size_t)c->att_nc * (att_cols / 2 + 1);
    if ((rc = dev_alloc(c, b, "attention partials", (void **)&c->att_o, err)) ||
        (rc = dev_alloc(c, c->att_ml_elems * sizeof(float), "attention partials (max)",
                        (void **)&c->att_m, err)) ||
        (rc = dev_alloc(c, c->att_ml_elems * sizeof(float), "attention partials (sums)",
                        (void **)&c->att_l, err)))
        return rc;
    /* Events (no timing) and pinned memory: the graph parameter block, the upload staging,
     * the readback chunks. Pinned staging that cannot be had is not an error (uploads then
     * go from pageable memory). */
    cudaError_t e = cudaEventCreateWithFlags(&c->par_ev, cudaEventDisableTiming);
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming);
    for (int i = 0; i < SD_CU_RD_CHUNKS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&c->rd_ev[i], cudaEventDisableTiming);
    for (int i = 0; i < SD_CU_TAB_SLOTS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&c->tab_slot[i].ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&c->h_par, sizeof *c->h_par, 0);
    /* Paged KV block table slots: the table of n_ctx positions in blocks of one position. */
    c->tab_slot_cap = c->n_ctx + 1;
    const size_t slot_bytes = (size_t)SD_CU_TAB_SLOTS * (size_t)c->tab_slot_cap * sizeof(int32_t);
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&c->tab_slot_h, slot_bytes, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return sd_errorf(err, SD_ERR_IO, "cuda backend: events / pinned memory: %s",
                         cudaGetErrorString(e));
    }
    if ((rc = dev_alloc(c, sizeof *c->d_par, "graph parameters", (void **)&c->d_par, err)) ||
        (rc = dev_alloc(c, slot_bytes, "paged KV block table slots", (void **)&c->tab_slot_d, err)))
        return rc;
    for (int i = 0; i < SD_CU_TAB_SLOTS; i++) {
        c->tab_slot[i].h = c->tab_slot_h + (size_t)i * (size_t)c->tab_slot_cap;
        c->tab_slot[i].d = c->tab_slot_d + (size_t)i * (size_t)c->tab_slot_cap;
    }
    if (cudaHostAlloc((void **)&c->stage, 2 * SD_CU_STAGE_BYTES, 0) != cudaSuccess) {
        cudaGetLastError();
        c->stage = NULL;
    }
    if (c->use_graphs) {
        c->step_ops = (sd_cu_op *)malloc(SD_CU_STEP_MAX_OPS * sizeof *c->step_ops);
        if (!c->step_ops) return sd_errorf(err, SD_ERR_OOM, "cuda backend: out of host memory");
    }
#ifndef SD_HAVE_CUBLAS
    c->gemm_min_tok = 0; /* prefill runs on the batch-invariant kernels, 17 tokens a launch */
    return SD_OK;
#else
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
#endif
    return SD_OK;
}

static int prof_init(sd_cuda_backend *c, const char *path, sd_error *err) {
    c->prof = (sd_cu_prof *)calloc(1, sizeof *c->prof);
    if (!c->prof) return sd_errorf(err, SD_ERR_OOM, "cuda backend: out of host memory");
    snprintf(c->prof->path, sizeof c->prof->path, "%s", path);
    for (int i = 0; i < 2 * SD_CU_PROF_EVENTS; i++)
        if (cudaEventCreate(&c->prof->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            return sd_errorf(err, SD_ERR_IO, "cuda backend: SD_CUDA_PROFILE: cudaEventCreate");
        }
    return SD_OK;
}

static int cuda_backend_init(const sd_cuda_host *host, const sd_backend_params *p, sd_backend **out,
                             sd_error *err) {
    *out = NULL;
    if (!host || !p || p->n_batch < 1 || p->max_cols < 1 || p->n_ctx < 1 || p->device_id < 0)
        return sd_errorf(err, SD_ERR_ARG, "cuda backend: bad parameters");
    if (p->window > 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "cuda backend: no sliding-window attention (a window of %d positions "
                         "in a context of %d): run it on the cpu backend, or with a context of "
                         "at most %d",
                         p->window, p->n_ctx, p->window);
    int32_t n_dev = 0;
    int rc = cuda_device_count(&n_dev, err);
    if (rc) return rc;
    if (p->device_id >= n_dev)
        return sd_errorf(err, SD_ERR_ARG, "cuda backend: device %d requested, %d present",
                         p->device_id, n_dev);
    sd_cuda_backend *c = (sd_cuda_backend *)calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "cuda backend: out of host memory");
    c->base.ops = &cuda_ops;
    c->base.caps.host_memory = 0;
    c->base.device = SD_DEVICE_CUDA;
    c->host = host;
    c->device = p->device_id;
    c->n_batch = p->n_batch;
    c->max_cols = p->max_cols;
    c->cols_q = (p->max_cols + SD_CU_QKK - 1) / SD_CU_QKK * SD_CU_QKK;
    c->n_ctx = p->n_ctx;
    c->gemm_min_tok = env_int("SD_CUDA_GEMM_MIN_TOK", SD_CU_GEMM_MIN_TOK_DEFAULT);
    c->sync_each = env_int("SD_CUDA_SYNC", 0) == 1;
    const char *prof = getenv("SD_CUDA_PROFILE");
    c->use_graphs = env_int("SD_CUDA_GRAPHS", 1) != 0 && !c->sync_each && !(prof && *prof);
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
    if ((rc = alloc_scratch(c, err)) || (prof && *prof && (rc = prof_init(c, prof, err)))) {
        cu_free(&c->base);
        return rc;
    }
    *out = &c->base;
    return SD_OK;
}

/* ---- the module's entry ---- */

static const sd_cuda_module k_module = {
    /* .abi = */ SD_CUDA_MODULE_ABI,
    /* .sizeof_ops = */ (uint32_t)sizeof(sd_backend_ops),
    /* .sizeof_params = */ (uint32_t)sizeof(sd_backend_params),
    /* .sizeof_error = */ (uint32_t)sizeof(sd_error),
    /* .sizeof_host = */ (uint32_t)sizeof(sd_cuda_host),
    /* .build = */ SD_CUDA_BUILD_DESC,
    /* .backend_init = */ cuda_backend_init,
    /* .device_count = */ cuda_device_count,
    /* .comm_init = */ sd_comm_cuda_init,
};

extern "C" __attribute__((visibility("default"))) const sd_cuda_module *sd_cuda_module_v1(void) {
    return &k_module;
}
