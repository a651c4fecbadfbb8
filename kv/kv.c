/* KV cache: contiguous per-layer [n_ctx, kv_dim] rows (F32 or F16) for K and V (see sd_kv.h). */
#include "kv/sd_kv.h"

#include <stdlib.h>
#include <string.h>

/* Upper bounds on the sizes a cache accepts (far above any model we run). */
#define SD_KV_MAX_LAYER 4096
#define SD_KV_MAX_CTX   (1 << 24)
#define SD_KV_MAX_DIM   (1 << 20)

struct sd_kv {
    int32_t n_layer;
    int32_t n_ctx;
    int32_t kv_dim;
    int32_t n;        /* committed positions */
    sd_type type;     /* F32 or F16 */
    size_t row_bytes; /* kv_dim * element size */
    size_t layer_len; /* bytes per layer: n_ctx * row_bytes */
    uint8_t *k;       /* [n_layer, n_ctx, kv_dim] */
    uint8_t *v;       /* [n_layer, n_ctx, kv_dim], right after k */
    void *owned;      /* storage allocated here, or NULL */
};

static void *kv_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

/* Checks p and computes the row and layer sizes and the total storage bytes. */
static int kv_sizes(const sd_kv_params *p, size_t *row_bytes, size_t *layer_len, size_t *total,
                    sd_error *err) {
    if (!p || p->n_layer <= 0 || p->n_ctx <= 0 || p->kv_dim <= 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: sizes must be positive (n_layer %d, n_ctx %d, kv_dim %d)",
                         p ? p->n_layer : 0, p ? p->n_ctx : 0, p ? p->kv_dim : 0);
    if (p->n_layer > SD_KV_MAX_LAYER || p->n_ctx > SD_KV_MAX_CTX || p->kv_dim > SD_KV_MAX_DIM)
        return sd_errorf(
            err, SD_ERR_ARG,
            "kv cache: sizes out of range (n_layer %d <= %d, n_ctx %d <= %d, kv_dim %d <= %d)",
            p->n_layer, SD_KV_MAX_LAYER, p->n_ctx, SD_KV_MAX_CTX, p->kv_dim, SD_KV_MAX_DIM);
    if (p->type != SD_TYPE_F32 && p->type != SD_TYPE_F16)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: element type %s (%d), expected f32 or f16",
                         sd_type_name((uint32_t)p->type), (int)p->type);
    const size_t elem = p->type == SD_TYPE_F16 ? sizeof(uint16_t) : sizeof(float);
    size_t bytes;
    if (sd_mul_size((size_t)p->kv_dim, elem, row_bytes) ||
        sd_mul_size(*row_bytes, (size_t)p->n_ctx, layer_len) ||
        sd_mul_size(*layer_len, (size_t)p->n_layer, &bytes) || sd_mul_size(bytes, 2, total))
        return sd_errorf(err, SD_ERR_OOM,
                         "kv cache: size overflows (n_layer %d, n_ctx %d, kv_dim %d)", p->n_layer,
                         p->n_ctx, p->kv_dim);
    return SD_OK;
}

int sd_kv_storage_bytes(const sd_kv_params *p, size_t *out, sd_error *err) {
    size_t row_bytes, layer_len;
    return kv_sizes(p, &row_bytes, &layer_len, out, err);
}

int sd_kv_init(const sd_kv_params *p, sd_kv **out, sd_error *err) {
    *out = NULL;
    size_t row_bytes, layer_len, total;
    int rc = kv_sizes(p, &row_bytes, &layer_len, &total, err);
    if (rc) return rc;
    sd_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory");
    kv->n_layer = p->n_layer;
    kv->n_ctx = p->n_ctx;
    kv->kv_dim = p->kv_dim;
    kv->n = 0;
    kv->type = p->type;
    kv->row_bytes = row_bytes;
    kv->layer_len = layer_len;
    uint8_t *base = p->storage;
    if (!base) {
        /* Zeroed, so that reads of never-written rows (a bug) are at least deterministic. */
        kv->owned = kv_alloc(total);
        if (!kv->owned) {
            free(kv);
            return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory (%zu bytes)", total);
        }
        memset(kv->owned, 0, total);
        base = kv->owned;
    }
    kv->k = base;
    kv->v = base + total / 2;
    *out = kv;
    return SD_OK;
}

void sd_kv_free(sd_kv *kv) {
    if (!kv) return;
    free(kv->owned);
    free(kv);
}

int32_t sd_kv_n(const sd_kv *kv) {
    return kv->n;
}
int32_t sd_kv_capacity(const sd_kv *kv) {
    return kv->n_ctx;
}
sd_type sd_kv_type(const sd_kv *kv) {
    return kv->type;
}
int32_t sd_kv_dim(const sd_kv *kv) {
    return kv->kv_dim;
}
size_t sd_kv_row_bytes(const sd_kv *kv) {
    return kv->row_bytes;
}

int sd_kv_reserve(const sd_kv *kv, int32_t m, sd_error *err) {
    if (m < 0) return sd_errorf(err, SD_ERR_ARG, "kv cache: cannot reserve %d positions", m);
    if (m > kv->n_ctx - kv->n)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "context full: %d positions in use + %d new > n_ctx %d", kv->n, m,
                         kv->n_ctx);
    return SD_OK;
}

void sd_kv_commit(sd_kv *kv, int32_t m) {
    SD_CHECK(m >= 0 && m <= kv->n_ctx - kv->n, "sd_kv_commit: m was not reserved");
    if (m < 0 || m > kv->n_ctx - kv->n) return; /* our bug; never corrupt n */
    kv->n += m;
}

int sd_kv_truncate(sd_kv *kv, int32_t n_keep, sd_error *err) {
    if (n_keep < 0 || n_keep > kv->n)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: cannot truncate to %d (0..%d committed)",
                         n_keep, kv->n);
    kv->n = n_keep;
    return SD_OK;
}

static size_t kv_off(const sd_kv *kv, int32_t layer, int32_t pos) {
    return (size_t)layer * kv->layer_len + (size_t)pos * kv->row_bytes;
}

void *sd_kv_k(sd_kv *kv, int32_t layer, int32_t pos) {
    SD_CHECK(layer >= 0 && layer < kv->n_layer && pos >= 0 && pos < kv->n_ctx,
             "sd_kv_k: layer or position out of range");
    if (layer < 0 || layer >= kv->n_layer || pos < 0 || pos >= kv->n_ctx) return NULL;
    return kv->k + kv_off(kv, layer, pos);
}

void *sd_kv_v(sd_kv *kv, int32_t layer, int32_t pos) {
    SD_CHECK(layer >= 0 && layer < kv->n_layer && pos >= 0 && pos < kv->n_ctx,
             "sd_kv_v: layer or position out of range");
    if (layer < 0 || layer >= kv->n_layer || pos < 0 || pos >= kv->n_ctx) return NULL;
    return kv->v + kv_off(kv, layer, pos);
}

int32_t sd_kv_span(const sd_kv *kv, int32_t pos) {
    if (pos < 0 || pos >= kv->n_ctx) return 0;
    return kv->n_ctx - pos;
}
