/*
 * runtime/backend/cuda/ops.cu: the op entries of the CUDA backend's ops table. Each checks
 * its arguments on the host against what init sized and against the KV cache (an
 * SD_ERR_ARG / SD_ERR_UNSUPPORTED record instead of a launch out of bounds), resolves host
 * state into values (cache row addresses, ids, the weight and rope structs copied field by
 * field so that records compare with memcmp), and hands the record to graph.cu. Nothing is
 * launched here; the one copy queued here is a paged cache's block table (kv_map).
 */
#include <string.h>

#include "runtime/backend/cuda/cuda_impl.cuh" /* first: it maps _Static_assert for C++ */
#include "runtime/backend/cuda/types.cuh"
#include "kv/sd_kv.h"

/* A record with every byte defined (padding included). */
static void op_init(sd_cu_op *op, int kind, int32_t n_tok, int32_t pos0) {
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->n_tok = n_tok;
    op->pos0 = pos0;
}

static void put_weight(sd_weight *d, const sd_weight *w) {
    memset(d, 0, sizeof *d);
    d->type = w->type;
    d->rows = w->rows;
    d->cols = w->cols;
    d->row_bytes = w->row_bytes;
    d->data = w->data;
}

static void put_rope(sd_rope *d, const sd_rope *r) {
    memset(d, 0, sizeof *d);
    d->n_rot = r->n_rot;
    d->mode = r->mode;
    d->base = r->base;
    d->freq_scale = r->freq_scale;
    d->factors = r->factors;
}

void sd_cu_op_get_rows(sd_backend *be, const sd_weight *w, const int32_t *ids, int32_t n_tok,
                       float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || n_tok < 1) return;
    for (int32_t t = 0; t < n_tok; t++) {
        if (ids[t] < 0 || ids[t] >= w->rows) {
            sd_cu_failf(c, SD_ERR_ARG, "get_rows: id %d at index %d is out of range [0, %lld)",
                        ids[t], t, (long long)w->rows);
            return;
        }
    }
    int ok = 1;
    const int known = sd_cu_with_type(w->type, [&](auto tr) {
        using W = decltype(tr);
        if (w->cols < 1 || w->cols % W::block_elems != 0) {
            sd_cu_failf(c, SD_ERR_ARG, "get_rows: %s row of %lld columns", W::name,
                        (long long)w->cols);
            ok = 0;
        }
    });
    if (!known) {
        sd_cu_failf(c, SD_ERR_UNSUPPORTED, "get_rows: no CUDA kernels for weight type %s",
                    sd_cu_type_name(w->type));
        return;
    }
    if (!ok) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_GET_ROWS, n_tok, 0);
    put_weight(&op.a.get_rows.w, w);
    op.a.get_rows.y = y;
    /* The first op of a forward step: a step of few tokens becomes a graph step. A second
     * get_rows inside one cannot be replayed (the parameter block holds one set of ids). */
    if (!c->in_step && sd_cu_graphs_allowed(c, n_tok)) {
        sd_cu_step_begin(c, n_tok, ids);
        op.a.get_rows.ids = c->step_ids;
    } else {
        sd_cu_step_not_replayable(c);
        op.a.get_rows.ids = ids;
    }
    sd_cu_submit(c, &op);
}

void sd_cu_op_matmul(sd_backend *be, const sd_weight *w, const float *x, int32_t n_tok, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || !sd_cu_matmul_check(c, w, n_tok)) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_MATMUL, n_tok, 0);
    put_weight(&op.a.matmul.w, w);
    op.a.matmul.x = x;
    op.a.matmul.y = y;
    sd_cu_submit(c, &op);
}

void sd_cu_op_rmsnorm(sd_backend *be, const float *x, const float *w, int32_t n_tok, int32_t n,
                      float eps, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    if (n_tok < 1 || n < 1) {
        sd_cu_failf(c, SD_ERR_ARG, "rmsnorm: %d rows of %d", n_tok, n);
        return;
    }
    sd_cu_op op;
    op_init(&op, SD_CU_OP_RMSNORM, n_tok, 0);
    op.a.rmsnorm.x = x;
    op.a.rmsnorm.w = w;
    op.a.rmsnorm.y = y;
    op.a.rmsnorm.n = n;
    op.a.rmsnorm.eps = eps;
    sd_cu_submit(c, &op);
}

void sd_cu_op_rope(sd_backend *be, float *x, int32_t n_tok, int32_t pos0, int32_t n_head,
                   int32_t head_dim, const sd_rope *r) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    if (n_tok < 1 || n_head < 1 || pos0 < 0 || r->n_rot < 2 || r->n_rot % 2 != 0 ||
        r->n_rot > head_dim) {
        sd_cu_failf(c, SD_ERR_ARG, "rope: %d tokens at %d, %d heads, n_rot %d, head_dim %d", n_tok,
                    pos0, n_head, r->n_rot, head_dim);
        return;
    }
    sd_cu_op op;
    op_init(&op, SD_CU_OP_ROPE, n_tok, pos0);
    op.a.rope.x = x;
    op.a.rope.n_head = n_head;
    op.a.rope.head_dim = head_dim;
    put_rope(&op.a.rope.r, r);
    sd_cu_submit(c, &op);
}

