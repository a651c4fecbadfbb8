/*
 * runtime/model/forward.c: sessions (a backend, the weights on it, the KV cache and
 * scratch in backend buffers) and the forward pass (sd_session_decode). All compute goes
 * through the backend ops table (runtime/backend/sd_backend.h); this file only does
 * arithmetic on backend addresses and never dereferences them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/sd_kv.h"
#include "runtime/backend/sd_backend.h"
#include "runtime/model/model_impl.h"
#include "runtime/model/tp.h"

/* The weights as the backend sees them: the same matrices with backend addresses. */
typedef struct sd_layer_dev {
    const float *attn_norm, *ffn_norm;
    const float *bq, *bk, *bv;                   /* NULL without biases */
    const float *q_norm, *k_norm;                /* NULL without per-head Q/K norms */
    const float *attn_post_norm, *ffn_post_norm; /* NULL without sandwich norms */
    int swa;                                     /* a local (sliding-window) layer */
    sd_weight wq, wk, wv, wo, w_gate, w_down, w_up;
} sd_layer_dev;

/* A batch's run of tokens of one sequence (check_batch): batch rows [start, start + n) at
 * positions [pos0, pos0 + n) of sequence seq. */
typedef struct sd_seg {
    int32_t seq, start, n, pos0;
    const int32_t *parent; /* a token tree's run: parent[0 .. n) (run indices, -1: the
                              root); NULL: a chain */
} sd_seg;

struct sd_session {
    const sd_model *m;
    sd_backend *be;
    sd_kv *kv; /* sequence 0 (seqs[0]) */
    /* Sequences: n_seq caches, one contiguous cache (n_seq 1, pool NULL) or views of one
     * paged pool; seq_tok[i]: the ids whose K/V sequence i holds ([n_ctx] each). */
    int32_t n_seq;
    sd_kv_pool *pool;
    sd_kv **seqs;
    int32_t **seq_tok;
    sd_seg *segs; /* [n_batch] scratch of check_batch */
    int32_t n_segs;
    int32_t n_ctx;
    int32_t n_batch;
    int32_t n_outputs;
    /* Backend buffers. */
    sd_buffer *b_weights; /* the GGUF data section: mapped (CPU) or uploaded */
    sd_buffer *b_norms;   /* the model's norm vectors */
    sd_buffer *b_kv;      /* KV cache storage */
    sd_buffer *b_act;     /* every scratch array below */
    sd_buffer *b_logits;  /* [n_outputs, n_vocab], only when the backend is not host memory */
    /* Weights on the backend. */
    sd_weight tok_embd, output;
    const float *output_norm;
    sd_rope rope;         /* factors: a backend address */
    sd_rope rope_swa;     /* the local layers' (their base, no linear scaling) */
    sd_layer_dev *layers; /* [n_layer] (host array of backend addresses) */
    /* > 0: the layers alternate local and global attention (gemma3): each layer sets the
     * backend's window to this (local) or 0 (global) before its attention. */
    int32_t layer_window;
    /* > 0: a paged cache and every layer windowed by this: blocks behind the window (and
     * SD_KV_WINDOW_SLACK) go back to the pool after each pass (decode_local_ex). */
    int32_t kv_window;
    int32_t n_out_last; /* logits rows of the last decode (for the soft cap) */
    /* Host state. */
    int32_t *tokens;   /* [n_ctx]: ids whose K/V the cache holds, [0, n_past) valid */
    int32_t *out_rows; /* [n_batch]: batch indices of the wanted logits rows (scratch) */
    int32_t *seq_ids;  /* [n_batch]: sequence ids of sd_session_seq_eval's batch (scratch) */
    /* Scratch, backend addresses inside b_act. */
    float *x;    /* [n_batch, n_embd] residual stream */
    float *xn;   /* [n_batch, n_embd] normed input */
    float *q;    /* [n_batch, q_dim], q_dim = n_head * head_dim */
    float *k;    /* [n_batch, kv_dim] */
    float *v;    /* [n_batch, kv_dim] */
    float *att;  /* [n_batch, q_dim] attention output */
    float *proj; /* [n_batch, n_embd] output projections */
    float *gate; /* [n_batch, n_ff] */
    float *up;   /* [n_batch, n_ff] */
    /* Tensor parallelism (tp.h): this session's rank (NULL: one device), and on rank 0,
     * the handle the user holds, the group its decode / truncate / free reach. */
    sd_tp_rank *tp;
    sd_tp *group;
    const sd_session_group_ops *group_ops;
    /* A trimmed classifier (sd_session_set_output_rows): n_head rows of output.weight
     * gathered into head_host (on the backend as b_head); n_head 0: the full head. */
    int32_t n_head;
    void *head_host;
    sd_buffer *b_head;
    sd_weight head;
    /* A pass with token trees (sd_session_decode_trees) while it runs: the batch's parent
     * [n_tokens] (each row's parent in its sequence's run, -1: the run's first row), NULL
     * otherwise; tree_pos [SD_MAX_TREE]: a tree run's node positions, pos0 + its depth
     * (run_layers, per run). */
    const int32_t *tree_parent;
    int32_t tree_pos[SD_MAX_TREE];
};

sd_session_params sd_session_default_params(void) {
    sd_session_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 0;
    p.n_batch = SD_DEFAULT_N_BATCH;
    p.n_threads = 0;
    p.kv_type = SD_TYPE_F32;
    p.device = SD_DEVICE_CPU;
    p.n_outputs = 0;
    p.n_split = 0;
    return p;
}

/* Backend address of host address h inside the region [base, ...) that buffer b holds. */
static const void *dev_addr(const sd_buffer *b, const void *base, const void *h) {
    return (const uint8_t *)b->addr + ((const uint8_t *)h - (const uint8_t *)base);
}

static sd_weight dev_weight(const sd_buffer *b, const void *base, const sd_weight *w) {
    sd_weight d = *w;
    d.data = dev_addr(b, base, w->data);
    return d;
}

/* The backend's prepare_weight for one matrix; when it made its own copy of a matrix the
 * CPU backend maps in place (packed), the file's pages of the original are released
 * (sd_gguf_advise_unneeded: they would otherwise count twice in the resident set), unless
 * another reader (the embedding of a tied classifier) still needs them. */
static int prepare(sd_session *s, sd_weight *w, sd_error *err) {
    const void *before = w->data;
    int rc = s->be->ops->prepare_weight(s->be, w, err);
    if (rc || w->data == before || !s->be->caps.host_memory || s->m->shard_data) return rc;
    if (before == s->tok_embd.data) return SD_OK;
    sd_gguf_advise_unneeded(s->m->g, before, (size_t)w->rows * w->row_bytes);
    return SD_OK;
}

/* Put the weights on the backend: the whole GGUF data section in one buffer (mapped in
 * place by the CPU backend, uploaded once by a device backend) and the norm copies. */
