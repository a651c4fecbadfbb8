/* runtime/gguf/gguf_get.c: the typed metadata getters of an open GGUF (sd_gguf.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/gguf/gguf_impl.h"

/* ---- typed getters */

static int missing(const sd_gguf *g, const char *key, sd_error *err) {
    return sd_errorf(err, SD_ERR_FORMAT, "%s: missing metadata key '%s'", g->path, key);
}

static int wrong_type(const sd_gguf *g, const char *key, const char *expected, uint32_t found,
                      sd_error *err) {
    return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected %s, found %s", g->path, key, expected,
                     sd_gguf_vtype_name(found));
}

/* Integer value of kv as int64 (u64 above INT64_MAX flagged via *big). -1 if not an
 * integer type. */
static int kv_int(const sd_gguf *g, const gkv *kv, int64_t *v, uint64_t *big) {
    const uint8_t *p = g->map + kv->data_off;
    *big = 0;
    switch (kv->type) {
    case SD_GGUF_U8: {
        uint8_t x;
        memcpy(&x, p, 1);
        *v = x;
        return 0;
    }
    case SD_GGUF_I8: {
        int8_t x;
        memcpy(&x, p, 1);
        *v = x;
        return 0;
    }
    case SD_GGUF_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return 0;
    }
    case SD_GGUF_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return 0;
    }
    case SD_GGUF_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return 0;
    }
    case SD_GGUF_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return 0;
    }
    case SD_GGUF_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        *v = x;
        return 0;
    }
    case SD_GGUF_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > (uint64_t)INT64_MAX) {
            *big = x;
            *v = INT64_MAX;
        } else {
            *v = (int64_t)x;
        }
        return 0;
    }
    default:
        return -1;
    }
}

static int get_i64(const sd_gguf *g, const char *key, int64_t *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    int64_t v;
    uint64_t big;
    if (kv_int(g, &g->kv[i], &v, &big) != 0)
        return wrong_type(g, key, "an integer", g->kv[i].type, err);
    if (big)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: %s: expected a value <= %" PRId64 ", found %" PRIu64, g->path, key,
                         INT64_MAX, big);
    *out = v;
    return SD_OK;
}

static int get_u32(const sd_gguf *g, const char *key, uint32_t *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    int64_t v;
    uint64_t big;
    if (kv_int(g, &g->kv[i], &v, &big) != 0)
        return wrong_type(g, key, "an integer", g->kv[i].type, err);
    if (big || v < 0 || v > (int64_t)UINT32_MAX) {
        if (big)
            return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRIu32 ", found %" PRIu64,
                             g->path, key, UINT32_MAX, big);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRIu32 ", found %" PRId64,
                         g->path, key, UINT32_MAX, v);
    }
    *out = (uint32_t)v;
    return SD_OK;
}

static int get_f32(const sd_gguf *g, const char *key, float *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type == SD_GGUF_F32) {
        memcpy(out, g->map + kv->data_off, 4);
    } else if (kv->type == SD_GGUF_F64) {
        double d;
        memcpy(&d, g->map + kv->data_off, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, key, "f32 or f64", kv->type, err);
    }
    return SD_OK;
}

static int get_bool(const sd_gguf *g, const char *key, int *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_BOOL) return wrong_type(g, key, "bool", kv->type, err);
    *out = g->map[kv->data_off] != 0;
    return SD_OK;
}

int sd_gguf_get_i64(const sd_gguf *g, const char *key, int64_t *out, sd_error *err) {
    return get_i64(g, key, out, 0, err);
}
int sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err) {
    return get_u32(g, key, out, 0, err);
}
int sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out, sd_error *err) {
    return get_f32(g, key, out, 0, err);
}
int sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out, sd_error *err) {
    return get_bool(g, key, out, 0, err);
}
int sd_gguf_get_i64_opt(const sd_gguf *g, const char *key, int64_t *out, sd_error *err) {
    return get_i64(g, key, out, 1, err);
}
int sd_gguf_get_u32_opt(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err) {
    return get_u32(g, key, out, 1, err);
}
int sd_gguf_get_f32_opt(const sd_gguf *g, const char *key, float *out, sd_error *err) {
    return get_f32(g, key, out, 1, err);
}
int sd_gguf_get_bool_opt(const sd_gguf *g, const char *key, int *out, sd_error *err) {
    return get_bool(g, key, out, 1, err);
}

int sd_gguf_get_str(const sd_gguf *g, const char *key, const char **s, size_t *len, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_STRING) return wrong_type(g, key, "string", kv->type, err);
    *s = (const char *)g->map + kv->data_off;
    *len = (size_t)kv->n;
    return SD_OK;
}

int sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype *elem_type, uint64_t *n,
                    const void **data, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_ARRAY) return wrong_type(g, key, "array", kv->type, err);
    *elem_type = kv->elem;
    *n = kv->n;
    *data = kv->elem == SD_GGUF_STRING ? NULL : (const void *)(g->map + kv->data_off);
    return SD_OK;
}

int sd_gguf_arr_str(const sd_gguf *g, int64_t kv_i, uint64_t i, const char **s, size_t *len) {
    if (kv_i < 0 || kv_i >= g->n_kv) return SD_ERR_ARG;
    const gkv *kv = &g->kv[kv_i];
    if (kv->type != SD_GGUF_ARRAY || kv->elem != SD_GGUF_STRING || i >= kv->n) return SD_ERR_ARG;
    uint64_t l;
    memcpy(&l, g->map + kv->str_off[i], 8);
    *s = (const char *)g->map + kv->str_off[i] + 8;
    *len = (size_t)l;
    return SD_OK;
}

int64_t sd_gguf_n_tensors(const sd_gguf *g) {
    return g->n_tensors;
}

const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name) {
    if (!g->t_sorted) return NULL;
    int64_t i = sd_gguf_name_idx_find(g->t_sorted, g->n_tensors, name);
    return i >= 0 ? &g->t[i] : NULL;
}
