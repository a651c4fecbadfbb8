/*
 * runtime/backend/cuda/cuda_impl.cuh: PRIVATE to the CUDA backend (the .cu files of this
 * folder). The backend struct, the op records, error recording, block reductions, and the
 * entry points of the ops (one .cu file per op). The face is runtime/backend/sd_backend.h;
 * the interface of this folder (a module loaded at run time) is runtime/backend/cuda/sd_cuda.h.
 *
 * How an op call runs (backend.cu):
 *   1. the op entry validates its arguments against what init sized (n_batch, max_cols,
 *      n_ctx, the cache) on the host and records SD_ERR_ARG instead of launching out of
 *      bounds; once an error is recorded, ops are skipped until it has been returned by the
 *      next sync or read (sd_backend.h, "Errors");
 *   2. the call becomes a record (sd_cu_op: the op and its arguments by value, addresses
 *      resolved, host arrays copied);
 *   3. outside a graph step the record is executed at once, through a one-record window
 *      that fuses neighbours (rope of Q then of K: one launch; add then an RMSNorm of the
 *      sum: one kernel); inside a graph step (a decode step or verification pass of
 *      <= SD_CU_GRAPH_MAX_TOK tokens, from its get_rows to the sync / read that ends it)
 *      records are kept, and at the end the step either replays the CUDA graph captured for
 *      the same sequence of records (positions and ids travel in a device parameter block),
 *      or is captured once and replayed (a new sequence), or runs record by record;
 *   4. a CUDA or cuBLAS failure is recorded with the op, the call and cudaGetErrorString /
 *      cublasGetStatusString.
 * Kernels never depend on n_tok for the order of a reduction (the determinism contract):
 * reductions are per output element, in the fixed orders documented at each kernel, with
 * rounding made explicit by sd_cuda_math.h. Fusing, caching the quantized activations and
 * graphs change which launches run, never the arithmetic of an element.
 */
#ifndef SD_BACKEND_CUDA_IMPL_CUH
#define SD_BACKEND_CUDA_IMPL_CUH

/* The C faces assert their layouts with C11's _Static_assert, which C++ spells
 * static_assert. */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#endif

#include <cuda_runtime.h>
#ifdef SD_HAVE_CUBLAS
#include <cublas_v2.h>
#endif
#include <stdint.h>

#include "runtime/backend/cuda/sd_cuda.h"
#include "runtime/backend/cuda/sd_cuda_math.h"
#include "runtime/backend/sd_backend.h"

/* Tokens up to which a step runs as a CUDA graph (SD_MAX_DRAFT + 1). */
#define SD_CU_GRAPH_MAX_TOK 17
/* Graphs kept per token count (least recently used replaced). */
#define SD_CU_GRAPHS_PER_NTOK 2
/* Records one graph step may hold (a step with more runs record by record). */
#define SD_CU_STEP_MAX_OPS 16384
/* Default smallest n_tok that goes to cuBLAS (SD_CUDA_GEMM_MIN_TOK overrides): every
 * decode step and verification pass (K + 1 <= 17 tokens) stays on the batch-invariant
 * kernels. */
#define SD_CU_GEMM_MIN_TOK_DEFAULT 18
/* Elements of the dequantized weight tile cuBLAS reads (F16): 32 MiB. */
#define SD_CU_TILE_ELEMS ((size_t)16 << 20)
/* cuBLAS workspace (set once, so that no call allocates; 32 MiB as NVIDIA advises for Hopper). */
#define SD_CU_BLAS_WS_BYTES ((size_t)32 << 20)
/* Bytes allocated past the end of every buffer: the GEMV's 16-byte staging loads may read up
 * to 15 bytes beyond the last block of a row. */
#define SD_CU_PAD 256
/* Pinned staging for uploads: two halves of this many bytes (double buffering). */
#define SD_CU_STAGE_BYTES ((size_t)16 << 20)
/* Output buffers with a pinned host shadow (logits read back through pinned memory). */
#define SD_CU_MAX_OUT 8
/* Chunks of a pinned readback (copy of chunk i + 1 overlaps the host copy of chunk i). */
#define SD_CU_RD_CHUNKS 8