static int place_weights(sd_session *s, sd_error *err) {
    const sd_model *m = s->m;
    const void *base;
    size_t bytes;
    if (m->shard_data) { /* a tensor-parallel shard's own copy (tp.c) */
        base = m->shard_data;
        bytes = m->shard_bytes;
    } else {
        sd_gguf_data(m->g, &base, &bytes);
    }
    const sd_weight *all[2] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        if (!s->be->ops->supports_type(s->be, all[i]->type))
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "%s: %s is %s: no %s kernels for that type (supported here: see "
                             "docs/architectures.md)",
                             m->path, i ? "output.weight" : "token_embd.weight",
                             sd_type_name((uint32_t)all[i]->type), sd_device_name(s->be->device));
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const sd_layer *L = &m->layers[l];
        const sd_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_down, &L->w_up};
        for (int i = 0; i < 7; i++)
            if (!s->be->ops->supports_type(s->be, ws[i]->type))
                return sd_errorf(err, SD_ERR_UNSUPPORTED,
                                 "%s: layer %d has %s weights: no %s kernels for that type",
                                 m->path, l, sd_type_name((uint32_t)ws[i]->type),
                                 sd_device_name(s->be->device));
    }
    int rc = s->be->ops->buffer_from_host(s->be, base, bytes, &s->b_weights, err);
    if (rc) return sd_error_prefix(err, rc, "%s: weights", m->path);
    rc = s->be->ops->buffer_from_host(s->be, m->norms, m->norms_bytes, &s->b_norms, err);
    if (rc) return sd_error_prefix(err, rc, "%s: norm weights", m->path);
    const int32_t n_layer = m->hp.n_layer;
    s->layers = calloc((size_t)n_layer, sizeof *s->layers);
    if (!s->layers) return sd_errorf(err, SD_ERR_OOM, "session: out of memory (layers)");
    for (int32_t l = 0; l < n_layer; l++) {
        const sd_layer *L = &m->layers[l];
        sd_layer_dev *D = &s->layers[l];
        D->attn_norm = dev_addr(s->b_norms, m->norms, L->attn_norm);
        D->ffn_norm = dev_addr(s->b_norms, m->norms, L->ffn_norm);
        if (L->bq) {
            D->bq = dev_addr(s->b_norms, m->norms, L->bq);
            D->bk = dev_addr(s->b_norms, m->norms, L->bk);
            D->bv = dev_addr(s->b_norms, m->norms, L->bv);
        }
        if (L->q_norm) {
            D->q_norm = dev_addr(s->b_norms, m->norms, L->q_norm);
            D->k_norm = dev_addr(s->b_norms, m->norms, L->k_norm);
        }
        if (L->attn_post_norm) {
            D->attn_post_norm = dev_addr(s->b_norms, m->norms, L->attn_post_norm);
            D->ffn_post_norm = dev_addr(s->b_norms, m->norms, L->ffn_post_norm);
        }
        D->swa = L->swa;
        D->wq = dev_weight(s->b_weights, base, &L->wq);
        D->wk = dev_weight(s->b_weights, base, &L->wk);
        D->wv = dev_weight(s->b_weights, base, &L->wv);
        D->wo = dev_weight(s->b_weights, base, &L->wo);
        D->w_gate = dev_weight(s->b_weights, base, &L->w_gate);
        D->w_down = dev_weight(s->b_weights, base, &L->w_down);
        D->w_up = dev_weight(s->b_weights, base, &L->w_up);
    }
    s->tok_embd = dev_weight(s->b_weights, base, &m->tok_embd);
    s->output = dev_weight(s->b_weights, base, &m->output);
    /* The matmul weights in the backend's kernel layout, where it has one (the CPU
     * backend packs quantized matrices for its SIMD kernels); the embedding stays as
     * placed: get_rows reads it (a tied output matrix gets its own copy). */
    if (s->be->ops->prepare_weight) {
        for (int32_t l = 0; l < n_layer; l++) {
            sd_layer_dev *D = &s->layers[l];
            sd_weight *ws[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->w_gate, &D->w_down, &D->w_up};
            for (int i = 0; i < 7; i++) {
                rc = prepare(s, ws[i], err);
                if (rc) return sd_error_prefix(err, rc, "%s: layer %d weights", m->path, l);
            }
        }
        /* a tied classifier is the embedding, which get_rows still reads in place */
        rc = prepare(s, &s->output, err);
        if (rc) return sd_error_prefix(err, rc, "%s: output.weight", m->path);
    }
    s->output_norm = dev_addr(s->b_norms, m->norms, m->output_norm);
    const sd_hparams *hp = &m->hp;
    s->rope.n_rot = hp->n_rot;
    s->rope.mode = hp->rope_neox ? SD_ROPE_NEOX : SD_ROPE_NORM;
    s->rope.base = hp->rope_base;
    s->rope.freq_scale = hp->rope_freq_scale;
    /* phi3 LongRoPE: the long factors for a context beyond the original one (llama.cpp's
     * choice by the session's context) */
    const float *rf = m->rope_factors;
    if (!rf && m->rope_long) rf = s->n_ctx > hp->n_ctx_orig ? m->rope_long : m->rope_short;
    s->rope.factors = rf ? dev_addr(s->b_norms, m->norms, rf) : NULL;
    s->rope_swa = s->rope; /* the local layers: their own base, no linear scaling (gemma3) */
    if (hp->rope_base_swa > 0.0f) {
        s->rope_swa.base = hp->rope_base_swa;
        s->rope_swa.freq_scale = 1.0f;
    }
    return SD_OK;
}

/* Scratch: 3 arrays of n_embd, 2 of q_dim, 2 of kv_dim, 2 of n_ff per token, in one
 * buffer. */
static int alloc_scratch(sd_session *s, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    const size_t n_embd = (size_t)hp->n_embd, n_ff = (size_t)hp->n_ff;
    const size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t q_dim = (size_t)hp->n_head * (size_t)hp->head_dim;
    const size_t nb = (size_t)s->n_batch;
    size_t per_tok, a, b, c, d, total, bytes;
    if (sd_mul_size(n_embd, 3, &a) || sd_mul_size(kv_dim, 2, &b) || sd_mul_size(n_ff, 2, &c) ||
        sd_mul_size(q_dim, 2, &d) || sd_add_size(a, b, &per_tok) ||
        sd_add_size(per_tok, c, &per_tok) || sd_add_size(per_tok, d, &per_tok) ||
        sd_mul_size(per_tok, nb, &total) || sd_mul_size(total, sizeof(float), &bytes))
        return sd_errorf(err, SD_ERR_OOM, "session: scratch size overflows (n_batch %d)",
                         s->n_batch);
    int rc = sd_buffer_alloc(s->be, bytes, SD_BUFFER_COMPUTE, &s->b_act, err);
    if (rc) return sd_error_prefix(err, rc, "%s: session scratch", s->m->path);
    float *q = s->b_act->addr;
    s->x = q, q += nb * n_embd;
    s->xn = q, q += nb * n_embd;
    s->q = q, q += nb * q_dim;
    s->att = q, q += nb * q_dim;
    s->proj = q, q += nb * n_embd;
    s->k = q, q += nb * kv_dim;
    s->v = q, q += nb * kv_dim;
    s->gate = q, q += nb * n_ff;
    s->up = q, q += nb * n_ff;
    SD_CHECK((size_t)(q - (float *)s->b_act->addr) == total, "session scratch layout");
    if (s->be->caps.host_memory) return SD_OK; /* logits are written to the caller's rows */
    size_t lb;
    if (sd_mul_size((size_t)s->n_outputs, (size_t)hp->n_vocab, &lb) ||
        sd_mul_size(lb, sizeof(float), &lb))
        return sd_errorf(err, SD_ERR_OOM, "session: logits size overflows");
    rc = sd_buffer_alloc(s->be, lb, SD_BUFFER_OUTPUT, &s->b_logits, err);
    return rc ? sd_error_prefix(err, rc, "%s: logits rows", s->m->path) : SD_OK;
}

/* A paged pool in device memory (sd_kv_pool_params.copy): its copy-on-write copies are
 * the backend's copy op, queued in order with the passes (bytes: whole floats, checked at
 * session init). */
static void kv_copy_on_backend(void *ctx, void *dst, const void *src, size_t bytes) {
    sd_backend *be = ctx;
    be->ops->copy(be, dst, src, (int64_t)(bytes / sizeof(float)));
}

/* The KV cache: one contiguous cache (p->n_seq 0), or a paged pool and n_seq sequences of
 * up to n_ctx positions each; and the token mirrors. */
static int alloc_kv(sd_session *s, const sd_session_params *p, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    const int32_t kv_dim = hp->n_head_kv * hp->head_dim;
    size_t bytes;
    int rc;
    s->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    s->seqs = calloc((size_t)s->n_seq, sizeof *s->seqs);
    s->seq_tok = calloc((size_t)s->n_seq, sizeof *s->seq_tok);
    if (!s->seqs || !s->seq_tok) return sd_errorf(err, SD_ERR_OOM, "session: out of memory");
    for (int32_t i = 0; i < s->n_seq; i++) {
        s->seq_tok[i] = calloc((size_t)s->n_ctx, sizeof(int32_t));
        if (!s->seq_tok[i])
            return sd_errorf(err, SD_ERR_OOM, "session: out of memory (token mirrors)");
    }
    s->tokens = s->seq_tok[0];
    if (p->n_seq <= 0) {
        sd_kv_params kp = {hp->n_layer, s->n_ctx, kv_dim, p->kv_type, NULL};
        rc = sd_kv_storage_bytes(&kp, &bytes, err);
        if (!rc) rc = sd_buffer_alloc(s->be, bytes, SD_BUFFER_KV, &s->b_kv, err);
        if (rc) return sd_error_prefix(err, rc, "%s: KV cache (n_ctx %d)", s->m->path, s->n_ctx);
        kp.storage = s->b_kv->addr;
        rc = sd_kv_init(&kp, &s->kv, err);
        if (rc) return sd_error_prefix(err, rc, "%s: KV cache", s->m->path);
        s->seqs[0] = s->kv;
        return SD_OK;
    }
    sd_kv_pool_params pp = {.n_layer = hp->n_layer,
                            .kv_dim = kv_dim,
                            .block_size = p->kv_block ? p->kv_block : SD_DEFAULT_KV_BLOCK,
                            .n_blocks = p->n_kv_blocks,
                            .type = p->kv_type};
    if (pp.block_size < 1 || pp.block_size > SD_KV_MAX_BLOCK)
        return sd_errorf(err, SD_ERR_ARG, "session: kv_block %d out of range [1, %d]", p->kv_block,
                         SD_KV_MAX_BLOCK);
    if (pp.n_blocks == 0) {
        const int64_t nb = (int64_t)s->n_seq * ((s->n_ctx + pp.block_size - 1) / pp.block_size);
        if (nb > INT32_MAX)
            return sd_errorf(err, SD_ERR_ARG,
                             "session: %d sequences of %d positions: too many "
                             "blocks",
                             s->n_seq, s->n_ctx);
        pp.n_blocks = (int32_t)nb;
    }
    int32_t *layer_group = NULL;
    if (s->layer_window > 0) {
        /* Local and global layers (gemma3): two layer groups, each with its own blocks.
         * Group 0 (global layers) holds every position; group 1 (local layers) gives back
         * the blocks behind the window after each pass, so a sequence holds at most the
         * window, SD_KV_WINDOW_SLACK and one pass of positions there, plus a partial block
         * at each end and one copy-on-write copy. Group 1 is sized for that (never above
         * group 0's count). */
        layer_group = malloc((size_t)hp->n_layer * sizeof *layer_group);
        if (!layer_group) return sd_errorf(err, SD_ERR_OOM, "session: out of memory");
        for (int32_t l = 0; l < hp->n_layer; l++)
            layer_group[l] = s->layers[l].swa ? 1 : 0;
        const int64_t per_seq =
            (s->layer_window + SD_KV_WINDOW_SLACK + s->n_batch + pp.block_size - 1) /
                pp.block_size +
            3;
        const int64_t local = (int64_t)s->n_seq * per_seq;
        pp.n_group = 2;
        pp.layer_group = layer_group;
        pp.group_blocks[1] = local < pp.n_blocks ? (int32_t)local : pp.n_blocks;
        pp.group_window[1] = s->layer_window;
    }
    rc = sd_kv_pool_storage_bytes(&pp, &bytes, err);
    if (!rc) rc = sd_buffer_alloc(s->be, bytes, SD_BUFFER_KV, &s->b_kv, err);
    if (rc) {
        free(layer_group);
        return sd_error_prefix(err, rc, "%s: paged KV cache (%d blocks of %d positions)",
                               s->m->path, pp.n_blocks, pp.block_size);
    }
    pp.storage = s->b_kv->addr;
    if (!s->be->caps.host_memory) {
        pp.copy = kv_copy_on_backend;
        pp.copy_ctx = s->be;
    }
    rc = sd_kv_pool_init(&pp, &s->pool, err);
    free(layer_group);
    for (int32_t i = 0; rc == SD_OK && i < s->n_seq; i++)
        rc = sd_kv_seq_init(s->pool, s->n_ctx, &s->seqs[i], err);
    if (rc) return sd_error_prefix(err, rc, "%s: paged KV cache", s->m->path);
    s->kv = s->seqs[0];
    return SD_OK;
}

