/*
 * runtime/backend/cuda/graph.cu: how the CUDA backend runs the records its op entries make
 * (ops.cu): the fusing window, the quantize-once cache, graph steps, per-op timings.
 *
 * Fusing window: one record waits before it is launched; with the next one it may become a
 * single launch: rope(Q) then rope(K) of the same tokens, positions and rotation -> one
 * rope kernel over both; add(x, p) then rmsnorm(x) over exactly the rows the add covered ->
 * one kernel that writes x + p back and norms it (bits of the two ops in sequence). Any
 * other record, and every sync point, launches what waits first.
 *
 * Quantize-once: matmul.cu keeps which input its activation scratch holds (act[]); every
 * executed record other than a matmul, a matmul whose output overlaps a cached input, and
 * every sync point forget it, so a conversion is reused only while its input is unchanged
 * (Q, K, V; gate, up).
 *
 * Graph steps (SD_CUDA_GRAPHS, on by default): a get_rows of 1..SD_CU_GRAPH_MAX_TOK tokens
 * opens a step; its records are kept, not launched, until the next sync point (read, sync,
 * write, a buffer call, NCCL). The step then:
 *   - replays a graph captured earlier from the same records (memcmp of the records,
 *     positions excluded) whose attention grids cover the step's keys (captured for a
 *     power-of-two number of 128-key chunks; at most SD_CU_GRAPHS_PER_NTOK graphs per token
 *     count, least recently used replaced): the step's first position and token ids are copied into
 * the device parameter block (from pinned memory, on the stream) and the graph launched: one launch
 * for the whole forward pass, no capture, no update;
 *   - or is captured once (the records launched into cudaStreamBeginCapture with the
 *     kernels reading positions and ids from the parameter block), instantiated, stored and
 *     replayed as above;
 *   - or runs record by record, if it is not replayable: two get_rows, records at different
 *     positions (several sequences), more than SD_CU_STEP_MAX_OPS records, or a token count
 *     whose capture failed twice (a failed capture is not an error: the
 *     step runs record by record, and any real error shows there).
 * A graph is a function of its records only (addresses, shapes, types; the kernels read
 * nothing else from the host but the parameter block and a paged sequence's block table,
 * both copied on the stream before the step's kernels), so a replay computes exactly what
 * running the step's records computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_impl.cuh"
#include "runtime/backend/cuda/types.cuh"

/* ---- per-op timings (SD_CUDA_PROFILE) ---- */

static void prof_name(const sd_cu_op *op, const char *fused, char *out, size_t cap) {
    static const char *names[SD_CU_OP_COUNT] = {"none",    "get_rows", "matmul",   "rmsnorm",
                                                "rope",    "add_bias", "kv_store", "attention",
                                                "softmax", "swiglu",   "add",      "copy"};
    const char *n = fused ? fused : names[op->kind];
    if (op->kind == SD_CU_OP_MATMUL) {
        const int gemm = op->n_tok >= 18;
        snprintf(out, cap, "matmul %s %s%d", sd_cu_type_name(op->a.matmul.w.type),
                 gemm ? "n>=" : "n=", gemm ? 18 : op->n_tok);
    } else if (op->kind == SD_CU_OP_GET_ROWS) {
        snprintf(out, cap, "get_rows %s", sd_cu_type_name(op->a.get_rows.w.type));
    } else {
        snprintf(out, cap, "%s", n);
    }
}

/* Accumulate the timed pairs recorded so far (waits for them). */
static void prof_collect(sd_cuda_backend *c) {
    sd_cu_prof *p = c->prof;
    if (!p || p->n_pending == 0) return;
    if (cudaEventSynchronize(p->ev[2 * p->n_pending - 1]) != cudaSuccess) {
        cudaGetLastError();
        p->n_pending = 0;
        return;
    }
    for (int32_t i = 0; i < p->n_pending; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) == cudaSuccess &&
            p->key_of[i] >= 0) {
            p->keys[p->key_of[i]].ms += ms;
            p->keys[p->key_of[i]].count++;
        }
        cudaGetLastError();
    }
    p->n_pending = 0;
}