void sd_cu_op_add_bias(sd_backend *be, float *y, const float *b, int32_t n_tok, int32_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || n_tok < 1 || n < 1) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_ADD_BIAS, n_tok, 0);
    op.a.add_bias.y = y;
    op.a.add_bias.b = b;
    op.a.add_bias.n = n;
    sd_cu_submit(c, &op);
}

/* The block table tab[i] = ids[i] - ids[0], i < n, of the sequence whose host table is ids,
 * in its slot (the least recently used one when it has none): copied there (on the stream,
 * from the slot's pinned shadow once the shadow's last copy has run) only when the slot
 * holds other entries. Kept records of the graph step being recorded that read the slot's
 * old entries are launched first (they run before the copy). NULL: an error recorded. */
static const int32_t *tab_slot_put(sd_cuda_backend *c, const int32_t *ids, int32_t n) {
    int k = -1, lru = 0;
    for (int i = 0; i < SD_CU_TAB_SLOTS && k < 0; i++) {
        if (c->tab_slot[i].owner == ids) k = i;
        if (c->tab_slot[i].used < c->tab_slot[lru].used) lru = i;
    }
    if (k < 0) {
        k = lru;
        c->tab_slot[k].owner = ids;
        c->tab_slot[k].n = 0;
    }
    auto *sl = &c->tab_slot[k];
    sl->used = ++c->tab_clock;
    int same = sl->n >= n;
    for (int32_t j = 0; same && j < n; j++)
        same = sl->h[j] == ids[j] - ids[0];
    if (!same) {
        if (c->in_step && sl->step == c->step_serial) sd_cu_step_leave(c);
        if (!sd_cu_check(c, cudaEventSynchronize(sl->ev), "kv block table", "cudaEventSynchronize"))
            return NULL;
        for (int32_t j = 0; j < n; j++)
            sl->h[j] = ids[j] - ids[0];
        if (!sd_cu_check(c,
                         cudaMemcpyAsync(sl->d, sl->h, (size_t)n * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, c->stream),
                         "kv block table", "cudaMemcpyAsync (host to device)") ||
            !sd_cu_check(c, cudaEventRecord(sl->ev, c->stream), "kv block table",
                         "cudaEventRecord"))
            return NULL;
        sl->n = n;
        c->n_tab_uploads++;
    }
    if (c->in_step) sl->step = c->step_serial;
    return sl->d;
}

/* Where layer's rows of positions [0, n_keys) are (all must be mapped): *kb, *vb the rows of
 * position 0 and *map how to step from them (sd_cu_kvmap): contiguous when the cache is one
 * span over its capacity (a contiguous cache), else through the sequence's block table in
 * its slot (tab_slot_put: the step stays replayable, a graph reading the table at the same
 * address whatever the position). 0 and an error recorded when the cache cannot be read so. */
static int kv_map(sd_cuda_backend *c, sd_kv *kv, int32_t layer, int32_t n_keys, const char *op,
                  uint8_t **kb, uint8_t **vb, sd_cu_kvmap *map) {
    memset(map, 0, sizeof *map);
    *kb = (uint8_t *)c->host->kv_k(kv, layer, 0);
    *vb = (uint8_t *)c->host->kv_v(kv, layer, 0);
    if (!*kb || !*vb) {
        sd_cu_failf(c, SD_ERR_ARG, "%s: layer %d position 0 is not in the cache", op, layer);
        return 0;
    }
    if (c->host->kv_span(kv, 0) >= c->host->kv_capacity(kv)) return 1;
    const int32_t *ids = NULL;
    int32_t bs = 0;
    const int32_t held = c->host->kv_block_table(kv, layer, &ids, &bs);
    const int32_t need = bs > 0 ? (n_keys + bs - 1) / bs : 0;
    if (need > c->tab_slot_cap) { /* a cache longer than the n_ctx init sized the slots for */
        sd_cu_failf(c, SD_ERR_ARG, "%s: a block table of %d blocks: more than %d", op, need,
                    c->tab_slot_cap);
        return 0;
    }
    if (bs < 1 || need > held) {
        sd_cu_failf(c, SD_ERR_ARG,
                    "%s: positions up to %d are not mapped (%d blocks of %d positions)", op,
                    n_keys - 1, held, bs);
        return 0;
    }
    for (int32_t i = 0; i < need; i++)
        if (ids[i] < 0) {
            sd_cu_failf(c, SD_ERR_UNSUPPORTED,
                        "%s: block %d of the sequence was released (a sliding window)", op, i);
            return 0;
        }
    map->tab = tab_slot_put(c, ids, need);
    map->blk = bs;
    map->block_bytes = (int64_t)bs * (int64_t)c->host->kv_row_bytes(kv);
    return map->tab != NULL;
}

