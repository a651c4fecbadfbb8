/*
 * Llama model loading (validation of a distrusted GGUF) and the forward pass
 * (sd_session_eval). All compute goes through the backend ops table (backend.h).
 */
#include "runtime/model/sd_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/sd_kv.h"
#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "runtime/gguf/sd_gguf.h"

/* Bounds on hyperparameters (well above any llama we run; they keep sizes sane). */
#define SD_MAX_EMBD          (1 << 16)
#define SD_MAX_LAYER         1024
#define SD_MAX_HEAD          1024
#define SD_MAX_FF            (1 << 18)
#define SD_MAX_VOCAB         (1 << 21)
#define SD_MAX_CTX           (1 << 24)
#define SD_MAX_BATCH         (1 << 16)
#define SD_DEFAULT_N_BATCH   512
#define SD_DEFAULT_RMS_EPS   1e-5f
#define SD_DEFAULT_ROPE_BASE 10000.0f

typedef struct sd_layer {
    const float *attn_norm; /* [n_embd] */
    const float *ffn_norm;  /* [n_embd] */
    sd_weight wq;           /* [n_embd, n_embd] */
    sd_weight wk;           /* [kv_dim, n_embd] */
    sd_weight wv;           /* [kv_dim, n_embd] */
    sd_weight wo;           /* [n_embd, n_embd] */
    sd_weight w_gate;       /* [n_ff, n_embd] */
    sd_weight w_down;       /* [n_embd, n_ff] */
    sd_weight w_up;         /* [n_ff, n_embd] */
} sd_layer;

struct sd_model {
    char *path;
    sd_gguf *g;
    sd_vocab *vocab;
    sd_hparams hp;
    sd_weight tok_embd; /* [n_vocab, n_embd] */
    sd_weight output;   /* [n_vocab, n_embd]; == tok_embd when tied */
    int tied;
    const float *output_norm; /* [n_embd] */
    float *norms;             /* owned copies: (2 * n_layer + 1) rows of n_embd */
    sd_layer *layers;         /* [n_layer] */
    size_t weight_bytes;
};

struct sd_session {
    const sd_model *m;
    sd_kv *kv;
    sd_backend *be;
    int32_t n_ctx;
    int32_t n_batch;
    int32_t *tokens; /* [n_ctx]: ids whose K/V the cache holds, [0, n_past) valid */
    float *buf;      /* one block holding every scratch array below */
    float *x;        /* [n_batch, n_embd] residual stream */
    float *xn;       /* [n_batch, n_embd] normed input */
    float *q;        /* [n_batch, n_embd] */
    float *k;        /* [n_batch, kv_dim] */
    float *v;        /* [n_batch, kv_dim] */
    float *att;      /* [n_batch, n_embd] attention output */
    float *proj;     /* [n_batch, n_embd] output projections */
    float *gate;     /* [n_batch, n_ff] */
    float *up;       /* [n_batch, n_ff] */
};

/* ---------------------------------------------------------------- loading */

static int hp_int(const sd_gguf *g, const char *path, const char *key, int required, int64_t def,
                  int64_t lo, int64_t hi, int32_t *out, sd_error *err) {
    int64_t v = def;
    int rc = required ? sd_gguf_get_i64(g, key, &v, err) : sd_gguf_get_i64_opt(g, key, &v, err);
    if (rc != SD_OK) return rc;
    if (v < lo || v > hi)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: metadata key '%s' = %lld is out of range [%lld, %lld]", path, key,
                         (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return SD_OK;
}

static int hp_float(const sd_gguf *g, const char *path, const char *key, float def, float lo,
                    float hi, float *out, sd_error *err) {
    float v = def;
    int rc = sd_gguf_get_f32_opt(g, key, &v, err);
    if (rc != SD_OK) return rc;
    if (!isfinite(v) || !(v > lo) || !(v <= hi))
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' = %g is out of range (%g, %g]",
                         path, key, (double)v, (double)lo, (double)hi);
    *out = v;
    return SD_OK;
}