/* Attention (attention.cu): keys per split of the key axis. Fixed, never a function of
 * n_tok or of the context length: query t's partials are the same whatever batch it is in. */
#define SD_CU_ATT_CHUNK   128
#define SD_CU_ATT_THREADS 128 /* == SD_CU_ATT_CHUNK: one score per thread */
#define SD_CU_ATT_MAX_HD  256
#define SD_CU_ATT_TOK     SD_CU_GRAPH_MAX_TOK /* tokens per launch (partials scratch) */

/* Paged KV caches (ops.cu, kv_store.cu, attention.cu): a sequence's block table (the same
 * for every layer) lives in one of SD_CU_TAB_SLOTS slots at a fixed device address (n_ctx + 1
 * entries each: blocks of one position fit), copied there on the stream (from the slot's
 * pinned shadow) only when it changed, so a step's records name the same table address at
 * every position and a one-sequence paged step replays as a CUDA graph. More sequences than
 * slots in one pass take slots in turn (least recently used first). */
#define SD_CU_TAB_SLOTS 32

/* Where the KV rows of one sequence and layer are, for a kernel: row pos of a layer is at
 * base + sd_cu_kv_off(map, pos, row_bytes) (base: the row of position 0, K or V), i.e.
 * pos * row_bytes when the rows are contiguous (tab NULL), else
 * tab[pos / blk] * block_bytes + (pos % blk) * row_bytes: tab (device) holds, per logical
 * block, its pool block minus the pool block of logical block 0 (the same for K and V and
 * for every layer of the sequence). */
typedef struct sd_cu_kvmap {
    const int32_t *tab;  /* device [ceil(keys / blk)], or NULL: contiguous */
    int64_t block_bytes; /* blk * row_bytes */
    int32_t blk;         /* positions per block */
    int32_t pad_;
} sd_cu_kvmap;

/* Device parameter block of a graph step: what changes between replays. */
typedef struct sd_cu_par {
    int32_t pos0;
    int32_t ids[SD_CU_GRAPH_MAX_TOK];
} sd_cu_par;

typedef enum sd_cu_kind {
    SD_CU_OP_NONE = 0,
    SD_CU_OP_GET_ROWS,
    SD_CU_OP_MATMUL,
    SD_CU_OP_RMSNORM,
    SD_CU_OP_ROPE,
    SD_CU_OP_ADD_BIAS,
    SD_CU_OP_KV_STORE,
    SD_CU_OP_ATTENTION,
    SD_CU_OP_SOFTMAX,
    SD_CU_OP_SWIGLU,
    SD_CU_OP_ADD,
    SD_CU_OP_COPY,
    SD_CU_OP_COUNT
} sd_cu_kind;

/* One op call with its arguments by value (memset to 0 first: records are compared with
 * memcmp, pos0 excluded, to match a step against a captured graph). */
typedef struct sd_cu_op {
    int32_t kind;
    int32_t n_tok;
    int32_t pos0; /* rope, kv_store, attention: the first position; else 0 */
    int32_t pad_;
    union {
        struct {
            sd_weight w;
            const int32_t *ids; /* host: the caller's (run at once) or c->step_ids */
            float *y;
        } get_rows;
        struct {
            sd_weight w;
            const float *x;
            float *y;
        } matmul;
        struct {
            const float *x, *w;
            float *y;
            int32_t n;
            float eps;
        } rmsnorm;
        struct {
            float *x;
            int32_t n_head, head_dim;
            sd_rope r;
        } rope;
        struct {
            float *y;
            const float *b;
            int32_t n;
        } add_bias;
        struct {
            uint8_t *kb, *vb; /* layer rows of position 0 */
            size_t row_bytes;
            int32_t kv_dim, f16;
            const float *k, *v;
            sd_cu_kvmap map;
        } kv_store;
        struct {
            const float *q;
            const uint8_t *kb, *vb; /* layer rows of position 0 */
            size_t row_bytes;
            int32_t n_head, n_head_kv, head_dim, f16;
            float *out;
            sd_cu_kvmap map;
        } attention;
        struct {
            float *x;
            int32_t n;
        } softmax;
        struct {
            const float *g, *u;
            float *y;
            int64_t n;
        } swiglu;
        struct {
            float *y;
            const float *x;
            int64_t n;
        } add; /* also copy */
    } a;
} sd_cu_op;

