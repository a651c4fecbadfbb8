/*
 * runtime/backend: the compute backend, a table of function pointers (as ggml-backend's
 * ggml_backend_i) with a CPU implementation (cpu/) and, in CUDA builds, a CUDA one
 * (cuda/). The forward pass (runtime/model) calls only these ops, so draft/, target/ and
 * verify/ never see a backend. Owns: the memory it allocates (buffers), its threads, its
 * scratch. May include: runtime/base, quant (element types, CPU kernels), kv (cache
 * bookkeeping). Must not include the model, the engine, the CLI.
 *
 * Memory. Every pointer an op takes for weights, activations or the KV cache is a
 * *backend address*: the host address of CPU memory for the CPU backend, a device
 * address for a device backend. The forward pass only does arithmetic on backend
 * addresses (row offsets), never dereferences them; it gets them from buffers the
 * backend allocates and owns (sd_buffer): weights are uploaded (device) or mapped in
 * place (CPU: the mmap'd GGUF, no copy), the KV cache storage, activations and scratch
 * are allocated zeroed, and host data crosses only through write (host -> backend) and
 * read (backend -> host, e.g. the logits rows the verifier needs). Arguments documented
 * as "host" (token ids, positions, norm epsilon...) are host values. A backend whose
 * memory is host memory says so (caps.host_memory): the forward pass may then hand it
 * host buffers directly (the logits rows are written in place, no copy).
 *
 * Errors. Ops return nothing: a device backend records the first failure of an op (a
 * launch error, an illegal address) and returns it from the next sync or read, with the
 * call and the code in the message. The CPU backend's ops cannot fail.
 *
 * Op shapes (row-major; [rows, cols]; float unless stated; n_tok >= 1 tokens at
 * positions pos0 .. pos0 + n_tok - 1):
 *   get_rows : W typed [rows, cols], ids int32 [n_tok] host (each < rows)
 *              -> Y [n_tok, cols]                       (dequantized embedding lookup)
 *   matmul   : W typed [rows, cols], X [n_tok, cols] -> Y [n_tok, rows],
 *              Y[b, r] = dot(W[r, :], X[b, :]); X is first converted once per call to
 *              the activation type of W (sd_vec_dot_type), into scratch sized at init
 *              (sd_backend_params: n_batch rows of max_cols). Y must not alias X.
 *   matmul_multi (optional, NULL: the forward pass calls matmul n_w times): n_w <=
 *              SD_MATMUL_MULTI_MAX matrices W_i [rows_i, cols] of one input X [n_tok,
 *              cols] -> Y_i [n_tok, rows_i]: exactly the bits of n_w matmul calls (Q, K,
 *              V of one layer; gate and up), in one hand-over to the threads.
 *   rmsnorm  : X [n_tok, n], w [n] -> Y [n_tok, n], y = x / sqrt(mean(x^2) + eps) * w
 *              (Y may alias X)
 *   rope     : X [n_tok, n_head * head_dim] rotated in place (sd_rope): in every head,
 *              for i < n_rot/2 the pair (2i, 2i+1) (SD_ROPE_NORM, llama) or (i, i + n_rot/2)
 *              (SD_ROPE_NEOX, qwen2) by theta = ((pos * freq_scale) * base^(-2i/n_rot))
 *              / factor_i (factor_i = 1 without frequency factors)
 *   add_bias : Y [n_tok, n] += b [n] (every row)
 *   kv_store : K, V [n_tok, kv_dim] -> KV cache rows of layer l at positions
 *              pos0 .. pos0 + n_tok - 1 (must be reserved), converted to the cache's
 *              element type (F32: copied; F16: rounded to nearest even; Q8_0 / Q4_0, CPU
 *              only: each row quantized by the reference quantizer)
 *   attention: Q [n_tok, n_head * head_dim], KV cache layer l positions [0, pos0+n_tok)
 *              -> O [n_tok, n_head * head_dim]. Query t (position p = pos0 + t) sees
 *              keys [0, p] (causal; with a window W at init, keys [max(0, p - W + 1), p]); head h
 * reads KV head h / (n_head / n_head_kv) (GQA); scores scaled by 1/sqrt(head_dim), softmax over
 * keys. F16 / Q8_0 / Q4_0 rows are converted to f32 as they are read. The cache may be paged (kv/:
 *              rows in blocks, reached span by span through sd_kv_span); the CPU backend
 *              reads every layout, a device backend refuses what it cannot read.
 *   softmax  : X [n_rows, n] in place, per row
 *   swiglu   : G [n], U [n] -> Y [n], y = silu(g) * u (Y may alias G or U)
 *   add      : Y [n] += X [n]
 *   copy     : Y [n] = X [n] (floats; Y must not overlap X)
 *
 * Determinism contract (what makes batched verification bit-identical to single-token
 * decoding): every output element is computed by the same arithmetic in the same order
 * whatever n_tok, pos0 and the thread count: ops split work only by whole output rows /
 * (token, head) pairs, never inside a reduction. tests/test_backend.c checks every op
 * of every backend built against the scalar reference, and batch == single bit for bit.
 * The CUDA backend (cuda/) keeps the contract for every call with n_tok below its cuBLAS
 * threshold (18 by default: every decode step and verification pass of K + 1 <= 17 tokens
 * runs its own fixed-order kernels); larger matmuls (prefill) go to cuBLAS, whose
 * algorithm depends on the shape, so a prefill batch is only close (F16 / TF32 operand
 * rounding) to the same tokens fed one by one. Its results differ from the CPU backend's
 * by summation order and device libm (powf, expf...) within float rounding; dequantization,
 * the Q8_0 activation quantizer, get_rows and F16 KV stores are bit-identical to the CPU.
 * A device error (a fault, a failed launch) is reported as SD_ERR_IO with the CUDA call
 * and its message; running out of device memory as SD_ERR_OOM naming the buffer.
 *
 * Ops allocate nothing: all scratch is allocated by the backend's init, all memory the
 * forward pass uses by buffer_alloc before the first eval.
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

/* Where a weight matrix's bytes are. */
typedef enum sd_weight_layout {
    SD_LAYOUT_ROWS = 0,   /* GGUF rows: row r at data + r * row_bytes */
    SD_LAYOUT_PACKED = 1, /* the CPU kernels' packed layout (quant/sd_quant.h, Packed
                             weights), made by the CPU backend's prepare_weight */
} sd_weight_layout;