void sd_cu_op_kv_store(sd_backend *be, sd_kv *kv, int32_t layer, int32_t pos0, int32_t n_tok,
                       int32_t kv_dim, const float *k, const float *v) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    if (n_tok < 1 || kv_dim != c->host->kv_dim(kv) || pos0 < 0 ||
        pos0 + n_tok > c->host->kv_capacity(kv)) {
        sd_cu_failf(c, SD_ERR_ARG, "kv_store: %d rows of %d at position %d (cache: %d of %d)",
                    n_tok, kv_dim, pos0, c->host->kv_capacity(kv), c->host->kv_dim(kv));
        return;
    }
    uint8_t *kb = NULL, *vb = NULL;
    sd_cu_kvmap map;
    if (!kv_map(c, kv, layer, pos0 + n_tok, "kv_store", &kb, &vb, &map)) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_KV_STORE, n_tok, pos0);
    op.a.kv_store.map = map;
    op.a.kv_store.kb = kb;
    op.a.kv_store.vb = vb;
    op.a.kv_store.row_bytes = c->host->kv_row_bytes(kv);
    op.a.kv_store.kv_dim = kv_dim;
    op.a.kv_store.f16 = c->host->kv_type(kv) == SD_TYPE_F16;
    op.a.kv_store.k = k;
    op.a.kv_store.v = v;
    sd_cu_submit(c, &op);
}

void sd_cu_op_attention(sd_backend *be, const float *q, sd_kv *kv, int32_t layer, int32_t pos0,
                        int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                        float *out) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    const int32_t n_keys = pos0 + n_tok;
    if (n_tok < 1 || pos0 < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 ||
        head_dim < 1 || head_dim > SD_CU_ATT_MAX_HD ||
        n_head_kv * head_dim != c->host->kv_dim(kv) || n_keys > c->n_ctx ||
        n_keys > c->host->kv_capacity(kv)) {
        sd_cu_failf(c, SD_ERR_ARG,
                    "attention: %d tokens at position %d, %d heads (%d KV) of %d: outside what "
                    "init sized (n_ctx %d, head_dim <= %d) or the cache",
                    n_tok, pos0, n_head, n_head_kv, head_dim, c->n_ctx, SD_CU_ATT_MAX_HD);
        return;
    }
    uint8_t *kb = NULL, *vb = NULL;
    sd_cu_kvmap map;
    if (!kv_map(c, kv, layer, n_keys, "attention", &kb, &vb, &map)) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_ATTENTION, n_tok, pos0);
    op.a.attention.map = map;
    op.a.attention.q = q;
    op.a.attention.kb = kb;
    op.a.attention.vb = vb;
    op.a.attention.row_bytes = c->host->kv_row_bytes(kv);
    op.a.attention.n_head = n_head;
    op.a.attention.n_head_kv = n_head_kv;
    op.a.attention.head_dim = head_dim;
    op.a.attention.f16 = c->host->kv_type(kv) == SD_TYPE_F16;
    op.a.attention.out = out;
    sd_cu_submit(c, &op);
}

void sd_cu_op_softmax(sd_backend *be, float *x, int32_t n_rows, int32_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c)) return;
    if (n_rows < 1 || n < 1) {
        sd_cu_failf(c, SD_ERR_ARG, "softmax: %d rows of %d", n_rows, n);
        return;
    }
    sd_cu_op op;
    op_init(&op, SD_CU_OP_SOFTMAX, n_rows, 0);
    op.a.softmax.x = x;
    op.a.softmax.n = n;
    sd_cu_submit(c, &op);
}

void sd_cu_op_swiglu(sd_backend *be, const float *g, const float *u, int64_t n, float *y) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || n <= 0) return;
    sd_cu_op op;
    op_init(&op, SD_CU_OP_SWIGLU, 0, 0);
    op.a.swiglu.g = g;
    op.a.swiglu.u = u;
    op.a.swiglu.y = y;
    op.a.swiglu.n = n;
    sd_cu_submit(c, &op);
}

static void elementwise(sd_backend *be, int kind, float *y, const float *x, int64_t n) {
    sd_cuda_backend *c = sd_cu_of(be);
    if (!sd_cu_enter(c) || n <= 0) return;
    sd_cu_op op;
    op_init(&op, kind, 0, 0);
    op.a.add.y = y;
    op.a.add.x = x;
    op.a.add.n = n;
    sd_cu_submit(c, &op);
}

void sd_cu_op_add(sd_backend *be, float *y, const float *x, int64_t n) {
    elementwise(be, SD_CU_OP_ADD, y, x, n);
}

void sd_cu_op_copy(sd_backend *be, float *y, const float *x, int64_t n) {
    elementwise(be, SD_CU_OP_COPY, y, x, n);
}