typedef struct sd_cu_graph {
    cudaGraphExec_t exec; /* NULL: free slot */
    sd_cu_op *sig;        /* the records it was captured from [n_ops] */
    int32_t n_ops, n_tok;
    int32_t att_chunks; /* key chunks its attention grids cover: positions < 128 x this */
    uint64_t used;      /* clock of the last replay */
} sd_cu_graph;

/* Which activation conversion a scratch holds (the quantize-once cache). */
typedef struct sd_cu_act {
    const float *x; /* NULL: nothing cached */
    int64_t cols;
    int32_t n_tok;
    int32_t variant; /* xh: 0 = F16, 1 = BF16 */
} sd_cu_act;
enum { SD_CU_ACT_A32 = 0, SD_CU_ACT_K = 1, SD_CU_ACT_HALF = 2, SD_CU_ACT_N = 3 };

/* Per-op CUDA event timings (SD_CUDA_PROFILE=FILE; graphs off). */
#define SD_CU_PROF_KEYS   256
#define SD_CU_PROF_EVENTS 2048
typedef struct sd_cu_prof_key {
    char name[48]; /* "matmul q4_k n=5" */
    int64_t count;
    double ms;
} sd_cu_prof_key;
typedef struct sd_cu_prof {
    char path[1024];
    cudaEvent_t ev[2 * SD_CU_PROF_EVENTS];
    int16_t key_of[SD_CU_PROF_EVENTS];
    int32_t n_pending;
    sd_cu_prof_key keys[SD_CU_PROF_KEYS];
    int32_t n_keys;
} sd_cu_prof;

struct sd_comm_cuda;