/* A typed weight matrix [rows, cols] (GGUF ne = {cols, rows}); data is a backend address.
 * Layout SD_LAYOUT_ROWS unless a backend's prepare_weight changed it. */
typedef struct sd_weight {
    sd_type type;
    int64_t rows;
    int64_t cols;
    size_t row_bytes; /* sd_type_row_bytes(type, cols) */
    const void *data;
    sd_weight_layout layout;
} sd_weight;

typedef struct sd_backend sd_backend;

#define SD_MATMUL_MULTI_MAX 4 /* most matrices of one matmul_multi call */

/* Rotary position embedding (Su et al. 2021, "RoFormer"), as llama.cpp's ggml_rope_ext
 * without YaRN: the rotated pairs (mode), the base, linear position scaling and optional
 * per-frequency factors (Llama 3's rope_freqs.weight). */
typedef enum sd_rope_mode {
    SD_ROPE_NORM = 0, /* adjacent pairs (2i, 2i+1) (llama after the converters' Q/K permute) */
    SD_ROPE_NEOX = 2, /* pairs (i, i + n_rot/2) (GPT-NeoX; qwen2) */
} sd_rope_mode;

typedef struct sd_rope {
    int32_t n_rot; /* rotated dimensions per head (even, <= head_dim) */
    sd_rope_mode mode;
    float base;           /* <arch>.rope.freq_base */
    float freq_scale;     /* 1 / <arch>.rope.scaling.factor for linear scaling; 1 = none */
    const float *factors; /* [n_rot / 2] backend address, or NULL (all 1) */
} sd_rope;

/* What a buffer holds (a device backend may place them differently). */
typedef enum sd_buffer_usage {
    SD_BUFFER_WEIGHTS = 0, /* read-only model data */
    SD_BUFFER_KV = 1,      /* KV cache storage */
    SD_BUFFER_COMPUTE = 2, /* activations and scratch */
    SD_BUFFER_OUTPUT = 3,  /* results the host reads back (logits) */
} sd_buffer_usage;

/* Backend memory. Allocated and owned by the backend `be`; freed with sd_buffer_free
 * before the backend. A backend may extend it (its struct starts with this one). */
typedef struct sd_buffer {
    sd_backend *be;
    void *addr;  /* backend address of byte 0 */
    size_t size; /* bytes */
    sd_buffer_usage usage;
} sd_buffer;

typedef struct sd_backend_caps {
    int host_memory; /* 1: backend addresses are host addresses (the CPU backend) */
} sd_backend_caps;