static int prof_begin(sd_cuda_backend *c, const sd_cu_op *op, const char *fused) {
    sd_cu_prof *p = c->prof;
    if (p->n_pending == SD_CU_PROF_EVENTS) prof_collect(c);
    char name[48];
    prof_name(op, fused, name, sizeof name);
    int k = 0;
    while (k < p->n_keys && strcmp(p->keys[k].name, name) != 0)
        k++;
    if (k == p->n_keys) {
        if (p->n_keys == SD_CU_PROF_KEYS)
            k = -1;
        else
            snprintf(p->keys[p->n_keys++].name, sizeof p->keys[0].name, "%s", name);
    }
    const int32_t i = p->n_pending++;
    p->key_of[i] = (int16_t)k;
    cudaEventRecord(p->ev[2 * i], c->stream);
    return i;
}

static void prof_end(sd_cuda_backend *c, int i) {
    cudaEventRecord(c->prof->ev[2 * i + 1], c->stream);
}

void sd_cu_prof_write(sd_cuda_backend *c) {
    sd_cu_prof *p = c->prof;
    if (!p) return;
    prof_collect(c);
    FILE *f = fopen(p->path, "a");
    if (!f) return;
    fprintf(f, "{\"device\": %d, \"gpu\": \"%s\", \"ops\": [", c->device, c->gpu_name);
    for (int32_t k = 0; k < p->n_keys; k++)
        fprintf(f, "%s{\"op\": \"%s\", \"count\": %lld, \"ms\": %.4f, \"us_per_call\": %.3f}",
                k ? ", " : "", p->keys[k].name, (long long)p->keys[k].count, p->keys[k].ms,
                p->keys[k].count ? 1000.0 * p->keys[k].ms / (double)p->keys[k].count : 0.0);
    fprintf(f, "]}\n");
    fclose(f);
}

/* ---- executing one record ---- */

static void act_forget(sd_cuda_backend *c) {
    for (int i = 0; i < SD_CU_ACT_N; i++)
        c->act[i].x = NULL;
}

/* A matmul writes y [n_tok, rows]: forget the cached inputs it overlaps. */
static void act_forget_overlap(sd_cuda_backend *c, const sd_cu_op *op) {
    const uintptr_t y0 = (uintptr_t)op->a.matmul.y;
    const uintptr_t y1 = y0 + (uintptr_t)op->n_tok * (uintptr_t)op->a.matmul.w.rows * 4u;
    for (int i = 0; i < SD_CU_ACT_N; i++) {
        const sd_cu_act *a = &c->act[i];
        if (!a->x) continue;
        const uintptr_t x0 = (uintptr_t)a->x, x1 = x0 + (uintptr_t)a->n_tok * a->cols * 4u;
        if (y0 < x1 && x0 < y1) c->act[i].x = NULL;
    }
}