/* The optional ops the model's architecture needs (sd_backend_ops: geglu, scale,
 * set_window), or SD_ERR_UNSUPPORTED naming the first the backend lacks. */
static int check_arch_ops(sd_session *s, int32_t window, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    const sd_backend_ops *op = s->be->ops;
    s->layer_window = window > 0 && hp->n_swa_layers < hp->n_layer ? window : 0;
    if (hp->rope_attn_factor != 1.0f && hp->n_rot != hp->head_dim)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: rope.scaling.attn_factor %g with %d of %d dimensions rotated (only "
                         "whole heads are scaled)",
                         s->m->path, (double)hp->rope_attn_factor, hp->n_rot, hp->head_dim);
    const char *missing = NULL;
    if (hp->ffn_gelu && !op->geglu) missing = "geglu (a GELU-gated FFN)";
    if (hp->embd_scale && !op->scale) missing = "scale (scaled embeddings)";
    if (hp->rope_attn_factor != 1.0f && !op->scale) missing = "scale (rope.scaling.attn_factor)";
    if (s->layer_window && !op->set_window)
        missing = "set_window (local and global attention layers)";
    if (!missing) return SD_OK;
    return sd_errorf(err, SD_ERR_UNSUPPORTED, "%s: %s: the %s backend has no op %s", s->m->path,
                     hp->arch, sd_device_name(s->be->device), missing);
}