typedef struct sd_backend_ops {
    const char *name;
    void (*free)(sd_backend *be);

    /* ---- memory (see the top of this file) ---- */
    /* bytes zeroed bytes (bytes may be 0: a valid empty buffer). SD_ERR_OOM names what did
     * not fit. */
    int (*buffer_alloc)(sd_backend *be, size_t bytes, sd_buffer_usage usage, sd_buffer **out,
                        sd_error *err);
    /* Weights: a buffer holding host[0 .. bytes). The CPU backend maps it in place (no
     * copy: host must outlive the buffer); a device backend uploads a copy. */
    int (*buffer_from_host)(sd_backend *be, const void *host, size_t bytes, sd_buffer **out,
                            sd_error *err);
    void (*buffer_free)(sd_backend *be, sd_buffer *buf);
    /* host -> backend address dst (bytes), backend -> host; both wait for queued ops. */
    int (*write)(sd_backend *be, void *dst, const void *host_src, size_t bytes, sd_error *err);
    int (*read)(sd_backend *be, void *host_dst, const void *src, size_t bytes, sd_error *err);
    /* Wait for queued ops; returns the first error an op recorded since the last sync. */
    int (*sync)(sd_backend *be, sd_error *err);
    /* 1 if get_rows and matmul have kernels for weights of type t (sessions check every
     * weight matrix at init, so an unsupported type is a clear error, not a failed op). */
    int (*supports_type)(const sd_backend *be, sd_type t);
    /* Optional (NULL: weights stay as placed). Called once per matmul weight (never for
     * one that get_rows reads) after its buffer is placed: the backend may rewrite it
     * into its kernels' layout in memory it owns and frees with itself, updating *w
     * (data, layout). The arithmetic of matmul does not change. Errors: SD_ERR_OOM. */
    int (*prepare_weight)(sd_backend *be, sd_weight *w, sd_error *err);

    /* ---- ops (shapes at the top of this file) ---- */
    void (*get_rows)(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                     float *y);
    void (*matmul)(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok, float *y);
    void (*matmul_multi)(sd_backend *be, const sd_weight *const *w, int32_t n_w, const float *x,
                         int32_t n_tok, float *const *y);
    void (*rmsnorm)(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                    float eps, float *y);
    void (*rope)(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                 int32_t head_dim, const sd_rope *r);
    void (*add_bias)(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n);
    void (*kv_store)(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                     int32_t kv_dim, const float *k, const float *v);
    void (*attention)(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                      int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                      float *out);
    void (*softmax)(sd_backend *be, float *x, int32_t n_rows, int32_t n);
    void (*swiglu)(sd_backend *be, const float *g, const float *u, int64_t n, float *y);
    void (*add)(sd_backend *be, float *y, const float *x, int64_t n);
    void (*copy)(sd_backend *be, float *y, const float *x, int64_t n);
    /* Optional ops of some architectures (NULL: the backend lacks them; a session whose
     * model needs one refuses at init, naming it):
     *   geglu     : G [n], U [n] -> Y [n], y = gelu(g) * u with GELU's tanh approximation
     *               0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (gemma3; Y may alias
     *               G or U)
     *   scale     : Y [n] *= s (host value) (gemma3's embedding scale sqrt(n_embd))
     *   set_window: the sliding window of the following attention calls (as
     *               sd_backend_params.window, <= the init window when that is > 0: a query
     *               at p sees keys [p - window + 1, p]; 0 = every key [0, p]); for models
     *               whose layers alternate local and global attention (gemma3). */
    void (*geglu)(sd_backend *be, const float *g, const float *u, int64_t n, float *y);
    void (*scale)(sd_backend *be, float *y, float s, int64_t n);
    void (*set_window)(sd_backend *be, int32_t window);
    /* Token trees (optional, NULL: the backend has none, and a tree pass is refused):
     *   attention_tree: as attention for a pass of n_tok tree nodes whose K/V rows are at
     *     cache positions pos0 .. pos0 + n_tok - 1; parent: int32 [n_tok], parent[t] < t,
     *     -1 for a node on the committed context. Query t sees the keys [0, pos0) and then
     *     the rows of its ancestors and itself, in ascending position (= by depth): the
     *     keys, in the order, that the same query sees in a chain pass over its own path,
     *     with the masked keys skipped (never added as -inf), so its output has the chain's
     *     bits. No sliding window (a backend made with one refuses at the session).
     *   kv_copy: K and V rows of layer l at positions src .. src + n_tok - 1 copied to
     *     dst .. dst + n_tok - 1 (dst <= src; both ranges reserved). */
    void (*attention_tree)(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                           int32_t n_tok, const int32_t *parent, int32_t n_head, int32_t n_head_kv,
                           int32_t head_dim, float *out);
    void (*kv_copy)(sd_backend *be, sd_kv *kv, int32_t layer, int32_t dst, int32_t src,
                    int32_t n_tok);
} sd_backend_ops;