static void exec_one(sd_cuda_backend *c, const sd_cu_op *op) {
    const sd_cu_par *par = c->exec_par;
    const int pi = c->prof ? prof_begin(c, op, NULL) : -1;
    if (op->kind != SD_CU_OP_MATMUL) act_forget(c);
    switch (op->kind) {
    case SD_CU_OP_GET_ROWS:
        sd_cu_get_rows(c, &op->a.get_rows.w, op->a.get_rows.ids, op->n_tok, op->a.get_rows.y, par);
        break;
    case SD_CU_OP_MATMUL:
#ifdef SD_HAVE_CUBLAS
        if (c->blas && c->gemm_min_tok > 0 && op->n_tok >= c->gemm_min_tok)
            sd_cu_matmul_gemm(c, &op->a.matmul.w, op->a.matmul.x, op->n_tok, op->a.matmul.y);
        else
#endif
            sd_cu_matmul(c, &op->a.matmul.w, op->a.matmul.x, op->n_tok, op->a.matmul.y);
        act_forget_overlap(c, op);
        break;
    case SD_CU_OP_RMSNORM:
        sd_cu_rmsnorm(c, (float *)op->a.rmsnorm.x, NULL, op->a.rmsnorm.w, op->n_tok,
                      op->a.rmsnorm.n, op->a.rmsnorm.eps, op->a.rmsnorm.y);
        break;
    case SD_CU_OP_ROPE:
        sd_cu_rope(c, op->a.rope.x, op->a.rope.n_head, NULL, 0, op->n_tok, op->pos0,
                   op->a.rope.head_dim, &op->a.rope.r, par);
        break;
    case SD_CU_OP_ADD_BIAS:
        sd_cu_add_bias(c, op->a.add_bias.y, op->a.add_bias.b, op->n_tok, op->a.add_bias.n);
        break;
    case SD_CU_OP_KV_STORE:
        sd_cu_kv_store(c, op, par);
        break;
    case SD_CU_OP_ATTENTION:
        sd_cu_attention(c, op, par);
        break;
    case SD_CU_OP_SOFTMAX:
        sd_cu_softmax(c, op->a.softmax.x, op->n_tok, op->a.softmax.n);
        break;
    case SD_CU_OP_SWIGLU:
        sd_cu_swiglu(c, op->a.swiglu.g, op->a.swiglu.u, op->a.swiglu.n, op->a.swiglu.y);
        break;
    case SD_CU_OP_ADD:
        sd_cu_add(c, op->a.add.y, op->a.add.x, op->a.add.n);
        break;
    case SD_CU_OP_COPY:
        sd_cu_check(c,
                    cudaMemcpyAsync(op->a.add.y, op->a.add.x, (size_t)op->a.add.n * sizeof(float),
                                    cudaMemcpyDeviceToDevice, c->stream),
                    "copy", "cudaMemcpyAsync (device to device)");
        break;
    default:
        break;
    }
    if (pi >= 0) prof_end(c, pi);
}

static int same_rope(const sd_cu_op *a, const sd_cu_op *b) {
    return a->n_tok == b->n_tok && a->pos0 == b->pos0 && a->a.rope.head_dim == b->a.rope.head_dim &&
           memcmp(&a->a.rope.r, &b->a.rope.r, sizeof a->a.rope.r) == 0 &&
           a->a.rope.x != b->a.rope.x;
}

/* add(y, x, n) followed by rmsnorm of exactly those n elements of y, in place or not. */
static int add_then_norm(const sd_cu_op *a, const sd_cu_op *b) {
    return b->a.rmsnorm.x == a->a.add.y && (int64_t)b->n_tok * b->a.rmsnorm.n == a->a.add.n;
}

/* Run a record through the fusing window. */
static void run_record(sd_cuda_backend *c, const sd_cu_op *op) {
    if (c->failed) return;
    if (c->has_pend) {
        const sd_cu_op *pd = &c->pend;
        c->has_pend = 0;
        if (pd->kind == SD_CU_OP_ROPE && op->kind == SD_CU_OP_ROPE && same_rope(pd, op)) {
            const int pi = c->prof ? prof_begin(c, op, "rope (q and k)") : -1;
            act_forget(c);
            sd_cu_rope(c, pd->a.rope.x, pd->a.rope.n_head, op->a.rope.x, op->a.rope.n_head,
                       op->n_tok, op->pos0, op->a.rope.head_dim, &op->a.rope.r, c->exec_par);
            if (pi >= 0) prof_end(c, pi);
            return;
        }
        if (pd->kind == SD_CU_OP_ADD && op->kind == SD_CU_OP_RMSNORM && add_then_norm(pd, op)) {
            const int pi = c->prof ? prof_begin(c, op, "add + rmsnorm") : -1;
            act_forget(c);
            sd_cu_rmsnorm(c, (float *)op->a.rmsnorm.x, pd->a.add.x, op->a.rmsnorm.w, op->n_tok,
                          op->a.rmsnorm.n, op->a.rmsnorm.eps, op->a.rmsnorm.y);
            if (pi >= 0) prof_end(c, pi);
            return;
        }
        exec_one(c, pd);
        if (c->failed) return;
    }
    if (op->kind == SD_CU_OP_ROPE || op->kind == SD_CU_OP_ADD) {
        c->pend = *op;
        c->has_pend = 1;
        return;
    }
    exec_one(c, op);
}