typedef struct sd_cuda_backend {
    sd_backend base;
    const sd_cuda_host *host; /* the library's KV cache accessors */
    int device;
    char gpu_name[256];
    int cc_major, cc_minor;
    cudaStream_t stream;
#ifdef SD_HAVE_CUBLAS
    cublasHandle_t blas; /* NULL when n_batch never reaches the cuBLAS path */
#else
    void *blas; /* always NULL: a build without cuBLAS (SD_CUBLAS=OFF) */
#endif
    void *blas_ws;

    int32_t n_batch;
    int64_t max_cols; /* as passed */
    int64_t cols_q;   /* max_cols rounded up to a multiple of 256 */
    int32_t n_ctx;

    /* matmul activations (matmul.cu), n_batch rows of cols_q: 32-element blocks (int8
     * quants 16-byte aligned; per block the Q8_0 scale as a float, the Q8_S scale and
     * d * sum), and Q8_K super-blocks (int8 quants; a float scale per 256) */
    int8_t *a32_q;
    float *a32_d16, *a32_df, *a32_ds;
    int8_t *ak_q;
    float *ak_d;
    /* cuBLAS path (gemm.cu): activations as F16/BF16, n_batch x max_cols; weight tile */
    uint16_t *xh;
    uint16_t *wh;
    sd_cu_act act[SD_CU_ACT_N];
    /* attention partials (attention.cu): [SD_CU_ATT_TOK, n_head, att_nc, hd] and
     * [SD_CU_ATT_TOK, n_head, att_nc] twice */
    float *att_o, *att_m, *att_l;
    int32_t att_nc;
    size_t att_o_elems, att_ml_elems;

    /* first recorded error since the last sync / read */
    int failed;
    sd_error err;

    /* settings read once at init from the environment */
    int32_t gemm_min_tok; /* SD_CUDA_GEMM_MIN_TOK; <= 0: never cuBLAS */
    int sync_each;        /* SD_CUDA_SYNC=1 */
    int use_graphs;       /* SD_CUDA_GRAPHS (default 1) */

    /* the fusing window: one record not yet launched */
    int has_pend;
    sd_cu_op pend;

    /* graph steps */
    int in_step, step_ok;
    int32_t step_ntok, step_pos0;
    sd_cu_op *step_ops; /* [SD_CU_STEP_MAX_OPS] */
    int32_t n_step_ops;
    int32_t step_ids[SD_CU_GRAPH_MAX_TOK];
    sd_cu_par *h_par; /* pinned host */
    sd_cu_par *d_par; /* device */
    cudaEvent_t par_ev;
    int par_pending;           /* par_ev marks a copy from h_par not known to be done */
    const sd_cu_par *exec_par; /* while capturing: d_par (kernels read pos0 / ids there) */
    int32_t cap_att_chunks;    /* while capturing: the key chunks attention grids cover */
    sd_cu_graph graphs[(SD_CU_GRAPH_MAX_TOK + 1) * SD_CU_GRAPHS_PER_NTOK];
    uint64_t graph_clock;
    int32_t graph_fail[SD_CU_GRAPH_MAX_TOK + 1]; /* failed captures per n_tok */
    int64_t n_replays, n_captures, n_eager_steps;

    /* pinned host memory: upload staging (two halves), output shadows */
    uint8_t *stage;
    cudaEvent_t stage_ev[2];
    struct {
        void *addr;
        size_t size;
        void *pinned;
    } out[SD_CU_MAX_OUT];
    cudaEvent_t rd_ev[SD_CU_RD_CHUNKS];

    /* paged KV block tables (ops.cu): the slots, in one pinned and one device block of
     * SD_CU_TAB_SLOTS x tab_slot_cap entries */
    struct {
        const int32_t *owner; /* the sequence's host table (sd_kv_block_table); NULL: free */
        int32_t *h, *d;       /* pinned shadow, device copy [tab_slot_cap] */
        int32_t n;            /* entries the copy holds */
        uint64_t used;        /* clock of the last use (least recently used is replaced) */
        uint64_t step;        /* step_serial of the graph step whose kept records read it */
        cudaEvent_t ev;       /* after its last copy */
    } tab_slot[SD_CU_TAB_SLOTS];
    int32_t tab_slot_cap;
    int32_t *tab_slot_h, *tab_slot_d;
    uint64_t tab_clock;
    int64_t n_tab_uploads; /* tables copied to the device */
    uint64_t step_serial;  /* graph steps opened so far */

    /* tensor parallelism: the communicator this backend is a rank of (comm.cu), or NULL */
    struct sd_comm_cuda *comm;
    int32_t rank;

    sd_cu_prof *prof; /* SD_CUDA_PROFILE, else NULL */
} sd_cuda_backend;

static inline sd_cuda_backend *sd_cu_of(sd_backend *be) {
    return (sd_cuda_backend *)be;
}

/* ---- errors (status.cu) ---- */