static int session_init(const sd_model *m, const sd_session_params *p, sd_tp_rank *tp,
                        int32_t device_id, sd_session **out, sd_error *err) {
    const sd_hparams *hp = &m->hp;
    const int32_t n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    if (n_ctx < 1 || n_ctx > SD_MAX_CTX)
        return sd_errorf(err, SD_ERR_ARG, "session: n_ctx %d out of range [1, %d]", p->n_ctx,
                         SD_MAX_CTX);
    if (p->n_batch < 1 || p->n_batch > SD_MAX_BATCH)
        return sd_errorf(err, SD_ERR_ARG, "session: n_batch %d out of range [1, %d]", p->n_batch,
                         SD_MAX_BATCH);
    if (p->n_threads < 0)
        return sd_errorf(err, SD_ERR_ARG, "session: n_threads %d is negative", p->n_threads);
    if (p->n_outputs < 0)
        return sd_errorf(err, SD_ERR_ARG, "session: n_outputs %d is negative", p->n_outputs);
    if (!sd_kv_type_ok(p->kv_type))
        return sd_errorf(err, SD_ERR_ARG,
                         "session: kv_type %s (%d), expected f32, f16, q8_0 or q4_0",
                         sd_type_name((uint32_t)p->kv_type), (int)p->kv_type);
    if (p->n_seq < 0 || p->n_seq > SD_MAX_SEQ)
        return sd_errorf(err, SD_ERR_ARG, "session: n_seq %d out of range [0, %d]", p->n_seq,
                         SD_MAX_SEQ);
    if (p->n_kv_blocks < 0)
        return sd_errorf(err, SD_ERR_ARG, "session: n_kv_blocks %d is negative", p->n_kv_blocks);
    /* Only the CPU backend reads quantized KV rows; a device reads F32 / F16 rows, paged
     * (its pool copies rows through the backend's copy op: whole floats) or not. */
    if (p->device != SD_DEVICE_CPU && (p->kv_type == SD_TYPE_Q8_0 || p->kv_type == SD_TYPE_Q4_0))
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: the %s backend has no %s KV cache (q8_0 / q4_0 KV rows run on the "
                         "cpu backend only; use f16 or f32)",
                         m->path, sd_device_name(p->device), sd_type_name((uint32_t)p->kv_type));
    if (p->device != SD_DEVICE_CPU && p->n_seq > 0 && p->kv_type == SD_TYPE_F16 &&
        hp->n_head_kv * hp->head_dim % 2 != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a paged f16 KV cache on the %s backend needs an even row (%d x %d)",
                         m->path, sd_device_name(p->device), hp->n_head_kv, hp->head_dim);
    if ((p->kv_type == SD_TYPE_Q8_0 || p->kv_type == SD_TYPE_Q4_0) && hp->head_dim % 32 != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a %s KV cache needs head_dim a multiple of 32 (it is %d)", m->path,
                         sd_type_name((uint32_t)p->kv_type), hp->head_dim);
    sd_session *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "session: out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    /* A batch never holds more than the context, nor returns more rows than it holds. */
    s->n_batch = p->n_batch < n_ctx ? p->n_batch : n_ctx;
    s->n_outputs = p->n_outputs && p->n_outputs < s->n_batch ? p->n_outputs : s->n_batch;
    sd_backend_params bp = {0};
    bp.n_threads = p->n_threads;
    bp.n_batch = s->n_batch;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    bp.max_cols = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
    if (q_dim > bp.max_cols) bp.max_cols = q_dim; /* attn_output's rows (Qwen3) */
    bp.n_ctx = n_ctx;
    bp.device_id = device_id;
    /* <arch>.attention.sliding_window smaller than the context: the backend attends over
     * the last `window` positions only (one that cannot refuses: its error names it) */
    if (hp->sliding_window > 0 && hp->n_swa_layers > 0 && n_ctx > hp->sliding_window)
        bp.window = hp->sliding_window;
    if (p->share_threads && p->device == SD_DEVICE_CPU && !p->share_threads->group &&
        p->share_threads->be->device == SD_DEVICE_CPU)
        bp.share_threads = p->share_threads->be;
    int rc = sd_backend_init(p->device, &bp, &s->be, err);
    if (rc && bp.window) {
        char k[96];
        sd_error_prefix(err, rc, "%s: %s = %d", m->path,
                        sd_arch_key_name(SD_KEY_SLIDING_WINDOW, hp->arch, k, sizeof k), bp.window);
    }
    if (rc == SD_OK) rc = check_arch_ops(s, bp.window, err);
    if (rc == SD_OK) rc = place_weights(s, err);
    if (rc == SD_OK) rc = alloc_kv(s, p, err);
    /* Every layer windowed: the blocks behind the window go back to the pool. Interleaved
     * local / global layers (gemma3): the pool has a block group per kind (alloc_kv), and
     * only the local layers' blocks behind the window go back. */
    if (rc == SD_OK && s->pool && bp.window > 0 &&
        (hp->n_swa_layers == hp->n_layer || s->layer_window > 0))
        s->kv_window = bp.window;
    if (rc == SD_OK) rc = alloc_scratch(s, err);
    if (rc == SD_OK && tp) {
        s->tp = tp;
        rc = sd_tp_rank_bind(tp, s->be, s->n_batch, s->n_outputs, err);
    }
    if (rc == SD_OK) {
        s->out_rows = calloc((size_t)s->n_batch, sizeof(int32_t));
        s->seq_ids = calloc((size_t)s->n_batch, sizeof(int32_t));
        s->segs = calloc((size_t)s->n_batch, sizeof *s->segs);
        if (!s->out_rows || !s->seq_ids || !s->segs)
            rc = sd_errorf(err, SD_ERR_OOM, "session: out of memory (batch scratch)");
    }
    if (rc != SD_OK) {
        sd_session_free(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

int sd_session_init_rank(const sd_model *m, const sd_session_params *p, sd_tp_rank *r,
                         int32_t device_id, sd_session **out, sd_error *err) {
    *out = NULL;
    return session_init(m, p, r, device_id, out, err);
}

void sd_session_set_group(sd_session *s, sd_tp *g, const sd_session_group_ops *ops) {
    s->group = g;
    s->group_ops = ops;
}

void sd_session_free(sd_session *s) {
    if (!s) return;
    if (s->group) { /* the group frees every rank's session, this one included */
        sd_tp *g = s->group;
        s->group = NULL;
        s->group_ops->free(g);
        return;
    }
    sd_tp_rank_unbind(s->tp);
    sd_buffer_free(s->b_head);
    free(s->head_host);
    for (int32_t i = 0; s->seqs && i < s->n_seq; i++)
        sd_kv_free(s->seqs[i]);
    sd_kv_pool_free(s->pool);
    sd_buffer_free(s->b_logits);
    sd_buffer_free(s->b_act);
    sd_buffer_free(s->b_kv);
    sd_buffer_free(s->b_norms);
    sd_buffer_free(s->b_weights);
    sd_backend_free(s->be);
    free(s->layers);
    for (int32_t i = 0; s->seq_tok && i < s->n_seq; i++)
        free(s->seq_tok[i]);
    free(s->seq_tok);
    free(s->seqs);
    free(s->segs);
    free(s->out_rows);
    free(s->seq_ids);
    free(s);
}

sd_batch sd_batch_of(const int32_t *tokens, int32_t n) {
    sd_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n;
    b.token = tokens;
    return b;
}

/* Validate a batch against the session; fills s->out_rows and *n_want, and s->segs with
 * the batch's runs of one sequence each. The wanted rows are those flagged in b->logits,
 * or, when n_last >= 0, the last n_last rows. */
static int check_batch(sd_session *s, const sd_batch *b, int32_t n_last, const float *logits,
                       int32_t *n_want, sd_error *err) {
    const int32_t n = b->n_tokens, n_vocab = s->m->hp.n_vocab;
    if (n < 1 || n > s->n_batch)
        return sd_errorf(err, SD_ERR_ARG, "eval: %d tokens, expected 1..%d (n_batch)", n,
                         s->n_batch);
    if (!b->token) return sd_errorf(err, SD_ERR_ARG, "eval: tokens is NULL");
    int32_t w = 0;
    s->n_segs = 0;
    for (int32_t i = 0; i < n; i++) {
        if (b->token[i] < 0 || b->token[i] >= n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "eval: token %d at index %d is out of range [0, %d)",
                             b->token[i], i, n_vocab);
        const int32_t seq = b->seq_id ? b->seq_id[i] : 0;
        if (seq < 0 || seq >= s->n_seq)
            return sd_errorf(err, SD_ERR_ARG,
                             "eval: batch index %d has sequence id %d: the session holds %d "
                             "sequence%s (ids 0 .. %d)",
                             i, seq, s->n_seq, s->n_seq == 1 ? "" : "s", s->n_seq - 1);
        sd_seg *g = s->n_segs ? &s->segs[s->n_segs - 1] : NULL;
        if (!g || g->seq != seq) {
            for (int32_t j = 0; j < s->n_segs; j++)
                if (s->segs[j].seq == seq)
                    return sd_errorf(err, SD_ERR_UNSUPPORTED,
                                     "eval: batch index %d: the tokens of sequence %d must be "
                                     "adjacent in the batch",
                                     i, seq);
            g = &s->segs[s->n_segs++];
            g->seq = seq;
            g->start = i;
            g->n = 0;
            g->pos0 = sd_kv_n(s->seqs[seq]);
            g->parent = NULL;
        }
        if (s->tree_parent) { /* row g->n of its run: a chain row's parent is the row before */
            const int32_t par = s->tree_parent[i];
            if (par < -1 || par >= g->n)
                return sd_errorf(err, SD_ERR_ARG,
                                 "tree pass: node %d has parent %d, expected -1 .. %d (parents "
                                 "before their children)",
                                 g->n, par, g->n - 1);
            if (par != g->n - 1) g->parent = s->tree_parent + g->start;
        }
        if (b->pos && b->pos[i] != g->pos0 + g->n)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "eval: batch index %d has position %d, expected %d (positions "
                             "must continue the sequence's cache contiguously)",
                             i, b->pos[i], g->pos0 + g->n);
        g->n++;
        const int want =
            n_last >= 0 ? i >= n - n_last : (b->logits ? b->logits[i] != 0 : i == n - 1);
        if (want) s->out_rows[w++] = i;
    }
    for (int32_t j = 0; j < s->n_segs; j++)
        if (s->segs[j].parent && s->segs[j].n > SD_MAX_TREE)
            return sd_errorf(err, SD_ERR_ARG, "tree pass: %d nodes, expected 1 .. %d", s->segs[j].n,
                             SD_MAX_TREE);
    if (w > s->n_outputs)
        return sd_errorf(err, SD_ERR_ARG,
                         "eval: %d logits rows wanted, expected at most %d "
                         "(n_outputs)",
                         w, s->n_outputs);
    if (w > 0 && !logits) return sd_errorf(err, SD_ERR_ARG, "eval: logits is NULL");
    *n_want = w;
    return SD_OK;
}

/* Two or three matrices of one input (w2 NULL: two): one matmul_multi where the backend
 * has it (one hand-over to its threads), else one matmul each; the same bits either way. */
static void matmul3(sd_backend *be, const sd_weight *w0, const sd_weight *w1, const sd_weight *w2,
                    const float *x, int32_t n, float *y0, float *y1, float *y2) {
    const sd_backend_ops *op = be->ops;
    if (op->matmul_multi) {
        const sd_weight *ws[3] = {w0, w1, w2};
        float *ys[3] = {y0, y1, y2};
        op->matmul_multi(be, ws, w2 ? 3 : 2, x, n, ys);
        return;
    }
    op->matmul(be, w0, x, n, y0);
    op->matmul(be, w1, x, n, y1);
    if (w2) op->matmul(be, w2, x, n, y2);
}

/* The transformer blocks over the batch's n tokens (residual stream s->x), the runs of
 * one sequence s->segs[0 .. n_segs): every op but RoPE, the KV store and attention is
 * row by row over the whole batch; those three run per sequence, at its positions and
 * over its own cache, so a row's arithmetic never depends on the other sequences. */
static void run_layers(sd_session *s, int32_t n) {
    const sd_hparams *hp = &s->m->hp;
    sd_backend *be = s->be;
    const sd_backend_ops *op = be->ops;
    const int32_t n_embd = hp->n_embd, kv_dim = hp->n_head_kv * hp->head_dim;
    const int32_t q_dim = hp->n_head * hp->head_dim;
    const int64_t nx = (int64_t)n * n_embd;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const sd_layer_dev *L = &s->layers[l];
        op->rmsnorm(be, s->x, L->attn_norm, n, n_embd, hp->rms_eps, s->xn);
        matmul3(be, &L->wq, &L->wk, &L->wv, s->xn, n, s->q, s->k, s->v);
        if (L->bq) {
            op->add_bias(be, s->q, L->bq, n, q_dim);
            op->add_bias(be, s->k, L->bk, n, kv_dim);
            op->add_bias(be, s->v, L->bv, n, kv_dim);
        }
        if (L->q_norm) { /* every head of Q and K normed on its own, before RoPE */
            op->rmsnorm(be, s->q, L->q_norm, n * hp->n_head, hp->head_dim, hp->rms_eps, s->q);
            op->rmsnorm(be, s->k, L->k_norm, n * hp->n_head_kv, hp->head_dim, hp->rms_eps, s->k);
        }
        const sd_rope *rope = L->swa && hp->sliding_window > 0 ? &s->rope_swa : &s->rope;
        if (s->layer_window) op->set_window(be, L->swa ? s->layer_window : 0);
        for (int32_t j = 0; j < s->n_segs; j++) {
            const sd_seg *g = &s->segs[j];
            sd_kv *kv = s->seqs[g->seq];
            float *q = s->q + (size_t)g->start * q_dim, *att = s->att + (size_t)g->start * q_dim;
            float *k = s->k + (size_t)g->start * kv_dim, *v = s->v + (size_t)g->start * kv_dim;
            if (g->parent) { /* a token tree: rows rotated by their depth */
                for (int32_t i = 0; i < g->n; i++) {
                    s->tree_pos[i] = g->parent[i] < 0 ? g->pos0 : s->tree_pos[g->parent[i]] + 1;
                    op->rope(be, q + (size_t)i * q_dim, 1, s->tree_pos[i], hp->n_head, hp->head_dim,
                             rope);
                    op->rope(be, k + (size_t)i * kv_dim, 1, s->tree_pos[i], hp->n_head_kv,
                             hp->head_dim, rope);
                }
                if (hp->rope_attn_factor != 1.0f) { /* LongRoPE, as a chain's rows */
                    op->scale(be, q, hp->rope_attn_factor, (int64_t)g->n * q_dim);
                    op->scale(be, k, hp->rope_attn_factor, (int64_t)g->n * kv_dim);
                }
                op->kv_store(be, kv, l, g->pos0, g->n, kv_dim, k, v);
                op->attention_tree(be, q, kv, l, g->pos0, g->n, g->parent, hp->n_head,
                                   hp->n_head_kv, hp->head_dim, att);
                continue;
            }
            op->rope(be, q, g->n, g->pos0, hp->n_head, hp->head_dim, rope);
            op->rope(be, k, g->n, g->pos0, hp->n_head_kv, hp->head_dim, rope);
            if (hp->rope_attn_factor != 1.0f) { /* LongRoPE: cos and sin times the factor */
                op->scale(be, q, hp->rope_attn_factor, (int64_t)g->n * q_dim);
                op->scale(be, k, hp->rope_attn_factor, (int64_t)g->n * kv_dim);
            }
            op->kv_store(be, kv, l, g->pos0, g->n, kv_dim, k, v);
            op->attention(be, q, kv, l, g->pos0, g->n, hp->n_head, hp->n_head_kv, hp->head_dim,
                          att);
        }
        op->matmul(be, &L->wo, s->att, n, s->proj);
        if (s->tp) sd_tp_allreduce(s->tp, s->proj, nx); /* row-parallel: sum the ranks' parts */
        if (L->attn_post_norm)                          /* sandwich norm (gemma3) */
            op->rmsnorm(be, s->proj, L->attn_post_norm, n, n_embd, hp->rms_eps, s->proj);
        op->add(be, s->x, s->proj, nx);

        op->rmsnorm(be, s->x, L->ffn_norm, n, n_embd, hp->rms_eps, s->xn);
        matmul3(be, &L->w_gate, &L->w_up, NULL, s->xn, n, s->gate, s->up, NULL);
        if (hp->ffn_gelu)
            op->geglu(be, s->gate, s->up, (int64_t)n * hp->n_ff, s->gate);
        else
            op->swiglu(be, s->gate, s->up, (int64_t)n * hp->n_ff, s->gate);
        op->matmul(be, &L->w_down, s->gate, n, s->proj);
        if (s->tp) sd_tp_allreduce(s->tp, s->proj, nx);
        if (L->ffn_post_norm)
            op->rmsnorm(be, s->proj, L->ffn_post_norm, n, n_embd, hp->rms_eps, s->proj);
        op->add(be, s->x, s->proj, nx);
    }
}

/* The classifier over the wanted rows (s->out_rows[0 .. w)) into host logits. Each row
 * is normed on its own (row-independent), gathered into s->xn, then one matmul. */
static int run_output(sd_session *s, int32_t n, int32_t w, float *logits, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    sd_backend *be = s->be;
    const size_t n_embd = (size_t)hp->n_embd;
    if (w == 0) return SD_OK;
    const int32_t first = s->out_rows[0];
    if (s->out_rows[w - 1] == n - 1 && first == n - w) {
        /* The common case: the last w rows (decode, verification, perplexity windows). */
        be->ops->rmsnorm(be, s->x + (size_t)first * n_embd, s->output_norm, w, hp->n_embd,
                         hp->rms_eps, s->xn);
    } else {
        for (int32_t j = 0; j < w; j++)
            be->ops->rmsnorm(be, s->x + (size_t)s->out_rows[j] * n_embd, s->output_norm, 1,
                             hp->n_embd, hp->rms_eps, s->xn + (size_t)j * n_embd);
    }
    if (s->tp) /* this rank's vocabulary columns */
        return sd_tp_output(s->tp, &s->output, s->xn, w, hp->n_vocab, logits, err);
    /* The full head, or the trimmed one (sd_session_set_output_rows). */
    const sd_weight *head = s->n_head ? &s->head : &s->output;
    const size_t n_out = s->n_head ? (size_t)s->n_head : (size_t)hp->n_vocab;
    if (be->caps.host_memory) {
        be->ops->matmul(be, head, s->xn, w, logits);
        return be->ops->sync(be, err);
    }
    float *dl = s->b_logits->addr;
    be->ops->matmul(be, head, s->xn, w, dl);
    return be->ops->read(be, logits, dl, (size_t)w * n_out * sizeof(float), err);
}

/* The classifier rows ids[0 .. n) gathered once into an aligned host copy, put on the
 * backend like the weights (the CPU maps it in place). */
int sd_session_set_output_rows(sd_session *s, const int32_t *ids, int32_t n, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "output rows: session is NULL");
    const sd_model *m = s->m;
    const int32_t n_vocab = m->hp.n_vocab;
    if (s->tp || s->group)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a trimmed output head on a tensor-parallel session", m->path);
    /* Whatever happens below, the old trimmed head goes first (on error: the full head). */
    sd_buffer_free(s->b_head);
    free(s->head_host);
    s->b_head = NULL;
    s->head_host = NULL;
    s->n_head = 0;
    if (n < 0 || n > n_vocab || (n > 0 && !ids))
        return sd_errorf(err, SD_ERR_ARG, "%s: output rows: n = %d, expected 0 .. %d", m->path, n,
                         n_vocab);
    uint8_t *seen = n ? calloc((size_t)n_vocab, 1) : NULL;
    if (n && !seen) return sd_errorf(err, SD_ERR_OOM, "%s: output rows: out of memory", m->path);
    for (int32_t j = 0; j < n; j++) {
        if (ids[j] < 0 || ids[j] >= n_vocab || seen[ids[j]]) {
            const int32_t bad = ids[j];
            const int dup = bad >= 0 && bad < n_vocab;
            free(seen);
            return sd_errorf(err, SD_ERR_ARG, "%s: output rows: id %d at index %d %s", m->path, bad,
                             j, dup ? "is repeated" : "is outside the vocabulary");
        }
        seen[ids[j]] = 1;
    }
    free(seen);
    if (n == 0) return SD_OK;
    const sd_weight *full = &m->output; /* host addresses (the mapping) */
    size_t bytes;
    if (sd_mul_size((size_t)n, full->row_bytes, &bytes))
        return sd_errorf(err, SD_ERR_OOM, "%s: output rows: size overflows", m->path);
    const size_t alloc = (bytes + 63) / 64 * 64;
    uint8_t *h = aligned_alloc(64, alloc ? alloc : 64);
    if (!h) return sd_errorf(err, SD_ERR_OOM, "%s: output rows: out of memory", m->path);
    for (int32_t j = 0; j < n; j++)
        memcpy(h + (size_t)j * full->row_bytes,
               (const uint8_t *)full->data + (size_t)ids[j] * full->row_bytes, full->row_bytes);
    int rc = s->be->ops->buffer_from_host(s->be, h, bytes, &s->b_head, err);
    if (rc) {
        free(h);
        return sd_error_prefix(err, rc, "%s: trimmed output head", m->path);
    }
    s->head_host = h;
    s->head = *full;
    s->head.rows = n;
    s->head.data = s->b_head->addr;
    s->head.layout = SD_LAYOUT_ROWS;
    /* In the backend's kernel layout, as every other matmul weight (the CPU packs it). */
    if (s->be->ops->prepare_weight) {
        rc = s->be->ops->prepare_weight(s->be, &s->head, err);
        if (rc) {
            sd_buffer_free(s->b_head);
            free(h);
            s->b_head = NULL;
            s->head_host = NULL;
            return sd_error_prefix(err, rc, "%s: trimmed output head", m->path);
        }
    }
    s->n_head = n;
    return SD_OK;
}

