/*
 * Compute backend: a table of function pointers (as ggml-backend's ggml_backend_i) with
 * a CPU implementation (backend_cpu.c). The forward pass (model.c) calls only these
 * ops, so a CUDA backend can be added by implementing the same table; draft/, target/
 * and verify/ never see it.
 *
 * Op shapes (row-major; [rows, cols]; float unless stated; n_tok >= 1 tokens at
 * positions pos0 .. pos0 + n_tok - 1):
 *   get_rows : W typed [rows, cols], ids int32 [n_tok] (each < rows)
 *              -> Y [n_tok, cols]                       (dequantized embedding lookup)
 *   matmul   : W typed [rows, cols], X [n_tok, cols] -> Y [n_tok, rows],
 *              Y[b, r] = dot(W[r, :], X[b, :]); X is first converted once per call to
 *              the activation type of W (sd_vec_dot_type), in the prepared layout of
 *              sd_quantize_activations, into scratch sized at init (sd_backend_params:
 *              sd_activations_bytes for n_batch rows of max_cols). Y must not alias X.
 *   rmsnorm  : X [n_tok, n], w [n] -> Y [n_tok, n], y = x / sqrt(mean(x^2) + eps) * w
 *              (Y may alias X)
 *   rope     : X [n_tok, n_head * head_dim] rotated in place: in every head, pairs
 *              (2i, 2i+1) for i < n_rot/2 by theta = pos * base^(-2i/n_rot)
 *   kv_store : K, V [n_tok, kv_dim] -> KV cache rows of layer l at positions
 *              pos0 .. pos0 + n_tok - 1 (must be reserved), converted to the cache's
 *              element type (F32: copied; F16: rounded to nearest even)
 *   attention: Q [n_tok, n_head * head_dim], KV cache layer l positions [0, pos0+n_tok)
 *              -> O [n_tok, n_head * head_dim]. Query t (position p = pos0 + t) sees
 *              keys [0, p] (causal); head h reads KV head h / (n_head / n_head_kv) (GQA);
 *              scores scaled by 1/sqrt(head_dim), softmax over keys. F16 rows are
 *              converted to f32 as they are read. The CPU backend reads each K/V row
 *              once for all (up to 8) query heads that share its KV head.
 *   softmax  : X [n_rows, n] in place, per row
 *   swiglu   : G [n], U [n] -> Y [n], y = silu(g) * u (Y may alias G or U)
 *   add      : Y [n] += X [n]
 *
 * Determinism contract (what makes batched verification bit-identical to single-token
 * decoding): every output element is computed by the same arithmetic in the same order
 * whatever n_tok, pos0 and the thread count: ops split work across threads only by
 * whole output rows / (token, head) pairs, never inside a reduction.
 *
 * CPU threading: ops below SD_CPU_PAR_MIN_WORK multiply-adds (backend_cpu.c) stay on
 * the calling thread (so tiny models such as stories260K never pay for a fork/join);
 * the environment variable of that name, read at init, overrides the threshold (the
 * tests set 0 to exercise the threaded paths on tiny models). Larger ops run as one
 * OpenMP parallel region each; matmul rows are handed out in chunks (dynamic
 * schedule), attention in (token, KV head, head block) items. libgomp's default wait
 * policy spins between regions; on a machine whose cores are shared with other busy
 * processes, OMP_WAIT_POLICY=passive is much faster with 2+ threads (measured: a
 * 1.1B-shape decode step 0.2-0.3 s passive vs 0.3-3 s default on a loaded 2-core box).
 *
 * Memory: pointers passed to ops are backend memory. For the CPU backend that is host
 * memory; a device backend will add buffer allocation entries to this table. Ops
 * allocate nothing: all scratch is allocated by the backend's init.
 */
#ifndef SD_BACKEND_H
#define SD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kv/sd_kv.h"
#include "quant/sd_quant.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A typed weight matrix [rows, cols] (GGUF ne = {cols, rows}), rows contiguous. */
typedef struct sd_weight {
    sd_type type;
    int64_t rows;
    int64_t cols;
    size_t row_bytes; /* sd_type_row_bytes(type, cols) */
    const void *data;
} sd_weight;

typedef struct sd_backend sd_backend;

typedef struct sd_backend_ops {
    const char *name;
    void (*free)(sd_backend *be);
    void (*get_rows)(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                     float *y);
    void (*matmul)(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok, float *y);
    void (*rmsnorm)(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                    float eps, float *y);
    void (*rope)(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                 int32_t head_dim, int32_t n_rot, float base);
    void (*kv_store)(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                     int32_t kv_dim, const float *k, const float *v);
    void (*attention)(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                      int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                      float *out);
    void (*softmax)(sd_backend *be, float *x, int32_t n_rows, int32_t n);
    void (*swiglu)(sd_backend *be, const float *g, const float *u, int64_t n, float *y);
    void (*add)(sd_backend *be, float *y, const float *x, int64_t n);
} sd_backend_ops;

/* Every backend struct starts with this header. */
struct sd_backend {
    const sd_backend_ops *ops;
};

/* What a backend must size its scratch for (all allocation happens at init). */
typedef struct sd_backend_params {
    int32_t n_threads; /* 0 = all cores */
    int32_t n_batch;   /* most tokens per op call */
    int64_t max_cols;  /* widest matmul input row */
    int32_t n_ctx;     /* most keys one attention query sees */
} sd_backend_params;

/* CPU backend (OpenMP). Errors: SD_ERR_ARG (non-positive sizes), SD_ERR_OOM. */
int sd_backend_cpu_init(const sd_backend_params *p, sd_backend **out, sd_error *err);
/* Threads the CPU backend uses (after resolving 0 = all cores). */
int32_t sd_backend_cpu_n_threads(const sd_backend *be);
/* The CPU backend's attention kernels: "scalar", "avx2" (AVX2+FMA+F16C) or "avx512"
 * (AVX-512F). At init: the best this CPU runs, never above the matmul kernels
 * (sd_quant_kernels_name(), which SD_KERNELS lowers). */
const char *sd_backend_cpu_kernels(const sd_backend *be);
/* Use the attention kernels called `name` (tests compare the levels). Returns -1, and
 * changes nothing, if the name is unknown or this CPU cannot run them. */
int sd_backend_cpu_set_kernels(sd_backend *be, const char *name);

/* Free any backend. NULL accepted. */
static inline void sd_backend_free(sd_backend *be) {
    if (be) be->ops->free(be);
}

#ifdef __cplusplus
}
#endif
#endif /* SD_BACKEND_H */