/* Every backend struct starts with this header. */
struct sd_backend {
    const sd_backend_ops *ops;
    sd_backend_caps caps;
    sd_device device;
};

/* What a backend must size its scratch for (all allocation happens at init). */
typedef struct sd_backend_params {
    int32_t n_threads; /* CPU: 0 = all cores this process may use */
    int32_t n_batch;   /* most tokens per op call */
    int64_t max_cols;  /* widest matmul input row */
    int32_t n_ctx;     /* most keys one attention query sees */
    int32_t device_id; /* device backends: which device (0 = the first) */
    /* CPU: run on the threads of this other CPU backend (its pool, shared; n_threads is
     * then that backend's) instead of starting a pool of its own, e.g. a draft beside its
     * target: the two never run at once, and one set of workers does not compete with an
     * idle second set for the cores. NULL: an own pool. Either backend may be freed first. */
    sd_backend *share_threads;
    /* Sliding-window attention: > 0, a query at position p sees only the keys at
     * positions [p - window + 1, p] (Mistral's <arch>.attention.sliding_window); 0 = every
     * key [0, p]. A backend that cannot do it refuses at init (SD_ERR_UNSUPPORTED). */
    int32_t window;
} sd_backend_params;

/*
 * Make a backend for device dev. Errors: SD_ERR_ARG (non-positive sizes),
 * SD_ERR_UNSUPPORTED (a device this build or machine lacks, e.g. SD_DEVICE_CUDA in a
 * build without CUDA or with no GPU present: the message says which), SD_ERR_OOM.
 */
int sd_backend_init(sd_device dev, const sd_backend_params *p, sd_backend **out, sd_error *err);

/* CPU backend. Errors: SD_ERR_ARG (non-positive sizes), SD_ERR_OOM. */
int sd_backend_cpu_init(const sd_backend_params *p, sd_backend **out, sd_error *err);
/* Per-op timers of the CPU backend (off unless enabled; then each op reads the clock
 * twice: tens of nanoseconds). Wall-clock milliseconds and call counts per op kind;
 * matmuls also per weight type, with the weight bytes they read. While enabled,
 * matmul_multi runs its matrices one by one (so each type gets its own time): the
 * figures are those of the op sequence, not of one fused hand-over. */
typedef enum sd_prof_op {
    SD_PROF_MATMUL,
    SD_PROF_ATTENTION,
    SD_PROF_NORM,
    SD_PROF_ROPE,
    SD_PROF_KV_STORE,
    SD_PROF_ELEMENTWISE, /* swiglu, add, add_bias, copy, softmax */
    SD_PROF_GET_ROWS,
    SD_PROF_N
} sd_prof_op;
typedef struct sd_cpu_profile {
    double ms[SD_PROF_N];
    int64_t calls[SD_PROF_N];
    double matmul_ms[SD_TYPE_COUNT];    /* by weight type */
    double matmul_bytes[SD_TYPE_COUNT]; /* weight bytes read */
    int64_t matmul_calls[SD_TYPE_COUNT];
} sd_cpu_profile;
/* Names of the op kinds ("matmul", "attention", ...). */
const char *sd_prof_op_name(sd_prof_op op);
/* Turn the timers on (1) or off (0); either way they are reset. */
void sd_backend_cpu_profile_enable(sd_backend *be, int on);
/* The figures since the last enable. */
void sd_backend_cpu_profile_get(const sd_backend *be, sd_cpu_profile *out);

/* The CPU backend's thread hand-overs since its pool was made (a pool shared with another
 * backend counts both): runs handed to the workers, worker sleeps, caller sleeps, wake-up
 * calls, runs kept on the caller (runtime/backend/cpu/pool.h, sd_pool_stats). Take differences
 * around the work to count. */
typedef struct sd_cpu_pool_counts {
    int64_t runs, worker_sleeps, caller_sleeps, wakes;
    int64_t kept; /* runs kept on the caller by the pool's back-off (workers not on a core) */
} sd_cpu_pool_counts;
void sd_backend_cpu_pool_counts(const sd_backend *be, sd_cpu_pool_counts *out);

/*
 * The CPU backend's greedy classifier: the index of the largest of y[r] = dot(W[r, :], x)
 * over rows r in [0, n_rows) (n_rows <= W's rows) for one token x [cols], the lowest index
 * on ties (float comparison: -0.0 ties 0.0), exactly the argmax of the row the matmul op
 * writes (same bits), without writing that row: each thread keeps the best (value, index)
 * of the rows it computes in an L1-sized scratch, then the bests are reduced. Returns -1
 * if any y[r] is NaN. Uses the matmul op's activation scratch and threads; timed as a
 * matmul by the profiler.
 */