static void flush_pend(sd_cuda_backend *c) {
    if (!c->has_pend) return;
    c->has_pend = 0;
    if (!c->failed) exec_one(c, &c->pend);
}

/* ---- graph steps ---- */

static int pos_dependent(int kind) {
    return kind == SD_CU_OP_ROPE || kind == SD_CU_OP_KV_STORE || kind == SD_CU_OP_ATTENTION;
}

/* Leave the step, running its kept records one by one. */
static void step_drain(sd_cuda_backend *c) {
    c->in_step = 0;
    c->n_eager_steps++;
    for (int32_t i = 0; i < c->n_step_ops; i++)
        run_record(c, &c->step_ops[i]);
    c->n_step_ops = 0;
}

void sd_cu_step_begin(sd_cuda_backend *c, int32_t n_tok, const int32_t *ids) {
    flush_pend(c);
    c->in_step = 1;
    c->step_ok = 1;
    c->step_serial++;
    c->step_ntok = n_tok;
    c->step_pos0 = -1;
    c->n_step_ops = 0;
    memcpy(c->step_ids, ids, (size_t)n_tok * sizeof(int32_t));
}

void sd_cu_step_not_replayable(sd_cuda_backend *c) {
    if (c->in_step) c->step_ok = 0;
}

void sd_cu_step_leave(sd_cuda_backend *c) {
    if (!c->in_step) return;
    c->step_ok = 0;
    step_drain(c);
}

void sd_cu_submit(sd_cuda_backend *c, const sd_cu_op *op) {
    if (c->failed) return;
    if (!c->in_step) {
        run_record(c, op);
        return;
    }
    if (pos_dependent(op->kind)) {
        if (c->step_pos0 < 0)
            c->step_pos0 = op->pos0;
        else if (op->pos0 != c->step_pos0)
            c->step_ok = 0;
    }
    if (c->n_step_ops >= SD_CU_STEP_MAX_OPS) c->step_ok = 0;
    if (!c->step_ok) {
        step_drain(c);
        run_record(c, op);
        return;
    }
    c->step_ops[c->n_step_ops++] = *op;
}

/* The records with the positions left out (what a graph does not depend on). */
static int same_records(const sd_cu_op *a, const sd_cu_op *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        sd_cu_op x = a[i], y = b[i];
        x.pos0 = y.pos0 = 0;
        if (memcmp(&x, &y, sizeof x) != 0) return 0;
    }
    return 1;
}

static void graph_slot_free(sd_cu_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    free(g->sig);
    memset(g, 0, sizeof *g);
}

/* Capture the step's records into a new graph in a slot for its token count. NULL (and no
 * error recorded) if the capture did not work out. */
static sd_cu_graph *capture(sd_cuda_backend *c, int32_t att_chunks) {
    const int32_t nt = c->step_ntok;
    sd_cu_graph *slots = &c->graphs[nt * SD_CU_GRAPHS_PER_NTOK], *g = &slots[0];
    for (int i = 0; i < SD_CU_GRAPHS_PER_NTOK; i++) {
        if (!slots[i].exec) {
            g = &slots[i];
            break;
        }
        if (slots[i].used < g->used) g = &slots[i];
    }
    sd_cu_op *sig = (sd_cu_op *)malloc((size_t)c->n_step_ops * sizeof *sig);
    if (!sig) return NULL;
    memcpy(sig, c->step_ops, (size_t)c->n_step_ops * sizeof *sig);
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        free(sig);
        return NULL;
    }
    act_forget(c);
    c->exec_par = c->d_par;
    c->cap_att_chunks = att_chunks;
    for (int32_t i = 0; i < c->n_step_ops; i++)
        run_record(c, &c->step_ops[i]);
    flush_pend(c);
    c->exec_par = NULL;
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    cudaGraphExec_t exec = NULL;
    const int ok = e == cudaSuccess && !c->failed && graph &&
                   cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    act_forget(c);
    if (!ok) {
        /* Not an error of the step: it runs record by record next, where a real failure
         * shows with its op. */
        cudaGetLastError();
        if (exec) cudaGraphExecDestroy(exec);
        c->failed = 0;
        sd_error_clear(&c->err);
        free(sig);
        return NULL;
    }
    graph_slot_free(g);
    g->exec = exec;
    g->sig = sig;
    g->n_ops = c->n_step_ops;
    g->n_tok = nt;
    g->att_chunks = att_chunks;
    c->n_captures++;
    return g;
}

