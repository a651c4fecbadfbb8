/*
 * runtime/model/load.c: loading a llama-family model from a distrusted GGUF: the
 * architecture and hyperparameters (keys from the table of runtime/gguf), every
 * tensor's presence, type, shape and size, and the vocabulary. Errors name the file and
 * the key or tensor.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/sd_quant.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/model_impl.h"

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

/* <arch>.rope.scaling.type / .factor: "none" (or absent) and "linear" are supported;
 * Llama 3's frequency factors come as the tensor rope_freqs.weight instead. */
static int load_rope_scaling(const sd_gguf *g, const char *path, const char *arch, sd_hparams *hp,
                             sd_error *err) {
    char k[96];
    const char *type = NULL;
    size_t len = 0;
    hp->rope_freq_scale = 1.0f;
    sd_arch_key_name(SD_KEY_ROPE_SCALING_TYPE, arch, k, sizeof k);
    if (sd_gguf_find_key(g, k) < 0) return SD_OK;
    int rc = sd_gguf_get_str(g, k, &type, &len, err);
    if (rc) return rc;
    if (len == 4 && !memcmp(type, "none", 4)) return SD_OK;
    if (!(len == 6 && !memcmp(type, "linear", 6)))
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: metadata key '%s' is '%.*s', expected 'none' or 'linear' (YaRN and "
                         "other scalings are not supported)",
                         path, k, (int)(len > 32 ? 32 : len), type);
    float factor = 1.0f;
    if ((rc = hp_float(g, path, sd_arch_key_name(SD_KEY_ROPE_SCALING_FACTOR, arch, k, sizeof k),
                       1.0f, 0.0f, 1e6f, &factor, err)))
        return rc;
    hp->rope_freq_scale = 1.0f / factor;
    return SD_OK;
}

static int load_hparams(const sd_gguf *g, const char *path, sd_hparams *hp, sd_error *err) {
    const char *arch = NULL;
    size_t arch_len = 0;
    int rc = sd_gguf_get_str(g, SD_KEY_GENERAL_ARCHITECTURE, &arch, &arch_len, err);
    if (rc != SD_OK) return rc;
    const sd_arch *ar = sd_arch_find(arch, arch_len);
    if (!ar)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: metadata key '" SD_KEY_GENERAL_ARCHITECTURE
                         "' is '%.*s', expected one of: %s",
                         path, (int)(arch_len > 64 ? 64 : arch_len), arch, sd_arch_supported());
    memset(hp, 0, sizeof *hp);
    char k[96];
    const char *a = ar->name;