static int load_hparams(const sd_gguf *g, const char *path, sd_hparams *hp, sd_error *err) {
    const char *arch = NULL;
    size_t arch_len = 0;
    int rc = sd_gguf_get_str(g, "general.architecture", &arch, &arch_len, err);
    if (rc != SD_OK) return rc;
    if (arch_len != 5 || memcmp(arch, "llama", 5) != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: metadata key 'general.architecture' is '%.*s', expected 'llama'",
                         path, (int)(arch_len > 64 ? 64 : arch_len), arch);
    memset(hp, 0, sizeof *hp);
    if ((rc =
             hp_int(g, path, "llama.context_length", 1, 0, 1, SD_MAX_CTX, &hp->n_ctx_train, err)) ||
        (rc = hp_int(g, path, "llama.embedding_length", 1, 0, 1, SD_MAX_EMBD, &hp->n_embd, err)) ||
        (rc = hp_int(g, path, "llama.block_count", 1, 0, 1, SD_MAX_LAYER, &hp->n_layer, err)) ||
        (rc = hp_int(g, path, "llama.feed_forward_length", 1, 0, 1, SD_MAX_FF, &hp->n_ff, err)) ||
        (rc =
             hp_int(g, path, "llama.attention.head_count", 1, 0, 1, SD_MAX_HEAD, &hp->n_head, err)))
        return rc;
    if ((rc = hp_int(g, path, "llama.attention.head_count_kv", 0, hp->n_head, 1, SD_MAX_HEAD,
                     &hp->n_head_kv, err)))
        return rc;
    if (hp->n_embd % hp->n_head != 0)
        return sd_errorf(
            err, SD_ERR_FORMAT,
            "%s: llama.embedding_length %d is not a multiple of llama.attention.head_count %d",
            path, hp->n_embd, hp->n_head);
    if (hp->n_head % hp->n_head_kv != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: llama.attention.head_count %d is not a multiple of "
                         "llama.attention.head_count_kv %d",
                         path, hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = hp_int(g, path, "llama.rope.dimension_count", 0, hp->head_dim, 2, hp->head_dim,
                     &hp->n_rot, err)))
        return rc;
    if (hp->n_rot % 2 != 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: llama.rope.dimension_count %d is odd", path,
                         hp->n_rot);
    if ((rc = hp_float(g, path, "llama.attention.layer_norm_rms_epsilon", SD_DEFAULT_RMS_EPS, 0.0f,
                       1.0f, &hp->rms_eps, err)) ||
        (rc = hp_float(g, path, "llama.rope.freq_base", SD_DEFAULT_ROPE_BASE, 0.0f, 1e12f,
                       &hp->rope_base, err)))
        return rc;
    return SD_OK;
}

static int find_tensor(const sd_model *m, const char *name, const sd_gguf_tensor **out,
                       sd_error *err) {
    *out = sd_gguf_find_tensor(m->g, name);
    if (!*out) return sd_errorf(err, SD_ERR_FORMAT, "%s: missing tensor '%s'", m->path, name);
    return SD_OK;
}

/* Check a weight matrix [rows, cols] (GGUF ne {cols, rows}); rows < 0: any row count. */
static int get_matrix(sd_model *m, const char *name, int64_t rows, int64_t cols, sd_weight *w,
                      sd_error *err) {
    const sd_gguf_tensor *t;
    int rc = find_tensor(m, name, &t, err);
    if (rc != SD_OK) return rc;
    if (t->n_dims != 2 || t->ne[0] != cols || (rows >= 0 && t->ne[1] != rows)) {
        if (rows >= 0)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: tensor '%s': shape ne {%lld, %lld, %lld, %lld} (%u dims), "
                             "expected [rows, cols] = [%lld, %lld] (ne {%lld, %lld})",
                             m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                             (long long)t->ne[2], (long long)t->ne[3], t->n_dims, (long long)rows,
                             (long long)cols, (long long)cols, (long long)rows);
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: tensor '%s': shape ne {%lld, %lld, %lld, %lld} (%u dims), expected "
                         "2 dims with row length ne[0] = %lld",
                         m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                         (long long)t->ne[2], (long long)t->ne[3], t->n_dims, (long long)cols);
    }
    if (!sd_type_supported(t->type))
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "%s: tensor '%s': unsupported type %u", m->path,
                         name, t->type);
    if (t->ne[1] < 1)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': no rows", m->path, name);
    const sd_type type = (sd_type)t->type;
    size_t row_bytes, total;
    if (sd_type_row_bytes(type, cols, &row_bytes) != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: tensor '%s': row length %lld is not a multiple of the %s block size "
                         "%lld",
                         m->path, name, (long long)cols, sd_type_name(t->type),
                         (long long)sd_type_block_elems(type));
    if (sd_mul_size(row_bytes, (size_t)t->ne[1], &total) || total != t->nbytes)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: tensor '%s': %zu data bytes, expected %lld rows x %zu", m->path, name,
                         t->nbytes, (long long)t->ne[1], row_bytes);
    const size_t align = sd_type_align(type);
    if ((uintptr_t)t->data % align != 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': data is not %zu-byte aligned",
                         m->path, name, align);
    w->type = type;
    w->rows = t->ne[1];
    w->cols = cols;
    w->row_bytes = row_bytes;
    w->data = t->data;
    m->weight_bytes += t->nbytes;
    return SD_OK;
}