/* Record err (the first one only) with printf-style detail; st as sd_status. */
void sd_cu_failf(sd_cuda_backend *c, sd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a failed CUDA call of op; returns 1 if e is cudaSuccess, else 0. */
int sd_cu_check(sd_cuda_backend *c, cudaError_t e, const char *op, const char *call);
/* After a kernel launch: cudaGetLastError (and, with SD_CUDA_SYNC=1 outside a capture, a
 * stream synchronize that attributes asynchronous faults to this op). */
int sd_cu_launched(sd_cuda_backend *c, const char *op, const char *kernel);
#ifdef SD_HAVE_CUBLAS
int sd_cu_blas_check(sd_cuda_backend *c, cublasStatus_t s, const char *op, const char *call);
#endif
/* An op's first line: 0 if it must be skipped (an error is pending), else makes the
 * backend's device current and returns 1. */
int sd_cu_enter(sd_cuda_backend *c);

/* Stop running steps as graphs (for good): the ranks of a multi-GPU communicator (NCCL
 * calls stay outside graphs). graph.cu. */
void sd_cu_graphs_off(sd_cuda_backend *c);
/* Launch what the fusing window holds and end a graph step (running its records), so that
 * work issued on the stream from outside the ops table (NCCL) comes after every op called
 * so far. graph.cu. */
void sd_cu_flush(sd_cuda_backend *c);
/* Wait until the stream has run everything queued (returns 1), recording a failure of the
 * stream, or (a rank of a communicator) of the communicator, instead of hanging on a peer
 * that will never arrive. comm.cu. */
int sd_cu_wait(sd_cuda_backend *c, const char *op);

/* graph.cu: the execution of records (see the top of that file). */
void sd_cu_submit(sd_cuda_backend *c, const sd_cu_op *op);
/* Open a graph step of n_tok tokens with these ids (copied); its get_rows comes next. */
void sd_cu_step_begin(sd_cuda_backend *c, int32_t n_tok, const int32_t *ids);
/* The step being recorded (if any) cannot be replayed: run it record by record. */
void sd_cu_step_not_replayable(sd_cuda_backend *c);
/* Leave the step being recorded (if any) for good: it cannot be replayed, and its kept
 * records are launched now, so that what is queued next on the stream comes after them. */
void sd_cu_step_leave(sd_cuda_backend *c);
/* 1 if a get_rows of n_tok tokens may open a graph step. */
int sd_cu_graphs_allowed(const sd_cuda_backend *c, int32_t n_tok);
/* Append the timings to SD_CUDA_PROFILE's file. */
void sd_cu_prof_write(sd_cuda_backend *c);

/* ops.cu: the op entries of the ops table (sd_backend.h shapes): checks, then a record. */
void sd_cu_op_get_rows(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                       float *y);
void sd_cu_op_matmul(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok, float *y);
void sd_cu_op_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                      float eps, float *y);
void sd_cu_op_rope(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                   int32_t head_dim, const sd_rope *r);
void sd_cu_op_add_bias(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n);
void sd_cu_op_kv_store(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                       int32_t kv_dim, const float *k, const float *v);
void sd_cu_op_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                        int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                        float *out);
void sd_cu_op_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n);
void sd_cu_op_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y);
void sd_cu_op_add(sd_backend *be, float *y, const float *x, int64_t n);
void sd_cu_op_copy(sd_backend *be, float *y, const float *x, int64_t n);

/* comm.cu: the communicator over CUDA ranks (sd_cuda_module.comm_init). */
int sd_comm_cuda_init(sd_backend *const *bes, int32_t n, int64_t max_elems, sd_comm **out,
                      sd_error *err);

/* comm.cu: poll the communicator of rank c while its stream is busy: 0 while all is well,
 * else records the error in c and aborts every rank's communicator (so that their streams
 * finish). */
int sd_cu_comm_poll(sd_cuda_backend *c, double waited_s);

/* ---- ops: host-side checks (0 and an error recorded when they fail) and launches ---- */

/* Position and ids of a launch: by value, or (graph capture, par != NULL) from the device
 * parameter block. */
void sd_cu_get_rows(sd_cuda_backend *c, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                    float *y, const sd_cu_par *par);
int sd_cu_matmul_check(sd_cuda_backend *c, const sd_weight *w, int32_t n_tok);
void sd_cu_matmul(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok, float *y);
/* The cuBLAS path of matmul (gemm.cu), n_tok >= gemm_min_tok; never called without cuBLAS
 * (blas is NULL). */
void sd_cu_matmul_gemm(sd_cuda_backend *c, const sd_weight *w, const float *x, int32_t n_tok,
                       float *y);
/* rmsnorm of x (n_tok rows of n); with add != NULL first x += add (written back), the sum
 * then normed (the fused add + rmsnorm). */
void sd_cu_rmsnorm(sd_cuda_backend *c, float *x, const float *add, const float *w, int32_t n_tok,
                   int32_t n, float eps, float *y);