#define KEY(id) sd_arch_key_name((id), a, k, sizeof k)
    if ((rc = hp_int(g, path, KEY(SD_KEY_CONTEXT_LENGTH), 1, 0, 1, SD_MAX_CTX, &hp->n_ctx_train,
                     err)) ||
        (rc = hp_int(g, path, KEY(SD_KEY_EMBEDDING_LENGTH), 1, 0, 1, SD_MAX_EMBD, &hp->n_embd,
                     err)) ||
        (rc = hp_int(g, path, KEY(SD_KEY_BLOCK_COUNT), 1, 0, 1, SD_MAX_LAYER, &hp->n_layer, err)) ||
        (rc = hp_int(g, path, KEY(SD_KEY_FEED_FORWARD_LENGTH), 1, 0, 1, SD_MAX_FF, &hp->n_ff,
                     err)) ||
        (rc = hp_int(g, path, KEY(SD_KEY_HEAD_COUNT), 1, 0, 1, SD_MAX_HEAD, &hp->n_head, err)))
        return rc;
    if ((rc = hp_int(g, path, KEY(SD_KEY_HEAD_COUNT_KV), 0, hp->n_head, 1, SD_MAX_HEAD,
                     &hp->n_head_kv, err)))
        return rc;
    /* The head size: <arch>.attention.key_length (Qwen3: 128 with n_embd / n_head = 64),
     * else n_embd / n_head; V heads must have the same size. */
    const int has_klen = sd_gguf_find_key(g, KEY(SD_KEY_KEY_LENGTH)) >= 0;
    if (!has_klen && hp->n_embd % hp->n_head != 0) {
        char k2[96];
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %s %d is not a multiple of %s %d", path,
                         KEY(SD_KEY_EMBEDDING_LENGTH), hp->n_embd,
                         sd_arch_key_name(SD_KEY_HEAD_COUNT, a, k2, sizeof k2), hp->n_head);
    }
    if (hp->n_head % hp->n_head_kv != 0) {
        char k2[96];
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %s %d is not a multiple of %s %d", path,
                         KEY(SD_KEY_HEAD_COUNT), hp->n_head,
                         sd_arch_key_name(SD_KEY_HEAD_COUNT_KV, a, k2, sizeof k2), hp->n_head_kv);
    }
    const int32_t def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 1;
    int32_t vlen = 0;
    if ((rc = hp_int(g, path, KEY(SD_KEY_KEY_LENGTH), 0, def_hd, 2, 1 << 16, &hp->head_dim, err)))
        return rc;
    if ((rc = hp_int(g, path, KEY(SD_KEY_VALUE_LENGTH), 0, hp->head_dim, 1, 1 << 16, &vlen, err)))
        return rc;
    if (vlen != hp->head_dim) {
        char k2[96];
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: %s %d differs from %s %d (V heads of another size than K heads are "
                         "not supported)",
                         path, KEY(SD_KEY_VALUE_LENGTH), vlen,
                         sd_arch_key_name(SD_KEY_KEY_LENGTH, a, k2, sizeof k2), hp->head_dim);
    }
    if ((int64_t)hp->n_head * hp->head_dim > SD_MAX_FF)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %d heads of %d: Q row of %lld > %d", path,
                         hp->n_head, hp->head_dim, (long long)hp->n_head * hp->head_dim, SD_MAX_FF);
    if ((rc = hp_int(g, path, KEY(SD_KEY_ROPE_DIMENSION_COUNT), 0, hp->head_dim, 2, hp->head_dim,
                     &hp->n_rot, err)))
        return rc;
    if (hp->n_rot % 2 != 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %s %d is odd", path,
                         KEY(SD_KEY_ROPE_DIMENSION_COUNT), hp->n_rot);
    if ((rc = hp_float(g, path, KEY(SD_KEY_RMS_EPS), SD_DEFAULT_RMS_EPS, 0.0f, 1.0f, &hp->rms_eps,
                       err)) ||
        (rc = hp_float(g, path, KEY(SD_KEY_ROPE_FREQ_BASE), SD_DEFAULT_ROPE_BASE, 0.0f, 1e12f,
                       &hp->rope_base, err)))
        return rc;
    hp->arch = ar->name;
    hp->qkv_bias = ar->qkv_bias;
    hp->rope_neox = ar->rope_neox;
    hp->qk_norm = ar->qk_norm;
    hp->ffn_gelu = ar->ffn_gelu;
    hp->embd_scale = ar->embd_scale;
    hp->post_norms = ar->post_norms;
    if ((rc = hp_int(g, path, KEY(SD_KEY_SLIDING_WINDOW), 0, 0, 0, SD_MAX_CTX, &hp->sliding_window,
                     err)))
        return rc;
    /* the local layers' own RoPE (gemma3): the key, else the architecture's default; 0:
     * they rotate as the global ones (Mistral) */
    hp->rope_base_swa = ar->rope_base_swa;
    if (sd_gguf_find_key(g, KEY(SD_KEY_ROPE_BASE_SWA)) >= 0 &&
        (rc = hp_float(g, path, k, 0.0f, 0.0f, 1e12f, &hp->rope_base_swa, err)))
        return rc;
    /* final_logit_softcapping: absent or 0 = none */
    if (sd_gguf_find_key(g, KEY(SD_KEY_LOGIT_SOFTCAP)) >= 0) {
        float cap = 0.0f;
        if ((rc = sd_gguf_get_f32(g, k, &cap, err))) return rc;
        if (cap != 0.0f && (rc = hp_float(g, path, k, cap, 0.0f, 1e6f, &hp->logit_softcap, err)))
            return rc;
    }
    if ((rc = load_rope_scaling(g, path, a, hp, err))) return rc;
    hp->n_ctx_orig = hp->n_ctx_train;
    hp->rope_attn_factor = 1.0f;
    if ((rc = hp_int(g, path, KEY(SD_KEY_ROPE_SCALING_ORIG_CTX), 0, hp->n_ctx_train, 1, SD_MAX_CTX,
                     &hp->n_ctx_orig, err)) ||
        (rc = hp_float(g, path, KEY(SD_KEY_ROPE_ATTN_FACTOR), 1.0f, 0.0f, 1e3f,
                       &hp->rope_attn_factor, err)))
        return rc;