/* A norm vector [n] of type F32, copied (unaligned-safe) to dst. */
static int get_norm(sd_model *m, const char *name, int64_t n, float *dst, sd_error *err) {
    const sd_gguf_tensor *t;
    int rc = find_tensor(m, name, &t, err);
    if (rc != SD_OK) return rc;
    if (t->n_dims != 1 || t->ne[0] != n)
        return sd_errorf(
            err, SD_ERR_FORMAT,
            "%s: tensor '%s': shape ne {%lld, %lld} (%u dims), expected [%lld] (1 dim)", m->path,
            name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)n);
    if (t->type != SD_TYPE_F32)
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "%s: tensor '%s': type %s, norms must be f32",
                         m->path, name, sd_type_name(t->type));
    if (t->nbytes != (size_t)n * sizeof(float))
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': %zu data bytes, expected %zu",
                         m->path, name, t->nbytes, (size_t)n * sizeof(float));
    memcpy(dst, t->data, t->nbytes);
    m->weight_bytes += t->nbytes;
    return SD_OK;
}

static int load_tensors(sd_model *m, sd_error *err) {
    const sd_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    int rc;

    if ((rc = get_matrix(m, "token_embd.weight", -1, n_embd, &m->tok_embd, err))) return rc;
    if (m->tok_embd.rows > SD_MAX_VOCAB)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: tensor 'token_embd.weight': %lld rows (vocabulary) > %d", m->path,
                         (long long)m->tok_embd.rows, SD_MAX_VOCAB);
    m->hp.n_vocab = (int32_t)m->tok_embd.rows;

    size_t n_norm_rows = (size_t)hp->n_layer * 2 + 1;
    m->norms = malloc(n_norm_rows * (size_t)n_embd * sizeof(float));
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->norms || !m->layers) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", m->path);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        sd_layer *L = &m->layers[l];
        float *an = m->norms + (size_t)(2 * l) * (size_t)n_embd;
        float *fn = an + n_embd;
        struct {
            const char *suffix;
            int64_t rows, cols;
            sd_weight *w;
        } mats[] = {
            {"attn_q", n_embd, n_embd, &L->wq},         {"attn_k", kv_dim, n_embd, &L->wk},
            {"attn_v", kv_dim, n_embd, &L->wv},         {"attn_output", n_embd, n_embd, &L->wo},
            {"ffn_gate", hp->n_ff, n_embd, &L->w_gate}, {"ffn_down", n_embd, hp->n_ff, &L->w_down},
            {"ffn_up", hp->n_ff, n_embd, &L->w_up},
        };
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if ((rc = get_norm(m, name, n_embd, an, err))) return rc;
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, mats[i].suffix);
            if ((rc = get_matrix(m, name, mats[i].rows, mats[i].cols, mats[i].w, err))) return rc;
        }
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if ((rc = get_norm(m, name, n_embd, fn, err))) return rc;
        L->attn_norm = an;
        L->ffn_norm = fn;
    }
    float *on = m->norms + (size_t)(2 * hp->n_layer) * (size_t)n_embd;
    if ((rc = get_norm(m, "output_norm.weight", n_embd, on, err))) return rc;
    m->output_norm = on;
    if (sd_gguf_find_tensor(m->g, "output.weight")) {
        if ((rc = get_matrix(m, "output.weight", hp->n_vocab, n_embd, &m->output, err))) return rc;
        m->tied = 0;
    } else {
        m->output = m->tok_embd;
        m->tied = 1;
    }
    return SD_OK;
}

int sd_model_load(const char *path, sd_model **out, sd_error *err) {
    *out = NULL;
    if (!path) return sd_errorf(err, SD_ERR_ARG, "model path is NULL");
    sd_model *m = calloc(1, sizeof *m);
    if (!m) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    m->path = strdup(path);
    if (!m->path) {
        free(m);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    }
    int rc = sd_gguf_open(path, &m->g, err);
    if (rc == SD_OK) rc = load_hparams(m->g, m->path, &m->hp, err);
    if (rc == SD_OK) rc = load_tensors(m, err);
    if (rc == SD_OK) rc = sd_vocab_load(m->g, &m->vocab, err);
    if (rc == SD_OK && sd_vocab_n_tokens(m->vocab) != m->hp.n_vocab)
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: tokenizer.ggml.tokens has %d tokens but tensor 'token_embd.weight' has "
                       "%d rows",
                       m->path, sd_vocab_n_tokens(m->vocab), m->hp.n_vocab);
    if (rc != SD_OK) {
        sd_model_free(m);
        return rc;
    }
    *out = m;
    return SD_OK;
}