int32_t sd_session_n_logits(const sd_session *s) {
    return s->n_head ? s->n_head : s->m->hp.n_vocab;
}

/* The greedy classifier of the last row (s->out_rows[0], w == 1) on the CPU backend: the
 * argmax of its first n_rows logits, no row written (sd_backend_cpu_matmul_argmax). */
static void run_output_argmax(sd_session *s, int32_t n_rows, int32_t *best) {
    const sd_hparams *hp = &s->m->hp;
    sd_backend *be = s->be;
    be->ops->rmsnorm(be, s->x + (size_t)s->out_rows[0] * (size_t)hp->n_embd, s->output_norm, 1,
                     hp->n_embd, hp->rms_eps, s->xn);
    const sd_weight *head = s->n_head ? &s->head : &s->output;
    *best = (int32_t)sd_backend_cpu_matmul_argmax(be, head, s->xn, n_rows);
}

/* The forward pass; n_rows > 0: greedy mode (one wanted row, its argmax into *best and
 * logits only checked, not written; run_output_argmax). */
static int decode_local_ex(sd_session *s, const sd_batch *b, int32_t n_last, float *logits,
                           int32_t n_rows, int32_t *best, sd_error *err) {
    int32_t w = 0;
    int rc = check_batch(s, b, n_last, logits, &w, err);
    if (rc != SD_OK) return rc;
    const int32_t n = b->n_tokens;
    /* Behind a sliding window: the first query of each run must find its keys (a
     * rollback further than SD_KV_WINDOW_SLACK would need released rows). */
    for (int32_t j = 0; s->kv_window && j < s->n_segs; j++) {
        const sd_seg *g = &s->segs[j];
        const int32_t first = sd_kv_first(s->seqs[g->seq]);
        if (first > 0 && g->pos0 - s->kv_window + 1 < first)
            return sd_errorf(err, SD_ERR_CONTEXT,
                             "sequence %d: a pass at position %d reads keys from %d, but the "
                             "blocks before %d were released behind the sliding window (%d)",
                             g->seq, g->pos0, g->pos0 - s->kv_window + 1, first, s->kv_window);
    }
    /* Blocks for every run's new positions; a failure gives back those mapped here. The
     * rows written below are beyond the committed range until sd_kv_commit, so a failure
     * (a full pool, a device error) leaves the session unchanged. */
    for (int32_t j = 0; j < s->n_segs; j++) {
        rc = sd_kv_reserve(s->seqs[s->segs[j].seq], s->segs[j].n, err);
        if (rc != SD_OK) {
            for (int32_t i = 0; i < j; i++)
                sd_kv_truncate(s->seqs[s->segs[i].seq], s->segs[i].pos0, NULL);
            if (s->n_seq > 1) sd_error_prefix(err, rc, "sequence %d", s->segs[j].seq);
            return rc;
        }
    }
    if (s->tp) /* vocabulary-split embedding (tp.c) */
        sd_tp_embed(s->tp, &s->tok_embd, b->token, n, s->m->hp.n_embd, s->x);
    else
        s->be->ops->get_rows(s->be, &s->tok_embd, b->token, n, s->x);
    if (s->m->hp.embd_scale) /* gemma3: embeddings times sqrt(n_embd) */
        s->be->ops->scale(s->be, s->x, sqrtf((float)s->m->hp.n_embd), (int64_t)n * s->m->hp.n_embd);
    run_layers(s, n);
    if (n_rows > 0 && w == 1) {
        run_output_argmax(s, n_rows, best);
        rc = SD_OK;
    } else {
        rc = w > 0 ? run_output(s, n, w, logits, err) : s->be->ops->sync(s->be, err);
    }
    if (rc != SD_OK) {
        for (int32_t j = 0; j < s->n_segs; j++)
            sd_kv_truncate(s->seqs[s->segs[j].seq], s->segs[j].pos0, NULL);
        return sd_error_prefix(err, rc, "%s: forward pass", s->m->path);
    }
    for (int32_t j = 0; j < s->n_segs; j++) {
        const sd_seg *g = &s->segs[j];
        memcpy(s->seq_tok[g->seq] + g->pos0, b->token + g->start, (size_t)g->n * sizeof(int32_t));
        sd_kv_commit(s->seqs[g->seq], g->n);
        if (s->kv_window) /* keys no later pass reads (rollbacks included) */
            sd_kv_release_before(s->seqs[g->seq],
                                 g->pos0 + g->n - s->kv_window + 1 - SD_KV_WINDOW_SLACK);
    }
    s->n_out_last = w;
    return SD_OK;
}