#undef KEY
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

/* A vector [n] of type F32 (a norm, a bias, rope factors), copied (unaligned-safe) to
 * dst. */
static int get_vec(sd_model *m, const char *name, int64_t n, float *dst, sd_error *err) {
    const sd_gguf_tensor *t;
    int rc = find_tensor(m, name, &t, err);
    if (rc != SD_OK) return rc;
    if (t->n_dims != 1 || t->ne[0] != n)
        return sd_errorf(
            err, SD_ERR_FORMAT,
            "%s: tensor '%s': shape ne {%lld, %lld} (%u dims), expected [%lld] (1 dim)", m->path,
            name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)n);
    if (t->type != SD_TYPE_F32)
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "%s: tensor '%s': type %s, vectors must be f32",
                         m->path, name, sd_type_name(t->type));
    if (t->nbytes != (size_t)n * sizeof(float))
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': %zu data bytes, expected %zu",
                         m->path, name, t->nbytes, (size_t)n * sizeof(float));
    memcpy(dst, t->data, t->nbytes);
    m->weight_bytes += t->nbytes;
    return SD_OK;
}

/* Rows [r0, r0 + n) of the matrix w (tensor `name`): a fused matrix's part (attn_qkv,
 * phi3's ffn_up), a view of the same bytes. */
static int slice_rows(const sd_model *m, const char *name, const sd_weight *w, int64_t r0,
                      int64_t n, sd_weight *out, sd_error *err) {
    *out = *w;
    out->rows = n;
    out->data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    if ((uintptr_t)out->data % sd_type_align(w->type) != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: tensor '%s': rows from %lld are not %zu-byte aligned", m->path, name,
                         (long long)r0, sd_type_align(w->type));
    return SD_OK;
}

/* A layer's Q, K, V (attn_qkv.weight fused, else three tensors) and gate, up (ffn_up of
 * 2 n_ff rows, gate first, when there is no ffn_gate.weight; else two tensors). */
static int get_fused(sd_model *m, int32_t l, sd_layer *L, sd_error *err) {
    const sd_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    char name[96];
    sd_weight w;
    int rc;
    if (sd_gguf_find_tensor(m->g, sd_arch_tensor_name(SD_TENSOR_ATTN_QKV, l, name, sizeof name))) {
        if ((rc = get_matrix(m, name, q_dim + 2 * kv_dim, n_embd, &w, err)) ||
            (rc = slice_rows(m, name, &w, 0, q_dim, &L->wq, err)) ||
            (rc = slice_rows(m, name, &w, q_dim, kv_dim, &L->wk, err)) ||
            (rc = slice_rows(m, name, &w, q_dim + kv_dim, kv_dim, &L->wv, err)))
            return rc;
    } else {
        const struct {
            sd_arch_tensor t;
            int64_t rows;
            sd_weight *w;
        } qkv[] = {{SD_TENSOR_ATTN_Q, q_dim, &L->wq},
                   {SD_TENSOR_ATTN_K, kv_dim, &L->wk},
                   {SD_TENSOR_ATTN_V, kv_dim, &L->wv}};
        for (int i = 0; i < 3; i++)
            if ((rc = get_matrix(m, sd_arch_tensor_name(qkv[i].t, l, name, sizeof name),
                                 qkv[i].rows, n_embd, qkv[i].w, err)))
                return rc;
    }
    const sd_gguf_tensor *up =
        sd_gguf_find_tensor(m->g, sd_arch_tensor_name(SD_TENSOR_FFN_UP, l, name, sizeof name));
    if (!sd_gguf_find_tensor(m->g, sd_arch_tensor_name(SD_TENSOR_FFN_GATE, l, name, sizeof name)) &&
        up && up->n_dims == 2 && up->ne[1] == 2 * (int64_t)hp->n_ff) {
        sd_arch_tensor_name(SD_TENSOR_FFN_UP, l, name, sizeof name);
        if ((rc = get_matrix(m, name, 2 * (int64_t)hp->n_ff, n_embd, &w, err)) ||
            (rc = slice_rows(m, name, &w, 0, hp->n_ff, &L->w_gate, err)) ||
            (rc = slice_rows(m, name, &w, hp->n_ff, hp->n_ff, &L->w_up, err)))
            return rc;
        return SD_OK;
    }
    if ((rc = get_matrix(m, sd_arch_tensor_name(SD_TENSOR_FFN_GATE, l, name, sizeof name), hp->n_ff,
                         n_embd, &L->w_gate, err)) ||
        (rc = get_matrix(m, sd_arch_tensor_name(SD_TENSOR_FFN_UP, l, name, sizeof name), hp->n_ff,
                         n_embd, &L->w_up, err)))
        return rc;
    return SD_OK;
}