/* rope of x1 (n_head1 heads) and, when x2 != NULL, of x2 (n_head2 heads) in one launch. */
void sd_cu_rope(sd_cuda_backend *c, float *x1, int32_t n_head1, float *x2, int32_t n_head2,
                int32_t n_tok, int32_t pos0, int32_t head_dim, const sd_rope *r,
                const sd_cu_par *par);
void sd_cu_add_bias(sd_cuda_backend *c, float *y, const float *b, int32_t n_tok, int32_t n);
void sd_cu_kv_store(sd_cuda_backend *c, const sd_cu_op *op, const sd_cu_par *par);
void sd_cu_attention(sd_cuda_backend *c, const sd_cu_op *op, const sd_cu_par *par);
void sd_cu_softmax(sd_cuda_backend *c, float *x, int32_t n_rows, int32_t n);
void sd_cu_swiglu(sd_cuda_backend *c, const float *g, const float *u, int64_t n, float *y);
void sd_cu_add(sd_cuda_backend *c, float *y, const float *x, int64_t n);
/* y[i] = sum over r of parts[r * n + i], r ascending (comm.cu's all-reduce). */
void sd_cu_sum_parts(sd_cuda_backend *c, const float *parts, int32_t n_parts, int64_t n, float *y);

/* Blocks of elementwise kernels: enough to cover n with `threads` per block. */
static inline unsigned sd_cu_blocks(int64_t n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

#if defined(__CUDACC__)
/* ---- deterministic block reductions (blockDim.x a multiple of 32, <= 1024) ---- */

/* Butterfly over the warp (the order sd_cu_warp_sum_emul describes). */
__device__ __forceinline__ float sd_cu_warp_sum(float v) {
#pragma unroll
    for (int off = SD_CU_WARP / 2; off > 0; off >>= 1)
        v = sd_cu_add(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float sd_cu_warp_max(float v) {
#pragma unroll
    for (int off = SD_CU_WARP / 2; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Sum of v over the block, the same bits in every thread: warp butterflies, then warp 0
 * adds the warp sums (zeros beyond the last warp) by a butterfly. A fixed tree for a fixed
 * blockDim. red: __shared__ float[SD_CU_WARP + 1]. Contains __syncthreads: every thread
 * of the block must call it. */
__device__ __forceinline__ float sd_cu_block_sum(float v, float *red) {
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int n_warps = blockDim.x / SD_CU_WARP;
    v = sd_cu_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < n_warps ? red[lane] : 0.0f;
        s = sd_cu_warp_sum(s);
        if (lane == 0) red[SD_CU_WARP] = s;
    }
    __syncthreads();
    const float r = red[SD_CU_WARP];
    __syncthreads(); /* red may be reused by the caller */
    return r;
}

/* Maximum of v over the block (order-free). Same calling rules as sd_cu_block_sum. */
__device__ __forceinline__ float sd_cu_block_max(float v, float *red) {
    const int lane = threadIdx.x % SD_CU_WARP, warp = threadIdx.x / SD_CU_WARP;
    const int n_warps = blockDim.x / SD_CU_WARP;
    v = sd_cu_warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < n_warps ? red[lane] : -INFINITY;
        s = sd_cu_warp_max(s);
        if (lane == 0) red[SD_CU_WARP] = s;
    }
    __syncthreads();
    const float r = red[SD_CU_WARP];
    __syncthreads();
    return r;
}

/* Byte offset of row pos from the layer's row of position 0 (sd_cu_kvmap). */
__device__ __forceinline__ int64_t sd_cu_kv_off(const sd_cu_kvmap &m, int32_t pos,
                                                size_t row_bytes) {
    if (!m.tab) return (int64_t)pos * (int64_t)row_bytes;
    return (int64_t)__ldg(m.tab + pos / m.blk) * m.block_bytes +
           (int64_t)(pos % m.blk) * (int64_t)row_bytes;
}

/* The position / ids of a launch: the device parameter block when captured into a graph. */
__device__ __forceinline__ int32_t sd_cu_pos(int32_t pos0, const sd_cu_par *par) {
    return par ? par->pos0 : pos0;
}
#endif

#endif /* SD_BACKEND_CUDA_IMPL_CUH */