static int decode_local(sd_session *s, const sd_batch *b, int32_t n_last, float *logits,
                        sd_error *err) {
    return decode_local_ex(s, b, n_last, logits, 0, NULL, err);
}

/* <arch>.final_logit_softcapping c: every logit z of the rows returned becomes
 * c tanh(z / c) (host logits, after the classifier). */
static void softcap(const sd_session *s, float *logits) {
    const float c = s->m->hp.logit_softcap;
    const int64_t n = (int64_t)s->n_out_last * sd_session_n_logits(s);
    for (int64_t i = 0; i < n; i++)
        logits[i] = c * tanhf(logits[i] / c);
}

/* The pass on this session, or on every rank of its group; parent: a token tree's
 * (sd_session_seq_decode_tree), NULL otherwise. */
static int decode_ex(sd_session *s, const sd_batch *b, int32_t n_last, const int32_t *parent,
                     float *logits, sd_error *err) {
    s->n_out_last = 0;
    const int rc = s->group ? s->group_ops->decode(s->group, b, n_last, parent, logits, err)
                            : sd_session_decode_rank(s, b, n_last, parent, logits, err);
    if (rc == SD_OK && s->m->hp.logit_softcap > 0.0f && logits) softcap(s, logits);
    return rc;
}

static int decode(sd_session *s, const sd_batch *b, int32_t n_last, float *logits, sd_error *err) {
    return decode_ex(s, b, n_last, NULL, logits, err);
}

int sd_session_decode_rank(sd_session *s, const sd_batch *b, int32_t n_last, const int32_t *parent,
                           float *logits, sd_error *err) {
    if (!parent) return decode_local(s, b, n_last, logits, err);
    /* Token trees among the batch's runs (check_batch finds them, run_layers places each
     * node at its parent's position + 1, the roots at the sequence's next one). */
    s->tree_parent = parent;
    const int rc = decode_local(s, b, n_last, logits, err);
    s->tree_parent = NULL;
    return rc;
}

void sd_session_undo_rank(sd_session *s) {
    for (int32_t j = s->n_segs - 1; j >= 0; j--) /* a sequence's later run first */
        sd_kv_truncate(s->seqs[s->segs[j].seq], s->segs[j].pos0, NULL);
}

int sd_session_decode(sd_session *s, const sd_batch *b, float *logits, sd_error *err) {
    if (!s || !b) return sd_errorf(err, SD_ERR_ARG, "eval: session or batch is NULL");
    return decode(s, b, -1, logits, err);
}

/* The batch of tokens[0 .. n) of sequence seq (b: sd_batch_of(tokens, n)); n out of range is
 * left to check_batch's message. */
static int seq_batch(sd_session *s, int32_t seq, sd_batch *b, sd_error *err);

int sd_session_seq_eval(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n, float *logits,
                        int32_t n_out, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "eval: session is NULL");
    if (n_out < 0 || n_out > n)
        return sd_errorf(err, SD_ERR_ARG, "eval: n_out %d, expected 0..%d", n_out, n);
    sd_batch b = sd_batch_of(tokens, n);
    const int rc = seq_batch(s, seq, &b, err);
    return rc ? rc : decode(s, &b, n_out, logits, err);
}

int sd_session_eval(sd_session *s, const int32_t *tokens, int32_t n, float *logits, int32_t n_out,
                    sd_error *err) {
    return sd_session_seq_eval(s, 0, tokens, n, logits, n_out, err);
}

int sd_session_seq_eval_argmax(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n,
                               int32_t n_rows, float *row, int32_t *best, sd_error *err) {
    if (!s || !best || !row)
        return sd_errorf(err, SD_ERR_ARG, "eval: session, row or best is NULL");
    *best = -1;
    if (n_rows < 1 || n_rows > sd_session_n_logits(s))
        return sd_errorf(err, SD_ERR_ARG, "eval: argmax over %d rows, expected 1..%d", n_rows,
                         sd_session_n_logits(s));
    if (s->group || s->tp || s->be->device != SD_DEVICE_CPU) { /* the row, then its argmax */
        int rc = sd_session_seq_eval(s, seq, tokens, n, row, 1, err);
        if (rc == SD_OK) *best = sd_argmax_checked(row, n_rows);
        return rc;
    }
    sd_batch b = sd_batch_of(tokens, n);
    const int rc = seq_batch(s, seq, &b, err);
    return rc ? rc : decode_local_ex(s, &b, 1, row, n_rows, best, err);
}

/* ---- token trees ---- */

static int bad_seq(const sd_session *s, int32_t seq, sd_error *err);

/* The checks of a pass with token trees: the backend's tree attention, no sliding window. */
static int tree_ok(const sd_session *s, sd_error *err) {
    if (!s->be->ops->attention_tree || !s->be->ops->kv_copy)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: the %s backend has no tree attention: token trees run on the cpu "
                         "backend (use a chain: no --draft-tree)",
                         s->m->path, sd_device_name(s->be->device));
    const int32_t win = s->m->hp.sliding_window; /* a window no layer uses (phi3) is none */
    if (win > 0 && s->m->hp.n_swa_layers > 0 && s->n_ctx > win)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: token trees with a sliding window (%d) are not supported", s->m->path,
                         win);
    return SD_OK;
}

int sd_session_seq_decode_tree(sd_session *s, int32_t seq, const int32_t *tokens,
                               const int32_t *parent, int32_t n, float *logits, sd_error *err) {
    if (!s || !tokens || !parent || !logits)
        return sd_errorf(err, SD_ERR_ARG, "tree pass: NULL argument");
    if (seq < 0 || seq >= s->n_seq) return bad_seq(s, seq, err);
    if (n < 1 || n > SD_MAX_TREE || n > s->n_outputs)
        return sd_errorf(err, SD_ERR_ARG, "tree pass: %d nodes, expected 1 .. %d", n,
                         SD_MAX_TREE < s->n_outputs ? SD_MAX_TREE : s->n_outputs);
    const int rc = tree_ok(s, err);
    if (rc) return rc;
    int32_t seq_id[SD_MAX_TREE];
    for (int32_t i = 0; i < n; i++) {
        seq_id[i] = seq;
        if (parent[i] < -1 || parent[i] >= i)
            return sd_errorf(err, SD_ERR_ARG,
                             "tree pass: node %d has parent %d, expected -1 .. %d (parents "
                             "before their children)",
                             i, parent[i], i - 1);
    }
    sd_batch b = sd_batch_of(tokens, n);
    b.seq_id = seq_id;
    /* on every rank of a group; with the soft cap where the model has one */
    return decode_ex(s, &b, n, parent, logits, err);
}

int sd_session_decode_trees(sd_session *s, const sd_batch *b, const int32_t *parent, float *logits,
                            sd_error *err) {
    if (!s || !b) return sd_errorf(err, SD_ERR_ARG, "eval: session or batch is NULL");
    if (parent) {
        const int rc = tree_ok(s, err);
        if (rc) return rc;
    }
    return decode_ex(s, b, -1, parent, logits, err);
}

typedef struct seq_call { /* the arguments of a call made on every rank (on_ranks) */
    int32_t seq, n, pos0;
    const int32_t *ids;
} seq_call;

static int on_ranks(sd_session *s, sd_session_rank_fn fn, void *arg, int32_t *value, sd_error *err);
static int32_t seq_print(const sd_session *s, int32_t seq);