int64_t sd_backend_cpu_matmul_argmax(sd_backend *be, const sd_weight *w, const float *x,
                                     int64_t n_rows);

/* What prepare_weight did on the CPU backend: matrices packed, their bytes, the time it
 * took (milliseconds, wall clock). */
void sd_backend_cpu_packed_stats(const sd_backend *be, int32_t *n, size_t *bytes, double *ms);
/* Threads the CPU backend uses (after resolving 0 = all cores). */
int32_t sd_backend_cpu_n_threads(const sd_backend *be);
/* The CPU backend's attention kernels: "scalar", "avx2" (AVX2+FMA+F16C) or "avx512"
 * (AVX-512F). At init: the best this CPU runs, never above the matmul kernels
 * (sd_quant_kernels_name(), which SD_KERNELS lowers). */
const char *sd_backend_cpu_kernels(const sd_backend *be);
/* Use the attention kernels called `name` (tests compare the levels). Returns -1, and
 * changes nothing, if the name is unknown or this CPU cannot run them. */
int sd_backend_cpu_set_kernels(sd_backend *be, const char *name);

/* Devices of kind dev present: 1 for SD_DEVICE_CPU; for SD_DEVICE_CUDA the GPU count
 * (SD_ERR_UNSUPPORTED, with the reason, in a build without CUDA or where no GPU or driver
 * is present; *n = 0 then). */
int sd_backend_device_count(sd_device dev, int32_t *n, sd_error *err);

/*
 * Tensor parallelism: a communicator joins n_ranks backends of one device kind, one per
 * rank, each driven by its own thread (one thread per GPU; the CPU simulates ranks with
 * threads over CPU backends). Its collective is a sum all-reduce with a FIXED order:
 *   allreduce(c, rank, x, n): x [n] floats at rank's backend address; when it has run,
 *   every rank's x holds ((x_0 + x_1) + x_2) + ... (ranks ascending), the same bits on
 *   every rank and for any n (so it keeps the determinism contract above: a batched pass
 *   reduces each element exactly as a single-token pass does).
 * Every rank must call it with the same n, in the same order of calls (a collective).
 * CPU: blocking, in-process (shared memory and barriers). CUDA: queued on the rank's stream
 * (NCCL all-gather of the n_ranks parts, then the fixed-order sum; a ring or tree
 * all-reduce would sum in an order that depends on n), errors recorded as the rank's op
 * errors; world size 1 needs no NCCL. n <= max_elems given at init.
 */
typedef struct sd_comm sd_comm;
typedef struct sd_comm_ops {
    void (*free)(sd_comm *c);
    void (*allreduce)(sd_comm *c, int32_t rank, float *x, int64_t n);
} sd_comm_ops;
struct sd_comm {
    const sd_comm_ops *ops;
    int32_t n_ranks;
};

/* A communicator over bes[0 .. n_ranks) (all of one device kind; rank r is bes[r]), for
 * all-reduces of at most max_elems floats. Errors: SD_ERR_ARG (mixed kinds, n_ranks < 1),
 * SD_ERR_UNSUPPORTED (CUDA ranks > 1 in a build without NCCL), SD_ERR_OOM, SD_ERR_IO (NCCL). */
int sd_comm_init(sd_backend *const *bes, int32_t n_ranks, int64_t max_elems, sd_comm **out,
                 sd_error *err);
static inline void sd_comm_free(sd_comm *c) {
    if (c) c->ops->free(c);
}
static inline void sd_comm_allreduce(sd_comm *c, int32_t rank, float *x, int64_t n) {
    c->ops->allreduce(c, rank, x, n);
}

/* Free any backend (its buffers must be freed first). NULL accepted. */
static inline void sd_backend_free(sd_backend *be) {
    if (be) be->ops->free(be);
}

/* Buffer helpers (NULL accepted by sd_buffer_free). */
static inline int sd_buffer_alloc(sd_backend *be, size_t bytes, sd_buffer_usage usage,
                                  sd_buffer **out, sd_error *err) {
    return be->ops->buffer_alloc(be, bytes, usage, out, err);
}
static inline void sd_buffer_free(sd_buffer *buf) {
    if (buf) buf->be->ops->buffer_free(buf->be, buf);
}

#ifdef __cplusplus
}
#endif
#endif /* SD_BACKEND_H */