void sd_model_free(sd_model *m) {
    if (!m) return;
    sd_vocab_free(m->vocab);
    sd_gguf_close(m->g);
    free(m->layers);
    free(m->norms);
    free(m->path);
    free(m);
}

const sd_hparams *sd_model_hparams(const sd_model *m) {
    return &m->hp;
}
const sd_vocab *sd_model_vocab(const sd_model *m) {
    return m->vocab;
}
const char *sd_model_path(const sd_model *m) {
    return m->path;
}
size_t sd_model_weight_bytes(const sd_model *m) {
    return m->weight_bytes;
}
const sd_gguf *sd_model_gguf(const sd_model *m) {
    return m->g;
}

/* ---------------------------------------------------------------- sessions */

sd_session_params sd_session_default_params(void) {
    sd_session_params p;
    p.n_ctx = 0;
    p.n_batch = SD_DEFAULT_N_BATCH;
    p.n_threads = 0;
    p.kv_type = SD_TYPE_F32;
    return p;
}

int sd_session_init(const sd_model *m, const sd_session_params *p, sd_session **out,
                    sd_error *err) {
    *out = NULL;
    if (!m || !p) return sd_errorf(err, SD_ERR_ARG, "session: model or params is NULL");
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
    if (p->kv_type != SD_TYPE_F32 && p->kv_type != SD_TYPE_F16)
        return sd_errorf(err, SD_ERR_ARG, "session: kv_type %s (%d), expected f32 or f16",
                         sd_type_name((uint32_t)p->kv_type), (int)p->kv_type);
    /* A batch never holds more than the context. */
    const int32_t n_batch = p->n_batch < n_ctx ? p->n_batch : n_ctx;
    const size_t n_embd = (size_t)hp->n_embd, n_ff = (size_t)hp->n_ff;
    const size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;

    /* Scratch: 5 arrays of n_embd, 2 of kv_dim, 2 of n_ff per token. */
    size_t per_tok, a, b, c, total, bytes;
    if (sd_mul_size(n_embd, 5, &a) || sd_mul_size(kv_dim, 2, &b) || sd_mul_size(n_ff, 2, &c) ||
        sd_add_size(a, b, &per_tok) || sd_add_size(per_tok, c, &per_tok) ||
        sd_mul_size(per_tok, (size_t)n_batch, &total) || sd_mul_size(total, sizeof(float), &bytes))
        return sd_errorf(err, SD_ERR_OOM, "session: scratch size overflows (n_batch %d)", n_batch);

    sd_session *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "session: out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    sd_kv_params kp = {hp->n_layer, n_ctx, (int32_t)kv_dim, p->kv_type};
    int rc = sd_kv_init(&kp, &s->kv, err);
    if (rc == SD_OK) {
        sd_backend_params bp;
        bp.n_threads = p->n_threads;
        bp.n_batch = n_batch;
        bp.max_cols = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
        bp.n_ctx = n_ctx;
        rc = sd_backend_cpu_init(&bp, &s->be, err);
    }
    if (rc == SD_OK) {
        s->tokens = calloc((size_t)n_ctx, sizeof(int32_t));
        if (!s->tokens) rc = sd_errorf(err, SD_ERR_OOM, "session: out of memory (token mirror)");
    }
    if (rc == SD_OK) {
        void *buf = NULL;
        if (posix_memalign(&buf, 64, bytes) != 0) buf = NULL;
        s->buf = buf;
        if (!s->buf)
            rc = sd_errorf(err, SD_ERR_OOM, "session: out of memory (%zu bytes of scratch)", bytes);
    }
    if (rc != SD_OK) {
        sd_session_free(s);
        return rc;
    }
    memset(s->buf, 0, bytes);
    float *q = s->buf;
    const size_t nb = (size_t)n_batch;
    s->x = q, q += nb * n_embd;
    s->xn = q, q += nb * n_embd;
    s->q = q, q += nb * n_embd;
    s->att = q, q += nb * n_embd;
    s->proj = q, q += nb * n_embd;
    s->k = q, q += nb * kv_dim;
    s->v = q, q += nb * kv_dim;
    s->gate = q, q += nb * n_ff;
    s->up = q, q += nb * n_ff;
    SD_CHECK((size_t)(q - s->buf) == total, "session scratch layout");
    *out = s;
    return SD_OK;
}