/* Which layers use the sliding window: none without <arch>.attention.sliding_window; else
 * <arch>.attention.sliding_window_pattern, one bool per layer or a period n (layer l local
 * when n == 0 or l % n < n - 1, every n-th layer global), default the architecture's. */
static int load_swa_layers(sd_model *m, const sd_arch *ar, sd_error *err) {
    sd_hparams *hp = &m->hp;
    hp->n_swa_layers = 0;
    if (hp->sliding_window <= 0) return SD_OK;
    char k[96];
    sd_arch_key_name(SD_KEY_SWA_PATTERN, hp->arch, k, sizeof k);
    const int64_t ki = sd_gguf_find_key(m->g, k);
    int64_t period = ar->swa_pattern;
    const uint8_t *flags = NULL;
    if (ki >= 0 && sd_gguf_kv_type(m->g, ki) == SD_GGUF_ARRAY) {
        sd_gguf_vtype et;
        uint64_t n = 0;
        const void *data = NULL;
        int rc = sd_gguf_get_arr(m->g, k, &et, &n, &data, err);
        if (rc) return rc;
        if ((et != SD_GGUF_BOOL && et != SD_GGUF_U8 && et != SD_GGUF_I8) ||
            n != (uint64_t)hp->n_layer)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: metadata key '%s': an array of %llu elements of type %d, "
                             "expected %d bools (one per layer) or an integer",
                             m->path, k, (unsigned long long)n, (int)et, hp->n_layer);
        flags = data;
    } else if (ki >= 0) {
        int rc = sd_gguf_get_i64(m->g, k, &period, err);
        if (rc) return rc;
        if (period < 0 || period > SD_MAX_LAYER)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: metadata key '%s' = %lld is out of range [0, %d]", m->path, k,
                             (long long)period, SD_MAX_LAYER);
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const int swa = flags ? flags[l] != 0 : period == 0 || l % period < period - 1;
        m->layers[l].swa = swa;
        hp->n_swa_layers += swa;
    }
    return SD_OK;
}