static int tree_keep_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    const seq_call *c = arg;
    const int32_t seq = c->seq, pos0 = c->pos0, n_keep = c->n, *nodes = c->ids;
    sd_kv *kv = s->seqs[seq];
    int32_t *toks = s->seq_tok[seq];
    const int32_t n_past = sd_kv_n(kv);
    if (pos0 < 0 || pos0 > n_past || n_keep < 0 || n_keep > n_past - pos0)
        return sd_errorf(err, SD_ERR_ARG, "tree keep: %d nodes at %d of a cache of %d", n_keep,
                         pos0, n_past);
    for (int32_t j = 0; j < n_keep; j++)
        if (nodes[j] < j || nodes[j] >= n_past - pos0 || (j > 0 && nodes[j] <= nodes[j - 1]))
            return sd_errorf(err, SD_ERR_ARG,
                             "tree keep: node %d at index %d (ascending, in 0 .. %d expected)",
                             nodes[j], j, n_past - pos0 - 1);
    if (n_keep > 0 && !s->be->ops->kv_copy)
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "tree keep: the %s backend cannot move KV rows",
                         sd_device_name(s->be->device));
    /* nodes ascend and nodes[j] >= j: row j's source is never an earlier row's target */
    for (int32_t j = 0; j < n_keep; j++) {
        if (nodes[j] == j) continue;
        for (int32_t l = 0; l < s->m->hp.n_layer; l++)
            s->be->ops->kv_copy(s->be, kv, l, pos0 + j, pos0 + nodes[j], 1);
        toks[pos0 + j] = toks[pos0 + nodes[j]];
    }
    int rc = s->be->ops->sync(s->be, err);
    if (!rc) rc = sd_kv_truncate(kv, pos0 + n_keep, err);
    *value = seq_print(s, seq);
    return rc;
}

int sd_session_seq_tree_keep(sd_session *s, int32_t seq, int32_t pos0, const int32_t *nodes,
                             int32_t n_keep, sd_error *err) {
    if (!s || (n_keep > 0 && !nodes)) return sd_errorf(err, SD_ERR_ARG, "tree keep: NULL argument");
    if (seq < 0 || seq >= s->n_seq) return bad_seq(s, seq, err);
    seq_call c = {seq, n_keep, pos0, nodes};
    int32_t v;
    return on_ranks(s, tree_keep_fn, &c, &v, err);
}

int32_t sd_session_n_ctx(const sd_session *s) {
    return s->n_ctx;
}
int32_t sd_session_n_batch(const sd_session *s) {
    return s->n_batch;
}
int32_t sd_session_n_outputs(const sd_session *s) {
    return s->n_outputs;
}
sd_device sd_session_device(const sd_session *s) {
    return s->be->device;
}

struct sd_backend *sd_session_backend(const sd_session *s) {
    return s->be;
}

sd_weights_info sd_session_weights_info(const sd_session *s) {
    sd_weights_info w;
    memset(&w, 0, sizeof w);
    w.kernels = sd_device_name(s->be->device);
    if (s->be->device == SD_DEVICE_CPU) {
        sd_backend_cpu_packed_stats(s->be, &w.n_packed, &w.packed_bytes, &w.packed_ms);
        w.kernels = sd_quant_kernels_name();
    }
    return w;
}
/* Layer l's K row at src rotated back by n_discard positions (RoPE angles add: rotating by
 * p then by -d is rotating by p - d), stored as type t at dst (exact in f32); row: float
 * scratch [kv_dim]. The contiguous and the paged shift's one arithmetic. */
static void shift_key_row(sd_session *s, int32_t l, sd_type t, const void *src, void *dst,
                          float *row, int32_t n_discard) {
    const sd_hparams *hp = &s->m->hp;
    const int32_t kv_dim = hp->n_head_kv * hp->head_dim;
    const sd_rope *rope = s->layers[l].swa && hp->sliding_window > 0 ? &s->rope_swa : &s->rope;
    sd_dequantize_row(t, src, row, kv_dim);
    s->be->ops->rope(s->be, row, 1, -n_discard, hp->n_head_kv, hp->head_dim, rope);
    if (t == SD_TYPE_F32)
        memcpy(dst, row, (size_t)kv_dim * sizeof *row);
    else
        sd_quantize_row(t, row, dst, kv_dim);
}

/* The checks of a context shift of cache kv (a contiguous cache or a paged sequence, on one
 * rank): the one argument check of both shifts. */
static int shift_check(const sd_session *s, int32_t seq, const sd_kv *kv, int32_t n_keep,
                       int32_t n_discard, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    const int32_t n = sd_kv_n(kv);
    if (n_keep < 0 || n_discard < 1 || (int64_t)n_keep + n_discard > n)
        return sd_errorf(err, SD_ERR_ARG,
                         "context shift of sequence %d: keep %d, discard %d of %d cached "
                         "positions",
                         seq, n_keep, n_discard, n);
    if (s->be->device != SD_DEVICE_CPU)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a context shift of sequence %d: the keys are re-rotated on the cpu "
                         "backend only",
                         s->m->path, seq);
    if (sd_kv_first(kv) > 0) /* rows behind a sliding window were given back */
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a context shift of sequence %d, whose first %d positions were "
                         "released",
                         s->m->path, seq, sd_kv_first(kv));
    if (hp->rope_attn_factor != 1.0f)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a context shift of sequence %d with rope.scaling.attn_factor %g "
                         "(the keys carry the factor once)",
                         s->m->path, seq, (double)hp->rope_attn_factor);
    return SD_OK;
}

/* The shift of a contiguous cache (one sequence, one rank): its rows moved in place. */
static int shift_contiguous(sd_session *s, int32_t n_keep, int32_t n_discard, sd_error *err) {
    const sd_hparams *hp = &s->m->hp;
    if (s->group || s->tp)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: a context shift of a tensor-parallel session needs a paged cache "
                         "(n_seq > 0)",
                         s->m->path);
    int rc = shift_check(s, 0, s->kv, n_keep, n_discard, err);
    if (rc) return rc;
    const int32_t n = sd_kv_n(s->kv);
    const int32_t kv_dim = hp->n_head_kv * hp->head_dim, n_move = n - n_keep - n_discard;
    const sd_type t = sd_kv_type(s->kv);
    const size_t rb = sd_kv_row_bytes(s->kv);
    float *row = malloc((size_t)kv_dim * sizeof *row);
    if (!row) return sd_errorf(err, SD_ERR_OOM, "context shift: out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++) {
        for (int32_t j = 0; j < n_move; j++) {
            const int32_t src = n_keep + n_discard + j, dst = n_keep + j;
            shift_key_row(s, l, t, sd_kv_k(s->kv, l, src), sd_kv_k(s->kv, l, dst), row, n_discard);
            memmove(sd_kv_v(s->kv, l, dst), sd_kv_v(s->kv, l, src), rb); /* V: no position */
        }
    }
    free(row);
    memmove(s->tokens + n_keep, s->tokens + n_keep + n_discard, (size_t)n_move * sizeof(int32_t));
    return sd_kv_truncate(s->kv, n - n_discard, err);
}

const sd_model *sd_session_model(const sd_session *s) {
    return s->group ? s->group_ops->model(s->group) : s->m;
}

/* ---- several sequences ---- */

static int bad_seq(const sd_session *s, int32_t seq, sd_error *err) {
    return sd_errorf(err, SD_ERR_ARG, "session: sequence %d, expected 0 .. %d", seq, s->n_seq - 1);
}

static int seq_batch(sd_session *s, int32_t seq, sd_batch *b, sd_error *err) {
    if (seq < 0 || seq >= s->n_seq) return bad_seq(s, seq, err);
    if (seq == 0 || b->n_tokens < 1 || b->n_tokens > s->n_batch) return SD_OK;
    for (int32_t i = 0; i < b->n_tokens; i++)
        s->seq_ids[i] = seq;
    b->seq_id = s->seq_ids;
    return SD_OK;
}

int32_t sd_session_n_seq(const sd_session *s) {
    return s->n_seq;
}

int32_t sd_session_seq_n_past(const sd_session *s, int32_t seq) {
    return seq >= 0 && seq < s->n_seq ? sd_kv_n(s->seqs[seq]) : 0;
}

const int32_t *sd_session_seq_tokens(const sd_session *s, int32_t seq) {
    return seq >= 0 && seq < s->n_seq ? s->seq_tok[seq] : NULL;
}

/* ---- calls that change the KV state: on the session alone, or on every rank of its
 * group (the same call in the same order on each, so the ranks' pools stay in step; what
 * each rank answers is compared by the group) ---- */

static int on_ranks(sd_session *s, sd_session_rank_fn fn, void *arg, int32_t *value,
                    sd_error *err) {
    *value = 0;
    return s->group ? s->group_ops->each(s->group, fn, arg, value, err) : fn(s, arg, value, err);
}

/* A fingerprint of sequence seq's cache and of its pool: what two ranks in step agree on. */
static int32_t seq_print(const sd_session *s, int32_t seq) {
    const sd_kv *kv = s->seqs[seq];
    const int32_t avail = s->pool ? sd_kv_pool_n_available(s->pool) : 0;
    return (int32_t)((((uint32_t)sd_kv_n(kv) * 31u + (uint32_t)sd_kv_first(kv)) * 31u +
                      (uint32_t)sd_kv_n_blocks(kv)) *
                         31u +
                     (uint32_t)avail);
}

static int truncate_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    const seq_call *c = arg;
    const int rc = sd_kv_truncate(s->seqs[c->seq], c->n, err);
    *value = seq_print(s, c->seq);
    return rc;
}