void sd_session_free(sd_session *s) {
    if (!s) return;
    sd_backend_free(s->be);
    sd_kv_free(s->kv);
    free(s->tokens);
    free(s->buf);
    free(s);
}

int sd_session_eval(sd_session *s, const int32_t *tokens, int32_t n, float *logits, int32_t n_out,
                    sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "eval: session is NULL");
    if (n < 1 || n > s->n_batch)
        return sd_errorf(err, SD_ERR_ARG, "eval: %d tokens, expected 1..%d (n_batch)", n,
                         s->n_batch);
    if (!tokens) return sd_errorf(err, SD_ERR_ARG, "eval: tokens is NULL");
    if (n_out < 0 || n_out > n)
        return sd_errorf(err, SD_ERR_ARG, "eval: n_out %d, expected 0..%d", n_out, n);
    if (n_out > 0 && !logits) return sd_errorf(err, SD_ERR_ARG, "eval: logits is NULL");
    const sd_model *m = s->m;
    const sd_hparams *hp = &m->hp;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "eval: token %d at index %d is out of range [0, %d)",
                             tokens[i], i, hp->n_vocab);
    int rc = sd_kv_reserve(s->kv, n, err);
    if (rc != SD_OK) return rc;

    /* From here nothing fails: the rows [pos0, pos0 + n) written below are beyond the
     * committed range until sd_kv_commit. */
    sd_backend *be = s->be;
    const sd_backend_ops *op = be->ops;
    const int32_t pos0 = sd_kv_n(s->kv);
    const int32_t n_embd = hp->n_embd, kv_dim = hp->n_head_kv * hp->head_dim;
    const int64_t nx = (int64_t)n * n_embd;

    op->get_rows(be, &m->tok_embd, tokens, n, s->x);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const sd_layer *L = &m->layers[l];
        op->rmsnorm(be, s->x, L->attn_norm, n, n_embd, hp->rms_eps, s->xn);
        op->matmul(be, &L->wq, s->xn, n, s->q);
        op->matmul(be, &L->wk, s->xn, n, s->k);
        op->matmul(be, &L->wv, s->xn, n, s->v);
        op->rope(be, s->q, n, pos0, hp->n_head, hp->head_dim, hp->n_rot, hp->rope_base);
        op->rope(be, s->k, n, pos0, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_base);
        op->kv_store(be, s->kv, l, pos0, n, kv_dim, s->k, s->v);
        op->attention(be, s->q, s->kv, l, pos0, n, hp->n_head, hp->n_head_kv, hp->head_dim, s->att);
        op->matmul(be, &L->wo, s->att, n, s->proj);
        op->add(be, s->x, s->proj, nx);

        op->rmsnorm(be, s->x, L->ffn_norm, n, n_embd, hp->rms_eps, s->xn);
        op->matmul(be, &L->w_gate, s->xn, n, s->gate);
        op->matmul(be, &L->w_up, s->xn, n, s->up);
        op->swiglu(be, s->gate, s->up, (int64_t)n * hp->n_ff, s->gate);
        op->matmul(be, &L->w_down, s->gate, n, s->proj);
        op->add(be, s->x, s->proj, nx);
    }
    if (n_out > 0) {
        /* Only the last n_out rows reach the classifier (each row independently). */
        const float *xl = s->x + (size_t)(n - n_out) * (size_t)n_embd;
        op->rmsnorm(be, xl, m->output_norm, n_out, n_embd, hp->rms_eps, s->xn);
        op->matmul(be, &m->output, s->xn, n_out, logits);
    }
    memcpy(s->tokens + pos0, tokens, (size_t)n * sizeof(int32_t));
    sd_kv_commit(s->kv, n);
    return SD_OK;
}

int32_t sd_session_n_past(const sd_session *s) {
    return sd_kv_n(s->kv);
}
int32_t sd_session_n_ctx(const sd_session *s) {
    return s->n_ctx;
}
int32_t sd_session_n_batch(const sd_session *s) {
    return s->n_batch;
}
const int32_t *sd_session_tokens(const sd_session *s) {
    return s->tokens;
}

int sd_session_truncate(sd_session *s, int32_t n_keep, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "truncate: session is NULL");
    return sd_kv_truncate(s->kv, n_keep, err);
}

const sd_model *sd_session_model(const sd_session *s) {
    return s->m;
}