static int load_tensors(sd_model *m, sd_error *err) {
    const sd_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    char name[96];
    int rc;

    if ((rc = get_matrix(m, sd_arch_tensor_name(SD_TENSOR_TOKEN_EMBD, 0, name, sizeof name), -1,
                         n_embd, &m->tok_embd, err)))
        return rc;
    if (m->tok_embd.rows > SD_MAX_VOCAB)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': %lld rows (vocabulary) > %d",
                         m->path, name, (long long)m->tok_embd.rows, SD_MAX_VOCAB);
    m->hp.n_vocab = (int32_t)m->tok_embd.rows;

    /* Every 1-D vector in one owned block: per layer attn_norm, ffn_norm [n_embd], the
     * Q/K/V biases [q_dim + 2 kv_dim] (qwen2), the Q/K head norms [2 head_dim] (qwen3) and
     * the post norms [2 n_embd] (gemma3), then output_norm, then the rope factors. */
    const size_t per_layer =
        2 * (size_t)n_embd + (hp->qkv_bias ? (size_t)(q_dim + 2 * kv_dim) : 0) +
        (hp->qk_norm ? 2 * (size_t)hp->head_dim : 0) + (hp->post_norms ? 2 * (size_t)n_embd : 0);
    const size_t n_rope = (size_t)hp->n_rot / 2;
    m->norms_bytes =
        ((size_t)hp->n_layer * per_layer + (size_t)n_embd + 3 * n_rope) * sizeof(float);
    m->norms = malloc(m->norms_bytes);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->norms || !m->layers) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", m->path);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        sd_layer *L = &m->layers[l];
        float *an = m->norms + (size_t)l * per_layer;
        float *fn = an + n_embd;
        const struct {
            sd_arch_tensor t;
            int64_t rows, cols;
            sd_weight *w;
        } mats[] = {
            {SD_TENSOR_ATTN_OUT, n_embd, q_dim, &L->wo},
            {SD_TENSOR_FFN_DOWN, n_embd, hp->n_ff, &L->w_down},
        };
        if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_NORM, l, name, sizeof name), n_embd,
                          an, err)) ||
            (rc = get_fused(m, l, L, err)))
            return rc;
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            sd_arch_tensor_name(mats[i].t, l, name, sizeof name);
            if ((rc = get_matrix(m, name, mats[i].rows, mats[i].cols, mats[i].w, err))) return rc;
        }
        if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_FFN_NORM, l, name, sizeof name), n_embd,
                          fn, err)))
            return rc;
        L->attn_norm = an;
        L->ffn_norm = fn;
        float *rest = fn + n_embd;
        if (hp->qkv_bias) {
            float *bq = rest, *bk = bq + q_dim, *bv = bk + kv_dim;
            rest = bv + kv_dim;
            if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_Q_BIAS, l, name, sizeof name),
                              q_dim, bq, err)) ||
                (rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_K_BIAS, l, name, sizeof name),
                              kv_dim, bk, err)) ||
                (rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_V_BIAS, l, name, sizeof name),
                              kv_dim, bv, err)))
                return rc;
            L->bq = bq;
            L->bk = bk;
            L->bv = bv;
        }
        if (hp->qk_norm) {
            float *qn = rest, *kn = qn + hp->head_dim;
            if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_Q_NORM, l, name, sizeof name),
                              hp->head_dim, qn, err)) ||
                (rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_K_NORM, l, name, sizeof name),
                              hp->head_dim, kn, err)))
                return rc;
            L->q_norm = qn;
            L->k_norm = kn;
            rest = kn + hp->head_dim;
        }
        if (hp->post_norms) {
            float *pa = rest, *pf = pa + n_embd;
            if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_ATTN_POST, l, name, sizeof name),
                              n_embd, pa, err)) ||
                (rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_FFN_POST, l, name, sizeof name),
                              n_embd, pf, err)))
                return rc;
            L->attn_post_norm = pa;
            L->ffn_post_norm = pf;
        }
    }
    float *on = m->norms + (size_t)hp->n_layer * per_layer;
    /* RoPE frequency factors: rope_freqs (Llama 3), rope_factors_long / _short (phi3) */
    const struct {
        sd_arch_tensor t;
        const float **dst;
    } rfs[] = {{SD_TENSOR_ROPE_FREQS, &m->rope_factors},
               {SD_TENSOR_ROPE_LONG, &m->rope_long},
               {SD_TENSOR_ROPE_SHORT, &m->rope_short}};
    for (size_t j = 0; j < 3; j++) {
        if (!sd_gguf_find_tensor(m->g, sd_arch_tensor_name(rfs[j].t, 0, name, sizeof name)))
            continue;
        float *rf = on + n_embd + j * n_rope;
        if ((rc = get_vec(m, name, (int64_t)n_rope, rf, err))) return rc;
        for (size_t i = 0; i < n_rope; i++)
            if (!(rf[i] > 0.0f) || !isfinite(rf[i]))
                return sd_errorf(err, SD_ERR_FORMAT,
                                 "%s: tensor '%s': factor %zu is %g, expected a finite value > 0",
                                 m->path, name, i, (double)rf[i]);
        *rfs[j].dst = rf;
    }
    m->hp.has_rope_factors = m->rope_factors != NULL;
    if (!m->rope_long != !m->rope_short)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s' without '%s'", m->path,
                         m->rope_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                         m->rope_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
    m->hp.has_rope_long_short = m->rope_long != NULL;
    if ((rc = get_vec(m, sd_arch_tensor_name(SD_TENSOR_OUTPUT_NORM, 0, name, sizeof name), n_embd,
                      on, err)))
        return rc;
    m->output_norm = on;
    if (sd_gguf_find_tensor(m->g, sd_arch_tensor_name(SD_TENSOR_OUTPUT, 0, name, sizeof name))) {
        if ((rc = get_matrix(m, name, hp->n_vocab, n_embd, &m->output, err))) return rc;
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
    if (rc == SD_OK) rc = load_swa_layers(m, sd_arch_find(m->hp.arch, strlen(m->hp.arch)), err);
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