int sd_session_seq_truncate(sd_session *s, int32_t seq, int32_t n_keep, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "truncate: session is NULL");
    if (seq < 0 || seq >= s->n_seq) return bad_seq(s, seq, err);
    seq_call c = {seq, n_keep, 0, NULL};
    int32_t v;
    return on_ranks(s, truncate_fn, &c, &v, err);
}

int32_t sd_session_seq_keep_floor(const sd_session *s, int32_t seq, int32_t keep) {
    if (seq < 0 || seq >= s->n_seq || !s->kv_window) return keep;
    const int32_t first = sd_kv_first(s->seqs[seq]);
    return first > 0 && keep - s->kv_window + 1 < first ? 0 : keep;
}

int32_t sd_session_seq_keep_prefix(sd_session *s, int32_t seq, const int32_t *ctx, int32_t n) {
    if (seq < 0 || seq >= s->n_seq) return 0;
    const int32_t *cached = s->seq_tok[seq];
    const int32_t n_cached = sd_kv_n(s->seqs[seq]);
    int32_t keep = 0;
    while (keep < n_cached && keep < n && cached[keep] == ctx[keep])
        keep++;
    keep = sd_session_seq_keep_floor(s, seq, keep);
    if (keep < n_cached) sd_session_seq_truncate(s, seq, keep, NULL); /* cannot fail */
    return keep;
}

/* A paged sequence's shift on one session (each rank of a group shifts its own KV heads). */
static int seq_shift_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    const seq_call *c = arg; /* n: n_keep, pos0: n_discard */
    const int32_t seq = c->seq, n_keep = c->n, n_discard = c->pos0;
    *value = seq_print(s, seq);
    const sd_hparams *hp = &s->m->hp;
    sd_kv *kv = s->seqs[seq];
    const int32_t n = sd_kv_n(kv);
    const int crc = shift_check(s, seq, kv, n_keep, n_discard, err);
    if (crc) return crc;
    const int32_t kv_dim = hp->n_head_kv * hp->head_dim, n_move = n - n_keep - n_discard;
    const sd_type t = sd_kv_type(kv);
    const size_t rb = sd_kv_row_bytes(kv), per_layer = 2 * (size_t)n_move * rb;
    if (n_move > 0 && per_layer > SIZE_MAX / (size_t)hp->n_layer)
        return sd_errorf(err, SD_ERR_OOM, "context shift: %d positions too large", n_move);
    /* The moved rows, K re-rotated as the contiguous shift does (the same arithmetic, so the
     * same bits), into host memory first: their blocks may be shared (the prefix cache, a
     * fork), so the sequence is cut back to n_keep and its new positions reserved in
     * blocks of its own (copy-on-write of the block holding n_keep). */
    uint8_t *keep_rows = n_move > 0 ? malloc(per_layer * (size_t)hp->n_layer) : NULL;
    float *row = malloc((size_t)kv_dim * sizeof *row);
    if ((n_move > 0 && !keep_rows) || !row) {
        free(keep_rows);
        free(row);
        return sd_errorf(err, SD_ERR_OOM, "context shift: out of memory");
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        uint8_t *kl = keep_rows + (size_t)l * per_layer, *vl = kl + (size_t)n_move * rb;
        for (int32_t j = 0; j < n_move; j++) {
            const int32_t src = n_keep + n_discard + j;
            shift_key_row(s, l, t, sd_kv_k(kv, l, src), kl + (size_t)j * rb, row, n_discard);
            memcpy(vl + (size_t)j * rb, sd_kv_v(kv, l, src), rb); /* V: no position */
        }
    }
    free(row);
    int rc = sd_kv_truncate(kv, n_keep, err);
    if (!rc && n_move > 0) rc = sd_kv_reserve(kv, n_move, err);
    if (!rc) {
        for (int32_t l = 0; l < hp->n_layer; l++) {
            const uint8_t *kl = keep_rows + (size_t)l * per_layer, *vl = kl + (size_t)n_move * rb;
            for (int32_t j = 0; j < n_move; j++) {
                memcpy(sd_kv_k(kv, l, n_keep + j), kl + (size_t)j * rb, rb);
                memcpy(sd_kv_v(kv, l, n_keep + j), vl + (size_t)j * rb, rb);
            }
        }
        sd_kv_commit(kv, n_move);
        int32_t *toks = s->seq_tok[seq];
        memmove(toks + n_keep, toks + n_keep + n_discard, (size_t)n_move * sizeof *toks);
    }
    free(keep_rows);
    *value = seq_print(s, seq);
    return rc ? sd_error_prefix(err, rc, "context shift") : SD_OK;
}

int sd_session_seq_shift(sd_session *s, int32_t seq, int32_t n_keep, int32_t n_discard,
                         sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "context shift: session is NULL");
    if (seq < 0 || seq >= s->n_seq) return bad_seq(s, seq, err);
    if (!s->pool) return shift_contiguous(s, n_keep, n_discard, err);
    seq_call c = {seq, n_keep, n_discard, NULL};
    int32_t v;
    return on_ranks(s, seq_shift_fn, &c, &v, err); /* on every rank of a group */
}

static int fork_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    const seq_call *c = arg; /* seq: dst, pos0: src */
    int rc = sd_kv_fork(s->seqs[c->seq], s->seqs[c->pos0], c->n, err);
    if (!rc) memcpy(s->seq_tok[c->seq], s->seq_tok[c->pos0], (size_t)c->n * sizeof(int32_t));
    *value = seq_print(s, c->seq);
    return rc;
}

int sd_session_seq_fork(sd_session *s, int32_t dst, int32_t src, int32_t n, sd_error *err) {
    if (dst < 0 || dst >= s->n_seq) return bad_seq(s, dst, err);
    if (src < 0 || src >= s->n_seq) return bad_seq(s, src, err);
    if (dst == src)
        return sd_errorf(err, SD_ERR_ARG, "session: fork of sequence %d onto itself", src);
    seq_call c = {dst, n, src, NULL};
    int32_t v;
    return on_ranks(s, fork_fn, &c, &v, err);
}

static int attach_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    (void)err;
    const seq_call *c = arg;
    const int32_t got = sd_kv_cache_attach(s->seqs[c->seq], c->ids, c->n);
    memcpy(s->seq_tok[c->seq], c->ids, (size_t)got * sizeof(int32_t));
    *value = got;
    return SD_OK;
}

int32_t sd_session_seq_attach_prefix(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n) {
    if (seq < 0 || seq >= s->n_seq || !s->pool) return 0;
    seq_call c = {seq, n, 0, tokens};
    int32_t got = 0;
    return on_ranks(s, attach_fn, &c, &got, NULL) == SD_OK ? got : 0;
}

static int store_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    (void)err;
    const seq_call *c = arg;
    sd_kv_cache_store(s->seqs[c->seq], s->seq_tok[c->seq], sd_kv_n(s->seqs[c->seq]));
    *value = seq_print(s, c->seq);
    return SD_OK;
}

void sd_session_seq_store_prefix(sd_session *s, int32_t seq) {
    if (seq < 0 || seq >= s->n_seq || !s->pool) return;
    seq_call c = {seq, 0, 0, NULL};
    int32_t v;
    on_ranks(s, store_fn, &c, &v, NULL);
}

static int clear_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    (void)arg;
    (void)err;
    sd_kv_pool_cache_clear(s->pool);
    *value = sd_kv_pool_n_available(s->pool);
    return SD_OK;
}

void sd_session_kv_clear_cache(sd_session *s) {
    int32_t v;
    if (s->pool) on_ranks(s, clear_fn, NULL, &v, NULL);
}

void sd_session_kv_stats(const sd_session *s, sd_kv_pool_stats *out) {
    sd_kv_pool_get_stats(sd_kv_pool_of(s->kv), out);
}

int32_t sd_session_kv_available(const sd_session *s) {
    return sd_kv_pool_n_available(sd_kv_pool_of(s->kv));
}

int32_t sd_session_kv_blocks_for(const sd_session *s, int64_t n) {
    return sd_kv_pool_blocks_for(sd_kv_pool_of(s->kv), n);
}

/* The pool's accounting; *value: a fingerprint of every sequence and of the pool, which the
 * group compares across its ranks (their pools must be in step). */
static int kv_check_fn(sd_session *s, void *arg, int32_t *value, sd_error *err) {
    (void)arg;
    uint32_t h = 0;
    for (int32_t i = 0; i < s->n_seq; i++)
        h = h * 1000003u + (uint32_t)seq_print(s, i);
    *value = (int32_t)h;
    if (!s->pool) return SD_OK;
    int64_t refs = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        refs += sd_kv_n_blocks(s->seqs[i]);
        /* blocks released behind a sliding window are not mapped */
        const int rc = sd_kv_seq_check(s->seqs[i], err);
        if (rc) return sd_error_prefix(err, rc, "kv pool: sequence %d", i);
    }
    return sd_kv_pool_check(s->pool, refs, err);
}

int sd_session_kv_check(const sd_session *s, sd_error *err) {
    int32_t v;
    return on_ranks((sd_session *)s, kv_check_fn, NULL, &v, err);
}

size_t sd_session_kv_bytes_per_token(const sd_session *s) {
    /* a group's ranks hold n_head_kv / N heads each: the row of every head */
    const size_t row = sd_kv_row_bytes(s->kv) / (size_t)s->m->hp.n_head_kv *
                       (size_t)sd_session_model(s)->hp.n_head_kv;
    return 2 * (size_t)s->m->hp.n_layer * row;
}