static void replay(sd_cuda_backend *c, sd_cu_graph *g) {
    if (c->par_pending) {
        /* the previous step's parameter copy reads h_par: let it finish first */
        if (!sd_cu_check(c, cudaEventSynchronize(c->par_ev), "graph", "cudaEventSynchronize"))
            return;
        c->par_pending = 0;
    }
    c->h_par->pos0 = c->step_pos0 < 0 ? 0 : c->step_pos0;
    memcpy(c->h_par->ids, c->step_ids, sizeof c->step_ids);
    if (!sd_cu_check(c,
                     cudaMemcpyAsync(c->d_par, c->h_par, sizeof *c->h_par, cudaMemcpyHostToDevice,
                                     c->stream),
                     "graph", "cudaMemcpyAsync (parameters)") ||
        !sd_cu_check(c, cudaEventRecord(c->par_ev, c->stream), "graph", "cudaEventRecord"))
        return;
    c->par_pending = 1;
    g->used = ++c->graph_clock;
    if (sd_cu_check(c, cudaGraphLaunch(g->exec, c->stream), "graph", "cudaGraphLaunch"))
        c->n_replays++;
    act_forget(c);
}

/* End the step (if one is open): replay, capture and replay, or run its records. */
static void step_end(sd_cuda_backend *c) {
    if (!c->in_step) return;
    c->in_step = 0;
    if (c->failed || c->n_step_ops == 0) { /* a call failed its checks: the step is void */
        c->n_step_ops = 0;
        return;
    }
    const int32_t nt = c->step_ntok;
    /* Attention grids cover the chunks of the keys this step sees, rounded up to a power of
     * two (a graph captured at a short context is captured again, a few times per context,
     * rather than launching the blocks of every chunk of n_ctx at every step). */
    const int32_t keys = (c->step_pos0 < 0 ? 0 : c->step_pos0) + nt;
    const int32_t need = (keys + SD_CU_ATT_CHUNK - 1) / SD_CU_ATT_CHUNK;
    int32_t chunks = 1;
    while (chunks < need)
        chunks *= 2;
    if (chunks > c->att_nc) chunks = c->att_nc;
    sd_cu_graph *slots = &c->graphs[nt * SD_CU_GRAPHS_PER_NTOK], *g = NULL;
    for (int i = 0; i < SD_CU_GRAPHS_PER_NTOK && !g; i++)
        if (slots[i].exec && slots[i].n_ops == c->n_step_ops && slots[i].att_chunks >= need &&
            same_records(slots[i].sig, c->step_ops, c->n_step_ops))
            g = &slots[i];
    if (!g) {
        g = capture(c, chunks);
        if (!g) {
            c->graph_fail[nt]++;
            c->in_step = 1; /* step_drain leaves it */
            step_drain(c);
            flush_pend(c);
            return;
        }
    }
    replay(c, g);
    c->n_step_ops = 0;
}

int sd_cu_graphs_allowed(const sd_cuda_backend *c, int32_t n_tok) {
    return c->use_graphs && n_tok >= 1 && n_tok <= SD_CU_GRAPH_MAX_TOK && c->graph_fail[n_tok] < 2;
}

void sd_cu_flush(sd_cuda_backend *c) {
    step_end(c);
    flush_pend(c);
    prof_collect(c);
    /* What follows a sync point (a write, a buffer freed and its address reused, NCCL
     * writing x) changes device memory outside the records: no conversion survives it. */
    act_forget(c);
}

void sd_cu_graphs_off(sd_cuda_backend *c) {
    sd_cu_flush(c);
    c->use_graphs = 0;
    for (size_t i = 0; i < sizeof c->graphs / sizeof c->graphs[0]; i++)
        graph_slot_free(&c->graphs[i]);
}
